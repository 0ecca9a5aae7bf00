"""Multi-node ``tfdp launch``: real launchers meeting at node 0's rendezvous, tiny workers.

Several launchers on 127.0.0.1 (one per "node", as several machines would run them) start
tests/workers/node_worker.py, which prints its environment and fails or waits as told -- no
TensorFlow, so each test costs seconds. Faults are real: kill -9 of a node's launcher and
workers, SIGSTOP / SIGCONT, SIGTERM, a failing worker. Training across machines is in
tests/test_multinode.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import free_ports
from simnet import SimNet, skip_reason

PY = sys.executable
WORKER = str(Path(__file__).parent / "workers" / "node_worker.py")
TIMEOUT = 120


class Node:
    """One node's launcher (``python -m tfdp.launch ...``), its output in a file."""

    def __init__(self, tmp: Path, rank: int, nnodes: str, port: int, mode: str, *extra: str,
                 nproc: int = 1, env: dict | None = None, node=None) -> None:  # fmt: skip
        self.rank = rank
        self.log = tmp / f"node-{rank}-{time.monotonic_ns()}.out"
        cmd = [PY, "-m", "tfdp.launch", "--nnodes", nnodes, "--node-rank", str(rank),
               "--master-port", str(port), "--nproc-per-node", str(nproc), *extra,
               "--", PY, WORKER, mode, str(tmp)]  # fmt: skip
        with open(self.log, "wb") as fh:
            if node is None:  # on this host
                self.proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT,
                                             env={**os.environ, **(env or {})})  # fmt: skip
            else:  # in a simulated machine (tests/simnet.py)
                self.proc = node.popen(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT)

    @property
    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, needle: str, timeout: float = TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while needle not in self.text:
            assert time.monotonic() < deadline, f"never saw {needle!r}:\n{self.text[-3000:]}"
            time.sleep(0.05)

    def finish(self, timeout: float = TIMEOUT) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()

    def envs(self) -> list[dict]:
        return [json.loads(line.split("ENV ", 1)[1]) for line in self.text.splitlines()
                if "] ENV " in line]  # fmt: skip


@pytest.fixture
def cluster(tmp_path):
    """``start(rank, nnodes, mode, *flags) -> Node``; every launcher is killed at the end."""
    port = free_ports(1)[0]
    nodes: list[Node] = []

    def start(rank, nnodes, mode, *extra, nproc=1, env=None, node=None):
        node = Node(tmp_path, rank, nnodes, port, mode, *extra, nproc=nproc, env=env, node=node)
        nodes.append(node)
        return node

    start.port = port
    yield start
    for node in nodes:
        if node.proc.poll() is None:
            node.proc.kill()
            node.proc.wait()
    for ready in tmp_path.glob("ready-*"):  # no worker outlives its test
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(ready.read_text()), signal.SIGKILL)


@contextlib.contextmanager
def stopped(*pids: int):
    """SIGSTOP ``pids`` (a node's launcher and worker: a frozen machine); SIGCONT at the end."""
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def ready(tmp: Path, restart: int, ranks: range, timeout: float = TIMEOUT) -> list[int]:
    """Wait until workers ``ranks`` of start ``restart`` are up; their pids."""
    paths = [tmp / f"ready-{restart}-{r}" for r in ranks]
    deadline = time.monotonic() + timeout
    while not all(p.exists() and p.read_text() for p in paths):
        assert time.monotonic() < deadline, f"workers never got ready: {paths}"
        time.sleep(0.05)
    return [int(p.read_text()) for p in paths]


