"""The rendezvous of a multi-node launch: its messages, and the master's server over raw sockets.

No launcher processes here: the protocol's checks are pure functions (property-tested), and the
server (:class:`tfdp.launch.rendezvous.Rendezvous`, real sockets on 127.0.0.1) is driven by raw
clients that send exactly the bytes a test wants -- garbage, oversize lines, foreign job ids,
other versions -- and by well-behaved ones that play whole rounds.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import free_ports
from tfdp.launch import LaunchError
from tfdp.launch.auth import SECRET_ENV, Session, new_nonce, secret_key
from tfdp.launch.channel import Channel, ChannelClosedError, HandshakeError
from tfdp.launch.join import Joiner, MasterGoneError
from tfdp.launch.protocol import (
    MAX_MESSAGE_BYTES,
    PROTOCOL_VERSION,
    SCHEMAS,
    ProtocolError,
    decode,
    encode,
)
from tfdp.launch.refusals import Refusals
from tfdp.launch.rendezvous import Rendezvous
from tfdp.launch.supervise import Output

JOB = "tfdp-test"
MASTER = "master-instance"

# One valid message of every type (the fields beside v, job and type).
EXAMPLES = {
    "hello": {"nonce": "0123456789abcdef" * 2, "auth": True},
    "join": {"node_rank": 1, "min_nodes": 2, "max_nodes": 3, "nproc": 2, "addr": "10.0.0.2",
             "ports": [2222, 2223], "instance": "abc", "host": "n2", "nonce": "f" * 32},
    "ready": {"ports": [2222]},
    "exited": {"round": 0, "returncode": -9, "detail": "worker 3 was killed by SIGKILL"},
    "leave": {"reason": "interrupted by SIGINT", "signal": 2},
    "heartbeat": {},
    "ack": {"waiting": False, "message": "waiting"},
    "start": {"round": 1, "restart": 1, "max_restarts": 3, "reason": "node 2 lost",
              "nodes": [{"node_rank": 0, "addr": "10.0.0.1", "ports": [1, 2]}]},
    "note": {"message": "waiting for node 1"},
    "stop": {"round": 0, "reason": "node 2 lost", "signal": 15},
    "end": {"status": 0, "message": "done", "signal": 0},
    "error": {"message": "refused", "argument": None, "retry": False},
}  # fmt: skip


# -- the messages (pure) ----------------------------------------------------------------------


def test_every_type_has_an_example_that_round_trips():
    assert set(EXAMPLES) == set(SCHEMAS)
    for kind, fields in EXAMPLES.items():
        line = encode({"type": kind, **fields}, JOB)
        assert line.endswith(b"\n") and line.count(b"\n") == 1
        assert decode(line, JOB) == {"v": PROTOCOL_VERSION, "job": JOB, "type": kind, **fields}


def _line(**fields):
    return json.dumps(fields).encode()


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b"GET / HTTP/1.1\r", "not a rendezvous message (expected one JSON object per line)"),
        (b"\xff\xfe\x00", "not a rendezvous message"),
        (b"[1, 2]", "not a rendezvous message (a JSON list)"),
        (b"", "not a rendezvous message"),
        (_line(job=JOB, type="heartbeat"), "protocol version None, but this launcher speaks"),
        (_line(v=1, job=JOB, type="heartbeat"), "version 1, but this launcher speaks version 2"),
        (_line(v=True, job=JOB, type="heartbeat"), "protocol version True"),
        (_line(v=2, job="other", type="heartbeat"), "rdzv_id: 'other' is not this job's"),
        (_line(v=2, type="heartbeat"), "rdzv_id: '?' is not this job's"),
        (_line(v=2, job=JOB, type="hi"), "unexpected message type 'hi'"),
        (_line(v=2, job=JOB), "unexpected message type '?'"),
        (_line(v=2, job=JOB, type="ready"), "malformed ready message"),
        (_line(v=2, job=JOB, type="ready", ports=[0]), "malformed ready message"),
        (_line(v=2, job=JOB, type="ready", ports=[80, 80]), "malformed ready message"),
        (_line(v=2, job=JOB, type="ready", ports=[True]), "malformed ready message"),
        (_line(v=2, job=JOB, type="ready", ports="80"), "malformed ready message"),
        (_line(v=2, job=JOB, type="stop", round=0, reason="", signal=99), "malformed stop"),
        (_line(v=2, job=JOB, type="hello", nonce="XYZ", auth=False), "malformed hello"),
        (b"x" * (MAX_MESSAGE_BYTES + 1), f"message longer than {MAX_MESSAGE_BYTES} bytes"),
    ],
)
def test_decode_refuses_what_is_not_this_jobs_protocol(line, message):
    with pytest.raises(ProtocolError) as info:
        decode(line, JOB)
    assert message in str(info.value)


def test_a_foreign_job_names_the_argument_and_an_unexpected_type_the_expected_ones():
    with pytest.raises(ProtocolError) as info:
        decode(_line(v=2, job="x", type="heartbeat"), JOB)
    assert (info.value.argument, info.value.kind) == ("rdzv_id", "job")
    with pytest.raises(ProtocolError, match=r"'ready' \(expected join\)"):
        decode(encode({"type": "ready", "ports": [1]}, JOB), JOB, expect=("join",))


def test_encode_refuses_a_line_too_long_to_be_read():
    with pytest.raises(ProtocolError, match="too long"):
        encode({"type": "note", "message": "x" * MAX_MESSAGE_BYTES}, JOB)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_decode_of_any_bytes_is_a_message_or_a_protocol_error(data):
    try:
        message = decode(data, JOB)
    except ProtocolError:
        return
    assert message["v"] == 2 and message["job"] == JOB and message["type"] in SCHEMAS


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=3),
    max_leaves=6,
)  # fmt: skip


@settings(max_examples=100, deadline=None)
@given(
    kind=st.sampled_from(sorted(SCHEMAS)),
    fields=st.dictionaries(
        st.sampled_from(sorted({f for s in SCHEMAS.values() for f in s})), JSON, max_size=8
    ),
)
def test_decode_of_any_object_of_this_job_never_crashes(kind, fields):  # fmt: skip
    line = json.dumps({**fields, "v": 2, "job": JOB, "type": kind}).encode()
    try:
        message = decode(line, JOB)
    except ProtocolError as exc:
        assert f"malformed {kind} message" in str(exc)
        return
    assert set(SCHEMAS[kind]) <= set(message)


def _hello(sock, auth=False) -> str:
    """Play the master's first line on ``sock``; its nonce."""
    nonce = new_nonce()
    sock.sendall(encode({"type": "hello", "nonce": nonce, "auth": auth}, JOB))
    return nonce


