"""tfdp launch: the pure plan, and the supervisor on real processes (no mocks)."""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tfdp.cli.launch import add_parser as register
from tfdp.cli.launch import main
from tfdp.cli.launch import run as run_from_args
from tfdp.launch import LaunchError, WorkerSpec, free_ports, plan, ports_from_base

WORKERS = Path(__file__).resolve().parent / "workers"
PY = sys.executable
TIMEOUT = 180  # generous: a hang fails the test, a slow machine does not
PREFIX = re.compile(rb"^\[worker (\d+)\] (.*)$")


# ----------------------------------------------------------------------------- plan (pure)


def test_plan_tf_config_per_worker():
    specs = plan(["python", "train.py"], [2222, 3333, 4444], env={})
    assert [s.index for s in specs] == [0, 1, 2]
    for i, spec in enumerate(specs):
        tf_config = json.loads(spec.env["TF_CONFIG"])
        assert tf_config == {
            "cluster": {"worker": ["127.0.0.1:2222", "127.0.0.1:3333", "127.0.0.1:4444"]},
            "task": {"type": "worker", "index": i},
        }


def test_plan_env_vars_and_parent_env():
    parent = {"HOME": "/home/me", "TF_CONFIG": "stale", "PATH": "/bin", "PYTHONUNBUFFERED": "0"}
    before = dict(parent)
    specs = plan(["python", "t.py"], [5000, 5001], host="10.0.0.7", env=parent, restart=2)
    assert parent == before  # the parent mapping is not modified
    for i, spec in enumerate(specs):
        assert spec.env["TFDP_WORKER_INDEX"] == str(i)
        assert spec.env["TFDP_NUM_WORKERS"] == "2"
        assert spec.env["TFDP_RESTART"] == "2"
        assert spec.env["HOME"] == "/home/me"
        assert spec.env["PATH"] == "/bin"
        assert spec.env["PYTHONUNBUFFERED"] == "0"  # the parent's choice wins
        assert json.loads(spec.env["TF_CONFIG"])["cluster"]["worker"] == [
            "10.0.0.7:5000",
            "10.0.0.7:5001",
        ]
        extra = set(spec.env) - set(parent)
        assert extra == {"TFDP_WORKER_INDEX", "TFDP_NUM_WORKERS", "TFDP_RESTART", *TORCHRUN}
    # Python workers print line by line through the pipe unless the parent says otherwise.
    assert plan(["x"], [1], env={})[0].env["PYTHONUNBUFFERED"] == "1"


TORCHRUN = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
            "GROUP_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")  # fmt: skip


@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_plan_sets_torchruns_variables_beside_tf_config(host):
    """A script written for torchrun finds its rank, world size and master in every worker."""
    parent = {"RANK": "7", "WORLD_SIZE": "99"}  # stale values from an outer launcher
    specs = plan(["python", "t.py"], [6000, 6001, 6002], host=host, env=parent)
    for i, spec in enumerate(specs):
        task = json.loads(spec.env["TF_CONFIG"])["task"]
        assert {k: spec.env[k] for k in TORCHRUN} == {
            "RANK": str(task["index"]),  # torch's rank is TF's task index
            "WORLD_SIZE": "3",
            "LOCAL_RANK": str(i),  # one host: local rank = rank
            "LOCAL_WORLD_SIZE": "3",
            "GROUP_RANK": "0",  # one node
            "GROUP_WORLD_SIZE": "1",
            "MASTER_ADDR": host,  # unbracketed, as torch wants it
            "MASTER_PORT": "6000",  # the chief's port
        }
    assert parent == {"RANK": "7", "WORLD_SIZE": "99"}


def test_nproc_per_node_is_workers():
    parser = argparse.ArgumentParser(prog="tfdp")
    register(parser.add_subparsers(dest="command"))
    a = parser.parse_args(["launch", "--nproc-per-node", "3", "--", "python", "t.py"])
    b = parser.parse_args(["launch", "--workers", "3", "--", "python", "t.py"])
    assert a == b and a.workers == 3
    assert parser.parse_args(["launch", "--", "python", "t.py"]).workers == 1  # torchrun's


