"""RandomShift: translate each sample by a random whole number of pixels, filling the border.

Example:
    >>> import tensorflow as tf
    >>> RandomShift(1)(tf.ones([2, 3, 3, 1], tf.uint8), [[0, 0], [0, 1]]).shape
    TensorShape([2, 3, 3, 1])
"""

from __future__ import annotations

import tensorflow as tf

from tfdp.augment._args import pair
from tfdp.augment._padded import padded_window
from tfdp.augment.base import Augmentation
from tfdp.random import uniform_int


class RandomShift(Augmentation):
    """Translate each sample by a random integer ``(dy, dx)``, filling the exposed border.

    ``dy`` and ``dx`` are drawn independently and uniformly from
    ``[-max_shift, max_shift]``; ``out[b, i, j] = images[b, i - dy, j - dx]``
    where that pixel exists, else ``fill``. No flips, so it suits digits. The
    dtype and the image size are kept. (Equivalent to
    ``RandomCrop((H, W), padding=max_shift, fill=fill)``.)

    Args:
        max_shift: Largest shift in pixels: an int, or ``(max_dy, max_dx)``.
        fill: Value of the exposed pixels.
        image_key: Key of the images when the example is a dict.

    Example:
        >>> import tensorflow as tf
        >>> shift = RandomShift(2)
        >>> out = shift(tf.ones([3, 28, 28, 1]), [[1, 0], [1, 1], [1, 2]])
        >>> tuple(out.shape), float(tf.reduce_min(out)) in (0.0, 1.0)
        ((3, 28, 28, 1), True)
    """

    def __init__(
        self, max_shift: int | tuple[int, int], fill: float = 0, *, image_key: str = "image"
    ) -> None:
        super().__init__(image_key=image_key)
        self.max_shift = pair(max_shift, "max_shift", 0)
        self.fill = fill

    def draw_count(self) -> int:
        """Two uniforms per sample: the draws of ``dy`` and ``dx``."""
        return 2

    def apply(self, images: tf.Tensor, params: tf.Tensor) -> tf.Tensor:
        """Return the shifted batch (same shape and dtype as ``images``)."""
        max_dy, max_dx = self.max_shift
        # Offsets into the padded image; the content moves by (max - offset).
        top = uniform_int(params[:, 0], 2 * max_dy + 1)
        left = uniform_int(params[:, 1], 2 * max_dx + 1)
        shape = tf.shape(images)
        out = padded_window(
            images, top, left, shape[1], shape[2], self.max_shift, "constant", self.fill
        )
        out.set_shape(images.shape)
        return out
