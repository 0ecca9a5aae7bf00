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
    *sorted((SRC / "windows").rglob("*.py")),
    *sorted((SRC / "augment").rglob("*.py")),
    SRC / "recipe" / "rundir.py",
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


def test_files_are_published_through_one_helper():
    """Every write-then-rename goes through _util (replaced_atomically / write_text_atomic);
    only the shard writer (several files published together) and directory publishing rename."""
    allowed = {SRC / "_util.py": 1, SRC / "sources" / "tfrecord" / "writer.py": 1}
    for path in sorted(SRC.rglob("*.py")):
        text = path.read_text()
        count = text.count("os.replace(")
        assert count <= allowed.get(path, 0), (path, count)


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


def _imports() -> dict[str, set[str]]:
    """``module -> the tfdp modules it imports`` (anywhere in it, type-checking blocks too)."""
    modules = {}
    for path in SRC.rglob("*.py"):
        parts = ["tfdp", *path.relative_to(SRC).with_suffix("").parts]
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                subs = [f"{node.module}.{alias.name}" for alias in node.names]
                targets = [s for s in subs if s in modules] or [node.module]
            else:
                continue
            graph[name] |= {t for t in targets if t in modules and t != name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (a list of modules, the first repeated last), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt, [*path, nxt])):
                return found
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start, [start])):
            return found
    return None


def test_cycle_finder_sees_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle_in_src():
    graph = _imports()
    assert "tfdp.cli.launch" in graph["tfdp.launch.__main__"]  # the graph is really read
    assert _cycle(graph) is None
