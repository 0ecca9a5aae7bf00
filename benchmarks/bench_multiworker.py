"""Benchmark multi-worker training on one machine and the ``tfdp launch`` start-up overhead.

Two measurements, each in separate processes started from this script (which
itself never imports TensorFlow):

1. Training throughput, in global samples/s, of ``tfdp.train.Trainer``
   (``steps_per_call=8``) on a 64-128-10 MLP over an in-memory ``ArraySource``
   with a fixed per-replica batch of 32 (``benchmarks/_mw_train.py``):

   * ``one_device``: ``python benchmarks/_mw_train.py --strategy one_device``,
     no launcher, no TF_CONFIG: the plain OneDeviceStrategy baseline (batch 32);
   * ``1 worker``: ``python -m tfdp.launch --workers 1 -- python
     benchmarks/_mw_train.py`` -> MultiWorkerMirroredStrategy with one worker
     (global batch 32);
   * ``2 workers``: the same with ``--workers 2`` on 127.0.0.1 (global batch 64).

   Each worker times ``--steps`` optimizer steps per round after a warm-up and
   prints one ``MW_RESULT {json}`` line; this script parses the launcher's
   ``[worker i]``-prefixed output. The best round of worker 0 (the chief) is
   reported; the workers of a synchronous job agree to within a fraction of a
   percent. On a machine with fewer cores than workers x the threads each
   wants, 2 workers measure the cost of communication and contention, not
   scaling.

2. Launcher start-up overhead: the wall time from starting to the exit of all
   workers, for two workers of a trivial script, started (a) by ``python -m
   tfdp.launch --workers 2 -- <cmd>`` and (b) by this script with
   ``subprocess.Popen``, with the same environment and TF_CONFIGs
   (``tfdp.launch.plan`` on ``tfdp.launch.free_ports``), waiting for both.
   Scripts: ``plain`` (``python -c`` printing one line, no TensorFlow) and
   ``tf`` (``benchmarks/_mw_allreduce.py``: builds MultiWorkerMirroredStrategy,
   does one all-reduce, prints, exits normally). Best of k, launcher and
   by-hand runs interleaved (the order alternates).

Every child gets ``TF_CPP_MIN_LOG_LEVEL=2`` unless already set. The training
workers build their strategy with ``make_strategy(collective_timeout=None)``:
with a timeout (tfdp's default is 600 s), TensorFlow 2.21 starts one detached
thread per collective op that sleeps for the whole timeout, about 6 threads
per optimizer step here, and a full run dies within a minute when the
machine runs out of thread ids (``--collective-timeout 600`` reproduces it;
the table's ``threads`` column shows the count).

Usage::

    .venv/bin/python benchmarks/bench_multiworker.py          # full, 5-6 minutes
    .venv/bin/python benchmarks/bench_multiworker.py --quick  # one short run of each

``--quick`` has a 55 s budget: when the machine is loaded, the 2-worker
training and then the TensorFlow launcher timing are skipped if their
estimated cost no longer fits, and the ``skipped:`` line names them.

The headline figures are printed last, one ``name: value`` per line.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib.metadata as _md
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfdp.launch import free_ports, plan

HERE = Path(__file__).resolve().parent
TRAIN_SCRIPT = HERE / "_mw_train.py"
ALLREDUCE_SCRIPT = HERE / "_mw_allreduce.py"
PY = sys.executable

PER_REPLICA = 32
STEPS_PER_CALL = 8
EXAMPLES = 131_072  # 2,048 steps per epoch at 2 workers x 32

FULL = {
    "warmup": 64,
    "steps": 1024,
    "rounds": 5,
    "train_repeats": 2,
    "k_plain": 10,
    "k_tf": 4,
    "two_workers": 1,
}
# --quick runs everything in about 50 s on the 2-core machine when TensorFlow imports in 3-4 s.
# When other processes load it more (TensorFlow then imports in 10-20 s), everything would take
# about 110 s, so --quick has a time budget: the 2-worker training run and then the TensorFlow
# launcher timing (the two parts after the baselines, 2 and 4 TensorFlow processes) run only
# when their estimated cost fits in what is left of it, and the output names what was skipped.
QUICK = {
    "warmup": 16,
    "steps": 128,
    "rounds": 2,
    "train_repeats": 1,
    "k_plain": 3,
    "k_tf": 1,
    "two_workers": 1,
}
QUICK_BUDGET_S = 55.0  # a little room for estimates that run over
RESERVE_S = 4.0  # the plain launcher timing and the import context, which always run
LEAD = 16
TIMEOUT = 900.0

RESULT_RE = re.compile(r"^(?:\[worker (\d+)\] )?MW_RESULT (\{.*\})\s*$")
PLAIN_CODE = "import os; print('MW_PLAIN worker', os.environ['TFDP_WORKER_INDEX'])"


class Budget:
    """Wall-clock budget for --quick: may a part estimated at ``cost`` seconds still run?"""

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self.t0 = time.perf_counter()
        self.skipped: list[str] = []

    def allows(self, name: str, cost: float | None, reserve: float = 0.0) -> bool:
        if self.seconds is None or cost is None:
            return True
        elapsed = time.perf_counter() - self.t0
        if elapsed + cost + reserve <= self.seconds:
            return True
        self.skipped.append(name)
        print(
            f"  SKIPPED {name}: {elapsed:.0f} s elapsed + about {cost:.0f} s estimated"
            + (f" + {reserve:.0f} s reserved" if reserve else "")
            + f" > the {self.seconds:.0f} s budget (the machine is slow or loaded now; "
            "run without --quick, or with --budget 0, to measure it)",
            flush=True,
        )
        return False


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return env


def _version(*names: str) -> str:
    for name in names:
        try:
            return _md.version(name)
        except _md.PackageNotFoundError:
            continue
    return "?"


def _tail(text: str, n: int = 40) -> str:
    return "\n".join(text.splitlines()[-n:])


def _run(argv: list[str], env: dict[str, str]) -> tuple[int, str, float]:
    """Run ``argv`` to completion, output captured; (return code, output, wall seconds)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        argv,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        out, _ = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)  # the launcher forwards it to its workers
        try:
            out, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        raise RuntimeError(
            f"timed out after {TIMEOUT:g}s: {' '.join(argv)}\n{_tail(out)}"
        ) from None
    return proc.returncode, out, time.perf_counter() - t0


