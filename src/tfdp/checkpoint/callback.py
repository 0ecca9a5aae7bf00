"""Checkpoints of ``model.fit``: :class:`CheckpointCallback` saves the exact data position.

Example:
    >>> issubclass(CheckpointCallback, keras.callbacks.Callback)
    True
"""

from __future__ import annotations

from typing import Any

import keras

from tfdp.checkpoint.manager import CheckpointManager
from tfdp.checkpoint.position import DataPosition, check_count


class CheckpointCallback(keras.callbacks.Callback):
    """Checkpoints ``model.fit`` every n steps with the exact data position, for mid-epoch resume.

    Counts the batches ``fit`` has trained on since ``start`` and saves
    ``DataPosition.from_input(inp, ...)`` of the absolute position reached, so
    the fit epochs need not coincide with the sampler epochs. Feed ``fit`` the
    matching stream: ``inp.epochs(start.epoch, start_step=start.step)``.

    Args:
        manager: The :class:`CheckpointManager` (whose trackables include the model).
        inp: The ``DistributedInput`` feeding ``fit``.
        every_n_steps: Save when the global step reaches a multiple of this.
        start: The data position ``fit`` starts from (a restored one); default
            epoch 0, step 0.
        global_step: The global step at ``start`` (a restored one); default 0.
        save_at_end: Also save when training ends (if not just saved).
        **extra_config: More fields for the saved configuration.

    Example:
        >>> restored = manager.restore(expected_config=input_config(inp))  # doctest: +SKIP
        >>> start, step = restored or (DataPosition(0, 0), 0)  # doctest: +SKIP
        >>> cb = CheckpointCallback(manager, inp, every_n_steps=100, start=start,
        ...                         global_step=step)  # doctest: +SKIP
        >>> model.fit(inp.epochs(start.epoch, start_step=start.step), callbacks=[cb],
        ...           steps_per_epoch=inp.steps_per_epoch, epochs=...)  # doctest: +SKIP
    """

    def __init__(
        self,
        manager: CheckpointManager,
        inp: Any,
        *,
        every_n_steps: int,
        start: DataPosition | None = None,
        global_step: int = 0,
        save_at_end: bool = True,
        **extra_config: Any,
    ) -> None:
        super().__init__()
        self.manager = manager
        self.inp = inp
        self.every_n_steps = check_count("every_n_steps", every_n_steps)
        self._start = start if start is not None else DataPosition(0, 0)
        self._step0 = check_count("global_step", global_step)
        self.save_at_end = bool(save_at_end)
        self.extra_config = extra_config
        self._done_before = 0  # batches of finished fit epochs
        self._in_epoch = 0  # batches of the current fit epoch
        self._saved_at: int | None = None

    @property
    def global_step(self) -> int:
        """The global step reached (``global_step`` + batches trained by ``fit`` so far)."""
        return self._step0 + self._done_before + self._in_epoch

    def position(self) -> DataPosition:
        """The data position reached so far."""
        done = self._done_before + self._in_epoch
        return DataPosition.from_input(
            self.inp, self._start.epoch, self._start.step + done, **self.extra_config
        )

    def _save(self) -> None:
        self.manager.save(self.position(), self.global_step)
        self._saved_at = self.global_step

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        """Start counting a new fit epoch's batches."""
        self._in_epoch = 0

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        """Save when a multiple of ``every_n_steps`` was reached."""
        self._in_epoch = int(batch) + 1
        if self.manager.should_save(self.global_step, self.every_n_steps):
            self._save()

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        """Add the fit epoch's batches to the count."""
        self._done_before += self._in_epoch
        self._in_epoch = 0

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        """Save the final position (unless it was just saved)."""
        if self.save_at_end and self._saved_at != self.global_step:
            self._save()
