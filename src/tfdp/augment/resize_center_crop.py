"""ResizeCenterCrop: DeiT's and timm's held-out transform, torchvision's sampling reproduced.

DeiT evaluates with ``Resize(int(size / crop_ratio), bicubic)`` of the shorter
side then ``CenterCrop(size)`` on PIL images (``datasets.build_transform``;
timm's ``transforms_imagenet_eval`` the same with ``crop_pct``). This stage
computes that transform from the original image in one resample: the output's
pixel grid is the crop's, each output pixel samples the original image where
PIL's resize samples it (its centre ``(i + 0.5) * L / n`` for a side of ``L``
pixels resized to ``n``), with the filter scaled as PIL's antialiased resize
scales it. Where that is -- the window of pixels the filter reads, so that an
image folder decodes only it (:mod:`tfdp.windows`), and the scale and
translation of the output in it -- is the stage's geometry,
:class:`tfdp.windows.geometry.ResizedCropWindows` (deterministic, NumPy or
TensorFlow alike); its resize is ``ScaleAndTranslate`` with them
(:meth:`WindowAugmentation.placements`). What is left of the difference to
torchvision is PIL's arithmetic (8-bit fixed-point weights, a uint8 result
after each pass): tests/test_eval_transform.py measures it against timm's own
transform on photos.

Example:
    >>> import numpy as np
    >>> crop = ResizeCenterCrop(224)  # Resize(256) + CenterCrop(224)
    >>> crop.geometry.source_boxes(np.array([[375, 500]])).round(3).tolist()
    [[23.438, 85.044, 328.125, 328.446]]
"""

from __future__ import annotations

from typing import ClassVar

from tfdp.augment._args import pair
from tfdp.augment.window import WindowAugmentation
from tfdp.errors import ConfigError
from tfdp.windows.geometry import FILTER_RADII, ResizedCropWindows


class ResizeCenterCrop(WindowAugmentation):
    """torchvision's ``Resize(int(size / crop_ratio))`` + ``CenterCrop(size)``, as one window.

    For an image of ``H x W``: the shorter side is resized to ``R =
    int(size / crop_ratio)`` and the longer to ``int(R * long / short)``
    (torchvision's truncation; a square image's width counts as the shorter
    side), then the centred ``size x size`` crop is kept, offset
    ``round((n - size) / 2)`` (half to even, as torchvision's ``CenterCrop``).
    An image smaller than the crop is enlarged first, so the crop always fits
    (``crop_ratio <= 1``). The planned window holds every pixel the filter of an
    output pixel reads; :meth:`placements` says where the output lies in it.
    Output float32 in the input's value units (not rounded to uint8 as PIL's).

    Deterministic (ignores the seeds). Filters: ``bicubic`` (DeiT's: PIL's
    ``BICUBIC``, Keys' cubic with ``a = -0.5``) or ``bilinear``, both low-pass
    filtered when shrinking, as PIL's resize always is.

    Args:
        size: The output's side (DeiT's input size).
        crop_ratio: The fraction of the resized shorter side kept, in
            ``(0, 1]`` (DeiT's ``eval_crop_ratio``, timm's ``crop_pct``:
            ``0.875`` keeps 224 of 256).
        interpolation: ``"bicubic"`` or ``"bilinear"``.
        image_key: Key of the images when the example is a dict.

    Example:
        >>> import numpy as np, tensorflow as tf
        >>> crop = ResizeCenterCrop(224)
        >>> crop.geometry.resized_shapes(np.array([[375, 500], [500, 333]])).tolist()
        [[256, 341], [384, 256]]
        >>> crop(tf.zeros([1, 375, 500, 3], tf.uint8), [[0, 0]]).shape
        TensorShape([1, 224, 224, 3])
    """

    random: ClassVar[bool] = False

    def __init__(
        self,
        size: int,
        crop_ratio: float = 0.875,
        interpolation: str = "bicubic",
        *,
        image_key: str = "image",
    ) -> None:
        height, width = pair(size, "size", 1)
        if height != width:
            raise ConfigError(
                f"must be one int (a square crop, as DeiT's), got {size!r}", argument="size"
            )
        if interpolation not in FILTER_RADII:
            raise ConfigError(
                f"must be one of {sorted(FILTER_RADII)} (PIL's antialiased filters), "
                f"got {interpolation!r}",
                argument="interpolation",
            )
        super().__init__(height, interpolation, antialias=True, image_key=image_key)
        if (
            isinstance(crop_ratio, bool)
            or not isinstance(crop_ratio, (int, float))
            or not 0 < crop_ratio <= 1
        ):
            raise ConfigError(
                f"must be a number in (0, 1] (DeiT's 0.875: 224 of 256), got {crop_ratio!r}",
                argument="crop_ratio",
            )
        self.crop_ratio = float(crop_ratio)
        #: The shorter side after the resize: DeiT's ``int(input_size / eval_crop_ratio)``.
        self.resize_to = int(height / self.crop_ratio)
        self.geometry = ResizedCropWindows(height, self.resize_to, interpolation)
