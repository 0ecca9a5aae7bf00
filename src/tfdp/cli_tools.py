"""``tfdp plot`` and ``tfdp data``: look at a run's curves, and convert or inspect data sets.

This module owns three command-line tools and the library functions behind them:

* :func:`plot_metrics` (``tfdp plot RUN_DIR``): the loss, accuracy and
  throughput curves of a training run, read from ``RUN_DIR/metrics.jsonl``
  (see :func:`read_metrics`), drawn into one PNG.
* :func:`convert_data` (``tfdp data convert SRC DST``): converts between the
  bundled ``digits``, ``.npz`` files, image folders (``root/<class>/<image>``)
  and TFRecord shards with a manifest (:func:`tfdp.sources.write_tfrecords`).
* :func:`inspect_data` (``tfdp data inspect SRC``): what a data set holds:
  kind, size, classes, image shapes, how its pixels are read, notes
  (conversions, warnings) and a few examples.

:func:`register` adds the subcommands to the ``tfdp`` parser; :func:`main`
runs them on their own (``python -m tfdp.cli_tools``). Importing this module
is cheap: TensorFlow and matplotlib load only when a command needs them.

The data formats:

* ``digits``: :func:`tfdp.datasets.load_digits` ``("all")``, 1,797 grey 8x8
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
  :func:`tfdp.sources.write_tfrecords`, features ``image`` (PNG) and
  ``label`` (int64). Records are written in ``write_tfrecords``'s seeded
  shuffled order (so that class-sorted sources give mixed shards). ``tfdp
  data convert`` adds ``classes`` (names or null), ``num_classes`` and
  ``label_counts`` to the manifest, so that ``tfdp train`` knows the classes
  without reading every label. Reading checks every shard's record count
  against the manifest; a difference is an error naming the shard.

Data is opened and checked by :func:`tfdp.dataspec.open_source`, the same
as ``tfdp train`` does: what training refuses (non-integral or stray labels,
non-finite pixels, floats outside [0, 1]) is refused here too.

Example:
    $ tfdp plot runs/digits
    $ tfdp data convert digits digits.npz
    $ tfdp data convert ~/imagenet/train shards/ --shards 1024 --image-size 224
    $ tfdp data inspect shards/
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tfdp.dataspec import (
    MANIFEST_SUFFIX,
    OpenedData,
    open_source,
    read_error,
    read_labels,
    resize_uint8,
)

__all__ = [
    "PLOT_DPI",
    "PLOT_FIGSIZE",
    "convert_data",
    "inspect_data",
    "main",
    "plot_metrics",
    "read_metrics",
    "register",
]

#: Size of :func:`plot_metrics`' figure in inches, and its resolution: 1500 x 450 pixels.
PLOT_FIGSIZE = (15.0, 4.5)
PLOT_DPI = 100

_FORMATS = ("tfrecord", "npz", "folder")
_EXAMPLES_PER_SHARD = 10_000
_MIN_SHARDS = 8
_MAX_CLASSES_SHOWN = 30


# ----------------------------------------------------------------------------------------
# tfdp plot
# ----------------------------------------------------------------------------------------


def read_metrics(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    r"""Read a ``metrics.jsonl`` file: one JSON object per line, in file order.

    Args:
        path: The file (``RUN_DIR/metrics.jsonl`` as written by ``tfdp train``).

    Returns:
        The records, one dict per line.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: the file is empty, or a line is empty, not JSON, or not a
            JSON object (the message names the file and the line number).

    Example:
        >>> import os, tempfile
        >>> p = os.path.join(tempfile.mkdtemp(), "metrics.jsonl")
        >>> _ = open(p, "w").write('{"epoch": 0, "loss": 2.3}\n{"epoch": 1, "loss": 1.1}\n')
        >>> [r["loss"] for r in read_metrics(p)]
        [2.3, 1.1]
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such file")
    with open(path, encoding="utf-8", errors="replace") as fh:
        lines = fh.read().splitlines()
    if not lines:
        raise ValueError(f"{path} is empty: no epoch has been logged yet")
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            raise ValueError(f"{path}, line {number}: empty line (expected one JSON object)")
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}, line {number}: not valid JSON ({err.msg})") from None
        if not isinstance(record, dict):
            raise ValueError(
                f"{path}, line {number}: expected a JSON object, got {type(record).__name__}"
            )
        records.append(record)
    return records


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan
    return float(value)


