r"""A node's end of its rendezvous connection: the master's hello, checked messages, heartbeats.

This module owns the blocking connection a node's launcher holds to the master
(:mod:`tfdp.launch.node` drives it; the master's end is :mod:`tfdp.launch.rendezvous`). A
:class:`Channel` reads the master's ``hello`` first (its challenge nonce, and whether the job
authenticates: :mod:`tfdp.launch.auth`), sends the node's first message (its ``join``), then
reads every later message in a thread, each decoded (:func:`tfdp.launch.protocol.decode`) and
checked in order (and its HMAC, with a secret), and sends a heartbeat every ``heartbeat``
seconds. Every wait is bounded.

Example:
    >>> a, b = socket.socketpair()
    >>> b.sendall(encode({"type": "hello", "nonce": "0" * 32, "auth": False}, "j"))
    >>> chan = Channel(a, "j", None, first={"type": "ready", "ports": [2222]}, heartbeat=60)
    >>> b.recv(1000)
    b'{"v":2,"job":"j","type":"ready","ports":[2222],"seq":0}\n'
    >>> b.sendall(encode({"type": "note", "message": "hi", "seq": 0}, "j"))
    >>> chan.receive(timeout=5)["message"]
    'hi'
    >>> chan.close(); b.close()
"""

from __future__ import annotations

import contextlib
import queue
import socket
import threading
import time
from collections.abc import Mapping
from typing import Any

from tfdp.launch.auth import SECRET_ENV, Session, new_nonce
from tfdp.launch.protocol import MAX_MESSAGE_BYTES, ProtocolError, decode, encode


class ChannelClosedError(ConnectionError):
    """The peer closed the connection, went silent, or broke the protocol (see ``str``).

    A condition of the network, not a bug: an ``OSError``, as the connection errors it stands for.

    Example:
        >>> isinstance(ChannelClosedError("the connection was closed"), OSError)
        True
    """


class HandshakeError(ChannelClosedError):
    """The master's hello is refused, or says it authenticates otherwise than this node (no retry).

    ``argument`` names the launch argument to fix (``env`` for the secret, ``master_addr``).

    Example:
        >>> err = HandshakeError("the master needs TFDP_RDZV_SECRET", argument="env")
        >>> str(err), err.argument
        ('the master needs TFDP_RDZV_SECRET', 'env')
    """

    def __init__(self, message: str, argument: str) -> None:
        super().__init__(message)
        self.argument = argument


class Channel:
    """A node's blocking end of a rendezvous connection: checked messages, bounded waits.

    Args:
        sock: The connected socket (the channel owns it from now on).
        job: This job's id.
        key: The rendezvous key (:func:`tfdp.launch.auth.secret_key`), or None.
        first: The message sent once the master's hello is in (the join), before any
            heartbeat; it gets this connection's nonce as its ``nonce`` field.
        heartbeat: Seconds between this end's heartbeats.
        silence: Seconds without any message (not even a heartbeat) after which the peer is
            gone; also the bound on the hello and on each send.

    A thread reads the peer's lines into a queue (:meth:`receive`); another sends the
    heartbeats. The peer is gone when it says nothing for ``silence`` seconds, when it
    closes, or when it sends a message that is refused: :meth:`receive` then raises
    :class:`ChannelClosedError` saying which. A refusal (``error``) from the master is
    delivered even when its HMAC cannot be checked (the master could not know this node's
    key was another): it ends the connection anyway.

    Raises:
        HandshakeError: The hello is not one (another protocol version, not a rendezvous),
            or says the master authenticates and this node has no secret, or the other way
            round.
        ChannelClosedError: No hello within ``silence`` seconds, or the connection closed.
    """

    def __init__(
        self,
        sock: socket.socket,
        job: str,
        key: bytes | None,
        *,
        first: Mapping[str, Any],
        heartbeat: float = 1.0,
        silence: float = 10.0,
    ) -> None:
        self.job = job
        self.sock = sock
        self.silence = silence
        self._send_lock = threading.Lock()
        self._inbox: queue.Queue[dict[str, Any] | ChannelClosedError] = queue.Queue()
        self._closed = threading.Event()
        self._buffer = b""
        self._key = key
        sock.settimeout(max(min(heartbeat, silence / 4), 0.05))  # silence seen in time
        try:
            hello = self._hello()
            nonce = new_nonce()
            self.session = Session(key, "node", hello["nonce"], nonce)
            self.send({**first, "nonce": nonce} if first.get("type") == "join" else first)
        except BaseException:
            self.close()
            raise
        threading.Thread(target=self._read, name="tfdp-rdzv-read", daemon=True).start()
        threading.Thread(
            target=self._beat, args=(heartbeat,), name="tfdp-rdzv-beat", daemon=True
        ).start()

    def _hello(self) -> dict[str, Any]:
        deadline = time.monotonic() + self.silence
        while b"\n" not in self._buffer:
            if len(self._buffer) > MAX_MESSAGE_BYTES:
                raise ChannelClosedError("the master's first line is too long")
            if time.monotonic() > deadline:
                raise ChannelClosedError(f"no hello from the master within {self.silence:g}s")
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                continue
            except OSError as exc:
                raise ChannelClosedError(f"connection lost ({exc.strerror or exc})") from None
            if not chunk:
                raise ChannelClosedError("the connection was closed before the master's hello")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            try:
                hello = decode(line, self.job, expect=("hello",))
            except ProtocolError as exc:  # another job's master: its answer to the join says so
                if exc.kind != "job" or exc.job is None:
                    raise
                hello = decode(line, exc.job, expect=("hello",))
        except ProtocolError as exc:  # not a rendezvous of this tfdp version: do not retry
            raise HandshakeError(
                f"the master's first message was refused: {exc}", argument="master_addr"
            ) from None
        if hello["auth"] and self._key is None:
            raise HandshakeError(
                f"the master authenticates the rendezvous ({SECRET_ENV} is set on node 0) but "
                f"this node has no {SECRET_ENV}: set the same secret on every node",
                argument="env",
            )
        if not hello["auth"] and self._key is not None:
            raise HandshakeError(
                f"this node has {SECRET_ENV} but the master does not authenticate the "
                f"rendezvous (no {SECRET_ENV} on node 0): set the same secret on every node",
                argument="env",
            )
        return hello

    def send(self, message: Mapping[str, Any]) -> None:
        """Send one message (bounded by ``silence``); raises ChannelClosedError if broken."""
        with self._send_lock:
            if self._closed.is_set():
                raise ChannelClosedError("the connection is closed")
            line = encode(self.session.seal(message, self.job), self.job)
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

    def _accept(self, line: bytes) -> dict[str, Any]:
        message = decode(line, self.job)
        try:
            self.session.check(message)
        except ProtocolError:
            if message["type"] != "error":
                raise
        return message

    def _read(self) -> None:
        buffer, self._buffer = self._buffer, b""
        last = time.monotonic()
        while not self._closed.is_set():
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                try:
                    self._inbox.put(self._accept(line))
                except ProtocolError as exc:
                    self._fail(ChannelClosedError(f"a message was refused: {exc}"))
                    return
            if len(buffer) > MAX_MESSAGE_BYTES:
                self._fail(ChannelClosedError(f"a message longer than {MAX_MESSAGE_BYTES} bytes"))
                return
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
