"""The main job behind ``tfdp train`` and ``tfdp evaluate``: a config in, a trained run out.

This module owns :class:`TrainConfig` (every option of the training job, with
its type, default, help and what may change on resume, so that flags,
YAML/TOML config files and the saved ``config.json`` of a run are one thing),
loading and validating config files (unknown keys get a "did you mean"), the
job's data (:func:`build_data`: training and held-out sources, with the
held-out split rules), resuming a run from its ``config.json``
(:func:`resolve_resume`), and :func:`run_train` / :func:`run_evaluate`,
which wire data, sampler, strategy, model and :class:`tfdp.train.Trainer`
together -- holding the run directory's lock (:class:`tfdp.rundir.RunLock`)
while training.

Held-out data when ``--eval-data`` is not given (deterministic: every run,
resume and ``tfdp evaluate`` gets the same split): the digits' fixed split;
a ``.npz`` file: a seeded random ``eval_fraction`` of its examples; an image
folder: a seeded ``eval_fraction`` of each class's files; TFRecord shards:
the last ``ceil(eval_fraction * F)`` of the ``F`` shards by name, read into
memory for exact evaluation.

Example:
    >>> cfg = TrainConfig(epochs=1)
    >>> cfg.sampler, cfg.repeats, cfg.replicas
    ('repeat-aug', 3.0, 2)
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "JobData",
    "TrainConfig",
    "build_data",
    "check_config",
    "load_config_file",
    "resolve_resume",
    "run_evaluate",
    "run_train",
    "weights_fingerprint",
]

OPTIONS_HELP = "see `tfdp train --help`"
#: What an option may do when a run is resumed: "refuse" a change (it is the run's identity:
#: the data, the model, the optimizer's state...), "record" a change in config.json's history,
#: or nothing for the options that only locate the run.
RESUME_POLICIES = ("refuse", "record", "locate")


def _opt(
    default: Any, help: str, choices: tuple[Any, ...] | None = None, *, resume: str = "refuse"
) -> Any:
    assert resume in RESUME_POLICIES
    return field(default=default, metadata={"help": help, "choices": choices, "resume": resume})


@dataclass
class TrainConfig:
    """Every option of the training job (flags, config files and ``config.json`` share it).

    Example:
        >>> TrainConfig(batch_size=32).batch_size
        32
    """

    data: str = _opt(
        "digits",
        "training data: 'digits' (bundled), an image folder, a .npz "
        "file (arrays 'images'/'x' and 'labels'/'y'), or TFRecord files (a glob or "
        "a manifest written by `tfdp data convert`)",
    )
    eval_data: str | None = _opt(
        None,
        "held-out data in the same forms (default: the digits' "
        "held-out split, or --eval-fraction of --data)",
    )
    eval_fraction: float = _opt(
        0.1,
        "fraction of --data held out for evaluation when --eval-data is not given: of a .npz's "
        "examples (seeded), of each class's files of an image folder (seeded), or the last "
        "ceil(fraction * F) of F TFRecord shards by name (read into memory)",
    )
    image_size: int | None = _opt(
        None,
        "resize images to this square size (image folders: required, their images are read at "
        "their own size; TFRecord shards of varying sizes: required)",
    )
    num_classes: int | None = _opt(
        None,
        "number of classes (default: the data's class names, else the largest label + 1, and "
        "then every label below it must occur: a stray label is refused)",
    )
    on_bad_file: str = _opt(
        "error",
        "image folders: a file that cannot be decoded stops the run naming it (error), or is "
        "replaced by a placeholder with weight 0 and reported at every epoch end (skip)",
        ("error", "skip"),
        resume="record",
    )
    sampler: str = _opt("repeat-aug", "training sampler", ("repeat-aug", "distributed"))
    repeats: float = _opt(3.0, "repeat-aug: copies of each sample per epoch")
    selected_round: int = _opt(
        0,
        "repeat-aug: round the per-epoch count down to a multiple "
        "of this (DeiT: 256; 0 keeps ceil(N / replicas))",
    )
    strategy: str = _opt(
        "auto",
        "distribution strategy",
        ("auto", "mirrored", "cpu", "multi_worker", "one_device"),
        resume="record",
    )
    replicas: int = _opt(
        2,
        "logical CPU replicas when no GPU is present (a resumed run needs the same world size)",
        resume="record",
    )
    model: str = _opt(
        "cnn",
        "'cnn', 'resnet' or 'module:function' returning a keras.Model "
        "(called with input_shape, num_classes)",
    )
    epochs: int = _opt(
        15, "epochs to train (a resumed run continues up to this number)", resume="record"
    )
    batch_size: int = _opt(64, "global batch size (all replicas together)")
    lr: float = _opt(3e-3, "learning rate", resume="record")
    optimizer: str = _opt("adam", "optimizer", ("adam", "adamw", "sgd"))
    schedule: str = _opt(
        "cosine",
        "learning-rate schedule: cosine decay to 0 over the run "
        "(after a one-epoch linear warm-up), or constant",
        ("cosine", "constant"),
    )
    weight_decay: float = _opt(0.0, "decoupled weight decay (adamw, sgd)", resume="record")
    augment: str = _opt(
        "auto",
        "augmentation: 'shift' (random shifts, digits), 'crop-flip' "
        "(random crop with padding + horizontal flip), 'resized-crop' (ImageNet's "
        "RandomResizedCrop to --image-size + horizontal flip; held-out: centre crop), "
        "'none'; auto picks shift for digits, resized-crop with --image-size, crop-flip "
        "otherwise",
        ("auto", "shift", "crop-flip", "resized-crop", "none"),
    )
    seed: int = _opt(0, "seed of the sampler, the augmentation and the model's initial weights")
    run_dir: str | None = _opt(None, "run directory (default runs/<name>)", resume="locate")
    name: str | None = _opt(None, "run name (default: <data>-<model>)", resume="locate")
    resume: bool = _opt(
        False,
        "continue the run in --run-dir from its last checkpoint; its config.json supplies every "
        "option not given (learning rate, epochs, schedule and the like may change and are "
        "recorded in config.json's history; the data, model, optimizer and batch may not)",
        resume="locate",
    )
    deterministic: bool = _opt(
        False, "enable TensorFlow op determinism (bit-exact reruns)", resume="record"
    )
    record_samples: str | None = _opt(
        None,
        "write, per step and per replica (global rank), "
        "the example ids consumed, as JSON lines, to this file",
        resume="record",
    )
    checkpoint_every: int | None = _opt(
        50, "save a checkpoint every N steps (and at epoch end)", resume="record"
    )
    steps_per_call: int = _opt(4, "optimizer steps per tf.function call", resume="record")
    mixed_precision: str | None = _opt(
        None, "mixed precision policy", (None, "mixed_float16", "mixed_bfloat16")
    )
    progress: bool = _opt(True, "show a progress bar (chief only)", resume="record")

    @classmethod
    def fields(cls) -> dict[str, dataclasses.Field[Any]]:
        """The options by name."""
        return {f.name: f for f in dataclasses.fields(cls)}

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict."""
        return dataclasses.asdict(self)


