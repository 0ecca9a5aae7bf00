"""timm's rule of which weights get weight decay: :func:`decays`.

This module owns the choice timm's ``create_optimizer_v2`` makes with
``filter_bias_and_bn`` (its default, and DeiT's): weight decay for the
weights of two or more dimensions only, none for biases and normalisation
scales and offsets. The optimizers of :mod:`tfdp.optim` decay every weight
not passed to ``exclude_from_weight_decay``, as torch's do; this is the list
to pass.

Example:
    >>> import keras
    >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    >>> [v.name for v in model.trainable_variables if not decays(v)]
    ['bias']
"""

from __future__ import annotations

from typing import Any


def decays(variable: Any) -> bool:
    """Whether timm gives ``variable`` weight decay: only weights of two or more dimensions.

    Example:
        >>> import keras
        >>> decays(keras.Variable([[1.0]])), decays(keras.Variable([1.0]))
        (True, False)
    """
    return len(variable.shape) > 1
