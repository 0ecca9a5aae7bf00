"""What speed buys: each trick on private TensorFlow or CPython behaviour, beside its fallback.

Every function here gives the values its public-API fallback gives (tests/test_compat.py
checks both), only faster; one switch, the environment variable ``TFDP_SPEED_TRICKS``
(:mod:`.switch`, the one place that reads it), turns the tricks off -- all (``0``) or all but
those it names -- and tfdp then runs on public TensorFlow and CPython alone. Which trick
reaches into what, its fallback and what it was measured to gain: :mod:`tfdp._compat`'s
table; the measurements: docs/benchmarks.md, "Speed tricks on and off".

:mod:`.graph`: :func:`bound_call`, :func:`lightly_optimized_map`, :class:`RowsInPlace`.
:mod:`.process`: :func:`release_in_background` (and :func:`wait_for_releases`),
:func:`end_process`, :func:`prefer_bfc_cpu_allocator`.

Example:
    >>> import os
    >>> trick_on("end_process", {**os.environ, "TFDP_SPEED_TRICKS": "0"})
    False
"""

from __future__ import annotations

from tfdp._compat.fast.graph import RowsInPlace, bound_call, lightly_optimized_map
from tfdp._compat.fast.process import (
    CPU_ALLOCATOR_ENV,
    RELEASE_THREAD_NAME,
    end_process,
    prefer_bfc_cpu_allocator,
    release_in_background,
    wait_for_releases,
)
from tfdp._compat.fast.switch import SPEED_TRICKS_ENV, TRICKS, trick_on, tricks_on

__all__ = [
    "CPU_ALLOCATOR_ENV",
    "RELEASE_THREAD_NAME",
    "SPEED_TRICKS_ENV",
    "TRICKS",
    "RowsInPlace",
    "bound_call",
    "end_process",
    "lightly_optimized_map",
    "prefer_bfc_cpu_allocator",
    "release_in_background",
    "trick_on",
    "tricks_on",
    "wait_for_releases",
]
