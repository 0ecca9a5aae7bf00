"""``.npz`` files as a data format: arrays of images and labels (and class names), checked.

This module owns :class:`Npz`. A ``.npz`` data set holds arrays ``images``
(or ``x`` / ``image``) ``[N, H, W, C]`` (``[N, H, W]`` is read as one
channel) and ``labels`` (or ``y`` / ``label``) ``[N]``, and ``classes`` (str
``[K]``, the name of label ``k``) when it names its classes; the checks are
:func:`~tfdp.recipe.dataspec.checks.check_images` /
:func:`~tfdp.recipe.dataspec.checks.check_labels`'. A seeded
``round(eval_fraction * N)`` of its examples is held out
(:func:`~tfdp.recipe.dataspec.arrays.split_arrays`). Written: ``images``
uint8, ``labels`` int64 and ``classes`` when known, in the source's order,
compressed.

Example:
    >>> import tempfile, os, numpy as np
    >>> path = os.path.join(tempfile.mkdtemp(), "d.npz")
    >>> np.savez(path, images=np.zeros((3, 2, 2), np.uint8), labels=[0.0, 1.0, 1.0])
    >>> data = Npz().open(path, OpenRequest())
    >>> data.kind, data.num_classes, data.image_shape, data.notes
    ('npz', 2, (2, 2, 1), [".../d.npz (key 'labels'): float64 labels hold integer values: read as int64"])
"""  # noqa: E501

from __future__ import annotations

import os
from typing import Literal

import numpy as np

from tfdp._util import replaced_atomically
from tfdp.errors import DataError
from tfdp.recipe.dataspec.arrays import arrays_data, split_arrays
from tfdp.recipe.dataspec.checks import check_class_names, check_images, check_labels
from tfdp.recipe.dataspec.contract import HeldOut, OpenRequest, WriteRequest
from tfdp.recipe.dataspec.opened import OpenedData
from tfdp.recipe.dataspec.shards import resize_uint8

_IMAGE_KEYS = ("images", "x", "image")
_LABEL_KEYS = ("labels", "y", "label")


class Npz:
    """``.npz`` arrays (see the module docstring); meets :class:`DataFormat`.

    Example:
        >>> Npz().recognise("/no/such.npz"), Npz().recognise("digits")  # an existing .npz file
        (False, False)
    """

    name = "npz"
    about = "a .npz file"
    channels_chosen = False
    writes: Literal["file", "directory"] | None = "file"
    suffix = ".npz"
    write_options: frozenset[str] = frozenset()

    def recognise(self, spec: str) -> bool:
        """A file named ``*.npz``."""
        path = os.path.expanduser(spec)
        return path.endswith(".npz") and os.path.isfile(path)

    def open(self, spec: str, request: OpenRequest) -> OpenedData:
        """The arrays, checked (see the module docstring)."""
        path = os.path.expanduser(spec)
        try:
            with open(path, "rb") as fh:
                head = fh.read(4)
        except OSError as err:
            raise DataError(f"{path}: cannot be read ({err.strerror})") from None
        if head not in (b"PK\x03\x04", b"PK\x05\x06"):  # a zip archive (05 06: an empty one)
            raise DataError(
                f"{path}: not a .npz file (a .npz is a zip archive of arrays, as numpy.savez "
                f"writes; this file starts with {head!r})"
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
            raise DataError(
                f"{path}: not a readable .npz file ({type(err).__name__}: {err})"
            ) from None
        if not found:
            raise DataError(
                f"{path}: a .npz data set holds arrays 'images' (or 'x') and 'labels' (or 'y'); "
                f"it has {sorted(keys)}"
            )
        names = None
        if classes is not None:
            names = [str(c) for c in np.asarray(classes).reshape(-1).tolist()]
            check_class_names(f"{path} (key 'classes')", names, request.class_names)
        x, scale, notes = check_images(images, path, xk)
        y, k, label_notes = check_labels(
            labels,
            path,
            yk,
            classes=names,
            num_classes=request.num_classes,
            require_all_classes=request.require_all_classes,
        )
        if len(x) != len(y):
            raise DataError(
                f"{path}: {len(x)} images (key {xk!r}) but {len(y)} labels (key {yk!r}): "
                "one label per image"
            )
        return arrays_data(
            "npz", path, x, y, names, scale, num_classes=k, notes=notes + label_notes, root=path
        )

    def split(
        self, data: OpenedData, *, eval_fraction: float, seed: int, image_size: int | None
    ) -> HeldOut:
        """A seeded ``eval_fraction`` of the examples (:func:`split_arrays`)."""
        train, held = split_arrays(data.source, eval_fraction, seed)
        return HeldOut(train, held, f"a seeded {eval_fraction:g} of the examples")

    def write(self, data: OpenedData, dst: str, request: WriteRequest) -> tuple[int, list[str]]:
        """``dst`` (a file): the examples in order, one image size (``image_size``: stretched)."""
        import tensorflow as tf

        from tfdp._autograph import plain

        size = request.image_size
        ds = data.dataset()
        if size is not None:
            ds = ds.map(
                plain(lambda image, label: (resize_uint8(image, size), label)),
                num_parallel_calls=tf.data.AUTOTUNE,
                deterministic=True,
            )
        progress = request.progress(data.num_examples, f"{self.name} <- {data.kind}")
        images, labels = [], []
        try:
            for index, (image, label) in enumerate(ds.as_numpy_iterator()):
                if images and image.shape != images[0].shape:
                    raise DataError(
                        f"images differ in size (example 0 is {list(images[0].shape)}, example "
                        f"{index} is {list(image.shape)}): a .npz holds one size; give "
                        "{image_size}",
                        mentions=["image_size"],
                    )
                images.append(image)
                labels.append(int(label))
                progress.update(1)
        finally:
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
