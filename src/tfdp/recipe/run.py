"""Running the training job: a :class:`TrainConfig` in, a trained run directory out.

This module owns :func:`run_train` (options checked, resume resolved, the
strategy, the run directory's lock, data, model and
:class:`tfdp.train.Trainer` wired together, ``model.keras`` saved at the
end; a finished run is evaluated by :mod:`tfdp.recipe.evaluation`). It
installs no signal handler and prints nothing:
what the run has to say goes to ``report(level, message)`` (``level`` is
``"info"`` or ``"warning"``), and a stop asked from outside -- a signal
handler, another thread -- goes through a :class:`StopRelay`. The
``tfdp train`` command (:mod:`tfdp.cli.train`) connects both to the
terminal and to SIGINT / SIGTERM.

Example:
    >>> stop = StopRelay()
    >>> stop("SIGTERM")                # before the run started: kept until attached
    >>> stop.attach(print)
    SIGTERM
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from tfdp.errors import ConfigError, DataError
from tfdp.recipe.augment_options import mixing, normalization
from tfdp.recipe.config import (
    TrainConfig,
    check_config,
    check_given,
    check_paths,
    default_run_dir,
    flag,
    step_lines_every,
)
from tfdp.recipe.data import build_augment, build_data, check_one_step, eval_input
from tfdp.recipe.ema import EmaEvaluator
from tfdp.recipe.lr_rule import learning_rate, lr_note
from tfdp.recipe.model import (
    EVAL_METRICS,
    build_optimizer,
    job_metrics,
    model_factory,
    save_model,
    training_loss,
    training_metrics,
    weights_fingerprint,
)
from tfdp.recipe.model_options import check_model_files, distilling
from tfdp.recipe.resume import (
    RUN_FORMAT,
    Resumed,
    now,
    refuse_existing_run,
    resolve_resume,
    write_run_config,
)
from tfdp.recipe.student import (
    ModelFiles,
    check_teacher,
    read_model_files,
    start_notes,
    teacher_record,
)

#: ``report(level, message)``: ``level`` is ``"info"`` or ``"warning"``.
Report = Callable[[str, str], None]
_log = logging.getLogger("tfdp.recipe")


def _log_report(level: str, message: str) -> None:
    _log.log(logging.WARNING if level == "warning" else logging.INFO, message)


class StopRelay:
    """Relays a stop asked from outside the training loop to the loop, once it runs.

    Calling it with a reason (``"SIGINT"``, ``"SIGTERM"``, ...) asks the run
    to save a checkpoint and return at the next step; a request made before
    the loop exists is delivered when it attaches. Thread-safe.

    Example:
        >>> stop = StopRelay()
        >>> stop.attach(lambda reason: print("stopping:", reason))
        >>> stop("SIGINT")
        stopping: SIGINT
    """

    def __init__(self, on_attach: Callable[[], None] | None = None) -> None:
        self._lock = threading.Lock()
        self._target: Callable[[str], None] | None = None
        self._pending: str | None = None
        self._on_attach = on_attach

    def __call__(self, reason: str) -> None:
        """Ask the run to stop, saying why (e.g. ``"SIGTERM"``)."""
        with self._lock:
            target = self._target
            if target is None:
                self._pending = reason
        if target is not None:
            target(reason)

    def attach(self, target: Callable[[str], None]) -> None:
        """Deliver requests to ``target`` from now on (and a pending one at once).

        ``on_attach`` (given to the constructor) runs first: the run is about to
        start its loop, everything that might have installed handlers of its own
        (TensorFlow's runtime) is set up.
        """
        if self._on_attach is not None:
            self._on_attach()
        with self._lock:
            self._target = target
            pending, self._pending = self._pending, None
        if pending is not None:
            target(pending)

    def detach(self) -> None:
        """Ignore requests from now on (the loop is over)."""
        with self._lock:
            self._target = lambda reason: None
            self._pending = None


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
        32 logical CPU replicas on 2 CPU core(s): ...
    """
    if replicas <= 2 * cores:
        return None
    return (
        f"{replicas} logical CPU replicas on {cores} CPU core(s): every "
        f"step runs all {replicas} replicas' work on those cores (about {replicas // cores}x "
        "slower per step than one replica per core), and a stop waits for the step in "
        f"progress. Use --replicas {cores} or fewer unless you mean to test {replicas}-way "
        "data parallelism"
    )


def _global_batch(cfg: TrainConfig, replicas: int) -> TrainConfig:
    """``cfg`` with ``batch_size`` the global batch of ``batch_size_per_replica``, if set."""
    per = cfg.batch_size_per_replica
    if per is None:
        return cfg
    default = TrainConfig.fields()["batch_size"].default
    if cfg.batch_size not in (default, per * replicas):
        raise ConfigError(
            f"{cfg.batch_size} and --batch-size-per-replica {per} disagree with "
            f"{replicas} replicas ({per} x {replicas} = {per * replicas}): give one of them",
            argument="batch_size",
        )
    return dataclasses.replace(cfg, batch_size=per * replicas)


def run_train(
    cfg: TrainConfig,
    *,
    given: set[str] | frozenset[str] | None = None,
    on_step: Any = None,
    stop: StopRelay | None = None,
    report: Report | None = None,
) -> dict[str, Any]:
    """Run the training job described by ``cfg``; returns the final metrics and state.

    Checks the options (:func:`check_config`; :func:`check_given`: an option
    given that the run's optimizer lacks) and the data paths before
    TensorFlow loads; with ``resume`` (or a restart by ``tfdp launch
    --max-restarts``) takes every option not in ``given`` from the run's
    ``config.json`` (:func:`resolve_resume`; ``given=None``: all of ``cfg``).
    Builds the strategy (logical CPU replicas when there is no GPU), takes
    the run directory's lock (the chief), builds the data and its sampler and
    the model inside the scope, and trains with :class:`tfdp.train.Trainer`,
    evaluating exactly on the held-out split after every epoch; at the end
    the chief saves ``model.keras`` in the run directory.

    Args:
        cfg: The job's options.
        given: The options given explicitly (they win over ``config.json`` on resume).
        on_step: Called with the trainer's state after every ``tf.function`` call.
        stop: Requests to stop (save a checkpoint, return) from outside.
        report: Where the run's messages go (default: the ``tfdp.recipe`` logger).

    Returns:
        ``epoch``, ``step`` and ``global_step`` where the run ended,
        ``stopped_early`` / ``stop_reason``, ``trained`` (an epoch ended in
        this call), ``seconds``, ``weights_sha256``, the last ``val_*``
        metrics, ``run_dir``, ``epochs``, ``model_path`` (None when the
        run stopped early or this worker is not the chief), and this
        worker's ``worker_index`` / ``num_workers`` / ``is_chief``.

    Raises:
        tfdp.errors.TfdpError: bad options, data or run directory, naming them.
    """
    say = report or _log_report
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
        refuse_existing_run(run_dir)
    check_given(cfg, given)  # the run's optimizer is known now (a resume's may be its own)
    check_paths(cfg)
    check_model_files(cfg, fresh=resumed is None)
    files = read_model_files(cfg, fresh=resumed is None)  # before TensorFlow loads (torch's .pth)
    from tfdp.distribute import make_strategy, worker_info

    strategy = make_strategy(cfg.strategy, cpu_replicas=cfg.replicas)
    if resumed is None:
        cfg = _global_batch(cfg, strategy.num_replicas_in_sync)
    info = worker_info(strategy)
    from tfdp.recipe.rundir import RunLock

    lock = RunLock(run_dir) if info.is_chief else None
    if lock is not None:
        lock.acquire()
    try:
        if lock is not None and not resume:
            refuse_existing_run(run_dir)  # again, now that no other run can write here
        if lock is not None:
            from tfdp.checkpoint import remove_interrupted_saves

            remove_interrupted_saves(os.path.join(run_dir, "checkpoints"))
        return _train(cfg, run_dir, strategy, info, resumed, files, on_step, stop, say)
    finally:
        if lock is not None:
            lock.release()


def _train(
    cfg: TrainConfig,
    run_dir: str,
    strategy: Any,
    info: Any,
    resumed: Resumed | None,
    files: ModelFiles,
    on_step: Any,
    stop: StopRelay | None,
    say: Report,
) -> dict[str, Any]:
    import keras
    import tensorflow as tf

    from tfdp.input import DistributedInput

    w = strategy.num_replicas_in_sync
    if info.is_chief and isinstance(strategy, tf.distribute.MirroredStrategy):
        devices = strategy.extended.worker_devices
        if all("CPU" in d.upper() for d in devices):
            warning = replicas_warning(w, _cores())
            if warning:
                say("warning", warning)
    if cfg.deterministic:
        tf.config.experimental.enable_op_determinism()
    data = build_data(cfg)
    if info.is_chief:
        for note in data.notes:
            say("warning" if note.startswith("warning") else "info", note)
    if cfg.batch_size % w:
        counts = ", ".join(str(d) for d in range(1, cfg.batch_size + 1) if cfg.batch_size % d == 0)
        raise ConfigError(
            f"{cfg.batch_size} (the global batch) must be a multiple of the {w} "
            f"replicas: use a replica or worker count that divides it ({counts})",
            argument="batch_size",
        )
    sampler = "repeat_aug" if cfg.sampler == "repeat-aug" else "distributed"
    options = (
        {"num_repeats": cfg.repeats, "selected_round": cfg.selected_round}
        if sampler == "repeat_aug"
        else {}
    )
    check_one_step(cfg, data, w)
    train_in = DistributedInput(
        strategy,
        data.train,
        sampler=sampler,
        sampler_options=options,
        global_batch_size=cfg.batch_size,
        augment=build_augment(cfg, data.shape, data.train_scale, True, data.num_classes),
        seed=cfg.seed,
        return_ids=bool(cfg.record_samples),
    )
    eval_in = eval_input(cfg, strategy, data)
    if info.is_chief:
        os.makedirs(run_dir, exist_ok=True)
    rate = learning_rate(cfg)  # --lr under --lr-rule: the schedule's peak
    trainer = _trainer(cfg, strategy, data, run_dir, resumed, train_in.steps_per_epoch, files)
    teacher = teacher_record(cfg, trainer.model, weights_fingerprint)
    if resumed is not None:
        check_teacher(teacher, resumed.history)  # the teacher is in no checkpoint: its hash
        trainer.restore(train_in)  # before config.json records the resume: it may be refused
        if cfg.schedule == "constant":  # a constant rate is an optimizer variable: restored too
            optimizer = trainer.optimizer
            if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
                optimizer = optimizer.inner_optimizer
            optimizer.learning_rate = rate
        if info.is_chief:
            _record_resume(run_dir, cfg, resumed, trainer.state.global_step, w, say)
    elif info.is_chief:
        start = {"event": "start", "time": now(), "world_size": w, "format": RUN_FORMAT}
        start["steps_per_epoch"] = train_in.steps_per_epoch  # the learning-rate schedule's
        start["learning_rate"] = rate
        start.update({"teacher": teacher} if teacher else {})
        write_run_config(run_dir, cfg, [start])
    normalized = normalization(cfg, data.shape[-1])
    if info.is_chief and resumed is None and normalized is not None:
        mean, std = (" ".join(f"{v:g}" for v in values) for values in normalized)
        say(
            "info",
            f"inputs normalised, training and held-out: (x - mean) / std with x in [0, 1], "
            f"--mean {mean} --std {std} (model.keras expects its inputs so)",
        )
    if info.is_chief and cfg.color_jitter and cfg.aa is not None:
        say("info", f"--color-jitter {cfg.color_jitter:g} is not applied with --aa (timm's rule)")
    if info.is_chief and resumed is None:
        per = cfg.batch_size // w
        say(
            "info",
            f"{w} replica(s) ({type(strategy).__name__}), "
            f"{data.train.num_examples} training / {data.eval.num_examples} held-out examples "
            f"({data.held_out}), batch {cfg.batch_size} global = {per} per replica x {w}, "
            f"{train_in.steps_per_epoch} steps/epoch, {_lr_words(cfg)}, run dir {run_dir}"
            + _compression_note(cfg),
        )
        for note in start_notes(cfg, files, teacher):
            say("info", note)
    if stop is not None:
        stop.attach(trainer.request_stop)
    from tfdp.recipe.best import BestModel

    best = BestModel(run_dir, EVAL_METRICS[cfg.eval_metric], is_chief=info.is_chief)
    t0 = time.perf_counter()
    try:
        trainer.fit(
            train_in,
            cfg.epochs,
            eval_input=eval_in,
            resume=False,
            on_step=on_step,
            callbacks=[best],
        )
    except tf.errors.FailedPreconditionError as err:
        from tfdp.sources import TFRecordSource

        if isinstance(data.train, TFRecordSource) and "expected to contain" in err.message:
            problems = data.train.count_problems()  # name the shard whose count is wrong
            if problems:
                raise DataError("" + "; ".join(problems), argument="data") from None
        raise
    finally:
        if stop is not None:
            stop.detach()  # the loop is over: later requests do nothing
    state = trainer.state
    result: dict[str, Any] = {
        "epoch": state.epoch,
        "step": state.step,
        "global_step": state.global_step,
        "epochs": cfg.epochs,
        "stopped_early": state.stopped_early,
        "stop_reason": state.stop_reason,
        "trained": bool(state.history),
        "seconds": time.perf_counter() - t0,
        "weights_sha256": weights_fingerprint(trainer.model),
        "run_dir": run_dir,
        "model_path": None,
        "worker_index": info.worker_index,
        "num_workers": info.num_workers,
        "is_chief": info.is_chief,
    }
    if state.history:
        result.update({k: v for k, v in state.history[-1].items() if k.startswith("val_")})
    from tfdp.sources import ImageFolderSource

    if info.is_chief and isinstance(data.eval, ImageFolderSource) and data.eval.skipped_files():
        say("info", f"held-out data: {data.eval.report()}")  # --on-bad-file skip
    if info.is_chief and not state.stopped_early:
        result["model_path"] = save_model(trainer.model, run_dir)
        if cfg.model_ema:
            from tfdp.recipe.ema import ema_weights

            with ema_weights(trainer.model, trainer.optimizer):
                result["ema_model_path"] = save_model(trainer.model, run_dir, EMA_MODEL_FILE)
    return result


#: The EMA weights' final model (``--model-ema``), beside ``model.keras``.
EMA_MODEL_FILE = "model_ema.keras"


def _trainer(
    cfg: TrainConfig,
    strategy: Any,
    data: Any,
    run_dir: str,
    resumed: Resumed | None,
    batches_per_epoch: int,
    files: ModelFiles | None = None,
) -> Any:
    """The job's Trainer: its model, optimizer, loss, metrics, evaluation (EMA) and checkpoints.

    The learning-rate schedule counts the optimizer steps of the run's first
    epoch (``config.json``'s start entry), so that a resume at another world
    size keeps it.
    """
    from tfdp.train import Evaluator, Trainer
    from tfdp.train.assemble import default_parts

    if cfg.eval_metric == "top5" and data.num_classes <= 5:
        raise ConfigError(
            f"top5 needs more than 5 classes; the data has {data.num_classes}: use top1 or loss",
            argument="eval_metric",
        )
    batches = _first(resumed, "steps_per_epoch", batches_per_epoch)
    steps = -(-batches // cfg.accum_steps)
    built: dict[str, Any] = {}
    make_model = model_factory(cfg, data.shape, data.num_classes, files)

    def model() -> Any:
        built["model"] = make_model()
        return built["model"]

    with strategy.scope():  # sync-on-read accumulators: a worker's read sums every replica's
        metrics = training_metrics(cfg, data.num_classes)
    options = trainer_options(cfg)
    scaled = dataclasses.replace(cfg, lr=learning_rate(cfg))  # the optimizer's --lr: the rule's
    parts = default_parts(
        strategy,
        model,
        lambda: build_optimizer(scaled, steps, built.get("model")),
        training_loss(cfg, data.num_classes),
        metrics=metrics,
        accumulation_steps=cfg.accum_steps,
        clip_global_norm=cfg.clip_grad,
        mixed_precision=options["mixed_precision"],
        gradient_compression=options["gradient_compression"],
        jit_compile=options["jit_compile"],
        run_dir=run_dir,
        max_to_keep=cfg.keep_checkpoints,
        progress=cfg.progress and sys.stdout.isatty(),
        record_samples=options["record_samples"],
        # A line every N steps off a terminal (the Trainer decides what a line holds).
        log_every=step_lines_every(cfg, sys.stdout),
    )
    step = parts.step
    if cfg.smoothing or mixing(cfg) or distilling(cfg):  # held out: plain cross-entropy, labels
        parts.evaluator = Evaluator(
            strategy,
            step.model,
            "sparse_categorical_crossentropy_from_logits",
            job_metrics(data.num_classes),
        )
    if cfg.model_ema:
        parts.evaluator = EmaEvaluator(parts.evaluator, step.model, step.optimizer)
    return Trainer.from_parts(
        parts,
        steps_per_call=options["steps_per_call"],
        accumulation_steps=cfg.accum_steps,
        checkpoint_every=options["checkpoint_every"],
    )


def _record_resume(
    run_dir: str,
    cfg: TrainConfig,
    resumed: Resumed,
    global_step: int,
    world_size: int,
    say: Report,
) -> None:
    """Add the resume to ``config.json``'s history (with what changed), and say so."""
    entry: dict[str, Any] = {
        "event": "resume",
        "time": now(),
        "format": RUN_FORMAT,
        "global_step": global_step,
        "world_size": world_size,
        "learning_rate": learning_rate(cfg),
    }
    if resumed.changed:
        entry["changed"] = {k: {"from": a, "to": b} for k, (a, b) in resumed.changed.items()}
        changes = ", ".join(f"{flag(k)} {b!r} (was {a!r})" for k, (a, b) in resumed.changed.items())
        rate = {"lr", "lr_rule", "lr_base_size", "lr_base_scale"} & set(resumed.changed)
        changes += f" ({_lr_words(cfg)})" if rate else ""
        say("info", f"resuming with {changes}; recorded in config.json")
    if resumed.rebuilt:
        entry["note"] = "config.json was missing: rebuilt from the options given"
        say(
            "warning",
            f"{run_dir}/config.json was missing: rebuilt from the options given (the "
            "checkpoint's data configuration was checked on restore)",
        )
    write_run_config(run_dir, cfg, [*resumed.history, entry])


def trainer_options(cfg: TrainConfig) -> dict[str, Any]:
    """The :class:`tfdp.train.Trainer` options the job's options set, named as the Trainer's.

    Example:
        >>> trainer_options(TrainConfig(gradient_compression="fp16", steps_per_call=2))
        ... # doctest: +NORMALIZE_WHITESPACE
        {'steps_per_call': 2, 'mixed_precision': None, 'gradient_compression': 'fp16',
         'jit_compile': False, 'checkpoint_every': 50, 'record_samples': None}
    """
    compression = None if cfg.gradient_compression == "none" else cfg.gradient_compression
    return {
        "steps_per_call": cfg.steps_per_call,
        "mixed_precision": cfg.mixed_precision,
        "gradient_compression": compression,  # none: the exact all-reduce
        "jit_compile": cfg.jit_compile,
        "checkpoint_every": cfg.checkpoint_every,
        "record_samples": cfg.record_samples,
    }


def _lr_words(cfg: TrainConfig) -> str:
    """The start line's words for the learning rate: the rate, and the rule that made it.

    Example:
        >>> _lr_words(TrainConfig(lr=5e-4, lr_rule="deit", batch_size=1024))
        "lr 0.001 (--lr 0.0005 x 1024 / 512: DeiT's rule)"
        >>> _lr_words(TrainConfig())
        'lr 0.003'
    """
    note = lr_note(cfg)
    return f"lr {learning_rate(cfg):g}" + (f" ({note})" if note else "")


def _compression_note(cfg: TrainConfig) -> str:
    """The start line's words for ``--gradient-compression`` (nothing when off: exact).

    Example:
        >>> _compression_note(TrainConfig(gradient_compression="bf16"))
        ', gradients rounded to bf16 before the all-reduce'
        >>> _compression_note(TrainConfig())
        ''
    """
    if cfg.gradient_compression == "none":
        return ""
    return f", gradients rounded to {cfg.gradient_compression} before the all-reduce"


def _first(resumed: Resumed | None, key: str, default: Any) -> Any:
    """``key`` of the run's start entry in ``config.json``'s history, else ``default``."""
    history = resumed.history if resumed is not None else []
    start = history[0] if history and isinstance(history[0], dict) else {}
    value = start.get(key)
    return value if isinstance(value, int) and value > 0 else default
