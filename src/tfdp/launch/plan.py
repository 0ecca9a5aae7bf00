"""The launch plan: what every worker of a group runs, as a pure function of the cluster.

This module owns the arithmetic of a launch and nothing else -- no processes, sockets or
global state, as in huggingface/accelerate's launch plan. Given the ordered cluster of one
round (each node's address and its workers' ports, the same list on every node),
:func:`plan_node` returns the argv and environment of this node's workers: ``TF_CONFIG``
for ``MultiWorkerMirroredStrategy``, torchrun's ``RANK`` / ``WORLD_SIZE`` / ``LOCAL_RANK``
/ ``LOCAL_WORLD_SIZE`` / ``GROUP_RANK`` / ``GROUP_WORLD_SIZE`` / ``MASTER_ADDR`` /
``MASTER_PORT``, and ``TFDP_WORKER_INDEX`` / ``TFDP_NUM_WORKERS`` / ``TFDP_RESTART``.
:func:`plan` is the one-node case. It also owns the checks of a launch's own values:
:func:`parse_nnodes` (``"2"``, ``"1:4"``), :func:`check_cluster` (addresses every node can
reach), :func:`ports_from_base`, and :func:`default_rdzv_id` (the job id every node of a
multi-node launch presents).

Example:
    >>> nodes = [NodeSlot("10.0.0.1", (2222, 2223)), NodeSlot("10.0.0.2", (2222, 2223))]
    >>> [s.env["RANK"] for s in plan_node(["python", "t.py"], nodes, 1, env={})]
    ['2', '3']
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tfdp.errors import ConfigError


class LaunchError(ConfigError):
    """A launch that cannot start or go on: bad arguments, ports, command, or rendezvous.

    ``argument`` names the argument of :func:`tfdp.launch.launch` / :func:`plan` /
    :func:`tfdp.launch.launch_nodes` at fault.

    Example:
        >>> try:
        ...     ports_from_base(65535, 2)
        ... except LaunchError as exc:
        ...     print(exc.argument, "|", exc)
        port_base | port_base: 65535 with 2 workers needs ports up to 65536, past 65535: use a lower base port
    """  # noqa: E501


@dataclass(frozen=True)
class WorkerSpec:
    """What one worker process runs: its global index, argv, and complete environment.

    Attributes:
        index: The worker's task index in ``TF_CONFIG`` (its global rank; 0 is the chief).
        argv: The command to run (the launch command, unchanged).
        env: The worker's full environment (the parent's plus the tfdp variables).

    Example:
        >>> spec = plan(["python", "train.py"], [2222, 2223], env={})[1]
        >>> spec.index, spec.argv, spec.env["TFDP_WORKER_INDEX"]
        (1, ['python', 'train.py'], '1')
    """

    index: int
    argv: list[str]
    env: dict[str, str] = field(repr=False)


@dataclass(frozen=True)
class NodeSlot:
    """One node of a round's cluster: the address its workers listen on, and their ports.

    Attributes:
        addr: The node's address (host name or IP; an IPv6 literal may be bracketed).
        ports: One TCP port per worker of the node.
        node_rank: The node's own rank (stable across restarts;
            its position in the round's list is its ``GROUP_RANK``).

    Example:
        >>> NodeSlot("10.0.0.2", (2222,), node_rank=2).workers
        1
    """

    addr: str
    ports: tuple[int, ...]
    node_rank: int = 0

    @property
    def workers(self) -> int:
        """How many workers the node runs."""
        return len(self.ports)


def address(host: str, port: int) -> str:
    """``host:port``, with an IPv6 literal in brackets as gRPC wants it.

    Example:
        >>> address("::1", 80), address("10.0.0.1", 80)
        ('[::1]:80', '10.0.0.1:80')
    """
    if ":" in host and not host.startswith("["):
        return f"[{host}]:{port}"
    return f"{host}:{port}"


def bare_host(host: str) -> str:
    """``host`` without the brackets of a bracketed IPv6 literal.

    Example:
        >>> bare_host("[::1]")
        '::1'
    """
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def check_host(host: str, argument: str = "host") -> None:
    """Refuse an empty host or one with spaces (a host name or IP address is expected)."""
    if not isinstance(host, str) or not host or any(c.isspace() for c in host):
        raise LaunchError(f"{host!r}: expected a host name or IP address", argument=argument)


def check_workers(workers: int, argument: str = "workers") -> None:
    """Refuse a number of workers that is not an integer >= 1."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise LaunchError(f"must be an integer >= 1, got {workers!r}", argument=argument)


