"""What a checkpoint holds of a Keras model, and the floating-point variables a save checks.

This module owns :func:`keras_trackables` (what an exact resume must save of a
Keras model: weights, optimizer, the random layers' seed states) and
:func:`float_variables` (every floating-point variable of the trackables, which
:meth:`~tfdp.checkpoint.CheckpointManager.save` checks for non-finite values).

Example:
    >>> import keras
    >>> layer = keras.layers.Dense(2, name="d"); layer.build((None, 3))
    >>> sorted(name for name, _ in float_variables({"layer": layer}))
    ['d/bias', 'd/kernel']
"""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from tfdp._compat.keras import seed_generator_states


def keras_trackables(model: Any, optimizer: Any) -> dict[str, Any]:
    """What to checkpoint of a Keras model for an exact resume: weights, optimizer, RNG state.

    Keras 3's ``SeedGenerator`` states (dropout and other random layers) are
    model variables that ``tf.train.Checkpoint(model=...)`` does not save;
    without them a resumed run draws other dropout masks. They are added here
    as ``rng_states``.

    Example:
        >>> import keras
        >>> m = keras.Sequential([keras.Input((2,)), keras.layers.Dropout(0.5)])
        >>> sorted(keras_trackables(m, keras.optimizers.SGD()))
        ['model', 'optimizer', 'rng_states']
    """
    return {"model": model, "optimizer": optimizer, "rng_states": seed_generator_states(model)}


def float_variables(obj: Any) -> list[tuple[str, Any]]:
    """``(name, variable)`` of every floating-point variable in a trackable, list or dict."""
    found: dict[int, tuple[str, Any]] = {}
    stack = [obj]
    while stack:
        item = stack.pop()
        if isinstance(item, (list, tuple)):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (tf.Variable, keras.Variable)):
            name = getattr(item, "path", None) or item.name
            found.setdefault(id(item), (name, item))
        else:
            variables = getattr(item, "variables", None)  # Keras models, optimizers, tf.Module
            if isinstance(variables, (list, tuple)):
                stack.extend(variables)
    return [nv for nv in found.values() if tf.as_dtype(nv[1].dtype).is_floating]
