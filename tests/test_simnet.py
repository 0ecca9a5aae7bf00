"""The simulated-machines harness itself (tests/simnet.py): addresses, cuts, proxy, clean-up."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from simnet import (  # noqa: F401 (simnet_fixture: the simnet fixture)
    SimNet,
    process_state,
    simnet_fixture,
    skip_reason,
    sweep_leftovers,
)

pytestmark = pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")

ECHO = """
import socket, sys
s = socket.create_server((sys.argv[1], int(sys.argv[2])))
print("ready", flush=True)
while True:
    c, _ = s.accept()
    c.sendall(c.recv(100))
    c.close()
"""

CALL = """
import socket, sys
try:
    with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])) as c:
        c.sendall(b"hello")
        print("got", c.recv(100).decode())
except OSError as err:
    print("failed", type(err).__name__)
"""

TIMED = """
import socket, sys, time
with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])) as c:
    t0 = time.monotonic()
    c.sendall(b"hello")
    reply = c.recv(100).decode()
    print("got", reply, round(time.monotonic() - t0, 3))
"""


def _echo(node, port=7000):
    proc = node.popen([sys.executable, "-c", ECHO, node.address, str(port)],
                      stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout.readline().strip() == "ready"
    return proc


def _call(node, address, port=7000, timeout=1.0):
    return node.run([sys.executable, "-c", CALL, address, str(port), str(timeout)]).stdout.strip()


def _ip(*args):
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=True).stdout


def test_two_nodes_have_their_addresses_and_talk_over_tcp(simnet):
    net = simnet(2)
    a, b = net.nodes
    assert (a.address, b.address) == ("10.231.0.1", "10.231.0.2")
    addrs = a.run(["ip", "-brief", "addr"]).stdout
    assert "10.231.0.1/24" in addrs and "lo" in addrs and "UNKNOWN" in addrs  # lo up
    _echo(b)
    assert _call(a, b.address) == "got hello"
    # Private: the host's namespace has no interface on the subnet.
    assert "10.231.0." not in _ip("-o", "addr")


def test_cut_drops_the_link_and_restore_heals_it(simnet):
    net = simnet(2)
    a, b = net.nodes
    _echo(b)
    b.cut()
    assert not b.link_up() and a.link_up()  # the fault really happened, on b only
    assert _call(a, b.address, timeout=1.0) in ("failed TimeoutError", "failed OSError")
    b.restore()
    assert b.link_up()
    # a's ARP entry for b is still being probed (once a second) from the cut: the first SYN
    # may wait for the next probe and TCP's 1 s retransmission, so heal within 5 s, not 1.
    assert _call(a, b.address, timeout=5.0) == "got hello"


def test_signal_stops_and_kills_every_process_of_a_node(simnet):
    net = simnet(1)
    (a,) = net.nodes
    proc = a.popen([sys.executable, "-c", "import time; time.sleep(60)"])
    deadline = time.monotonic() + 10
    while proc.pid not in a.pids() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert a.signal(signal.SIGSTOP) == [proc.pid]
    assert process_state(proc.pid, "T") == "T"  # stopped
    a.signal(signal.SIGKILL)
    assert proc.wait(timeout=10) == -signal.SIGKILL
    assert a.pids() == []


def test_the_delay_proxy_forwards_and_holds_each_chunk(simnet):
    net = simnet(2)
    a, b = net.nodes
    _echo(b)
    proxy = net.delay_proxy(a, 9000, (b.address, 7000), delay=0.25)
    assert proxy.address == f"{a.address}:9000"
    out = a.run([sys.executable, "-c", TIMED, a.address, "9000", "10"]).stdout.split()
    assert out[:2] == ["got", "hello"]
    assert float(out[2]) >= 0.5  # held 0.25 s there and 0.25 s back (a lower bound only)
    proxy.close()


def test_close_leaves_nothing_also_after_an_exception_or_ctrl_c():
    links_before = _ip("-o", "link").count("\n")
    for exc in (RuntimeError, KeyboardInterrupt):
        with pytest.raises(exc), SimNet(2) as net:
            proc = net.nodes[0].popen([sys.executable, "-c", "import time; time.sleep(60)"])
            assert len(net.namespaces()) == 3  # two nodes and the hub
            raise exc("boom")
        assert proc.poll() is not None  # the node's process was killed
        assert net.namespaces() == []
        assert net.token not in _ip("netns", "list")
    assert _ip("-o", "link").count("\n") == links_before  # no veth or bridge left on the host


def test_the_sweeper_removes_namespaces_of_dead_runs_only():
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = f"tfdp-sim-{dead.pid}-abc123-n0"
    mine = SimNet(1).start()
    try:
        subprocess.run(["ip", "netns", "add", stale], check=True)
        assert sweep_leftovers() == [stale]
        names = _ip("netns", "list")
        assert stale not in names and mine.nodes[0].name in names  # a live run kept
    finally:
        subprocess.run(["ip", "netns", "del", stale], capture_output=True)
        mine.close()
