"""RandAugment with timm's semantics: its op set, magnitude noise and increasing variants.

Example:
    >>> import tensorflow as tf
    >>> ra = RandAugment.from_string("rand-m9-mstd0.5-inc1")
    >>> out = ra(tf.zeros([2, 16, 16, 3], tf.uint8), [[0, 0], [0, 1]])
    >>> tuple(out.shape), out.dtype.name
    ((2, 16, 16, 3), 'float32')
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf

from tfdp.augment import _pil_ops as pil
from tfdp.augment._affine import AFFINE_INTERPOLATIONS, affine, rotation
from tfdp.augment._each import compiled, each_sample
from tfdp.augment.base import Augmentation
from tfdp.augment.spec import MAX_LEVEL, RandAugmentSpec, parse_rand_augment
from tfdp.errors import ConfigError
from tfdp.random.distributions import normal

__all__ = ["IMAGENET_FILL", "RandAugment"]

#: timm's fill colour with ImageNet's mean (``round(255 * IMAGENET_DEFAULT_MEAN)``), DeiT's.
IMAGENET_FILL = (124.0, 116.0, 104.0)
#: Uniforms per layer: op choice, apply, magnitude noise (2), sign, resampling filter.
_PER_LAYER = 6


@functools.cache
def _resampler(axes: str, method: str, fill: tuple[float, ...], jit_compile: bool) -> Callable:
    """The affine resampling of one kind, compiled with XLA once per process (and image shape).

    XLA speeds up the pixel work without changing a value beyond the
    interpolation's rounding; the matrices are computed outside it, in double
    as timm's Python. The blends are not compiled: XLA fuses their
    multiply-add, rounding once where PIL rounds twice.
    """
    return compiled(
        functools.partial(affine, interpolation=method, fill=fill, axes=axes), jit_compile
    )


@functools.cache
def _equalizer(jit_compile: bool) -> Callable:
    """PIL's equalize (integer arithmetic), compiled with XLA once per process."""
    return compiled(pil.equalize, jit_compile)


def _signed(value: tf.Tensor, negate: tf.Tensor) -> tf.Tensor:
    """The ``_randomly_negate`` of timm: ``-value`` where ``negate``."""
    return tf.where(negate, -value, value)


