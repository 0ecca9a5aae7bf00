"""The start-up watchdog: a separate process that ends a worker whose peers never connect.

TensorFlow waits for missing peers inside a C++ call that holds the GIL and
ignores SIGTERM, so no thread or signal handler of the waiting process can
act. :func:`start` launches this module as a process
(``python -m tfdp.distribute.watchdog PID TIMEOUT PEERS_JSON``): it waits on
its stdin for up to ``TIMEOUT`` seconds; when the parent stands it down
(closes the pipe, or exits) it exits quietly, otherwise it prints which peer
addresses are unreachable and kills the parent with SIGKILL. Pure Python: the
process starts in a fraction of a second and loads no TensorFlow.

Example:
    >>> reachable("127.0.0.1:1")  # nothing listens on port 1
    False
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
from collections.abc import Sequence

from tfdp.distribute.tf_config import parse_tf_config


def reachable(address: str) -> bool:
    """Whether ``host:port`` accepts a TCP connection within 2 seconds.

    Example:
        >>> reachable("127.0.0.1:1")
        False
    """
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=2):
            return True
    except OSError:
        return False


def main(argv: Sequence[str] | None = None) -> int:
    """The watchdog process: ``PID TIMEOUT PEERS_JSON``; returns 0 when stood down in time.

    Example:
        >>> import subprocess, sys
        >>> proc = subprocess.Popen([sys.executable, "-m", "tfdp.distribute.watchdog", "0", "30",
        ...                          "[]"], stdin=subprocess.PIPE)
        >>> proc.stdin.close(); proc.wait()  # stood down: exits quietly
        0
    """
    args = sys.argv[1:] if argv is None else list(argv)
    pid, timeout, peers = int(args[0]), float(args[1]), json.loads(args[2])
    ready, _, _ = select.select([sys.stdin], [], [], timeout)
    if ready:  # the parent said "connected" (or exited): nothing to do
        return 0
    bad = [a for a in peers if not reachable(a)]
    detail = (
        ("unreachable peer(s): " + ", ".join(bad))
        if bad
        else "every peer address accepts connections, but not all workers joined"
    )
    sys.stderr.write(
        f"tfdp: error: the workers did not all connect within {timeout:g}s ({detail}). Check "
        "TF_CONFIG's addresses and ports, that every worker was started (each with its own task "
        "index), and the firewall; raise TFDP_STARTUP_TIMEOUT for slow starts.\n"
    )
    sys.stderr.flush()
    os.kill(pid, signal.SIGKILL)
    return 1


class Watchdog:
    """The parent's handle on a running watchdog process: :meth:`set` stands it down."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc

    def set(self) -> None:
        """Stand the watchdog down (start-up succeeded) and wait for it to exit."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()  # select() in the watchdog returns: it exits quietly
        self.proc.wait()


def start(timeout: float | None) -> Watchdog:
    """Guard start-up with a watchdog process that ends this one if peers never connect.

    Args:
        timeout: Seconds to wait for the peers; ``None``: ``TFDP_STARTUP_TIMEOUT``
            from the environment (default 300).

    Returns:
        A :class:`Watchdog` whose ``set()`` stands the watchdog down.
    """
    if timeout is None:
        timeout = float(os.environ.get("TFDP_STARTUP_TIMEOUT", "300"))
    cfg = parse_tf_config()
    peers: list[str] = []
    if cfg is not None:
        me = cfg["cluster"][cfg["task"]["type"]][cfg["task"]["index"]]
        peers = [a for addrs in cfg["cluster"].values() for a in addrs if a != me]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tfdp.distribute.watchdog",
            str(os.getpid()),
            str(timeout),
            json.dumps(peers),
        ],
        stdin=subprocess.PIPE,
    )
    return Watchdog(proc)


if __name__ == "__main__":  # pragma: no cover - run as a process
    sys.exit(main())
