"""The training job's data: sources opened from the options, the held-out split, augmentation.

This module owns how :class:`tfdp.recipe.config.TrainConfig` becomes data:
:func:`build_data` opens ``data`` / ``eval_data`` through
:func:`tfdp.recipe.dataspec.open_source` (the one data-opening layer, shared with
``tfdp data``) and holds out a deterministic part of ``data`` when no
``eval_data`` is given; :func:`build_augment` is the job's augmentation;
:func:`eval_input` the held-out input (one construction, used by training
and by ``tfdp evaluate``); :func:`check_one_step` refuses a batch no epoch
can fill.

Held-out data when ``eval_data`` is not given is its format's split
(:meth:`tfdp.recipe.dataspec.contract.DataFormat.split`; deterministic: every
run, resume and ``tfdp evaluate`` gets the same split): the digits' fixed
split; a ``.npz`` file: a seeded random ``eval_fraction`` of its examples; an
image folder: a seeded ``eval_fraction`` of each class's files; TFRecord
shards: the last ``ceil(eval_fraction * F)`` of the ``F`` shards by name, read
into memory for exact evaluation.

Example:
    >>> data = build_data(TrainConfig())
    >>> data.train.num_examples, data.eval.num_examples, data.shape, data.num_classes
    (1437, 360, (8, 8, 1), 10)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tfdp.errors import ConfigError, DataError, renaming
from tfdp.recipe.config import TrainConfig


def _open(spec: str, option: str, **kwargs: Any) -> Any:
    """:func:`tfdp.recipe.dataspec.open_source` for ``option``: its ``spec`` is that option."""
    from tfdp.recipe.dataspec import open_source

    with renaming({"spec": option}):
        return open_source(spec, **kwargs)


@dataclass
class JobData:
    """The training job's data: sources, image shape, classes and pixel scales.

    Attributes:
        train: The training source (random access or streaming).
        eval: The held-out source (random access, for exact evaluation).
        shape: The model's input shape ``(H, W, C)``.
        num_classes: Classes of the model's output.
        train_scale: Multiplier taking the training pixels to ``[0, 1]``.
        eval_scale: The same for the held-out pixels.
        held_out: How the held-out set was chosen, for the start line.
        notes: Conversions and warnings about the data, one line each.
        streaming: Whether ``train`` is a stream (TFRecord shards) rather than random access.
    """

    train: Any
    eval: Any
    shape: tuple[int, int, int]
    num_classes: int
    train_scale: float
    eval_scale: float
    held_out: str
    notes: list[str] = field(default_factory=list)
    streaming: bool = False


def build_data(cfg: TrainConfig) -> JobData:
    """The training and held-out data of ``cfg`` (see the module docstring for the split rules).

    The data is opened and checked by :func:`tfdp.recipe.dataspec.open_source`
    (labels, classes, pixel types and ranges); held-out data must have the
    training data's classes, channels and image size.

    Raises:
        DataError: naming the option, the file and what is wrong.
    """
    from tfdp.recipe.dataspec import random_access
    from tfdp.recipe.dataspec.formats import format_named

    on_error = "skip" if cfg.on_bad_file == "skip" else "raise"
    common = {"on_bad_file": on_error}
    train = _open(cfg.data, "data", num_classes=cfg.num_classes, read_all_labels=True, **common)
    fmt = format_named(train.kind)
    notes = list(train.notes)
    k = int(train.num_classes)
    if cfg.eval_data:
        evals = _open(
            cfg.eval_data,
            "eval_data",
            num_classes=k,
            channels=train.channels if fmt.channels_chosen else None,
            read_all_labels=True,
            class_names=train.classes,
            **common,
        )
        notes += evals.notes
        if evals.channels != train.channels:
            raise DataError(
                f"{cfg.eval_data!r} has {evals.channels}-channel images, --data "
                f"{cfg.data!r} {train.channels}-channel ones",
                argument="eval_data",
            )
        train_src = train.source if train.source is not None else train.stream
        with renaming({"spec": "eval_data"}):
            eval_src = random_access(evals, cfg.image_size)
        eval_scale = evals.scale
        held_out = f"--eval-data {cfg.eval_data}"
    else:
        with renaming({"spec": "data"}):
            part = fmt.split(
                train, eval_fraction=cfg.eval_fraction, seed=cfg.seed, image_size=cfg.image_size
            )
        train_src, eval_src = part.train, part.eval
        eval_scale = train.scale
        held_out = part.how + (" (--eval-fraction)" if part.by_fraction else "")
    shape = tuple(train.image_shape)
    if cfg.image_size:
        shape = (cfg.image_size, cfg.image_size, train.channels)
    elif None in shape:
        sizes = sorted(set(train.sample_sizes))
        seen = ""
        if sizes:
            listed = ", ".join(f"{h}x{w}" for h, w in sizes[:5])
            seen = f" (sizes in a sample of its files: {listed})"
        raise DataError(
            f"{cfg.data!r}: its images are read at their own size, and a batch needs one "
            f"size: give --image-size S to resize them to S x S{seen}",
            argument="data",
        )
    elif cfg.eval_data:
        eval_shape = tuple(eval_src.element_spec[0].shape)
        if None not in eval_shape and eval_shape != shape:
            raise DataError(
                f"{cfg.eval_data!r} has {list(eval_shape)} images, --data "
                f"{cfg.data!r} {list(shape)}: give --image-size S to resize both",
                argument="eval_data",
            )
    return JobData(
        train_src,
        eval_src,
        shape,  # type: ignore[arg-type]
        k,
        train.scale,
        eval_scale,
        held_out,
        notes,
        streaming=train.source is None,
    )


def build_augment(
    cfg: TrainConfig,
    shape: tuple[int, int, int],
    scale: float,
    train: bool,
    num_classes: int | None = None,
) -> Any:
    """The augmentation pipeline for ``cfg`` (``train=False``: the held-out transform).

    ``resized-crop`` (the default with ``--image-size``) is DeiT's / torchvision's
    ImageNet recipe: RandomResizedCrop to the image size (with
    ``--train-interpolation``'s filter) and a horizontal flip for training;
    for evaluation DeiT's ``Resize(int(size / --eval-crop-ratio))`` of the
    shorter side (bicubic) and ``CenterCrop(size)``
    (:class:`tfdp.augment.ResizeCenterCrop`). Both start by cutting a window, so
    JPEG image folders decode only that window. The training pipeline then has
    DeiT's / timm's stages of ``cfg`` (:func:`tfdp.recipe.augment_options.deit_stages`:
    RandAugment or colour jitter, the scaling to [0, 1] and ``--mean`` /
    ``--std``'s normalisation, erasing, Mixup / CutMix, which needs
    ``num_classes``); the held-out one the scaling and the same normalisation.

    Example:
        >>> cfg = TrainConfig(aa="rand-m9-mstd0.5-inc1", mixup=0.8, smoothing=0.1)
        >>> aug = build_augment(cfg, (8, 8, 1), 1 / 16, True, num_classes=10)
        >>> [type(s).__name__ for s in aug.stages][:3], aug.stages[-1].spec.label_smoothing
        (['RandomShift', 'ToFloat', 'RandAugment'], 0.1)
        >>> cfg = TrainConfig(data="x", image_size=224, model="deit_tiny_patch16_224")
        >>> build_augment(cfg, (224, 224, 3), 1 / 255, False).stages  # doctest: +ELLIPSIS
        [ResizeCenterCrop(...crop_ratio=0.875, resize_to=256), ToFloat(...), Normalize(...)]
    """
    from tfdp import augment as aug
    from tfdp.recipe.augment_options import augment_kind, deit_stages, normalization, resize_options

    kind = augment_kind(cfg)
    stages: list[Any] = []
    if kind == "resized-crop":
        size = cfg.image_size or shape[0]
        if train:
            stages += [aug.RandomResizedCrop(size, **resize_options(cfg)), aug.RandomFlip()]
        else:
            stages.append(aug.ResizeCenterCrop(size, cfg.eval_crop_ratio))
    else:
        if cfg.image_size:
            stages.append(_Resize(cfg.image_size))
        if train and kind == "shift":
            stages.append(aug.RandomShift(max(1, shape[0] // 8)))
        elif train and kind == "crop-flip":
            stages += [aug.RandomCrop(shape[0], padding=max(1, shape[0] // 8)), aug.RandomFlip()]
    if not train:
        stages.append(aug.ToFloat(scale=scale))
        normalized = normalization(cfg, shape[-1])
        if normalized is not None:
            stages.append(aug.Normalize(*normalized))
        return aug.Compose(stages)
    return aug.Compose([*stages, *deit_stages(cfg, shape[-1], scale, num_classes)])


class _Resize:
    """Resize a batch of images to a square size (deterministic)."""

    batched = True

    def __init__(self, size: int) -> None:
        self.size = size

    def __call__(self, example: Any, seeds: Any) -> Any:
        import tensorflow as tf

        image, *rest = example
        image = tf.image.resize(tf.cast(image, tf.float32), [self.size, self.size])
        return (image, *rest)


def check_one_step(cfg: TrainConfig, data: JobData, w: int) -> None:
    """Refuse a batch larger than an epoch of a random-access source, naming the options."""
    if data.streaming:
        return
    from tfdp.samplers import DistributedSampler, RepeatAugSampler

    n = data.train.num_examples
    if n < w:
        raise DataError(
            f"{cfg.data!r} has {n} training example(s), fewer than the {w} replicas",
            argument="data",
        )
    if cfg.sampler == "repeat-aug":
        sampler: Any = RepeatAugSampler(
            n, w, 0, num_repeats=cfg.repeats, selected_round=cfg.selected_round
        )
    else:
        sampler = DistributedSampler(n, w, 0)
    per_replica = cfg.batch_size // w
    if len(sampler) < per_replica:
        raise ConfigError(
            f"{cfg.batch_size} is more than one epoch holds: each of the {w} "
            f"replicas gets {len(sampler)} example(s) per epoch of --data {cfg.data!r} "
            f"({n} training examples), fewer than its {per_replica} per step: use a --batch-size "
            f"of at most {len(sampler) * w}",
            argument="batch_size",
        )


def eval_input(cfg: TrainConfig, strategy: Any, data: JobData) -> Any:
    """The held-out input: every example once, padding masked (exact metrics at any replicas)."""
    from tfdp.input import DistributedInput

    w = strategy.num_replicas_in_sync
    return DistributedInput(
        strategy,
        data.eval,
        sampler="eval",
        batch_size=max(1, cfg.batch_size // w),
        augment=build_augment(cfg, data.shape, data.eval_scale, False),
    )