def test_channel_reports_silence_and_a_refused_message():
    a, b = socket.socketpair()
    with pytest.raises(ChannelClosedError, match=r"no hello from the master within 0.3s"):
        Channel(a, JOB, None, first={"type": "heartbeat"}, heartbeat=60, silence=0.3)
    b.close()
    a, b = socket.socketpair()
    _hello(b)
    quiet = Channel(a, JOB, None, first={"type": "heartbeat"}, heartbeat=60, silence=0.3)
    with pytest.raises(ChannelClosedError, match=r"no message for 0.3s"):  # its peer is mute
        quiet.receive(timeout=5)
    quiet.close()
    b.close()
    a, b = socket.socketpair()
    _hello(b)
    chan = Channel(a, JOB, None, first={"type": "heartbeat"}, heartbeat=60, silence=30)
    b.sendall(encode({"type": "heartbeat", "seq": 0}, "another-job"))
    with pytest.raises(ChannelClosedError, match="a message was refused: rdzv_id: 'another-job'"):
        chan.receive(timeout=5)
    chan.close()
    b.close()


# -- the master's server over raw sockets -----------------------------------------------------


@pytest.fixture
def server_of():
    servers = []

    def make(min_nodes=2, max_nodes=2, **kw):
        kw.setdefault("timeout", 60)
        kw.setdefault("first_message_timeout", 1.0)
        notes: list[str] = []
        server = Rendezvous("127.0.0.1", 0, JOB, min_nodes, max_nodes, master_instance=MASTER,
                            log=notes.append, **kw)  # fmt: skip
        server.notes = notes
        server.start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.close(linger=0.1)


