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
* :func:`resize_antialiased` -- ``tf.image.resize(..., antialias=True)`` runs
  ``ScaleAndTranslate``, whose vertical pass adds whole rows (vectorised) but
  whose horizontal pass adds pixels of ``C = 3`` values one by one: the
  image is resized as two vertical passes with two 2-D transposes between
  them, the same sums in the same order (1.7 vs 0.85 ms for a ~300x320
  window to 224x224, one thread).

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

#: ``tf.image.resize``'s methods that :func:`resize_antialiased` computes: their
#: ``ScaleAndTranslate`` kernels, whose value at 0 is exactly 1.
SEPARABLE = {"bicubic": "keyscubic", "bilinear": "triangle"}

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


def resize_antialiased(
    image: tf.Tensor, size: tuple[int, int], method: str, placement: tf.Tensor | None = None
) -> tf.Tensor:
    """``tf.image.resize(image, size, method, antialias=True)`` of one image, bit for bit, faster.

    ``ScaleAndTranslate`` first sums whole input rows into each output row
    (``[H, W, C]`` to ``[h, W, C]``: one vectorised loop over ``W * C``
    values per tap), then pixels into each output column (``[h, W, C]`` to
    ``[h, w, C]``: a loop over the ``C`` values of a pixel per tap, which
    the compiler cannot vectorise at ``C = 3``). Here both passes are row
    passes: the image viewed as ``[1, H, 1, W * C]`` (so the op's horizontal
    pass is over one column: a copy with weight 1), the rows' result
    transposed as a 2-D matrix to ``[W, C * h]`` and passed again, the result
    ``[w, C * h]`` transposed back to ``[h, w, C]``. Each output value is the
    same sum of the same products in the same order as the op's, so the same
    float32 (tests/test_resize_fast.py compares them).

    With ``placement`` (float32 ``[4]``: ``scale_y, scale_x, translation_y,
    translation_x``), it is ``ScaleAndTranslate`` with that scale and
    translation instead of the stretch of the image to ``size`` (output pixel
    ``i`` samples the image at ``(i + 0.5 - translation) / scale``), bit for
    bit too: a window stage that places its output inside the window
    (:class:`tfdp.augment.ResizeCenterCrop`).

    Args:
        image: ``[H, W, C]``, any real dtype.
        size: Output ``(height, width)``.
        method: A key of :data:`SEPARABLE`.
        placement: The scale and translation of each axis; None: ``size`` over
            the image's size, no translation (``tf.image.resize``).

    Returns:
        float32 ``[height, width, C]``.

    Example:
        >>> import tensorflow as tf
        >>> image = tf.reshape(tf.range(60, dtype=tf.float32), [4, 5, 3])
        >>> fast = resize_antialiased(image, (3, 2), "bicubic")
        >>> plain = tf.image.resize(image, (3, 2), "bicubic", antialias=True)
        >>> bool(tf.reduce_all(fast == plain)), tuple(fast.shape)
        (True, (3, 2, 3))
    """
    kernel = SEPARABLE[method]
    out_h, out_w = size
    shape = tf.shape(image)
    height, width, channels = shape[0], shape[1], shape[2]
    places: list[tuple[tf.Tensor, tf.Tensor] | None] = [None, None]
    if placement is not None:
        placement = tf.cast(placement, tf.float32)
        places = [(placement[0], placement[2]), (placement[1], placement[3])]
    rows = _row_pass(tf.reshape(image, [1, height, 1, width * channels]), out_h, kernel, places[0])
    across = tf.transpose(tf.reshape(rows, [out_h, width * channels]))  # [W, C, h]
    cols = _row_pass(tf.reshape(across, [1, width, 1, channels * out_h]), out_w, kernel, places[1])
    out = tf.transpose(tf.reshape(cols, [out_w * channels, out_h]))  # [h, w, C]
    out = tf.reshape(out, [out_h, out_w, channels])
    out.set_shape([out_h, out_w, image.shape[-1]])
    return out


def _row_pass(
    images: tf.Tensor, size: int, kernel: str, place: tuple[tf.Tensor, tf.Tensor] | None
) -> tf.Tensor:
    """``ScaleAndTranslate`` of ``[1, N, 1, K]`` to ``[1, size, 1, K]``.

    Scaled as resize does (``size / N``, no translation), or by ``place``'s
    ``(scale, translation)``.
    """
    if place is None:
        scale = tf.constant(float(size)) / tf.cast(tf.shape(images)[1], tf.float32)
        translation = tf.zeros([2])
    else:
        scale = place[0]
        translation = tf.stack([place[1], tf.constant(0.0)])
    return tf.raw_ops.ScaleAndTranslate(
        images=images,
        size=tf.constant([size, 1], tf.int32),
        scale=tf.stack([scale, tf.constant(1.0)]),
        translation=translation,
        kernel_type=kernel,
        antialias=True,
    )
