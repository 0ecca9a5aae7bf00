"""Multi-worker training via `tfdp launch`: agreement, kill -9 and SIGTERM recovery, start-up.

Real MultiWorkerMirroredStrategy workers on 127.0.0.1 (one replica per process on CPU),
op determinism on, one short epoch of a slice of the digits (8 steps) and a one-layer model:
the faults, not the training, are the point. The Trainer's own multi-worker checks (default
output, a callback's stop, a non-finite step, the chief-only checkpoint, disagreeing
permutations) share one pair of worker processes (tests/workers/trainer_checks.py).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import free_ports
from mw import digits_npz

WORKERS = Path(__file__).parent / "workers"
WORKER = WORKERS / "train_fault.py"
#: trainer_checks.py's checks, in the order it runs them.
SECTIONS = ["progress", "callback_stop", "nonfinite", "checkpoint", "permutation"]
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
    # On CPUs where TensorFlow turns oneDNN on, its import logs one INFO record before absl's
    # logging is set up (TF_CPP_MIN_LOG_LEVEL does not reach it), after absl's one-time notice:
    # each process's notice is then its import's, not a fault record's.
    at_import = re.findall(r"I0000 \S+ +\d+ port\.cc:\d+\] oneDNN custom operations are on", out)
    assert "E0000" not in out and out.count("absl::InitializeLog") == len(at_import), out[-3000:]
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
def trainer_checks(tmp_path_factory) -> dict:
    """Each worker's output per check of trainer_checks.py (one pair of processes for five
    checks), and the checkpoint check's directory and records."""
    from mw import run_workers

    tmp = tmp_path_factory.mktemp("trainer_checks")
    record = str(tmp / "save{task}.json")
    outs = run_workers(WORKERS / "trainer_checks.py", 2, [str(tmp / "ckpt"), record], 300)
    sections: dict = {}
    for out in outs:
        parts = re.split(r"^=== (\w+)\n", out, flags=re.M)
        named = dict(zip(parts[1::2], parts[2::2], strict=True))
        assert list(named) == SECTIONS, out[-3000:]
        for name, text in named.items():
            sections.setdefault(name, []).append(text)
    sections["directory"] = tmp / "ckpt"
    sections["saves"] = [json.loads((tmp / f"save{i}.json").read_text()) for i in range(2)]
    return sections


def _results(outs: list[str]) -> list[dict]:
    return [json.loads(re.search(r"RESULT (.*)", out).group(1)) for out in outs]


@pytest.mark.xdist_group("multiworker_trainer_checks")  # its module fixture runs once
def test_default_progress_bar_and_metrics_under_two_workers(trainer_checks):
    """Trainer's defaults (progress bar on the chief, metrics) under MultiWorkerMirroredStrategy.

    Reading a Keras metric is a cross-worker collective: a bar that reads one on the chief
    only makes the workers' collectives disagree and the group fail (or hang).
    """
    outs = trainer_checks["progress"]
    results = _results(outs)
    assert results[0]["weights"] == results[1]["weights"]
    assert [r["loss"] for r in results[0]["records"]] == [r["loss"] for r in results[1]["records"]]
    assert len(results[0]["records"]) == 2
    # Output is not a terminal: no bar, no ANSI escapes; step lines (log_every=4) instead.
    assert not any("\x1b" in out or "\r" in out for out in outs)
    assert re.search(r"step 12/12  global_step 12  loss \d", outs[0])  # the chief's ...
    assert "step 12/12" not in outs[1]  # ... the other worker wrote none
    assert "epoch 2" in outs[0]
    # Every worker sees each replica's own loss, in global replica order (one-hot rows summed in
    # the gradients' all-reduce): the same on both, and the step's loss their mean (even batches).
    own = np.array(results[0]["replica_losses"])
    assert own.shape == (24, 2) and results[1]["replica_losses"] == results[0]["replica_losses"]
    np.testing.assert_allclose(own.mean(axis=1), results[0]["losses"], rtol=1e-6)
    assert np.abs(own[:, 0] - own[:, 1]).max() > 1e-3  # the two replicas' data differ