class Raw:
    """A raw client of the rendezvous: bytes out, lines in (the master's hello read first).

    Its messages are sealed by a :class:`Session` (``key``: with an HMAC) unless ``plain``;
    the master's messages after the hello are checked by it (an ``error`` may come unsealed).
    """

    def __init__(self, server, timeout=10.0, key=None):
        self.sock = socket.create_connection(server.address, timeout=timeout)
        self.buffer = b""
        self.hello = self._line()
        assert self.hello["type"] == "hello", self.hello
        self.nonce = new_nonce()
        self.session = Session(key, "node", self.hello["nonce"], self.nonce)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def message(self, kind, **fields):
        self.send(encode(self.session.seal({"type": kind, **fields}, JOB), JOB))

    def join_fields(self, rank, min_nodes=2, max_nodes=2, instance=None, ports=(2222,), **kw):
        instance = instance or (MASTER if rank == 0 else f"node-{rank}")
        return {"node_rank": rank, "min_nodes": min_nodes, "max_nodes": max_nodes,
                "nproc": len(ports), "addr": "127.0.0.1", "ports": list(ports),
                "instance": instance, "host": f"host{rank}", "nonce": self.nonce, **kw}  # fmt: skip

    def join(self, rank, **kw):
        self.message("join", **self.join_fields(rank, **kw))

    def _line(self):
        while b"\n" not in self.buffer:
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def next(self, skip=("heartbeat",)):
        """The next message not of a skipped type; None when the server closed."""
        while True:
            message = self._line()
            if message is None:
                return None
            if message["type"] != "error":
                self.session.check(message)
            if message["type"] not in skip:
                return message

    def closed(self) -> bool:
        """Whether the server closed the connection (after any messages still pending)."""
        while self.next(skip=("heartbeat", "error")) is not None:
            pass
        return True

    def close(self):
        self.sock.close()


@pytest.mark.parametrize(
    ("payload", "refusal"),
    [
        (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "not a rendezvous message"),
        (b"\x00\x01\x02garbage\n", "not a rendezvous message"),
        (b"x" * (MAX_MESSAGE_BYTES + 10), f"longer than {MAX_MESSAGE_BYTES} bytes"),
        (encode({"type": "heartbeat"}, "another-job"), "'another-job' is not this job's"),
        (json.dumps({"v": 1, "job": JOB, "type": "join"}).encode() + b"\n", "version 1"),
        (encode({"type": "ready", "ports": [1]}, JOB), "unexpected message type 'ready'"),
        (json.dumps({"v": 2, "job": JOB, "type": "join", "node_rank": "1"}).encode() + b"\n",
         "malformed join message"),
    ],
)  # fmt: skip
def test_the_master_refuses_foreign_or_malformed_messages_and_goes_on(server_of, payload, refusal):
    server = server_of()
    bad = Raw(server)
    bad.send(payload)
    reply = bad.next()
    assert reply is not None and reply["type"] == "error", reply
    assert refusal in reply["message"]
    assert bad.closed()  # then the connection is closed
    bad.close()
    assert any(refusal in r for r in server.refusals.recent)
    assert any(refusal in n for n in server.notes)  # told to the operator
    good = Raw(server)  # the server goes on: a proper join is admitted
    good.join(1)
    assert good.next()["type"] == "ack"
    good.close()


def test_a_connection_that_says_nothing_is_closed(server_of):
    server = server_of()
    silent = Raw(server)
    assert silent.next() is None  # closed after the first message's timeout (1 s)
    assert any("sent nothing valid within 1s" in r for r in server.refusals.recent)


def test_joins_refused_with_the_argument_at_fault(server_of):
    server = server_of(2, 3)
    cases = [
        ({"rank": 3, "max_nodes": 3}, "node_rank", "3 is not in 0..2 (nnodes 2:3)"),
        ({"rank": 1, "max_nodes": 4}, "nnodes", "2:4 differs from the master's 2:3"),
        ({"rank": 0, "max_nodes": 3, "instance": "someone"}, "node_rank",
         "0 is the master's"),
    ]  # fmt: skip
    for kw, argument, text in cases:
        raw = Raw(server)
        raw.join(kw.pop("rank"), **kw)
        reply = raw.next()
        assert (reply["type"], reply["argument"]) == ("error", argument), reply
        assert reply["message"].startswith(text), reply["message"]
        raw.close()
    first, second = Raw(server), Raw(server)
    first.join(1, max_nodes=3)
    assert first.next()["type"] == "ack"
    second.join(1, max_nodes=3, instance="another-launcher")
    reply = second.next()
    assert reply["argument"] == "node_rank"
    assert reply["message"].startswith("1 is taken by the node at 127.0.0.1 (host1)")


def _start(raws):
    starts = [r.next() for r in raws]
    assert all(s["type"] == "start" for s in starts), starts
    assert all(s["nodes"] == starts[0]["nodes"] for s in starts)  # one ordered cluster
    return starts[0]


