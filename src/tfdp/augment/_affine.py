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

import functools
import math
from collections.abc import Callable, Sequence

import tensorflow as tf

from tfdp.augment._each import compiled
from tfdp.errors import ConfigError

#: The interpolation's arithmetic: double, as PIL's.
DTYPE = tf.float64

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
    axes: str = "xy",
    jit_compile: bool = False,
) -> tf.Tensor:
    """PIL's affine transform of each 8-bit-valued image by its matrix (see the module docstring).

    Args:
        images: float32 ``[B, H, W, C]``, integer values in ``[0, 255]``.
        matrices: ``[B, 6]``: PIL's ``(a, b, c, d, e, f)`` per sample (output -> input).
        interpolation: ``"nearest"``, ``"bilinear"`` or ``"bicubic"``.
        fill: The fill colour, one value per channel (or one for all).
        axes: ``"xy"``; or ``"x"`` for matrices that keep every row (``d, e, f = 0, 1,
            0``: shears and translations along x), ``"y"`` for those that keep every
            column (``a, b, c = 1, 0, 0``): PIL's interpolation across the kept axis
            weighs the pixel itself by exactly 1, so only the other axis' taps are
            read (4 per pixel instead of 16) -- the same values.
        jit_compile: Compile with XLA, in two parts for ``bilinear`` and ``bicubic``: the
            taps' gather, and their interpolation (one XLA function repeats the gather
            for every value it feeds: twice as slow). The values are the same either
            way but for the interpolation's rounding (XLA fuses multiply-adds).

    Returns:
        float32 ``[B, H, W, C]``, integer values.
    """
    gather, interpolate = _stages(interpolation, tuple(fill), axes, jit_compile)
    return interpolate(*gather(images, matrices))


@functools.cache
def _stages(
    interpolation: str, fill: tuple[float, ...], axes: str, jit_compile: bool
) -> tuple[Callable[..., tuple[tf.Tensor, ...]], Callable[..., tf.Tensor]]:
    """:func:`affine`'s two stages, each compiled with XLA (``jit_compile``) once per process."""
    if interpolation == "nearest":
        whole = functools.partial(_nearest_affine, fill=fill)
        return compiled(lambda images, m: (whole(images, m),), jit_compile), lambda out: out
    gather = functools.partial(_gather_taps, interpolation=interpolation, fill=fill, axes=axes)
    finish = functools.partial(_interpolate_taps, axes=axes)
    return compiled(gather, jit_compile), compiled(finish, jit_compile)


def _nearest_affine(images: tf.Tensor, matrices: tf.Tensor, fill: Sequence[float]) -> tf.Tensor:
    """PIL's nearest affine transform (exact: PIL's 16.16 fixed point, see :func:`_nearest`)."""
    shape = tf.shape(images)
    batch, height, width, channels = shape[0], shape[1], shape[2], shape[3]
    m = tf.cast(matrices, tf.float64)
    fill_value = tf.broadcast_to(tf.constant(fill, tf.float32), [channels])
    flat = tf.reshape(images, [batch, -1, channels])  # [B, HW, C]
    gy, gx = tf.meshgrid(tf.range(height), tf.range(width), indexing="ij")
    rows, cols = _nearest(m, tf.reshape(gx, [1, -1]), tf.reshape(gy, [1, -1]))
    h64, w64 = tf.cast(height, tf.int64), tf.cast(width, tf.int64)
    inside = (cols >= 0) & (cols < w64) & (rows >= 0) & (rows < h64)
    rows = tf.cast(tf.clip_by_value(rows, 0, h64 - 1), tf.int32)
    cols = tf.cast(tf.clip_by_value(cols, 0, w64 - 1), tf.int32)
    out = tf.gather(flat, rows * width + cols, batch_dims=1)
    out = tf.where(inside[..., tf.newaxis], out, fill_value)
    return tf.reshape(out, shape)


