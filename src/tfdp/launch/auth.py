"""Who may speak at a rendezvous: a message counter per connection and an optional shared secret.

This module owns the authentication of the rendezvous connections. Every connection is a
:class:`Session` between the master and one node: the master opens it with a fresh challenge
nonce (its ``hello``), the node answers with a nonce of its own (in its ``join``), and from
then on each message carries ``seq``, its number in its direction (0, 1, 2, ...): a message
out of order or repeated is refused.

With a shared secret (:data:`SECRET_ENV`, the same on every node: :func:`secret_key`), each
message also carries ``mac``, an HMAC-SHA256 under a key derived from the secret over the
message's whole content (its canonical JSON: version, job id, type, fields and ``seq``) bound
to the connection's two nonces and the message's direction. So a stranger who knows or
guesses the job id cannot join, and a message recorded on one connection is refused on
another (other nonces), in the other direction, or again on its own (its ``seq`` is past);
MACs are compared in constant time (:func:`hmac.compare_digest`). The secret itself is
never sent, logged, or handed to the workers.

What it does not do: encrypt (anyone on the path reads the messages: addresses, ports,
the job id), or protect anything but the rendezvous -- TensorFlow's own gRPC ports, where the
workers' coordination service and collectives run, take any connection.

Example:
    >>> key = secret_key({SECRET_ENV: "correct horse battery staple"})
    >>> master = Session(key, "master", "a" * 32, "b" * 32)
    >>> node = Session(key, "node", "a" * 32, "b" * 32)
    >>> sealed = node.seal({"type": "heartbeat"}, job="j")
    >>> sealed["seq"], len(sealed["mac"])
    (0, 64)
    >>> master.check({"v": 2, "job": "j", **sealed})
    >>> master.check({"v": 2, "job": "j", **sealed})  # the same message again
    Traceback (most recent call last):
    ...
    tfdp.launch.protocol.ProtocolError: message out of order or replayed (seq 0, expected 1)
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from collections.abc import Mapping
from typing import Any

from tfdp.launch.plan import LaunchError
from tfdp.launch.protocol import NONCE_CHARS, PROTOCOL_VERSION, ProtocolError

#: The environment variable that holds the job's shared secret (the same on every node).
SECRET_ENV = "TFDP_RDZV_SECRET"
#: The shortest secret accepted (a short one could be guessed from a recorded message).
MIN_SECRET_CHARS = 16
_KEY_CONTEXT = b"tfdp rendezvous key v2"
_ROLES = ("master", "node")


def secret_key(env: Mapping[str, str]) -> bytes | None:
    """The rendezvous key derived from ``env[SECRET_ENV]``; None when the variable is unset.

    Raises:
        LaunchError: The secret is shorter than :data:`MIN_SECRET_CHARS` characters.

    Example:
        >>> secret_key({}) is None
        True
        >>> len(secret_key({SECRET_ENV: "0123456789abcdef"}))
        32
        >>> secret_key({SECRET_ENV: "short"})
        Traceback (most recent call last):
        ...
        tfdp.launch.plan.LaunchError: env: TFDP_RDZV_SECRET has 5 characters: a shared secret needs at least 16 (e.g. python -c 'import secrets; print(secrets.token_hex(16))'), the same on every node
    """  # noqa: E501
    secret = env.get(SECRET_ENV)
    if secret is None:
        return None
    if len(secret) < MIN_SECRET_CHARS:
        raise LaunchError(
            f"{SECRET_ENV} has {len(secret)} characters: a shared secret needs at least "
            f"{MIN_SECRET_CHARS} (e.g. python -c 'import secrets; print(secrets.token_hex(16))'), "
            "the same on every node",
            argument="env",
        )
    return hmac.new(secret.encode("utf-8"), _KEY_CONTEXT, hashlib.sha256).digest()


def new_nonce() -> str:
    """A fresh random nonce (from the operating system's generator), as hexadecimal text.

    Example:
        >>> a, b = new_nonce(), new_nonce()
        >>> len(a), a != b
        (32, True)
    """
    return secrets.token_hex(NONCE_CHARS // 2)


def _canonical(message: Mapping[str, Any]) -> bytes:
    body = {k: v for k, v in message.items() if k != "mac"}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


class Session:
    """One connection's authentication, seen from one end: the counters, the MACs.

    Args:
        key: The rendezvous key (:func:`secret_key`), or None: messages are counted, not
            authenticated.
        role: ``"master"`` or ``"node"``: which end this is (a message is bound to its
            direction, so one end's message cannot be reflected back to it).
        server_nonce: The master's challenge of this connection (its ``hello``).
        client_nonce: The node's nonce of this connection (its ``join``).

    Example:
        >>> s = Session(None, "node", "a" * 32, "b" * 32)
        >>> s.seal({"type": "ready", "ports": [1]}, job="j")
        {'type': 'ready', 'ports': [1], 'seq': 0}
    """

    def __init__(self, key: bytes | None, role: str, server_nonce: str, client_nonce: str) -> None:
        if role not in _ROLES:
            raise LaunchError(f"must be one of {_ROLES}, got {role!r}", argument="role")
        self.key = key
        self.role = role
        self._nonces = f"{server_nonce}:{client_nonce}".encode()
        self._sent = 0
        self._received = 0

    @property
    def authenticated(self) -> bool:
        """Whether messages carry (and must carry) an HMAC."""
        return self.key is not None

    def _mac(self, sender: str, message: Mapping[str, Any]) -> str:
        assert self.key is not None
        data = b"tfdp-rdzv\0" + sender.encode() + b"\0" + self._nonces + b"\0"
        return hmac.new(self.key, data + _canonical(message), hashlib.sha256).hexdigest()

    def seal(self, message: Mapping[str, Any], job: str) -> dict[str, Any]:
        """``message`` with its ``seq`` (and ``mac``): the next message this end sends."""
        out = {k: v for k, v in message.items() if k not in ("seq", "mac")}
        out["seq"] = self._sent
        self._sent += 1
        if self.key is not None:
            whole = {"v": PROTOCOL_VERSION, "job": job, **out}
            out["mac"] = self._mac(self.role, whole)
        return out

    def check(self, message: Mapping[str, Any]) -> None:
        """Accept ``message`` (decoded: version and job id checked) as the next from the peer.

        Raises:
            ProtocolError: Out of order or repeated (``kind="order"``), or, with a key, with
                no MAC or a MAC that does not match (``kind="auth"``); without a key, a
                message that carries a MAC (the peer has a secret this end has not).
        """
        seq = message.get("seq")
        if type(seq) is not int or seq != self._received:
            shown = seq if type(seq) is int else "missing"
            raise ProtocolError(
                f"message out of order or replayed (seq {shown}, expected {self._received})",
                kind="order",
            )
        mac = message.get("mac")
        if self.key is None:
            if mac is not None:
                raise ProtocolError(
                    f"the message is authenticated ({SECRET_ENV} is set there) but this "
                    f"launcher has no {SECRET_ENV}: set the same secret on every node",
                    argument="env",
                    kind="auth",
                )
        elif not isinstance(mac, str):
            raise ProtocolError(
                f"the message carries no HMAC: this job's rendezvous needs the shared secret "
                f"({SECRET_ENV}, the same on every node)",
                kind="auth",
            )
        else:
            peer = _ROLES[1 - _ROLES.index(self.role)]
            if not hmac.compare_digest(mac.encode("ascii", "replace"), self._mac(peer, message)
                                       .encode()):  # fmt: skip
                raise ProtocolError(
                    f"the message's HMAC does not match: another {SECRET_ENV}, or a message "
                    "recorded elsewhere",
                    kind="auth",
                )
        self._received += 1
