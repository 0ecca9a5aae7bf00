"""The ``model.fit`` path: tfdp's input, resume and exact evaluation under Keras's own loop.

This module owns :func:`fit`, a thin driver around ``model.fit`` that keeps
the semantics of :class:`tfdp.train.Trainer`: every fit epoch is exactly one
sampler epoch (the input is an endless stream of reshuffled epochs with
``steps_per_epoch`` set, so fit keeps one iterator), checkpoints hold the data
position (epoch and step within it) and are written every N steps by a
callback, a run resumes mid-epoch (a short first ``fit`` call finishes the
interrupted epoch from the saved step, then the rest follows), and the
validation metrics come from tfdp's exact evaluation (padding weighted 0),
added to the epoch's logs before any user callback runs (so
``EarlyStopping(monitor="val_loss")``, ``CSVLogger`` and ``TensorBoard`` see
them). A step's gradient is the Trainer's: the mean over the step's rows
(Keras's own step averages every replica's own mean, which differs where
replicas hold unequal batches; :class:`tfdp.train.weighting.RowsWeighting`
makes it the mean over rows, and ``loss_weighting="replicas"`` keeps
Keras's, PyTorch DDP's). A float64 model trains in float64 (its compiled
loss must compute in it: :func:`tfdp.train.dtypes.check_compiled_loss`). It
returns a ``keras.callbacks.History``, as ``model.fit`` does.

Keras's own ``BackupAndRestore`` restores only at an epoch start; this path
resumes at the saved step. ``steps_per_execution > 1`` is left to Keras:
under MirroredStrategy on Keras 3.15 / TF 2.21 it fails with "You must feed a
value for placeholder tensor", so :func:`fit` refuses it with that reason;
use :class:`~tfdp.train.Trainer` (``steps_per_call``) for several steps per
call.

Example:
    >>> import numpy as np
    >>> from tfdp import ArraySource, DistributedInput
    >>> strategy = tf.distribute.get_strategy()
    >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    >>> model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    >>> src = ArraySource((np.random.rand(32, 3).astype("float32"), np.arange(32) % 2))
    >>> hist = fit(model, DistributedInput(strategy, src, batch_size=8), 2, verbose=0)
    >>> hist.epoch, list(hist.history)
    ([0, 1], ['loss'])
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

import keras
import tensorflow as tf

from tfdp._compat.keras import compiled_metrics_container, fit_step_overrides
from tfdp.checkpoint import (
    CheckpointCallback,
    CheckpointManager,
    DataPosition,
    input_config,
    keras_trackables,
)
from tfdp.distribute import worker_info
from tfdp.errors import ConfigError
from tfdp.input import DistributedInput
from tfdp.train.dtypes import check_compiled_loss, check_trainable, loss_dtype
from tfdp.train.evaluate import Evaluator, per_example_loss
from tfdp.train.fit_guard import guard_for
from tfdp.train.guard import check_policy
from tfdp.train.logs import is_terminal
from tfdp.train.weighting import RowsWeighting, check_loss_weighting


class _StopAt(keras.callbacks.Callback):
    """Stops ``fit`` once the global step reaches ``max_steps`` (a deliberate preemption).

    ``partial`` tells whether the stop fell inside an epoch: Keras still ends
    that epoch with ``on_epoch_end`` (and a history entry), which :func:`fit`
    then drops.
    """

    def __init__(self, global_step: int, max_steps: int | None, steps_per_epoch: int) -> None:
        super().__init__()
        self.global_step, self.max_steps = global_step, max_steps
        self.steps_per_epoch = steps_per_epoch
        self.in_epoch = 0
        self.stopped = False

    @property
    def partial(self) -> bool:
        return self.stopped and self.in_epoch < self.steps_per_epoch

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self.in_epoch = 0

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self.global_step += 1
        self.in_epoch += 1
        if self.max_steps is not None and self.global_step >= self.max_steps:
            self.stopped = True
            self.model.stop_training = True


class _EpochEndCheckpoint(CheckpointCallback):
    """:class:`tfdp.checkpoint.CheckpointCallback` that also saves at every epoch end."""

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        super().on_epoch_end(epoch, logs)
        if self._saved_at != self.global_step:
            self._save()


class _ExactValidation(keras.callbacks.Callback):
    """Adds the exact ``val_*`` to the epoch's logs; runs before every user callback."""

    def __init__(self, evaluator: Evaluator, eval_input: DistributedInput) -> None:
        super().__init__()
        self.evaluator, self.eval_input = evaluator, eval_input
        self.stopper: _StopAt | None = None

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        if self.stopper is not None and self.stopper.partial:
            return  # an epoch cut by max_steps: no validation of a partial epoch
        if logs is not None:
            for k, v in self.evaluator.evaluate(self.eval_input).items():
                logs[f"val_{k}"] = v


