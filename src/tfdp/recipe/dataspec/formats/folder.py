"""Image folders as a data format: ``root/<class>/<image>``, channels probed, split per class.

This module owns :class:`ImageFolder`. A folder's labels are the positions of
its sorted class folders (:class:`tfdp.sources.ImageFolderSource`); its images
are decoded to the channel count found most among a spread of its files (or
the one asked for). A seeded ``round(eval_fraction * n)`` of each class's
``n`` files is held out (at least one, and every class keeps one to train
on). Written as ``DST/<class>/<index>.png``, ``<index>`` the example's
position in the source, zero-padded so names sort in order, and ``<class>``
its class name or, without names, its label zero-padded to the width of the
largest label.

Example:
    >>> import tempfile, os
    >>> root = tempfile.mkdtemp(); os.makedirs(os.path.join(root, "cat"))
    >>> open(os.path.join(root, "cat", "1.png"), "wb").close()  # unreadable: probed around
    >>> data = ImageFolder().open(root, OpenRequest())
    >>> data.kind, data.num_examples, data.channels, data.notes[0].startswith("warning")
    ('folder', 1, 3, True)
"""

from __future__ import annotations

import os
import shutil
from typing import Any, Literal

import numpy as np

from tfdp.errors import DataError
from tfdp.recipe.dataspec.checks import SHOWN, check_class_names
from tfdp.recipe.dataspec.contract import HeldOut, OpenRequest, WriteRequest
from tfdp.recipe.dataspec.opened import OpenedData
from tfdp.recipe.dataspec.shards import resize_uint8
from tfdp.recipe.dataspec.writing import publish_dir, staging_dir
from tfdp.seeding import FOLDER_SPLIT_TAG

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


class ImageFolder:
    """An ImageNet-layout image folder (see the module docstring); meets :class:`DataFormat`.

    Example:
        >>> import tempfile
        >>> ImageFolder().recognise(tempfile.mkdtemp()), ImageFolder().recognise("digits")
        (True, False)
    """

    name = "folder"
    about = "an image folder"
    channels_chosen = True
    writes: Literal["file", "directory"] | None = "directory"
    suffix = None
    write_options: frozenset[str] = frozenset()

    def recognise(self, spec: str) -> bool:
        """Any directory (the formats registered before it claim theirs first)."""
        return os.path.isdir(os.path.expanduser(spec))

    def open(self, spec: str, request: OpenRequest) -> OpenedData:
        """The folder, labels from its class folders; channels: the most found among a spread."""
        from tfdp.sources import ImageFolderSource

        path = os.path.expanduser(spec)
        on_bad_file = request.on_bad_file
        src = ImageFolderSource(path, on_error=on_bad_file)
        probed, sizes = _probe_folder(src)
        channels = request.channels if request.channels is not None else probed
        if channels != src.channels:
            src = ImageFolderSource(path, on_error=on_bad_file, channels=channels)
        labels = np.asarray(src.labels, np.int64)
        k = len(src.classes)
        check_class_names(f"{src.root} (its class folders)", src.classes, request.class_names)
        if request.num_classes is not None and k != request.num_classes:
            raise DataError(
                f"{src.root}: has {k} class folders, but {request.num_classes} are expected"
            )
        same = len(set(sizes)) == 1
        data = OpenedData(
            kind=self.name,
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
            root=src.root,
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

    def split(
        self, data: OpenedData, *, eval_fraction: float, seed: int, image_size: int | None
    ) -> HeldOut:
        """A seeded split of each class's ``n`` files: ``round(eval_fraction * n)`` held out.

        The draws are ``numpy.random.default_rng([seed, FOLDER_SPLIT_TAG])``'s, a
        permutation of each class's files in turn. At least one file of a class is
        held out, but every class keeps at least one training file (a class of one
        file stays in training).
        """
        rng = np.random.default_rng([seed, FOLDER_SPLIT_TAG])
        source = data.source
        train_idx: list[Any] = []
        eval_idx: list[Any] = []
        labels = np.asarray(source.labels)
        for k in range(len(source.classes)):
            files = np.flatnonzero(labels == k)
            files = files[rng.permutation(len(files))]
            held = min(len(files) - 1, max(1, round(len(files) * eval_fraction)))
            eval_idx.append(files[:held])
            train_idx.append(files[held:])
        held_out = np.sort(np.concatenate(eval_idx))
        if not len(held_out):
            raise DataError(
                f"{data.spec!r}: too few files to hold any out for evaluation (every class "
                "has one file); give {eval_data}",
                argument="spec",
                mentions=["eval_data"],
            )
        return HeldOut(
            source.subset(np.sort(np.concatenate(train_idx))),
            source.subset(held_out),
            f"a seeded {eval_fraction:g} of each class's files",
        )

    def write(self, data: OpenedData, dst: str, request: WriteRequest) -> tuple[int, list[str]]:
        """``dst/<class>/<index>.png`` (see the module docstring), published whole."""
        import tensorflow as tf

        from tfdp._autograph import plain

        size = request.image_size
        if data.labels is not None:
            _class_dirs(data, data.labels)  # bad class names fail before any work
        ds = data.dataset().map(
            plain(lambda image, label: (tf.io.encode_png(resize_uint8(image, size)), label)),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )
        width = len(str(data.num_examples - 1))
        progress = request.progress(data.num_examples, f"{self.name} <- {data.kind}")
        tmp = staging_dir(dst)
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
            publish_dir(tmp, dst)
        except BaseException:
            progress.close()
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        present = sorted(made)
        if present != list(range(len(present))) or (
            data.classes and len(present) != len(data.classes)
        ):
            return written, [
                "note: labels with no example get no folder, so reading it back as an image "
                "folder numbers its classes 0..K-1 afresh"
            ]
        return written, []
