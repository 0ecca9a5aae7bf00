"""Gradient compression for the all-reduce: gradients rounded to 16 bits before the sum (opt-in).

This module owns :func:`compressed_all_reduce`, what
``Trainer(gradient_compression="fp16" | "bf16")`` does instead of the exact
all-reduce (in the gradients' own type). What it changes, exactly:

- every replica's floating-point gradient is rounded (to nearest, ties to even)
  to float16 or bfloat16 before the all-reduce;
- the all-reduce sums in that type: a sum over ``R`` replicas is rounded to it
  up to ``R - 1`` times (each addition of TensorFlow's ring, or of the
  one-device reduction), then cast back to the gradient's own type;
- the loss (with each replica's own loss) is all-reduced apart, in its own
  type (so a step costs one more small collective), and the clipping norm,
  the non-finite check and the update read the cast-back sum.

float16 keeps 11 significant bits and a range of 6e-8 to 65504: a gradient
entry below about 6e-8 becomes 0 (below 6e-5 it keeps fewer bits), and one
above 65504 (or a sum that grows past it) becomes infinite -- which the
non-finite guard then treats as any other non-finite gradient (with the
default ``on_nonfinite="stop"`` the run stops at that step). bfloat16 keeps
float32's range but only 8 significant bits. Under ``mixed_float16`` the
loss scaler all-reduces the (scaled) gradients itself, so compression is
refused there. Neither is exact, so neither is ever on by default; what it
buys between machines is measured in docs/benchmarks.md ("All-reduce between
machines").

Example:
    >>> import tensorflow as tf
    >>> strategy = tf.distribute.get_strategy()
    >>> def replica():
    ...     ctx = tf.distribute.get_replica_context()
    ...     return compressed_all_reduce(ctx, [tf.constant([1.0 + 2**-12, 3.0])], "fp16")
    >>> [t.numpy().tolist() for t in strategy.run(replica)]  # 1 + 2**-12 rounds to 1 in fp16
    [[1.0, 3.0]]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from tfdp.errors import ConfigError

#: The values of ``Trainer(gradient_compression=...)``: the type gradients are summed in.
COMPRESSIONS: dict[str, tf.DType] = {"fp16": tf.float16, "bf16": tf.bfloat16}


def check_compression(value: Any, mixed_precision: str | None = None) -> str | None:
    """``value`` if it is ``None`` or one of :data:`COMPRESSIONS`; else a ConfigError naming them.

    Example:
        >>> check_compression("fp16"), check_compression(None)
        ('fp16', None)
    """
    if value is not None and value not in COMPRESSIONS:
        raise ConfigError(
            f"must be None, 'fp16' or 'bf16', got {value!r}",
            argument="gradient_compression",
        )
    if value is not None and mixed_precision == "mixed_float16":
        raise ConfigError(
            "cannot be combined with mixed_precision='mixed_float16': its "
            "loss scaler all-reduces the scaled gradients itself (use 'mixed_bfloat16', or no "
            "compression)",
            argument="gradient_compression",
        )
    return value


def compressed_all_reduce(
    ctx: tf.distribute.ReplicaContext, grads: Sequence[Any], compression: str
) -> list[Any]:
    """The sum over replicas of ``grads``, each rounded to ``compression``'s type first.

    Replica context. Floating-point gradients are cast to float16 / bfloat16,
    all-reduced (summed in that type) and cast back to their own type; others
    pass through the same all-reduce unchanged.
    """
    dtype = COMPRESSIONS[compression]
    sent = [tf.cast(g, dtype) if g.dtype.is_floating else g for g in grads]
    summed = ctx.all_reduce(tf.distribute.ReduceOp.SUM, sent)
    return [
        tf.cast(s, g.dtype) if g.dtype.is_floating else s
        for s, g in zip(summed, grads, strict=True)
    ]
