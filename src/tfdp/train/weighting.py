"""How a step's loss weighs the replicas' rows: ``loss_weighting="rows"`` or ``"replicas"``.

This module owns the two weightings :class:`tfdp.train.Trainer` and
:func:`tfdp.train.fit` offer, and how the ``model.fit`` path gets tfdp's:

- ``"rows"`` (the default): a step's loss, and its gradient, is the mean
  over all the rows the step holds, on every replica and micro-batch:
  ``sum(w * loss) / N`` -- what one device would compute on the step's
  concatenated batch. A replica holding more rows weighs more.
- ``"replicas"``: PyTorch DDP's: every replica's own mean over its own rows,
  then the mean of those over the replicas: ``(1 / W) sum_r sum_{i in r}
  w_i loss_i / n_r``. DDP all-reduces the average of the gradients of each
  rank's local mean loss; with gradient accumulation (``no_sync``, each
  micro-batch's loss divided by the step's micro-batch count, as timm does,
  also for the epoch's last, shorter group) it is the mean over the
  replicas and micro-batches of each one's own mean. A replica's
  micro-batch with no rows adds 0 and still counts, as in torch's ``Join``
  (``divide_by_initial_world_size=True``).

The two are the same whenever every replica's batch holds the same number of
rows -- always, except in an epoch resumed at another world size whose rest
cannot be dealt evenly (see :meth:`tfdp.DistributedInput.resume_from`): tfdp's
samplers give every rank a list of one length (``DistributedSampler(padding=
None)`` with uneven ranks is refused), and a partial last batch of such lists
is dealt evenly. The regularisation losses are added once either way, and
the epoch's ``loss`` record is the mean over the epoch's rows either way (a
metric, not the objective).

On the ``model.fit`` path, Keras's step computes ``"replicas"`` (each
replica's mean, divided by the replica count: Keras >= 3.8), and
:class:`RowsWeighting` makes it ``"rows"``: each replica's gradient is
scaled by ``n_r * W / N`` before the all-reduce (its rows over the step's
mean rows per replica; ``N`` costs one scalar all-reduce per step, and only
where the batch dimension is dynamic: a static one is the same on every
replica, and nothing is scaled). Keras's reported loss is already the mean
over the rows.

Example:
    >>> check_loss_weighting("replicas")
    'replicas'
    >>> check_loss_weighting("mean")
    Traceback (most recent call last):
    ...
    tfdp.errors.ConfigError: loss_weighting: must be 'rows' or 'replicas', got 'mean'
"""

from __future__ import annotations

import threading
from typing import Any

import tensorflow as tf

from tfdp.errors import ConfigError
from tfdp.train.evaluate import unpack_batch

#: The values of ``loss_weighting``: tfdp's mean over rows, DDP's mean over replicas' means.
LOSS_WEIGHTINGS = ("rows", "replicas")


def check_loss_weighting(value: Any) -> str:
    """``value`` if it is one of :data:`LOSS_WEIGHTINGS`, else a ConfigError naming them.

    Example:
        >>> check_loss_weighting("rows")
        'rows'
    """
    if value not in LOSS_WEIGHTINGS:
        raise ConfigError(
            f"must be 'rows' or 'replicas', got {value!r}",
            argument="loss_weighting",
        )
    return value


class RowsWeighting:
    """``loss_weighting="rows"`` on the ``model.fit`` path: wrappers of Keras's step.

    :meth:`train_step` (wrapping ``model.train_step``) reads the replica's
    rows ``n_r`` from its batch and, where the batch dimension is dynamic,
    all-reduces them to the step's ``N``; :meth:`apply_gradients` (wrapping
    ``optimizer.apply_gradients``, which Keras's step hands the replica's
    gradient of its own mean divided by ``W``) scales the gradient by ``n_r *
    W / N`` (computed in float64) before the optimizer (or tfdp's non-finite
    guard) all-reduces it: the sum is the gradient of ``sum(w * loss) / N``.
    The factor passes between the two on the replica's thread while Keras
    traces the step.

    Args:
        replicas: The replicas in sync (``W``).

    Example:
        >>> weighting = RowsWeighting(2)
        >>> weighting.local_factor(tf.ones([3, 2])) is None  # a static batch: nothing scaled
        True
    """

    def __init__(self, replicas: int) -> None:
        self.replicas = int(replicas)
        self._traced = threading.local()

    def local_factor(self, x: Any) -> Any:
        """``n_r * W / N`` of this replica's batch ``x`` (replica context), None when static."""
        leaf = tf.nest.flatten(x)[0]
        if self.replicas == 1 or isinstance(leaf.shape[0], int):
            return None
        local = tf.cast(tf.shape(leaf)[0], tf.float64)
        ctx = tf.distribute.get_replica_context()
        total = ctx.all_reduce(tf.distribute.ReduceOp.SUM, local)
        return tf.math.divide_no_nan(local * self.replicas, total)

    def train_step(self, original: Any) -> Any:
        """``model.train_step`` that first learns this replica's factor from its batch."""
        traced = self._traced

        def train_step(data: Any) -> Any:
            traced.factor = self.local_factor(unpack_batch(data)[0])
            return original(data)

        return train_step

    def apply_gradients(self, original: Any) -> Any:
        """``optimizer.apply_gradients`` of gradients scaled by the replica's factor."""
        traced = self._traced

        def apply_gradients(grads_and_vars: Any, *args: Any, **kwargs: Any) -> Any:
            factor = getattr(traced, "factor", None)
            if factor is not None:
                grads_and_vars = [
                    (g if g is None else g * tf.cast(factor, g.dtype), v) for g, v in grads_and_vars
                ]
            return original(grads_and_vars, *args, **kwargs)

        return apply_gradients
