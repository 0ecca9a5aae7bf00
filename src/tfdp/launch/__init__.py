"""``tfdp launch``: start, watch, and restart a group of local tf.distribute workers.

This module owns the launcher, TensorFlow's missing ``torchrun``: it turns one
command into N worker processes configured for ``MultiWorkerMirroredStrategy``
through ``TF_CONFIG``, supervises them, and restarts the whole group on failure.
It never imports TensorFlow.

Three layers, each usable on its own:

* :func:`plan` (pure): the argv and environment of every worker, given the ports.
  :func:`free_ports` and :func:`ports_from_base` choose the ports.
* :func:`launch` (real processes): start the workers, each in its own process
  group, prefix their output lines with ``[worker i]``, forward SIGINT/SIGTERM,
  stop the group when a worker fails, and restart it up to ``max_restarts``
  times with fresh ports and ``TFDP_RESTART`` incremented.
* the command line, ``tfdp launch`` or ``python -m tfdp.launch``, lives in
  :mod:`tfdp.cli.launch`.

POSIX only (process groups and signals).

Example:
    $ tfdp launch --workers 2 --max-restarts 3 -- python train.py --epochs 10
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from tfdp.errors import ConfigError

__all__ = [
    "LaunchError",
    "WorkerSpec",
    "free_ports",
    "launch",
    "plan",
    "ports_from_base",
]

PROG = "tfdp launch"
DEFAULT_GRACE_SECONDS = 30.0
_FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# How long to wait for processes that got SIGKILL to be reaped before giving up on them.
_KILL_WAIT_SECONDS = 30.0
# How long to wait for a worker's output to drain after it (and its group) ended.
_DRAIN_SECONDS = 5.0


class LaunchError(ConfigError):
    """A launch that cannot start: bad arguments, ports, or command.

    ``argument`` names the argument of :func:`launch` / :func:`plan` at fault.

    Example:
        >>> try:
        ...     ports_from_base(65535, 2)
        ... except LaunchError as exc:
        ...     print(exc.argument, "|", exc)
        port_base | port_base 65535 with 2 workers needs ports up to 65536, past 65535: use a lower base port
    """  # noqa: E501


@dataclass(frozen=True)
class WorkerSpec:
    """What one worker process runs: its index, argv, and complete environment.

    Attributes:
        index: The worker's task index in ``TF_CONFIG`` (0 is the chief).
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


def _address(host: str, port: int) -> str:
    """``host:port``, with an IPv6 literal in brackets as gRPC wants it."""
    if ":" in host and not host.startswith("["):
        return f"[{host}]:{port}"
    return f"{host}:{port}"


def _check_host(host: str) -> None:
    if not host or any(c.isspace() for c in host):
        raise LaunchError(f"host {host!r}: expected a host name or IP address", argument="host")


def _check_workers(workers: int) -> None:
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise LaunchError(f"workers must be an integer >= 1, got {workers!r}", argument="workers")


def _torchrun_env(index: int, workers: int, host: str, chief_port: int) -> dict[str, str]:
    """Torchrun's variables for worker ``index`` of ``workers``, all on one host."""
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    return {
        "RANK": str(index),
        "WORLD_SIZE": str(workers),
        "LOCAL_RANK": str(index),
        "LOCAL_WORLD_SIZE": str(workers),
        "MASTER_ADDR": bare,
        "MASTER_PORT": str(chief_port),
    }


