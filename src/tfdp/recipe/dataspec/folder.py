"""Opening an image folder (``root/<class>/<image>``): its channels probed, its classes checked.

Example:
    >>> import tempfile, os
    >>> root = tempfile.mkdtemp(); os.makedirs(os.path.join(root, "cat"))
    >>> open(os.path.join(root, "cat", "1.png"), "wb").close()  # unreadable: probed around
    >>> data = open_folder(root, None, "raise", None, None)
    >>> data.kind, data.num_examples, data.channels, data.notes[0].startswith("warning")
    ('folder', 1, 3, True)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tfdp.errors import DataError
from tfdp.recipe.dataspec.checks import SHOWN, check_class_names
from tfdp.recipe.dataspec.opened import OpenedData

__all__ = ["open_folder"]

_CHANNEL_PROBES = 32  # image files decoded to guess a folder's channel count (and show sizes)


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


def open_folder(
    path: str,
    channels: int | None,
    on_bad_file: str,
    num_classes: int | None,
    class_names: Sequence[str] | None,
) -> OpenedData:
    """An ImageNet-layout folder (labels from the class folders), as ``open_source`` opens one.

    ``channels`` None: the most found among a spread of its files.
    """
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
        shown = sorted(set(sizes))[:SHOWN]
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
