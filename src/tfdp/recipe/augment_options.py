"""DeiT's / timm's transform options of the training job: flags, checks and the stages built.

This module owns the options ``tfdp train`` takes with DeiT's ``main.py`` /
timm's ``train.py`` names for what timm's ``create_transform`` does to the
images -- the augmentations (``--aa``, ``--color-jitter``, ``--reprob``,
``--remode``, ``--recount``, ``--mixup``, ``--cutmix``, ``--mixup-prob``,
``--mixup-switch-prob``, ``--mixup-mode``, ``--train-interpolation``), the
normalisation (``--mean``, ``--std``) and the held-out crop
(``--eval-crop-ratio``) -- as :class:`AugmentOptions` (a part of
:class:`tfdp.recipe.config.TrainConfig`), :func:`check_augment_options`
(their values checked before TensorFlow loads, by the library's own specs,
:mod:`tfdp.augment.spec`, said as the flags), :func:`default_normalization`
(the mean and std a model is trained with when ``--mean`` / ``--std`` are
not given), :func:`normalization` (those values for a number of channels)
and :func:`deit_stages` (the :mod:`tfdp.augment` stages they stand for, in
timm's ``create_transform`` order).

How the options become stages, after the crop and flip of ``--augment``:

* ``--aa`` (timm's RandAugment string) on the pixels as 0..255 values, with
  timm's fill (the mean colour: ``--mean``'s, else ImageNet's) and
  ``--train-interpolation`` for its geometric ops when given (else bicubic,
  DeiT's); ``--color-jitter`` only
  without ``--aa``, as timm's ``transforms_imagenet_train`` (DeiT's 0.3 next to
  its ``--aa`` therefore does nothing);
* the pixels scaled to [0, 1], then normalised, ``(x - mean) / std``, with
  ``--mean`` / ``--std`` (timm's ``ToTensor`` and ``Normalize``; ImageNet's
  values by default for the DeiT / ViT models, none for the others, whose
  inputs stay in [0, 1] as before these options);
* ``--reprob`` / ``--remode`` / ``--recount``: timm's RandomErasing, which
  erases *normalised* images (0 is the mean colour, the noise is in units of
  the channel's standard deviation), after the normalisation as timm orders
  it; a run without normalisation normalises with ImageNet's mean and std
  (their averages for other channel counts), erases, and maps back, so an
  erased pixel is ``mean + std * noise`` in [0, 1] units (the others are
  unchanged to float rounding);
* ``--mixup`` / ``--cutmix`` / ``--mixup-prob`` / ``--mixup-switch-prob`` /
  ``--mixup-mode``: timm's Mixup on each replica's batch, its soft targets
  smoothed by ``--smoothing`` (timm's ``label_smoothing``; the loss is then the
  soft-target cross-entropy, which smooths nothing again).

The held-out images (:func:`tfdp.recipe.data.build_augment`) are scaled and
normalised alike, after ``--eval-crop-ratio``'s resize and centre crop
(:class:`tfdp.augment.ResizeCenterCrop`, DeiT's ``Resize(int(size / ratio))``
+ ``CenterCrop(size)``).

Importing it loads no TensorFlow; :func:`deit_stages` imports :mod:`tfdp.augment`.

Example:
    >>> opts = AugmentOptions(aa="rand-m9-mstd0.5-inc1", mixup=0.8, cutmix=1.0)
    >>> mixing(opts), opts.remode
    (True, 'pixel')
"""

from __future__ import annotations

import math
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
from tfdp.errors import ConfigError, renaming
from tfdp.recipe.options import option

