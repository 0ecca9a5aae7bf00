"""``torch.optim.Adam``'s update in Keras: :class:`TorchAdam`.

This module owns torch's Adam step (``torch.optim.Adam`` and, through
:class:`tfdp.optim.TorchAdamW`, ``AdamW``): the moments as torch keeps them,
the bias corrections in double precision, ``eps`` added to the corrected
root, torch's ``weight_decay`` (an L2 term of the gradient; AdamW's decoupled
shrinking), AMSGrad.

Keras's own ``Adam`` folds the bias corrections into the step size and adds
``epsilon`` to the uncorrected root: in effect ``epsilon / sqrt(1 - beta_2**t)``,
about 30 times torch's at the first step, so the two differ wherever a
gradient is small beside ``eps``, and the runs drift apart.

Example:
    >>> import keras
    >>> w = keras.Variable([1.0, -2.0])
    >>> _ = TorchAdam(0.1).apply_gradients([(keras.ops.array([0.5, -1e-9]), w)])
    >>> [round(float(x), 5) for x in w.numpy()]  # 0.1 * g / (|g| + 1e-8): 0.1, 0.00909
    [0.9, -1.99091]
"""

from __future__ import annotations

from typing import Any, ClassVar

import keras
from keras import ops

from tfdp._compat.keras import DecaysInUpdateStep, optimizer_slot, weight_decay_applies
from tfdp.errors import ConfigError
from tfdp.optim._args import non_negative, unit


