"""A MultiWorkerMirroredStrategy worker that trains, checkpoints, or restores (test helper).

``save`` mode: train 3 synchronous steps (gradients all-reduced across the
workers), saving after every step with max_to_keep=2, and record the weights.
``restore`` mode (fresh processes): build the same model and restore.
"""

import json
import os
import sys

import keras
import numpy as np
import tensorflow as tf

from tfdp.checkpoint import CheckpointManager, DataPosition, input_config
from tfdp.input import DistributedInput
from tfdp.sources import ArraySource


def main(
    mode: str, directory: str, out_path: str, strategy: tf.distribute.Strategy | None = None
) -> None:
    strategy = strategy or tf.distribute.MultiWorkerMirroredStrategy()
    task = strategy.cluster_resolver.task_id
    rng = np.random.default_rng(0)
    n = 64
    src = ArraySource((rng.normal(size=(n, 3)).astype("float32"), np.arange(n) % 2))
    inp = DistributedInput(strategy, src, batch_size=4)
    with strategy.scope():
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
        model.set_weights([np.full((3, 2), 0.1, "float32"), np.zeros(2, "float32")])
        opt = keras.optimizers.Adam(0.01)
        opt.build(model.trainable_variables)
    # Inside the scope: a tf.string variable created there would fail (MWMS broadcasts
    # initial values with collectives, which take no strings); the manager avoids that.
    with strategy.scope():
        manager = CheckpointManager(
            directory, strategy=strategy, max_to_keep=2, model=model, optimizer=opt
        )
    manager.check_writable()
    record = {
        "task": task,
        "is_chief": manager.is_chief,
        "write_directory": manager.write_directory,
    }
    if mode == "save":
        loss_fn = keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction="sum_over_batch_size"
        )

        @tf.function
        def train_step(batch):
            x, y = batch
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True)) / strategy.num_replicas_in_sync
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        saved = []
        for step, batch in enumerate(inp.epoch(0), start=1):
            strategy.run(train_step, args=(batch,))
            saved.append(manager.save(DataPosition.from_input(inp, 0, step), global_step=step))
            if step == 3:
                break
        record["saved"] = saved
        record["tmp_exists_after"] = os.path.exists(manager.write_directory)
        record["position"] = DataPosition.from_input(inp, 0, 3).to_json()
    else:
        restored = manager.restore(expected_config=input_config(inp))
        assert restored is not None
        record["position"] = restored[0].to_json()
        record["global_step"] = restored[1]
        record["iterations"] = int(opt.iterations.numpy())
    record["weights"] = [w.tolist() for w in model.get_weights()]
    with open(out_path.format(task=task), "w") as f:
        json.dump(record, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
