"""The training loop: :class:`Trainer` (epochs, checkpoints, stop agreement, resume, callbacks).

This module owns the outer loop: loop epoch ``e`` is exactly sampler epoch
``e``; an epoch of ``S`` batches makes ``ceil(S / accumulation_steps)``
optimizer steps run ``steps_per_call`` at a time; checkpoints every
``checkpoint_every`` steps and at every epoch end, with exact mid-epoch
resume; a stop (a signal, ``max_steps``, a callback's ``model.stop_training``)
agreed by all workers at one step (:mod:`tfdp.train.stop`); exact validation
after every epoch, in the ``logs`` before any Keras callback sees them; the
returned ``keras.callbacks.History``. As Orbit's ``Controller``, the loop is
handed its parts (:mod:`tfdp.train.parts`): the step that runs compiled calls
(:mod:`tfdp.train.step`), the evaluation (:mod:`tfdp.train.evaluate`), the
logs (:mod:`tfdp.train.logs`) and the checkpoints (:mod:`tfdp.checkpoint`);
``Trainer(strategy, model, optimizer, loss, ...)`` builds tfdp's own
(:mod:`tfdp.train.assemble`). A collective that fails because another worker
is gone ends ``fit`` with one :class:`~tfdp.train.PeerLostError`, the chief
saving its last completed step (:mod:`tfdp.train.peer_loss`).

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

import os
from collections.abc import Callable, Sequence
from typing import Any

import keras
import tensorflow as tf

from tfdp._compat.fast.process import release_in_background
from tfdp.distribute import worker_info
from tfdp.errors import ConfigError
from tfdp.input import DistributedInput
from tfdp.train.assemble import Factory, check_loop_options, default_parts
from tfdp.train.epochs import EpochLoop, FitRun, TrainState
from tfdp.train.parts import Checkpoints, EpochEvaluator, RunLog, StepRunner, TrainerParts
from tfdp.train.peer_loss import PeerLoss
from tfdp.train.resume import RunCheckpoints
from tfdp.train.stop import StopAgreement


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
            costs one scalar all-reduce per step (see ``loss_weighting`` for
            PyTorch DDP's weighting). The loss, its reduction and its
            all-reduce are in the model's type: float64 for a float64 model
            (a Keras loss is rebuilt to compute in it), float32 otherwise,
            mixed precision included (:mod:`tfdp.train.dtypes`).
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
        gradient_compression: ``None`` (default: the exact all-reduce, in
            the gradients' own type), ``"fp16"`` or ``"bf16"``: every replica's
            gradient is rounded to that type before the all-reduce, which sums
            in it, and cast back after (the loss is reduced apart). Less
            traffic between machines, not exact: float16 flushes entries below
            about 6e-8 to 0 and overflows above 65504 (a non-finite step, see
            ``on_nonfinite``); bfloat16 keeps 8 significant bits. Refused with
            ``mixed_float16`` (see :mod:`tfdp.train.compression`).
        loss_weighting: How a step weighs the replicas' rows
            (:mod:`tfdp.train.weighting`). ``"rows"`` (default): the mean over
            all the step's rows, as above. ``"replicas"``: PyTorch DDP's --
            every replica's own mean over its own rows (each micro-batch's,
            with accumulation), then the mean over the replicas (and
            micro-batches), loss and gradient alike; no rows all-reduce. The
            two differ only where replicas hold unequal batches: in tfdp, an
            epoch resumed at another world size whose rest cannot be dealt
            evenly (every sampler gives all ranks lists of one length).

    The parts -- the step, the exact evaluation, the logs, the checkpoints --
    are built from these arguments (:func:`tfdp.train.assemble.default_parts`);
    :meth:`from_parts` composes a Trainer of parts built otherwise.

    Raises:
        tfdp.errors.ConfigError: naming the argument: a model built outside the
            scope, float16 or complex variables (naming the type), a loss with
            a sum reduction, optimizer-side clipping, a bad number or policy;
            at the first step, a prediction or a loss value of a type the loss
            cannot take (naming the type).

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
        loss_weighting: str = "rows",
    ) -> None:
        check_loop_options(steps_per_call, accumulation_steps, checkpoint_every)
        parts = default_parts(
            strategy,
            model,
            optimizer,
            loss,
            metrics=metrics,
            accumulation_steps=accumulation_steps,
            clip_global_norm=clip_global_norm,
            mixed_precision=mixed_precision,
            jit_compile=jit_compile,
            run_dir=run_dir,
            max_to_keep=max_to_keep,
            progress=progress,
            verbose=verbose,
            log_every=log_every,
            record_samples=record_samples,
            on_nonfinite=on_nonfinite,
            gradient_compression=gradient_compression,
            loss_weighting=loss_weighting,
        )
        self._compose(parts, steps_per_call, accumulation_steps, checkpoint_every)

    @classmethod
    def from_parts(
        cls,
        parts: TrainerParts,
        *,
        steps_per_call: int = 1,
        accumulation_steps: int = 1,
        checkpoint_every: int | None = None,
    ) -> Trainer:
        """A Trainer of the parts given (:mod:`tfdp.train.parts`), as Orbit's Controller is.

        The loop drives ``parts.step`` (its strategy, model and optimizer are
        the trainer's), evaluates with ``parts.evaluator``, tells through
        ``parts.logs`` (its ``log_every`` and ``record_samples`` decide where
        calls end and whether ids are fetched) and saves to
        ``parts.checkpoints`` (None: no checkpoints, no resume). The options
        are the loop's own, as for the constructor.

        Raises:
            tfdp.errors.ConfigError: a part that does not meet its Protocol, or
                a bad option, naming it.

        Example:
            >>> import keras, numpy as np
            >>> from tfdp import ArraySource, DistributedInput
            >>> from tfdp.train.assemble import default_parts
            >>> from tfdp.train.logs import TrainLogs
            >>> parts = default_parts(None, lambda: keras.Sequential(
            ...     [keras.Input((2,)), keras.layers.Dense(2)]), lambda: keras.optimizers.SGD(0.5),
            ...     "sparse_categorical_crossentropy_from_logits")
            >>> parts.logs = TrainLogs(None, verbose=0, progress=False)  # another part, quiet
            >>> trainer = Trainer.from_parts(parts, steps_per_call=2)
            >>> x, y = np.eye(2, dtype=np.float32)[np.arange(8) % 2], np.arange(8) % 2
            >>> _ = trainer.fit(DistributedInput(None, ArraySource((x, y)), batch_size=2), 1)
            >>> trainer.state.global_step, trainer.model is parts.step.model
            (4, True)
        """
        check_loop_options(steps_per_call, accumulation_steps, checkpoint_every)
        for name, part, protocol in (
            ("step", parts.step, StepRunner),
            ("evaluator", parts.evaluator, EpochEvaluator),
            ("logs", parts.logs, RunLog),
        ):
            if not isinstance(part, protocol):
                raise ConfigError(
                    f"must meet tfdp.train.parts.{protocol.__name__}, got {type(part).__name__}",
                    argument=name,
                )
        if parts.checkpoints is not None and not isinstance(parts.checkpoints, Checkpoints):
            raise ConfigError(
                "must meet tfdp.train.parts.Checkpoints or be None, got "
                f"{type(parts.checkpoints).__name__}",
                argument="checkpoints",
            )
        trainer = cls.__new__(cls)
        trainer._compose(parts, steps_per_call, accumulation_steps, checkpoint_every)
        return trainer

    def _compose(
        self,
        parts: TrainerParts,
        steps_per_call: int,
        accumulation_steps: int,
        checkpoint_every: int | None,
    ) -> None:
        self.train_step: StepRunner = parts.step
        self.evaluator: EpochEvaluator = parts.evaluator
        self.logs: RunLog = parts.logs
        self.checkpoints: Checkpoints | None = parts.checkpoints
        self.strategy = parts.step.strategy
        self.model = parts.step.model
        self.optimizer = parts.step.optimizer
        self.info = worker_info(self.strategy)
        self.steps_per_call = steps_per_call
        self.accumulation_steps = accumulation_steps
        self.checkpoint_every = checkpoint_every
        self.state = TrainState()
        self._stop = StopAgreement(self.strategy, self.info.num_workers)
        self._resume = RunCheckpoints(self.checkpoints, accumulation_steps, self.logs)
        self._peer_loss = PeerLoss(self.train_step, self._resume, self.state, accumulation_steps)
        self._loop = EpochLoop(
            self.train_step,
            self.evaluator,
            self.logs,
            self._resume,
            self._stop,
            self.state,
            steps_per_call=steps_per_call,
            accumulation_steps=accumulation_steps,
            checkpoint_every=checkpoint_every,
        )

    # -- checkpoints --------------------------------------------------------------
    def restore(self, train_input: DistributedInput) -> bool:
        """Restore the latest checkpoint of ``run_dir``; True if there was one.

        The saved data position must match ``train_input`` (global batch size,
        sampler configuration), else a :class:`tfdp.errors.StateError` names what differs. A
        checkpoint of another world size continues its epoch exactly: the
        rest of that epoch's list is dealt over this input's replicas
        (:meth:`tfdp.DistributedInput.resume_from`).
        The epoch's training-metric accumulators come back too, and
        ``metrics.jsonl`` keeps only the lines up to the restored step (a line
        written just before a crash, for steps the resumed run trains again,
        would otherwise appear twice).
        """
        restored = self._resume.restore(train_input)
        if restored is None:
            return False
        self.state.epoch, self.state.step, self.state.global_step = restored
        return True

    # -- stopping -------------------------------------------------------------------------
    def request_stop(self, reason: str = "request") -> None:
        """Ask :meth:`fit` to save a checkpoint and return at the next step (thread-safe).

        In a multi-worker job every worker stops at the same step
        (:class:`tfdp.train.stop.StopAgreement`); ``state.stop_reason`` records ``reason``.
        """
        self.state.stop_reason = reason
        self._stop.request()

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
            on_step: Called on every process after each ``tf.function`` call
                with :attr:`state`: ``state.step_losses`` holds the losses of
                that call's steps, ``state.replica_losses`` each replica's own
                loss of each of them (global replica order: what each rank of
                a PyTorch DDP run logs), ``state.outputs`` all the call's
                named outputs (:class:`tfdp.train.parts.StepOutputs`).
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
            raise ConfigError(
                "was built on another strategy than the trainer's",
                argument="train_input",
            )
        k = self.accumulation_steps
        self._resume.ready()  # fails before the first step if the directory is unwritable
        if resume:
            self.restore(train_input)
        batches_per_epoch = train_input.epoch_steps(self.state.epoch)
        record_samples = self.logs.record_samples is not None
        if record_samples and not train_input.return_ids:
            raise ConfigError(
                "needs the ids of each batch: build the training input with "
                "DistributedInput(..., return_ids=True)",
                argument="record_samples",
            )
        history = keras.callbacks.History()
        cbs = keras.callbacks.CallbackList(
            [*(callbacks or ()), history],
            add_history=False,
            add_progbar=False,
            model=self.model,
            verbose=self.logs.verbose,
            epochs=epochs,
            steps=-(-batches_per_epoch // k),
        )
        self._stop.clear()
        self.model.stop_training = False
        # This fit's outcome: a trainer fitted again after a stop is not stopped early by it.
        self.state.stopped_early, self.state.stop_reason = False, None
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
        width = train_input.batch_size if record_samples else 0
        calls: dict[tuple[int, int], Callable[[], Any]] = {}

        def call(group: int, n: int) -> Callable[[], Any]:
            """The compiled call of ``n`` steps of ``group`` micro-batches, bound to the stream."""
            if (group, n) not in calls:
                calls[group, n] = self.train_step.bind(
                    stream[0], spec, group, n, train_input.return_ids, width
                )
            return calls[group, n]

        cbs.on_train_begin()
        watch = self._peer_loss.watch()
        try:
            self._loop.run(
                FitRun(
                    train_input,
                    epochs,
                    eval_input=eval_input,
                    max_steps=max_steps,
                    on_step=on_step,
                    callbacks=cbs,
                    batch_hooks=any(_has_batch_hooks(cb) for cb in callbacks or ()),
                    call=call,
                )
            )
        except tf.errors.OpError as exc:  # a lost peer: one clear error, the last step kept
            lost = self._peer_loss.lost(train_input, exc, watch)
            if lost is None:
                raise
            raise lost from exc
        finally:
            # No frame holds the iterator but this list: it is released here (destroyed on the
            # release thread), even when an exception kept by the caller (a NonFiniteError)
            # outlives fit. Left alive, iterators pile up in the process, and TensorFlow's
            # teardown of one of them, whenever it comes, was measured waiting 10-120 s on
            # tf.data's background threads with a dozen alive.
            calls.clear()  # the bound calls hold it too
            # Destroyed off this thread: TensorFlow's teardown of an iterator can wait up to a
            # minute (see tfdp._compat.fast.process.release_in_background).
            release_in_background(stream)
            self.logs.close()
        cbs.on_train_end({key: values[-1] for key, values in history.history.items()})
        return history

    def evaluate(self, eval_input: DistributedInput) -> dict[str, float]:
        """Exact distributed evaluation (padding weighted 0): ``{"loss": ..., metric: ...}``."""
        return self.evaluator.evaluate(eval_input)
