"""The rendezvous of a multi-node launch: its messages, and the master's server over raw sockets.

No launcher processes here: the protocol's checks are pure functions (property-tested), and the
server (:class:`tfdp.launch.rendezvous.Rendezvous`, real sockets on 127.0.0.1) is driven by raw
clients that send exactly the bytes a test wants -- garbage, oversize lines, foreign job ids,
other versions -- and by well-behaved ones that play whole rounds.
"""

from __future__ import annotations

import json
import socket

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tfdp.launch.protocol import (
    MAX_MESSAGE_BYTES,
    PROTOCOL_VERSION,
    SCHEMAS,
    Channel,
    ChannelClosedError,
    ProtocolError,
    decode,
    encode,
)
from tfdp.launch.rendezvous import Rendezvous

JOB = "tfdp-test"
MASTER = "master-instance"

# One valid message of every type (the fields beside v, job and type).
EXAMPLES = {
    "join": {"node_rank": 1, "min_nodes": 2, "max_nodes": 3, "nproc": 2, "addr": "10.0.0.2",
             "ports": [2222, 2223], "instance": "abc", "host": "n2"},
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
    "error": {"message": "refused", "argument": None},
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
        (_line(v=2, job=JOB, type="heartbeat"), "version 2, but this launcher speaks version 1"),
        (_line(v=True, job=JOB, type="heartbeat"), "protocol version True"),
        (_line(v=1, job="other", type="heartbeat"), "rdzv_id 'other' is not this job's"),
        (_line(v=1, type="heartbeat"), "rdzv_id '?' is not this job's"),
        (_line(v=1, job=JOB, type="hello"), "unexpected message type 'hello'"),
        (_line(v=1, job=JOB), "unexpected message type '?'"),
        (_line(v=1, job=JOB, type="ready"), "malformed ready message"),
        (_line(v=1, job=JOB, type="ready", ports=[0]), "malformed ready message"),
        (_line(v=1, job=JOB, type="ready", ports=[80, 80]), "malformed ready message"),
        (_line(v=1, job=JOB, type="ready", ports=[True]), "malformed ready message"),
        (_line(v=1, job=JOB, type="ready", ports="80"), "malformed ready message"),
        (_line(v=1, job=JOB, type="stop", round=0, reason="", signal=99), "malformed stop"),
        (b"x" * (MAX_MESSAGE_BYTES + 1), f"message longer than {MAX_MESSAGE_BYTES} bytes"),
    ],
)
def test_decode_refuses_what_is_not_this_jobs_protocol(line, message):
    with pytest.raises(ProtocolError) as info:
        decode(line, JOB)
    assert message in str(info.value)


def test_a_foreign_job_names_the_argument_and_an_unexpected_type_the_expected_ones():
    with pytest.raises(ProtocolError) as info:
        decode(_line(v=1, job="x", type="heartbeat"), JOB)
    assert info.value.argument == "rdzv_id"
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
    assert message["v"] == 1 and message["job"] == JOB and message["type"] in SCHEMAS


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
    line = json.dumps({**fields, "v": 1, "job": JOB, "type": kind}).encode()
    try:
        message = decode(line, JOB)
    except ProtocolError as exc:
        assert f"malformed {kind} message" in str(exc)
        return
    assert set(SCHEMAS[kind]) <= set(message)


def test_channel_reports_silence_and_a_refused_message():
    a, b = socket.socketpair()
    quiet = Channel(a, JOB, heartbeat=60, silence=0.3)  # its peer never speaks
    with pytest.raises(ChannelClosedError, match=r"no message for 0.3s"):
        quiet.receive(timeout=5)
    quiet.close()
    b.close()
    a, b = socket.socketpair()
    chan = Channel(a, JOB, heartbeat=60, silence=30)
    b.sendall(encode({"type": "heartbeat"}, "another-job"))
    with pytest.raises(ChannelClosedError, match="a message was refused: rdzv_id 'another-job'"):
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
    """A raw client of the rendezvous: bytes out, lines in."""

    def __init__(self, server, timeout=10.0):
        self.sock = socket.create_connection(server.address, timeout=timeout)
        self.buffer = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def message(self, kind, **fields):
        self.send(encode({"type": kind, **fields}, JOB))

    def join(self, rank, min_nodes=2, max_nodes=2, instance=None, ports=(2222,), **kw):
        instance = instance or (MASTER if rank == 0 else f"node-{rank}")
        fields = {"node_rank": rank, "min_nodes": min_nodes, "max_nodes": max_nodes,
                  "nproc": len(ports), "addr": "127.0.0.1", "ports": list(ports),
                  "instance": instance, "host": f"host{rank}", **kw}  # fmt: skip
        self.message("join", **fields)

    def next(self, skip=("heartbeat",)):
        """The next message not of a skipped type; None when the server closed."""
        while True:
            while b"\n" not in self.buffer:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return None
                self.buffer += chunk
            line, self.buffer = self.buffer.split(b"\n", 1)
            message = json.loads(line)
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
        (encode({"type": "heartbeat"}, "another-job"), "rdzv_id 'another-job' is not this job's"),
        (json.dumps({"v": 2, "job": JOB, "type": "join"}).encode() + b"\n", "version 2"),
        (encode({"type": "ready", "ports": [1]}, JOB), "unexpected message type 'ready'"),
        (json.dumps({"v": 1, "job": JOB, "type": "join", "node_rank": "1"}).encode() + b"\n",
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
    assert any(refusal in r for r in server.refused)
    good = Raw(server)  # the server goes on: a proper join is admitted
    good.join(1)
    assert good.next()["type"] == "ack"
    good.close()


def test_a_connection_that_says_nothing_is_closed(server_of):
    server = server_of()
    silent = Raw(server)
    assert silent.next() is None  # closed after the first message's timeout (1 s)
    assert any("said nothing for 1s" in r for r in server.refused)


def test_joins_refused_with_the_argument_at_fault(server_of):
    server = server_of(2, 3)
    cases = [
        ({"rank": 3, "max_nodes": 3}, "node_rank", "node_rank 3 is not in 0..2 (nnodes 2:3)"),
        ({"rank": 1, "max_nodes": 4}, "nnodes", "nnodes 2:4 differs from the master's 2:3"),
        ({"rank": 0, "max_nodes": 3, "instance": "someone"}, "node_rank",
         "node_rank 0 is the master's"),
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
    assert "node_rank 1 is taken by the node at 127.0.0.1 (host1)" in reply["message"]


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


def _channel(server, rank, min_nodes, max_nodes, port):
    """A well-behaved member: the launcher's own Channel (heartbeats on), joined."""
    chan = Channel(socket.create_connection(server.address, timeout=10), JOB, heartbeat=0.2,
                   silence=10)  # fmt: skip
    chan.send({"type": "join", "node_rank": rank, "min_nodes": min_nodes,
               "max_nodes": max_nodes, "nproc": 1, "addr": "127.0.0.1", "ports": [port],
               "instance": MASTER if rank == 0 else f"node-{rank}", "host": ""})  # fmt: skip
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