class _UserCallbacks(keras.callbacks.Callback):
    """The user's callbacks, seen as one training across :func:`fit`'s ``model.fit`` calls.

    A resumed run finishes the interrupted epoch in a first ``model.fit`` call and
    trains the rest in a second: the user's callbacks get ``on_train_begin``
    once (the first call's) and ``on_train_end`` once (sent by :meth:`end` after
    the last call), as from one ``model.fit``. An epoch cut by ``max_steps`` is
    not an epoch: its ``on_epoch_end`` (without ``val_*``; Keras sends it for a
    stopped epoch) is not forwarded, as the Trainer does not send one, and the
    history leaves it out. Every other hook is forwarded in order.
    """

    def __init__(self, callbacks: Sequence[keras.callbacks.Callback]) -> None:
        super().__init__()
        self.callbacks = list(callbacks)
        self.begun = False
        self.stopper: _StopAt | None = None

    def set_model(self, model: keras.Model) -> None:
        super().set_model(model)
        for cb in self.callbacks:
            cb.set_model(model)

    def set_params(self, params: dict[str, Any]) -> None:
        super().set_params(params)
        for cb in self.callbacks:
            cb.set_params(params)

    def on_train_begin(self, logs: Any = None) -> None:
        if not self.begun:
            self.begun = True
            self._send("on_train_begin", logs)

    def on_train_end(self, logs: Any = None) -> None:
        """Held back: :meth:`end` sends it once, after the last ``model.fit`` call."""

    def end(self, logs: dict[str, float]) -> None:
        """Sends ``on_train_end`` (with the last epoch's logs) if training began."""
        if self.begun:
            self._send("on_train_end", logs)

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        if self.stopper is None or not self.stopper.partial:
            self._send("on_epoch_end", epoch, logs)

    def _send(self, hook: str, *args: Any, **kwargs: Any) -> None:
        for cb in self.callbacks:
            getattr(cb, hook)(*args, **kwargs)


def _forward(hook: str) -> Any:
    def forward(self: _UserCallbacks, *args: Any, **kwargs: Any) -> None:
        self._send(hook, *args, **kwargs)

    forward.__name__ = hook
    return forward


for _hook in (
    "on_epoch_begin",
    "on_train_batch_begin",
    "on_train_batch_end",
    "on_batch_begin",
    "on_batch_end",
    "on_test_begin",
    "on_test_end",
    "on_test_batch_begin",
    "on_test_batch_end",
    "on_predict_begin",
    "on_predict_end",
    "on_predict_batch_begin",
    "on_predict_batch_end",
):
    setattr(_UserCallbacks, _hook, _forward(_hook))


def _step_overrides(*parts: dict[str, Any]) -> dict[str, Any]:
    """The wrappers of ``train_step`` / ``apply_gradients`` of several parts, composed.

    The first part's wrapper is the outermost: it runs first, then calls the next.
    """
    out: dict[str, Any] = {}
    for part in reversed(parts):
        for name, wrap in part.items():
            inner = out.get(name)
            out[name] = wrap if inner is None else (lambda o, w=wrap, i=inner: w(i(o)))
    return out


def _compiled_metrics(model: keras.Model, train_input: DistributedInput) -> list[Any]:
    """The user's compiled metrics (built by running one batch through Keras's container)."""
    container = compiled_metrics_container(model)
    if container is None:
        return []
    if not container.built:
        x, y = next(iter(train_input.rank_dataset(0)))[:2]
        container.build(y, model(x, training=False))
    return list(container.metrics)