def _check_ports(ports: Sequence[int]) -> None:
    for port in ports:
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise LaunchError(f"port {port!r} is out of range: ports are 1..65535")


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (``127.x``, ``::1``, ``localhost``).

    Example:
        >>> is_loopback("127.0.0.2"), is_loopback("[::1]"), is_loopback("10.0.0.1")
        (True, True, False)
    """
    name = bare_host(host)
    if name.lower() in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def check_cluster(nodes: Sequence[NodeSlot]) -> None:
    """Refuse a cluster its nodes cannot use: no node, repeated addresses, mixed loopback.

    A node whose address is a loopback address is reachable only from its own machine:
    beside nodes with other addresses it is a configuration error (its workers would be
    unreachable), named here before any worker starts.

    Args:
        nodes: The round's nodes, in order.

    Raises:
        LaunchError: No node, a bad address or port, a repeated ``address:port``, or a
            loopback address among non-loopback ones.

    Example:
        >>> check_cluster([NodeSlot("127.0.0.1", (1,)), NodeSlot("127.0.0.1", (2,))])
        >>> check_cluster([NodeSlot("127.0.0.1", (1,), 0), NodeSlot("10.0.0.2", (2,), 1)])
        Traceback (most recent call last):
        ...
        tfdp.launch.plan.LaunchError: node_addr: node 0's address 127.0.0.1 is a loopback address, which node 1 (10.0.0.2) cannot reach: start that node's launcher with an address the others reach (master_addr for node 0, else node_addr)
    """  # noqa: E501
    if not nodes:
        raise LaunchError("the cluster has no node")
    seen: dict[str, int] = {}
    for node in nodes:
        check_host(node.addr, "node_addr")
        check_workers(len(node.ports), "ports")
        _check_ports(node.ports)
        for port in node.ports:
            key = address(bare_host(node.addr), port)
            if key in seen:
                raise LaunchError(
                    f"nodes {seen[key]} and {node.node_rank} both give {key}: every worker "
                    "needs its own address and port"
                )
            seen[key] = node.node_rank
    loopback = [n for n in nodes if is_loopback(n.addr)]
    others = [n for n in nodes if not is_loopback(n.addr)]
    if loopback and others:
        bad, far = loopback[0], others[0]
        raise LaunchError(
            f"node {bad.node_rank}'s address {bad.addr} is a loopback address, which node "
            f"{far.node_rank} ({far.addr}) cannot reach: start that node's launcher with an "
            "address the others reach ({master_addr} for node 0, else {node_addr})",
            argument="node_addr",
            mentions=["master_addr", "node_addr"],
        )


def plan_node(
    command: Sequence[str],
    nodes: Sequence[NodeSlot],
    group_rank: int,
    *,
    env: Mapping[str, str],
    restart: int = 0,
) -> list[WorkerSpec]:
    """Plan the workers of node ``nodes[group_rank]`` in a cluster of ``nodes``.

    Pure: no processes, sockets, or global state. The cluster's workers are the nodes'
    ports in order (node 0's first): worker ``i`` of the cluster listens on its node's
    address and port, and gets the same cluster in ``TF_CONFIG`` with its own task index
    (its global rank). Every worker also gets ``TFDP_WORKER_INDEX`` (its global rank),
    ``TFDP_NUM_WORKERS``, ``TFDP_RESTART`` (how many times the group has been restarted,
    so a training script can tell a restart from a first start), and torchrun's
    variables: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` (its index on its node),
    ``LOCAL_WORLD_SIZE`` (its node's workers), ``GROUP_RANK`` (its node's position in
    ``nodes``), ``GROUP_WORLD_SIZE`` (the number of nodes), and ``MASTER_ADDR`` /
    ``MASTER_PORT`` (the chief's address and port: worker 0's). ``PYTHONUNBUFFERED=1``
    is added unless ``env`` sets it, so Python workers' lines reach the launcher as they
    are printed. Everything else in ``env`` passes through; ``env`` is not modified.

    Args:
        command: The worker command and its arguments, e.g. ``["python", "train.py"]``.
        nodes: The round's cluster, in order (the same list on every node).
        group_rank: This node's position in ``nodes``.
        env: The parent environment to start from (e.g. ``os.environ``).
        restart: The restart count (0 on the first start).

    Returns:
        One :class:`WorkerSpec` per worker of this node, in rank order.

    Raises:
        LaunchError: Empty command, a bad cluster (:func:`check_cluster`), a group rank
            out of range, or a negative restart count.

    Example:
        >>> nodes = [NodeSlot("10.0.0.1", (2222, 2223)), NodeSlot("10.0.0.2", (2224,))]
        >>> spec = plan_node(["python", "t.py"], nodes, 1, env={}, restart=1)[0]
        >>> json.loads(spec.env["TF_CONFIG"])["task"]
        {'type': 'worker', 'index': 2}
        >>> names = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
        ...          "GROUP_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TFDP_RESTART")
        >>> [spec.env[k] for k in names]
        ['2', '3', '0', '1', '1', '2', '10.0.0.1', '2222', '1']
    """
    argv = [str(a) for a in command]
    if not argv:
        raise LaunchError(
            "nothing to run: give the program each worker runs and its arguments, "
            "e.g. [sys.executable, 'train.py']",
            argument="command",
        )
    nodes = list(nodes)
    check_cluster(nodes)
    if isinstance(group_rank, bool) or not isinstance(group_rank, int):
        raise LaunchError(f"must be an integer, got {group_rank!r}", argument="group_rank")
    if not 0 <= group_rank < len(nodes):
        raise LaunchError(f"{group_rank} is not in 0..{len(nodes) - 1}", argument="group_rank")
    if isinstance(restart, bool) or not isinstance(restart, int) or restart < 0:
        raise LaunchError(
            f"the restart count must be an integer >= 0, got {restart!r}", argument="restart"
        )

    cluster = {"worker": [address(n.addr, p) for n in nodes for p in n.ports]}
    world = len(cluster["worker"])
    first = sum(n.workers for n in nodes[:group_rank])
    me = nodes[group_rank]
    common = {
        "TFDP_NUM_WORKERS": str(world),
        "TFDP_RESTART": str(restart),
        "WORLD_SIZE": str(world),
        "LOCAL_WORLD_SIZE": str(me.workers),
        "GROUP_RANK": str(group_rank),
        "GROUP_WORLD_SIZE": str(len(nodes)),
        "MASTER_ADDR": bare_host(nodes[0].addr),  # unbracketed, as torch wants it
        "MASTER_PORT": str(nodes[0].ports[0]),
    }
    specs = []
    for local in range(me.workers):
        rank = first + local
        worker_env = dict(env)
        worker_env["TF_CONFIG"] = json.dumps(
            {"cluster": cluster, "task": {"type": "worker", "index": rank}}
        )
        worker_env["TFDP_WORKER_INDEX"] = str(rank)
        worker_env.update(common)
        worker_env["RANK"] = str(rank)
        worker_env["LOCAL_RANK"] = str(local)
        worker_env.setdefault("PYTHONUNBUFFERED", "1")
        specs.append(WorkerSpec(index=rank, argv=list(argv), env=worker_env))
    return specs


def plan(
    command: Sequence[str],
    ports: Sequence[int],
    *,
    host: str = "127.0.0.1",
    env: Mapping[str, str],
    restart: int = 0,
) -> list[WorkerSpec]:
    """Plan one worker per port, all on one node: :func:`plan_node` with one node.

    Args:
        command: The worker command and its arguments, e.g. ``["python", "train.py"]``.
        ports: One distinct TCP port per worker (1..65535); ``len(ports)`` is the
            number of workers.
        host: The address every worker's gRPC server uses (an IPv6 literal is
            bracketed in ``TF_CONFIG``).
        env: The parent environment to start from (e.g. ``os.environ``).
        restart: The restart count (0 on the first start).

    Returns:
        One :class:`WorkerSpec` per worker, in index order.

    Raises:
        LaunchError: Empty command, no ports, ports out of range or repeated,
            bad host, or negative restart count.

    Example:
        >>> specs = plan(["python", "train.py"], [2222, 2223], env={"HOME": "/root"})
        >>> json.loads(specs[1].env["TF_CONFIG"])
        {'cluster': {'worker': ['127.0.0.1:2222', '127.0.0.1:2223']}, 'task': {'type': 'worker', 'index': 1}}
        >>> {k: v for k, v in specs[1].env.items() if k.startswith(("TFDP_", "HOME"))}
        {'HOME': '/root', 'TFDP_WORKER_INDEX': '1', 'TFDP_NUM_WORKERS': '2', 'TFDP_RESTART': '0'}
        >>> [specs[1].env[k] for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")]
        ['1', '2', '127.0.0.1', '2222']
    """  # noqa: E501
    ports = list(ports)
    check_workers(len(ports))
    check_host(host)
    _check_ports(ports)
    seen: set[int] = set()
    dups = sorted({p for p in ports if p in seen or seen.add(p)})
    if dups:
        raise LaunchError(f"duplicate port(s) {dups}: every worker needs its own port")
    return plan_node(command, [NodeSlot(host, tuple(ports))], 0, env=env, restart=restart)


def ports_from_base(port_base: int, workers: int) -> list[int]:
    """The fixed ports ``port_base, port_base + 1, ..., port_base + workers - 1``.

    Args:
        port_base: The first port (1..65535).
        workers: How many workers (>= 1).

    Returns:
        ``workers`` consecutive ports.

    Raises:
        LaunchError: If ``workers < 1`` or a port falls outside 1..65535.

    Example:
        >>> ports_from_base(29500, 3)
        [29500, 29501, 29502]
    """
    check_workers(workers)
    if isinstance(port_base, bool) or not isinstance(port_base, int) or port_base < 1:
        raise LaunchError(
            f"must be an integer in 1..65535, got {port_base!r}", argument="port_base"
        )
    last = port_base + workers - 1
    if last > 65535:
        raise LaunchError(
            f"{port_base} with {workers} workers needs ports up to {last}, "
            "past 65535: use a lower base port",
            argument="port_base",
        )
    return list(range(port_base, last + 1))


def parse_nnodes(text: str) -> tuple[int, int]:
    """How many nodes a job runs on: ``"N"`` (exactly N) or ``"MIN:MAX"`` (elastic).

    Args:
        text: ``"N"`` or ``"MIN:MAX"``, with ``1 <= MIN <= MAX``.

    Returns:
        ``(MIN, MAX)``; ``(N, N)`` for ``"N"``.

    Raises:
        LaunchError: Anything else (``argument="nnodes"``).

    Example:
        >>> parse_nnodes("2"), parse_nnodes("1:4")
        ((2, 2), (1, 4))
        >>> parse_nnodes("3:2")
        Traceback (most recent call last):
        ...
        tfdp.launch.plan.LaunchError: nnodes: '3:2': MIN is above MAX; expected N or MIN:MAX with 1 <= MIN <= MAX, e.g. 2 or 1:4
    """  # noqa: E501
    usage = "expected N or MIN:MAX with 1 <= MIN <= MAX, e.g. 2 or 1:4"
    parts = str(text).strip().split(":")
    if len(parts) > 2 or not all(p.strip().isdigit() for p in parts):
        raise LaunchError(f"{text!r}: {usage}", argument="nnodes")
    low, high = int(parts[0]), int(parts[-1])
    if low < 1:
        raise LaunchError(f"{text!r}: a job needs at least 1 node; {usage}", argument="nnodes")
    if low > high:
        raise LaunchError(f"{text!r}: MIN is above MAX; {usage}", argument="nnodes")
    return low, high


def nnodes_text(min_nodes: int, max_nodes: int) -> str:
    """``"N"`` or ``"MIN:MAX"``: the inverse of :func:`parse_nnodes`.

    Example:
        >>> nnodes_text(2, 2), nnodes_text(1, 4)
        ('2', '1:4')
    """
    return str(min_nodes) if min_nodes == max_nodes else f"{min_nodes}:{max_nodes}"


def default_rdzv_id(command: Sequence[str]) -> str:
    """The default job id of a multi-node launch: derived from the worker command.

    Every node runs the same command, so every node derives the same id, and a
    launcher started for another command (another job) that reaches this job's master
    is refused instead of joining it. Nodes whose commands differ on purpose (a path
    spelled differently) share an explicit id instead.

    Example:
        >>> default_rdzv_id(["python", "train.py"]) == default_rdzv_id(["python", "train.py"])
        True
        >>> default_rdzv_id(["python", "train.py"]).startswith("tfdp-")
        True
    """
    digest = hashlib.sha256(json.dumps([str(a) for a in command]).encode()).hexdigest()
    return f"tfdp-{digest[:12]}"
