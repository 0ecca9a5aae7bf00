"""The parts a :class:`tfdp.train.Trainer` is handed, as Protocols.

This module owns the contracts between the outer loop (:mod:`tfdp.train.loop`:
epochs, checkpoints, the stop agreement, resume) and the parts it drives, in
the way Orbit's ``Controller`` is handed its trainer, evaluator, checkpoint
manager and summary manager. ``Trainer(strategy, model, optimizer, loss, ...)``
builds tfdp's own parts (:func:`tfdp.train.assemble.default_parts`);
:meth:`tfdp.train.Trainer.from_parts` takes any that meet these contracts.

==============  ===============================================  ===================================
Protocol        what the loop does with it                       tfdp's part
==============  ===============================================  ===================================
StepRunner      binds compiled calls of ``n`` optimizer steps of  :class:`tfdp.train.step.TrainStep`
                ``group`` micro-batches to the training stream,
                each returning :class:`StepOutputs`; its model,
                optimizer and epoch metrics
EpochEvaluator  evaluates the model after every epoch (``val_*``) :class:`tfdp.train.Evaluator`
Checkpoints     saves and restores the run with its data          :class:`tfdp.checkpoint.CheckpointManager`
                position
RunLog          console lines, progress bar, ``metrics.jsonl``,   :class:`tfdp.train.logs.TrainLogs`
                TensorBoard, the sample-id record
==============  ===============================================  ===================================

A call's results are :class:`StepOutputs`, named as Orbit's trainer names
the outputs its controller logs: the loss, the non-finite flags, each
replica's own loss, and any scalar a step adds (``scalars``), which the loop
and the logs tell by name -- the step line, TensorBoard's ``batch_<name>``
and the epoch's record (``metrics.jsonl``) -- so that a new quantity is
added in the step alone. The actions -- Keras callbacks and ``on_step`` --
are handed to each :meth:`tfdp.train.Trainer.fit` call, as ``model.fit``
takes its callbacks. Importing this module loads no TensorFlow.

Example:
    >>> class Quiet:  # a RunLog that tells nothing
    ...     verbose, log_every, record_samples = 0, 0, None
    ...     def print(self, text): ...
    ...     def epoch_begin(self, epoch, steps_per_epoch): ...
    ...     def steps_end(self, **progress): ...
    ...     def epoch_end(self, record): ...
    ...     def truncate(self, global_step): ...
    ...     def write_ids(self, ids, epoch, first_step, world): ...
    ...     def close(self): ...
    >>> isinstance(Quiet(), RunLog), isinstance(Quiet(), Checkpoints)
    (True, False)
"""  # noqa: E501

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = [
    "Checkpoints",
    "EpochEvaluator",
    "RunLog",
    "StepOutputs",
    "StepRunner",
    "TrainerParts",
]

#: The names :meth:`StepOutputs.from_named` reads as fields; any other name is a scalar.
_FIELDS = ("loss", "loss_nonfinite", "gradient_nonfinite", "replica_losses", "ids")


