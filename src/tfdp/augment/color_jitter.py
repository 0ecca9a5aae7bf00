"""ColorJitter: torchvision's colour jitter of PIL images, as timm's training transform applies it.

Example:
    >>> import tensorflow as tf
    >>> jitter = ColorJitter(0.4, 0.4, 0.4)
    >>> jitter(tf.zeros([2, 8, 8, 3], tf.uint8), [[0, 0], [0, 1]]).dtype.name
    'float32'
"""

from __future__ import annotations

import functools
from typing import Any

import tensorflow as tf

from tfdp.augment import _pil_ops as pil
from tfdp.augment._each import each_sample
from tfdp.augment.base import Augmentation
from tfdp.augment.spec import ColorJitterSpec

_ADJUSTMENTS = ("brightness", "contrast", "saturation", "hue")


class ColorJitter(Augmentation):
    """torchvision's ``ColorJitter`` on 8-bit images (PIL's), per sample.

    Each sample draws a factor for each adjustment (brightness, contrast,
    saturation uniform in their ranges; hue a shift in turns) and a random
    order of the four, then applies them in that order as torchvision's PIL
    path does (``ImageEnhance`` blends, PIL's HSV for the hue:
    :mod:`tfdp.augment._pil_ops`, exact to PIL). A zero range turns an
    adjustment off. The input, in ``[0, 255]`` units, is rounded to 8-bit
    values first; the output is float32 with integer values.

    timm builds it from one number ``v`` as ``(v, v, v)`` (no hue):
    :meth:`from_timm`; and leaves it out when RandAugment is on (DeiT's
    default), see :func:`tfdp.augment.spec.color_jitter_applies`.

    Written here rather than reusing ``keras.layers.RandomColorJitter``,
    whose brightness is an offset, contrast per channel and saturation in
    floating-point HSV, applied in a fixed order: not torchvision's.

    Args:
        brightness: A number ``v`` (factor in ``[max(0, 1 - v), 1 + v]``) or a ``(min, max)``.
        contrast: Likewise.
        saturation: Likewise.
        hue: A number ``v <= 0.5`` (a shift in ``[-v, v]``) or a ``(min, max)`` in
            ``[-0.5, 0.5]``.
        image_key: Key of the images when the example is a dict.

    Example:
        >>> ColorJitter.from_timm(0.3).spec.saturation_range, ColorJitter(hue=0.1).draw_count()
        ((0.7, 1.3), 8)
    """

    def __init__(
        self,
        brightness: Any = 0.0,
        contrast: Any = 0.0,
        saturation: Any = 0.0,
        hue: Any = 0.0,
        *,
        image_key: str = "image",
    ) -> None:
        super().__init__(image_key=image_key)
        self.spec = ColorJitterSpec(brightness, contrast, saturation, hue)

    @classmethod
    def from_timm(cls, color_jitter: Any, **kwargs: Any) -> ColorJitter:
        """From timm's ``color_jitter``: a number ``v`` means ``(v, v, v)``, or 3 or 4 values.

        Example:
            >>> ColorJitter.from_timm(0.4).spec.active
            ('brightness', 'contrast', 'saturation')
        """
        spec = ColorJitterSpec.from_timm(color_jitter)
        return cls(spec.brightness, spec.contrast, spec.saturation, spec.hue, **kwargs)

    def draw_count(self) -> int:
        """8 uniforms per sample: the order (4) and the four factors."""
        return 8

    def apply(self, images: tf.Tensor, params: tf.Tensor) -> tf.Tensor:
        """The batch with each sample's jitter applied (float32, integer values)."""
        return each_sample(self._one, images, params)

    def _one(self, image: tf.Tensor, params: tf.Tensor) -> tf.Tensor:
        image = pil.quantize(image)
        active = self.spec.active
        if not active:
            return image
        order = tf.argsort(params[0, :4])  # a uniformly random order of the four
        factors = []
        for k, name in enumerate(_ADJUSTMENTS):
            lo, hi = getattr(self.spec, f"{name}_range")
            factors.append(lo + params[:, 4 + k] * (hi - lo))  # float32, as torch's uniform_
        for step in range(4):
            branches = [
                functools.partial(self._adjust, name, image, factors[k]) if name in active
                else functools.partial(tf.identity, image)
                for k, name in enumerate(_ADJUSTMENTS)
            ]  # fmt: skip
            image = tf.switch_case(order[step], branches)
            image.set_shape(params.shape[:1].concatenate(image.shape[1:]))
        return image

    @staticmethod
    def _adjust(name: str, image: tf.Tensor, factor: tf.Tensor) -> tf.Tensor:
        fn = {"brightness": pil.brightness, "contrast": pil.contrast,
              "saturation": pil.color, "hue": pil.hue}[name]  # fmt: skip
        return fn(image, factor)
