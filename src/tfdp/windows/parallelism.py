"""How much of the machine the window path uses at once: every threading knob, in one place.

The window loader (:mod:`tfdp.windows.loader`) runs a parallel,
order-keeping ``tf.data`` map over chunks of entries, and each chunk decodes
its files and finishes its windows in a ``tf.while_loop`` with several
iterations in flight (:func:`tfdp.windows.decode.decode_windows`). Values
never depend on these numbers -- each iteration's result depends only on its
index, and the map keeps the order -- only the speed does.

=========================  ==================================================================
knob                       what it bounds
=========================  ==================================================================
``CHUNK_ENTRIES``          entries per chunk to aim for (:func:`tfdp.windows.loader.chunk_slots`):
                           enough to amortise a chunk's draws and keep a sample's RA copies
                           together, few enough for a step to spread over the cores
``PARALLEL_DECODES``       files decoded (and windows finished) at once inside one chunk: one
                           per core, so one chunk alone -- the first of a new iterator --
                           spreads over the machine
``INITIAL_CHUNK_CALLS``    chunks in flight when an iterator starts (``tf.data``'s
                           ``autotune.initial_parallelism``); AUTOTUNE widens it from there
``num_parallel_calls``     the chunk map's parallelism, :class:`tfdp.DistributedInput`'s
                           argument (default ``tf.data.AUTOTUNE``)
=========================  ==================================================================

Why one chunk at first: tf.data starts AUTOTUNE maps 16 calls wide, and chunks
racing for the cores delay the first step several times over, since a chunk
already decodes on every core. Starting with one chunk, the first, measured a
new epoch's first batch at 1.6-1.7x Model Garden's instead of 2.5-3.8x with
one chunk per core, and the same images/s after it (``benchmarks/bench_images.py``).

Example:
    >>> CHUNK_ENTRIES, INITIAL_CHUNK_CALLS, PARALLEL_DECODES >= 1
    (128, 1, True)
"""

from __future__ import annotations

import os

#: Entries per chunk to aim for.
CHUNK_ENTRIES = 128
#: Files decoded (and windows finished) at once inside one chunk: one per core.
PARALLEL_DECODES = os.cpu_count() or 1
#: Chunks in flight when a new iterator starts (then AUTOTUNE widens).
INITIAL_CHUNK_CALLS = 1
