"""Worker processes on this node: start, print, stop, and restart a group of them.

This module owns the processes of a launch on one node: it starts the workers a plan
describes, each in its own process group, prints their output lines prefixed with
``[worker i]`` (every line read to the end of its pipe before the launcher goes on), stops
the group when a worker fails or when asked to (SIGTERM, SIGKILL after a grace period,
children included), and runs the one-node launcher, :func:`launch`, with its restarts.
The multi-node launcher (:mod:`tfdp.launch.node`) drives the same :class:`Supervisor`.
It never imports TensorFlow. POSIX only (process groups and signals).

Example:
    >>> launch([sys.executable, "-c", "print('hello')"], workers=1)
    [worker 0] hello
    0
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any

from tfdp.launch.plan import (
    LaunchError,
    WorkerSpec,
    bare_host,
    check_host,
    check_workers,
    plan,
    ports_from_base,
)

PROG = "tfdp launch"
DEFAULT_GRACE_SECONDS = 30.0
_FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# How long to wait for processes that got SIGKILL to be reaped before giving up on them.
_KILL_WAIT_SECONDS = 30.0
# A worker's output pipe held open by a process outside its group (one that left it with
# setsid) is given up this long after the group is empty and the reader waits for input.
_ORPHAN_PIPE_SECONDS = 5.0


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
    check_workers(n)
    check_host(host)
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(
            bare_host(host), 0, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except OSError as exc:
        raise LaunchError(f"{host!r} cannot be resolved: {exc}", argument="host") from None
    socks: list[socket.socket] = []
    try:
        for _ in range(n):
            s = socket.socket(family, kind, proto)
            socks.append(s)
            s.bind(addr)
        return [s.getsockname()[1] for s in socks]
    except OSError as exc:
        raise LaunchError(f"{host!r}: cannot bind a port: {exc}", argument="host") from None
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


def _group_alive(proc: subprocess.Popen[bytes]) -> bool:
    """Whether any process is left in the process group ``proc`` leads (or led)."""
    if proc.returncode is None:
        return True
    if _pid_exists(proc.pid):
        # The leader was reaped and its pid reused, which the kernel allows only once
        # no process is left in its group: that pid is someone else's.
        return False
    try:
        os.killpg(proc.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def signal_name(signum: int) -> str:
    """``SIGTERM`` for 15, ``signal N`` for an unknown number.

    Example:
        >>> signal_name(15), signal_name(0)
        ('SIGTERM', 'signal 0')
    """
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def describe_exit(index: int, returncode: int) -> str:
    """How worker ``index`` ended, in words.

    Example:
        >>> describe_exit(1, 3), describe_exit(0, -9)
        ('worker 1 exited with code 3', 'worker 0 was killed by SIGKILL')
    """
    if returncode < 0:
        return f"worker {index} was killed by {signal_name(-returncode)}"
    return f"worker {index} exited with code {returncode}"


def exit_status(returncode: int) -> int:
    """The launcher's exit status for a worker's return code (128+N for signal N).

    Example:
        >>> exit_status(3), exit_status(-9)
        (3, 137)
    """
    return 128 - returncode if returncode < 0 else returncode


class Output:
    """Serialises worker lines (to stdout) and launcher messages (to stderr)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._broken = False

    def worker_line(self, index: int, line: bytes) -> None:
        """Print one line of worker ``index`` as ``[worker i] line``."""
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
        """Print ``tfdp launch: text`` to stderr."""
        with self._lock, contextlib.suppress(OSError, ValueError):
            print(f"{PROG}: {text}", file=sys.stderr, flush=True)


class _Reader:
    """Copies one worker's output, line by line, to the :class:`Output` until EOF."""

    def __init__(self, index: int, pipe: IO[bytes], out: Output) -> None:
        self.index = index
        self.pipe = pipe
        self.out = out
        self.done = threading.Event()
        self.waiting_since: float | None = None  # waiting for input since (None: printing)
        self.thread = threading.Thread(target=self._run, name=f"tfdp-out-{index}", daemon=True)

    def _run(self) -> None:
        try:
            while True:
                self.waiting_since = time.monotonic()
                line = self.pipe.readline()
                self.waiting_since = None
                if not line:
                    break
                self.out.worker_line(self.index, line)
        except (OSError, ValueError):  # the pipe was closed under us: nothing more to read
            pass
        finally:
            self.done.set()
            with contextlib.suppress(OSError):
                self.pipe.close()


class StartError(Exception):
    """A worker's command could not be started (not found, not executable)."""

    def __init__(self, index: int, error: OSError) -> None:
        super().__init__(f"cannot start worker {index}: {error}")
        self.error = error


