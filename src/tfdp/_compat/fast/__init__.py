"""What speed buys: each trick on private TensorFlow or CPython behaviour, beside its fallback.

Every function here gives the values its public-API fallback gives (tests/test_compat.py
checks both), only faster; one switch, the environment variable ``TFDP_SPEED_TRICKS``
(:mod:`.switch`, the one place that reads it), turns the tricks off -- all (``0``) or all but
those it names -- and tfdp then runs on public TensorFlow and CPython alone. Which trick
reaches into what, its fallback and what it was measured to gain: :mod:`tfdp._compat`'s
table; the measurements: docs/benchmarks.md, "Speed tricks".

:mod:`.graph`: :func:`~.graph.bound_call`, :func:`~.graph.lightly_optimized_map`. :mod:`.process`:
:func:`~.process.release_in_background` (and :func:`~.process.wait_for_releases`),
:func:`~.process.end_process`, :func:`~.process.prefer_bfc_cpu_allocator`. :mod:`.switch`:
the switch. Callers import each from its module (this package gathers no names).

Example:
    >>> import os
    >>> from tfdp._compat.fast.switch import trick_on
    >>> trick_on("end_process", {**os.environ, "TFDP_SPEED_TRICKS": "0"})
    False
"""
