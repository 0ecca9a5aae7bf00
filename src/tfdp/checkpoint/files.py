"""A checkpoint directory's files: their names, the ones on disk, reading one in full.

This module owns how tfdp's checkpoints are laid out on disk -- ``ckpt-<global
step>`` holding the caller's trackables plus the ``step`` and
``data_position`` variables, temporary directories named ``.tfdp_tmp_*`` --
and what reads them without a manager: :func:`numbered_on_disk`,
:func:`read_checkpoint` (every tensor checked, the tfdp fields parsed) and
:func:`remove_interrupted_saves`.

Example:
    >>> checkpoint_number("runs/x/checkpoints/ckpt-120"), checkpoint_number("model.keras")
    (120, None)
"""

from __future__ import annotations

import logging
import os
import re
from typing import Any

import tensorflow as tf

from tfdp._compat.keras import checkpoint_value_key
from tfdp.checkpoint.position import DataPosition
from tfdp.errors import StateError

logger = logging.getLogger("tfdp.checkpoint")

#: The names of the variables tfdp adds to a checkpoint, and the ones a caller may not use.
STEP_NAME = "step"
DATA_NAME = "data_position"
RESERVED = frozenset({STEP_NAME, DATA_NAME, "save_counter"})
_STEP_KEY = checkpoint_value_key(STEP_NAME)
_DATA_KEY = checkpoint_value_key(DATA_NAME)
#: Checkpoints are ``<directory>/ckpt-<global step>``.
CHECKPOINT_NAME = "ckpt"
#: Temporary directories (non-chief saves, write probes) start with this.
TMP_PREFIX = ".tfdp_tmp_"
_NUMBERED = re.compile(rf"{CHECKPOINT_NAME}-(\d+)\.index$")


def checkpoint_number(path: str) -> int | None:
    """N of a checkpoint path ``.../ckpt-N``, else None.

    Example:
        >>> checkpoint_number("ckpt-7")
        7
    """
    m = re.fullmatch(rf"{CHECKPOINT_NAME}-(\d+)", os.path.basename(path))
    return int(m.group(1)) if m else None


def numbered_on_disk(directory: str) -> dict[int, str]:
    """``{number: path}`` of the numbered checkpoints whose index file is in ``directory``.

    Example:
        >>> import tempfile
        >>> d = tempfile.mkdtemp(); open(os.path.join(d, "ckpt-3.index"), "w").close()
        >>> {n: os.path.basename(p) for n, p in numbered_on_disk(d).items()}
        {3: 'ckpt-3'}
    """
    try:
        names = tf.io.gfile.listdir(directory)
    except tf.errors.OpError:
        return {}
    return {
        int(m.group(1)): os.path.join(directory, m.group(0)[: -len(".index")])
        for m in map(_NUMBERED.match, names)
        if m
    }


def read_checkpoint(path: str) -> tuple[DataPosition, int]:
    """Read every tensor of ``path`` (each checked against its CRC) and its tfdp fields.

    A truncated data file makes TensorFlow's reader raise ``IndexError``
    ("Read less bytes than requested"), a missing or garbled file an
    ``OpError``, a flipped data byte an ``OpError`` (checksum mismatch).

    Raises:
        tfdp.errors.StateError: for a checkpoint without tfdp's fields, or a data
            position of another format.
    """
    reader = tf.train.load_checkpoint(path)
    names = reader.get_variable_to_shape_map()
    for name in sorted(names):
        reader.get_tensor(name)
    if _DATA_KEY not in names or _STEP_KEY not in names:
        raise StateError(
            f"{path} is not a tfdp checkpoint (no global step / data position in it: one "
            "CheckpointManager.save writes)"
        )
    position = DataPosition.from_json(reader.get_tensor(_DATA_KEY))
    return position, int(reader.get_tensor(_STEP_KEY))


def gfile_call(fn: Any, *args: Any) -> Any:
    """Run a ``tf.io.gfile`` call, turning TensorFlow's I/O errors into ``OSError``.

    Example:
        >>> gfile_call(tf.io.gfile.exists, "/nonexistent-tfdp-path")
        False
    """
    try:
        return fn(*args)
    except tf.errors.OpError as e:
        raise OSError(f"{type(e).__name__}: {e.message}") from e


def remove_interrupted_saves(directory: str) -> list[str]:
    """Delete the ``ckpt-N_temp`` folders that interrupted saves left in ``directory``.

    TensorFlow writes a checkpoint's shards into ``<prefix>_temp/`` and
    merges them into ``<prefix>.index`` / ``.data-*``; a process killed in
    between leaves the folder (empty, or with partial shards no checkpoint
    refers to). Call it only as the one writer of ``directory`` (``tfdp
    train`` does, holding the run directory's lock): a save in progress
    writes into such a folder.

    Returns:
        The folders removed.

    Example:
        >>> import tempfile
        >>> d = tempfile.mkdtemp(); os.makedirs(os.path.join(d, "ckpt-7_temp"))
        >>> [os.path.basename(p) for p in remove_interrupted_saves(d)], os.listdir(d)
        (['ckpt-7_temp'], [])
    """
    try:
        names = tf.io.gfile.listdir(directory)
    except tf.errors.OpError:
        return []
    removed = []
    for name in names:
        name = name.rstrip("/")
        if re.fullmatch(rf"{CHECKPOINT_NAME}-\d+_temp", name):
            path = os.path.join(directory, name)
            try:
                tf.io.gfile.rmtree(path)
                removed.append(path)
            except tf.errors.OpError as e:  # pragma: no cover - depends on the filesystem
                logger.warning("could not remove %s, left by an interrupted save: %s", path, e)
    if removed:
        logger.info("removed %d leftover(s) of interrupted saves: %s", len(removed), removed)
    return removed