#: ``--train-interpolation``'s values: timm's names that tfdp's resize has (timm's ``random``
#: picks a filter per image and ``hamming`` has no ``tf.image.resize`` counterpart).
TRAIN_INTERPOLATIONS = ("bilinear", "bicubic", "nearest", "box", "lanczos")
#: RandAugment's geometric ops resample with these (PIL's affine transform takes no other).
_AFFINE = ("bilinear", "bicubic", "nearest")
#: timm's ``IMAGENET_DEFAULT_MEAN`` / ``_STD``: the normalisation timm's RandomErasing works in,
#: and (times 255, rounded) RandAugment's fill colour.
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
#: ``--eval-crop-ratio``'s default: DeiT's (224 of 256).
EVAL_CROP_RATIO = 0.875
#: No normalisation: ``(x - 0) / 1``, one value for every channel.
_IDENTITY = ((0.0,), (1.0,))
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
    eval_crop_ratio: float = option(
        EVAL_CROP_RATIO,
        "held-out images (--augment resized-crop): the shorter side resized to "
        "int(--image-size / ratio) with bicubic (PIL's antialiased filter), then the centred "
        "--image-size square kept, as DeiT's --eval-crop-ratio (timm's --crop-pct); in (0, 1], "
        "1 keeps the whole shorter side. DeiT keeps images of --input-size 32 or less whole "
        "(its CIFAR setting): --eval-crop-ratio 1 for that",
    )
    mean: tuple[float, ...] | None = option(
        None,
        "normalise the model's inputs, training and held-out: (x - mean) / std with x in [0, 1], "
        "as timm's --mean (one value for every channel, or 3: red, green, blue, in the 0..1 "
        "scale; 3 on grey images: their average). Written in config.json; tfdp evaluate uses "
        "it, and model.keras expects inputs so normalised",
        computed="ImageNet's 0.485 0.456 0.406 for the deit_* and vit_* models (timm's "
        "IMAGENET_DEFAULT_MEAN, DeiT's), else 0 (inputs in [0, 1])",
    )
    std: tuple[float, ...] | None = option(
        None,
        "the standard deviation of --mean's normalisation (timm's --std; one value or 3, in "
        "(0, 1])",
        computed="ImageNet's 0.229 0.224 0.225 for the deit_* and vit_* models (timm's "
        "IMAGENET_DEFAULT_STD), else 1",
    )


