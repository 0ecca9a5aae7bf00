"""Call timm in a process of its own (test helper; see timm_side.py for why).

Example (in a test)::

    lists = timm_ref.call("repeat_aug_lists", [(1000, 8, 3, 256, 0, 0)])
"""

from __future__ import annotations

import importlib.util
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

SIDE = Path(__file__).resolve().parent / "timm_side.py"


def available() -> bool:
    """Whether timm (and torchvision, which it imports) can be imported, without importing them."""
    return all(importlib.util.find_spec(m) is not None for m in ("torch", "torchvision", "timm"))


def skip_unless_available() -> None:
    """Skip the calling test when timm is not installed."""
    if not available():
        pytest.skip("timm (with torch and torchvision) is not installed: no timm reference check")


def call(function: str, *args: Any, timeout: float = 300, **kwargs: Any) -> Any:
    """``timm_side.<function>(*args, **kwargs)`` run in a fresh interpreter; its result."""
    skip_unless_available()
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run(
        [sys.executable, str(SIDE)],
        input=pickle.dumps((function, args, kwargs)),
        capture_output=True,
        timeout=timeout,
        env=env,
        check=False,
    )
    if proc.returncode != 0:
        raise AssertionError(
            f"timm_side.{function} failed ({proc.returncode}):\n"
            + proc.stderr.decode(errors="replace")[-3000:]
        )
    return pickle.loads(proc.stdout)
