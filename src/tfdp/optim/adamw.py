"""``torch.optim.AdamW``'s update in Keras: :class:`TorchAdamW` (DeiT's and timm's ``adamw``).

This module owns the decoupled variant of torch's Adam step
(:class:`tfdp.optim.TorchAdam`): the weight shrunk by ``1 - lr * weight_decay``
(computed in double precision, as torch's Python floats) before Adam's step
moves it, and no L2 term of the gradient.

Example:
    >>> import keras
    >>> w = keras.Variable([[2.0]])
    >>> _ = TorchAdamW(0.1, weight_decay=0.5).apply_gradients([(keras.ops.ones((1, 1)), w)])
    >>> round(float(w.numpy()[0, 0]), 5)  # 2 * (1 - 0.1 * 0.5), then Adam's first step: - 0.1
    1.8
"""

from __future__ import annotations

from typing import Any, ClassVar

import keras

from tfdp.optim.adam import TorchAdam


@keras.saving.register_keras_serializable(package="tfdp")
class TorchAdamW(TorchAdam):
    """``torch.optim.AdamW`` in Keras: decoupled weight decay, then torch's Adam step.

    Per step: ``p *= 1 - lr * weight_decay`` (weights not excluded from weight
    decay), then :class:`TorchAdam`'s update, with no L2 term. With
    ``weight_decay=0`` it is :class:`TorchAdam` exactly.

    Args:
        learning_rate: A rate or a ``keras.optimizers.schedules.LearningRateSchedule``.
        beta_1: torch's ``betas[0]``.
        beta_2: torch's ``betas[1]``.
        epsilon: torch's ``eps``, added to the bias-corrected root.
        amsgrad: torch's ``amsgrad``.
        weight_decay: torch's ``weight_decay`` (its default 0.01). Weights
            passed to ``exclude_from_weight_decay`` get none (timm's rule:
            :func:`tfdp.optim.decays`).
        **kwargs: Keras's optimizer arguments (``use_ema``, ``name``, ...).

    Raises:
        tfdp.errors.ConfigError: as :class:`TorchAdam`.

    Example:
        >>> w, b = keras.Variable([[1.0]]), keras.Variable([1.0])
        >>> opt = TorchAdamW(0.5, weight_decay=0.2); opt.exclude_from_weight_decay([b])
        >>> zeros = [keras.ops.zeros((1, 1)), keras.ops.zeros((1,))]
        >>> _ = opt.apply_gradients(zip(zeros, [w, b]))  # Adam's part is 0: decay only
        >>> float(w.numpy()[0, 0]), float(b.numpy()[0])
        (0.8999999761581421, 1.0)
    """

    decoupled: ClassVar[bool] = True

    def __init__(
        self,
        learning_rate: Any = 0.001,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-8,
        amsgrad: bool = False,
        weight_decay: float = 0.01,
        name: str = "torch_adamw",
        **kwargs: Any,
    ) -> None:
        super().__init__(
            learning_rate,
            beta_1=beta_1,
            beta_2=beta_2,
            epsilon=epsilon,
            amsgrad=amsgrad,
            weight_decay=weight_decay,
            name=name,
            **kwargs,
        )
