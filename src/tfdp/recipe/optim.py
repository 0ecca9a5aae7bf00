"""timm's optimizers and cosine schedule in Keras, with torch's and timm's semantics.

This module owns what ``--opt`` / ``--sched`` build beyond Keras's own
optimizers: :class:`TorchSGD` (torch's ``SGD``: momentum buffer of raw
gradients, the learning rate applied at the update, weight decay as an L2
term added to the gradient, Nesterov or not) and :class:`TimmCosine` (timm's
``CosineLRScheduler``: linear warm-up from ``warmup_lr_init``, one cosine
cycle from the base rate to ``lr_min`` over ``t_initial``, ``lr_min`` after,
stepped per epoch or per optimizer update). :func:`decays` is timm's rule of
which weights get weight decay (``filter_bias_and_bn``: none for biases and
normalisation weights, any weight of at most one dimension). It imports
Keras: :mod:`tfdp.recipe.model` loads it when the optimizer is built.

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

from tfdp._compat import optimizer_slot

__all__ = ["TimmCosine", "TorchSGD", "decays"]


def decays(variable: Any) -> bool:
    """Whether timm gives ``variable`` weight decay: only weights of two or more dimensions.

    Example:
        >>> decays(keras.Variable([[1.0]])), decays(keras.Variable([1.0]))
        (True, False)
    """
    return len(variable.shape) > 1


@keras.saving.register_keras_serializable(package="tfdp")
class TorchSGD(keras.optimizers.SGD):
    """``torch.optim.SGD`` in Keras: what timm's ``sgd`` / ``nesterov`` / ``momentum`` run.

    Per step, with ``g`` the gradient, ``p`` the weight and ``b`` the momentum
    buffer (zero at first, so the first step's buffer is ``g`` as in torch):
    ``g += l2 * p`` (weights :func:`decays` picks), ``b = momentum * b + g``,
    ``d = g + momentum * b`` (Nesterov) or ``b``, ``p -= lr * d``. Keras's
    own SGD keeps ``lr * g`` in its buffer and decays weights apart from the
    gradient, which differs from torch once the rate changes or with
    momentum and weight decay together.

    Args:
        learning_rate: A rate or a schedule.
        momentum: torch's ``momentum`` (dampening 0).
        nesterov: Nesterov momentum (timm's ``sgd`` and ``nesterov``).
        l2: torch's ``weight_decay``: added to the gradient, times the weight.

    Example:
        >>> v = keras.Variable([[1.0]]); opt = TorchSGD(0.5, momentum=0.9, l2=0.1)
        >>> for _ in range(2):
        ...     _ = opt.apply_gradients([(keras.ops.ones((1, 1)), v)])
        >>> round(float(v.numpy()[0, 0]), 6)  # torch: 1 - .5 * 1.1; .45 - .5 * (.9 * 1.1 + 1.045)
        -0.5675
    """

    def __init__(
        self,
        learning_rate: Any = 0.01,
        momentum: float = 0.0,
        nesterov: bool = False,
        l2: float = 0.0,
        name: str = "torch_sgd",
        **kwargs: Any,
    ) -> None:
        super().__init__(learning_rate, momentum=momentum, nesterov=nesterov, name=name, **kwargs)
        self.l2 = float(l2)

    def update_step(self, gradient: Any, variable: Any, learning_rate: Any) -> None:
        """One torch SGD update of ``variable``."""
        lr = ops.cast(learning_rate, variable.dtype)
        g = ops.cast(gradient, variable.dtype)
        if self.l2 and decays(variable):
            l2 = ops.convert_to_tensor(self.l2, dtype=variable.dtype)  # not via float32
            g = ops.add(g, ops.multiply(variable, l2))
        if self.momentum != 0:
            b = optimizer_slot(self, self.momentums, variable)
            mu = ops.convert_to_tensor(self.momentum, dtype=variable.dtype)
            self.assign(b, ops.add(ops.multiply(b, mu), g))
            g = ops.add(g, ops.multiply(b, mu)) if self.nesterov else b
        self.assign_sub(variable, ops.multiply(g, lr))

    def get_config(self) -> dict[str, Any]:
        """Keras's config, with ``l2``."""
        return {**super().get_config(), "l2": self.l2}


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

    Example:
        >>> s = TimmCosine(1.0, t_initial=4, steps_per_t=10)
        >>> [float(s(k)) for k in (0, 9, 10, 20, 40)]
        [1.0, 1.0, 0.8535533905932737, 0.5, 0.0]
    """

    def __init__(
        self,
        base_lr: float,
        t_initial: int,
        warmup_t: int = 0,
        warmup_lr_init: float = 0.0,
        lr_min: float = 0.0,
        steps_per_t: int = 1,
    ) -> None:
        self.base_lr = float(base_lr)
        self.t_initial = int(t_initial)
        self.warmup_t = int(warmup_t)
        self.warmup_lr_init = float(warmup_lr_init)
        self.lr_min = float(lr_min)
        self.steps_per_t = int(steps_per_t)

    def __call__(self, step: Any) -> Any:
        """The rate at optimizer step ``step`` (float64)."""
        t = ops.cast(ops.floor_divide(ops.cast(step, "int64"), self.steps_per_t), "float64")
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
        }
