"""Faster TensorFlow for the same values: the kernel and graph tricks the stages rely on.

Each function here gives exactly what the plain TensorFlow expression gives
(the tests compare the stages bit for bit), only faster on CPU, where tfdp
measured it (``benchmarks/bench_images.py``, ``bench_input.py``):

* :func:`per_channel` -- broadcasting a length-``C`` vector over ``[..., W, C]``
  runs about 6x slower than a plain elementwise op at ``C = 3`` in TensorFlow's
  CPU kernels: the images are viewed as ``[..., W * C]`` and the values tiled
  ``W`` times. A small image gets a whole-image constant instead, but only up
  to :data:`WHOLE_IMAGE` values: every instantiation of a graph copies its
  constants, and a 224x224x3 one (588 KiB) cost each new ``tf.data`` iterator
  of the window path 70 ms (the first batch of a new epoch), while the tiled
  row is as fast (0.108 vs 0.092 ms per 224x224x3 image, one thread).
* :func:`reverse` -- TensorFlow reverses the middle axis of a rank-3 tensor
  with few channels in a dedicated kernel, several times faster than a rank-4
  reverse: a batch ``[B, H, W, C]`` is viewed as ``[B * H, W, C]`` for a
  left-right flip.
* :func:`reverse_where` -- picking whole samples with ``raw_ops.Select`` and a
  rank-1 condition is several times faster than ``tf.where`` broadcasting a
  ``[B, 1, 1, 1]`` mask (SelectV2); a batch of one (a loader's per-image
  stage) reverses only when drawn, under a ``tf.cond`` that costs much less
  than the reverse.
* :func:`select` -- ``tf.where`` (``SelectV2``) of three tensors of one shape
  runs through its broadcasting kernel, 8x slower than ``raw_ops.Select`` of
  the same tensors (0.82 vs 0.10 ms for a 224x224x3 image, one thread).

Example:
    >>> import tensorflow as tf
    >>> images = tf.reshape(tf.range(6), [2, 1, 3, 1])
    >>> reverse_where(images, tf.constant([True, False]), 2)[:, 0, :, 0].numpy().tolist()
    [[2, 1, 0], [3, 4, 5]]
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import tensorflow as tf

from tfdp.errors import ConfigError

__all__ = ["WHOLE_IMAGE", "per_channel", "reverse", "reverse_where", "select"]

#: Up to this many values per image (16 KiB), :func:`per_channel` uses a whole-image constant.
WHOLE_IMAGE = 2**12


def per_channel(images: tf.Tensor, values: float | tuple[float, ...], op: Callable) -> tf.Tensor:
    """``op(images, values)`` with ``values`` per channel (last axis) or one scalar.

    Example:
        >>> import tensorflow as tf
        >>> per_channel(tf.ones([1, 1, 2, 3]), (1.0, 2.0, 3.0), tf.multiply)[0, 0].numpy().tolist()
        [[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]]
    """
    if not isinstance(values, tuple):
        return op(images, tf.constant(values, tf.float32))
    channels = len(values)
    if images.shape[-1] is not None and images.shape[-1] != channels:
        raise ConfigError(
            f"{channels} per-channel values for images with {images.shape[-1]} channels"
        )
    if images.shape[1:].is_fully_defined() and images.shape[1:].num_elements() <= WHOLE_IMAGE:
        # The values of a whole image, built once: an elementwise op, no broadcast.
        image = np.broadcast_to(np.float32(values), images.shape[1:])
        return op(images, tf.constant(image[np.newaxis]))
    shape = tf.shape(images)
    wide = tf.reshape(images, tf.concat([shape[:-2], [-1]], 0))
    out = op(wide, tf.tile(tf.constant(values, tf.float32), shape[-2:-1]))
    out = tf.reshape(out, shape)
    out.set_shape(images.shape)
    return out


def reverse(images: tf.Tensor, axis: int) -> tf.Tensor:
    """``tf.reverse(images, [axis])`` of a batch ``[B, H, W, C]``, the fast way for the width.

    Example:
        >>> import tensorflow as tf
        >>> reverse(tf.reshape(tf.range(3), [1, 1, 3, 1]), 2)[0, 0, :, 0].numpy().tolist()
        [2, 1, 0]
    """
    if axis != 2 or images.shape[-1] not in (1, 2, 3, 4):
        return tf.reverse(images, [axis])
    shape = tf.shape(images)
    rows = tf.reshape(images, tf.concat([[-1], shape[2:]], 0))
    out = tf.reshape(tf.reverse(rows, [1]), shape)
    out.set_shape(images.shape)
    return out


def reverse_where(images: tf.Tensor, flip: tf.Tensor, axis: int) -> tf.Tensor:
    """The batch with the samples where ``flip`` (bool ``[B]``) is true reversed along ``axis``."""
    if images.shape[0] == 1:
        return tf.cond(flip[0], lambda: reverse(images, axis), lambda: images)
    return tf.raw_ops.Select(condition=flip, x=reverse(images, axis), y=images)


def select(condition: tf.Tensor, x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
    """``tf.where(condition, x, y)`` of three tensors of one shape (checked when it runs).

    Example:
        >>> import tensorflow as tf
        >>> select(tf.constant([True, False]), tf.constant([1, 2]), tf.constant([3, 4])).numpy()
        array([1, 4], dtype=int32)
    """
    return tf.raw_ops.Select(condition=condition, x=x, y=y)
