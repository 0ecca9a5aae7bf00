"""Per-sample random draws from per-sample seeds: what an augmentation is handed.

This module owns the TensorFlow-facing functions over the counter hash
(:mod:`tfdp.random.counter_hash`): the samples' seeds (:func:`sample_seeds`)
and their check (:func:`as_seeds`), a
sample's uniforms (:func:`per_sample_uniform`), derived seeds
(:func:`fold_in`), uniforms mapped to integers (:func:`uniform_int`), and the
draws of several derived streams at once (:func:`folded_uniforms`), which a
loader may make on the host with NumPy -- the same bits, one
``tf.numpy_function`` node in its graph instead of the hash's few hundred.

Example:
    >>> import tensorflow as tf
    >>> seeds = tf.constant([[7, 0], [7, 1]], tf.int64)
    >>> folded, plain = folded_uniforms(seeds, [(1, 2), (None, 3)], on_host=True)
    >>> bool(tf.reduce_all(folded == per_sample_uniform(fold_in(seeds, 1), 2)))
    True
    >>> bool(tf.reduce_all(plain == per_sample_uniform(seeds, 3)))
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from tfdp._arrays import NUMPY, TENSORFLOW, ArrayOps
from tfdp.errors import ConfigError, ConfigTypeError
from tfdp.random.counter_hash import MAX_FOLD_DATA, fold_many, uniforms


def sample_seeds(keys: Any, positions: Any) -> tf.Tensor:
    """The seeds ``[B, 2]`` of ``B`` samples: ``[key, position]`` each, tfdp's convention.

    ``keys`` is :func:`tfdp.seeding.epoch_seed_key` of the run's seed and the
    epoch, ``positions`` each sample's place in the sampler's padded global
    list (both int64 ``[B]``): a sample's copies under Repeated Augmentation
    differ, and a rerun or a resumed run draws alike.

    Example:
        >>> import tensorflow as tf
        >>> sample_seeds(tf.constant([7, 7], tf.int64), tf.constant([0, 1], tf.int64)).numpy()
        array([[7, 0],
               [7, 1]])
    """
    return tf.stack([keys, positions], axis=1)


def as_seeds(seeds: Any) -> tf.Tensor:
    """``seeds`` checked as an integer ``[B, 2]`` and cast to int64.

    Raises:
        tfdp.errors.ConfigTypeError: For a non-integer dtype (also a TypeError).
        tfdp.errors.ConfigError: For another shape.

    Example:
        >>> as_seeds([[1, 2]]).dtype.name
        'int64'
    """
    seeds = tf.convert_to_tensor(seeds)
    if not seeds.dtype.is_integer:
        raise ConfigTypeError(
            f"must be an integer tensor [B, 2], got dtype {seeds.dtype.name}",
            argument="seeds",
        )
    if seeds.shape.rank is not None and (seeds.shape.rank != 2 or seeds.shape[1] not in (2, None)):
        raise ConfigError(f"must have shape [B, 2], got {seeds.shape}", argument="seeds")
    return tf.cast(seeds, tf.int64)


def per_sample_uniform(seeds: Any, n: int) -> tf.Tensor:
    """Draw ``n`` uniform numbers in ``[0, 1)`` per sample, statelessly.

    ``out[b, j]`` is the top 24 bits of MurmurHash3_x86_32 of the five 32-bit
    words ``(seeds[b, 0] low, high, seeds[b, 1] low, high, j)``, scaled by
    ``2**-24``; so it depends only on ``seeds[b]`` and ``j``: the same
    ``(seed, j)`` gives the same number whatever the batch, and drawing more
    numbers (a larger ``n``) leaves the first ones unchanged.

    Args:
        seeds: Integer tensor ``[B, 2]`` (any integer dtype; used as int64).
        n: Number of draws per sample, ``>= 0``.

    Returns:
        A float32 tensor ``[B, n]`` with values in ``[0, 1)``, multiples of ``2**-24``.

    Example:
        >>> import tensorflow as tf
        >>> u = per_sample_uniform(tf.constant([[7, 0], [7, 1]], tf.int64), 3)
        >>> tuple(u.shape), u.dtype.name
        ((2, 3), 'float32')
        >>> bool(tf.reduce_all((u >= 0) & (u < 1)))
        True
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ConfigError(f"must be a non-negative int, got {n!r}", argument="n")
    return uniforms(as_seeds(seeds), n, TENSORFLOW)


