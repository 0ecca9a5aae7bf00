"""RandomBrightness: add one random offset per sample.

Example:
    >>> import tensorflow as tf
    >>> out = RandomBrightness(0.5)(tf.zeros([2, 1, 1, 1]), [[0, 0], [0, 1]])
    >>> bool(tf.reduce_all(tf.abs(out) <= 0.5))
    True
"""

from __future__ import annotations

import tensorflow as tf

from tfdp.augment.base import Augmentation
from tfdp.errors import ConfigError


class RandomBrightness(Augmentation):
    """Add a per-sample random brightness offset.

    Each sample gets one ``delta`` drawn uniformly from ``[-max_delta,
    max_delta)`` added to all its pixels and channels. The output is float32;
    integer images are cast *without rescaling*, so ``max_delta`` is in the
    images' own units: about ``0.1`` for float images in ``[0, 1]``, about
    ``25`` for raw uint8 values in ``[0, 255]`` (or put :class:`ToFloat` first).
    No clipping unless ``value_range`` is given.

    Args:
        max_delta: Largest absolute offset, ``>= 0``.
        value_range: Optional ``(low, high)`` to clip the result to.
        image_key: Key of the images when the example is a dict.

    Example:
        >>> import tensorflow as tf
        >>> bright = RandomBrightness(0.2, value_range=(0.0, 1.0))
        >>> out = bright(tf.fill([2, 4, 4, 3], 0.5), [[0, 0], [0, 1]])
        >>> out.dtype.name, bool(tf.reduce_all(tf.abs(out - 0.5) <= 0.2))
        ('float32', True)
    """

    def __init__(
        self,
        max_delta: float,
        value_range: tuple[float, float] | None = None,
        *,
        image_key: str = "image",
    ) -> None:
        super().__init__(image_key=image_key)
        if isinstance(max_delta, bool) or not isinstance(max_delta, (int, float)) or max_delta < 0:
            raise ConfigError(f"must be a number >= 0, got {max_delta!r}", argument="max_delta")
        if value_range is not None:
            low, high = value_range
            if not low <= high:
                raise ConfigError(
                    f"must be (low, high) with low <= high, got {value_range!r}",
                    argument="value_range",
                )
            value_range = (float(low), float(high))
        self.max_delta = float(max_delta)
        self.value_range = value_range

    def draw_count(self) -> int:
        """One uniform per sample: the offset's draw."""
        return 1

    def apply(self, images: tf.Tensor, params: tf.Tensor) -> tf.Tensor:
        """Return ``float32(images) + delta[b]`` (clipped to ``value_range`` if set)."""
        delta = (2.0 * params[:, :1] - 1.0) * self.max_delta  # [B, 1]
        out = tf.cast(images, tf.float32) + delta[:, :, tf.newaxis, tf.newaxis]
        if self.value_range is not None:
            out = tf.clip_by_value(out, *self.value_range)
        return out
