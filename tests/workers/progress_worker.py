"""A MultiWorkerMirroredStrategy worker training with the Trainer's default settings (test helper).

Default settings: progress bar and epoch lines on (the bar shows on the chief only, and only
on a terminal), plus step lines every 4 steps (``log_every``; the chief only), metrics read at
every epoch end. Prints ``RESULT {json}``: the epoch records and a weights checksum.
"""

import hashlib
import json

import keras
import numpy as np
import tensorflow as tf

from tfdp.input import DistributedInput
from tfdp.sources import ArraySource
from tfdp.train import Trainer


def main(strategy: tf.distribute.Strategy | None = None) -> None:
    strategy = strategy or tf.distribute.MultiWorkerMirroredStrategy()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(96, 4)).astype("float32")
    y = (x[:, 0] > 0).astype("int64")
    inp = DistributedInput(strategy, ArraySource((x, y)), batch_size=4)

    def model():
        keras.utils.set_random_seed(1)
        return keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])

    trainer = Trainer(
        strategy,
        model,
        lambda: keras.optimizers.SGD(0.1),
        "sparse_categorical_crossentropy_from_logits",
        metrics=["sparse_categorical_accuracy"],
        steps_per_call=3,
        log_every=4,
    )
    losses: list[float] = []
    replica_losses: list[list[float]] = []

    def on_step(state) -> None:
        losses.extend(state.step_losses)
        replica_losses.extend(state.replica_losses)

    trainer.fit(inp, 2, on_step=on_step)
    records = trainer.state.history
    digest = hashlib.sha256(b"".join(w.numpy().tobytes() for w in trainer.model.weights))
    result = {
        "records": records,
        "weights": digest.hexdigest(),
        "losses": losses,
        "replica_losses": replica_losses,
    }
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
