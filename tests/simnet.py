"""Simulated machines for tests: network namespaces on a private bridge (test helper).

:class:`SimNet` makes ``n`` *nodes*, each a Linux network namespace with its
own address on a private subnet (default ``10.231.0.0/24``: node i is
``10.231.0.<i+1>``) and its loopback up, joined by veth pairs to a bridge that
lives in a namespace of its own (the *hub*). Nothing is created in the host's
namespace: traffic flows only between the nodes, and two runs (two pytest
workers, two helpers) may use the same subnet without meeting. Every name
carries ``tfdp-sim-<pid>-<token>``, unique per run (the token begins with the
letters and digits of ``$TFDP_SIMNET_TAG``, if set: whose namespaces these are
on a shared machine).

What a test can do with a node (:class:`Node`)::

    with SimNet(2) as net:
        a, b = net.nodes
        server = b.popen([sys.executable, "-m", "http.server", "8000", "--bind", b.address])
        a.run([sys.executable, "-c", "..."])   # runs inside a's namespace, env passed through
        a.cut(); ...; a.restore()             # its cable pulled / plugged back (hub side)
        b.signal(signal.SIGSTOP)              # every process of the node stopped
        proxy = net.delay_proxy(a, 9000, (b.address, 8000), delay=0.05)  # a slow link

``cut`` sets the hub-side end of the node's veth down: the node's interface
loses its carrier and every packet to or from it is dropped (as when a cable or
a switch port fails); established TCP connections see silence, not resets.
``restore`` sets it up again. The kernel here has no ``netem``, so a slow link is
a userspace TCP proxy (:meth:`SimNet.delay_proxy`) that holds each chunk for
``delay`` seconds and optionally paces it to ``rate`` bytes/s.

Clean-up always runs: :meth:`SimNet.close` (the context manager's exit, also on
an exception or KeyboardInterrupt, and at interpreter exit) kills every process
left in the nodes and deletes the namespaces, which deletes the veths and the
bridge with them. :func:`sweep_leftovers` removes what runs that died without
cleaning up (SIGKILL) left behind; :class:`SimNet` calls it on start.
:func:`skip_reason` says why the harness cannot run here (not root, no ``ip``,
no namespaces); the ``simnet`` fixture (:func:`simnet_fixture`) skips with it.

Run as a script, ``python simnet.py proxy LISTEN_HOST:PORT TARGET_HOST:PORT
--delay S [--rate B]`` is the delay proxy (started inside a node by
:meth:`SimNet.delay_proxy`).
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import contextlib
import ipaddress
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "DelayProxy",
    "Node",
    "SimNet",
    "process_state",
    "simnet_fixture",
    "skip_reason",
    "sweep_leftovers",
]

PREFIX = "tfdp-sim-"
_NAME = re.compile(r"^tfdp-sim-(\d+)-([0-9a-z]+)-(hub|n\d+)$")
TAG = re.sub(r"[^0-9a-z]", "", os.environ.get("TFDP_SIMNET_TAG", "").lower())[:8]
REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
DEFAULT_SUBNET = "10.231.0.0/24"


def _ip(*args: str, check: bool = True, timeout: float = 30) -> str:
    """Run ``ip ARGS`` and return its stdout; raise with its stderr on failure."""
    proc = subprocess.run(
        ["ip", *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and proc.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def _netns_names() -> list[str]:
    return [line.split()[0] for line in _ip("netns", "list").splitlines() if line.strip()]


def _netns_pids(ns: str) -> list[int]:
    out = _ip("netns", "pids", ns, check=False)
    return [int(p) for p in out.split() if p.isdigit()]


def _alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()  # namespaces are Linux's, and so is /proc


def _delete_namespaces(names: Sequence[str]) -> None:
    """Kill every process in ``names`` (they belong to the harness's runs) and delete them."""
    for ns in names:
        for pid in _netns_pids(ns):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    for ns in names:
        while _netns_pids(ns) and time.monotonic() < deadline:
            time.sleep(0.05)
    # Nodes first, the hub last: a node's veth goes with its namespace, the bridge with the hub.
    for ns in sorted(names, key=lambda n: n.endswith("-hub")):
        _ip("netns", "del", ns, check=False)


_SKIP: list[str | None] = []


def skip_reason() -> str | None:
    """Why simulated machines cannot be made here, or ``None`` when they can.

    Example:
        >>> reason = skip_reason()
        >>> reason is None or isinstance(reason, str)
        True
    """
    if _SKIP:
        return _SKIP[0]
    reason: str | None = None
    if not sys.platform.startswith("linux"):
        reason = "simulated machines need Linux network namespaces"
    elif os.geteuid() != 0:
        reason = "simulated machines need root (ip netns add); CI runs the tests as root"
    elif shutil.which("ip") is None:
        reason = "simulated machines need the `ip` command (iproute2)"
    else:
        probe = f"{PREFIX}{os.getpid()}-{TAG}{secrets.token_hex(3)}-hub"
        try:
            _ip("netns", "add", probe)
        except (RuntimeError, OSError) as err:
            reason = f"cannot create a network namespace here: {err}"
        else:
            _ip("netns", "del", probe, check=False)
    _SKIP.append(reason)
    return reason


def sweep_leftovers() -> list[str]:
    """Delete the namespaces of harness runs whose process is gone; return their names.

    A run's names carry its pid (``tfdp-sim-<pid>-<token>-...``); a run killed
    with SIGKILL cannot clean up, so the next run does it. Namespaces of live
    runs are left alone.
    """
    stale = [
        ns
        for ns in _netns_names()
        if (m := _NAME.match(ns)) and int(m.group(1)) != os.getpid() and not _alive(int(m.group(1)))
    ]
    _delete_namespaces(stale)
    return stale


def process_state(pid: int, want: str | None = None, timeout: float = 10) -> str:
    """A process's state letter from ``/proc`` (``R``, ``S``, ``T`` stopped, ``Z``, ...).

    With ``want``, waits up to ``timeout`` seconds for that state (a signal to a
    many-threaded process takes a moment) and returns the last state seen.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rpartition(") ")[2][:1]
        except FileNotFoundError:
            state = "gone"
        if want is None or state == want or time.monotonic() > deadline:
            return state
        time.sleep(0.02)


class Node:
    """One simulated machine: a network namespace with one address on the bridge.

    Attributes:
        index: The node's position in :attr:`SimNet.nodes`.
        name: The network namespace's name.
        address: Its IPv4 address on the private subnet (a string).
    """

    def __init__(self, net: SimNet, index: int, name: str, address: str) -> None:
        self._net = net
        self.index = index
        self.name = name
        self.address = address
        self.port = f"p{index}"  # the hub-side end of its veth

    def __repr__(self) -> str:
        return f"Node({self.index}, {self.name!r}, {self.address})"

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """The environment a command here gets: the caller's, ``extra``, and ``src/`` first.

        ``PYTHONPATH`` starts with this worktree's ``src`` so the node imports
        the same tfdp as the test.
        """
        env = dict(os.environ)
        env.update(extra or {})
        path = [str(SRC)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(path))
        return env

    def popen(
        self, argv: Sequence[str], env: dict[str, str] | None = None, **kwargs: Any
    ) -> subprocess.Popen:
        """Start ``argv`` inside this node (``ip netns exec``); ``env`` adds to the caller's.

        The returned process is the command itself (``ip netns exec`` execs it),
        so its pid can be signalled. Every process still running in the node
        when the :class:`SimNet` closes is killed.
        """
        proc = subprocess.Popen(
            ["ip", "netns", "exec", self.name, *argv], env=self.env(env), **kwargs
        )
        self._net._procs.append(proc)
        return proc

    def run(
        self,
        argv: Sequence[str],
        env: dict[str, str] | None = None,
        timeout: float = 60,
        check: bool = True,
    ) -> subprocess.CompletedProcess:
        """Run ``argv`` inside this node to completion; its stdout and stderr as text."""
        proc = self.popen(argv, env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            out, err = proc.communicate(timeout=timeout)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        if check:
            done.check_returncode()
        return done

    def cut(self) -> None:
        """Pull the node's cable: the hub-side end of its veth down (packets dropped)."""
        _ip("-n", self._net.hub, "link", "set", self.port, "down")

    def restore(self, timeout: float = 10) -> None:
        """Plug the cable back and wait until the node's interface has its carrier."""
        _ip("-n", self._net.hub, "link", "set", self.port, "up")
        deadline = time.monotonic() + timeout
        while not self.link_up():
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self}: no carrier {timeout:g}s after restore")
            time.sleep(0.02)

    def link_up(self) -> bool:
        """Whether the node's interface has its carrier (``False`` while :meth:`cut`)."""
        out = _ip("-n", self.name, "link", "show", "eth0")
        return "NO-CARRIER" not in out and "state UP" in out

    def pids(self) -> list[int]:
        """The pids of every process running in this node."""
        return _netns_pids(self.name)

    def signal(self, sig: int = signal.SIGKILL) -> list[int]:
        """Send ``sig`` to every process of the node (SIGKILL: the machine died); their pids."""
        pids = self.pids()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        return pids


