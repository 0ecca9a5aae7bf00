"""Call timm in a process of its own (test helper; see timm_side.py for why).

Example (in a test)::

    lists = timm_ref.call("repeat_aug_lists", [(1000, 8, 3, 256, 0, 0)])
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import reference_stack

SIDE = Path(__file__).resolve().parent / "timm_side.py"


def skip_unless_available() -> None:
    """Skip (or, where the reference stack is required, fail) the test when timm is absent."""
    reference_stack.ensure("torch", "torchvision", "timm")


def call(
    function: str, *args: Any, timeout: float = 300, side: str = "timm_side", **kwargs: Any
) -> Any:
    """``<side>.<function>(*args, **kwargs)`` run in a fresh interpreter; its result.

    ``side`` names a module of tests/ written as timm_side.py is (its ``main``
    reads the call pickled on stdin): timm_side, or timm_models_side.
    """
    skip_unless_available()
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run(
        [sys.executable, str(SIDE.with_name(f"{side}.py"))],
        input=pickle.dumps((function, args, kwargs)),
        capture_output=True,
        timeout=timeout,
        env=env,
        check=False,
    )
    if proc.returncode != 0:
        raise AssertionError(
            f"{side}.{function} failed ({proc.returncode}):\n"
            + proc.stderr.decode(errors="replace")[-3000:]
        )
    return pickle.loads(proc.stdout)