def test_plan_argv_passthrough():
    command = ["python", "-u", "train.py", "--lr", "0.1", "--", "--workers", "9", "a b"]
    specs = plan(command, [7000, 7001], env={})
    assert all(s.argv == command for s in specs)
    specs[0].argv.append("mutated")
    assert specs[1].argv == command  # each worker has its own list
    assert command[-1] == "a b"


def test_plan_ipv6_host_is_bracketed():
    specs = plan(["x"], [7000], host="::1", env={})
    assert json.loads(specs[0].env["TF_CONFIG"])["cluster"]["worker"] == ["[::1]:7000"]


@pytest.mark.parametrize(
    ("command", "ports", "kwargs", "message"),
    [
        ([], [2222], {}, "command: nothing to run"),
        (["x"], [], {}, "must be an integer >= 1, got 0"),
        (["x"], [0], {}, "out of range"),
        (["x"], [65536], {}, "out of range"),
        (["x"], [-1, 2], {}, "out of range"),
        (["x"], [2222, 2223, 2222], {}, "duplicate port(s) [2222]"),
        (["x"], [2222], {"restart": -1}, "restart count"),
        (["x"], [2222], {"host": ""}, "host: '': expected a host name"),
        (["x"], [2222], {"host": "a b"}, "host: 'a b': expected a host name"),
    ],
)
def test_plan_validation(command, ports, kwargs, message):
    with pytest.raises(LaunchError) as info:
        plan(command, ports, env={}, **kwargs)
    assert message in str(info.value)


def test_ports_from_base():
    assert ports_from_base(29500, 2) == [29500, 29501]
    assert ports_from_base(65534, 2) == [65534, 65535]
    with pytest.raises(LaunchError, match="needs ports up to 65536, past 65535"):
        ports_from_base(65535, 2)
    with pytest.raises(LaunchError, match="workers: must be an integer >= 1"):
        ports_from_base(29500, 0)
    with pytest.raises(LaunchError, match=r"^port_base: must be") as info:
        ports_from_base(0, 1)
    assert info.value.argument == "port_base"  # the CLI says it as --port-base


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ports=st.lists(st.integers(1, 65535), min_size=1, max_size=12, unique=True),
    restart=st.integers(0, 100),
)
def test_plan_properties(ports, restart):
    specs = plan(["cmd"], ports, env={"KEEP": "1"}, restart=restart)
    configs = [json.loads(s.env["TF_CONFIG"]) for s in specs]
    assert len(specs) == len(ports)
    assert all(c["cluster"] == configs[0]["cluster"] for c in configs)
    assert [c["task"]["index"] for c in configs] == list(range(len(ports)))
    assert [int(a.rsplit(":", 1)[1]) for a in configs[0]["cluster"]["worker"]] == ports
    assert [int(s.env["RANK"]) for s in specs] == list(range(len(ports)))
    assert {s.env["MASTER_PORT"] for s in specs} == {str(ports[0])}
    assert {s.env["TFDP_RESTART"] for s in specs} == {str(restart)}


def test_free_ports_are_distinct_and_bindable():
    import socket

    ports = free_ports(8)
    assert len(set(ports)) == 8
    assert all(1 <= p <= 65535 for p in ports)
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports[0]))  # really free (nothing kept it)
    with pytest.raises(LaunchError, match="workers: must be an integer >= 1"):
        free_ports(0)


def test_worker_spec_is_a_value():
    spec = WorkerSpec(index=0, argv=["a"], env={"X": "1"})
    assert spec == WorkerSpec(0, ["a"], {"X": "1"})
    assert "X" not in repr(spec)  # environments are long and may hold secrets


# ----------------------------------------------------------------------------- helpers


def launcher_cmd(*args: str, sigint: str = "") -> list[str]:
    """``python -m tfdp.launch ARGS``; with ``sigint``, first set SIGINT to that disposition.

    (A non-interactive shell starts background jobs with SIGINT ignored, and that is
    inherited: the signal tests set the disposition they need explicitly.)
    """
    if not sigint:
        return [PY, "-m", "tfdp.launch", *args]
    code = (
        f"import signal, sys; signal.signal(signal.SIGINT, {sigint}); "
        "from tfdp.cli.launch import main; sys.exit(main(sys.argv[1:]))"
    )
    return [PY, "-c", code, *args]


