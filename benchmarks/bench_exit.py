"""Benchmark how long a ``tfdp train`` process lives after it said it was done.

A process that has trained ends with TensorFlow's teardown: the interpreter finalises every object,
the C++ runtime tears down, and the ``tf.data`` iterators the training loop handed to
``tfdp._compat.fast.process.release_in_background`` are released first (an iterator whose autotuning
thread missed its cancellation sleeps to the end of its optimisation period). The ``tfdp`` process
(``tfdp.cli.app.run``) ends with ``tfdp._compat.fast.process.end_process`` instead: threads joined,
``atexit`` handlers run, streams flushed, then ``os._exit``. Both are measured here on the same
command, alternately: ``python -m tfdp train ...`` (the tfdp process) and the baseline, the same
command with the ``end_process`` speed trick off (``TFDP_SPEED_TRICKS`` naming every other trick:
``sys.exit``, the interpreter's usual exit). The time from the ``tfdp train: model saved`` line (the
command's last) to the process's end is the tail.

Usage::

    .venv/bin/python benchmarks/bench_exit.py           # 2 and 15 epochs of the digits, 3 runs each
    .venv/bin/python benchmarks/bench_exit.py --quick   # 2 epochs, 2 runs each: under a minute

Headline figures last, one ``name: value`` per line.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
from tfdp._compat.fast.switch import SPEED_TRICKS_ENV, TRICKS  # noqa: E402

LAST_LINE = "tfdp train: model saved"
#: TFDP_SPEED_TRICKS of each mode: every trick on; every trick but end_process.
MODES = {
    "tfdp process": ",".join(TRICKS),
    "end_process off": ",".join(t for t in TRICKS if t != "end_process"),
}


def tail(argv: list[str], run_dir: str, tricks: str) -> tuple[float, float]:
    """(seconds from the command's last line to the process's end, the whole process)."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(ROOT / "src"),
           SPEED_TRICKS_ENV: tricks}  # fmt: skip
    start = time.monotonic()
    proc = subprocess.Popen([*argv, "--run-dir", run_dir], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)  # fmt: skip
    said = None
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith(LAST_LINE):
            said = time.monotonic()
    code = proc.wait()
    end = time.monotonic()
    if code != 0 or said is None:
        raise SystemExit(f"bench_exit: {argv[:4]} exited {code} without {LAST_LINE!r}")
    return end - said, end - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--runs", type=int, default=None, help="runs per mode and epoch count")
    args = ap.parse_args()
    epochs = [2] if args.quick else [2, 15]
    runs = args.runs or (2 if args.quick else 3)
    print(f"bench_exit: {'quick' if args.quick else 'full'}, {runs} runs per cell; "
          f"load average {os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip
    modes = MODES
    headline = []
    with tempfile.TemporaryDirectory() as tmp:
        for e in epochs:
            tails: dict[str, list[float]] = {m: [] for m in modes}
            wholes: dict[str, list[float]] = {m: [] for m in modes}
            for r in range(runs):
                for mode, tricks in modes.items():  # alternately: the same load for both
                    cmd = [sys.executable, "-m", "tfdp", "train", "--epochs", str(e),
                           "--no-progress"]  # fmt: skip
                    where = os.path.join(tmp, f"{e}-{r}-{mode.replace(' ', '_')}")
                    t, whole = tail(cmd, where, tricks)
                    tails[mode].append(t)
                    wholes[mode].append(whole)
            for mode in modes:
                after = " ".join(f"{t:.2f}" for t in tails[mode])
                whole = statistics.median(wholes[mode])
                print(f"  {e:2d} epochs, {mode:20s}: after the last line {after} s; "
                      f"whole process median {whole:.1f} s")  # fmt: skip
            ours, base = (statistics.median(tails[m]) for m in modes)
            whole_ours, whole_base = (statistics.median(wholes[m]) for m in modes)
            headline.append((e, ours, base, whole_ours / whole_base))
    for e, ours, base, ratio in headline:
        print(f"tail_after_done_{e}_epochs_s: {ours:.2f} (baseline {base:.2f})")
        print(f"whole_process_{e}_epochs_vs_baseline: {ratio:.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