def test_rounds_of_a_static_job_a_failure_restarts_then_the_job_completes(server_of):
    server = server_of(2, 2, max_restarts=1)
    master, node = Raw(server), Raw(server)
    node.join(1, ports=(3001, 3002))  # the order of joins does not matter
    assert node.next()["type"] == "ack"
    master.join(0, ports=(3000,))
    assert master.next()["type"] == "ack"
    start = _start([master, node])
    assert (start["round"], start["restart"]) == (0, 0)
    assert start["nodes"] == [
        {"node_rank": 0, "addr": "127.0.0.1", "ports": [3000]},
        {"node_rank": 1, "addr": "127.0.0.1", "ports": [3001, 3002]},
    ]
    node.message("exited", round=0, returncode=3, detail="worker 2 exited with code 3")
    for raw in (master, node):
        stop = raw.next()
        assert stop["type"] == "stop" and stop["signal"] == 15
        assert stop["reason"] == "node 1 (127.0.0.1): worker 2 exited with code 3"
    master.message("ready", ports=[4000])
    node.message("ready", ports=[4001, 4002])
    start = _start([master, node])
    assert (start["round"], start["restart"]) == (1, 1)
    assert start["reason"] == "node 1 (127.0.0.1): worker 2 exited with code 3"
    assert [n["ports"] for n in start["nodes"]] == [[4000], [4001, 4002]]
    master.message("exited", round=0, returncode=0, detail="")  # a stale round: ignored
    master.message("exited", round=1, returncode=0, detail="")
    node.message("exited", round=1, returncode=0, detail="")
    for raw in (master, node):
        end = raw.next()
        assert (end["type"], end["status"]) == ("end", 0), end


def _running_pair(server):
    """Node 0 and node 1 joined, and their first round started."""
    master, node = Raw(server), Raw(server)
    master.join(0)
    node.join(1, ports=(2223,))
    assert master.next()["type"] == node.next()["type"] == "ack"
    _start([master, node])
    return master, node


def test_no_restarts_left_ends_with_the_failures_status_and_summary(server_of):
    master, node = _running_pair(server_of(2, 2))
    node.message("exited", round=0, returncode=-9, detail="worker 1 was killed by SIGKILL")
    assert master.next()["type"] == node.next()["type"] == "stop"
    master.message("ready", ports=[1])
    node.message("ready", ports=[2])
    for raw in (master, node):
        end = raw.next()
        assert end["type"] == "end" and end["status"] == 128 + 9
        assert end["message"] == (
            "node 1 (127.0.0.1): worker 1 was killed by SIGKILL; no restarts left"
        )


def _channel(server, rank, min_nodes, max_nodes, port, key=None):
    """A well-behaved member: the launcher's own Channel (heartbeats on), joined."""
    join = {"type": "join", "node_rank": rank, "min_nodes": min_nodes, "max_nodes": max_nodes,
            "nproc": 1, "addr": "127.0.0.1", "ports": [port],
            "instance": MASTER if rank == 0 else f"node-{rank}", "host": ""}  # fmt: skip
    chan = Channel(socket.create_connection(server.address, timeout=10), JOB, key, first=join,
                   heartbeat=0.2, silence=10)  # fmt: skip
    chan.ack = chan.receive(timeout=10)
    assert chan.ack["type"] == "ack"
    return chan


def test_elastic_a_silent_node_is_lost_and_the_rest_restart_without_it(server_of):
    server = server_of(2, 3, max_restarts=2, silence=1.0, heartbeat=0.2)
    survivors = [_channel(server, rank, 2, 3, 3000 + rank) for rank in (0, 1)]
    silent = Raw(server)  # node 2 joins, then says nothing (a stopped machine)
    silent.join(2, min_nodes=2, max_nodes=3, ports=(3002,))
    starts = [c.receive(timeout=10) for c in survivors]
    assert [len(s["nodes"]) for s in starts] == [3, 3]
    stops = [c.receive(timeout=10) for c in survivors]
    assert all(s["type"] == "stop" for s in stops)
    assert stops[0]["reason"].startswith("node 2 (127.0.0.1) lost: no heartbeat for 1s")
    for rank, chan in enumerate(survivors):
        chan.send({"type": "ready", "ports": [4000 + rank]})
    starts = [c.receive(timeout=10) for c in survivors]
    assert [(s["type"], s["restart"]) for s in starts] == [("start", 1)] * 2
    assert [n["node_rank"] for n in starts[0]["nodes"]] == [0, 1]
    late = _channel(server, 2, 2, 3, 5002)  # a node that comes back waits for the next restart
    assert late.ack["waiting"] is True and "joins at the next restart" in late.ack["message"]
    for chan in survivors:
        chan.send({"type": "exited", "round": 1, "returncode": 0, "detail": ""})
    for chan in (*survivors, late):
        end = chan.receive(timeout=10)
        assert (end["type"], end["status"]) == ("end", 0)
        chan.close()
    silent.close()