def _packed(images: tf.Tensor) -> tf.Tensor:
    """An RGB image's 8-bit values as one float32 per pixel, ``r + 256 g + 65536 b``.

    Exact (below ``2**24``), and a third of the values to gather: XLA's CPU
    gather costs per value, not per byte. Other channel counts are returned
    as they are.
    """
    if images.shape[-1] != 3:
        return images
    r, g, b = tf.unstack(images, 3, axis=-1)
    return (r + 256.0 * g + 65536.0 * b)[..., tf.newaxis]


def _unpacked(values: tf.Tensor, channel: int) -> tf.Tensor:
    """Channel ``channel`` of :func:`_packed` values (exact: powers of two, integers)."""
    if channel == 2:
        return tf.floor(values / 65536.0)
    if channel == 1:
        return tf.floor((values - 65536.0 * tf.floor(values / 65536.0)) / 256.0)
    return values - 256.0 * tf.floor(values / 256.0)


def _gather_taps(
    images: tf.Tensor,
    matrices: tf.Tensor,
    interpolation: str,
    fill: Sequence[float],
    axes: str,
) -> tuple[tf.Tensor, ...]:
    """Each pixel's taps (channels packed), fractions and whether it lies inside the image.

    Returns ``(values, dx, dy, inside, fill_value)``: ``values`` ``[rows, B, H, W, taps,
    P]`` (``rows`` 1 for ``axes`` ``"x"`` / ``"y"``, ``P`` values per pixel:
    :func:`_packed`), ``dx``, ``dy`` :data:`DTYPE` ``[B, H, W]``, ``inside`` bool ``[B,
    H, W]`` (for ``"y"`` all of the transposed image's), the fill colour ``[C]``.
    """
    m = tf.cast(matrices, tf.float64)
    if axes == "y":  # the transposed image, rows and columns (and the matrix) swapped
        images = tf.transpose(images, [0, 2, 1, 3])
    channels = images.shape[-1]
    if channels is None:
        raise ConfigError(
            "affine takes images whose channel count is known when the graph is built",
            argument="images",
        )
    packed = _packed(images)
    per_pixel = packed.shape[-1]
    fill_value = tf.broadcast_to(tf.constant(fill, tf.float32), [channels])
    shape = tf.shape(images)
    batch, height, width = shape[0], shape[1], shape[2]
    gx = tf.range(width, dtype=tf.float64)[tf.newaxis, tf.newaxis, :] + 0.5  # [1, 1, W]
    gy = tf.range(height, dtype=tf.float64)[tf.newaxis, :, tf.newaxis] + 0.5  # [1, H, 1]
    # [B, 1, 1] each; for "y" the transposed image's matrix (picked, not re-stacked: Grappler
    # broke the stacked matrix's broadcast for more than one sample)
    order = (4, 3, 5, 1, 0, 2) if axes == "y" else range(6)
    coef = [m[:, k, tf.newaxis, tf.newaxis] for k in order]
    xs = coef[0] * gx + coef[1] * gy + coef[2]  # [B, H, W], in double as PIL
    inside = (xs >= 0.0) & (xs < tf.cast(width, tf.float64))
    taps = 2 if interpolation == "bilinear" else 4
    pad = taps // 2  # the taps of x0 in [-1, W - 1] lie in [-pad, W - 1 + pad]
    x0 = tf.floor(xs - 0.5)
    dx = tf.cast(xs - 0.5 - x0, DTYPE)
    # PIL clamps each tap to the image: the image edge-padded, and each pixel's taps side by
    # side in its last axis, so that one gather per pixel (and row) reads all of them --
    # TensorFlow's gather costs per index and value, not per byte.
    col = tf.clip_by_value(tf.cast(x0, tf.int32) + 1, 0, width)  # first tap in the padding
    if axes != "xy":  # every row kept: the taps along x of the pixel's own row
        wide = _taps_side_by_side(packed, taps, pad)  # [B, H, W + 1, taps * P]
        values = tf.gather(wide, col, axis=2, batch_dims=2)[tf.newaxis]  # [1, B, H, W, taps P]
        values = tf.reshape(values, tf.concat([tf.shape(values)[:4], [taps, per_pixel]], 0))
        return values, dx, tf.zeros_like(dx), inside, fill_value
    ys = coef[3] * gx + coef[4] * gy + coef[5]
    inside &= (ys >= 0.0) & (ys < tf.cast(height, tf.float64))
    y0 = tf.floor(ys - 0.5)
    dy = tf.cast(ys - 0.5 - y0, DTYPE)
    rows = _edge_pad(packed, pad, axis=1)  # [B, H + 2 pad, W, P]
    wide = _taps_side_by_side(rows, taps, pad)  # [B, H + 2 pad, W + 1, taps * P]
    row = tf.clip_by_value(tf.cast(y0, tf.int32) + 1, 0, height)  # first tap row
    row = row + tf.reshape(tf.range(taps), [taps, 1, 1, 1])  # [taps, B, H, W]
    start = tf.reshape(tf.range(batch) * (height + 2 * pad), [1, -1, 1, 1])
    index = (start + row) * (width + 1) + col
    values = tf.gather(tf.reshape(wide, [-1, taps * per_pixel]), index)  # [rows, B, H, W, taps P]
    values = tf.reshape(values, tf.concat([tf.shape(values)[:4], [taps, per_pixel]], 0))
    return values, dx, dy, inside, fill_value