def fold_in(seeds: Any, data: int) -> tf.Tensor:
    """Derive per-sample seeds for an independent random stream ``data``.

    ``seed[:, 0]`` is replaced by a 63-bit hash of ``(seed[b, 0], seed[b, 1],
    data)`` (a different hash salt from :func:`per_sample_uniform`), and
    ``seed[:, 1]`` is kept, so samples with distinct positions keep distinct
    seeds. :class:`tfdp.augment.Compose` gives stage ``i`` the seeds ``fold_in(seeds, i)``.

    Args:
        seeds: Integer tensor ``[B, 2]``.
        data: Stream index, an int in ``[0, 2**31 - 1]``.

    Returns:
        An int64 tensor ``[B, 2]``.

    Example:
        >>> import tensorflow as tf
        >>> seeds = tf.constant([[3, 0], [3, 1]], tf.int64)
        >>> folded = fold_in(seeds, 1)
        >>> folded[:, 1].numpy().tolist(), bool(tf.reduce_all(folded[:, 0] >= 0))
        ([0, 1], True)
    """
    if isinstance(data, bool) or not isinstance(data, int) or not 0 <= data <= MAX_FOLD_DATA:
        raise ConfigError(f"must be an int in [0, {MAX_FOLD_DATA}], got {data!r}", argument="data")
    return fold_many(as_seeds(seeds), [data], TENSORFLOW)[:, 0]


def uniform_int(u: tf.Tensor, count: Any) -> tf.Tensor:
    """Map uniforms ``u`` in ``[0, 1)`` to int32 in ``[0, count)`` (``count >= 1``, broadcast).

    Example:
        >>> import tensorflow as tf
        >>> uniform_int(tf.constant([0.0, 0.5, 0.99]), 4).numpy().tolist()
        [0, 2, 3]
    """
    count = tf.cast(count, tf.int32)
    value = tf.cast(u * tf.cast(count, tf.float32), tf.int32)
    return tf.minimum(value, count - 1)  # guard float rounding of u * count up to count


def _folded_uniforms(
    seeds: Any, streams: Sequence[tuple[int | None, int]], xp: ArrayOps
) -> list[Any]:
    """:func:`folded_uniforms` in the array library ``xp``: two hash passes in all."""
    folds = sorted({index for index, _ in streams if index is not None})
    folded = fold_many(seeds, folds, xp) if folds else None
    per_stream = [seeds if index is None else folded[:, folds.index(index)] for index, _ in streams]
    draws = uniforms(xp.stack(per_stream, axis=1), max(n for _, n in streams), xp)
    return [draws[:, k, :n] for k, (_, n) in enumerate(streams)]


def folded_uniforms(
    seeds: tf.Tensor, streams: Sequence[tuple[int | None, int]], *, on_host: bool = False
) -> list[tf.Tensor]:
    """``per_sample_uniform(fold_in(seeds, i), n)`` for every stream ``(i, n)``, at once.

    Stream index ``i = None`` draws from ``seeds`` as they are. One hash pass
    folds every stream's seeds, one draws every stream's numbers: the values
    of the separate calls, with a smaller graph. With ``on_host`` the same
    numbers come from NumPy, in one ``tf.numpy_function`` (a graph that is
    instantiated often, such as a ``tf.data`` function's, then starts faster;
    the host call costs a fraction of a millisecond).

    Args:
        seeds: int64 ``[B, 2]``.
        streams: ``(stream index or None, number of draws >= 1)`` pairs, at least one.
        on_host: Draw with NumPy.

    Returns:
        float32 ``[B, n]`` per stream, in order.

    Example:
        >>> import tensorflow as tf
        >>> seeds = tf.constant([[0, 4]], tf.int64)
        >>> [tuple(u.shape) for u in folded_uniforms(seeds, [(0, 2), (3, 5)])]
        [(1, 2), (1, 5)]
    """
    streams = [(index, int(n)) for index, n in streams]
    if not on_host:
        return _folded_uniforms(seeds, streams, TENSORFLOW)

    def draw(host_seeds: np.ndarray) -> list[np.ndarray]:
        return [np.ascontiguousarray(d) for d in _folded_uniforms(host_seeds, streams, NUMPY)]

    out = tf.numpy_function(
        draw, [seeds], [tf.float32] * len(streams), stateful=False, name="host_draws"
    )
    if isinstance(out, tf.Tensor):  # eagerly, one output comes back bare
        out = [out]
    for t, (_, n) in zip(out, streams, strict=True):
        t.set_shape([seeds.shape[0], n])
    return out
