"""RandAugment with timm's semantics: its op set, magnitude noise and increasing variants.

Example:
    >>> import tensorflow as tf
    >>> ra = RandAugment.from_string("rand-m9-mstd0.5-inc1")
    >>> out = ra(tf.zeros([2, 16, 16, 3], tf.uint8), [[0, 0], [0, 1]])
    >>> tuple(out.shape), out.dtype.name
    ((2, 16, 16, 3), 'float32')
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import tensorflow as tf

from tfdp.augment import _pil_ops as pil
from tfdp.augment._affine import AFFINE_INTERPOLATIONS
from tfdp.augment._each import each_sample
from tfdp.augment._rand_ops import IMAGENET_FILL, rand_ops
from tfdp.augment.base import Augmentation
from tfdp.augment.spec import MAX_LEVEL, RandAugmentSpec, parse_rand_augment
from tfdp.errors import ConfigError
from tfdp.random.distributions import normal

#: Uniforms per layer: op choice, apply, magnitude noise (2), sign, resampling filter.
_PER_LAYER = 6


class RandDecisions(NamedTuple):
    """What a sample's RandAugment draws decide, per layer (:meth:`RandAugment.decisions`).

    Attributes:
        op: int32 ``[B, num_layers]``: the op's index in ``spec.ops``.
        applied: bool: the op is applied (probability ``prob``).
        level: float64: the magnitude, noise added and clipped.
        negate: bool: the random sign of the signed ops.
        bicubic: bool: bicubic rather than bilinear (``interpolation="random"``).
    """

    op: tf.Tensor
    applied: tf.Tensor
    level: tf.Tensor
    negate: tf.Tensor
    bicubic: tf.Tensor


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
        jit_compile: Compile the geometric ops' resampling, and the histograms and table
            lookups of AutoContrast and Equalize, with XLA (several times faster on CPU; the
            first use in a process compiles, a fraction of a second). The blends are not
            compiled: XLA fuses their multiply-add, which rounds once where PIL rounds twice.
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
                f"must be one of {(*AFFINE_INTERPOLATIONS, 'random')}, got {interpolation!r}",
                argument="interpolation",
            )
        self.interpolation = interpolation
        fills = tuple(fill) if isinstance(fill, (tuple, list)) else (fill,)
        if not fills or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 255 for v in fills
        ):
            raise ConfigError(
                f"must be a value in [0, 255] or one per channel, got {fill!r}",
                argument="fill",
            )
        self.fill = tuple(float(v) for v in fills)
        self.jit_compile = bool(jit_compile)
        self._ops = rand_ops(self.spec.ops, self.fill, interpolation, self.jit_compile)

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

    def decisions(self, params: tf.Tensor) -> RandDecisions:
        """What the draws ``params`` ``[B, draw_count()]`` decide, per sample and layer.

        Example:
            >>> import tensorflow as tf
            >>> ra = RandAugment(magnitude=9, prob=1.0)
            >>> d = ra.decisions(ra.draw(tf.constant([[0, 0], [0, 1]], tf.int64)))
            >>> tuple(d.op.shape), bool(tf.reduce_all(d.applied)), float(d.level[0, 0])
            ((2, 2), True, 9.0)
        """
        spec, n = self.spec, self.spec.num_layers
        count = len(spec.ops)
        layers = tf.reshape(params[:, : _PER_LAYER * n], [-1, n, _PER_LAYER])
        if spec.weighted:  # Gumbel top-k: numpy.random.choice without replacement, p=weights
            gumbel = -tf.math.log(-tf.math.log(params[:, _PER_LAYER * n :] + 2.0**-25))
            scores = tf.math.log(tf.constant(spec.weights, tf.float32)) + gumbel
            op = tf.math.top_k(scores, n).indices
        else:  # uniform, with replacement
            op = tf.minimum(tf.cast(layers[..., 0] * count, tf.int32), count - 1)
        magnitude = tf.constant(float(spec.magnitude), tf.float64)
        u1, u2 = tf.cast(layers[..., 2], tf.float64), tf.cast(layers[..., 3], tf.float64)
        if spec.magnitude_std == float("inf"):
            level = u1 * magnitude
        elif spec.magnitude_std > 0:
            level = magnitude + spec.magnitude_std * normal(u1, u2)
        else:
            level = tf.broadcast_to(magnitude, tf.shape(u1))
        return RandDecisions(
            op=op,
            applied=layers[..., 1] < spec.prob,  # timm: skipped if random() > prob
            level=tf.clip_by_value(level, 0.0, spec.bound),
            negate=layers[..., 4] > 0.5,  # timm: -v if random() > 0.5
            bicubic=layers[..., 5] < 0.5,
        )

    # -- one sample ------------------------------------------------------------------------
    def _one(self, image: tf.Tensor, params: tf.Tensor) -> tf.Tensor:
        image = pil.quantize(image)
        d = self.decisions(params)
        for layer in range(self.spec.num_layers):
            image = self._ops.layer(
                image, d.op[0, layer], d.applied[0, layer], d.level[:, layer],
                d.negate[:, layer], d.bicubic[0, layer],
            )  # fmt: skip
            image.set_shape(params.shape[:1].concatenate(image.shape[1:]))
        return image
