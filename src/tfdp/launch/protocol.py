r"""The rendezvous protocol of a multi-node launch: its messages, their checks, a connection.

This module owns what launchers say to each other: one message is one JSON object on one
line (UTF-8, ``\n``-terminated, at most :data:`MAX_MESSAGE_BYTES` bytes), and every message
carries the protocol version ``"v"``, the job id ``"job"`` and its ``"type"``. :func:`decode`
refuses anything else -- not JSON, not an object, too long, another version, another job, an
unknown type, a missing or mistyped field -- with a :class:`ProtocolError` that says why, so
that a peer can be told and its connection closed without harm. :class:`Channel` is the
blocking end a node's launcher holds (its reads and writes bounded by timeouts); the master's
asynchronous end is in :mod:`tfdp.launch.rendezvous`.

Messages (fields beside ``v``, ``job``, ``type``):

=========== ========= ==========================================================================
type        from      fields
=========== ========= ==========================================================================
join        node      node_rank, min_nodes, max_nodes, nproc, addr, ports, instance, host
ready       node      ports (its workers stopped; ready for the next round with these ports)
exited      node      round, returncode, detail (the node's workers ended: 0, or the failure)
leave       node      reason, signal (the node leaves the job; 0: no signal)
heartbeat   both      (nothing)
ack         master    waiting, message (the join is accepted)
start       master    round, restart, max_restarts, nodes [{node_rank, addr, ports}], reason
note        master    message (what the job waits for: printed by every node)
stop        master    round, reason, signal (stop the round's workers with that signal)
end         master    status, message, signal (the job is over; 0: no signal)
error       master    message, argument (the join or a message is refused; then closed)
=========== ========= ==========================================================================

Example:
    >>> line = encode({"type": "heartbeat"}, job="tfdp-1")
    >>> line
    b'{"v":1,"job":"tfdp-1","type":"heartbeat"}\n'
    >>> decode(line, job="tfdp-1")["type"]
    'heartbeat'
    >>> decode(line, job="tfdp-2")
    Traceback (most recent call last):
    ...
    tfdp.launch.protocol.ProtocolError: rdzv_id 'tfdp-1' is not this job's ('tfdp-2'): give every node the same job id
"""  # noqa: E501

from __future__ import annotations

import contextlib
import json
import queue
import socket
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "MAX_MESSAGE_BYTES",
    "PROTOCOL_VERSION",
    "Channel",
    "ChannelClosedError",
    "ProtocolError",
    "decode",
    "encode",
]

PROTOCOL_VERSION = 1
MAX_MESSAGE_BYTES = 64 * 1024
_MAX_NODES = 4096
_MAX_WORKERS = 4096


class ProtocolError(ValueError):
    """A message refused: malformed, too long, or from another version or job.

    ``argument`` names the launch argument at fault when there is one (``rdzv_id``).

    Example:
        >>> ProtocolError("rdzv_id 'x' is not this job's", argument="rdzv_id").argument
        'rdzv_id'
    """

    def __init__(self, message: str, argument: str | None = None, job: str | None = None) -> None:
        super().__init__(message)
        self.argument = argument
        self.job = job  # the sender's job id, when it was another job's (to answer it)


Check = Callable[[Any], bool]


def _is_int(low: int, high: int | None = None) -> Check:
    return lambda v: (
        isinstance(v, int) and not isinstance(v, bool) and v >= low and (high is None or v <= high)
    )


def _is_text(limit: int, empty: bool = False) -> Check:
    return lambda v: isinstance(v, str) and len(v) <= limit and (empty or bool(v))


def _is_ports(v: Any) -> bool:
    return (
        isinstance(v, list)
        and 1 <= len(v) <= _MAX_WORKERS
        and all(_is_int(1, 65535)(p) for p in v)
        and len(set(v)) == len(v)
    )


_NODE = {"node_rank": _is_int(0, _MAX_NODES), "addr": _is_text(255), "ports": _is_ports}


def _is_nodes(v: Any) -> bool:
    return (
        isinstance(v, list)
        and 1 <= len(v) <= _MAX_NODES
        and all(isinstance(n, dict) and _fields_ok(n, _NODE) for n in v)
    )


def _fields_ok(obj: Mapping[str, Any], schema: Mapping[str, Check]) -> bool:
    return all(name in obj and check(obj[name]) for name, check in schema.items())


