"""Training: the distributed custom loop, exact evaluation, and the ``model.fit`` path.

This package owns everything between a :class:`tfdp.DistributedInput` and
trained weights, one concern per module:

- ``step``: the replica step (accumulation, clipping after the all-reduce,
  loss-scale agreement, the non-finite guard) and its compiled functions;
- ``loop``: :class:`Trainer`, the outer loop (epochs, checkpoints, the
  multi-worker stop agreement, resume, Keras callbacks, the History);
- ``logs``: console lines, the progress bar, metrics.jsonl, TensorBoard,
  sample-id records;
- ``evaluate``: the per-example loss and exact evaluation;
- ``guard``: the all-reduced non-finite check;
- ``keras_fit``: :func:`fit`, the same semantics under ``model.fit``.

Example:
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