def _series(records: list[dict[str, Any]], path: str) -> tuple[list[float], dict[str, list[float]]]:
    """The 1-based epochs, and the values of every key per epoch (last record wins)."""
    by_epoch: dict[Any, dict[str, Any]] = {}
    for number, record in enumerate(records, start=1):
        epoch = record.get("epoch", number - 1)
        if isinstance(epoch, bool) or not isinstance(epoch, (int, float)):
            raise ValueError(f"{path}, line {number}: 'epoch' must be a number, got {epoch!r}")
        by_epoch[epoch] = record  # a resumed run may log an epoch again: keep the last
    epochs = sorted(by_epoch)
    keys: list[str] = []
    for epoch in epochs:
        keys += [k for k in by_epoch[epoch] if k not in keys]
    values = {k: [_number(by_epoch[e].get(k)) for e in epochs] for k in keys}
    return [e + 1 for e in epochs], values


def _train_first(keys: list[str]) -> list[str]:
    return sorted(keys, key=lambda k: (k.startswith("val_"), k))


def plot_metrics(run_dir: str | os.PathLike[str], out: str | os.PathLike[str] | None = None) -> str:
    r"""Draw a run's loss, accuracy and samples/s per epoch into one PNG.

    Three panels side by side, :data:`PLOT_FIGSIZE` at :data:`PLOT_DPI`
    (1500 x 450 pixels): every key ending in ``loss`` (train and ``val_``),
    every key ending in ``accuracy``, and ``samples_per_s``. The x axis is the
    1-based epoch; when a resumed run logged an epoch twice, the last record
    wins. The file is written under a temporary name and renamed, so a
    failure never leaves a half-written PNG.

    Args:
        run_dir: A run directory written by ``tfdp train`` (holds ``metrics.jsonl``).
        out: The PNG to write; default ``run_dir/curves.png``.

    Returns:
        The path written.

    Raises:
        FileNotFoundError: ``run_dir``, its ``metrics.jsonl`` or the folder of
            ``out`` does not exist.
        ValueError: ``run_dir`` is not a directory; a malformed line (see
            :func:`read_metrics`); nothing to plot.

    Example:
        >>> import os, tempfile
        >>> run = tempfile.mkdtemp()
        >>> with open(os.path.join(run, "metrics.jsonl"), "w") as fh:
        ...     _ = fh.write('{"epoch": 0, "loss": 2.0, "val_loss": 2.1, "samples_per_s": 900}\n')
        >>> os.path.basename(plot_metrics(run))
        'curves.png'
    """
    run = os.fspath(run_dir)
    if not os.path.exists(run):
        raise FileNotFoundError(f"RUN_DIR {run!r} does not exist")
    if not os.path.isdir(run):
        raise ValueError(f"RUN_DIR {run!r} is not a directory")
    metrics_path = os.path.join(run, "metrics.jsonl")
    if not os.path.isfile(metrics_path):
        raise FileNotFoundError(
            f"{metrics_path} does not exist: is RUN_DIR a run directory written by tfdp train "
            "(with at least one finished epoch)?"
        )
    target = os.fspath(out) if out is not None else os.path.join(run, "curves.png")
    folder = os.path.dirname(os.path.abspath(target))
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"--out {target!r}: folder {folder!r} does not exist")
    if os.path.isdir(target):
        raise ValueError(f"--out {target!r} is a directory; give a file name")
    x, values = _series(read_metrics(metrics_path), metrics_path)

    def present(keys: list[str]) -> list[str]:
        return [k for k in keys if any(not math.isnan(v) for v in values[k])]

    losses = present(_train_first([k for k in values if k.endswith("loss")]))
    accuracies = present(_train_first([k for k in values if k.endswith("accuracy")]))
    speed = present(["samples_per_s"] if "samples_per_s" in values else [])
    if not (losses or accuracies or speed):
        raise ValueError(
            f"{metrics_path}: no loss, accuracy or samples_per_s values to plot "
            f"(keys: {sorted(values)})"
        )

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=PLOT_FIGSIZE, dpi=PLOT_DPI)
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 3)
    marker = "o" if len(x) <= 50 else None
    panels = [(axes[0], "loss", losses), (axes[1], "accuracy", accuracies)]
    panels.append((axes[2], "samples/s", speed))
    for ax, title, keys in panels:
        ax.set_title(title)
        ax.set_xlabel("epoch")
        ax.grid(True, alpha=0.3)
        if not keys:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes)
            continue
        for key in keys:
            style = "--" if key.startswith("val_") else "-"
            ax.plot(x, values[key], style, marker=marker, markersize=3, label=key)
        ax.legend(fontsize=8)
    fig.suptitle(os.path.basename(os.path.normpath(os.path.abspath(run))))
    fig.tight_layout()
    tmp = os.path.join(folder, f".{os.path.basename(target)}.tmp-{uuid.uuid4().hex}")
    try:
        fig.savefig(tmp, format="png", dpi=PLOT_DPI)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return target


