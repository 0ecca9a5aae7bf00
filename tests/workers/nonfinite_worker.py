"""A MultiWorkerMirroredStrategy worker whose data holds one NaN, on worker 1's replica (helper).

Every worker computes the same plan: the example rank 1 takes first in its third step is
poisoned, so the third optimizer step is non-finite on worker 1's replica only. Prints
``RESULT {json}``: the error, the step it names, the expected step, the rank holding the NaN.
"""

import json
import sys
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from reference import epoch_batches
from tfdp.input import DistributedInput
from tfdp.sources import ArraySource
from tfdp.train import NonFiniteError, Trainer


def main(strategy: tf.distribute.Strategy | None = None) -> None:
    strategy = strategy or tf.distribute.MultiWorkerMirroredStrategy()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(48, 4)).astype("float32")
    y = (x[:, 0] > 0).astype("int64")
    clean = DistributedInput(strategy, ArraySource((x, y)), batch_size=3, seed=1)
    poisoned = int(epoch_batches(clean, 0)[2][1][0])  # rank 1, step 3, first example
    x[poisoned, 1] = np.nan
    inp = DistributedInput(strategy, ArraySource((x, y)), batch_size=3, seed=1)

    def model():
        keras.utils.set_random_seed(1)
        return keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])

    trainer = Trainer(
        strategy,
        model,
        lambda: keras.optimizers.SGD(0.1),
        "sparse_categorical_crossentropy_from_logits",
        steps_per_call=2,
        progress=False,
        verbose=0,
    )
    result = {"expected": 3, "rank_of_nan": 1}
    try:
        trainer.fit(inp, 1)
        result["error"] = None
    except NonFiniteError as err:
        result.update(error=str(err), global_step=err.global_step)
    result["weights"] = float(sum(float(np.abs(w.numpy()).sum()) for w in trainer.model.weights))
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
