"""Worker script of bench_multiworker.py: build MultiWorkerMirroredStrategy, one all-reduce, exit.

Needs TF_CONFIG (set by ``tfdp launch`` or by the benchmark itself). Prints
``MW_ALLREDUCE task <i> sum <s>``, where ``s`` is the all-reduced sum of the
replica ids (1 for two workers), then exits normally (TensorFlow's teardown
included, as a user's script would).
"""

import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()


@tf.function
def step() -> tf.Tensor:
    def replica_id() -> tf.Tensor:
        ctx = tf.distribute.get_replica_context()
        return tf.cast(ctx.replica_id_in_sync_group, tf.int32)

    return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(replica_id), axis=None)


print(f"MW_ALLREDUCE task {strategy.cluster_resolver.task_id} sum {int(step())}", flush=True)