def _type_name(f: dataclasses.Field[Any]) -> str:
    return str(f.type).replace("'", "")


def coerce(name: str, value: Any, where: str) -> Any:
    """Check one option's value against its declared type; return it converted.

    Raises:
        ValueError: naming the option and where it came from.

    Example:
        >>> coerce("epochs", 3, "config.toml")
        3
    """
    fields = TrainConfig.fields()
    if name not in fields:
        close = difflib.get_close_matches(name, list(fields), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"{where}: unknown option {name!r}{hint} ({OPTIONS_HELP})")
    f = fields[name]
    t = _type_name(f)
    ok = True
    if value is None:
        ok = "None" in t
    elif t.startswith("bool"):
        ok = isinstance(value, bool)
    elif t.startswith("int"):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif t.startswith("float"):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif t.startswith("str"):
        ok = isinstance(value, str)
    if not ok:
        raise ValueError(
            f"{where}: option {name!r} must be of type {t}, got {value!r} ({type(value).__name__})"
        )
    choices = f.metadata.get("choices")
    if choices is not None and value not in choices:
        raise ValueError(f"{where}: option {name!r} must be one of {list(choices)}, got {value!r}")
    return value


def load_config_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    r"""Read a YAML (.yaml/.yml) or TOML (.toml) config file into checked option values.

    Keys may use dashes or underscores (``batch-size`` or ``batch_size``).

    Raises:
        ValueError: for a missing file, a parse error, an unknown key (with the
            nearest valid one) or a value of the wrong type, naming the file.

    Example:
        >>> import tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "c.toml"
        >>> _ = p.write_text("epochs = 2\nbatch-size = 32\n")
        >>> load_config_file(p)
        {'epochs': 2, 'batch_size': 32}
    """
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"config file {str(p)!r} does not exist")
    if p.suffix not in (".yaml", ".yml", ".toml"):
        raise ValueError(f"config file {str(p)!r}: use a .yaml, .yml or .toml file")
    try:
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"config file {str(p)!r} is not a text file (byte {exc.start} is not UTF-8)"
        ) from None
    try:
        if p.suffix == ".toml":
            try:
                import tomllib
            except ImportError:  # Python 3.10
                import tomli as tomllib  # type: ignore[no-redef]
            raw = tomllib.loads(text)
        else:
            import yaml

            raw = yaml.safe_load(text) or {}
    except Exception as exc:  # parse errors of either library (TOML's is a ValueError)
        detail = " ".join(str(exc).split())
        raise ValueError(f"config file {str(p)!r} could not be parsed: {detail}") from None
    if not isinstance(raw, dict):
        raise ValueError(f"config file {str(p)!r} must hold a mapping of option: value")
    out = {}
    for key, value in raw.items():
        name = str(key).replace("-", "_")
        out[name] = coerce(name, value, f"config file {str(p)!r}")
    return out


