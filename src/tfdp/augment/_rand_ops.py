"""RandAugment's ops: timm's ``LEVEL_TO_ARG`` and ``NAME_TO_OP``, applied to one sample.

This module owns what timm's ``AugmentOp`` does once its magnitude and sign
are drawn: the op's argument from the level, in float64 as timm's Python
computes it, and the op on 8-bit values (:mod:`tfdp.augment._pil_ops`,
:mod:`tfdp.augment._affine`). :func:`rand_ops` gives one :class:`RandOps` per
configuration and process, so that every :class:`~tfdp.augment.RandAugment`
alike shares its traced layer and its XLA compilations.

Example:
    >>> import tensorflow as tf
    >>> ops = rand_ops(("Invert",), (0.0,), "bicubic", False)
    >>> image = tf.fill([1, 2, 2, 1], 10.0)
    >>> op, applied, level = tf.constant(0), tf.constant(True), tf.constant([5.0], tf.float64)
    >>> args = (op, applied, level, tf.constant([False]), tf.constant(True))
    >>> ops.layer(image, *args)[0, 0, 0, 0].numpy().item()
    245.0
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import tensorflow as tf

from tfdp.augment import _pil_ops as pil
from tfdp.augment._affine import affine, rotation
from tfdp.augment._each import compiled, traced_per_image_kind
from tfdp.augment._pil_ops import div, mul
from tfdp.augment.spec import MAX_LEVEL
from tfdp.errors import ConfigError

#: timm's fill colour with ImageNet's mean (``round(255 * IMAGENET_DEFAULT_MEAN)``), DeiT's.
IMAGENET_FILL = (124.0, 116.0, 104.0)


def _resampler(axes: str, method: str, fill: tuple[float, ...], jit_compile: bool) -> Callable:
    """The affine resampling of one kind, compiled with XLA once per process (and image shape).

    XLA speeds up the pixel work without changing a value beyond the
    interpolation's rounding; the matrices are computed outside it, in double
    as timm's Python. The blends are not compiled: XLA fuses their
    multiply-add, rounding once where PIL rounds twice.
    """
    return functools.partial(
        affine, interpolation=method, fill=fill, axes=axes, jit_compile=jit_compile
    )


@functools.cache
def _histograms(jit_compile: bool) -> Callable:
    """Per-channel histograms (integer counts), compiled with XLA once per process."""
    return compiled(pil.histograms, jit_compile)


@functools.cache
def _lookup(jit_compile: bool) -> Callable:
    """The per-channel table lookup (a gather: exact), compiled with XLA once per process."""
    return compiled(pil.lookup, jit_compile)


def _signed(value: tf.Tensor, negate: tf.Tensor) -> tf.Tensor:
    """The ``_randomly_negate`` of timm: ``-value`` where ``negate``."""
    return tf.where(negate, -value, value)


@functools.cache
def rand_ops(
    ops: tuple[str, ...], fill: tuple[float, ...], interpolation: str, jit_compile: bool
) -> RandOps:
    """The :class:`RandOps` of a configuration, one per process.

    Example:
        >>> rand_ops(("Invert",), (0.0,), "bicubic", False) is rand_ops(
        ...     ("Invert",), (0.0,), "bicubic", False)
        True
    """
    return RandOps(ops, fill, interpolation, jit_compile)


class RandOps:
    """timm's ops ``ops`` on one sample; :attr:`layer` applies the drawn one.

    Args:
        ops: The op names (timm's), in the order the draws index them.
        fill: The geometric ops' fill colour.
        interpolation: ``"nearest"``, ``"bilinear"``, ``"bicubic"`` or ``"random"``.
        jit_compile: Compile the resampling, the histograms and the table lookups with XLA.
    """

    def __init__(
        self, ops: tuple[str, ...], fill: tuple[float, ...], interpolation: str, jit_compile: bool
    ) -> None:
        self.ops, self.fill, self.interpolation = ops, fill, interpolation
        resamplers = ("bicubic", "bilinear") if interpolation == "random" else (interpolation,)
        self._affine = {
            (axes, method): _resampler(axes, method, fill, jit_compile)
            for axes in ("x", "y", "xy")
            for method in resamplers
        }
        self._histograms = _histograms(jit_compile)
        self._lookup = _lookup(jit_compile)
        #: ``layer(image, op, applied, level, negate, bicubic)``: one layer on one sample, a
        #: ``tf.function`` per kind of image traced once and called by every layer (its
        #: branches are traced, and instantiated by a new ``tf.data`` iterator, once).
        self.layer = traced_per_image_kind(self._apply_layer)

    def _apply_layer(
        self,
        image: tf.Tensor,
        op: tf.Tensor,
        applied: tf.Tensor,
        level: tf.Tensor,
        negate: tf.Tensor,
        bicubic: tf.Tensor,
    ) -> tf.Tensor:
        """One layer on one sample: op ``op`` when ``applied`` (only that op's branch runs).

        A ``tf.function`` traced once and called by every layer: its 15
        branches are traced (and instantiated by a new ``tf.data`` iterator)
        once, not once per layer.
        """
        args = (image, level, negate, bicubic)
        branches = [functools.partial(self._op, name, *args) for name in self.ops]
        return tf.cond(applied, lambda: tf.switch_case(op, branches), lambda: image)

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
        fraction = div(level, MAX_LEVEL)  # timm: (level / 10) * scale, as written
        shape = tf.shape(image)
        height, width = tf.cast(shape[1], tf.float64), tf.cast(shape[2], tf.float64)
        one, zero = tf.ones_like(level), tf.zeros_like(level)
        base = name.removesuffix("Increasing")
        increasing = name != base
        if base in ("Color", "Contrast", "Brightness", "Sharpness"):
            if increasing:
                factor = tf.maximum(1.0 + _signed(mul(fraction, 0.9), negate), 0.1)
            else:
                factor = mul(fraction, 1.8) + 0.1
            fn = {"Color": pil.color, "Contrast": pil.contrast, "Brightness": pil.brightness,
                  "Sharpness": pil.sharpness}[base]  # fmt: skip
            return fn(image, tf.cast(factor, tf.float32))  # PIL's float alpha
        if base == "Posterize":
            bits = tf.floor(mul(fraction, 4.0))
            return pil.posterize(image, 4 - bits if increasing else bits)
        if base == "Solarize":
            threshold = tf.minimum(tf.floor(mul(fraction, 256.0)), 256.0)
            return pil.solarize(image, 256 - threshold if increasing else threshold)
        if name == "SolarizeAdd":
            return pil.solarize_add(image, tf.minimum(tf.floor(mul(fraction, 110.0)), 128.0))
        if name == "AutoContrast":
            return self._lookup(image, pil.autocontrast_tables(image))
        if name == "Equalize":
            return self._lookup(image, pil.equalize_tables(self._histograms(image)))
        if name == "Invert":
            return pil.invert(image)
        axes = "y" if name in ("ShearY", "TranslateYRel") else "x"
        if name == "Rotate":
            axes = "xy"
            matrices = rotation(_signed(mul(fraction, 30.0), negate), shape[1], shape[2])
        elif name in ("ShearX", "ShearY"):
            shear = _signed(mul(fraction, 0.3), negate)
            row = [one, shear, zero, zero, one, zero] if name == "ShearX" else [
                one, zero, zero, shear, one, zero]  # fmt: skip
            matrices = tf.stack(row, axis=1)
        elif name in ("TranslateXRel", "TranslateYRel"):
            pct = _signed(mul(fraction, 0.45), negate)  # timm's translate_pct
            if name == "TranslateXRel":
                row = [one, zero, mul(pct, width), zero, one, zero]
            else:
                row = [one, zero, zero, zero, one, mul(pct, height)]
            matrices = tf.stack(row, axis=1)
        else:  # pragma: no cover - the spec's op names are all handled above
            raise ConfigError(f"unknown RandAugment op {name!r}")
        return self._geometric(image, matrices, bicubic, axes)
