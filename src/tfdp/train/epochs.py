"""The epochs of :meth:`tfdp.train.Trainer.fit`: compiled calls, their results, each epoch's record.

This module owns :class:`EpochLoop`, the body of the outer loop over the parts
a Trainer is composed of (:mod:`tfdp.train.parts`): an epoch starts with the
workers' agreement on a user permutation
(:meth:`tfdp.DistributedInput.check_permutation_agreement`); an epoch of ``S`` batches
makes ``ceil(S / accumulation_steps)`` optimizer steps (the last holds the
``S mod accumulation_steps`` leftover micro-batches), run ``steps_per_call`` at
a time by calls cut to land on the steps when a checkpoint, a log line or
``max_steps`` is due; each call's named outputs
(:class:`~tfdp.train.parts.StepOutputs`) are read by name: the non-finite
flags checked (``"stop"`` raises :class:`~tfdp.train.NonFiniteError`,
``"skip"`` warns), the losses and each replica's own loss handed to the state
(``on_step`` reads them there), and the loss with every scalar the step adds
told to the logs and averaged into the epoch's record under its own name,
without reading a metric; after every call and every epoch
the workers agree whether to stop (:class:`~tfdp.train.stop.StopAgreement`) and
save where they stop (:class:`~tfdp.train.resume.RunCheckpoints`); an epoch's
record -- loss, metrics, samples/s, learning rate, the exact ``val_*`` -- is
told (``metrics.jsonl`` first), handed to the Keras callbacks, then saved.
:class:`TrainState` is where training stands.

Example:
    >>> TrainState(epoch=1, step=3, global_step=13).global_step
    13
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import keras
import tensorflow as tf

from tfdp.input import DistributedInput
from tfdp.sources.base import SkipReportingSource
from tfdp.train.guard import NonFiniteError
from tfdp.train.parts import EpochEvaluator, RunLog, StepOutputs, StepRunner
from tfdp.train.resume import RunCheckpoints
from tfdp.train.stop import StopAgreement

log = logging.getLogger("tfdp")


@dataclass
class TrainState:
    """Where training stands: epoch, optimizer step within it, global optimizer step.

    ``last_loss`` is the loss of the latest optimizer step and ``step_losses``
    those of every step of the latest compiled call (each the step's loss --
    the mean over the rows of its step, or with ``loss_weighting="replicas"``
    the mean of the replicas' own means -- regularisation included, as every
    replica holds it); ``replica_losses`` holds, per step of that call, each
    replica's own loss in global replica order (its mean over its own rows of
    the step, as each rank of a PyTorch DDP run computes and logs it), and
    ``outputs`` all of that call's named outputs
    (:class:`~tfdp.train.parts.StepOutputs`: also the scalars a step adds,
    e.g. ``grad_norm``). ``history`` holds every epoch record (as in
    ``metrics.jsonl``);
    ``stop_reason`` says why :meth:`tfdp.train.Trainer.fit` stopped early: ``"request"``
    (or the reason given to :meth:`tfdp.train.Trainer.request_stop`), ``"peer"`` (another
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
    replica_losses: list[list[float]] = field(default_factory=list)
    outputs: StepOutputs | None = None
    skipped_steps: int = 0
    stop_reason: str | None = None
    history: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class FitRun:
    """What one :meth:`tfdp.train.Trainer.fit` call hands its epochs."""

    train_input: DistributedInput
    epochs: int
    eval_input: DistributedInput | None
    max_steps: int | None
    on_step: Callable[[TrainState], None] | None
    callbacks: keras.callbacks.CallbackList
    batch_hooks: bool  # whether any callback has a batch hook (else none is called)
    call: Callable[[int, int], Callable[[], Any]]  # (group, n) -> the bound compiled call

    def at_max_steps(self, global_step: int) -> bool:
        """Whether ``global_step`` reached ``max_steps``."""
        return self.max_steps is not None and global_step >= self.max_steps


@dataclass
class _Epoch:
    """The running account of one epoch: its plan, its time, what its calls did."""

    epoch: int
    full_steps: int  # optimizer steps of accumulation_steps micro-batches
    tail: int  # micro-batches of the epoch's last, shorter step (0: none)
    t0: float = field(default_factory=time.perf_counter)
    batches: int = 0
    skipped: int = 0
    sums: dict[str, float] = field(default_factory=dict)  # of the applied steps' values, by name
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def steps(self) -> int:
        return self.full_steps + (1 if self.tail else 0)

    def add(self, values: dict[str, list[float]]) -> None:
        """Count the applied steps' named values of a call."""
        for name, vals in values.items():
            self.sums[name] = self.sums.get(name, 0.0) + sum(vals)
            self.counts[name] = self.counts.get(name, 0) + len(vals)

    def mean(self, name: str) -> float:
        """The running mean of a named value over the epoch's applied steps (no metric read)."""
        count = self.counts.get(name, 0)
        return self.sums[name] / count if count else float("nan")

    @property
    def mean_loss(self) -> float:
        """The running mean of the epoch's applied step losses."""
        return self.mean("loss")


class EpochLoop:
    """The epochs of the fit calls of one Trainer, over its parts.

    Args:
        step: The inner loop (its model, optimizer and epoch metrics).
        evaluator: The exact evaluation after every epoch.
        logs: What training tells.
        resume: The run's checkpoints (:class:`~tfdp.train.resume.RunCheckpoints`).
        stop: The workers' stop agreement.
        state: Where training stands (updated in place).
        steps_per_call: Optimizer steps per compiled call (at most).
        accumulation_steps: Micro-batches per optimizer step.
        checkpoint_every: Save every this many optimizer steps (None: at epoch ends only).

    Example:
        See :class:`tfdp.train.Trainer`, which runs one per fit call.
    """

    def __init__(
        self,
        step: StepRunner,
        evaluator: EpochEvaluator,
        logs: RunLog,
        resume: RunCheckpoints,
        stop: StopAgreement,
        state: TrainState,
        *,
        steps_per_call: int,
        accumulation_steps: int,
        checkpoint_every: int | None,
    ) -> None:
        self.step, self.evaluator, self.logs = step, evaluator, logs
        self.resume, self.stop, self.state = resume, stop, state
        self.steps_per_call = steps_per_call
        self.accumulation_steps = accumulation_steps
        self.checkpoint_every = checkpoint_every

    @property
    def model(self) -> keras.Model:
        """The model the step trains."""
        return self.step.model

    def save(self, train_input: DistributedInput) -> None:
        """Save at the step the run stands at (every worker: saving may run collectives)."""
        state = self.state
        self.resume.save(
            train_input, epoch=state.epoch, step=state.step, global_step=state.global_step
        )

    def agreed_stop(self) -> bool:
        """Whether any worker was asked to stop (:class:`tfdp.train.stop.StopAgreement`).

        A collective in a multi-worker job: every worker calls it at the same
        step. ``state.stop_reason`` learns a peer's or a callback's stop.
        """
        stop, reason = self.stop.agreed(self.model)
        if reason is not None:
            self.state.stop_reason = self.state.stop_reason or reason
        return stop

    def _learning_rate(self) -> float:
        """The optimizer's learning rate now (nan for a schedule object or anything unreadable)."""
        try:
            # Through a tensor: np.array of a Keras Variable warns under NumPy 2 (its __array__
            # takes no copy keyword), and keras.ops.convert_to_tensor keeps a MirroredVariable.
            return float(tf.convert_to_tensor(self.step.optimizer.learning_rate))
        except Exception:  # a schedule object or anything unreadable
            return float("nan")

    # -- non-finite steps -----------------------------------------------------------------
    def _nonfinite_error(self, i: int, out: StepOutputs) -> NonFiniteError:
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
        detail += self.resume.latest_note()
        return NonFiniteError(
            global_step=self.state.global_step + 1,
            epoch=self.state.epoch,
            step=self.state.step,
            what="loss" if out.loss_nonfinite[i] else "gradient",
            value=float(out.loss[i]),
            detail=detail,
        )

    # -- the epochs ------------------------------------------------------------------------
    def run(self, run: FitRun) -> None:
        """The epochs of a fit call, from ``state`` up to ``run.epochs`` or an agreed stop."""
        while self.state.epoch < run.epochs:
            epoch = self._begin_epoch(run)
            if not self._train_epoch(run, epoch):  # stopped mid-epoch
                self.state.stopped_early = True
                return
            self._end_epoch(run, epoch)
            if self.agreed_stop() or run.at_max_steps(self.state.global_step):
                self.state.stopped_early = self.state.epoch < run.epochs
                return

    def _begin_epoch(self, run: FitRun) -> _Epoch:
        # An epoch resumed from another world size has its plan's number of steps.
        full_steps, tail = divmod(
            run.train_input.epoch_steps(self.state.epoch), self.accumulation_steps
        )
        epoch = _Epoch(self.state.epoch, full_steps, tail)
        # A user permutation: every worker's the same (one collective under several workers).
        run.train_input.check_permutation_agreement(epoch.epoch)
        run.callbacks.on_epoch_begin(epoch.epoch)
        self.logs.epoch_begin(epoch.epoch, epoch.steps)
        epoch.t0 = time.perf_counter()
        return epoch

    def _train_epoch(self, run: FitRun, epoch: _Epoch) -> bool:
        """The epoch's compiled calls; True if it ran to its end, False if stopped in it."""
        while self.state.step < epoch.steps:
            group, n = self._next_call(run, epoch)
            if n <= 0:
                break
            self._run_call(run, epoch, group, n)
            due = self.checkpoint_every and self.state.global_step % self.checkpoint_every == 0
            stop = self.agreed_stop() or run.at_max_steps(self.state.global_step)
            if (due or stop) and self.state.step < epoch.steps:
                self.save(run.train_input)
            if stop:
                break
        return self.state.step >= epoch.steps

    def _next_call(self, run: FitRun, epoch: _Epoch) -> tuple[int, int]:
        """``(micro-batches per step, steps)`` of the next call (cut to land on due steps)."""
        if self.state.step < epoch.full_steps:
            group = self.accumulation_steps
            n = min(self.steps_per_call, epoch.full_steps - self.state.step)
        else:  # the epoch's last, shorter group
            group, n = epoch.tail, 1
        for every in (self.checkpoint_every, self.logs.log_every):  # land on their steps
            if every:
                n = min(n, every - self.state.global_step % every)
        if run.max_steps is not None:
            n = min(n, run.max_steps - self.state.global_step)
        return group, n

    def _run_call(self, run: FitRun, epoch: _Epoch, group: int, n: int) -> None:
        """One compiled call of ``n`` steps: its results checked, counted, told and hooked."""
        if run.batch_hooks:
            run.callbacks.on_train_batch_begin(self.state.step)
        out = run.call(group, n)()
        if self.logs.record_samples is not None:
            self.logs.write_ids(out.ids, epoch.epoch, self.state.step, run.train_input.num_replicas)
        flagged = out.flagged
        bad = flagged.nonzero()[0].tolist()
        if bad and self.step.on_nonfinite == "stop":  # the call ended at that step
            raise self._nonfinite_error(bad[0], out)
        for i in bad:  # "skip": not applied; its data is consumed
            log.warning(
                "tfdp: skipped optimizer step %d (epoch %d, step %d): non-finite %s",
                self.state.global_step + i + 1,
                epoch.epoch + 1,
                self.state.step + i + 1,
                "loss" if out.loss_nonfinite[i] else "gradient",
            )
        epoch.skipped += len(bad)
        self.state.skipped_steps += len(bad)
        self.state.outputs = out
        self.state.step_losses = out.loss.tolist()
        self.state.replica_losses = out.replica_losses.tolist()
        self.state.last_loss = self.state.step_losses[-1]
        self.state.step += n
        self.state.global_step += n
        epoch.batches += n * group
        told = out.told(~flagged)  # the applied steps' loss and scalars, by name
        epoch.add(told)
        # Already-reduced step values: no metric read, no collective.
        self.logs.steps_end(
            epoch=epoch.epoch,
            step=self.state.step,
            global_step=self.state.global_step,
            values=told,
            samples=n * group * run.train_input.global_batch_size,
            lr=self._learning_rate() if self.logs.log_every else float("nan"),
            epoch_loss=epoch.mean_loss,
        )
        if run.on_step is not None:
            run.on_step(self.state)
        if run.batch_hooks:
            run.callbacks.on_train_batch_end(self.state.step - 1, {"loss": epoch.mean_loss})

    def _end_epoch(self, run: FitRun, epoch: _Epoch) -> None:
        """The epoch's record, told (the line first), given to the callbacks, then saved."""
        record = self._epoch_record(run, epoch)
        self.state.epoch, self.state.step = epoch.epoch + 1, 0
        # The line first: a crash between the two re-runs (part of) the epoch from an
        # older checkpoint, and the resume drops the line (see restore).
        self.logs.epoch_end(record)
        # Keras's epoch logs: the loss, the metrics and the exact validation, before any
        # callback sees them (a callback may change the model: the save comes after).
        names = {m.name for m in self.step.metrics}
        logs = {
            key: value
            for key, value in record.items()
            if key == "loss" or key.startswith("val_") or key in names
        }
        run.callbacks.on_epoch_end(epoch.epoch, logs)
        self.save(run.train_input)
        self.state.history.append(record)

    def _epoch_record(self, run: FitRun, epoch: _Epoch) -> dict[str, Any]:
        """The epoch's record (as in ``metrics.jsonl``); the training metrics reset."""
        elapsed = time.perf_counter() - epoch.t0
        train_loss, metrics = self.step.train_loss, self.step.metrics
        record: dict[str, Any] = {
            "epoch": epoch.epoch,
            "step": epoch.steps,
            "global_step": self.state.global_step,
            "time": elapsed,
            "loss": float(train_loss.result()),
        }
        for m in metrics:
            record[m.name] = float(m.result())
        for name in epoch.sums:  # the step's own scalars, averaged over the applied steps
            if name != "loss":
                record[name] = epoch.mean(name)
        samples = epoch.batches * run.train_input.global_batch_size
        record["samples_per_s"] = samples / max(elapsed, 1e-9)
        record["lr"] = self._learning_rate()
        if epoch.skipped:
            record["skipped_steps"] = epoch.skipped
        train_loss.reset_state()
        for m in metrics:
            m.reset_state()
        if run.eval_input is not None:
            for name, value in self.evaluator.evaluate(run.eval_input).items():
                record[f"val_{name}"] = value
        source = run.train_input.source
        if isinstance(source, SkipReportingSource) and source.skipped_files():
            record["skipped_files"] = len(source.skipped_files())  # read with weight 0
            self.logs.print(source.report())
        return record