class RandAugment(Augmentation):
    """timm's RandAugment (``timm.data.auto_augment.rand_augment_transform``), per sample.

    Each sample gets ``num_layers`` ops from timm's set (:data:`tfdp.augment.spec.RAND_OPS`,
    or the increasing set), chosen uniformly with replacement (``weighted``:
    timm's weights, without replacement); each is applied with probability
    ``prob`` at a magnitude drawn from ``N(magnitude, magnitude_std)``
    (uniform on ``[0, magnitude]`` for an infinite std) clipped to ``[0,
    magnitude_max or 10]``, and turned into the op's argument as timm's
    ``LEVEL_TO_ARG`` does (a random sign for rotate, shear, translate and the
    increasing enhancements). The ops are PIL's on 8-bit values
    (:mod:`tfdp.augment._pil_ops`, :mod:`tfdp.augment._affine`): the input,
    in ``[0, 255]`` units (before ``ToFloat`` / ``Normalize``), is rounded and
    clipped to 8-bit values first, as timm's PIL images are; the output is
    float32 with integer values. The geometric ops fill with ``fill`` (timm:
    the mean colour) and resample with ``interpolation`` (timm's
    ``"random"``: bilinear or bicubic per op).

    Written here rather than reusing ``keras.layers.RandAugment``, whose op
    set, magnitude scale and ops (float arithmetic, no random sign, no
    magnitude noise, bilinear only) are not timm's. One difference from
    timm: its increasing posterize at magnitude 10 asks Pillow (>= 10) for 0
    bits, which it refuses (an exception in the loader); here it gives black,
    what older Pillow gave.

    The random numbers come from the sample's seeds
    (:func:`tfdp.random.per_sample_uniform`): ``6 * num_layers`` uniforms
    (``+ 15`` when ``weighted``). Samples take different ops, so a batch is
    augmented one sample at a time (:mod:`tfdp.augment._each`).

    Args:
        magnitude: The level, in ``[0, magnitude_max or 10]``.
        num_layers: Ops per sample.
        prob: Probability of applying each chosen op.
        magnitude_std: Standard deviation of the magnitude noise (``math.inf``: uniform).
        magnitude_max: The bound magnitudes are clipped to (default 10).
        increasing: Use timm's increasing op set (``inc1``).
        weighted: Use timm's op weights (``tweights``).
        fill: Fill colour of the geometric ops (one value per channel, or one).
        interpolation: ``"bicubic"`` (DeiT's), ``"bilinear"``, ``"nearest"`` or
            ``"random"`` (timm's default: bilinear or bicubic per op).
        jit_compile: Compile the geometric ops' resampling and Equalize with XLA
            (several times faster on CPU; the first use in a process compiles, a
            fraction of a second). The blends are not compiled: XLA fuses their
            multiply-add, which rounds once where PIL rounds twice.
        image_key: Key of the images when the example is a dict.

    Example:
        >>> import tensorflow as tf
        >>> ra = RandAugment(magnitude=9, magnitude_std=0.5, increasing=True)
        >>> ra.draw_count(), ra.spec.ops[4]
        (12, 'PosterizeIncreasing')
    """

    def __init__(
        self,
        magnitude: float = MAX_LEVEL,
        num_layers: int = 2,
        prob: float = 0.5,
        magnitude_std: float = 0.0,
        magnitude_max: float | None = None,
        increasing: bool = False,
        weighted: bool = False,
        *,
        fill: float | Sequence[float] = IMAGENET_FILL,
        interpolation: str = "bicubic",
        jit_compile: bool = True,
        image_key: str = "image",
    ) -> None:
        super().__init__(image_key=image_key)
        self.spec = RandAugmentSpec(
            magnitude, num_layers, prob, magnitude_std, magnitude_max, bool(increasing),
            bool(weighted),
        )  # fmt: skip
        if interpolation not in (*AFFINE_INTERPOLATIONS, "random"):
            raise ConfigError(
                f"interpolation must be one of {(*AFFINE_INTERPOLATIONS, 'random')}, got "
                f"{interpolation!r}",
                argument="interpolation",
            )
        self.interpolation = interpolation
        fills = tuple(fill) if isinstance(fill, (tuple, list)) else (fill,)
        if not fills or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 255 for v in fills
        ):
            raise ConfigError(
                f"fill must be a value in [0, 255] or one per channel, got {fill!r}",
                argument="fill",
            )
        self.fill = tuple(float(v) for v in fills)
        self.jit_compile = bool(jit_compile)
        resamplers = ("bicubic", "bilinear") if interpolation == "random" else (interpolation,)
        self._affine = {
            (axes, method): _resampler(axes, method, self.fill, self.jit_compile)
            for axes in ("x", "y", "xy")
            for method in resamplers
        }
        self._equalize = _equalizer(self.jit_compile)

    @classmethod
    def from_string(cls, text: str, **kwargs: Any) -> RandAugment:
        """RandAugment from timm's string (``"rand-m9-mstd0.5-inc1"``).

        The grammar is :func:`tfdp.augment.spec.parse_rand_augment`'s;
        ``kwargs``: ``fill``, ``interpolation``, ``image_key``.

        Example:
            >>> RandAugment.from_string("rand-m9-n3-mstd0.5").spec.num_layers
            3
        """
        spec = parse_rand_augment(text)
        return cls(
            spec.magnitude, spec.num_layers, spec.prob, spec.magnitude_std, spec.magnitude_max,
            spec.increasing, spec.weighted, **kwargs,
        )  # fmt: skip

    def draw_count(self) -> int:
        """``6 * num_layers`` uniforms per sample (``+ 15`` when weighted)."""
        extra = len(self.spec.ops) if self.spec.weighted else 0
        return _PER_LAYER * self.spec.num_layers + extra

    def apply(self, images: tf.Tensor, params: tf.Tensor) -> tf.Tensor:
        """The batch with each sample's drawn ops applied (float32, integer values)."""
        if images.shape[-1] not in (1, 3, None):
            raise ConfigError(
                f"RandAugment takes images with 1 or 3 channels, got {images.shape[-1]}",
                argument="images",
            )
        return each_sample(self._one, images, params)

    # -- one sample ------------------------------------------------------------------------
    def _choices(self, params: tf.Tensor) -> list[tf.Tensor]:
        """Each layer's op index (int32 scalar) from one sample's draws."""
        spec, n = self.spec, self.spec.num_layers
        count = len(spec.ops)
        if spec.weighted:  # Gumbel top-k: numpy.random.choice without replacement, p=weights
            u = params[0, _PER_LAYER * n :]
            gumbel = -tf.math.log(-tf.math.log(u + 2.0**-25))
            scores = tf.math.log(tf.constant(spec.weights, tf.float32)) + gumbel
            top = tf.math.top_k(scores, n).indices
            return [top[k] for k in range(n)]
        picks = tf.cast(params[0, 0 : _PER_LAYER * n : _PER_LAYER] * count, tf.int32)
        return [tf.minimum(picks[k], count - 1) for k in range(n)]

    def _level(self, u1: tf.Tensor, u2: tf.Tensor) -> tf.Tensor:
        """The drawn magnitude (float64 ``[1]``), clipped as timm's ``AugmentOp`` does."""
        spec = self.spec
        magnitude = tf.constant(float(spec.magnitude), tf.float64)
        u1, u2 = tf.cast(u1, tf.float64), tf.cast(u2, tf.float64)
        if spec.magnitude_std == float("inf"):
            level = u1 * magnitude
        elif spec.magnitude_std > 0:
            level = magnitude + spec.magnitude_std * normal(u1, u2)
        else:
            level = tf.broadcast_to(magnitude, tf.shape(u1))
        return tf.clip_by_value(level, 0.0, spec.bound)

    def _one(self, image: tf.Tensor, params: tf.Tensor) -> tf.Tensor:
        image = pil.quantize(image)
        choices = self._choices(params)
        for layer, choice in enumerate(choices):
            p = params[:, _PER_LAYER * layer : _PER_LAYER * (layer + 1)]
            level = self._level(p[:, 2], p[:, 3])
            negate = p[:, 4] > 0.5  # timm: -v if random() > 0.5
            bicubic = p[0, 5] < 0.5
            branches = [
                functools.partial(self._op, name, image, level, negate, bicubic)
                for name in self.spec.ops
            ]
            image = tf.cond(
                p[0, 1] < self.spec.prob,
                lambda c=choice, b=branches: tf.switch_case(c, b),
                lambda i=image: i,
            )
            image.set_shape(params.shape[:1].concatenate(image.shape[1:]))
        return image

    def _geometric(
        self, image: tf.Tensor, matrices: tf.Tensor, bicubic: tf.Tensor, axes: str
    ) -> tf.Tensor:
        if self.interpolation != "random":
            return self._affine[axes, self.interpolation](image, matrices)
        return tf.cond(
            bicubic,
            lambda: self._affine[axes, "bicubic"](image, matrices),
            lambda: self._affine[axes, "bilinear"](image, matrices),
        )

    def _op(
        self, name: str, image: tf.Tensor, level: tf.Tensor, negate: tf.Tensor, bicubic: tf.Tensor
    ) -> tf.Tensor:
        """The op ``name`` at ``level`` (its ``LEVEL_TO_ARG``, in float64 as timm's Python)."""
        fraction = level / MAX_LEVEL
        shape = tf.shape(image)
        height, width = shape[1], shape[2]
        one, zero = tf.ones_like(level), tf.zeros_like(level)
        base = name.removesuffix("Increasing")
        increasing = name != base
        if base in ("Color", "Contrast", "Brightness", "Sharpness"):
            if increasing:
                factor = tf.maximum(1.0 + _signed(fraction * 0.9, negate), 0.1)
            else:
                factor = fraction * 1.8 + 0.1
            fn = {"Color": pil.color, "Contrast": pil.contrast, "Brightness": pil.brightness,
                  "Sharpness": pil.sharpness}[base]  # fmt: skip
            return fn(image, tf.cast(factor, tf.float32))  # PIL's float alpha
        if base == "Posterize":
            bits = tf.floor(fraction * 4)
            return pil.posterize(image, 4 - bits if increasing else bits)
        if base == "Solarize":
            threshold = tf.minimum(tf.floor(fraction * 256), 256.0)
            return pil.solarize(image, 256 - threshold if increasing else threshold)
        if name == "SolarizeAdd":
            return pil.solarize_add(image, tf.minimum(tf.floor(fraction * 110), 128.0))
        if name == "AutoContrast":
            return pil.autocontrast(image)
        if name == "Equalize":
            return self._equalize(image)
        if name == "Invert":
            return pil.invert(image)
        axes = "y" if name in ("ShearY", "TranslateYRel") else "x"
        if name == "Rotate":
            axes = "xy"
            matrices = rotation(_signed(fraction * 30.0, negate), height, width)
        elif name in ("ShearX", "ShearY"):
            shear = _signed(fraction * 0.3, negate)
            row = [one, shear, zero, zero, one, zero] if name == "ShearX" else [
                one, zero, zero, shear, one, zero]  # fmt: skip
            matrices = tf.stack(row, axis=1)
        elif name in ("TranslateXRel", "TranslateYRel"):
            pct = _signed(fraction * 0.45, negate)  # timm's translate_pct
            if name == "TranslateXRel":
                row = [one, zero, pct * tf.cast(width, tf.float64), zero, one, zero]
            else:
                row = [one, zero, zero, zero, one, pct * tf.cast(height, tf.float64)]
            matrices = tf.stack(row, axis=1)
        else:  # pragma: no cover - the spec's op names are all handled above
            raise ConfigError(f"unknown RandAugment op {name!r}")
        return self._geometric(image, matrices, bicubic, axes)