def fit(
    model: keras.Model,
    train_input: DistributedInput,
    epochs: int,
    *,
    eval_input: DistributedInput | None = None,
    run_dir: str | os.PathLike[str] | None = None,
    checkpoint_every: int | None = None,
    max_to_keep: int = 3,
    resume: bool = True,
    max_steps: int | None = None,
    callbacks: Sequence[keras.callbacks.Callback] | None = None,
    verbose: int | str = "auto",
    on_nonfinite: str = "stop",
    loss_weighting: str = "rows",
) -> keras.callbacks.History:
    """Train a compiled model with ``model.fit`` on tfdp input, with mid-epoch resume.

    Args:
        model: A model compiled inside ``train_input.strategy.scope()``.
        train_input: The training input; its epochs become fit's epochs.
        epochs: Total epochs.
        eval_input: Exact validation after every epoch (``sampler="eval"``);
            metrics are reported as ``val_*`` in the history.
        run_dir: Checkpoints under ``run_dir/checkpoints``.
        checkpoint_every: Save every N steps (and at every epoch end).
        max_to_keep: Checkpoints kept.
        resume: Continue from the latest checkpoint in ``run_dir`` (saved at this
            or another world size with the same global batch: the interrupted epoch
            continues exactly).
        max_steps: Stop (saving a checkpoint) at this global step.
        callbacks: More Keras callbacks. They run after tfdp's own (the
            exact validation first), so ``EarlyStopping(monitor="val_loss")``,
            ``CSVLogger`` and ``TensorBoard`` see the ``val_*`` of every epoch.
            They see one training: ``on_train_begin`` / ``on_train_end`` once
            (also when a resumed run finishes its interrupted epoch in a first
            ``model.fit`` call), and no ``on_epoch_end`` for an epoch cut by
            ``max_steps``.
        verbose: Passed to ``model.fit`` (quiet on non-chief workers);
            ``"auto"`` is Keras's bar (1) when stdout is a terminal, else one
            plain line per epoch (2): no ANSI escapes in a redirected log.
        on_nonfinite: ``"stop"`` (default): a step whose gradient is NaN or
            infinite on any replica is not applied and :class:`NonFiniteError`
            names it, before any checkpoint of that step; a non-finite loss
            (from the batch logs) stops too. ``"skip"``: such steps are not
            applied (a warning each). ``"ignore"``: no check. Checkpoints never
            hold non-finite values either way.
        loss_weighting: ``"rows"`` (default): a step's gradient is that of
            the mean over all its rows, as the Trainer's (each replica's
            gradient scaled by its share of the step's rows before the
            all-reduce; where the batch dimension is dynamic, one scalar
            all-reduce per step). ``"replicas"``: Keras's own step, PyTorch
            DDP's weighting: the mean of every replica's own mean. They differ
            only where replicas hold unequal batches (an epoch resumed at
            another world size; see :mod:`tfdp.train.weighting`). Keras's
            reported ``loss`` is the mean over the rows either way.

    Returns:
        A ``keras.callbacks.History`` of the epochs completed in this call
        (an interrupted epoch finished first and the rest merged into one;
        an epoch cut by ``max_steps`` left out), also set as ``model.history``.

    Raises:
        tfdp.errors.ConfigError: for an uncompiled model, ``steps_per_execution > 1``,
            an input on several workers, float16 or complex variables, or a
            float64 model whose compiled loss computes in float32 (naming the
            types and the fix).
        tfdp.errors.StateError: for a checkpoint of another configuration.
        NonFiniteError: with ``on_nonfinite="stop"``, at the first non-finite step.
    """
    check_policy(on_nonfinite)
    check_loss_weighting(loss_weighting)
    strategy = train_input.strategy
    if getattr(model, "optimizer", None) is None or not getattr(model, "compiled", True):
        raise ConfigError(
            "must be compiled (model.compile inside strategy.scope()) before tfdp.train.fit",
            argument="model",
        )
    if int(getattr(model, "steps_per_execution", 1) or 1) > 1:
        raise ConfigError(
            "steps_per_execution > 1 fails under MirroredStrategy in Keras 3 ('You must "
            "feed a value for placeholder tensor'); compile with steps_per_execution=1, or use "
            "tfdp.train.Trainer(steps_per_call=...) for several steps per call",
            argument="model",
        )
    check_trainable(model)
    check_compiled_loss(model)
    info = worker_info(strategy)
    if info.num_workers > 1:
        raise ConfigError(
            "model.fit fails under MultiWorkerMirroredStrategy in Keras 3 (its train "
            "step reduces scalar logs along axis 0: tensorflow/tensorflow#72388); use "
            "tfdp.train.Trainer for multi-worker jobs",
            argument="train_input",
        )
    steps = train_input.steps_per_epoch
    start, global_step = DataPosition(0, 0), 0
    manager = None
    if run_dir is not None:
        if not model.optimizer.built:
            with strategy.scope():
                model.optimizer.build(model.trainable_variables)
        manager = CheckpointManager(
            os.path.join(os.fspath(run_dir), "checkpoints"),
            strategy=strategy,
            max_to_keep=max_to_keep,
            **keras_trackables(model, model.optimizer),
        )
        manager.check_writable()
        if resume:
            restored = manager.restore(
                expected_config=input_config(train_input, path="fit"),
                allow_world_size_change=True,
            )
            if restored is not None:
                start, global_step = restored
                train_input.resume_from(start.sampler, start.step)  # another world size's epoch
    epoch, step = start.epoch, start.step
    users = _UserCallbacks(callbacks or ())
    cbs: list[keras.callbacks.Callback] = [users]
    validation = None
    if eval_input is not None:
        evaluator = Evaluator(
            strategy,
            model,
            per_example_loss(model.loss, loss_dtype(model)),
            _compiled_metrics(model, train_input),
        )
        validation = _ExactValidation(evaluator, eval_input)
        cbs.insert(0, validation)  # val_* in the logs before any user callback reads them
    if verbose == "auto":
        verbose = 1 if is_terminal(sys.stdout) else 2
    verbose = verbose if info.is_chief else 0
    history: dict[str, list[float]] = {}
    epochs_done: list[int] = []
    guard = guard_for(model, on_nonfinite, global_step, epoch * steps + step, steps)

    def run(dataset: Any, first: int, last: int, steps_per_epoch: int) -> bool:
        nonlocal global_step, start
        stopper = _StopAt(global_step, max_steps, steps_per_epoch)
        users.stopper = stopper
        if validation is not None:
            validation.stopper = stopper
        extra: list[keras.callbacks.Callback] = [stopper]
        if guard is not None:
            extra.insert(0, guard)  # the guard before any save
        if manager is not None:
            extra.append(
                _EpochEndCheckpoint(
                    manager,
                    train_input,
                    every_n_steps=checkpoint_every or 2**62,
                    start=start,
                    global_step=global_step,
                    path="fit",
                )
            )
        try:
            hist = model.fit(
                dataset,
                epochs=last,
                initial_epoch=first,
                steps_per_epoch=steps_per_epoch,
                callbacks=[*extra, *cbs],
                verbose=verbose,
                shuffle=False,
            )
        except tf.errors.InvalidArgumentError as failure:  # the guard's in-graph check?
            error = guard.error(failure) if guard is not None else None
            if error is None:
                raise
            raise error from None
        for k, v in hist.history.items():
            # Keras ends an epoch cut by stop_training with on_epoch_end too: drop that entry.
            history.setdefault(k, []).extend(v[:-1] if stopper.partial else v)
        epochs_done.extend(hist.epoch[:-1] if stopper.partial else hist.epoch)
        done = stopper.global_step - global_step
        reached = DataPosition.from_input(train_input, start.epoch, start.step + done)
        start = DataPosition(reached.epoch, reached.step)
        global_step = stopper.global_step
        return not stopper.stopped and not model.stop_training

    weighting = RowsWeighting(strategy.num_replicas_in_sync)
    overrides = _step_overrides(
        # The rows' factor scales each replica's gradient before the guard all-reduces it.
        {"train_step": weighting.train_step, "apply_gradients": weighting.apply_gradients}
        if loss_weighting == "rows" and strategy.num_replicas_in_sync > 1
        else {},
        guard.overrides(strategy) if guard is not None else {},
    )
    with fit_step_overrides(model, **overrides):
        if epoch < epochs and step > 0 and (max_steps is None or global_step < max_steps):
            # finish the interrupted epoch first
            interrupted = train_input.epoch_steps(epoch)  # another world size's, when resumed so
            go_on = run(train_input.epoch(epoch, step), epoch, epoch + 1, interrupted - step)
            epoch += 1
        else:
            go_on = True
        if go_on and epoch < epochs and (max_steps is None or global_step < max_steps):
            run(train_input.epochs(epoch, epochs - epoch), epoch, epochs, steps)
    users.end({key: values[-1] for key, values in history.items() if values})
    result = keras.callbacks.History()
    result.set_model(model)
    result.history, result.epoch = history, epochs_done
    model.history = result
    return result
