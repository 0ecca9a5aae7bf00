"""CenterCrop: the centred window of DeiT's and timm's evaluation transform, planned per image.

Planning only (deterministic): the window of each image from its shape; the
cut and the resize are :class:`~tfdp.augment.WindowAugmentation`'s.

Example:
    >>> import numpy as np
    >>> crop = CenterCrop(8, crop_fraction=1.0)
    >>> crop.host_windows(np.array([[10, 20]]), np.zeros([1, 0])).tolist()
    [[0, 5, 10, 10]]
"""

from __future__ import annotations

from typing import Any, ClassVar

import tensorflow as tf

from tfdp._arrays import ArrayOps
from tfdp.augment.window import WindowAugmentation
from tfdp.errors import ConfigError

__all__ = ["CenterCrop"]


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
            raise ConfigError(f"crop_fraction must be a number in (0, 1], got {crop_fraction!r}")
        self.crop_fraction = float(crop_fraction)

    def windows(self, shapes: tf.Tensor, params: tf.Tensor) -> tf.Tensor:
        """The centred windows ``[N, 4]`` for images of ``shapes`` ``[N, 2]``."""
        return super().windows(shapes, params)

    def _windows(self, xp: ArrayOps, shapes: Any, params: Any) -> Any:
        shapes = xp.cast(shapes, xp.int32)
        heights, widths = shapes[:, 0], shapes[:, 1]
        shorter = xp.cast(xp.minimum(heights, widths), xp.float64)
        per_out = shorter * self.crop_fraction / min(self.size)  # image pixels per output pixel
        win_h = xp.minimum(xp.cast(xp.round(per_out * self.size[0]), xp.int32), heights)
        win_w = xp.minimum(xp.cast(xp.round(per_out * self.size[1]), xp.int32), widths)
        win_h, win_w = xp.maximum(win_h, 1), xp.maximum(win_w, 1)

        def centred(total: Any, part: Any) -> Any:
            return xp.cast(xp.round(xp.cast(total - part, xp.float64) / 2), xp.int32)

        return xp.stack([centred(heights, win_h), centred(widths, win_w), win_h, win_w], axis=1)
