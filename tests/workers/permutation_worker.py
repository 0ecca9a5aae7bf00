"""A MultiWorkerMirroredStrategy worker whose user permutation disagrees from epoch 1 on.

Epoch 0's permutation is the same on every worker; from epoch 1 on it depends on the worker
(as one generator shared by every call would make it). Checks epoch 0 directly, then trains
two epochs with the Trainer, which must stop at the start of the second. Prints ``AGREED 0``
and ``REFUSED <message>``.
"""

import keras
import numpy as np
import tensorflow as tf

from tfdp import ArraySource, DistributedInput, DistributedSampler
from tfdp.distribute import worker_info
from tfdp.errors import ConfigError
from tfdp.train import Trainer


def main(strategy: tf.distribute.Strategy | None = None) -> None:
    strategy = strategy or tf.distribute.MultiWorkerMirroredStrategy()
    worker = worker_info(strategy).worker_index
    n = 32

    def permutation(epoch: int) -> np.ndarray:
        key = 0 if epoch == 0 else 100 * epoch + worker
        return np.random.default_rng(key).permutation(n)

    x = np.random.default_rng(1).normal(size=(n, 3)).astype("float32")
    sampler = DistributedSampler(n, strategy.num_replicas_in_sync, 0, permutation=permutation)
    inp = DistributedInput(strategy, ArraySource((x, np.arange(n) % 2)), sampler=sampler,
                           batch_size=8)  # fmt: skip
    inp.check_permutation_agreement(0)
    print("AGREED 0", flush=True)
    trainer = Trainer(
        strategy,
        lambda: keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)]),
        lambda: keras.optimizers.SGD(0.1),
        "sparse_categorical_crossentropy_from_logits",
        progress=False,
        verbose=0,
    )
    try:
        trainer.fit(inp, 2)
    except ConfigError as exc:
        print(f"REFUSED after {trainer.state.epoch} epoch(s): {exc}", flush=True)


if __name__ == "__main__":
    main()
