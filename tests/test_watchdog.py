"""The start-up watchdog as a real module: ``python -m tfdp.distribute.watchdog``."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

from tfdp.distribute import watchdog


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_stood_down_in_time_it_exits_quietly_and_leaves_the_parent_alive():
    target = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tfdp.distribute.watchdog", str(target.pid), "30", "[]"],
            stdin=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        guard = watchdog.Watchdog(proc)
        guard.set()
        assert proc.returncode == 0 and proc.stderr.read() == b""
        assert target.poll() is None  # not killed
    finally:
        target.kill()
        target.wait()


def test_after_the_timeout_it_names_the_unreachable_peer_and_kills_the_parent():
    port = _free_port()  # nothing listens there
    target = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        peers = json.dumps([f"127.0.0.1:{port}"])
        proc = subprocess.Popen(
            [sys.executable, "-m", "tfdp.distribute.watchdog", str(target.pid), "0.5", peers],
            stdin=subprocess.PIPE,  # kept open: never stood down
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.wait(timeout=60) == 1
        stderr = proc.stderr.read()
        proc.stdin.close()
        assert target.wait(timeout=30) == -9  # the fault really happened: SIGKILL
        assert "did not all connect within 0.5s" in stderr
        assert f"unreachable peer(s): 127.0.0.1:{port}" in stderr
    finally:
        if target.poll() is None:
            target.kill()
            target.wait()


def test_start_reads_the_peers_from_tf_config(monkeypatch):
    me, peer = _free_port(), _free_port()
    cluster = {"worker": [f"127.0.0.1:{me}", f"127.0.0.1:{peer}"]}
    monkeypatch.setenv(
        "TF_CONFIG", json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 0}})
    )
    guard = watchdog.start(30)
    try:
        assert guard.proc.args[-1] == json.dumps([f"127.0.0.1:{peer}"])
        assert guard.proc.args[1:3] == ["-m", "tfdp.distribute.watchdog"]
    finally:
        guard.set()
    assert guard.proc.returncode == 0


def test_the_watchdog_process_loads_no_tensorflow():
    code = "import sys, tfdp.distribute.watchdog; print('tensorflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