_SIGNAL = _is_int(0, 64)
SCHEMAS: dict[str, dict[str, Check]] = {
    "join": {
        "node_rank": _is_int(0, _MAX_NODES),
        "min_nodes": _is_int(1, _MAX_NODES),
        "max_nodes": _is_int(1, _MAX_NODES),
        "nproc": _is_int(1, _MAX_WORKERS),
        "addr": _is_text(255),
        "ports": _is_ports,
        "instance": _is_text(64),
        "host": _is_text(255, empty=True),
    },
    "ready": {"ports": _is_ports},
    "exited": {
        "round": _is_int(0),
        "returncode": _is_int(-64, 255),
        "detail": _is_text(4096, True),
    },
    "leave": {"reason": _is_text(4096, True), "signal": _SIGNAL},
    "heartbeat": {},
    "ack": {"waiting": lambda v: isinstance(v, bool), "message": _is_text(4096, True)},
    "start": {
        "round": _is_int(0),
        "restart": _is_int(0),
        "nodes": _is_nodes,
        "reason": _is_text(8192, True),
        "max_restarts": _is_int(0),
    },
    "note": {"message": _is_text(8192)},
    "stop": {"round": _is_int(0), "reason": _is_text(8192, True), "signal": _SIGNAL},
    "end": {"status": _is_int(0, 255), "message": _is_text(8192, True), "signal": _SIGNAL},
    "error": {
        "message": _is_text(8192),
        "argument": lambda v: v is None or _is_text(64)(v),
    },
}


def encode(message: Mapping[str, Any], job: str) -> bytes:
    r"""One message as its line: the fields of ``message`` with ``v`` and ``job`` added.

    Raises:
        ProtocolError: If the line would be longer than :data:`MAX_MESSAGE_BYTES`.

    Example:
        >>> encode({"type": "ready", "ports": [2222]}, job="j")
        b'{"v":1,"job":"j","type":"ready","ports":[2222]}\n'
    """
    body = {"v": PROTOCOL_VERSION, "job": job, **message}
    line = json.dumps(body, separators=(",", ":"), ensure_ascii=True).encode() + b"\n"
    if len(line) > MAX_MESSAGE_BYTES:
        raise ProtocolError(f"a {message.get('type')} message of {len(line)} bytes is too long")
    return line


def decode(line: bytes, job: str, expect: tuple[str, ...] | None = None) -> dict[str, Any]:
    r"""The message a line holds, checked: version, job id, type, and the type's fields.

    Args:
        line: The bytes of one line (its ``\n`` may be there or not).
        job: This job's id: a message with another is refused.
        expect: The types acceptable here (default: any known type).

    Returns:
        The message as a dict (fields not in the type's schema are kept, unused).

    Raises:
        ProtocolError: Saying what is wrong with the message.

    Example:
        >>> decode(b'{"v":1,"job":"j","type":"ready","ports":[0]}', job="j")
        Traceback (most recent call last):
        ...
        tfdp.launch.protocol.ProtocolError: malformed ready message: a field is missing or has the wrong type (expected ports)
    """  # noqa: E501
    if len(line) > MAX_MESSAGE_BYTES:
        raise ProtocolError(f"message longer than {MAX_MESSAGE_BYTES} bytes")
    try:
        message = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ProtocolError(
            f"not a rendezvous message (expected one JSON object per line): {line[:60]!r}"
        ) from None
    if not isinstance(message, dict):
        raise ProtocolError(f"not a rendezvous message (a JSON {type(message).__name__})")
    version = message.get("v")
    if type(version) is not int or version != PROTOCOL_VERSION:
        raise ProtocolError(
            f"rendezvous protocol version {version!r}, but this launcher speaks version "
            f"{PROTOCOL_VERSION}: run the same tfdp version on every node"
        )
    other = message.get("job")
    if other != job:
        shown = other if isinstance(other, str) and len(other) <= 200 else "?"
        raise ProtocolError(
            f"rdzv_id {shown!r} is not this job's ({job!r}): give every node the same job id",
            argument="rdzv_id",
            job=other if shown == other and other else None,
        )
    kind = message.get("type")
    if kind not in SCHEMAS or (expect is not None and kind not in expect):
        wanted = ", ".join(expect or sorted(SCHEMAS))
        shown = kind if isinstance(kind, str) and len(kind) <= 40 else "?"
        raise ProtocolError(f"unexpected message type {shown!r} (expected {wanted})")
    schema = SCHEMAS[kind]
    if not _fields_ok(message, schema):
        raise ProtocolError(
            f"malformed {kind} message: a field is missing or has the wrong type "
            f"(expected {', '.join(schema)})"
        )
    return message


