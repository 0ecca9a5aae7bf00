"""The ``model.fit`` path's non-finite guard: Keras callbacks that wrap its step.

This module owns ``on_nonfinite`` under ``model.fit`` (:func:`tfdp.train.fit`):
:func:`guard_for` picks the callback of a policy; its
:meth:`~_NonFiniteGuard.overrides` are the wrappers of Keras's
``optimizer.apply_gradients`` and ``model.train_step`` that
:func:`tfdp._compat.keras.fit_step_overrides` installs for the duration of the fit.
A step whose all-reduced gradient is non-finite changes no variable
(:func:`tfdp.train.guard.apply_reduced_if_finite`); ``"stop"`` fails that
step in its graph (:class:`_AssertingGuard`) and names it in a
:class:`~tfdp.train.NonFiniteError`, ``"skip"`` (and ``"stop"`` under XLA)
counts flagged steps and reads the count after every batch
(:class:`_CountingGuard`).

Example:
    >>> import keras
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> model.compile("sgd", "mse")
    >>> [type(guard_for(model, p, 0, 0, 4)).__name__ for p in ("stop", "skip", "ignore")]
    ['_AssertingGuard', '_CountingGuard', 'NoneType']
"""

from __future__ import annotations

import logging
import math
import threading
from typing import Any

import keras
import tensorflow as tf

from tfdp._compat.keras import gradients_reduced
from tfdp.train.guard import NonFiniteError, apply_reduced_if_finite

log = logging.getLogger("tfdp")


def _replica_local_int() -> tf.Variable:
    """An int64 0 each replica writes on its own (sync on read), in the current scope."""
    return tf.Variable(
        0,
        dtype=tf.int64,
        trainable=False,
        synchronization=tf.VariableSynchronization.ON_READ,
        aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
    )


class _NonFiniteGuard(keras.callbacks.Callback):
    """``on_nonfinite`` for ``model.fit``: a step with a non-finite gradient is not applied.

    :meth:`overrides` wraps (for the duration of :func:`fit`, through
    :func:`tfdp._compat.keras.fit_step_overrides`) the optimizer's ``apply_gradients``:
    Keras's train step hands it the replica's gradients, which it all-reduces
    itself; the reduced gradient, the same on every replica, is checked once
    and applied only when finite (:func:`~tfdp.train.guard.apply_reduced_if_finite`;
    the optimizer is told, for that update only, that the gradients are
    reduced: :func:`tfdp._compat.keras.gradients_reduced`), so a flagged step changes
    no variable. A custom ``train_step`` that updates through
    ``optimizer.apply`` is neither wrapped nor changed. With a
    ``LossScaleOptimizer`` gradient overflow is the loss scaler's business and
    only the loss is checked.

    How a flagged step is reported is the subclass's: :meth:`_create_state`
    makes its variables, :meth:`_flagged` records a step's flags in the graph,
    :meth:`_step_wrapper` may wrap Keras's train step, and :meth:`error` names the
    step a failed call stopped at.
    """

    def __init__(
        self, model: keras.Model, policy: str, global_step: int, start: int, steps: int
    ) -> None:
        super().__init__()
        self.policy = policy
        self.global_step, self.position, self.steps = global_step, start, steps
        self.epoch = self.step = 0
        self.optimizer = model.optimizer
        self.check_gradients = not isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        self.global_step += 1
        self.epoch, self.step = divmod(self.position, self.steps)
        self.position += 1

    def overrides(self, strategy: Any) -> dict[str, Any]:
        """The wrappers of ``train_step`` / ``apply_gradients`` this guard needs (state made)."""
        self._create_state(strategy)
        out: dict[str, Any] = {}
        if self.check_gradients:
            out["apply_gradients"] = self._guarded_apply
        step = self._step_wrapper()
        if step is not None:
            out["train_step"] = step
        return out

    # -- the subclass's ----------------------------------------------------------------
    def _create_state(self, strategy: Any) -> None:
        """Make the variables the in-graph hooks write (in ``strategy.scope()``)."""

    def _flagged(self, flags: tf.Tensor) -> None:
        """In the graph, replica context: the reduced gradient's flags of the step being traced."""

    def _step_wrapper(self) -> Any:
        """A wrapper of Keras's train step (``original -> replacement``), or None."""
        return None

    def error(self, failure: tf.errors.InvalidArgumentError) -> NonFiniteError | None:
        """The :class:`NonFiniteError` of a step the graph failed (``failure``), else None."""
        return None

    # -- shared --------------------------------------------------------------------------
    def _guarded_apply(self, original: Any) -> Any:
        """``apply_gradients`` that all-reduces, checks, and applies only finite gradients."""
        optimizer = self.optimizer

        def guarded(grads_and_vars: Any, *args: Any, **kwargs: Any) -> None:
            pairs = [(g, v) for g, v in grads_and_vars if g is not None]
            variables = [v for _, v in pairs]
            ctx = tf.distribute.get_replica_context()
            grads = ctx.all_reduce(tf.distribute.ReduceOp.SUM, [g for g, _ in pairs])

            def apply(g: list[Any]) -> None:
                with gradients_reduced(optimizer):  # this update only: they are reduced
                    original(zip(g, variables, strict=True), *args, **kwargs)

            self._flagged(apply_reduced_if_finite(tf.constant(0.0), grads, apply))

        return guarded

    def _error(self, what: str, value: float) -> NonFiniteError:
        return NonFiniteError(
            global_step=self.global_step,
            epoch=self.epoch,
            step=self.step,
            what=what,
            value=value,
            applied=what == "loss" and self.check_gradients,
        )


