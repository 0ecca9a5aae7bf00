"""Worker script of bench_multiworker.py: time tfdp's Trainer on an MLP, print samples/s.

Run it alone for the OneDeviceStrategy baseline, or under the launcher for
MultiWorkerMirroredStrategy::

    python benchmarks/_mw_train.py --strategy one_device
    python -m tfdp.launch --workers 2 -- python benchmarks/_mw_train.py

Model and data: a 64-128-10 MLP (``Dense(128, relu)``, ``Dense(10)``) on
synthetic float32 features with int64 labels in [0, 10), in memory
(``ArraySource``), fed by ``DistributedInput`` at a fixed per-replica batch;
``keras.optimizers.SGD(0.01)``; ``tfdp.train.Trainer(steps_per_call=...)``.

Timing: a warm-up ``fit`` (traces the step function, fills the pipeline), then
``--rounds`` further ``fit`` calls on the same trainer (model, optimizer and
compiled step function kept), each started from epoch 0, step 0 (the trainer's
``state`` is reset to a fresh ``TrainState``) and stopped by ``max_steps``, so
no epoch boundary falls inside a round. In each, the clock starts at the
``on_step`` callback after the first ``--lead`` steps (so iterator creation and
pipeline start-up are not timed) and stops at the last ``on_step``; the window
holds exactly ``--steps`` optimizer steps, including the Trainer's per-call
work (reading the loss; under several workers, the agreed-stop all-reduce).
Every worker prints one line, ``MW_RESULT {json}``, with the rate of every
round in global samples/s (global batch x timed steps / wall seconds) and its
OS thread count at the end.

The strategy is built with ``collective_timeout=None`` unless
``--collective-timeout`` is given: see that option's help for why.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

T_START = time.perf_counter()


def _os_threads() -> int:
    """This process's thread count (Linux ``/proc/self/status``; -1 elsewhere)."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("Threads:"))
    except (OSError, StopIteration, ValueError):
        return -1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument(
        "--strategy",
        default="auto",
        choices=["auto", "one_device", "multi_worker"],
        help="tfdp.make_strategy kind (auto: MultiWorkerMirroredStrategy under TF_CONFIG)",
    )
    ap.add_argument("--batch-size", type=int, default=32, help="examples per replica per step")
    ap.add_argument("--steps-per-call", type=int, default=8)
    ap.add_argument("--examples", type=int, default=131_072)
    ap.add_argument("--warmup", type=int, default=64, help="optimizer steps of the warm-up fit")
    ap.add_argument("--lead", type=int, default=16, help="untimed steps at the start of a round")
    ap.add_argument("--steps", type=int, default=512, help="timed optimizer steps per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--collective-timeout",
        type=float,
        default=None,
        help="make_strategy(collective_timeout=...) in seconds (default: none). "
        "TensorFlow 2.21 starts one detached thread per collective op that has a "
        "timeout, which sleeps for the whole timeout: at hundreds of steps/s that "
        "is ~1,000 new threads a second, and tfdp's default of 600 s exhausts the "
        "pid space of this machine (32,768) in about 30 s",
    )
    args = ap.parse_args()
    spc = args.steps_per_call
    for name in ("warmup", "lead", "steps"):
        value = getattr(args, name)
        if value < spc or value % spc:
            ap.error(f"--{name} must be a positive multiple of --steps-per-call ({spc})")

    import keras
    import numpy as np

    from tfdp.distribute import make_strategy, worker_info
    from tfdp.input import DistributedInput
    from tfdp.sources import ArraySource
    from tfdp.train import Trainer, TrainState

    t_import = time.perf_counter()
    strategy = make_strategy(args.strategy, collective_timeout=args.collective_timeout)
    info = worker_info(strategy)
    t_strategy = time.perf_counter()

    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.examples, 64), dtype=np.float32)
    y = rng.integers(0, 10, size=args.examples, dtype=np.int64)
    inp = DistributedInput(strategy, ArraySource((x, y)), batch_size=args.batch_size, seed=0)
    need = max(args.warmup, args.lead + args.steps)
    if need > inp.steps_per_epoch:
        ap.error(
            f"{need} steps do not fit in one epoch of {inp.steps_per_epoch} steps: "
            "raise --examples or lower --steps/--warmup"
        )

    def model() -> keras.Model:
        keras.utils.set_random_seed(0)
        return keras.Sequential(
            [
                keras.Input((64,)),
                keras.layers.Dense(128, activation="relu"),
                keras.layers.Dense(10),
            ]
        )

    trainer = Trainer(
        strategy,
        model,
        lambda: keras.optimizers.SGD(0.01),
        "sparse_categorical_crossentropy_from_logits",
        steps_per_call=spc,
        progress=False,
        verbose=0,
    )
    trainer.fit(inp, epochs=1, max_steps=args.warmup, resume=False)
    t_warm = time.perf_counter()

    rates: list[float] = []
    cpu_ms: list[float] = []
    for _ in range(args.rounds):
        marks: list[tuple[float, float, int]] = []
        trainer.state = TrainState()
        trainer.fit(
            inp,
            epochs=1,
            max_steps=args.lead + args.steps,
            resume=False,
            on_step=lambda s, marks=marks: marks.append(
                (time.perf_counter(), time.process_time(), s.global_step)
            ),
        )
        a = next(m for m in marks if m[2] == args.lead)
        b = marks[-1]
        if b[2] - a[2] != args.steps or trainer.state.epoch != 0:
            raise RuntimeError(
                f"timed {b[2] - a[2]} steps in epoch {trainer.state.epoch}, "
                f"expected {args.steps} in epoch 0"
            )
        rates.append(args.steps * inp.global_batch_size / (b[0] - a[0]))
        cpu_ms.append(1e3 * (b[1] - a[1]) / args.steps)

    result = {
        "worker": info.worker_index,
        "num_workers": info.num_workers,
        "replicas": info.num_replicas,
        "strategy": type(strategy).__name__,
        "global_batch": inp.global_batch_size,
        "steps_per_call": spc,
        "steps": args.steps,
        "rounds_samples_per_s": rates,
        "cpu_ms_per_step": cpu_ms,
        "loss": trainer.state.last_loss,
        "import_s": t_import - T_START,
        "strategy_s": t_strategy - t_import,
        "setup_warmup_s": t_warm - t_strategy,
        "collective_timeout": args.collective_timeout,
        "os_threads": _os_threads(),
    }
    print("MW_RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    if (
        os.environ.get("TFDP_WORKER_INDEX", "0") == "0"
        and int(os.environ.get("TFDP_NUM_WORKERS", "1")) > 1
    ):
        # Worker 0 hosts TensorFlow's coordination service: let the others leave first,
        # or they log heartbeat errors on their way out.
        time.sleep(0.5)
    # Skip TensorFlow's interpreter teardown (seconds); every collective has completed on
    # all workers by now (the last Trainer call ends with an agreed-stop all-reduce).
    os._exit(code)
