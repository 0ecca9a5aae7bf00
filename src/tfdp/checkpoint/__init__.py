"""Checkpoints of a data-parallel run: model, optimizer, global step and data position.

This module owns how tfdp saves and resumes a run: :class:`DataPosition` (where
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

Multi-worker (``MultiWorkerMirroredStrategy``), as TensorFlow's multi-worker
guide prescribes: every worker calls :meth:`CheckpointManager.save` (saving
may run collectives, e.g. to read sync-on-read variables), but only the chief
writes to ``directory``; the other workers write to a private temporary
directory inside it and delete it after the save. Restoring reads the chief's
``directory`` on every worker, so **the directory must be on a filesystem all
workers share** (NFS, GCS, ...) for multi-worker resume.

Atomicity: TensorFlow writes a checkpoint's data and index files first and
only then (atomically) rewrites the ``checkpoint`` state file naming the
newest one, so a crash mid-save leaves the previous checkpoint the latest one;
leftover temporary files are ignored.

Example:
    >>> import tempfile, keras
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> manager = CheckpointManager(tempfile.mkdtemp(), model=model)
    >>> manager.restore() is None  # nothing saved yet: start from scratch
    True
    >>> path = manager.save(DataPosition(epoch=0, step=5, config={"batch_size": 8}), 5)
    >>> manager.restore(expected_config={"batch_size": 8})
    (DataPosition(epoch=0, step=5, sampler=None, config={'batch_size': 8}), 5)
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
