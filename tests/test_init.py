"""The public API in `tfdp/__init__.py`: every advertised name resolves, lazily."""

from __future__ import annotations

import subprocess
import sys

import tfdp


def test_every_public_name_and_submodule_resolves():
    for name in tfdp.__all__:
        assert getattr(tfdp, name) is not None, name
    for module in (
        "augment",
        "checkpoint",
        "datasets",
        "dataspec",
        "distribute",
        "errors",
        "input",
        "launch",
        "models",
        "rundir",
        "sources",
        "train",
    ):
        assert getattr(tfdp, module).__name__ == f"tfdp.{module}"
    # the names the README's Python quickstart uses
    assert callable(tfdp.distribute.make_strategy) and callable(tfdp.train.fit)
    assert tfdp.augment.RandomCrop and tfdp.ArraySource and tfdp.DistributedInput


def test_import_tfdp_does_not_load_tensorflow():
    code = (
        "import sys, tfdp; tfdp.RepeatAugSampler(10, 2, 0, selected_round=0); "
        "import tfdp.dataspec, tfdp.errors, tfdp.rundir, tfdp.cli_tools; "
        "print('tensorflow' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "False"