# -- checking options --------------------------------------------------------------------------


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def check_config(cfg: TrainConfig) -> None:
    """Refuse option values no run can use, naming the option and what would be valid.

    Cheap (no TensorFlow): called before anything is built.

    Raises:
        ValueError: for the first bad value.

    Example:
        >>> check_config(TrainConfig(image_size=-4))
        Traceback (most recent call last):
        ...
        ValueError: --image-size must be an integer >= 1, got -4
    """
    for name in ("epochs", "batch_size", "replicas", "steps_per_call"):
        value = getattr(cfg, name)
        if value < 1:
            raise ValueError(f"{_flag(name)} must be an integer >= 1, got {value}")
    for name in ("image_size", "checkpoint_every", "num_classes"):
        value = getattr(cfg, name)
        if value is not None and value < 1:
            raise ValueError(f"{_flag(name)} must be an integer >= 1, got {value}")
    for name in ("seed", "selected_round"):
        if getattr(cfg, name) < 0:
            raise ValueError(f"{_flag(name)} must be an integer >= 0, got {getattr(cfg, name)}")
    if not (math.isfinite(cfg.lr) and cfg.lr > 0):
        raise ValueError(f"--lr must be a finite number > 0, got {cfg.lr}")
    if not (math.isfinite(cfg.weight_decay) and cfg.weight_decay >= 0):
        raise ValueError(f"--weight-decay must be a finite number >= 0, got {cfg.weight_decay}")
    if not (math.isfinite(cfg.repeats) and cfg.repeats >= 1):
        raise ValueError(f"--repeats must be a finite number >= 1, got {cfg.repeats}")
    if not 0 < cfg.eval_fraction < 1:
        raise ValueError(f"--eval-fraction must be in (0, 1), got {cfg.eval_fraction}")
    for name in ("data", "eval_data", "run_dir", "name", "record_samples", "model"):
        value = getattr(cfg, name)
        if value is not None and not str(value).strip():
            raise ValueError(f"{_flag(name)} is empty")


