"""A cross-check's missing reference library: skipped on a developer's machine, a failure in CI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
CASE = """
import reference_stack
def test_case():
    reference_stack.ensure("tfdp_no_such_module")
"""


WHERE = [
    ({}, "1 skipped"),
    ({"CI": "true"}, "1 failed"),
    ({"TFDP_REQUIRE_REFERENCE": "1"}, "1 failed"),
]


@pytest.mark.parametrize(("env", "outcome"), WHERE)
def test_a_missing_reference_module_fails_where_required(tmp_path, env, outcome):
    (tmp_path / "test_case.py").write_text(CASE)
    base = {k: v for k, v in os.environ.items() if k not in ("CI", "TFDP_REQUIRE_REFERENCE")}
    base["PYTHONPATH"] = os.pathsep.join([str(TESTS), base.get("PYTHONPATH", "")])
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rsf", "-p", "no:cacheprovider", "-c", os.devnull,
         str(tmp_path / "test_case.py")],
        capture_output=True, text=True, env={**base, **env}, timeout=120, check=False,
    )  # fmt: skip
    assert outcome in run.stdout, run.stdout + run.stderr
    assert "tfdp_no_such_module not installed" in run.stdout + run.stderr


def test_the_reference_stack_is_the_pinned_one():
    """The cross-checks compare with the versions pyproject.toml's `reference` extra pins."""
    import importlib.metadata as md
    import re

    text = (TESTS.parent / "pyproject.toml").read_text()
    pins = dict(re.findall(r'"(torch|torchvision|timm)==([^"]+)"', text))
    assert set(pins) == {"torch", "torchvision", "timm"}
    import reference_stack

    reference_stack.ensure(*pins)
    for name, version in pins.items():
        assert md.version(name).split("+")[0] == version, name
