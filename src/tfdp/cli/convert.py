"""``tfdp data convert``: data sets converted between digits, .npz, image folders and TFRecord.

This module owns :func:`convert_data` and its writers. The formats:

* ``digits``: :func:`tfdp.recipe.digits.load_digits` ``("all")``, 1,797 grey 8x8
  images (levels 0..16), classes ``"0"``..``"9"``.
* ``.npz``: arrays ``images`` uint8 ``[N, H, W, C]`` (``[N, H, W]`` is read
  as one channel; ``x``/``image`` are accepted too) and ``labels`` int ``[N]``
  (or ``y``/``label``), plus, when written here from a source with class
  names, ``classes`` (str ``[K]``, the name of label ``k``).
* image folder: ``root/<class>/<image>`` read by
  :class:`tfdp.sources.ImageFolderSource` (labels are the sorted class folder
  names' positions); written as ``DST/<class>/<index>.png`` where ``<index>``
  is the example's position in the source, zero-padded so names sort in
  order, and ``<class>`` is its class name or, without names, its label
  zero-padded to the width of the largest label.
* TFRecord: a directory (or a ``*.manifest.json`` path) written by
  :func:`tfdp.sources.write_tfrecords`, features ``image`` and ``label``
  (int64). The images of a folder of JPEG files are the files byte for byte
  (encoding ``jpeg``, as ``write_tfrecords`` stores them), unless
  ``--image-size`` resizes them; every other image is PNG-encoded. Records
  are written in ``write_tfrecords``'s seeded shuffled order (so that
  class-sorted sources give mixed shards). ``tfdp data convert`` adds
  ``classes`` (names or null), ``num_classes`` and ``label_counts`` to the
  manifest, so that ``tfdp train`` knows the classes
  without reading every label. Reading checks every shard's record count
  against the manifest; a difference is an error naming the shard.

Data is opened and checked by :func:`tfdp.recipe.dataspec.open_source`, the same
as ``tfdp train`` does: what training refuses (non-integral or stray labels,
non-finite pixels, floats outside [0, 1]) is refused here too. Output is
written under a temporary name and renamed when complete.

Example:
    $ tfdp data convert digits digits.npz
    $ tfdp data convert ~/imagenet/train shards/ --shards 1024 --image-size 224
"""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Callable
from typing import Any

import numpy as np

from tfdp._names import MANIFEST_SUFFIX
from tfdp._util import replaced_atomically, temp_name, write_text_atomic
from tfdp.cli.progress import Progress
from tfdp.errors import ConfigError, DataError
from tfdp.recipe.data import data_errors
from tfdp.recipe.dataspec import (
    OpenedData,
    open_source,
    read_error,
    read_labels,
    resize_uint8,
)
from tfdp.sources.base import EncodedImageSource

__all__ = ["FORMATS", "convert_data"]

#: Output formats of :func:`convert_data`.
FORMATS = ("tfrecord", "npz", "folder")
_EXAMPLES_PER_SHARD = 10_000
_MIN_SHARDS = 8


class _Feed:
    """A random-access source for write_tfrecords: labels int64, resized, counting progress."""

    streaming = False

    def __init__(
        self,
        load: Callable[[Any], Any],
        num_examples: int,
        image_shape: tuple[int | None, ...],
        image_size: int | None,
        progress: Progress,
    ) -> None:
        import tensorflow as tf

        self._load = load
        self._size = image_size
        self._progress = progress
        self.num_examples = num_examples
        shape = [image_size, image_size, image_shape[-1]] if image_size else list(image_shape)
        self._shape = shape
        self.element_spec = (tf.TensorSpec(shape, tf.uint8), tf.TensorSpec([], tf.int64))

    def _tick(self, index: Any) -> np.int64:
        self._progress.update(1)
        return np.int64(0)

    def load(self, index: Any) -> tuple[Any, Any]:
        import tensorflow as tf

        image, label = self._load(index)
        label = tf.cast(label, tf.int64)
        image = resize_uint8(image, self._size)
        token = tf.numpy_function(self._tick, [index], tf.int64, stateful=True)
        with tf.control_dependencies([token]):
            image = tf.identity(image)
        image.set_shape(self._shape)
        return image, label


