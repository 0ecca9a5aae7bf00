"""Run a script as N MultiWorkerMirroredStrategy workers on 127.0.0.1 (test helper)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from conftest import free_ports


def run_workers(
    script: Path,
    n: int,
    args: list[str],
    timeout: float = 240,
    cluster_env: Callable[[int, list[int]], dict[str, str]] | None = None,
) -> list[str]:
    """Start n workers of ``script`` with TF_CONFIG each; return their outputs, fail on error.

    ``cluster_env(i, ports)``, when given, is worker i's cluster environment instead of the
    TF_CONFIG of a plain ``worker`` cluster (e.g. Slurm's variables, or a TF_CONFIG with a chief).
    """
    ports = free_ports(n)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    procs = []
    for i in range(n):
        env = {
            k: v for k, v in os.environ.items() if k != "TF_CONFIG" and not k.startswith("SLURM_")
        }
        if cluster_env is None:
            env["TF_CONFIG"] = json.dumps(
                {"cluster": cluster, "task": {"type": "worker", "index": i}}
            )
        else:
            env.update(cluster_env(i, ports))
        env["TF_CPP_MIN_LOG_LEVEL"] = "2"
        env.pop("CUDA_VISIBLE_DEVICES", None)
        procs.append(
            subprocess.Popen(
                [sys.executable, str(script), *args],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    outs = []
    try:
        for i, p in enumerate(procs):
            out, _ = p.communicate(timeout=timeout)
            outs.append(out)
            if p.returncode != 0:
                raise AssertionError(f"worker {i} exited {p.returncode}:\n{out[-4000:]}")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return outs


def digits_npz(directory: Path, n: int) -> Path:
    """The first ``n`` of the bundled digits as ``directory/digits{n}.npz`` (images, labels)."""
    import numpy as np

    from tfdp.recipe.digits import load_digits

    images, labels = load_digits("all")
    path = directory / f"digits{n}.npz"
    np.savez(path, images=images[:n], labels=labels[:n])
    return path