class DelayProxy:
    """A running delay proxy: connections to :attr:`address` reach the target, slowly."""

    def __init__(self, proc: subprocess.Popen, address: str) -> None:
        self.proc = proc
        self.address = address

    def close(self) -> None:
        """Stop the proxy (its connections end)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate()


class SimNet:
    """``n`` simulated machines on a private bridge; a context manager that always cleans up.

    Args:
        n: How many nodes.
        subnet: Their IPv4 subnet (node i gets its (i+1)-th host address).

    Example (as root)::

        with SimNet(2) as net:
            out = net.nodes[0].run(["ip", "-brief", "addr"]).stdout  # lo and eth0 10.231.0.1
    """

    _count = 0

    def __init__(self, n: int = 2, subnet: str = DEFAULT_SUBNET) -> None:
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        net = ipaddress.ip_network(subnet)
        hosts = list(net.hosts())[:n]
        if len(hosts) < n:
            raise ValueError(f"subnet {subnet} has fewer than {n} host addresses")
        self.token = f"{PREFIX}{os.getpid()}-{TAG}{secrets.token_hex(3)}"
        self.hub = f"{self.token}-hub"
        self.prefixlen = net.prefixlen
        self.nodes = [
            Node(self, i, f"{self.token}-n{i}", str(addr)) for i, addr in enumerate(hosts)
        ]
        self._procs: list[subprocess.Popen] = []
        self._started = False
        self._closed = False

    def namespaces(self) -> list[str]:
        """The namespaces this net made and has not deleted yet."""
        return [ns for ns in _netns_names() if ns.startswith(self.token + "-")]

    def start(self) -> SimNet:
        """Make the namespaces, the bridge, the veths and the addresses (clean-up on failure)."""
        if self._started:
            return self
        self._started = True
        sweep_leftovers()
        atexit.register(self.close)
        try:
            _ip("netns", "add", self.hub)
            _ip("-n", self.hub, "link", "add", "br0", "type", "bridge", "forward_delay", "0")
            _ip("-n", self.hub, "link", "set", "br0", "up")
            for node in self.nodes:
                _ip("netns", "add", node.name)
                _ip("-n", self.hub, "link", "add", node.port, "type", "veth",
                    "peer", "name", "eth0", "netns", node.name)  # fmt: skip
                _ip("-n", self.hub, "link", "set", node.port, "master", "br0")
                _ip("-n", self.hub, "link", "set", node.port, "up")
                _ip("-n", node.name, "link", "set", "lo", "up")
                _ip("-n", node.name, "addr", "add", f"{node.address}/{self.prefixlen}",
                    "dev", "eth0")  # fmt: skip
                _ip("-n", node.name, "link", "set", "eth0", "up")
            for node in self.nodes:
                node.restore()  # waits for the carrier
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Kill what runs in the nodes, delete every namespace (veths, bridge); idempotent."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            atexit.unregister(self.close)
        for proc in self._procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
        names = [n.name for n in self.nodes] + [self.hub]
        _delete_namespaces([ns for ns in names if ns in set(_netns_names())])
        for proc in self._procs:
            with contextlib.suppress(Exception):
                proc.communicate(timeout=10)

    def __enter__(self) -> SimNet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def delay_proxy(
        self,
        node: Node,
        port: int,
        target: tuple[str, int],
        delay: float,
        rate: float | None = None,
        timeout: float = 30,
    ) -> DelayProxy:
        """A TCP proxy in ``node`` on ``node.address:port`` to ``target``, ``delay`` s each way.

        Each chunk read from either side is written to the other ``delay``
        seconds later (order kept); with ``rate`` (bytes/s) each direction of a
        connection is also paced to that bandwidth. Returns once it listens.
        """
        here = str(Path(__file__).resolve())
        listen, to = f"{node.address}:{port}", f"{target[0]}:{target[1]}"
        argv = [sys.executable, here, "proxy", listen, to, "--delay", str(delay)]
        if rate is not None:
            argv += ["--rate", str(rate)]
        proc = node.popen(argv, stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        deadline = time.monotonic() + timeout
        line = ""
        while time.monotonic() < deadline and proc.poll() is None:
            line = proc.stdout.readline()
            if line.startswith("listening"):
                return DelayProxy(proc, f"{node.address}:{port}")
        proc.kill()
        raise RuntimeError(f"the delay proxy in {node} did not start: {line!r}")


def simnet_factory() -> Iterator[Any]:
    """The body of the ``simnet`` fixture (a generator, usable without pytest)."""
    made: list[SimNet] = []

    def make(n: int = 2, subnet: str = DEFAULT_SUBNET) -> SimNet:
        net = SimNet(n, subnet).start()
        made.append(net)
        return net

    try:
        yield make
    finally:
        for net in made:
            net.close()


# The fixture ``simnet``: a test module imports ``simnet_fixture`` (with a noqa for F401).
try:
    import pytest

    @pytest.fixture(name="simnet")
    def simnet_fixture() -> Iterator[Any]:
        """``make(n=2, subnet=...) -> SimNet``; skips when the harness cannot run here."""
        reason = skip_reason()
        if reason is not None:
            pytest.skip(reason)
        yield from simnet_factory()

except ImportError:  # pragma: no cover - the proxy runs without pytest
    pass


# --- the delay proxy (runs inside a node) ---------------------------------------------------


async def _pipe(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float, rate: float | None
) -> None:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def pump_in() -> None:
        while True:
            try:
                data = await reader.read(1 << 16)
            except OSError:
                data = b""
            queue.put_nowait((loop.time() + delay, data))
            if not data:
                return

    async def pump_out() -> None:
        free_at = 0.0
        while True:
            due, data = await queue.get()
            if rate:
                due = max(due, free_at)
                free_at = due + len(data) / rate
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            try:
                if not data:
                    if writer.can_write_eof():
                        writer.write_eof()
                    return
                writer.write(data)
                await writer.drain()
            except OSError:
                return

    await asyncio.gather(pump_in(), pump_out())


async def _proxy(listen: str, target: str, delay: float, rate: float | None) -> None:
    lhost, _, lport = listen.rpartition(":")
    thost, _, tport = target.rpartition(":")

    async def handle(cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        try:
            tr, tw = await asyncio.open_connection(thost, int(tport))
        except OSError:
            cw.close()
            return
        try:
            await asyncio.gather(_pipe(cr, tw, delay, rate), _pipe(tr, cw, delay, rate))
        finally:
            for w in (cw, tw):
                w.close()

    server = await asyncio.start_server(handle, lhost, int(lport))
    print("listening", listen, flush=True)
    async with server:
        await server.serve_forever()


def main(argv: Sequence[str] | None = None) -> int:
    """``proxy LISTEN TARGET --delay S [--rate B]``: run the delay proxy until killed."""
    parser = argparse.ArgumentParser(prog="simnet.py")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("proxy", help="a TCP proxy that delays (and paces) every chunk")
    p.add_argument("listen", help="HOST:PORT to listen on")
    p.add_argument("target", help="HOST:PORT to forward to")
    p.add_argument("--delay", type=float, default=0.0, help="seconds each chunk is held")
    p.add_argument("--rate", type=float, default=None, help="bytes/s per direction")
    args = parser.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_proxy(args.listen, args.target, args.delay, args.rate))
    return 0


if __name__ == "__main__":
    sys.exit(main())
