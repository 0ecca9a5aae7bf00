"""The array operations tfdp writes once and runs in TensorFlow or in NumPy, with the same bits.

This module owns :class:`ArrayOps`, a namespace of the few operations that
the counter hash (:mod:`tfdp.random.counter_hash`) and the window stages'
box arithmetic (:meth:`tfdp.augment.WindowAugmentation.host_windows`) need
beyond Python's operators, and its two instances: :data:`TENSORFLOW` (graphs
and eager) and :data:`NUMPY` (the host side of the window path, inside one
``tf.numpy_function`` instead of hundreds of graph nodes). Code written
against an ``ArrayOps`` -- ``xp.shr(x, xp.const(8, xp.uint32))``, and ``*``,
``+``, ``^``, ``|``, ``&``, comparisons as operators -- is one definition
with two backends.

Why the bits agree: uint32 and int64 arithmetic wraps alike in both
libraries, casts between integer types are modular, right shifts of int64
are arithmetic, ``round`` is half-to-even in both; every float op used is
correctly rounded except ``exp``, whose last bit may differ (the window
stages plan in float64 so that such a bit never moves a box; see
:class:`tfdp.augment.RandomResizedCrop`).

Example:
    >>> import numpy as np
    >>> def mix(x, xp):
    ...     return xp.shr(x * xp.const(3, xp.uint32), xp.const(1, xp.uint32))
    >>> host = mix(NUMPY.const([5, 2**31], NUMPY.uint32), NUMPY)
    >>> graph = mix(TENSORFLOW.const([5, 2**31], TENSORFLOW.uint32), TENSORFLOW)
    >>> host.tolist(), graph.numpy().tolist()
    ([7, 1073741824], [7, 1073741824])
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf


@dataclass(frozen=True)
class ArrayOps:
    """One array library's dtypes and operations, as the shared definitions call them.

    Attributes:
        name: ``"tensorflow"`` or ``"numpy"``.
        uint32, int32, int64, float32, float64: The library's dtypes.
        const: ``(value, dtype) -> array``.
        cast: ``(x, dtype) -> x`` in ``dtype`` (modular between integer types).
        shl, shr: Bit shifts (``shr`` of a signed type is arithmetic).
        stack, reshape: As in NumPy (``axis=`` for ``stack``).
        fill_like: ``(x, value, dtype)``: an array of ``x``'s shape filled with ``value``.
        broadcast_like: ``(x, like)``: ``x`` broadcast to ``like``'s shape.
        counters: ``n -> uint32 [0, 1, ..., n - 1]``.
        exp, sqrt, round, floor: Elementwise (``round``: half to even).
        where, minimum, maximum: Elementwise selection, as in NumPy.
        first_true: ``(mask [B, n], n) -> [B]``: each row's first True (``n`` if none).
        pick: ``(values [B, n], index [B]) -> [B]``: ``values[b, index[b]]``.
    """

    name: str
    uint32: Any
    int32: Any
    int64: Any
    float32: Any
    float64: Any
    const: Callable[[Any, Any], Any]
    cast: Callable[[Any, Any], Any]
    shl: Callable[[Any, Any], Any]
    shr: Callable[[Any, Any], Any]
    stack: Callable[..., Any]
    reshape: Callable[[Any, Any], Any]
    fill_like: Callable[[Any, int, Any], Any]
    broadcast_like: Callable[[Any, Any], Any]
    counters: Callable[[int], Any]
    exp: Callable[[Any], Any]
    sqrt: Callable[[Any], Any]
    round: Callable[[Any], Any]
    floor: Callable[[Any], Any]
    where: Callable[[Any, Any, Any], Any]
    minimum: Callable[[Any, Any], Any]
    maximum: Callable[[Any, Any], Any]
    first_true: Callable[[Any, int], Any]
    pick: Callable[[Any, Any], Any]

    def __repr__(self) -> str:
        return f"ArrayOps({self.name!r})"


def _tf_first_true(mask: Any, n: int) -> Any:
    return tf.reduce_min(tf.where(mask, tf.range(n)[tf.newaxis, :], n), axis=1)


def _np_first_true(mask: Any, n: int) -> np.ndarray:
    return np.min(np.where(mask, np.arange(n)[np.newaxis, :], n), axis=1)


def _np_pick(values: Any, index: Any) -> np.ndarray:
    return np.take_along_axis(values, np.asarray(index)[:, np.newaxis], axis=1)[:, 0]


#: The operations in TensorFlow (graphs and eager).
TENSORFLOW = ArrayOps(
    name="tensorflow",
    uint32=tf.uint32,
    int32=tf.int32,
    int64=tf.int64,
    float32=tf.float32,
    float64=tf.float64,
    const=tf.constant,
    cast=tf.cast,
    shl=tf.bitwise.left_shift,
    shr=tf.bitwise.right_shift,
    stack=tf.stack,
    reshape=tf.reshape,
    fill_like=lambda x, value, dtype: tf.fill(tf.shape(x), tf.constant(value, dtype)),
    broadcast_like=lambda x, like: tf.broadcast_to(x, tf.shape(like)),
    counters=lambda n: tf.cast(tf.range(n), tf.uint32),  # Range has no uint32 kernel
    exp=tf.exp,
    sqrt=tf.sqrt,
    round=tf.round,  # half to even, as NumPy's
    floor=tf.floor,
    where=tf.where,
    minimum=tf.minimum,
    maximum=tf.maximum,
    first_true=_tf_first_true,
    pick=lambda values, index: tf.gather(values, index, axis=1, batch_dims=1),
)

#: The same operations in NumPy: the host side of the window path.
NUMPY = ArrayOps(
    name="numpy",
    uint32=np.uint32,
    int32=np.int32,
    int64=np.int64,
    float32=np.float32,
    float64=np.float64,
    const=lambda value, dtype: np.asarray(value, dtype),
    cast=lambda x, dtype: np.asarray(x).astype(dtype),
    shl=np.left_shift,
    shr=np.right_shift,
    stack=np.stack,
    reshape=np.reshape,
    fill_like=lambda x, value, dtype: np.full(np.shape(x), value, dtype),
    broadcast_like=lambda x, like: np.broadcast_to(x, np.shape(like)),
    counters=lambda n: np.arange(n, dtype=np.uint32),
    exp=np.exp,
    sqrt=np.sqrt,
    round=np.round,  # half to even, as TensorFlow's
    floor=np.floor,
    where=np.where,
    minimum=np.minimum,
    maximum=np.maximum,
    first_true=_np_first_true,
    pick=_np_pick,
)