@pytest.mark.xdist_group("multiworker_trainer_checks")  # its module fixture runs once
def test_two_workers_stop_together_when_one_callback_asks(trainer_checks):
    first, second = sorted(_results(trainer_checks["callback_stop"]), key=lambda r: r["task"])
    assert not first["asked"] and second["asked"]  # only worker 1's callback asked ...
    for r in (first, second):  # ... and both stopped at the same step, after the call of step 6
        assert (r["epoch"], r["global_step"], r["epochs_done"]) == (0, 6, [])
        assert r["stop_reason"] == "callback" and r["stopped_early"] and r["stop_training"]
        assert r["batches"] == [1, 3, 5]
    assert first["weights"] == second["weights"]


@pytest.mark.xdist_group("multiworker_trainer_checks")  # its module fixture runs once
def test_two_workers_agree_on_the_nonfinite_step(trainer_checks):
    """The NaN is on worker 1's replica only; both workers stop at the same step."""
    results = _results(trainer_checks["nonfinite"])
    assert results[0] == results[1]
    assert results[0]["error"].startswith("non-finite")
    assert results[0]["global_step"] == results[0]["expected"]
    assert results[0]["rank_of_nan"] == 1


@pytest.mark.xdist_group("multiworker_trainer_checks")  # its module fixture runs once
def test_multiworker_only_chief_writes_and_fresh_processes_restore(trainer_checks, tmp_path):
    from mw import run_workers
    from tfdp.checkpoint import DataPosition

    directory, saves = trainer_checks["directory"], trainer_checks["saves"]
    assert [s["is_chief"] for s in saves] == [True, False]
    assert saves[0]["write_directory"] == str(directory)
    assert saves[1]["write_directory"].startswith(str(directory / ".tfdp_tmp_worker_1"))
    assert not saves[1]["tmp_exists_after"]
    # Both workers trained synchronously and report the chief's paths.
    assert saves[0]["weights"] == saves[1]["weights"]
    assert (
        saves[0]["saved"] == saves[1]["saved"] == [str(directory / f"ckpt-{s}") for s in (1, 2, 3)]
    )
    assert sorted(p.name for p in directory.iterdir()) == [
        "checkpoint",
        "ckpt-2.data-00000-of-00001",
        "ckpt-2.index",
        "ckpt-3.data-00000-of-00001",
        "ckpt-3.index",
    ]

    script = WORKERS / "checkpoint_worker.py"
    run_workers(script, 2, ["restore", str(directory), str(tmp_path / "restore{task}.json")])
    for i in range(2):
        rec = json.loads((tmp_path / f"restore{i}.json").read_text())
        assert rec["global_step"] == 3 and rec["iterations"] == 3
        assert DataPosition.from_json(rec["position"]) == DataPosition.from_json(
            saves[0]["position"]
        )
        assert rec["weights"] == saves[0]["weights"]
    assert saves[0]["weights"] != [[[0.1] * 2] * 3, [0.0, 0.0]]  # training changed them


@pytest.mark.xdist_group("multiworker_trainer_checks")  # its module fixture runs once
def test_workers_with_different_permutations_are_stopped_naming_the_epoch(trainer_checks):
    """A user permutation= that differs between workers (here from epoch 1 on, as one shared
    generator would) is refused at that epoch's start, on every worker, before it trains."""
    for out in trainer_checks["permutation"]:
        assert "AGREED 0" in out, out[-3000:]
        refused = re.search(r"REFUSED after (\d) epoch\(s\): (.*)", out)
        assert refused, out[-3000:]
        assert refused.group(1) == "1"  # the first epoch trained, the second was refused
        message = refused.group(2)
        assert "the workers got different permutations for epoch 2 (permutation(1)" in message
        assert re.search(r"worker 0: [0-9a-f]{16}, worker 1: [0-9a-f]{16}", message)
        assert "manual_seed(seed + epoch)" in message
