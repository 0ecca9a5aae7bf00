"""The training job's options: :class:`TrainConfig`, config files, checks and the run directory.

This module owns every option of the main job (``tfdp train``) in one
dataclass -- its type, default, help and what may change on resume -- so
that flags, YAML / TOML / JSON config files and a run's saved
``config.json`` are one thing; :func:`load_config_file` and :func:`coerce`
read and check values (an unknown key gets a "did you mean");
:func:`check_config` refuses values no run can use before anything is
built; :func:`check_paths` refuses a data path that does not exist; and
:func:`default_run_dir` names the run directory. Importing it loads no
TensorFlow, and nothing here does.

The options are the job's vocabulary: messages name them as the command
line spells them (``--batch-size``), which is also how config files may
spell them (``batch-size`` or ``batch_size``).

Example:
    >>> cfg = TrainConfig(epochs=1, sampler="repeat_aug")
    >>> cfg.sampler, cfg.repeats, cfg.replicas
    ('repeat-aug', 3.0, 2)
"""

from __future__ import annotations

import dataclasses
import difflib
import glob
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfdp.errors import ConfigError, DataError
from tfdp.recipe.augment_options import AugmentOptions, check_augment_options, resolve_normalization
from tfdp.recipe.lr_rule import LrRuleOptions, check_lr_rule
from tfdp.recipe.model_options import ModelOptions, check_model_options
from tfdp.recipe.networks import check_model_module, check_model_ref
from tfdp.recipe.options import option as _opt

OPTIONS_HELP = "see `tfdp train --help`"

#: timm's and DeiT's names of options tfdp names otherwise (flags and config-file keys alike).
ALIASES = {"opt": "optimizer", "sched": "schedule"}

#: ``--log-every``'s default when stdout is not a terminal (a batch job's log, a pipe): a step
#: line every 50 optimizer steps, as timm's ``--log-interval``. At 0.05 to 1 s a step (a small
#: model on a CPU to an ImageNet model on a GPU) that is a line every 2.5 to 50 s, within an
#: epoch as long as a day's; a shorter epoch's progress shows in its epoch line. The same number
#: as ``--checkpoint-every``'s default, so the two cut the same compiled calls (calls are cut to
#: land on both), and no third call length is compiled.
DEFAULT_LOG_EVERY = 50

#: ``--gradient-compression``'s values: ``none`` (the exact float32 all-reduce) and the types of
#: ``tfdp.train.compression.COMPRESSIONS`` (kept equal by tests/test_compression.py).
GRADIENT_COMPRESSIONS = ("none", "fp16", "bf16")

#: ``--optimizer``'s values: timm's names of torch's updates (:mod:`tfdp.optim`), Keras's Lion,
#: Keras's Adam and AdamW; and the ones with a ``--momentum`` (torch's SGD).
OPTIMIZERS = ("adam", "adamw", "sgd", "nesterov", "momentum", "lion", "keras-adam", "keras-adamw")
SGD_OPTIMIZERS = ("sgd", "nesterov", "momentum")

#: What a run is named without ``--name`` (see :func:`default_run_dir`), as help shows it.
RUN_NAME_PATTERN = "<data>-<model>-<date>-<time>"


def default_help(name: str) -> str | None:
    """What help shows as option ``name``'s default: the value, or how it is computed, or None.

    Example:
        >>> default_help("epochs"), default_help("run_dir")
        ('15', 'runs/<name>')
    """
    f = TrainConfig.fields()[name]
    if f.default is None and None not in (f.metadata.get("choices") or ()):
        return f.metadata.get("computed")
    return str(f.default)