class _Group:
    """One running group of workers: their processes, output readers, and exit queue."""

    def __init__(self, specs: Sequence[WorkerSpec], out: Output) -> None:
        self.specs = list(specs)
        self.out = out
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.readers: dict[int, _Reader] = {}
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
                raise StartError(spec.index, exc) from exc
            self.procs[spec.index] = proc
            assert proc.stdout is not None
            reader = _Reader(spec.index, proc.stdout, self.out)
            self.readers[spec.index] = reader
            reader.thread.start()
            threading.Thread(
                target=self._wait, args=(spec.index, proc), name="tfdp-wait", daemon=True
            ).start()

    def _wait(self, index: int, proc: subprocess.Popen[bytes]) -> None:
        self.exits.put((index, proc.wait()))

    @property
    def running(self) -> list[int]:
        """The workers whose leader process has not been seen to exit."""
        return [i for i in self.procs if i not in self.returncodes]

    @property
    def lingering(self) -> list[int]:
        """The workers whose process group still holds a process (children included)."""
        return [i for i, proc in self.procs.items() if _group_alive(proc)]

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
        for proc in self.procs.values():
            if proc.returncode is not None and _pid_exists(proc.pid):
                continue  # a reused pid: that group id is someone else's (see _group_alive)
            with contextlib.suppress(ProcessLookupError, PermissionError):  # group gone
                os.killpg(proc.pid, signum)

    def drain(self) -> None:
        """Wait until every worker's output has been printed to its end (EOF).

        A pipe reaches EOF once no process holds it: the worker and every process of
        its group have exited (the caller stops them first). The wait has no time limit
        while the output is being printed (a slow reader of this launcher's stdout only
        slows it down); a pipe still held open although the worker's group is empty --
        by a process that left the group -- is given up after a few seconds, saying so.
        """
        empty_since: dict[int, float] = {}
        while True:
            pending = [r for r in self.readers.values() if not r.done.is_set()]
            if not pending:
                return
            now = time.monotonic()
            for reader in pending:
                waiting = reader.waiting_since
                if waiting is None or _group_alive(self.procs[reader.index]):
                    empty_since.pop(reader.index, None)
                    continue
                since = empty_since.setdefault(reader.index, now)
                if now - max(since, waiting) > _ORPHAN_PIPE_SECONDS:
                    self.out.message(
                        f"warning: worker {reader.index}'s output is held open by a process "
                        "outside its process group: not waiting for the rest of it"
                    )
                    reader.done.set()
            pending[0].done.wait(0.05)


@dataclass(frozen=True)
class StopRequest:
    """A request from outside the group (the rendezvous) to stop it with ``signum``."""

    signum: int
    reason: str = ""


@dataclass
class Outcome:
    """How one group run ended."""

    failed_index: int | None = None  # the first worker to fail, if any
    returncode: int = 0  # its return code (negative: killed by that signal)
    signum: int | None = None  # a signal received by the launcher, if any
    request: StopRequest | None = None  # a stop asked for from outside, if any

    @property
    def ok(self) -> bool:
        """Every worker exited 0, and nothing stopped the group."""
        return self.failed_index is None and self.signum is None and self.request is None


class Supervisor:
    """Runs groups of workers; records the signals the launcher receives."""

    def __init__(self, grace_seconds: float, out: Output) -> None:
        self.grace_seconds = grace_seconds
        self.out = out
        self.signals: list[int] = []

    def handle_signal(self, signum: int, frame: object) -> None:
        """The launcher's handler of SIGINT / SIGTERM: remember the signal."""
        self.signals.append(signum)

    def run_group(
        self,
        specs: Sequence[WorkerSpec],
        poll: Callable[[], StopRequest | None] | None = None,
    ) -> Outcome:
        """Start ``specs`` and supervise them until they end, fail, or are stopped.

        ``poll`` (called about every 0.1 s) may ask to stop the group from outside.
        Every worker's output is printed to its end before this returns.
        """
        group = _Group(specs, self.out)
        try:
            group.start()
            return self._watch(group, poll)
        finally:
            if group.running:  # only on an unexpected error: leave nothing behind
                group.signal_all(signal.SIGKILL)
            group.drain()

    def _watch(self, group: _Group, poll: Callable[[], StopRequest | None] | None) -> Outcome:
        while group.running:
            if self.signals:
                signum = self.signals[0]
                self.out.message(
                    f"got {signal_name(signum)}: forwarding it to the workers"
                    f" (SIGKILL after {self.grace_seconds:g}s)"
                )
                self._stop(group, signum)
                return Outcome(signum=signum)
            request = poll() if poll is not None else None
            if request is not None:
                self._stop(group, request.signum)
                return Outcome(request=request)
            ended = group.next_exit(timeout=0.1)
            if ended is None or ended[1] == 0:
                continue
            index, returncode = ended
            others = ", ".join(str(i) for i in group.running)
            self.out.message(
                f"{describe_exit(index, returncode)}"
                + (f"; stopping worker(s) {others}" if others else "")
            )
            self._stop(group, signal.SIGTERM)
            return Outcome(
                failed_index=index,
                returncode=returncode,
                signum=self.signals[0] if self.signals else None,
            )
        self._finish(group)
        return Outcome()

    def _finish(self, group: _Group) -> None:
        """Every worker exited 0: give processes they left behind the grace period, then stop.

        (Their output is printed to its end; a process still running then is stopped as a
        failed group's would be, so that nothing outlives the launch.)
        """
        lingering = group.lingering
        if not lingering:
            return
        names = ", ".join(str(i) for i in lingering)
        self.out.message(
            f"worker(s) {names} exited, but process(es) they started still run: waiting up "
            f"to {self.grace_seconds:g}s for them"
        )
        deadline = time.monotonic() + self.grace_seconds
        while group.lingering and time.monotonic() < deadline and not self.signals:
            time.sleep(0.1)
        if group.lingering:
            self.out.message(f"stopping the processes left by worker(s) {names}")
            self._stop(group, signal.SIGTERM)

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
                else f"no exit {self.grace_seconds:g}s after {signal_name(signum)}"
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