def default_normalization(model: str) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The ``(mean, std)`` of a model's inputs when ``--mean`` / ``--std`` are not given.

    For timm's names (:data:`tfdp.models.names.MODELS`) timm's own, as its
    ``train.py`` resolves them from the model's configuration: ImageNet's
    (``IMAGENET_DEFAULT_MEAN`` / ``_STD``, DeiT's) for the ``deit_*`` models,
    ``(0.5, 0.5, 0.5)`` / ``(0.5, 0.5, 0.5)`` for the ``vit_*`` ones (their
    timm weights expect it); ``((0.0,), (1.0,))`` -- no normalisation, the
    inputs in [0, 1] as tfdp's models have always had them -- for every other model.

    Example:
        >>> default_normalization("deit_tiny_patch16_224")[0], default_normalization("cnn")
        ((0.485, 0.456, 0.406), ((0.0,), (1.0,)))
        >>> default_normalization("vit_tiny_patch16_224")[1]
        (0.5, 0.5, 0.5)
    """
    from tfdp.models.names import is_model_name, model_spec

    if is_model_name(model.strip()):
        spec = model_spec(model.strip())
        return tuple(spec.mean), tuple(spec.std)
    return _IDENTITY


def resolve_normalization(cfg: Any) -> None:
    """Give ``cfg.mean`` / ``cfg.std`` that are None the model's values, as tuples of floats.

    What ``TrainConfig`` does on construction, so that a run's ``config.json``
    records the values it trains with (and a resumed run keeps them).

    Example:
        >>> from tfdp.recipe.config import TrainConfig
        >>> cfg = TrainConfig(model="deit_small_patch16_224", std=[0.5])
        >>> cfg.mean, cfg.std
        ((0.485, 0.456, 0.406), (0.5,))
    """
    mean, std = default_normalization(str(cfg.model))
    cfg.mean = mean if cfg.mean is None else tuple(float(v) for v in cfg.mean)
    cfg.std = std if cfg.std is None else tuple(float(v) for v in cfg.std)


def normalization(cfg: Any, channels: int) -> tuple[tuple[float, ...], tuple[float, ...]] | None:
    """``cfg``'s ``(mean, std)``, one value per channel of ``channels``; None when it is ``(0, 1)``.

    One value stands for every channel; three on grey images (one channel)
    become their average (the recipe's rule for ImageNet's values on grey
    images, as its erasing's).

    Raises:
        ConfigError: three values for images of another number of channels.

    Example:
        >>> from tfdp.recipe.config import TrainConfig
        >>> normalization(TrainConfig(model="deit_small_patch16_224"), 1)
        ((0.449,), (0.226,))
        >>> normalization(TrainConfig(), 3) is None
        True
    """
    mean, std = default_normalization(str(cfg.model))
    values = []
    for name, given, default in (("mean", cfg.mean, mean), ("std", cfg.std, std)):
        given = tuple(default if given is None else given)
        if len(given) == 1:
            given = given * channels
        elif len(given) != channels:
            if channels != 1:
                raise ConfigError(
                    f"{len(given)} values, and the images have {channels} channels: give "
                    "one value (every channel) or one per channel",
                    argument=name,
                )
            given = (round(sum(given) / len(given), 12),)
        values.append(tuple(float(v) for v in given))
    if all(m == 0 for m in values[0]) and all(s == 1 for s in values[1]):
        return None
    return values[0], values[1]


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
        tfdp.errors.ConfigError: aa: 'rand-m11': magnitude 11 (section 'm11') is above its \
bound 10 (timm would clip it to 10); lower it, or raise the bound with mmax11
    """
    if cfg.aa is not None:
        parse_rand_augment(cfg.aa, argument="aa")
    ColorJitterSpec.from_timm(cfg.color_jitter)
    with renaming({"probability": "reprob", "mode": "remode", "max_count": "recount"}):
        ErasingSpec(cfg.reprob, mode=cfg.remode, max_count=cfg.recount)
    for name in ("mixup", "cutmix"):
        value = getattr(cfg, name)
        if not (math.isfinite(value) and value >= 0):
            raise ConfigError(
                f"must be a finite number >= 0 (Beta's alpha; 0: off), got {value}", argument=name
            )
    if mixing(cfg):
        names = {"mixup_alpha": "mixup", "cutmix_alpha": "cutmix", "prob": "mixup_prob",
                 "switch_prob": "mixup_switch_prob", "mode": "mixup_mode",
                 "label_smoothing": "smoothing"}  # fmt: skip
        with renaming(names):
            MixupSpec(
                cfg.mixup, cfg.cutmix, None, cfg.mixup_prob, cfg.mixup_switch_prob,
                cfg.mixup_mode, True, cfg.smoothing, _SOME_CLASSES,
            )  # fmt: skip
    _check_normalization(cfg)
    ratio = cfg.eval_crop_ratio
    if not (math.isfinite(ratio) and 0 < ratio <= 1):
        raise ConfigError(
            f"must be in (0, 1] (DeiT's 0.875 keeps 224 of 256; 1 the whole "
            f"shorter side), got {ratio}",
            argument="eval_crop_ratio",
        )
    if ratio != EVAL_CROP_RATIO and augment_kind(cfg) != "resized-crop":
        raise ConfigError(
            f"{ratio:g} crops nothing here: it is the held-out transform of "
            f"--augment resized-crop (this run's is {augment_kind(cfg)}: the default with "
            "--image-size for image data); leave it out",
            argument="eval_crop_ratio",
        )
    interpolation = cfg.train_interpolation
    if interpolation is None:
        return
    if cfg.aa is not None and interpolation not in _AFFINE:
        raise ConfigError(
            f"{interpolation} with --aa: RandAugment's geometric ops "
            f"resample with one of {', '.join(_AFFINE)} (PIL's affine transform, timm's, takes "
            "no other)",
            argument="train_interpolation",
        )
    if cfg.aa is None and augment_kind(cfg) != "resized-crop":
        raise ConfigError(
            f"{interpolation} resizes nothing here: it is the filter of "
            f"--augment resized-crop (this run's is {augment_kind(cfg)}) and of --aa's "
            "geometric ops; leave it out",
            argument="train_interpolation",
        )


def _check_normalization(cfg: Any) -> None:
    """``--mean`` / ``--std``: one value or three, finite, in timm's 0..1 scale."""
    for name, values, low in (("mean", cfg.mean, 0.0), ("std", cfg.std, None)):
        if values is None:
            continue
        values = tuple(values)
        shown = " ".join(f"{v:g}" for v in values) or "(none)"
        if len(values) not in (1, 3):
            raise ConfigError(
                f"{shown}: give 1 value (every channel) or 3 (red, green, blue), as "
                f"timm's --{name}; got {len(values)}",
                argument=name,
            )
        if any(not math.isfinite(v) or v > 1 or (v < 0 if low == 0 else v <= 0) for v in values):
            valid = "in [0, 1]" if low == 0 else "in (0, 1]"
            raise ConfigError(
                f"{shown}: every value must be {valid}, timm's scale of pixels in [0, 1] "
                f"(ImageNet's: {' '.join(map(str, IMAGENET_MEAN if low == 0 else IMAGENET_STD))}); "
                "divide values meant for 0..255 pixels by 255",
                argument=name,
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
    when that is not 1), then ``--mean`` / ``--std`` normalise them
    (:func:`normalization`; nothing for a model trained on [0, 1] inputs). With
    none of the options: ``[ToFloat(scale)]``, the recipe's pipeline as before
    them.

    Raises:
        ConfigError: ``--mixup`` / ``--cutmix`` with fewer than 2 classes; a
            ``--mean`` / ``--std`` that does not fit the images' channels.

    Example:
        >>> from tfdp.recipe.config import TrainConfig
        >>> cfg = TrainConfig(aa="rand-m9-mstd0.5-inc1", reprob=0.25, mixup=0.8)
        >>> " ".join(type(s).__name__ for s in deit_stages(cfg, 1, 1 / 16, 10))
        'ToFloat RandAugment ToFloat Normalize RandomErasing Normalize Mixup'
        >>> cfg = TrainConfig(model="deit_tiny_patch16_224", reprob=0.25)
        >>> " ".join(type(s).__name__ for s in deit_stages(cfg, 3, 1 / 255, 10))
        'ToFloat Normalize RandomErasing'
    """
    from tfdp import augment as aug

    normalized = normalization(cfg, channels)
    colour: list[Any] = []
    if cfg.aa is not None:  # filled with the mean colour: timm's, of the normalisation's mean
        mean = _per_channel(IMAGENET_MEAN, channels) if normalized is None else normalized[0]
        fill = tuple(float(min(255, round(255 * m))) for m in mean)
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
    if normalized is not None:
        stages.append(aug.Normalize(*normalized))
    if cfg.reprob > 0 and normalized is not None:  # timm erases the normalised images
        stages.append(aug.RandomErasing(cfg.reprob, mode=cfg.remode, max_count=cfg.recount))
    elif cfg.reprob > 0:
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
                "mixes class labels into soft targets (as --cutmix does): it needs a "
                f"classification data set of at least 2 classes, and this one has {num_classes}",
                argument="mixup" if cfg.mixup > 0 else "cutmix",
            )
        mix = aug.Mixup(
            cfg.mixup, cfg.cutmix, prob=cfg.mixup_prob, switch_prob=cfg.mixup_switch_prob,
            mode=cfg.mixup_mode, label_smoothing=cfg.smoothing, num_classes=num_classes,
        )  # fmt: skip
        stages.append(mix)
    return stages
