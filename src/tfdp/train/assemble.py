"""The parts a :class:`tfdp.train.Trainer` builds for itself from a model, an optimizer and a loss.

This module owns what ``Trainer(strategy, model, optimizer, loss, ...)`` does
before its loop can run: the options checked (:class:`tfdp.errors.ConfigError`
naming the argument); the model and the optimizer built inside the strategy's
scope, under the mixed-precision policy (``mixed_float16`` wraps the optimizer
in a ``LossScaleOptimizer``), checked to live in that scope, to have
variables of a type tfdp trains (:mod:`tfdp.train.dtypes`) and not to clip
each replica's partial gradient; the loss and the epoch's loss metric in the
model's loss type; and the parts of :mod:`tfdp.train.parts`:
the step (:class:`~tfdp.train.step.TrainStep`), the exact evaluation
(:class:`~tfdp.train.Evaluator`), the logs (:class:`~tfdp.train.logs.TrainLogs`)
and, with a run directory, the checkpoints (a
:class:`~tfdp.checkpoint.CheckpointManager` of the model, the optimizer, the
RNG states and the epoch's training-metric accumulators).

Example:
    >>> import keras
    >>> parts = default_parts(
    ...     None,
    ...     lambda: keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)]),
    ...     lambda: keras.optimizers.SGD(0.1),
    ...     "sparse_categorical_crossentropy_from_logits",
    ...     metrics=["sparse_categorical_accuracy"],
    ... )
    >>> type(parts.step).__name__, [m.name for m in parts.step.metrics], parts.checkpoints
    ('TrainStep', ['sparse_categorical_accuracy'], None)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import keras
import tensorflow as tf

from tfdp._compat.keras import attach_optimizer, backing_variable
from tfdp.distribute import worker_info
from tfdp.errors import ConfigError
from tfdp.train.compression import check_compression
from tfdp.train.dtypes import check_trainable, loss_dtype
from tfdp.train.evaluate import Evaluator, per_example_loss
from tfdp.train.guard import check_policy
from tfdp.train.logs import TrainLogs
from tfdp.train.parts import StepRunner, TrainerParts
from tfdp.train.step import TrainStep
from tfdp.train.weighting import check_loss_weighting

#: The mixed-precision policies a Trainer takes (None or ``"float32"``: none).
MIXED_PRECISION = (None, "float32", "mixed_float16", "mixed_bfloat16")

Factory = Callable[[], Any]


def _build(obj: Any) -> Any:
    return (
        obj()
        if callable(obj) and not isinstance(obj, (keras.Model, keras.optimizers.Optimizer))
        else obj
    )


@contextmanager
def _dtype_policy(name: str | None) -> Iterator[None]:
    """Keras's global dtype policy set to ``name`` inside, the previous one restored after."""
    if name is None:
        yield
        return
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(name)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


def _check_count(name: str, value: Any, low: int, none_ok: bool = False, note: str = "") -> None:
    """An integer ``>= low`` (or None when ``none_ok``), else a ConfigError naming ``name``."""
    if value is None and none_ok:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        also = " or None" if none_ok else ""
        raise ConfigError(f"must be an integer >= {low}{also}{note}, got {value!r}", argument=name)


def check_loop_options(steps_per_call: Any, accumulation_steps: Any, checkpoint_every: Any) -> None:
    """The outer loop's own options, checked (the parts check theirs).

    Raises:
        tfdp.errors.ConfigError: naming the option.

    Example:
        >>> check_loop_options(8, 1, None)
        >>> check_loop_options(0, 1, None)
        Traceback (most recent call last):
        ...
        tfdp.errors.ConfigError: steps_per_call: must be an integer >= 1, got 0
    """
    _check_count("steps_per_call", steps_per_call, 1)
    _check_count("accumulation_steps", accumulation_steps, 1)
    _check_count("checkpoint_every", checkpoint_every, 1, none_ok=True)


def _check_options(loss: Any, log_every: Any, clip_global_norm: Any, mixed_precision: Any) -> None:
    _check_count("log_every", log_every, 0, note=" (0: no step lines)")
    if clip_global_norm is not None and not clip_global_norm > 0:
        raise ConfigError(
            f"must be > 0 or None, got {clip_global_norm!r}",
            argument="clip_global_norm",
        )
    if mixed_precision not in MIXED_PRECISION:
        raise ConfigError(
            f"must be None, 'mixed_float16' or 'mixed_bfloat16', got {mixed_precision!r}",
            argument="mixed_precision",
        )
    if isinstance(loss, keras.losses.Loss) and loss.reduction == "sum":
        raise ConfigError(
            f"{loss.name!r} has reduction='sum': tfdp trains on the mean over each "
            "step's rows; build it with the default reduction or reduction='none'",
            argument="loss",
        )


def _check_model_in_scope(strategy: tf.distribute.Strategy, model: keras.Model) -> None:
    if not model.built or not model.variables:
        raise ConfigError(
            "has no variables yet: build it (keras.Input or model.build) inside "
            "strategy.scope(), or pass a factory",
            argument="model",
        )
    for v in model.variables:
        if not strategy.extended.variable_created_in_scope(backing_variable(v)):
            raise ConfigError(
                f"variable {v.path if hasattr(v, 'path') else v.name} was created "
                "outside strategy.scope(): build the model inside `with strategy.scope():`, "
                "or pass a factory `lambda: build_model()` and tfdp builds it there",
                argument="model",
            )


