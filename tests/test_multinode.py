"""``tfdp launch`` across simulated machines, training for real (tests/simnet.py).

Each node is a network namespace with its own address; each node runs its own launcher, as
several machines would, and ``tfdp train`` workers under MultiWorkerMirroredStrategy. The runs
are tiny (a 480-example slice of the digits, a one-layer model, a few steps) and op
determinism is on, so weights can be compared bit for bit. Every TensorFlow worker costs
seconds to start, so each test starts as few as its fault needs:

* 2 nodes x 1 worker, a node's link cut mid-epoch with ``--max-restarts 1``, and a stranger
  on a third machine at the master's port all along (from before the launchers start, through
  the join, the training, the restart and the rejoin: idle connections, garbage, foreign
  joins): the group stops, the node rejoins when the link comes back, and the job completes
  with the weights of 2 replicas trained uninterrupted in one process (which 1 node x 2
  workers also end at): one run proves that workers on two machines train as the replicas of
  one, that the restart loses nothing, and that a stranger at the rendezvous changes nothing
  (that 2 nodes x 2 workers get the cluster of 4 workers on one node, in that order, is
  ``tests/test_launch_nodes.py``'s, without TensorFlow; the stranger's every message, at the
  lowest level, ``tests/test_rendezvous.py``'s);
* ``--nnodes 1:2``, one of 2 nodes killed (launcher and worker, kill -9) mid-epoch: the job
  goes on on the other node and completes; from ``--record-samples``, the interrupted epoch
  consumed exactly the 2-node plan's samples and the next epoch follows the 1-node plan.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from mw import digits_npz
from simnet import SimNet, skip_reason

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or ""),
]

REPO = Path(__file__).resolve().parents[1]
WORKERS = Path(__file__).parent / "workers"  # elastic_model.py: --model elastic_model:tiny
PORT = 29400  # every node has its own port space
ENV = {
    "TF_CPP_MIN_LOG_LEVEL": "3",
    "TFDP_STARTUP_TIMEOUT": "120",
    "TFDP_ELASTIC_SLOW": "1",  # 100 ms per forward pass: faults land mid-epoch
    "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(WORKERS)]),
}


def train_args(data: Path, run: Path, batch: int, epochs: int, *extra: str) -> list[str]:
    return [sys.executable, "-m", "tfdp.cli", "train", "--data", str(data), "--eval-fraction",
            "0.2", "--sampler", "distributed", "--batch-size", str(batch), "--epochs",
            str(epochs), "--model", "elastic_model:tiny", "--steps-per-call", "1", "--seed",
            "4", "--deterministic", "--no-progress", "--log-every", "1", "--run-dir", str(run),
            *extra]  # fmt: skip


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """480 digits: 384 training examples (12 steps of 32, 8 of 48), 96 held out."""
    return digits_npz(tmp_path_factory.mktemp("data"), 480)


class Launcher:
    """One node's ``tfdp launch`` (in a namespace, or on this host), its output in a file."""

    def __init__(self, log: Path, argv: list[str], node=None) -> None:
        self.log = log
        with open(log, "wb") as fh:
            if node is None:
                env = {**os.environ, **ENV}
                self.proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, env=env,
                                             cwd=REPO)  # fmt: skip
            else:
                self.proc = node.popen(argv, env=ENV, stdout=fh, stderr=subprocess.STDOUT,
                                       cwd=REPO)  # fmt: skip

    @property
    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, pattern: str, timeout: float = 300) -> re.Match:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if m := re.search(pattern, self.text):
                return m
            assert self.proc.poll() is None, f"ended before {pattern!r}:\n{self.text[-4000:]}"
            time.sleep(0.1)
        raise AssertionError(f"no {pattern!r} within {timeout}s:\n{self.text[-4000:]}")

    def finish(self, timeout: float = 600) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()


def launch_argv(nnodes: str, rank: int, master: str, nproc: int, *flags: str) -> list[str]:
    # --grace-seconds 5: a worker stuck in a collective with a lost peer does not exit on
    # SIGTERM (it may say the loss and still not exit); the group's stop waits this out.
    return [sys.executable, "-m", "tfdp.launch", "--nnodes", nnodes, "--node-rank", str(rank),
            "--master-addr", master, "--master-port", str(PORT), "--nproc-per-node", str(nproc),
            "--grace-seconds", "5", *flags, "--"]  # fmt: skip