def gone(pid: int, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return True
        except (OSError, IndexError):
            return True
        time.sleep(0.05)
    return False


def test_two_nodes_of_two_workers_form_one_ordered_cluster(cluster):
    nodes = [cluster(1, "2", "env", "--node-addr", "127.0.0.2", nproc=2),  # started first
             cluster(0, "2", "env", nproc=2)]  # fmt: skip
    assert [n.finish() for n in nodes] == [0, 0], nodes[0].text + nodes[1].text
    envs = {e["RANK"]: e for n in nodes for e in n.envs()}
    assert sorted(envs) == ["0", "1", "2", "3"]
    workers = envs["0"]["TF_CONFIG"]["cluster"]["worker"]
    assert len(set(workers)) == 4
    assert [w.rsplit(":", 1)[0] for w in workers] == ["127.0.0.1"] * 2 + ["127.0.0.2"] * 2
    for rank, env in envs.items():
        node = int(rank) // 2
        assert env["TF_CONFIG"] == {
            "cluster": {"worker": workers},
            "task": {"type": "worker", "index": int(rank)},
        }
        assert (env["GROUP_RANK"], env["LOCAL_RANK"]) == (str(node), str(int(rank) % 2))
        assert (env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"], env["GROUP_WORLD_SIZE"]) == (
            "4", "2", "2")  # fmt: skip
        assert f"{env['MASTER_ADDR']}:{env['MASTER_PORT']}" == workers[0]
        assert env["TFDP_RESTART"] == "0" and env["TFDP_WORKER_INDEX"] == rank
        assert env["TFDP_HEARTBEAT_TIMEOUT"] == "10"  # TensorFlow's agrees with the launchers'
    for node in nodes:
        assert "tfdp launch: the job completed on node(s) 0, 1" in node.text
        assert f"[worker {2 * node.rank}] ENV" in node.text  # each node prints its own


@pytest.mark.slow
def test_elastic_kill9_of_a_node_restarts_the_others_without_it(cluster, tmp_path):
    flags = ("--max-restarts", "1")
    nodes = [cluster(rank, "2:3", "wait-once", *flags) for rank in range(3)]
    pids = ready(tmp_path, 0, range(3))
    nodes[2].proc.kill()  # kill -9 of node 2's launcher and its worker
    os.kill(pids[2], signal.SIGKILL)
    assert nodes[2].finish() == -signal.SIGKILL  # the fault really happened
    assert [n.finish() for n in nodes[:2]] == [0, 0], nodes[0].text + nodes[1].text
    for node in nodes[:2]:
        text = node.text
        assert ("tfdp launch: restarting the group (restart 1 of 1) after: node 2 (127.0.0.1) "
                "lost: its launcher's connection closed") in text  # fmt: skip
        assert f"[worker {node.rank}] rank {node.rank} got SIGTERM" in text
        assert ("stopping this node's workers: node 2 (127.0.0.1) lost: its launcher's "
                "connection closed") in text  # fmt: skip
        first, second = node.envs()
        assert (first["WORLD_SIZE"], first["TFDP_RESTART"]) == ("3", "0")
        assert (second["WORLD_SIZE"], second["TFDP_RESTART"]) == ("2", "1")
        assert len(second["TF_CONFIG"]["cluster"]["worker"]) == 2


@pytest.mark.slow
def test_a_stopped_node_is_lost_then_rejoins_when_continued(cluster, tmp_path):
    flags = ("--max-restarts", "1", "--heartbeat-timeout", "2")
    nodes = [cluster(rank, "2", "wait-once", *flags) for rank in range(2)]
    pids = ready(tmp_path, 0, range(2))
    with stopped(nodes[1].proc.pid, pids[1]):
        nodes[0].wait_for("waits up to 300s for node(s) 1 to rejoin")
    assert [n.finish() for n in nodes] == [0, 0], nodes[0].text + nodes[1].text
    lost = "node 1 (127.0.0.1) lost: no heartbeat for 2s (machine down, stopped, or cut off?)"
    assert f"the group stopped after: {lost}; restart 1 of 1" in nodes[0].text
    assert "lost the master node 0" in nodes[1].text
    for node in nodes:
        assert f"restarting the group (restart 1 of 1) after: {lost}" in node.text
        assert [e["TFDP_RESTART"] for e in node.envs()] == ["0", "1"]


@pytest.mark.slow
def test_the_master_lost_ends_the_job_on_every_node(cluster, tmp_path):
    nodes = [cluster(rank, "2", "wait") for rank in range(2)]
    pids = ready(tmp_path, 0, range(2))
    nodes[0].proc.kill()
    os.kill(pids[0], signal.SIGKILL)
    assert nodes[1].finish() == 1, nodes[1].text
    assert (
        f"error: the master node 0 at 127.0.0.1:{cluster.port} is gone (connection "
        "refused): the job ends with it (node 0 hosts the rendezvous)"
    ) in nodes[1].text
    assert "To continue from the last checkpoint, start the launchers again" in nodes[1].text
    assert "[worker 1] rank 1 got SIGTERM" in nodes[1].text and gone(pids[1])


@pytest.mark.slow
def test_sigterm_to_the_master_reaches_every_nodes_workers(cluster, tmp_path):
    nodes = [cluster(rank, "2", "wait") for rank in range(2)]
    ready(tmp_path, 0, range(2))
    nodes[0].proc.send_signal(signal.SIGTERM)
    assert [n.finish() for n in nodes] == [143, 143], nodes[0].text + nodes[1].text
    for node in nodes:
        assert f"[worker {node.rank}] rank {node.rank} got SIGTERM" in node.text
    assert "the master node 0 ended the job (node 0 (127.0.0.1) left: interrupted by SIGTERM)" in (
        nodes[1].text
    )


@pytest.mark.slow
def test_sigterm_to_another_node_takes_only_that_node_out(cluster, tmp_path):
    nodes = [cluster(rank, "2:3", "wait-once", "--max-restarts", "1") for rank in range(3)]
    ready(tmp_path, 0, range(3))
    nodes[2].proc.send_signal(signal.SIGTERM)
    assert nodes[2].finish() == 143, nodes[2].text
    assert "[worker 2] rank 2 got SIGTERM" in nodes[2].text
    assert [n.finish() for n in nodes[:2]] == [0, 0], nodes[0].text + nodes[1].text
    for node in nodes[:2]:
        assert ("restarting the group (restart 1 of 1) after: node 2 (127.0.0.1) lost: "
                "interrupted by SIGTERM") in node.text  # fmt: skip
        assert [e["WORLD_SIZE"] for e in node.envs()] == ["3", "2"]


@pytest.mark.slow
def test_a_stopped_master_ends_the_job_within_the_bound(cluster, tmp_path):
    """Node 0's launcher and worker SIGSTOPped: node 1 loses it after the heartbeat timeout,
    tries to reconnect for the rendezvous timeout, then ends, saying so -- never a hang."""
    flags = ("--heartbeat-timeout", "2", "--rdzv-timeout", "3")
    nodes = [cluster(rank, "2", "wait", *flags) for rank in range(2)]
    pids = ready(tmp_path, 0, range(2))
    with stopped(nodes[0].proc.pid, pids[0]):
        assert nodes[1].finish(timeout=60) == 1, nodes[1].text
    nodes[0].proc.kill()
    text = nodes[1].text
    assert "lost the master node 0 at 127.0.0.1:" in text and "(no message for 2s)" in text
    assert re.search(
        r"the master at 127.0.0.1:\d+ did not take this node's join \(no hello "
        r"from the master within 2s\): retrying in 0.5s \(\ds left\)",
        text,
    )
    assert (
        "did not take this node back within 3s (no hello from the master within 2s): the job "
        "ends for this node" in text
    )
    assert "To continue from the last checkpoint, start the launchers again" in text
    assert "[worker 1] rank 1 got SIGTERM" in text and gone(pids[1])


def test_a_failure_with_no_restarts_left_says_so_and_how_to_continue(cluster):
    nodes = [cluster(rank, "2", "fail-once") for rank in range(2)]
    assert [n.finish() for n in nodes] == [3, 3], nodes[0].text + nodes[1].text
    for node in nodes:
        assert (
            "tfdp launch: error: node 1 (127.0.0.1): worker 1 exited with code 3; no restarts "
            "left. To continue from the last checkpoint, start the launchers again on every "
            f"node: tfdp launch --nnodes 2 --node-rank {node.rank} --master-addr 127.0.0.1 "
            f"--master-port {cluster.port} --nproc-per-node 1 -- {PY} {WORKER} fail-once"
        ) in node.text


# -- strangers at the rendezvous; the network after the workers completed -----------------------

STRANGER = Path(__file__).parent / "workers" / "launch_stranger.py"
SECRET = {"TFDP_RDZV_SECRET": "the shared secret of this test job"}


@pytest.fixture
def stranger(tmp_path):
    """``start(port, job, *flags, node=None) -> Popen``: tests/workers/launch_stranger.py,
    bounded by its flags, stopped at the end of the test in any case; ``report(proc)``."""
    procs = []

    def start(port, job, *flags, node=None):
        argv = [PY, str(STRANGER), "127.0.0.1" if node is None else node.address, str(port),
                job, *flags]  # fmt: skip
        out = open(tmp_path / f"stranger-{len(procs)}.out", "w+")  # noqa: SIM115 (closed below)
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
        proc = (
            subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
            if node is None
            else node.popen(argv, stdout=out, stderr=subprocess.STDOUT)
        )
        proc.out = out  # fmt: skip
        procs.append(proc)
        return proc

    def report(proc) -> dict:
        proc.send_signal(signal.SIGTERM)  # it ends early on SIGTERM, saying what it did
        proc.wait(timeout=60)
        proc.out.seek(0)
        text = proc.out.read()
        assert "STRANGER " in text, text
        return json.loads(text.split("STRANGER ", 1)[1])

    start.report = report
    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.out.close()


def _no_internal_error(*nodes):
    for node in nodes:
        assert "internal error" not in node.text and "Traceback" not in node.text, node.text


@pytest.mark.slow
def test_an_elastic_job_with_a_secret_forms_and_runs_under_a_stranger(cluster, stranger, tmp_path):
    """--nnodes 2:3 with TFDP_RDZV_SECRET, a stranger at the master's port from before the
    launchers start until the workers end (idle connections, garbage, foreign joins, this job's
    well-formed joins with a forged HMAC): the 3 nodes form one round and complete; the master
    names what it refused, without flooding; the workers never see the secret."""
    job = ("--rdzv-id", "job-ok", "--rdzv-last-call", "2")
    # A message every 0.1 s: every kind (11, the forged joins last) is sent within the first
    # 1.1 s, before the first launcher starts, however fast the job then forms and ends.
    guest = stranger(cluster.port, "job-ok", "--seconds", "20", "--idle", "100", "--messages",
                     "200", "--connections", "600", "--forge")  # fmt: skip
    time.sleep(0.5)
    time.sleep(1.0)  # the flood is on before the first launcher starts
    nodes = [cluster(rank, "2:3", "release", *job, env=SECRET) for rank in range(3)]
    ready(tmp_path, 0, range(3))
    for node in nodes:
        node.wait_for("round 0: 3 node(s), 3 worker(s)")
    time.sleep(2.0)  # ... and while the workers run
    for rank in range(3):
        (tmp_path / f"release-{rank}").write_text("")
    assert [n.finish() for n in nodes] == [0, 0, 0], "".join(n.text for n in nodes)
    report = stranger.report(guest)
    answers = report["answers"]
    assert any(a.startswith("error: the message's HMAC") for a in answers), report
    # (How many idle connections the master closed depends on when it came up and how long
    # the job ran: test_rendezvous.py pins the bound and the oldest-first drop in process.)
    master = nodes[0].text
    assert "refused a launcher at 127.0.0.1: the message's HMAC does not match" in master
    assert "refused a launcher at 127.0.0.1: not a rendezvous message" in master
    assert len(re.findall(r"refused a launcher at", master)) <= 3 * 11  # a few of each kind
    assert re.search(r"refused \d+ more connection\(s\)", master), master
    for node in nodes:
        assert "the job completed on node(s) 0, 1, 2" in node.text
        assert [e["secret_seen"] for e in node.envs()] == [False]
    _no_internal_error(*nodes)


@pytest.mark.slow
@pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")
def test_a_link_cut_after_the_workers_completed_ends_the_job_with_0(cluster, tmp_path):
    """Simulated machines: node 0's worker completes; node 1's link is cut; node 1's worker
    completes (its report lost with the link). The master, losing node 1 after workers had
    completed, ends the job 0 saying what it does not know; node 1, losing the master after its
    workers completed, ends 0 too -- not 'no restarts left ... --resume' for a finished run."""
    with SimNet(2) as net:
        flags = ("--master-addr", net.nodes[0].address, "--heartbeat-timeout", "2")
        nodes = [cluster(rank, "2", "release", *flags, node=machine)
                 for rank, machine in enumerate(net.nodes)]  # fmt: skip
        ready(tmp_path, 0, range(2))
        (tmp_path / "release-0").write_text("")
        nodes[0].wait_for("[worker 0] rank 0 released")
        net.nodes[1].cut()
        assert not net.nodes[1].link_up()  # the fault happened
        try:
            (tmp_path / "release-1").write_text("")
            assert [n.finish() for n in nodes] == [0, 0], nodes[0].text + nodes[1].text
        finally:
            net.nodes[1].restore()
    addr = net.nodes[1].address
    assert (f"the job completed on node(s) 0; node 1 ({addr}) was lost (no heartbeat for 2s "
            "(machine down, stopped, or cut off?)) after workers of the round had completed: "
            "its workers' own end was not reported") in nodes[0].text  # fmt: skip
    assert "[worker 1] rank 1 released" in nodes[1].text
    assert (f"this node's workers completed, then the master node 0 at {net.nodes[0].address}:"
            ) in nodes[1].text  # fmt: skip
    for node in nodes:
        assert "no restarts left" not in node.text and "--resume" not in node.text
    _no_internal_error(*nodes)


# -- bad input: a clear error, nothing started -------------------------------------------------


def launcher(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PY, "-m", "tfdp.launch", *args], capture_output=True, text=True,
                          timeout=timeout, check=False)  # fmt: skip


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nnodes", "2", "--node-rank", "2"],
         "error: --node-rank: 2 is not in 0..1 (--nnodes 2)"),
        (["--nnodes", "2:4", "--node-rank", "4"], "error: --node-rank: 4 is not in 0..3"),
        (["--nnodes", "1", "--node-rank", "1"], "error: --node-rank: 1 is not in 0..0"),
        (["--nnodes", "2"], "error: --node-rank: required with --nnodes 2: give every node"),
        (["--nnodes", "3:2", "--node-rank", "0"], "argument --nnodes: '3:2': MIN is above MAX"),
        (["--nnodes", "two", "--node-rank", "0"],
         "argument --nnodes: 'two': expected N or MIN:MAX"),
        (["--nnodes", "0", "--node-rank", "0"],
         "argument --nnodes: '0': a job needs at least 1 node"),
        (["--nnodes", "1:2:3", "--node-rank", "0"],
         "argument --nnodes: '1:2:3': expected N or MIN:MAX"),
        (["--nnodes", "2", "--node-rank", "0", "--master-addr", "192.0.2.1"],
         "error: --master-addr: '192.0.2.1' is not an address of this machine: node 0 hosts"),
        (["--nnodes", "2", "--node-rank", "0", "--rdzv-id", ""], "error: --rdzv-id: '': expected"),
        (["--nnodes", "2", "--node-rank", "1", "--node-addr", "192.0.2.1"],
         "error: --node-addr: '192.0.2.1' is not an address of this machine"),
    ],
)  # fmt: skip
def test_bad_input_is_one_clear_error(args, message, capsys):
    from tfdp.cli.launch import main  # in this process: refused before anything starts

    try:
        status = main([*args, "--nproc-per-node", "1", "--", PY, "-c", "print('started')"])
    except SystemExit as exc:  # argparse's refusals
        status = exc.code
    out, err = capsys.readouterr()
    assert status == 2, err
    assert message in err and err.count("\n") == 1  # one line
    assert "started" not in out


