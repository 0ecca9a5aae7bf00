"""A streaming source's batches: a rank's own, or a worker's local ranks' read as one.

This module owns :class:`StreamBatches`, the loader (:class:`tfdp.input.loader.Loader`)
of a streaming source (:class:`tfdp.sources.TFRecordSource`): epoch after epoch
of the stream of the plan's entries (:class:`tfdp.input.entries.EntryPlan`: the
sampler picks stream indices, the source shuffles), rank by rank
(:meth:`StreamBatches.rank`) or -- when the records are augmented batch by batch
(JPEG records kept encoded, a window stage first) -- for all the local ranks of
a worker at once (:meth:`StreamBatches.shared`): :func:`step_rows` lays the
ranks' entries out step by step, every rank's batch of a step together in
stream order, one stream reads them, a step's rows are augmented as one batch
and dealt back to the ranks' batches
(:meth:`tfdp.input.examples.ExamplePipeline.stream_step`).

Why: under Repeated Augmentation a sample's copies go to several ranks. Read
rank by rank, each copy of an image is decoded in its rank's batch; read as
one batch per step, the window stage decodes an image once for all its copies
in the step (:func:`tfdp.windows.decode.encoded_request` reads and decodes
the copies of an image in a batch once), as the image-folder window path does,
and every record is read once per worker, not once per local rank.
The values are the same bit for bit: a batched augmentation's rows are its
per-row results (seeds per row), and each rank receives the rows of its
entries in its order (``tests/test_tfrecord_shared_decode.py``).

Example:
    >>> import numpy as np
    >>> rank0 = (np.array([0, 0, 1, 2]), np.array([0, 2, 4, 6]))
    >>> rank1 = (np.array([0, 1, 1, 2]), np.array([1, 3, 5, 7]))
    >>> idx, pos, slot = step_rows([rank0, rank1], batch_size=2)
    >>> idx.tolist(), pos.tolist(), slot.tolist()
    ([0, 0, 0, 1, 1, 1, 2, 2], [0, 2, 1, 3, 4, 5, 6, 7], [0, 1, 2, 3, 0, 2, 1, 3])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from tfdp._autograph import plain
from tfdp._util import deterministic_unsharded
from tfdp.errors import ConfigError
from tfdp.input.config import same_stream_indices_every_epoch
from tfdp.input.entries import EntryPlan
from tfdp.input.examples import ExamplePipeline
from tfdp.input.loader import round_robin

_INF_EPOCHS = 2**62


def step_rows(
    per_rank: Sequence[tuple[np.ndarray, np.ndarray]], batch_size: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The local ranks' stream entries as one batch per step, each step in stream order.

    Args:
        per_rank: Each local rank's ``(indices, positions)`` (stream indices
            and sampler positions), in its order; the ranks' whole batches
            are used (a last partial batch is dropped).
        batch_size: Entries per rank per step.

    Returns:
        ``(indices, positions, slots)``, each ``[steps * R * batch_size]`` for
        ``R`` ranks: step ``t``'s ``R * batch_size`` rows sorted by stream
        index (stably), and each row's slot in the step's rank batches (rank
        ``j``'s entry ``b`` at ``j * batch_size + b``). ``None`` when the
        ranks have different numbers of whole batches (they are then read
        rank by rank).

    Example:
        >>> import numpy as np
        >>> idx, pos, slot = step_rows([(np.array([5, 1]), np.array([0, 2])),
        ...                             (np.array([3, 3]), np.array([1, 3]))], batch_size=2)
        >>> idx.tolist(), slot.tolist()
        ([1, 3, 3, 5], [1, 2, 3, 0])
        >>> step_rows([(np.arange(4), np.arange(4)), (np.arange(2), np.arange(2))], 2) is None
        True
    """
    b = int(batch_size)
    steps = {len(idx) // b for idx, _ in per_rank}
    if len(steps) != 1:
        return None
    (n,) = steps
    ranks = len(per_rank)

    def by_step(arrays: list[np.ndarray]) -> np.ndarray:  # [steps, ranks * b], rank-major
        stacked = np.stack([np.asarray(a, np.int64)[: n * b].reshape(n, b) for a in arrays], 1)
        return stacked.reshape(n, ranks * b)

    idx = by_step([i for i, _ in per_rank])
    pos = by_step([p for _, p in per_rank])
    slot = np.argsort(idx, axis=1, kind="stable")
    return (
        np.take_along_axis(idx, slot, 1).reshape(-1),
        np.take_along_axis(pos, slot, 1).reshape(-1),
        slot.reshape(-1).astype(np.int64),
    )


class StreamBatches:
    """Epoch after epoch of a streaming source's batches, per rank or per worker.

    Args:
        plan: The input's entries (:class:`tfdp.input.entries.EntryPlan`, a
            streaming one: its entries are stream indices).
        examples: What happens to the records (:class:`ExamplePipeline`,
            which holds the source and the augmentation).
        num_replicas: The world size (fixes the stream's lanes).
        num_parallel_calls: Parallelism of the augmentation maps.

    Example:
        >>> import tempfile, numpy as np
        >>> from tfdp.input import DistributedInput
        >>> from tfdp.sources import TFRecordSource, write_tfrecords
        >>> files = write_tfrecords(np.arange(8), tempfile.mkdtemp(), num_shards=2)
        >>> inp = DistributedInput(None, TFRecordSource(files), batch_size=4)
        >>> [x.shape.as_list() for x in inp.loader.rank(0, 0, 1, 0)]
        [[4], [4]]
    """

    def __init__(
        self,
        plan: EntryPlan,
        examples: ExamplePipeline,
        *,
        num_replicas: int,
        num_parallel_calls: int,
    ) -> None:
        self.plan, self.examples = plan, examples
        self.source = examples.source
        self.num_replicas = num_replicas
        self.num_parallel_calls = num_parallel_calls
        self.batch_size, self.drop_remainder = plan.batch_size, plan.drop_remainder
        #: Whether the source shuffles files and blocks (the sampler's ``shuffle``).
        self.shuffle = bool(plan.sampler.shuffle)  # type: ignore[attr-defined]

    def rank(
        self, rank: int, first_epoch: int, num_epochs: int | None, start_step: int
    ) -> tf.data.Dataset:
        """Epoch after epoch of this rank's batches from a streaming source.

        A stream augmented batch by batch is one map over every epoch's
        batches of records: its calls in flight run on while the next epoch's
        lanes open (a stream's epoch starts by reading a shuffle block of every
        lane it reads), so a new epoch inside one dataset does not stall it.
        """
        plan = self.plan

        def arrays(epoch: int, start: int) -> tuple[np.ndarray, ...]:
            entries = plan.rank_entries(rank, epoch, start)
            return entries.indices, entries.positions

        ds = self._epochs(arrays, first_epoch, num_epochs, start_step)
        if self.examples.augments_stream_batches():
            # The augmentation traced once per input (ExamplePipeline.traced), not with every
            # new dataset.
            spec, ex = ds.element_spec, self.examples
            batch = ex.traced(f"stream_batch {spec}", ex.stream_batch, list(spec))
            ds = ds.map(batch, num_parallel_calls=self.num_parallel_calls, deterministic=True)
        return deterministic_unsharded(ds)

    def worker(
        self, ranks: Sequence[int], first_epoch: int, num_epochs: int | None, start_step: int
    ) -> tf.data.Dataset:
        """The local ``ranks``' batches: read as one (:meth:`shared`) or their own interleaved."""
        shared = self.shared(list(ranks), first_epoch, num_epochs, start_step)
        if shared is not None:
            return shared
        return round_robin([self.rank(r, first_epoch, num_epochs, start_step) for r in ranks])

    def shared(
        self, ranks: list[int], first_epoch: int, num_epochs: int | None, start_step: int
    ) -> tf.data.Dataset | None:
        """The local ranks' batches interleaved, read from the stream as one (or None).

        Each step's records of every local rank are read in one stream and
        augmented as one batch, then dealt to the ranks' batches (see the
        module): under Repeated Augmentation an image's copies on several
        local ranks are decoded once. The same
        elements, in the same order, as the ranks' own streams interleaved.
        None where that does not apply: one local rank, records not augmented
        batch by batch, a partial last batch kept, or ranks with different
        numbers of steps.
        """
        ex, plan = self.examples, self.plan
        if len(ranks) < 2 or not self.drop_remainder or not ex.augments_stream_batches():
            return None
        shared: dict[tuple[int, int], Any] = {}

        def arrays(epoch: int, start: int) -> tuple[np.ndarray, ...]:
            if (epoch, start) not in shared:
                per_rank = [plan.rank_entries(r, epoch, start)[:2] for r in ranks]
                shared[(epoch, start)] = step_rows(per_rank, self.batch_size)
            return shared[(epoch, start)]

        epochs = [first_epoch]
        if not same_stream_indices_every_epoch(plan.index_sampler) and num_epochs is not None:
            epochs = list(range(first_epoch, first_epoch + num_epochs))
        if (
            any(arrays(e, 0) is None for e in epochs)
            or arrays(first_epoch, start_step * self.batch_size) is None
        ):
            return None
        ds = self._epochs(
            arrays, first_epoch, num_epochs, start_step, rows=len(ranks) * self.batch_size
        )
        spec = ds.element_spec
        step = ex.traced(f"stream_step {spec}", ex.stream_step, list(spec))
        ds = ds.map(step, num_parallel_calls=self.num_parallel_calls, deterministic=True)
        ds = ds.flat_map(plain(_one_by_one))  # the ranks' elements, not copied (unbatch would)
        if ex.has_batch_stages():
            spec = ds.element_spec
            finish = ex.traced(f"finish_batch {spec}", ex.finish_batch, list(spec))
            ds = ds.map(finish, num_parallel_calls=self.num_parallel_calls, deterministic=True)
        return deterministic_unsharded(ds)

    def _epochs(
        self,
        arrays: Callable[[int, int], tuple[np.ndarray, ...]],
        first_epoch: int,
        num_epochs: int | None,
        start_step: int,
        rows: int | None = None,
    ) -> tf.data.Dataset:
        """Epoch after epoch of the stream entries ``arrays(epoch, start)`` (see _epoch)."""
        sampler = self.plan.index_sampler
        last = _INF_EPOCHS if num_epochs is None else first_epoch + num_epochs
        if same_stream_indices_every_epoch(sampler):  # built once, the epoch a tensor
            every = arrays(first_epoch, 0)
            ds = tf.data.Dataset.range(first_epoch + (start_step > 0), last).flat_map(
                plain(lambda e: self._epoch(e, *every, rows=rows))
            )
            if start_step > 0:
                first = arrays(first_epoch, start_step * self.batch_size)
                ds = self._epoch(first_epoch, *first, rows=rows).concatenate(ds)
        elif num_epochs is None:
            raise ConfigError(
                f"{sampler!r} picks other stream positions every epoch (random padding "
                "of more than the stream holds), so a streaming input needs a finite "
                "num_epochs; or use padding='wrap'"
            )
        else:
            starts = {first_epoch: start_step * self.batch_size}
            parts = [
                self._epoch(e, *arrays(e, starts.get(e, 0)), rows=rows)
                for e in range(first_epoch, last)
            ]
            ds = parts[0]
            for part in parts[1:]:
                ds = ds.concatenate(part)
        return ds

    def _epoch(
        self, epoch: Any, idx: np.ndarray, pos: np.ndarray, *slot: np.ndarray, rows: int | None
    ) -> tf.data.Dataset:
        """One epoch's batches of the stream entries ``idx`` (``epoch``: int or int64 tensor).

        Batches of ``(records, indices, positions, keys)`` -- of ``rows``
        entries (default: the batch size), with the entries' ``slot`` when
        given -- when the stream is augmented batch by batch (the caller
        augments them), else finished batches.
        """
        examples = self.source.stream(
            idx,
            num_replicas=self.num_replicas,
            seed=self.plan.seed,
            epoch=epoch,
            shuffle=self.shuffle,
        )
        key = tf.numpy_function(
            self.plan.epoch_key,
            [tf.cast(epoch, tf.int64)],
            tf.int64,
            stateful=False,
        )
        key.set_shape([])
        ds = tf.data.Dataset.zip(
            (
                examples,
                tf.data.Dataset.from_tensor_slices(idx),
                tf.data.Dataset.from_tensor_slices(pos),
                tf.data.Dataset.from_tensors(key).repeat(),
                *(tf.data.Dataset.from_tensor_slices(s) for s in slot),
            )
        )
        if self.examples.augments_stream_batches():
            # Examples of a fixed shape (e.g. JPEG records kept encoded) are batched first and
            # a batched augmentation runs once per batch: its rows are its per-example results
            # (seeds per row), and a window stage decodes the batch's files in one loop.
            return ds.batch(rows or self.batch_size, drop_remainder=self.drop_remainder)
        spec = ds.element_spec
        ex = self.examples
        one = ex.traced(f"stream_one {spec}", ex.stream_one, list(spec))
        ds = ds.map(one, num_parallel_calls=self.num_parallel_calls, deterministic=True)
        return self.examples.batched(ds)


def _one_by_one(*elements: Any) -> tf.data.Dataset:
    """A dataset of ``elements``, one after the other (each as it is: no copy)."""
    ds = tf.data.Dataset.from_tensors(elements[0])
    for element in elements[1:]:
        ds = ds.concatenate(tf.data.Dataset.from_tensors(element))
    return ds