def run_launcher(*args: str, timeout: float = TIMEOUT) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(launcher_cmd(*args), capture_output=True, timeout=timeout, check=False)


def prefixed(stdout: bytes) -> list[tuple[int, bytes]]:
    """Split the launcher's stdout into (worker index, line); fail on an unprefixed line."""
    lines = []
    for raw in stdout.split(b"\n")[:-1]:
        m = PREFIX.match(raw)
        assert m, f"line without a [worker i] prefix: {raw[:200]!r}"
        lines.append((int(m.group(1)), m.group(2)))
    assert stdout.endswith(b"\n") or not stdout
    return lines


def alive(pid: int) -> bool:
    """Whether pid is a live (not zombie) process."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def wait_gone(pid: int, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def wait_files(paths: list[Path], proc: subprocess.Popen[bytes], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not all(p.exists() for p in paths):
        assert proc.poll() is None, f"launcher exited early with {proc.returncode}"
        assert time.monotonic() < deadline, f"workers never got ready: {paths}"
        time.sleep(0.05)


def no_traceback(result: subprocess.CompletedProcess[bytes]) -> None:
    assert b"Traceback" not in result.stderr, result.stderr.decode(errors="replace")


# ----------------------------------------------------------------------------- supervisor


@pytest.mark.slow
def test_all_succeed_every_line_prefixed_with_its_worker():
    n, lines, long_chars = 3, 200, 200_000
    result = run_launcher(
        "--workers", str(n), "--", PY, str(WORKERS / "launch_echo.py"), str(lines), str(long_chars)
    )
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    no_traceback(result)
    per_worker: dict[int, list[int]] = {i: [] for i in range(n)}
    configs = {}
    for index, text in prefixed(result.stdout):
        who, k, body = text.split(b":", 2)
        assert int(who) == index  # the prefix names the worker that wrote the line
        per_worker[index].append(int(k))
        if int(k) == 0:
            configs[index] = json.loads(body)
        elif int(k) % 50 == 0 and int(k) < lines:
            assert body == str(index).encode() * long_chars  # long lines arrive whole
    # Every line of every worker (stdout and stderr, the unterminated last one too), in order.
    assert per_worker == {i: list(range(lines + 1)) for i in range(n)}
    cluster = configs[0]["TF_CONFIG"]["cluster"]
    assert len(cluster["worker"]) == n and len(set(cluster["worker"])) == n
    for i in range(n):
        assert configs[i]["TF_CONFIG"] == {
            "cluster": cluster,
            "task": {"type": "worker", "index": i},
        }
        assert configs[i]["TFDP_WORKER_INDEX"] == str(i)
        assert configs[i]["TFDP_NUM_WORKERS"] == str(n)
        assert configs[i]["TFDP_RESTART"] == "0"


@pytest.mark.slow
def test_failing_worker_stops_the_others(tmp_path):
    script = str(WORKERS / "launch_stop.py")
    result = run_launcher(
        "--workers", "3", "--", PY, script, str(tmp_path), "1", "3", "--grandchild"
    )
    err = result.stderr.decode(errors="replace")
    assert result.returncode == 3, err
    no_traceback(result)
    assert "tfdp launch: error: worker 1 exited with code 3" in err.splitlines()
    for i in (0, 2):  # the others got SIGTERM, and are gone with their children
        assert (tmp_path / f"sigterm-{i}").exists()
        assert wait_gone(int((tmp_path / f"pid-{i}").read_text()))
        assert wait_gone(int((tmp_path / f"grandchild-{i}").read_text()))
    assert not (tmp_path / "sigterm-1").exists()
    out = result.stdout.decode()
    assert "[worker 1] worker 1 failing with 3" in out
    assert "[worker 0] worker 0 got SIGTERM" in out
    assert "[worker 2] worker 2 got SIGTERM" in out


@pytest.mark.slow
def test_worker_ignoring_sigterm_is_killed_after_the_grace_period(tmp_path):
    script = str(WORKERS / "launch_stop.py")
    result = run_launcher(
        "--workers",
        "2",
        "--grace-seconds",
        "1",
        "--",
        PY,
        script,
        str(tmp_path),
        "1",
        "5",
        "--ignore-term",
    )
    err = result.stderr.decode(errors="replace")
    assert result.returncode == 5, err
    assert "[worker 0] worker 0 ignoring SIGTERM" in result.stdout.decode()
    assert "sending SIGKILL to worker(s) 0" in err
    assert wait_gone(int((tmp_path / "pid-0").read_text()))


@pytest.mark.slow
def test_worker_killed_by_sigkill_restarts_the_group(tmp_path):
    script = str(WORKERS / "launch_restart.py")
    result = run_launcher("--workers", "2", "--max-restarts", "1", "--", PY, script, str(tmp_path))
    err = result.stderr.decode(errors="replace")
    assert result.returncode == 0, err
    no_traceback(result)
    assert "worker 1 was killed by SIGKILL" in err
    assert "restarting all 2 worker(s) (restart 1 of 1)" in err
    lines = [(i, t.decode()) for i, t in prefixed(result.stdout)]
    starts = [(i, t.split(" TF_CONFIG=")) for i, t in lines if "TFDP_RESTART=" in t]
    # Both workers started twice, the second time with TFDP_RESTART=1, in that order.
    assert sorted((i, head) for i, (head, _) in starts) == [
        (0, "worker 0 TFDP_RESTART=0"),
        (0, "worker 0 TFDP_RESTART=1"),
        (1, "worker 1 TFDP_RESTART=0"),
        (1, "worker 1 TFDP_RESTART=1"),
    ]
    heads = [head for _, (head, _) in starts]
    assert max(k for k, h in enumerate(heads) if h.endswith("=0")) < min(
        k for k, h in enumerate(heads) if h.endswith("=1")
    )  # the restarted group's output follows the first group's
    for i, (_, tf_config) in starts:
        assert json.loads(tf_config)["task"] == {"type": "worker", "index": i}
    assert (0, "worker 0 done") in lines and (1, "worker 1 done") in lines


@pytest.mark.slow
def test_worker_killed_by_sigkill_without_restarts_fails_with_128_plus_9(tmp_path):
    script = str(WORKERS / "launch_restart.py")
    result = run_launcher("--workers", "2", "--", PY, script, str(tmp_path))
    err = result.stderr.decode(errors="replace")
    assert result.returncode == 128 + signal.SIGKILL, err
    assert "tfdp launch: error: worker 1 was killed by SIGKILL" in err.splitlines()
    assert "TFDP_RESTART=1" not in result.stdout.decode()


@pytest.mark.slow
def test_restarts_used_up_same_ports_with_port_base():
    code = (
        "import os, sys; print('restart', os.environ['TFDP_RESTART'], os.environ['TF_CONFIG']);"
        " sys.exit(4 if os.environ['TFDP_WORKER_INDEX'] == '1' else 0)"
    )
    result = run_launcher(
        "--workers", "2", "--max-restarts", "2", "--port-base", "29500", "--", PY, "-c", code
    )
    err = result.stderr.decode(errors="replace")
    assert result.returncode == 4, err
    assert err.count("tfdp launch: worker 1 exited with code 4") == 3  # once per start
    assert "tfdp launch: error: worker 1 exited with code 4 (after 2 restarts)" in err.splitlines()
    lines = [t.decode() for _, t in prefixed(result.stdout)]
    for r in range(3):
        seen = [json.loads(t.split(" ", 2)[2]) for t in lines if t.startswith(f"restart {r} ")]
        # Worker 1 always prints before failing; worker 0 may be stopped before it prints.
        assert 1 in [c["task"]["index"] for c in seen]
        assert all(c["cluster"]["worker"] == ["127.0.0.1:29500", "127.0.0.1:29501"] for c in seen)


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_to_launcher_is_forwarded(tmp_path, signum):
    proc = subprocess.Popen(
        launcher_cmd(
            "--workers",
            "2",
            "--",
            PY,
            str(WORKERS / "launch_signal.py"),
            str(tmp_path),
            sigint="signal.default_int_handler",
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        wait_files([tmp_path / "ready-0", tmp_path / "ready-1"], proc)
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
    expected = 130 if signum == signal.SIGINT else 128 + signal.SIGTERM
    assert proc.returncode == expected, err.decode(errors="replace")
    assert b"Traceback" not in err
    name = signal.Signals(signum).name
    for i in (0, 1):
        assert f"[worker {i}] worker {i} got {name}" in out.decode()
        assert wait_gone(int((tmp_path / f"pid-{i}").read_text()))
    assert f"tfdp launch: error: interrupted by {name}" in err.decode()


@pytest.mark.slow
def test_ignored_sigint_stays_ignored(tmp_path):
    proc = subprocess.Popen(
        launcher_cmd(
            "--workers",
            "2",
            "--",
            PY,
            str(WORKERS / "launch_signal.py"),
            str(tmp_path),
            sigint="signal.SIG_IGN",
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        wait_files([tmp_path / "ready-0", tmp_path / "ready-1"], proc)
        proc.send_signal(signal.SIGINT)  # ignored, as Python itself would
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err.decode(errors="replace")
    assert b"got SIGINT" not in out + err
    assert out.count(b"got SIGTERM") == 2


@pytest.mark.slow
def test_second_signal_kills_at_once(tmp_path):
    """Grace 600 s, workers ignore SIGTERM: only the second signal can end this in time."""
    script = str(WORKERS / "launch_stop.py")
    proc = subprocess.Popen(
        launcher_cmd(
            "--workers",
            "2",
            "--grace-seconds",
            "600",
            "--",
            PY,
            script,
            str(tmp_path),
            "-1",
            "0",
            "--ignore-term",
            sigint="signal.default_int_handler",
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        wait_files([tmp_path / "ready-0", tmp_path / "ready-1"], proc)
        proc.send_signal(signal.SIGTERM)
        # Wait for the forwarded SIGTERM to have reached both workers, then insist.
        deadline = time.monotonic() + 120
        seen = b""
        assert proc.stdout is not None
        while seen.count(b"ignoring SIGTERM") < 2 and time.monotonic() < deadline:
            seen += proc.stdout.readline()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err.decode(errors="replace")
    assert b"another signal: sending SIGKILL to worker(s) 0, 1" in err
    for i in (0, 1):
        assert wait_gone(int((tmp_path / f"pid-{i}").read_text()))


@pytest.mark.slow
def test_every_line_is_printed_although_stdout_is_read_late(tmp_path):
    """Issue 23, item 7: worker 1 prints (100 KB) and exits at once, worker 0 prints later;
    the launcher's stdout is read only after 7 s -- longer than any fixed wait for the
    output -- and still every line of both arrives (a launcher that stops waiting loses
    what its pipes still hold)."""
    proc = subprocess.Popen(
        launcher_cmd("--workers", "2", "--", PY, str(WORKERS / "launch_drain.py"), "burst",
                     str(tmp_path)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 7
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        out, err = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err.decode(errors="replace")
    lines = prefixed(out)
    burst = [t for i, t in lines if i == 1 and t.startswith(b"burst")]
    assert burst == [f"burst {k:04d} {'x' * 88}".encode() for k in range(1000)]
    assert [t for i, t in lines if i == 0 and t.startswith(b"late")] == [
        f"late {k:03d}".encode() for k in range(200)
    ]
    assert (0, b"worker 0 exits") in lines and (1, b"worker 1 exits") in lines


def test_a_child_left_behind_is_printed_to_its_end():
    result = run_launcher("--workers", "1", "--", PY, str(WORKERS / "launch_drain.py"), "child",
                          ".")  # fmt: skip
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    assert prefixed(result.stdout)[-2:] == [(0, b"worker 0 exits"), (0, b"child line")]


def test_a_child_that_lingers_after_success_is_stopped_after_the_grace_period(tmp_path):
    result = run_launcher("--workers", "1", "--grace-seconds", "0.5", "--", PY,
                          str(WORKERS / "launch_drain.py"), "linger", str(tmp_path))  # fmt: skip
    err = result.stderr.decode(errors="replace")
    assert result.returncode == 0, err
    assert "worker(s) 0 exited, but process(es) they started still run" in err
    assert "stopping the processes left by worker(s) 0" in err
    assert wait_gone(int((tmp_path / "child-0").read_text()))


def test_output_held_by_a_process_outside_the_group_is_given_up(tmp_path, capsys, monkeypatch):
    """A process that left the worker's process group (setsid) and holds its output: the
    launcher says so and ends instead of waiting for it."""
    from tfdp.launch import supervise

    monkeypatch.setattr(supervise, "_ORPHAN_PIPE_SECONDS", 0.5)
    try:
        status = main(["--workers", "1", "--", PY, str(WORKERS / "launch_drain.py"), "escape",
                       str(tmp_path)])  # fmt: skip
    finally:
        escaped = int((tmp_path / "escaped-0").read_text())
        os.kill(escaped, signal.SIGKILL)
    captured = capsys.readouterr()
    assert status == 0 and "[worker 0] worker 0 exits" in captured.out
    assert "worker 0's output is held open by a process outside its process group" in (captured.err)


# ----------------------------------------------------------------------------- command line


@pytest.mark.parametrize(
    ("args", "message", "status"),
    [
        (["--workers", "2", "--"], "give the command after --", 2),
        (["--workers", "2"], "give the command after --", 2),
        (
            ["--workers", "0", "--", "true"],
            "argument --workers/--nproc-per-node: expected an integer >= 1",
            2,
        ),
        (["--workers", "2", "--port-base", "70000", "--", "true"], "1..65535", 2),
        (
            ["--workers", "2", "--port-base", "65535", "--", "true"],
            "error: --port-base: 65535 with 2 workers needs ports up to 65536, past 65535",
            2,
        ),
        (
            ["--workers", "2", "--host", "a b", "--", "true"],
            "error: --node-addr: 'a b': expected",
            2,
        ),
        (["--workers", "1", "--grace-seconds", "-1", "--", "true"], "seconds >= 0", 2),
        (["--workers", "1", "--max-restarts", "x", "--", "true"], "integer >= 0", 2),
        (["--workers", "2", "--", "/nonexistent/tfdp-cmd"], "cannot start worker 0", 127),
        (
            ["--workers", "2", "--wrokers", "3", "--", "true"],
            "unrecognized arguments: --wrokers",
            2,
        ),
        (["--workers", "2", "--bogus", "python"], "unrecognized arguments: --bogus", 2),
    ],
)
def test_cli_errors(args, message, status):
    result = run_launcher(*args, timeout=60)
    err = result.stderr.decode(errors="replace")
    assert result.returncode == status, err
    assert err.startswith("tfdp launch: error: ") or "\ntfdp launch: error: " in err, err
    assert message in err
    no_traceback(result)


def test_register_in_a_tfdp_like_parser(capsys):
    """The lead's parser uses dest="command" for subcommands: our argument must not clash."""
    parser = argparse.ArgumentParser(prog="tfdp")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(
        ["launch", "--workers", "2", "--max-restarts", "1", "--", PY, "-c", "print('ok')"]
    )
    assert args.command == "launch"
    assert args.func is run_from_args
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert sorted(out.splitlines()) == ["[worker 0] ok", "[worker 1] ok"]


