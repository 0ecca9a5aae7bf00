"""A run directory's bookkeeping: one writer at a time, and its ``config.json``.

This module owns :class:`RunLock`, the exclusive lock a training run holds on
its run directory (so that two runs never interleave ``metrics.jsonl``,
overwrite each other's ``config.json`` or mix checkpoints), and reading and
writing ``config.json`` atomically. Pure Python (no TensorFlow).

The lock is the file ``<run dir>/.tfdp.lock``, held with ``fcntl.flock``
(released by the kernel when the holder exits, however it exits) and holding
the holder's pid, host and start time. A second run finds it held and is
refused with those; a lock left by a process that is gone (kill -9, a crash,
a reboot) is taken over with a notice. When the file lives on a filesystem
that does not carry locks between hosts, a lock written by another host
cannot be checked from here: it is refused, with how to remove it if that
run is over. In a multi-worker job only the chief takes the lock.

Example:
    >>> import tempfile
    >>> run = tempfile.mkdtemp()
    >>> with RunLock(run) as lock:
    ...     try:
    ...         RunLock(run).acquire()
    ...     except RunLockedError as err:
    ...         print("refused:", "is in use by pid" in str(err))
    refused: True
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

from tfdp._util import write_text_atomic
from tfdp.errors import StateError

#: The lock file's name inside the run directory.
LOCK_NAME = ".tfdp.lock"


class RunLockedError(RuntimeError):
    """The run directory is in use by another run (its pid and host are in the message).

    Example:
        >>> issubclass(RunLockedError, RuntimeError)
        True
    """


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    except OSError:
        return False
    return True


def _describe(holder: dict[str, Any]) -> str:
    started = holder.get("started")
    when = ""
    if isinstance(started, (int, float)):
        when = time.strftime(" since %Y-%m-%d %H:%M:%S", time.localtime(started))
    command = holder.get("command")
    what = f" ({command})" if command else ""
    return f"pid {holder.get('pid')} on host {holder.get('host')!r}{when}{what}"


class RunLock:
    """An exclusive lock on a run directory, held from :meth:`acquire` to :meth:`release`.

    Args:
        run_dir: The run directory (created if missing).
        notify: Called with a one-line notice when a stale lock is taken over
            (default: print to stderr).

    Raises:
        RunLockedError: from :meth:`acquire`, when a live run holds the lock,
            naming its pid, host and start time.
        PermissionError: from :meth:`acquire`, when the lock file cannot be
            created (a read-only run directory), naming it.

    Example:
        >>> import tempfile, os
        >>> run = tempfile.mkdtemp()
        >>> lock = RunLock(run).acquire()
        >>> sorted(lock.holder()) == ["command", "host", "pid", "started"]
        True
        >>> lock.release(); os.path.exists(os.path.join(run, LOCK_NAME))
        False
    """

    def __init__(
        self, run_dir: str | os.PathLike[str], notify: Callable[[str], None] | None = None
    ):
        self.run_dir = os.fspath(run_dir)
        self.path = os.path.join(self.run_dir, LOCK_NAME)
        self._notify = notify or (lambda text: print(text, file=sys.stderr, flush=True))
        self._fd: int | None = None
        self._created = False  # the run directory was made by acquire(): removed if left empty

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._fd is not None

    def holder(self) -> dict[str, Any] | None:
        """What the lock file says about its holder (None: no lock file, or unreadable)."""
        try:
            with open(self.path, encoding="utf-8") as fh:
                holder = json.loads(fh.read() or "null")
        except (OSError, ValueError):
            return None
        return holder if isinstance(holder, dict) else None

    def acquire(self) -> RunLock:
        """Take the lock, or raise :class:`RunLockedError` naming its holder.

        Returns:
            ``self``.
        """
        import fcntl

        if self._fd is not None:
            return self
        for _ in range(100):  # retried only when the file was replaced while we opened it
            try:
                if not os.path.isdir(self.run_dir):
                    os.makedirs(self.run_dir)
                    self._created = True
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as err:
                raise PermissionError(
                    f"cannot create the lock file {self.path!r} ({err.strerror}): a run needs "
                    "a run directory it can write; choose another one or fix its permissions"
                ) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                flocked = True
            except OSError as err:
                if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    os.close(fd)
                    holder = self.holder() or {}
                    raise RunLockedError(
                        f"run directory {self.run_dir!r} is in use by "
                        f"{_describe(holder) if holder else 'another process'}: one run writes "
                        "a run directory at a time. Wait for it to end (or stop it), or use "
                        "another run directory"
                    ) from None
                flocked = False  # no locks on this filesystem: the file's contents decide
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if not same:  # released (and removed) by its holder between our open and flock
                os.close(fd)
                continue
            try:
                self._check_previous(flocked)
            except BaseException:
                os.close(fd)
                raise
            self._fd = fd
            self._write()
            return self
        raise RunLockedError(f"could not lock {self.path!r}: it keeps being replaced")

    def _check_previous(self, flocked: bool) -> None:
        """The lock file names a previous holder: take over if it is gone, refuse if not."""
        holder = self.holder()
        if not holder:
            return
        here = socket.gethostname()
        pid = holder.get("pid")
        if holder.get("host") != here:
            raise RunLockedError(
                f"run directory {self.run_dir!r} is locked by {_describe(holder)}, another "
                f"host, which this host cannot check. If that run is over, delete {self.path!r} "
                "and start again"
            )
        if pid == os.getpid():
            return
        alive = isinstance(pid, int) and _pid_alive(pid)
        if alive and not flocked:
            raise RunLockedError(
                f"run directory {self.run_dir!r} is in use by {_describe(holder)}: one run "
                "writes a run directory at a time. Wait for it to end (or stop it), or use "
                "another run directory"
            )
        reason = "no longer running" if not alive else "no longer holding it"
        self._notify(
            f"tfdp: taking over the lock of {self.run_dir!r} left by {_describe(holder)} ({reason})"
        )

    def _write(self) -> None:
        assert self._fd is not None
        record = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": time.time(),
            "command": " ".join(
                os.path.basename(a) if i == 0 else a for i, a in enumerate(sys.argv)
            )[:200],
        }
        data = (json.dumps(record) + "\n").encode()
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, data, 0)
        os.fsync(self._fd)

    def release(self) -> None:
        """Remove the lock file and release the lock (harmless when not held).

        A run directory that :meth:`acquire` created and nothing else was
        written to is removed too: a run refused early leaves no trace.
        """
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        with contextlib.suppress(OSError):
            if os.fstat(fd).st_ino == os.stat(self.path).st_ino:
                os.unlink(self.path)  # while still locked: a waiting opener retries
        os.close(fd)
        if self._created:
            with contextlib.suppress(OSError):
                os.rmdir(self.run_dir)  # only if empty

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"RunLock({self.run_dir!r}, held={self.held})"


def read_json_object(path: str | os.PathLike[str], what: str = "file") -> dict[str, Any]:
    """Read a JSON object from ``path``, with errors that name the file and say what is wrong.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        tfdp.errors.StateError: it is not UTF-8 JSON, or not a JSON object (a run's file).

    Example:
        >>> import tempfile, os
        >>> p = os.path.join(tempfile.mkdtemp(), "config.json")
        >>> _ = open(p, "w").write("[1, 2]")
        >>> read_json_object(p, "run config")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        tfdp.errors.StateError: run config .../config.json must hold a JSON object ({"option": value, ...}), got a list
    """  # noqa: E501
    path = os.fspath(path)
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        raise FileNotFoundError(f"{what} {path} does not exist") from None
    try:
        obj = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise StateError(
            f"{what} {path} is not text (UTF-8 JSON): byte {err.start} is not UTF-8"
        ) from None
    except json.JSONDecodeError as err:
        raise StateError(
            f"{what} {path} is not valid JSON ({err.msg} at line {err.lineno}, column {err.colno})"
        ) from None
    if not isinstance(obj, dict):
        raise StateError(
            f'{what} {path} must hold a JSON object ({{"option": value, ...}}), '
            f"got {'a list' if isinstance(obj, list) else type(obj).__name__}"
        )
    return obj


def write_json_atomic(path: str | os.PathLike[str], obj: Any) -> None:
    """Write ``obj`` as indented JSON to ``path`` atomically (temp file, fsync, rename).

    A crash leaves either the old file or the new one, never half of one.

    Example:
        >>> import tempfile, os
        >>> p = os.path.join(tempfile.mkdtemp(), "x.json")
        >>> write_json_atomic(p, {"a": 1}); json.load(open(p))
        {'a': 1}
    """
    write_text_atomic(path, json.dumps(obj, indent=2) + "\n")
