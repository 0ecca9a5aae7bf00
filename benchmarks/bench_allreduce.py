"""Benchmark all-reduce between two simulated machines: tfdp's strategy against torch gloo.

Two nodes of ``tests/simnet.py`` (network namespaces on a private bridge, each with its own
address; root needed, else ``--loopback`` runs both workers on 127.0.0.1), one worker each.
The worker script is ``benchmarks/_net_allreduce.py``; this script never imports TensorFlow.

1. **gloo**: ``torch.distributed`` (backend gloo, ``GLOO_SOCKET_IFNAME`` the node's interface)
   all-reducing one float32 tensor per size: the reference (skipped without torch).
2. **TensorFlow**, ``tfdp.make_strategy("multi_worker")`` (MultiWorkerMirroredStrategy, ring
   over gRPC), per size: one tensor (``1 tensor``), and a gradient-like list of 32 tensors
   all-reduced in one pack as TensorFlow's default does (``32, one pack``), in tfdp's default
   4 MiB packs (``32, 4 MiB packs``), and rounded to float16 first (``32, fp16``).
3. **A training step's communication share**: ``tfdp.train.Trainer`` on an MLP with 16 MB of
   weights, 32 examples per replica: ms per step on the two nodes against the same step under
   ``OneDeviceStrategy`` in the same process (no all-reduce): share = 1 - local / two nodes;
   with ``gradient_compression="fp16"`` too. Full mode adds the step under TensorFlow's own
   packing (``make_strategy(bytes_per_pack=0)``) and bf16 compression.

Bandwidth is the all-reduced float32 megabytes (2**20) over the best call's seconds (for two
workers a ring moves about that much each way per worker). Every figure is rank 0's.

Usage::

    .venv/bin/python benchmarks/bench_allreduce.py           # full: 1-100 MB, 8 calls each
    .venv/bin/python benchmarks/bench_allreduce.py --quick   # 4 and 32 MB, 3 calls: ~1 min

The load average is printed at the start and the end (the machine may be shared). The
headline figures are printed last, one ``name: value`` per line.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
WORKER = HERE / "_net_allreduce.py"
sys.path.insert(0, str(HERE.parent / "tests"))
from simnet import SimNet, skip_reason  # noqa: E402

PORT = 2222
FULL = {"sizes": [1, 4, 16, 64, 100], "iters": 8, "steps": 20,
        "step_variants": ["local", "default", "fp16", "bf16"]}  # fmt: skip
QUICK = {"sizes": [4, 32], "iters": 3, "steps": 6,
         "step_variants": ["local", "default", "fp16"]}  # fmt: skip
TF_CASES = ["1:default", "32:pack0", "32:default", "32:fp16"]
CASE_NAMES = {
    (1, "default"): "TF 1 tensor",
    (32, "pack0"): "TF 32, one pack",
    (32, "default"): "TF 32, 4 MiB packs",
    (32, "fp16"): "TF 32, fp16",
}


class Loopback:
    """Two "nodes" on 127.0.0.1 when network namespaces cannot be made (not root)."""

    class Node:
        address = "127.0.0.1"

        def popen(self, argv: list[str], env: dict[str, str], **kw: Any) -> subprocess.Popen:
            return subprocess.Popen(argv, env={**os.environ, **env}, **kw)

    def __init__(self) -> None:
        self.nodes = [self.Node(), self.Node()]

    def __enter__(self) -> Loopback:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def _run(net: Any, argv: list[str], env_of: Any, timeout: float = 900) -> list[str]:
    """Run ``argv`` on both nodes (node i's environment ``env_of(i)``); rank 0's output lines."""
    out = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True}
    procs = [node.popen(argv, env=env_of(i), **out) for i, node in enumerate(net.nodes)]
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=timeout)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    for i, (p, out) in enumerate(zip(procs, outs, strict=True)):
        if p.returncode != 0:
            raise RuntimeError(f"worker {i} exited {p.returncode}:\n{out[-3000:]}")
    return outs[0].splitlines()


def _records(lines: list[str], tag: str) -> list[dict[str, Any]]:
    return [json.loads(line[len(tag) + 1 :]) for line in lines if line.startswith(tag + " ")]


def _env(net: Any, loopback: bool, port: int) -> Any:
    cluster = {"worker": [f"{n.address}:{port + (i if loopback else 0)}"
                          for i, n in enumerate(net.nodes)]}  # fmt: skip

    def env_of(i: int) -> dict[str, str]:
        return {
            "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}}),
            "TF_CPP_MIN_LOG_LEVEL": "2",
            "RANK": str(i),
            "WORLD_SIZE": "2",
            "MASTER_ADDR": net.nodes[0].address,
            "MASTER_PORT": str(port + 10),
            "GLOO_SOCKET_IFNAME": "lo" if loopback else "eth0",
            # A 100 MB single-tensor all-reduce on a loaded machine delayed TensorFlow's
            # heartbeats past its 10 s default twice (the leader declared itself lost).
            "TFDP_HEARTBEAT_TIMEOUT": os.environ.get("TFDP_HEARTBEAT_TIMEOUT", "60"),
        }

    return env_of


def _load() -> str:
    return " / ".join(f"{v:.2f}" for v in os.getloadavg())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--quick", action="store_true", help="fewer sizes and calls: < 1 minute")
    ap.add_argument("--loopback", action="store_true", help="127.0.0.1, no namespaces")
    args = ap.parse_args()
    mode = QUICK if args.quick else FULL
    t0 = time.perf_counter()
    reason = None if args.loopback else skip_reason()
    loopback = args.loopback or reason is not None
    load_start = _load()
    print(f"bench_allreduce: {'quick' if args.quick else 'full'}; load average {load_start}; "
          f"{os.cpu_count()} cores; Python {sys.version.split()[0]}", flush=True)  # fmt: skip
    if reason is not None:
        print(f"  no simulated machines ({reason}): both workers on 127.0.0.1", flush=True)
    sizes = ",".join(str(s) for s in mode["sizes"])
    gloo: dict[float, float] = {}
    tf: dict[tuple[int, str, float], list[float]] = {}
    steps: dict[str, float] = {}
    with SimNet(2) if not loopback else Loopback() as net:
        where = "127.0.0.1" if loopback else ", ".join(n.address for n in net.nodes)
        print(f"  nodes: {where}", flush=True)
        env_of = _env(net, loopback, PORT)
        if importlib.util.find_spec("torch") is not None:
            lines = _run(net, [sys.executable, str(WORKER), "gloo", "--sizes", sizes,
                               "--iters", str(mode["iters"])], env_of)  # fmt: skip
            gloo = {r["mb"]: min(r["times"]) for r in _records(lines, "AR_RESULT")}
        else:
            print("  torch is not installed: no gloo reference", flush=True)
        argv = [sys.executable, str(WORKER), "tf", "--sizes", sizes, "--iters", str(mode["iters"]),
                "--variants", ",".join(TF_CASES), "--step-variants",
                ",".join(mode["step_variants"]), "--step-steps", str(mode["steps"])]  # fmt: skip
        lines = _run(net, argv, env_of)
        for r in _records(lines, "AR_RESULT"):
            tf[r["tensors"], r["variant"], r["mb"]] = r["times"]
        for r in _records(lines, "AR_STEP"):
            steps[r["variant"]] = r["ms_per_step"]
        if not args.quick:  # the step under TensorFlow's own packing: its own strategy
            argv = [sys.executable, str(WORKER), "tf", "--sizes", "1", "--iters", "1",
                    "--variants", "1:default", "--bytes-per-pack", "0", "--step-variants",
                    "default", "--step-steps", str(mode["steps"])]  # fmt: skip
            for r in _records(_run(net, argv, env_of), "AR_STEP"):
                steps["one pack"] = r["ms_per_step"]

    print("\nall-reduce of float32, two workers, MB/s = MB / best call s (median call s)")
    header = ["MB", "gloo 1 tensor"] + [CASE_NAMES[k] for k in CASE_NAMES]
    print("| " + " | ".join(header) + " |")
    print("|" + "---:|" * len(header))
    for mb in mode["sizes"]:
        row = [f"{mb:g}"]
        row.append(f"{mb / gloo[mb]:,.0f}" if mb in gloo else "-")
        for tensors, variant in CASE_NAMES:
            times = tf.get((tensors, variant, mb))
            row.append(f"{mb / min(times):,.0f} ({statistics.median(times):.3f} s)"
                       if times else "-")  # fmt: skip
        print("| " + " | ".join(row) + " |")
    print("\ntraining step, MLP of 16 MB weights, 32 examples per replica, median ms per step")
    local = steps.get("local")
    for variant, ms in steps.items():
        share = "" if variant == "local" or not local else f", communication {1 - local / ms:.0%}"
        print(f"  {variant:>9}: {ms:8.1f} ms{share}")

    big = max(mode["sizes"])
    heads: list[tuple[str, str]] = []

    def best(tensors: int, variant: str) -> float | None:
        times = tf.get((tensors, variant, big))
        return min(times) if times else None

    def ratio(name: str, slow: float | None, fast: float | None) -> None:
        if slow and fast:
            heads.append((f"{name}_{big:g}mb", f"{slow / fast:.2f}"))

    ratio("tf_1_tensor_vs_gloo", best(1, "default"), gloo.get(big))
    ratio("tf_4mib_packs_vs_gloo", best(32, "default"), gloo.get(big))
    ratio("pack_4mib_speedup", best(32, "pack0"), best(32, "default"))
    ratio("fp16_speedup", best(32, "default"), best(32, "fp16"))
    for variant in ("default", "fp16", "one pack"):
        if local and variant in steps:
            name = variant.replace(" ", "_")
            heads.append((f"step_comm_share_{name}", f"{1 - local / steps[variant]:.2f}"))
    heads += [("load_average_start", load_start.split(" / ")[0]),
              ("load_average_end", _load().split(" / ")[0]),
              ("nodes", "loopback" if loopback else "simnet"),
              ("seconds", f"{time.perf_counter() - t0:.0f}")]  # fmt: skip
    print()
    for name, value in heads:
        print(f"{name}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
