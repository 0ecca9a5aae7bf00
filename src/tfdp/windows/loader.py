"""The window loader: a worker's replicas' batches, loaded by windows in chunks.

This module owns :class:`WindowedBatches`, the loader of
:class:`tfdp.DistributedInput` (a :class:`tfdp.input.loader.Loader`) for a
source that can decode windows (:class:`tfdp.windows.contract.WindowSource`,
e.g. a JPEG image folder) under an augmentation that starts with a window stage
(:func:`tfdp.windows.plan.split_window`: :class:`~tfdp.augment.RandomResizedCrop`,
:class:`~tfdp.augment.CenterCrop`, :class:`~tfdp.augment.ResizeCenterCrop`);
:func:`tfdp.input.pipeline.make_loader` picks it. It lives here, beside the
window plan and the decoding it drives, and knows the input layer through
:class:`tfdp.windows.contract.EpochEntries` (the planned entries) and
:class:`tfdp.windows.contract.ElementFinisher` (their last touch) only.

How a step of a worker with ``L`` local replicas and ``B`` examples per
replica is loaded: the step's ``L * B`` entries are cut into chunks of ``k``
consecutive slots of *all* ``L`` replicas (``L * k`` entries, about
:data:`~tfdp.windows.parallelism.CHUNK_ENTRIES`). Each chunk is one element of
a parallel, order-keeping ``tf.data`` map: the random draws of all its
entries are made at once, then the source reads and decodes each distinct file of the chunk once and
finishes every entry's window. Repeated Augmentation puts the ``R`` copies
of a sample at consecutive global positions, i.e. on consecutive ranks in
the same slot (or the next), so they share a chunk and one read and decode.
The chunks of a step are then reassembled into the ``L`` replica batches,
which the worker's dataset yields round-robin (element ``k`` for local
replica ``k mod L``) -- the same elements, in the same order, as the
per-rank pipelines, with the same seeds ``[key(seed, epoch), position]``.

What a new dataset costs (``DistributedInput.epoch(e)``, a resumed run): the
chunk loader and every per-element function of a worker's stream are
traced ``tf.function`` objects, once per input (without AutoGraph: plain graph
code), so building a dataset traces only thin calls to them; its iterator
instantiates the loader's graph, with only the Grappler passes that pay for it
(:func:`tfdp._compat.fast.graph.lightly_optimized_map`), and that graph is kept small: the
random draws and the windows are planned by NumPy on the host (one node each),
other formats are decoded by a function called only when a chunk holds one
(:func:`tfdp.windows.decode.decode_windows`), and no large constant sits in it
(a 224x224 one cost every iterator 70 ms). How wide it runs:
:mod:`tfdp.windows.parallelism`.

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
    >>> type(inp.loader).__name__
    'WindowedBatches'
    >>> [tuple(x.shape) for x, y in inp.epoch(0)]
    [(2, 8, 8, 3), (2, 8, 8, 3), (2, 8, 8, 3)]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf

from tfdp._autograph import plain
from tfdp._compat.fast.graph import lightly_optimized_map
from tfdp._util import deterministic_unsharded
from tfdp.random import sample_seeds
from tfdp.windows.contract import ElementFinisher, EpochEntries, WindowSource
from tfdp.windows.parallelism import CHUNK_ENTRIES, INITIAL_CHUNK_CALLS
from tfdp.windows.plan import WindowPipeline

_INF_EPOCHS = 2**62


class _StreamFunctions(NamedTuple):
    """The traced per-element functions of one worker's stream (see ``WindowedBatches``)."""

    epoch_rows: Any  # (epoch, skipped entries) -> the epoch's chunk rows
    load: Any  # one chunk row -> its replicas' pieces
    emit: Any  # one step's pieces -> a dataset of the replicas' batches
    finish: Any  # a replica's batch -> the batch stages applied (None: no batch stages)
    per_step: int  # chunks per step


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

    Made by :func:`tfdp.input.pipeline.make_loader` (which says when the window path applies).

    Args:
        source: A :class:`tfdp.windows.contract.WindowSource`.
        pipeline: The augmentation split by :func:`tfdp.windows.plan.split_window`.
        entries: Each rank's planned entries of an epoch
            (:class:`tfdp.windows.contract.EpochEntries`).
        elements: Each loaded batch's last touch into the element the input
            yields (:class:`tfdp.windows.contract.ElementFinisher`).
        batch_size: Examples per replica per step.
        drop_remainder: Drop the last partial batch of an epoch.
        num_parallel_calls: Parallelism of the chunk map.
        chunk_entries: Entries per chunk to aim for (see :func:`chunk_slots`).
    """

    def __init__(
        self,
        source: WindowSource,
        pipeline: WindowPipeline,
        entries: EpochEntries,
        elements: ElementFinisher,
        *,
        batch_size: int,
        drop_remainder: bool,
        num_parallel_calls: int = tf.data.AUTOTUNE,
        chunk_entries: int = CHUNK_ENTRIES,
    ) -> None:
        self.source = source
        self.chunk_entries = int(chunk_entries)
        self.pipeline = pipeline
        self.entries, self.elements = entries, elements
        self.batch_size = int(batch_size)
        self.drop_remainder = bool(drop_remainder)
        self.num_parallel_calls = num_parallel_calls
        spec = tf.TensorSpec([None], tf.int64)
        self._load_chunk = tf.function(
            self._load_chunk_py,
            input_signature=[spec, spec, spec, tf.TensorSpec([None], tf.float32)],
            autograph=False,
        )
        self._streams: dict[tuple[int, ...], _StreamFunctions] = {}

    def _load_chunk_py(self, idx: Any, pos: Any, key: Any, weight: Any) -> Any:
        """One chunk's entries: every draw at once, each distinct file read and decoded once."""
        # The draws by NumPy (same bits): the hash's graph nodes would be instantiated anew by
        # every iterator, delaying a new dataset's first step (bench_images: its iterator column).
        request = self.pipeline.request(sample_seeds(key, pos), on_host=True)
        example, ok = self.source.load_windows(idx, request)
        return example, idx, pos, key, weight * ok

    def _finish_batch(self, example: Any, idx: Any, pos: Any, key: Any, weight: Any) -> Any:
        example = self.pipeline.finish_batch(example, sample_seeds(key, pos))
        return self.elements.finish_element(example, idx, pos, weight)

    def _functions(self, ranks: tuple[int, ...]) -> _StreamFunctions:
        """The per-element functions of the ``ranks``' stream, traced once and kept.

        A new dataset (a new epoch, a resumed run) only wraps these: tf.data
        traces a thin call to each instead of its whole graph (the build's
        cost), and no per-dataset Python value enters them (the epoch and the
        skipped entries are arguments).
        """
        cached = self._streams.get(ranks)
        if cached is not None:
            return cached
        replicas, b = len(ranks), self.batch_size
        k = chunk_slots(b, replicas, self.chunk_entries)
        per_step = b // k
        pad_tail = not self.drop_remainder
        width = replicas * k
        scalar = tf.TensorSpec([], tf.int64)

        def rows(epoch: np.int64, start: np.int64) -> tuple[np.ndarray, ...]:
            """An epoch's chunks: ``[chunks, L * k]`` entries, plus each chunk's step size.

            ``start`` entries of every rank are skipped (a resumed epoch). A
            partial last step (``drop_remainder=False``) is padded to a whole
            step with copies of its first entry (the same file: decoded once)
            and cut back to its size when emitted.
            """
            parts = [self.entries.rank_entries(r, int(epoch), int(start)) for r in ranks]
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
                out.append(np.ascontiguousarray(c.transpose(1, 2, 0, 3)).reshape(-1, width))
            valid = np.repeat(np.asarray(sizes, np.int64), per_step)
            return (*out, valid)

        @tf.function(input_signature=[scalar, scalar], autograph=False)
        def epoch_rows(epoch: tf.Tensor, start: tf.Tensor) -> tuple[tf.Tensor, ...]:
            out = tf.numpy_function(
                rows,
                [epoch, start],
                [tf.int64, tf.int64, tf.int64, tf.float32, tf.int64],
                stateful=False,
            )
            for t in out[:4]:
                t.set_shape([None, width])
            out[4].set_shape([None])
            return tuple(out)

        row = [tf.TensorSpec([width], tf.int64)] * 3 + [tf.TensorSpec([width], tf.float32)]

        @tf.function(input_signature=[*row, scalar], autograph=False)
        def load(idx: Any, pos: Any, key: Any, weight: Any, valid: Any) -> Any:
            """One chunk, split into its ``L`` replicas' pieces (``tf.split``: no copy)."""
            loaded = self._load_chunk(idx, pos, key, weight)
            parts = [tf.split(t, replicas) for t in tf.nest.flatten(loaded)]
            pieces = tuple(
                tf.nest.pack_sequence_as(loaded, [p[j] for p in parts]) for j in range(replicas)
            )
            return pieces, valid

        # Without batch stages the input layer's finish (weights, ids) is cheap: applied as
        # the batches are emitted, with no map of its own.
        stages = bool(self.pipeline.batch_stages)

        def emit_py(pieces: tuple[Any, ...], valid: tf.Tensor) -> tf.data.Dataset:
            """The replicas' batches of one step, replica after replica (no copy)."""
            size = valid[0] if per_step > 1 else valid

            def whole(t: tf.Tensor) -> tf.Tensor:  # [chunks, k, ...] -> [size, ...]
                if per_step > 1:
                    t = tf.reshape(t, tf.concat([[-1], tf.shape(t)[2:]], 0))
                return t[:size] if pad_tail else t

            out = None
            for piece in pieces:
                piece = tf.nest.map_structure(whole, piece)
                one = tf.data.Dataset.from_tensors(piece if stages else self._finish_batch(*piece))
                out = one if out is None else out.concatenate(one)
            return out

        loaded = load.get_concrete_function().structured_outputs
        loaded_spec = tf.nest.map_structure(lambda t: tf.TensorSpec(t.shape, t.dtype), loaded)
        if per_step > 1:  # the step's chunks, batched
            loaded_spec = tf.nest.map_structure(
                lambda s: tf.TensorSpec([per_step, *s.shape], s.dtype), loaded_spec
            )
        emit = tf.function(emit_py, input_signature=list(loaded_spec), autograph=False)
        finish = None
        if stages:
            element = emit.get_concrete_function().structured_outputs.element_spec
            finish = tf.function(self._finish_batch, input_signature=list(element), autograph=False)
        functions = _StreamFunctions(epoch_rows, load, emit, finish, per_step)
        self._streams[ranks] = functions
        return functions

    def rank(
        self, rank: int, first_epoch: int, num_epochs: int | None, start_step: int
    ) -> tf.data.Dataset:
        """Epoch after epoch of global rank ``rank``'s batches (a worker of one rank)."""
        return self.worker([rank], first_epoch, num_epochs, start_step)

    def worker(
        self, ranks: Sequence[int], first_epoch: int, num_epochs: int | None, start_step: int
    ) -> tf.data.Dataset:
        """Epoch after epoch of the ``ranks``' batches; element ``k`` is local rank ``k % L``'s.

        Args:
            ranks: The global ranks of the worker's local replicas, in local order.
            first_epoch: The sampler epoch of the first element.
            num_epochs: How many epochs (``None``: endless).
            start_step: Steps of ``first_epoch`` to skip, without reading them.
        """
        fns = self._functions(tuple(int(r) for r in ranks))
        start = int(start_step) * self.batch_size
        first = int(first_epoch)

        def epoch_rows(epoch: tf.Tensor) -> tuple[tf.Tensor, ...]:
            skipped = tf.where(tf.equal(epoch, first), tf.constant(start, tf.int64), 0)
            return fns.epoch_rows(epoch, skipped)

        last = _INF_EPOCHS if num_epochs is None else first + num_epochs
        # One flat stream of chunks over all epochs (every epoch a whole number of steps), so
        # the chunk map is one function instantiated once per iterator, not once per epoch.
        ds = tf.data.Dataset.range(first, last).map(plain(epoch_rows)).unbatch()
        # The loader is the largest function of the stream: each new iterator instantiates it,
        # and Grappler's full run over it cost more time than any other part of a new
        # dataset's first batch (bench_images: 150 ms), for no speed (see the function).
        ds = lightly_optimized_map(ds, fns.load, self.num_parallel_calls)
        if fns.per_step > 1:  # batching a step's chunks concatenates each replica's pieces
            ds = ds.batch(fns.per_step, drop_remainder=True)
        ds = ds.flat_map(plain(fns.emit))
        options = tf.data.Options()
        # One chunk at first, then AUTOTUNE widens (why: tfdp.windows.parallelism).
        options.autotune.initial_parallelism = INITIAL_CHUNK_CALLS
        ds = ds.with_options(options)
        if fns.finish is not None:
            ds = ds.map(plain(fns.finish), self.num_parallel_calls, deterministic=True)
        return deterministic_unsharded(ds)