# -- the job's data ----------------------------------------------------------------------------


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
    """

    train: Any
    eval: Any
    shape: tuple[int, int, int]
    num_classes: int
    train_scale: float
    eval_scale: float
    held_out: str
    notes: list[str] = field(default_factory=list)


def _split_arrays(source: Any, fraction: float, seed: int) -> tuple[Any, Any]:
    import numpy as np

    from tfdp.sources import ArraySource

    x, y = source.numpy()
    order = np.random.default_rng(seed).permutation(len(y))
    cut = max(1, round(len(y) * fraction))
    return ArraySource((x[order[cut:]], y[order[cut:]])), ArraySource(
        (x[order[:cut]], y[order[:cut]])
    )


def _split_folder(source: Any, fraction: float, seed: int, spec: str) -> tuple[Any, Any]:
    """A seeded split of each class's files: ``round(fraction * n)`` held out, at least one.

    A class of one file stays in training; every class keeps at least one training file.
    """
    import numpy as np

    rng = np.random.default_rng([seed, 0x5EED_F01D])
    train_idx: list[Any] = []
    eval_idx: list[Any] = []
    labels = np.asarray(source.labels)
    for k in range(len(source.classes)):
        files = np.flatnonzero(labels == k)
        files = files[rng.permutation(len(files))]
        held = min(len(files) - 1, max(1, round(len(files) * fraction)))
        eval_idx.append(files[:held])
        train_idx.append(files[held:])
    held_out = np.sort(np.concatenate(eval_idx))
    if not len(held_out):
        raise ValueError(
            f"--data {spec!r}: too few files to hold any out for evaluation (every class has one "
            "file); give --eval-data"
        )
    return source.subset(np.sort(np.concatenate(train_idx))), source.subset(held_out)


def _split_shards(data: Any, fraction: float, image_size: int | None, spec: str) -> tuple[Any, Any]:
    """The last ``ceil(fraction * F)`` shards by name held out (in memory), the rest streamed."""
    from tfdp.dataspec import in_memory
    from tfdp.sources import ArraySource, TFRecordSource

    files = sorted(data.stream.files, key=os.path.basename)
    held = math.ceil(fraction * len(files))
    if len(files) < 2 or held >= len(files):
        raise ValueError(
            f"--data {spec!r} has {len(files)} TFRecord shard(s): holding out the last "
            f"ceil({fraction:g} * {len(files)}) = {held} for evaluation would leave "
            f"{len(files) - held} to train on. Write more shards (tfdp data convert --shards N), "
            "lower --eval-fraction, or give --eval-data"
        )
    train_files, eval_files = files[:-held], files[-held:]
    if None in data.image_shape[:2] and image_size is None:
        raise ValueError(
            f"--data {spec!r} holds images of varying size: give --image-size S to resize them"
        )
    images, labels = in_memory(data, eval_files, image_size)
    return TFRecordSource(train_files), ArraySource((images, labels))


def _random_access(data: Any, image_size: int | None, spec: str, what: str) -> Any:
    """A random-access source for held-out ``data`` (TFRecord: read into memory)."""
    from tfdp.dataspec import in_memory
    from tfdp.sources import ArraySource

    if data.source is not None:
        return data.source
    if None in data.image_shape[:2] and image_size is None:
        raise ValueError(
            f"{what} {spec!r} holds images of varying size: give --image-size S to resize them"
        )
    return ArraySource(in_memory(data, None, image_size))


def build_data(cfg: TrainConfig) -> JobData:
    """The training and held-out data of ``cfg`` (see the module docstring for the split rules).

    The data is opened and checked by :func:`tfdp.dataspec.open_source`
    (labels, classes, pixel types and ranges); held-out data must have the
    training data's classes, channels and image size.

    Raises:
        ValueError: naming the option, the file and what is wrong.
    """
    from tfdp.dataspec import open_source

    on_error = "skip" if cfg.on_bad_file == "skip" else "raise"
    common = {"num_classes_option": "--num-classes", "on_bad_file": on_error}
    if cfg.data == "digits" and not cfg.eval_data:
        from tfdp.datasets import DIGITS_HELD_OUT, load_digits
        from tfdp.sources import ArraySource

        if cfg.num_classes not in (None, 10):
            raise ValueError(f"--num-classes {cfg.num_classes}: the digits have 10 classes")
        (x, y), (xt, yt) = load_digits()
        return JobData(
            ArraySource((x, y)),
            ArraySource((xt, yt)),
            (8, 8, 1),
            10,
            1 / 16,
            1 / 16,
            f"the digits' fixed held-out split of {DIGITS_HELD_OUT}",
        )
    train = open_source(
        cfg.data, num_classes=cfg.num_classes, read_all_labels=True, what="--data", **common
    )
    notes = list(train.notes)
    k = int(train.num_classes)
    if cfg.eval_data:
        evals = open_source(
            cfg.eval_data,
            num_classes=k,
            channels=train.channels if train.kind == "folder" else None,
            what="--eval-data",
            read_all_labels=True,
            class_names=train.classes,
            **common,
        )
        notes += evals.notes
        if evals.channels != train.channels:
            raise ValueError(
                f"--eval-data {cfg.eval_data!r} has {evals.channels}-channel images, --data "
                f"{cfg.data!r} {train.channels}-channel ones"
            )
        train_src = train.source if train.source is not None else train.stream
        eval_src = _random_access(evals, cfg.image_size, cfg.eval_data, "--eval-data")
        eval_scale = evals.scale
        held_out = f"--eval-data {cfg.eval_data}"
    elif train.kind in ("npz", "digits"):
        train_src, eval_src = _split_arrays(train.source, cfg.eval_fraction, cfg.seed)
        eval_scale = train.scale
        held_out = f"a seeded {cfg.eval_fraction:g} of the examples (--eval-fraction)"
    elif train.kind == "folder":
        train_src, eval_src = _split_folder(train.source, cfg.eval_fraction, cfg.seed, cfg.data)
        eval_scale = train.scale
        held_out = f"a seeded {cfg.eval_fraction:g} of each class's files (--eval-fraction)"
    else:
        train_src, eval_src = _split_shards(train, cfg.eval_fraction, cfg.image_size, cfg.data)
        eval_scale = train.scale
        n = len(train.stream.files) - len(train_src.files)
        held_out = f"the last {n} of {len(train.stream.files)} shards (--eval-fraction)"
    shape = tuple(train.image_shape)
    if cfg.image_size:
        shape = (cfg.image_size, cfg.image_size, train.channels)
    elif None in shape:
        sizes = sorted(set(train.sample_sizes))
        seen = ""
        if sizes:
            listed = ", ".join(f"{h}x{w}" for h, w in sizes[:5])
            seen = f" (sizes in a sample of its files: {listed})"
        raise ValueError(
            f"--data {cfg.data!r}: its images are read at their own size, and a batch needs one "
            f"size: give --image-size S to resize them to S x S{seen}"
        )
    elif cfg.eval_data:
        eval_shape = tuple(eval_src.element_spec[0].shape)
        if None not in eval_shape and eval_shape != shape:
            raise ValueError(
                f"--eval-data {cfg.eval_data!r} has {list(eval_shape)} images, --data "
                f"{cfg.data!r} {list(shape)}: give --image-size S to resize both"
            )
    return JobData(
        train_src,
        eval_src,
        shape,
        k,
        train.scale,
        eval_scale,
        held_out,
        notes,  # type: ignore[arg-type]
    )


def build_augment(cfg: TrainConfig, shape: tuple[int, int, int], scale: float, train: bool) -> Any:
    """The augmentation pipeline for ``cfg`` (``train=False``: the held-out transform).

    ``resized-crop`` (the default with ``--image-size``) is DeiT's / torchvision's
    ImageNet recipe: RandomResizedCrop to the image size and a horizontal flip
    for training, the centre 87.5% resized for evaluation. Both start by
    cutting a window, so JPEG image folders decode only that window.
    """
    from tfdp import augment as aug

    kind = cfg.augment
    if kind == "auto":
        if cfg.data == "digits":
            kind = "shift"
        else:
            kind = "resized-crop" if cfg.image_size else "crop-flip"
    stages: list[Any] = []
    if kind == "resized-crop":
        size = cfg.image_size or shape[0]
        if train:
            stages += [aug.RandomResizedCrop(size), aug.RandomFlip()]
        else:
            stages.append(aug.CenterCrop(size))
        return aug.Compose([*stages, aug.ToFloat(scale=scale)])
    if cfg.image_size:
        stages.append(_Resize(cfg.image_size))
    if train and kind == "shift":
        stages.append(aug.RandomShift(max(1, shape[0] // 8)))
    elif train and kind == "crop-flip":
        stages += [aug.RandomCrop(shape[0], padding=max(1, shape[0] // 8)), aug.RandomFlip()]
    stages.append(aug.ToFloat(scale=scale))
    return aug.Compose(stages)


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


def _optimizer(cfg: TrainConfig, steps_per_epoch: int) -> Any:
    import keras

    lr: Any = cfg.lr
    if cfg.schedule == "cosine":
        total = max(1, cfg.epochs * steps_per_epoch)
        warmup = min(steps_per_epoch, total // 2)
        lr = keras.optimizers.schedules.CosineDecay(
            0.0 if warmup else cfg.lr,
            total - warmup,
            warmup_target=cfg.lr if warmup else None,
            warmup_steps=warmup,
        )
    if cfg.optimizer == "adam":
        return keras.optimizers.Adam(lr)
    if cfg.optimizer == "adamw":
        return keras.optimizers.AdamW(lr, weight_decay=cfg.weight_decay or 0.004)
    return keras.optimizers.SGD(lr, momentum=0.9, weight_decay=cfg.weight_decay or None)


def default_run_dir(cfg: TrainConfig, now: str | None = None) -> str:
    """The run directory: ``--run-dir``, else ``runs/<name>``.

    The name defaults to ``<data>-<model>-<date-time>`` (a new directory per
    run, like timm's output folders). With ``--resume`` and no name, the
    newest ``runs/<data>-<model>-*`` is continued. Multi-worker jobs (TF_CONFIG
    set) need the same directory on every worker, so they drop the time stamp.

    Example:
        >>> default_run_dir(TrainConfig(), now="20261130-101500")
        'runs/digits-cnn-20261130-101500'
        >>> default_run_dir(TrainConfig(name="demo"))
        'runs/demo'
    """
    if cfg.run_dir:
        return cfg.run_dir
    if cfg.name:
        return os.path.join("runs", cfg.name)
    base = f"{Path(cfg.data).stem or 'data'}-{cfg.model.replace(':', '.')}"
    if os.environ.get("TF_CONFIG"):
        return os.path.join("runs", base)
    if cfg.resume:
        previous = sorted(Path("runs").glob(f"{base}-*"))
        if previous:
            return str(previous[-1])
    return os.path.join("runs", f"{base}-{now or time.strftime('%Y%m%d-%H%M%S')}")


# -- resuming a run ----------------------------------------------------------------------------


def _has_checkpoints(run_dir: str) -> bool:
    folder = Path(run_dir, "checkpoints")
    return folder.is_dir() and any(folder.glob("ckpt-*.index"))


def _read_run_config(path: str) -> tuple[dict[str, Any], list[Any]]:
    """The options saved in a run's ``config.json`` (type-checked) and its history."""
    from tfdp.rundir import read_json_object

    raw = read_json_object(path, "run config")
    fields = TrainConfig.fields()
    options = {k: coerce(k, v, f"run config {path}") for k, v in raw.items() if k in fields}
    history = raw.get("history")
    return options, history if isinstance(history, list) else []


def _write_run_config(run_dir: str, cfg: TrainConfig, history: list[Any]) -> None:
    from tfdp.rundir import write_json_atomic

    write_json_atomic(os.path.join(run_dir, "config.json"), {**cfg.to_dict(), "history": history})


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


@dataclass
class Resumed:
    """What :func:`resolve_resume` found: the run's options, and what changed.

    Attributes:
        config: The options to resume with: ``config.json``'s, with the given ones applied.
        changed: ``{option: (the run's value, the new value)}`` for allowed changes.
        history: ``config.json``'s history so far.
        rebuilt: True when ``config.json`` was missing (the options given rebuild it).
    """

    config: TrainConfig
    changed: dict[str, tuple[Any, Any]]
    history: list[Any]
    rebuilt: bool = False


def resolve_resume(
    run_dir: str, cfg: TrainConfig, given: set[str] | frozenset[str] | None = None
) -> Resumed:
    """The options of a resumed run: ``config.json``'s, with the ``given`` ones applied.

    An option not in ``given`` takes the run's value (its default when
    ``config.json`` predates the option). A given option that
    differs from the run's either changes (options whose ``resume`` policy is
    ``"record"``: learning rate, epochs, schedule, ...; the change goes into
    ``config.json``'s history) or is refused, naming it (``"refuse"``: the
    data, the model, the optimizer, the batch size, the sampler, ... -- what
    the checkpoint's state or the data order depends on). ``given=None``
    treats every option of ``cfg`` as given (the Python API).

    Raises:
        ValueError: naming every refused option with both values; for a
            ``config.json`` that is not a JSON object of options (naming the
            file); for a run directory with neither ``config.json`` nor a checkpoint.

    Example:
        >>> import tempfile, json, os
        >>> run = tempfile.mkdtemp()
        >>> _ = open(os.path.join(run, "config.json"), "w").write(json.dumps({"lr": 0.1, "epochs": 15}))
        >>> r = resolve_resume(run, TrainConfig(lr=0.01, epochs=20), given={"lr"})
        >>> r.config.lr, r.config.epochs, r.config.batch_size, r.changed
        (0.01, 15, 64, {'lr': (0.1, 0.01)})
        >>> resolve_resume(run, TrainConfig(optimizer="sgd"), given={"optimizer"})
        Traceback (most recent call last):
        ...
        ValueError: --resume: --optimizer (the run has 'adam', now 'sgd') cannot change on resume: the run's checkpoints, data order and model depend on it. Leave it out (the run's value is used) or start a new run in another --run-dir
    """  # noqa: E501
    path = os.path.join(run_dir, "config.json")
    if not os.path.exists(path):
        if not _has_checkpoints(run_dir):
            raise ValueError(
                f"--resume: {run_dir!r} holds no run (no config.json and no checkpoint); start "
                "it without --resume"
            )
        return Resumed(cfg, {}, [], rebuilt=True)
    saved, history = _read_run_config(path)
    merged: dict[str, Any] = {}
    refused: list[str] = []
    changed: dict[str, tuple[Any, Any]] = {}
    for name, f in TrainConfig.fields().items():
        now = getattr(cfg, name)
        explicit = given is None or name in given
        policy = f.metadata["resume"]
        if policy == "locate":  # where the run is, not what it is
            merged[name] = now
            continue
        # An option newer than the run's config.json: the run had its default.
        old = saved.get(name, f.default)
        if not explicit or old == now:
            merged[name] = old
            continue
        if policy == "refuse":
            refused.append(f"{_flag(name)} (the run has {old!r}, now {now!r})")
            continue
        changed[name] = (old, now)
        merged[name] = now
    if refused:
        one = len(refused) == 1
        raise ValueError(
            "--resume: "
            + "; ".join(refused)
            + (" cannot change" if one else ": these cannot change")
            + " on resume: the run's checkpoints, data order and model depend on "
            + (
                "it. Leave it out (the run's value is used)"
                if one
                else "them. Leave them out (the run's values are used)"
            )
            + " or start a new run in another --run-dir"
        )
    merged["resume"] = True
    return Resumed(TrainConfig(**merged), changed, history)


def _refuse_existing_run(run_dir: str) -> None:
    if _has_checkpoints(run_dir):
        raise ValueError(
            f"--run-dir {run_dir!r} already holds a run with checkpoints: pass --resume to "
            "continue it (its config.json supplies the options you do not give), or choose "
            "another --run-dir (or --name)"
        )


# -- running -----------------------------------------------------------------------------------


def weights_fingerprint(model: Any) -> str:
    """A short SHA-256 of a model's weights: equal on every worker of a healthy job.

    Example:
        >>> import keras
        >>> m = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
        >>> len(weights_fingerprint(m))
        16
    """
    import hashlib

    import numpy as np

    digest = hashlib.sha256()
    for w in model.weights:
        digest.update(np.ascontiguousarray(w.numpy()).tobytes())
    return digest.hexdigest()[:16]


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def replicas_warning(replicas: int, cores: int) -> str | None:
    """A warning when logical CPU replicas far exceed the cores that run them (else None).

    Every replica's work runs on the same cores: a step takes about
    ``replicas / cores`` times as long, and a stop (Ctrl-C, a preemption)
    waits for the step in progress.

    Example:
        >>> replicas_warning(2, 2) is None
        True
        >>> print(replicas_warning(32, 2))  # doctest: +ELLIPSIS
        tfdp train: warning: 32 logical CPU replicas on 2 CPU core(s): ...
    """
    if replicas <= 2 * cores:
        return None
    return (
        f"tfdp train: warning: {replicas} logical CPU replicas on {cores} CPU core(s): every "
        f"step runs all {replicas} replicas' work on those cores (about {replicas // cores}x "
        "slower per step than one replica per core), and a stop waits for the step in "
        f"progress. Use --replicas {cores} or fewer unless you mean to test {replicas}-way "
        "data parallelism"
    )


def run_train(
    cfg: TrainConfig, *, given: set[str] | frozenset[str] | None = None, on_step: Any = None
) -> dict[str, Any]:
    """Run the training job described by ``cfg``; returns the final metrics.

    Checks the options (:func:`check_config`); with ``resume`` (or a restart
    by ``tfdp launch --max-restarts``) takes every option not in ``given``
    from the run's ``config.json`` (:func:`resolve_resume`; ``given=None``:
    all of ``cfg``). Builds the strategy (logical CPU replicas when there is
    no GPU), takes the run directory's lock (the chief), builds the data and
    its sampler and the model inside the scope, and trains with
    :class:`tfdp.train.Trainer`, evaluating exactly on the held-out split
    after every epoch. The first SIGINT / SIGTERM saves a checkpoint and
    returns; a second one ends the process at once, saving nothing more.
    ``on_step(state)`` is called after every ``tf.function`` call.
    """
    check_config(cfg)
    run_dir = default_run_dir(cfg)
    # A group restarted by `tfdp launch --max-restarts` resumes by itself.
    restarted = int(os.environ.get("TFDP_RESTART", "0") or 0) > 0
    resume = cfg.resume or (restarted and os.path.isfile(os.path.join(run_dir, "config.json")))
    resumed = None
    if resume:
        resumed = resolve_resume(run_dir, cfg, given)
        cfg = resumed.config
        check_config(cfg)
    else:
        _refuse_existing_run(run_dir)
    from tfdp.distribute import make_strategy, worker_info

    strategy = make_strategy(cfg.strategy, cpu_replicas=cfg.replicas)
    info = worker_info(strategy)
    from tfdp.rundir import RunLock

    lock = RunLock(run_dir) if info.is_chief else None
    if lock is not None:
        lock.acquire()
    try:
        if lock is not None and not resume:
            _refuse_existing_run(run_dir)  # again, now that no other run can write here
        if lock is not None:
            from tfdp.checkpoint import remove_interrupted_saves

            remove_interrupted_saves(os.path.join(run_dir, "checkpoints"))
        return _train(cfg, run_dir, strategy, info, resumed, on_step)
    finally:
        if lock is not None:
            lock.release()


def _train(
    cfg: TrainConfig, run_dir: str, strategy: Any, info: Any, resumed: Resumed | None, on_step: Any
) -> dict[str, Any]:
    import keras
    import tensorflow as tf

    from tfdp.input import DistributedInput
    from tfdp.models import build_model
    from tfdp.train import Trainer

    w = strategy.num_replicas_in_sync
    if info.is_chief and isinstance(strategy, tf.distribute.MirroredStrategy):
        devices = strategy.extended.worker_devices
        if all("CPU" in d.upper() for d in devices):
            warning = replicas_warning(w, _cores())
            if warning:
                print(warning, file=sys.stderr, flush=True)
    if cfg.deterministic:
        tf.config.experimental.enable_op_determinism()
    data = build_data(cfg)
    if info.is_chief:
        for note in data.notes:
            print(f"tfdp train: {note}", file=sys.stderr, flush=True)
    if cfg.batch_size % w:
        raise ValueError(f"--batch-size {cfg.batch_size} must be a multiple of the {w} replicas")
    sampler = "repeat_aug" if cfg.sampler == "repeat-aug" else "distributed"
    options = (
        {"num_repeats": cfg.repeats, "selected_round": cfg.selected_round}
        if sampler == "repeat_aug"
        else {}
    )
    _check_one_step(cfg, data, w)
    train_in = DistributedInput(
        strategy,
        data.train,
        sampler=sampler,
        sampler_options=options,
        global_batch_size=cfg.batch_size,
        augment=build_augment(cfg, data.shape, data.train_scale, True),
        seed=cfg.seed,
        return_ids=bool(cfg.record_samples),
    )
    eval_in = _eval_input(cfg, strategy, data)

    def model_fn() -> Any:
        keras.utils.set_random_seed(cfg.seed)
        return build_model(cfg.model, data.shape, data.num_classes)

    if info.is_chief:
        os.makedirs(run_dir, exist_ok=True)
    trainer = Trainer(
        strategy,
        model_fn,
        lambda: _optimizer(cfg, train_in.steps_per_epoch),
        "sparse_categorical_crossentropy_from_logits",
        metrics=["sparse_categorical_accuracy"],
        steps_per_call=cfg.steps_per_call,
        mixed_precision=cfg.mixed_precision,
        run_dir=run_dir,
        checkpoint_every=cfg.checkpoint_every,
        progress=cfg.progress and sys.stdout.isatty(),
        record_samples=cfg.record_samples,
    )
    if resumed is not None:
        trainer.restore(train_in)  # before config.json records the resume: it may be refused
        if cfg.schedule == "constant":  # a constant rate is an optimizer variable: restored too
            optimizer = trainer.optimizer
            if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
                optimizer = optimizer.inner_optimizer
            optimizer.learning_rate = cfg.lr
        if info.is_chief:
            entry: dict[str, Any] = {
                "event": "resume",
                "time": _now(),
                "global_step": trainer.state.global_step,
            }
            if resumed.changed:
                entry["changed"] = {
                    k: {"from": a, "to": b} for k, (a, b) in resumed.changed.items()
                }
                print(
                    "tfdp train: resuming with "
                    + ", ".join(
                        f"{_flag(k)} {b!r} (was {a!r})" for k, (a, b) in resumed.changed.items()
                    )
                    + "; recorded in config.json",
                    flush=True,
                )
            if resumed.rebuilt:
                entry["note"] = "config.json was missing: rebuilt from the options given"
                print(
                    f"tfdp train: {run_dir}/config.json was missing: rebuilt from the options "
                    "given (the checkpoint's data configuration was checked on restore)",
                    file=sys.stderr,
                    flush=True,
                )
            _write_run_config(run_dir, cfg, [*resumed.history, entry])
    elif info.is_chief:
        _write_run_config(run_dir, cfg, [{"event": "start", "time": _now()}])
    if info.is_chief and resumed is None:
        print(
            f"tfdp train: {w} replica(s) ({type(strategy).__name__}), "
            f"{data.train.num_examples} training / {data.eval.num_examples} held-out examples "
            f"({data.held_out}), {train_in.steps_per_epoch} steps/epoch, run dir {run_dir}",
            flush=True,
        )
    handled = (signal.SIGINT, signal.SIGTERM)
    previous = {s: signal.getsignal(s) for s in handled}

    def stop(signum: int, frame: Any) -> None:
        for s in handled:  # a second signal takes the default action: the process ends at once
            signal.signal(s, signal.SIG_DFL)
        name = signal.Signals(signum).name
        again = "Ctrl-C" if signum == signal.SIGINT else name
        print(
            f"tfdp train: {name}: saving a checkpoint and stopping "
            f"({again} again to exit now without saving)",
            file=sys.stderr,
            flush=True,
        )
        trainer.request_stop(name)

    for s in handled:
        signal.signal(s, stop)
    t0 = time.perf_counter()
    try:
        trainer.fit(train_in, cfg.epochs, eval_input=eval_in, resume=False, on_step=on_step)
    except tf.errors.FailedPreconditionError as err:
        from tfdp.sources import TFRecordSource

        if isinstance(data.train, TFRecordSource) and "expected to contain" in err.message:
            problems = data.train.count_problems()  # name the shard whose count is wrong
            if problems:
                raise ValueError("--data: " + "; ".join(problems)) from None
        raise
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    result = {
        "epoch": trainer.state.epoch,
        "global_step": trainer.state.global_step,
        "stopped_early": trainer.state.stopped_early,
        "stop_reason": trainer.state.stop_reason,
        "seconds": time.perf_counter() - t0,
        "weights_sha256": weights_fingerprint(trainer.model),
    }
    if trainer.state.history:
        result.update({k: v for k, v in trainer.state.history[-1].items() if k.startswith("val_")})
    from tfdp.sources import ImageFolderSource

    if info.is_chief and isinstance(data.eval, ImageFolderSource) and data.eval.skipped_files():
        print(f"tfdp train: held-out data: {data.eval.report()}", flush=True)  # --on-bad-file skip
    if info.num_workers > 1:  # every worker: the proof that all hold the same weights
        print(
            f"tfdp train: worker {info.worker_index} weights sha256 {result['weights_sha256']} "
            f"at step {trainer.state.global_step}",
            flush=True,
        )
    if info.is_chief:
        if trainer.state.stopped_early:
            print(
                f"tfdp train: stopped at epoch {trainer.state.epoch}, step {trainer.state.step}; "
                f"resume with: tfdp train --resume --run-dir {run_dir}",
                flush=True,
            )
        elif not trainer.state.history:
            print(
                f"tfdp train: nothing to train: the run has done {trainer.state.epoch} epoch(s) "
                f"of --epochs {cfg.epochs} (give a larger --epochs to train more)",
                flush=True,
            )
        else:
            print(
                f"tfdp train: done in {result['seconds']:.1f}s: held-out accuracy "
                f"{result.get('val_sparse_categorical_accuracy', float('nan')):.4f}",
                flush=True,
            )
    return result


def _check_one_step(cfg: TrainConfig, data: JobData, w: int) -> None:
    """Refuse a batch larger than an epoch of a random-access source, in the CLI's words."""
    from tfdp.samplers import DistributedSampler, RepeatAugSampler
    from tfdp.sources.base import StreamingSource

    if isinstance(data.train, StreamingSource):
        return

    n = data.train.num_examples
    if n < w:
        raise ValueError(
            f"--data {cfg.data!r} has {n} training example(s), fewer than the {w} replicas"
        )
    if cfg.sampler == "repeat-aug":
        sampler: Any = RepeatAugSampler(
            n, w, 0, num_repeats=cfg.repeats, selected_round=cfg.selected_round
        )
    else:
        sampler = DistributedSampler(n, w, 0)
    per_replica = cfg.batch_size // w
    if len(sampler) < per_replica:
        raise ValueError(
            f"--batch-size {cfg.batch_size} is more than one epoch holds: each of the {w} "
            f"replicas gets {len(sampler)} example(s) per epoch of --data {cfg.data!r} "
            f"({n} training examples), fewer than its {per_replica} per step: use a --batch-size "
            f"of at most {len(sampler) * w}"
        )


def _eval_input(cfg: TrainConfig, strategy: Any, data: JobData) -> Any:
    from tfdp.input import DistributedInput

    w = strategy.num_replicas_in_sync
    return DistributedInput(
        strategy,
        data.eval,
        sampler="eval",
        batch_size=max(1, cfg.batch_size // w),
        augment=build_augment(cfg, data.shape, data.eval_scale, False),
    )


def run_evaluate(run_dir: str, replicas: int | None = None) -> dict[str, Any]:
    """Evaluate the latest readable checkpoint of ``run_dir`` on its held-out split, exactly.

    The result is the same whatever the replica count. The checkpoint is
    found as training's resume finds it (:meth:`tfdp.checkpoint.CheckpointManager.restore`:
    a corrupt or truncated newest one is skipped for the previous one, with a
    warning); ``"checkpoint"`` in the result names the one evaluated.

    Raises:
        ValueError: ``run_dir`` has no (readable) ``config.json`` or no checkpoint.
    """
    path = os.path.join(run_dir, "config.json")
    if not os.path.isfile(path):
        hint = ""
        if _has_checkpoints(run_dir):
            hint = (
                ": it has checkpoints, but their data and model are described by config.json; "
                f"rebuild it with `tfdp train --resume --run-dir {run_dir}` and the run's options"
            )
        raise ValueError(f"{run_dir!r} is not a tfdp run directory (no config.json){hint}")
    saved, _ = _read_run_config(path)
    cfg = TrainConfig(**saved)
    if replicas is not None:
        cfg.replicas = replicas
    check_config(cfg)
    from tfdp.distribute import make_strategy

    strategy = make_strategy(
        "auto" if cfg.strategy == "multi_worker" else cfg.strategy, cpu_replicas=cfg.replicas
    )
    from tfdp.checkpoint import CheckpointManager
    from tfdp.models import build_model
    from tfdp.train import evaluate

    data = build_data(cfg)
    w = strategy.num_replicas_in_sync
    with strategy.scope():
        model = build_model(cfg.model, data.shape, data.num_classes)
    ckpt_dir = os.path.join(run_dir, "checkpoints")
    manager = CheckpointManager(ckpt_dir, strategy=strategy, read_only=True, model=model)
    if manager.restore(partial=True) is None:
        raise ValueError(f"{run_dir!r} has no checkpoint under {ckpt_dir!r}")
    out = evaluate(
        strategy,
        model,
        _eval_input(cfg, strategy, data),
        "sparse_categorical_crossentropy_from_logits",
        ["sparse_categorical_accuracy"],
    )
    out["replicas"] = w
    out["checkpoint"] = manager.restored
    return out
