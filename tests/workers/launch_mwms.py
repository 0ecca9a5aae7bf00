"""Launch test worker: one all-reduce of the replica ids under MultiWorkerMirroredStrategy."""

import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()


@tf.function
def step():
    def replica_id():
        ctx = tf.distribute.get_replica_context()
        return tf.cast(ctx.replica_id_in_sync_group, tf.int32)

    per_replica = strategy.run(replica_id)
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)


total = int(step())
print(
    f"task {strategy.cluster_resolver.task_id} of {strategy.num_replicas_in_sync} replicas:"
    f" sum {total}",
    flush=True,
)
