"""The ViT / DeiT models tfdp builds, by timm's names: their sizes, and what building them needs.

This module owns the table of names (:data:`MODELS`: timm's
``deit_{tiny,small,base}_patch16_224``, their ``_distilled_`` variants and
``vit_{tiny,small,base}_patch16_224``, each a :class:`ViTSpec` -- width,
depth, heads, MLP ratio, patch, distillation token, and the mean / std of
timm's pretrained configuration), :func:`model_spec` (a name checked, the
known ones listed when it is unknown), :func:`drop_path_rates` (timm's
stochastic-depth rule over the blocks) and :func:`require_keras_hub` (the
``tfdp[models]`` extra, found without importing it). Pure Python: it loads
no TensorFlow, so a command checks a model name before TensorFlow loads.

Example:
    >>> spec = model_spec("deit_small_distilled_patch16_224")
    >>> spec.width, spec.depth, spec.heads, spec.distilled
    (384, 12, 6, True)
    >>> [round(r, 4) for r in drop_path_rates(0.1, 4)]
    [0.0, 0.0333, 0.0667, 0.1]
"""

from __future__ import annotations

import difflib
import importlib.util
from dataclasses import dataclass

import numpy as np

from tfdp.errors import ConfigError

#: The pip extra that installs keras-hub, on which the models are built.
EXTRA = "pip install 'tfdp[models]'"
#: The distillation types that distil (DeiT's distillation_type; none trains without a teacher).
DISTILLATION_TYPES = ("soft", "hard")

#: ImageNet's mean / std (timm's ``IMAGENET_DEFAULT_*``: DeiT's models) and the
#: Inception-style 0.5 / 0.5 of timm's ``vit_*`` (augreg) pretrained configurations.
_IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
_INCEPTION = ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))


@dataclass(frozen=True)
class ViTSpec:
    """One model of the table: timm's ``VisionTransformer`` arguments, as DeiT's models set them.

    Every model is pre-norm, with a class token (and, when ``distilled``, a
    distillation token and a second head), query / key / value biases, layer
    normalisation of epsilon 1e-6, exact GELU, a final normalisation and the
    head on the class token (the two heads averaged at inference when
    distilled). ``mean`` / ``std`` are timm's pretrained configuration's.

    Example:
        >>> ViTSpec("demo", width=64, depth=2, heads=2).mlp_dim
        256
    """

    name: str
    width: int
    depth: int
    heads: int
    mlp_ratio: float = 4.0
    patch: int = 16
    distilled: bool = False
    mean: tuple[float, float, float] = _IMAGENET[0]
    std: tuple[float, float, float] = _IMAGENET[1]

    @property
    def mlp_dim(self) -> int:
        """The MLP's hidden width, ``int(width * mlp_ratio)`` as timm's ``Mlp``."""
        return int(self.width * self.mlp_ratio)

    @property
    def prefix_tokens(self) -> int:
        """Tokens before the patches: the class token, and the distillation token."""
        return 2 if self.distilled else 1


_SIZES = {"tiny": (192, 3), "small": (384, 6), "base": (768, 12)}


def _table() -> dict[str, ViTSpec]:
    out: dict[str, ViTSpec] = {}
    for size, (width, heads) in _SIZES.items():
        for name, distilled, (mean, std) in (
            (f"deit_{size}_patch16_224", False, _IMAGENET),
            (f"deit_{size}_distilled_patch16_224", True, _IMAGENET),
            (f"vit_{size}_patch16_224", False, _INCEPTION),
        ):
            out[name] = ViTSpec(name, width, 12, heads, distilled=distilled, mean=mean, std=std)
    return dict(sorted(out.items()))


#: Every model by its timm name.
MODELS: dict[str, ViTSpec] = _table()


def is_model_name(name: str) -> bool:
    """Whether ``name`` is one of :data:`MODELS` (any case).

    Example:
        >>> is_model_name("DeiT_Tiny_Patch16_224"), is_model_name("resnet50")
        (True, False)
    """
    return isinstance(name, str) and name.lower() in MODELS


def model_spec(name: str) -> ViTSpec:
    """The :class:`ViTSpec` of model ``name`` (timm's name, any case).

    Raises:
        ConfigError: (``argument="model"``) an unknown name, with the nearest
            known one and every known one.

    Example:
        >>> model_spec("vit_base_patch16_224").width
        768
        >>> model_spec("deit_tiny_patch16")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        tfdp.errors.ConfigError: model: 'deit_tiny_patch16' is not one of the ViT / DeiT names (did you mean 'deit_tiny_patch16_224'?): deit_base_distilled_patch16_224, ...
    """  # noqa: E501
    spec = MODELS.get(name.lower()) if isinstance(name, str) else None
    if spec is None:
        close = difflib.get_close_matches(str(name).lower(), list(MODELS), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(
            f"{name!r} is not one of the ViT / DeiT names{hint}: " + ", ".join(MODELS),
            argument="model",
        )
    return spec


def require_keras_hub(name: str) -> None:
    """Refuse model ``name`` when keras-hub, which builds it, is not installed (not imported).

    Raises:
        ConfigError: (``argument="model"``) naming the ``tfdp[models]`` extra.

    Example:
        >>> require_keras_hub("deit_tiny_patch16_224")  # installed here: nothing happens
    """
    if importlib.util.find_spec("keras_hub") is None:
        raise ConfigError(
            f"{name!r} is built on keras-hub, which is not installed: {EXTRA}",
            argument="model",
        )


def drop_path_rates(rate: float, depth: int) -> list[float]:
    """Stochastic depth's rate of each block: timm's ``torch.linspace(0, rate, depth)``.

    The values of torch's float32 ``linspace`` (its step from the start for
    the first half, from the end for the second, each ``start + step * i``
    rounded once, as its fused multiply-add kernel does), as Python floats:
    exactly timm's ``calculate_drop_path_rates(rate, depth)``.

    Raises:
        ConfigError: a rate outside ``[0, 1)`` (``argument="drop_path"``) or a depth below 1.

    Example:
        >>> drop_path_rates(0.1, 12)[:2], drop_path_rates(0.1, 12)[-1]
        ([0.0, 0.00909090880304575], 0.10000000149011612)
    """
    if not (isinstance(rate, (int, float)) and 0 <= rate < 1):
        raise ConfigError(f"must be in [0, 1), got {rate!r}", argument="drop_path")
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise ConfigError(f"must be an integer >= 1, got {depth!r}", argument="depth")
    if depth == 1:
        return [0.0]  # torch.linspace(0, rate, 1) is [0]
    start, end = np.float32(0.0), np.float32(rate)
    step = np.float64((end - start) / np.float32(depth - 1))  # float32 step, exact in float64
    half = depth // 2
    out = [
        np.float64(start) + step * i if i < half else np.float64(end) - step * (depth - 1 - i)
        for i in range(depth)
    ]
    return [float(np.float32(v)) for v in out]  # one rounding, as a fused multiply-add
