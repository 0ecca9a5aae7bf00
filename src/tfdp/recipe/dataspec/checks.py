"""The one validation of a data set's labels and pixels, whatever its kind.

This module owns :func:`check_labels` (integer class ids, every class of
``0..K-1`` present unless the caller states ``K``), :func:`check_images`
(uint8 levels or floats in ``[0, 1]``) and :func:`check_class_names` (held-out
data names the training data's classes); every refusal is a
:class:`tfdp.errors.DataError` naming the file, the key and the offending
values. Pure NumPy.

Example:
    >>> check_labels(np.array([1, 0, 1]), "y.npz", "labels")
    (array([1, 0, 1]), 2, [])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tfdp.errors import DataError

SHOWN = 5  # offending values / indices listed in a message


def shown(values: Any, limit: int = SHOWN) -> str:
    """The first ``limit`` of ``values``, and how many there are in all, for a message."""
    values = [v.item() if hasattr(v, "item") else v for v in np.asarray(values).reshape(-1)]
    text = ", ".join(repr(v) if isinstance(v, str) else f"{v:g}" for v in values[:limit])
    return text + (f", ... ({len(values)} in all)" if len(values) > limit else "")


def located(path: str, key: str | None) -> str:
    """``"x.npz (key 'labels')"``: where the values a message speaks of are."""
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
    missing = [c for c in want if c not in set(have)][:SHOWN]
    extra = [c for c in have if c not in set(want)][:SHOWN]
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
    where = located(path, key)
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
                f"{where}: {len(bad)} label(s) are NaN or infinite (at example(s) {shown(bad)}); "
                "labels must be integer class ids"
            )
        frac = np.flatnonzero(y != np.round(y))
        if len(frac):
            raise DataError(
                f"{where}: labels must be integer class ids; {len(frac)} are not, with values "
                f"{shown(np.unique(y[frac]))} (at example(s) {shown(frac)})"
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
            f"{shown(np.unique(y[neg]))} (at example(s) {shown(neg)})"
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
                f"{len(over)} are not, with values {shown(np.unique(y[over]))} "
                f"(at example(s) {shown(over)})"
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
                f"{shown(above)} occur (at example(s) {shown(at)}): a stray label would make a "
                f"{k}-class model. Fix the labels, or state the number of classes "
                "({num_classes}) or name them (a 'classes' array)",
                mentions=["num_classes"],
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
    where = located(path, key)
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
                f"example(s) {shown(bad)}); fix or drop those images"
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
