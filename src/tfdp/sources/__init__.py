"""Data sources: where examples come from, by index (random access) or as a stream.

This package owns the source protocol the input layer consumes and the
sources tfdp ships: in-memory arrays, image folders (ImageNet layout), and
TFRecord shards (streaming, with a writer).

A random-access source has ``num_examples``, ``element_spec`` (one example),
``load(index) -> example`` (graph-compatible, scalar int64 in) and optionally
``gather(indices) -> batch`` when it can fetch a whole batch at once. A
streaming source has ``streaming = True`` and
``stream(rank=, num_replicas=, num_repeats=, seed=, epoch=, batch_size=)``
yielding ``(example, position)`` pairs, plus ``steps_per_epoch(...)``.

Example:
    >>> import numpy as np
    >>> from tfdp.sources import ArraySource
    >>> ArraySource((np.zeros((5, 2)), np.arange(5))).num_examples
    5
"""

from __future__ import annotations

import importlib
from typing import Any

from tfdp.sources.arrays import ArraySource

__all__ = [
    "ArrayRecordSource",
    "ArraySource",
    "ImageFolderSource",
    "TFRecordSource",
    "write_tfrecords",
]

_LAZY = {
    "ArrayRecordSource": "tfdp.sources.array_record",
    "ImageFolderSource": "tfdp.sources.image_folder",
    "TFRecordSource": "tfdp.sources.tfrecord",
    "write_tfrecords": "tfdp.sources.tfrecord",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tfdp.sources' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