def _interpolate_taps(
    values: tf.Tensor,
    dx: tf.Tensor,
    dy: tf.Tensor,
    inside: tf.Tensor,
    fill_value: tf.Tensor,
    axes: str,
) -> tf.Tensor:
    """The taps of :func:`_gather_taps` interpolated as PIL's, channel by channel.

    Rows along x, then along y; truncated; ``fill_value`` ``[C]`` outside.
    Returns float32 ``[B, H, W, C]``.
    """
    rows, taps, per_pixel = values.shape[0], values.shape[-2], values.shape[-1]
    channels = fill_value.shape[0]
    packed = per_pixel != channels  # RGB as one value (_packed)
    interpolate = _linear if taps == 2 else _cubic
    out = []
    for c in range(channels):
        per_row = []
        for r in range(rows):
            at = [values[r, ..., t, 0 if packed else c] for t in range(taps)]
            at = [tf.cast(_unpacked(v, c) if packed else v, DTYPE) for v in at]
            per_row.append(interpolate(*at, dx))
        v = per_row[0] if rows == 1 else interpolate(*per_row, dy)
        v = tf.cast(tf.floor(tf.clip_by_value(v, 0.0, 255.0)), tf.float32)
        out.append(tf.where(inside, v, fill_value[c]))
    image = tf.stack(out, axis=-1)
    return tf.transpose(image, [0, 2, 1, 3]) if axes == "y" else image


def _edge_pad(images: tf.Tensor, pad: int, axis: int) -> tf.Tensor:
    """``images`` with ``pad`` copies of the first and last row (``axis=1``) or column (2)."""
    first = tf.gather(images, [0] * pad, axis=axis)
    last = tf.gather(images, tf.fill([pad], tf.shape(images)[axis] - 1), axis=axis)
    return tf.concat([first, images, last], axis=axis)


def _taps_side_by_side(images: tf.Tensor, taps: int, pad: int) -> tf.Tensor:
    """``[B, H, W + 1, taps * C]``: at column ``j``, edge-padded columns ``j .. j + taps - 1``."""
    padded = _edge_pad(images, pad, axis=2)  # [B, H, W + 2 pad, C]
    width = tf.shape(images)[2]
    return tf.concat([padded[:, :, k : k + width + 1] for k in range(taps)], axis=3)


def _nearest(m: tf.Tensor, gx: tf.Tensor, gy: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """PIL's nearest affine (``affine_fixed``): the source pixels (int64), in 16.16 fixed point.

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
    return rows, cols