# ----------------------------------------------------------------------------------------
# Progress
# ----------------------------------------------------------------------------------------


class _Progress:
    """A progress bar on stderr: tqdm when installed, else Keras' Progbar, else a plain counter."""

    def __init__(self, total: int, desc: str, enabled: bool = True) -> None:
        self.total = total
        self.done = 0
        self._lock = threading.Lock()
        self._bar: Any = None
        self._kind = "off"
        self.enabled = enabled
        if not enabled:
            return
        try:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total, desc=desc, unit="ex", file=sys.stderr, leave=True)
            self._kind = "tqdm"
            return
        except ImportError:
            pass
        try:
            from keras.utils import Progbar

            print(desc, file=sys.stderr, flush=True)
            self._bar = Progbar(total, unit_name="example")
            self._kind = "keras"
        except ImportError:
            self._desc = desc
            self._kind = "plain"
            self._shown = -1

    def update(self, n: int = 1) -> None:
        with self._lock:
            self.done += n
            if self._kind == "tqdm":
                self._bar.update(n)
            elif self._kind == "keras":
                self._bar.update(self.done)
            elif self._kind == "plain":
                pct = 100 * self.done // max(self.total, 1)
                if pct != self._shown:
                    self._shown = pct
                    line = f"\r{self._desc}: {self.done}/{self.total} ({pct}%)"
                    print(line, end="", file=sys.stderr, flush=True)

    def close(self) -> None:
        kind, self._kind = self._kind, "off"  # closing twice is harmless
        if kind == "tqdm":
            self._bar.close()
        elif kind == "plain":
            print(file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------------------
# tfdp data inspect
# ----------------------------------------------------------------------------------------


def _table(rows: list[list[str]], indent: str = "  ") -> list[str]:
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    return [
        indent + "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip()
        for r in rows
    ]


def inspect_data(src: str, examples: int = 5, num_classes: int | None = None) -> str:
    """Describe a data set: kind, size, classes, image shape/dtype and a few examples.

    The data is opened and checked as ``tfdp train`` opens it
    (:func:`tfdp.dataspec.open_source`): what training would refuse is
    refused here too, naming the file, the key and the values, and what it
    would convert or warn about is listed under ``notes``. Class counts are
    shown when the labels are known without reading every image (digits,
    .npz, image folders, TFRecord shards written by ``tfdp data convert``).
    Examples are spread evenly over a random-access source; for TFRecord
    data they are the first records in file order.

    Args:
        src: ``"digits"``, a .npz file, an image folder, or a TFRecord
            directory, manifest or glob written by ``write_tfrecords``.
        examples: How many examples to show (0: none).
        num_classes: The number of classes, when the labels do not use them all.

    Returns:
        The description, several lines.

    Raises:
        FileNotFoundError: ``src`` does not exist.
        ValueError: ``src`` is not a data set tfdp reads or fails a check, or ``examples < 0``.

    Example:
        >>> print(inspect_data("digits", examples=0).splitlines()[1])
        examples: 1797
    """
    if isinstance(examples, bool) or not isinstance(examples, int) or examples < 0:
        raise ValueError(f"--examples must be an integer >= 0, got {examples!r}")
    data = open_source(src, num_classes=num_classes, num_classes_option="--num-classes")
    n = data.num_examples
    shape = "[" + ", ".join("?" if d is None else str(d) for d in data.image_shape) + "]"
    if None in data.image_shape:
        shape += " (? = may differ between images)"
    lines = [
        f"source: {data.where} ({data.kind})",
        f"examples: {n}",
        f"image: {shape} {data.dtype}",
        f"pixels: scaled by {data.scale:.6g} to [0, 1] for training",
        *data.details,
    ]
    counts = data.counts()
    if counts is not None:
        k = int(data.num_classes or len(counts))
        lines.append(f"classes: {k}")
        rows = [["label", "name", "count"]]
        for label in range(min(k, _MAX_CLASSES_SHOWN)):
            name = data.classes[label] if data.classes else "-"
            count = int(counts[label]) if label < len(counts) else 0
            rows.append([str(label), name, str(count)])
        lines += _table(rows)
        if k > _MAX_CLASSES_SHOWN:
            lines.append(f"  ... and {k - _MAX_CLASSES_SHOWN} more classes")
    elif not any(line.startswith("classes:") for line in data.details):
        lines.append("classes: unknown without reading every record (labels are in the records)")
    if data.notes:
        lines.append("notes:")
        lines += [f"  {note}" for note in data.notes]
    if examples:
        shown = _sample_examples(data, examples)
        lines.append(f"examples ({len(shown)} of {n}):")
        rows = [["index", "label", "shape", "min", "max"]]
        for index, image, label in shown:
            name = ""
            if data.classes and label < len(data.classes) and data.classes[label] != str(label):
                name = f" ({data.classes[label]})"
            rows.append(
                [
                    str(index),
                    f"{label}{name}",
                    str(list(image.shape)),
                    f"{image.min():g}",
                    f"{image.max():g}",
                ]
            )
        lines += _table(rows)
    return "\n".join(lines)


def _sample_examples(data: OpenedData, k: int) -> list[tuple[int, np.ndarray, int]]:
    import tensorflow as tf

    k = min(k, data.num_examples)
    try:
        if data.source is not None:
            picks = sorted({int(i) for i in np.linspace(0, data.num_examples - 1, k)})
            out = []
            for i in picks:
                image, label = data.source.load(tf.constant(i, tf.int64))
                out.append((i, np.asarray(image), int(label)))
            return out
        return [
            (i, image, int(label))
            for i, (image, label) in enumerate(data.dataset().take(k).as_numpy_iterator())
        ]
    except tf.errors.OpError as err:
        raise read_error(data, err) from None


# ----------------------------------------------------------------------------------------
# tfdp data convert
# ----------------------------------------------------------------------------------------


class _Feed:
    """A random-access source for write_tfrecords: labels int64, resized, counting progress."""

    streaming = False

    def __init__(
        self,
        load: Callable[[Any], Any],
        num_examples: int,
        image_shape: tuple[int | None, ...],
        image_size: int | None,
        progress: _Progress,
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
        if to not in _FORMATS:
            raise ValueError(f"--to must be one of {', '.join(_FORMATS)}, got {to!r}")
        return to
    return "npz" if dst.endswith(".npz") else "tfrecord"


def _check_dst(dst: str, fmt: str, data: OpenedData) -> None:
    if os.path.isdir(dst):
        if fmt == "npz":
            raise ValueError(f"DST {dst!r} is a directory; a .npz output needs a file name")
        if os.listdir(dst):
            raise ValueError(
                f"DST {dst!r} exists and is not empty; remove it or choose another path "
                "(tfdp data convert never overwrites)"
            )
    elif os.path.exists(dst):
        if fmt != "npz":
            raise ValueError(f"DST {dst!r} is a file; --to {fmt} writes a directory")
        if os.path.getsize(dst) > 0:
            raise ValueError(
                f"DST {dst!r} exists and is not empty; remove it or choose another path "
                "(tfdp data convert never overwrites)"
            )
    if data.kind != "digits":
        where = os.path.abspath(data.where)
        src_real = os.path.realpath(os.path.dirname(where) if data.kind == "tfrecord" else where)
        dst_real = os.path.realpath(dst)
        if dst_real == src_real or (
            os.path.isdir(src_real) and os.path.commonpath([src_real, dst_real]) == src_real
        ):
            raise ValueError(f"DST {dst!r} is SRC or lies inside it; write elsewhere")


def _temp_sibling(dst: str) -> str:
    parent = os.path.dirname(os.path.abspath(dst))
    os.makedirs(parent, exist_ok=True)
    return os.path.join(parent, f".{os.path.basename(os.path.abspath(dst))}.tmp-{uuid.uuid4().hex}")


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
            raise ValueError(
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
            raise ValueError(f"class {k} is named {name!r}: not usable as a folder name")
    if len(set(names.values())) != len(names):
        raise ValueError(f"{data.where}: two classes share a folder name: {sorted(names.values())}")
    return names


def _write_folder(
    data: OpenedData, dst: str, image_size: int | None, progress: _Progress
) -> tuple[int, list[str]]:
    import tensorflow as tf

    if data.labels is not None:
        _class_dirs(data, data.labels)  # bad class names fail before any work
    ds = data.dataset().map(
        lambda image, label: (tf.io.encode_png(resize_uint8(image, image_size)), label),
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
    data: OpenedData, dst: str, image_size: int | None, progress: _Progress
) -> tuple[int, list[str]]:
    import tensorflow as tf

    ds = data.dataset()
    if image_size is not None:
        ds = ds.map(
            lambda image, label: (resize_uint8(image, image_size), label),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )
    images, labels = [], []
    for index, (image, label) in enumerate(ds.as_numpy_iterator()):
        if images and image.shape != images[0].shape:
            raise ValueError(
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
    tmp = _temp_sibling(dst)
    try:
        with open(tmp, "wb") as fh:
            np.savez_compressed(fh, **arrays)  # type: ignore[arg-type]
        os.replace(tmp, dst)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return len(labels), []


def _write_tfrecord(
    data: OpenedData, dst: str, image_size: int | None, shards: int | None, progress: _Progress
) -> tuple[int, list[str]]:
    from tfdp.sources import write_tfrecords

    n = data.num_examples
    if shards is None:
        shards = min(n, max(_MIN_SHARDS, math.ceil(n / _EXAMPLES_PER_SHARD)))
    if shards > n:
        raise ValueError(f"--shards {shards} is more than the {n} examples of SRC")
    if data.source is not None:
        load, shape = data.source.load, data.image_shape
        labels = data.labels
    else:  # a stream (TFRecord): read it all (counts checked per shard), then write from memory
        images, label_list = [], []
        reading = _Progress(n, f"reading {data.kind}", progress.enabled)
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
    feed = _Feed(load, n, tuple(shape), image_size, progress)
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
        "records in shuffled order"
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
    tmp = f"{path}.tmp-{uuid.uuid4().hex}"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(manifest, indent=1) + "\n")
    os.replace(tmp, path)


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
            all (see :func:`tfdp.dataspec.check_labels`).
        progress: Show a progress bar on stderr.

    Returns:
        What was written: one summary line, then notes (shards, renumbered classes) if any.

    Raises:
        FileNotFoundError: ``src`` does not exist.
        ValueError: bad arguments, an unreadable ``src``, a non-empty ``dst``,
            differing image sizes for .npz without ``image_size``, a corrupt
            image (naming the file).

    Example:
        >>> import os, tempfile
        >>> out = os.path.join(tempfile.mkdtemp(), "digits.npz")
        >>> convert_data("digits", out, progress=False)  # doctest: +ELLIPSIS
        'wrote 1797 examples (npz) to .../digits.npz'
    """
    dst = os.path.expanduser(os.fspath(dst))
    if not dst:
        raise ValueError("DST is empty")
    fmt = _dst_format(dst, to)
    if shards is not None and fmt != "tfrecord":
        raise ValueError(f"--shards applies to TFRecord output only, not --to {fmt}")
    for name, value in (("--shards", shards), ("--image-size", image_size)):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    data = open_source(src, num_classes=num_classes, num_classes_option="--num-classes")
    _check_dst(dst, fmt, data)
    if data.dtype != "uint8":
        raise ValueError(
            f"{data.where}: holds {data.dtype} images; tfdp data convert writes 8-bit images: "
            "store them as uint8 levels 0..255"
        )
    if data.channels not in (1, 3, 4):
        raise ValueError(f"{data.where}: images must have 1, 3 or 4 channels, got {data.channels}")
    import tensorflow as tf

    if data.labels is None:  # TFRecord without a class list: read and check the labels first
        read_labels(data, num_classes=num_classes, num_classes_option="--num-classes")

    bar = _Progress(data.num_examples, f"{fmt} <- {data.kind}", progress)
    try:
        if fmt == "npz":
            written, notes = _write_npz(data, dst, image_size, bar)
        elif fmt == "folder":
            written, notes = _write_folder(data, dst, image_size, bar)
        else:
            written, notes = _write_tfrecord(data, dst, image_size, shards, bar)
    except tf.errors.OpError as err:
        raise read_error(data, err) from None
    finally:
        bar.close()
    summary = f"wrote {written} examples ({fmt}) to {dst}"
    return "\n".join([summary, *notes, *data.notes])


# ----------------------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------------------


def _int_at_least(low: int) -> Callable[[str], int]:
    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected an integer >= {low}, got {text!r}"
            ) from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {value}")
        return value

    convert.__name__ = "int"
    return convert


def _cmd_plot(args: argparse.Namespace) -> int:
    print(plot_metrics(args.run_dir, args.out))
    return 0


def _cmd_convert(args: argparse.Namespace) -> int:
    print(
        convert_data(
            args.src,
            args.dst,
            to=args.to,
            shards=args.shards,
            image_size=args.image_size,
            num_classes=args.num_classes,
            progress=not args.no_progress,
        )
    )
    return 0


def _cmd_inspect(args: argparse.Namespace) -> int:
    print(inspect_data(args.src, args.examples, args.num_classes))
    return 0


def register(subparsers: Any) -> None:
    """Add the ``plot`` and ``data`` subcommands to a ``tfdp`` argparse subparsers object.

    Args:
        subparsers: What ``ArgumentParser.add_subparsers()`` returned.

    Example:
        >>> parser = argparse.ArgumentParser(prog="tfdp")
        >>> register(parser.add_subparsers(dest="command"))
        >>> args = parser.parse_args(["data", "convert", "digits", "d.npz"])
        >>> args.src, args.dst, args.to, args.func is _cmd_convert
        ('digits', 'd.npz', None, True)
    """
    pp = subparsers.add_parser(
        "plot",
        help="draw a run's loss, accuracy and samples/s curves into a PNG",
        description="Read RUN_DIR/metrics.jsonl (written by tfdp train) and draw loss (train "
        "and val), accuracy (every key ending in 'accuracy') and samples/s per epoch into one "
        "PNG. Prints the path written.",
    )
    pp.add_argument("run_dir", metavar="RUN_DIR", help="a run directory written by tfdp train")
    pp.add_argument(
        "--out", metavar="PATH", default=None, help="PNG to write (default RUN_DIR/curves.png)"
    )
    pp.set_defaults(func=_cmd_plot)

    dp = subparsers.add_parser(
        "data",
        help="convert or inspect data sets (digits, .npz, image folders, TFRecord)",
        description="Data set tools. SRC is 'digits' (bundled), a .npz file (images "
        "[N,H,W,C] uint8, labels [N]), an image folder root/<class>/<image>, or a TFRecord "
        "directory (or manifest) written by tfdp data convert / write_tfrecords.",
    )
    actions = dp.add_subparsers(
        dest="data_command", metavar="ACTION", required=True, parser_class=type(dp)
    )
    cp = actions.add_parser(
        "convert",
        help="convert SRC to a .npz file, an image folder or TFRecord shards",
        description="Convert SRC to DST. The format of DST is --to, else inferred: a .npz "
        "name -> npz, anything else -> a directory of TFRecord shards (use --to folder for "
        "an image folder DST/<class>/<index>.png). DST is written under a temporary name and "
        "renamed when complete; an existing non-empty DST is never overwritten.",
    )
    cp.add_argument(
        "src", metavar="SRC", help="'digits', a .npz file, an image folder, or TFRecord"
    )
    cp.add_argument("dst", metavar="DST", help="output .npz file or directory")
    cp.add_argument(
        "--to", choices=_FORMATS, default=None, help="output format (default: from DST)"
    )
    cp.add_argument(
        "--shards",
        type=_int_at_least(1),
        default=None,
        metavar="N",
        help="TFRecord files to write (default: ~10,000 examples each, at least 8)",
    )
    cp.add_argument(
        "--image-size",
        type=_int_at_least(1),
        default=None,
        metavar="S",
        help="stretch every image to S x S (needed for .npz when sizes differ)",
    )
    cp.add_argument("--no-progress", action="store_true", help="no progress bar")
    cp.add_argument(
        "--num-classes",
        type=_int_at_least(1),
        default=None,
        metavar="K",
        help="number of classes, when some have no example (default: the class names, else "
        "the largest label + 1, and then every label below it must occur)",
    )

    cp.set_defaults(func=_cmd_convert)

    ip = actions.add_parser(
        "inspect",
        help="describe SRC: kind, size, classes, image shapes, a few examples",
        description="Print what SRC holds: its kind, number of examples, classes (with counts "
        "when the labels are known without decoding: digits, .npz, image folders), image "
        "shape and dtype, and a few examples (index, label, shape, min/max pixel).",
    )
    ip.add_argument(
        "src", metavar="SRC", help="'digits', a .npz file, an image folder, or TFRecord"
    )
    ip.add_argument(
        "--examples",
        type=_int_at_least(0),
        default=5,
        metavar="K",
        help="examples to show (default 5)",
    )
    ip.add_argument(
        "--num-classes",
        type=_int_at_least(1),
        default=None,
        metavar="K",
        help="number of classes, when some have no example (default: the class names, else "
        "the largest label + 1, and then every label below it must occur)",
    )
    ip.set_defaults(func=_cmd_inspect)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``plot`` / ``data`` on their own (as ``tfdp`` would); returns the exit status.

    Bad input (``ValueError``, ``FileNotFoundError``) prints one
    ``tfdp: error: ...`` line and returns 2.

    Example:
        >>> main(["plot", "/no/such/run"])
        2
    """
    from tfdp.cli import main as tfdp_main  # the one place that turns errors into exit codes

    return tfdp_main(argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