def test_an_unreachable_master_is_named_within_the_rendezvous_timeout():
    port = free_ports(1)[0]
    result = launcher("--nnodes", "2", "--node-rank", "1", "--master-port", str(port),
                      "--rdzv-timeout", "1", "--nproc-per-node", "1", "--", PY, "-c",
                      "print('started')")  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert (f"error: --master-addr: 127.0.0.1:{port}: no rendezvous there within 1s (Connection "
            "refused). Node 0's launcher hosts it") in result.stderr  # fmt: skip
    assert "started" not in result.stdout


def test_refused_joins_and_a_node_that_never_joins_are_named(cluster):
    """nnodes 3: node 1 joins; a second node 1, a node saying --nnodes 2 and a node of another
    job are refused (each its own clear error); node 2 never joins, and the master names it."""
    timeout = ("--rdzv-timeout", "6")
    master = cluster(0, "3", "env", *timeout)
    first = cluster(1, "3", "env", *timeout)
    first.wait_for("node 1 (127.0.0.1) joined the rendezvous")
    refused = {
        "duplicate": cluster(1, "3", "env", *timeout),
        "nnodes": cluster(1, "2", "env", *timeout),
        "job": cluster(2, "3", "env", *timeout, "--rdzv-id", "another-job"),
    }
    errors = {
        "duplicate": "error: --node-rank: 1 is taken by the node at 127.0.0.1",
        "nnodes": "error: --nnodes: 2 differs from the master's 3 (node 0 at 127.0.0.1:",
        "job": "error: --rdzv-id: 'another-job' is not this job's ('tfdp-",
    }
    for name, node in refused.items():
        assert node.finish() == 2, node.text
        assert errors[name] in node.text, node.text
    assert master.finish() == 1 and first.finish() == 1
    for node in (master, first):
        assert ("error: node(s) 2 did not join within 6s: all 3 nodes are needed, joined: node 0 "
                "(127.0.0.1), node 1 (127.0.0.1); refused: ") in node.text  # fmt: skip
        assert "To continue" not in node.text  # nothing ever started
    for node in (master, first, *refused.values()):
        assert "[worker" not in node.text and "Traceback" not in node.text
