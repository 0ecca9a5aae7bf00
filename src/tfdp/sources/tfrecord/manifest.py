"""The manifest of a set of TFRecord shards, and the checks of the files it lists.

This module owns the manifest format (``<prefix>.manifest.json``:
``format``, ``version``, ``files``, ``counts``, ``features``, ...), reading
it (:func:`read_manifest`), finding the manifests that cover given files,
and the per-file record checks (first record, record count) that
:class:`tfdp.sources.TFRecordSource` runs at construction.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from tfdp._names import MANIFEST_SUFFIX
from tfdp.errors import ConfigError, DataError

FORMAT = "tfdp.tfrecord"


VERSION = 1


IO_THREADS = 16


MAX_LISTED = 5


def read_manifest(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Load a manifest written by :func:`write_tfrecords`, with ``files`` made absolute.

    Raises:
        DataError: the file is not a tfdp TFRecord manifest (naming it).

    Example:
        >>> import os, tempfile, numpy as np
        >>> out = tempfile.mkdtemp()
        >>> from tfdp.sources import write_tfrecords
        >>> _ = write_tfrecords(np.zeros((4, 2), "float32"), out, num_shards=2)
        >>> m = read_manifest(os.path.join(out, "data.manifest.json"))
        >>> m["counts"], m["features"][0]["encoding"]
        ([2, 2], 'float')
    """
    path = os.fspath(path)
    try:
        with tf.io.gfile.GFile(path, "r") as fh:
            manifest = json.loads(fh.read())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise DataError(f"{path}: not a JSON manifest ({err})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise DataError(f"{path}: not a {FORMAT} manifest (written by write_tfrecords)")
    if manifest.get("version") != VERSION:
        raise DataError(f"{path}: manifest version {manifest.get('version')} is not supported")
    base = os.path.dirname(path)
    manifest["files"] = [os.path.join(base, f) for f in manifest["files"]]
    return manifest


def read_first_record(path: str, compression: str | None) -> bytes | None:
    """The first record of ``path`` (``None``: empty); a ValueError naming it if unreadable."""
    try:
        for record in tf.data.TFRecordDataset(path, compression_type=compression or "").take(1):
            return record.numpy()
    except tf.errors.OpError as err:
        raise DataError(
            f"{path}: cannot read a record ({type(err).__name__}: {err.message.splitlines()[0]}); "
            f"is it a TFRecord file with compression={compression!r}?"
        ) from None
    return None


def count_records(path: str, compression: str | None) -> int:
    """The records of ``path`` (a full read); a ValueError naming it if unreadable."""
    ds = tf.data.TFRecordDataset(path, compression_type=compression or "")
    try:
        return int(ds.reduce(np.int64(0), lambda n, _: n + 1))
    except tf.errors.OpError as err:
        raise DataError(
            f"{path}: cannot count its records ({type(err).__name__}: "
            f"{err.message.splitlines()[0]}); is it a TFRecord file with "
            f"compression={compression!r}?"
        ) from None


def map_threads(fn: Callable[[str], Any], paths: Sequence[str]) -> list[Any]:
    """``[fn(p) for p in paths]``, run on up to ``IO_THREADS`` threads (file I/O)."""
    with concurrent.futures.ThreadPoolExecutor(min(IO_THREADS, len(paths))) as pool:
        return list(pool.map(fn, paths))


def resolve_files(files: Any) -> tuple[list[str], dict[str, Any] | None]:
    """The file list, and the manifest when ``files`` names one."""
    if isinstance(files, (str, os.PathLike)):
        pattern = os.fspath(files)
        if pattern.endswith(MANIFEST_SUFFIX):
            manifest = read_manifest(pattern)
            return list(manifest["files"]), manifest
        paths = sorted(tf.io.gfile.glob(pattern))
        if not paths:
            raise FileNotFoundError(f"TFRecordSource: no file matches {pattern!r}")
        return paths, None
    paths = [os.fspath(f) for f in files]
    if not paths:
        raise ConfigError("TFRecordSource: empty", argument="files")
    return paths, None


def find_manifests(paths: Sequence[str]) -> dict[str, dict[str, Any]]:
    """``{file: manifest}`` for the files some manifest in their directory lists."""
    found: dict[str, dict[str, Any]] = {}
    for directory in sorted({os.path.dirname(p) for p in paths}):
        pattern = os.path.join(directory or ".", "*" + MANIFEST_SUFFIX)
        for mpath in sorted(tf.io.gfile.glob(pattern)):
            try:
                manifest = read_manifest(mpath)
            except ValueError:
                continue  # someone else's JSON: ignore
            for f in manifest["files"]:
                found.setdefault(os.path.normpath(f), manifest)
    return found
