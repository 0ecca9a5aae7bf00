"""RandomFlip: flip each sample left-right (and/or top-bottom) with a probability.

Example:
    >>> import tensorflow as tf
    >>> RandomFlip(p=1.0)(tf.reshape(tf.range(3), [1, 1, 3, 1]), [[0, 0]])[0, 0, :, 0].numpy()
    array([2, 1, 0], dtype=int32)
"""

from __future__ import annotations

import tensorflow as tf

from tfdp.augment._args import probability
from tfdp.augment._fast import reverse_where
from tfdp.augment.base import Augmentation
from tfdp.errors import ConfigError


class RandomFlip(Augmentation):
    """Flip each sample horizontally (and/or vertically) with probability ``p``.

    The flip decision of each axis is an independent per-sample draw; the batch
    is flipped once and the flipped samples are selected (a ``Select`` with a
    per-sample condition). The dtype is kept.

    Args:
        horizontal: Flip left-right (the width axis).
        vertical: Flip top-bottom (the height axis).
        p: Probability of each enabled flip.
        image_key: Key of the images when the example is a dict.

    Example:
        >>> import tensorflow as tf
        >>> images = tf.reshape(tf.range(2 * 1 * 3 * 1), [2, 1, 3, 1])
        >>> always = RandomFlip(p=1.0)
        >>> always(images, [[0, 0], [0, 1]])[:, 0, :, 0].numpy().tolist()
        [[2, 1, 0], [5, 4, 3]]
    """

    def __init__(
        self,
        horizontal: bool = True,
        vertical: bool = False,
        p: float = 0.5,
        *,
        image_key: str = "image",
    ) -> None:
        super().__init__(image_key=image_key)
        if not (horizontal or vertical):
            raise ConfigError("RandomFlip needs horizontal=True or vertical=True")
        self.horizontal = bool(horizontal)
        self.vertical = bool(vertical)
        self.p = probability(p, "p")

    def draw_count(self) -> int:
        """Two uniforms per sample: the horizontal and the vertical flip's draws."""
        return 2

    def apply(self, images: tf.Tensor, params: tf.Tensor) -> tf.Tensor:
        """Return the batch with the drawn flips applied (same shape and dtype)."""
        for column, axis, enabled in ((0, 2, self.horizontal), (1, 1, self.vertical)):
            if enabled:
                images = reverse_where(images, params[:, column] < self.p, axis)
        return images