@keras.saving.register_keras_serializable(package="tfdp")
class TorchAdam(DecaysInUpdateStep, keras.optimizers.Optimizer):
    """``torch.optim.Adam`` in Keras: timm's ``adam``, and the step of ``TorchAdamW``.

    Per step ``t`` (from 1), with ``g`` the gradient, ``p`` the weight and the
    moments ``m``, ``v`` (zero at first), as torch's single-tensor Adam:
    ``g += weight_decay * p`` (weights not excluded from weight decay),
    ``m += (1 - beta_1) * (g - m)``, ``v = beta_2 * v + (1 - beta_2) * g * g``,
    ``p -= (lr / (1 - beta_1**t)) * m / (sqrt(v) / sqrt(1 - beta_2**t) + epsilon)``;
    with ``amsgrad`` the largest ``v`` so far stands for ``v`` in the root. The
    bias corrections and the step size are computed in float64 (torch's
    Python floats), then cast to the weight's dtype. The state is Keras's
    Adam's: ``m`` and ``v`` per weight (and the running maximum with
    ``amsgrad``), and the step count.

    Args:
        learning_rate: A rate or a ``keras.optimizers.schedules.LearningRateSchedule``.
        beta_1: torch's ``betas[0]``.
        beta_2: torch's ``betas[1]``.
        epsilon: torch's ``eps``, added to the bias-corrected root.
        amsgrad: torch's ``amsgrad``.
        weight_decay: torch's ``weight_decay``: ``weight_decay * p`` added to
            the gradient (not Keras's decoupled decay: that is
            :class:`tfdp.optim.TorchAdamW`'s). Weights passed to
            ``exclude_from_weight_decay`` get none (timm's rule:
            :func:`tfdp.optim.decays`).
        **kwargs: Keras's optimizer arguments (``use_ema``, ``ema_momentum``,
            ``gradient_accumulation_steps``, ``name``, ...).

    Raises:
        tfdp.errors.ConfigError: a beta outside [0, 1), a negative ``epsilon``
            or ``weight_decay``.

    Example:
        >>> w = keras.Variable([[1.0]]); opt = TorchAdam(0.1, weight_decay=0.5)
        >>> _ = opt.apply_gradients([(keras.ops.zeros((1, 1)), w)])
        >>> round(float(w.numpy()[0, 0]), 6)  # the gradient is 0.5 * w: Adam's first step, lr
        0.9
    """

    #: Whether ``weight_decay`` shrinks the weights apart from the gradient (AdamW's).
    decoupled: ClassVar[bool] = False

    def __init__(
        self,
        learning_rate: Any = 0.001,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-8,
        amsgrad: bool = False,
        weight_decay: float = 0.0,
        name: str = "torch_adam",
        **kwargs: Any,
    ) -> None:
        weight_decay = non_negative("weight_decay", weight_decay)
        super().__init__(learning_rate, weight_decay=weight_decay, name=name, **kwargs)
        self.beta_1 = unit("beta_1", beta_1)
        self.beta_2 = unit("beta_2", beta_2)
        self.epsilon = non_negative("epsilon", epsilon)
        if not isinstance(amsgrad, bool):
            raise ConfigError(f"must be True or False, got {amsgrad!r}", argument="amsgrad")
        self.amsgrad = amsgrad

    def build(self, var_list: list[Any]) -> None:
        """Create the moments (and AMSGrad's maxima) of every variable, as Keras's Adam."""
        if self.built:
            return
        super().build(var_list)
        self.exp_avgs, self.exp_avg_sqs = self.add_optimizer_variables(
            var_list, ["momentum", "velocity"]
        )
        if self.amsgrad:
            self.max_exp_avg_sqs = self.add_optimizer_variables(var_list, "velocity_hat")

    def update_step(self, gradient: Any, variable: Any, learning_rate: Any) -> None:
        """One torch Adam (or AdamW) update of ``variable``."""
        dtype = variable.dtype

        def const(value: float) -> Any:  # a Python float straight to dtype, not via float32
            return ops.convert_to_tensor(value, dtype=dtype)

        lr = ops.cast(learning_rate, "float64")  # torch's rate is a Python float
        g = ops.cast(gradient, dtype)
        p: Any = variable
        if self.weight_decay and weight_decay_applies(self, variable):
            if self.decoupled:  # torch: param.mul_(1 - lr * weight_decay)
                p = ops.multiply(variable, ops.cast(1.0 - lr * self.weight_decay, dtype))
            else:  # torch: grad = grad.add(param, alpha=weight_decay)
                g = ops.add(g, ops.multiply(variable, const(self.weight_decay)))
        m = optimizer_slot(self, self.exp_avgs, variable)
        v = optimizer_slot(self, self.exp_avg_sqs, variable)
        # torch: exp_avg.lerp_(grad, 1 - beta1); exp_avg_sq.mul_(beta2).addcmul_(grad, grad,
        # value=1 - beta2) -- each product in torch's order, so that float64 runs agree to 1e-16
        self.assign(m, ops.add(m, ops.multiply(const(1 - self.beta_1), ops.subtract(g, m))))
        self.assign(
            v,
            ops.add(
                ops.multiply(v, const(self.beta_2)),
                ops.multiply(ops.multiply(g, const(1 - self.beta_2)), g),
            ),
        )
        if self.amsgrad:
            v_max = optimizer_slot(self, self.max_exp_avg_sqs, variable)
            self.assign(v_max, ops.maximum(v_max, v))
            v = v_max
        t = ops.cast(ops.add(self.iterations, 1), "float64")
        correction1 = 1.0 - ops.power(ops.convert_to_tensor(self.beta_1, "float64"), t)
        correction2 = 1.0 - ops.power(ops.convert_to_tensor(self.beta_2, "float64"), t)
        step_size = ops.cast(lr / correction1, dtype)
        root2 = ops.cast(ops.sqrt(correction2), dtype)
        # torch: denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps);
        # param.addcdiv_(exp_avg, denom, value=-step_size)
        denom = ops.add(ops.divide(ops.sqrt(v), root2), const(self.epsilon))
        self.assign(variable, ops.subtract(p, ops.divide(ops.multiply(m, step_size), denom)))

    def get_config(self) -> dict[str, Any]:
        """Keras's config (its ``weight_decay`` this class's), with the betas, eps and amsgrad."""
        return {
            **super().get_config(),
            "beta_1": self.beta_1,
            "beta_2": self.beta_2,
            "epsilon": self.epsilon,
            "amsgrad": self.amsgrad,
        }
