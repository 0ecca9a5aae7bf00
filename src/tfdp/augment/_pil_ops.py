"""PIL's 8-bit colour operations in TensorFlow: the values timm's RandAugment and ColorJitter get.

timm augments PIL images: every op reads and writes 8-bit values, with PIL's
own rounding. This module writes those operations once for batches of
float32 images holding integer values in ``[0, 255]`` (:func:`quantize` makes
them), with one argument per sample, and gives PIL's values:

==================  =========================================================================
function            PIL's definition (Pillow 13), and how it is reproduced
==================  =========================================================================
``blend``           ``Image.blend``: ``trunc(deg + f * (img - deg))`` in float32, clipped;
                    the base of ``ImageEnhance`` -- exact
``grayscale``       ``convert("L")``: ``(19595 R + 38470 G + 7471 B + 2**15) >> 16`` -- exact
``color``           ``ImageEnhance.Color``: blend with the grayscale image -- exact
``contrast``        ``ImageEnhance.Contrast``: blend with the grayscale mean rounded half up,
                    from integer sums -- exact
``brightness``      ``ImageEnhance.Brightness``: blend with black -- exact
``sharpness``       ``ImageEnhance.Sharpness``: blend with the ``SMOOTH`` filter (3x3, 5 in
                    the centre, /13, rounded, border pixels kept) -- exact (integer sums)
``invert``,         ``ImageOps.invert`` / ``posterize`` / ``solarize`` and timm's
``posterize``,      ``solarize_add``: their lookup tables as arithmetic -- exact; a posterize
``solarize``,       to 0 bits gives black (what Pillow gave before it refused 0 bits, which
``solarize_add``    timm's increasing posterize asks for at magnitude 10)
``hue``             torchvision's PIL ``adjust_hue``: PIL's 8-bit HSV (``Convert.c``, its
                    float and double steps), the hue byte shifted by ``int(f * 255)``
                    modulo 256 -- exact
``autocontrast``    ``ImageOps.autocontrast`` (no cutoff): per channel ``int(v * scale +
                    offset)`` in float64 -- exact
``equalize``        ``ImageOps.equalize``: per channel histogram, ``step``, the lookup
                    table from integer cumulative counts -- exact
==================  =========================================================================

Each function works on whole batches; sample ``b`` depends only on image
``b`` and argument ``b`` (integer sums: no reduction order to differ). The
stages call them on a batch of one (:mod:`tfdp.augment._each`), where an
argument is a scalar and a per-channel value a tiled row: TensorFlow's CPU
kernels broadcast a ``[B, 1, 1, 1]`` or a length-``C`` operand several times
slower than they run a plain elementwise op (see :mod:`tfdp.augment._fast`).

Example:
    >>> import tensorflow as tf
    >>> images = tf.constant([[[[10.0, 20.0, 30.0]]]])
    >>> brightness(images, tf.constant([1.5]))[0, 0, 0].numpy().tolist()
    [15.0, 30.0, 45.0]
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from tfdp.augment._fast import per_channel, select
from tfdp.errors import ConfigError


def mul(a: Any, b: Any) -> tf.Tensor:
    """``a * b`` (float64), kept as written through Grappler.

    Grappler's constant folding reassociates chains of products by constants
    (``x / c1 * c2`` into ``x * (c2 / c1)``), an ulp away from timm's Python
    -- enough to move a truncated pixel -- and only in the graphs it folds
    (not the window loader's): ``multiply_no_nan`` is not folded so, and
    equals ``a * b`` for finite values.

    Example:
        >>> float(mul(div(10.0, 10.0), 0.45) * 40.0)
        18.0
    """
    return tf.math.multiply_no_nan(as_double(a), as_double(b))


def as_double(x: Any) -> tf.Tensor:
    """``x`` as float64 (a Python number directly: ``tf.cast`` would round it to float32 first).

    Example:
        >>> float(as_double(1.8))
        1.8
    """
    return tf.cast(x, tf.float64) if tf.is_tensor(x) else tf.constant(x, tf.float64)


def div(a: Any, b: Any) -> tf.Tensor:
    """``a / b`` (float64, ``b`` nonzero), kept as written through Grappler (see :func:`mul`)."""
    return tf.math.divide_no_nan(as_double(a), as_double(b))


def _per_sample(values: Any, images: tf.Tensor) -> tf.Tensor:
    """A ``[B]`` argument against ``images``: a scalar for a batch of one, else ``[B, 1, 1, 1]``."""
    values = tf.cast(values, tf.float32)
    if images.shape[0] == 1:
        return tf.reshape(values, [])
    return tf.reshape(values, [-1, 1, 1, 1])


def _channel_index(images: tf.Tensor) -> tf.Tensor:
    """int32 ``v + 256 * (b * C + c)``: each value's entry in per-(sample, channel) tables."""
    channels = _channels(images)
    offsets = tuple(256.0 * c for c in range(channels))
    index = tf.cast(per_channel(images, offsets, tf.add), tf.int32)
    if images.shape[0] == 1:
        return index
    offsets = tf.range(tf.shape(images)[0]) * (256 * channels)
    return index + offsets[:, tf.newaxis, tf.newaxis, tf.newaxis]


def lookup(images: tf.Tensor, tables: tf.Tensor) -> tf.Tensor:
    """``images`` (8-bit values) through per-(sample, channel) tables ``[B, C, 256]``: one gather.

    Exact, compiled or not; XLA runs it several times faster than TensorFlow's
    kernels (the channel offsets and the gather fused into one loop: 0.24 vs
    1.0 ms for a 224x224 RGB image, one thread).

    Example:
        >>> import tensorflow as tf
        >>> tables = tf.reshape(255.0 - tf.range(256.0), [1, 1, 256])
        >>> lookup(tf.constant([[[[0.0], [10.0]]]]), tables).numpy().ravel().tolist()
        [255.0, 245.0]
    """
    return tf.gather(tf.reshape(tf.cast(tables, tf.float32), [-1]), _channel_index(images))


def quantize(images: tf.Tensor) -> tf.Tensor:
    """Float32 images rounded (half up, as PIL's resampling) and clipped to ``[0, 255]``.

    Example:
        >>> import tensorflow as tf
        >>> quantize(tf.constant([-3.0, 0.5, 254.4, 300.0])).numpy().tolist()
        [0.0, 1.0, 254.0, 255.0]
    """
    return tf.clip_by_value(tf.floor(tf.cast(images, tf.float32) + 0.5), 0.0, 255.0)


def blend(degenerate: tf.Tensor, images: tf.Tensor, factor: tf.Tensor) -> tf.Tensor:
    """PIL's ``Image.blend(degenerate, images, factor)`` of 8-bit values, ``factor`` ``[B]``.

    ``trunc(deg + f * (img - deg))`` in float32 (PIL's C arithmetic), clipped
    to ``[0, 255]`` (PIL clips when extrapolating, ``f`` outside ``[0, 1]``).

    Example:
        >>> import tensorflow as tf
        >>> blend(tf.zeros([1, 1, 1, 1]), tf.fill([1, 1, 1, 1], 201.0), [0.5]).numpy().item()
        100.0
    """
    f = _per_sample(factor, images)
    return tf.clip_by_value(tf.floor(degenerate + f * (images - degenerate)), 0.0, 255.0)


def _channels(images: tf.Tensor) -> int:
    channels = images.shape[-1]
    if channels not in (1, 3):
        raise ConfigError(
            f"colour operations take images with 1 or 3 channels (L or RGB), known when the "
            f"graph is built; got {channels}",
            argument="images",
        )
    return int(channels)


def grayscale(images: tf.Tensor) -> tf.Tensor:
    """PIL's ``convert("L")`` of RGB (``[B, H, W, 1]``); a 1-channel image is itself.

    Example:
        >>> import tensorflow as tf
        >>> grayscale(tf.constant([[[[255.0, 0.0, 0.0]]]]))[0, 0, 0].numpy().tolist()
        [76.0]
    """
    if _channels(images) == 1:
        return images
    # A matrix product: every partial sum is an integer below 2**24, exact in float32.
    weights = tf.constant([[19595.0], [38470.0], [7471.0]])
    shape = tf.shape(images)
    total = tf.matmul(tf.reshape(images, [-1, 3]), weights) + 0x8000
    level = tf.floor(total / 65536.0)  # the >> 16 (a power of two: exact)
    return tf.reshape(level, tf.concat([shape[:3], [1]], 0))


def color(images: tf.Tensor, factor: tf.Tensor) -> tf.Tensor:
    """``ImageEnhance.Color(img).enhance(factor)``: saturation (0: gray, 1: unchanged)."""
    return blend(tf.tile(grayscale(images), [1, 1, 1, images.shape[-1]]), images, factor)


def contrast(images: tf.Tensor, factor: tf.Tensor) -> tf.Tensor:
    """``ImageEnhance.Contrast(img).enhance(factor)``: towards the gray mean (rounded half up)."""
    level = tf.cast(grayscale(images), tf.int64)
    total = tf.reduce_sum(level, axis=[1, 2, 3])
    count = tf.cast(tf.reduce_prod(tf.shape(level)[1:3]), tf.int64)
    mean = tf.math.floordiv(2 * total + count, 2 * count)  # int(total / count + 0.5), exactly
    return blend(_per_sample(mean, images), images, factor)


def brightness(images: tf.Tensor, factor: tf.Tensor) -> tf.Tensor:
    """``ImageEnhance.Brightness(img).enhance(factor)``: towards black."""
    return blend(tf.zeros_like(images), images, factor)


def _smooth(images: tf.Tensor) -> tf.Tensor:
    """PIL's ``ImageFilter.SMOOTH``: ``[[1, 1, 1], [1, 5, 1], [1, 1, 1]] / 13``, rounded.

    The border pixels are kept. The sums are of integers (exact in float32);
    ``(s + 6.5) / 13`` is never within 0.03 of a rounding boundary, so PIL's
    float32 kernel rounds alike.
    """
    rows = images[:, :-2] + images[:, 1:-1] + images[:, 2:]  # [B, H - 2, W, C]
    sums = rows[:, :, :-2] + rows[:, :, 1:-1] + rows[:, :, 2:] + 4.0 * images[:, 1:-1, 1:-1]
    inner = tf.floor((sums + 6.5) / 13.0)
    inner = tf.concat([images[:, 1:-1, :1], inner, images[:, 1:-1, -1:]], axis=2)
    return tf.concat([images[:, :1], inner, images[:, -1:]], axis=1)


def sharpness(images: tf.Tensor, factor: tf.Tensor) -> tf.Tensor:
    """``ImageEnhance.Sharpness(img).enhance(factor)``: blend with PIL's smoothed image."""
    return blend(_smooth(images), images, factor)


def invert(images: tf.Tensor) -> tf.Tensor:
    """``ImageOps.invert``: ``255 - v``."""
    return 255.0 - images


def posterize(images: tf.Tensor, bits: tf.Tensor) -> tf.Tensor:
    """``ImageOps.posterize(img, bits)``: the top ``bits`` bits (8 or more: all; 0: black).

    Example:
        >>> import tensorflow as tf
        >>> posterize(tf.constant([[[[255.0, 100.0]]]]), [2]).numpy().ravel().tolist()
        [192.0, 64.0]
    """
    bits = tf.clip_by_value(_per_sample(bits, images), 0.0, 8.0)
    step = tf.pow(2.0, 8.0 - bits)  # a power of two: exact
    return tf.floor(images / step) * step


def solarize(images: tf.Tensor, threshold: tf.Tensor) -> tf.Tensor:
    """``ImageOps.solarize(img, threshold)``: values ``>= threshold`` inverted."""
    return select(images < _per_sample(threshold, images), images, 255.0 - images)


def solarize_add(images: tf.Tensor, add: tf.Tensor, threshold: float = 128.0) -> tf.Tensor:
    """The ``solarize_add`` of timm: ``min(255, v + add)`` below ``threshold``, else unchanged."""
    add = _per_sample(add, images)
    return select(images < threshold, tf.minimum(images + add, 255.0), images)


def autocontrast(images: tf.Tensor) -> tf.Tensor:
    """``ImageOps.autocontrast(img)``: each channel stretched from ``[lo, hi]`` to ``[0, 255]``.

    ``lookup(images, autocontrast_tables(images))`` (see :func:`autocontrast_tables`).

    Example:
        >>> import tensorflow as tf
        >>> autocontrast(tf.constant([[[[50.0], [100.0], [150.0]]]])).numpy().ravel().tolist()
        [0.0, 127.0, 255.0]
    """
    return lookup(images, autocontrast_tables(images))


def _extremes(images: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Each channel's minimum and maximum ``[B, C]``: over the rows first, then the columns.

    The rows reduced as ``[B, H, W * C]`` (contiguous) are faster than ``tf.reduce_min(images,
    [1, 2])`` (0.40 vs 0.56 ms for both of a 224x224 RGB image, one thread).
    """
    shape = tf.shape(images)
    rows = tf.reshape(images, tf.stack([shape[0], shape[1], -1]))
    pixels = tf.stack([shape[0], shape[2], _channels(images)])
    lo = tf.reduce_min(tf.reshape(tf.reduce_min(rows, axis=1), pixels), axis=1)
    hi = tf.reduce_max(tf.reshape(tf.reduce_max(rows, axis=1), pixels), axis=1)
    return lo, hi


def autocontrast_tables(images: tf.Tensor) -> tf.Tensor:
    """PIL's autocontrast tables ``[B, C, 256]`` (float64) of 8-bit-valued images.

    PIL's table ``int(v * scale + offset)``, ``scale = 255 / (hi - lo)``,
    ``offset = -lo * scale``, in float64 as PIL's Python computes it; a channel
    with ``hi <= lo`` is unchanged. Kept out of XLA, which would fuse the
    multiply-add (one rounding where PIL's Python rounds twice); the tables
    are small, the lookup (:func:`lookup`) is what may be compiled.

    Example:
        >>> import tensorflow as tf
        >>> table = autocontrast_tables(tf.constant([[[[50.0], [100.0], [150.0]]]]))
        >>> table[0, 0, 49:52].numpy().tolist(), table[0, 0, 150].numpy().item()
        ([0.0, 0.0, 2.0], 255.0)
    """
    lo, hi = (tf.cast(v, tf.float64)[..., tf.newaxis] for v in _extremes(images))  # [B, C, 1]
    spread = hi > lo
    scale = 255.0 / tf.where(spread, hi - lo, 1.0)
    offset = -lo * scale
    levels = tf.range(256, dtype=tf.float64)
    table = tf.clip_by_value(tf.floor(levels * scale + offset), 0.0, 255.0)  # PIL's table
    return tf.where(spread, table, levels)


def equalize(images: tf.Tensor) -> tf.Tensor:
    """``ImageOps.equalize(img)``: each channel through PIL's histogram-equalising table.

    ``lookup(images, equalize_tables(histograms(images)))``; the stages compile
    the histograms and the lookup with XLA, apart (one XLA function of the
    three ran twice as long: 2.3 vs 1.1 ms for a 224x224 RGB image, one thread).

    Example:
        >>> import tensorflow as tf
        >>> levels = tf.reshape(tf.repeat([0.0, 1.0, 2.0, 3.0], 256), [1, 32, 32, 1])
        >>> sorted(set(equalize(levels).numpy().ravel().tolist()))
        [0.0, 85.0, 171.0, 255.0]
    """
    return lookup(images, equalize_tables(histograms(images)))


def histograms(images: tf.Tensor) -> tf.Tensor:
    """Per-(sample, channel) histograms ``[B, C, 256]`` (int32) of 8-bit-valued images.

    Example:
        >>> import tensorflow as tf
        >>> histograms(tf.constant([[[[0.0], [2.0], [2.0]]]]))[0, 0, :3].numpy().tolist()
        [1, 0, 2]
    """
    shape = tf.shape(images)
    flat = tf.reshape(_channel_index(images), [-1])
    # A segment sum, not bincount: bincount's size depends on the values, which XLA would
    # take for a constant (a new compilation for every image).
    hist = tf.math.unsorted_segment_sum(tf.ones_like(flat), flat, shape[0] * shape[3] * 256)
    return tf.reshape(hist, [shape[0], _channels(images), 256])


def equalize_tables(hist: tf.Tensor) -> tf.Tensor:
    """PIL's equalize tables ``[B, C, 256]`` (int64) from histograms ``[B, C, 256]``.

    Per channel: ``step = (pixels - count of the last used level) // 255``;
    one used level, or ``step`` 0, leaves the channel unchanged; otherwise
    level ``i`` maps to ``(step // 2 + pixels below i) // step``.

    Example:
        >>> import tensorflow as tf
        >>> hist = tf.reshape(tf.one_hot([0, 1, 2, 3], 256, dtype=tf.int32) * 256, [1, 4, 256])
        >>> equalize_tables(tf.reduce_sum(hist, 1, keepdims=True))[0, 0, :4].numpy().tolist()
        [0, 85, 171, 255]
    """
    shape = tf.shape(hist)
    hist = tf.reshape(tf.cast(hist, tf.int64), [-1, 256])  # [BC, 256]
    used = hist > 0
    last = 255 - tf.argmax(tf.reverse(tf.cast(used, tf.int32), [1]), axis=1, output_type=tf.int32)
    last_count = tf.gather(hist, last, batch_dims=1)
    total = tf.reduce_sum(hist, axis=1)
    step = (total - last_count) // 255
    keep = (tf.reduce_sum(tf.cast(used, tf.int32), axis=1) <= 1) | (step == 0)
    below = tf.cumsum(hist, axis=1, exclusive=True)
    safe = tf.maximum(step, 1)[:, tf.newaxis]
    table = tf.minimum((safe // 2 + below) // safe, 255)
    identity = tf.broadcast_to(tf.range(256, dtype=tf.int64), tf.shape(table))
    return tf.reshape(tf.where(keep[:, tf.newaxis], identity, table), shape)


def _f32(x: tf.Tensor) -> tf.Tensor:
    return tf.cast(x, tf.float32)


def _f64(x: tf.Tensor) -> tf.Tensor:
    return tf.cast(x, tf.float64)


def hue(images: tf.Tensor, factor: tf.Tensor) -> tf.Tensor:
    """Torchvision's ``adjust_hue`` of a PIL image: the hue shifted by ``factor`` turns (``[B]``).

    The RGB image goes to PIL's 8-bit HSV, the hue byte is shifted by
    ``int(factor * 255)`` modulo 256, and the result goes back to RGB --
    PIL's conversions (``libImaging/Convert.c``) with their float32 and
    double steps. A 1-channel image is unchanged (as torchvision leaves L).

    Example:
        >>> import tensorflow as tf
        >>> hue(tf.constant([[[[200.0, 40.0, 40.0]]]]), [1 / 3])[0, 0, 0].numpy().tolist()
        [40.0, 200.0, 40.0]
    """
    if _channels(images) == 1:
        return images
    rgb = tf.cast(images, tf.int32)
    r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    maxc = tf.maximum(r, tf.maximum(g, b))
    minc = tf.minimum(r, tf.minimum(g, b))
    grey = maxc == minc
    cr = _f32(tf.where(grey, 1, maxc - minc))
    s = cr / _f32(tf.maximum(maxc, 1))
    rc, gc, bc = (_f32(maxc - c) / cr for c in (r, g, b))
    h = tf.where(
        r == maxc,
        bc - gc,
        tf.where(g == maxc, _f32(2.0 + _f64(rc) - _f64(bc)), _f32(4.0 + _f64(gc) - _f64(rc))),
    )
    h = _f32(tf.math.floormod(_f64(h) / 6.0 + 1.0, 1.0))  # fmod of a positive value
    uh = tf.clip_by_value(tf.cast(_f64(h) * 255.0, tf.int32), 0, 255)  # C's (int): truncation
    us = tf.clip_by_value(tf.cast(_f64(s) * 255.0, tf.int32), 0, 255)
    uh, us = tf.where(grey, 0, uh), tf.where(grey, 0, us)
    shift = tf.cast(tf.reshape(_f64(factor) * 255.0, [-1, 1, 1]), tf.int32)  # np.int32(f * 255)
    uh = tf.math.floormod(uh + shift, 256)
    # Back to RGB (hsv2rgb): sector i, remainder f, and the rounded p, q, t.
    scaled = div(mul(_f32(uh), 6.0), 255.0)  # (float)h * 6.0 / 255.0
    sector = tf.floor(scaled)
    f = _f32(scaled - sector)
    fs = _f32(_f64(_f32(us)) / 255.0)
    v = _f64(_f32(maxc))

    def rounded(x: tf.Tensor) -> tf.Tensor:  # C's round() of a value >= 0: half away from 0
        return tf.clip_by_value(tf.floor(v * x + 0.5), 0.0, 255.0)

    p = rounded(1.0 - _f64(fs))
    q = rounded(1.0 - _f64(fs * f))
    t = rounded(1.0 - _f64(fs) * (1.0 - _f64(f)))
    sector = tf.math.floormod(tf.cast(sector, tf.int32), 6)
    table = tf.stack(  # [6 sectors, 3 channels, ...]: which of v, p, q, t each channel takes
        [
            tf.stack([v, t, p]), tf.stack([q, v, p]), tf.stack([p, v, t]),
            tf.stack([p, q, v]), tf.stack([t, p, v]), tf.stack([v, p, q]),
        ]
    )  # fmt: skip
    one_hot = tf.cast(tf.one_hot(sector, 6, axis=0), tf.float64)[:, tf.newaxis]
    out = tf.reduce_sum(table * one_hot, axis=0)  # [3, B, H, W]
    out = tf.where(tf.equal(us, 0)[tf.newaxis], v[tf.newaxis], out)
    return tf.cast(tf.transpose(out, [1, 2, 3, 0]), tf.float32)
