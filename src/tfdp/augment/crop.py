"""RandomCrop: pad, then cut a random window per sample (CIFAR's "random crop with padding").

Example:
    >>> import tensorflow as tf
    >>> out = RandomCrop(2)(tf.reshape(tf.range(9), [1, 3, 3, 1]), [[0, 0]])
    >>> out.shape
    TensorShape([1, 2, 2, 1])
"""

from __future__ import annotations

import tensorflow as tf

from tfdp.augment._args import pair
from tfdp.augment._padded import PAD_MODES, padded_window
from tfdp.augment.base import Augmentation
from tfdp.errors import ConfigError
from tfdp.random import uniform_int


class RandomCrop(Augmentation):
    """Pad, then crop a random window per sample (CIFAR-style "random crop with padding").

    Each sample is padded by ``padding`` pixels on every side (``pad_mode`` as
    in ``np.pad``: ``"constant"`` with ``fill``, ``"reflect"``, ``"symmetric"``
    or ``"edge"``) and a ``size`` window is cut at a per-sample offset drawn
    uniformly from all valid offsets. The padded image is never built: the
    window is two batched gathers on per-sample index grids. The dtype is kept
    (uint8 in, uint8 out).

    Args:
        size: Output ``(height, width)``, or one int for a square window.
        padding: Pixels added on each side: an int, or ``(pad_y, pad_x)``.
        pad_mode: ``"constant"``, ``"reflect"``, ``"symmetric"`` or ``"edge"``.
        fill: Value of the constant padding.
        image_key: Key of the images when the example is a dict.

    Raises:
        ValueError: On bad arguments, or (when the image size is static) if
            the window is larger than the padded image.

    Example:
        >>> import tensorflow as tf
        >>> crop = RandomCrop(32, padding=4, pad_mode="reflect")
        >>> out = crop(tf.zeros([4, 32, 32, 3], tf.uint8), [[0, i] for i in range(4)])
        >>> tuple(out.shape), out.dtype.name
        ((4, 32, 32, 3), 'uint8')
    """

    def __init__(
        self,
        size: int | tuple[int, int],
        padding: int | tuple[int, int] = 0,
        pad_mode: str = "constant",
        fill: float = 0,
        *,
        image_key: str = "image",
    ) -> None:
        super().__init__(image_key=image_key)
        self.size = pair(size, "size", 1)
        self.padding = pair(padding, "padding", 0)
        if pad_mode not in PAD_MODES:
            raise ConfigError(f"must be one of {PAD_MODES}, got {pad_mode!r}", argument="pad_mode")
        self.pad_mode = pad_mode
        self.fill = fill

    def draw_count(self) -> int:
        """Two uniforms per sample: the row and column offsets' draws."""
        return 2

    def apply(self, images: tf.Tensor, params: tf.Tensor) -> tf.Tensor:
        """Return the ``[B, size_h, size_w, C]`` windows (same dtype as ``images``)."""
        (out_h, out_w), (pad_y, pad_x) = self.size, self.padding
        for axis, out, pad in ((1, out_h, pad_y), (2, out_w, pad_x)):
            dim = images.shape[axis]
            if dim is not None and out > dim + 2 * pad:
                raise ConfigError(
                    f"crop size {self.size} exceeds the padded image "
                    f"{images.shape[1:3]} + 2 * {self.padding}"
                )
        shape = tf.shape(images)
        range_y = shape[1] + 2 * pad_y - out_h + 1  # number of valid offsets
        range_x = shape[2] + 2 * pad_x - out_w + 1
        check = tf.debugging.assert_positive(
            tf.minimum(range_y, range_x), message="RandomCrop: crop size exceeds the padded image"
        )
        with tf.control_dependencies([check] if check is not None else []):
            u = tf.identity(params)
        top, left = uniform_int(u[:, 0], range_y), uniform_int(u[:, 1], range_x)
        pad, mode = self.padding, self.pad_mode
        return padded_window(images, top, left, out_h, out_w, pad, mode, self.fill)
