"""RandomResizedCrop: torchvision's random area and aspect-ratio box, resized.

The stage's arguments and draws (``4 * attempts`` uniforms per sample); the
box of each sample from its image's shape and its draws is its geometry,
:class:`tfdp.windows.geometry.RandomAreaWindows` (TensorFlow or NumPy alike);
the cut and the resize are :class:`~tfdp.augment.WindowAugmentation`'s.

Example:
    >>> import numpy as np
    >>> rrc = RandomResizedCrop(8, scale=(1.0, 1.0), ratio=(1.0, 1.0))
    >>> rrc.host_windows(np.array([[10, 10]]), np.zeros([1, 40], np.float32)).tolist()
    [[0, 0, 10, 10]]
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from tfdp.augment.window import WindowAugmentation
from tfdp.errors import ConfigError
from tfdp.random import as_seeds
from tfdp.windows.geometry import RandomAreaWindows


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
            raise ConfigError(
                f"must be (min, max) with 0 < min <= max, got {scale!r}", argument="scale"
            )
        if not 0 < ratio_lo <= ratio_hi:
            raise ConfigError(
                f"must be (min, max) with 0 < min <= max, got {ratio!r}", argument="ratio"
            )
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
            raise ConfigError(f"must be an int >= 1, got {attempts!r}", argument="attempts")
        self.scale = (scale_lo, scale_hi)
        self.ratio = (ratio_lo, ratio_hi)
        self.attempts = attempts
        self.geometry = RandomAreaWindows(self.scale, self.ratio, attempts)

    def draw_count(self) -> int:
        """``4 * attempts`` uniforms: area, log ratio, top, left of each attempt."""
        return 4 * self.attempts

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