class ChannelClosedError(Exception):
    """The peer closed the connection, went silent, or broke the protocol (see ``str``)."""


class Channel:
    """A node's blocking end of a rendezvous connection: checked messages, bounded waits.

    A thread reads the peer's lines into a queue (:meth:`receive`); another sends a
    heartbeat every ``heartbeat`` seconds. The peer is considered gone when it says
    nothing (not even a heartbeat) for ``silence`` seconds, when it closes, or when it
    sends a message that :func:`decode` refuses: :meth:`receive` then raises
    :class:`ChannelClosedError` saying which.

    Example:
        >>> a, b = socket.socketpair()
        >>> left, right = Channel(a, "j"), Channel(b, "j")
        >>> left.send({"type": "ready", "ports": [2222]})
        >>> right.receive(timeout=5)["ports"]
        [2222]
        >>> left.close(); right.close()
    """

    def __init__(
        self, sock: socket.socket, job: str, *, heartbeat: float = 1.0, silence: float = 10.0
    ) -> None:
        self.job = job
        self.sock = sock
        self.silence = silence
        self._send_lock = threading.Lock()
        self._inbox: queue.Queue[dict[str, Any] | ChannelClosedError] = queue.Queue()
        self._closed = threading.Event()
        sock.settimeout(max(min(heartbeat, silence / 4), 0.05))  # silence seen in time
        threading.Thread(target=self._read, name="tfdp-rdzv-read", daemon=True).start()
        threading.Thread(
            target=self._beat, args=(heartbeat,), name="tfdp-rdzv-beat", daemon=True
        ).start()

    def send(self, message: Mapping[str, Any]) -> None:
        """Send one message (bounded by the socket timeout); raises ChannelClosedError if broken."""
        line = encode(message, self.job)
        with self._send_lock:
            if self._closed.is_set():
                raise ChannelClosedError("the connection is closed")
            deadline = time.monotonic() + self.silence
            view = memoryview(line)
            while view:
                try:
                    sent = self.sock.send(view)
                except TimeoutError:
                    if time.monotonic() > deadline:
                        self._fail(ChannelClosedError(f"could not send for {self.silence:g}s"))
                        raise ChannelClosedError(f"could not send for {self.silence:g}s") from None
                    continue
                except OSError as exc:
                    self._fail(ChannelClosedError(f"connection lost ({exc.strerror or exc})"))
                    raise ChannelClosedError(f"connection lost ({exc.strerror or exc})") from None
                view = view[sent:]

    def receive(self, timeout: float) -> dict[str, Any] | None:
        """The next message other than a heartbeat, or None after ``timeout`` seconds.

        Raises:
            ChannelClosedError: The peer is gone (closed, silent, or broke the protocol).
        """
        deadline = time.monotonic() + timeout
        while True:
            try:
                item = self._inbox.get(timeout=max(deadline - time.monotonic(), 0.0))
            except queue.Empty:
                return None
            if isinstance(item, ChannelClosedError):
                self._inbox.put(item)  # every later call says so too
                raise item
            if item["type"] != "heartbeat":
                return item

    def close(self) -> None:
        """Close the connection (the reader and heartbeat threads end)."""
        self._closed.set()
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self.sock.close()

    def _fail(self, error: ChannelClosedError) -> None:
        if not self._closed.is_set():
            self._inbox.put(error)
        self.close()

    def _beat(self, every: float) -> None:
        while not self._closed.wait(every):
            try:
                self.send({"type": "heartbeat"})
            except ChannelClosedError:
                return

    def _read(self) -> None:
        buffer = b""
        last = time.monotonic()
        while not self._closed.is_set():
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                if time.monotonic() - last > self.silence:
                    self._fail(ChannelClosedError(f"no message for {self.silence:g}s"))
                    return
                continue
            except OSError as exc:
                if not self._closed.is_set():
                    self._fail(ChannelClosedError(f"connection lost ({exc.strerror or exc})"))
                return
            if not chunk:
                self._fail(ChannelClosedError("the connection was closed"))
                return
            last = time.monotonic()
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                try:
                    self._inbox.put(decode(line, self.job))
                except ProtocolError as exc:
                    self._fail(ChannelClosedError(f"a message was refused: {exc}"))
                    return
            if len(buffer) > MAX_MESSAGE_BYTES:
                self._fail(ChannelClosedError(f"a message longer than {MAX_MESSAGE_BYTES} bytes"))
                return
