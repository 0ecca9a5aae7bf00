"""Faults injected into real `tfdp train` processes: nothing written is lost or corrupted.

Every test asserts that its fault really happened (the process was killed where the test
said, the write was refused, the signal arrived) before it checks the outcome: kill -9 at
three points inside checkpoint saves of one run resumes to bit-identical weights; a read-only
run directory and a full disk give clear errors and leave the state file as it was; a second
Ctrl-C ends the process at once; two workers with one task index beside a peer that then
dies (one group). (A frozen peer, SIGSTOP, is tests/test_net_faults.py's stopped node: the
same error line, and more.)
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import free_ports

WORKERS = Path(__file__).parent / "workers"
# --model elastic_model:tiny: tests/workers/elastic_model.py, a one-layer model (on PYTHONPATH).
ENV = {
    **os.environ,
    "TF_CPP_MIN_LOG_LEVEL": "2",
    "PYTHONPATH": os.pathsep.join(p for p in (str(WORKERS), os.environ.get("PYTHONPATH")) if p),
}
# Where the fault, not the training, is the point: the one-layer model, one short epoch of the
# digits (5 steps), one step per call and a checkpoint after every step (the save of ckpt-4 is
# the first to delete an old one, ckpt-1, with the trainer's max_to_keep of 3), so that a run is
# under way (a checkpoint on disk) a moment after TensorFlow has loaded.
TRAIN = [
    "--epochs", "1", "--batch-size", "256", "--deterministic", "--no-progress",
    "--checkpoint-every", "1", "--steps-per-call", "1", "--model", "elastic_model:tiny",
]  # fmt: skip
TINY = ["--model", "elastic_model:tiny", "--steps-per-call", "1", "--checkpoint-every", "1"]

pytestmark = pytest.mark.slow


def _run(args: list[str], timeout: float = 600, **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, capture_output=True, text=True, timeout=timeout, env=ENV, check=False, **kwargs
    )


def _save_fault(point: str, number: int, *flags: str) -> subprocess.CompletedProcess[str]:
    return _run([sys.executable, str(WORKERS / "save_fault.py"), point, str(number), "--", *flags])


def _result(out: str) -> str:
    found = re.findall(r"^RESULT (\w+) step (\d+)$", out, re.M)
    assert found, out[-3000:]
    return found[-1][0]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> tuple[Path, str]:
    """The run directory and the final weights of the uninterrupted run."""
    run = tmp_path_factory.mktemp("reference") / "run"
    done = _save_fault("none", 0, *TRAIN, "--run-dir", str(run))
    assert done.returncode == 0, done.stderr[-3000:]
    return run, _result(done.stdout)


@pytest.mark.xdist_group("faults_uninterrupted")  # its module fixture runs once
def test_kill9_inside_a_checkpoint_save_resumes_bit_identical(tmp_path, uninterrupted):
    """One run killed three times, at three points of three saves, each time resumed.

    Each kill leaves another state on disk, and each resume must read it right (the state
    after the earlier kills, too): ``shards`` inside ckpt-2's save (its shards in
    ``ckpt-2_temp/``, not merged: resume from ckpt-1, the leftover removed), ``merged`` in
    ckpt-4's (complete, but the state file does not name it yet: resume from it), ``sweep`` in
    ckpt-5's (named, the oldest checkpoint half deleted: resume from ckpt-5). The last run ends
    with the uninterrupted run's weights bit for bit. One chain, not one run per point: three
    TensorFlow start-ups fewer, and the first two resumes still train on after the restore.
    """
    run = tmp_path / "run"
    ckpts = run / "checkpoints"
    args = [*TRAIN, "--run-dir", str(run)]
    chain = [("shards", 2, "ckpt-1"), ("merged", 4, "ckpt-4"), ("sweep", 5, "ckpt-5")]
    expected = None  # where the next run must resume from
    for point, number, resumed_from in chain:
        resume = [] if expected is None else ["--resume"]
        killed = _save_fault(point, number, *args, *resume)
        assert killed.returncode == -signal.SIGKILL, (point, killed.stderr[-3000:])
        assert f"FAULT {point}" in killed.stdout  # killed where the test said
        if expected is not None:  # ... after it resumed where the previous kill left it
            assert f"resumed from {ckpts / expected}: " in killed.stdout, killed.stdout[-3000:]
        names = {p.name for p in ckpts.iterdir()}
        state = (ckpts / "checkpoint").read_text()
        if point == "shards":
            assert "ckpt-2_temp" in names and "ckpt-2.index" not in names
        if point == "merged":
            assert "ckpt-4.index" in names and '"ckpt-4"' not in state
        if point == "sweep":
            assert "ckpt-1.index" not in names and "ckpt-1.data-00000-of-00001" in names
            assert 'model_checkpoint_path: "ckpt-5"' in state
        expected = resumed_from
    resumed = _save_fault("none", 0, *args, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resumed from {ckpts / expected}: " in resumed.stdout
    assert _result(resumed.stdout) == uninterrupted[1]
    assert not [p for p in ckpts.iterdir() if p.name.endswith("_temp")]  # leftovers removed


# -- unwritable run directories ---------------------------------------------------------------


def _unprivileged(cmd: list[str]) -> list[str]:
    """``cmd`` without the power to write into read-only directories (root drops it)."""
    if os.geteuid() != 0:
        return cmd
    if not shutil.which("setpriv"):
        pytest.skip("running as root without setpriv: read-only directories are writable")
    return ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", *cmd]


@pytest.fixture(scope="module")
def finished_run(uninterrupted) -> Path:
    return uninterrupted[0]


def _snapshot(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in run.rglob("*") if p.is_file()}


@pytest.mark.xdist_group("faults_uninterrupted")  # its module fixture runs once
def test_read_only_run_directory_is_a_clear_error(tmp_path, finished_run):
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    before = _snapshot(run)
    modes = {p: p.stat().st_mode for p in [run, *run.rglob("*")]}
    for p in modes:
        p.chmod(p.stat().st_mode & ~0o222)
    try:
        probe = _run(_unprivileged(["touch", str(run / "probe")]))
        assert probe.returncode != 0  # the fault: this process really cannot write here
        cmd = [sys.executable, "-m", "tfdp.cli", "train", *TRAIN, "--run-dir", str(run)]
        resumed = _run(_unprivileged([*cmd, "--resume", "--epochs", "2"]))
        fresh = _run(_unprivileged([*cmd, "--run-dir", str(run / "new")]))
    finally:
        for p, mode in modes.items():
            p.chmod(mode)
    for result in (resumed, fresh):
        assert result.returncode == 2, result.stderr[-3000:]
        assert "Permission denied" in result.stderr and "Traceback" not in result.stderr
    assert f"cannot create the lock file {str(run / '.tfdp.lock')!r}" in resumed.stderr
    assert str(run / "new") in fresh.stderr
    assert _snapshot(run) == before  # nothing written, nothing lost


@pytest.mark.xdist_group("faults_uninterrupted")  # its module fixture runs once
def test_full_disk_keeps_the_state_file_and_the_last_checkpoint(tmp_path, finished_run):
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    state = (run / "checkpoints" / "checkpoint").read_bytes()
    # Bytes per file: the checkpoint data (about 10 kB) cannot be written, the rest (config,
    # metrics, the state file: under 2 kB each) can.
    limit = 8_000

    def small_disk() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    cmd = [sys.executable, "-m", "tfdp.cli", "train", *TRAIN, "--run-dir", str(run), "--resume"]
    full = _run([*cmd, "--epochs", "2"], preexec_fn=small_disk)
    assert full.returncode == 1 and "File too large" in full.stderr  # the fault happened
    assert "ckpt-" in full.stderr and "Traceback" not in full.stderr  # names the file
    assert (run / "checkpoints" / "checkpoint").read_bytes() == state
    again = _run([*cmd, "--epochs", "2"])
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"resumed from {run / 'checkpoints' / 'ckpt-5'}" in again.stdout
    assert not list((run / "checkpoints").glob("*_temp"))


# -- signals -----------------------------------------------------------------------------------


def test_second_ctrl_c_exits_at_once_without_saving(tmp_path):
    run = tmp_path / "run"
    cmd = [
        sys.executable, "-m", "tfdp.cli", "train", "--epochs", "50", "--replicas", "4",
        "--steps-per-call", "22", "--batch-size", "64", "--no-progress", "--run-dir", str(run),
    ]  # fmt: skip
    proc = subprocess.Popen(  # on one core: 4 replicas are "far more than the cores"
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
        preexec_fn=lambda: os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}),
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        lines = []
        for line in proc.stderr:  # the replica warning comes first
            lines.append(line)
            if "replicas on" in line:
                break
        assert "warning: 4 logical CPU replicas on 1 CPU core(s)" in lines[-1]
        deadline = time.monotonic() + 300
        while not list((run / "checkpoints").glob("ckpt-*.index")):  # training is under way
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        line = ""
        while "SIGINT:" not in line:  # the first signal arrived and was understood
            line = proc.stderr.readline()
            assert line, "the process ended without acknowledging SIGINT"
        assert "SIGINT: saving a checkpoint and stopping (Ctrl-C again to exit now" in line
        saved = sorted(p.name for p in (run / "checkpoints").iterdir())
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGINT  # ended by the signal itself, at once
    assert "stopped at epoch" not in out
    now = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert [n for n in now if not n.endswith("_temp")] == [
        n for n in saved if not n.endswith("_temp")
    ]  # nothing more saved


# -- multi-worker start-up and a dead peer -----------------------------------------------------


def _worker_env(ports: list[int], index: int, startup_timeout: int = 20) -> dict[str, str]:
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    tf_config = {"cluster": cluster, "task": {"type": "worker", "index": index}}
    return {**ENV, "TF_CONFIG": json.dumps(tf_config), "TFDP_STARTUP_TIMEOUT": str(startup_timeout)}


def test_a_second_worker_0_is_told_why_and_a_dead_peer_is_named(tmp_path):
    """Two faults, one group: two processes start as worker 0 (one TF_CONFIG task twice) beside
    worker 1; the one that cannot bind the port is told why, the other trains with worker 1,
    which then dies (SIGKILL): the survivor names it. (Three processes, not four.)"""
    ports = free_ports(2)
    cmd = [sys.executable, "-m", "tfdp.cli", "train", "--epochs", "200", "--no-progress",
           *TINY, "--run-dir", str(tmp_path / "r")]  # fmt: skip
    # Whichever sees the loss first (the closed connections, missed heartbeats): 5 s of silence,
    # not TensorFlow's 10.
    env = {"TFDP_HEARTBEAT_TIMEOUT": "5"}
    procs = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env={**_worker_env(ports, i, startup_timeout=120), **env})
        for i in (0, 0, 1)
    ]  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while all(p.poll() is None for p in procs[:2]):  # the one that cannot bind the port ends
            assert procs[2].poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        (loser,) = [p for p in procs[:2] if p.poll() is not None]
        (chief,) = [p for p in procs[:2] if p is not loser]
        assert loser.returncode != 0
        refused = loser.communicate(timeout=60)[1]
        assert f"port {ports[0]} is already in use" in refused, refused[-3000:]
        assert "same TF_CONFIG task (worker 0)" in refused
        while not list((tmp_path / "r" / "checkpoints").glob("ckpt-*.index")):
            assert chief.poll() is None and procs[2].poll() is None
            assert time.monotonic() < deadline
            time.sleep(0.2)
        procs[2].kill()  # the fault: worker 1 dies mid-run (SIGKILL)
        assert procs[2].wait(timeout=60) == -signal.SIGKILL
        _, err = chief.communicate(timeout=600)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert chief.returncode == 4, err[-3000:]  # a lost peer's own exit status
    line = [ln for ln in err.splitlines() if ln.startswith("tfdp train: error:")][-1]
    assert "Graph execution error" not in line
    assert f"lost worker 1 at 127.0.0.1:{ports[1]} after optimizer step" in line, line
    assert "Resume with: tfdp train --resume --run-dir" in line


# -- tfdp train holds the lock ----------------------------------------------------------------


def _train(run: Path, *extra: str, cwd: Path) -> subprocess.Popen[str]:
    # TFDP_ELASTIC_SLOW: 100 ms per step, so the first run idles (not trains and saves flat
    # out) while the second starts up.
    env = {**ENV, "TFDP_ELASTIC_SLOW": "1"}
    cmd = [sys.executable, "-m", "tfdp.cli", "train", "--run-dir", str(run), "--no-progress",
           *TINY, *extra]  # fmt: skip
    return subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=cwd,
    )


def _wait_for_checkpoint(run: Path, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 300
    while not list((run / "checkpoints").glob("ckpt-*.index")):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no checkpoint written"
        time.sleep(0.2)


def test_two_runs_on_one_directory(tmp_path):
    run = tmp_path / "run"
    first = _train(run, "--epochs", "200", cwd=tmp_path)
    try:
        _wait_for_checkpoint(run, first)
        holder = json.loads((run / ".tfdp.lock").read_text())
        assert holder["pid"] == first.pid
        second = _train(run, "--epochs", "200", "--resume", cwd=tmp_path)
        _, err = second.communicate(timeout=300)
        assert second.returncode == 2, err
        assert f"is in use by pid {first.pid} on host {socket.gethostname()!r}" in err
        assert "Traceback" not in err
        first.send_signal(signal.SIGTERM)  # a clean stop releases the lock
        _, err = first.communicate(timeout=300)
        assert first.returncode == 143, err
    finally:
        if first.poll() is None:
            first.kill()
    assert not (run / ".tfdp.lock").exists()  # released on the way out
