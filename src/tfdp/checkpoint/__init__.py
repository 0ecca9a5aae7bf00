"""Checkpoints of a data-parallel run: model, optimizer, global step and data position.

This package owns how tfdp saves and resumes a run: :class:`DataPosition` (where
in the data the run is: epoch, step within it, the sampler's state, and a
fingerprint of the data configuration that must match on resume),
:class:`CheckpointManager` (a ``tf.train.Checkpoint`` + ``tf.train.CheckpointManager``
holding the caller's trackables *and* the global step and data position, with
fallback past corrupt checkpoints and multi-worker saving), and
:class:`CheckpointCallback` (the same for ``model.fit``).

Exact mid-epoch resume: a checkpoint taken after step ``s`` of epoch ``e``
stores ``DataPosition(e, s)``; the resumed run rebuilds its input with
``DistributedInput.epoch(e, start_step=s)`` (custom loop) or
``DistributedInput.epochs(e, start_step=s)`` (``model.fit``) and continues
with exactly the batches the interrupted run would have seen next.

Elastic resume: the global batch ``B`` is the same at every world size, so
step ``s`` means global position ``s * B`` of the epoch's global list (stored
in the sampler state, with the world size whose list the epoch follows).
``restore(..., allow_world_size_change=True)`` accepts a checkpoint saved at
another world size with the same global batch, and
``DistributedInput.resume_from`` deals the rest of that epoch over the new
ranks.

The package holds one module per concern: ``position`` (the data position and
the configuration a resume compares), ``manager`` (saving and restoring, with
fallback past corrupt checkpoints, multi-worker saves and atomicity) and
``callback`` (the same for ``model.fit``).

Example:
    >>> import os, tempfile, keras
    >>> layer = keras.layers.Dense(1)
    >>> layer.build((None, 2))
    >>> manager = CheckpointManager(tempfile.mkdtemp(), layer=layer)
    >>> _ = manager.save(DataPosition(epoch=1, step=3, config={"seed": 0}), global_step=13)
    >>> position, step = manager.restore(expected_config={"seed": 0})
    >>> (position.epoch, position.step, step), os.path.basename(manager.restored)
    ((1, 3, 13), 'ckpt-13')
"""

from __future__ import annotations

from tfdp.checkpoint.callback import CheckpointCallback
from tfdp.checkpoint.manager import (
    CheckpointManager,
    CheckpointWarning,
    NonFiniteCheckpointError,
    keras_trackables,
    remove_interrupted_saves,
)
from tfdp.checkpoint.position import DataPosition, input_config

__all__ = [
    "CheckpointCallback",
    "CheckpointManager",
    "CheckpointWarning",
    "DataPosition",
    "NonFiniteCheckpointError",
    "input_config",
    "keras_trackables",
    "remove_interrupted_saves",
]
