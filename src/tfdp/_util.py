"""Small helpers shared across tfdp's modules: argument checks, atomic writes, tf.data options.

This module owns the helpers that would otherwise be copied from module to
module. Pure Python at import time (TensorFlow is imported only by
:func:`deterministic_unsharded`, when called).

Example:
    >>> check_int("shards", 4, 1)
    4
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Collection, Iterator
from typing import Any

import numpy as np

from tfdp.errors import ConfigError


def check_int(name: str, value: Any, low: int, high: int | None = None, what: str = "") -> int:
    """``value`` as an ``int`` if an integer in ``[low, high]``, else a ConfigError naming ``name``.

    Booleans are refused (``True`` is not a count). ``what`` is appended to
    the message (e.g. ``" (an unsigned 64-bit integer)"``).

    Example:
        >>> check_int("lane", 2, 0, 3)
        2
        >>> check_int("lane", 4, 0, 3)
        Traceback (most recent call last):
        ...
        tfdp.errors.ConfigError: lane: must be in [0, 3], got 4
        >>> check_int("state['epoch']", -1, 0)
        Traceback (most recent call last):
        ...
        tfdp.errors.ConfigError: state: ['epoch'] must be >= 0, got -1
    """
    argument = name.split("[", 1)[0]  # "state['epoch']" names the argument state
    field = name[len(argument) :] + " " if name != argument else ""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ConfigError(f"{field}must be an integer{what}, got {value!r}", argument=argument)
    value = int(value)
    if value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ConfigError(f"{field}must be {bound}{what}, got {value}", argument=argument)
    return value


def config_diffs(saved: Any, now: Any, ignore: Collection[str] = (), prefix: str = "") -> list[str]:
    """``"field: saved X, now Y"`` for every field that differs (nested fields dotted).

    What a refused restore names: a configuration saved with some state
    against the one it is restored into. A field missing on one side is
    ``<absent>``; fields named in ``ignore`` (dotted, e.g.
    ``"sampler.num_replicas"``) are not compared.

    Example:
        >>> config_diffs({"a": 1, "s": {"k": 2}}, {"a": 1, "s": {"k": 3}, "b": 0})
        ['b: saved <absent>, now 0', 's.k: saved 2, now 3']
        >>> config_diffs({"w": 2, "seed": 1}, {"w": 4, "seed": 1}, ignore=("w",))
        []
    """
    if isinstance(saved, dict) and isinstance(now, dict):
        out: list[str] = []
        for key in sorted(set(saved) | set(now), key=str):
            name = f"{prefix}{key}"
            if name in ignore:
                continue
            if key not in saved:
                out.append(f"{name}: saved <absent>, now {now[key]!r}")
            elif key not in now:
                out.append(f"{name}: saved {saved[key]!r}, now <absent>")
            else:
                out.extend(config_diffs(saved[key], now[key], ignore, f"{name}."))
        return out
    if saved != now:
        return [f"{prefix.rstrip('.')}: saved {saved!r}, now {now!r}"]
    return []


def temp_name(path: str, token: str | None = None) -> str:
    """The temporary name ``path`` is written under before its rename: ``<path>.tmp-<token>``.

    Example:
        >>> temp_name("a/b.json", "x1")
        'a/b.json.tmp-x1'
    """
    return f"{path}.tmp-{token or uuid.uuid4().hex}"


@contextlib.contextmanager
def replaced_atomically(path: str | os.PathLike[str], suffix: str = "") -> Iterator[str]:
    """A temporary sibling of ``path`` to write; on success it replaces ``path`` at once.

    The body writes the file at the yielded name (any writer: ``model.save``,
    ``np.savez``, a figure); when it returns, ``os.replace`` publishes it. A
    crash leaves either the old file or the new one, never half of one; on
    an error the temporary file is removed and ``path`` is untouched. The
    temporary name is hidden (a leading dot) and ends with ``suffix`` for
    writers that pick a format from the extension (``".keras"``).

    Example:
        >>> import tempfile
        >>> p = os.path.join(tempfile.mkdtemp(), "x.txt")
        >>> with replaced_atomically(p) as tmp:
        ...     _ = open(tmp, "w").write("new")
        >>> open(p).read()
        'new'
    """
    path = os.fspath(path)
    tmp = temp_name(path) + suffix
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            os.remove(tmp)


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    r"""Write ``text`` to ``path`` atomically: a temporary file, fsync, then ``os.replace``.

    A crash leaves either the old file or the new one, never half of one; on
    an error the temporary file is removed.

    Example:
        >>> import tempfile
        >>> p = os.path.join(tempfile.mkdtemp(), "x.txt")
        >>> write_text_atomic(p, "hello\n"); open(p).read()
        'hello\n'
    """
    with replaced_atomically(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())


def deterministic_unsharded(ds: Any) -> Any:
    """``ds`` (a ``tf.data.Dataset``) with deterministic order and auto-sharding off.

    tfdp's samplers shard the data; tf.data's auto-sharding under a
    distribution strategy would shard it a second time.

    Example:
        >>> import tensorflow as tf
        >>> ds = deterministic_unsharded(tf.data.Dataset.range(3))
        >>> ds.options().experimental_distribute.auto_shard_policy.name
        'OFF'
    """
    import tensorflow as tf

    options = tf.data.Options()
    options.deterministic = True
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return ds.with_options(options)