class _JpegFiles:
    """A folder of JPEGs for write_tfrecords: the files as they are (byte for byte), counted.

    Meets :class:`tfdp.sources.base.EncodedImageSource` (and the random-access contract) by
    handing over ``source``'s own methods, each ``load_encoded`` counting one example done.
    """

    streaming = False
    jpeg_files = True

    def __init__(self, source: Any, progress: Progress) -> None:
        self._source = source
        self._progress = progress
        self.num_examples = source.num_examples
        self.element_spec = source.element_spec
        self.load = source.load
        self.path = source.path

    def _tick(self, index: Any) -> np.int64:
        self._progress.update(1)
        return np.int64(0)

    def load_encoded(self, index: Any) -> tuple[Any, Any]:
        import tensorflow as tf

        example, problem = self._source.load_encoded(index)
        token = tf.numpy_function(self._tick, [index], tf.int64, stateful=True)
        with tf.control_dependencies([token]):
            problem = tf.identity(problem)
        return example, problem


def _list_loader(images: list[np.ndarray], labels: list[int]) -> Callable[[Any], Any]:
    import tensorflow as tf

    channels = images[0].shape[-1]

    def get(i: np.ndarray) -> tuple[np.ndarray, np.int64]:
        return images[int(i)], np.int64(labels[int(i)])

    def load(index: Any) -> tuple[Any, Any]:
        image, label = tf.numpy_function(get, [index], (tf.uint8, tf.int64), stateful=False)
        image.set_shape([None, None, channels])
        label.set_shape([])
        return image, label

    return load


def _dst_format(dst: str, to: str | None) -> str:
    if to is not None:
        if to not in FORMATS:
            raise ConfigError(f"--to must be one of {', '.join(FORMATS)}, got {to!r}")
        return to
    return "npz" if dst.endswith(".npz") else "tfrecord"


def _check_dst(dst: str, fmt: str) -> None:
    """Refuse a destination of the wrong kind or not empty (before any data is opened)."""
    if os.path.isdir(dst):
        if fmt == "npz":
            raise ConfigError(f"DST {dst!r} is a directory; a .npz output needs a file name")
        if os.listdir(dst):
            raise ConfigError(
                f"DST {dst!r} exists and is not empty; remove it or choose another path "
                "(tfdp data convert never overwrites)"
            )
    elif os.path.exists(dst):
        if fmt != "npz":
            raise ConfigError(f"DST {dst!r} is a file; --to {fmt} writes a directory")
        if os.path.getsize(dst) > 0:
            raise ConfigError(
                f"DST {dst!r} exists and is not empty; remove it or choose another path "
                "(tfdp data convert never overwrites)"
            )


def _check_dst_outside(dst: str, data: OpenedData) -> None:
    """Refuse a destination that is the source or lies inside it."""
    if data.kind != "digits":
        where = os.path.abspath(data.where)
        src_real = os.path.realpath(os.path.dirname(where) if data.kind == "tfrecord" else where)
        dst_real = os.path.realpath(dst)
        if dst_real == src_real or (
            os.path.isdir(src_real) and os.path.commonpath([src_real, dst_real]) == src_real
        ):
            raise ConfigError(f"DST {dst!r} is SRC or lies inside it; write elsewhere")


def _temp_sibling(dst: str) -> str:
    parent = os.path.dirname(os.path.abspath(dst))
    os.makedirs(parent, exist_ok=True)
    return os.path.join(parent, temp_name("." + os.path.basename(os.path.abspath(dst))))


def _publish_dir(tmp: str, dst: str) -> None:
    """Move the finished ``tmp`` directory to ``dst`` (which is absent or an empty directory)."""
    if os.path.isdir(dst):
        os.rmdir(dst)  # empty (checked before); fails, leaving dst alone, if it filled up since
    os.rename(tmp, dst)


def _class_dirs(data: OpenedData, labels_seen: np.ndarray) -> dict[int, str]:
    """Folder name of every label present."""
    present = sorted(int(v) for v in np.unique(labels_seen))
    if data.classes:
        if present[-1] >= len(data.classes):
            raise DataError(
                f"{data.where}: label {present[-1]} has no class name ({len(data.classes)} classes)"
            )
        names = {k: data.classes[k] for k in present}
    else:
        width = len(str(present[-1]))
        names = {k: f"{k:0{width}d}" for k in present}
    for k, name in names.items():
        if (
            not name
            or name in (".", "..")
            or "/" in name
            or (os.altsep and os.altsep in name)
            or os.sep in name
            or "\0" in name
        ):
            raise DataError(f"class {k} is named {name!r}: not usable as a folder name")
    if len(set(names.values())) != len(names):
        raise DataError(f"{data.where}: two classes share a folder name: {sorted(names.values())}")
    return names


