"""Train with checkpoints and metrics.jsonl, SIGKILLed at an epoch's end (test helper).

Usage: log_fault.py RUN_DIR FAULT [REFERENCE_DIR]. FAULT is "none", "after_log" (right after
epoch 1's line is written, before its save) or "after_save" (right after the end of epoch 2
is saved: a run resumed from an "after_log" kill gets that far); the fault is announced on
stdout first. Prints ``RESULT {json}`` when training completes: the weights' digest, and with
REFERENCE_DIR that of an uninterrupted run trained there afterwards, by fresh objects in this
process (a process fewer than a run of its own).
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

from tfdp._compat.fast.process import end_process  # noqa: E402
from tfdp.input import DistributedInput  # noqa: E402
from tfdp.sources import ArraySource  # noqa: E402
from tfdp.train import Trainer  # noqa: E402
from tfdp.train.assemble import default_parts  # noqa: E402
from tfdp.train.logs import TrainLogs  # noqa: E402

RUN_DIR, FAULT = sys.argv[1], sys.argv[2]
REFERENCE_DIR = sys.argv[3] if len(sys.argv) > 3 else None


def kill(where: str) -> None:
    print(f"FAULT SIGKILL {where}", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


class FaultyCheckpoints:
    """The Trainer's checkpoints, killed right after the save of the end of epoch 2."""

    def __init__(self, inner):
        self.inner = inner

    @property
    def latest(self):
        return self.inner.latest

    @property
    def restored(self):
        return self.inner.restored

    def check_writable(self):
        self.inner.check_writable()

    def restore(self, *args, **kwargs):
        return self.inner.restore(*args, **kwargs)

    def save(self, position, global_step):
        path = self.inner.save(position, global_step)
        if FAULT == "after_save" and (position.epoch, position.step) == (2, 0):
            kill("after the checkpoint of the end of epoch 2")
        return path


class FaultyLogs(TrainLogs):
    """The Trainer's logs, killed right after the line of epoch 1 (before its checkpoint)."""

    def epoch_end(self, record):
        super().epoch_end(record)
        if FAULT == "after_log" and record["epoch"] == 0:
            kill("after the line of epoch 1, before its checkpoint")


def train(strategy, run_dir: str) -> str:
    """Train 3 epochs into ``run_dir`` (resuming what is there); the final weights' digest."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(80, 4)).astype("float32")
    y = (x[:, 0] + x[:, 1] > 0).astype("int64")
    inp = DistributedInput(strategy, ArraySource((x, y)), batch_size=4, seed=2)

    def model():
        keras.utils.set_random_seed(1)
        return keras.Sequential(
            [keras.Input((4,)), keras.layers.Dense(3, "tanh"), keras.layers.Dense(2)]
        )

    # The Trainer composed of its default parts, two of them faulty (fault injection).
    parts = default_parts(
        strategy,
        model,
        lambda: keras.optimizers.Adam(0.05),
        "sparse_categorical_crossentropy_from_logits",
        metrics=["sparse_categorical_accuracy"],
        run_dir=run_dir,
        progress=False,
        verbose=0,
    )
    parts.checkpoints = FaultyCheckpoints(parts.checkpoints)
    parts.logs = FaultyLogs(run_dir, progress=False, verbose=0)
    trainer = Trainer.from_parts(parts, checkpoint_every=3, steps_per_call=2)
    trainer.fit(inp, 3)
    digest = hashlib.sha256(b"".join(w.numpy().tobytes() for w in trainer.model.weights))
    return digest.hexdigest()


def main() -> None:
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    result = {"weights": train(strategy, RUN_DIR)}
    if REFERENCE_DIR is not None:
        assert FAULT == "none", "the reference run is uninterrupted"
        result["reference"] = train(strategy, REFERENCE_DIR)
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
    end_process(0)  # as the tfdp process ends (tfdp.cli.app.run)
