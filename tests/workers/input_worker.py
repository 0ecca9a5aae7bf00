"""A MultiWorkerMirroredStrategy worker recording the ids its replica receives (test helper)."""

import json
import sys

import numpy as np
import tensorflow as tf

from tfdp.input import DistributedInput
from tfdp.sources import ArraySource


def main(out_path: str, sampler: str, epochs: int) -> None:
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    task = strategy.cluster_resolver.task_id
    n = 203
    src = ArraySource((np.arange(n, dtype=np.float32)[:, None], np.arange(n)))
    options = {"selected_round": 0} if sampler == "repeat_aug" else {}
    inp = DistributedInput(
        strategy, src, sampler=sampler, sampler_options=options, batch_size=4, return_ids=True
    )

    @tf.function
    def step(batch):
        (_, y), ids = batch
        ctx = tf.distribute.get_replica_context()
        total = ctx.all_reduce("sum", tf.cast(tf.size(y), tf.int64))  # a real collective
        return y, ids["position"], total

    record = {}
    for e in range(epochs):
        ys, ps = [], []
        for batch in inp.epoch(e):
            y, pos, total = strategy.run(step, args=(batch,))
            assert (
                int(strategy.experimental_local_results(total)[0])
                == 4 * strategy.num_replicas_in_sync
            )
            for v in strategy.experimental_local_results(y):
                ys.extend(v.numpy().tolist())
            for v in strategy.experimental_local_results(pos):
                ps.extend(v.numpy().tolist())
        record[e] = {"ids": ys, "positions": ps}
    with open(out_path.format(task=task), "w") as f:
        json.dump(
            {
                "task": task,
                "replicas": strategy.num_replicas_in_sync,
                "steps": inp.steps_per_epoch,
                "record": record,
            },
            f,
        )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
