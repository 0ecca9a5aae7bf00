"""torch's optimizers and timm's schedule and decay rule, as Keras optimizers and schedules.

This package owns the update rules a PyTorch / timm run is ported with, so
that it trains the same, step for step: one optimizer per module, each a
``keras.optimizers.Optimizer`` (checkpointable, under any ``tf.distribute``
strategy, mixed precision, ``model.fit``, ``use_ema``) whose ``weight_decay``
is torch's (each class's own kind, applied in its update step), tested update
by update against ``torch.optim``:

* :mod:`.adam` -- :class:`TorchAdam` (``torch.optim.Adam``: ``eps`` added to
  the bias-corrected root, ``weight_decay`` an L2 term of the gradient);
* :mod:`.adamw` -- :class:`TorchAdamW` (``torch.optim.AdamW``: decoupled
  weight decay, then Adam's step; DeiT's and timm's ``adamw``);
* :mod:`.sgd` -- :class:`TorchSGD` (``torch.optim.SGD``: momentum of raw
  gradients, Nesterov or not, L2 weight decay);
* :mod:`.cosine` -- :class:`TimmCosine` (timm's ``CosineLRScheduler``);
* :mod:`.decay` -- :func:`decays` (timm's rule: no weight decay for weights
  of one dimension; pass the others to ``exclude_from_weight_decay``).

Keras's ``Adam`` / ``AdamW`` differ from torch's in where ``epsilon`` goes
(a run drifts apart wherever gradients are small); Keras's ``SGD`` keeps the
learning rate in its momentum.

Example:
    >>> import keras
    >>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    >>> opt = TorchAdamW(TimmCosine(5e-4, t_initial=100, warmup_t=5), weight_decay=0.05)
    >>> opt.exclude_from_weight_decay([v for v in model.trainable_variables if not decays(v)])
    >>> opt.build(model.trainable_variables)
    >>> len(opt.variables)  # step, then m and v for the kernel and the bias
    5
"""

from __future__ import annotations

from tfdp.optim.adam import TorchAdam
from tfdp.optim.adamw import TorchAdamW
from tfdp.optim.cosine import TimmCosine
from tfdp.optim.decay import decays
from tfdp.optim.sgd import TorchSGD

__all__ = ["TimmCosine", "TorchAdam", "TorchAdamW", "TorchSGD", "decays"]
