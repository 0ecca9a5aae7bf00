"""PIL's affine transform of 8-bit images in TensorFlow: timm's geometric RandAugment ops.

``Image.transform(size, AFFINE, (a, b, c, d, e, f), resample, fillcolor)``
maps output pixel ``(x, y)`` to the input point ``(a (x + .5) + b (y + .5) +
c, d (x + .5) + e (y + .5) + f)``; a point outside ``[0, W) x [0, H)`` takes
the fill colour (no blending with it at the border), any other is
interpolated from its neighbours, clamped at the edges: ``nearest``,
``bilinear`` (truncated to 8 bits) or ``bicubic`` -- PIL's transform cubic
(``a = -1``, unlike its resize's ``-0.5``), clipped and truncated
(``libImaging/Geometry.c``; nearest in PIL's 16.16 fixed point).
:func:`affine` is that, for a batch with one matrix per sample, in double
as PIL (the order of the sums differs: a value within rounding of an
integer may truncate one level apart).
Neither Keras' ``affine_transform`` nor TensorFlow's projective transform
has PIL's cubic or its border, hence this module.

:func:`rotation` gives ``Image.rotate``'s matrix (about the centre, no expand).

Example:
    >>> import tensorflow as tf
    >>> image = tf.reshape(tf.range(12, dtype=tf.float32), [1, 3, 4, 1])
    >>> shift = tf.constant([[1.0, 0.0, 1.0, 0.0, 1.0, 0.0]])  # x_in = x + 1
    >>> affine(image, shift, "bicubic", (99.0,))[0, :, :, 0].numpy().tolist()
    [[1.0, 2.0, 3.0, 99.0], [5.0, 6.0, 7.0, 99.0], [9.0, 10.0, 11.0, 99.0]]
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import tensorflow as tf

__all__ = ["AFFINE_INTERPOLATIONS", "affine", "rotation"]

#: The resampling filters of :func:`affine` (PIL's names).
AFFINE_INTERPOLATIONS = ("nearest", "bilinear", "bicubic")


def rotation(degrees: tf.Tensor, height: tf.Tensor, width: tf.Tensor) -> tf.Tensor:
    """PIL's ``Image.rotate(degrees)`` matrix ``[B, 6]`` (counter-clockwise, about the centre).

    Computed in float64 as PIL does (the angle taken modulo 360 first, the
    cosine and sine rounded to 15 decimals).

    Example:
        >>> import tensorflow as tf
        >>> m = rotation(tf.constant([90.0]), 4, 4)
        >>> [round(v, 6) + 0.0 for v in m[0].numpy().tolist()]
        [0.0, -1.0, 4.0, 1.0, 0.0, 0.0]
    """
    angle = -(tf.math.floormod(tf.cast(degrees, tf.float64), 360.0) * (math.pi / 180.0))
    cos, sin = (tf.round(v * 1e15) / 1e15 for v in (tf.cos(angle), tf.sin(angle)))  # round(v, 15)
    cx = tf.cast(width, tf.float64) / 2.0
    cy = tf.cast(height, tf.float64) / 2.0
    a, b, d, e = cos, sin, -sin, cos
    c = a * -cx + b * -cy + cx
    f = d * -cx + e * -cy + cy
    return tf.stack([a, b, c, d, e, f], axis=1)


def _cubic(v1: tf.Tensor, v2: tf.Tensor, v3: tf.Tensor, v4: tf.Tensor, d: tf.Tensor) -> tf.Tensor:
    """PIL's transform cubic (``a = -1``) of the taps at -1, 0, 1, 2, its expression and order."""
    p2 = -v1 + v3
    p3 = 2.0 * (v1 - v2) + v3 - v4
    p4 = -v1 + v2 - v3 + v4
    return v2 + d * (p2 + d * (p3 + d * p4))


def _linear(a: tf.Tensor, b: tf.Tensor, d: tf.Tensor) -> tf.Tensor:
    """PIL's ``BILINEAR(v, a, b, d)``: ``a + (b - a) * d``."""
    return a + (b - a) * d


