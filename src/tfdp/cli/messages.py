r"""What a command prints when something fails: one line, in the command line's words.

This module owns the command line's half of tfdp's errors. :func:`said`
says a :class:`tfdp.errors.TfdpError` with a command's flags: the library
carries the argument at fault as data (``exc.argument``, ``exc.message``) and a
command says it as its flag (``--port-base: must be in 1..65535, got 0``), a
positional its own way (``SRC``) where the command says so, followed by the
meaningful line of the TensorFlow error that caused it, if one did (a file
that cannot be read). :func:`user_message` shortens any other exception to
its meaningful line (:func:`meaningful_line`). TensorFlow errors raised
inside a graph (``tf.errors.OpError``) start with boilerplate such as ``Graph
execution error:`` and ``Detected at node ...``; the line that names the bad
file (``assertion failed: [ImageFolderSource: cannot decode image
/data/a/1.png: ...]``), the bad label (``Received a label value of -1 ...``) or
the dead peer (``... stopped sending heartbeats: /job:worker/...``) comes
later. Importing it loads no TensorFlow.

Example:
    >>> from tfdp.errors import ConfigError
    >>> said(ConfigError("must be in 1..65535, got 0", argument="port_base"))
    '--port-base: must be in 1..65535, got 0'
    >>> err = RuntimeError("Graph execution error:\n\nDetected at node x defined at:\n"
    ...                    "  (0) INVALID_ARGUMENT:  assertion failed: [bad.png: empty file]\n"
    ...                    "\t [[{{node Assert}}]]")
    >>> user_message(err)
    'RuntimeError: bad.png: empty file'
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from typing import Any

from tfdp.errors import TfdpError
from tfdp.recipe.config import flag


def said(exc: BaseException, words: Mapping[str, str] | None = None) -> str:
    """``exc`` as a command says it: each argument as ``words`` says, else as its flag.

    A :class:`~tfdp.errors.TfdpError`'s argument and the arguments its
    message mentions are said as ``words`` maps them (a command's own
    spelling: ``num_repeats`` -> ``--repeats``, ``spec`` -> ``SRC``; ``""``:
    left out, for an argument no flag sets), any other as its flag
    (:func:`tfdp.recipe.config.flag`: ``port_base`` -> ``--port-base``). When
    TensorFlow's error caused it (``raise DataError(...) from err``), the
    meaningful line of that error follows. Another exception is said as
    ``str(exc)``.

    Example:
        >>> from tfdp.errors import DataError
        >>> err = DataError("'x' does not exist", argument="spec")
        >>> said(err), said(err, {"spec": "SRC"})
        ("--spec: 'x' does not exist", "SRC: 'x' does not exist")
        >>> said(ValueError("anything else"))
        'anything else'
    """
    if not isinstance(exc, TfdpError):
        return str(exc)
    words = words or {}
    text = exc.said(lambda name: words[name] if name in words else flag(name))
    cause = _tensorflow_cause(exc)
    line = meaningful_line(cause.message) if cause is not None else ""
    return f"{text}: {line}" if line else text


def _tensorflow_cause(exc: BaseException) -> Any:
    """The TensorFlow error (``tf.errors.OpError``) under ``exc``'s chain of tfdp errors."""
    cause = exc.__cause__
    while isinstance(cause, TfdpError):
        cause = cause.__cause__
    tf = sys.modules.get("tensorflow")
    return cause if tf is not None and isinstance(cause, tf.errors.OpError) else None


#: Longest message kept (a label list can run to thousands of characters).
MAX_CHARS = 400

