"""Reading opened data's records: a stream's labels, a stream in memory, read errors named.

This module owns what reading an :class:`OpenedData` needs beyond its source,
whatever its format: the labels of a stream read once when its format does
not count them (:func:`read_labels`), a stream read into memory for exact
evaluation (:func:`in_memory`, :func:`random_access`, with
:func:`resize_uint8` and the one-size check :func:`sized`), and TensorFlow's
read errors said with the file at fault (:func:`read_error`). A stream is
TFRecord shards (:class:`tfdp.TFRecordSource`): the format that opens them is
:class:`tfdp.recipe.dataspec.formats.tfrecord.TFRecordShards`.

Example:
    >>> import tempfile, numpy as np
    >>> from tfdp.recipe.dataspec import open_source
    >>> from tfdp.sources import write_tfrecords
    >>> out = tempfile.mkdtemp()
    >>> _ = write_tfrecords((np.zeros((6, 2, 2), np.uint8), np.arange(6) % 3), out, num_shards=2)
    >>> data = open_source(out)
    >>> sorted(read_labels(data).tolist()), in_memory(data)[0].shape
    ([0, 0, 1, 1, 2, 2], (6, 2, 2, 1))
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tfdp.errors import DataError
from tfdp.recipe.dataspec.checks import check_labels
from tfdp.recipe.dataspec.opened import OpenedData


def read_error(data: OpenedData, err: Exception) -> DataError:
    """The error to raise (``from err``) for TensorFlow's ``err`` met reading ``data``.

    It names the data; TensorFlow's own words stay in ``err``, its cause (a
    command line shows their meaningful line after it). A TFRecord shard
    whose record count differs from its manifest's makes TensorFlow raise a
    ``FailedPreconditionError`` that says only "expected to contain N
    elements": the shards at fault are found and named
    (:meth:`tfdp.TFRecordSource.count_problems`).

    Example:
        >>> from tfdp.recipe.dataspec import open_source
        >>> str(read_error(open_source("digits"), RuntimeError("truncated record at 464")))
        'bundled UCI digits: cannot be read (RuntimeError)'
    """
    if data.stream is not None:
        import tensorflow as tf

        if isinstance(err, tf.errors.FailedPreconditionError):
            problems = data.stream.count_problems()
            if problems:
                return DataError("; ".join(problems))
    return DataError(f"{data.where}: cannot be read ({type(err).__name__})")


def read_labels(
    data: OpenedData,
    *,
    num_classes: int | None = None,
    require_all_classes: bool = True,
) -> np.ndarray:
    """Read and check the labels of TFRecord data (the label feature only: no image decoding).

    Every file's record count is checked against the manifest on the way.
    Sets ``labels``, ``num_classes`` and ``label_counts`` of ``data``; the
    checks are :func:`check_labels`'.

    Returns:
        The labels, in file order.
    """
    import tensorflow as tf

    from tfdp._autograph import plain

    src, layout = data.stream, data.layout
    assert src is not None and layout is not None, "TFRecord data only"
    feature = layout.label_feature
    name = feature["name"]
    if feature["encoding"] == "int64":
        spec = {name: src.features[name]}

        def parse(batch: Any) -> Any:
            return tf.cast(tf.io.parse_example(batch, spec)[name], tf.int64)
    else:

        def parse(batch: Any) -> Any:
            return tf.map_fn(
                lambda r: layout.pick(src.parse(r))[1], batch, fn_output_signature=tf.int64
            )

    ds = tf.data.Dataset.from_tensor_slices(list(src.files)).flat_map(plain(src.file_records))
    ds = ds.batch(4096).map(plain(parse), num_parallel_calls=tf.data.AUTOTUNE)
    try:
        parts = list(ds.as_numpy_iterator())
    except tf.errors.OpError as err:
        raise read_error(data, err) from err
    labels = np.concatenate(parts) if parts else np.zeros([0], np.int64)
    y, k, notes = check_labels(
        labels,
        data.where,
        f"feature {name!r}",
        classes=data.classes,
        num_classes=num_classes,
        require_all_classes=require_all_classes,
    )
    data.labels, data.num_classes = y, k
    data.label_counts = np.bincount(y, minlength=k)
    data.notes += notes
    return y


def resize_uint8(image: Any, size: int | None) -> Any:
    """``image`` (uint8 ``[H, W, C]``) stretched to ``size`` x ``size``; untouched if it is.

    Bilinear with antialiasing, rounded back to uint8 (graph-compatible).

    Example:
        >>> import tensorflow as tf
        >>> resize_uint8(tf.zeros([4, 6, 3], tf.uint8), 2).shape
        TensorShape([2, 2, 3])
    """
    import tensorflow as tf

    if size is None:
        return image

    def stretch() -> Any:
        x = tf.image.resize(image, [size, size], method="bilinear", antialias=True)
        return tf.cast(tf.clip_by_value(tf.round(x), 0, 255), tf.uint8)

    hw = tf.shape(image)[:2]
    out = tf.cond(tf.reduce_all(hw == size), lambda: tf.identity(image), stretch)
    out.set_shape([size, size, image.shape[-1]])
    return out


def in_memory(
    data: OpenedData, files: Sequence[str] | None = None, image_size: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """TFRecord data read into memory: ``(images uint8 [N, H, W, C], labels int64 [N])``.

    For exact evaluation, which needs random access. Every file's record
    count is checked against the manifest on the way; images of varying size
    need ``image_size`` (they are stretched to it, see :func:`resize_uint8`).

    Raises:
        tfdp.errors.DataError: naming the shard, for a count mismatch or a
            damaged record; images of varying size without ``image_size``.
    """
    import tensorflow as tf

    from tfdp._autograph import plain

    ds = data.records(files)
    if image_size is not None:
        ds = ds.map(plain(lambda image, label: (resize_uint8(image, image_size), label)))
    images, labels = [], []
    try:
        for image, label in ds.as_numpy_iterator():
            if images and image.shape != images[0].shape:
                raise DataError(
                    f"{data.where}: images differ in size ({list(images[0].shape)} and "
                    f"{list(image.shape)}); give an image size to stretch them to"
                )
            images.append(image)
            labels.append(int(label))
    except tf.errors.OpError as err:
        raise read_error(data, err) from err
    if not images:
        raise DataError(f"{data.where}: the files hold no record")
    return np.stack(images), np.asarray(labels, np.int64)


def sized(data: OpenedData, image_size: int | None) -> None:
    """Refuse to read ``data`` into memory when its images differ in size and no size is given.

    Example:
        >>> data = OpenedData("tfrecord", "m.json", 4, (None, None, 3), "uint8", 1 / 255, 2,
        ...                   spec="shards")
        >>> sized(data, None)
        Traceback (most recent call last):
        ...
        tfdp.errors.DataError: spec: 'shards' holds images of varying size: give image_size to resize them
    """  # noqa: E501
    if None in data.image_shape[:2] and image_size is None:
        raise DataError(
            f"{data.spec!r} holds images of varying size: give {{image_size}} to resize them",
            argument="spec",
            mentions=["image_size"],
        )


def random_access(data: OpenedData, image_size: int | None = None) -> Any:
    """A random-access source of ``data``: its own, or its stream read into memory.

    For exact evaluation. A stream's images are stretched to ``image_size``
    (see :func:`in_memory`), which images of varying size need (:func:`sized`).

    Example:
        >>> import tempfile, numpy as np
        >>> from tfdp.recipe.dataspec import open_source
        >>> from tfdp.sources import write_tfrecords
        >>> out = tempfile.mkdtemp()
        >>> arrays = (np.zeros((4, 2, 2), np.uint8), np.arange(4) % 2)
        >>> _ = write_tfrecords(arrays, out, num_shards=2)
        >>> random_access(open_source(out)).num_examples
        4
    """
    from tfdp.sources import ArraySource

    if data.source is not None:
        return data.source
    sized(data, image_size)
    return ArraySource(in_memory(data, None, image_size))
