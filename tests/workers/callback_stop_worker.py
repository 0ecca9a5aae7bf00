"""A MultiWorkerMirroredStrategy worker whose callback may ask to stop (test helper).

Worker ``stopper`` (``argv[1]``) sets ``model.stop_training`` in
``on_train_batch_end`` once its epoch step reaches ``at`` (``argv[2]``); every worker
prints ``RESULT {json}``: where it stopped, why, whether its own callback
asked, the batches its callback saw, and a weights checksum.
"""

import hashlib
import json
import os
import sys

import keras
import numpy as np
import tensorflow as tf

from tfdp.distribute import worker_info
from tfdp.input import DistributedInput
from tfdp.sources import ArraySource
from tfdp.train import Trainer


class StopAt(keras.callbacks.Callback):
    """Sets ``model.stop_training`` at step ``at`` of the first epoch, on one worker only."""

    def __init__(self, active: bool, at: int) -> None:
        super().__init__()
        self.active, self.at = active, at
        self.asked = False
        self.batches: list[int] = []

    def on_train_batch_end(self, batch, logs=None):
        self.batches.append(batch)
        if self.active and batch + 1 >= self.at:
            self.asked = True
            self.model.stop_training = True


def main(strategy: tf.distribute.Strategy | None = None, stopper: int = 1, at: int = 5) -> None:
    strategy = strategy or tf.distribute.MultiWorkerMirroredStrategy()
    info = worker_info(strategy)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(96, 4)).astype("float32")
    y = (x[:, 0] > 0).astype("int64")
    inp = DistributedInput(strategy, ArraySource((x, y)), batch_size=4)  # 12 steps per epoch

    def model():
        keras.utils.set_random_seed(1)
        return keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])

    trainer = Trainer(
        strategy,
        model,
        lambda: keras.optimizers.SGD(0.1),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        steps_per_call=2,
        progress=False,
        verbose=0,
    )
    callback = StopAt(info.worker_index == stopper, at)
    history = trainer.fit(inp, 3, callbacks=[callback])
    digest = hashlib.sha256(b"".join(w.numpy().tobytes() for w in trainer.model.weights))
    result = {
        "task": info.worker_index,
        "global_step": trainer.state.global_step,
        "epoch": trainer.state.epoch,
        "stop_reason": trainer.state.stop_reason,
        "stopped_early": trainer.state.stopped_early,
        "stop_training": bool(trainer.model.stop_training),
        "asked": callback.asked,
        "batches": callback.batches,
        "epochs_done": history.epoch,
        "weights": digest.hexdigest(),
        "pid": os.getpid(),
    }
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main(None, int(sys.argv[1]), int(sys.argv[2]))