def affine(
    images: tf.Tensor,
    matrices: tf.Tensor,
    interpolation: str,
    fill: Sequence[float],
) -> tf.Tensor:
    """PIL's affine transform of each 8-bit-valued image by its matrix (see the module docstring).

    Args:
        images: float32 ``[B, H, W, C]``, integer values in ``[0, 255]``.
        matrices: ``[B, 6]``: PIL's ``(a, b, c, d, e, f)`` per sample (output -> input).
        interpolation: ``"nearest"``, ``"bilinear"`` or ``"bicubic"``.
        fill: The fill colour, one value per channel (or one for all).

    Returns:
        float32 ``[B, H, W, C]``, integer values.
    """
    shape = tf.shape(images)
    batch, height, width, channels = shape[0], shape[1], shape[2], shape[3]
    m = tf.cast(matrices, tf.float64)
    flat = tf.reshape(images, [batch, -1, channels])  # [B, HW, C]

    def gather(rows: tf.Tensor, cols: tf.Tensor) -> tf.Tensor:
        rows = tf.clip_by_value(rows, 0, height - 1)
        cols = tf.clip_by_value(cols, 0, width - 1)
        return tf.gather(flat, rows * width + cols, batch_dims=1)

    gy, gx = tf.meshgrid(tf.range(height), tf.range(width), indexing="ij")
    gx, gy = tf.reshape(gx, [1, -1]), tf.reshape(gy, [1, -1])  # [1, HW]
    if interpolation == "nearest":
        out, inside = _nearest(m, gx, gy, height, width)
        out = gather(*out)
    else:
        xs, ys = (tf.cast(g, tf.float64) + 0.5 for g in (gx, gy))
        xs, ys = (  # [B, HW], in double as PIL
            m[:, 0:1] * xs + m[:, 1:2] * ys + m[:, 2:3],
            m[:, 3:4] * xs + m[:, 4:5] * ys + m[:, 5:6],
        )
        w_f, h_f = tf.cast(width, tf.float64), tf.cast(height, tf.float64)
        inside = (xs >= 0.0) & (xs < w_f) & (ys >= 0.0) & (ys < h_f)
        xs, ys = xs - 0.5, ys - 0.5
        x0, y0 = tf.floor(xs), tf.floor(ys)
        dx, dy = xs - x0, ys - y0
        x0, y0 = tf.cast(x0, tf.int32), tf.cast(y0, tf.int32)
        taps = 2 if interpolation == "bilinear" else 4
        first = 0 if taps == 2 else -1
        offsets = tf.range(first, first + taps)
        rows = y0[..., tf.newaxis, tf.newaxis] + offsets[:, tf.newaxis]  # [B, HW, taps, 1]
        cols = x0[..., tf.newaxis, tf.newaxis] + offsets  # [B, HW, 1, taps]
        values = tf.cast(gather(rows, cols), tf.float64)  # [B, HW, taps, taps, C]
        dx, dy = dx[..., tf.newaxis], dy[..., tf.newaxis]  # [B, HW, 1]
        if taps == 2:  # each row along x, then the rows along y, as PIL
            top, bottom = (_linear(values[:, :, r, 0], values[:, :, r, 1], dx) for r in (0, 1))
            out = _linear(top, bottom, dy)
        else:
            per_row = [_cubic(*(values[:, :, r, k] for k in range(4)), dx) for r in range(4)]
            out = _cubic(*per_row, dy)  # [B, HW, C]
        out = tf.cast(tf.floor(tf.clip_by_value(out, 0.0, 255.0)), tf.float32)
    fill_value = tf.broadcast_to(tf.constant(fill, tf.float32), [channels])
    out = tf.where(inside[..., tf.newaxis], out, fill_value)
    return tf.reshape(out, shape)


def _nearest(
    m: tf.Tensor, gx: tf.Tensor, gy: tf.Tensor, height: tf.Tensor, width: tf.Tensor
) -> tuple[tuple[tf.Tensor, tf.Tensor], tf.Tensor]:
    """PIL's nearest affine (``affine_fixed``): source pixels in 16.16 fixed point, and which exist.

    PIL's ``FIX(v) = floor(v * 65536 + 0.5)`` of the matrix (the offsets
    taken at the pixel centres), integer steps per pixel, ``>> 16``.
    """

    def fix(v: tf.Tensor) -> tf.Tensor:
        return tf.cast(tf.floor(v * 65536.0 + 0.5), tf.int64)

    a0, a1, a3, a4 = (fix(m[:, k : k + 1]) for k in (0, 1, 3, 4))
    a2 = fix(m[:, 2:3] + m[:, 0:1] * 0.5 + m[:, 1:2] * 0.5)
    a5 = fix(m[:, 5:6] + m[:, 3:4] * 0.5 + m[:, 4:5] * 0.5)
    x, y = tf.cast(gx, tf.int64), tf.cast(gy, tf.int64)
    cols = tf.bitwise.right_shift(a2 + y * a1 + x * a0, 16)
    rows = tf.bitwise.right_shift(a5 + y * a4 + x * a3, 16)
    inside = (cols >= 0) & (cols < tf.cast(width, tf.int64))
    inside &= (rows >= 0) & (rows < tf.cast(height, tf.int64))
    return (tf.cast(rows, tf.int32), tf.cast(cols, tf.int32)), inside
