"""Which pixels of each image a window stage reads, and how they map to the stage's output.

This module owns the window path's geometry: for images of given shapes and a
stage's drawn parameters, each sample's window ``(top, left, height, width)``
-- the pixels a window-decoding source decodes -- and, for a *placed* stage,
where the stage's output lies in that window (its placement: scale and
translation). Each geometry is one definition run by TensorFlow (the stage on a
batch of decoded images) or by NumPy (the window loader's plan, on the host) with
the same bits (:class:`tfdp._arrays.ArrayOps`); the stages of
:mod:`tfdp.augment` hold one and keep their draw and their apply (cut, resize).

============================  =========================================================  ===========
geometry                      the window                                                 its stage
============================  =========================================================  ===========
:class:`RandomAreaWindows`    torchvision's ``RandomResizedCrop`` box: random area and   RandomRe-
                              aspect ratio, the first of ``attempts`` that fits          sizedCrop
:class:`CentredWindows`       ``Resize`` + ``CenterCrop`` as a centred window of the     CenterCrop
                              original image, stretched to the output
:class:`ResizedCropWindows`   the pixels torchvision's ``Resize`` + ``CenterCrop`` read  ResizeCen-
                              (PIL's filters), and the output's placement in them        terCrop
============================  =========================================================  ===========

:class:`StageWindows` is a stage's geometry for ``N`` samples with their draws
made: the windows planned in the graph or on the host, and each window's output
(:class:`tfdp.windows.contract.WindowPlan` of a stage alone; the window plan of
a whole augmentation, :class:`tfdp.windows.plan.WindowRequest`, builds on it).

Example:
    >>> import numpy as np
    >>> from tfdp._arrays import NUMPY
    >>> CentredWindows((224, 224), 0.875).windows(NUMPY, np.array([[375, 500]]), None).tolist()
    [[24, 86, 328, 328]]
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import tensorflow as tf

from tfdp._arrays import NUMPY, ArrayOps
from tfdp.errors import StateError
from tfdp.windows.contract import WindowStage

#: The radii of the antialiased filters a placed window is resampled with, in pixels of the
#: input before the antialiasing scale: PIL's bicubic and bilinear support (TensorFlow's
#: ``keyscubic`` and ``triangle`` kernels).
FILTER_RADII = {"bicubic": 2.0, "bilinear": 1.0}


class _Stretched:
    """A geometry whose output is its whole window stretched to the stage's size (no placement)."""

    placed: ClassVar[bool] = False

    def placements(self, xp: ArrayOps, shapes: Any, params: Any) -> Any:
        """Not planned: the output is the whole window (only a placed geometry has placements)."""
        raise NotImplementedError(
            f"{type(self).__name__} stretches its whole window: it has no placements"
        )


