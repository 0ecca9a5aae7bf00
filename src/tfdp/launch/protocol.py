r"""The rendezvous protocol of a multi-node launch: its messages and their checks.

This module owns what launchers say to each other: one message is one JSON object on one
line (UTF-8, ``\n``-terminated, at most :data:`MAX_MESSAGE_BYTES` bytes), and every message
carries the protocol version ``"v"``, the job id ``"job"`` and its ``"type"``. :func:`decode`
refuses anything else -- not JSON, not an object, too long, another version, another job, an
unknown type, a missing or mistyped field -- with a :class:`ProtocolError` that says why (and
its :attr:`~ProtocolError.kind`, for the master's summary of what it refused), so that a peer
can be told and its connection closed without harm.

A connection starts with the master's ``hello`` (its challenge nonce, and whether the job
authenticates); every later message also carries ``"seq"``, its number in its direction
(0, 1, 2, ...), and, when the job has a secret, ``"mac"``: both are the business of
:mod:`tfdp.launch.auth`. The node's end of a connection is :mod:`tfdp.launch.channel`; the
master's, :mod:`tfdp.launch.rendezvous`.

Messages (fields beside ``v``, ``job``, ``type``, ``seq`` and ``mac``):

=========== ========= ==========================================================================
type        from      fields
=========== ========= ==========================================================================
hello       master    nonce, auth (the first line of every connection; no seq, no mac)
join        node      node_rank, min_nodes, max_nodes, nproc, addr, ports, instance, host, nonce
ready       node      ports (its workers stopped; ready for the next round with these ports)
exited      node      round, returncode, detail (the node's workers ended: 0, or the failure)
leave       node      reason, signal (the node leaves the job; 0: no signal)
heartbeat   both      (nothing)
ack         master    waiting, message (the join is accepted)
start       master    round, restart, max_restarts, nodes [{node_rank, addr, ports}], reason
note        master    message (what the job waits for: printed by every node)
stop        master    round, reason, signal (stop the round's workers with that signal)
end         master    status, message, signal (the job is over; 0: no signal)
error       master    message, argument, retry (refused; then closed. retry: too busy, try again)
=========== ========= ==========================================================================

Example:
    >>> line = encode({"type": "heartbeat", "seq": 0}, job="tfdp-1")
    >>> line
    b'{"v":2,"job":"tfdp-1","type":"heartbeat","seq":0}\n'
    >>> decode(line, job="tfdp-1")["type"]
    'heartbeat'
    >>> decode(line, job="tfdp-2")
    Traceback (most recent call last):
    ...
    tfdp.launch.protocol.ProtocolError: rdzv_id: 'tfdp-1' is not this job's ('tfdp-2'): give every node the same job id
"""  # noqa: E501

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

#: 2: every connection starts with the master's hello; every message has its seq (and mac).
PROTOCOL_VERSION = 2
#: A nonce is this many lowercase hexadecimal characters (128 bits).
NONCE_CHARS = 32
MAX_MESSAGE_BYTES = 64 * 1024
_MAX_NODES = 4096
_MAX_WORKERS = 4096


class ProtocolError(ValueError):
    """A message refused: malformed, too long, from another version or job, or not authentic.

    ``argument`` names the launch argument at fault when there is one (``rdzv_id``), and
    ``message`` says what is wrong without it (``str`` puts them together, as a
    :class:`tfdp.errors.TfdpError` does: the refusal sent to a node carries both);
    ``kind`` says what was wrong in one word, for a count of refusals (``garbage``,
    ``too long``, ``version``, ``job``, ``type``, ``malformed``, ``auth``, ``order``,
    ``join``, ``ended``, ``busy``); ``retry``: the refusal is for load, not for what was
    said (the peer may try again).

    Example:
        >>> err = ProtocolError("'x' is not this job's", argument="rdzv_id", kind="job")
        >>> err.argument, err.kind, err.retry, str(err)
        ('rdzv_id', 'job', False, "rdzv_id: 'x' is not this job's")
    """

    def __init__(
        self,
        message: str,
        argument: str | None = None,
        job: str | None = None,
        *,
        kind: str = "malformed",
        retry: bool = False,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.argument = argument
        self.job = job  # the sender's job id, when it was another job's (to answer it)
        self.kind = kind
        self.retry = retry

    def __str__(self) -> str:
        return f"{self.argument}: {self.message}" if self.argument else self.message


Check = Callable[[Any], bool]


def _is_int(low: int, high: int | None = None) -> Check:
    return lambda v: (
        isinstance(v, int) and not isinstance(v, bool) and v >= low and (high is None or v <= high)
    )


def _is_text(limit: int, empty: bool = False) -> Check:
    return lambda v: isinstance(v, str) and len(v) <= limit and (empty or bool(v))


_HEX = re.compile(rf"[0-9a-f]{{{NONCE_CHARS}}}")


def _is_nonce(v: Any) -> bool:
    return isinstance(v, str) and _HEX.fullmatch(v) is not None


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
    "hello": {"nonce": _is_nonce, "auth": lambda v: isinstance(v, bool)},
    "join": {
        "node_rank": _is_int(0, _MAX_NODES),
        "min_nodes": _is_int(1, _MAX_NODES),
        "max_nodes": _is_int(1, _MAX_NODES),
        "nproc": _is_int(1, _MAX_WORKERS),
        "addr": _is_text(255),
        "ports": _is_ports,
        "instance": _is_text(64),
        "host": _is_text(255, empty=True),
        "nonce": _is_nonce,
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
        "retry": lambda v: isinstance(v, bool),
    },
}