def plan(
    command: Sequence[str],
    ports: Sequence[int],
    *,
    host: str = "127.0.0.1",
    env: Mapping[str, str],
    restart: int = 0,
) -> list[WorkerSpec]:
    """Plan one worker per port: the command and the environment each one gets.

    Pure: no processes, sockets, or global state. Worker ``i`` listens on
    ``host:ports[i]``; every worker gets the same cluster in ``TF_CONFIG`` and its
    own task index, plus ``TFDP_WORKER_INDEX``, ``TFDP_NUM_WORKERS`` and
    ``TFDP_RESTART`` (how many times the group has been restarted, so a training
    script can tell a restart from a first start), and torchrun's variables:
    ``RANK`` and ``LOCAL_RANK`` (the task index: every worker is on ``host``),
    ``WORLD_SIZE`` and ``LOCAL_WORLD_SIZE`` (the number of workers),
    ``MASTER_ADDR`` / ``MASTER_PORT`` (the chief's address, worker 0's port). ``PYTHONUNBUFFERED=1`` is added
    unless ``env`` sets it, so Python workers' lines reach the launcher as they are
    printed. Everything else in ``env`` passes through; ``env`` is not modified.

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
    argv = [str(a) for a in command]
    if not argv:
        raise LaunchError(
            "command is empty: give the program each worker runs and its arguments, "
            "e.g. [sys.executable, 'train.py']",
            argument="command",
        )
    ports = list(ports)
    _check_workers(len(ports))
    _check_host(host)
    for port in ports:
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise LaunchError(f"port {port!r} is out of range: ports are 1..65535")
    seen: set[int] = set()
    dups = sorted({p for p in ports if p in seen or seen.add(p)})
    if dups:
        raise LaunchError(f"duplicate port(s) {dups}: every worker needs its own port")
    if isinstance(restart, bool) or not isinstance(restart, int) or restart < 0:
        raise LaunchError(f"restart count must be an integer >= 0, got {restart!r}")

    cluster = {"worker": [_address(host, p) for p in ports]}
    specs = []
    for i in range(len(ports)):
        worker_env = dict(env)
        worker_env["TF_CONFIG"] = json.dumps(
            {"cluster": cluster, "task": {"type": "worker", "index": i}}
        )
        worker_env["TFDP_WORKER_INDEX"] = str(i)
        worker_env["TFDP_NUM_WORKERS"] = str(len(ports))
        worker_env["TFDP_RESTART"] = str(restart)
        worker_env.update(_torchrun_env(i, len(ports), host, ports[0]))
        worker_env.setdefault("PYTHONUNBUFFERED", "1")
        specs.append(WorkerSpec(index=i, argv=list(argv), env=worker_env))
    return specs


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
    _check_workers(workers)
    if isinstance(port_base, bool) or not isinstance(port_base, int) or port_base < 1:
        raise LaunchError(
            f"port_base must be an integer in 1..65535, got {port_base!r}", argument="port_base"
        )
    last = port_base + workers - 1
    if last > 65535:
        raise LaunchError(
            f"port_base {port_base} with {workers} workers needs ports up to {last}, "
            "past 65535: use a lower base port",
            argument="port_base",
        )
    return list(range(port_base, last + 1))


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """Ask the OS for ``n`` distinct free TCP ports on ``host`` (by binding port 0).

    All ``n`` sockets are held open until every port is known, so the ports are
    distinct; they are closed before returning, so another process could in
    principle take one before the worker binds it (a worker that cannot bind
    fails, and ``--max-restarts`` retries with fresh ports).

    Args:
        n: How many ports (>= 1).
        host: The address to bind (an IPv6 literal may be bracketed).

    Returns:
        ``n`` distinct port numbers.

    Raises:
        LaunchError: If ``host`` cannot be bound.

    Example:
        >>> ports = free_ports(2)
        >>> len(set(ports)) == 2 and all(1 <= p <= 65535 for p in ports)
        True
    """
    _check_workers(n)
    _check_host(host)
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            bare, 0, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except OSError as exc:
        raise LaunchError(f"host {host!r} cannot be resolved: {exc}", argument="host") from None
    socks: list[socket.socket] = []
    try:
        for _ in range(n):
            s = socket.socket(family, kind, proto)
            socks.append(s)
            s.bind(address)
        return [s.getsockname()[1] for s in socks]
    except OSError as exc:
        raise LaunchError(f"host {host!r}: cannot bind a port: {exc}", argument="host") from None
    finally:
        for s in socks:
            s.close()


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _describe_exit(index: int, returncode: int) -> str:
    if returncode < 0:
        return f"worker {index} was killed by {_signal_name(-returncode)}"
    return f"worker {index} exited with code {returncode}"


def _exit_status(returncode: int) -> int:
    """The launcher's exit status for a worker's return code (128+N for signal N)."""
    return 128 - returncode if returncode < 0 else returncode


class _Output:
    """Serialises worker lines (to stdout) and launcher messages (to stderr)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._broken = False

    def worker_line(self, index: int, line: bytes) -> None:
        if not line.endswith(b"\n"):
            line += b"\n"
        data = b"[worker %d] " % index + line
        with self._lock:
            if self._broken:
                return
            try:
                stream = sys.stdout
                buffer = getattr(stream, "buffer", None)
                if buffer is not None:
                    stream.flush()
                    buffer.write(data)
                    buffer.flush()
                else:  # a text-only stdout (notebooks, doctest): decode
                    stream.write(data.decode("utf-8", "replace"))
                    stream.flush()
            except (OSError, ValueError):  # e.g. `tfdp launch ... | head`: keep draining
                self._broken = True

    def message(self, text: str) -> None:
        with self._lock, contextlib.suppress(OSError, ValueError):
            print(f"{PROG}: {text}", file=sys.stderr, flush=True)

    def pump(self, index: int, pipe: IO[bytes]) -> None:
        """Copy one worker's output, line by line, until EOF."""
        try:
            for line in iter(pipe.readline, b""):
                self.worker_line(index, line)
        finally:
            pipe.close()


