"""Benchmark what dropping a tf.data iterator costs the thread that drops it.

In TensorFlow 2.21 the destructor of an autotuned iterator waits for the iterator's autotuning
thread, which does not always see the cancellation and then sleeps to the end of its optimisation
period (10 ms, doubling up to 60 s while the iterator lives). tfdp's loops hand the iterators they
drop (the training stream at the end of ``fit``, the evaluation iterator after each evaluation) to
``tfdp._compat.fast.process.release_in_background``. For each lifetime, ``--drops`` iterators of one
pipeline (a parallel map, batch, prefetch: what every input has) are each read for that long, then
handed to ``release_in_background`` with the speed trick on (dropped on the release thread) or off
(``TFDP_SPEED_TRICKS`` naming every other trick: its fallback drops them on the caller's thread);
the time the caller is blocked is measured (median and total), and the share of the caller's time it
is (blocked / (read + blocked)).

Usage::

    .venv/bin/python benchmarks/bench_iterator_release.py           # lifetimes 1, 3, 10 s
    .venv/bin/python benchmarks/bench_iterator_release.py --quick   # 1, 3 s: under a minute

Headline figures last, one ``name: value`` per line.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--drops", type=int, default=None, help="iterators per lifetime and mode")
    args = ap.parse_args()
    lifetimes = [1.0, 3.0] if args.quick else [1.0, 3.0, 10.0]
    drops = args.drops or (4 if args.quick else 8)
    print(
        f"bench_iterator_release: {'quick' if args.quick else 'full'}, {drops} drops per cell; "
        f"load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    import tensorflow as tf

    from tfdp._compat.fast.process import release_in_background
    from tfdp._compat.fast.switch import SPEED_TRICKS_ENV, TRICKS

    ds = (
        tf.data.Dataset.range(10**12)
        .map(lambda x: x * 2, num_parallel_calls=tf.data.AUTOTUNE)
        .batch(8)
        .prefetch(tf.data.AUTOTUNE)
    )

    def blocked(life: float, background: bool) -> float:
        held = [iter(ds)]
        start = time.perf_counter()
        while time.perf_counter() - start < life:
            next(held[0])
        os.environ[SPEED_TRICKS_ENV] = ",".join(
            t for t in TRICKS if background or t != "release_in_background"
        )
        t = time.perf_counter()
        release_in_background(held)
        return time.perf_counter() - t

    totals = {False: 0.0, True: 0.0}
    lived = 0.0
    for life in lifetimes:
        for background in (False, True):
            waits = [blocked(life, background) for _ in range(drops)]
            totals[background] += sum(waits)
            lived += life * drops if background else 0.0
            mode = "release_in_background" if background else "trick off: the caller drops"
            print(
                f"  read {life:4.0f} s, {mode:28s}: caller blocked median "
                f"{statistics.median(waits):6.3f} s, "
                f"max {max(waits):6.3f} s, total {sum(waits):6.2f} s "
                f"(load {os.getloadavg()[0]:.2f})",
                flush=True,
            )
    print(f"caller_blocked_dropped_s: {totals[False]:.2f}")
    print(f"caller_blocked_released_s: {totals[True]:.3f}")
    # The caller's time (reading + dropping) saved by the trick, as a share of it off.
    share = (totals[False] - totals[True]) / (lived + totals[False])
    print(f"speed_trick_release_in_background_time_saved: {share:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