@dataclass(frozen=True)
class RandomAreaWindows(_Stretched):
    """torchvision's ``RandomResizedCrop.get_params``, for all samples at once.

    ``attempts`` candidate boxes per sample, each with area fraction ~
    U(``scale``) and log aspect ratio ~ U(log ``ratio``) (draws ``4k .. 4k +
    3`` of attempt ``k``: area, log ratio, top, left), width and height
    rounded half-to-even, offsets uniform over the valid positions; the first
    candidate that fits, else torchvision's fallback: the whole image with
    its aspect ratio clamped into ``ratio``, centred.

    Example:
        >>> import numpy as np
        >>> from tfdp._arrays import NUMPY
        >>> whole = RandomAreaWindows(scale=(1.0, 1.0), ratio=(1.0, 1.0), attempts=10)
        >>> whole.windows(NUMPY, np.array([[10, 10], [10, 16]]), np.zeros([2, 40])).tolist()
        [[0, 0, 10, 10], [0, 3, 10, 10]]
    """

    scale: tuple[float, float]
    ratio: tuple[float, float]
    attempts: int

    def windows(self, xp: ArrayOps, shapes: Any, params: Any) -> Any:
        """The boxes ``[N, 4]`` int32 of images of ``shapes`` ``[N, 2]``, from their draws."""
        n = self.attempts
        shapes = xp.cast(shapes, xp.int32)
        height_i, width_i = shapes[:, 0], shapes[:, 1]
        # Attempt k uses draws 4k..4k+3: area fraction, log ratio, top, left. Float64 keeps
        # the rounding of the box size away from 1-ulp differences between exp()
        # implementations (vectorised or scalar, TensorFlow's or NumPy's): a box changes only
        # if sqrt(area * ratio) falls within ~1e-13 of a half pixel.
        u = xp.reshape(xp.cast(params, xp.float64), [-1, n, 4])
        height_f = xp.cast(height_i, xp.float64)
        width_f = xp.cast(width_i, xp.float64)
        heights, widths = height_f[:, None], width_f[:, None]
        log_lo, log_hi = math.log(self.ratio[0]), math.log(self.ratio[1])
        area = heights * widths * (self.scale[0] + u[..., 0] * (self.scale[1] - self.scale[0]))
        aspect = xp.exp(log_lo + u[..., 1] * (log_hi - log_lo))
        crop_w = xp.round(xp.sqrt(area * aspect))
        crop_h = xp.round(xp.sqrt(area / aspect))
        fits = (crop_w > 0) & (crop_w <= widths) & (crop_h > 0) & (crop_h <= heights)
        top = xp.floor(u[..., 2] * (heights - crop_h + 1))
        left = xp.floor(u[..., 3] * (widths - crop_w + 1))
        # First attempt that fits (argmax does not promise the first of ties).
        first = xp.first_true(fits, n)
        found = first < n
        pick = xp.minimum(first, n - 1)
        crop_h, crop_w, top, left = (
            xp.cast(xp.pick(v, pick), xp.int32) for v in (crop_h, crop_w, top, left)
        )
        # torchvision's fallback: whole image, aspect ratio clamped into `ratio`, centred.
        in_ratio = width_f / height_f
        fallback_w = xp.where(in_ratio > self.ratio[1], xp.round(height_f * self.ratio[1]), width_f)
        fallback_h = xp.where(in_ratio < self.ratio[0], xp.round(width_f / self.ratio[0]), height_f)
        # At least one pixel: torchvision's fallback gives an empty box (and fails) only
        # when an extreme ratio rounds a tiny image's side to 0.
        fallback_w = xp.maximum(xp.cast(fallback_w, xp.int32), 1)
        fallback_h = xp.maximum(xp.cast(fallback_h, xp.int32), 1)
        crop_h = xp.where(found, xp.minimum(crop_h, height_i), fallback_h)
        crop_w = xp.where(found, xp.minimum(crop_w, width_i), fallback_w)
        top = xp.where(found, xp.minimum(top, height_i - crop_h), (height_i - fallback_h) // 2)
        left = xp.where(found, xp.minimum(left, width_i - crop_w), (width_i - fallback_w) // 2)
        return xp.stack([top, left, crop_h, crop_w], axis=1)


@dataclass(frozen=True)
class CentredWindows(_Stretched):
    """DeiT's / timm's evaluation window: ``Resize`` of the shorter side, then ``CenterCrop``.

    ``Resize(round(min(size) / crop_fraction))`` + ``CenterCrop(size)``
    expressed in the original image: a centred window of ``size *
    min(H, W) * crop_fraction / min(size)`` pixels per side (rounded
    half-to-even, at most the image, at least one pixel), offsets
    ``round((H - h) / 2)`` as torchvision's ``CenterCrop``. Deterministic
    (``params`` unused).

    Example:
        >>> import numpy as np
        >>> from tfdp._arrays import NUMPY
        >>> CentredWindows((8, 8), 1.0).windows(NUMPY, np.array([[10, 20]]), None).tolist()
        [[0, 5, 10, 10]]
    """

    size: tuple[int, int]
    crop_fraction: float

    def windows(self, xp: ArrayOps, shapes: Any, params: Any) -> Any:
        """The centred windows ``[N, 4]`` int32 of images of ``shapes`` ``[N, 2]``."""
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


@dataclass(frozen=True)
class ResizedCropWindows:
    """torchvision's ``Resize(resize_to)`` + ``CenterCrop(size)``, sampled where PIL samples.

    For an image of ``H x W`` the shorter side is resized to ``resize_to``
    and the longer to ``int(resize_to * long / short)`` (torchvision's
    truncation; a square image's width counts as the shorter side), then the
    centred ``size x size`` crop is kept, offset ``round((n - size) / 2)``.
    The output's pixel grid is the crop's; each output pixel samples the
    original image at its centre mapped back (``(i + 0.5) * L / n`` for a side
    of ``L`` resized to ``n``), through a filter of radius
    ``FILTER_RADII[interpolation]`` widened as PIL's antialiased resize widens
    it when shrinking. The window is every pixel those filters read (one more
    on each side against float rounding); the placement is the scale and
    translation of the output in it (:meth:`placements`). Deterministic.

    Example:
        >>> import numpy as np
        >>> from tfdp._arrays import NUMPY
        >>> geometry = ResizedCropWindows(224, 256, "bicubic")
        >>> geometry.resized_shapes(np.array([[375, 500], [500, 333]])).tolist()
        [[256, 341], [384, 256]]
        >>> geometry.source_boxes(np.array([[375, 500]])).round(3).tolist()
        [[23.438, 85.044, 328.125, 328.446]]
    """

    placed: ClassVar[bool] = True

    size: int
    resize_to: int
    interpolation: str

    def resized_shapes(self, shapes: np.ndarray) -> np.ndarray:
        """The ``(height, width)`` torchvision's ``Resize`` gives images of ``shapes`` ``[N, 2]``.

        Example:
            >>> import numpy as np
            >>> ResizedCropWindows(32, 32, "bilinear").resized_shapes(np.array([[7, 300]])).tolist()
            [[32, 1371]]
        """
        (res_h, res_w), _ = self._resized(NUMPY, np.asarray(shapes))
        return np.stack([res_h, res_w], axis=1).astype(np.int64)

    def source_boxes(self, shapes: np.ndarray) -> np.ndarray:
        """Where each output comes from: float64 ``[N, 4]`` ``(top, left, height, width)``.

        torchvision's ``CenterCrop`` box of the resized image, in the original
        image's pixels (a side of ``L`` resized to ``n`` maps ``x`` to ``x * L / n``).

        Example:
            >>> import numpy as np
            >>> ResizedCropWindows(4, 4, "bicubic").source_boxes(np.array([[8, 12]])).tolist()
            [[0.0, 2.0, 8.0, 8.0]]
        """
        (res_h, res_w), lengths = self._resized(NUMPY, np.asarray(shapes))
        rows = []
        for resized, length in ((res_h, lengths[0]), (res_w, lengths[1])):
            offset = np.round((resized - self.size) / 2.0)
            rows.append((offset * length / resized, self.size * length / resized))
        (top, height), (left, width) = rows
        return np.stack([top, left, height, width], axis=1)

    def windows(self, xp: ArrayOps, shapes: Any, params: Any) -> Any:
        """The windows ``[N, 4]`` int32: every pixel the output's filters read."""
        return self._plan(xp, shapes)[0]

    def placements(self, xp: ArrayOps, shapes: Any, params: Any) -> Any:
        """float32 ``[N, 4]`` ``(scale_y, scale_x, translation_y, translation_x)`` in each window.

        Output pixel ``(y, x)`` samples window ``i`` at ``((y + 0.5 -
        translation_y) / scale_y, (x + 0.5 - translation_x) / scale_x)``
        (pixel centres at half-integers, ``ScaleAndTranslate``'s convention).

        Example:
            >>> import numpy as np
            >>> from tfdp._arrays import NUMPY
            >>> ResizedCropWindows(4, 4, "bicubic").placements(NUMPY, np.array([[8, 8]]), None)
            array([[0.5, 0.5, 0. , 0. ]], dtype=float32)
        """
        return self._plan(xp, shapes)[1]

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
        size = float(self.size)
        offset = xp.round((resized - size) / 2.0)  # CenterCrop's, in resized pixels
        inverse = length / resized  # original pixels per resized pixel
        # The filter reads, around an output pixel's centre c (original pixels), pixels from
        # ceil(c - r - 0.5) to floor(c + r - 0.5) (ScaleAndTranslate's span), r its radius,
        # widened by PIL's and TensorFlow's antialiasing when shrinking. One more pixel on each
        # side keeps float rounding from ever cutting a span at the window's edge.
        radius = FILTER_RADII[self.interpolation] * xp.maximum(inverse, 1.0)
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


class StageWindows:
    """A window stage's windows for ``N`` samples, its draws made: a :class:`WindowPlan` alone.

    :meth:`windows` plans every sample's window from the images' shapes --
    with ``on_host``, by NumPy in one ``tf.numpy_function`` when the stage
    can (:attr:`tfdp.augment.WindowAugmentation.plans_on_host`: the same
    bits, one graph node instead of the plan's, for a graph instantiated
    often such as a ``tf.data`` function) -- and a placed stage's placements
    with them; :meth:`finish` (or :meth:`resize`) makes a sample's output from
    its window's pixels. The window path's plans for a whole augmentation
    (:class:`tfdp.windows.plan.WindowRequest`) and for a stage on encoded
    images (:func:`tfdp.windows.decode.encoded_windows`) are built on it.

    Args:
        stage: The window stage (:class:`tfdp.windows.contract.WindowStage`).
        params: Its drawn parameters for the ``N`` samples (``stage.draw``).
        on_host: Plan the windows with NumPy (see above).

    Example:
        >>> import tensorflow as tf
        >>> from tfdp.augment import CenterCrop
        >>> plan = StageWindows(CenterCrop(4), tf.zeros([2, 0]), on_host=True)
        >>> plan.windows(tf.constant([[8, 8], [10, 6]])).numpy().tolist()
        [[0, 0, 7, 7], [2, 0, 5, 5]]
        >>> plan.finish(tf.zeros([7, 7, 3], tf.uint8), 0).shape
        TensorShape([4, 4, 3])
    """

    def __init__(self, stage: WindowStage, params: tf.Tensor, *, on_host: bool = False) -> None:
        self.stage, self.params = stage, params
        self.on_host = bool(on_host)
        self._placements: tf.Tensor | None = None

    def windows(self, shapes: tf.Tensor) -> tf.Tensor:
        """The windows ``[N, 4]`` int32 ``(top, left, height, width)`` for ``shapes`` ``[N, 2]``.

        A placed stage's placements are planned here too, for :meth:`finish`.
        """
        stage = self.stage
        host = self.on_host and stage.plans_on_host
        if stage.placed:
            self._placements = self._planned(
                stage.host_placements if host else None, stage.placements, shapes, tf.float32
            )
        return self._planned(stage.host_windows if host else None, stage.windows, shapes)

    def _planned(
        self, host: Any, graph: Any, shapes: tf.Tensor, dtype: tf.DType = tf.int32
    ) -> tf.Tensor:
        """``[N, 4]`` rows planned by ``host`` (NumPy, one graph node) if given, else ``graph``."""
        if host is None:
            return graph(shapes, self.params)
        rows = tf.numpy_function(
            host, [shapes, self.params], dtype, stateful=False, name=host.__name__
        )
        rows.set_shape([shapes.shape[0], 4])
        return rows

    def placement(self, j: Any) -> tf.Tensor | None:
        """Sample ``j``'s placement (a placed stage's, planned by :meth:`windows`), else None.

        Raises:
            StateError: a placed stage's placement asked before :meth:`windows` planned it.
        """
        if not self.stage.placed:
            return None
        if self._placements is None:
            raise StateError(
                "finish: a placed window stage's windows are planned by windows(shapes) "
                "first (their placements come with them)"
            )
        return self._placements[j]

    def resize(self, window: tf.Tensor, placement: tf.Tensor | None) -> tf.Tensor:
        """The stage's output from a window's pixels ``[h, w, C]`` and its placement (or None)."""
        if placement is None:  # (a stage of one's own may take the window alone)
            return self.stage.resize(window)
        return self.stage.resize(window, placement)

    def finish(self, window: tf.Tensor, j: Any) -> tf.Tensor:
        """Sample ``j``'s output from its window's pixels ``[h, w, C]`` (after :meth:`windows`)."""
        return self.resize(window, self.placement(j))

    def output_spec(self, window: tf.TensorSpec) -> tf.TensorSpec:
        """The spec of :meth:`finish`'s output for windows of spec ``window``: float32."""
        return tf.TensorSpec([*self.stage.size, window.shape[-1]], tf.float32)
