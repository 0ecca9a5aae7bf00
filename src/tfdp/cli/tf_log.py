r"""TensorFlow's raw records of a lost peer, kept off ``tfdp train``'s stderr (a filter process).

When a peer of a multi-worker job is lost, TensorFlow's C++ runtime logs the
aborted collective itself, from its own threads, straight to file descriptor
2 and before Python sees the error::

    WARNING: All log messages before absl::InitializeLog() is called are written to STDERR
    E0000 00:00:1796259480.622762   23416 base_collective_executor.cc:252] BaseCollectiveEx...
    Additional GRPC error information from remote target /job:worker/replica:0/task:1 whil...
    :UNKNOWN:Error received from peer  {grpc_status:14, grpc_message:"recvmsg:Connection ...

``tfdp train`` says the same in one line (:class:`tfdp.train.PeerLostError`:
which worker, its address, what was kept, how to continue). This module owns
keeping those records -- and only those -- off the command's stderr:

- :func:`hold_back` (``tfdp train`` calls it when it runs as one worker of
  several) points file descriptor 2 at a pipe read by a filter process (this
  file run as a script: the standard library only, so it starts at once) and
  gives Python's ``sys.stderr`` the original stderr. Python's own output --
  tfdp's messages, a user's warnings, tracebacks -- never passes the filter.
- :class:`FaultLineFilter` drops a record whose header is an error of
  TensorFlow's collective or coordination-service code (:data:`SOURCES`) with
  a lost peer's status (:data:`STATUSES`), the lines that continue it in the
  same write, and absl's one-time notice just before it. Every other line
  passes unchanged as soon as it comes (a user's C++ warnings, other
  TensorFlow errors, a worker's own output).

``TFDP_DEBUG=1`` keeps every line. Nothing is filtered in a one-process run.

Example:
    >>> f = FaultLineFilter()
    >>> f.feed(b"E0000 00:00:17.5   42 ring_alg.cc:291] Aborting RingReduce with "
    ...        b"UNAVAILABLE: recvmsg:Connection reset by peer\n"
    ...        b":UNKNOWN:Error received from peer  {grpc_status:14}\n")
    b''
    >>> f.feed(b"W0000 00:00:18.1   42 mine.cc:7] a user's warning\n")
    b"W0000 00:00:18.1   42 mine.cc:7] a user's warning\n"
"""

from __future__ import annotations

import io
import os
import re
import select
import subprocess
import sys

#: The C++ files whose error records report a collective aborted by a lost peer.
SOURCES = (
    "base_collective_executor.cc",
    "ring_alg.cc",
    "coordination_service_agent.cc",
    "coordination_service.cc",
)
#: The statuses a lost peer gives (the ``tf.errors`` classes of
#: :data:`tfdp.distribute.faults.PEER_FAILURE_TYPES`, as absl spells them).
STATUSES = ("UNAVAILABLE", "DEADLINE_EXCEEDED", "ABORTED", "CANCELLED")
#: absl's notice, printed once before the first C++ record of a process (tf_start's too: this
#: file runs as a script of the standard library only, so it imports nothing of tfdp).
PREAMBLE = b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"

_HEADER = re.compile(rb"^[IWEF]\d{4} [\d:.]+ +\d+ ([^\]\s]+):\d+\] ")
_STATUS = re.compile(rb"\b(" + b"|".join(s.encode() for s in STATUSES) + rb")\b")
_OURS = b"tfdp"  # a line of tfdp's never continues TensorFlow's record
#: Seconds a held line (absl's notice, an unfinished line) waits for what follows it.
HOLD_SECONDS = 0.5


def is_fault_record(line: bytes) -> bool:
    """Whether ``line`` starts a record of a collective aborted by a lost peer.

    Example:
        >>> is_fault_record(b"E0000 00:00:1.5  7 ring_alg.cc:291] Aborting RingReduce with "
        ...                 b"UNAVAILABLE: Collective ops is aborted by: ...")
        True
        >>> is_fault_record(b"E0000 00:00:1.5  7 ring_alg.cc:291] INTERNAL: a bug")
        False
    """
    m = _HEADER.match(line)
    return (
        m is not None
        and line.startswith(b"E")
        and m.group(1).decode(errors="replace") in SOURCES
        and _STATUS.search(line, m.end()) is not None
    )