def _model_and_optimizer(
    strategy: tf.distribute.Strategy,
    model: keras.Model | Factory,
    optimizer: keras.optimizers.Optimizer | Factory,
    mixed_precision: str | None,
) -> tuple[keras.Model, keras.optimizers.Optimizer]:
    """Both built in the scope (a factory called there), checked, the optimizer built."""
    built_model = _build(model)
    built = _build(optimizer)
    if not isinstance(built_model, keras.Model):
        raise ConfigError(
            f"must be a keras.Model or a factory of one, got {built_model!r}",
            argument="model",
        )
    if not isinstance(built, keras.optimizers.Optimizer):
        raise ConfigError(
            f"must be a Keras optimizer or a factory, got {built!r}",
            argument="optimizer",
        )
    for attr in ("clipnorm", "global_clipnorm", "clipvalue"):
        if getattr(built, attr, None):
            raise ConfigError(
                f"its {attr} clips each replica's partial gradient before the "
                "all-reduce, which is wrong under a strategy; build the optimizer without "
                "it and pass Trainer(clip_global_norm=...) instead",
                argument="optimizer",
            )
    if mixed_precision == "mixed_float16" and not isinstance(
        built, keras.optimizers.LossScaleOptimizer
    ):
        built = keras.optimizers.LossScaleOptimizer(built)
    _check_model_in_scope(strategy, built_model)
    check_trainable(built_model)
    built.build(built_model.trainable_variables)
    attach_optimizer(built_model, built)  # what Keras callbacks read
    return built_model, built


def default_parts(
    strategy: tf.distribute.Strategy | None,
    model: keras.Model | Factory,
    optimizer: keras.optimizers.Optimizer | Factory,
    loss: Any,
    *,
    metrics: Sequence[Any] = (),
    accumulation_steps: int = 1,
    clip_global_norm: float | None = None,
    mixed_precision: str | None = None,
    jit_compile: bool = False,
    run_dir: str | os.PathLike[str] | None = None,
    max_to_keep: int = 3,
    progress: bool = True,
    verbose: int = 1,
    log_every: int = 0,
    record_samples: str | os.PathLike[str] | None = None,
    on_nonfinite: str = "stop",
    gradient_compression: str | None = None,
    loss_weighting: str = "rows",
) -> TrainerParts:
    """The parts tfdp builds for a model, an optimizer and a loss (see :class:`tfdp.train.Trainer`).

    The arguments are :class:`~tfdp.train.Trainer`'s, which documents them.
    The checkpoints (with ``run_dir``) are ``run_dir/checkpoints``; nothing is
    written until the first save.

    Raises:
        tfdp.errors.ConfigError: naming the argument: a model built outside the
            scope or with variables of a type tfdp does not train (float16,
            complex), a loss with a sum reduction, optimizer-side clipping, a
            bad number or policy.
    """
    strategy = strategy if strategy is not None else tf.distribute.get_strategy()
    _check_options(loss, log_every, clip_global_norm, mixed_precision)
    on_nonfinite = check_policy(on_nonfinite)
    loss_weighting = check_loss_weighting(loss_weighting)
    gradient_compression = check_compression(gradient_compression, mixed_precision)
    info = worker_info(strategy)
    policy = mixed_precision if mixed_precision != "float32" else None
    with _dtype_policy(policy), strategy.scope():
        built_model, built_optimizer = _model_and_optimizer(
            strategy, model, optimizer, mixed_precision
        )
        dtype = loss_dtype(built_model)
        per_example = per_example_loss(loss, dtype)
        train_loss = keras.metrics.Mean(name="loss", dtype=dtype.name)
        train_metrics = [keras.metrics.get(m) if isinstance(m, str) else m for m in metrics]
        evaluator = Evaluator(strategy, built_model, per_example, train_metrics)
    step = TrainStep(
        strategy,
        built_model,
        built_optimizer,
        per_example,
        train_loss,
        train_metrics,
        clip_global_norm=clip_global_norm,
        on_nonfinite=on_nonfinite,
        jit_compile=jit_compile,
        multi_worker=info.num_workers > 1,
        gradient_compression=gradient_compression,
        loss_weighting=loss_weighting,
    )
    logs = TrainLogs(
        run_dir,
        is_chief=info.is_chief,
        verbose=verbose,
        progress=progress,
        log_every=log_every,
        record_samples=record_samples,
        accumulation_steps=accumulation_steps,
    )
    checkpoints = None
    if run_dir is not None:
        from tfdp.checkpoint import CheckpointManager, keras_trackables

        checkpoints = CheckpointManager(
            os.path.join(os.fspath(run_dir), "checkpoints"),
            strategy=strategy,
            max_to_keep=max_to_keep,
            **keras_trackables(built_model, built_optimizer),
            # The epoch's training-metric accumulators: a resumed epoch's line covers it all.
            metric_states=epoch_metric_states(step),
        )
    return TrainerParts(step=step, evaluator=evaluator, logs=logs, checkpoints=checkpoints)


def epoch_metric_states(step: StepRunner) -> list[Any]:
    """The epoch's training-metric accumulators of ``step`` (sync-on-read), as checkpointed.

    Example:
        >>> import keras
        >>> parts = default_parts(None, lambda: keras.Sequential(
        ...     [keras.Input((2,)), keras.layers.Dense(2)]), keras.optimizers.SGD, "mse",
        ...     metrics=["mae"])
        >>> [v.name.split(":")[0] for v in epoch_metric_states(parts.step)]  # loss, then mae
        ['loss/total', 'loss/count', 'mean_absolute_error/total', 'mean_absolute_error/count']
    """
    return [backing_variable(v) for m in (step.train_loss, *step.metrics) for v in m.variables]
