"""The window path of the input layer: a worker's replicas' batches, loaded by windows in chunks.

This module owns :class:`WindowedBatches`, which :class:`tfdp.DistributedInput`
uses instead of its per-example path when the source can decode windows
(:class:`tfdp.sources.windows.WindowSource`, e.g. a JPEG image folder) and
the augmentation starts with a window stage (:func:`tfdp.augment.split_window`:
:class:`~tfdp.augment.RandomResizedCrop`, :class:`~tfdp.augment.CenterCrop`).

How a step of a worker with ``L`` local replicas and ``B`` examples per
replica is loaded: the step's ``L * B`` entries are cut into chunks of ``k``
consecutive slots of *all* ``L`` replicas (``L * k`` entries, about
``CHUNK_ENTRIES``). Each chunk is one element of a parallel, order-keeping
``tf.data`` map: the random draws of all its entries are made at once, then
the source reads and decodes each distinct file of the chunk once and
finishes every entry's window. Repeated Augmentation puts the ``R`` copies
of a sample at consecutive global positions, i.e. on consecutive ranks in
the same slot (or the next), so they share a chunk and one read and decode.
The chunks of a step are then reassembled into the ``L`` replica batches,
which the worker's dataset yields round-robin (element ``k`` for local
replica ``k mod L``) -- the same elements, in the same order, as the
per-rank pipelines, with the same seeds ``[key(seed, epoch), position]``.

The chunk loader is one ``tf.function`` traced once per input (without
AutoGraph: the code is plain graph code, and AutoGraph's transpiling took
most of a first trace), so a new epoch's dataset (``DistributedInput.epoch(e)``)
reuses it.

Example:
    >>> import os, tempfile, tensorflow as tf
    >>> from tfdp import DistributedInput, augment
    >>> from tfdp.sources import ImageFolderSource
    >>> root = tempfile.mkdtemp()
    >>> for c in "ab":
    ...     os.makedirs(os.path.join(root, c))
    ...     for i in range(3):
    ...         tf.io.write_file(os.path.join(root, c, f"{i}.jpg"),
    ...                          tf.io.encode_jpeg(tf.zeros([30, 40, 3], tf.uint8)))
    >>> inp = DistributedInput(None, ImageFolderSource(root), batch_size=2,
    ...                        augment=augment.RandomResizedCrop(8))
    >>> type(inp._windows).__name__
    'WindowedBatches'
    >>> [tuple(x.shape) for x, y in inp.epoch(0)]
    [(2, 8, 8, 3), (2, 8, 8, 3), (2, 8, 8, 3)]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from tfdp._autograph import plain
from tfdp.augment import WindowPipeline
from tfdp.sources.windows import WindowSource

__all__ = ["CHUNK_ENTRIES", "WindowedBatches", "chunk_slots"]

#: Entries per chunk to aim for: enough to amortise the per-chunk draws and to keep the
#: copies of a sample together, few enough for a step to spread over the cores.
CHUNK_ENTRIES = 128
_INF_EPOCHS = 2**62

EpochArrays = Callable[[int, int, int], tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]


def _one_chunk(pieces: Any) -> Any:
    """Pieces of one chunk as a step of one chunk (a leading axis of 1; no copy)."""
    return tf.nest.map_structure(lambda t: t[tf.newaxis], pieces)


def chunk_slots(batch_size: int, replicas: int, target: int = CHUNK_ENTRIES) -> int:
    """Slots per chunk: the largest divisor ``k`` of ``batch_size`` with ``replicas * k <= target``.

    At least 1, so a chunk always holds whole slots of every replica.

    Example:
        >>> chunk_slots(64, 2), chunk_slots(128, 8), chunk_slots(7, 8), chunk_slots(3, 64)
        (64, 16, 7, 1)
    """
    best = 1
    for k in range(1, batch_size + 1):
        if batch_size % k == 0 and replicas * k <= target:
            best = k
    return best


class WindowedBatches:
    """Per-replica batches of a window-decoding source, loaded in chunks across replicas.

    Args:
        source: A :class:`tfdp.sources.windows.WindowSource`.
        pipeline: The augmentation split by :func:`tfdp.augment.split_window`.
        batch_size: Examples per replica per step.
        drop_remainder: Drop the last partial batch of an epoch.
        epoch_arrays: ``(rank, epoch, start) -> (indices, positions, keys, weights)``
            of a rank's epoch from entry ``start`` on (the input layer's sampler arrays).
        finish: ``(example, indices, positions, weights) -> element``: the input
            layer's last touch (weights, ids).
        num_parallel_calls: Parallelism of the chunk map.
        chunk_entries: Entries per chunk to aim for (see :func:`chunk_slots`).
    """

    def __init__(
        self,
        source: WindowSource,
        pipeline: WindowPipeline,
        *,
        batch_size: int,
        drop_remainder: bool,
        epoch_arrays: EpochArrays,
        finish: Callable[[Any, Any, Any, Any], Any],
        num_parallel_calls: int = tf.data.AUTOTUNE,
        chunk_entries: int = CHUNK_ENTRIES,
    ) -> None:
        self.source = source
        self.chunk_entries = int(chunk_entries)
        self.pipeline = pipeline
        self.batch_size = int(batch_size)
        self.drop_remainder = bool(drop_remainder)
        self._epoch_arrays = epoch_arrays
        self._finish = finish
        self.num_parallel_calls = num_parallel_calls
        spec = tf.TensorSpec([None], tf.int64)
        self._load_chunk = tf.function(
            self._load_chunk_py,
            input_signature=[spec, spec, spec, tf.TensorSpec([None], tf.float32)],
            autograph=False,
        )

    def _load_chunk_py(self, idx: Any, pos: Any, key: Any, weight: Any) -> Any:
        """One chunk's entries: every draw at once, each distinct file read and decoded once."""
        # The draws by NumPy (same bits): the hash's graph nodes would be instantiated anew by
        # every iterator, delaying a new dataset's first step (bench_images: its iterator column).
        request = self.pipeline.request(tf.stack([key, pos], axis=1), on_host=True)
        example, ok = self.source.load_windows(idx, request)
        return example, idx, pos, key, weight * ok

    def _finish_batch(self, example: Any, idx: Any, pos: Any, key: Any, weight: Any) -> Any:
        example = self.pipeline.finish_batch(example, tf.stack([key, pos], axis=1))
        return self._finish(example, idx, pos, weight)

    def dataset(
        self,
        ranks: Sequence[int],
        first_epoch: int = 0,
        num_epochs: int | None = 1,
        start_step: int = 0,
    ) -> tf.data.Dataset:
        """Epoch after epoch of the ``ranks``' batches; element ``k`` is local rank ``k % L``'s.

        Args:
            ranks: The global ranks of the worker's local replicas, in local order.
            first_epoch: The sampler epoch of the first element.
            num_epochs: How many epochs (``None``: endless).
            start_step: Steps of ``first_epoch`` to skip, without reading them.
        """
        ranks = [int(r) for r in ranks]
        replicas, b = len(ranks), self.batch_size
        k = chunk_slots(b, replicas, self.chunk_entries)
        per_step = b // k
        start = int(start_step) * b
        pad_tail = not self.drop_remainder

        def rows(epoch: np.int64) -> tuple[np.ndarray, ...]:
            """An epoch's chunks: ``[chunks, L * k]`` entries, plus each chunk's step size.

            A partial last step (``drop_remainder=False``) is padded to a whole
            step with copies of its first entry (the same file: decoded once)
            and cut back to its size when emitted.
            """
            first = start if epoch == first_epoch else 0
            parts = [self._epoch_arrays(r, int(epoch), first) for r in ranks]
            columns = [np.stack(column) for column in zip(*parts, strict=True)]  # [L, n]
            n = columns[0].shape[1]
            steps, rest = divmod(n, b)
            sizes = [b] * steps
            if rest and pad_tail:
                pad = b - rest
                columns = [
                    np.concatenate([c, np.repeat(c[:, -rest:][:, :1], pad, 1)], 1) for c in columns
                ]
                steps, sizes = steps + 1, [*sizes, rest]
            out = []
            for c in columns:  # [L, steps * B] -> [steps * B/k chunks, L * k], chunk-major
                c = c[:, : steps * b].reshape(replicas, steps, per_step, k)
                out.append(np.ascontiguousarray(c.transpose(1, 2, 0, 3)).reshape(-1, replicas * k))
            valid = np.repeat(np.asarray(sizes, np.int64), per_step)
            return (*out, valid)

        def epoch_rows(epoch: tf.Tensor) -> tuple[tf.Tensor, ...]:
            out = tf.numpy_function(
                rows, [epoch], [tf.int64, tf.int64, tf.int64, tf.float32, tf.int64], stateful=False
            )
            for t in out[:4]:
                t.set_shape([None, replicas * k])
            out[4].set_shape([None])
            return tuple(out)

        def load(idx: Any, pos: Any, key: Any, weight: Any, valid: Any) -> Any:
            """One chunk, split into its ``L`` replicas' pieces (``tf.split``: no copy)."""
            loaded = self._load_chunk(idx, pos, key, weight)
            parts = [tf.split(t, replicas) for t in tf.nest.flatten(loaded)]
            pieces = tuple(
                tf.nest.pack_sequence_as(loaded, [p[j] for p in parts]) for j in range(replicas)
            )
            return pieces, valid

        def emit(pieces: tuple[Any, ...], valid: tf.Tensor) -> tf.data.Dataset:
            """The replicas' batches of one step, replica after replica (no copy)."""
            size = valid[0]

            def whole(t: tf.Tensor) -> tf.Tensor:  # [chunks, k, ...] -> [size, ...]
                t = tf.reshape(t, tf.concat([[-1], tf.shape(t)[2:]], 0))
                return t[:size] if pad_tail else t

            out = None
            for piece in pieces:
                one = tf.data.Dataset.from_tensors(tf.nest.map_structure(whole, piece))
                out = one if out is None else out.concatenate(one)
            return out

        last = _INF_EPOCHS if num_epochs is None else first_epoch + num_epochs
        # One flat stream of chunks over all epochs (every epoch a whole number of steps), so
        # the chunk map is one function instantiated once per iterator, not once per epoch.
        ds = tf.data.Dataset.range(first_epoch, last).map(plain(epoch_rows)).unbatch()
        ds = ds.map(plain(load), self.num_parallel_calls, deterministic=True)
        if per_step == 1:  # a chunk is a whole step: its pieces are the batches (no copy)
            ds = ds.flat_map(plain(lambda p, v: emit(_one_chunk(p), v[tf.newaxis])))
        else:  # batching a step's chunks concatenates each replica's pieces into its batch
            ds = ds.batch(per_step, drop_remainder=True).flat_map(plain(emit))
        options = tf.data.Options()
        # tf.data starts AUTOTUNE maps 16 calls wide: chunks racing for the cores delay the
        # first step (the first batch) several times over. A chunk decodes its files on every
        # core (tfdp.sources.windows.PARALLEL_DECODES): start with one chunk at a time, the
        # first, and let AUTOTUNE widen (measured: first batch 1.6-1.7x Model Garden's instead
        # of 2.5-3.8x starting one chunk per core, the same images/s after it).
        options.autotune.initial_parallelism = 1
        ds = ds.with_options(options)
        return ds.map(plain(self._finish_batch), self.num_parallel_calls, deterministic=True)
