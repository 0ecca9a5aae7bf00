"""One pass over a TFRecord lane: which records it reads, keeps, and in which order it yields them.

This module owns the arithmetic of :meth:`TFRecordSource.stream
<tfdp.sources.TFRecordSource.stream>`'s lane passes. A lane's ``m``-th
stream record is, with the block shuffle of ``B`` records, the record
``b * B + perm_b[m - b * B]`` the lane read (``b = m // B``, ``perm_b`` the
permutation ``stateless_shuffle`` applies to block ``b``: the same for the
records as for ``tf.range`` of the block's size with the same seed, as the
shuffle moves whole rows whatever they hold -- ``tests/test_sources_tfrecord.py``
checks it). So a pass computes which records it needs from the indices alone
(:func:`block_sources`), drops every other record as soon as it is read, parses
each record it keeps once, and only then puts them in stream order
(:func:`in_stream_order`) and repeats them (:func:`repeated`): no copy of a
record the pass does not yield, one parse per distinct record.

Example:
    >>> import numpy as np, tensorflow as tf
    >>> src = block_sources(np.array([0, 1, 2]), tf.constant(3, tf.int64),
    ...                     tf.constant(7, tf.int64), block=4)
    >>> records = tf.constant([b"a", b"b", b"c"])
    >>> shuffled = tf.random.experimental.stateless_shuffle(
    ...     records, seed=tf.constant([7, 0], tf.int64))
    >>> tf.gather(records, src).numpy().tolist() == shuffled.numpy().tolist()
    True
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from tfdp._autograph import plain

__all__ = ["block_sources", "in_stream_order", "kept_mask", "repeated"]


def block_sources(distinct: np.ndarray, records: tf.Tensor, key: tf.Tensor, block: int) -> Any:
    """The lane records (reading order) behind the stream positions ``distinct`` (int64 tensor).

    Args:
        distinct: Increasing positions in the lane's stream, each ``< records``.
        records: The lane's records (int64 scalar tensor): its last block's size.
        key: The lane's block-shuffle key (:func:`tfdp.seeding.stream_block_key`).
        block: The shuffle's block size ``B`` (``> 1``).

    Example:
        >>> import numpy as np, tensorflow as tf
        >>> src = block_sources(np.arange(5), tf.constant(5, tf.int64),
        ...                     tf.constant(1, tf.int64), block=2)
        >>> sorted(src.numpy().tolist()[:2]), sorted(src.numpy().tolist()[2:4]), int(src[4])
        ([0, 1], [2, 3], 4)
    """
    blocks = distinct // block
    parts = []
    for b in np.unique(blocks):
        start = int(b) * block
        size = tf.minimum(tf.constant(block, tf.int64), records - start)
        perm = tf.random.experimental.stateless_shuffle(
            tf.range(size, dtype=tf.int64), seed=tf.stack([key, tf.constant(b, tf.int64)])
        )
        parts.append(start + tf.gather(perm, distinct[blocks == b] - start))
    return tf.concat(parts, 0)


def kept_mask(sources: tf.Tensor, length: int) -> Any:
    """A ``[length]`` bool tensor, True at ``sources`` (record indices below ``length``).

    Example:
        >>> import tensorflow as tf
        >>> kept_mask(tf.constant([3, 0], tf.int64), 5).numpy().tolist()
        [True, False, False, True, False]
    """
    hits = tf.scatter_nd(sources[:, None], tf.ones_like(sources, tf.int32), [length])
    return hits > 0


def in_stream_order(
    kept: tf.data.Dataset,
    sources: tf.Tensor,
    distinct: np.ndarray,
    block: int,
    times: np.ndarray | None = None,
) -> tf.data.Dataset:
    """``kept``'s examples, one per record of ``sources``, in the order of ``sources``.

    Args:
        kept: ``(record index, example)`` of the records ``sources`` holds, in
            reading order (increasing index), each once.
        sources: :func:`block_sources` of ``distinct``.
        distinct: The increasing stream positions ``sources`` came from.
        block: The shuffle's block size: ``sources`` permutes records within
            each block, so a block's records are gathered (one batch) and put
            in order before the next block's are read.
        times: How many times each position of ``distinct`` is yielded
            (default once): the rows of one example, not copies of the record.

    Example:
        >>> import numpy as np, tensorflow as tf
        >>> kept = tf.data.Dataset.from_tensor_slices(
        ...     (tf.constant([0, 1, 2, 5], tf.int64), tf.constant([10, 11, 12, 15])))
        >>> ds = in_stream_order(kept, tf.constant([1, 2, 0, 5], tf.int64), np.arange(4), 3)
        >>> [int(x) for x in ds]
        [11, 12, 10, 15]
    """
    blocks = distinct // block
    present, sizes = np.unique(blocks, return_counts=True)
    first = int(present[0])
    # Where each present block's positions start in ``sources``, by block - first.
    table = np.zeros(int(present[-1]) - first + 2, np.int64)
    table[present - first + 1] = sizes
    starts = tf.constant(np.cumsum(table), tf.int64)
    repeats = tf.constant(np.ones(distinct.size, np.int64) if times is None else times, tf.int64)

    def ordered(ids: tf.Tensor, examples: Any) -> tf.data.Dataset:
        b = ids[0] // block - first
        wanted = sources[starts[b] : starts[b + 1]]
        rows = tf.repeat(tf.searchsorted(ids, wanted), repeats[starts[b] : starts[b + 1]])
        return tf.data.Dataset.from_tensor_slices(
            tf.nest.map_structure(lambda x: tf.gather(x, rows), examples)
        )

    if present.size == 1:
        batches = kept.batch(int(sizes[0]))
    else:
        size_of = tf.constant(table[1:], tf.int64)
        batches = kept.group_by_window(
            key_func=plain(lambda i, _: i // block - first),
            reduce_func=plain(lambda b, window: window.batch(size_of[b])),
            window_size_func=plain(lambda b: size_of[b]),
        )
    return batches.flat_map(plain(ordered))


def repeated(ds: tf.data.Dataset, times: np.ndarray) -> tf.data.Dataset:
    """Each element of ``ds`` repeated ``times`` of its position (not copied).

    Example:
        >>> import numpy as np, tensorflow as tf
        >>> ds = repeated(tf.data.Dataset.range(3), np.array([2, 1, 3]))
        >>> [int(x) for x in ds]
        [0, 0, 1, 2, 2, 2]
    """
    if times.max(initial=1) == 1:
        return ds
    counts = tf.constant(times, tf.int64)
    return ds.enumerate().flat_map(
        plain(lambda i, example: tf.data.Dataset.from_tensors(example).repeat(counts[i]))
    )
