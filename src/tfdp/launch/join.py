"""A node's way into the rendezvous: connect to the master and join, retrying until the timeout.

This module owns how a node's launcher (:mod:`tfdp.launch.node`) gets a :class:`~tfdp.launch.
channel.Channel` to the master that has accepted its join. :meth:`Joiner.join` connects
(retrying every half second while nothing listens, on the first join), reads the master's
``hello``, sends the join and waits for the answer. What the network does is retried with
a growing pause (0.5 s, 1 s, 2 s, ... at most 5 s) until the rendezvous timeout, one line
each time: a connection closed or reset before the answer, no hello or no answer within the
heartbeat timeout, a master too busy to hold this connection (a refusal that says
``retry``). What the master refuses for a reason -- another job, a taken rank, another
``nnodes``, another secret -- ends the join with that reason, at once. While it waits, the
node says how long it will still wait (every :func:`reminder_every` seconds).

Example:
    >>> reminder_every(300), reminder_every(3)
    (30.0, 2.0)
"""

from __future__ import annotations

import errno
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tfdp.launch.channel import Channel, ChannelClosedError, HandshakeError
from tfdp.launch.plan import LaunchError, bare_host
from tfdp.launch.supervise import Output

_FIRST_PAUSE, _MAX_PAUSE = 0.5, 5.0


