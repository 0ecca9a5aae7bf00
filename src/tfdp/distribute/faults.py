r"""Which peer a multi-worker failure lost: TensorFlow's error text read against the cluster.

This module owns the reading of a failed collective under
MultiWorkerMirroredStrategy: whether the error means a peer was lost
(:func:`is_peer_failure`), which task and address it was and what happened to
it (:func:`lost_peers`). TensorFlow says it in one of a few ways, depending on
which side of the fault a worker stands:

- the coordination service's leader (the chief, else worker 0) names the tasks
  that "stopped sending heartbeats" (a peer killed, stopped, or cut off);
- a worker whose heartbeats to the leader time out says only
  ``Deadline Exceeded ... RPC: /tensorflow.CoordinationService/Heartbeat``: the
  leader is the lost peer;
- a peer whose process ended closes its connections (``Connection reset by
  peer ... from remote target /job:worker/replica:0/task:1``).

Pure Python: it loads no TensorFlow.

Example:
    >>> text = ("Collective ops is aborted by: Error reported from /job:worker/task:1: The "
    ...         "following tasks are unhealthy (stopped sending heartbeats):\n"
    ...         "/job:worker/replica:0/task:1\nThe tasks have crashed.")
    >>> cluster = {"worker": ["10.0.0.1:2222", "10.0.0.2:2222"]}
    >>> peers, cause = lost_peers(text, cluster, me=("worker", 0))
    >>> [str(p) for p in peers], cause
    (['worker 1 at 10.0.0.2:2222'], 'it stopped sending heartbeats')
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: TensorFlow error types (``tf.errors.*`` class names) a lost peer raises in a collective.
PEER_FAILURE_TYPES = ("UnavailableError", "DeadlineExceededError", "AbortedError", "CancelledError")

_TASK = re.compile(r"/job:([\w-]+)/(?:replica:\d+/)?task:(\d+)")
_UNHEALTHY = re.compile(r"unhealthy|stopped sending heartbeats", re.I)
_REMOTE = re.compile(r"remote target (/job:[\w-]+/(?:replica:\d+/)?task:\d+)")


@dataclass(frozen=True)
class Peer:
    """A task of the cluster: its type, index and address (``None`` when not in the cluster).

    Example:
        >>> str(Peer("worker", 1, "10.0.0.2:2222")), str(Peer("chief", 0))
        ('worker 1 at 10.0.0.2:2222', 'chief 0')
    """

    task_type: str
    index: int
    address: str | None = None

    def __str__(self) -> str:
        where = f" at {self.address}" if self.address else ""
        return f"{self.task_type} {self.index}{where}"


def _address(cluster: Mapping[str, Any], task_type: str, index: int) -> str | None:
    """The address of a task in a cluster dict (lists, or ``{index: address}`` when sparse)."""
    tasks = cluster.get(task_type)
    if isinstance(tasks, Mapping):
        return tasks.get(index)
    if isinstance(tasks, Sequence) and 0 <= index < len(tasks):
        return str(tasks[index])
    return None


def coordination_leader(cluster: Mapping[str, Any]) -> tuple[str, int]:
    """The task hosting TensorFlow's coordination service: the chief, else worker 0.

    Example:
        >>> coordination_leader({"worker": ["a:1", "b:1"]}), coordination_leader({"chief": ["c:1"]})
        (('worker', 0), ('chief', 0))
    """
    return ("chief", 0) if cluster.get("chief") else ("worker", 0)


def is_peer_failure(error_type: str, num_workers: int) -> bool:
    """Whether an error of this type, in a job of ``num_workers`` processes, means a lost peer.

    A collective whose peer crashed, was stopped or cut off fails with one of
    :data:`PEER_FAILURE_TYPES`; an error a peer hit on its own (a bad file, a
    bad label) keeps its type and is not counted (its own worker reports it).

    Example:
        >>> is_peer_failure("UnavailableError", 2), is_peer_failure("InvalidArgumentError", 2)
        (True, False)
        >>> is_peer_failure("UnavailableError", 1)  # one process: no peer to lose
        False
    """
    return num_workers > 1 and error_type in PEER_FAILURE_TYPES


def _cause(text: str) -> str:
    if re.search(r"connection reset|socket closed|end of file|broken pipe", text, re.I):
        return "its connection closed"
    if re.search(r"connection refused|failed to connect", text, re.I):
        return "it refuses connections"
    if re.search(r"deadline exceeded|timed out|timeout", text, re.I):
        return "it stopped answering in time"
    return "it stopped answering"


def lost_peers(
    text: str, cluster: Mapping[str, Any], me: tuple[str, int] | None = None
) -> tuple[list[Peer], str]:
    r"""The peers ``text`` (a failed collective's message) says were lost, and what happened.

    Args:
        text: The TensorFlow error's message.
        cluster: The cluster, ``{"worker": ["host:port", ...], "chief": [...]}``.
        me: This process's ``(task_type, index)``, never counted as lost.

    Returns:
        ``(peers, cause)``: the lost tasks with their addresses (empty when the
        text names none) and a short phrase saying what happened to them.

    Example:
        >>> cluster = {"worker": ["10.0.0.1:2222", "10.0.0.2:2222"]}
        >>> text = ("Collective ops is aborted by: Deadline Exceeded\n\n"
        ...         "RPC: /tensorflow.CoordinationService/Heartbeat")
        >>> peers, cause = lost_peers(text, cluster, me=("worker", 1))
        >>> str(peers[0])
        'worker 0 at 10.0.0.1:2222'
        >>> cause
        "it stopped answering heartbeats (it runs the job's coordination service)"
    """
    found: list[tuple[str, int]] = []
    cause = ""
    marker = _UNHEALTHY.search(text)
    if marker:  # the leader names the tasks whose heartbeats stopped, after the marker
        found = [(t, int(i)) for t, i in _TASK.findall(text[marker.end() :])]
        cause = "it stopped sending heartbeats"
    if not found and "CoordinationService/Heartbeat" in text:
        found = [coordination_leader(cluster)]
        cause = "it stopped answering heartbeats (it runs the job's coordination service)"
    if not found:
        found = [
            (m.group(1), int(m.group(2))) for m in (_TASK.search(r) for r in _REMOTE.findall(text))
        ]
        cause = _cause(text)
    peers = [Peer(t, i, _address(cluster, t, i)) for t, i in dict.fromkeys(found) if (t, i) != me]
    if not peers:
        return [], _cause(text)
    return peers, cause