# --------------------------------------------------------------------------- (1) training
@dataclass
class TrainConfig:
    name: str
    launcher_workers: int | None  # None: run the worker script directly, no launcher
    strategy: str
    results: list[dict[str, Any]] = field(default_factory=list)  # chief's MW_RESULT per run
    spread: list[float] = field(default_factory=list)  # max relative gap between workers
    walls: list[float] = field(default_factory=list)

    def argv(self, mode: dict[str, int]) -> list[str]:
        worker = [
            PY,
            str(TRAIN_SCRIPT),
            "--strategy",
            self.strategy,
            "--batch-size",
            str(PER_REPLICA),
            "--steps-per-call",
            str(STEPS_PER_CALL),
            "--examples",
            str(EXAMPLES),
            "--warmup",
            str(mode["warmup"]),
            "--lead",
            str(LEAD),
            "--steps",
            str(mode["steps"]),
            "--rounds",
            str(mode["rounds"]),
        ]
        if mode.get("collective_timeout") is not None and self.strategy != "one_device":
            worker += ["--collective-timeout", str(mode["collective_timeout"])]
        if self.launcher_workers is None:
            return worker
        return [PY, "-m", "tfdp.launch", "--workers", str(self.launcher_workers), "--", *worker]

    @property
    def rates(self) -> list[float]:
        return [r for res in self.results for r in res["rounds_samples_per_s"]]

    @property
    def best(self) -> float:
        return max(self.rates) if self.rates else float("nan")

    @property
    def median(self) -> float:
        return statistics.median(self.rates) if self.rates else float("nan")


