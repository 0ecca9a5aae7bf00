"""ResizeCenterCrop: DeiT's and timm's held-out transform, torchvision's sampling reproduced.

DeiT evaluates with ``Resize(int(size / crop_ratio), bicubic)`` of the shorter
side then ``CenterCrop(size)`` on PIL images (``datasets.build_transform``;
timm's ``transforms_imagenet_eval`` the same with ``crop_pct``). This stage
plans that transform in the original image: the output's pixel grid is the
crop's, each output pixel samples the original image where PIL's resize
samples it (its centre ``(i + 0.5) * L / n`` for a side of ``L`` pixels resized
to ``n``), with the filter scaled as PIL's antialiased resize scales it. The
window is the pixels that filter reads, so an image folder decodes only it
(:mod:`tfdp.windows`); its resize is ``ScaleAndTranslate`` with the planned
scale and translation (:meth:`WindowAugmentation.placements`). What is left of
the difference to torchvision is PIL's arithmetic (8-bit fixed-point weights, a
uint8 result after each pass): tests/test_eval_transform.py measures it against
timm's own transform on photos.

Planning only (deterministic); NumPy or TensorFlow alike (:class:`tfdp._arrays.ArrayOps`).

Example:
    >>> import numpy as np
    >>> crop = ResizeCenterCrop(224)  # Resize(256) + CenterCrop(224)
    >>> crop.source_boxes(np.array([[375, 500]])).round(3).tolist()
    [[23.438, 85.044, 328.125, 328.446]]
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import tensorflow as tf

from tfdp._arrays import NUMPY, ArrayOps
from tfdp.augment._args import pair
from tfdp.augment.window import WindowAugmentation
from tfdp.errors import ConfigError

__all__ = ["ResizeCenterCrop"]

#: The filters' radii in pixels of their input (before the antialiasing scale): PIL's bicubic
#: and bilinear support, TensorFlow's ``keyscubic`` and ``triangle`` kernels.
_RADIUS = {"bicubic": 2.0, "bilinear": 1.0}


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
        >>> import tensorflow as tf
        >>> crop = ResizeCenterCrop(224)
        >>> crop.resized_shapes(tf.constant([[375, 500], [500, 333]])).numpy().tolist()
        [[256, 341], [384, 256]]
        >>> crop(tf.zeros([1, 375, 500, 3], tf.uint8), [[0, 0]]).shape
        TensorShape([1, 224, 224, 3])
    """

    random: ClassVar[bool] = False
    placed: ClassVar[bool] = True

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
                f"size must be one int (a square crop, as DeiT's), got {size!r}", argument="size"
            )
        if interpolation not in _RADIUS:
            raise ConfigError(
                f"interpolation must be one of {sorted(_RADIUS)} (PIL's antialiased filters), "
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
                f"crop_ratio must be a number in (0, 1] (DeiT's 0.875: 224 of 256), got "
                f"{crop_ratio!r}",
                argument="crop_ratio",
            )
        self.crop_ratio = float(crop_ratio)
        #: The shorter side after the resize: DeiT's ``int(input_size / eval_crop_ratio)``.
        self.resize_to = int(height / self.crop_ratio)

    def resized_shapes(self, shapes: tf.Tensor) -> tf.Tensor:
        """The ``(height, width)`` torchvision's ``Resize`` gives images of ``shapes`` ``[N, 2]``.

        Example:
            >>> import tensorflow as tf
            >>> ResizeCenterCrop(32, 1.0).resized_shapes(tf.constant([[7, 300]])).numpy().tolist()
            [[32, 1371]]
        """
        from tfdp._arrays import TENSORFLOW

        resized, _ = self._resized(TENSORFLOW, shapes)
        return tf.cast(tf.stack(resized, axis=1), tf.int32)

    def source_boxes(self, shapes: np.ndarray) -> np.ndarray:
        """Where each output comes from: float64 ``[N, 4]`` ``(top, left, height, width)``.

        torchvision's ``CenterCrop`` box of the resized image, in the original
        image's pixels (a side of ``L`` resized to ``n`` maps ``x`` to ``x * L / n``).

        Example:
            >>> import numpy as np
            >>> ResizeCenterCrop(4, 1.0).source_boxes(np.array([[8, 12]])).tolist()
            [[0.0, 2.0, 8.0, 8.0]]
        """
        (res_h, res_w), lengths = self._resized(NUMPY, np.asarray(shapes))
        rows = []
        for resized, length in ((res_h, lengths[0]), (res_w, lengths[1])):
            offset = np.round((resized - self.size[0]) / 2.0)
            rows.append((offset * length / resized, self.size[0] * length / resized))
        (top, height), (left, width) = rows
        return np.stack([top, left, height, width], axis=1)

    def _resized(self, xp: ArrayOps, shapes: Any) -> tuple[tuple[Any, Any], tuple[Any, Any]]:
        """The resized sides ``(n_h, n_w)`` and the original ones ``(H, W)``, float64."""
        shapes = xp.cast(shapes, xp.int64)
        height = xp.cast(shapes[:, 0], xp.float64)
        width = xp.cast(shapes[:, 1], xp.float64)
        short = float(self.resize_to)
        # torchvision: short, long = (w, h) if w <= h else (h, w);
        # new_long = int(new_short * long / short) (an exact product, one rounded division).
        tall = width <= height
        long_h = xp.floor(xp.cast(shapes[:, 0] * self.resize_to, xp.float64) / width)
        long_w = xp.floor(xp.cast(shapes[:, 1] * self.resize_to, xp.float64) / height)
        short_side = xp.broadcast_like(xp.const(short, xp.float64), long_h)
        res_h = xp.where(tall, long_h, short_side)
        res_w = xp.where(tall, short_side, long_w)
        return (res_h, res_w), (height, width)

    def _axis(self, xp: ArrayOps, resized: Any, length: Any) -> tuple[Any, Any, Any, Any]:
        """One axis: the window's start and length, the placement's scale and translation."""
        size = float(self.size[0])
        offset = xp.round((resized - size) / 2.0)  # CenterCrop's, in resized pixels
        inverse = length / resized  # original pixels per resized pixel
        # The filter reads, around an output pixel's centre c (original pixels), pixels from
        # ceil(c - r - 0.5) to floor(c + r - 0.5) (ScaleAndTranslate's span), r its radius,
        # widened by PIL's and TensorFlow's antialiasing when shrinking. One more pixel on each
        # side keeps float rounding from ever cutting a span at the window's edge.
        radius = _RADIUS[self.interpolation] * xp.maximum(inverse, 1.0)
        first = (offset + 0.5) * inverse
        last = (offset + size - 0.5) * inverse
        start = xp.maximum(-xp.floor(-(first - radius - 0.5)) - 1.0, 0.0)
        end = xp.minimum(xp.floor(last + radius - 0.5) + 2.0, length)
        scale = resized / length
        return start, end - start, scale, scale * start - offset

    def _plan(self, xp: ArrayOps, shapes: Any) -> tuple[Any, Any]:
        (res_h, res_w), (height, width) = self._resized(xp, shapes)
        top, win_h, scale_h, shift_h = self._axis(xp, res_h, height)
        left, win_w, scale_w, shift_w = self._axis(xp, res_w, width)
        windows = xp.cast(xp.stack([top, left, win_h, win_w], axis=1), xp.int32)
        placements = xp.cast(xp.stack([scale_h, scale_w, shift_h, shift_w], axis=1), xp.float32)
        return windows, placements

    def _windows(self, xp: ArrayOps, shapes: Any, params: Any) -> Any:
        return self._plan(xp, shapes)[0]

    def _placements(self, xp: ArrayOps, shapes: Any, params: Any) -> Any:
        return self._plan(xp, shapes)[1]
