"""The training loop: :class:`Trainer` (epochs, checkpoints, stop agreement, resume, callbacks).

This module owns the outer loop: loop epoch ``e`` is exactly sampler epoch
``e``; an epoch of ``S`` batches makes ``ceil(S / accumulation_steps)``
optimizer steps run ``steps_per_call`` at a time; checkpoints every
``checkpoint_every`` steps and at every epoch end, with exact mid-epoch
resume; a stop (a signal, ``max_steps``, a callback's ``model.stop_training``)
agreed by all workers at one step; exact validation after every epoch, in the
``logs`` before any Keras callback sees them; the returned
``keras.callbacks.History``. The replica step and its compiled functions are
:mod:`tfdp.train.step`'s, the console / metrics.jsonl / TensorBoard / sample
ids :mod:`tfdp.train.logs`', exact evaluation :mod:`tfdp.train.evaluate`'s.

Example:
    >>> import keras, numpy as np, tensorflow as tf
    >>> from tfdp import DistributedInput, ArraySource
    >>> strategy = tf.distribute.get_strategy()
    >>> src = ArraySource((np.random.rand(64, 3).astype("float32"), np.arange(64) % 2))
    >>> trainer = Trainer(strategy, lambda: keras.Sequential([keras.Input((3,)),
    ...     keras.layers.Dense(2)]), lambda: keras.optimizers.SGD(0.1),
    ...     "sparse_categorical_crossentropy_from_logits", progress=False, verbose=0)
    >>> hist = trainer.fit(DistributedInput(strategy, src, batch_size=16), epochs=2)
    >>> hist.epoch, sorted(hist.history)
    ([0, 1], ['loss'])
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import keras
import tensorflow as tf

from tfdp._compat import attach_optimizer, backing_variable
from tfdp.distribute import worker_info
from tfdp.errors import ConfigError
from tfdp.input import DistributedInput
from tfdp.sources.base import SkipReportingSource
from tfdp.train.compression import check_compression
from tfdp.train.evaluate import Evaluator, per_example_loss
from tfdp.train.guard import NonFiniteError, check_policy
from tfdp.train.logs import TrainLogs
from tfdp.train.peer_loss import PeerLossWatch, peer_lost
from tfdp.train.step import TrainStep

__all__ = ["TrainState", "Trainer"]

log = logging.getLogger("tfdp")
Factory = Callable[[], Any]


@dataclass
class TrainState:
    """Where training stands: epoch, optimizer step within it, global optimizer step.

    ``last_loss`` is the loss of the latest optimizer step and ``step_losses``
    those of every step of the latest compiled call (each the mean over the
    rows of its step, regularisation included, as every replica computes it).
    ``history`` holds every epoch record (as in ``metrics.jsonl``);
    ``stop_reason`` says why :meth:`Trainer.fit` stopped early: ``"request"``
    (or the reason given to :meth:`Trainer.request_stop`), ``"peer"`` (another
    worker's), ``"callback"`` (a callback set ``model.stop_training``) or
    ``"nonfinite"``.

    Example:
        >>> TrainState(epoch=1, step=3, global_step=13).epoch
        1
    """

    epoch: int = 0
    step: int = 0
    global_step: int = 0
    stopped_early: bool = False
    last_loss: float = float("nan")
    step_losses: list[float] = field(default_factory=list)
    skipped_steps: int = 0
    stop_reason: str | None = None
    history: list[dict[str, Any]] = field(default_factory=list)


def _build(obj: Any) -> Any:
    return (
        obj()
        if callable(obj) and not isinstance(obj, (keras.Model, keras.optimizers.Optimizer))
        else obj
    )


def _has_batch_hooks(callback: keras.callbacks.Callback) -> bool:
    """Whether a Keras callback has its own training batch hook (not ``Callback``'s no-op).

    ``on_batch_begin`` / ``on_batch_end`` count: Keras's defaults of the
    ``on_train_batch_*`` hooks call them. A hook set on the instance counts too.
    """
    for name in ("on_train_batch_begin", "on_train_batch_end", "on_batch_begin", "on_batch_end"):
        method = getattr(callback, name, None)
        if getattr(method, "__func__", None) is not getattr(keras.callbacks.Callback, name):
            return True
    return False


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


class Trainer:
    """Synchronous data-parallel training of any Keras 3 model under any tf.distribute strategy.

    Args:
        strategy: The strategy (None: the current one).
        model: A Keras model built inside ``strategy.scope()``, or a factory
            ``() -> model`` (called inside the scope).
        optimizer: A Keras optimizer or a factory. Its own ``clipnorm`` /
            ``global_clipnorm`` would clip per-replica partial gradients before
            the all-reduce, so they are refused: use ``clip_global_norm``.
        loss: A Keras loss (as ``model.compile`` takes it: a mean-reduced one,
            e.g. ``SparseCategoricalCrossentropy(from_logits=True)``, is used
            per example, ``reduction="none"``; a ``"sum"`` reduction is
            refused), a function ``(y_true, y_pred) -> [B]``, a Keras loss
            name, or ``"sparse_categorical_crossentropy_from_logits"`` (also
            ``categorical_...`` and ``binary_...``). A step's loss
            (and gradient) is ``sum(sample_weight * loss) / rows`` over the
            rows the step holds on all replicas and micro-batches -- a last,
            partial batch is its own true mean -- plus the model's
            regularisation losses once; rows of sample weight 0 (evaluation
            padding, skipped files) add 0 to the sum and count in ``rows``,
            as with ``tf.nn.compute_average_loss`` or a PyTorch
            ``(loss * w).mean()``. A static per-replica batch dimension
            (``drop_remainder=True``) makes ``rows`` a constant; a dynamic one
            costs one scalar all-reduce per step.
        metrics: Keras metrics (instances or names); cloned for evaluation.
        steps_per_call: Optimizer steps per ``tf.function`` call (a
            ``tf.range`` loop, as Orbit does), to amortise Python overhead.
        accumulation_steps: Micro-batches whose gradients are summed per
            optimizer step (the effective batch is ``k`` global batches). An
            epoch of ``S`` batches makes ``ceil(S / k)`` optimizer steps; the
            last holds the ``S mod k`` leftover batches (when non-zero) and,
            like every step, is the mean over the rows it holds.
        clip_global_norm: Clip the all-reduced gradient to this global norm.
        mixed_precision: ``None``, ``"mixed_float16"`` (with dynamic loss
            scaling, skip decisions synchronised across replicas) or
            ``"mixed_bfloat16"``. Keras's global dtype policy is set to it
            while the model factory runs, and restored afterwards.
        jit_compile: Compile the replica step with XLA.
        run_dir: Where checkpoints, metrics.jsonl and TensorBoard logs go
            (chief only writes logs; every worker joins checkpoint saves).
        checkpoint_every: Save every N optimizer steps (and at every epoch end).
        max_to_keep: Checkpoints kept.
        progress: A Keras progress bar on the chief's stderr, when stderr is
            a terminal, showing the running mean of the epoch's step losses
            (already reduced over replicas and workers: it reads no metric,
            so it is safe under MultiWorkerMirroredStrategy).
        verbose: 1 prints a line per epoch on the chief; 0 is quiet.
        log_every: Every N optimizer steps (calls are cut to land on them):
            a plain line on stdout -- epoch, step, loss (mean since the
            previous line), learning rate, samples/s -- when no bar is shown
            (stderr not a terminal, or ``progress=False``), and ``batch_*``
            TensorBoard scalars. 0 (default): neither.
        record_samples: Append, per step and global rank, the example ids
            each replica consumed, as JSON lines, to this file (the input must
            have ``return_ids=True``; the ids are all-gathered, so the chief
            writes every rank's).
        on_nonfinite: A step whose loss or gradient is NaN or infinite (on
            any replica: the check is of the all-reduced loss and gradient,
            which every replica and worker holds alike, so all decide alike) is
            never applied. ``"stop"`` (default): :meth:`fit`
            raises :class:`tfdp.train.NonFiniteError` naming the step, without
            saving (the latest checkpoint stays the last good one).
            ``"skip"``: the step is skipped -- its data consumed, no variable
            or optimizer state (nor the iteration count a schedule reads)
            changed -- with a warning and ``skipped_steps`` in the epoch's
            record. ``"ignore"``: no check (saves still refuse non-finite
            variables). Under ``mixed_float16`` a non-finite *gradient* is the
            loss scaler's business (skipped and rescaled); the loss is checked.
            A gradient whose all-reduced sum overflows although every
            replica's part is finite is flagged too (the sum is what is checked).
        gradient_compression: ``None`` (default: the exact float32
            all-reduce), ``"fp16"`` or ``"bf16"``: every replica's gradient
            is rounded to that type before the all-reduce, which sums in it,
            and cast back after (the loss is reduced apart, in float32). Less
            traffic between machines, not exact: float16 flushes entries below
            about 6e-8 to 0 and overflows above 65504 (a non-finite step, see
            ``on_nonfinite``); bfloat16 keeps 8 significant bits. Refused with
            ``mixed_float16`` (see :mod:`tfdp.train.compression`).

    Raises:
        ValueError: for a model built outside the scope, a loss with a sum
            reduction, optimizer-side clipping, or bad numbers.

    Example:
        >>> import keras, numpy as np
        >>> from tfdp import ArraySource, DistributedInput
        >>> x, y = np.eye(4, dtype=np.float32)[np.arange(32) % 4], np.arange(32) % 4
        >>> inp = DistributedInput(None, ArraySource((x, y)), batch_size=8)
        >>> trainer = Trainer(
        ...     None,  # the default strategy; a MirroredStrategy or MWMS in real use
        ...     lambda: keras.Sequential([keras.Input((4,)), keras.layers.Dense(4)]),
        ...     lambda: keras.optimizers.SGD(0.5),
        ...     "sparse_categorical_crossentropy_from_logits",
        ...     progress=False,
        ...     verbose=0,
        ... )
        >>> history = trainer.fit(inp, epochs=3)
        >>> trainer.state.global_step, len(history.history["loss"])
        (12, 3)
        >>> history.history["loss"][-1] < history.history["loss"][0]
        True
    """

    def __init__(
        self,
        strategy: tf.distribute.Strategy | None,
        model: keras.Model | Factory,
        optimizer: keras.optimizers.Optimizer | Factory,
        loss: Any,
        *,
        metrics: Sequence[Any] = (),
        steps_per_call: int = 1,
        accumulation_steps: int = 1,
        clip_global_norm: float | None = None,
        mixed_precision: str | None = None,
        jit_compile: bool = False,
        run_dir: str | os.PathLike[str] | None = None,
        checkpoint_every: int | None = None,
        max_to_keep: int = 3,
        progress: bool = True,
        verbose: int = 1,
        log_every: int = 0,
        record_samples: str | os.PathLike[str] | None = None,
        on_nonfinite: str = "stop",
        gradient_compression: str | None = None,
    ) -> None:
        self.strategy = strategy if strategy is not None else tf.distribute.get_strategy()
        self.info = worker_info(self.strategy)
        for name, value in (
            ("steps_per_call", steps_per_call),
            ("accumulation_steps", accumulation_steps),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if isinstance(log_every, bool) or not isinstance(log_every, int) or log_every < 0:
            raise ConfigError(
                f"log_every must be an integer >= 0 (0: no step lines), got {log_every!r}"
            )
        if clip_global_norm is not None and not clip_global_norm > 0:
            raise ValueError(f"clip_global_norm must be > 0 or None, got {clip_global_norm!r}")
        if mixed_precision not in (None, "float32", "mixed_float16", "mixed_bfloat16"):
            raise ValueError(
                "mixed_precision must be None, 'mixed_float16' or 'mixed_bfloat16', "
                f"got {mixed_precision!r}"
            )
        if checkpoint_every is not None and checkpoint_every < 1:
            raise ValueError(f"checkpoint_every must be >= 1 or None, got {checkpoint_every!r}")
        if isinstance(loss, keras.losses.Loss) and loss.reduction == "sum":
            raise ConfigError(
                f"loss {loss.name!r} has reduction='sum': tfdp trains on the mean over each "
                "step's rows; build it with the default reduction or reduction='none'"
            )
        self.steps_per_call = steps_per_call
        self.accumulation_steps = accumulation_steps
        self.clip_global_norm = clip_global_norm
        self.mixed_precision = mixed_precision
        self.jit_compile = jit_compile
        self.run_dir = os.fspath(run_dir) if run_dir is not None else None
        self.checkpoint_every = checkpoint_every
        self.max_to_keep = max_to_keep
        self.progress = progress and self.info.is_chief
        self.verbose = verbose if self.info.is_chief else 0
        self.log_every = log_every
        self._stop = threading.Event()
        self._agree_fn: Any = None
        self.record_samples = os.fspath(record_samples) if record_samples is not None else None
        self.on_nonfinite = check_policy(on_nonfinite)
        self.gradient_compression = check_compression(gradient_compression, mixed_precision)
        self.logs = TrainLogs(
            self.run_dir,
            is_chief=self.info.is_chief,
            verbose=self.verbose,
            progress=self.progress,
            log_every=log_every,
            record_samples=self.record_samples,
            accumulation_steps=accumulation_steps,
        )

        policy = mixed_precision if mixed_precision != "float32" else None
        with _dtype_policy(policy), self.strategy.scope():
            self.model = _build(model)
            optimizer = _build(optimizer)
            if not isinstance(self.model, keras.Model):
                raise ValueError(
                    f"model must be a keras.Model or a factory of one, got {self.model!r}"
                )
            if not isinstance(optimizer, keras.optimizers.Optimizer):
                raise ValueError(
                    f"optimizer must be a Keras optimizer or a factory, got {optimizer!r}"
                )
            for attr in ("clipnorm", "global_clipnorm", "clipvalue"):
                if getattr(optimizer, attr, None):
                    raise ValueError(
                        f"optimizer.{attr} clips each replica's partial gradient before the "
                        "all-reduce, which is wrong under a strategy; build the optimizer without "
                        f"it and pass Trainer(clip_global_norm=...) instead"
                    )
            if mixed_precision == "mixed_float16" and not isinstance(
                optimizer, keras.optimizers.LossScaleOptimizer
            ):
                optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
            self.optimizer = optimizer
            self._check_model_in_scope()
            self.optimizer.build(self.model.trainable_variables)
            attach_optimizer(self.model, self.optimizer)  # what Keras callbacks read
            self.loss = per_example_loss(loss)
            self.train_loss = keras.metrics.Mean(name="loss")
            self.train_metrics = [
                keras.metrics.get(m) if isinstance(m, str) else m for m in metrics
            ]
            self.evaluator = Evaluator(self.strategy, self.model, self.loss, self.train_metrics)
        self.train_step = TrainStep(
            self.strategy,
            self.model,
            self.optimizer,
            self.loss,
            self.train_loss,
            self.train_metrics,
            clip_global_norm=clip_global_norm,
            on_nonfinite=self.on_nonfinite,
            jit_compile=jit_compile,
            multi_worker=self.info.num_workers > 1,
            gradient_compression=self.gradient_compression,
        )
        self._ckpt: Any = None
        self.state = TrainState()

    # -- checks ---------------------------------------------------------------
    def _check_model_in_scope(self) -> None:
        if not self.model.built or not self.model.variables:
            raise ValueError(
                "the model has no variables yet: build it (keras.Input or model.build) inside "
                "strategy.scope(), or pass a factory"
            )
        for v in self.model.variables:
            var = backing_variable(v)
            if not self.strategy.extended.variable_created_in_scope(var):
                raise ValueError(
                    f"model variable {v.path if hasattr(v, 'path') else v.name} was created "
                    "outside strategy.scope(): build the model inside `with strategy.scope():`, "
                    "or pass a factory `lambda: build_model()` and tfdp builds it there"
                )

    def _nonfinite_error(self, i: int, losses: list[float], flags: Any) -> NonFiniteError:
        """The error for step ``i`` of the latest call (the steps before it were applied)."""
        self.state.step += i
        self.state.global_step += i
        self.state.stopped_early = True
        self.state.stop_reason = "nonfinite"
        weights_finite = all(
            bool(tf.reduce_all(tf.math.is_finite(v))) for v in self.model.trainable_variables
        )
        detail = ""
        if not weights_finite:
            detail += (
                "; the weights were already non-finite before this step (a non-finite "
                "learning rate, or an update that overflowed)"
            )
        mgr = self._checkpoint_manager()
        if mgr is not None:
            latest = mgr.latest
            detail += (
                f"; the latest checkpoint, {latest}, is from before it"
                if latest
                else "; no checkpoint was written"
            )
        return NonFiniteError(
            global_step=self.state.global_step + 1,
            epoch=self.state.epoch,
            step=self.state.step,
            what="loss" if flags[i][0] else "gradient",
            value=losses[i],
            detail=detail,
        )

    # -- checkpoints --------------------------------------------------------------
    def _checkpoint_manager(self) -> Any:
        if self._ckpt is None and self.run_dir is not None:
            from tfdp.checkpoint import CheckpointManager, keras_trackables

            self._ckpt = CheckpointManager(
                os.path.join(self.run_dir, "checkpoints"),
                strategy=self.strategy,
                max_to_keep=self.max_to_keep,
                **keras_trackables(self.model, self.optimizer),
                # The epoch's training-metric accumulators: a resumed epoch's line covers it all.
                metric_states=self._metric_states(),
            )
            self._ckpt.check_writable()
        return self._ckpt

    def _metric_states(self) -> list[Any]:
        """The epoch's training-metric accumulators (sync-on-read variables), as checkpointed."""
        return [
            backing_variable(v) for m in (self.train_loss, *self.train_metrics) for v in m.variables
        ]

    def _position(self, train_input: DistributedInput, epoch: int, step: int) -> Any:
        """The checkpointed data position after optimizer step ``step`` of ``epoch``."""
        from tfdp.checkpoint import DataPosition

        k = self.accumulation_steps
        return DataPosition.from_input(  # the batch position in the sampler epoch
            train_input,
            epoch,
            min(step * k, train_input.epoch_steps(epoch)),
            accumulation_steps=k,
            seed=train_input.seed,
        )

    def _data_config(self, train_input: DistributedInput) -> dict[str, Any]:
        from tfdp.checkpoint import input_config

        return input_config(
            train_input, accumulation_steps=self.accumulation_steps, seed=train_input.seed
        )

    def _save(self, train_input: DistributedInput) -> None:
        mgr = self._checkpoint_manager()
        if mgr is None:
            return
        position = self._position(train_input, self.state.epoch, self.state.step)
        mgr.save(position, self.state.global_step)

    def restore(self, train_input: DistributedInput) -> bool:
        """Restore the latest checkpoint of ``run_dir``; True if there was one.

        The saved data position must match ``train_input`` (global batch size,
        sampler configuration), else a ValueError names what differs. A
        checkpoint of another world size continues its epoch exactly: the
        rest of that epoch's list is dealt over this input's replicas
        (:meth:`tfdp.DistributedInput.resume_from`).
        The epoch's training-metric accumulators come back too, and
        ``metrics.jsonl`` keeps only the lines up to the restored step (a line
        written just before a crash, for steps the resumed run trains again,
        would otherwise appear twice).
        """
        mgr = self._checkpoint_manager()
        if mgr is None:
            return False
        restored = mgr.restore(
            expected_config=self._data_config(train_input), allow_world_size_change=True
        )
        if restored is None:
            self.logs.truncate(0)
            return False
        position, global_step = restored
        train_input.resume_from(position.sampler, position.step)  # another world size's epoch
        if position.step % self.accumulation_steps:
            raise ValueError(
                f"checkpoint {mgr.latest} stores batch {position.step} of epoch "
                f"{position.epoch + 1}, not the start of an optimizer step of "
                f"accumulation_steps={self.accumulation_steps} micro-batches"
            )
        self.state.epoch = position.epoch
        self.state.step = position.step // self.accumulation_steps
        self.state.global_step = int(global_step)
        self.logs.truncate(self.state.global_step)
        self.logs.print(f"resumed from {mgr.restored}: {self._where()}")
        return True

    def _where(self) -> str:
        """Where training stands, for the console: epochs counted from 1, as in the epoch lines."""
        state = self.state
        where = (
            f"in epoch {state.epoch + 1}, after its step {state.step}"
            if state.step
            else f"at the start of epoch {state.epoch + 1}"
        )
        return f"{where} (global step {state.global_step})"

    # -- stopping -------------------------------------------------------------------------
    def _agreed_stop(self) -> bool:
        """Whether any worker was asked to stop: all workers must stop at the same step.

        A stop is asked by :meth:`request_stop` (a signal handler) or by a
        callback setting ``model.stop_training``. Single-process jobs read the
        local flags; multi-worker jobs all-reduce them (one collective of two
        scalars per call), so a SIGTERM to one worker, or one worker's
        callback, stops the whole group at one step, where every worker joins
        the save; a peer's callback stop sets ``model.stop_training`` here too.
        """
        requested = self._stop.is_set()
        by_callback = bool(self.model.stop_training)
        if self.info.num_workers > 1:
            if self._agree_fn is None:

                @tf.function(autograph=False)
                def agree(flags: tf.Tensor) -> tf.Tensor:
                    per_replica = self.strategy.run(tf.identity, args=(flags,))
                    return self.strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

                self._agree_fn = agree
            local = tf.constant([float(requested), float(by_callback)])
            agreed = self._agree_fn(local).numpy() > 0
            if agreed[0] and not requested:
                self._stop.set()
                self.state.stop_reason = self.state.stop_reason or "peer"
            if agreed[1] and not by_callback:
                self.model.stop_training = True
            requested, by_callback = bool(agreed[0]), bool(agreed[1])
        if by_callback and not requested:
            self.state.stop_reason = self.state.stop_reason or "callback"
        return requested or by_callback

    def request_stop(self, reason: str = "request") -> None:
        """Ask :meth:`fit` to save a checkpoint and return at the next step (thread-safe).

        In a multi-worker job every worker stops at the same step (see
        :meth:`_agreed_stop`); ``state.stop_reason`` records ``reason``.
        """
        self.state.stop_reason = reason
        self._stop.set()

    # -- logging ------------------------------------------------------------------
    def _log_epoch(self, record: dict[str, Any]) -> None:
        """The epoch's line, metrics.jsonl record and TensorBoard scalars (:class:`TrainLogs`)."""
        self.logs.epoch_end(record)

    def _learning_rate(self) -> float:
        try:
            # Through a tensor: np.array of a Keras Variable warns under NumPy 2 (its __array__
            # takes no copy keyword), and keras.ops.convert_to_tensor keeps a MirroredVariable.
            return float(tf.convert_to_tensor(self.optimizer.learning_rate))
        except Exception:  # a schedule object or anything unreadable
            return float("nan")

    # -- the loop -------------------------------------------------------------------
    def fit(
        self,
        train_input: DistributedInput,
        epochs: int,
        *,
        eval_input: DistributedInput | None = None,
        resume: bool = True,
        max_steps: int | None = None,
        on_step: Callable[[TrainState], None] | None = None,
        callbacks: Sequence[keras.callbacks.Callback] | None = None,
    ) -> keras.callbacks.History:
        """Train for ``epochs`` epochs (resuming from ``run_dir`` when a checkpoint exists).

        Epoch ``e`` of the loop is exactly sampler epoch ``e`` of
        ``train_input``: its ``S = train_input.steps_per_epoch`` batches make
        ``ceil(S / accumulation_steps)`` optimizer steps, the last of which
        holds the ``S mod accumulation_steps`` leftover micro-batches (when
        non-zero) and is the mean over the rows it holds, like every step.
        ``fit`` may be called again with another input (another batch size,
        ``return_ids``, ...): it continues from ``state.epoch`` with steps
        compiled for that input.

        Args:
            train_input: The training input (built on the same strategy).
            epochs: Total epochs (a resumed run continues up to this number).
            eval_input: Exact evaluation after every epoch (``sampler="eval"``).
            resume: Restore the latest checkpoint of ``run_dir`` first; one saved
                at another world size (same global batch) continues its epoch exactly.
            max_steps: Stop (saving a checkpoint) once the global step reaches
                this -- a deliberate stop, as a preemption would cause.
            on_step: Called on every process after each ``tf.function`` call;
                ``state.step_losses`` holds the losses of that call's steps.
            callbacks: Keras callbacks, run on every worker as under
                ``model.fit``: ``on_train_begin/end``,
                ``on_epoch_begin/end`` (``logs``: ``loss``, the metrics and,
                with ``eval_input``, the exact ``val_*``, computed before any
                callback runs), ``on_train_batch_begin/end`` once per compiled
                call (``batch``: the call's last step in the epoch; ``logs``:
                the running mean ``loss`` of the epoch). A callback setting
                ``model.stop_training`` stops training after that call (or
                epoch): all workers agree and stop at the same step, save a
                checkpoint, and ``state.stop_reason`` is ``"callback"``.

        Returns:
            A ``keras.callbacks.History`` of the epochs completed in this call
            (``history.history["loss"]``, ..., as ``model.fit`` returns);
            the full per-epoch records (time, samples/s, learning rate,
            global step) are in ``state.history`` and ``metrics.jsonl``.
        """
        if train_input.strategy is not self.strategy:
            raise ValueError("train_input was built on another strategy than the trainer's")
        k = self.accumulation_steps
        if self.run_dir is not None:
            self._checkpoint_manager()  # fails before the first step if the directory is unwritable
        if resume:
            self.restore(train_input)
        batches_per_epoch = train_input.epoch_steps(self.state.epoch)
        if self.record_samples and not train_input.return_ids:
            raise ValueError(
                "record_samples needs the ids of each batch: build the training input with "
                "DistributedInput(..., return_ids=True)"
            )
        history = keras.callbacks.History()
        cbs = keras.callbacks.CallbackList(
            [*(callbacks or ()), history],
            add_history=False,
            add_progbar=False,
            model=self.model,
            verbose=self.verbose,
            epochs=epochs,
            steps=-(-batches_per_epoch // k),
        )
        self._stop.clear()
        self.model.stop_training = False
        # One endless stream of reshuffled epochs, built once: each loop epoch consumes
        # exactly the S batches of its sampler epoch, so the two stay aligned.
        stream: list[Any] = []  # the stream's iterator, released when fit ends (see below)
        spec = ""
        if self.state.epoch < epochs:
            dataset = train_input.epochs(
                self.state.epoch,
                epochs - self.state.epoch,
                min(self.state.step * k, batches_per_epoch),
            )
            stream.append(iter(dataset))
            spec = str(dataset.element_spec)
            del dataset
        width = train_input.batch_size if self.record_samples else 0
        calls: dict[tuple[int, int], Callable[[], Any]] = {}

        def call(group: int, n: int) -> Callable[[], Any]:
            """The compiled call of ``n`` steps of ``group`` micro-batches, bound to the stream."""
            if (group, n) not in calls:
                calls[group, n] = self.train_step.bind(
                    stream[0], spec, group, n, train_input.return_ids, width
                )
            return calls[group, n]

        cbs.on_train_begin()
        watch = PeerLossWatch.start(self.optimizer, self.state)
        try:
            self._epochs(
                train_input,
                epochs,
                eval_input=eval_input,
                max_steps=max_steps,
                on_step=on_step,
                callbacks=cbs,
                batch_hooks=any(_has_batch_hooks(cb) for cb in callbacks or ()),
                call=call,
            )
        except tf.errors.OpError as exc:  # a lost peer: one clear error, the last step kept
            lost = peer_lost(self, train_input, exc, watch)
            if lost is None:
                raise
            raise lost from exc
        finally:
            # No frame holds the iterator but this list: it dies here, even when an exception
            # kept by the caller (a NonFiniteError) outlives fit. Left alive, iterators pile up
            # in the process, and TensorFlow's teardown of one of them, whenever it comes, was
            # measured waiting 10-120 s on tf.data's background threads with a dozen alive.
            calls.clear()  # the bound calls hold it too
            stream.clear()
            self.logs.close()
        cbs.on_train_end({key: values[-1] for key, values in history.history.items()})
        return history

    def _epochs(
        self,
        train_input: DistributedInput,
        epochs: int,
        *,
        eval_input: DistributedInput | None,
        max_steps: int | None,
        on_step: Callable[[TrainState], None] | None,
        callbacks: keras.callbacks.CallbackList,
        batch_hooks: bool,
        call: Callable[[int, int], Callable[[], Any]],
    ) -> None:
        """The epochs of :meth:`fit`, from ``state`` up to ``epochs`` or an agreed stop.

        ``call(group, n)`` is the compiled call of ``n`` steps of ``group``
        micro-batches on the training stream; ``batch_hooks`` whether any
        callback has a batch hook (else none is called: no per-call work).
        """
        k = self.accumulation_steps
        while self.state.epoch < epochs:
            epoch = self.state.epoch
            # An epoch resumed from another world size has its plan's number of steps.
            full_steps, tail = divmod(train_input.epoch_steps(epoch), k)
            steps_per_epoch = full_steps + (1 if tail else 0)
            train_input.check_permutation_agreement(epoch)  # a user permutation, every worker's
            callbacks.on_epoch_begin(epoch)
            self.logs.epoch_begin(epoch, steps_per_epoch)
            t0 = time.perf_counter()
            batches_done = skipped = 0
            loss_sum, loss_count = 0.0, 0
            while self.state.step < steps_per_epoch:
                if self.state.step < full_steps:
                    group, n = k, min(self.steps_per_call, full_steps - self.state.step)
                else:  # the epoch's last, shorter group
                    group, n = tail, 1
                for every in (self.checkpoint_every, self.log_every):  # land on their steps
                    if every:
                        n = min(n, every - self.state.global_step % every)
                if max_steps is not None:
                    n = min(n, max_steps - self.state.global_step)
                if n <= 0:
                    break
                if batch_hooks:
                    callbacks.on_train_batch_begin(self.state.step)
                out = call(group, n)()
                if self.record_samples:
                    out, ids = out
                    self.logs.write_ids(ids, epoch, self.state.step, train_input.num_replicas)
                steps = out.numpy()  # [steps run, 3]: loss, non-finite flags
                losses, flags = steps[:, 0].tolist(), steps[:, 1:]
                bad = flags.any(axis=1).nonzero()[0].tolist()
                if bad and self.on_nonfinite == "stop":  # the call ended at that step
                    raise self._nonfinite_error(bad[0], losses, flags)
                for i in bad:  # "skip": not applied; its data is consumed
                    log.warning(
                        "tfdp: skipped optimizer step %d (epoch %d, step %d): non-finite %s",
                        self.state.global_step + i + 1,
                        epoch + 1,
                        self.state.step + i + 1,
                        "loss" if flags[i][0] else "gradient",
                    )
                skipped += len(bad)
                self.state.skipped_steps += len(bad)
                self.state.step_losses = losses
                self.state.last_loss = losses[-1]
                self.state.step += n
                self.state.global_step += n
                batches_done += n * group
                good = [v for i, v in enumerate(losses) if i not in bad] if bad else losses
                loss_sum += sum(good)
                loss_count += len(good)
                # Already-reduced step losses: no metric read, no collective.
                mean = loss_sum / loss_count if loss_count else float("nan")
                self.logs.steps_end(
                    epoch=epoch,
                    step=self.state.step,
                    global_step=self.state.global_step,
                    losses=good,
                    samples=n * group * train_input.global_batch_size,
                    lr=self._learning_rate() if self.log_every else float("nan"),
                    epoch_loss=mean,
                )
                if on_step is not None:
                    on_step(self.state)
                if batch_hooks:
                    callbacks.on_train_batch_end(self.state.step - 1, {"loss": mean})
                due = self.checkpoint_every and self.state.global_step % self.checkpoint_every == 0
                stop = self._agreed_stop() or (
                    max_steps is not None and self.state.global_step >= max_steps
                )
                if (due or stop) and self.state.step < steps_per_epoch:
                    self._save(train_input)
                if stop:
                    break
            if self.state.step < steps_per_epoch:  # stopped mid-epoch
                self.state.stopped_early = True
                return
            elapsed = time.perf_counter() - t0
            record: dict[str, Any] = {
                "epoch": epoch,
                "step": steps_per_epoch,
                "global_step": self.state.global_step,
                "time": elapsed,
                "loss": float(self.train_loss.result()),
            }
            for m in self.train_metrics:
                record[m.name] = float(m.result())
            samples = batches_done * train_input.global_batch_size
            record["samples_per_s"] = samples / max(elapsed, 1e-9)
            record["lr"] = self._learning_rate()
            if skipped:
                record["skipped_steps"] = skipped
            self.train_loss.reset_state()
            for m in self.train_metrics:
                m.reset_state()
            if eval_input is not None:
                for name, value in self.evaluator.evaluate(eval_input).items():
                    record[f"val_{name}"] = value
            source = train_input.source
            if isinstance(source, SkipReportingSource) and source.skipped_files():
                record["skipped_files"] = len(source.skipped_files())  # read with weight 0
                self.logs.print(source.report())
            self.state.epoch, self.state.step = epoch + 1, 0
            # The line first: a crash between the two re-runs (part of) the epoch from an
            # older checkpoint, and the resume drops the line (see restore).
            self._log_epoch(record)
            # Keras's epoch logs: the loss, the metrics and the exact validation, before any
            # callback sees them (a callback may change the model: the save comes after).
            logs = {
                key: value
                for key, value in record.items()
                if key == "loss"
                or key.startswith("val_")
                or key in {m.name for m in self.train_metrics}
            }
            callbacks.on_epoch_end(epoch, logs)
            self._save(train_input)
            self.state.history.append(record)
            if self._agreed_stop() or (
                max_steps is not None and self.state.global_step >= max_steps
            ):
                self.state.stopped_early = self.state.epoch < epochs
                break

    def evaluate(self, eval_input: DistributedInput) -> dict[str, float]:
        """Exact distributed evaluation (padding weighted 0): ``{"loss": ..., metric: ...}``."""
        return self.evaluator.evaluate(eval_input)
