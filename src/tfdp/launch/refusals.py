r"""What the master's rendezvous refused, told to the operator without flooding the terminal.

This module owns the master's account of the connections it refused (a launcher of another
job, garbage, a stranger holding connections open): :class:`Refusals` tells the first few of
each kind in full (``refused a launcher at 10.0.0.9: rdzv_id: 'x' is not this job's ...``),
then counts the rest and tells the count once per ``every`` seconds, by kind and by address
(``refused 412 more connection(s) in the last 30s, from 10.0.0.9 (412): 200 sent nothing
valid within 5s, ...``), and keeps the last few in full for the rendezvous's timeout message.
Its memory is bounded however many connections are refused.

Example:
    >>> lines = []
    >>> log = Refusals(lines.append, full=1, every=30.0, clock=lambda: 0.0)
    >>> for _ in range(3):
    ...     log.add("10.0.0.9", "garbage", "not a rendezvous message")
    >>> log.flush()
    >>> print("\n".join(lines))
    refused a launcher at 10.0.0.9: not a rendezvous message
    refused 2 more connection(s) (10.0.0.9: 2): 2 not a rendezvous message
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Callable

#: How a summary line says each kind of refusal (tfdp.launch.protocol.ProtocolError.kind).
_SAID = {
    "garbage": "not a rendezvous message",
    "too long": "a line too long",
    "version": "another protocol version",
    "job": "another job's id",
    "type": "a message out of place",
    "malformed": "a malformed message",
    "auth": "no valid HMAC",
    "order": "a message out of order or replayed",
    "join": "a join refused",
    "ended": "after the job ended",
    "busy": "dropped unjoined to make room",
    "silent": "nothing valid in time",
}
_ADDRESSES_SHOWN = 3
_ADDRESSES_COUNTED = 256  # distinct addresses counted between two summaries (memory bounded)


class Refusals:
    """The master's log of refused connections: a few in full, then periodic counts.

    Args:
        log: Where lines go (the launcher's messages).
        full: How many refusals of each kind are told in full.
        every: Seconds between two summary lines of the refusals not told in full.
        keep: How many of the latest refusals are kept in full (:attr:`recent`).
        clock: The time source (seconds).
    """

    def __init__(
        self,
        log: Callable[[str], None],
        *,
        full: int = 3,
        every: float = 30.0,
        keep: int = 5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.log, self.full, self.every, self.clock = log, full, every, clock
        self.recent: deque[str] = deque(maxlen=keep)
        self.total = 0
        self.by_kind: Counter[str] = Counter()  # every refusal, by kind
        self._said: dict[str, str] = {}  # a kind's words, when a refusal brought its own
        self._kinds: Counter[str] = Counter()  # not yet summarised, by kind
        self._who: Counter[str] = Counter()  # ... and by address
        self._since = clock()

    def add(self, who: str, kind: str, text: str, said: str | None = None) -> None:
        """One refused connection: ``who`` (its address), ``kind``, and what it was told.

        ``said`` is how a summary counts this kind (default: the kind's usual words).
        """
        self.total += 1
        self.by_kind[kind] += 1
        self.recent.append(f"{who}: {text}")
        if said:
            self._said[kind] = said
        if self.by_kind[kind] <= self.full:
            self.log(f"refused a launcher at {who}: {text}")
        else:
            self._kinds[kind] += 1
            if who not in self._who and len(self._who) >= _ADDRESSES_COUNTED:
                who = "other addresses"
            self._who[who] += 1
        self.tick()

    def tick(self) -> None:
        """Tell the count of the refusals not told in full, when ``every`` seconds have passed."""
        now = self.clock()
        if now - self._since >= self.every:
            self._summary(f" in the last {now - self._since:.0f}s")

    def flush(self) -> None:
        """Tell the count of the refusals not told in full yet (at the end)."""
        self._summary("")

    def _summary(self, span: str) -> None:
        self._since = self.clock()
        count = sum(self._kinds.values())
        if not count:
            return
        addresses = ", ".join(f"{w}: {n}" for w, n in self._who.most_common(_ADDRESSES_SHOWN))
        if len(self._who) > _ADDRESSES_SHOWN:
            addresses += f", {len(self._who) - _ADDRESSES_SHOWN} more address(es)"
        kinds = ", ".join(
            f"{n} {self._said.get(k) or _SAID.get(k, k)}" for k, n in self._kinds.most_common()
        )
        self.log(f"refused {count} more connection(s){span} ({addresses}): {kinds}")
        self._kinds.clear()
        self._who.clear()
