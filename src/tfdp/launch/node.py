"""One node of a multi-node launch: meet the others at the master, run this node's workers.

This module owns a node's launcher in a job of several nodes, torchrun's shape: every node
runs ``launch_nodes`` with the same command, the master's address and port, and its own node
rank. Node 0 also hosts the rendezvous (:class:`tfdp.launch.rendezvous.Rendezvous`) on the
master's address. Every node joins there (:mod:`tfdp.launch.join`: retried until the
rendezvous timeout; with ``TFDP_RDZV_SECRET``, every message authenticated), says its
address (``node_addr``, or the address its connection to the master leaves from) and its
workers' ports, and waits for the round's ordered cluster. Then it starts its workers with
:func:`tfdp.launch.plan.plan_node`'s environment under the :class:`~tfdp.launch.supervise.
Supervisor`, reports how they ended, and follows the master: ``stop`` (stop the workers,
report ``ready`` with fresh ports for the next round), ``start`` (the next round: a restart,
``TFDP_RESTART`` incremented), ``end`` (exit with the job's status, printing its summary).

A node that loses the master stops its workers and reconnects for up to the rendezvous
timeout (a cut link that comes back: the node rejoins at the next round); a master that
refuses connections is gone, and the job with it. A node whose workers completed (and said
so) has nothing left to do: losing the master then ends it with 0. SIGINT / SIGTERM to a
node's launcher are forwarded to its workers and the node leaves the job (node 0 leaving
ends the job: the others forward the same signal to their workers).

Example:
    $ tfdp launch --nnodes 2 --node-rank 0 --master-addr 10.0.0.1 --nproc-per-node 2 -- cmd
    $ tfdp launch --nnodes 2 --node-rank 1 --master-addr 10.0.0.1 --nproc-per-node 2 -- cmd
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from tfdp._compat.fast.process import prefer_bfc_cpu_allocator
from tfdp.launch.auth import SECRET_ENV, secret_key
from tfdp.launch.channel import Channel, ChannelClosedError
from tfdp.launch.join import InterruptedJoinError, Joiner, MasterGoneError
from tfdp.launch.plan import (
    LaunchError,
    NodeSlot,
    bare_host,
    check_host,
    check_workers,
    default_rdzv_id,
    nnodes_text,
    plan_node,
    ports_from_base,
)
from tfdp.launch.rendezvous import (
    DEFAULT_LAST_CALL,
    DEFAULT_RDZV_TIMEOUT,
    DEFAULT_SILENCE,
    Rendezvous,
)
from tfdp.launch.supervise import (
    DEFAULT_GRACE_SECONDS,
    Outcome,
    Output,
    StartError,
    StopRequest,
    Supervisor,
    check_launch_options,
    describe_exit,
    forwarded_signals,
    free_ports,
    signal_name,
)

DEFAULT_MASTER_PORT = 29400


class _Node:
    """The state of one node's launcher across the job's rounds."""

    def __init__(
        self,
        command: list[str],
        nproc: int,
        *,
        node_rank: int,
        nnodes: tuple[int, int],
        joiner: Joiner,
        env: dict[str, str],
        resume_hint: str | None,
        sup: Supervisor,
        instance: str,
        port_base: int | None = None,
    ) -> None:
        self.command, self.nproc, self.rank, self.nnodes = command, nproc, node_rank, nnodes
        self.joiner, self.where = joiner, joiner.where
        self.env, self.resume_hint, self.sup, self.instance = env, resume_hint, sup, instance
        self.out = sup.out
        self.port_base = port_base
        self.chan: Channel | None = None
        self.addr = joiner.node_addr or ""
        self.round = -1
        self.completed = -1  # the last round whose workers all exited 0 here (reported)
        self.announced = False  # a signal to this launcher was told to the master
        self.pending: dict[str, Any] | None = None  # a message read early (during the join)
        self.stop_message: dict[str, Any] | None = None  # what stopped the running round

    # -- the master connection -----------------------------------------------------------
    def join(self, first: bool) -> None:
        """Join the master (again): retried until the rendezvous timeout (:mod:`.join`)."""
        low, high = self.nnodes

        def message(addr: str) -> dict[str, Any]:
            self.addr = addr
            return {"type": "join", "node_rank": self.rank, "min_nodes": low,
                    "max_nodes": high, "nproc": self.nproc, "addr": addr,
                    "ports": self._ports(), "instance": self.instance,
                    "host": socket.gethostname()[:255]}  # fmt: skip

        joined = self.joiner.join(message, first)
        self.chan, reply = joined.chan, joined.reply
        if reply["type"] == "ack":
            self.out.message(
                f"node {self.rank} ({self.addr}) joined the rendezvous at {self.where}: "
                f"{reply['message']}"
            )
        else:  # a start or end that crossed the ack: handle it as the next message
            self.pending = reply

    def _ports(self) -> list[int]:
        if self.port_base is not None:
            return ports_from_base(self.port_base, self.nproc)
        return free_ports(self.nproc, self.addr or "0.0.0.0")

    def _receive(self, timeout: float) -> dict[str, Any] | None:
        if self.pending is not None:
            pending, self.pending = self.pending, None
            return pending
        assert self.chan is not None
        return self.chan.receive(timeout)

    def _send(self, message: dict[str, Any]) -> None:
        if self.chan is not None:
            with contextlib.suppress(ChannelClosedError):
                self.chan.send(message)

    # -- the rounds ----------------------------------------------------------------------
    def run(self) -> int:
        """Join, then follow the master round after round; returns the exit status."""
        self.join(first=True)
        while True:
            try:
                status = self._follow()
            except ChannelClosedError as exc:
                status = self._lost(str(exc))
            if status is not None:
                return status

    def _follow(self) -> int | None:
        """Wait for the master's next word and act on it; a status ends the launch."""
        while True:
            if self.sup.signals:
                return self._leave(self.sup.signals[0])
            msg = self._receive(timeout=0.1)
            if msg is None:
                continue
            if msg["type"] == "end":
                return self._end(msg)
            if msg["type"] == "note":
                self.out.message(msg["message"])
            elif msg["type"] == "stop":
                self._send({"type": "ready", "ports": self._ports()})
            elif msg["type"] == "start":
                status = self._round(msg)
                if status is not None:
                    return status

    def _round(self, msg: dict[str, Any]) -> int | None:
        nodes = [NodeSlot(n["addr"], tuple(n["ports"]), n["node_rank"]) for n in msg["nodes"]]
        mine = [i for i, n in enumerate(nodes) if n.node_rank == self.rank]
        self.round = msg["round"]
        if not mine:  # not in this round (the master never does this): wait for the next
            return None
        group_rank = mine[0]
        specs = plan_node(self.command, nodes, group_rank, env=self.env, restart=msg["restart"])
        world = sum(n.workers for n in nodes)
        ranks = f"{specs[0].index}" if len(specs) == 1 else f"{specs[0].index}-{specs[-1].index}"
        if msg["restart"]:
            self.out.message(
                f"restarting the group (restart {msg['restart']} of {msg['max_restarts']}) "
                f"after: {msg['reason']}"
            )
        self.out.message(
            f"round {self.round}: {len(nodes)} node(s), {world} worker(s); this node "
            f"(node {self.rank}, {self.addr}) runs worker(s) {ranks}"
        )
        self.stop_message = None
        try:
            outcome = self.sup.run_group(specs, poll=self._poll)
        except StartError as exc:
            self._send({"type": "leave", "reason": str(exc), "signal": 0})
            raise LaunchError(str(exc)) from exc.error
        return self._after(outcome)

    def _poll(self) -> StopRequest | None:
        """Called by the supervisor while the workers run: the master's stop, end, or loss."""
        if self.sup.signals and not self.announced:
            self.announced = True
            signum = self.sup.signals[0]
            self._send({"type": "leave", "reason": f"interrupted by {signal_name(signum)}",
                        "signal": signum})  # fmt: skip
        try:
            msg = self._receive(timeout=0)
        except ChannelClosedError as exc:
            self.stop_message = {"type": "lost", "reason": str(exc)}
            return StopRequest(int(signal.SIGTERM), str(exc))
        if msg is None or msg["type"] not in ("stop", "end"):
            return None
        if msg["type"] == "stop" and msg["round"] != self.round:
            return None
        if msg["type"] == "stop":
            self.out.message(f"stopping this node's workers: {msg['reason']}")
        self.stop_message = msg
        return StopRequest(msg["signal"] or int(signal.SIGTERM), msg.get("reason", ""))

    def _after(self, outcome: Outcome) -> int | None:
        if outcome.signum is not None:
            return self._leave(outcome.signum)
        if outcome.request is not None:
            msg = self.stop_message or {}
            if msg.get("type") == "end":
                return self._end(msg)
            if msg.get("type") == "lost":
                raise ChannelClosedError(msg["reason"])
            self._send({"type": "ready", "ports": self._ports()})
            return None
        if outcome.failed_index is None:
            self.completed = self.round
            self._send({"type": "exited", "round": self.round, "returncode": 0, "detail": ""})
        else:
            detail = describe_exit(outcome.failed_index, outcome.returncode)
            self._send({"type": "exited", "round": self.round,
                        "returncode": max(min(outcome.returncode, 255), -64),
                        "detail": detail})  # fmt: skip
        return None

    def _end(self, msg: dict[str, Any]) -> int:
        status, text = msg["status"], msg["message"]
        if status == 0:
            self.out.message(text)
        else:
            self.out.message(f"error: {text}{'' if msg['signal'] else self._hint()}")
        self._close()
        return status

    def _hint(self) -> str:
        if not self.resume_hint or self.round < 0:  # no worker ever started
            return ""
        return (
            ". To continue from the last checkpoint, start the launchers again on every "
            f"node: {self.resume_hint}"
        )

    def _leave(self, signum: int) -> int:
        if not self.announced:
            self.announced = True
            self._send({"type": "leave", "reason": f"interrupted by {signal_name(signum)}",
                        "signal": signum})  # fmt: skip
        self.out.message(f"error: interrupted by {signal_name(signum)}")
        self._close()
        return 128 + signum

    def _close(self) -> None:
        if self.chan is not None:
            self.chan.close()
            self.chan = None

    def _lost(self, why: str) -> int | None:
        """The master connection broke: reconnect for up to the timeout, or end.

        A node whose workers completed (and said so) has nothing left to do: it ends with 0
        at once, whatever became of the master or the network after that.
        """
        self._close()
        if self.rank == 0:
            self.out.message(f"error: this node's own rendezvous failed ({why})")
            return 1
        if self.completed == self.round >= 0:
            self.out.message(
                f"this node's workers completed, then the master node 0 at {self.where} was "
                f"lost ({why}) before it told the job's end: this node is done"
            )
            return 0
        self.out.message(
            f"lost the master node 0 at {self.where} ({why}): reconnecting for up to "
            f"{self.joiner.timeout:g}s"
        )
        try:
            self.join(first=False)
        except MasterGoneError as exc:
            self.out.message(f"error: {exc}{self._hint()}")
            return exc.status
        except LaunchError as exc:  # it refuses this node now
            self._close()
            why = str(exc).split(f"{self.where}: ", 1)[-1]
            self.out.message(
                f"error: the master node 0 at {self.where} cannot be rejoined ({why}): the job "
                f"ends for this node{self._hint()}"
            )
            return 1
        return None