def fingerprints(*texts: str) -> dict[int, str]:
    """The final weights fingerprint every worker printed (the last one per worker)."""
    found = {}
    for text in texts:
        for w, fp in re.findall(r"\[worker (\d+)\] tfdp train: worker \d+ weights sha256 (\w+)",
                                text):  # fmt: skip
            found[int(w)] = fp
    return found


@pytest.fixture
def two_replicas(data, tmp_path, monkeypatch, capsys, mirrored_of):
    """The reference: the same run uninterrupted on 2 replicas in this process (2 of its 4
    logical CPUs, tests/two_replicas.py), the weights fingerprint it reports.

    With op determinism, replicas in one process end bit for bit where as many workers do
    (measured: the same fingerprint); one process here instead of a launcher and its workers."""
    from tfdp.cli import main
    from tfdp.recipe import run as recipe_run
    from two_replicas import answer_two_replicas

    monkeypatch.syspath_prepend(str(WORKERS))  # elastic_model
    monkeypatch.delenv("TFDP_ELASTIC_SLOW", raising=False)
    reported = []
    real = recipe_run.weights_fingerprint
    monkeypatch.setattr(recipe_run, "weights_fingerprint",
                        lambda model: reported.append(real(model)) or reported[-1])  # fmt: skip
    answered = answer_two_replicas(monkeypatch, mirrored_of)
    argv = train_args(data, tmp_path / "ref", 32, 1)[3:]  # without "python -m tfdp.cli"
    code = main([*argv, "--replicas", "2"])
    out, err = capsys.readouterr()
    assert code == 0, err[-3000:]
    assert answered and "2 replica(s) (MirroredStrategy)" in out + err
    assert len(reported) == 1
    return reported[0]


