"""DeiT's / timm's augmentation options of the training job: flags, checks and the stages built.

This module owns the options ``tfdp train`` takes with DeiT's ``main.py`` /
timm's ``train.py`` names (``--aa``, ``--color-jitter``, ``--reprob``,
``--remode``, ``--recount``, ``--mixup``, ``--cutmix``, ``--mixup-prob``,
``--mixup-switch-prob``, ``--mixup-mode``, ``--train-interpolation``) as
:class:`AugmentOptions` (a part of :class:`tfdp.recipe.config.TrainConfig`),
:func:`check_augment_options` (their values checked before TensorFlow loads,
by the library's own specs, :mod:`tfdp.augment.spec`, said as the flags) and
:func:`deit_stages` (the :mod:`tfdp.augment` stages they stand for, in
timm's ``create_transform`` order).

How the options become stages, after the crop and flip of ``--augment``:

* ``--aa`` (timm's RandAugment string) on the pixels as 0..255 values, with
  timm's fill (the mean colour) and ``--train-interpolation`` for its
  geometric ops when given (else bicubic, DeiT's); ``--color-jitter`` only
  without ``--aa``, as timm's ``transforms_imagenet_train`` (DeiT's 0.3 next to
  its ``--aa`` therefore does nothing);
* the pixels scaled to [0, 1] (the model's input, as without these options);
* ``--reprob`` / ``--remode`` / ``--recount``: timm's RandomErasing, which
  erases *normalised* images (0 is the mean colour, the noise is in units of
  the channel's standard deviation): the recipe normalises with ImageNet's
  mean and std (their averages for other channel counts), erases, and maps
  back, so an erased pixel is ``mean + std * noise`` in [0, 1] units (the
  others are unchanged to float rounding);
* ``--mixup`` / ``--cutmix`` / ``--mixup-prob`` / ``--mixup-switch-prob`` /
  ``--mixup-mode``: timm's Mixup on each replica's batch, its soft targets
  smoothed by ``--smoothing`` (timm's ``label_smoothing``; the loss is then the
  soft-target cross-entropy, which smooths nothing again).

Importing it loads no TensorFlow; :func:`deit_stages` imports :mod:`tfdp.augment`.

Example:
    >>> opts = AugmentOptions(aa="rand-m9-mstd0.5-inc1", mixup=0.8, cutmix=1.0)
    >>> mixing(opts), opts.remode
    (True, 'pixel')
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from tfdp.augment.spec import (
    ERASE_MODES,
    MIX_MODES,
    ColorJitterSpec,
    ErasingSpec,
    MixupSpec,
    color_jitter_applies,
    parse_rand_augment,
)
from tfdp.errors import ConfigError, TfdpError, said_as
from tfdp.recipe.options import option

__all__ = [
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "TRAIN_INTERPOLATIONS",
    "AugmentOptions",
    "augment_kind",
    "check_augment_options",
    "deit_stages",
    "mixing",
    "resize_options",
]

#: ``--train-interpolation``'s values: timm's names that tfdp's resize has (timm's ``random``
#: picks a filter per image and ``hamming`` has no ``tf.image.resize`` counterpart).
TRAIN_INTERPOLATIONS = ("bilinear", "bicubic", "nearest", "box", "lanczos")
#: RandAugment's geometric ops resample with these (PIL's affine transform takes no other).
_AFFINE = ("bilinear", "bicubic", "nearest")
#: timm's ``IMAGENET_DEFAULT_MEAN`` / ``_STD``: the normalisation timm's RandomErasing works in,
#: and (times 255, rounded) RandAugment's fill colour.
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
#: Placeholder class count for checking the Mixup options before the data is read (the data's
#: own count is checked when the stages are built).
_SOME_CLASSES = 1000


@dataclass
class AugmentOptions:
    """DeiT's / timm's augmentation options (the last options of ``TrainConfig``).

    Every one is off by default (tfdp's digits shifts or ImageNet crop and flip
    alone, as before these options); ``examples/deit.toml`` holds DeiT's values.
    A resumed run keeps them: the interrupted epoch's samples must get the
    augmentation they would have had.

    Example:
        >>> AugmentOptions().reprob, AugmentOptions().mixup_mode
        (0.0, 'batch')
    """

    aa: str | None = option(
        None,
        "RandAugment as timm's --aa string (DeiT: rand-m9-mstd0.5-inc1): 'rand' then sections "
        "m<0..10> magnitude, n<int> ops per image, mstd<float> magnitude noise, inc1 the "
        "increasing ops, p<float> probability of each op, mmax<int> bound, tweights; 'none' or "
        "not given: off. Applied to the 0..255 pixel values after the crop and flip",
    )
    color_jitter: float = option(
        0.0,
        "colour jitter v: brightness, contrast and saturation factors in [1 - v, 1 + v] "
        "(torchvision's ColorJitter, as timm builds it from --color-jitter v); like timm's "
        "create_transform, applied only without --aa (DeiT's 0.3 beside its --aa does "
        "nothing); 0: off",
    )
    reprob: float = option(
        0.0,
        "random erasing probability (timm's RandomErasing, in [0, 1]; DeiT: 0.25); boxes of "
        "1/50 to 1/3 of the image, aspect 0.3 to 3.3, filled in ImageNet-normalised units",
    )
    remode: str = option(
        "pixel",
        "random erasing fill: per-pixel normal noise (pixel, DeiT's), one normal value per "
        "channel (rand), or the mean colour (const)",
        ERASE_MODES[::-1],
    )
    recount: int = option(1, "random erasing: boxes per erased image (timm's max count)")
    mixup: float = option(
        0.0,
        "Mixup's Beta(alpha, alpha) (timm's, DeiT: 0.8); > 0 turns Mixup on: the targets "
        "become soft (smoothed by --smoothing), the training loss the soft-target "
        "cross-entropy and the training accuracy soft_target_accuracy (argmax against the "
        "target's argmax); held-out metrics use the plain labels",
    )
    cutmix: float = option(
        0.0, "CutMix's Beta(alpha, alpha) (timm's, DeiT: 1.0); > 0 turns CutMix on (see --mixup)"
    )
    mixup_prob: float = option(1.0, "probability of mixing a batch (pair, sample) when on")
    mixup_switch_prob: float = option(
        0.5, "probability of CutMix rather than Mixup when both are on"
    )
    mixup_mode: str = option(
        "batch",
        "one draw per replica's batch (DeiT's), per pair (sample i and B-1-i) or per sample "
        "(timm's half, its fast collate's, is not here)",
        MIX_MODES,
    )
    train_interpolation: str | None = option(
        None,
        "the training resize filter: RandomResizedCrop's, antialiased as PIL's (timm's) "
        "resize, and --aa's geometric ops (bilinear, bicubic, nearest); DeiT: bicubic (timm's "
        "random and hamming are not here)",
        TRAIN_INTERPOLATIONS,
        computed="bilinear without antialiasing for the crop, bicubic for --aa",
    )


def mixing(cfg: Any) -> bool:
    """Whether ``cfg`` mixes samples (``--mixup`` or ``--cutmix`` > 0): soft targets then.

    Example:
        >>> mixing(AugmentOptions()), mixing(AugmentOptions(cutmix=1.0))
        (False, True)
    """
    return cfg.mixup > 0 or cfg.cutmix > 0


def augment_kind(cfg: Any) -> str:
    """``--augment`` resolved: ``auto`` is shift for digits, resized-crop with ``--image-size``.

    Example:
        >>> from tfdp.recipe.config import TrainConfig
        >>> augment_kind(TrainConfig()), augment_kind(TrainConfig(data="x.npz", image_size=32))
        ('shift', 'resized-crop')
    """
    if cfg.augment != "auto":
        return str(cfg.augment)
    if cfg.data == "digits":
        return "shift"
    return "resized-crop" if cfg.image_size else "crop-flip"


@contextmanager
def _said(**names: str) -> Iterator[None]:
    """The library's refusals inside, said with the flags (the recipe's words: no ``argument``)."""
    try:
        yield
    except TfdpError as exc:
        raise type(exc)(str(said_as(exc, names))) from None


def check_augment_options(cfg: Any) -> None:
    """Refuse augmentation options no run can use, naming the flag and what is valid.

    Pure Python (before TensorFlow loads). The values are checked by the
    specs the stages are built from (:mod:`tfdp.augment.spec`), so each check
    exists once; what the flags combine is checked here.

    Raises:
        ConfigError: for the first bad value.

    Example:
        >>> check_augment_options(AugmentOptions(aa="rand-m11"))
        Traceback (most recent call last):
        ...
        tfdp.errors.ConfigError: --aa 'rand-m11': magnitude 11 (section 'm11') is above its \
