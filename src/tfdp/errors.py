r"""What a user is told when something fails: the meaningful line of an exception.

This module owns the :class:`TfdpError` family -- the errors tfdp raises for
input or state a user can fix, which a command line reports as "bad input"
(exit 2) while any other exception is a bug to report --, :func:`said_as`,
which says the Python arguments such an error names in a caller's words
(``num_classes`` -> ``--num-classes``), and :func:`user_message`, which turns
any exception into one
line that keeps its cause: the file, the label, the peer. TensorFlow errors
raised inside a graph (``tf.errors.OpError``) start with boilerplate such as
``Graph execution error:`` and ``Detected at node ...``; the line that names
the bad file (``assertion failed: [ImageFolderSource: cannot decode image
/data/a/1.png: ...]``), the bad label (``Received a label value of -1 ...``)
or the dead peer (``... stopped sending heartbeats: /job:worker/...``) comes
later. Pure Python: importing it loads no TensorFlow.

Example:
    >>> err = RuntimeError("Graph execution error:\n\nDetected at node x defined at:\n"
    ...                    "  (0) INVALID_ARGUMENT:  assertion failed: [bad.png: empty file]\n"
    ...                    "\t [[{{node Assert}}]]")
    >>> user_message(err)
    'RuntimeError: bad.png: empty file'
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping

__all__ = [
    "CheckpointError",
    "ConfigError",
    "DataError",
    "StateError",
    "TfdpError",
    "meaningful_line",
    "said_as",
    "user_message",
]


class TfdpError(ValueError):
    """Input or state a user can fix; the message names the field and what would be valid.

    A ``ValueError`` (so ``except ValueError`` keeps working); a command line
    maps exactly this family to "bad input". ``argument`` names the Python
    argument the message starts with, so that a command line can say it in
    its own words (``port_base`` -> ``--port-base``) while the library never
    names a flag.

    Example:
        >>> try:
        ...     raise ConfigError("batch_size must be >= 1, got 0", argument="batch_size")
        ... except TfdpError as exc:
        ...     print(type(exc).__name__, isinstance(exc, ValueError), exc.argument, "|", exc)
        ConfigError True batch_size | batch_size must be >= 1, got 0
    """

    def __init__(self, *args: object, argument: str | None = None) -> None:
        super().__init__(*args)
        self.argument = argument


class ConfigError(TfdpError):
    """An option or argument that is out of range or inconsistent with another.

    Example:
        >>> issubclass(ConfigError, TfdpError)
        True
    """


class DataError(TfdpError):
    """Data that cannot be used as given: a missing file, a bad label, a short shard.

    Example:
        >>> str(DataError("digits.npz: key 'y' holds float labels (2.5)"))
        "digits.npz: key 'y' holds float labels (2.5)"
    """


class StateError(TfdpError):
    """Saved state that does not match what it is restored into (run, checkpoint, sampler).

    Example:
        >>> isinstance(StateError("num_replicas: saved 2, now 3"), ValueError)
        True
    """


class CheckpointError(StateError):
    """No checkpoint could be read, or the checkpoint directory is unusable.

    The message names the directory (or each checkpoint tried and why it
    could not be read) and what to do: delete or restore the directory, fix
    its permissions.

    Example:
        >>> issubclass(CheckpointError, StateError)
        True
    """


def said_as(exc: TfdpError, names: Mapping[str, str]) -> TfdpError:
    """``exc`` with the Python arguments it names said as a caller's users say them.

    The library names its arguments (``spec``, ``num_classes``); a command
    line says its flags or positionals (``--data``, ``SRC``). Every whole-word
    occurrence of a name in ``names`` -- not inside a quoted value, a path or a
    longer identifier -- is replaced; the copy keeps the type and
    ``argument``. ``exc`` itself when nothing is named.

    Example:
        >>> err = DataError("spec 'x.npz' does not exist", argument="spec")
        >>> said = said_as(err, {"spec": "--data"})
        >>> print(type(said).__name__, said.argument, "|", said)
        DataError spec | --data 'x.npz' does not exist
        >>> str(said_as(DataError("labels 3, 9: give num_classes"), {"num_classes": "K"}))
        'labels 3, 9: give K'
    """
    text = str(exc)
    said = text
    for name, words in names.items():
        said = re.sub(rf"(?<![\w.'\"/-]){re.escape(name)}(?![\w'\"/-])", words, said)
    if said == text:
        return exc
    out = copy.copy(exc)
    out.args = (said,)
    return out


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