def test_elastic_first_start_waits_the_last_call_for_more_nodes_then_goes(server_of):
    server = server_of(2, 3, last_call=0.5)
    members = [_channel(server, rank, 2, 3, 3000 + rank) for rank in (0, 1)]
    assert [m.ack["waiting"] for m in members] == [False, False]
    assert members[0].receive(timeout=0.2) is None  # MIN joined: still waiting for more
    starts = [m.receive(timeout=10) for m in members]  # ... until the last call is over
    assert [[n["node_rank"] for n in s["nodes"]] for s in starts] == [[0, 1], [0, 1]]
    for member in members:
        member.close()


def test_a_node_that_never_joins_is_named_when_the_rendezvous_times_out(server_of):
    server = server_of(3, 3, timeout=0.5)
    master, node = Raw(server), Raw(server)
    master.join(0, min_nodes=3, max_nodes=3)
    node.join(2, min_nodes=3, max_nodes=3, ports=(2224,))
    assert master.next()["type"] == node.next()["type"] == "ack"
    end = master.next()
    assert end["type"] == "end" and end["status"] == 1
    assert end["message"].startswith("node(s) 1 did not join within 0.5s: all 3 nodes are needed")
    assert "joined: node 0 (127.0.0.1), node 2 (127.0.0.1)" in end["message"]


def test_the_master_leaving_ends_the_job_with_its_signal(server_of):
    master, node = _running_pair(server_of(2, 2))
    master.message("leave", reason="interrupted by SIGTERM", signal=15)
    end = node.next()
    assert (end["type"], end["status"], end["signal"]) == ("end", 143, 15)
    assert "the master node 0 ended the job" in end["message"]


def test_a_loopback_address_beside_real_ones_is_refused_before_any_start(server_of):
    server = server_of(2, 2)
    master, node = Raw(server), Raw(server)
    master.join(0)
    node.join(1, addr="10.0.0.2")
    assert master.next()["type"] == node.next()["type"] == "ack"
    end = node.next()
    assert end["type"] == "end" and end["status"] == 2
    assert "node 0's address 127.0.0.1 is a loopback address" in end["message"]


# -- strangers: no starvation, bounded waits, the job unchanged, authentication -----------------

STRANGER = Path(__file__).parent / "workers" / "launch_stranger.py"
SRC = str(Path(__file__).resolve().parents[1] / "src")
KEY = secret_key({SECRET_ENV: "a shared secret of this job"})
OTHER_KEY = secret_key({SECRET_ENV: "the secret of somebody else"})


def _idle(server, n):
    """``n`` connections that read the master's hello and then say nothing."""
    socks = []
    for _ in range(n):
        sock = socket.create_connection(server.address, timeout=10)
        assert b'"type":"hello"' in sock.recv(4096)  # each is served: none waits in a queue
        socks.append(sock)
    return socks


def _closed_with(sock) -> str:
    """What the master said before it closed ``sock`` (its last error message, or '')."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    errors = [json.loads(x) for x in data.splitlines() if b'"type":"error"' in x]
    return errors[-1]["message"] if errors else ""


def test_refusals_are_told_a_few_of_each_kind_then_counted_once_a_period():
    now, lines = [0.0], []
    log = Refusals(lines.append, full=2, every=30.0, clock=lambda: now[0])
    for i in range(1000):  # 1000 addresses: a bounded count of them is kept
        log.add(f"10.0.{i // 256}.{i % 256}", "garbage", "not a rendezvous message (b'x')")
    said = "sent nothing valid within 5s"
    for _ in range(5):
        log.add("10.9.9.9", "silent", said, said=said)
    assert lines == [  # the first 2 of each kind in full
        "refused a launcher at 10.0.0.0: not a rendezvous message (b'x')",
        "refused a launcher at 10.0.0.1: not a rendezvous message (b'x')",
        f"refused a launcher at 10.9.9.9: {said}",
        f"refused a launcher at 10.9.9.9: {said}",
    ]
    now[0] = 31.0
    log.tick()
    assert lines[-1] == (
        "refused 1001 more connection(s) in the last 31s (other addresses: 745, 10.0.0.2: 1, "
        "10.0.0.3: 1, 254 more address(es)): 998 not a rendezvous message, 3 " + said
    )
    now[0] = 62.0
    log.tick()
    log.flush()
    assert len(lines) == 5  # nothing new: nothing said
    assert (log.total, len(log.recent)) == (1005, 5)


def test_idle_connections_cannot_starve_the_rendezvous(server_of):
    """A bounded number of unjoined connections, the oldest dropped first (told to retry), the
    rest closed at the first message's deadline; a rightful node joins all along."""
    server = server_of(2, 2, max_pending=8, first_message_timeout=3.0)
    idle = _idle(server, 30)
    for sock in idle[:22]:  # the oldest made room for the newer ones
        assert "the rendezvous is busy (8 connections have not joined): try again" in (
            _closed_with(sock))  # fmt: skip
    node = Raw(server)  # pushes out one more, and joins
    node.join(1)
    assert node.next()["type"] == "ack"
    assert _closed_with(idle[22]).startswith("the rendezvous is busy")
    for sock in idle[23:]:  # said nothing: closed at the first message's deadline
        assert _closed_with(sock) == ""
    assert server.refusals.by_kind == {"busy": 23, "silent": 7}
    assert list(server.members) == [1] and server.state.phase == "gather"
    for sock in idle:
        sock.close()


