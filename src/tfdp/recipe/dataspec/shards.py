"""Opening TFRecord shards written by ``write_tfrecords``: their manifest, labels and records.

This module owns reading shards as data: the manifest found from a
directory, a manifest path, one file or a glob (:func:`open_tfrecord`), the
labels read once when the manifest does not count them (:func:`read_labels`),
the shards read into memory for exact evaluation (:func:`in_memory`, with
:func:`resize_uint8`), and TensorFlow's read errors said with the shard at
fault (:func:`read_error`).

Example:
    >>> import tempfile, numpy as np
    >>> from tfdp.sources import write_tfrecords
    >>> out = tempfile.mkdtemp()
    >>> _ = write_tfrecords((np.zeros((6, 2, 2), np.uint8), np.arange(6) % 3), out, num_shards=2)
    >>> data = open_tfrecord(out, None, True, True, None)
    >>> data.num_classes, data.counts().tolist(), in_memory(data)[0].shape
    (3, [2, 2, 2], (6, 2, 2, 1))
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from tfdp._names import MANIFEST_SUFFIX
from tfdp.errors import DataError
from tfdp.recipe.dataspec.checks import SHOWN, check_class_names, check_labels
from tfdp.recipe.dataspec.opened import OpenedData, RecordLayout

__all__ = ["in_memory", "open_tfrecord", "read_error", "read_labels", "resize_uint8"]


def _find_manifest(path: str) -> str:
    if os.path.isfile(path):
        return path
    found = sorted(n for n in os.listdir(path) if n.endswith(MANIFEST_SUFFIX))
    if len(found) > 1:
        raise DataError(
            f"{path} holds {len(found)} manifests ({', '.join(found)}): give the one to use"
        )
    return os.path.join(path, found[0])


def _tfrecord_files(spec: str) -> tuple[str, list[str] | None]:
    """The manifest to use, and the files of a glob (None: all of the manifest's)."""
    import glob

    if any(c in spec for c in "*?[") or spec.endswith((".tfrecord", ".tfrec")):
        files = sorted(glob.glob(os.path.expanduser(spec)))
        if not files:
            raise FileNotFoundError(f"{spec!r} matches no file")
        folders = sorted({os.path.dirname(os.path.abspath(f)) for f in files})
        if len(folders) != 1:
            raise DataError(f"{spec!r} matches files in {len(folders)} folders: use one folder")
        manifests = sorted(n for n in os.listdir(folders[0]) if n.endswith(MANIFEST_SUFFIX))
        if not manifests:
            raise DataError(
                f"{spec!r}: no *{MANIFEST_SUFFIX} next to the files: tfdp reads TFRecord shards "
                "written by write_tfrecords, whose manifest describes their features"
            )
        return _find_manifest(folders[0]), [os.path.abspath(f) for f in files]
    return _find_manifest(spec), None


def open_tfrecord(
    spec: str,
    num_classes: int | None,
    require_all: bool,
    read_all_labels: bool,
    class_names: Sequence[str] | None,
) -> OpenedData:
    """Shards from their directory, manifest, one file or a glob, as ``open_source`` opens them.

    The classes come from the manifest when it counts them (written for all
    the shards), else, with ``read_all_labels``, from reading the labels once
    (:func:`read_labels`); ``require_all`` is ``require_all_classes``.
    """
    from tfdp.sources import TFRecordSource
    from tfdp.sources.tfrecord import read_manifest

    manifest_path, files = _tfrecord_files(spec)
    manifest = read_manifest(manifest_path)
    feats = manifest["features"]
    names = [f["name"] for f in feats]
    structure = manifest["structure"]
    if structure == "single" or len(feats) < 2:
        raise DataError(f"{manifest_path}: the records hold no label (features {names})")
    image_at = names.index("image") if "image" in names else 0
    label_at = names.index("label") if "label" in names else 1
    if len(feats) != 2 and not {"image", "label"} <= set(names):
        raise DataError(f"{manifest_path}: expected features 'image' and 'label', got {names}")
    image_f, label_f = feats[image_at], feats[label_at]
    if image_f["dtype"] != "uint8" or len(image_f["shape"]) not in (2, 3):
        raise DataError(
            f"{manifest_path}: feature {image_f['name']!r} is {image_f['dtype']} of shape "
            f"{image_f['shape']}; expected uint8 images [H, W, C]"
        )
    if label_f["shape"] != [] or not (
        label_f["dtype"].startswith(("int", "uint")) or label_f["dtype"] == "bool"
    ):
        raise DataError(
            f"{manifest_path}: feature {label_f['name']!r} is {label_f['dtype']} of shape "
            f"{label_f['shape']}; expected one integer label per record"
        )
    if files is not None:
        listed = {os.path.normpath(f) for f in manifest["files"]}
        extra = [f for f in files if os.path.normpath(f) not in listed]
        if extra:
            raise DataError(
                f"{spec!r}: {len(extra)} file(s) are not in {manifest_path}: {extra[:SHOWN]}"
            )
    src = TFRecordSource(files if files is not None else manifest_path)
    shape = tuple(image_f["shape"])
    if len(shape) == 2:
        shape = (*shape, 1)
    counts = [int(c) for c in src.counts]
    data = OpenedData(
        kind="tfrecord",
        where=manifest_path,
        num_examples=int(sum(counts)),
        image_shape=shape,
        dtype="uint8",
        scale=1 / 255,
        num_classes=None,
        stream=src,
        layout=RecordLayout(
            image_key=image_f["name"] if structure == "dict" else image_at,
            label_key=label_f["name"] if structure == "dict" else label_at,
            label_feature=label_f,
        ),
    )
    data.details += [
        f"files: {len(counts)} shard(s), {min(counts)}..{max(counts)} records each, "
        f"compression: {manifest.get('compression') or 'none'}",
        "features: "
        + ", ".join(f"{f['name']} ({f['encoding']}, {f['dtype']}, {f['shape']})" for f in feats),
    ]
    classes = manifest.get("classes")
    k = manifest.get("num_classes")
    label_counts = manifest.get("label_counts")
    if classes:
        data.classes = [str(c) for c in classes]
        check_class_names(f"{manifest_path} (its 'classes')", data.classes, class_names)
    if isinstance(k, int):  # the manifest's classes: those of all the shards
        if num_classes is not None and num_classes != k:
            if data.classes is not None:
                raise DataError(
                    f"{manifest_path}: names {k} classes, but {num_classes} are expected"
                )
            if (
                num_classes < k
                and isinstance(label_counts, list)
                and any(label_counts[num_classes:])
            ):
                top = int(np.flatnonzero(label_counts)[-1])
                raise DataError(
                    f"{manifest_path}: labels up to {top} occur, but {num_classes} classes "
                    "are expected"
                )
            k = num_classes
        data.num_classes = int(k)
    if isinstance(k, int) and isinstance(label_counts, list) and files is None:
        data.label_counts = np.asarray(label_counts, np.int64)
        if np.count_nonzero(data.label_counts) == 1:
            data.notes.append(
                f"warning: {manifest_path}: every record has label "
                f"{int(np.flatnonzero(data.label_counts)[0])}: a single class (accuracy is "
                "trivially 1.0)"
            )
    elif read_all_labels:  # some of the shards, or shards without a class list
        read_labels(
            data,
            num_classes=data.num_classes if data.num_classes is not None else num_classes,
            require_all_classes=require_all,
        )
    elif data.num_classes is None:
        data.details.append(
            "classes: unknown without reading every record (the manifest has no class list)"
        )
    return data


def read_error(data: OpenedData, err: Exception) -> DataError:
    """The error to raise for a TensorFlow error met while reading ``data``, naming the file.

    A TFRecord shard whose record count differs from its manifest's makes
    TensorFlow say only "expected to contain N elements"; the shards at
    fault are found and named (:meth:`tfdp.TFRecordSource.count_problems`).
    """
    from tfdp.errors import meaningful_line

    text = getattr(err, "message", None) or str(err)
    if data.stream is not None and "expected to contain" in text:
        problems = data.stream.count_problems()
        if problems:
            return DataError("; ".join(problems))
    return DataError(f"{data.where}: {meaningful_line(text)}")


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
        raise read_error(data, err) from None
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
        raise read_error(data, err) from None
    if not images:
        raise DataError(f"{data.where}: the files hold no record")
    return np.stack(images), np.asarray(labels, np.int64)
