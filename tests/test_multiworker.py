"""Multi-worker training via `tfdp launch`: agreement, kill -9 and SIGTERM recovery, start-up.

Real MultiWorkerMirroredStrategy workers on 127.0.0.1 (one replica per process on CPU),
op determinism on, one short epoch of a slice of the digits (8 steps) and a one-layer model:
the faults, not the training, are the point.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import free_ports
from mw import digits_npz

WORKER = Path(__file__).parent / "workers" / "train_fault.py"
# --model elastic_model:tiny: tests/workers/elastic_model.py, beside the worker script.
TRAIN = [
    "--model",
    "elastic_model:tiny",
    "--eval-fraction",
    "0.2",
    "--epochs",
    "1",
    "--batch-size",
    "64",
    "--deterministic",
    "--no-progress",
    "--checkpoint-every",
    "3",
    "--steps-per-call",
    "1",
]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """640 digits: 512 training examples, 8 steps of 64 (2 workers), 128 held out."""
    return digits_npz(tmp_path_factory.mktemp("data"), 640)


def launch(tmp: Path, data: Path, faults: str, restarts: int) -> tuple[int, str]:
    cmd = [
        sys.executable,
        "-m",
        "tfdp.launch",
        "--workers",
        "2",
        "--max-restarts",
        str(restarts),
        "--",
        sys.executable,
        str(WORKER),
        faults,
        "--",
        *TRAIN,
        "--data",
        str(data),
        "--run-dir",
        str(tmp / "run"),
    ]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "TFDP_STARTUP_TIMEOUT": "120"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def fingerprints(out: str) -> dict[int, str]:
    """The final weights fingerprint each worker printed (the last one per worker).

    The launcher's worker i must be TF_CONFIG task i: it says "worker i weights".
    """
    found = {}
    for w, fp in re.findall(r"\[worker (\d)\] tfdp train: worker \1 weights sha256 (\w+)", out):
        found[int(w)] = fp
    return found


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, data):
    tmp = tmp_path_factory.mktemp("clean")
    code, out = launch(tmp, data, "none", 0)
    assert code == 0, out[-3000:]
    fps = fingerprints(out)
    assert set(fps) == {0, 1}
    return fps[0], out


@pytest.mark.xdist_group("multiworker_uninterrupted")  # its module fixture runs once
def test_two_workers_train_to_identical_weights(uninterrupted):
    _, out = uninterrupted
    assert len(set(fingerprints(out).values())) == 1  # both workers: the same weights
    assert "2 replica(s)" in out and "FAULT" not in out
    # The chief holds the run directory's lock; the other worker sees the chief's pid there.
    assert "[worker 0] LOCK holder" in out and "[worker 0] LOCK holder None" not in out
    assert re.search(r"\[worker 0\] LOCK holder \d+ is me True", out)
    assert re.search(r"\[worker 1\] LOCK holder \d+ is me False", out)
    # No TensorFlow warning caused by tfdp: the first collective runs in a tf.function.
    assert "eagerly has significant overhead" not in out


@pytest.fixture(scope="module")
def faulted(tmp_path_factory, data) -> str:
    """One group faulted twice: worker 1 SIGTERMs itself at step 4 of the first run, SIGKILLs
    itself at step 7 of the first restart; the second restart runs to the end. (One group of
    three runs, not two of two: two worker processes fewer.)"""
    code, out = launch(tmp_path_factory.mktemp("faulted"), data, "term:4,kill:7", 2)
    assert code == 0, out[-3000:]
    return out


def _resumed(out: str) -> list[tuple[str, str]]:
    """(checkpoint number, step) of every resume, in order (worker 0's lines, on stdout)."""
    return re.findall(r"resumed from .*ckpt-(\d+): in epoch 1, after its step (\d+) ", out)


@pytest.mark.xdist_group("multiworker_uninterrupted")  # its module fixtures run once
def test_sigterm_checkpoints_that_step_and_the_restart_resumes_there(faulted, uninterrupted):
    out = faulted
    assert "FAULT term worker 1 at step 4" in out
    assert "[worker 1] tfdp train: SIGTERM: saving a checkpoint and stopping" in out
    # The group agreed on step 4 (not a periodic checkpoint: those are 3, 6): the first restart
    # resumes from the checkpoint both workers saved there, and worker 0 never reports another
    # step. The launcher SIGTERMs worker 0 as soon as worker 1 exits, so worker 0's own outcome
    # depends on when that lands: before it learned of the peer's stop (reason=SIGTERM, same
    # step: seen once in CI), after (reason=peer), or after its run ended but before its RESULT
    # line was printed (no line: seen once in CI).
    assert _resumed(out)[:1] == [("4", "4")], out[-3000:]
    first_run = out.split("resumed from")[0]  # stdout: the restart's lines come after
    results = re.findall(r"\[worker 0\] RESULT (.*)", first_run)
    assert results in (
        [],
        ["stopped_early=True reason=peer step=4"],
        ["stopped_early=True reason=SIGTERM step=4"],
    ), out[-3000:]
    assert fingerprints(out) == {0: uninterrupted[0], 1: uninterrupted[0]}


@pytest.mark.xdist_group("multiworker_uninterrupted")  # its module fixtures run once
def test_kill9_mid_epoch_restarts_and_ends_with_the_same_weights(faulted, uninterrupted):
    out = faulted
    assert "FAULT kill worker 1 at step 7" in out  # the kill really happened ...
    assert "killed by SIGKILL" in out and "restart 2 of 2" in out  # ... and was recovered from
    # Worker 0 says the loss in tfdp's line (exit 4), unless the launcher stopped it first;
    # TensorFlow's own records of the aborted collective are held back, and no traceback.
    if "[worker 0] tfdp train: error: lost worker 1 at 127.0.0.1:" in out:
        assert "[worker 0] RESULT status=4" in out
    assert "E0000" not in out and "absl::InitializeLog" not in out, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    # The chief saves its last completed step when it sees the peer lost (ckpt-7), unless the
    # launcher stopped it first: then the last periodic checkpoint before the kill (ckpt-6).
    resumed = _resumed(out)
    assert len(resumed) == 2 and resumed[1] in (("6", "6"), ("7", "7")), out[-3000:]
    if resumed[1][0] == "7":
        assert "saved by this worker at the fault (no completed step lost)" in out
    assert fingerprints(out) == {0: uninterrupted[0], 1: uninterrupted[0]}


def test_unreachable_peer_is_a_clear_error_not_a_hang(tmp_path):
    ports = free_ports(2)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    env = {
        **os.environ,
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "TFDP_STARTUP_TIMEOUT": "3",  # the peer never comes: nothing to wait for
        "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 0}}),
    }
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tfdp.cli",
            "train",
            "--epochs",
            "1",
            "--run-dir",
            str(tmp_path / "run"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    assert proc.returncode == -9, proc.stdout + proc.stderr  # ended by the watchdog
    assert "did not all connect within 3s" in proc.stderr
    assert f"unreachable peer(s): 127.0.0.1:{ports[1]}" in proc.stderr


@pytest.fixture(scope="module")
def trainer_checks() -> tuple[list[str], list[str]]:
    """Each worker's output of progress_worker.py and of permutation_worker.py (one run)."""
    from mw import run_workers

    outs = run_workers(Path(__file__).parent / "workers" / "trainer_checks.py", 2, [], 300)
    parts = [out.split("=== permutation\n") for out in outs]
    assert all(len(p) == 2 for p in parts), outs[0][-3000:]
    return [p[0] for p in parts], [p[1] for p in parts]


@pytest.mark.xdist_group("multiworker_trainer_checks")  # its module fixture runs once
def test_default_progress_bar_and_metrics_under_two_workers(trainer_checks):
    """Trainer's defaults (progress bar on the chief, metrics) under MultiWorkerMirroredStrategy.

    Reading a Keras metric is a cross-worker collective: a bar that reads one on the chief
    only makes the workers' collectives disagree and the group fail (or hang).
    """
    outs = trainer_checks[0]
    results = [json.loads(re.search(r"RESULT (.*)", out).group(1)) for out in outs]
    assert results[0]["weights"] == results[1]["weights"]
    assert [r["loss"] for r in results[0]["records"]] == [r["loss"] for r in results[1]["records"]]
    assert len(results[0]["records"]) == 2
    # Output is not a terminal: no bar, no ANSI escapes; step lines (log_every=4) instead.
    assert not any("\x1b" in out or "\r" in out for out in outs)
    assert re.search(r"step 12/12  global_step 12  loss \d", outs[0])  # the chief's ...
    assert "step 12/12" not in outs[1]  # ... the other worker wrote none
    assert "epoch 2" in outs[0]


@pytest.mark.xdist_group("multiworker_trainer_checks")  # its module fixture runs once
def test_workers_with_different_permutations_are_stopped_naming_the_epoch(trainer_checks):
    """A user permutation= that differs between workers (here from epoch 1 on, as one shared
    generator would) is refused at that epoch's start, on every worker, before it trains."""
    for out in trainer_checks[1]:
        assert "AGREED 0" in out, out[-3000:]
        refused = re.search(r"REFUSED after (\d) epoch\(s\): (.*)", out)
        assert refused, out[-3000:]
        assert refused.group(1) == "1"  # the first epoch trained, the second was refused
        message = refused.group(2)
        assert "the workers got different permutations for epoch 2 (permutation(1)" in message
        assert re.search(r"worker 0: [0-9a-f]{16}, worker 1: [0-9a-f]{16}", message)
        assert "manual_seed(seed + epoch)" in message
