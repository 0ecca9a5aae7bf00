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
``b`` and argument ``b`` (integer sums: no reduction order to differ).

Example:
    >>> import tensorflow as tf
    >>> images = tf.constant([[[[10.0, 20.0, 30.0]]]])
    >>> brightness(images, tf.constant([1.5]))[0, 0, 0].numpy().tolist()
    [15.0, 30.0, 45.0]
"""

from __future__ import annotations

import tensorflow as tf

from tfdp.errors import ConfigError

__all__ = [
    "autocontrast",
    "blend",
    "brightness",
    "color",
    "contrast",
    "equalize",
    "grayscale",
    "hue",
    "invert",
    "posterize",
    "quantize",
    "sharpness",
    "solarize",
    "solarize_add",
]


def _per_sample(values: tf.Tensor) -> tf.Tensor:
    """A ``[B]`` argument as ``[B, 1, 1, 1]`` float32, to broadcast over images."""
    return tf.reshape(tf.cast(values, tf.float32), [-1, 1, 1, 1])


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
    f = _per_sample(factor)
    return tf.clip_by_value(tf.floor(degenerate + f * (images - degenerate)), 0.0, 255.0)


def _channels(images: tf.Tensor) -> int:
    channels = images.shape[-1]
    if channels not in (1, 3):
        raise ConfigError(
            f"colour operations take images with 1 or 3 channels (L or RGB), got {channels}",
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
    rgb = tf.cast(images, tf.int32)
    weights = tf.constant([19595, 38470, 7471], tf.int32)
    level = tf.bitwise.right_shift(tf.reduce_sum(rgb * weights, -1, keepdims=True) + 0x8000, 16)
    return tf.cast(level, tf.float32)


def color(images: tf.Tensor, factor: tf.Tensor) -> tf.Tensor:
    """``ImageEnhance.Color(img).enhance(factor)``: saturation (0: gray, 1: unchanged)."""
    return blend(tf.broadcast_to(grayscale(images), tf.shape(images)), images, factor)


def contrast(images: tf.Tensor, factor: tf.Tensor) -> tf.Tensor:
    """``ImageEnhance.Contrast(img).enhance(factor)``: towards the gray mean (rounded half up)."""
    level = tf.cast(grayscale(images), tf.int64)
    total = tf.reduce_sum(level, axis=[1, 2, 3])
    count = tf.cast(tf.reduce_prod(tf.shape(level)[1:3]), tf.int64)
    mean = tf.math.floordiv(2 * total + count, 2 * count)  # int(total / count + 0.5), exactly
    return blend(_per_sample(mean), images, factor)


def brightness(images: tf.Tensor, factor: tf.Tensor) -> tf.Tensor:
    """``ImageEnhance.Brightness(img).enhance(factor)``: towards black."""
    return blend(tf.zeros_like(images), images, factor)


def _smooth(images: tf.Tensor) -> tf.Tensor:
    """PIL's ``ImageFilter.SMOOTH``: ``[[1, 1, 1], [1, 5, 1], [1, 1, 1]] / 13``, rounded.

    The border pixels are kept.

    The sums are of integers (exact in float32); ``(s + 6.5) / 13`` is never
    within 0.03 of a rounding boundary, so PIL's float32 kernel rounds alike.
    """
    channels = images.shape[-1]
    kernel = tf.constant([[1.0, 1.0, 1.0], [1.0, 5.0, 1.0], [1.0, 1.0, 1.0]])
    kernel = tf.tile(kernel[:, :, tf.newaxis, tf.newaxis], [1, 1, channels, 1])
    sums = tf.nn.depthwise_conv2d(images, kernel, [1, 1, 1, 1], "SAME")
    smooth = tf.floor((sums + 6.5) / 13.0)
    shape = tf.shape(images)
    rows = tf.range(shape[1])[:, tf.newaxis]
    cols = tf.range(shape[2])[tf.newaxis, :]
    inner = (rows > 0) & (rows < shape[1] - 1) & (cols > 0) & (cols < shape[2] - 1)
    return tf.where(inner[tf.newaxis, :, :, tf.newaxis], smooth, images)


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
    bits = tf.clip_by_value(_per_sample(bits), 0.0, 8.0)
    step = tf.pow(2.0, 8.0 - bits)  # a power of two: exact
    return tf.floor(images / step) * step


def solarize(images: tf.Tensor, threshold: tf.Tensor) -> tf.Tensor:
    """``ImageOps.solarize(img, threshold)``: values ``>= threshold`` inverted."""
    return tf.where(images < _per_sample(threshold), images, 255.0 - images)


def solarize_add(images: tf.Tensor, add: tf.Tensor, threshold: float = 128.0) -> tf.Tensor:
    """The ``solarize_add`` of timm: ``min(255, v + add)`` below ``threshold``, else unchanged."""
    return tf.where(images < threshold, tf.minimum(images + _per_sample(add), 255.0), images)


def autocontrast(images: tf.Tensor) -> tf.Tensor:
    """``ImageOps.autocontrast(img)``: each channel stretched from ``[lo, hi]`` to ``[0, 255]``.

    PIL's table ``int(v * scale + offset)``, ``scale = 255 / (hi - lo)``,
    ``offset = -lo * scale``, in float64 as PIL's Python computes it; a channel
    with ``hi <= lo`` is unchanged.

    Example:
        >>> import tensorflow as tf
        >>> autocontrast(tf.constant([[[[50.0], [100.0], [150.0]]]])).numpy().ravel().tolist()
        [0.0, 127.0, 255.0]
    """
    lo = tf.cast(tf.reduce_min(images, axis=[1, 2], keepdims=True), tf.float64)
    hi = tf.cast(tf.reduce_max(images, axis=[1, 2], keepdims=True), tf.float64)
    spread = hi > lo
    scale = 255.0 / tf.where(spread, hi - lo, 1.0)
    offset = -lo * scale
    stretched = tf.floor(tf.cast(images, tf.float64) * scale + offset)
    stretched = tf.cast(tf.clip_by_value(stretched, 0.0, 255.0), tf.float32)
    return tf.where(spread, stretched, images)


def equalize(images: tf.Tensor) -> tf.Tensor:
    """``ImageOps.equalize(img)``: each channel through PIL's histogram-equalising table.

    Per channel: ``step = (pixels - count of the last used level) // 255``;
    one used level, or ``step`` 0, leaves the channel unchanged; otherwise
    level ``i`` maps to ``(step // 2 + pixels below i) // step``.

    Example:
        >>> import tensorflow as tf
        >>> levels = tf.reshape(tf.repeat([0.0, 1.0, 2.0, 3.0], 256), [1, 32, 32, 1])
        >>> sorted(set(equalize(levels).numpy().ravel().tolist()))
        [0.0, 85.0, 171.0, 255.0]
    """
    shape = tf.shape(images)
    batch, channels = shape[0], shape[3]
    levels = tf.cast(images, tf.int32)
    per_channel = tf.reshape(tf.transpose(levels, [0, 3, 1, 2]), [batch * channels, -1])
    hist = tf.math.bincount(per_channel, minlength=256, maxlength=256, axis=-1)  # [BC, 256]
    hist = tf.cast(hist, tf.int64)
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
    table = tf.where(keep[:, tf.newaxis], identity, table)  # [BC, 256]
    table = tf.reshape(tf.cast(table, tf.float32), [batch, channels * 256])
    index = levels + tf.range(channels) * 256  # channel c's table at c * 256
    out = tf.gather(table, tf.reshape(index, [batch, -1]), batch_dims=1)
    return tf.reshape(out, shape)


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
    scaled = _f64(_f32(uh)) * 6.0 / 255.0
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
