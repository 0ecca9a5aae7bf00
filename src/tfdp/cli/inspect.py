"""``tfdp data inspect``: what a data set holds, opened and checked as training opens it.

This module owns :func:`inspect_data`: kind, size, classes (with counts when
known without decoding), image shape and dtype, how pixels are scaled,
notes (conversions, warnings) and a few examples. The data is opened by
:func:`tfdp.recipe.dataspec.open_source`, the same as ``tfdp train``.

Example:
    $ tfdp data inspect digits
"""

from __future__ import annotations

import numpy as np

from tfdp.errors import ConfigError, renaming
from tfdp.recipe.dataspec import OpenedData, open_source, read_error

_MAX_CLASSES_SHOWN = 30


def _table(rows: list[list[str]], indent: str = "  ") -> list[str]:
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    return [
        indent + "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip()
        for r in rows
    ]


def inspect_data(src: str, examples: int = 5, num_classes: int | None = None) -> str:
    """Describe a data set: kind, size, classes, image shape/dtype and a few examples.

    The data is opened and checked as ``tfdp train`` opens it
    (:func:`tfdp.recipe.dataspec.open_source`): what training would refuse is
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
        DataError: ``src`` does not exist, is not a data set tfdp reads or
            fails a check.
        ConfigError: ``examples < 0``.

    Example:
        >>> print(inspect_data("digits", examples=0).splitlines()[1])
        examples: 1797
    """
    if isinstance(examples, bool) or not isinstance(examples, int) or examples < 0:
        raise ConfigError(f"must be an integer >= 0, got {examples!r}", argument="examples")
    with renaming({"spec": "src"}):
        data = open_source(src, num_classes=num_classes)
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
        raise read_error(data, err) from err