def _write_folder(
    data: OpenedData, dst: str, image_size: int | None, progress: Progress
) -> tuple[int, list[str]]:
    import tensorflow as tf

    from tfdp._autograph import plain

    if data.labels is not None:
        _class_dirs(data, data.labels)  # bad class names fail before any work
    ds = data.dataset().map(
        plain(lambda image, label: (tf.io.encode_png(resize_uint8(image, image_size)), label)),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
    width = len(str(data.num_examples - 1))
    tmp = _temp_sibling(dst)
    os.makedirs(tmp)
    try:
        # Files go to one staging folder per label, renamed to the class names at the
        # end: a stream's labels (hence the zero-padding of label names) are known then.
        made: set[int] = set()
        written = 0
        for index, (png, label) in enumerate(ds.as_numpy_iterator()):
            label = int(label)
            folder = os.path.join(tmp, f".tfdp-label-{label}")
            if label not in made:
                os.mkdir(folder)
                made.add(label)
            with open(os.path.join(folder, f"{index:0{width}d}.png"), "wb") as fh:
                fh.write(png)
            written += 1
            progress.update(1)
        progress.close()
        names = _class_dirs(data, np.asarray(sorted(made)))
        for label, name in names.items():
            os.rename(os.path.join(tmp, f".tfdp-label-{label}"), os.path.join(tmp, name))
        _publish_dir(tmp, dst)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    present = sorted(made)
    if present != list(range(len(present))) or (data.classes and len(present) != len(data.classes)):
        return written, [
            "note: labels with no example get no folder, so reading DST back as an image "
            "folder numbers its classes 0..K-1 afresh"
        ]
    return written, []


def _write_npz(
    data: OpenedData, dst: str, image_size: int | None, progress: Progress
) -> tuple[int, list[str]]:
    import tensorflow as tf

    from tfdp._autograph import plain

    ds = data.dataset()
    if image_size is not None:
        ds = ds.map(
            plain(lambda image, label: (resize_uint8(image, image_size), label)),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )
    images, labels = [], []
    for index, (image, label) in enumerate(ds.as_numpy_iterator()):
        if images and image.shape != images[0].shape:
            raise DataError(
                f"images differ in size (example 0 is {list(images[0].shape)}, example {index} "
                f"is {list(image.shape)}): a .npz holds one size; give --image-size S"
            )
        images.append(image)
        labels.append(int(label))
        progress.update(1)
    progress.close()
    arrays: dict[str, np.ndarray] = {
        "images": np.stack(images).astype(np.uint8),
        "labels": np.asarray(labels, np.int64),
    }
    if data.classes:
        arrays["classes"] = np.asarray(data.classes, dtype=np.str_)
    os.makedirs(os.path.dirname(os.path.abspath(dst)), exist_ok=True)
    with replaced_atomically(dst) as tmp, open(tmp, "wb") as fh:
        np.savez_compressed(fh, **arrays)  # type: ignore[arg-type]
    return len(labels), []


def _write_tfrecord(
    data: OpenedData, dst: str, image_size: int | None, shards: int | None, progress: Progress
) -> tuple[int, list[str]]:
    from tfdp.sources import write_tfrecords

    n = data.num_examples
    if shards is None:
        shards = min(n, max(_MIN_SHARDS, math.ceil(n / _EXAMPLES_PER_SHARD)))
    if shards > n:
        raise ConfigError(f"--shards {shards} is more than the {n} examples of SRC")
    if data.source is not None:
        load, shape = data.source.load, data.image_shape
        labels = data.labels
    else:  # a stream (TFRecord): read it all (counts checked per shard), then write from memory
        images, label_list = [], []
        reading = Progress(n, f"reading {data.kind}", progress.enabled)
        for image, label in data.dataset().as_numpy_iterator():
            images.append(image)
            label_list.append(int(label))
            reading.update(1)
        reading.close()
        labels = data.labels
        same = all(im.shape == images[0].shape for im in images)
        shape = images[0].shape if same else (None, None, images[0].shape[-1])
        load = _list_loader(images, label_list)
        n = len(images)
    feed: Any = _Feed(load, n, tuple(shape), image_size, progress)
    stored = "images PNG-encoded"
    source = data.source
    if image_size is None and isinstance(source, EncodedImageSource) and source.jpeg_files:
        feed, stored = _JpegFiles(source, progress), "images: the JPEG files byte for byte"
    tmp = _temp_sibling(dst)
    try:
        write_tfrecords(feed, tmp, num_shards=shards)
        progress.close()
        _add_classes_to_manifest(os.path.join(tmp, "data" + MANIFEST_SUFFIX), data, labels)
        _publish_dir(tmp, dst)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    with open(os.path.join(dst, "data" + MANIFEST_SUFFIX), encoding="utf-8") as fh:
        written = int(sum(json.load(fh)["counts"]))
    return written, [
        f"{shards} shard(s) with a manifest (data.manifest.json: files, record counts, classes), "
        f"records in shuffled order, {stored}"
    ]


def _add_classes_to_manifest(path: str, data: OpenedData, labels: Any) -> None:
    """Record the classes (names, number, examples per class) in a just-written manifest.

    ``tfdp train`` takes the number of classes from here instead of reading every label.
    """
    with open(path, encoding="utf-8") as fh:
        manifest = json.load(fh)
    k = int(data.num_classes or (int(np.max(labels)) + 1))
    manifest["classes"] = list(data.classes) if data.classes else None
    manifest["num_classes"] = k
    manifest["label_counts"] = np.bincount(np.asarray(labels), minlength=k).tolist()
    write_text_atomic(path, json.dumps(manifest, indent=1) + "\n")


def convert_data(
    src: str,
    dst: str | os.PathLike[str],
    *,
    to: str | None = None,
    shards: int | None = None,
    image_size: int | None = None,
    num_classes: int | None = None,
    progress: bool = True,
) -> str:
    """Convert a data set between digits, .npz, image folders and TFRecord shards.

    The output is written under a temporary sibling name and renamed when
    complete: an error never leaves a half-written ``dst``. An existing
    non-empty ``dst`` is never overwritten. See the module docstring for the
    formats.

    Args:
        src: ``"digits"``, a .npz file, an image folder, or a TFRecord
            directory / manifest written by ``write_tfrecords``.
        dst: Where to write: a ``.npz`` file, or a directory (TFRecord shards
            or an image folder).
        to: ``"tfrecord"``, ``"npz"`` or ``"folder"``; default from ``dst``:
            ``.npz`` -> npz, anything else -> tfrecord.
        shards: TFRecord files to write (default: about 10,000 examples per
            file, at least 8, at most one per example).
        image_size: Stretch every image to ``image_size`` x ``image_size``
            (bilinear, antialiased; images of that size are untouched).
            Needed for .npz output when the images differ in size.
        num_classes: The number of classes, when the labels do not use them
            all (see :func:`tfdp.recipe.dataspec.check_labels`).
        progress: Show a progress bar on stderr (when it is a terminal).

    Returns:
        What was written: one summary line, then notes (shards, renumbered classes) if any.

    Raises:
        ConfigError: bad arguments, a non-empty ``dst``.
        DataError: a missing or unreadable ``src``, differing image sizes for .npz
            without ``image_size``, a corrupt image (naming the file).

    Example:
        >>> import os, tempfile
        >>> out = os.path.join(tempfile.mkdtemp(), "digits.npz")
        >>> convert_data("digits", out, progress=False)  # doctest: +ELLIPSIS
        'wrote 1797 examples (npz) to .../digits.npz'
    """
    dst = os.path.expanduser(os.fspath(dst))
    if not dst:
        raise ConfigError("DST is empty")
    fmt = _dst_format(dst, to)
    if shards is not None and fmt != "tfrecord":
        raise ConfigError(f"--shards applies to TFRecord output only, not --to {fmt}")
    for name, value in (("--shards", shards), ("--image-size", image_size)):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):
            raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")
    _check_dst(dst, fmt)  # before open_source: bad paths are refused before TensorFlow loads
    with data_errors(spec="SRC", num_classes="--num-classes"):
        data = open_source(src, num_classes=num_classes)
    _check_dst_outside(dst, data)
    if data.dtype != "uint8":
        raise DataError(
            f"{data.where}: holds {data.dtype} images; tfdp data convert writes 8-bit images: "
            "store them as uint8 levels 0..255"
        )
    if data.channels not in (1, 3, 4):
        raise DataError(f"{data.where}: images must have 1, 3 or 4 channels, got {data.channels}")
    import tensorflow as tf

    if data.labels is None:  # TFRecord without a class list: read and check the labels first
        with data_errors(num_classes="--num-classes"):
            read_labels(data, num_classes=num_classes)

    bar = Progress(data.num_examples, f"{fmt} <- {data.kind}", progress)
    try:
        if fmt == "npz":
            written, notes = _write_npz(data, dst, image_size, bar)
        elif fmt == "folder":
            written, notes = _write_folder(data, dst, image_size, bar)
        else:
            written, notes = _write_tfrecord(data, dst, image_size, shards, bar)
    except tf.errors.OpError as err:
        raise DataError(str(read_error(data, err))) from None
    finally:
        bar.close()
    summary = f"wrote {written} examples ({fmt}) to {dst}"
    return "\n".join([summary, *notes, *data.notes])
