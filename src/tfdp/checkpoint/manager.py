"""The checkpoint manager of a data-parallel run: trackables, global step and data position.

This module owns :class:`CheckpointManager` (a ``tf.train.Checkpoint`` +
``tf.train.CheckpointManager`` holding the caller's trackables *and* the global
step and :class:`~tfdp.checkpoint.DataPosition`, with fallback past corrupt
checkpoints, a refusal to save non-finite values, and multi-worker saving);
the files' names and reading are :mod:`tfdp.checkpoint.files`'s, what is saved
of a Keras model :mod:`tfdp.checkpoint.trackables`'s.

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

import logging
import os
import uuid
import warnings
from collections.abc import Mapping
from typing import Any

import tensorflow as tf

from tfdp._compat.graph import call_outside_strategy
from tfdp.checkpoint.files import (
    CHECKPOINT_NAME,
    DATA_NAME,
    RESERVED,
    STEP_NAME,
    TMP_PREFIX,
    checkpoint_number,
    gfile_call,
    numbered_on_disk,
    read_checkpoint,
)
from tfdp.checkpoint.position import DataPosition, check_count, check_input_config
from tfdp.checkpoint.trackables import float_variables
from tfdp.distribute import resolver_role
from tfdp.errors import CheckpointError, ConfigError, ConfigTypeError, StateError

logger = logging.getLogger("tfdp.checkpoint")


class NonFiniteCheckpointError(CheckpointError):
    """A save was refused: variables hold NaN or infinite values (the latest checkpoint stays).

    Example:
        >>> issubclass(NonFiniteCheckpointError, CheckpointError)
        True
    """


class CheckpointWarning(UserWarning):
    """A checkpoint was skipped (corrupt or truncated) and an older one is used.

    Example:
        >>> import warnings
        >>> warnings.simplefilter("error", CheckpointWarning)  # make fallbacks fatal
    """


class CheckpointManager:
    """Saves and restores the caller's trackables together with the global step and data position.

    Wraps a ``tf.train.Checkpoint(**trackables, step=<int64 Variable>,
    data_position=<string Variable holding DataPosition JSON>)`` and a
    ``tf.train.CheckpointManager``. Checkpoints are named ``ckpt-<global
    step>``. The step and data variables are plain host variables whether the
    manager is created inside or outside a ``strategy.scope()``.

    Multi-worker: call :meth:`save` on every worker; the chief writes to
    ``directory``, the others to a temporary directory inside it that is
    deleted after each save. :meth:`restore` reads ``directory`` on every
    worker: it must be on a shared filesystem.

    Args:
        directory: Where the checkpoints live (local path or any ``tf.io.gfile``
            URL such as ``gs://``).
        strategy: The ``tf.distribute`` strategy; its cluster resolver decides
            which worker is the chief. ``None`` means the current strategy (or,
            outside any scope, the ``TF_CONFIG`` environment variable).
        max_to_keep: Checkpoints kept (oldest deleted first); ``None`` keeps all.
        read_only: Only restore (e.g. to evaluate while training runs): the
            manager writes nothing to ``directory``, and :meth:`save` is refused.
        **trackables: What to save, e.g. ``model=model, optimizer=optimizer``
            (any ``tf.train.Checkpoint`` argument except ``step``,
            ``data_position`` and ``save_counter``, which are reserved).

    Raises:
        tfdp.errors.ConfigError: for a reserved trackable name, no trackables, or a bad
            ``max_to_keep``.

    Example:
        >>> import tempfile, keras
        >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
        >>> opt = keras.optimizers.Adam(); opt.build(model.trainable_variables)
        >>> manager = CheckpointManager(tempfile.mkdtemp(), model=model, optimizer=opt)
        >>> manager.check_writable()
        >>> for step in range(1, 7):
        ...     # ... train one step ...
        ...     if manager.should_save(step, every_n_steps=3):
        ...         _ = manager.save(DataPosition(epoch=0, step=step), global_step=step)
        >>> [os.path.basename(p) for p in manager.checkpoints]
        ['ckpt-3', 'ckpt-6']
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        strategy: tf.distribute.Strategy | None = None,
        max_to_keep: int | None = 3,
        read_only: bool = False,
        **trackables: Any,
    ) -> None:
        if not tf.executing_eagerly():
            raise RuntimeError("CheckpointManager must be created eagerly, not in a tf.function")
        reserved = sorted(RESERVED & set(trackables))
        if reserved:
            raise ConfigError(
                f"the name(s) {reserved} are reserved by tfdp's CheckpointManager "
                "(it stores the global step and data position itself); use other names",
                argument="trackables",
            )
        if not trackables:
            raise ConfigError(
                "nothing to checkpoint; pass trackables, e.g. model=..., optimizer=...",
                argument="trackables",
            )
        if max_to_keep is not None and (
            isinstance(max_to_keep, bool) or not isinstance(max_to_keep, int) or max_to_keep < 1
        ):
            raise ConfigError(
                f"must be an integer >= 1 or None, got {max_to_keep!r}",
                argument="max_to_keep",
            )
        self.directory = os.fspath(directory)
        self.strategy = strategy if strategy is not None else tf.distribute.get_strategy()
        self.max_to_keep = max_to_keep
        resolver = getattr(self.strategy, "cluster_resolver", None)
        if resolver is None and strategy is None and os.environ.get("TF_CONFIG"):
            # No strategy given and none in scope, in a multi-worker job: TF_CONFIG decides,
            # so that only the chief writes even then.
            resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        self.is_chief, self.task_type, self.task_id = resolver_role(resolver)

        def make() -> tuple[tf.Variable, tf.Variable, tf.train.Checkpoint]:
            with tf.device("/cpu:0"):  # a string variable has no GPU kernels
                step = tf.Variable(0, dtype=tf.int64, trainable=False, name="tfdp_step")
                data = tf.Variable("", dtype=tf.string, trainable=False, name="tfdp_data_position")
                ckpt = tf.train.Checkpoint(**trackables, **{STEP_NAME: step, DATA_NAME: data})
                _ = ckpt.save_counter  # else created lazily, maybe in a strategy scope
            return step, data, ckpt

        self._step, self._data, self.checkpoint = call_outside_strategy(make)
        self._manager: tf.train.CheckpointManager | None = None
        self.read_only = bool(read_only)
        if self.is_chief and not self.read_only:
            self._manager = self._tf_manager()
        self._last_saved_step: int | None = None
        self._trackables = dict(trackables)
        #: The checkpoint the last :meth:`restore` restored (after any fallback), or None.
        self.restored: str | None = None

    # -- where ------------------------------------------------------------------
    @property
    def write_directory(self) -> str:
        """Where this worker writes: ``directory`` on the chief, a temporary directory elsewhere.

        Example:
            >>> import tempfile, keras
            >>> m = CheckpointManager(tempfile.mkdtemp(), model=keras.layers.Dense(1))
            >>> m.write_directory == m.directory  # single process: the chief
            True
        """
        if self.is_chief:
            return self.directory
        name = f"{TMP_PREFIX}{self.task_type}_{self.task_id}"
        return os.path.join(self.directory, name)

    @property
    def checkpoints(self) -> list[str]:
        """The managed checkpoint paths in ``directory``, oldest first (read from disk).

        What the ``checkpoint`` state file lists; empty when it is missing or
        unreadable (:meth:`restore` then looks at the files themselves).

        Example:
            >>> import tempfile, keras
            >>> CheckpointManager(tempfile.mkdtemp(), model=keras.layers.Dense(1)).checkpoints
            []
        """
        state = self._state()
        if state is None:
            return []
        return list(state.all_model_checkpoint_paths) or [state.model_checkpoint_path]

    @property
    def latest(self) -> str | None:
        """The newest checkpoint path the state file names, or None.

        Example:
            >>> import tempfile, keras
            >>> CheckpointManager(tempfile.mkdtemp(), model=keras.layers.Dense(1)).latest is None
            True
        """
        state = self._state()
        return None if state is None else state.model_checkpoint_path

    @property
    def state_file(self) -> str:
        """The ``checkpoint`` state file that names the checkpoints (written by TensorFlow)."""
        return os.path.join(self.directory, "checkpoint")

    def _state(self) -> Any:
        """The parsed state file, or None when it is missing, empty or unreadable."""
        try:
            state = tf.train.get_checkpoint_state(self.directory)
        except (ValueError, UnicodeDecodeError, tf.errors.OpError):  # empty / binary garbage
            return None
        if state is None or not state.model_checkpoint_path:
            return None
        return state

    def _tf_manager(self) -> tf.train.CheckpointManager:
        """TensorFlow's manager (the chief's writer); an unreadable state file is set aside.

        TensorFlow's manager reads the state file when it is created and
        fails on an empty or binary one. Such a file is renamed to
        ``checkpoint.unreadable-<id>`` (kept, not deleted) with a warning;
        the next save writes a new state file, and :meth:`restore` finds the
        checkpoints on disk meanwhile.
        """
        try:
            return tf.train.CheckpointManager(
                self.checkpoint, self.directory, self.max_to_keep, checkpoint_name=CHECKPOINT_NAME
            )
        except (ValueError, UnicodeDecodeError, tf.errors.OpError) as e:
            aside = f"{self.state_file}.unreadable-{uuid.uuid4().hex[:8]}"
            try:
                gfile_call(tf.io.gfile.rename, self.state_file, aside)
            except OSError:
                raise CheckpointError(
                    f"checkpoint state file {self.state_file} is unreadable ({e}) and could not "
                    "be moved aside; move or delete it (the checkpoints themselves are found "
                    "without it)"
                ) from e
            self._warn(
                f"checkpoint state file {self.state_file} is unreadable "
                f"({type(e).__name__}: {' '.join(str(e).split())[:120]}); kept as {aside}, the "
                "checkpoints in the directory are used instead"
            )
            return tf.train.CheckpointManager(
                self.checkpoint, self.directory, self.max_to_keep, checkpoint_name=CHECKPOINT_NAME
            )

    # -- writing ----------------------------------------------------------------
    def check_writable(self) -> None:
        """Create ``directory`` and write and remove a probe file: fail now, not at the first save.

        Call it on every worker before the first step (non-chief workers write
        their temporary checkpoints inside ``directory`` too).

        Raises:
            CheckpointError: naming the directory and the cause.

        Example:
            >>> import tempfile, keras
            >>> d = os.path.join(tempfile.mkdtemp(), "run")
            >>> CheckpointManager(d, model=keras.layers.Dense(1)).check_writable()
            >>> os.path.isdir(d)
            True
        """
        probe = os.path.join(
            self.directory, f"{TMP_PREFIX}probe_{self.task_type}_{self.task_id}_{uuid.uuid4().hex}"
        )
        try:
            gfile_call(tf.io.gfile.makedirs, self.directory)
            with tf.io.gfile.GFile(probe, "w") as f:
                f.write("tfdp write probe\n")
            gfile_call(tf.io.gfile.remove, probe)
        except (OSError, tf.errors.OpError) as e:
            raise CheckpointError(
                f"checkpoint directory {self.directory!r} is not writable "
                f"({type(e).__name__}: {e}); choose a directory this process can create "
                "and write, or fix its permissions"
            ) from e

    def should_save(self, step: int, every_n_steps: int) -> bool:
        """Whether a save is due at global ``step``: a multiple of ``every_n_steps`` was reached.

        True when ``step // every_n_steps`` exceeds that of the last saved or
        restored step (0 at first), and stays True until the next save: checking
        only every k steps (e.g. every ``steps_per_execution``) still saves once
        per interval. Every worker gets the same answer for the same step.
        ``every_n_steps=0`` never saves.

        Example:
            >>> import tempfile, keras
            >>> m = CheckpointManager(tempfile.mkdtemp(), model=keras.layers.Dense(1))
            >>> saved = []
            >>> for step in range(1, 8):
            ...     if m.should_save(step, every_n_steps=3):
            ...         _ = m.save(DataPosition(0, step), global_step=step)
            ...         saved.append(step)
            >>> saved
            [3, 6]
        """
        every = check_count("every_n_steps", every_n_steps)
        if every == 0:
            return False
        last = self._last_saved_step or 0
        return check_count("step", step) // every > last // every

    def save(self, position: DataPosition, global_step: int) -> str:
        """Save the trackables, ``global_step`` and ``position`` as ``ckpt-<global_step>``.

        Call it on every worker (it may run collectives). Saving again at the
        same global step overwrites that checkpoint. Variables holding NaN or
        infinite values are never saved: the save raises
        :class:`NonFiniteCheckpointError` and the latest checkpoint stays the
        last good one.

        Args:
            position: The data position after ``global_step`` steps.
            global_step: Optimizer steps done so far.

        Returns:
            The checkpoint path in ``directory`` (on a non-chief worker: the
            path the chief writes).

        Raises:
            NonFiniteCheckpointError: a floating-point variable holds NaN or an
                infinity (names them).

        Example:
            >>> import tempfile, keras
            >>> m = CheckpointManager(tempfile.mkdtemp(), model=keras.layers.Dense(1))
            >>> os.path.basename(m.save(DataPosition(0, 10), global_step=10))
            'ckpt-10'
        """
        if self.read_only:
            raise CheckpointError(f"{self!r} was created read_only=True: it does not save")
        if not isinstance(position, DataPosition):
            raise ConfigTypeError(
                f"must be a tfdp.checkpoint.DataPosition, got {type(position).__name__}",
                argument="position",
            )
        global_step = check_count("global_step", global_step)
        bad = [
            f"{key}/{name}"
            for key, obj in self._trackables.items()
            for name, v in float_variables(obj)
            if not bool(tf.reduce_all(tf.math.is_finite(v)))
        ]
        if bad:  # every worker holds the same values, so every worker refuses alike
            raise NonFiniteCheckpointError(
                f"refusing to save checkpoint {CHECKPOINT_NAME}-{global_step} in "
                f"{self.directory!r}: {len(bad)} variable(s) hold NaN or infinite values "
                f"({', '.join(bad[:5])}{', ...' if len(bad) > 5 else ''}); the latest checkpoint "
                f"stays {self.latest or 'none'}"
            )
        self._step.assign(global_step)
        self._data.assign(position.to_json())
        if self._manager is not None:
            path = self._manager.save(checkpoint_number=global_step)
        else:
            path = os.path.join(self.directory, f"{CHECKPOINT_NAME}-{global_step}")
            tmp = self.write_directory
            self._remove_tree(tmp)  # a leftover of a crash would confuse the manager below
            try:
                temp_manager = tf.train.CheckpointManager(
                    self.checkpoint, tmp, max_to_keep=1, checkpoint_name=CHECKPOINT_NAME
                )
                temp_manager.save(checkpoint_number=global_step)
            finally:
                self._remove_tree(tmp)
        self._last_saved_step = global_step
        return path

    @staticmethod
    def _remove_tree(path: str) -> None:
        try:
            if tf.io.gfile.exists(path):
                tf.io.gfile.rmtree(path)
        except tf.errors.OpError as e:  # pragma: no cover - depends on the filesystem
            logger.warning("could not remove temporary checkpoint directory %s: %s", path, e)

    # -- reading ----------------------------------------------------------------
    def _candidates(self) -> list[str]:
        """Checkpoints to try, newest first: those the state file lists and those on disk.

        Newest is the highest checkpoint number (= global step). A state file
        that is missing, empty, unreadable or names checkpoints that are gone
        does not hide the checkpoints that are there; a checkpoint on disk
        that the state file does not list yet (a save interrupted between
        writing it and updating the state file) is tried too -- every
        candidate is read and checked in full before it is used.
        """
        listed = self.checkpoints
        on_disk = numbered_on_disk(self.directory)
        numbered: dict[int, str] = dict(on_disk)
        others: list[str] = []  # listed paths not named ckpt-<N> (not written by tfdp)
        for path in listed:
            number = checkpoint_number(path)
            if number is None:
                others.append(path)
            else:
                numbered.setdefault(number, path)
        listed_numbers = {n for n in map(checkpoint_number, listed) if n is not None}
        if on_disk and not listed:
            self._warn(
                f"checkpoint state file in {self.directory!r} is missing or unreadable; "
                f"trying the {len(on_disk)} checkpoint(s) found on disk, highest number first"
            )
        elif max(on_disk, default=-1) > max(listed_numbers, default=-1):
            newer = sorted(n for n in on_disk if n > max(listed_numbers, default=-1))
            self._warn(
                f"checkpoint(s) {[os.path.basename(on_disk[n]) for n in newer]} in "
                f"{self.directory!r} are newer than what its state file lists (a save "
                "interrupted before it updated the state file?); they are tried first"
            )
        return others[::-1] + [numbered[n] for n in sorted(numbered, reverse=True)]

    @staticmethod
    def _warn(message: str) -> None:
        logger.warning(message)
        warnings.warn(message, CheckpointWarning, stacklevel=3)

    def restore(
        self,
        expected_config: Mapping[str, Any] | None = None,
        *,
        partial: bool = False,
        allow_world_size_change: bool = False,
    ) -> tuple[DataPosition, int] | None:
        """Restore the newest readable checkpoint into the trackables.

        Every tensor of a candidate is read and checked first; a corrupt or
        truncated checkpoint is skipped with a :class:`CheckpointWarning` (and
        a log record) naming it, and the previous one is used: at most one
        save interval is lost. Nothing is assigned before a checkpoint has
        been found readable and its configuration matching. The candidates
        are the checkpoints the state file lists and those on disk, highest
        number first (see :meth:`_candidates`): an empty, garbled or stale
        state file does not hide them. :attr:`restored` names the checkpoint
        restored. Restoring writes nothing (leftovers of interrupted saves are
        removed by :func:`remove_interrupted_saves`, called by the directory's
        one writer).

        Args:
            expected_config: The data configuration of this run (e.g.
                :func:`input_config`); must equal the saved one.
            partial: Restore only the trackables given (e.g. the model for
                evaluation) from a checkpoint that holds more (e.g. an optimizer).
            allow_world_size_change: Accept a checkpoint saved at another world
                size with the same global batch (an elastic resume: the fields
                that follow the world size may differ; see
                ``DistributedInput.resume_from`` for the data).

        Returns:
            ``(position, global_step)`` of the restored checkpoint, or None
            when ``directory`` holds no checkpoint.

        Raises:
            CheckpointError: when checkpoints exist but none is readable (lists them).
            StateError: when ``expected_config`` differs from the saved
                configuration (names each field, saved vs now; a global batch
                that changed with the world size names the valid replica counts).
            ValueError: when the checkpoint does not match the trackables.

        Example:
            >>> import tempfile, keras
            >>> m = CheckpointManager(tempfile.mkdtemp(), model=keras.layers.Dense(1))
            >>> _ = m.save(DataPosition(1, 3, config={"batch_size": 8}), global_step=13)
            >>> m.restore({"batch_size": 16})  # doctest: +ELLIPSIS
            Traceback (most recent call last):
            ...
            tfdp.errors.StateError: checkpoint /tmp/.../ckpt-13 was saved with another data ...
              batch_size: saved 8, now 16
            ...
        """
        self.restored = None
        candidates = self._candidates()
        if not candidates:
            return None
        failures: list[str] = []
        for i, path in enumerate(candidates):
            try:
                position, global_step = read_checkpoint(path)
            except Exception as e:  # the reader raises OpError, IndexError, ValueError, ...
                reason = f"{type(e).__name__}: {getattr(e, 'message', None) or e}"
                failures.append(f"  {path}: {reason}")
                then = (
                    f"falling back to the previous checkpoint {candidates[i + 1]}"
                    if i + 1 < len(candidates)
                    else "no older checkpoint is left"
                )
                self._warn(
                    f"checkpoint {path} is unreadable (corrupt or truncated: {reason}); {then}"
                )
                continue
            if expected_config is not None:
                check_input_config(path, position.config, expected_config, allow_world_size_change)
            status = self.checkpoint.restore(path)
            if partial:
                status.expect_partial()
            try:
                status.assert_existing_objects_matched()
            except AssertionError as e:
                raise StateError(
                    f"checkpoint {path} does not match the objects being restored (a different "
                    "model or optimizer?); restore into trackables of the architecture it was "
                    f"saved from: {e}"
                ) from e
            self._last_saved_step = global_step
            self.restored = path
            if i:
                logger.warning("restored %s (the newer %d could not be read)", path, i)
            return position, global_step
        raise CheckpointError(
            f"none of the {len(candidates)} checkpoint(s) in {self.directory!r} is readable:\n"
            + "\n".join(failures)
            + "\nDelete the directory to start over, or restore a backup of it."
        )

    def __repr__(self) -> str:
        role = "chief" if self.is_chief else f"{self.task_type} {self.task_id}"
        return (
            f"CheckpointManager({self.directory!r}, {role}, max_to_keep={self.max_to_keep}, "
            f"latest={self.latest!r})"
        )