def test_main_in_process_restores_signal_handlers(capsys):
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    assert main(["--workers", "1", "--", PY, "-c", "import sys; sys.exit(7)"]) == 7
    assert {s: signal.getsignal(s) for s in before} == before
    assert "tfdp launch: error: worker 0 exited with code 7" in capsys.readouterr().err


def test_tfdp_cli_has_launch():
    """Once cli.py wires register(), `tfdp launch` is the same command (one worker by default,
    as torchrun's --nproc-per-node)."""
    result = subprocess.run(
        [
            PY,
            "-c",
            "import sys; from tfdp.cli import main; sys.exit(main(sys.argv[1:]))",
            "launch",
            "--",
            PY,
            "-c",
            "print('via tfdp')",
        ],
        capture_output=True,
        timeout=60,
        check=False,
    )
    if b"invalid choice: 'launch'" in result.stderr:
        pytest.skip("tfdp.cli does not register `launch` yet")
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    assert result.stdout == b"[worker 0] via tfdp\n"


# ----------------------------------------------------------------------------- TensorFlow
# That the launcher's plan (TF_CONFIG, task i for worker i) makes a working
# MultiWorkerMirroredStrategy cluster is tests/test_multiworker.py's: two `tfdp train` workers
# under `tfdp launch` train to identical weights, worker 0 the chief; no separate pair of
# TensorFlow processes for one all-reduce here.
