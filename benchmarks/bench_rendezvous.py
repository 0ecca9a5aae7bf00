"""Benchmark a multi-node rendezvous undisturbed and under a stranger at the master's port.

Two ``tfdp launch --nnodes 2`` launchers on 127.0.0.1 (no TensorFlow: each worker is
``sleep S``, so the job holds the rendezvous S seconds) form a job, undisturbed or while
``tests/workers/launch_stranger.py`` runs against the master's port -- started a second
before the launchers, running to the job's end. Two strangers:

* ``issue 37``: the issue's, 200 idle connections (opened again half a second after the
  master closes one) and 400 messages over 60 s (garbage, a 4 MB line, foreign joins, ...);
* ``flood``: 200 idle connections and 100 messages a second.

For each run: the seconds from the launchers' start until both printed their round's start
(``join``), the master launcher's CPU seconds for the whole run (its own and its worker's:
``sleep``, nothing), how many lines the master printed about refused connections, and how
many joins the launchers had to retry (all runs of the case). The
cases run alternately (the same load for each), several times; medians, and ratios against
the undisturbed runs of the same invocation.

Usage::

    .venv/bin/python benchmarks/bench_rendezvous.py           # 5 runs each, workers hold 5 s
    .venv/bin/python benchmarks/bench_rendezvous.py --quick   # 2 runs each, 2 s: under a minute

Headline figures last, one ``name: value`` per line.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STRANGER = ROOT / "tests" / "workers" / "launch_stranger.py"
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "TF_CPP_MIN_LOG_LEVEL": "2"}
CASES = {
    "undisturbed": None,
    "issue 37": ["--idle", "200", "--messages", "400", "--seconds", "60"],
    "flood": ["--idle", "200", "--messages", "6000", "--seconds", "60"],
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Launcher:
    """One node's launcher; the time its round-start line came, its stderr lines."""

    def __init__(self, rank: int, port: int, hold: float) -> None:
        argv = [sys.executable, "-m", "tfdp.launch", "--nnodes", "2", "--node-rank", str(rank),
                "--master-port", str(port), "--rdzv-id", "bench", "--rdzv-timeout", "60",
                "--", "sleep", f"{hold:g}"]  # fmt: skip
        self.started = time.monotonic()
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True, env=ENV)  # fmt: skip
        self.round_at: float | None = None
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            if self.round_at is None and "round 0: 2 node(s)" in line:
                self.round_at = time.monotonic()
            self.lines.append(line)

    def finish(self) -> tuple[int, float]:
        """(exit status, CPU seconds of the launcher and its worker)."""
        _, status, usage = os.wait4(self.proc.pid, 0)
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        self.reader.join(timeout=10)
        return self.proc.returncode, usage.ru_utime + usage.ru_stime


def run_once(flags: list[str] | None, hold: float) -> dict:
    port = _free_port()
    guest = None
    if flags is not None:
        guest = subprocess.Popen([sys.executable, str(STRANGER), "127.0.0.1", str(port), "bench",
                                  *flags], stdout=subprocess.PIPE, text=True, env=ENV)  # fmt: skip
        time.sleep(1.0)
    start = time.monotonic()
    nodes = [_Launcher(rank, port, hold) for rank in (0, 1)]
    results = [n.finish() for n in nodes]
    report = {}
    if guest is not None:
        guest.send_signal(signal.SIGTERM)
        out, _ = guest.communicate(timeout=60)
        report = json.loads(out.split("STRANGER ", 1)[1])
    if [r[0] for r in results] != [0, 0] or any(n.round_at is None for n in nodes):
        text = "".join(nodes[0].lines[-20:] + nodes[1].lines[-20:])
        raise SystemExit(f"bench_rendezvous: the job did not form and end:\n{text}")
    refused = [line for line in nodes[0].lines if re.match(r"tfdp launch: refused ", line)]
    retries = sum("did not take this node's join" in line for n in nodes for line in n.lines)
    return {
        "retries": retries,
        "join": max(n.round_at for n in nodes if n.round_at) - start,
        "master_cpu": results[0][1],
        "refused_lines": len(refused),
        "opened": report.get("opened", 0),
        "stranger_cpu": report.get("cpu_s", 0.0),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--runs", type=int, default=None, help="runs per case")
    args = ap.parse_args()
    runs = args.runs or (2 if args.quick else 5)
    hold = 2.0 if args.quick else 5.0
    print(f"bench_rendezvous: {'quick' if args.quick else 'full'}, {runs} runs per case, workers "
          f"hold {hold:g}s; load average {os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip
    got: dict[str, list[dict]] = {case: [] for case in CASES}
    for _ in range(runs):
        for case, flags in CASES.items():  # alternately: the same load for each
            got[case].append(run_once(flags, hold))
    base = {k: statistics.median(r[k] for r in got["undisturbed"]) for k in ("join", "master_cpu")}
    for case, results in got.items():
        med = {k: statistics.median(r[k] for r in results) for k in results[0]}
        joins = " ".join(f"{r['join']:.2f}" for r in results)
        print(f"  {case:12s} join {joins} s (median {med['join']:.2f}, "
              f"{med['join'] / base['join']:.2f}x); master CPU {med['master_cpu']:.2f} s "
              f"({med['master_cpu'] / base['master_cpu']:.2f}x); refused lines "
              f"{med['refused_lines']:.0f}; joins retried {sum(r['retries'] for r in results)}; "
              f"stranger: {med['opened']:.0f} connections, {med['stranger_cpu']:.2f} CPU s",
              flush=True)  # fmt: skip
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
    for case in list(CASES)[1:]:
        results = got[case]
        join = statistics.median(r["join"] for r in results)
        cpu = statistics.median(r["master_cpu"] for r in results)
        key = case.replace(" ", "_")
        print(f"join_{key}_vs_undisturbed: {join / base['join']:.2f}x")
        print(f"master_cpu_{key}_vs_undisturbed: {cpu / base['master_cpu']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
