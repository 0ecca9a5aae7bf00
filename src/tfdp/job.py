"""The main job behind ``tfdp train`` and ``tfdp evaluate``: a config in, a trained run out.

This module owns :class:`TrainConfig` (every option of the training job, with
its type, default and help, so that flags, YAML/TOML config files and the
saved ``config.json`` of a run are one thing), loading and validating config
files (unknown keys get a "did you mean"), and :func:`run_train` /
:func:`run_evaluate`, which wire data, sampler, strategy, model and
:class:`tfdp.train.Trainer` together.

Example:
    >>> cfg = TrainConfig(epochs=1)
    >>> cfg.sampler, cfg.repeats, cfg.replicas
    ('repeat-aug', 3.0, 2)
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "TrainConfig",
    "load_config_file",
    "run_evaluate",
    "run_train",
    "weights_fingerprint",
]

OPTIONS_HELP = "see `tfdp train --help`"


def _opt(default: Any, help: str, choices: tuple[Any, ...] | None = None) -> Any:
    return field(default=default, metadata={"help": help, "choices": choices})


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
        "fraction of a random-access --data held out for evaluation when --eval-data is not given",
    )
    image_size: int | None = _opt(
        None, "resize images to this square size (image folders: required when image sizes differ)"
    )
    sampler: str = _opt("repeat-aug", "training sampler", ("repeat-aug", "distributed"))
    repeats: float = _opt(3.0, "repeat-aug: copies of each sample per epoch")
    selected_round: int = _opt(
        0,
        "repeat-aug: round the per-epoch count down to a multiple "
        "of this (DeiT: 256; 0 keeps ceil(N / replicas))",
    )
    strategy: str = _opt(
        "auto", "distribution strategy", ("auto", "mirrored", "cpu", "multi_worker", "one_device")
    )
    replicas: int = _opt(2, "logical CPU replicas when no GPU is present")
    model: str = _opt(
        "cnn",
        "'cnn', 'resnet' or 'module:function' returning a keras.Model "
        "(called with input_shape, num_classes)",
    )
    epochs: int = _opt(15, "epochs to train (a resumed run continues up to this number)")
    batch_size: int = _opt(64, "global batch size (all replicas together)")
    lr: float = _opt(3e-3, "learning rate")
    optimizer: str = _opt("adam", "optimizer", ("adam", "adamw", "sgd"))
    schedule: str = _opt(
        "cosine",
        "learning-rate schedule: cosine decay to 0 over the run "
        "(after a one-epoch linear warm-up), or constant",
        ("cosine", "constant"),
    )
    weight_decay: float = _opt(0.0, "decoupled weight decay (adamw, sgd)")
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
    run_dir: str | None = _opt(None, "run directory (default runs/<name>)")
    name: str | None = _opt(None, "run name (default: <data>-<model>)")
    resume: bool = _opt(False, "continue the run in --run-dir from its last checkpoint")
    deterministic: bool = _opt(False, "enable TensorFlow op determinism (bit-exact reruns)")
    record_samples: str | None = _opt(
        None,
        "write, per step and per replica (global rank), "
        "the example ids consumed, as JSON lines, to this file",
    )
    checkpoint_every: int | None = _opt(50, "save a checkpoint every N steps (and at epoch end)")
    steps_per_call: int = _opt(4, "optimizer steps per tf.function call")
    mixed_precision: str | None = _opt(
        None, "mixed precision policy", (None, "mixed_float16", "mixed_bfloat16")
    )
    progress: bool = _opt(True, "show a progress bar (chief only)")

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
    text = p.read_text()
    try:
        if p.suffix in (".yaml", ".yml"):
            import yaml

            raw = yaml.safe_load(text) or {}
        elif p.suffix == ".toml":
            try:
                import tomllib
            except ImportError:  # Python 3.10
                import tomli as tomllib  # type: ignore[no-redef]
            raw = tomllib.loads(text)
        else:
            raise ValueError(f"config file {str(p)!r}: use a .yaml, .yml or .toml file")
    except ValueError:
        raise
    except Exception as exc:  # parse errors of either library
        raise ValueError(f"config file {str(p)!r} could not be parsed: {exc}") from None
    if not isinstance(raw, dict):
        raise ValueError(f"config file {str(p)!r} must hold a mapping of option: value")
    out = {}
    for key, value in raw.items():
        name = str(key).replace("-", "_")
        out[name] = coerce(name, value, f"config file {str(p)!r}")
    return out


# -- building the job ------------------------------------------------------------------------------


def _load_npz(path: str) -> tuple[Any, Any]:
    import numpy as np

    with np.load(path) as data:
        keys = set(data.files)
        xk = next((k for k in ("images", "x", "image") if k in keys), None)
        yk = next((k for k in ("labels", "y", "label") if k in keys), None)
        if xk is None or yk is None:
            raise ValueError(
                f"{path!r} must hold arrays 'images' (or 'x') and 'labels' (or 'y'); "
                f"it has {sorted(keys)}"
            )
        x, y = data[xk], data[yk]
    if x.ndim == 3:
        x = x[..., None]
    if x.ndim != 4 or len(x) != len(y):
        raise ValueError(
            f"{path!r}: images must be [N, H, W, C] with one label each, "
            f"got {x.shape} and {y.shape}"
        )
    return x, y.astype("int64")


def _source(spec: str) -> Any:
    """A source for ``spec``; returns (source, num_classes or None, value scale)."""
    from tfdp.sources import ArraySource

    if spec == "digits":
        raise AssertionError("handled by the caller")
    p = Path(spec)
    if p.is_dir() and not any(p.glob("*.manifest.json")):
        from tfdp.sources import ImageFolderSource

        return ImageFolderSource(p)
    if p.suffix == ".npz":
        if not p.is_file():
            raise ValueError(f"--data {spec!r}: file does not exist")
        return ArraySource(_load_npz(spec))
    if (
        p.is_dir()
        or p.suffix == ".json"
        or any(c in spec for c in "*?[")
        or p.suffix in (".tfrecord", ".tfrec")
    ):
        from tfdp.sources import TFRecordSource

        target = spec
        if p.is_dir():
            manifests = sorted(p.glob("*.manifest.json"))
            target = str(manifests[0])
        return TFRecordSource(target)
    if not p.exists():
        raise ValueError(
            f"--data {spec!r} does not exist: give 'digits', an image folder, a .npz file, or "
            "TFRecord files (a glob or a manifest)"
        )
    raise ValueError(f"--data {spec!r}: not an image folder, .npz file or TFRecord data")


def _split_arrays(source: Any, fraction: float, seed: int) -> tuple[Any, Any]:
    import numpy as np

    from tfdp.sources import ArraySource

    if not 0 < fraction < 1:
        raise ValueError(f"--eval-fraction must be in (0, 1), got {fraction}")
    x, y = source.numpy()
    order = np.random.default_rng(seed).permutation(len(y))
    cut = max(1, round(len(y) * fraction))
    return ArraySource((x[order[cut:]], y[order[cut:]])), ArraySource(
        (x[order[:cut]], y[order[:cut]])
    )


def build_data(cfg: TrainConfig) -> tuple[Any, Any, tuple[int, int, int], int, float]:
    """Train source, eval source, image shape, number of classes and pixel scale for ``cfg``."""
    from tfdp.sources import ArraySource

    if cfg.data == "digits":
        from tfdp.datasets import load_digits

        (x, y), (xt, yt) = load_digits()
        return ArraySource((x, y)), ArraySource((xt, yt)), (8, 8, 1), 10, 1 / 16
    train = _source(cfg.data)
    if cfg.eval_data:
        evals = _source(cfg.eval_data)
    elif isinstance(train, ArraySource):
        train, evals = _split_arrays(train, cfg.eval_fraction, cfg.seed)
    else:
        raise ValueError(
            f"--data {cfg.data!r} is not in memory: give --eval-data for the held-out set"
        )
    if getattr(evals, "streaming", False):
        raise ValueError(
            "--eval-data must be random access (image folder or .npz) for exact "
            "evaluation; convert TFRecord files with `tfdp data convert`"
        )
    spec = train.element_spec
    image_spec = spec[0]
    classes = getattr(train, "classes", None)
    num_classes = len(classes) if classes else None
    if num_classes is None:
        import numpy as np

        labels = getattr(train, "labels", None)
        if labels is None and isinstance(train, ArraySource):
            labels = train.numpy()[1]
        num_classes = int(np.max(labels)) + 1 if labels is not None else None
    if num_classes is None:
        raise ValueError(
            "cannot infer the number of classes of --data; use an image folder, "
            ".npz arrays, or TFRecord files written by `tfdp data convert`"
        )
    shape = tuple(image_spec.shape)
    if cfg.image_size:
        shape = (cfg.image_size, cfg.image_size, shape[-1] if shape else 3)
    elif None in shape:
        raise ValueError(f"--data {cfg.data!r} has images of varying size: give --image-size")
    return train, evals, shape, num_classes, 1 / 255


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


_RESUME_KEYS = (
    "data",
    "sampler",
    "repeats",
    "selected_round",
    "batch_size",
    "seed",
    "model",
    "augment",
    "image_size",
    "eval_data",
    "eval_fraction",
)


def _check_resume(run_dir: str, cfg: TrainConfig) -> None:
    path = os.path.join(run_dir, "config.json")
    if not os.path.isfile(path):
        raise ValueError(
            f"--resume: {run_dir!r} holds no run (no config.json); start it without --resume"
        )
    saved = json.loads(Path(path).read_text())
    diffs = [
        f"{k}: run has {saved.get(k)!r}, now {getattr(cfg, k)!r}"
        for k in _RESUME_KEYS
        if saved.get(k) != getattr(cfg, k)
    ]
    if diffs:
        raise ValueError(
            f"--resume: {run_dir!r} is a run of another configuration ("
            + "; ".join(diffs)
            + "); use the same options or a new --run-dir"
        )


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


def run_train(cfg: TrainConfig, *, on_step: Any = None) -> dict[str, Any]:
    """Run the training job described by ``cfg``; returns the final metrics.

    Builds the strategy (logical CPU replicas when there is no GPU), the data
    and its sampler, the model inside the scope, and trains with
    :class:`tfdp.train.Trainer`, evaluating exactly on the held-out split
    after every epoch. SIGINT / SIGTERM save a checkpoint and return.
    ``on_step(state)`` is called after every ``tf.function`` call.
    """
    run_dir = default_run_dir(cfg)
    # A group restarted by `tfdp launch --max-restarts` resumes by itself.
    restarted = int(os.environ.get("TFDP_RESTART", "0") or 0) > 0
    resume = cfg.resume or (restarted and os.path.isfile(os.path.join(run_dir, "config.json")))
    if resume:
        _check_resume(run_dir, cfg)
    elif os.path.isdir(os.path.join(run_dir, "checkpoints")) and any(
        Path(run_dir, "checkpoints").glob("ckpt-*.index")
    ):
        raise ValueError(
            f"--run-dir {run_dir!r} already holds a run with checkpoints: pass --resume to "
            "continue it, or choose another --run-dir (or --name)"
        )
    for name in ("epochs", "batch_size", "replicas", "steps_per_call"):
        if getattr(cfg, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(cfg, name)}")
    from tfdp.distribute import make_strategy, worker_info

    strategy = make_strategy(cfg.strategy, cpu_replicas=cfg.replicas)
    import keras
    import tensorflow as tf

    from tfdp.input import DistributedInput
    from tfdp.models import build_model
    from tfdp.train import Trainer

    if cfg.deterministic:
        tf.config.experimental.enable_op_determinism()
    info = worker_info(strategy)
    train_src, eval_src, shape, classes, scale = build_data(cfg)
    w = strategy.num_replicas_in_sync
    if cfg.batch_size % w:
        raise ValueError(f"--batch-size {cfg.batch_size} must be a multiple of the {w} replicas")
    sampler = "repeat_aug" if cfg.sampler == "repeat-aug" else "distributed"
    options = (
        {"num_repeats": cfg.repeats, "selected_round": cfg.selected_round}
        if sampler == "repeat_aug"
        else {}
    )
    train_in = DistributedInput(
        strategy,
        train_src,
        sampler=sampler,
        sampler_options=options,
        global_batch_size=cfg.batch_size,
        augment=build_augment(cfg, shape, scale, True),
        seed=cfg.seed,
        return_ids=bool(cfg.record_samples),
    )
    eval_in = DistributedInput(
        strategy,
        eval_src,
        sampler="eval",
        batch_size=max(1, cfg.batch_size // w),
        augment=build_augment(cfg, shape, scale, False),
    )

    def model_fn() -> Any:
        keras.utils.set_random_seed(cfg.seed)
        return build_model(cfg.model, shape, classes)

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
    if info.is_chief and not resume:
        Path(run_dir, "config.json").write_text(json.dumps(cfg.to_dict(), indent=2) + "\n")
        print(
            f"tfdp train: {w} replica(s) ({type(strategy).__name__}), "
            f"{train_src.num_examples} training / {eval_src.num_examples} held-out examples, "
            f"{train_in.steps_per_epoch} steps/epoch, run dir {run_dir}",
            flush=True,
        )
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    def stop(signum: int, frame: Any) -> None:
        print(
            f"tfdp train: {signal.Signals(signum).name}: saving a checkpoint and stopping",
            file=sys.stderr,
            flush=True,
        )
        trainer.request_stop(signal.Signals(signum).name)

    for s in previous:
        signal.signal(s, stop)
    t0 = time.perf_counter()
    try:
        trainer.fit(train_in, cfg.epochs, eval_input=eval_in, resume=resume, on_step=on_step)
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
                f"resume with: tfdp train --resume --run-dir {run_dir} ...",
                flush=True,
            )
        else:
            print(
                f"tfdp train: done in {result['seconds']:.1f}s: held-out accuracy "
                f"{result.get('val_sparse_categorical_accuracy', float('nan')):.4f}",
                flush=True,
            )
    return result


def run_evaluate(run_dir: str, replicas: int | None = None) -> dict[str, float]:
    """Evaluate the latest checkpoint of ``run_dir`` on its held-out split, exactly.

    The result is the same whatever the replica count.
    """
    path = os.path.join(run_dir, "config.json")
    if not os.path.isfile(path):
        raise ValueError(f"{run_dir!r} is not a tfdp run directory (no config.json)")
    raw = json.loads(Path(path).read_text())
    cfg = TrainConfig(**{k: v for k, v in raw.items() if k in TrainConfig.fields()})
    if replicas is not None:
        cfg.replicas = replicas
    from tfdp.distribute import make_strategy

    strategy = make_strategy(
        "auto" if cfg.strategy == "multi_worker" else cfg.strategy, cpu_replicas=cfg.replicas
    )
    import tensorflow as tf

    from tfdp.input import DistributedInput
    from tfdp.models import build_model
    from tfdp.train import evaluate

    _, eval_src, shape, classes, scale = build_data(cfg)
    w = strategy.num_replicas_in_sync
    with strategy.scope():
        model = build_model(cfg.model, shape, classes)
    ckpt_dir = os.path.join(run_dir, "checkpoints")
    latest = tf.train.latest_checkpoint(ckpt_dir)
    if latest is None:
        raise ValueError(f"{run_dir!r} has no checkpoint under {ckpt_dir!r}")
    tf.train.Checkpoint(model=model).restore(latest).expect_partial()
    eval_in = DistributedInput(
        strategy,
        eval_src,
        sampler="eval",
        batch_size=max(1, cfg.batch_size // w),
        augment=build_augment(cfg, shape, scale, False),
    )
    out = evaluate(
        strategy,
        model,
        eval_in,
        "sparse_categorical_crossentropy_from_logits",
        ["sparse_categorical_accuracy"],
    )
    out["replicas"] = w
    out["checkpoint"] = latest
    return out
