"""Benchmark what a checkpoint costs a training step: tfdp's synchronous save against TF's async.

One process, ``OneDeviceStrategy``, an MLP of ``MB`` megabytes of float32 weights with its
Adam optimizer built (two slots per weight: three times ``MB`` saved), saved to a fresh
directory under ``--dir`` (default: the system's temporary directory):

- ``tfdp sync``: ``tfdp.checkpoint.CheckpointManager.save`` (what ``Trainer(checkpoint_every=K)``
  does: the non-finite check, the write, the state file, the sweep of old checkpoints);
- ``tf sync``: ``tf.train.Checkpoint.write`` of the same objects (the write alone);
- ``tf async``: the same with ``tf.train.CheckpointOptions(experimental_enable_async_checkpoint
  =True)``: the time the call blocks the loop (it copies the variables, then writes in a
  thread), and the time until ``sync()`` says the write is done. With Keras 3.15 objects the
  second async write of one ``tf.train.Checkpoint`` fails in TF 2.21 (Keras's
  ``_copy_trackable_to_cpu`` creates a ``tf.Variable`` inside TF's traced copy function:
  "tf.function only supports singleton tf.Variables created on the first call"), so every
  async save here uses a fresh ``tf.train.Checkpoint`` of the same objects (its copy
  function traced again each time, which the blocking time includes).

Then one training step's time of the same model (32 examples, ``tfdp.train.Trainer``), so that
a save's cost per step at ``checkpoint_every=K`` is ``save / K`` against ``step``. Best and
median of ``--repeats`` saves each; the load average is printed.

Usage::

    .venv/bin/python benchmarks/bench_checkpoint.py           # 4, 64, 256 MB
    .venv/bin/python benchmarks/bench_checkpoint.py --quick   # 4, 32 MB: about 1 min

Headline figures last, one ``name: value`` per line.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import tempfile
import time


def _hidden(mb: float) -> int:
    """H such that 512*H + H*H + 10*H float32 weights come closest to ``mb`` megabytes."""
    n = mb * 2**20 / 4
    return int((-522 + (522**2 + 4 * n) ** 0.5) / 2)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--dir", default=None, help="where the checkpoints go (a fresh subdirectory)")
    args = ap.parse_args()
    sizes = [4, 32] if args.quick else [4, 64, 256]
    repeats = 3 if args.quick else 7
    load = os.getloadavg()[0]
    print(f"bench_checkpoint: {'quick' if args.quick else 'full'}; load average {load:.2f}",
          flush=True)  # fmt: skip

    import keras
    import numpy as np
    import tensorflow as tf

    from tfdp import ArraySource, DistributedInput
    from tfdp.checkpoint import CheckpointManager, DataPosition, keras_trackables
    from tfdp.train import Trainer

    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    rows = []
    base = tempfile.mkdtemp(prefix="tfdp-bench-ckpt-", dir=args.dir)
    for mb in sizes:
        hidden = _hidden(mb)
        trainer = Trainer(
            strategy,
            lambda hidden=hidden: keras.Sequential([
                keras.Input((512,)), keras.layers.Dense(hidden, activation="relu"),
                keras.layers.Dense(hidden, activation="relu"), keras.layers.Dense(10)]),
            lambda: keras.optimizers.Adam(1e-3),
            "sparse_categorical_crossentropy_from_logits", progress=False, verbose=0,
        )  # fmt: skip
        rng = np.random.default_rng(0)
        x = rng.standard_normal((1024, 512), dtype=np.float32)
        inp = DistributedInput(strategy, ArraySource((x, np.arange(1024) % 10)), batch_size=32)
        marks: list[float] = []
        trainer.fit(inp, epochs=1, max_steps=12,
                    on_step=lambda _s, marks=marks: marks.append(time.perf_counter()))  # fmt: skip
        step_s = statistics.median(b - a for a, b in itertools.pairwise(marks[2:]))
        objects = keras_trackables(trainer.model, trainer.optimizer)
        saved_mb = sum(v.numpy().nbytes for v in trainer.model.variables) / 2**20
        saved_mb += sum(v.numpy().nbytes for v in trainer.optimizer.variables) / 2**20
        manager = CheckpointManager(os.path.join(base, f"m{mb}"), max_to_keep=2, **objects)
        plain = tf.train.Checkpoint(**objects)
        timing: dict[str, list[float]] = {"tfdp sync": [], "tf sync": [], "async call": [],
                                          "async done": []}  # fmt: skip
        options = tf.train.CheckpointOptions(experimental_enable_async_checkpoint=True)
        for i in range(repeats + 1):  # the first of each is a warm-up
            t0 = time.perf_counter()
            manager.save(DataPosition(0, i), i)
            t1 = time.perf_counter()
            plain.write(os.path.join(base, f"p{mb}", "ckpt"))
            t2 = time.perf_counter()
            fresh = tf.train.Checkpoint(**objects)  # see the module docstring
            fresh.write(os.path.join(base, f"a{mb}", "ckpt"), options=options)
            t3 = time.perf_counter()
            fresh.sync()
            t4 = time.perf_counter()
            if i:
                timing["tfdp sync"].append(t1 - t0)
                timing["tf sync"].append(t2 - t1)
                timing["async call"].append(t3 - t2)
                timing["async done"].append(t4 - t2)
        rows.append((mb, saved_mb, step_s, timing))

    print("\n| weights MB | saved MB | step ms | tfdp sync save ms | tf sync write ms | "
          "tf async: call blocks ms | tf async: done ms |")  # fmt: skip
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for mb, saved, step_s, t in rows:
        cells = [f"{min(v) * 1e3:.0f} ({statistics.median(v) * 1e3:.0f})" for v in t.values()]
        print(f"| {mb} | {saved:.0f} | {step_s * 1e3:.1f} | " + " | ".join(cells) + " |")
    print("(best (median) of", repeats, "saves)")
    print()
    for mb, _, step_s, t in rows:
        sync, call = statistics.median(t["tfdp sync"]), statistics.median(t["async call"])
        print(f"save_in_steps_sync_{mb}mb: {sync / step_s:.1f}")
        print(f"save_in_steps_async_call_{mb}mb: {call / step_s:.1f}")
    print(f"load_average_start: {load:.2f}")
    print(f"load_average_end: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
