"""CenterCrop: the centred window of DeiT's and timm's evaluation transform, resized.

The stage's arguments (deterministic: no draws); the window of each image from
its shape is its geometry, :class:`tfdp.windows.geometry.CentredWindows`; the
cut and the resize are :class:`~tfdp.augment.WindowAugmentation`'s.

Example:
    >>> import tensorflow as tf
    >>> crop = CenterCrop(8, crop_fraction=1.0)
    >>> crop(tf.zeros([1, 10, 20, 3], tf.uint8), [[0, 0]]).shape
    TensorShape([1, 8, 8, 3])
"""

from __future__ import annotations

from typing import ClassVar

from tfdp.augment.window import WindowAugmentation
from tfdp.errors import ConfigError
from tfdp.windows.geometry import CentredWindows


class CenterCrop(WindowAugmentation):
    """Resize-and-centre-crop for evaluation (torchvision's ``Resize`` + ``CenterCrop``).

    The window is what DeiT's / timm's evaluation transform keeps:
    ``Resize(round(min(size) / crop_fraction))`` of the shorter side followed
    by ``CenterCrop(size)``, expressed in the original image -- a centred
    window of ``size * min(H, W) * crop_fraction / min(size)`` pixels per
    side (rounded half-to-even, at most the image), offsets
    ``round((H - h) / 2)`` as torchvision's ``CenterCrop``. The window is
    then resized on its own (see :class:`WindowAugmentation`), so a
    window-decoding source decodes only it. Deterministic (ignores the seeds).

    Args:
        size: Output ``(height, width)``, or one int for a square output.
        crop_fraction: Fraction of the shorter side kept (DeiT and TF Model
            Garden: ``0.875``, i.e. 224 of 256); ``1.0`` keeps the shorter
            side whole.
        interpolation: ``"bilinear"``, ``"bicubic"``, ``"nearest"``, ... (see
            :data:`~tfdp.augment.window.INTERPOLATIONS`).
        antialias: Low-pass filter when shrinking (slower).
        image_key: Key of the images when the example is a dict.

    Example:
        >>> import tensorflow as tf
        >>> crop = CenterCrop(224)
        >>> params = crop.draw(tf.zeros([1, 2], tf.int64))
        >>> crop.windows(tf.constant([[375, 500]]), params).numpy().tolist()
        [[24, 86, 328, 328]]
    """

    random: ClassVar[bool] = False

    def __init__(
        self,
        size: int | tuple[int, int],
        crop_fraction: float = 0.875,
        interpolation: str = "bilinear",
        antialias: bool = False,
        *,
        image_key: str = "image",
    ) -> None:
        super().__init__(size, interpolation, antialias, image_key=image_key)
        if (
            isinstance(crop_fraction, bool)
            or not isinstance(crop_fraction, (int, float))
            or not 0 < crop_fraction <= 1
        ):
            raise ConfigError(
                f"must be a number in (0, 1], got {crop_fraction!r}", argument="crop_fraction"
            )
        self.crop_fraction = float(crop_fraction)
        self.geometry = CentredWindows(self.size, self.crop_fraction)
