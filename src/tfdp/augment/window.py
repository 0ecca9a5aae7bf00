"""WindowAugmentation: the base of the stages that cut one window per image and resize it.

This module owns a window stage's augmentation side: its resize (each window
on its own, :meth:`WindowAugmentation.resize`) and its application to a batch
of decoded images, or of encoded ones (then only each window is decoded:
:func:`tfdp.windows.decode.encoded_windows`). Where each sample's window lies
-- planned from the image's shape and the sample's draws, before any pixel is
decoded -- and how the stage's output maps onto it is the stage's geometry
(:class:`tfdp.windows.contract.WindowGeometry`, :mod:`tfdp.windows.geometry`).
The stages themselves -- :class:`~tfdp.augment.RandomResizedCrop`,
:class:`~tfdp.augment.CenterCrop`, :class:`~tfdp.augment.ResizeCenterCrop` --
check their arguments, say what they draw and hold their geometry. A
window-decoding source plans with the same geometry (:mod:`tfdp.windows`), so
the window path and the plain batched path give bit-identical results.

Example:
    >>> import tensorflow as tf
    >>> from tfdp.augment import CenterCrop
    >>> CenterCrop(4)(tf.zeros([2, 10, 12, 3], tf.uint8), [[0, 0], [0, 1]]).shape
    TensorShape([2, 4, 4, 3])
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import tensorflow as tf

from tfdp._arrays import NUMPY, TENSORFLOW
from tfdp.augment import _fast
from tfdp.augment._args import pair
from tfdp.augment.base import Augmentation
from tfdp.errors import ConfigError
from tfdp.windows.contract import WindowGeometry
from tfdp.windows.decode import encoded_windows

#: The resize methods of a window stage: ``tf.image.resize``'s names, and timm's ``lanczos``
#: (``lanczos3``, PIL's) and ``box`` (``area``: the mean over each output pixel's footprint).
INTERPOLATIONS = (
    "bilinear", "nearest", "bicubic", "area", "lanczos3", "lanczos5", "mitchellcubic",
    "gaussian", "lanczos", "box",
)  # fmt: skip
_ALIASES = {"lanczos": "lanczos3", "box": "area"}
_NOT_HERE = {
    "hamming": "PIL's hamming filter has no tf.image.resize counterpart",
    "random": "timm's 'random' picks bilinear or bicubic per image; pick one",
}


class WindowAugmentation(Augmentation):
    """Base class of the stages that cut one window per image and resize it to ``size``.

    The contract a window-decoding source relies on:

    * :meth:`windows` plans every sample's window from the image's shape and
      the sample's drawn parameters alone (vectorised over samples), before
      any pixel is decoded: the stage's :attr:`geometry`
      (:mod:`tfdp.windows.geometry`), in TensorFlow or, by
      :meth:`host_windows`, NumPy;
    * :meth:`resize` turns one window's pixels into the output, sample by sample.

    ``apply`` on a batch is exactly that: plan, slice each window, resize
    it. So the output for a sample does not depend on whether the source
    decoded the whole image or only the window.

    A stage whose output is not the whole window stretched to ``size`` --
    one that resamples a region with sub-pixel bounds, the window being the
    pixels its filter reads (:class:`~tfdp.augment.ResizeCenterCrop`) -- is
    *placed* (:attr:`placed`, its geometry's): it plans a :meth:`placements`
    row per sample too, the scale and translation that :meth:`resize`
    applies to the window (``ScaleAndTranslate``'s, antialiased ``bicubic``
    or ``bilinear``).

    A stage of one's own sets :attr:`geometry` (any
    :class:`~tfdp.windows.contract.WindowGeometry`), or overrides
    :meth:`windows` -- then planned in the graph only, unless it overrides
    :meth:`host_windows` too.

    The resize is ``tf.image.resize`` of the window alone (half-pixel
    centres, as torchvision and TF Model Garden; pixels outside the window
    never leak in; ``antialias`` as in ``tf.image.resize``; bilinear and bicubic
    antialiased windows are computed by ``_fast.resize_antialiased``, the same values
    about twice as fast). Output float32 in the input's value units.

    Args:
        size: Output ``(height, width)``, or one int for a square output.
        interpolation: ``"bilinear"``, ``"bicubic"`` (DeiT's), ``"nearest"``,
            ``"area"``, ``"lanczos3"`` ... (:data:`INTERPOLATIONS`; timm's
            ``"lanczos"`` and ``"box"`` too).
        antialias: Low-pass filter when downsampling (``tf.image.resize``'s
            ``antialias``), as PIL's resize -- timm's RandomResizedCrop -- does:
            bicubic then matches PIL's to 0.2 levels on average (a few at sharp
            edges), where without it a 300x400 -> 224 shrink differs by 5; slower.
        image_key: Key of the images when the example is a dict.
    """

    accepts_encoded: ClassVar[bool] = True
    _geometry: WindowGeometry | None = None  # see geometry

    def __init__(
        self,
        size: int | tuple[int, int],
        interpolation: str = "bilinear",
        antialias: bool = False,
        *,
        image_key: str = "image",
    ) -> None:
        super().__init__(image_key=image_key)
        self.size = pair(size, "size", 1)
        if interpolation not in INTERPOLATIONS:
            why = f" ({_NOT_HERE[interpolation]})" if interpolation in _NOT_HERE else ""
            raise ConfigError(
                f"must be one of {INTERPOLATIONS}, got {interpolation!r}{why}",
                argument="interpolation",
            )
        self.interpolation = interpolation
        self.antialias = bool(antialias)

    @property
    def geometry(self) -> WindowGeometry | None:
        """Which pixels of each image the stage reads, and how they map to its output.

        A :class:`tfdp.windows.contract.WindowGeometry` (tfdp's:
        :mod:`tfdp.windows.geometry`), set by the stage; None for a stage of
        one's own that overrides :meth:`windows` instead.

        Example:
            >>> from tfdp.augment import CenterCrop
            >>> CenterCrop(224).geometry
            CentredWindows(size=(224, 224), crop_fraction=0.875)
        """
        return self._geometry

    @geometry.setter
    def geometry(self, geometry: WindowGeometry) -> None:
        self._geometry = geometry

    @property
    def placed(self) -> bool:
        """Whether the stage plans a placement of its output in each window (:meth:`placements`).

        Example:
            >>> from tfdp.augment import CenterCrop, ResizeCenterCrop
            >>> CenterCrop(224).placed, ResizeCenterCrop(224).placed
            (False, True)
        """
        return self.geometry is not None and self.geometry.placed

    def windows(self, shapes: tf.Tensor, params: tf.Tensor) -> tf.Tensor:
        """The windows ``[N, 4]`` int32 ``(top, left, height, width)`` of images of ``shapes``.

        Args:
            shapes: int32 ``[N, 2]``, each image's ``(height, width)``.
            params: The drawn parameters of the ``N`` samples (:meth:`draw`).

        Example:
            >>> import tensorflow as tf
            >>> from tfdp.augment import CenterCrop
            >>> crop = CenterCrop(224)
            >>> crop.windows(tf.constant([[375, 500]]), tf.zeros([1, 0])).numpy().tolist()
            [[24, 86, 328, 328]]
        """
        return self._geometry_of().windows(TENSORFLOW, shapes, params)

    def host_windows(self, shapes: np.ndarray, params: np.ndarray) -> np.ndarray:
        """:meth:`windows` computed by NumPy: for a loader that plans its windows on the host.

        The stage's geometry computes both with one implementation. A stage of
        one's own that overrides :meth:`windows` alone is planned in the graph
        (:attr:`plans_on_host` is False); it may override this method too,
        returning the same int32 ``[N, 4]`` windows.

        Example:
            >>> import numpy as np
            >>> from tfdp.augment import CenterCrop
            >>> crop = CenterCrop(224)
            >>> crop.host_windows(np.array([[375, 500]]), np.zeros([1, 0], np.float32)).tolist()
            [[24, 86, 328, 328]]
        """
        out = self._geometry_of().windows(NUMPY, np.asarray(shapes), np.asarray(params))
        return np.ascontiguousarray(out, dtype=np.int32)

    @property
    def plans_on_host(self) -> bool:
        """Whether :meth:`host_windows` can plan this stage's windows.

        Example:
            >>> from tfdp.augment import RandomResizedCrop
            >>> RandomResizedCrop(224).plans_on_host
            True
        """
        return (
            self.geometry is not None
            or type(self).host_windows is not WindowAugmentation.host_windows
        )

    def placements(self, shapes: tf.Tensor, params: tf.Tensor) -> tf.Tensor:
        """A placed stage's output in each window: float32 ``[N, 4]`` for :meth:`resize`.

        Row ``i`` is ``(scale_y, scale_x, translation_y, translation_x)``: output
        pixel ``(y, x)`` samples window ``i`` at ``((y + 0.5 - translation_y) /
        scale_y, (x + 0.5 - translation_x) / scale_x)`` (pixel centres at
        half-integers, ``ScaleAndTranslate``'s convention). Only for a
        :attr:`placed` stage; planned from the same ``shapes`` and ``params`` as
        :meth:`windows`.

        Example:
            >>> import tensorflow as tf
            >>> from tfdp.augment import ResizeCenterCrop
            >>> crop = ResizeCenterCrop(4, crop_ratio=1.0)
            >>> crop.placements(tf.constant([[8, 8]]), tf.zeros([1, 0])).numpy().tolist()
            [[0.5, 0.5, 0.0, 0.0]]
        """
        return self._geometry_of().placements(TENSORFLOW, shapes, params)

    def host_placements(self, shapes: np.ndarray, params: np.ndarray) -> np.ndarray:
        """:meth:`placements` computed by NumPy (a loader that plans on the host)."""
        out = self._geometry_of().placements(NUMPY, np.asarray(shapes), np.asarray(params))
        return np.ascontiguousarray(out, dtype=np.float32)

    def _geometry_of(self) -> WindowGeometry:
        geometry = self.geometry
        if geometry is None:
            raise NotImplementedError(
                f"{type(self).__name__} has no geometry: a window stage sets one "
                "(tfdp.windows.geometry) or overrides windows"
            )
        return geometry

    def resize(self, window: tf.Tensor, placement: tf.Tensor | None = None) -> tf.Tensor:
        """Resize one window ``[h, w, C]`` (any real dtype) to float32 ``[size_h, size_w, C]``.

        ``placement``: a placed stage's row of :meth:`placements` for this
        window (its scale and translation, antialiased as
        :func:`tf.image.resize` with ``antialias=True``); None: the whole
        window stretched to ``size``.

        Example:
            >>> import tensorflow as tf
            >>> from tfdp.augment import CenterCrop
            >>> CenterCrop(4).resize(tf.zeros([7, 9, 3], tf.uint8)).shape
            TensorShape([4, 4, 3])
        """
        method = _ALIASES.get(self.interpolation, self.interpolation)
        if placement is not None:
            if method not in _fast.SEPARABLE or window.shape.rank != 3:
                raise ConfigError(
                    f"must be one of {sorted(_fast.SEPARABLE)} for a placed window "
                    f"stage (a [h, w, C] window), got {self.interpolation!r}",
                    argument="interpolation",
                )
            return _fast.resize_antialiased(window, self.size, method, placement)
        if self.antialias and method in _fast.SEPARABLE and window.shape.rank == 3:
            return _fast.resize_antialiased(window, self.size, method)  # the same values
        out = tf.image.resize(window, self.size, method=method, antialias=self.antialias)
        return tf.cast(out, tf.float32)

    def apply(self, images: tf.Tensor, params: tf.Tensor) -> tf.Tensor:
        """Plan each sample's window on the batch's image size, slice it and resize it.

        ``images`` may also be a batch ``[B]`` of encoded images (JPEG, PNG,
        ...; e.g. ``TFRecordSource(images="encoded")``): each JPEG then has
        only its window decoded (:func:`tfdp.windows.decode.encoded_windows`,
        RGB), with the same result as on the decoded images.
        """
        if images.dtype == tf.string:
            return encoded_windows(images, self, params)
        shape = tf.shape(images)
        batch = shape[0]
        shapes = tf.tile(shape[tf.newaxis, 1:3], tf.stack([batch, 1]))
        boxes = self.windows(shapes, params)
        places = self.placements(shapes, params) if self.placed else None

        def one(b: tf.Tensor | int) -> tf.Tensor:
            top, left, height, width = tf.unstack(boxes[b])
            window = images[b, top : top + height, left : left + width]
            if places is None:  # (a stage of one's own may override resize(window) alone)
                return self.resize(window)
            return self.resize(window, places[b])

        if images.shape[0] == 1:  # a batch of one (per-example pipelines): no loop
            return one(0)[tf.newaxis]
        spec = tf.TensorSpec([*self.size, images.shape[-1]], tf.float32)
        return tf.map_fn(one, tf.range(batch), fn_output_signature=spec)
