"""A speed trick in calls, with its public-API fallback (see :mod:`tfdp._compat`).

A ``tf.function`` call bound once; it checks the switch (:mod:`.switch`) when it is made, and,
off, is what public TensorFlow does: the values are the same either way.

Example:
    >>> import tensorflow as tf
    >>> call = bound_call(tf.function(lambda x: x + 1), tf.constant(41))
    >>> int(call())
    42
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tfdp._compat.fast.switch import trick_on


def bound_call(fn: Any, *args: Any) -> Callable[[], Any]:
    """A call of the ``tf.function`` ``fn`` on ``args``, bound once: ``() -> fn(*args)``.

    ``fn(*args)`` looks its trace up on every call: it computes the trace type
    of every argument, which for a distributed iterator means building its
    whole type spec in Python (about as long as a small training step on a
    CPU). The arguments of a training loop's call never change (the same
    iterator, the same step count), so this looks the trace up and flattens
    the arguments once, and each call then runs what ``fn(*args)`` runs after
    its look-up (TensorFlow's ``tracing_compilation.call_function``): the
    concrete function on the flat inputs and the current captures. The
    arguments are kept alive with the call.

    Reaches into ``ConcreteFunction._call_flat`` and ``function_type.bind`` /
    ``unpack_inputs``. Fallback (``bound_call`` off, see :mod:`.switch`; and
    under ``tf.config.run_functions_eagerly(True)``): plainly ``fn(*args)``.

    Example:
        >>> import tensorflow as tf
        >>> it = iter(tf.data.Dataset.range(5))
        >>> step = tf.function(lambda iterator: next(iterator) * 10)
        >>> call = bound_call(step, it)
        >>> [int(call()) for _ in range(3)]
        [0, 10, 20]
    """
    import tensorflow as tf

    if not trick_on("bound_call") or tf.config.functions_run_eagerly():
        return lambda: fn(*args)
    concrete = fn.get_concrete_function(*args)
    function_type = concrete.function_type
    flat = function_type.unpack_inputs(function_type.bind(*args))
    call_flat = concrete._call_flat

    def call() -> Any:
        return call_flat(flat, captured_inputs=concrete.captured_inputs)

    call.args = args  # type: ignore[attr-defined]  # the arguments live as long as the call
    return call