def test_a_connection_that_trickles_bytes_is_closed_at_the_first_message_deadline(server_of):
    server = server_of(2, 2, first_message_timeout=1.0)
    raw = Raw(server)
    closed_at = None
    for _ in range(50):  # a byte every 0.1 s, never a whole line: 5 s at most
        try:
            raw.send(b"{")
        except OSError:
            closed_at = _
            break
        time.sleep(0.1)
    assert closed_at is not None and closed_at < 50, "never closed"
    assert server.refusals.by_kind == {"silent": 1}
    raw.close()


def test_nothing_a_stranger_sends_changes_the_job(server_of, tmp_path):
    """The stranger of issue 37 (every kind of message, idle and trickling connections) while
    node 0 waits: node 0 hears only heartbeats, no rank is taken, no round starts; the log
    names each kind of refusal a few times, then counts; node 1 then joins and the round starts
    as if nothing happened."""
    server = server_of(2, 2, first_message_timeout=0.5, summary_every=1.0)
    master = Raw(server)
    master.join(0)
    assert master.next()["type"] == "ack"
    stranger = subprocess.run(
        [sys.executable, str(STRANGER), "127.0.0.1", str(server.address[1]), JOB, "--seconds",
         "3", "--idle", "20", "--messages", "40", "--connections", "200"],
        capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": SRC},
    )  # fmt: skip
    report = json.loads(stranger.stdout.split("STRANGER ", 1)[1])
    answers = report["answers"]  # the fault happened: up to 40 messages in its 3 s, answered
    assert sum(answers.values()) >= 30, stranger.stdout + stranger.stderr
    assert sum(n for a, n in answers.items() if a.startswith("error: ")) >= 25, answers
    assert report["closed_on_it"] >= 20
    master.sock.settimeout(0.5)
    with pytest.raises(TimeoutError):  # nothing but heartbeats reached node 0
        master.next()
    master.sock.settimeout(10)
    assert list(server.members) == [0]
    assert (server.state.phase, server.state.round, server.state.restarts) == ("gather", 0, 0)
    kinds = server.refusals.by_kind
    for kind in ("garbage", "too long", "version", "job", "join", "type", "silent"):
        assert kinds[kind] > 0, kinds
    told = [n for n in server.notes if n.startswith("refused a launcher at 127.0.0.1: ")]
    assert len(told) <= 3 * len(kinds) < server.refusals.total  # a few of each kind in full
    assert any(re.match(r"refused \d+ more connection\(s\) in the last \d+s \(127\.0\.0\.1: \d+\)"
                        , n) for n in server.notes), server.notes  # fmt: skip
    node = Raw(server)
    node.join(1, ports=(2223,))
    assert node.next()["type"] == "ack"
    start = _start([master, node])
    assert (start["round"], [n["node_rank"] for n in start["nodes"]]) == (0, [0, 1])


def test_with_a_secret_only_a_join_with_the_right_hmac_is_admitted(server_of):
    server = server_of(2, 2, key=KEY)
    cases = [
        (None, "the message carries no HMAC: this job's rendezvous needs the shared secret"),
        (OTHER_KEY, "the message's HMAC does not match: another TFDP_RDZV_SECRET"),
    ]
    for key, text in cases:
        raw = Raw(server, key=key)
        assert raw.hello["auth"] is True
        raw.join(1)  # the right job id, a well-formed join
        reply = raw.next()
        assert reply["type"] == "error" and reply["message"].startswith(text), reply
        assert raw.closed()
    assert server.refusals.by_kind == {"auth": 2} and not server.members
    node = Raw(server, key=KEY)
    node.join(1)
    assert node.next()["type"] == "ack"  # sealed by the master: Raw checked its HMAC


