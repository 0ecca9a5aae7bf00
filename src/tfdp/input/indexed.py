"""A random-access source's batches, rank by rank: planned ids -> gather or load -> augment.

This module owns :class:`IndexedBatches`, the loader (:class:`tfdp.input.loader.Loader`)
of a random-access source (:class:`tfdp.sources.base.RandomAccessSource`) that
the window path does not take: each rank's pipeline reads its planned entries
(:class:`tfdp.input.entries.EntryPlan`) epoch by epoch -- one small
``tf.numpy_function`` per epoch -- and loads them. A batch source under a
batched augmentation (or none) is gathered and augmented a batch at a time,
its index arrays batched by a reshape (one slice per batch); anything else is
loaded, augmented and finished example by example, then batched
(:class:`tfdp.input.examples.ExamplePipeline` says how). A worker's local
ranks are interleaved (:func:`tfdp.input.loader.round_robin`).

Example:
    >>> import numpy as np
    >>> from tfdp.input import DistributedInput
    >>> from tfdp.sources import ArraySource
    >>> inp = DistributedInput(None, ArraySource(np.arange(10)), sampler="eval", batch_size=5)
    >>> [x.numpy().tolist() for x, _ in inp.loader.rank(0, 0, 1, 0)]
    [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]
"""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf

from tfdp._autograph import plain
from tfdp._compat.fast.graph import lightly_optimized_map
from tfdp._util import deterministic_unsharded
from tfdp.augment.contract import is_batched_augmentation
from tfdp.input.entries import EntryPlan
from tfdp.input.examples import ExamplePipeline
from tfdp.input.loader import round_robin
from tfdp.sources.base import BatchSource

_INF_EPOCHS = 2**62


class IndexedBatches:
    """Each rank's batches of a random-access source, from the plan's entries (see the module).

    Args:
        plan: The input's entries (:class:`tfdp.input.entries.EntryPlan`).
        examples: What happens to the loaded examples (:class:`ExamplePipeline`,
            which holds the source and the augmentation).
        num_parallel_calls: Parallelism of the load / augment map.
    """

    def __init__(
        self, plan: EntryPlan, examples: ExamplePipeline, *, num_parallel_calls: int
    ) -> None:
        self.plan, self.examples = plan, examples
        self.num_parallel_calls = num_parallel_calls
        augment = examples.augment
        #: Whole batches gathered and augmented as one (else example by example).
        self.batched = isinstance(examples.source, BatchSource) and (
            augment is None or is_batched_augmentation(augment)
        )

    def rank(
        self, rank: int, first_epoch: int, num_epochs: int | None, start_step: int
    ) -> tf.data.Dataset:
        """Epoch after epoch of this rank's batches; each epoch batched on its own."""
        plan, ex = self.plan, self.examples
        start = start_step * plan.batch_size
        b, drop_remainder = plan.batch_size, plan.drop_remainder
        rows = b if drop_remainder else None  # the batches' static size
        vector, scalar = tf.TensorSpec([rows], tf.int64), tf.TensorSpec([], tf.int64)
        load_batch = ex.traced(
            "load_batch", ex.load_batch, [vector] * 3 + [tf.TensorSpec([rows], tf.float32)]
        )
        scalars = [scalar] * 3 + [tf.TensorSpec([], tf.float32)]
        load_one = ex.traced("load_one", ex.load_one, scalars)

        def per_epoch(epoch: tf.Tensor) -> tf.data.Dataset:
            first = tf.cast(tf.equal(epoch, first_epoch), tf.int64) * start
            arrays = tf.numpy_function(
                lambda e, s: tuple(plan.rank_entries(rank, int(e), int(s))),
                [epoch, first],
                [tf.int64, tf.int64, tf.int64, tf.float32],
                stateful=False,
            )
            for a in arrays:
                a.set_shape([None])
            if self.batched:
                # Batch the index arrays by a reshape (one slice per batch, not per example).
                full = tf.shape(arrays[0], out_type=tf.int64)[0] // b * b
                ds = tf.data.Dataset.from_tensor_slices(
                    tuple(tf.reshape(a[:full], [-1, b]) for a in arrays)
                )
                if not drop_remainder:  # the last, partial batch
                    tail = tf.data.Dataset.from_tensor_slices(tuple(a[full:] for a in arrays))
                    ds = ds.concatenate(tail.batch(b))
                return lightly_optimized_map(ds, load_batch, self.num_parallel_calls)
            ds = tf.data.Dataset.from_tensor_slices(tuple(arrays))
            ds = lightly_optimized_map(ds, load_one, self.num_parallel_calls)
            return ex.batched(ds, traced=True)

        last = _INF_EPOCHS if num_epochs is None else first_epoch + num_epochs
        ds = tf.data.Dataset.range(first_epoch, last).flat_map(plain(per_epoch))
        return deterministic_unsharded(ds)

    def worker(
        self, ranks: Sequence[int], first_epoch: int, num_epochs: int | None, start_step: int
    ) -> tf.data.Dataset:
        """The ``ranks``' own pipelines, interleaved (element ``k`` for ``ranks[k % L]``)."""
        return round_robin([self.rank(r, first_epoch, num_epochs, start_step) for r in ranks])
