"""The reference stack the cross-checks compare with (torch, torchvision, timm, keras-hub).

A cross-check against a library that is not installed proves nothing, so it must never pass
silently: where the stack is required (``CI=true``, or ``TFDP_REQUIRE_REFERENCE=1``, which
scripts/run-tests.sh sets after installing it) a missing module fails the test; elsewhere (a
developer's plain ``pytest`` without it) the test is skipped, saying what to install.

Example (in a test)::

    torch = reference_stack.need("torch")
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from types import ModuleType

import pytest

INSTALL = "bash scripts/setup.sh --tests (tfdp[reference] and tfdp[models])"


def required() -> bool:
    """Whether a missing reference module fails the run instead of skipping."""
    return os.environ.get("CI", "").lower() in ("1", "true") or (
        os.environ.get("TFDP_REQUIRE_REFERENCE") == "1"
    )


def available(*modules: str) -> bool:
    """Whether every module is installed (found, not imported: timm stays out of this process)."""
    return all(importlib.util.find_spec(m) is not None for m in modules)


def ensure(*modules: str) -> None:
    """Skip (or, where required, fail) the calling test unless every module is installed."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if not missing:
        return
    message = f"{', '.join(missing)} not installed: no cross-check (install with {INSTALL})"
    if required():
        pytest.fail(f"{message}; required here (CI or TFDP_REQUIRE_REFERENCE=1)", pytrace=False)
    pytest.skip(message, allow_module_level=True)


def need(module: str) -> ModuleType:
    """``module`` imported, or the calling test skipped / failed as :func:`ensure` says."""
    ensure(module)
    return importlib.import_module(module)