def test_with_a_secret_a_replayed_message_is_refused(server_of):
    server = server_of(2, 2, key=KEY)
    node = Raw(server, key=KEY)
    sent = []
    real_send = node.send
    node.send = lambda data: sent.append(data) or real_send(data)
    node.join(1)
    assert node.next()["type"] == "ack"
    again = Raw(server, key=KEY)  # the join recorded on one connection, replayed on another
    again.send(sent[0])
    reply = again.next()
    assert reply["type"] == "error" and "HMAC does not match" in reply["message"]
    node.message("heartbeat")
    node.send(sent[-1])  # the same heartbeat again on its own connection
    reply = node.next()
    assert reply == {**reply, "type": "error"}
    assert reply["message"] == "message out of order or replayed (seq 1, expected 2)"
    assert node.closed()
    deadline = time.monotonic() + 10
    while server.members and time.monotonic() < deadline:  # the member is dropped with it
        time.sleep(0.01)
    assert not server.members


def test_a_node_refuses_what_its_master_did_not_seal():
    """Node side: a forged or replayed master message ends the connection; a hello that
    disagrees with this node's secret is a HandshakeError (not retried)."""
    for forged_key, text in ((OTHER_KEY, "HMAC does not match"), (KEY, "out of order")):
        a, b = socket.socketpair()
        nonce = _hello(b, auth=True)
        chan = Channel(a, JOB, KEY, first={"type": "join"}, heartbeat=60, silence=30)
        join = json.loads(b.recv(4096))
        assert join["seq"] == 0 and len(join["mac"]) == 64
        master = Session(forged_key, "master", nonce, join["nonce"])
        stop = encode(master.seal({"type": "stop", "round": 0, "reason": "x", "signal": 9}, JOB),
                      JOB)  # fmt: skip
        b.sendall(stop)
        if forged_key is KEY:  # the right master's message: accepted once, not twice
            assert chan.receive(timeout=5)["type"] == "stop"
            b.sendall(stop)
        with pytest.raises(ChannelClosedError, match=text):
            chan.receive(timeout=5)
        chan.close()
        b.close()
    for key, auth, text in ((None, True, "this node has no TFDP_RDZV_SECRET"),
                            (KEY, False, "the master does not authenticate")):  # fmt: skip
        a, b = socket.socketpair()
        _hello(b, auth=auth)
        with pytest.raises(HandshakeError, match=text):
            Channel(a, JOB, key, first={"type": "heartbeat"}, silence=5)
        b.close()


SEALED = st.dictionaries(st.sampled_from(["a", "b", "ports", "reason"]),
                         st.integers(0, 9) | st.text(max_size=4), max_size=3)  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(SEALED, st.sampled_from(["nonce", "role", "key", "field", "order"]))
def test_a_sealed_message_is_accepted_once_in_order_on_its_own_connection_only(fields, change):
    n1, n2 = new_nonce(), new_nonce()
    node = Session(KEY, "node", n1, n2)
    first = {"v": 2, "job": JOB, **node.seal({"type": "ready", **fields}, JOB)}
    Session(KEY, "master", n1, n2).check(first)  # accepted where it was sent
    master = {
        "nonce": Session(KEY, "master", new_nonce(), n2),  # replayed on another connection
        "role": Session(KEY, "node", n1, n2),  # reflected back to its sender's end
        "key": Session(OTHER_KEY, "master", n1, n2),
        "field": Session(KEY, "master", n1, n2),
        "order": Session(KEY, "master", n1, n2),
    }[change]
    message = dict(first)
    if change == "field":
        message["reason"] = f"{message.get('reason', '')}!"
    if change == "order":
        message = {"v": 2, "job": JOB, **node.seal({"type": "ready", **fields}, JOB)}  # seq 1
    with pytest.raises(ProtocolError) as info:
        master.check(message)
    assert info.value.kind == ("order" if change == "order" else "auth")


# -- a node's join: retried for what the network does, refused for what is wrong ----------------


class FakeMaster:
    """A listening socket whose i-th connection is handled by ``script[i]`` (then closed)."""

    def __init__(self, script):
        self.server = socket.create_server(("127.0.0.1", 0))
        self.address = self.server.getsockname()
        self.script = list(script)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        self.server.settimeout(30)
        for handle in self.script:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            with conn:
                handle(conn)

    def close(self):
        self.server.close()
        self.thread.join(timeout=10)


