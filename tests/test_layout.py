"""The layout: one copy of each helper, no import cycle, `__all__` on the public modules only,
and docs/architecture.md naming every module."""

from __future__ import annotations

import ast
import importlib
import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "tfdp"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
#: The modules i11core owns (cli/, recipe/, train/ are checked by their owners' tests).
OWNED = [
    SRC / "_util.py",
    SRC / "seeding.py",
    SRC / "indices.py",
    *sorted((SRC / "input").rglob("*.py")),
    *sorted((SRC / "samplers").rglob("*.py")),
    *sorted((SRC / "windows").rglob("*.py")),
    *sorted((SRC / "augment").rglob("*.py")),
    SRC / "recipe" / "rundir.py",
    *sorted((SRC / "sources").rglob("*.py")),
]


def _functions(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    return [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]


def test_no_helper_is_defined_twice():
    # A dunder function is its module's own hook (PEP 562 and the like), not a helper.
    counts = Counter(
        name for path in OWNED for name in _functions(path) if not name.startswith("__")
    )
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


def _modules() -> dict[str, Path]:
    """``dotted name -> file`` of every module of tfdp (a package by its ``__init__.py``)."""
    modules = {}
    for path in SRC.rglob("*.py"):
        parts = ["tfdp", *path.relative_to(SRC).with_suffix("").parts]
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _imports() -> dict[str, set[str]]:
    """``module -> the tfdp modules it imports`` (anywhere in it, type-checking blocks too)."""
    modules = _modules()
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


# -- public modules ---------------------------------------------------------------------------
def _section(title: str) -> str:
    return ARCHITECTURE.read_text().split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def _listed_public() -> set[str]:
    """The modules docs/architecture.md's "Public modules" list names (its list only)."""
    items = _section("Public modules").split("\n\n")[1]
    assert items.startswith("- "), items
    return set(re.findall(r"`(tfdp(?:\.\w+)*)`", items))


def _has_all(path: Path) -> bool:
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        else:
            continue
        if "__all__" in [getattr(t, "id", None) for t in targets]:
            return True
    return False


def _gathers(init: Path) -> bool:
    """Whether a package's ``__init__`` binds anything (more than its docstring)."""
    body = ast.parse(init.read_text()).body
    return any(
        not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))
        and not (isinstance(n, ast.ImportFrom) and n.module == "__future__")
        for n in body
    )


def _states_a_protocol(path: Path) -> bool:
    return any(
        isinstance(node, ast.ClassDef)
        and any(getattr(b, "id", getattr(b, "attr", None)) == "Protocol" for b in node.bases)
        for node in ast.walk(ast.parse(path.read_text()))
    )


def test_all_is_on_the_public_modules_only():
    listed = _listed_public()
    assert {"tfdp", "tfdp.augment", "tfdp.errors", "tfdp.sources.base"} <= listed  # really read
    with_all = {name for name, path in _modules().items() if _has_all(path)}
    assert sorted(with_all - listed) == [] and sorted(listed - with_all) == []


def test_the_public_modules_follow_the_rule():
    """The facade and every package that gathers names, the top-level modules, the contracts;
    nothing private."""
    modules, listed = _modules(), _listed_public()
    assert listed <= set(modules), listed - set(modules)
    private = {name for name in modules if any(p.startswith("_") for p in name.split("."))}
    assert "tfdp.__main__" in private and "tfdp.augment._fast" in private
    assert sorted(listed & private) == []
    packages = {name for name, path in modules.items() if path.name == "__init__.py"} - private
    assert {name for name in packages if _gathers(modules[name])} == listed & packages
    assert "tfdp.windows" in packages - listed  # its __init__ is its docstring only
    top = {name for name in modules if name.count(".") == 1} - packages - private
    assert top <= listed, top - listed
    contracts = listed - packages - top
    assert "tfdp.train.parts" in contracts
    assert [name for name in contracts if not _states_a_protocol(modules[name])] == []


def test_users_are_shown_imports_from_public_modules_only():
    """The README, the guide and the examples import from public modules (code lines only)."""
    texts = [
        ROOT / "README.md",
        ROOT / "docs" / "guide.md",
        *sorted((ROOT / "examples").glob("*.py")),
    ]
    pattern = re.compile(r"^\s*(?:from\s+(tfdp[\w.]*)\s+import\b|import\s+(tfdp[\w.]*))", re.M)
    imported = {a or b for path in texts for a, b in pattern.findall(path.read_text())}
    assert {"tfdp", "tfdp.train", "tfdp.distribute", "tfdp.recipe", "tfdp.sources"} <= imported
    assert sorted(imported - _listed_public()) == []


def test_every_public_name_resolves():
    for name in sorted(_listed_public()):
        module = importlib.import_module(name)
        missing = [n for n in module.__all__ if getattr(module, n, None) is None]
        assert missing == [], name
        assert len(set(module.__all__)) == len(module.__all__), name


# -- docs/architecture.md ---------------------------------------------------------------------
def _layout_rows() -> dict[str, str]:
    """The Layout table: ``path under src/tfdp (a folder ends in /) -> its row``."""
    rows = {}
    for line in _section("Layout").splitlines():
        if line.startswith("| `"):
            first = line.split(" | ", 1)[0].strip("| `")
            rows[first.removeprefix("tfdp/")] = line
    return rows


def _named_in(rows: dict[str, str], rel: str) -> bool:
    """Whether a row names the module at ``rel``: its own row, or its folder's row naming its
    subfolders (`dataspec/`) and its stem (`pipeline` or `keras_fit.py`)."""
    keys = [k for k in rows if k == rel or (k.endswith("/") and rel.startswith(k))]
    if not keys:
        return False
    key = max(keys, key=len)
    *folders, name = rel[len(key) :].split("/") if key.endswith("/") else ["__init__.py"]
    row = rows[key]
    return all(f"`{folder}/`" in row for folder in folders) and (
        name == "__init__.py" or re.search(rf"`{re.escape(name[:-3])}(\.py)?`", row) is not None
    )


def test_the_layout_check_sees_a_module_left_out():
    rows = {"input/": "| `input/` | `pipeline` (...), `keras_fit.py`, `dataspec/` (`npz`) |"}
    assert _named_in(rows, "input/pipeline.py") and _named_in(rows, "input/keras_fit.py")
    assert _named_in(rows, "input/__init__.py") and _named_in(rows, "input/dataspec/npz.py")
    assert not _named_in(rows, "input/pipe.py") and not _named_in(rows, "input/other/npz.py")
    assert not _named_in(rows, "train/loop.py")


def test_architecture_names_every_module():
    rows = _layout_rows()
    assert len(rows) > 30
    assert sorted(k for k in rows if not (SRC / k).exists()) == []  # no row for a module gone
    every = sorted(path.relative_to(SRC).as_posix() for path in SRC.rglob("*.py"))
    assert [rel for rel in every if not _named_in(rows, rel)] == []
