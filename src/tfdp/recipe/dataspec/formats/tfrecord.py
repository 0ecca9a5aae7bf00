"""TFRecord shards as a data format: found from their manifest, the last shards held out.

This module owns :class:`TFRecordShards`. Shards are those ``write_tfrecords``
writes, with its manifest (``*.manifest.json``, features ``image`` uint8
``[H, W(, C)]`` and an integer ``label``); a spec is their directory, their
manifest, one of their files or a glob of some of them (then the classes are
not taken from the manifest's counts, which cover all files). The manifest
may also hold the class names and label counts (``tfdp data convert`` adds
them); without them the labels are read once (the label feature only) to
count the classes. The last ``ceil(eval_fraction * F)`` of the ``F`` shards by
name are held out, read into memory for exact evaluation.

Written with :func:`tfdp.sources.write_tfrecords`: the images of a folder of
JPEG files are the files byte for byte (encoding ``jpeg``) unless
``image_size`` resizes them; every other image is PNG-encoded. Records are in
``write_tfrecords``'s seeded shuffled order (so that class-sorted sources give
mixed shards), and the manifest gets ``classes`` (names or null),
``num_classes`` and ``label_counts``.

Example:
    >>> import tempfile, numpy as np
    >>> from tfdp.sources import write_tfrecords
    >>> out = tempfile.mkdtemp()
    >>> _ = write_tfrecords((np.zeros((6, 2, 2), np.uint8), np.arange(6) % 3), out, num_shards=3)
    >>> data = TFRecordShards().open(out, OpenRequest(read_all_labels=True))
    >>> data.num_classes, data.counts().tolist()
    (3, [2, 2, 2])
    >>> part = TFRecordShards().split(data, eval_fraction=0.3, seed=0, image_size=None)
    >>> len(part.train.files), part.eval.num_examples, part.how
    (2, 2, 'the last 1 of 3 shards')
"""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Callable
from typing import Any, Literal

import numpy as np

from tfdp._names import MANIFEST_SUFFIX
from tfdp._util import write_text_atomic
from tfdp.errors import ConfigError, DataError
from tfdp.recipe.dataspec.checks import SHOWN, check_class_names
from tfdp.recipe.dataspec.contract import HeldOut, OpenRequest, ProgressBar, WriteRequest
from tfdp.recipe.dataspec.opened import OpenedData, RecordLayout
from tfdp.recipe.dataspec.shards import in_memory, read_labels, resize_uint8, sized
from tfdp.recipe.dataspec.writing import publish_dir, staging_dir

_SHARD_SUFFIXES = (".tfrecord", ".tfrec")
_EXAMPLES_PER_SHARD = 10_000  # written by default (at least _MIN_SHARDS files)
_MIN_SHARDS = 8


def _is_glob(spec: str) -> bool:
    return any(c in spec for c in "*?[")


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

    if _is_glob(spec) or spec.endswith(_SHARD_SUFFIXES):
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