@dataclass
class _Outcome:
    """How one group run ended."""

    failed_index: int | None = None  # the first worker to fail, if any
    returncode: int = 0  # its return code (negative: killed by that signal)
    signum: int | None = None  # a signal received by the launcher, if any


class _Group:
    """One running group of workers: their processes, readers, and exit queue."""

    def __init__(self, specs: Sequence[WorkerSpec], out: _Output) -> None:
        self.specs = list(specs)
        self.out = out
        self.procs: list[subprocess.Popen[bytes]] = []
        self.threads: list[threading.Thread] = []
        self.exits: queue.Queue[tuple[int, int]] = queue.Queue()
        self.returncodes: dict[int, int] = {}

    def start(self) -> None:
        # Each worker leads its own process group, so a signal reaches its children
        # too, and a Ctrl-C in the terminal reaches only the launcher (which forwards it).
        group: dict[str, Any] = (
            {"process_group": 0} if sys.version_info >= (3, 11) else {"start_new_session": True}
        )
        for spec in self.specs:
            try:
                proc = subprocess.Popen(
                    spec.argv,
                    env=spec.env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    **group,
                )
            except OSError as exc:
                exc.filename = exc.filename or spec.argv[0]
                raise _StartError(spec.index, exc) from exc
            self.procs.append(proc)
            assert proc.stdout is not None
            for target, args in (
                (self.out.pump, (spec.index, proc.stdout)),
                (self._wait, (spec.index, proc)),
            ):
                thread = threading.Thread(
                    target=target, args=args, name=f"tfdp-worker-{spec.index}", daemon=True
                )
                thread.start()
                self.threads.append(thread)

    def _wait(self, index: int, proc: subprocess.Popen[bytes]) -> None:
        self.exits.put((index, proc.wait()))

    @property
    def running(self) -> list[int]:
        return [i for i in range(len(self.procs)) if i not in self.returncodes]

    def next_exit(self, timeout: float) -> tuple[int, int] | None:
        """The next worker to exit within ``timeout`` seconds, as (index, returncode)."""
        try:
            index, returncode = self.exits.get(timeout=max(timeout, 0.0))
        except queue.Empty:
            return None
        self.returncodes[index] = returncode
        return index, returncode

    def signal_all(self, signum: int) -> None:
        """Send ``signum`` to every worker's process group (leftover children included)."""
        for proc in self.procs:
            if proc.returncode is not None and _pid_exists(proc.pid):
                # The leader was reaped and its pid reused, which the kernel allows only
                # once no process is left in its group: that group id is someone else's.
                continue
            with contextlib.suppress(ProcessLookupError, PermissionError):  # group gone
                os.killpg(proc.pid, signum)

    def drain(self) -> None:
        """Wait (bounded) for the readers, so this group's output precedes what follows."""
        deadline = time.monotonic() + _DRAIN_SECONDS
        for thread in self.threads:
            thread.join(timeout=max(deadline - time.monotonic(), 0.0))


