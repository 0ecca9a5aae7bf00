"""ToFloat: cast to float32 and scale (deterministic).

Example:
    >>> import tensorflow as tf
    >>> ToFloat(scale=0.5)(tf.constant([[[[4]]]], tf.uint8), [[0, 0]]).numpy().ravel().tolist()
    [2.0]
"""

from __future__ import annotations

from typing import ClassVar

import tensorflow as tf

from tfdp.augment.base import Augmentation


class ToFloat(Augmentation):
    """Cast to float32 and multiply by ``scale`` (deterministic; ignores the seeds).

    Args:
        scale: Multiplier; the default maps uint8 ``[0, 255]`` to ``[0, 1]``.
        image_key: Key of the images when the example is a dict.

    Example:
        >>> import tensorflow as tf
        >>> ToFloat()(tf.constant([[[[255]]]], tf.uint8), [[0, 0]]).numpy().ravel().tolist()
        [1.0]
    """

    random: ClassVar[bool] = False

    def __init__(self, scale: float = 1 / 255, *, image_key: str = "image") -> None:
        super().__init__(image_key=image_key)
        self.scale = float(scale)

    def apply(self, images: tf.Tensor, params: tf.Tensor) -> tf.Tensor:
        """Return ``float32(images) * scale``."""
        return tf.cast(images, tf.float32) * self.scale
