"""TensorFlow's raw records of a lost peer held back from `tfdp train`'s stderr, and nothing else.

The records are TensorFlow 2.21's own, as two `tfdp train` workers on simulated machines
printed them when the other was killed, cut off or stopped (the chief's and the other
worker's side). The filter is checked on them, on what must pass (a user's warnings, other
TensorFlow errors, tfdp's lines, tracebacks), on any chunking of the pipe (hypothesis), and as
the process it is, behind a real process's file descriptor 2.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from hypothesis import given, settings
from hypothesis import strategies as st

from tfdp.cli.tf_log import PREAMBLE, FaultLineFilter, is_fault_record

_PEER_KILLED = b"""\
E0000 00:00:1796259480.622700   23416 ring_alg.cc:291] Aborting RingReduce with UNAVAILABLE: \
recvmsg:Connection reset by peer
Additional GRPC error information from remote target /job:worker/replica:0/task:1 while \
calling /tensorflow.WorkerService/RecvBuf:
:UNKNOWN:Error received from peer  {grpc_status:14, grpc_message:"recvmsg:Connection reset by \
peer"}
"""
_PEER_SILENT = b"""\
E0000 00:00:1796259564.846329   29455 base_collective_executor.cc:252] \
BaseCollectiveExecutor::StartAbort UNAVAILABLE: Error reported from /job:worker/task:1: The \
following tasks are unhealthy (stopped sending heartbeats):
/job:worker/replica:0/task:1
The tasks have crashed. Check the task logs for an earlier error, or scheduler events (e.g. \
preemption, eviction) to debug further. \
[type.googleapis.com/tensorflow.CoordinationServiceError='\\"\\n\\n\\x06worker\\x10\\x01']
"""
_ABORTED_RING = b"""\
E0000 00:00:1796259564.846492   29455 ring_alg.cc:291] Aborting RingReduce with UNAVAILABLE: \
Collective ops is aborted by: Error reported from /job:worker/task:1: The following tasks are \
unhealthy (stopped sending heartbeats):
/job:worker/replica:0/task:1
The tasks have crashed. Check the task logs for an earlier error, or scheduler events (e.g. \
preemption, eviction) to debug further.
The error could be from a previous operation. Restart your program to reset. \
[type.googleapis.com/tensorflow.DerivedStatus='']
"""
_LEADER_SILENT = b"""\
E0000 00:00:1796259565.714735   29726 base_collective_executor.cc:252] \
BaseCollectiveExecutor::StartAbort DEADLINE_EXCEEDED: Deadline Exceeded

