"""Data sets that ship with tfdp: the UCI hand-written digits (no network needed).

This module owns loading the bundled ``digits.npz`` and its fixed
train / held-out split. Pure NumPy.

Example:
    >>> (x, y), (xt, yt) = load_digits()
    >>> x.shape, xt.shape, x.dtype
    ((1437, 8, 8, 1), (360, 8, 8, 1), dtype('uint8'))
"""

from __future__ import annotations

from importlib import resources

import numpy as np

#: Examples in the held-out split of the digits (20%, fixed).
DIGITS_HELD_OUT = 360
_SPLIT_SEED = 20_261_130


Pair = tuple[np.ndarray, np.ndarray]


def load_digits(split: str | None = None) -> tuple[Pair, Pair] | Pair:
    """The UCI digits (1,797 8x8 grey images, levels 0..16, 10 classes), bundled.

    Args:
        split: ``None`` for ``((x_train, y_train), (x_test, y_test))``, or
            ``"train"``, ``"test"``, ``"all"`` for one ``(x, y)`` pair. The
            split is fixed (a seeded shuffle, the last 360 held out), so every
            run and every process agrees on it.

    Returns:
        Images uint8 ``[n, 8, 8, 1]`` and labels int64 ``[n]``.

    Example:
        >>> x, y = load_digits("test")
        >>> len(x), int(y.max())
        (360, 9)
    """
    with resources.files("tfdp.data").joinpath("digits.npz").open("rb") as f:
        data = np.load(f)
        images = data["images"][..., None].astype(np.uint8)
        labels = data["labels"].astype(np.int64)
    order = np.random.default_rng(_SPLIT_SEED).permutation(len(labels))
    train, test = order[:-DIGITS_HELD_OUT], order[-DIGITS_HELD_OUT:]
    pairs = {
        "train": (images[train], labels[train]),
        "test": (images[test], labels[test]),
        "all": (images, labels),
    }
    if split is None:
        return pairs["train"], pairs["test"]
    if split not in pairs:
        raise ValueError(f"split must be None, 'train', 'test' or 'all', got {split!r}")
    return pairs[split]