_GRADIENT, _LOSS = 1, 2  # what a step's check found, per replica (0: nothing)


class _AssertingGuard(_NonFiniteGuard):
    """``"stop"`` without a host read per step: the step's graph fails at a flagged step.

    Keras's ``train_step`` is wrapped: after the (skipped) update a
    ``tf.debugging.Assert`` fails the step when the gradient was flagged or the
    step's logged loss is not finite, having first written what it found to a
    replica-local variable, which :meth:`error` reads to turn the failure into
    :class:`NonFiniteError` (any other failure passes through). The failing step
    runs no batch-end callback, so no checkpoint or user callback sees it. A
    non-finite loss with finite gradients (Keras's train step does not hand the
    loss to the optimizer) is caught after its update.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.found: Any = None
        self.strategy: Any = None
        self._traced = threading.local()  # the replica's gradient flags, while Keras traces

    def _create_state(self, strategy: Any) -> None:
        self.strategy = strategy
        with strategy.scope():
            self.found = _replica_local_int()

    def _flagged(self, flags: tf.Tensor) -> None:
        self._traced.flags = flags

    def _step_wrapper(self) -> Any:
        return self._checked_step

    def _checked_step(self, original: Any) -> Any:
        traced, found = self._traced, self.found

        def train_step(data: Any) -> Any:
            traced.flags = None
            logs = original(data)
            code = tf.constant(0, tf.int64)
            loss = logs.get("loss") if isinstance(logs, dict) else None
            if loss is not None:
                finite = tf.reduce_all(tf.math.is_finite(loss))
                code = tf.where(finite, code, tf.constant(_LOSS, tf.int64))
            if traced.flags is not None:
                bad = tf.reduce_sum(traced.flags) > 0
                code = tf.where(bad, tf.constant(_GRADIENT, tf.int64), code)
            with tf.control_dependencies([found.assign(code)]):  # written before the check
                message = "tfdp: non-finite value in the fit step (1: gradient, 2: loss):"
                tf.debugging.Assert(tf.equal(code, 0), [message, code])
            return logs

        return train_step

    def error(self, failure: tf.errors.InvalidArgumentError) -> NonFiniteError | None:
        codes = {int(v.numpy()) for v in self.strategy.experimental_local_results(self.found)}
        what = "gradient" if _GRADIENT in codes else "loss" if _LOSS in codes else None
        if what is None:
            return None  # not the guard's check: another failure of the step
        try:  # the epoch's running mean, as the batch logs would have said
            value = float(self.model.get_metrics_result().get("loss", float("nan")))
        except Exception:  # nothing readable: the message says nan
            value = float("nan")
        return self._error(what, value)


class _CountingGuard(_NonFiniteGuard):
    """The guard that reads a count of flagged steps after every batch (``"skip"``, XLA).

    Under ``jit_compile`` XLA drops assertions, so ``"stop"`` counts too.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seen = 0
        self.count: Any = None

    def _create_state(self, strategy: Any) -> None:
        if not self.check_gradients:
            return
        with strategy.scope():
            self.count = _replica_local_int()

    def _flagged(self, flags: tf.Tensor) -> None:
        self.count.assign_add(tf.cast(tf.reduce_sum(flags) > 0, tf.int64))

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        grad_bad = False
        if self.count is not None:
            count = int(self.count.numpy())
            grad_bad, self.seen = count > self.seen, count
        loss = float((logs or {}).get("loss", 0.0))
        loss_bad = not math.isfinite(loss) and self.policy == "stop"
        if self.policy == "stop" and (grad_bad or loss_bad):
            raise self._error("gradient" if grad_bad else "loss", loss)
        if grad_bad:
            log.warning(
                "tfdp: skipped optimizer step %d (epoch %d, step %d): non-finite gradient",
                self.global_step,
                self.epoch + 1,
                self.step + 1,
            )


def guard_for(
    model: keras.Model, policy: str, global_step: int, start: int, steps: int
) -> _NonFiniteGuard | None:
    """The guard of ``policy``, None for ``"ignore"``.

    ``"stop"`` fails the step in its graph; ``"skip"`` (and ``"stop"`` under
    XLA, which drops assertions) reads a count.
    """
    if policy == "ignore":
        return None
    counting = policy == "skip" or bool(model.jit_compile)
    return (_CountingGuard if counting else _AssertingGuard)(
        model, policy, global_step, start, steps
    )