_BOILERPLATE = (
    re.compile(r"^graph execution error:?$", re.I),
    re.compile(r"^detected at node", re.I),
    re.compile(r"^<stack traces unavailable>$"),
    re.compile(r"^\d+ root error\(s\) found\.?$"),
    re.compile(r"^\d+ successful operations\.?$"),
    re.compile(r"^\d+ derived errors ignored\.?"),
    re.compile(r"^\[\[.*\]\]"),  # [[{{node ...}}]] and [[RemoteCall]]
    re.compile(r"^file \".*\", line \d+", re.I),  # traceback frames
    re.compile(r"^traceback \(most recent call last\)", re.I),
    re.compile(r"^the error could be from a previous operation", re.I),
    re.compile(r"^\{\{function_node [^}]*\}\}$"),
)
_PREFIXES = (
    re.compile(r"^\(\d+\)\s+[A-Z_]+:\s*"),  # "(0) INVALID_ARGUMENT:  "
    re.compile(r"^\{\{function_node [^}]*\}\}\s*"),
    re.compile(r"^assertion failed:\s*"),
)
_SUFFIXES = (
    re.compile(r"\s*\[Op:[^\]]*\]( name: ?\S*)?\s*$"),
    re.compile(r"\s*\[\[\{\{node [^}]*\}\}\]\]\s*$"),
)


def _clean(line: str) -> str:
    line = line.strip()
    if "assertion failed:" in line:  # "Error in user-defined function ...: assertion failed: [...]"
        line = line[line.index("assertion failed:") :]
    changed = True
    while changed:
        changed = False
        for pattern in (*_PREFIXES, *_SUFFIXES):
            new = pattern.sub("", line).strip()
            if new != line:
                line, changed = new, True
    if line.startswith("[") and line.endswith("]"):  # tf.debugging.Assert's data list
        line = line[1:-1].strip()
    return line


def _boilerplate(line: str) -> bool:
    stripped = line.strip()
    return not stripped or any(p.search(stripped) for p in _BOILERPLATE)


_REMOTE = re.compile(r"remote target (/job:[\w-]+/replica:\d+/task:\d+)")


def meaningful_line(text: str) -> str:
    r"""The first line of ``text`` that says what went wrong (boilerplate of TF errors skipped).

    A failed ``tf.debugging.Assert`` (``assertion failed: [...]``: tfdp's
    checks name the file) comes first, before the other root errors of the
    step. A line ending in ``:`` is joined with the next one (``... unhealthy
    (stopped sending heartbeats):`` + the task that died); a peer named
    only further down (gRPC's ``... from remote target /job:worker/...``) is
    appended. Returns ``""`` when ``text`` holds nothing but boilerplate.

    Example:
        >>> meaningful_line("Graph execution error:\n\n  (0) INVALID_ARGUMENT:  Received a "
        ...                 "label value of -1 which is outside the valid range of [0, 3).")
        'Received a label value of -1 which is outside the valid range of [0, 3).'
    """
    lines = [ln for ln in text.splitlines() if not _boilerplate(ln)]
    # A failed check of tfdp's own (tf.debugging.Assert: it names the file) is the cause; other
    # root errors of the same step (a collective aborted on the other replicas) follow from it.
    asserted = [i for i, ln in enumerate(lines) if "assertion failed:" in ln]
    order = asserted + [i for i in range(len(lines)) if i not in asserted]
    for i in order:
        raw = lines[i]
        line = _clean(raw)
        if not line:
            continue
        if line.endswith(":") and i + 1 < len(lines):
            line = f"{line} {_clean(lines[i + 1])}".strip()
        if "/job:" not in line:
            peers = list(dict.fromkeys(_REMOTE.findall(text)))
            if peers:
                line = f"{line} (from {', '.join(peers[:3])})"
        if len(line) > MAX_CHARS:
            line = line[: MAX_CHARS - 3].rstrip() + "..."
        return line
    return ""


def user_message(exc: BaseException) -> str:
    """``"<ExceptionType>: <meaningful line>"`` for an unexpected exception.

    TensorFlow's ``OpError`` keeps its text in ``message``; other exceptions
    in ``str(exc)``. The type name stays (it tells a bug from bad input).

    Example:
        >>> user_message(KeyError("labels"))
        "KeyError: 'labels'"
    """
    text = getattr(exc, "message", None)
    if not isinstance(text, str) or not text.strip():
        text = str(exc)
    line = meaningful_line(text)
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__