@dataclass
class _JobOptions:
    """The job's options but the augmentation's (:class:`TrainConfig` has them all)."""

    data: str = _opt(
        "digits",
        "training data: 'digits' (bundled), an image folder, a .npz "
        "file (arrays 'images'/'x' and 'labels'/'y'), or TFRecord files (a glob or "
        "a manifest written by `tfdp data convert`)",
    )
    eval_data: str | None = _opt(
        None,
        "held-out data in the same forms",
        computed="the digits' held-out split, or --eval-fraction of --data",
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
        "number of classes",
        computed="the data's class names, else the largest label + 1, and then every label "
        "below it must occur: a stray label is refused",
    )
    on_bad_file: str = _opt(
        "error",
        "image folders: a file that cannot be decoded stops the run naming it (error), or is "
        "replaced by a placeholder with weight 0 and reported at every epoch end (skip)",
        ("error", "skip"),
        resume="record",
    )
    sampler: str = _opt(
        "repeat-aug",
        "training sampler: Repeated Augmentation (DeiT / timm; 'repeat_aug' is the same) or "
        "torch's DistributedSampler",
        ("repeat-aug", "distributed"),
    )
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
        "logical CPU replicas when no GPU is present (a resumed run may change it: the global "
        "batch is kept, the interrupted epoch continues exactly)",
        resume="record",
    )
    model: str = _opt(
        "cnn",
        "'cnn', 'resnet', a ViT / DeiT model by timm's name (deit_{tiny,small,base}_patch16_224, "
        "their _distilled_ variants, vit_{tiny,small,base}_patch16_224: tfdp[models]), a "
        "keras.applications model ('resnet50', "
        "'keras.applications:EfficientNetB0': random weights, logits out) or 'module:function' "
        "returning a keras.Model of logits (called with input_shape= and num_classes= or "
        "classes=, as its signature names them; a module in the current folder is found)",
    )
    epochs: int = _opt(
        15, "epochs to train (a resumed run continues up to this number)", resume="record"
    )
    batch_size: int = _opt(
        64,
        "global batch size: all replicas of all workers together (a timm/torch '-b' is per "
        "process: use --batch-size-per-replica for that)",
    )
    batch_size_per_replica: int | None = _opt(
        None,
        "batch size of each replica; the global batch is this times the number of replicas "
        "(instead of --batch-size)",
    )
    lr: float = _opt(
        3e-3,
        "learning rate (the peak of the schedule), as given unless --lr-rule scales it by the "
        "batch (DeiT's or timm's rule)",
        resume="record",
    )
    optimizer: str = _opt(
        "adam",
        "optimizer, as timm names them (also --opt): adam and adamw (torch's Adam and AdamW, "
        "tfdp.optim; adamw's weight decay decoupled, as DeiT's and timm's), sgd and nesterov "
        "(torch's SGD with Nesterov momentum, as timm's), momentum (torch's SGD without "
        "Nesterov), lion (Keras's); keras-adam and keras-adamw (Keras's Adam and AdamW, whose "
        "epsilon is added before the bias correction: not torch's update)",
        OPTIMIZERS,
    )
    momentum: float | None = _opt(
        None,
        "momentum of sgd, nesterov and momentum (refused with the other optimizers)",
        resume="record",
        computed="0.9",
    )
    weight_decay: float = _opt(
        0.0,
        "weight decay as timm applies it: decoupled for adamw, keras-adamw, keras-adam and lion "
        "(p -= lr * wd * p), an L2 term of the gradient for adam, sgd, nesterov and momentum "
        "(torch's weight_decay); weights of one dimension (biases, normalisation) get none",
        resume="record",
    )
    schedule: str = _opt(
        "cosine",
        "learning-rate schedule (also --sched): timm's cosine (linear warm-up from --warmup-lr "
        "over --warmup-epochs, then cosine from --lr to --min-lr at --epochs, the warm-up "
        "counted in) or constant",
        ("cosine", "constant"),
    )
    warmup_epochs: int = _opt(1, "cosine: epochs of linear warm-up", resume="record")
    warmup_lr: float = _opt(0.0, "cosine: the rate the warm-up starts from", resume="record")
    min_lr: float = _opt(0.0, "cosine: the rate at the end", resume="record")
    sched_on_updates: bool = _opt(
        True,
        "cosine: a new rate after every optimizer step (timm's --sched-on-updates); "
        "--no-sched-on-updates changes it once per epoch, as DeiT and timm do by default",
        resume="record",
    )
    sched_one_epoch_late: bool = _opt(
        False,
        "cosine per epoch (--no-sched-on-updates): DeiT's rates, one epoch behind timm's "
        "train.py (DeiT's main.py steps its scheduler to the epoch just trained: epoch e > 0 "
        "trains at the rate of epoch e - 1)",
        resume="record",
    )
    clip_grad: float | None = _opt(
        None,
        "clip the all-reduced gradient to this global norm (timm's --clip-grad, --clip-mode "
        "norm); none when not given",
        resume="record",
    )
    smoothing: float = _opt(
        0.0,
        "label smoothing of the training loss (timm's --smoothing; with --mixup / --cutmix "
        "Mixup's soft targets carry it; the held-out loss is plain cross-entropy)",
        resume="record",
    )
    accum_steps: int = _opt(
        1,
        "micro-batches whose gradients are summed per optimizer step (the effective batch is "
        "this times the global batch)",
    )
    model_ema: bool = _opt(
        False,
        "keep an exponential moving average of the trainable weights (timm's ModelEma; in the "
        "checkpoints; evaluated after every epoch as val_ema_*, saved as model_ema.keras)",
    )
    model_ema_decay: float = _opt(0.99996, "--model-ema: the decay", resume="record")
    keep_checkpoints: int = _opt(
        3, "checkpoints kept in RUN_DIR/checkpoints (the newest)", resume="record"
    )
    eval_metric: str = _opt(
        "top1",
        "held-out metric that picks RUN_DIR/model_best.keras (timm's --eval-metric; top5 needs "
        "more than 5 classes)",
        ("top1", "top5", "loss"),
        resume="record",
    )
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
    run_dir: str | None = _opt(None, "run directory", resume="locate", computed="runs/<name>")
    name: str | None = _opt(
        None,
        "run name: a new run directory per run (multi-worker jobs drop the date and time, so "
        "that every worker names the same; --resume without a name continues the newest)",
        resume="locate",
        computed=RUN_NAME_PATTERN,
    )
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
    jit_compile: bool = _opt(
        False,
        "compile each replica's forward and backward pass with XLA (the update stays outside); "
        "values differ from the graph's in the last bits. Measure first: on CPU cores it made "
        "DeiT-Ti's whole recipe slower (docs/benchmarks.md)",
        resume="record",
    )
    mixed_precision: str | None = _opt(
        None,
        "mixed precision policy (--amp: mixed_float16, timm's; --bf16: mixed_bfloat16)",
        (None, "mixed_float16", "mixed_bfloat16"),
    )
    gradient_compression: str = _opt(
        "none",
        "round every replica's gradients to 16 bits before the all-reduce, halving the bytes "
        "sent between workers: fp16 (11 significant bits, 6e-8 to 65504: smaller entries "
        "become 0, larger ones infinite, which stops the run as a non-finite step) or bf16 "
        "(8 significant bits, float32's range). Not exact, so none by default; refused with "
        "--mixed-precision mixed_float16",
        GRADIENT_COMPRESSIONS,
        resume="record",
    )
    progress: bool = _opt(True, "show a progress bar (chief only)", resume="record")
    log_every: int | None = _opt(
        None,
        "print a plain line every N steps (step, loss, lr, samples/s) when the output is not a "
        "terminal, like timm's --log-interval; 0: none (a terminal shows the progress bar)",
        resume="record",
        computed=f"{DEFAULT_LOG_EVERY} when stdout is not a terminal, else 0",
    )


