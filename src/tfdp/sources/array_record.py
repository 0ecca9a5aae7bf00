"""ArrayRecord files: random access to serialized ``tf.train.Example`` records by index.

This module owns :class:`ArrayRecordSource`. ArrayRecord (PyPI ``array-record``)
stores records so that any one can be read by its index, which makes it a
*random-access* source: tfdp's samplers choose the indices, exactly as for
in-memory arrays. The record bytes are fetched by a ``tf.numpy_function``
(the package has no TensorFlow op); parsing and decoding are TensorFlow ops.

The package is optional: importing this module never needs it, building a
source does (the examples below skip themselves without it).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from tfdp._autograph import plain
from tfdp.errors import ConfigError
from tfdp.sources.example_records import check_example


def _import_array_record() -> tuple[Any, Any]:
    try:
        from array_record.python import array_record_data_source, array_record_module
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError(
            "ArrayRecordSource needs the array-record package: pip install array-record"
        ) from err
    return array_record_data_source, array_record_module


class ArrayRecordSource:
    """Random access to ``tf.train.Example`` records in ArrayRecord files.

    Args:
        files: A glob pattern (expanded and sorted) or a list of paths; the
            global index runs through the files in this order.
        features: ``tf.io`` parsing spec, ``{key: tf.io.FixedLenFeature(...)}`` etc.
        decode: ``parsed dict -> example``, graph-compatible. Default: the
            parsed values as a tuple in the key order of ``features`` (the
            bare value for a single key).
        check_files: Check the first record of every file against
            ``features`` at construction, raising a ValueError naming the
            file and the feature on a mismatch.

    Attributes:
        files: The file list.
        num_examples: Records in all files.
        element_spec: Spec of one decoded example.

    Raises:
        ImportError: the ``array-record`` package is not installed.
        FileNotFoundError: no file matches / a listed file is missing.

    Example:
        >>> import os, tempfile, pytest
        >>> _ = pytest.importorskip("array_record")  # an optional package
        >>> from array_record.python.array_record_module import ArrayRecordWriter
        >>> path = os.path.join(tempfile.mkdtemp(), "x.array_record")
        >>> w = ArrayRecordWriter(path, "group_size:1")
        >>> for i in range(4):
        ...     w.write(tf.train.Example(features=tf.train.Features(feature={
        ...         "x": tf.train.Feature(float_list=tf.train.FloatList(value=[i, i]))
        ...     })).SerializeToString())
        >>> w.close()
        >>> src = ArrayRecordSource([path], {"x": tf.io.FixedLenFeature([2], tf.float32)})
        >>> ds = tf.data.Dataset.from_tensor_slices([3, 1]).map(src.load)
        >>> [x.tolist() for x in ds.as_numpy_iterator()]
        [[3.0, 3.0], [1.0, 1.0]]
    """

    streaming = False

    def __init__(
        self,
        files: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        features: Mapping[str, Any],
        *,
        decode: Callable[[dict[str, Any]], Any] | None = None,
        check_files: bool = True,
    ) -> None:
        data_source, module = _import_array_record()
        if isinstance(files, (str, os.PathLike)):
            pattern = os.fspath(files)
            paths = sorted(tf.io.gfile.glob(pattern))
            if not paths:
                raise FileNotFoundError(f"ArrayRecordSource: no file matches {pattern!r}")
        else:
            paths = [os.fspath(f) for f in files]
            if not paths:
                raise ConfigError("ArrayRecordSource: empty", argument="files")
            missing = [p for p in paths if not os.path.exists(p)]
            if missing:
                raise FileNotFoundError(f"ArrayRecordSource: file(s) not found: {missing[:5]}")
        if not isinstance(features, Mapping) or not features:
            raise ConfigError(
                f"must be a non-empty dict of tf.io feature specs, got {features!r}",
                argument="features",
            )
        self.files = paths
        self.features = dict(features)
        if decode is None:
            keys = list(self.features)

            def decode(parsed: dict[str, Any]) -> Any:
                values = tuple(parsed[k] for k in keys)
                return values[0] if len(values) == 1 else values

        self._decode = decode
        self._data = data_source.ArrayRecordDataSource(paths)
        self.num_examples = len(self._data)
        if check_files:
            for path in paths:
                reader = module.ArrayRecordReader(path)
                try:
                    if reader.num_records():
                        check_example(reader.read([0])[0], self.features, path)
                finally:
                    reader.close()
        self.element_spec = (
            tf.data.Dataset.from_tensors(tf.constant(b"")).map(plain(self._parse)).element_spec
        )

    def _fetch(self, index: np.ndarray) -> bytes:
        return self._data[int(index)]

    def _parse(self, record: tf.Tensor) -> Any:
        return self._decode(tf.io.parse_single_example(record, self.features))

    def load(self, index: Any) -> Any:
        """Read, parse and decode record ``index`` (graph-compatible).

        Example:
            >>> import os, tempfile, pytest
            >>> _ = pytest.importorskip("array_record")  # an optional package
            >>> from array_record.python.array_record_module import ArrayRecordWriter
            >>> path = os.path.join(tempfile.mkdtemp(), "s.array_record")
            >>> w = ArrayRecordWriter(path, "group_size:1")
            >>> w.write(tf.train.Example(features=tf.train.Features(feature={
            ...     "s": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"hi"]))
            ... })).SerializeToString())
            >>> w.close()
            >>> ArrayRecordSource(path, {"s": tf.io.FixedLenFeature([], tf.string)}).load(0).numpy()
            b'hi'
        """
        index = tf.cast(index, tf.int64)
        record = tf.numpy_function(self._fetch, [index], tf.string, stateful=False)
        record.set_shape([])
        return self._parse(record)

    def __len__(self) -> int:
        return self.num_examples

    def __repr__(self) -> str:
        return (
            f"ArrayRecordSource(files={len(self.files)}, num_examples={self.num_examples}, "
            f"features={sorted(self.features)})"
        )
