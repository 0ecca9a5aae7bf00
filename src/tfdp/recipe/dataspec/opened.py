"""What opening a data spec gives: :class:`OpenedData`, and a TFRecord example's :class:`RecordLayout`.

This module owns the description every command reads of an opened data set
(kind, size, image shape, pixel scale, classes, labels) and its two ways to
the examples: a random-access source (arrays, image folders) or a stream of
TFRecord shards with the layout of their examples. Each data format
(:mod:`tfdp.recipe.dataspec.formats`) opens its data into one.

Example:
    >>> data = OpenedData("npz", "x.npz", 3, (8, 8, 1), "uint8", 1 / 255, 2)
    >>> data.channels, data.counts() is None
    (1, True)
"""  # noqa: E501

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from tfdp.sources.base import RandomAccessSource
    from tfdp.sources.tfrecord import TFRecordSource


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
        kind: The name of its format (``"digits"``, ``"npz"``, ``"folder"``,
            ``"tfrecord"``: :func:`tfdp.recipe.dataspec.formats.format_named`).
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
        root: The file or folder holding the data (None: bundled with tfdp).
        spec: The spec it was opened from, as given (for messages; set by
            :func:`tfdp.recipe.dataspec.open_source`).
    """

    kind: str
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
    root: str | None = None
    spec: str = ""

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
