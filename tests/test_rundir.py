"""One writer per run directory (tfdp.recipe.rundir.RunLock), real processes; config.json I/O."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tfdp.recipe.rundir import (
    LOCK_NAME,
    RunLock,
    RunLockedError,
    read_json_object,
    write_json_atomic,
)

HOLD = """
import sys, time
from tfdp.recipe.rundir import RunLock
lock = RunLock(sys.argv[1]).acquire()
print("HELD", flush=True)
time.sleep(600)
"""


def _holder(run: Path) -> subprocess.Popen[str]:
    """Another process that takes the lock and keeps it (until killed)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(run)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "HELD"
    return proc


def test_a_live_holder_is_named_and_a_dead_one_taken_over(tmp_path):
    run = tmp_path / "run"
    proc = _holder(run)
    try:
        content = json.loads((run / LOCK_NAME).read_text())
        assert content["pid"] == proc.pid and content["host"] == socket.gethostname()
        with pytest.raises(RunLockedError) as err:
            RunLock(run).acquire()
        assert f"in use by pid {proc.pid} on host {socket.gethostname()!r}" in str(err.value)
    finally:
        proc.kill()  # kill -9: no clean-up, the lock file stays with a dead pid
        proc.wait()
    assert json.loads((run / LOCK_NAME).read_text())["pid"] == proc.pid
    notices: list[str] = []
    lock = RunLock(run, notify=notices.append).acquire()
    assert notices and f"left by pid {proc.pid}" in notices[0] and "no longer running" in notices[0]
    assert json.loads((run / LOCK_NAME).read_text())["pid"] == os.getpid()
    lock.release()
    assert not (run / LOCK_NAME).exists()


def test_another_hosts_lock_is_refused_with_how_to_remove_it(tmp_path):
    (tmp_path / LOCK_NAME).write_text(json.dumps({"pid": 1, "host": "elsewhere", "started": 0}))
    with pytest.raises(RunLockedError) as err:
        RunLock(tmp_path).acquire()
    message = str(err.value)
    assert "pid 1 on host 'elsewhere'" in message and "cannot check" in message
    assert f"delete {str(tmp_path / LOCK_NAME)!r}" in message


def test_pid_alive_but_not_holding_is_taken_over(tmp_path):
    """A recycled pid (alive, but not the holder: no flock) does not block the directory."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        record = {"pid": sleeper.pid, "host": socket.gethostname(), "started": 0}
        (tmp_path / LOCK_NAME).write_text(json.dumps(record))
        notices: list[str] = []
        with RunLock(tmp_path, notify=notices.append):
            assert "no longer holding it" in notices[0]
    finally:
        sleeper.kill()
        sleeper.wait()


def test_read_only_directory_is_a_clear_error(tmp_path):
    target = tmp_path / "file"
    target.write_text("x")
    with pytest.raises(PermissionError, match="cannot create the lock file"):
        RunLock(target / "run").acquire()


def test_run_config_errors_name_the_file(tmp_path):
    p = tmp_path / "config.json"
    p.write_bytes(bytes(range(200, 256)))
    with pytest.raises(ValueError, match=rf"{p} is not text \(UTF-8 JSON\)"):
        read_json_object(p, "run config")
    p.write_text('{"epochs": 2')
    with pytest.raises(ValueError, match=rf"run config {p} is not valid JSON .*line 1"):
        read_json_object(p, "run config")
    p.write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"must hold a JSON object.*got a list"):
        read_json_object(p, "run config")
    write_json_atomic(p, {"epochs": 3})
    assert read_json_object(p) == {"epochs": 3}
    assert [q.name for q in tmp_path.iterdir()] == ["config.json"]  # no temp file left