bound 10 (timm would clip it to 10); lower it, or raise the bound with mmax11
    """
    if cfg.aa is not None:
        with _said():
            parse_rand_augment(cfg.aa, argument="--aa")
    with _said(color_jitter="--color-jitter"):
        ColorJitterSpec.from_timm(cfg.color_jitter)
    with _said(probability="--reprob", mode="--remode", max_count="--recount"):
        ErasingSpec(cfg.reprob, mode=cfg.remode, max_count=cfg.recount)
    for name in ("mixup", "cutmix"):
        value = getattr(cfg, name)
        if not (math.isfinite(value) and value >= 0):
            flag = "--" + name
            raise ConfigError(
                f"{flag} must be a finite number >= 0 (Beta's alpha; 0: off), got {value}"
            )
    if mixing(cfg):
        names = {"mixup_alpha": "--mixup", "cutmix_alpha": "--cutmix", "prob": "--mixup-prob",
                 "switch_prob": "--mixup-switch-prob", "mode": "--mixup-mode",
                 "label_smoothing": "--smoothing"}  # fmt: skip
        with _said(**names):
            MixupSpec(
                cfg.mixup, cfg.cutmix, None, cfg.mixup_prob, cfg.mixup_switch_prob,
                cfg.mixup_mode, True, cfg.smoothing, _SOME_CLASSES,
            )  # fmt: skip
    interpolation = cfg.train_interpolation
    if interpolation is None:
        return
    if cfg.aa is not None and interpolation not in _AFFINE:
        raise ConfigError(
            f"--train-interpolation {interpolation} with --aa: RandAugment's geometric ops "
            f"resample with one of {', '.join(_AFFINE)} (PIL's affine transform, timm's, takes "
            "no other)"
        )
    if cfg.aa is None and augment_kind(cfg) != "resized-crop":
        raise ConfigError(
            f"--train-interpolation {interpolation} resizes nothing here: it is the filter of "
            f"--augment resized-crop (this run's is {augment_kind(cfg)}) and of --aa's "
            "geometric ops; leave it out"
        )


def resize_options(cfg: Any) -> dict[str, Any]:
    """RandomResizedCrop's ``interpolation`` / ``antialias`` for ``--train-interpolation``.

    Not given: tfdp's bilinear without antialiasing (runs from before the
    option keep their crops); given: that filter, antialiased as PIL's resize.

    Example:
        >>> resize_options(AugmentOptions()), resize_options(AugmentOptions(
        ...     train_interpolation="bicubic"))
        ({}, {'interpolation': 'bicubic', 'antialias': True})
    """
    if cfg.train_interpolation is None:
        return {}
    return {"interpolation": cfg.train_interpolation, "antialias": True}


def _per_channel(values: tuple[float, ...], channels: int) -> tuple[float, ...]:
    """ImageNet's three values, or their average for each of another number of channels."""
    if channels == 3:
        return values
    return (sum(values) / 3,) * channels


