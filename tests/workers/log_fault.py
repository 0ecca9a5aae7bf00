"""Train with checkpoints and metrics.jsonl, SIGKILLed at an epoch's end (test helper).

Usage: log_fault.py RUN_DIR FAULT. FAULT is "none", "after_save" (right after the end of
epoch 1 is saved) or "after_log" (right after epoch 1's line is written, before its save);
the fault is announced on stdout first. Prints ``RESULT {json}`` when training completes.
"""

import hashlib
import json
import os
import signal
import sys

import tensorflow as tf

cpus = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2)
tf.config.experimental.enable_op_determinism()

import keras  # noqa: E402
import numpy as np  # noqa: E402

from tfdp.input import DistributedInput  # noqa: E402
from tfdp.sources import ArraySource  # noqa: E402
from tfdp.train import Trainer  # noqa: E402

RUN_DIR, FAULT = sys.argv[1], sys.argv[2]


def kill(where: str) -> None:
    print(f"FAULT SIGKILL {where}", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


class FaultyTrainer(Trainer):
    """The Trainer, killed right after one of its epoch-end writes (fault injection)."""

    def _save(self, train_input):
        super()._save(train_input)
        if FAULT == "after_save" and self.state.step == 0 and self.state.epoch == 1:
            kill("after the checkpoint of the end of epoch 1")

    def _log_epoch(self, record):
        super()._log_epoch(record)
        if FAULT == "after_log" and record["epoch"] == 0:
            kill("after the line of epoch 1, before its checkpoint")


def main() -> None:
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    rng = np.random.default_rng(0)
    x = rng.normal(size=(80, 4)).astype("float32")
    y = (x[:, 0] + x[:, 1] > 0).astype("int64")
    inp = DistributedInput(strategy, ArraySource((x, y)), batch_size=4, seed=2)

    def model():
        keras.utils.set_random_seed(1)
        return keras.Sequential(
            [keras.Input((4,)), keras.layers.Dense(3, "tanh"), keras.layers.Dense(2)]
        )

    trainer = FaultyTrainer(
        strategy,
        model,
        lambda: keras.optimizers.Adam(0.05),
        "sparse_categorical_crossentropy_from_logits",
        metrics=["sparse_categorical_accuracy"],
        run_dir=RUN_DIR,
        checkpoint_every=3,
        steps_per_call=2,
        progress=False,
        verbose=0,
    )
    trainer.fit(inp, 3)
    digest = hashlib.sha256(b"".join(w.numpy().tobytes() for w in trainer.model.weights))
    print("RESULT " + json.dumps({"weights": digest.hexdigest()}), flush=True)


if __name__ == "__main__":
    main()
