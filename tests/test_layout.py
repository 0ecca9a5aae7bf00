"""The layout of issue 11: one copy of each helper, packages that keep their public names."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "tfdp"
#: The modules i11core owns (cli/, recipe/, train/ are checked by their owners' tests).
OWNED = [
    SRC / "_util.py",
    SRC / "seeding.py",
    SRC / "indices.py",
    SRC / "input.py",
    SRC / "windowed_input.py",
    SRC / "augment.py",
    SRC / "rundir.py",
    *sorted((SRC / "sources").rglob("*.py")),
]


def _functions(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    return [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]


def test_no_helper_is_defined_twice():
    counts = Counter(name for path in OWNED for name in _functions(path))
    assert {name: n for name, n in counts.items() if n > 1} == {}


def test_shared_helpers_have_one_home():
    for path in OWNED:
        if path.name == "_util.py":
            continue
        text = path.read_text()
        assert "AutoShardPolicy.OFF" not in text, path  # _util.deterministic_unsharded
        assert ".tmp-" not in text, path  # _util.temp_name / write_text_atomic
        assert "def _check_int" not in text and "def check_int" not in text, path


def test_tfrecord_package_keeps_its_public_names():
    import tfdp.sources.tfrecord as tfr

    for name in ("MANIFEST_SUFFIX", "TFRecordSource", "read_manifest", "write_tfrecords"):
        assert name in tfr.__all__ and getattr(tfr, name) is not None
    assert tfr.MANIFEST_SUFFIX == ".manifest.json"
    from tfdp.sources import TFRecordSource, write_tfrecords

    assert TFRecordSource is tfr.TFRecordSource and write_tfrecords is tfr.write_tfrecords
    assert {p.stem for p in (SRC / "sources" / "tfrecord").glob("*.py")} == {
        "__init__",
        "manifest",
        "schema",
        "stream",
        "writer",
    }