def _worker_env(env: Mapping[str, str], silence: float) -> dict[str, str]:
    """The base environment of the workers: TensorFlow's heartbeat timeout agrees with ours.

    A machine silent for ``silence`` seconds is lost to the launchers; its workers' peers
    declare it lost after the same time (``TFDP_HEARTBEAT_TIMEOUT``, read by
    :func:`tfdp.distribute.make_strategy`), unless the environment sets that already. The
    workers' TensorFlow keeps its host memory for reuse
    (:func:`tfdp._compat.fast.process.prefer_bfc_cpu_allocator`), likewise. The rendezvous secret
    (``TFDP_RDZV_SECRET``) is the launchers' alone: the workers do not get it.
    """
    out = {k: v for k, v in env.items() if k != SECRET_ENV}
    out.setdefault("TFDP_HEARTBEAT_TIMEOUT", f"{silence:g}")
    prefer_bfc_cpu_allocator(out)
    return out


def launch_nodes(
    command: Sequence[str],
    nproc: int,
    *,
    node_rank: int,
    nnodes: tuple[int, int],
    master_addr: str,
    master_port: int = DEFAULT_MASTER_PORT,
    node_addr: str | None = None,
    port_base: int | None = None,
    rdzv_id: str | None = None,
    rdzv_timeout: float = DEFAULT_RDZV_TIMEOUT,
    rdzv_last_call: float = DEFAULT_LAST_CALL,
    max_restarts: int = 0,
    grace_seconds: float = DEFAULT_GRACE_SECONDS,
    env: Mapping[str, str] | None = None,
    resume_hint: str | None = None,
    heartbeat: float = 1.0,
    silence: float = DEFAULT_SILENCE,
) -> int:
    """Run this node's part of a multi-node launch; returns the launcher's exit status.

    Args:
        command: The worker command, the same on every node.
        nproc: How many workers this node runs.
        node_rank: This node's rank, ``0 .. MAX-1`` (0 hosts the rendezvous).
        nnodes: ``(MIN, MAX)`` nodes (:func:`tfdp.launch.plan.parse_nnodes`); equal: static.
        master_addr: Node 0's address, where the rendezvous listens.
        master_port: The rendezvous port.
        node_addr: The address this node's workers are reached at (default: the address
            its connection to the master leaves from).
        port_base: This node's workers listen on ``port_base + i`` (default: free ports,
            chosen again for every round).
        rdzv_id: The job id (default :func:`tfdp.launch.plan.default_rdzv_id` of the command).
        rdzv_timeout: Seconds to wait for the master and for enough nodes to (re)join.
        rdzv_last_call: Seconds an elastic job's first round waits for more nodes after MIN.
        max_restarts: How many times the group may restart (a failure, a lost node).
        grace_seconds: Seconds between SIGTERM and SIGKILL when stopping workers.
        env: The base environment (default ``os.environ``). Its ``TFDP_RDZV_SECRET``, when
            set (at least 16 characters, the same on every node), authenticates every
            rendezvous message (:mod:`tfdp.launch.auth`); the workers do not get it.
        resume_hint: The command that continues the job, told when it ends failing.
        heartbeat: Seconds between heartbeats on the rendezvous connection.
        silence: Seconds without a message after which a peer is lost (also the workers'
            TensorFlow heartbeat timeout, ``TFDP_HEARTBEAT_TIMEOUT``, unless ``env`` sets it).

    Returns:
        0 when the job completed, or when this node's workers completed and the master was
        lost after that; the first failure's status when it ended failing (128+N for a
        worker killed by signal N, 1 for a lost node or a rendezvous timeout); 128+N when
        this launcher (or node 0's) was interrupted by signal N.

    Raises:
        LaunchError: Bad arguments, a join the master refused (job id, node rank, nnodes,
            secret), a master unreachable within ``rdzv_timeout``, or a command that
            cannot start.
    """
    command = [str(a) for a in command]
    check_workers(nproc, "nproc")
    check_launch_options(max_restarts, grace_seconds)
    low, high = nnodes
    if not 1 <= low <= high:
        raise LaunchError(f"{nnodes!r}: expected 1 <= MIN <= MAX", argument="nnodes")
    if isinstance(node_rank, bool) or not isinstance(node_rank, int):
        raise LaunchError(f"must be an integer, got {node_rank!r}", argument="node_rank")
    if not 0 <= node_rank < high:
        raise LaunchError(
            f"{node_rank} is not in 0..{high - 1} ({{nnodes}} {nnodes_text(low, high)})",
            argument="node_rank",
            mentions=["nnodes"],
        )
    check_host(master_addr, "master_addr")
    if node_addr is not None:
        check_host(node_addr, "node_addr")
    for name, value in (("rdzv_timeout", rdzv_timeout), ("rdzv_last_call", rdzv_last_call)):
        if not value >= 0:
            raise LaunchError(f"must be >= 0 seconds, got {value!r}", argument=name)
    for name, value in (("heartbeat", heartbeat), ("silence", silence)):
        if not value > 0:
            raise LaunchError(f"must be > 0 seconds, got {value!r}", argument=name)
    if not command:
        raise LaunchError("nothing to run: give the program each worker runs",
                          argument="command")  # fmt: skip
    if port_base is not None:
        ports_from_base(port_base, nproc)
    job = rdzv_id if rdzv_id is not None else default_rdzv_id(command)
    if not job or len(job) > 200:
        raise LaunchError(f"{job!r}: expected 1..200 characters", argument="rdzv_id")
    base_env = os.environ if env is None else env
    key = secret_key(base_env)

    out = Output()
    sup = Supervisor(grace_seconds, out)
    instance = uuid.uuid4().hex
    server = None
    if node_rank == 0:
        server = Rendezvous(
            master_addr, master_port, job, low, high,
            master_instance=instance, max_restarts=max_restarts, timeout=rdzv_timeout,
            last_call=rdzv_last_call, heartbeat=heartbeat, silence=silence,
            stop_timeout=2 * grace_seconds + 60, log=out.message, key=key,
        )  # fmt: skip
        server.start()
    joiner = Joiner(
        (bare_host(master_addr), server.address[1] if server else master_port), job, key,
        node_addr, rdzv_timeout, heartbeat, silence, out, lambda: bool(sup.signals),
    )  # fmt: skip
    node = _Node(
        command, nproc, node_rank=node_rank, nnodes=(low, high), joiner=joiner,
        env=_worker_env(base_env, silence), resume_hint=resume_hint, sup=sup,
        instance=instance, port_base=port_base,
    )  # fmt: skip
    try:
        with forwarded_signals(sup):
            try:
                return node.run()
            except InterruptedJoinError:
                signum = sup.signals[0]
                out.message(f"error: interrupted by {signal_name(signum)}")
                return 128 + signum
    finally:
        node._close()
        if server is not None:
            server.close()
