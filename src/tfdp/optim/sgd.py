"""``torch.optim.SGD``'s update in Keras: :class:`TorchSGD`.

This module owns torch's SGD step: the momentum buffer of raw gradients, the
learning rate applied at the update (so a rate that changes takes effect at
once, as in torch), weight decay as an L2 term added to the gradient,
Nesterov or not. Keras's own SGD keeps ``lr * g`` in its buffer and decays
weights apart from the gradient, which differs from torch once the rate
changes, or with momentum and weight decay together.

Example:
    >>> import keras
    >>> w = keras.Variable([1.0]); opt = TorchSGD(0.5, momentum=0.9)
    >>> for _ in range(2):
    ...     _ = opt.apply_gradients([(keras.ops.ones((1,)), w)])
    >>> round(float(w.numpy()[0]), 6)  # 1 - 0.5 * 1, then - 0.5 * (0.9 * 1 + 1)
    -0.45
"""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

from tfdp._compat.keras import DecaysInUpdateStep, optimizer_slot, weight_decay_applies
from tfdp.optim._args import non_negative


@keras.saving.register_keras_serializable(package="tfdp")
class TorchSGD(DecaysInUpdateStep, keras.optimizers.SGD):
    """``torch.optim.SGD`` in Keras: what timm's ``sgd`` / ``nesterov`` / ``momentum`` run.

    Per step, with ``g`` the gradient, ``p`` the weight and ``b`` the momentum
    buffer (zero at first, so the first step's buffer is ``g`` as in torch):
    ``g += weight_decay * p`` (weights not excluded from weight decay),
    ``b = momentum * b + g``, ``d = g + momentum * b`` (Nesterov) or ``b``,
    ``p -= lr * d``.

    Args:
        learning_rate: A rate or a schedule.
        momentum: torch's ``momentum`` (dampening 0).
        nesterov: Nesterov momentum (timm's ``sgd`` and ``nesterov``).
        weight_decay: torch's ``weight_decay``: ``weight_decay * p`` added to
            the gradient (not Keras's decoupled decay). Weights passed to
            ``exclude_from_weight_decay`` get none (timm's rule:
            :func:`tfdp.optim.decays`).
        **kwargs: Keras's optimizer arguments (``use_ema``, ``name``, ...).

    Raises:
        tfdp.errors.ConfigError: a negative ``weight_decay``.

    Example:
        >>> w, b = keras.Variable([[1.0]]), keras.Variable([1.0])
        >>> opt = TorchSGD(0.5, momentum=0.9, weight_decay=0.1); opt.exclude_from_weight_decay([b])
        >>> for _ in range(2):
        ...     _ = opt.apply_gradients([(keras.ops.ones((1, 1)), w), (keras.ops.ones((1,)), b)])
        >>> round(float(w.numpy()[0, 0]), 6)  # torch: 1 - .5 * 1.1; .45 - .5 * (.9 * 1.1 + 1.045)
        -0.5675
        >>> round(float(b.numpy()[0]), 6)  # no decay: 1 - .5, then - .5 * 1.9
        -0.45
    """

    def __init__(
        self,
        learning_rate: Any = 0.01,
        momentum: float = 0.0,
        nesterov: bool = False,
        weight_decay: float = 0.0,
        name: str = "torch_sgd",
        **kwargs: Any,
    ) -> None:
        super().__init__(
            learning_rate,
            momentum=momentum,
            nesterov=nesterov,
            weight_decay=non_negative("weight_decay", weight_decay),
            name=name,
            **kwargs,
        )

    def update_step(self, gradient: Any, variable: Any, learning_rate: Any) -> None:
        """One torch SGD update of ``variable``."""
        lr = ops.cast(learning_rate, variable.dtype)
        g = ops.cast(gradient, variable.dtype)
        if self.weight_decay and weight_decay_applies(self, variable):
            wd = ops.convert_to_tensor(self.weight_decay, dtype=variable.dtype)  # not via float32
            g = ops.add(g, ops.multiply(variable, wd))
        if self.momentum != 0:
            b = optimizer_slot(self, self.momentums, variable)
            mu = ops.convert_to_tensor(self.momentum, dtype=variable.dtype)
            self.assign(b, ops.add(ops.multiply(b, mu), g))
            g = ops.add(g, ops.multiply(b, mu)) if self.nesterov else b
        self.assign_sub(variable, ops.multiply(g, lr))
