"""The public API in `tfdp/__init__.py`: every advertised name resolves, lazily."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import tfdp


def test_every_public_name_and_submodule_resolves():
    for name in tfdp.__all__:
        assert getattr(tfdp, name) is not None, name
    for module in (
        "augment",
        "checkpoint",
        "cli",
        "distribute",
        "errors",
        "input",
        "launch",
        "optim",
        "random",
        "recipe",
        "sources",
        "train",
        "windows",
    ):
        assert getattr(tfdp, module).__name__ == f"tfdp.{module}"
    # the names the README's Python quickstart uses
    assert callable(tfdp.distribute.make_strategy) and callable(tfdp.train.fit)
    assert tfdp.augment.RandomCrop and tfdp.ArraySource and tfdp.DistributedInput
    assert tfdp.TorchAdamW is tfdp.optim.TorchAdamW and tfdp.TimmCosine is tfdp.optim.TimmCosine


def test_import_tfdp_does_not_load_tensorflow():
    code = (
        "import sys, tfdp; tfdp.RepeatAugSampler(10, 2, 0, selected_round=0); "
        "import tfdp.recipe.dataspec, tfdp.errors, tfdp.recipe.rundir, tfdp.cli, tfdp.recipe, "
        "tfdp.cli.convert, tfdp.cli.inspect, tfdp.cli.plot, tfdp.launch, tfdp.cli.app; "
        "print('tensorflow' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "False"


ROOT = Path(__file__).resolve().parents[1]


def test_dir_shows_the_submodules_the_readme_uses():
    readme = (ROOT / "README.md").read_text()
    used = set(re.findall(r"(?<![\w./])tfdp\.([a-z_]+)", readme))
    assert {"augment", "distribute", "train", "sources", "recipe"} <= used
    assert used <= set(dir(tfdp)), used - set(dir(tfdp))


def _pyproject() -> dict:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_tested_tensorflow_and_keras_meet_the_declared_floors():
    """Every extra declares one TensorFlow and one Keras floor, the same in each extra, and the
    versions this suite runs on meet them (an upgrade of either passes; a floor above what is
    tested fails)."""
    import importlib.metadata

    def release(version: str) -> tuple[int, ...]:
        return tuple(int(p) for p in re.findall(r"\d+", version)[:3])

    installed = {
        "tensorflow": __import__("tensorflow").__version__,
        "keras": importlib.metadata.version("keras"),
    }
    declared = set()
    for extra in ("cpu", "gpu", "dev"):
        floors = {}
        for req in _pyproject()["project"]["optional-dependencies"][extra]:
            m = re.match(r"([a-z\-]+)(?:\[[a-z\-]+\])?>=([0-9.]+)", req)
            if m and m.group(1) in ("tensorflow-cpu", "tensorflow", "keras"):
                floors["keras" if m.group(1) == "keras" else "tensorflow"] = m.group(2)
        assert set(floors) == {"tensorflow", "keras"}, extra
        declared.add(tuple(sorted(floors.items())))
        for module, floor in floors.items():
            assert release(installed[module]) >= release(floor), (extra, module, installed)
    assert len(declared) == 1, declared


def test_license_file_matches_the_declared_license_and_the_package_is_typed():
    project = _pyproject()["project"]
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "Typing :: Typed" in project["classifiers"]
    assert "py.typed" in _pyproject()["tool"]["setuptools"]["package-data"]["tfdp"]
    assert (Path(tfdp.__file__).parent / "py.typed").is_file()


def test_python_m_tfdp_and_version():
    out = subprocess.run(
        [sys.executable, "-m", "tfdp", "--version"], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == f"tfdp {tfdp.__version__}"
    assert tfdp.__version__ == _pyproject()["project"]["version"]