class _StartError(Exception):
    """A worker's command could not be started (not found, not executable)."""

    def __init__(self, index: int, error: OSError) -> None:
        super().__init__(f"cannot start worker {index}: {error}")
        self.error = error


class _Supervisor:
    """Runs groups of workers; records the signals the launcher receives."""

    def __init__(self, grace_seconds: float, out: _Output) -> None:
        self.grace_seconds = grace_seconds
        self.out = out
        self.signals: list[int] = []

    def handle_signal(self, signum: int, frame: object) -> None:
        self.signals.append(signum)

    def run_group(self, specs: Sequence[WorkerSpec]) -> _Outcome:
        group = _Group(specs, self.out)
        try:
            group.start()
            while group.running:
                if self.signals:
                    signum = self.signals[0]
                    self.out.message(
                        f"got {_signal_name(signum)}: forwarding it to the workers"
                        f" (SIGKILL after {self.grace_seconds:g}s)"
                    )
                    self._stop(group, signum)
                    return _Outcome(signum=signum)
                ended = group.next_exit(timeout=0.1)
                if ended is None or ended[1] == 0:
                    continue
                index, returncode = ended
                others = ", ".join(str(i) for i in group.running)
                self.out.message(
                    f"{_describe_exit(index, returncode)}"
                    + (f"; stopping worker(s) {others}" if others else "")
                )
                self._stop(group, signal.SIGTERM)
                return _Outcome(
                    failed_index=index,
                    returncode=returncode,
                    signum=self.signals[0] if self.signals else None,
                )
            return _Outcome()
        finally:
            if group.running:  # only on an unexpected error: leave nothing behind
                group.signal_all(signal.SIGKILL)
            group.drain()

    def _stop(self, group: _Group, signum: int) -> None:
        """Send ``signum`` to all, wait up to the grace period, then SIGKILL what is left.

        A further signal to the launcher during the grace period means SIGKILL now.
        """
        seen = len(self.signals)
        group.signal_all(signum)
        deadline = time.monotonic() + self.grace_seconds
        while group.running and len(self.signals) == seen:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            group.next_exit(timeout=min(remaining, 0.1))
        stubborn = group.running
        if stubborn:
            why = (
                "another signal"
                if len(self.signals) > seen
                else f"no exit {self.grace_seconds:g}s after {_signal_name(signum)}"
            )
            names = ", ".join(str(i) for i in stubborn)
            self.out.message(f"{why}: sending SIGKILL to worker(s) {names}")
        # SIGKILL every group, also the ones whose leader exited: no orphans survive.
        group.signal_all(signal.SIGKILL)
        deadline = time.monotonic() + _KILL_WAIT_SECONDS
        while group.running and time.monotonic() < deadline:
            group.next_exit(timeout=0.1)
        if group.running:
            names = ", ".join(str(i) for i in group.running)
            self.out.message(f"warning: worker(s) {names} did not die after SIGKILL")


