"""Per-sample windows of padded images, by batched gathers: RandomCrop's and RandomShift's.

The padded image is never built for the reflecting modes: the window's
coordinates are mapped back into the image (``np.pad``'s ``"reflect"``,
``"symmetric"``, ``"edge"``), so any padding size works; constant padding is
one ``tf.pad`` of the batch (cheaper than masking the fill in with ``tf.where``).

Example:
    >>> import tensorflow as tf
    >>> images = tf.reshape(tf.range(4), [1, 1, 4, 1])
    >>> out = padded_window(images, tf.constant([1]), tf.constant([0]), 1, 6, (1, 1), "edge", 0)
    >>> out[0, 0, :, 0].numpy().tolist()
    [0, 0, 1, 2, 3, 3]
"""

from __future__ import annotations

import tensorflow as tf

#: The padding modes of :func:`padded_window` (``np.pad``'s names).
PAD_MODES = ("constant", "reflect", "symmetric", "edge")


def _source_index(coords: tf.Tensor, size: tf.Tensor, mode: str) -> tf.Tensor:
    """Map padded-image coordinates to source indices (``np.pad`` modes other than constant)."""
    if mode == "edge":
        return tf.clip_by_value(coords, 0, size - 1)
    if mode == "reflect":  # ... c b | a b c d | c b a ...  (period 2 * (size - 1))
        period = tf.maximum(2 * (size - 1), 1)
        folded = tf.math.floormod(tf.abs(coords), period)
        return tf.where(folded >= size, period - folded, folded)
    # symmetric: ... b a | a b c d | d c ...  (period 2 * size)
    folded = tf.math.floormod(coords, 2 * size)
    return tf.where(folded >= size, 2 * size - 1 - folded, folded)


def padded_window(
    images: tf.Tensor,
    top: tf.Tensor,
    left: tf.Tensor,
    out_h: int | tf.Tensor,
    out_w: int | tf.Tensor,
    pad: tuple[int, int],
    mode: str,
    fill: float,
) -> tf.Tensor:
    """Per-sample ``out_h x out_w`` windows at ``(top[b], left[b])`` of the padded images.

    Offsets are in padded coordinates. Two batched gathers (rows, then
    columns) on per-sample index grids.
    """
    rows = top[:, tf.newaxis] + tf.range(out_h)[tf.newaxis, :]  # [B, out_h]
    cols = left[:, tf.newaxis] + tf.range(out_w)[tf.newaxis, :]  # [B, out_w]
    if mode == "constant":
        if pad != (0, 0):
            paddings = [[0, 0], [pad[0], pad[0]], [pad[1], pad[1]], [0, 0]]
            images = tf.pad(images, paddings, constant_values=tf.cast(fill, images.dtype))
    else:
        shape = tf.shape(images)
        rows = _source_index(rows - pad[0], shape[1], mode)
        cols = _source_index(cols - pad[1], shape[2], mode)
    out = tf.gather(images, rows, axis=1, batch_dims=1)  # [B, out_h, W, C]
    return tf.gather(out, cols, axis=2, batch_dims=1)  # [B, out_h, out_w, C]