def deit_stages(cfg: Any, channels: int, scale: float, num_classes: int | None) -> list[Any]:
    """The stages after the crop and flip: ``--aa`` / ``--color-jitter``, to [0, 1], erasing, mix.

    ``scale`` takes the pixels to [0, 1] (RandAugment and the colour jitter
    work on 0..255 values, so the pixels are scaled by ``255 * scale`` first
    when that is not 1). With none of the options: ``[ToFloat(scale)]``, the
    recipe's pipeline as before them.

    Raises:
        ConfigError: ``--mixup`` / ``--cutmix`` with fewer than 2 classes.

    Example:
        >>> from tfdp.recipe.config import TrainConfig
        >>> cfg = TrainConfig(aa="rand-m9-mstd0.5-inc1", reprob=0.25, mixup=0.8)
        >>> " ".join(type(s).__name__ for s in deit_stages(cfg, 1, 1 / 16, 10))
        'ToFloat RandAugment ToFloat Normalize RandomErasing Normalize Mixup'
    """
    from tfdp import augment as aug

    colour: list[Any] = []
    if cfg.aa is not None:
        fill = tuple(float(round(255 * m)) for m in _per_channel(IMAGENET_MEAN, channels))
        interpolation = cfg.train_interpolation or "bicubic"
        colour.append(aug.RandAugment.from_string(cfg.aa, fill=fill, interpolation=interpolation))
    elif cfg.color_jitter and color_jitter_applies(cfg.aa):
        colour.append(aug.ColorJitter.from_timm(cfg.color_jitter))
    stages: list[Any] = []
    if colour:
        if abs(255 * scale - 1) > 1e-12:
            stages.append(aug.ToFloat(scale=255 * scale))
        stages += [*colour, aug.ToFloat(scale=1 / 255)]
    else:
        stages.append(aug.ToFloat(scale=scale))
    if cfg.reprob > 0:
        mean = _per_channel(IMAGENET_MEAN, channels)
        std = _per_channel(IMAGENET_STD, channels)
        stages += [
            aug.Normalize(mean, std),
            aug.RandomErasing(cfg.reprob, mode=cfg.remode, max_count=cfg.recount),
            aug.Normalize([-m / s for m, s in zip(mean, std, strict=True)], [1 / s for s in std]),
        ]
    if mixing(cfg):
        if num_classes is None or num_classes < 2:
            raise ConfigError(
                f"--mixup / --cutmix mix class labels into soft targets: they need a "
                f"classification data set of at least 2 classes, and this one has {num_classes}"
            )
        mix = aug.Mixup(
            cfg.mixup, cfg.cutmix, prob=cfg.mixup_prob, switch_prob=cfg.mixup_switch_prob,
            mode=cfg.mixup_mode, label_smoothing=cfg.smoothing, num_classes=num_classes,
        )  # fmt: skip
        stages.append(mix)
    return stages
