"""The EMA of ``--model-ema``: its weights swapped in to be evaluated or saved, then out again.

``--model-ema`` is Keras's own EMA (``use_ema`` on the optimizer, built by
:func:`tfdp.recipe.model.build_optimizer`): one average per trainable weight,
updated after every applied optimizer step, held in the optimizer's
variables and so saved and restored with every checkpoint (a resumed run's
EMA is the uninterrupted run's, bit for bit). It differs from timm's
``ModelEma`` (DeiT's ``--model-ema``) in two ways, documented here: the
average starts at the weights after the first step (timm's at the initial
weights: a difference that decays as ``decay ** step``), and it averages the
trainable weights only (timm's v1 also averages BatchNorm's running
statistics; ViT / DeiT have none). This module owns :func:`ema_weights` (a
context in which the model holds its EMA weights, restored exactly on exit)
and :class:`EmaEvaluator` (an :class:`tfdp.train.parts.EpochEvaluator` that
adds the EMA weights' metrics as ``ema_*``).

Example:
    >>> import keras
    >>> m = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1, use_bias=False)])
    >>> opt = keras.optimizers.SGD(1.0, use_ema=True, ema_momentum=0.5)
    >>> opt.build(m.trainable_variables)
    >>> for _ in range(2):
    ...     _ = opt.apply_gradients([(keras.ops.ones((1, 1)), m.trainable_variables[0])])
    >>> w = float(m.trainable_variables[0].numpy()[0, 0])
    >>> with ema_weights(m, opt):
    ...     ema = float(m.trainable_variables[0].numpy()[0, 0])
    >>> ema - w, float(m.trainable_variables[0].numpy()[0, 0]) == w  # (w1 + w2) / 2 - w2
    (0.5, True)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


def _inner(optimizer: Any) -> Any:
    """The optimizer that holds the EMA (inside a loss-scale wrapper, if any)."""
    return getattr(optimizer, "inner_optimizer", optimizer)


@contextlib.contextmanager
def ema_weights(model: Any, optimizer: Any) -> Iterator[None]:
    """Inside, ``model``'s trainable weights are the optimizer's EMA; exactly restored after.

    Called in the cross-replica context (between training calls): every
    replica's copy is swapped (Keras's ``finalize_variable_values``).
    """
    variables = model.trainable_variables
    saved = [v.numpy() for v in variables]
    _inner(optimizer).finalize_variable_values(variables)
    try:
        yield
    finally:
        for v, value in zip(variables, saved, strict=True):
            v.assign(value)


class EmaEvaluator:
    """Evaluates the model, then its EMA weights (their results as ``ema_<name>``).

    Args:
        evaluator: The model's evaluation (a :class:`tfdp.train.Evaluator`).
        model: The model it evaluates.
        optimizer: The optimizer holding the EMA (built with ``use_ema=True``).
    """

    def __init__(self, evaluator: Any, model: Any, optimizer: Any) -> None:
        self.evaluator = evaluator
        self.model = model
        self.optimizer = optimizer

    def evaluate(self, eval_input: Any) -> dict[str, float]:
        """The model's metrics, and the EMA weights' as ``ema_<name>``."""
        out = dict(self.evaluator.evaluate(eval_input))
        with ema_weights(self.model, self.optimizer):
            ema = self.evaluator.evaluate(eval_input)
        out.update({f"ema_{name}": value for name, value in ema.items()})
        return out
