"""The contract of :class:`~tfdp.input.DistributedInput`'s back-ends: planned entries -> batches.

:class:`~tfdp.input.DistributedInput` plans each rank's entries once
(:class:`tfdp.input.entries.EntryPlan`: ids, positions, seeds, weights) and
hands the plan to one loader, which turns it into ``tf.data`` batches. This
module owns what every loader offers (:class:`Loader`) and what two of them
share (:func:`round_robin`: a worker's ranks interleaved as
``distribute_datasets_from_function`` deals them). The loaders, one module each:

=================================================  ===============================================
loader                                             loads
=================================================  ===============================================
:class:`tfdp.input.indexed.IndexedBatches`         a random-access source, rank by rank: ids ->
                                                   gather (or load per id) -> augment
:class:`tfdp.input.streams.StreamBatches`          a streaming source (TFRecord): the stream of the
                                                   plan's stream indices, rank by rank or a
                                                   worker's ranks read as one
:class:`tfdp.windows.loader.WindowedBatches`       a source that decodes windows under a window
                                                   stage: a worker's ranks in chunks, each file
                                                   read and decoded once, over its windows only
=================================================  ===============================================

:func:`tfdp.input.pipeline.make_loader` is the one factory that picks one. A
loader's batches are the same whichever is picked, bit for bit, for the
entries the plan gives (``tests/test_differential.py`` checks every path
against an independent reference).

Example:
    >>> import numpy as np
    >>> from tfdp.input import DistributedInput
    >>> from tfdp.sources import ArraySource
    >>> inp = DistributedInput(None, ArraySource(np.arange(8)), batch_size=4)
    >>> isinstance(inp.loader, Loader), type(inp.loader).__name__
    (True, 'IndexedBatches')
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import tensorflow as tf

__all__ = ["Loader", "round_robin"]


@runtime_checkable
class Loader(Protocol):
    """Per-replica batches of the planned entries, for one rank or a worker's local ranks.

    ``rank(rank, first_epoch, num_epochs, start_step)``: global rank
    ``rank``'s batches, epoch after epoch from ``first_epoch`` (``num_epochs``
    None: endless), the first ``start_step`` steps of ``first_epoch`` skipped
    without being read. ``worker(ranks, ...)``: the same for the worker's
    local ranks (global ranks, in local order), element ``k`` for local rank
    ``k mod L`` -- the ranks' own batches interleaved, however they are read.
    Both are deterministic and not auto-sharded
    (:func:`tfdp._util.deterministic_unsharded`); the arguments are checked
    by the input.
    """

    def rank(
        self, rank: int, first_epoch: int, num_epochs: int | None, start_step: int
    ) -> tf.data.Dataset:
        """Global rank ``rank``'s batches (see the class)."""
        ...

    def worker(
        self, ranks: Sequence[int], first_epoch: int, num_epochs: int | None, start_step: int
    ) -> tf.data.Dataset:
        """The local ``ranks``' batches interleaved, element ``k`` for ``ranks[k % L]``."""
        ...


def round_robin(parts: Sequence[tf.data.Dataset]) -> tf.data.Dataset:
    """The ranks' datasets interleaved: element ``k`` from ``parts[k % L]``, to the first end.

    How ``distribute_datasets_from_function`` deals a worker's elements in
    PER_WORKER mode: element ``k`` goes to local replica ``k mod L``.

    Example:
        >>> import tensorflow as tf
        >>> parts = [tf.data.Dataset.range(3), tf.data.Dataset.range(10, 13)]
        >>> [int(x) for x in round_robin(parts)]
        [0, 10, 1, 11, 2, 12]
    """
    if len(parts) == 1:
        return parts[0]
    choice = tf.data.Dataset.range(len(parts)).repeat()
    return tf.data.Dataset.choose_from_datasets(list(parts), choice, stop_on_empty_dataset=True)