class FaultLineFilter:
    r"""Bytes in, bytes out: every line but TensorFlow's records of a lost peer.

    A record is its header line and the lines that follow it in the same
    read of the pipe (a C++ record is one write) up to the next header; a
    line of tfdp's never continues one. absl's :data:`PREAMBLE` is held until
    the next line shows whether it belongs to a dropped record; an unfinished
    line is held until it ends. :meth:`release` gives what is held (after
    :data:`HOLD_SECONDS` without more input), :meth:`close` everything at the end.

    Example:
        >>> f = FaultLineFilter()
        >>> f.feed(PREAMBLE + b"\n")  # held: does a dropped record follow?
        b''
        >>> f.feed(b"I0000 00:00:1.0  1 x.cc:1] info\n").splitlines()  # doctest: +ELLIPSIS
        [b'WARNING: All log messages ... to STDERR', b'I0000 00:00:1.0  1 x.cc:1] info']
        >>> f.dropped
        0
    """

    def __init__(self) -> None:
        self._partial = b""  # an unfinished line
        self._midline = False  # the last bytes out ended inside a line (released unfinished)
        self._held: bytes | None = None  # absl's notice, until the next line
        self._dropping = False  # inside a dropped record
        self.dropped = 0  # records dropped

    @property
    def holding(self) -> bool:
        """Whether anything waits for more input (see :meth:`release`)."""
        return self._held is not None or bool(self._partial)

    def feed(self, chunk: bytes) -> bytes:
        """The bytes to write for ``chunk``, one read of the pipe."""
        if not self._partial:  # the last read ended at a line end: this is another write
            self._dropping = False
        *lines, self._partial = (self._partial + chunk).split(b"\n")
        return b"".join(self._line(line) for line in lines)

    def release(self) -> bytes:
        """What is held, written now: absl's notice, and an unfinished line as it stands."""
        out = self._notice()
        if self._partial:
            if not self._dropping:
                out += self._partial
                self._midline = True
            self._partial = b""
        return out

    def close(self) -> bytes:
        """What is left at the end of the input."""
        return self.release()

    def _notice(self) -> bytes:
        """The held notice of absl, if any: the line after it starts no dropped record."""
        out = self._held + b"\n" if self._held is not None else b""
        self._held = None
        return out

    def _line(self, line: bytes) -> bytes:
        if self._midline:  # the rest of a line released unfinished: it passes as it began
            self._midline = False
            return line + b"\n"
        if self._dropping and not _HEADER.match(line) and not line.startswith(_OURS):
            return b""
        self._dropping = False
        if line.rstrip(b"\r") == PREAMBLE:
            out = self._notice()
            self._held = line
            return out
        if is_fault_record(line):
            self._held = None  # absl's notice came with this record
            self._dropping = True
            self.dropped += 1
            return b""
        return self._notice() + line + b"\n"


def _write(fd: int, data: bytes) -> bool:
    """Write all of ``data``; False once the output is gone (the input is still read)."""
    while data:
        try:
            n = os.write(fd, data)
        except InterruptedError:
            continue
        except OSError:
            return False
        data = data[n:]
    return True


def main(fd_in: int = 0, fd_out: int = 1) -> int:
    r"""The filter process: ``fd_in`` to ``fd_out`` through :class:`FaultLineFilter` until EOF.

    Example:
        >>> r, w = os.pipe(); out_r, out_w = os.pipe()
        >>> _ = os.write(w, b"E0000 00:00:1.0  7 ring_alg.cc:291] Aborting RingReduce with "
        ...              b"CANCELLED: x\nmore of it\n"); os.close(w)
        >>> main(r, out_w); os.close(out_w); os.read(out_r, 100)
        0
        b''
    """
    f, out_open = FaultLineFilter(), True
    while True:
        if f.holding and not select.select([fd_in], [], [], HOLD_SECONDS)[0]:
            out_open = out_open and _write(fd_out, f.release())
            continue
        try:
            chunk = os.read(fd_in, 1 << 16)
        except InterruptedError:
            continue
        if not chunk:
            if out_open:
                _write(fd_out, f.close())
            return 0
        data = f.feed(chunk)
        out_open = out_open and _write(fd_out, data)


_STARTED: list[subprocess.Popen[bytes]] = []


def hold_back() -> bool:
    """Send this process's file descriptor 2 through the filter; True once it is in place.

    Python's ``sys.stderr`` is given the original stderr, so only what C++
    code and child processes write to file descriptor 2 passes the filter.
    For the rest of the process's life (TensorFlow may log while it shuts
    down); the filter ends when the last writer of the pipe does. Does
    nothing, returning False, under ``TFDP_DEBUG``, when ``sys.stderr`` is
    not file descriptor 2 (a test's capture, a notebook), or when the filter
    cannot start.

    Example:
        >>> import contextlib
        >>> with contextlib.redirect_stderr(io.StringIO()):  # not the process's stderr
        ...     hold_back()
        False
    """
    if _STARTED:
        return True
    if os.environ.get("TFDP_DEBUG"):
        return False
    stream = sys.stderr
    try:
        if stream is None or stream.fileno() != 2:
            return False
    except (AttributeError, ValueError, io.UnsupportedOperation):
        return False
    stream.flush()
    original = os.dup(2)
    read_end, write_end = os.pipe()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", os.path.abspath(__file__)],
            stdin=read_end,
            stdout=original,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a signal to this process's group leaves it reading
        )
    except OSError:
        for fd in (original, read_end, write_end):
            os.close(fd)
        return False
    os.close(read_end)
    sys.stderr = open(  # noqa: SIM115 - the process's stderr from now on
        original,
        "w",
        buffering=1,
        encoding=getattr(stream, "encoding", None) or "utf-8",
        errors=getattr(stream, "errors", None) or "backslashreplace",
    )
    os.dup2(write_end, 2)
    os.close(write_end)
    _STARTED.append(proc)
    return True


if __name__ == "__main__":  # pragma: no cover - run as the filter process
    sys.exit(main())
