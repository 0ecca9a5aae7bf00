"""The master's rendezvous: the membership of a multi-node launch, hosted by node 0's launcher.

This module owns the job's membership. :class:`Rendezvous` listens on the master's address
(exactly the address given), admits the launchers that present this job's id and protocol
version (:mod:`tfdp.launch.protocol`) -- and, when the job has a shared secret, a valid HMAC
on every message (:mod:`tfdp.launch.auth`) -- and runs the job in rounds:

* **gather** -- wait for the nodes: all ``N`` of a static job (``MIN == MAX``); for an
  elastic one, ``MAX``, or at least ``MIN`` and then ``last_call`` seconds more on the
  first round (a restart round goes on with the nodes present). Past ``timeout`` seconds
  the job ends, naming the nodes that did not join (and the joins that were refused).
* **run** -- every node gets the same ordered cluster (``start``), and reports when its
  workers end (``exited``). A node whose workers fail, whose launcher leaves, closes its
  connection, or goes silent (no heartbeat for ``silence`` seconds) ends the round -- unless
  workers of the round had completed already (exit 0): then the job completes when the
  other nodes' workers complete too (the lost node's end is not known, and said so).
* **stop** -- the round's other nodes stop their workers (``stop``) and say ``ready``;
  then, while restarts are left and enough nodes remain, the next round gathers (a node
  that came back joins it, up to ``MAX``); otherwise the job ends (``end``) with one
  summary: which node was lost or failed, and that no restarts are left.

Node 0 hosts the rendezvous: its loss (or its launcher leaving) ends the job, as with
torchrun's c10d store. Every wait is bounded, every read is limited to one message of
:data:`~tfdp.launch.protocol.MAX_MESSAGE_BYTES`, and a malformed or foreign message is
answered with an ``error`` and its connection closed -- never a crash. Strangers cannot
starve it: at most ``max_pending`` connections that have not joined are held (a new one
drops the oldest, told to retry), each gets ``first_message_timeout`` seconds to send a
valid join, and nothing a connection sends before its join is admitted changes the job.
What was refused is told by :class:`~tfdp.launch.refusals.Refusals` (a few in full, then
counts).

Example:
    >>> server = Rendezvous("127.0.0.1", 0, "job-1", 1, 1, master_instance="m")
    >>> server.start(); server.address[0]
    '127.0.0.1'
    >>> server.close()
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tfdp.launch.auth import Session, new_nonce
from tfdp.launch.plan import LaunchError, NodeSlot, bare_host, check_cluster, nnodes_text
from tfdp.launch.protocol import MAX_MESSAGE_BYTES, ProtocolError, decode, encode
from tfdp.launch.refusals import Refusals

DEFAULT_RDZV_TIMEOUT = 300.0
DEFAULT_LAST_CALL = 30.0
DEFAULT_HEARTBEAT = 1.0
DEFAULT_SILENCE = 10.0
# A connection must say who it is (its join) within this many seconds.
_FIRST_MESSAGE_SECONDS = 5.0
# Connections that have not joined yet, at most (beside room for every node's own).
_PENDING_CONNECTIONS = 64
# A peer that does not read its messages: dropped past this many bytes waiting to be sent.
_MAX_UNSENT_BYTES = 1 << 20
_LOST, _FAILED = 0, 1  # the order in which a round's events are told


@dataclass(eq=False)
class _Member:
    """A launcher that joined: who it is, its connection, and where it stands."""

    rank: int
    instance: str
    addr: str
    host: str
    writer: asyncio.StreamWriter
    session: Session
    ports: list[int] | None  # set while it is ready for the next round
    in_round: bool = False
    exited: int | None = None  # the return code it reported for this round
    gone: bool = False

    @property
    def name(self) -> str:
        return f"node {self.rank} ({self.addr})"


@dataclass
class _State:
    """Where the job stands (touched by the event loop's thread only)."""

    phase: str = "gather"  # gather | run | stop | end
    round: int = 0
    restarts: int = 0
    since: float = field(default_factory=time.monotonic)  # the phase's start
    enough_since: float | None = None  # elastic first round: MIN nodes ready since
    events: list[tuple[int, str]] = field(default_factory=list)  # why the round ends
    status: int | None = None  # the first failure's exit status
    reason: str = ""  # the previous round's summary (told with the next start)
    completed: set[int] = field(default_factory=set)  # ranks whose workers exited 0 this round
    unreported: list[str] = field(default_factory=list)  # lost once others had completed


class Rendezvous:
    """The rendezvous server of a multi-node launch (runs in a thread of node 0's launcher).

    Args:
        host: The address to listen on (the master address: exactly this one).
        port: The port (0: any free port, for tests).
        job: The job id every member must present.
        min_nodes: The fewest nodes a round runs on.
        max_nodes: The most nodes a round runs on (``== min_nodes``: a static job).
        master_instance: The instance id of node 0's own launcher (rank 0 is reserved
            for it).
        max_restarts: How many rounds may follow the first.
        timeout: Seconds a gathering waits for enough nodes before the job ends.
        last_call: Seconds the first round of an elastic job waits for more nodes once
            ``min_nodes`` joined.
        heartbeat: Seconds between the heartbeats sent to every member.
        silence: Seconds of silence after which a member is lost.
        stop_timeout: Seconds a stopping member gets to say ``ready`` before it is dropped.
        first_message_timeout: Seconds a new connection gets to send its join.
        log: Where the server's own notes go (refused connections).
        key: The rendezvous key (:func:`tfdp.launch.auth.secret_key`): every message must
            carry its HMAC. None: the job id is the only credential.
        max_pending: How many connections that have not joined are held at once (default
            64 + 2 per node); a new one beyond drops the oldest (told to retry).
        summary_every: Seconds between two counts of the refusals not told in full.
    """

    def __init__(
        self,
        host: str,
        port: int,
        job: str,
        min_nodes: int,
        max_nodes: int,
        *,
        master_instance: str,
        max_restarts: int = 0,
        timeout: float = DEFAULT_RDZV_TIMEOUT,
        last_call: float = DEFAULT_LAST_CALL,
        heartbeat: float = DEFAULT_HEARTBEAT,
        silence: float = DEFAULT_SILENCE,
        stop_timeout: float = 120.0,
        first_message_timeout: float = _FIRST_MESSAGE_SECONDS,
        log: Callable[[str], None] | None = None,
        key: bytes | None = None,
        max_pending: int | None = None,
        summary_every: float = 30.0,
    ) -> None:
        self.host, self.port, self.job = bare_host(host), port, job
        self.min_nodes, self.max_nodes = min_nodes, max_nodes
        self.master_instance = master_instance
        self.max_restarts = max_restarts
        self.timeout, self.last_call = timeout, last_call
        self.heartbeat, self.silence, self.stop_timeout = heartbeat, silence, stop_timeout
        self.first_message_timeout = first_message_timeout
        self.log = log or (lambda text: None)
        self.key = key
        self.max_pending = max_pending or _PENDING_CONNECTIONS + 2 * max_nodes
        self.members: dict[int, _Member] = {}
        self.refusals = Refusals(self.log, every=summary_every)
        self.state = _State()
        self._pending: dict[asyncio.StreamWriter, str] = {}  # not joined yet, oldest first
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.AbstractServer | None = None
        self._thread: threading.Thread | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self.address: tuple[str, int] = (self.host, port)

    # -- life cycle (called from the launcher's thread) ------------------------------------
    def start(self) -> None:
        """Bind the master address and serve in a thread.

        Raises:
            LaunchError: The address is not this machine's, or the port is taken.
        """
        try:
            sock = self._bind()
        except OSError as exc:
            raise self._bind_error(exc) from None
        self.address = sock.getsockname()[:2]
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._serve, sock=sock, limit=MAX_MESSAGE_BYTES)
        )
        self._thread = threading.Thread(target=self._run, name="tfdp-rendezvous", daemon=True)
        self._thread.start()

    def close(self, linger: float = 2.0) -> None:
        """Stop serving; messages already queued get up to ``linger`` seconds to leave."""
        if self._thread is None:
            return
        future = asyncio.run_coroutine_threadsafe(self._shutdown(linger), self._loop)
        with contextlib.suppress(Exception):
            future.result(timeout=linger + 5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        self._thread = None

    def _bind(self) -> socket.socket:
        family, kind, proto, _, addr = socket.getaddrinfo(
            self.host, self.port, type=socket.SOCK_STREAM
        )[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(addr)
            sock.listen(64)
        except OSError:
            sock.close()
            raise
        sock.setblocking(False)
        return sock

    def _bind_error(self, exc: OSError) -> LaunchError:
        where = f"{self.host}:{self.port}"
        if isinstance(exc, socket.gaierror):
            return LaunchError(
                f"{self.host!r} cannot be resolved ({exc.strerror})",
                argument="master_addr",
            )
        if exc.errno == errno.EADDRNOTAVAIL:
            return LaunchError(
                f"{self.host!r} is not an address of this machine: node 0 hosts "
                "the rendezvous there, so node 0 runs on the master's machine (is this node's "
                "node_rank right?)",
                argument="master_addr",
            )
        if exc.errno == errno.EADDRINUSE:
            return LaunchError(
                f"{self.port}: {where} is in use (another job's rendezvous?): choose another port",
                argument="master_port",
            )
        return LaunchError(f"{where}: cannot listen ({exc})", argument="master_addr")

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._spawn(self._tick())
        self._loop.run_forever()
        with contextlib.suppress(Exception):  # every task ends before the loop closes
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            self._loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        self._loop.close()

    def _spawn(self, coro: Any) -> None:
        task = self._loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _shutdown(self, linger: float) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._pending):
            writer.close()
        writers = [m.writer for m in self.members.values()]
        with contextlib.suppress(Exception):
            await asyncio.wait_for(
                asyncio.gather(*(w.drain() for w in writers), return_exceptions=True), linger
            )
        for writer in writers:
            writer.close()
        self.refusals.flush()

    # -- connections ---------------------------------------------------------------------
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:  # ended (cancelled) with the loop
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        peer = writer.get_extra_info("peername")
        who = peer[0] if isinstance(peer, tuple) else "?"
        self._make_room()
        self._pending[writer] = who
        member: _Member | None = None
        session: Session | None = None
        why = "its launcher's connection closed"
        try:
            nonce = new_nonce()
            writer.write(encode({"type": "hello", "nonce": nonce, "auth": self.key is not None},
                                self.job))  # fmt: skip
            line = await asyncio.wait_for(reader.readuntil(b"\n"), self.first_message_timeout)
            msg = decode(line, self.job, expect=("join",))
            session = Session(self.key, "master", nonce, msg["nonce"])
            session.check(msg)
            if self._pending.pop(writer, None) is None:
                return  # dropped to make room meanwhile (and told to retry)
            member = self._admit(msg, writer, who, session)
            while not member.gone:
                line = await asyncio.wait_for(reader.readuntil(b"\n"), self.silence)
                msg = decode(line, self.job, ("ready", "exited", "leave", "heartbeat"))
                session.check(msg)
                self._on_message(member, msg)
        except ProtocolError as exc:
            why = f"sent a message that was refused: {exc}"
            self._refuse(writer, who, exc, member, session)
        except asyncio.LimitOverrunError:
            why = f"sent a message longer than {MAX_MESSAGE_BYTES} bytes"
            self._refuse(writer, who, ProtocolError(why, kind="too long"), member, session)
        except TimeoutError:
            why = f"no heartbeat for {self.silence:g}s (machine down, stopped, or cut off?)"
            if member is None:
                said = f"sent nothing valid within {self.first_message_timeout:g}s"
                self.refusals.add(who, "silent", said, said=said)
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass  # closed (by the peer, or here: dropped to make room), or reset
        except Exception as exc:  # a bug must not end the rendezvous: drop this peer only
            why = f"internal error: {exc!r}"
        finally:
            self._pending.pop(writer, None)
            if member is not None:
                self._lost(member, why)
            writer.close()

    def _make_room(self) -> None:
        """Hold at most ``max_pending - 1`` connections that have not joined: drop the oldest."""
        while len(self._pending) >= self.max_pending:
            writer = next(iter(self._pending))
            who = self._pending.pop(writer)
            exc = ProtocolError(
                f"the rendezvous is busy ({self.max_pending} connections have not joined): "
                "try again",
                kind="busy",
                retry=True,
            )
            self._refuse(writer, who, exc, None, None)
            writer.close()

    def _refuse(
        self,
        writer: asyncio.StreamWriter,
        who: str,
        exc: ProtocolError,
        member: _Member | None,
        session: Session | None,
    ) -> None:
        text = str(exc)
        if member is None:
            self.refusals.add(who, exc.kind, text)
        refusal = {"type": "error", "message": exc.message[:8000], "argument": exc.argument,
                   "retry": exc.retry}  # fmt: skip
        with contextlib.suppress(Exception):
            sealed = session.seal(refusal, self.job) if session else {**refusal, "seq": 0}
            writer.write(encode(sealed, exc.job or self.job))  # a foreign job can read it

    def _admit(
        self, msg: dict[str, Any], writer: asyncio.StreamWriter, who: str, session: Session
    ) -> _Member:
        rank, instance = msg["node_rank"], msg["instance"]
        ours = nnodes_text(self.min_nodes, self.max_nodes)
        theirs = nnodes_text(msg["min_nodes"], msg["max_nodes"])
        where = f"node 0 at {self.host}:{self.address[1]}"
        if theirs != ours:
            raise ProtocolError(
                f"{theirs} differs from the master's {ours} ({where}): give every "
                "node the same value",
                argument="nnodes",
                kind="join",
            )
        if rank >= self.max_nodes:
            raise ProtocolError(
                f"{rank} is not in 0..{self.max_nodes - 1} (nnodes {ours})",
                argument="node_rank",
                kind="join",
            )
        if msg["nproc"] != len(msg["ports"]):
            raise ProtocolError("malformed join message: nproc differs from its ports", kind="join")
        if rank == 0 and instance != self.master_instance:
            raise ProtocolError(
                f"0 is the master's ({where} hosts the rendezvous): give this node "
                f"another rank in 1..{self.max_nodes - 1}",
                argument="node_rank",
                kind="join",
            )
        old = self.members.get(rank)
        if old is not None and old.instance != instance:
            raise ProtocolError(
                f"{rank} is taken by the node at {old.addr}"
                + (f" ({old.host})" if old.host else "")
                + f": give every node its own rank in 0..{self.max_nodes - 1}",
                argument="node_rank",
                kind="join",
            )
        if self.state.phase == "end":
            raise ProtocolError("the job has ended", kind="ended")
        if old is not None:  # the same launcher again: its old connection was cut
            self._lost(old, "its connection was interrupted (it reconnected)")
            old.writer.close()
        member = _Member(rank, instance, msg["addr"], msg["host"], writer, session,
                         list(msg["ports"]))  # fmt: skip
        self.members[rank] = member
        waiting = self.state.phase != "gather"
        note = (
            "the job is running: this node joins at the next restart"
            if waiting
            else f"waiting for the other nodes (nnodes {ours})"
        )
        self._send(member, {"type": "ack", "waiting": waiting, "message": note})
        self._check()
        return member

    def _send(self, member: _Member, message: dict[str, Any]) -> None:
        if member.gone:
            return
        try:
            if member.writer.transport.get_write_buffer_size() > _MAX_UNSENT_BYTES:
                raise ConnectionError("it does not read its messages")
            member.writer.write(encode(member.session.seal(message, self.job), self.job))
        except (ConnectionError, RuntimeError, OSError):
            member.writer.close()  # its handler ends and reports it lost

    def _broadcast(self, message: dict[str, Any], members: list[_Member] | None = None) -> None:
        for member in list(self.members.values()) if members is None else members:
            self._send(member, message)

    # -- the job -------------------------------------------------------------------------
    def _on_message(self, member: _Member, msg: dict[str, Any]) -> None:
        kind, st = msg["type"], self.state
        if kind == "ready":
            member.ports = list(msg["ports"])
            if member.in_round and st.phase == "run":
                self._event(_FAILED, f"{member.name}: its workers were stopped", 1)
            member.in_round = False
        elif kind == "exited":
            if not member.in_round or msg["round"] != st.round or st.phase != "run":
                return  # a report of an earlier round, or after this one was stopped
            member.exited = msg["returncode"]
            if member.exited == 0:
                st.completed.add(member.rank)
            else:
                status = member.exited if member.exited > 0 else 128 - member.exited
                self._event(_FAILED, f"{member.name}: {msg['detail']}", status)
        elif kind == "leave":
            signum = msg["signal"]
            why = f"{member.name} left: {msg['reason']}" if msg["reason"] else f"{member.name} left"
            if member.rank == 0:
                status = 128 + signum if signum else 1
                self._end(status, f"the master node 0 ended the job ({why})", signum)
            self._lost(member, msg["reason"] or "it left")
        self._check()

    def _lost(self, member: _Member, why: str) -> None:
        if member.gone:
            return
        member.gone = True
        if self.members.get(member.rank) is member:
            del self.members[member.rank]
        st = self.state
        if member.rank == 0 and st.phase != "end":
            self._end(1, f"the master node 0's own launcher was lost ({why})", 0)
        elif member.in_round and st.phase in ("run", "stop") and member.exited != 0:
            if st.phase == "run" and st.completed:  # the round's workers were completing
                st.unreported.append(f"{member.name} was lost ({why})")
            else:
                self._event(_LOST, f"{member.name} lost: {why}", 1)
        self._check()

    def _event(self, order: int, text: str, status: int) -> None:
        st = self.state
        st.events.append((order, text))
        if st.status is None or (order == _FAILED and st.status == 1 and status != 1):
            st.status = status
        if st.phase == "run":
            st.phase, st.since = "stop", time.monotonic()
            others = [m for m in self.members.values() if m.in_round]
            self._broadcast(
                {"type": "stop", "round": st.round, "reason": text,
                 "signal": int(signal.SIGTERM)}, others)  # fmt: skip

    def _end(self, status: int, message: str, signum: int = 0) -> None:
        st = self.state
        if st.phase == "end":
            return
        st.phase = "end"
        self._broadcast({"type": "end", "status": status, "message": message, "signal": signum})

    def _check(self) -> None:
        """Move the job on: start a gathered round, finish a stopped one, end on timeouts."""
        st, now = self.state, time.monotonic()
        if st.phase == "stop":
            stopping = [m for m in self.members.values() if m.in_round]
            if stopping and now - st.since > self.stop_timeout:
                for m in stopping:
                    self._event(_LOST, f"{m.name} lost: it did not stop its workers within "
                                f"{self.stop_timeout:g}s", 1)  # fmt: skip
                    m.in_round = False
                    m.writer.close()
                stopping = []
            if not stopping:
                self._round_over()
        if st.phase == "run":
            running = [m for m in self.members.values() if m.in_round]
            if st.completed and all(m.exited == 0 for m in running):
                nodes = ", ".join(str(r) for r in sorted(st.completed))
                text = f"the job completed on node(s) {nodes}"
                if st.unreported:  # its workers' end is not known: say so, do not guess
                    text += (f"; {'; '.join(st.unreported)} after workers of the round had "
                             "completed: its workers' own end was not reported")  # fmt: skip
                self._end(0, text)
        if st.phase == "gather":
            self._gather(now)

    def _round_over(self) -> None:
        st = self.state
        summary = "; ".join(text for _, text in sorted(st.events, key=lambda e: e[0]))
        status = st.status or 1
        st.events, st.status = [], None
        if st.restarts >= self.max_restarts:
            used = f"{st.restarts} restart{'s' if st.restarts != 1 else ''}"
            after = f" (after {used})" if st.restarts else ""
            self._end(status, f"{summary}; no restarts left{after}")
            return
        st.restarts += 1
        st.round += 1
        st.phase, st.since, st.enough_since = "gather", time.monotonic(), None
        st.reason = summary
        self._gather(st.since)
        if st.phase == "gather":  # not enough nodes yet: say what the job waits for
            here = {m.rank for m in self.members.values()}
            missing = ", ".join(str(r) for r in range(self.max_nodes) if r not in here)
            need = (
                f"node(s) {missing} to rejoin"
                if self.min_nodes == self.max_nodes
                else f"at least {self.min_nodes} nodes (here: {len(here)})"
            )
            self._broadcast({"type": "note", "message": (
                f"the group stopped after: {summary}; restart {st.restarts} of "
                f"{self.max_restarts} waits up to {self.timeout:g}s for {need}")})  # fmt: skip

    def _gather(self, now: float) -> None:
        st = self.state
        ready = sorted((m for m in self.members.values() if m.ports is not None),
                       key=lambda m: m.rank)  # fmt: skip
        go = False
        if len(ready) < self.min_nodes:
            st.enough_since = None
        if len(ready) >= self.max_nodes:
            go = True
        elif len(ready) >= self.min_nodes and self.min_nodes < self.max_nodes:
            if st.round > 0:
                go = True  # a restart goes on with the nodes that are here
            else:
                st.enough_since = st.enough_since or now
                go = now - st.enough_since >= self.last_call
        if go:
            self._start(ready[: self.max_nodes])
        elif now - st.since > self.timeout:
            self._end(1, self._timeout_message(ready))

    def _timeout_message(self, ready: list[_Member]) -> str:
        st = self.state
        here = {m.rank for m in ready}
        missing = [r for r in range(self.max_nodes) if r not in here]
        static = self.min_nodes == self.max_nodes
        need = (
            f"all {self.max_nodes}" if static else f"at least {self.min_nodes} of {self.max_nodes}"
        )
        verb = "rejoin" if st.round > 0 else "join"
        joined = ", ".join(m.name for m in ready) or "none"
        text = (
            f"node(s) {', '.join(map(str, missing))} did not {verb} within "
            f"{self.timeout:g}s: {need} nodes are needed, joined: {joined}"
        )
        if self.refusals.recent:
            more = self.refusals.total - len(self.refusals.recent)
            text += "; refused: " + "; ".join(self.refusals.recent)
            text += f" (and {more} more)" if more else ""
        if st.round > 0:
            text += f" (the job stopped after: {st.reason})"
        return text

    def _start(self, nodes: list[_Member]) -> None:
        st = self.state
        slots = [NodeSlot(m.addr, tuple(m.ports or ()), m.rank) for m in nodes]
        try:
            check_cluster(slots)
        except LaunchError as exc:
            self._end(2, f"the nodes cannot form a cluster: {exc}")
            return
        message = {
            "type": "start",
            "round": st.round,
            "restart": st.restarts,
            "nodes": [
                {"node_rank": s.node_rank, "addr": s.addr, "ports": list(s.ports)} for s in slots
            ],
            "reason": st.reason,
            "max_restarts": self.max_restarts,
        }
        for m in nodes:
            m.in_round, m.exited, m.ports = True, None, None
        st.phase, st.since = "run", time.monotonic()
        st.completed, st.unreported = set(), []
        self._broadcast(message, nodes)

    async def _tick(self) -> None:
        last_beat = 0.0
        while True:
            await asyncio.sleep(min(self.heartbeat, 0.2))
            now = time.monotonic()
            if now - last_beat >= self.heartbeat:
                last_beat = now
                self._broadcast({"type": "heartbeat"})
            self._check()
            self.refusals.tick()
