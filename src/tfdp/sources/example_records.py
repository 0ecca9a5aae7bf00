"""``tf.train.Example`` records: checking a file's first record against a parsing spec.

This module owns :func:`check_example`, shared by the sources that read
serialized ``tf.train.Example`` records (:class:`tfdp.sources.TFRecordSource`,
:class:`tfdp.sources.ArrayRecordSource`): a mismatch between the files and
the ``tf.io`` spec is reported at construction, naming the file and the
feature, instead of as a parse error deep in a training step.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import tensorflow as tf

from tfdp.errors import DataError

_KIND = {tf.int64: "int64_list", tf.float32: "float_list", tf.string: "bytes_list"}


def check_example(serialized: bytes, features: Mapping[str, Any], path: str) -> None:
    """Raise a ValueError naming ``path`` and the feature when a record does not fit the spec.

    Args:
        serialized: One serialized ``tf.train.Example`` (the first record of a file).
        features: The ``tf.io`` parsing spec the file will be read with.
        path: The file, named in the error.

    Raises:
        DataError: the record is not a ``tf.train.Example``, or a feature is
            missing, of another kind, or of another size than the spec says.

    Example:
        >>> import tensorflow as tf
        >>> record = tf.train.Example(features=tf.train.Features(feature={
        ...     "x": tf.train.Feature(float_list=tf.train.FloatList(value=[1.0, 2.0]))
        ... })).SerializeToString()
        >>> check_example(record, {"x": tf.io.FixedLenFeature([2], tf.float32)}, "a.tfrecord")
        >>> check_example(record, {"x": tf.io.FixedLenFeature([3], tf.float32)},
        ...               "a.tfrecord")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        tfdp.errors.DataError: a.tfrecord: feature 'x' has 2 values; the spec's shape [3] ...
    """
    try:
        example = tf.train.Example.FromString(serialized)
    except Exception:  # protobuf's DecodeError
        raise DataError(
            f"{path}: the first record is not a tf.train.Example "
            "(wrong file, or a compressed file read without compression=?)"
        ) from None
    fmap = example.features.feature
    present = sorted(fmap)

    def fail(key: str, what: str) -> None:
        raise DataError(f"{path}: feature {key!r} {what} (the first record has {present})")

    def check_kind(key: str, dtype: Any) -> list[Any] | None:
        if key not in fmap:
            return None
        want = _KIND.get(tf.as_dtype(dtype))
        kind = fmap[key].WhichOneof("kind")
        if want is not None and kind is not None and kind != want:
            fail(key, f"holds {kind} values but the spec asks for {tf.as_dtype(dtype).name}")
        return list(getattr(fmap[key], kind).value) if kind else []

    for key, spec in features.items():
        if isinstance(spec, tf.io.FixedLenFeature):
            values = check_kind(key, spec.dtype)
            if values is None:
                if spec.default_value is None:
                    fail(key, "is missing from the records")
                continue
            want = int(np.prod(spec.shape, dtype=np.int64))
            if len(values) != want:
                fail(
                    key,
                    f"has {len(values)} values; the spec's shape {list(spec.shape)} needs {want}",
                )
        elif isinstance(spec, tf.io.FixedLenSequenceFeature):
            values = check_kind(key, spec.dtype)
            if values is None and not spec.allow_missing:
                fail(key, "is missing from the records")
            step = int(np.prod(spec.shape, dtype=np.int64))
            if values is not None and step and len(values) % step:
                fail(key, f"has {len(values)} values, not a multiple of {list(spec.shape)}")
        elif isinstance(spec, tf.io.VarLenFeature):
            check_kind(key, spec.dtype)
        elif isinstance(spec, tf.io.SparseFeature):
            index_keys = [spec.index_key] if isinstance(spec.index_key, str) else spec.index_key
            for k in index_keys:
                check_kind(k, tf.int64)
            check_kind(spec.value_key, spec.dtype)
        elif isinstance(spec, tf.io.RaggedFeature):
            check_kind(spec.value_key or key, spec.dtype)
