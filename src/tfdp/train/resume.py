"""A run's checkpoints as the training loop uses them: its data position saved, resumed exactly.

This module owns :class:`RunCheckpoints`, the bridge between the loop's
counts (epoch, optimizer step in it, global step) and a
:class:`~tfdp.train.parts.Checkpoints` part: a save stores the batch position
in the sampler epoch (optimizer steps times ``accumulation_steps``) and the
input's configuration (:func:`tfdp.checkpoint.input_config`); a restore checks
that configuration, deals the rest of an epoch saved at another world size over
this input's replicas (:meth:`tfdp.DistributedInput.resume_from`), keeps
``metrics.jsonl`` to the lines up to the restored step, and says where the run
resumes (:func:`where`: epochs counted from 1, as in the epoch lines).

Example:
    >>> import tempfile, keras, numpy as np
    >>> from tfdp import ArraySource, DistributedInput
    >>> from tfdp.checkpoint import CheckpointManager
    >>> from tfdp.train.logs import TrainLogs
    >>> inp = DistributedInput(None, ArraySource(np.zeros((12, 1), "float32")), batch_size=2)
    >>> layer = keras.layers.Dense(1); layer.build((None, 1))
    >>> run = RunCheckpoints(CheckpointManager(tempfile.mkdtemp(), layer=layer), 2,
    ...                      TrainLogs(None, verbose=0, progress=False))
    >>> run.restore(inp) is None  # nothing saved yet
    True
    >>> run.save(inp, epoch=1, step=1, global_step=4)  # step 1 of 3 of epoch 1: batch 2
    >>> run.restore(inp)
    (1, 1, 4)
"""

from __future__ import annotations

from typing import Any

from tfdp.errors import StateError
from tfdp.train.parts import Checkpoints, RunLog


def where(epoch: int, step: int, global_step: int) -> str:
    """Where training stands, for the console: epochs counted from 1, as in the epoch lines.

    ``epoch`` counts from 0 and ``step`` is the optimizer steps done in it.

    Example:
        >>> where(1, 4, 20)
        'in epoch 2, after its step 4 (global step 20)'
        >>> where(2, 0, 30)
        'at the start of epoch 3 (global step 30)'
    """
    at = (
        f"in epoch {epoch + 1}, after its step {step}"
        if step
        else f"at the start of epoch {epoch + 1}"
    )
    return f"{at} (global step {int(global_step)})"


class RunCheckpoints:
    """The loop's save and exact resume of a run through a :class:`Checkpoints` part.

    Args:
        checkpoints: The checkpoints (None: the run has none; nothing is saved
            or restored).
        accumulation_steps: Micro-batches per optimizer step: a saved position
            counts batches, the loop optimizer steps.
        logs: Where a resume is told, and whose records past the restored step
            are dropped.

    Example:
        See the module docstring.
    """

    def __init__(
        self, checkpoints: Checkpoints | None, accumulation_steps: int, logs: RunLog
    ) -> None:
        self.checkpoints = checkpoints
        self.accumulation_steps = accumulation_steps
        self.logs = logs
        self._writable = False

    def ready(self) -> Checkpoints | None:
        """The checkpoints, their directory checked writable (once) before they are used."""
        if self.checkpoints is not None and not self._writable:
            self.checkpoints.check_writable()
            self._writable = True
        return self.checkpoints

    def _config(self, train_input: Any) -> dict[str, Any]:
        from tfdp.checkpoint import input_config

        return input_config(
            train_input, accumulation_steps=self.accumulation_steps, seed=train_input.seed
        )

    def position(self, train_input: Any, epoch: int, step: int) -> Any:
        """The data position saved after optimizer step ``step`` of ``epoch``.

        A :class:`tfdp.checkpoint.DataPosition` holding the batch position in
        the sampler epoch (optimizer steps times ``accumulation_steps``, at most
        the epoch's batches).
        """
        from tfdp.checkpoint import DataPosition

        k = self.accumulation_steps
        return DataPosition.from_input(  # the batch position in the sampler epoch
            train_input,
            epoch,
            min(step * k, train_input.epoch_steps(epoch)),
            accumulation_steps=k,
            seed=train_input.seed,
        )

    def save(self, train_input: Any, *, epoch: int, step: int, global_step: int) -> None:
        """Save after optimizer step ``step`` of ``epoch`` (``global_step`` in all)."""
        checkpoints = self.ready()
        if checkpoints is None:
            return
        checkpoints.save(self.position(train_input, epoch, step), global_step)

    def restore(self, train_input: Any) -> tuple[int, int, int] | None:
        """``(epoch, optimizer step in it, global step)`` of the latest checkpoint, or None.

        The saved data position must match ``train_input`` (global batch size,
        sampler configuration), else a :class:`tfdp.errors.StateError` names
        what differs; ``train_input`` then continues that position
        (:meth:`tfdp.DistributedInput.resume_from`). ``metrics.jsonl`` keeps the
        lines up to the restored step (none when nothing is restored).

        Raises:
            tfdp.errors.StateError: a configuration that differs (naming the
                fields), or a position inside an optimizer step of
                ``accumulation_steps`` micro-batches.
        """
        checkpoints = self.ready()
        if checkpoints is None:
            return None
        restored = checkpoints.restore(
            expected_config=self._config(train_input), allow_world_size_change=True
        )
        if restored is None:
            self.logs.truncate(0)
            return None
        position, global_step = restored
        train_input.resume_from(position.sampler, position.step)  # another world size's epoch
        if position.step % self.accumulation_steps:
            raise StateError(
                f"checkpoint {checkpoints.latest} stores batch {position.step} of epoch "
                f"{position.epoch + 1}, not the start of an optimizer step of "
                f"accumulation_steps={self.accumulation_steps} micro-batches"
            )
        epoch, step = position.epoch, position.step // self.accumulation_steps
        self.logs.truncate(int(global_step))
        self.logs.print(f"resumed from {checkpoints.restored}: {where(epoch, step, global_step)}")
        return epoch, step, int(global_step)

    def latest_note(self) -> str:
        """``"; the latest checkpoint, <path>, is from before it"`` (or that none was written).

        For the message of a step that was not applied; empty without checkpoints.
        """
        checkpoints = self.ready()
        if checkpoints is None:
            return ""
        latest = checkpoints.latest
        return (
            f"; the latest checkpoint, {latest}, is from before it"
            if latest
            else "; no checkpoint was written"
        )
