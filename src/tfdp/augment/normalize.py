"""Normalize: standardise the channels, ``(images - mean) / std`` (deterministic).

Example:
    >>> import tensorflow as tf
    >>> Normalize(1.0, 2.0)(tf.fill([1, 1, 1, 1], 5.0), [[0, 0]]).numpy().ravel().tolist()
    [2.0]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import tensorflow as tf

from tfdp.augment._fast import per_channel
from tfdp.augment.base import Augmentation
from tfdp.errors import ConfigError


class Normalize(Augmentation):
    """Standardise channels: ``(float32(images) - mean) / std`` (deterministic).

    Args:
        mean: Scalar or per-channel sequence, in the images' units.
        std: Scalar or per-channel sequence, all ``> 0``.
        image_key: Key of the images when the example is a dict.

    Example:
        >>> import tensorflow as tf
        >>> norm = Normalize(mean=[0.5, 0.5, 0.5], std=[0.25, 0.25, 0.25])
        >>> norm(tf.ones([1, 1, 1, 3]), [[0, 0]]).numpy().ravel().tolist()
        [2.0, 2.0, 2.0]
    """

    random: ClassVar[bool] = False

    def __init__(
        self,
        mean: float | Sequence[float],
        std: float | Sequence[float],
        *,
        image_key: str = "image",
    ) -> None:
        super().__init__(image_key=image_key)
        self.mean = tuple(float(m) for m in mean) if isinstance(mean, Sequence) else float(mean)
        self.std = tuple(float(s) for s in std) if isinstance(std, Sequence) else float(std)
        stds = self.std if isinstance(self.std, tuple) else (self.std,)
        if not stds or any(not s > 0 for s in stds):
            raise ConfigError(f"must be > 0, got {std!r}", argument="std")
        means = self.mean if isinstance(self.mean, tuple) else (self.mean,)
        if isinstance(self.mean, tuple) and isinstance(self.std, tuple) and len(means) != len(stds):
            raise ConfigError(f"differs in length from mean: {mean!r}, {std!r}", argument="std")

    def apply(self, images: tf.Tensor, params: tf.Tensor) -> tf.Tensor:
        """Return the standardised float32 batch."""
        centred = per_channel(tf.cast(images, tf.float32), self.mean, tf.subtract)
        return per_channel(centred, self.std, tf.divide)
