"""The public API in `tfdp/__init__.py`: every advertised name resolves, lazily."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

import tfdp

#: The packages whose names load on first use (through tfdp._lazy, the one helper).
LAZY_PACKAGES = ("tfdp", "tfdp.augment", "tfdp.sources", "tfdp.distribute", "tfdp.models")


def test_every_public_name_resolves():
    for name in tfdp.__all__:
        assert getattr(tfdp, name) is not None, name
    # the names the README's Python quickstart uses
    assert callable(tfdp.distribute.make_strategy) and callable(tfdp.train.fit)
    assert tfdp.augment.RandomCrop and tfdp.ArraySource and tfdp.DistributedInput
    assert tfdp.TorchAdamW is tfdp.optim.TorchAdamW and tfdp.TimmCosine is tfdp.optim.TimmCosine


def test_lazy_packages_load_each_name_once_and_list_them():
    """One helper (tfdp._lazy) for every lazy package: each public name resolves and is then an
    attribute of the package (the hook runs once per name), dir() lists the public names, an
    unknown name is the usual AttributeError."""
    for package in LAZY_PACKAGES:
        module = importlib.import_module(package)
        assert module.__getattr__.__module__ == "tfdp._lazy", package
        assert module.__dir__.__module__ == "tfdp._lazy", package
        assert set(module.__all__) <= set(dir(module)), package
        for name in module.__all__:
            value = getattr(module, name)
            assert vars(module)[name] is value, (package, name)
        with pytest.raises(AttributeError, match=f"^module '{package}' has no attribute 'nope'$"):
            module.nope  # noqa: B018


def test_tfdp_reaches_every_top_level_module_by_attribute():
    top = {
        p.stem
        for p in Path(tfdp.__file__).parent.iterdir()
        if (p.suffix == ".py" or (p / "__init__.py").is_file()) and not p.name.startswith("_")
    }
    assert "models" in top and "losses" in top
    assert set(dir(tfdp)) == {*tfdp.__all__, *top}
    for name in top:
        assert getattr(tfdp, name).__name__ == f"tfdp.{name}"


def test_import_tfdp_does_not_load_tensorflow():
    """Nor do the other lazy packages, their dir(), or a lazy name whose module is NumPy's only
    (loaded on first access, then an attribute of the package)."""
    code = (
        "import sys, tfdp; tfdp.RepeatAugSampler(10, 2, 0, selected_round=0); "
        "import tfdp.recipe.dataspec, tfdp.errors, tfdp.recipe.rundir, tfdp.cli, tfdp.recipe, "
        "tfdp.cli.convert, tfdp.cli.inspect, tfdp.cli.plot, tfdp.launch, tfdp.cli.app; "
        f"import {', '.join(LAZY_PACKAGES)}; "
        f"[dir(sys.modules[p]) for p in {LAZY_PACKAGES!r}]; "
        "before = 'ArraySource' in vars(tfdp); tfdp.ArraySource; "
        "print(before, 'ArraySource' in vars(tfdp), 'tensorflow' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "False True False"


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
