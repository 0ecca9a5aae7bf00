"""bench_images.py's speed-trick part: the window path with a trick on and off, alternated.

One of tfdp's speed tricks (``tfdp._compat.fast``) works inside the image input:
``lightly_optimized_map`` (each new iterator instantiates the loader without Grappler's whole
run). It is measured here against its public-API fallback in the same process, the
inputs taking turns (the order rotates): ``tfdp_ra`` (bench_images' RA input) and ``deit``
(DeiT's whole input, Mixup / CutMix included), each once with every trick on and once with
``TFDP_SPEED_TRICKS`` naming every trick but the one measured, set while that input is built
and read. Rounds as bench_images.py's (``run_window``: fresh datasets' first batches, then a
timed window). Reported per trick and input: the median over rounds of the per-round ratios
on / off -- images/s, CPU per image (off / on: above 1, the trick saves CPU), the first batch
of a fresh dataset (off / on) -- with their range. Run with
``python benchmarks/bench_images.py --quick --speed-tricks-only`` (``--rounds`` to repeat).
The host allocator (the ``bfc_cpu_allocator`` trick) is chosen once per process: compare
whole runs with ``TFDP_SPEED_TRICKS`` naming every other trick (docs/benchmarks.md).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np

from tfdp._compat.fast.switch import SPEED_TRICKS_ENV, TRICKS

#: The tricks measured here, and the inputs each is used by.
MEASURED = {"lightly_optimized_map": ("tfdp_ra", "deit")}


@contextmanager
def _without(trick: str | None) -> Iterator[None]:
    """Every speed trick on but ``trick`` (None: all on) while inside."""
    before = os.environ.get(SPEED_TRICKS_ENV)
    os.environ[SPEED_TRICKS_ENV] = ",".join(t for t in TRICKS if t != trick)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(SPEED_TRICKS_ENV, None)
        else:
            os.environ[SPEED_TRICKS_ENV] = before


def speed_tricks_part(
    strategy, cfg: dict, run_window: Callable, inputs: dict[str, Callable[[], object]]
) -> dict[str, float]:
    """Rounds of each input with every trick on and with each measured trick off; the ratios.

    ``inputs``: name -> a function building that input (a ``DistributedInput``).
    """
    variants: dict[str, tuple[str, str | None]] = {}
    for name in inputs:
        variants[name] = (name, None)
        for trick, users in MEASURED.items():
            if name in users:
                variants[f"{name}, {trick} off"] = (name, trick)
    built = {}
    for label, (name, trick) in variants.items():
        with _without(trick):
            inp = inputs[name]()
            run_window(strategy, lambda e, inp=inp: inp.epochs(e, None), 0, 1, 1, 1)  # traced
            built[label] = inp
    print(f"\nspeed tricks on / off: {', '.join(variants)}", flush=True)
    results: dict[str, list[dict]] = {label: [] for label in variants}
    labels = list(variants)
    for rnd in range(cfg["rounds"]):
        order = labels[rnd % len(labels) :] + labels[: rnd % len(labels)]
        for label in order:
            inp = built[label]
            with _without(variants[label][1]):
                window = run_window(
                    strategy, lambda e, inp=inp: inp.epochs(e, None), rnd + 1,
                    cfg["window"], cfg["warmup"],
                )  # fmt: skip
                results[label].append(window)
        line = "  ".join(f"{label} {results[label][-1]['rate']:.0f}" for label in labels)
        print(f"  round {rnd + 1}: images/s {line}  (load {os.getloadavg()[0]:.1f})", flush=True)
    print(
        f"  {'input, trick':<40} {'images/s on/off':>16} {'CPU off/on':>16} "
        f"{'first batch off/on':>19}"
    )
    heads = {}
    for label, (name, trick) in variants.items():
        if trick is None:
            continue
        on, off = results[name], results[label]
        cols = []
        for key, flip in (("rate", False), ("cpu_ms", True), ("first", True)):
            ratios = [(b[key] / a[key]) if flip else (a[key] / b[key])
                      for a, b in zip(on, off, strict=True)]  # fmt: skip
            cols.append(f"{np.median(ratios):.3f} [{min(ratios):.2f}-{max(ratios):.2f}]")
            heads[f"speed_trick_{trick}_{name}_{key}"] = float(np.median(ratios))
        print(f"  {label:<40} {cols[0]:>16} {cols[1]:>16} {cols[2]:>19}")
    for label in labels:
        rates = [r["rate"] for r in results[label]]
        cpu = np.median([r["cpu_ms"] for r in results[label]])
        faults = np.median([r["faults"] for r in results[label]])
        print(f"  {label}: {np.median(rates):.0f} images/s [{min(rates):.0f}-{max(rates):.0f}], "
              f"{cpu:.2f} CPU ms and {faults:.0f} page faults per image")  # fmt: skip
    print("  (ratios: median over rounds of the rounds' ratios [min-max]; above 1: it gains)")
    return heads
