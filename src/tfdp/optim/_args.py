"""The optimizers' argument checks: a hyperparameter out of range is a ConfigError naming it.

Example:
    >>> non_negative("weight_decay", 0.5), unit("beta_1", 0.9)
    (0.5, 0.9)
"""

from __future__ import annotations

import math
from typing import Any

from tfdp.errors import ConfigError


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def unit(name: str, value: Any) -> float:
    """``value`` as a float in [0, 1) (a beta, a momentum), or a ConfigError naming ``name``.

    Example:
        >>> unit("beta_2", 1.0)
        Traceback (most recent call last):
        ...
        tfdp.errors.ConfigError: beta_2: must be a number in [0, 1), got 1.0
    """
    if not (_number(value) and 0 <= value < 1):
        raise ConfigError(f"must be a number in [0, 1), got {value!r}", argument=name)
    return float(value)


def non_negative(name: str, value: Any) -> float:
    """``value`` as a finite float >= 0 (a decay, an epsilon), or a ConfigError naming ``name``.

    Example:
        >>> non_negative("weight_decay", -1)
        Traceback (most recent call last):
        ...
        tfdp.errors.ConfigError: weight_decay: must be a finite number >= 0, got -1
    """
    if not (_number(value) and value >= 0):
        raise ConfigError(f"must be a finite number >= 0, got {value!r}", argument=name)
    return float(value)