@dataclass
class TrainConfig(AugmentOptions, ModelOptions, LrRuleOptions, _JobOptions):
    """Every option of the training job (flags, config files and ``config.json`` share it).

    The job's own options first, then the learning-rate rule
    (:class:`tfdp.recipe.lr_rule.LrRuleOptions`), then DeiT's model options
    (:class:`tfdp.recipe.model_options.ModelOptions`), then DeiT's / timm's
    transform options (:class:`tfdp.recipe.augment_options.AugmentOptions`).
    ``mean`` / ``std`` not given take the model's values
    (:func:`tfdp.recipe.augment_options.resolve_normalization`), so the run's
    ``config.json`` records them.

    Example:
        >>> TrainConfig(batch_size=32, aa="rand-m9-mstd0.5-inc1").batch_size
        32
        >>> list(TrainConfig.fields())[-1], TrainConfig().mean
        ('std', (0.0,))
    """

    def __post_init__(self) -> None:
        if self.aa == "none":  # timm's word for no RandAugment (a config file has no null)
            self.aa = None
        if self.sampler == "repeat_aug":  # the Python spelling names the same sampler
            self.sampler = "repeat-aug"
        resolve_normalization(self)

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
        ConfigError: naming the option and where it came from.

    Example:
        >>> coerce("epochs", 3, "config.toml")
        3
    """
    fields = TrainConfig.fields()
    if name not in fields:
        close = difflib.get_close_matches(name, list(fields), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"{where}: unknown option {name!r}{hint} ({OPTIONS_HELP})")
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
    elif t.startswith("tuple[float"):
        ok = isinstance(value, (list, tuple)) and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in value
        )
        value = tuple(float(v) for v in value) if ok else value
    if not ok:
        raise ConfigError(
            f"{where}: option {name!r} must be of type {t}, got {value!r} ({type(value).__name__})"
        )
    if name == "sampler" and value == "repeat_aug":
        value = "repeat-aug"
    choices = f.metadata.get("choices")
    if choices is not None and value is not None and value not in choices:
        raise ConfigError(f"{where}: option {name!r} must be one of {list(choices)}, got {value!r}")
    return value


def load_config_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    r"""Read a YAML (.yaml/.yml), TOML (.toml) or JSON (.json) config file into checked options.

    A run's ``config.json`` is a valid config file (its ``history`` and ``format`` are skipped).

    Keys may use dashes or underscores (``batch-size`` or ``batch_size``).

    Raises:
        ConfigError: for a missing file, a parse error, an unknown key (with the
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
        raise ConfigError(f"config file {str(p)!r} does not exist")
    if p.suffix not in (".yaml", ".yml", ".toml", ".json"):
        raise ConfigError(f"config file {str(p)!r}: use a .yaml, .yml, .toml or .json file")
    try:
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"config file {str(p)!r} is not a text file (byte {exc.start} is not UTF-8)"
        ) from None
    try:
        if p.suffix == ".toml":
            try:
                import tomllib
            except ImportError:  # Python 3.10
                import tomli as tomllib  # type: ignore[no-redef]
            raw = tomllib.loads(text)
        elif p.suffix == ".json":
            import json

            raw = json.loads(text)
            if isinstance(raw, dict):  # a run's config.json: its events and format are not options
                raw.pop("history", None)
                raw.pop("format", None)
        else:
            import yaml

            raw = yaml.safe_load(text) or {}
    except Exception as exc:  # parse errors of any of the libraries (TOML's is a ValueError)
        detail = " ".join(str(exc).split())
        raise ConfigError(f"config file {str(p)!r} could not be parsed: {detail}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"config file {str(p)!r} must hold a mapping of option: value")
    out = {}
    for key, value in raw.items():
        name = str(key).replace("-", "_")
        name = ALIASES.get(name, name)
        out[name] = coerce(name, value, f"config file {str(p)!r}")
    return out


def check_config(cfg: TrainConfig) -> None:
    """Refuse option values no run can use, naming the option and what would be valid.

    Cheap (no TensorFlow): called before anything is built.

    Raises:
        ConfigError: for the first bad value.

    Example:
        >>> check_config(TrainConfig(image_size=-4))
        Traceback (most recent call last):
        ...
        tfdp.errors.ConfigError: image_size: must be an integer >= 1, got -4
    """
    for name in ("epochs", "batch_size", "replicas", "steps_per_call", "accum_steps",
                 "keep_checkpoints"):  # fmt: skip
        value = getattr(cfg, name)
        if value < 1:
            raise ConfigError(f"must be an integer >= 1, got {value}", argument=name)
    for name in ("image_size", "checkpoint_every", "num_classes", "batch_size_per_replica"):
        value = getattr(cfg, name)
        if value is not None and value < 1:
            raise ConfigError(f"must be an integer >= 1, got {value}", argument=name)
    for name in ("seed", "selected_round", "log_every", "warmup_epochs"):
        if (getattr(cfg, name) or 0) < 0:
            raise ConfigError(f"must be an integer >= 0, got {getattr(cfg, name)}", argument=name)
    if not (math.isfinite(cfg.lr) and cfg.lr > 0):
        raise ConfigError(f"must be a finite number > 0, got {cfg.lr}", argument="lr")
    for name in ("weight_decay", "momentum", "warmup_lr", "min_lr"):
        value = getattr(cfg, name)
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise ConfigError(f"must be a finite number >= 0, got {value}", argument=name)
    _check_recipe(cfg)
    check_lr_rule(cfg)
    check_augment_options(cfg)
    check_model_options(cfg)
    if not (math.isfinite(cfg.repeats) and cfg.repeats >= 1):
        raise ConfigError(f"must be a finite number >= 1, got {cfg.repeats}", argument="repeats")
    if not 0 < cfg.eval_fraction < 1:
        raise ConfigError(f"must be in (0, 1), got {cfg.eval_fraction}", argument="eval_fraction")
    for name in ("data", "eval_data", "run_dir", "name", "record_samples", "model"):
        value = getattr(cfg, name)
        if value is not None and not str(value).strip():
            raise ConfigError("empty", argument=name)
    if cfg.gradient_compression != "none" and cfg.mixed_precision == "mixed_float16":
        raise ConfigError(
            f"{cfg.gradient_compression} cannot be combined with "
            "--mixed-precision mixed_float16: its loss scaler all-reduces the scaled gradients "
            "itself (use --mixed-precision mixed_bfloat16, or --gradient-compression none)",
            argument="gradient_compression",
        )
    check_model_ref(cfg.model)


def _check_recipe(cfg: TrainConfig) -> None:
    """The training recipe's numbers: clipping, smoothing, EMA decay."""
    if cfg.clip_grad is not None and not (math.isfinite(cfg.clip_grad) and cfg.clip_grad > 0):
        raise ConfigError(f"must be a finite number > 0, got {cfg.clip_grad}", argument="clip_grad")
    if not 0 <= cfg.smoothing < 1:
        raise ConfigError(f"must be in [0, 1), got {cfg.smoothing}", argument="smoothing")
    if not 0 <= cfg.model_ema_decay < 1:
        raise ConfigError(
            f"must be in [0, 1), got {cfg.model_ema_decay}", argument="model_ema_decay"
        )
    if cfg.sched_one_epoch_late and cfg.sched_on_updates:
        raise ConfigError(
            "DeiT's stepping of a per-epoch schedule: give "
            "--no-sched-on-updates with it (a schedule stepped per update is never late)",
            argument="sched_one_epoch_late",
        )


def check_given(cfg: TrainConfig, given: set[str] | frozenset[str] | None = None) -> None:
    """Refuse an option given (``given``; None: all ``cfg`` sets) that ``cfg``'s optimizer lacks.

    ``cfg`` holds the run's options: on a resume, ``config.json``'s with the
    given ones applied (the optimizer may be the run's). No TensorFlow.

    Example:
        >>> check_given(TrainConfig(optimizer="adamw", momentum=0.9), {"momentum"})
        Traceback (most recent call last):
        ...
        tfdp.errors.ConfigError: momentum: 0.9 with --optimizer adamw: only sgd, nesterov and momentum (torch's SGD) have a momentum; leave --momentum out (Adam's betas are torch's 0.9 and 0.999) or choose one of them
    """  # noqa: E501
    gave = cfg.momentum is not None and (given is None or "momentum" in given)
    if gave and cfg.optimizer not in SGD_OPTIMIZERS:
        raise ConfigError(
            f"{cfg.momentum:g} with --optimizer {cfg.optimizer}: only sgd, "
            "nesterov and momentum (torch's SGD) have a momentum; leave --momentum out "
            "(Adam's betas are torch's 0.9 and 0.999) or choose one of them",
            argument="momentum",
        )


def step_lines_every(cfg: TrainConfig, stdout: Any) -> int:
    """The run's ``--log-every``: as given, else :data:`DEFAULT_LOG_EVERY` off a terminal, else 0.

    Example:
        >>> import io
        >>> step_lines_every(TrainConfig(), io.StringIO()), step_lines_every(
        ...     TrainConfig(log_every=0), io.StringIO())
        (50, 0)
    """
    if cfg.log_every is not None:
        return cfg.log_every
    try:
        terminal = bool(stdout.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        terminal = False
    return 0 if terminal else DEFAULT_LOG_EVERY


def flag(name: str) -> str:
    """The command-line spelling of option ``name``.

    Example:
        >>> flag("batch_size")
        '--batch-size'
    """
    return "--" + name.replace("_", "-")


def check_paths(cfg: TrainConfig) -> None:
    """Refuse a path or module the job cannot use (cheap: before TensorFlow loads).

    A ``data`` / ``eval_data`` path that does not exist (``"digits"`` is the
    bundled data set; a glob must match at least one file), a ``run_dir``
    that is a file, a ``record_samples`` file whose folder does not exist (or
    that is a folder), a ``model`` module that cannot be found.

    Raises:
        DataError: naming the option and the path.
        ConfigError: naming the option (a run directory, a samples file, a model).

    Example:
        >>> check_paths(TrainConfig(data="/no/such/data.npz"))
        Traceback (most recent call last):
        ...
        tfdp.errors.DataError: data: '/no/such/data.npz' does not exist
    """
    for name in ("data", "eval_data"):
        spec = getattr(cfg, name)
        if spec is None or spec == "digits":
            continue
        path = os.path.expanduser(spec)
        if glob.has_magic(path):
            if not glob.glob(path):
                raise DataError(f"{spec!r} matches no file", argument=name)
        elif not os.path.exists(path):
            raise DataError(f"{spec!r} does not exist", argument=name)
    if cfg.run_dir and os.path.exists(cfg.run_dir) and not os.path.isdir(cfg.run_dir):
        raise ConfigError(f"{cfg.run_dir!r} is a file; give a directory", argument="run_dir")
    if cfg.record_samples:
        path = cfg.record_samples
        folder = os.path.dirname(os.path.abspath(path))
        if os.path.isdir(path):
            raise ConfigError(
                f"{cfg.record_samples!r} is a folder; give a file", argument="record_samples"
            )
        if not os.path.isdir(folder):
            raise ConfigError(
                f"{cfg.record_samples!r}: folder {folder!r} does not exist",
                argument="record_samples",
            )
    check_model_module(cfg.model)


def default_run_dir(cfg: TrainConfig, now: str | None = None) -> str:
    """The run directory: ``--run-dir``, else ``runs/<name>``.

    The name defaults to :data:`RUN_NAME_PATTERN`, ``<data>-<model>-<date>-<time>``
    (a new directory per run, like timm's output folders). With ``--resume`` and no name, the
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
