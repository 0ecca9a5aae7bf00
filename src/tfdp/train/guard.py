"""Non-finite losses and gradients: detection agreed by every replica, and the guarded update.

This module owns what keeps a diverging run from training on, or saving, non-finite
values: :class:`NonFiniteError` (raised naming the optimizer step), :data:`POLICIES`
(``"stop"``, ``"skip"``, ``"ignore"``), :func:`nonfinite_local` (whether a loss or gradient
is non-finite), :func:`apply_if_finite` (a replica's flags summed over the replicas, so that
every replica on every worker decides alike, and an optimizer update applied only when no
replica flagged the step -- a skipped step changes no variable, optimizer slot or iteration
count) and :func:`apply_reduced_if_finite` (the same decision taken once on values that are
already all-reduced, which every replica holds alike: no flag collective). The training loop
(:mod:`tfdp.train.step`) and the ``model.fit`` path (:mod:`tfdp.train.keras_fit`) use them;
:class:`tfdp.checkpoint.CheckpointManager` refuses to save non-finite variables.

Example:
    >>> err = NonFiniteError(global_step=13, epoch=1, step=3, what="loss", value=float("nan"))
    >>> print(err)
    non-finite loss (nan) at optimizer step 13 (epoch 2, step 4 of it): the update was not applied
    >>> err.global_step
    13
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf

from tfdp._compat.graph import supports_no_merge_call
from tfdp.errors import ConfigError

#: What to do with a step whose loss or gradient is non-finite.
POLICIES = ("stop", "skip", "ignore")


class NonFiniteError(RuntimeError):
    """A step's loss or gradient was NaN or infinite; training stopped before applying it.

    Attributes:
        global_step: The optimizer step (1-based) whose loss or gradient was non-finite; the
            model holds the weights after step ``global_step - 1``.
        epoch: Its epoch (0-based).
        step: Its step within the epoch (0-based).
        what: ``"loss"`` or ``"gradient"``.
        value: The step's loss as every replica computed it.
        applied: Whether the step's update was applied (the ``model.fit`` path
            sees a loss only after its update; the gradient check comes before).

    Example:
        >>> issubclass(NonFiniteError, RuntimeError)
        True
    """

    def __init__(
        self,
        *,
        global_step: int,
        epoch: int | None = None,
        step: int | None = None,
        what: str = "loss",
        value: float = float("nan"),
        applied: bool = False,
        detail: str = "",
    ) -> None:
        self.global_step, self.epoch, self.step = global_step, epoch, step
        self.what, self.value = what, value
        where = f"optimizer step {global_step}"
        if epoch is not None and step is not None:
            where += f" (epoch {epoch + 1}, step {step + 1} of it)"
        shown = f" ({value:.4g})" if what == "loss" else f" (loss {value:.4g})"
        done = (
            "its update was applied (finite gradients)" if applied else "the update was not applied"
        )
        super().__init__(f"non-finite {what}{shown} at {where}: {done}{detail}")


def check_policy(on_nonfinite: Any) -> str:
    """``on_nonfinite`` if it is one of :data:`POLICIES`, else a ConfigError naming them.

    Example:
        >>> check_policy("skip")
        'skip'
    """
    if on_nonfinite not in POLICIES:
        raise ConfigError(
            f"must be one of {', '.join(map(repr, POLICIES))}, got {on_nonfinite!r}",
            argument="on_nonfinite",
        )
    return on_nonfinite


def _all_finite(tensors: Sequence[Any]) -> tf.Tensor:
    checks = [
        tf.reduce_all(tf.math.is_finite(t))
        for t in tensors
        if t is not None and tf.as_dtype(t.dtype).is_floating
    ]
    return tf.reduce_all(tf.stack(checks)) if checks else tf.constant(True)


def _returning_none(apply: Callable[[list[Any]], Any]) -> Callable[[list[Any]], None]:
    """``apply`` with its result dropped: both branches of the guarding ``tf.cond`` return None."""

    def run(grads: list[Any]) -> None:
        apply(grads)

    return run


def nonfinite_local(loss: tf.Tensor, grads: Sequence[Any]) -> tf.Tensor:
    """``[loss is non-finite, a gradient is non-finite]``, as float32 0/1.

    Of a replica's own values, :func:`apply_if_finite` sums it over the replicas, so
    that every replica of every worker decides alike; of all-reduced values,
    :func:`apply_reduced_if_finite` takes it once.

    Example:
        >>> nonfinite_local(tf.constant(1.0), [tf.constant([0.0, float("inf")])]).numpy()
        array([0., 1.], dtype=float32)
    """
    bad = [tf.logical_not(_all_finite([loss])), tf.logical_not(_all_finite(grads))]
    return tf.cast(tf.stack(bad), tf.float32)


def apply_if_finite(
    local_flags: tf.Tensor,
    apply: Callable[[list[Any]], Any],
    grads: Sequence[Any],
    *,
    multi_worker: bool = False,
) -> tf.Tensor:
    """``apply(grads)`` -- an optimizer update -- only if no replica flagged its step.

    Replica context. ``local_flags`` (e.g. :func:`nonfinite_local`) are summed over the
    replicas; the update runs only where the sum is zero, so every replica (and worker)
    decides alike, and a step not applied changes nothing: no variable, no optimizer
    slot, no iteration count. Returns the summed flags. Under strategies that synchronise
    updates with ``merge_call`` (MirroredStrategy, MultiWorkerMirroredStrategy) the sum and
    the condition are taken in cross-replica context, as Keras's ``LossScaleOptimizer``
    does (a ``tf.cond`` in replica context may not hold a ``merge_call``): the sum of one
    worker's replicas is a local add, and only a multi-worker job (``multi_worker=True``)
    pays a collective for it.
    """
    grads = list(grads)

    run = _returning_none(apply)

    ctx = tf.distribute.get_replica_context()
    if supports_no_merge_call():
        total = ctx.all_reduce(tf.distribute.ReduceOp.SUM, local_flags)
        tf.cond(tf.reduce_sum(total) == 0, lambda: run(grads), lambda: None)
        return total

    def cross_replica(distribution: Any, flags: Any, grads: Any) -> tf.Tensor:
        if multi_worker:
            total = distribution.reduce(tf.distribute.ReduceOp.SUM, flags, axis=None)
        else:  # every replica is local: no collective
            total = tf.add_n(list(distribution.experimental_local_results(flags)))
        tf.cond(
            tf.reduce_sum(total) == 0,
            lambda: distribution.extended.call_for_each_replica(run, args=(grads,)),
            lambda: None,
        )
        return total

    return ctx.merge_call(cross_replica, args=(local_flags, grads))


def apply_reduced_if_finite(
    loss: tf.Tensor,
    grads: Sequence[Any],
    apply: Callable[[list[Any]], Any],
    *,
    checked: Sequence[Any] | None = None,
) -> tf.Tensor:
    """``apply(grads)`` -- an optimizer update -- unless the reduced loss or gradient is not finite.

    Replica context. ``loss`` and ``grads`` are already all-reduced (summed over the
    replicas), so every replica of every worker holds the same values and takes the
    same decision without another collective: a NaN or infinity on any replica
    propagates through the sum (so does a sum that overflows). ``checked`` are the
    tensors whose finiteness stands for the gradient's (default ``grads``; the
    gradient's global norm when it is computed anyway). Returns ``[loss is
    non-finite, gradient is non-finite]`` (float32 0/1); a step not applied changes
    nothing: no variable, no optimizer slot, no iteration count. Under strategies that
    synchronise updates with ``merge_call`` (MirroredStrategy) the check runs once, on
    the first local replica's copy, in cross-replica context, and the update is the
    replicas' ``apply`` under a ``tf.cond`` there (a ``tf.cond`` in replica context may
    not hold a ``merge_call``).

    Example:
        >>> applied = []
        >>> flags = apply_reduced_if_finite(tf.constant(float("nan")), [tf.ones(2)], applied.append)
        >>> flags.numpy(), applied
        (array([1., 0.], dtype=float32), [])
    """
    grads = list(grads)
    checked = grads if checked is None else list(checked)

    run = _returning_none(apply)

    if supports_no_merge_call():
        flags = nonfinite_local(loss, checked)
        tf.cond(tf.reduce_sum(flags) == 0, lambda: run(grads), lambda: None)
        return flags

    def cross_replica(distribution: Any, loss: Any, checked: Any, grads: Any) -> tf.Tensor:
        def first(value: Any) -> Any:
            return distribution.experimental_local_results(value)[0]

        flags = nonfinite_local(first(loss), [first(t) for t in checked])
        tf.cond(
            tf.reduce_sum(flags) == 0,
            lambda: distribution.extended.call_for_each_replica(run, args=(grads,)),
            lambda: None,
        )
        return flags

    ctx = tf.distribute.get_replica_context()
    return ctx.merge_call(cross_replica, args=(loss, checked, grads))
