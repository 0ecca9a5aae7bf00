"""Argument checks the augmentation stages share (each raising :class:`tfdp.errors.ConfigError`).

Example:
    >>> pair(224, "size", 1), pair((3, 4), "padding", 0), probability(1, "p")
    ((224, 224), (3, 4), 1.0)
"""

from __future__ import annotations

from typing import Any

from tfdp.errors import ConfigError


def pair(value: Any, name: str, minimum: int) -> tuple[int, int]:
    """``value`` as ``(a, b)``: an int ``>= minimum`` used twice, or a pair of them."""
    items = tuple(value) if isinstance(value, (tuple, list)) else (value, value)
    if len(items) != 2 or any(
        isinstance(v, bool) or not isinstance(v, int) or v < minimum for v in items
    ):
        raise ConfigError(
            f"must be an int >= {minimum} or a pair of them, got {value!r}", argument=name
        )
    return items[0], items[1]


def probability(value: Any, name: str) -> float:
    """``value`` as a float in ``[0, 1]``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ConfigError(f"must be a number in [0, 1], got {value!r}", argument=name)
    return float(value)