def _reply(conn, message, seal=True):
    """Read the join after the hello and answer ``message`` (sealed with seq 0 by a session)."""
    nonce = _hello(conn)
    join = json.loads(conn.makefile("rb").readline())
    session = Session(None, "master", nonce, join["nonce"])
    conn.sendall(encode(session.seal(message, JOB) if seal else message, JOB))
    time.sleep(0.2)  # let it be read before the close


def _joiner(address, timeout=20.0, first=True):
    out = Output()
    joiner = Joiner(address, JOB, None, None, timeout, 60, 2.0, out, lambda: False)
    join = {"type": "join", "node_rank": 1, "min_nodes": 2, "max_nodes": 2, "nproc": 1,
            "addr": "127.0.0.1", "ports": [2222], "instance": "i", "host": ""}  # fmt: skip
    return joiner, (lambda addr: join)


def test_a_join_is_retried_after_a_closed_connection_and_a_busy_master(capsys):
    master = FakeMaster([
        lambda conn: None,  # closed at once
        lambda conn: _reply(conn, {"type": "error", "message": "busy", "argument": None,
                                   "retry": True}),
        lambda conn: _reply(conn, {"type": "ack", "waiting": False, "message": "welcome"}),
    ])  # fmt: skip
    joiner, join = _joiner(master.address)
    joined = joiner.join(join, first=True)
    assert joined.reply["message"] == "welcome" and joined.addr == "127.0.0.1"
    joined.chan.close()
    master.close()
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2, lines  # one line each time
    assert re.match(r"tfdp launch: the master at 127.0.0.1:\d+ did not take this node's join "
                    r"\(the connection was closed before the master's hello\): retrying in "
                    r"0.5s \(\d+s left\)$", lines[0])  # fmt: skip
    assert re.match(r".* did not take this node's join \(busy\): retrying in 1s \(\d+s left\)$",
                    lines[1])  # fmt: skip


def test_a_refused_join_is_not_retried_and_an_endless_retry_ends_at_the_timeout(capsys):
    refusal = {"type": "error", "message": "1 is taken by the node at 10.0.0.2",
               "argument": "node_rank", "retry": False}  # fmt: skip
    master = FakeMaster([lambda conn: _reply(conn, refusal, seal=False)])
    joiner, join = _joiner(master.address)
    with pytest.raises(LaunchError, match=r"^node_rank: 1 is taken") as info:
        joiner.join(join, first=True)
    assert info.value.argument == "node_rank"
    master.close()
    busy = {"type": "error", "message": "busy", "argument": None, "retry": True}
    for first in (True, False):
        master = FakeMaster([lambda conn: _reply(conn, busy)] * 10)
        joiner, join = _joiner(master.address, timeout=2.0)
        error = LaunchError if first else MasterGoneError
        with pytest.raises(error, match=r"did not take this node('s join| back) within 2s"
                                        r" \(busy\)"):  # fmt: skip
            joiner.join(join, first=first)
        master.close()
    assert "retrying in 0.5s" in capsys.readouterr().err


def test_a_node_waiting_for_the_master_says_how_long_it_still_waits(capsys):
    joiner, join = _joiner(("127.0.0.1", free_ports(1)[0]), timeout=2.5)
    with pytest.raises(LaunchError, match=r"no rendezvous there within 2.5s"):
        joiner.join(join, first=True)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].endswith("(Connection refused): retrying for up to 2.5s"), lines
    assert re.fullmatch(r"tfdp launch: still waiting for the master at 127.0.0.1:\d+ "
                        r"\(Connection refused\): [01]s left", lines[1]), lines  # fmt: skip


# -- a job whose workers completed ends with 0, whatever the network does then ------------------


def test_a_node_lost_after_workers_completed_does_not_fail_the_job(server_of):
    master, node = _running_pair(server_of(2, 2))
    master.message("exited", round=0, returncode=0, detail="")
    node.close()  # its link is cut before its own report
    end = master.next()
    assert (end["type"], end["status"]) == ("end", 0), end
    assert end["message"].startswith(
        "the job completed on node(s) 0; node 1 (127.0.0.1) was lost (its launcher's connection "
        "closed) after workers of the round had completed: its workers' own end was not reported"
    )


def test_a_node_that_completed_and_then_left_is_not_a_loss(server_of):
    master, node = _running_pair(server_of(2, 2))
    node.message("exited", round=0, returncode=0, detail="")
    node.close()  # done, and gone before node 0's workers end
    master.message("exited", round=0, returncode=0, detail="")
    end = master.next()
    assert (end["type"], end["status"], end["message"]) == (
        "end", 0, "the job completed on node(s) 0, 1")  # fmt: skip
