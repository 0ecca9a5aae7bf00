"""Data held as arrays in memory, whatever file they came from: opened, and split by a seed.

This module owns what the formats of arrays (the bundled digits, ``.npz``
files) share: :func:`arrays_data`, the :class:`OpenedData` of checked images
and labels, and :func:`split_arrays`, the seeded held-out split of an
:class:`~tfdp.sources.ArraySource`.

Example:
    >>> import numpy as np
    >>> data = arrays_data("npz", "x.npz", np.zeros((4, 2, 2, 1), np.uint8), np.arange(4), None,
    ...                    1 / 255, num_classes=4)
    >>> train, held = split_arrays(data.source, 0.25, seed=0)
    >>> train.num_examples, held.num_examples
    (3, 1)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tfdp.recipe.dataspec.opened import OpenedData


def arrays_data(
    kind: str,
    where: str,
    images: np.ndarray,
    labels: np.ndarray,
    classes: list[str] | None,
    scale: float,
    *,
    num_classes: int | None = None,
    notes: list[str] | None = None,
    root: str | None = None,
) -> OpenedData:
    """The :class:`OpenedData` of checked ``images`` ``[N, H, W, C]`` and int64 ``labels``.

    ``num_classes`` defaults to ``len(classes)``; the source is an
    :class:`~tfdp.sources.ArraySource` of ``(images, labels)``.
    """
    from tfdp.sources import ArraySource

    return OpenedData(
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
        root=root,
    )


def split_arrays(source: Any, fraction: float, seed: int) -> tuple[Any, Any]:
    """``(train, held out)``: a seeded ``round(fraction * N)`` examples held out, at least one.

    The order is ``numpy.random.default_rng(seed).permutation(N)``: its first
    part is held out, the rest trained on, each in that order.
    """
    from tfdp.sources import ArraySource

    x, y = source.numpy()
    order = np.random.default_rng(seed).permutation(len(y))
    cut = max(1, round(len(y) * fraction))
    return ArraySource((x[order[cut:]], y[order[cut:]])), ArraySource(
        (x[order[:cut]], y[order[:cut]])
    )