def run_train(cfg: TrainConfig, mode: dict[str, int], env: dict[str, str]) -> None:
    code, out, wall = _run(cfg.argv(mode), env)
    found: dict[int, dict[str, Any]] = {}
    for line in out.splitlines():
        m = RESULT_RE.match(line)
        if m:
            found[int(m.group(1) or 0)] = json.loads(m.group(2))
    expected = cfg.launcher_workers or 1
    if code != 0 or sorted(found) != list(range(expected)):
        raise RuntimeError(
            f"{cfg.name}: exit status {code}, results from workers {sorted(found)} "
            f"(expected {expected}):\n{_tail(out)}"
        )
    chief = found[0]
    gaps = [
        abs(a - b) / b
        for res in found.values()
        for a, b in zip(res["rounds_samples_per_s"], chief["rounds_samples_per_s"], strict=True)
    ]
    cfg.results.append(chief)
    cfg.spread.append(max(gaps))
    cfg.walls.append(wall)
    rounds = " ".join(f"{r:,.0f}" for r in chief["rounds_samples_per_s"])
    print(
        f"  {cfg.name:<10} run {len(cfg.results)}: samples/s per round {rounds}  "
        f"(process wall {wall:.1f} s; import {chief['import_s']:.1f} s, strategy "
        f"{chief['strategy_s']:.1f} s, set-up + warm-up {chief['setup_warmup_s']:.1f} s)",
        flush=True,
    )


# --------------------------------------------------------------------------- (2) launcher
@dataclass
class LaunchCase:
    name: str
    command: list[str]
    marker: str  # every worker prints a line containing this
    launcher: list[float] = field(default_factory=list)
    by_hand: list[float] = field(default_factory=list)


def _check_outputs(case: LaunchCase, how: str, codes: list[int], out: str) -> None:
    if any(codes) or out.count(case.marker) != 2:
        raise RuntimeError(
            f"{case.name} ({how}): exit status {codes}, "
            f"{out.count(case.marker)} of 2 workers reported:\n{_tail(out)}"
        )


def time_launcher(case: LaunchCase, env: dict[str, str]) -> float:
    argv = [PY, "-m", "tfdp.launch", "--workers", "2", "--", *case.command]
    code, out, wall = _run(argv, env)
    _check_outputs(case, "launcher", [code], out)
    return wall


