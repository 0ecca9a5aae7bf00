"""Training: the distributed custom loop, exact evaluation, and the ``model.fit`` path.

This package owns everything between a :class:`tfdp.DistributedInput` and
trained weights, one concern per module:

- ``step``: the replica step (accumulation, clipping after the all-reduce,
  loss-scale agreement, the non-finite guard) and its compiled functions;
- ``dtypes``: the type a model trains in, and the types refused;
- ``weighting``: ``loss_weighting`` (rows, or DDP's replicas);
- ``loop``: :class:`Trainer`, composed of parts it is handed (``parts``: their
  Protocols, and ``StepOutputs``: a call's results by name) or builds
  (``assemble``), ``fit`` and resume;
- ``epochs``: the epochs of a fit call (calls, their results, each epoch's
  record, saves, stops) and :class:`TrainState`;
- ``resume``: the run's checkpoints as the loop saves and restores them;
- ``stop``: the multi-worker stop agreement;
- ``logs``: console lines, the progress bar, metrics.jsonl, TensorBoard,
  sample-id records;
- ``evaluate``: the per-example loss and exact evaluation;
- ``guard``: the all-reduced non-finite check;
- ``peer_loss``: a lost peer's clear error, and the last completed step saved at the fault;
- ``compression``: gradients rounded to 16 bits before the all-reduce (opt-in);
- ``keras_fit``: :func:`fit`, the same semantics under ``model.fit``; ``fit_guard``:
  its non-finite guard.

Example:
    >>> import keras, numpy as np
    >>> from tfdp import ArraySource, DistributedInput
    >>> from tfdp.train import Trainer, evaluate
    >>> x, y = np.eye(3, dtype=np.float32)[np.arange(12) % 3], np.arange(12) % 3
    >>> train = DistributedInput(None, ArraySource((x, y)), batch_size=4)
    >>> held_out = DistributedInput(None, ArraySource((x, y)), sampler="eval", batch_size=5)
    >>> def model():
    ...     return keras.Sequential([keras.Input((3,)), keras.layers.Dense(3)])
    >>> trainer = Trainer(None, model, lambda: keras.optimizers.SGD(1.0),
    ...                   "sparse_categorical_crossentropy_from_logits", progress=False, verbose=0)
    >>> _ = trainer.fit(train, epochs=20)
    >>> evaluate(None, trainer.model, held_out, "sparse_categorical_crossentropy_from_logits",
    ...          [keras.metrics.SparseCategoricalAccuracy()])["sparse_categorical_accuracy"]
    1.0
"""

from tfdp.train.epochs import TrainState
from tfdp.train.evaluate import Evaluator, PerExampleLoss, evaluate
from tfdp.train.guard import NonFiniteError
from tfdp.train.keras_fit import fit
from tfdp.train.loop import Trainer
from tfdp.train.peer_loss import PeerLostError

__all__ = [
    "Evaluator",
    "NonFiniteError",
    "PeerLostError",
    "PerExampleLoss",
    "TrainState",
    "Trainer",
    "evaluate",
    "fit",
]