def test_two_nodes_with_a_cut_link_and_a_restart_under_a_stranger_end_at_two_replicas_weights(
    data, tmp_path, two_replicas
):
    """One run proves three: a worker on each of 2 nodes trains as 2 replicas of one machine;
    a cut link, a restart and a resume end at the weights of 2 replicas trained uninterrupted
    bit for bit (the run before the cut is a plain 2-node run, the one after resumes from its
    checkpoint); and a stranger on a third machine, at the master's port from before the
    launchers start to the end, changes none of it (the master names what it refused; no
    launcher says "internal error")."""
    with open(tmp_path / "stranger.out", "w+") as stranger_log, SimNet(3) as net:
        master = net.nodes[0].address
        flags = ("--max-restarts", "1", "--heartbeat-timeout", "5", "--rdzv-id", "job-ok")
        cmd = train_args(data, tmp_path / "run", 32, 1)  # one epoch of 12 steps
        stranger = net.nodes[2].popen(
            [sys.executable, str(WORKERS / "launch_stranger.py"), master, str(PORT), "job-ok",
             "--seconds", "300", "--idle", "50", "--messages", "300", "--connections", "3000"],
            stdout=stranger_log, stderr=subprocess.STDOUT)  # fmt: skip
        time.sleep(1.0)  # the flood is on before the launchers start
        nodes = [Launcher(tmp_path / f"node{i}.out", launch_argv("2", i, master, 1, *flags) + cmd,
                          node) for i, node in enumerate(net.nodes[:2])]  # fmt: skip
        nodes[0].wait_for(r"\[worker 0\] .*global_step [2-8] ")  # mid-run (12 steps)
        net.nodes[1].cut()
        cut_at = time.monotonic()
        assert not net.nodes[1].link_up()  # the fault happened
        try:
            # Whichever sees it first: the launchers' heartbeat, or the workers' own
            # coordination service (a worker exits 4 and its launcher reports the group failed).
            nodes[0].wait_for(r"stopping this node's workers: node 1 .* lost"
                              r"|worker \d exited with code 4")  # fmt: skip
            print(f"the loss said {time.monotonic() - cut_at:.1f}s after the cut")
            nodes[0].wait_for(r"waits up to 300s for node\(s\) 1 to rejoin")
            print(f"the master's summary {time.monotonic() - cut_at:.1f}s after the cut")
        finally:
            net.nodes[1].restore()
        assert [n.finish() for n in nodes] == [0, 0], nodes[0].text[-3000:] + nodes[1].text[-3000:]
        stranger.send_signal(signal.SIGTERM)  # it says what it did, and ends
        stranger.wait(timeout=60)
        stranger_log.seek(0)
        said = stranger_log.read()
    report = json.loads(said.split("STRANGER ", 1)[1])  # the fault happened, all along
    print(f"the stranger: {report}")
    assert report["closed_on_it"] > 50 and len(report["answers"]) > 5, report
    assert f"refused a launcher at {net.nodes[2].address}: not a rendezvous message" in (
        nodes[0].text)  # fmt: skip
    for node in nodes:
        assert "internal error" not in node.text and "Traceback" not in node.text
    texts = [n.text for n in nodes]
    for text in texts:  # the cluster spans both machines' addresses
        assert "round 0: 2 node(s), 2 worker(s)" in text
    assert "[worker 0]" in texts[0] and "[worker 1]" in texts[1]
    assert f"(node 1, {net.nodes[1].address}) runs worker(s) 1" in texts[1]
    lost = f"node 1 ({net.nodes[1].address}) lost: no heartbeat for 5s"
    for node in nodes:
        assert f"restarting the group (restart 1 of 1) after: {lost}" in node.text, node.text
    resumed = r"\[worker 0\] .*resumed from .*ckpt-\d+: (in|at the start of) epoch \d"
    assert re.search(resumed, nodes[0].text)
    assert fingerprints(*(n.text for n in nodes)) == dict.fromkeys(range(2), two_replicas)


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_elastic_a_node_killed_mid_epoch_the_job_goes_on_with_the_samples_exact(data, tmp_path):
    from tfdp.samplers import DistributedSampler

    ids = tmp_path / "ids.jsonl"
    with SimNet(2) as net:
        master = net.nodes[0].address
        flags = ("--max-restarts", "1")
        cmd = train_args(data, tmp_path / "run", 48, 2, "--record-samples", str(ids))
        nodes = [Launcher(tmp_path / f"node{i}.out", launch_argv("1:2", i, master, 1, *flags)
                          + cmd, node) for i, node in enumerate(net.nodes)]  # fmt: skip
        nodes[0].wait_for(r"\[worker 0\] .*global_step [2-5] ")  # epoch 1: 8 steps of 48
        killed = net.nodes[1].signal(signal.SIGKILL)  # the machine dies: launcher and worker
        assert nodes[1].proc.pid in killed and nodes[1].finish() == -signal.SIGKILL
        assert nodes[0].finish() == 0, nodes[0].text[-4000:]
    text = nodes[0].text
    assert "round 0: 2 node(s), 2 worker(s)" in text
    lost = f"node 1 ({net.nodes[1].address}) lost: its launcher's connection closed"
    assert f"restarting the group (restart 1 of 1) after: {lost}" in text
    assert "round 1: 1 node(s), 1 worker(s)" in text
    line = r"\[worker 0\] .*resumed from .*ckpt-\d+: in epoch \d+, after its step (\d+) "
    resumed = re.search(line, text)
    assert resumed, text[-4000:]
    step = int(resumed.group(1))
    assert 0 < step < 8  # resumed mid-epoch
    n = int(re.search(r"(\d+) training /", text).group(1))
    records = _records(ids)  # the chief's; the restart's records start at its resume step
    epoch = records[0]["epoch"]  # the first epoch (its number as --record-samples writes it)
    again = max(i for i, r in enumerate(records) if (r["epoch"], r["step"], r["rank"]) == (
        epoch, step, 0))  # fmt: skip
    before = [r for r in records[:again] if r["epoch"] == epoch and r["step"] < step]
    after = [r for r in records[again:] if r["epoch"] == epoch]
    assert {r["rank"] for r in before} == {0, 1} and {r["rank"] for r in after} == {0}
    plan = DistributedSampler(n, 2, 0, seed=4)
    plan.set_epoch(epoch)
    consumed = Counter(i for r in before + after for i in r["ids"])
    assert consumed == Counter(plan.global_indices(np.arange(8 * 48)).tolist())
    own = DistributedSampler(n, 1, 0, seed=4)  # the next epoch is the 1-node plan's own
    own.set_epoch(epoch + 1)
    got = [i for r in records[again:] if r["epoch"] == epoch + 1 for i in r["ids"]]
    assert got == own.indices().tolist() and len(got) == 8 * 48
