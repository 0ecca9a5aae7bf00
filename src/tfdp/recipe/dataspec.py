"""Opening a data spec -- ``digits``, a ``.npz`` file, an image folder, TFRecord shards -- checked.

This module owns what a data spec means and what the data must hold, for
every path that reads one (``tfdp train``, ``tfdp evaluate``, ``tfdp data
inspect`` and ``tfdp data convert``): :func:`open_source` decides the kind of
a spec and opens it into an :class:`OpenedData`, and :func:`check_labels` /
:func:`check_images` are the one validation of labels and pixels.

The rules (errors name the file, the key and the offending values):

* **Labels** are integers ``[N]`` (``[N, 1]`` is read as ``[N]``). Floats
  holding integer values and bools are converted (said in ``notes``);
  non-integral, non-finite or negative values are refused. The number of
  classes ``K`` is ``len(classes)`` when the data names its classes, else the
  ``num_classes`` given, else the largest label + 1 -- and then every class
  in ``[0, K)`` must occur: a stray label (one ``1000`` among ``0..9``) is
  refused instead of silently building a 1,001-class model. Labels must be
  below ``K``. A single class is allowed with a warning in ``notes``.
* **Pixels**: ``uint8`` is read as ``0..255`` (scale ``1/255``); floats must
  be finite and in ``[0, 1]`` (used as they are, scale 1); other integer
  types holding ``0..255`` are converted to ``uint8``, bools to ``0/1``
  (both said in ``notes``); anything else is refused. The bundled digits are
  levels ``0..16`` (scale ``1/16``).
* **TFRecord** shards need the manifest ``write_tfrecords`` writes, which
  may also hold the class names and label counts (``tfdp data convert`` adds
  them). Without them the labels are read once (the label feature only) to
  count the classes.

It speaks the library's words: an error names the Python argument at fault
(``spec``, ``num_classes``; :attr:`tfdp.errors.TfdpError.argument`), and each
caller says it in its own (:func:`tfdp.errors.said_as`: ``--data``, ``SRC``).
Importing this module loads no TensorFlow; opening a spec does.

Example:
    >>> data = open_source("digits")
    >>> data.kind, data.num_examples, data.num_classes, data.scale
    ('digits', 1797, 10, 0.0625)
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from tfdp._names import MANIFEST_SUFFIX
from tfdp.errors import ConfigError, DataError

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from tfdp.sources.base import RandomAccessSource
    from tfdp.sources.tfrecord import TFRecordSource

__all__ = [
    "OpenedData",
    "RecordLayout",
    "check_class_names",
    "check_images",
    "check_labels",
    "in_memory",
    "open_source",
    "read_error",
    "read_labels",
    "resize_uint8",
]

_IMAGE_KEYS = ("images", "x", "image")
_LABEL_KEYS = ("labels", "y", "label")
_CHANNEL_PROBES = 32  # image files decoded to guess a folder's channel count (and show sizes)
_SHOWN = 5  # offending values / indices listed in a message


def _show(values: Any, limit: int = _SHOWN) -> str:
    values = [v.item() if hasattr(v, "item") else v for v in np.asarray(values).reshape(-1)]
    text = ", ".join(repr(v) if isinstance(v, str) else f"{v:g}" for v in values[:limit])
    return text + (f", ... ({len(values)} in all)" if len(values) > limit else "")


def _where(path: str, key: str | None) -> str:
    return f"{path} (key {key!r})" if key else path


def check_class_names(where: str, have: Sequence[str] | None, want: Sequence[str] | None) -> None:
    """Refuse class names that differ from the expected ones (held-out vs training data).

    A label means the class of that position: other names, or the same in
    another order, would give the labels other meanings.

    Example:
        >>> check_class_names("b/", ["cat", "eel"], ["cat", "dog", "eel"])
        Traceback (most recent call last):
        ...
        tfdp.errors.DataError: b/ names other classes than expected (missing: ['dog']; not expected: []): its labels would mean other classes
    """  # noqa: E501
    if have is None or want is None or list(have) == list(want):
        return
    missing = [c for c in want if c not in set(have)][:_SHOWN]
    extra = [c for c in have if c not in set(want)][:_SHOWN]
    order = "" if missing or extra else " (the same names, in another order)"
    raise DataError(
        f"{where} names other classes than expected{order} (missing: {missing}; not expected: "
        f"{extra}): its labels would mean other classes"
    )


def _ranges(ks: Sequence[int]) -> str:
    """``[3, 4, 5, 9]`` -> ``"3..5, 9"``."""
    out: list[str] = []
    start = prev = None
    for k in [*ks, None]:
        if start is not None and (k is None or k != prev + 1):
            out.append(str(start) if start == prev else f"{start}..{prev}")
            start = None
        if k is not None and start is None:
            start = k
        prev = k
    return ", ".join(out[:8]) + (", ..." if len(out) > 8 else "")


def check_labels(
    labels: Any,
    path: str,
    key: str | None = None,
    *,
    classes: Sequence[str] | None = None,
    num_classes: int | None = None,
    require_all_classes: bool = True,
) -> tuple[np.ndarray, int, list[str]]:
    """Check one label per example; return them as int64, the number of classes, and notes.

    Args:
        labels: The label array.
        path: The file (or folder) the labels come from, for messages.
        key: The array's key in the file (e.g. ``"labels"``), for messages.
        classes: Class names, when the data has them: ``K = len(classes)``.
        num_classes: ``K`` given by the caller (e.g. the training data's, for
            held-out data); labels must be below it. A stray label's message
            names it (``argument="num_classes"``) as a way out.
        require_all_classes: With ``K`` inferred (largest label + 1), refuse
            classes below it that never occur.

    Returns:
        ``(labels int64 [N], K, notes)``.

    Raises:
        tfdp.errors.DataError: naming the file, the key and the offending
            values (with their example indices).

    Example:
        >>> check_labels(np.array([0.0, 2.0, 1.0]), "y.npz", "labels")[:2]
        (array([0, 2, 1]), 3)
        >>> check_labels(np.array([0, 1, 1000]), "y.npz", "labels")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        tfdp.errors.DataError: y.npz (key 'labels'): classes 2..999 have no example, ...
    """
    where = _where(path, key)
    y = np.asarray(labels)
    notes: list[str] = []
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
        notes.append(f"{where}: labels of shape [N, 1] read as [N]")
    if y.ndim != 1:
        raise DataError(f"{where}: labels must be [N] (one per example), got shape {list(y.shape)}")
    if y.dtype.kind == "b":
        y = y.astype(np.int64)
        notes.append(f"{where}: bool labels read as 0/1")
    elif y.dtype.kind == "f":
        bad = np.flatnonzero(~np.isfinite(y))
        if len(bad):
            raise DataError(
                f"{where}: {len(bad)} label(s) are NaN or infinite (at example(s) {_show(bad)}); "
                "labels must be integer class ids"
            )
        frac = np.flatnonzero(y != np.round(y))
        if len(frac):
            raise DataError(
                f"{where}: labels must be integer class ids; {len(frac)} are not, with values "
                f"{_show(np.unique(y[frac]))} (at example(s) {_show(frac)})"
            )
        notes.append(f"{where}: {y.dtype.name} labels hold integer values: read as int64")
        y = y.astype(np.int64)
    elif y.dtype.kind not in "iu":
        kind = "strings (class names?)" if y.dtype.kind in "SUO" else y.dtype.name
        raise DataError(
            f"{where}: labels must be integer class ids, got {kind}; store integer labels "
            "(and the names, if any, as a 'classes' array)"
        )
    y = y.astype(np.int64)
    if len(y) == 0:
        raise DataError(f"{where}: holds no example")
    neg = np.flatnonzero(y < 0)
    if len(neg):
        raise DataError(
            f"{where}: labels must be >= 0; {len(neg)} are not, with values "
            f"{_show(np.unique(y[neg]))} (at example(s) {_show(neg)})"
        )
    if classes is not None and num_classes is not None and len(classes) != num_classes:
        raise DataError(f"{where}: names {len(classes)} classes, but {num_classes} are expected")
    k = len(classes) if classes is not None else num_classes
    top = int(y.max())
    if k is not None:
        over = np.flatnonzero(y >= k)
        if len(over):
            source = "named" if classes is not None else "expected"
            raise DataError(
                f"{where}: labels must be in 0..{k - 1} ({k} classes {source}); "
                f"{len(over)} are not, with values {_show(np.unique(y[over]))} "
                f"(at example(s) {_show(over)})"
            )
    else:
        k = top + 1
        counts = np.bincount(y, minlength=k)
        missing = np.flatnonzero(counts == 0)
        if require_all_classes and len(missing):
            above = np.unique(y[y > missing[0]])
            at = np.flatnonzero(np.isin(y, above))
            raise DataError(
                f"{where}: classes {_ranges(missing.tolist())} have no example, but label(s) "
                f"{_show(above)} occur (at example(s) {_show(at)}): a stray label would make a "
                f"{k}-class model. Fix the labels, or state the number of classes "
                "(num_classes) or name them (a 'classes' array)",
                argument="num_classes",
            )
    if len(np.unique(y)) == 1:
        notes.append(
            f"warning: {where}: every example has label {int(y[0])}: a single class "
            "(accuracy is trivially 1.0)"
        )
    return y, int(k), notes


def check_images(
    images: Any, path: str, key: str | None = None
) -> tuple[np.ndarray, float, list[str]]:
    """Check an image array; return it (``[N, H, W, C]``), its pixel scale and notes.

    ``scale`` maps the stored values to ``[0, 1]``: ``1/255`` for ``uint8``
    (and integer arrays converted to it), ``1.0`` for floats in ``[0, 1]``
    and bools.

    Raises:
        tfdp.errors.DataError: naming the file, the key, and the values or count found.

    Example:
        >>> x, scale, notes = check_images(np.full((2, 4, 4), 0.5), "x.npz", "images")
        >>> x.shape, x.dtype, scale, notes[0]
        ((2, 4, 4, 1), dtype('float32'), 1.0, "x.npz (key 'images'): float64 images in [0, 1]: used as they are (as float32)")
        >>> check_images(np.full((1, 2, 2), 2.5), "x.npz", "images")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        tfdp.errors.DataError: x.npz (key 'images'): float images must be in [0, 1], got values 2.5..2.5; ...
    """  # noqa: E501
    where = _where(path, key)
    x = np.asarray(images)
    notes: list[str] = []
    if x.ndim == 3:
        x = x[..., None]
    if x.ndim != 4:
        raise DataError(f"{where}: images must be [N, H, W, C], got shape {list(x.shape)}")
    if len(x) == 0:
        raise DataError(f"{where}: holds no example")
    kind = x.dtype.kind
    if x.dtype == np.uint8:
        return x, 1 / 255, notes
    if kind == "b":
        notes.append(f"{where}: bool images read as 0.0 / 1.0")
        return x.astype(np.float32), 1.0, notes
    if kind == "f":
        finite = np.isfinite(x)
        if not finite.all():
            bad = np.flatnonzero(~finite.reshape(len(x), -1).all(axis=1))
            raise DataError(
                f"{where}: {int((~finite).sum())} pixel value(s) are NaN or infinite (in "
                f"example(s) {_show(bad)}); fix or drop those images"
            )
        low, high = float(x.min()), float(x.max())
        if low < 0 or high > 1:
            raise DataError(
                f"{where}: float images must be in [0, 1], got values {low:g}..{high:g}; scale "
                "them to [0, 1], or store uint8 levels 0..255"
            )
        if x.dtype != np.float32:
            notes.append(f"{where}: {x.dtype.name} images in [0, 1]: used as they are (as float32)")
        return x.astype(np.float32, copy=False), 1.0, notes
    if kind in "iu":
        low, high = int(x.min()), int(x.max())
        if low < 0 or high > 255:
            raise DataError(
                f"{where}: {x.dtype.name} images hold values {low}..{high}; tfdp reads 8-bit "
                "levels (0..255, best stored as uint8) or floats in [0, 1]: rescale them"
            )
        notes.append(f"{where}: {x.dtype.name} images with levels 0..255 read as uint8")
        return x.astype(np.uint8), 1 / 255, notes
    raise DataError(f"{where}: images must be uint8 (0..255) or float (0..1), got {x.dtype.name}")


@dataclass(frozen=True)
class RecordLayout:
    """Where a TFRecord example holds its image and label (from the shards' manifest).

    Attributes:
        image_key: The image's key in a decoded example (a feature name, or a
            position for a tuple structure).
        label_key: The label's, likewise.
        label_feature: The manifest's description of the label feature
            (``name``, ``encoding``, ``dtype``, ``shape``).

    Example:
        >>> import tensorflow as tf
        >>> layout = RecordLayout("image", "label", {"name": "label"})
        >>> image, label = layout.pick({"image": tf.zeros([2, 2], tf.uint8), "label": 3})
        >>> image.shape, int(label)
        (TensorShape([2, 2, 1]), 3)
    """

    image_key: str | int
    label_key: str | int
    label_feature: dict[str, Any]

    def pick(self, example: Any) -> tuple[Any, Any]:
        """``(image [H, W, C], label int64)`` of a decoded example (graph-compatible)."""
        import tensorflow as tf

        image = example[self.image_key]
        if image.shape.rank == 2:
            image = image[..., tf.newaxis]
        return image, tf.cast(example[self.label_key], tf.int64)


@dataclass
class OpenedData:
    """One opened, checked data set, whatever its kind.

    Attributes:
        kind: ``"digits"``, ``"npz"``, ``"folder"`` or ``"tfrecord"``.
        where: The file, folder or manifest opened.
        num_examples: Examples it holds.
        image_shape: Of one image, ``(H, W, C)``; ``None`` where sizes vary.
        dtype: The stored pixel type (``"uint8"``, ``"float32"``).
        scale: Multiplier taking stored pixels to ``[0, 1]``.
        num_classes: ``K``, checked (see the module docstring).
        classes: ``classes[k]`` names label ``k``, when known.
        labels: int64 labels, when known without reading the images.
        label_counts: Examples per class, when known (from the labels or a manifest).
        source: The random-access source of arrays or a folder (``load(index)
            -> (image, label)``), else None.
        stream: The :class:`~tfdp.sources.tfrecord.TFRecordSource` of TFRecord
            data, else None.
        layout: Where its examples hold the image and label (TFRecord data).
        sample_sizes: Image sizes ``(H, W)`` seen in a sample of a folder's files.
        notes: What was converted or is suspicious (``"warning: ..."``), one line each.
        details: More description lines (for ``tfdp data inspect``).
    """

    kind: Literal["digits", "npz", "folder", "tfrecord"]
    where: str
    num_examples: int
    image_shape: tuple[int | None, ...]
    dtype: str
    scale: float
    num_classes: int | None
    classes: list[str] | None = None
    labels: np.ndarray | None = None
    label_counts: np.ndarray | None = None
    source: RandomAccessSource | None = None
    stream: TFRecordSource | None = None
    layout: RecordLayout | None = field(default=None, repr=False)
    sample_sizes: list[tuple[int, int]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    details: list[str] = field(default_factory=list)

    @property
    def channels(self) -> int:
        """``C`` (3 when the shards do not say)."""
        c = self.image_shape[-1]
        return int(c) if c is not None else 3

    def records(self, files: Sequence[str] | None = None) -> Any:
        """TFRecord data: a dataset of ``(image, label)`` over ``files`` (default all), in order.

        Each file's record count is checked against the manifest as it is
        read (:meth:`tfdp.TFRecordSource.file_records`).
        """
        import tensorflow as tf

        from tfdp._autograph import plain

        src, layout = self.stream, self.layout
        assert src is not None and layout is not None, "TFRecord data only"
        ds = tf.data.Dataset.from_tensor_slices(list(files if files is not None else src.files))
        ds = ds.flat_map(plain(src.file_records))
        return ds.map(
            plain(lambda r: layout.pick(src.parse(r))),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )

    def dataset(self) -> Any:
        """All examples, in order: a dataset of ``(image [H, W, C], label int64)``."""
        import tensorflow as tf

        from tfdp._autograph import plain

        if self.stream is not None:
            return self.records()
        src = self.source
        assert src is not None, "a random-access source or a stream"
        return tf.data.Dataset.range(self.num_examples).map(
            plain(lambda i: _as_pair(src.load(i))),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )

    def counts(self) -> np.ndarray | None:
        """Examples per class ``[K]``, when known."""
        if self.label_counts is not None:
            return self.label_counts
        if self.labels is not None:
            return np.bincount(self.labels, minlength=self.num_classes or 0)
        return None


def _as_pair(example: Any) -> tuple[Any, Any]:
    import tensorflow as tf

    image, label = example
    return image, tf.cast(label, tf.int64)


# ----------------------------------------------------------------------------------------
# Opening each kind
# ----------------------------------------------------------------------------------------


def _open_digits() -> OpenedData:
    from tfdp.recipe.digits import load_digits

    images, labels = load_digits("all")
    return _arrays(
        "digits", "bundled UCI digits", images, labels, [str(k) for k in range(10)], 1 / 16
    )


def _arrays(
    kind: Literal["digits", "npz"],
    where: str,
    images: np.ndarray,
    labels: np.ndarray,
    classes: list[str] | None,
    scale: float,
    *,
    num_classes: int | None = None,
    notes: list[str] | None = None,
) -> OpenedData:
    from tfdp.sources import ArraySource

    data = OpenedData(
        kind=kind,
        where=where,
        num_examples=len(images),
        image_shape=tuple(int(d) for d in images.shape[1:]),
        dtype=images.dtype.name,
        scale=scale,
        num_classes=num_classes if num_classes is not None else len(classes or []),
        classes=classes,
        labels=labels,
        source=ArraySource((images, labels)),
        notes=list(notes or []),
    )
    if kind == "digits":
        data.details.append("pixel levels: 0..16 (not 0..255)")
    return data


def _open_npz(
    path: str,
    num_classes: int | None,
    require_all: bool,
    class_names: Sequence[str] | None,
) -> OpenedData:
    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
    except OSError as err:
        raise DataError(f"{path}: cannot be read ({err.strerror})") from None
    if head not in (b"PK\x03\x04", b"PK\x05\x06"):  # a zip archive (05 06: an empty one)
        raise DataError(
            f"{path}: not a .npz file (a .npz is a zip archive of arrays, as numpy.savez writes; "
            f"this file starts with {head!r})"
        )
    try:
        with np.load(path, allow_pickle=False) as npz:
            keys = set(npz.files)
            xk = next((k for k in _IMAGE_KEYS if k in keys), None)
            yk = next((k for k in _LABEL_KEYS if k in keys), None)
            found = xk is not None and yk is not None
            if found:
                images, labels = npz[xk], npz[yk]
                classes = npz["classes"] if "classes" in keys else None
    except Exception as err:  # zipfile.BadZipFile, pickled objects, OSError, ...
        raise DataError(f"{path}: not a readable .npz file ({type(err).__name__}: {err})") from None
    if not found:
        raise DataError(
            f"{path}: a .npz data set holds arrays 'images' (or 'x') and 'labels' (or 'y'); "
            f"it has {sorted(keys)}"
        )
    names = None
    if classes is not None:
        names = [str(c) for c in np.asarray(classes).reshape(-1).tolist()]
        check_class_names(f"{path} (key 'classes')", names, class_names)
    x, scale, notes = check_images(images, path, xk)
    y, k, label_notes = check_labels(
        labels,
        path,
        yk,
        classes=names,
        num_classes=num_classes,
        require_all_classes=require_all,
    )
    if len(x) != len(y):
        raise DataError(
            f"{path}: {len(x)} images (key {xk!r}) but {len(y)} labels (key {yk!r}): "
            "one label per image"
        )
    return _arrays("npz", path, x, y, names, scale, num_classes=k, notes=notes + label_notes)


def _probe_folder(src: Any) -> tuple[int, list[tuple[int, int]]]:
    """The channel count to decode a folder with (the most of a spread of files) and their sizes."""
    import tensorflow as tf

    n = src.num_examples
    picks = sorted({int(i) for i in np.linspace(0, n - 1, min(n, _CHANNEL_PROBES))})
    found = 0
    sizes = []
    for i in picks:
        try:
            data = tf.io.read_file(src.path(i))
            image = tf.io.decode_image(data, channels=0, expand_animations=False)
        except (tf.errors.OpError, ValueError):
            continue  # a bad file: reported by name when it is read
        found = max(found, int(image.shape[-1]))
        sizes.append((int(image.shape[0]), int(image.shape[1])))
    return {0: 3, 1: 1, 2: 4, 3: 3}.get(found, 4), sizes


def _open_folder(
    path: str,
    channels: int | None,
    on_bad_file: str,
    num_classes: int | None,
    class_names: Sequence[str] | None,
) -> OpenedData:
    from tfdp.sources import ImageFolderSource

    src = ImageFolderSource(path, on_error=on_bad_file)
    probed, sizes = _probe_folder(src)
    if channels is None:
        channels = probed
    if channels != src.channels:
        src = ImageFolderSource(path, on_error=on_bad_file, channels=channels)
    labels = np.asarray(src.labels, np.int64)
    k = len(src.classes)
    check_class_names(f"{src.root} (its class folders)", src.classes, class_names)
    if num_classes is not None and k != num_classes:
        raise DataError(f"{src.root}: has {k} class folders, but {num_classes} are expected")
    same = len(set(sizes)) == 1
    data = OpenedData(
        kind="folder",
        where=src.root,
        num_examples=src.num_examples,
        image_shape=(None, None, channels),
        dtype="uint8",
        scale=1 / 255,
        num_classes=k,
        classes=list(src.classes),
        labels=labels,
        source=src,
        sample_sizes=sizes,
    )
    data.details.append(
        f"channels: {channels} (the most among {min(src.num_examples, _CHANNEL_PROBES)} "
        "files sampled; others are converted)"
    )
    if sizes:
        shown = sorted(set(sizes))[:_SHOWN]
        data.details.append(
            "sizes in that sample: "
            + ", ".join(f"{h}x{w}" for h, w in shown)
            + (" (all the same)" if same else "")
        )
    if k == 1:
        data.notes.append(
            f"warning: {src.root}: a single class folder ({src.classes[0]!r}): accuracy is "
            "trivially 1.0"
        )
    return data


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


def _open_tfrecord(
    spec: str,
    num_classes: int | None,
    require_all: bool,
    read_all_labels: bool,
    class_names: Sequence[str] | None,
) -> OpenedData:
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
                f"{spec!r}: {len(extra)} file(s) are not in {manifest_path}: {extra[:_SHOWN]}"
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


def open_source(
    spec: str,
    *,
    num_classes: int | None = None,
    channels: int | None = None,
    on_bad_file: str = "raise",
    require_all_classes: bool = True,
    read_all_labels: bool = False,
    class_names: Sequence[str] | None = None,
) -> OpenedData:
    """Open a data spec: ``"digits"``, a .npz file, an image folder, or TFRecord shards.

    TFRecord shards are given as their directory, their manifest
    (``*.manifest.json``), one of their files or a glob of some of them
    (then the classes are not taken from the manifest's counts, which cover
    all files).

    Args:
        spec: What to open.
        num_classes: The number of classes, when the caller knows it (held-out
            data: the training data's); see :func:`check_labels`.
        channels: Decode an image folder to this many channels (default: the
            most found among a sample of its files).
        on_bad_file: Image folders: ``"raise"`` or ``"skip"`` (see
            :class:`tfdp.ImageFolderSource`'s ``on_error``).
        require_all_classes: See :func:`check_labels`.
        read_all_labels: TFRecord data whose manifest has no class list: read
            the labels (:func:`read_labels`) to count and check the classes.
            Otherwise ``num_classes`` stays None.
        class_names: The class names the data must have, when it names its
            classes (held-out data: the training data's); see :func:`check_class_names`.

    Raises:
        tfdp.errors.DataError: ``spec`` does not exist (``argument="spec"``),
            is not a data set tfdp reads, or fails a check (naming the file,
            the key and the values).
        FileNotFoundError: a glob of TFRecord files matches none.

    Example:
        >>> import tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "d.npz")
        >>> np.savez(path, images=np.zeros((3, 2, 2), np.uint8), labels=[0.0, 1.0, 1.0])
        >>> data = open_source(path)
        >>> data.kind, data.num_classes, data.image_shape, data.notes
        ('npz', 2, (2, 2, 1), [".../d.npz (key 'labels'): float64 labels hold integer values: read as int64"])
    """  # noqa: E501
    if on_bad_file not in ("raise", "skip"):
        raise ConfigError(
            f"on_bad_file must be 'raise' or 'skip', got {on_bad_file!r}", argument="on_bad_file"
        )
    if spec == "digits":
        data = _open_digits()
        check_class_names("the digits", data.classes, class_names)
        if num_classes is not None and num_classes != 10:
            raise DataError(f"the digits have 10 classes, but {num_classes} are expected")
        return data
    tf_args = (num_classes, require_all_classes, read_all_labels, class_names)
    path = os.path.expanduser(spec)
    if any(c in spec for c in "*?[") and not os.path.exists(path):
        return _open_tfrecord(spec, *tf_args)
    if not os.path.exists(path):
        raise DataError(
            f"spec {spec!r} does not exist (give 'digits', a .npz file, an image folder, or the "
            "directory / manifest / glob of TFRecord shards written by write_tfrecords)",
            argument="spec",
        )
    if os.path.isfile(path):
        if path.endswith(".npz"):
            return _open_npz(path, num_classes, require_all_classes, class_names)
        if path.endswith((MANIFEST_SUFFIX, ".tfrecord", ".tfrec")):
            return _open_tfrecord(path, *tf_args)
        raise DataError(
            f"spec {spec!r}: not a .npz file, a TFRecord file or a TFRecord manifest "
            f"(*{MANIFEST_SUFFIX})",
            argument="spec",
        )
    entries = os.listdir(path)
    if any(n.endswith(MANIFEST_SUFFIX) for n in entries):
        return _open_tfrecord(path, *tf_args)
    if any(n.endswith((".tfrecord", ".tfrec")) for n in entries):
        raise DataError(
            f"spec {spec!r} holds TFRecord files but no *{MANIFEST_SUFFIX}: tfdp reads "
            "shards written by write_tfrecords",
            argument="spec",
        )
    return _open_folder(path, channels, on_bad_file, num_classes, class_names)


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