class TFRecordShards:
    """Shards written by ``write_tfrecords`` (see the module docstring); meets :class:`DataFormat`.

    Example:
        >>> TFRecordShards().recognise("/no/such/*.tfrecord")  # a glob: matched when opened
        True
    """

    name = "tfrecord"
    about = "the directory / manifest / glob of TFRecord shards written by write_tfrecords"
    channels_chosen = False
    writes: Literal["file", "directory"] | None = "directory"
    suffix = None
    write_options: frozenset[str] = frozenset({"num_shards"})

    def recognise(self, spec: str) -> bool:
        """A glob that names no existing path, a manifest or shard file, a folder with a manifest.

        Raises:
            DataError: a folder of shard files without a manifest.
        """
        path = os.path.expanduser(spec)
        if _is_glob(spec) and not os.path.exists(path):
            return True
        if os.path.isfile(path):
            return path.endswith((MANIFEST_SUFFIX, *_SHARD_SUFFIXES))
        if not os.path.isdir(path):
            return False
        entries = os.listdir(path)
        if any(n.endswith(MANIFEST_SUFFIX) for n in entries):
            return True
        if any(n.endswith(_SHARD_SUFFIXES) for n in entries):
            raise DataError(
                f"{spec!r} holds TFRecord files but no *{MANIFEST_SUFFIX}: tfdp reads "
                "shards written by write_tfrecords",
                argument="spec",
            )
        return False

    def open(self, spec: str, request: OpenRequest) -> OpenedData:
        """The shards' manifest checked; classes from it, else (``read_all_labels``) the labels.

        Raises:
            DataError: a manifest that does not describe images and labels, files
                it does not list, labels that fail the checks.
            FileNotFoundError: a glob that matches no file.
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
            kind=self.name,
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
            root=os.path.dirname(os.path.abspath(manifest_path)),
        )
        data.details += [
            f"files: {len(counts)} shard(s), {min(counts)}..{max(counts)} records each, "
            f"compression: {manifest.get('compression') or 'none'}",
            "features: "
            + ", ".join(
                f"{f['name']} ({f['encoding']}, {f['dtype']}, {f['shape']})" for f in feats
            ),
        ]
        _classes(data, manifest, files is None, request)
        return data

    def split(
        self, data: OpenedData, *, eval_fraction: float, seed: int, image_size: int | None
    ) -> HeldOut:
        """The last ``ceil(eval_fraction * F)`` shards by file name held out (in memory).

        The rest are streamed for training, in that order; the seed is not used.
        """
        from tfdp.sources import ArraySource, TFRecordSource

        files = sorted(data.stream.files, key=os.path.basename)
        held = math.ceil(eval_fraction * len(files))
        if len(files) < 2 or held >= len(files):
            raise DataError(
                f"{data.spec!r} has {len(files)} TFRecord shard(s): holding out the last "
                f"ceil({eval_fraction:g} * {len(files)}) = {held} for evaluation would leave "
                f"{len(files) - held} to train on. Write more shards ({{num_shards}}), lower "
                "{eval_fraction}, or give {eval_data}",
                argument="spec",
                mentions=["num_shards", "eval_fraction", "eval_data"],
            )
        train_files, eval_files = files[:-held], files[-held:]
        sized(data, image_size)
        images, labels = in_memory(data, eval_files, image_size)
        return HeldOut(
            TFRecordSource(train_files),
            ArraySource((images, labels)),
            f"the last {held} of {len(files)} shards",
        )

    def write(self, data: OpenedData, dst: str, request: WriteRequest) -> tuple[int, list[str]]:
        """Shards and their manifest in ``dst`` (see the module docstring), published whole.

        Raises:
            ConfigError: ``num_shards`` more than the examples.
        """
        from tfdp.sources import write_tfrecords
        from tfdp.sources.base import EncodedImageSource

        n = data.num_examples
        shards = request.num_shards
        if shards is None:
            shards = min(n, max(_MIN_SHARDS, math.ceil(n / _EXAMPLES_PER_SHARD)))
        if shards > n:
            raise ConfigError(
                f"{shards} is more than the {n} examples to write", argument="num_shards"
            )
        if data.source is not None:
            load, shape = data.source.load, data.image_shape
            labels = data.labels
        else:  # a stream (TFRecord): read it all (counts checked per shard), then write from memory
            images, label_list = [], []
            reading = request.progress(n, f"reading {data.kind}")
            try:
                for image, label in data.dataset().as_numpy_iterator():
                    images.append(image)
                    label_list.append(int(label))
                    reading.update(1)
            finally:
                reading.close()
            labels = data.labels
            same = all(im.shape == images[0].shape for im in images)
            shape = images[0].shape if same else (None, None, images[0].shape[-1])
            load = _list_loader(images, label_list)
            n = len(images)
        progress = request.progress(data.num_examples, f"{self.name} <- {data.kind}")
        feed: Any = _Feed(load, n, tuple(shape), request.image_size, progress)
        stored = "images PNG-encoded"
        source = data.source
        if (
            request.image_size is None
            and isinstance(source, EncodedImageSource)
            and source.jpeg_files
        ):
            feed, stored = _JpegFiles(source, progress), "images: the JPEG files byte for byte"
        tmp = staging_dir(dst)
        try:
            write_tfrecords(feed, tmp, num_shards=shards)
            progress.close()
            _add_classes_to_manifest(os.path.join(tmp, "data" + MANIFEST_SUFFIX), data, labels)
            publish_dir(tmp, dst)
        except BaseException:
            progress.close()
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        with open(os.path.join(dst, "data" + MANIFEST_SUFFIX), encoding="utf-8") as fh:
            written = int(sum(json.load(fh)["counts"]))
        return written, [
            f"{shards} shard(s) with a manifest (data.manifest.json: files, record counts, "
            f"classes), records in shuffled order, {stored}"
        ]


def _classes(data: OpenedData, manifest: dict[str, Any], all_files: bool, request: Any) -> None:
    """Set the classes of ``data`` from its manifest, or from its labels read once."""
    manifest_path = data.where
    num_classes = request.num_classes
    classes = manifest.get("classes")
    k = manifest.get("num_classes")
    label_counts = manifest.get("label_counts")
    if classes:
        data.classes = [str(c) for c in classes]
        check_class_names(f"{manifest_path} (its 'classes')", data.classes, request.class_names)
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
    if isinstance(k, int) and isinstance(label_counts, list) and all_files:
        data.label_counts = np.asarray(label_counts, np.int64)
        if np.count_nonzero(data.label_counts) == 1:
            data.notes.append(
                f"warning: {manifest_path}: every record has label "
                f"{int(np.flatnonzero(data.label_counts)[0])}: a single class (accuracy is "
                "trivially 1.0)"
            )
    elif request.read_all_labels:  # some of the shards, or shards without a class list
        read_labels(
            data,
            num_classes=data.num_classes if data.num_classes is not None else num_classes,
            require_all_classes=request.require_all_classes,
        )
    elif data.num_classes is None:
        data.details.append(
            "classes: unknown without reading every record (the manifest has no class list)"
        )


class _Feed:
    """A random-access source for write_tfrecords: labels int64, resized, counting progress."""

    streaming = False

    def __init__(
        self,
        load: Callable[[Any], Any],
        num_examples: int,
        image_shape: tuple[int | None, ...],
        image_size: int | None,
        progress: ProgressBar,
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

    def __init__(self, source: Any, progress: ProgressBar) -> None:
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