@dataclass(frozen=True)
class StepOutputs:
    """What the optimizer steps of one compiled call produced, by name: one row per step.

    A :class:`StepRunner`'s call returns it (host values, NumPy); the loop
    checks the flags, hands the state its losses, and tells :meth:`told` --
    the loss and every scalar, by name -- to the logs, which show each on the
    step line, as TensorBoard's ``batch_<name>`` and (the mean over the
    epoch's applied steps) in the epoch's record. A quantity a step adds to
    ``scalars`` reaches all of them with no other change.

    Attributes:
        loss: ``[n]``: each step's loss, the weighted mean its gradient is of
            (all-reduced: what every replica holds).
        loss_nonfinite: ``[n]``: whether the step's loss was NaN or infinite.
        gradient_nonfinite: ``[n]``: whether its gradient was (a flagged step
            is not applied).
        replica_losses: ``[n, replicas]``: each replica's own loss of the
            step, in global replica order -- its mean over its own rows, as
            each rank of a PyTorch DDP run computes and logs its loss
            (``[n, 0]`` from a step that does not say).
        scalars: ``name -> [n]``: the quantities a step adds (tfdp's:
            ``grad_norm``, the global norm of the all-reduced gradient
            before clipping, when it clips).
        ids: ``[n, micro-batches, replicas * B]``: the example ids of every
            step, -1 where a batch is partial; None unless recorded.

    Example:
        >>> out = StepOutputs.from_named({"loss": [0.5, float("nan")], "loss_nonfinite": [0, 1],
        ...                               "grad_norm": [2.0, 3.0]})
        >>> out.flagged.tolist(), out.told(~out.flagged)
        ([False, True], {'loss': [0.5], 'grad_norm': [2.0]})
    """

    loss: np.ndarray
    loss_nonfinite: np.ndarray
    gradient_nonfinite: np.ndarray
    replica_losses: np.ndarray
    scalars: Mapping[str, np.ndarray] = field(default_factory=dict)
    ids: np.ndarray | None = None

    @classmethod
    def from_named(cls, named: Mapping[str, Any]) -> StepOutputs:
        """The record of a call's outputs by name (tensors or arrays, ``[n, ...]`` each).

        ``loss`` is required; the flags default to False, ``replica_losses``
        to ``[n, 0]``, ``ids`` to None; every other name is a scalar.
        """
        loss = np.asarray(named["loss"])
        n = len(loss)

        def flag(name: str) -> np.ndarray:
            value = named.get(name)
            return np.zeros(n, bool) if value is None else np.asarray(value) != 0

        replica = named.get("replica_losses")
        ids = named.get("ids")
        return cls(
            loss=loss,
            loss_nonfinite=flag("loss_nonfinite"),
            gradient_nonfinite=flag("gradient_nonfinite"),
            replica_losses=np.zeros((n, 0)) if replica is None else np.asarray(replica),
            scalars={k: np.asarray(v) for k, v in named.items() if k not in _FIELDS},
            ids=None if ids is None else np.asarray(ids),
        )

    def __len__(self) -> int:
        """The steps of the call (a ``"stop"`` call that ended at a flagged step: up to it)."""
        return len(self.loss)

    @property
    def flagged(self) -> np.ndarray:
        """``[n]``: the steps whose loss or gradient was non-finite (not applied)."""
        return self.loss_nonfinite | self.gradient_nonfinite

    def told(self, steps: np.ndarray) -> dict[str, list[float]]:
        """``{"loss": [...], name: [...]}`` of the ``steps`` selected (a mask), as logs get it."""
        every = bool(steps.all())  # the common case: no mask to apply
        out = {"loss": (self.loss if every else self.loss[steps]).tolist()}
        out.update((k, (v if every else v[steps]).tolist()) for k, v in self.scalars.items())
        return out


@runtime_checkable
class StepRunner(Protocol):
    """The inner loop: compiled calls of optimizer steps on every replica.

    ``bind(iterator, spec, group, n, with_ids, width)`` returns a call
    ``() -> StepOutputs`` running ``n`` optimizer steps of ``group``
    micro-batches each from ``iterator`` (``spec``: the element structure the
    call is traced for): per step its loss, its non-finite flags, each
    replica's own loss and the step's scalars (:class:`StepOutputs`), and,
    with ``width`` (the per-replica batch recorded), the steps' ids. A call
    with ``on_nonfinite="stop"`` ends at the first flagged step.
    ``train_loss`` and ``metrics`` are the epoch's training metrics the steps
    update.

    Example:
        >>> class Halves:  # every step's loss 0.5, nothing flagged
        ...     strategy = model = optimizer = train_loss = None
        ...     metrics, on_nonfinite = [], "stop"
        ...     def bind(self, iterator, spec, group, n, with_ids=False, width=0):
        ...         return lambda: StepOutputs.from_named({"loss": [0.5] * n})
        >>> isinstance(Halves(), StepRunner), Halves().bind(None, "", 1, 2)().loss.tolist()
        (True, [0.5, 0.5])
    """

    strategy: Any
    model: Any
    optimizer: Any
    train_loss: Any
    metrics: list[Any]
    on_nonfinite: str

    def bind(
        self, iterator: Any, spec: str, group: int, n: int, with_ids: bool = False, width: int = 0
    ) -> Callable[[], StepOutputs]:
        """``() -> StepOutputs``: ``n`` optimizer steps of ``group`` micro-batches, bound once."""
        ...