class MasterGoneError(Exception):
    """The master cannot be reached again: the job is over for this node."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


class InterruptedJoinError(Exception):
    """A signal arrived while this launcher waited for the master."""


def reminder_every(timeout: float) -> float:
    """Seconds between two "still waiting" lines of a wait of ``timeout`` seconds.

    About six over the wait, at least 2 s and at most 30 s apart.
    """
    return max(2.0, min(30.0, timeout / 6))


def _connect_error(exc: OSError) -> str:
    if isinstance(exc, TimeoutError):
        return "no answer"
    return exc.strerror or str(exc)


@dataclass
class Joined:
    """A join the master accepted: the channel, this node's address, the master's answer."""

    chan: Channel
    addr: str
    reply: dict[str, Any]  # the ack, or a start / end that crossed it


class _RetryError(Exception):
    """The join did not get through for a reason of the network or of load: try again."""


@dataclass
class Joiner:
    """How one node joins the master: where, as whom, and the bounds of its waits.

    Attributes:
        master: The master's (host, port).
        job: The job id.
        key: The rendezvous key (:func:`tfdp.launch.auth.secret_key`), or None.
        node_addr: The address to connect from (None: the system's choice).
        timeout: Seconds a join may take, retries included (the rendezvous timeout).
        heartbeat: Seconds between heartbeats on the channel.
        silence: Seconds without a message after which the master is gone.
        out: Where the launcher's lines go.
        interrupted: Whether a signal asks this launcher to stop waiting.
    """

    master: tuple[str, int]
    job: str
    key: bytes | None
    node_addr: str | None
    timeout: float
    heartbeat: float
    silence: float
    out: Output
    interrupted: Callable[[], bool]

    @property
    def where(self) -> str:
        """The master's address as ``host:port`` (``[v6]:port``)."""
        host, port = self.master
        return f"{host}:{port}" if ":" not in host else f"[{host}]:{port}"

    def join(self, make_join: Callable[[str], dict[str, Any]], first: bool) -> Joined:
        """Join the master (again); ``make_join(addr)`` is the join message from this address.

        Raises:
            LaunchError: The master refused the join (its message and argument), or, on the
                first join, no rendezvous answered within the timeout.
            MasterGoneError: On a rejoin: the master refuses connections (it is gone), or
                did not take this node back within the timeout.
            InterruptedJoinError: A signal arrived while waiting.
        """
        deadline = time.monotonic() + self.timeout
        pause = _FIRST_PAUSE
        while True:
            sock = self._dial(deadline, first)
            addr = self.node_addr or sock.getsockname()[0]
            try:
                return self._attempt(sock, addr, make_join)
            except _RetryError as exc:
                why = str(exc)
            left = deadline - time.monotonic()
            if left <= pause:
                if first:
                    raise LaunchError(
                        f"{self.where}: the rendezvous did not take this node's "
                        f"join within {self.timeout:g}s ({why})",
                        argument="master_addr",
                    )
                raise MasterGoneError(
                    f"the master node 0 at {self.where} did not take this node back within "
                    f"{self.timeout:g}s ({why}): the job ends for this node"
                )
            self.out.message(
                f"the master at {self.where} did not take this node's join ({why}): retrying "
                f"in {pause:g}s ({left:.0f}s left)"
            )
            self._sleep(pause)
            pause = min(2 * pause, _MAX_PAUSE)

    def _sleep(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            if self.interrupted():
                raise InterruptedJoinError()
            time.sleep(min(left, 0.1))

    def _attempt(
        self, sock: socket.socket, addr: str, make_join: Callable[[str], dict[str, Any]]
    ) -> Joined:
        try:
            chan = Channel(sock, self.job, self.key, first=make_join(addr),
                           heartbeat=self.heartbeat, silence=self.silence)  # fmt: skip
        except HandshakeError as exc:
            raise LaunchError(str(exc), argument=exc.argument) from None
        except ChannelClosedError as exc:
            raise _RetryError(str(exc)) from None
        try:
            reply = chan.receive(timeout=self.silence)
        except ChannelClosedError as exc:
            chan.close()
            raise _RetryError(str(exc)) from None
        if reply is None:
            chan.close()
            raise _RetryError(f"no answer for {self.silence:g}s")
        if reply["type"] == "error":
            chan.close()
            if reply["retry"]:
                raise _RetryError(reply["message"])
            raise LaunchError(reply["message"], argument=reply["argument"])
        return Joined(chan, addr, reply)

    def _dial(self, deadline: float, first: bool) -> socket.socket:
        """Connect to the master, retrying until ``deadline`` (a refusal ends a rejoin)."""
        said_at: float | None = None if first else time.monotonic()  # a rejoin said it
        last = ""
        every = reminder_every(self.timeout)
        while True:
            remaining = deadline - time.monotonic()
            try:
                source = (bare_host(self.node_addr), 0) if self.node_addr else None
                return socket.create_connection(
                    self.master, timeout=max(min(remaining, 5.0), 0.1), source_address=source
                )
            except OSError as exc:
                if self.node_addr and exc.errno == errno.EADDRNOTAVAIL:
                    raise LaunchError(
                        f"{self.node_addr!r} is not an address of this machine",
                        argument="node_addr",
                    ) from None
                last = _connect_error(exc)
                if isinstance(exc, ConnectionRefusedError) and not first:
                    raise MasterGoneError(
                        f"the master node 0 at {self.where} is gone (connection refused): "
                        "the job ends with it (node 0 hosts the rendezvous)"
                    ) from None
            now = time.monotonic()
            if now >= deadline:
                if first:
                    raise LaunchError(
                        f"{self.where}: no rendezvous there within "
                        f"{self.timeout:g}s ({last}). Node 0's launcher hosts it: check "
                        "that it runs with this master address and port, and the firewall",
                        argument="master_addr",
                    )
                raise MasterGoneError(
                    f"the master node 0 at {self.where} stayed unreachable for "
                    f"{self.timeout:g}s ({last}): the job ends for this node"
                )
            if said_at is None:
                said_at = now
                self.out.message(
                    f"waiting for the master at {self.where} ({last}): retrying for up to "
                    f"{self.timeout:g}s"
                )
            elif now - said_at >= every:
                said_at = now
                self.out.message(
                    f"still waiting for the master at {self.where} ({last}): "
                    f"{deadline - now:.0f}s left"
                )
            if self.interrupted():
                raise InterruptedJoinError()
            time.sleep(min(0.5, max(deadline - time.monotonic(), 0.0)))
