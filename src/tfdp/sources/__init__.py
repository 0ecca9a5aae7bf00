"""Data sources: where examples come from, by index (random access) or as a stream.

This package owns the sources tfdp ships -- in-memory arrays, image folders
(ImageNet layout), ArrayRecord files (random access) and TFRecord shards
(streaming, with a writer) -- and, in :mod:`tfdp.sources.base`, the
contracts the input layer dispatches on (re-exported here). A source that
decodes only the windows a sample keeps meets
:class:`tfdp.windows.contract.WindowSource` as well.

A random-access source (:class:`RandomAccessSource`) has ``num_examples``,
``element_spec`` (one example), ``load(index) -> example`` (graph-compatible,
scalar int64 in) and, as a :class:`BatchSource`, ``gather(indices) -> batch``
when it can fetch a whole batch at once. A streaming source
(:class:`StreamingSource`) has ``stream_length(num_replicas)`` (the records
of every epoch's stream) and ``stream(indices, num_replicas=, seed=, epoch=,
shuffle=)`` yielding the examples at those stream indices in order; the
input layer picks the indices with the ordinary sampler arithmetic (see
:class:`TFRecordSource`).

Example:
    >>> import numpy as np
    >>> from tfdp.sources import ArraySource
    >>> ArraySource((np.zeros((5, 2)), np.arange(5))).num_examples
    5
"""

from __future__ import annotations

from tfdp._lazy import lazy_names
from tfdp.sources.arrays import ArraySource
from tfdp.sources.base import (
    BatchSource,
    RandomAccessSource,
    StreamingSource,
    WeightedSource,
)

__all__ = [
    "ArrayRecordSource",
    "ArraySource",
    "BatchSource",
    "ImageFolderSource",
    "RandomAccessSource",
    "StreamingSource",
    "TFRecordSource",
    "WeightedSource",
    "write_tfrecords",
]

_LAZY = {
    "ArrayRecordSource": "tfdp.sources.array_record",
    "ImageFolderSource": "tfdp.sources.image_folder",
    "TFRecordSource": "tfdp.sources.tfrecord",
    "write_tfrecords": "tfdp.sources.tfrecord",
}

__getattr__, __dir__ = lazy_names(__name__, _LAZY)
