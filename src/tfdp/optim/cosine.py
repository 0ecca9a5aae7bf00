"""timm's cosine learning-rate schedule as a Keras schedule: :class:`TimmCosine`.

This module owns timm's ``CosineLRScheduler`` (one cycle): linear warm-up from
``warmup_lr_init``, one cosine from the base rate to ``lr_min`` over
``t_initial``, ``lr_min`` after, stepped per epoch or per optimizer update.
It feeds the rate to any Keras optimizer (``learning_rate=TimmCosine(...)``),
as timm's scheduler sets the rate of a torch optimizer.

Example:
    >>> s = TimmCosine(0.1, t_initial=10, warmup_t=2, warmup_lr_init=0.0, lr_min=0.0)
    >>> [round(float(s(t)), 4) for t in (0, 1, 2, 10)]
    [0.0, 0.05, 0.0905, 0.0]
"""

from __future__ import annotations

import math
from typing import Any

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="tfdp")
class TimmCosine(keras.optimizers.schedules.LearningRateSchedule):
    """timm's ``CosineLRScheduler`` (one cycle, warm-up not a prefix) as a Keras schedule.

    At ``t = step // steps_per_t`` (``steps_per_t``: the optimizer steps of
    an epoch when stepped per epoch, as DeiT and timm do by default; 1 per
    update): ``warmup_lr_init + t * (base_lr - warmup_lr_init) / warmup_t``
    while ``t < warmup_t``; then ``lr_min + (base_lr - lr_min) * (1 + cos(pi
    * t / t_initial)) / 2`` (``t`` counted from the start, warm-up included,
    as timm's default ``warmup_prefix=False``) while ``t < t_initial``; then
    ``lr_min``. Computed in float64 as timm's Python floats are, then cast.

    ``t_lag`` units late, ``t = max(step // steps_per_t - t_lag, 0)``: with
    ``t_lag=1`` per epoch, the rates of DeiT's ``main.py``, which calls
    ``lr_scheduler.step(epoch)`` after epoch ``epoch`` (timm's ``train.py``
    calls ``step(epoch + 1)``), so that its epoch ``e > 0`` trains at ``t = e - 1``.

    Example:
        >>> s = TimmCosine(1.0, t_initial=4, steps_per_t=10)
        >>> [float(s(k)) for k in (0, 9, 10, 20, 40)]
        [1.0, 1.0, 0.8535533905932737, 0.5, 0.0]
        >>> deit = TimmCosine(1.0, t_initial=4, steps_per_t=10, t_lag=1)
        >>> [float(deit(k)) for k in (0, 10, 20, 30)]  # epochs 0 and 1 at t = 0
        [1.0, 1.0, 0.8535533905932737, 0.5]
    """

    def __init__(
        self,
        base_lr: float,
        t_initial: int,
        warmup_t: int = 0,
        warmup_lr_init: float = 0.0,
        lr_min: float = 0.0,
        steps_per_t: int = 1,
        t_lag: int = 0,
    ) -> None:
        self.base_lr = float(base_lr)
        self.t_initial = int(t_initial)
        self.warmup_t = int(warmup_t)
        self.warmup_lr_init = float(warmup_lr_init)
        self.lr_min = float(lr_min)
        self.steps_per_t = int(steps_per_t)
        self.t_lag = int(t_lag)

    def __call__(self, step: Any) -> Any:
        """The rate at optimizer step ``step`` (float64)."""
        t = ops.floor_divide(ops.cast(step, "int64"), self.steps_per_t)
        t = ops.cast(ops.maximum(t - self.t_lag, 0), "float64")
        cosine = self.lr_min + 0.5 * (self.base_lr - self.lr_min) * (
            1.0 + ops.cos(math.pi * t / max(self.t_initial, 1))
        )
        lr = ops.where(t < self.t_initial, cosine, self.lr_min)
        if self.warmup_t > 0:
            per_t = (self.base_lr - self.warmup_lr_init) / self.warmup_t
            lr = ops.where(t < self.warmup_t, self.warmup_lr_init + t * per_t, lr)
        return lr

    def get_config(self) -> dict[str, Any]:
        """The arguments."""
        return {
            "base_lr": self.base_lr,
            "t_initial": self.t_initial,
            "warmup_t": self.warmup_t,
            "warmup_lr_init": self.warmup_lr_init,
            "lr_min": self.lr_min,
            "steps_per_t": self.steps_per_t,
            "t_lag": self.t_lag,
        }
