"""Training: the distributed custom loop, exact evaluation, and the ``model.fit`` path.

This package owns everything between a :class:`tfdp.DistributedInput` and
trained weights. Example:

    >>> from tfdp.train import Trainer, evaluate
    >>> Trainer.__name__, evaluate.__name__
    ('Trainer', 'evaluate')
"""

from tfdp.train.evaluate import Evaluator, PerExampleLoss, evaluate
from tfdp.train.loop import Trainer, TrainState

__all__ = ["Evaluator", "PerExampleLoss", "TrainState", "Trainer", "evaluate"]