def encode(message: Mapping[str, Any], job: str) -> bytes:
    r"""One message as its line: the fields of ``message`` with ``v`` and ``job`` added.

    Raises:
        ProtocolError: If the line would be longer than :data:`MAX_MESSAGE_BYTES`.

    Example:
        >>> encode({"type": "ready", "ports": [2222], "seq": 3}, job="j")
        b'{"v":2,"job":"j","type":"ready","ports":[2222],"seq":3}\n'
    """
    body = {"v": PROTOCOL_VERSION, "job": job, **message}
    line = json.dumps(body, separators=(",", ":"), ensure_ascii=True).encode() + b"\n"
    if len(line) > MAX_MESSAGE_BYTES:
        raise ProtocolError(
            f"a {message.get('type')} message of {len(line)} bytes is too long", kind="too long"
        )
    return line


def decode(line: bytes, job: str, expect: tuple[str, ...] | None = None) -> dict[str, Any]:
    r"""The message a line holds, checked: version, job id, type, and the type's fields.

    Args:
        line: The bytes of one line (its ``\n`` may be there or not).
        job: This job's id: a message with another is refused.
        expect: The types acceptable here (default: any known type).

    Returns:
        The message as a dict (fields not in the type's schema are kept: ``seq`` and ``mac``
        are checked by :class:`tfdp.launch.auth.Session`).

    Raises:
        ProtocolError: Saying what is wrong with the message.

    Example:
        >>> decode(b'{"v":2,"job":"j","type":"ready","ports":[0]}', job="j")
        Traceback (most recent call last):
        ...
        tfdp.launch.protocol.ProtocolError: malformed ready message: a field is missing or has the wrong type (expected ports)
    """  # noqa: E501
    if len(line) > MAX_MESSAGE_BYTES:
        raise ProtocolError(f"message longer than {MAX_MESSAGE_BYTES} bytes", kind="too long")
    try:
        message = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ProtocolError(
            f"not a rendezvous message (expected one JSON object per line): {line[:60]!r}",
            kind="garbage",
        ) from None
    if not isinstance(message, dict):
        raise ProtocolError(
            f"not a rendezvous message (a JSON {type(message).__name__})", kind="garbage"
        )
    version = message.get("v")
    if type(version) is not int or version != PROTOCOL_VERSION:
        raise ProtocolError(
            f"rendezvous protocol version {version!r}, but this launcher speaks version "
            f"{PROTOCOL_VERSION}: run the same tfdp version on every node",
            kind="version",
        )
    other = message.get("job")
    if other != job:
        shown = other if isinstance(other, str) and len(other) <= 200 else "?"
        raise ProtocolError(
            f"{shown!r} is not this job's ({job!r}): give every node the same job id",
            argument="rdzv_id",
            job=other if shown == other and other else None,
            kind="job",
        )
    kind = message.get("type")
    if kind not in SCHEMAS or (expect is not None and kind not in expect):
        wanted = ", ".join(expect or sorted(SCHEMAS))
        shown = kind if isinstance(kind, str) and len(kind) <= 40 else "?"
        raise ProtocolError(f"unexpected message type {shown!r} (expected {wanted})", kind="type")
    schema = SCHEMAS[kind]
    if not _fields_ok(message, schema):
        raise ProtocolError(
            f"malformed {kind} message: a field is missing or has the wrong type "
            f"(expected {', '.join(schema)})"
        )
    return message