RPC: /tensorflow.CoordinationService/Heartbeat
"""
RECORDS = [_PEER_KILLED, _PEER_SILENT, _ABORTED_RING, _LEADER_SILENT]
TFDP = b"tfdp train: error: lost worker 1 at 10.231.0.2:2222 after optimizer step 83 (...)\n"
#: Lines that must pass: a user's C++ warning and error, TensorFlow errors of other causes,
#: a Python traceback, a worker's own output.
PASS = [
    b"W0000 00:00:1796259480.1   23416 my_op.cc:12] my kernel is slow\n",
    b"E0000 00:00:1796259480.1   23416 my_op.cc:12] UNAVAILABLE: my own service is down\n",
    b"E0000 00:00:1796259480.1   23416 ring_alg.cc:291] INTERNAL: an unrelated failure\n",
    b"I0000 00:00:1796259480.1   23416 coordination_service_agent.cc:9] UNAVAILABLE noted\n",
    b'Traceback (most recent call last):\n  File "x.py", line 1\nValueError: bad\n',
    b"UserWarning: something the user should see\n",
]


def _run(*chunks: bytes) -> tuple[bytes, FaultLineFilter]:
    f = FaultLineFilter()
    return b"".join(f.feed(c) for c in chunks) + f.close(), f


def test_each_record_of_a_lost_peer_is_dropped_whole_with_absl_s_notice():
    for record in RECORDS:
        assert is_fault_record(record.splitlines()[0])
        out, f = _run(PREAMBLE + b"\n", record, TFDP)  # as the pipe gave them: one write each
        assert out == TFDP and f.dropped == 1
        out, f = _run(PREAMBLE + b"\n" + record + TFDP)  # one read of all of it
        assert out == TFDP and f.dropped == 1
    out, f = _run(*RECORDS, TFDP)  # the chief's two records in a row
    assert out == TFDP and f.dropped == 4


def test_everything_else_passes_unchanged():
    for line in PASS:
        assert _run(line)[0] == line
        assert _run(PREAMBLE + b"\n", line)[0] == PREAMBLE + b"\n" + line  # the notice kept
    # After a dropped record: the next write, or the next header in the same one, passes.
    for line in PASS:
        assert _run(_PEER_KILLED, line)[0] == line
    assert _run(_PEER_KILLED + PASS[0] + PASS[1])[0] == PASS[0] + PASS[1]
    assert _run(_PEER_KILLED[:-1] + b"\n" + TFDP)[0] == TFDP  # tfdp's line never continues one


def test_held_lines_are_released_as_they_stand():
    f = FaultLineFilter()
    assert f.feed(PREAMBLE + b"\n") == b"" and f.holding
    assert f.release() == PREAMBLE + b"\n" and not f.holding
    assert f.feed(b"progress 3/10\r") == b"" and f.holding  # an unfinished line ...
    assert f.release() == b"progress 3/10\r"  # ... written as it stands after a while
    assert f.feed(b" 4/10\n") == b" 4/10\n"  # and its rest passes


_ordinary = st.lists(
    st.one_of(
        st.sampled_from([*PASS, PREAMBLE + b"\n", TFDP, b"\n", b"E0000 half a line\n"]),
        st.binary(max_size=40).map(lambda b: b.replace(b"E", b"e") + b"\n"),
    ),
    max_size=12,
)


@settings(max_examples=200, deadline=None)
@given(_ordinary, st.data())
def test_text_without_a_lost_peer_s_record_passes_whatever_the_reads(lines, data):
    """Any text without such a record comes out byte for byte, however the pipe splits it
    and whenever the held bytes are released."""
    text = b"".join(lines)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=6)))
    f, out, start = FaultLineFilter(), [], 0
    for cut in [*cuts, len(text)]:
        out.append(f.feed(text[start:cut]))
        if data.draw(st.booleans()):
            out.append(f.release())
        start = cut
    out.append(f.close())
    assert b"".join(out) == text and f.dropped == 0


_SCRIPT = textwrap.dedent(
    """
    import os, subprocess, sys
    from tfdp.cli.tf_log import hold_back
    print("held", hold_back(), file=sys.stderr, flush=True)
    os.write(2, {preamble!r} + b"\\n")  # C++ writes to file descriptor 2
    os.write(2, {record!r})
    os.write(2, {warning!r})
    subprocess.run([sys.executable, "-c", "import sys; sys.stderr.write('child line\\\\n')"])
    print("tfdp train: error: lost worker 1", file=sys.stderr, flush=True)
    os.write(2, {late!r})  # as TensorFlow may at exit
    """
)


def _stderr_of(env_extra: dict[str, str]) -> str:
    code = _SCRIPT.format(preamble=PREAMBLE, record=_ABORTED_RING, warning=PASS[0],
                          late=_PEER_KILLED)  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "TFDP_DEBUG"}
    env.update(env_extra)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, env=env,
                          timeout=60, check=True)  # fmt: skip
    return proc.stderr.decode()


def test_a_process_s_stderr_loses_exactly_those_records_and_keeps_python_s_own():
    err = _stderr_of({})
    assert "held True" in err and "tfdp train: error: lost worker 1" in err
    assert "my kernel is slow" in err and "child line" in err  # C++ and a child's: kept
    assert "E0000" not in err and "absl::InitializeLog" not in err and "GRPC" not in err
    # TFDP_DEBUG keeps every line.
    err = _stderr_of({"TFDP_DEBUG": "1"})
    assert "held False" in err and err.count("E0000") == 2 and "absl::InitializeLog" in err