def launch(
    command: Sequence[str],
    workers: int,
    *,
    max_restarts: int = 0,
    port_base: int | None = None,
    host: str = "127.0.0.1",
    grace_seconds: float = DEFAULT_GRACE_SECONDS,
    env: Mapping[str, str] | None = None,
) -> int:
    """Run ``command`` as ``workers`` tf.distribute workers and supervise them.

    Every worker gets the :func:`plan` environment and runs in its own process
    group; its stdout and stderr lines are printed to this process's stdout as
    ``[worker i] ...``. When a worker exits non-zero or is killed, the others get
    SIGTERM, then SIGKILL after ``grace_seconds``; then, while restarts are left,
    the whole group starts again with fresh ports (the same ports with
    ``port_base``) and ``TFDP_RESTART`` incremented. SIGINT and SIGTERM sent to
    this process are forwarded to every worker (a second one: SIGKILL at once);
    this needs the main thread (elsewhere, signals are not intercepted), and a
    signal that this process ignores stays ignored.

    Args:
        command: The worker command, e.g. ``["python", "train.py"]``.
        workers: How many workers (>= 1).
        max_restarts: How many times the group may be restarted after a failure.
        port_base: Use ports ``port_base + i``; ``None``: free ports chosen at each start.
        host: The workers' address in ``TF_CONFIG``.
        grace_seconds: How long stopping workers get between SIGTERM and SIGKILL.
        env: The base environment (default ``os.environ``).

    Returns:
        The launcher's exit status: 0 when all workers exit 0; the failing worker's
        exit code (128+N if killed by signal N) once restarts are used up; 130 on
        SIGINT and 143 on SIGTERM.

    Raises:
        LaunchError: Bad arguments, or a worker command that cannot be started.

    Example:
        >>> launch([sys.executable, "-c", "print('hello')"], workers=1)
        [worker 0] hello
        0
    """
    if os.name != "posix":  # pragma: no cover - depends on the platform
        raise LaunchError("tfdp launch needs a POSIX system (process groups and signals)")
    command = list(command)
    _check_workers(workers)
    if isinstance(max_restarts, bool) or not isinstance(max_restarts, int) or max_restarts < 0:
        raise LaunchError(
            f"max_restarts must be an integer >= 0, got {max_restarts!r}", argument="max_restarts"
        )
    if not grace_seconds >= 0:
        raise LaunchError(
            f"grace_seconds must be >= 0, got {grace_seconds!r}", argument="grace_seconds"
        )
    base_env = dict(os.environ if env is None else env)
    fixed = None if port_base is None else ports_from_base(port_base, workers)
    plan(command, fixed or list(range(1, workers + 1)), host=host, env={})  # validate early

    out = _Output()
    sup = _Supervisor(grace_seconds, out)
    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for signum in _FORWARDED_SIGNALS:
            # An ignored signal (e.g. SIGINT for `cmd &` in a script) stays ignored, as
            # in Python itself; the workers inherit that.
            if signal.getsignal(signum) is not signal.SIG_IGN:
                previous[signum] = signal.signal(signum, sup.handle_signal)
    try:
        for restart in range(max_restarts + 1):
            if sup.signals:
                break
            ports = fixed if fixed is not None else free_ports(workers, host)
            specs = plan(command, ports, host=host, env=base_env, restart=restart)
            try:
                outcome = sup.run_group(specs)
            except _StartError as exc:
                raise LaunchError(str(exc)) from exc.error
            if outcome.signum is not None or sup.signals:
                break
            if outcome.failed_index is None:
                return 0
            what = _describe_exit(outcome.failed_index, outcome.returncode)
            if restart < max_restarts:
                out.message(
                    f"restarting all {workers} worker(s) (restart {restart + 1} of {max_restarts})"
                )
                continue
            used = f" (after {restart} restart{'s' if restart != 1 else ''})" if restart else ""
            out.message(f"error: {what}{used}")
            return _exit_status(outcome.returncode)
        signum = sup.signals[0]
        out.message(f"error: interrupted by {_signal_name(signum)}")
        return 128 + signum
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
