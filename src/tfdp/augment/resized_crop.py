"""RandomResizedCrop: torchvision's random area and aspect-ratio box, planned per sample.

Planning only: the box of each sample from its image's shape and its
draws, in TensorFlow or NumPy alike (:class:`tfdp._arrays.ArrayOps`); the
cut and the resize are :class:`~tfdp.augment.WindowAugmentation`'s.

Example:
    >>> import numpy as np
    >>> rrc = RandomResizedCrop(8, scale=(1.0, 1.0), ratio=(1.0, 1.0))
    >>> rrc.host_windows(np.array([[10, 10]]), np.zeros([1, 40], np.float32)).tolist()
    [[0, 0, 10, 10]]
"""

from __future__ import annotations

import math
from typing import Any

import tensorflow as tf

from tfdp._arrays import ArrayOps
from tfdp.augment.window import WindowAugmentation
from tfdp.errors import ConfigError
from tfdp.random import as_seeds

__all__ = ["RandomResizedCrop"]


class RandomResizedCrop(WindowAugmentation):
    """Crop a random area/aspect-ratio box per sample and resize it to ``size``.

    The box follows torchvision's ``RandomResizedCrop.get_params``, evaluated
    for all samples at once: ``attempts`` candidate boxes per sample, each with
    area fraction ~ U(``scale``) and log aspect ratio ~ U(log ``ratio``),
    width/height rounded half-to-even (Python's ``round``), offsets uniform
    over the valid positions; the first candidate that fits is used, else the
    fallback is torchvision's centre crop with the aspect ratio clamped to
    ``ratio``. The box is then resized on its own (see
    :class:`WindowAugmentation`). Differences from torchvision: the random
    numbers come from :func:`tfdp.random.per_sample_uniform`, not torch's generator; no
    antialiasing unless ``antialias=True`` (torchvision's PIL path always
    low-pass filters when it shrinks). Output is float32 in the input's
    value units.

    Images may differ in size from sample to sample when the windows are
    planned by a source (:meth:`windows` takes one shape per sample).

    Args:
        size: Output ``(height, width)``, or one int for a square output.
        scale: ``(min, max)`` fraction of the image area of the crop.
        ratio: ``(min, max)`` aspect ratio (width / height) of the crop.
        interpolation: ``"bilinear"``, ``"bicubic"``, ``"nearest"``, ... (see
            :data:`~tfdp.augment.window.INTERPOLATIONS`).
        attempts: Candidate boxes per sample before the fallback (torchvision: 10).
        antialias: Low-pass filter when shrinking (slower).
        image_key: Key of the images when the example is a dict.

    Example:
        >>> import tensorflow as tf
        >>> rrc = RandomResizedCrop(24)
        >>> out = rrc(tf.zeros([2, 64, 48, 3], tf.uint8), [[5, 0], [5, 1]])
        >>> tuple(out.shape), out.dtype.name
        ((2, 24, 24, 3), 'float32')
    """

    def __init__(
        self,
        size: int | tuple[int, int],
        scale: tuple[float, float] = (0.08, 1.0),
        ratio: tuple[float, float] = (3 / 4, 4 / 3),
        interpolation: str = "bilinear",
        attempts: int = 10,
        antialias: bool = False,
        *,
        image_key: str = "image",
    ) -> None:
        super().__init__(size, interpolation, antialias, image_key=image_key)
        scale_lo, scale_hi = (float(v) for v in scale)
        ratio_lo, ratio_hi = (float(v) for v in ratio)
        if not 0 < scale_lo <= scale_hi:
            raise ConfigError(f"scale must be (min, max) with 0 < min <= max, got {scale!r}")
        if not 0 < ratio_lo <= ratio_hi:
            raise ConfigError(f"ratio must be (min, max) with 0 < min <= max, got {ratio!r}")
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
            raise ConfigError(f"attempts must be an int >= 1, got {attempts!r}")
        self.scale = (scale_lo, scale_hi)
        self.ratio = (ratio_lo, ratio_hi)
        self.attempts = attempts

    def draw_count(self) -> int:
        """``4 * attempts`` uniforms: area, log ratio, top, left of each attempt."""
        return 4 * self.attempts

    def windows(self, shapes: tf.Tensor, params: tf.Tensor) -> tf.Tensor:
        """Boxes as torchvision draws them, for images of ``shapes`` ``[N, 2]``, from ``params``.

        Example:
            >>> import tensorflow as tf
            >>> rrc = RandomResizedCrop(8)
            >>> seeds = tf.constant([[0, 0], [0, 1]], tf.int64)
            >>> boxes = rrc.windows(tf.constant([[20, 30], [40, 10]]), rrc.draw(seeds))
            >>> top, left, h, w = tf.unstack(boxes, axis=1)
            >>> bool(tf.reduce_all((top + h <= [20, 40]) & (left + w <= [30, 10])))
            True
        """
        return super().windows(shapes, params)

    def _windows(self, xp: ArrayOps, shapes: Any, params: Any) -> Any:
        n = self.attempts
        shapes = xp.cast(shapes, xp.int32)
        height_i, width_i = shapes[:, 0], shapes[:, 1]
        # Attempt k uses draws 4k..4k+3: area fraction, log ratio, top, left. Float64 keeps
        # the rounding of the box size away from 1-ulp differences between exp()
        # implementations (vectorised or scalar, TensorFlow's or NumPy's): a box changes only
        # if sqrt(area * ratio) falls within ~1e-13 of a half pixel.
        u = xp.reshape(xp.cast(params, xp.float64), [-1, n, 4])
        height_f = xp.cast(height_i, xp.float64)
        width_f = xp.cast(width_i, xp.float64)
        heights, widths = height_f[:, None], width_f[:, None]
        log_lo, log_hi = math.log(self.ratio[0]), math.log(self.ratio[1])
        area = heights * widths * (self.scale[0] + u[..., 0] * (self.scale[1] - self.scale[0]))
        aspect = xp.exp(log_lo + u[..., 1] * (log_hi - log_lo))
        crop_w = xp.round(xp.sqrt(area * aspect))
        crop_h = xp.round(xp.sqrt(area / aspect))
        fits = (crop_w > 0) & (crop_w <= widths) & (crop_h > 0) & (crop_h <= heights)
        top = xp.floor(u[..., 2] * (heights - crop_h + 1))
        left = xp.floor(u[..., 3] * (widths - crop_w + 1))
        # First attempt that fits (argmax does not promise the first of ties).
        first = xp.first_true(fits, n)
        found = first < n
        pick = xp.minimum(first, n - 1)
        crop_h, crop_w, top, left = (
            xp.cast(xp.pick(v, pick), xp.int32) for v in (crop_h, crop_w, top, left)
        )
        # torchvision's fallback: whole image, aspect ratio clamped into `ratio`, centred.
        in_ratio = width_f / height_f
        fallback_w = xp.where(in_ratio > self.ratio[1], xp.round(height_f * self.ratio[1]), width_f)
        fallback_h = xp.where(in_ratio < self.ratio[0], xp.round(width_f / self.ratio[0]), height_f)
        # At least one pixel: torchvision's fallback gives an empty box (and fails) only
        # when an extreme ratio rounds a tiny image's side to 0.
        fallback_w = xp.maximum(xp.cast(fallback_w, xp.int32), 1)
        fallback_h = xp.maximum(xp.cast(fallback_h, xp.int32), 1)
        crop_h = xp.where(found, xp.minimum(crop_h, height_i), fallback_h)
        crop_w = xp.where(found, xp.minimum(crop_w, width_i), fallback_w)
        top = xp.where(found, xp.minimum(top, height_i - crop_h), (height_i - fallback_h) // 2)
        left = xp.where(found, xp.minimum(left, width_i - crop_w), (width_i - fallback_w) // 2)
        return xp.stack([top, left, crop_h, crop_w], axis=1)

    def crop_boxes(
        self, seeds: Any, height: int | tf.Tensor, width: int | tf.Tensor
    ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
        """Sample the crop boxes for images of ``height x width``.

        Args:
            seeds: Integer tensor ``[B, 2]``.
            height: Image height: an int, a scalar tensor, or one per sample ``[B]``.
            width: Image width, likewise.

        Returns:
            ``(top, left, crop_height, crop_width)``, each int32 ``[B]``: the
            crop of sample ``b`` is ``image[top:top + crop_height, left:left + crop_width]``.

        Example:
            >>> import tensorflow as tf
            >>> top, left, h, w = RandomResizedCrop(8).crop_boxes([[0, 0], [0, 1]], 20, 30)
            >>> bool(tf.reduce_all((top >= 0) & (top + h <= 20) & (left + w <= 30)))
            True
        """
        seeds = as_seeds(seeds)
        batch = tf.shape(seeds)[:1]
        heights = tf.broadcast_to(tf.cast(height, tf.int32), batch)
        widths = tf.broadcast_to(tf.cast(width, tf.int32), batch)
        boxes = self.windows(tf.stack([heights, widths], axis=1), self.draw(seeds))
        return tuple(tf.unstack(boxes, num=4, axis=1))  # type: ignore[return-value]
