r"""TensorFlow's start-up records held to its own log threshold: tfdp's commands start quiet.

While ``import tensorflow`` loads its libraries, TensorFlow 2.21 logs before
absl's logging is initialised, and absl then writes every record to file
descriptor 2 whatever ``TF_CPP_MIN_LOG_LEVEL`` says: its notice "WARNING: All
log messages before absl::InitializeLog() is called are written to STDERR"
and the INFO record "oneDNN custom operations are on ...". Both come twice:
``libtensorflow_framework.so.2`` logs them when TensorFlow loads, and
``tensorflow/python/profiler/internal/_pywrap_profiler_plugin.so``, which
links its own copy of tsl's ``port.cc`` and of absl (its own once-flag, its
own uninitialised log), logs them again when the profiler's bindings load
at the end of the import. Records logged after the import follow the
threshold already (``tfdp`` sets it to 2, warnings and errors of TensorFlow's
C++ hidden, unless the user set one: :func:`tfdp.cli.args.quiet_tf`).

This module owns applying that threshold to the import too: :func:`install`
(the ``tfdp`` command calls it before anything loads TensorFlow) makes the
process's first ``import tensorflow`` run with file descriptor 2 pointed at
a temporary file; then :func:`below_threshold` drops TensorFlow's records
below ``TF_CPP_MIN_LOG_LEVEL`` and absl's notice, and everything else
written meanwhile (a user's warnings, records at or above the threshold)
goes to stderr unchanged, in order. With ``TF_CPP_MIN_LOG_LEVEL=0`` (or
``TFDP_DEBUG=1``) nothing is dropped. A temporary file, not a pipe: nothing
has to read while the import writes.

Example:
    >>> print(below_threshold(PREAMBLE + b"\n"
    ...       b"I0000 00:00:1.5   7 port.cc:153] oneDNN custom operations are on.\n"
    ...       b"a user's warning\n", level=2).decode(), end="")
    a user's warning
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import re
import sys
import tempfile
from collections.abc import Sequence
from types import ModuleType
from typing import Any

#: absl's notice before its first record (it logs once per copy of absl in the process).
PREAMBLE = b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
#: A record's severity letter: its level as ``TF_CPP_MIN_LOG_LEVEL`` counts them.
_LEVELS = {b"I": 0, b"W": 1, b"E": 2, b"F": 3}
_HEADER = re.compile(rb"^([IWEF])\d{4} [\d:.]+ +\d+ [^\]\s]+:\d+\] ")


def threshold(environ: Any = os.environ) -> int:
    """The level below which TensorFlow's records are dropped (0: none; ``TFDP_DEBUG``: none).

    Example:
        >>> threshold({"TF_CPP_MIN_LOG_LEVEL": "2"}), threshold({}), threshold({"TFDP_DEBUG": "1"})
        (2, 0, 0)
    """
    if environ.get("TFDP_DEBUG"):
        return 0
    try:
        return max(0, int(environ.get("TF_CPP_MIN_LOG_LEVEL", "0")))
    except ValueError:  # TensorFlow reads an unparsable level as 0
        return 0


def below_threshold(data: bytes, level: int) -> bytes:
    r"""``data`` without TensorFlow's records below ``level`` and absl's notice (``level`` > 0).

    A record is its header line (``I0000 00:00:1.5  7 port.cc:153] ...``): the
    lines after it stay, whatever they are, so nothing that is not a record is
    ever dropped.

    Example:
        >>> below_threshold(b"W0000 00:00:1.5  7 x.cc:1] w\nE0000 00:00:1.5  7 x.cc:2] e\n", 2)
        b'E0000 00:00:1.5  7 x.cc:2] e\n'
        >>> below_threshold(PREAMBLE + b"\n", 0) == PREAMBLE + b"\n"
        True
    """
    if level <= 0:
        return data
    kept = []
    for line in data.splitlines(keepends=True):
        bare = line.rstrip(b"\r\n")
        if bare == PREAMBLE:
            continue
        header = _HEADER.match(bare)
        if header is not None and _LEVELS[header.group(1)] < level:
            continue
        kept.append(line)
    return b"".join(kept)


class _QuietLoader(importlib.abc.Loader):
    """The real loader of ``tensorflow``, run with file descriptor 2 held to the threshold."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _FirstImport)]
        level = threshold()
        if level <= 0:
            self._loader.exec_module(module)
            return
        with tempfile.TemporaryFile() as held:
            sys.stderr.flush()
            saved = os.dup(2)
            os.dup2(held.fileno(), 2)
            try:
                self._loader.exec_module(module)
            finally:
                sys.stderr.flush()
                os.dup2(saved, 2)
                os.close(saved)
                held.seek(0)
                with os.fdopen(os.dup(2), "wb") as stderr:
                    stderr.write(below_threshold(held.read(), level))


class _FirstImport(importlib.abc.MetaPathFinder):
    """Finds ``tensorflow`` as the other finders do, and gives it :class:`_QuietLoader`.

    It stays in place until TensorFlow is imported: ``importlib.util.find_spec``
    probes (``is TensorFlow installed?``) ask it too, and import nothing.
    """

    def __init__(self) -> None:
        self._asking = False  # inside its own question to the other finders

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "tensorflow" or self._asking:
            return None
        self._asking = True
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._asking = False
        if spec is None or spec.loader is None:
            return None
        spec.loader = _QuietLoader(spec.loader)
        return spec


def install() -> None:
    """Hold this process's first ``import tensorflow`` to the log threshold (idempotent).

    Nothing happens when TensorFlow is loaded already.

    Example:
        >>> install(); install()
        >>> sum(isinstance(f, _FirstImport) for f in sys.meta_path) <= 1
        True
    """
    if "tensorflow" in sys.modules or any(isinstance(f, _FirstImport) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _FirstImport())