@contextlib.contextmanager
def forwarded_signals(sup: Supervisor) -> Iterator[None]:
    """Route SIGINT / SIGTERM to ``sup`` (main thread only); restore the handlers after.

    A signal this process ignores stays ignored (e.g. SIGINT for ``cmd &`` in a
    script), as in Python itself; the workers inherit that.
    """
    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for signum in _FORWARDED_SIGNALS:
            if signal.getsignal(signum) is not signal.SIG_IGN:
                previous[signum] = signal.signal(signum, sup.handle_signal)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def check_launch_options(max_restarts: int, grace_seconds: float) -> None:
    """Refuse a negative or non-integer restart count and a negative grace period."""
    if os.name != "posix":  # pragma: no cover - depends on the platform
        raise LaunchError("tfdp launch needs a POSIX system (process groups and signals)")
    if isinstance(max_restarts, bool) or not isinstance(max_restarts, int) or max_restarts < 0:
        raise LaunchError(f"must be an integer >= 0, got {max_restarts!r}", argument="max_restarts")
    if not grace_seconds >= 0:
        raise LaunchError(f"must be >= 0, got {grace_seconds!r}", argument="grace_seconds")


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
    """Run ``command`` as ``workers`` tf.distribute workers on this node and supervise them.

    Every worker gets the :func:`tfdp.launch.plan` environment and runs in its own process
    group; its stdout and stderr lines are printed to this process's stdout as
    ``[worker i] ...``, every line to the end before this returns. When a worker exits
    non-zero or is killed, the others get SIGTERM, then SIGKILL after ``grace_seconds``;
    then, while restarts are left, the whole group starts again with fresh ports (the
    same ports with ``port_base``) and ``TFDP_RESTART`` incremented. Processes a worker
    leaves behind after exiting 0 get ``grace_seconds`` to end, then are stopped.
    SIGINT and SIGTERM sent to this process are forwarded to every worker (a second
    one: SIGKILL at once); this needs the main thread (elsewhere, signals are not
    intercepted), and a signal that this process ignores stays ignored.

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
    command = list(command)
    check_workers(workers)
    check_launch_options(max_restarts, grace_seconds)
    base_env = dict(os.environ if env is None else env)
    fixed = None if port_base is None else ports_from_base(port_base, workers)
    plan(command, fixed or list(range(1, workers + 1)), host=host, env={})  # validate early

    out = Output()
    sup = Supervisor(grace_seconds, out)
    with forwarded_signals(sup):
        for restart in range(max_restarts + 1):
            if sup.signals:
                break
            ports = fixed if fixed is not None else free_ports(workers, host)
            specs = plan(command, ports, host=host, env=base_env, restart=restart)
            try:
                outcome = sup.run_group(specs)
            except StartError as exc:
                raise LaunchError(str(exc)) from exc.error
            if outcome.signum is not None or sup.signals:
                break
            if outcome.failed_index is None:
                return 0
            what = describe_exit(outcome.failed_index, outcome.returncode)
            if restart < max_restarts:
                out.message(
                    f"restarting all {workers} worker(s) (restart {restart + 1} of {max_restarts})"
                )
                continue
            used = f" (after {restart} restart{'s' if restart != 1 else ''})" if restart else ""
            out.message(f"error: {what}{used}")
            return exit_status(outcome.returncode)
        signum = sup.signals[0]
        out.message(f"error: interrupted by {signal_name(signum)}")
        return 128 + signum
