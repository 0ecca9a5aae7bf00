"""Training: the distributed custom loop, exact evaluation, and the ``model.fit`` path.

This package owns everything between a :class:`tfdp.DistributedInput` and
trained weights. Example:

    >>> from tfdp.train import Trainer, evaluate, fit
    >>> Trainer.__name__, evaluate.__name__, fit.__name__
    ('Trainer', 'evaluate', 'fit')
"""

from tfdp.train.evaluate import Evaluator, PerExampleLoss, evaluate
from tfdp.train.guard import NonFiniteError
from tfdp.train.keras_fit import fit
from tfdp.train.loop import Trainer, TrainState

__all__ = [
    "Evaluator",
    "NonFiniteError",
    "PerExampleLoss",
    "TrainState",
    "Trainer",
    "evaluate",
    "fit",
]
