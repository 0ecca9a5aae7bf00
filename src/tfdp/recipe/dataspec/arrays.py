"""Opening arrays: the bundled digits and ``.npz`` files (images and labels, checked).

Example:
    >>> open_digits().image_shape
    (8, 8, 1)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

from tfdp.errors import DataError
from tfdp.recipe.dataspec.checks import check_class_names, check_images, check_labels
from tfdp.recipe.dataspec.opened import OpenedData

__all__ = ["open_digits", "open_npz"]

_IMAGE_KEYS = ("images", "x", "image")
_LABEL_KEYS = ("labels", "y", "label")


def open_digits() -> OpenedData:
    """The bundled UCI digits, all 1,797 (levels 0..16: scale 1/16), 10 named classes."""
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


def open_npz(
    path: str,
    num_classes: int | None,
    require_all: bool,
    class_names: Sequence[str] | None,
) -> OpenedData:
    """A ``.npz`` of ``images`` (or ``x``) and ``labels`` (or ``y``), and ``classes`` if named.

    The arguments are :func:`tfdp.recipe.dataspec.open_source`'s
    (``require_all``: ``require_all_classes``); the checks are
    :func:`~tfdp.recipe.dataspec.checks.check_images` /
    :func:`~tfdp.recipe.dataspec.checks.check_labels`'.
    """
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