def time_by_hand(case: LaunchCase, env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    specs = plan(case.command, free_ports(2), env=env)
    procs = [
        subprocess.Popen(
            spec.argv,
            env=spec.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for spec in specs
    ]
    outs = [""] * len(procs)

    def collect(i: int) -> None:
        try:
            outs[i], _ = procs[i].communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            outs[i], _ = procs[i].communicate()

    threads = [threading.Thread(target=collect, args=(i,)) for i in range(len(procs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    _check_outputs(case, "by hand", [p.returncode for p in procs], "".join(outs))
    return wall


def best_of(k: int, argv: list[str], env: dict[str, str]) -> float:
    times = []
    for _ in range(k):
        code, out, wall = _run(argv, env)
        if code != 0:
            raise RuntimeError(f"{' '.join(argv)}: exit status {code}\n{_tail(out)}")
        times.append(wall)
    return min(times)


# --------------------------------------------------------------------------- main
def _fmt(x: float, spec: str) -> str:
    return "n/a" if x != x else format(x, spec)  # nan


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument(
        "--quick",
        action="store_true",
        help=f"short runs: {QUICK['steps']} timed steps x {QUICK['rounds']} rounds, "
        f"one run per configuration, launcher timings best of "
        f"{QUICK['k_plain']} (plain) / {QUICK['k_tf']} (TF)",
    )
    ap.add_argument("--steps", type=int, default=None, help="timed optimizer steps per round")
    ap.add_argument("--rounds", type=int, default=None, help="timed rounds per training run")
    ap.add_argument(
        "--train-repeats",
        type=int,
        default=None,
        help="training runs (processes) per configuration, interleaved",
    )
    ap.add_argument("--k-plain", type=int, default=None, help="repeats, plain launcher timing")
    ap.add_argument("--k-tf", type=int, default=None, help="repeats, TensorFlow launcher timing")
    ap.add_argument(
        "--skip-two-workers",
        action="store_true",
        help="skip the 2-worker training run (two TensorFlow processes)",
    )
    ap.add_argument(
        "--collective-timeout",
        type=float,
        default=None,
        metavar="S",
        help="pass make_strategy(collective_timeout=S) to the training workers "
        "(default: none; see the note on threads in docs/benchmarks.md)",
    )
    ap.add_argument("--part", choices=["all", "train", "launch"], default="all")
    ap.add_argument(
        "--budget",
        type=float,
        default=None,
        metavar="S",
        help=f"skip the 2-worker training and then the TensorFlow launcher timing "
        f"when they would not finish within S seconds of the start (default: "
        f"{QUICK_BUDGET_S:g} with --quick, none otherwise; 0: none)",
    )
    args = ap.parse_args(argv)
    budget_s = args.budget if args.budget is not None else (QUICK_BUDGET_S if args.quick else None)
    budget = Budget(budget_s or None)
    mode = dict(QUICK if args.quick else FULL)
    for key in ("steps", "rounds", "train_repeats", "k_plain", "k_tf"):
        if getattr(args, key) is not None:
            mode[key] = getattr(args, key)
    if args.skip_two_workers:
        mode["two_workers"] = 0
    mode["collective_timeout"] = args.collective_timeout
    if mode["steps"] % STEPS_PER_CALL or mode["steps"] < STEPS_PER_CALL:
        ap.error(f"--steps must be a positive multiple of {STEPS_PER_CALL}")
    if LEAD + mode["steps"] > EXAMPLES // (2 * PER_REPLICA):
        ap.error(f"--steps must be at most {EXAMPLES // (2 * PER_REPLICA) - LEAD}")
    env = _child_env()
    cores = os.cpu_count() or 0
    wall0 = time.perf_counter()

    print(
        "bench_multiworker: tfdp Trainer samples/s at 1 and 2 local workers; "
        "tfdp launch start-up overhead"
    )
    print(
        f"date {_dt.date.today()}  python {platform.python_version()}  "
        f"tensorflow {_version('tensorflow', 'tensorflow-cpu')}  keras {_version('keras')}  "
        f"tfdp {_version('tfdp')}"
    )
    print(f"machine {platform.machine()} {platform.system()}, os.cpu_count() = {cores}")
    load = os.getloadavg()
    print(
        f"load average at start: {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} "
        "(the machine may be shared with other processes)"
    )
    print(
        f"mode: {'--quick' if args.quick else 'full'}: {mode}, time budget "
        f"{f'{budget.seconds:g} s' if budget.seconds else 'none'}"
    )
    if cores <= 2:
        print(
            f"NOTE: this machine has {cores} cores. Two workers share them (and TensorFlow "
            "gives each process a thread pool sized for the whole machine), so the 2-worker "
            "figure measures the cost of communication and contention, not scaling."
        )
    print(flush=True)

    configs = [
        TrainConfig("one_device", None, "one_device"),
        TrainConfig("1 worker", 1, "auto"),
        TrainConfig("2 workers", 2, "auto"),
    ]
    if not mode["two_workers"]:
        configs.pop()
        print("NOTE: --skip-two-workers: no 2-worker training run")
    by_name = {c.name: c for c in configs}
    if args.part in ("all", "train"):
        print(
            f"(1) training: MLP 64-128-10, {PER_REPLICA} examples per replica per step, "
            f"Trainer(steps_per_call={STEPS_PER_CALL}), {EXAMPLES:,} in-memory examples; "
            f"{mode['steps']} timed steps x {mode['rounds']} rounds per run after a "
            f"{mode['warmup']}-step warm-up; {mode['train_repeats']} run(s) per configuration"
        )
        for cfg in configs:
            print(f"  {cfg.name:<10} $ {' '.join(cfg.argv(mode)).replace(PY, 'python')}")
        for _ in range(mode["train_repeats"]):
            for cfg in configs:
                if cfg.launcher_workers == 2 and by_name["1 worker"].walls:
                    # Two processes on the same cores, and a slower step: ~2.5x one worker.
                    cost = 2.5 * by_name["1 worker"].walls[-1]
                    if not budget.allows("2-worker training", cost, RESERVE_S):
                        continue
                run_train(cfg, mode, env)
        print()
    configs = [c for c in configs if c.results]

    plain = LaunchCase("plain", [PY, "-c", PLAIN_CODE], "MW_PLAIN worker")
    tfcase = LaunchCase("tf", [PY, str(ALLREDUCE_SCRIPT)], "MW_ALLREDUCE task")
    cases = [(plain, mode["k_plain"]), (tfcase, mode["k_tf"])]
    import_launch = import_pass = float("nan")
    if args.part in ("all", "launch"):
        print(
            "(2) launcher start-up: 2 workers, start to exit of both; launcher "
            "(python -m tfdp.launch --workers 2 -- CMD) vs by hand (subprocess.Popen, same "
            "TF_CONFIGs and environment)"
        )
        one_w = by_name["1 worker"].results
        for case, k in cases:
            if case is tfcase and one_w:
                # Each repeat starts two TensorFlow workers twice (launcher, by hand). Measured
                # here: 3x to 7x (typically ~4x) the 1-worker run's TensorFlow import time.
                cost = k * 4.0 * one_w[-1]["import_s"]
                if not budget.allows("TensorFlow launcher timing", cost):
                    continue
            print(
                f"  {case.name:<5} CMD = {' '.join(case.command).replace(PY, 'python')}  "
                f"(best of {k})"
            )
            for rep in range(k):
                pair = [("launcher", time_launcher), ("by hand", time_by_hand)]
                for how, fn in pair if rep % 2 == 0 else pair[::-1]:
                    (case.launcher if how == "launcher" else case.by_hand).append(fn(case, env))
                print(
                    f"    rep {rep + 1}: launcher {case.launcher[-1]:.3f} s, by hand "
                    f"{case.by_hand[-1]:.3f} s",
                    flush=True,
                )
        cases = [(c, k) for c, k in cases if c.launcher]
        k_ctx = max(3, mode["k_plain"])
        import_launch = best_of(k_ctx, [PY, "-c", "import tfdp.launch"], env)
        import_pass = best_of(k_ctx, [PY, "-c", "pass"], env)
        print()

    # ------------------------------------------------------------------ tables
    by = {c.name: c for c in configs}
    base, one, two = (
        by[n].best if n in by else float("nan") for n in ("one_device", "1 worker", "2 workers")
    )
    if args.part in ("all", "train"):
        print(
            "training throughput (global samples/s: global batch x optimizer steps / wall s; "
            "best and median over all timed rounds of worker 0)"
        )
        print(
            f"{'configuration':<13} {'launcher':<9} {'strategy':<28} {'replicas':>8} "
            f"{'global batch':>12} {'best samples/s':>14} {'median':>8} {'steps/s':>8} "
            f"{'ms/step':>8} {'CPU ms/step':>11} {'threads':>7} {'vs one_device':>13}"
        )
        for c in configs:
            res = c.results[0]
            steps_s = c.best / res["global_batch"]
            cpu = statistics.median(v for r in c.results for v in r["cpu_ms_per_step"])
            threads = max(r["os_threads"] for r in c.results)
            print(
                f"{c.name:<13} {'no' if c.launcher_workers is None else 'yes':<9} "
                f"{res['strategy']:<28} {res['replicas']:>8} {res['global_batch']:>12} "
                f"{c.best:>14,.0f} {c.median:>8,.0f} {steps_s:>8,.0f} "
                f"{1e3 / steps_s:>8.2f} {cpu:>11.2f} {threads:>7,} {c.best / base:>12.2f}x"
            )
        spread = max(s for c in configs for s in c.spread)
        print(
            "(steps/s and ms/step from the best round; CPU ms/step: worker 0's process CPU "
            "time per step, all threads, median round; threads: worker 0's OS threads at the "
            "end, most of any run; the workers' own rates differed by at most "
            f"{100 * spread:.2f}%)"
        )
        timeout = mode["collective_timeout"]
        print(
            f"multi-worker runs: make_strategy(collective_timeout={timeout}); "
            + (
                "no per-collective timer threads"
                if timeout is None
                else f"TensorFlow starts one thread per collective op that sleeps {timeout:g} s"
            )
        )
        if "2 workers" in by:
            t1 = 1e3 * PER_REPLICA / one
            t2 = 1e3 * 2 * PER_REPLICA / two
            print(
                f"per optimizer step: 1 worker {t1:.2f} ms, 2 workers {t2:.2f} ms "
                f"(+{t2 - t1:.2f} ms: twice the examples, on the same {cores} cores, plus "
                "cross-worker all-reduces over gRPC: the gradients and the loss every step, "
                "the stop flag every call); per worker, 2 workers process "
                f"{two / 2:,.0f} samples/s each vs {one:,.0f} for 1 worker"
            )
        print()

    lt = {}
    if args.part in ("all", "launch"):
        print("launcher start-up overhead (2 workers, seconds from start to both exited)")
        print(
            f"{'script':<7} {'k':>3} {'launcher best':>13} {'by hand best':>12} "
            f"{'overhead s':>10} {'ratio':>7} {'launcher median':>15} {'by hand median':>14}"
        )
        for case, k in cases:
            lb, hb = min(case.launcher), min(case.by_hand)
            lt[case.name] = (lb, hb)
            print(
                f"{case.name:<7} {k:>3} {lb:>13.3f} {hb:>12.3f} {lb - hb:>+10.3f} "
                f"{lb / hb:>6.2f}x {statistics.median(case.launcher):>15.3f} "
                f"{statistics.median(case.by_hand):>14.3f}"
            )
        for case, k in cases:
            diffs = [a - b for a, b in zip(case.launcher, case.by_hand, strict=True)]
            slower = sum(d > 0 for d in diffs)
            print(
                f"  {case.name}: launcher minus by hand within each repeat: median "
                f"{statistics.median(diffs):+.3f} s, range {min(diffs):+.3f} .. "
                f"{max(diffs):+.3f} s; the launcher was slower in {slower} of {k}"
                + (" (one repeat: noise can swamp a TensorFlow start-up)" if k == 1 else "")
            )
        print(
            f"context: python -c 'import tfdp.launch' {import_launch:.3f} s, python -c 'pass' "
            f"{import_pass:.3f} s (best of {max(3, mode['k_plain'])}): the launcher's own "
            f"interpreter start-up and imports, about {import_launch - import_pass:.3f} s "
            "above a bare interpreter"
        )
        print()

    load = os.getloadavg()
    print(
        f"load average at end: {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}; "
        f"wall time {time.perf_counter() - wall0:.0f} s"
    )
    print()

    head: list[tuple[str, str]] = []
    if args.part in ("all", "train"):
        head += [
            ("one_device_samples_per_s", f"{base:.0f}"),
            ("one_worker_samples_per_s", f"{one:.0f}"),
            ("two_workers_samples_per_s", _fmt(two, ".0f")),
            ("two_vs_one_worker_ratio", _fmt(two / one, ".2f")),
            ("one_worker_vs_one_device_ratio", f"{one / base:.2f}"),
            ("two_workers_vs_one_device_ratio", _fmt(two / base, ".2f")),
        ]
    for name in ("tf", "plain"):
        if name not in lt and args.part in ("all", "launch"):
            head += [
                (f"{k}_{name}", "n/a")
                for k in (
                    "launcher_s",
                    "by_hand_s",
                    "launcher_overhead_s",
                    "launcher_overhead_ratio",
                )
            ]
        if name in lt:
            lb, hb = lt[name]
            head += [
                (f"launcher_s_{name}", f"{lb:.3f}"),
                (f"by_hand_s_{name}", f"{hb:.3f}"),
                (f"launcher_overhead_s_{name}", f"{lb - hb:.3f}"),
                (f"launcher_overhead_ratio_{name}", f"{lb / hb:.2f}"),
            ]
    head.append(("cpu_count", str(cores)))
    head.append(("skipped", ", ".join(budget.skipped) or "none"))
    for name, value in head:
        print(f"{name}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
