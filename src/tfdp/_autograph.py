"""Which code AutoGraph converts when tfdp traces: none of tfdp's own, all of its users'.

tfdp's ``tf.data`` functions and compiled steps are plain graph code: their Python
``if``/``for`` decide on Python values, never on tensors. Traced through AutoGraph they
were transpiled all the same, function by function, recursively -- about 2 s of every
process's start-up (229 functions, a quarter of a one-epoch ``tfdp train``). So tfdp's
entry points are traced as they are (:func:`plain`), and everything they call runs
unconverted, like Keras's own code (AutoGraph never converts Keras).

A callable a user hands to tfdp -- an augmentation, a source of their own, a loss function
-- keeps what ``tf.data.Dataset.map`` or ``tf.function`` would have given it: AutoGraph's
conversion, so a Python ``if`` on a tensor still becomes a ``tf.cond`` (:func:`user_code`,
applied where tfdp calls it). tfdp, TensorFlow and Keras callables are left as they are.

Example:
    >>> import tensorflow as tf
    >>> from tfdp.augment import RandomFlip
    >>> flip = RandomFlip()
    >>> user_code(flip) is flip  # tfdp's own: called as is
    True
    >>> ds = tf.data.Dataset.range(3).map(plain(lambda x: x * 2))  # traced without AutoGraph
    >>> [int(v) for v in ds.as_numpy_iterator()]
    [0, 2, 4]
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

import tensorflow as tf

F = TypeVar("F", bound=Callable[..., Any])

#: Top-level packages whose callables AutoGraph leaves as they are.
_LIBRARIES = ("tfdp", "tensorflow", "keras")


def plain(fn: F) -> F:
    """``fn`` -- tfdp's own graph code -- traced without AutoGraph, and all it calls.

    Example:
        >>> import tensorflow as tf
        >>> ds = tf.data.Dataset.range(3).map(plain(lambda x: x * 2))
        >>> [int(v) for v in ds.as_numpy_iterator()]
        [0, 2, 4]
    """
    return tf.autograph.experimental.do_not_convert(fn)


def _module(obj: Any) -> str:
    target = obj.__func__ if inspect.ismethod(obj) else obj
    if inspect.isfunction(target) or inspect.isbuiltin(target):
        return getattr(target, "__module__", None) or ""
    return type(target).__module__ or ""


def is_library_code(fn: Any) -> bool:
    """Whether ``fn`` (a function, method or callable object) comes from tfdp, TensorFlow or Keras.

    Example:
        >>> import numpy as np
        >>> from tfdp import augment
        >>> is_library_code(augment.RandomFlip()), is_library_code(np.sort)
        (True, False)
    """
    return _module(fn).split(".")[0] in _LIBRARIES


def user_code(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` converted as AutoGraph converts a user's function in ``tf.data`` or ``tf.function``.

    tfdp, TensorFlow and Keras callables come back unchanged; so does anything
    AutoGraph cannot convert (it would have called that unconverted too).

    A function defined where AutoGraph cannot read its source (a doctest, an
    interactive prompt) is called as is, exactly as ``tf.data`` would call it.

    Example:
        >>> import keras
        >>> relu = keras.activations.relu
        >>> user_code(relu) is relu  # Keras's own: called as is
        True
        >>> import numpy as np
        >>> float(user_code(np.sort)([2.0, 1.0])[0])  # not tfdp's: what it computes is unchanged
        1.0
    """
    if isinstance(fn, functools.partial):  # the user's function inside, its arguments kept
        return functools.partial(user_code(fn.func), *fn.args, **fn.keywords)
    if is_library_code(fn):
        return fn
    try:
        if inspect.ismethod(fn):
            return functools.partial(tf.autograph.to_graph(fn.__func__), fn.__self__)
        if inspect.isfunction(fn):
            return tf.autograph.to_graph(fn)
        call = type(fn).__call__
        if inspect.isfunction(call):  # a callable object of the user's class
            return functools.partial(tf.autograph.to_graph(call), fn)
    except Exception:  # AutoGraph refused it: called as is, as AutoGraph itself would
        return fn
    return fn