@runtime_checkable
class EpochEvaluator(Protocol):
    """Evaluates the model on a held-out input: ``{"loss": ..., metric: ...}``.

    Example:
        >>> class Constant:
        ...     def evaluate(self, eval_input):
        ...         return {"loss": 0.0}
        >>> isinstance(Constant(), EpochEvaluator)
        True
    """

    def evaluate(self, eval_input: Any) -> dict[str, float]:
        """The metrics of one pass over ``eval_input`` (exact: padding weighted 0)."""
        ...


@runtime_checkable
class Checkpoints(Protocol):
    """Saves and restores a run together with its global step and data position.

    ``save(position, global_step)`` is called on every worker (it may run
    collectives); ``restore`` returns ``(position, global_step)`` of the
    newest readable checkpoint whose data configuration matches, or None;
    ``latest`` and ``restored`` name checkpoints in messages.

    Example:
        >>> import tempfile, keras
        >>> from tfdp.checkpoint import CheckpointManager
        >>> isinstance(CheckpointManager(tempfile.mkdtemp(), model=keras.layers.Dense(1)),
        ...            Checkpoints)
        True
    """

    @property
    def latest(self) -> str | None:
        """The newest checkpoint, or None."""
        ...

    restored: str | None

    def check_writable(self) -> None:
        """Fail now, naming the directory, if a save could not be written."""
        ...

    def save(self, position: Any, global_step: int) -> str:
        """Save the run at ``global_step`` with its data ``position``."""
        ...

    def restore(
        self,
        expected_config: Mapping[str, Any] | None = None,
        *,
        partial: bool = False,
        allow_world_size_change: bool = False,
    ) -> tuple[Any, int] | None:
        """``(position, global_step)`` of the checkpoint restored, or None when there is none."""
        ...


@runtime_checkable
class RunLog(Protocol):
    """What the loop tells: console lines, progress, per-epoch records, sample ids.

    ``log_every`` (0: never) makes the loop cut its calls to land on those
    steps; ``record_samples`` (None: off) makes it fetch every step's ids for
    :meth:`write_ids`; ``verbose`` is what Keras callbacks see in their params.

    Example:
        >>> from tfdp.train.logs import TrainLogs
        >>> isinstance(TrainLogs(None, progress=False), RunLog)
        True
    """

    verbose: int
    log_every: int
    record_samples: str | None

    def print(self, text: str) -> None:
        """A line on the console."""
        ...

    def epoch_begin(self, epoch: int, steps_per_epoch: int) -> None:
        """An epoch of ``steps_per_epoch`` optimizer steps starts."""
        ...

    def steps_end(
        self,
        *,
        epoch: int,
        step: int,
        global_step: int,
        values: Mapping[str, Sequence[float]],
        samples: int,
        lr: float,
        epoch_loss: float | None = None,
    ) -> None:
        """A compiled call ended after optimizer step ``step`` of ``epoch``.

        ``values`` are :meth:`StepOutputs.told` of the call's applied steps:
        ``loss`` and every scalar of the step, by name.
        """
        ...

    def epoch_end(self, record: dict[str, Any]) -> None:
        """The epoch's record (as in ``metrics.jsonl``)."""
        ...

    def truncate(self, global_step: int) -> None:
        """Forget what was told past ``global_step`` (a resume goes back there)."""
        ...

    def write_ids(self, ids: Any, epoch: int, first_step: int, world: int) -> None:
        """Record the example ids of the call's steps."""
        ...

    def close(self) -> None:
        """Flush what is open (``fit`` ends)."""
        ...


@dataclass
class TrainerParts:
    """The parts of a :class:`tfdp.train.Trainer`, as :meth:`~tfdp.train.Trainer.from_parts` takes.

    Attributes:
        step: The inner loop (:class:`StepRunner`).
        evaluator: The exact evaluation after every epoch (:class:`EpochEvaluator`).
        logs: What training tells (:class:`RunLog`).
        checkpoints: Where the run is saved (:class:`Checkpoints`), or None: no
            checkpoints, no resume.

    Example:
        >>> sorted(TrainerParts.__dataclass_fields__)
        ['checkpoints', 'evaluator', 'logs', 'step']
    """

    step: StepRunner
    evaluator: EpochEvaluator
    logs: RunLog
    checkpoints: Checkpoints | None = None
