"""`tfdp train` under the environments clusters set: a Slurm job step, a Kubeflow TFJob.

Two real processes on 127.0.0.1 each, as the scheduler would start them, training a one-layer
model on the digits for one epoch with op determinism; both must end with identical weights.
"""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path

import pytest

from mw import run_workers

CLI = Path(__file__).parent / "workers" / "cli_main.py"
# The cluster's environment is the point, not the training: a one-layer model
# (tests/workers/elastic_model.py, beside cli_main.py), about 25 steps of 64.
TRAIN = ["train", "--epochs", "1", "--batch-size", "64", "--deterministic", "--no-progress",
         "--steps-per-call", "1", "--checkpoint-every", "1000",
         "--model", "elastic_model:tiny"]  # fmt: skip


def _two_consecutive_free_ports() -> int:
    """A port P with P and P + 1 free (Slurm's resolver numbers a node's tasks from P)."""
    for _ in range(50):
        with socket.socket() as a:
            a.bind(("127.0.0.1", 0))
            base = a.getsockname()[1]
            if base >= 65535:
                continue
            with socket.socket() as b:
                try:
                    b.bind(("127.0.0.1", base + 1))
                except OSError:
                    continue
                return base
    raise AssertionError("no two consecutive free ports")


def _fingerprints(outs: list[str]) -> dict[int, str]:
    found = {}
    for out in outs:
        for w, fp in re.findall(r"tfdp train: worker (\d) weights sha256 (\w+)", out):
            found[int(w)] = fp
    return found


def _check(outs: list[str], run: Path) -> None:
    prints = _fingerprints(outs)
    assert sorted(prints) == [0, 1], outs
    assert prints[0] == prints[1], outs  # identical weights on both workers
    # One chief (it alone prints the start line), of a group of 2 workers x 1 replica.
    starts = [re.findall(r"tfdp train: (\d+) replica\(s\) \((\w+)\)", o) for o in outs]
    assert sorted(len(s) for s in starts) == [0, 1], outs
    (start,) = [s[0] for s in starts if s]
    assert start[0] == "2" and "Collective" in start[1], start  # MultiWorkerMirroredStrategy
    assert (run / "model.keras").is_file()
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 1


@pytest.mark.slow
def test_slurm_job_step_trains_to_identical_weights(tmp_path):
    run = tmp_path / "run"
    base = _two_consecutive_free_ports()

    def slurm(i: int, ports: list[int]) -> dict[str, str]:
        # What `srun --ntasks=2` sets on a one-node step (the resolver reads these), and no
        # TF_CONFIG: the cluster must come from SlurmClusterResolver.
        return {
            "SLURM_JOB_ID": "4242",
            "SLURM_STEP_ID": "0",
            "SLURM_PROCID": str(i),
            "SLURM_LOCALID": str(i),
            "SLURM_NODEID": "0",
            "SLURM_NTASKS": "2",
            "SLURM_STEP_NUM_TASKS": "2",
            "SLURM_NNODES": "1",
            "SLURM_STEP_NODELIST": "localhost",
            "SLURM_JOB_NODELIST": "localhost",
            "SLURM_NODELIST": "localhost",
            "SLURM_STEP_TASKS_PER_NODE": "2",
            "SLURM_TASKS_PER_NODE": "2",
            "TFDP_SLURM_PORT_BASE": str(base),  # tasks on base and base + 1, both free
        }

    outs = run_workers(CLI, 2, [*TRAIN, "--run-dir", str(run)], timeout=600, cluster_env=slurm)
    _check(outs, run)


@pytest.mark.slow
def test_kubeflow_tfjob_with_a_chief_trains_to_identical_weights(tmp_path):
    run = tmp_path / "run"

    def tfjob(i: int, ports: list[int]) -> dict[str, str]:
        cluster = {"chief": [f"127.0.0.1:{ports[0]}"], "worker": [f"127.0.0.1:{ports[1]}"]}
        task = {"type": "chief", "index": 0} if i == 0 else {"type": "worker", "index": 0}
        return {"TF_CONFIG": json.dumps({"cluster": cluster, "task": task})}

    outs = run_workers(CLI, 2, [*TRAIN, "--run-dir", str(run)], timeout=600, cluster_env=tfjob)
    _check(outs, run)
    assert "held-out examples" in outs[0]  # the chief task is the chief
