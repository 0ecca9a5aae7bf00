"""A MultiWorkerMirroredStrategy worker training until a peer is lost (test helper).

Usage: peer_fault.py RUN_DIR CHECKPOINT_EVERY. Trains a small model on synthetic data
(64 steps an epoch) with :class:`tfdp.train.Trainer`, printing ``STEP <global step>`` after
every step; a :class:`tfdp.train.PeerLostError` is printed as one ``LOST <json>`` line and
the process exits 4, as ``tfdp train`` does.
"""

import json
import sys
import time

import keras
import numpy as np

from tfdp import ArraySource, DistributedInput
from tfdp.distribute import make_strategy
from tfdp.train import PeerLostError, Trainer


def main() -> int:
    run_dir, every = sys.argv[1], int(sys.argv[2])
    strategy = make_strategy("multi_worker")
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(2048, 16)).astype("float32"), np.arange(2048) % 4
    inp = DistributedInput(strategy, ArraySource((x, y)), batch_size=32)
    trainer = Trainer(
        strategy,
        lambda: keras.Sequential([keras.Input((16,)), keras.layers.Dense(4)]),
        lambda: keras.optimizers.Adam(1e-3),
        "sparse_categorical_crossentropy_from_logits",
        metrics=["sparse_categorical_accuracy"],
        run_dir=run_dir,
        checkpoint_every=every,
        progress=False,
        verbose=0,
    )

    def on_step(state):
        print(f"STEP {state.global_step}", flush=True)
        time.sleep(0.05)  # a slower step: the test cuts mid-epoch

    try:
        trainer.fit(inp, epochs=100, on_step=on_step)
    except PeerLostError as err:
        record = {
            "peers": [str(p) for p in err.peers],
            "global_step": err.global_step,
            "kept": err.kept,
            "kept_step": err.kept_step,
            "saved_now": err.saved_now,
            "message": str(err),
        }
        print("LOST " + json.dumps(record), flush=True)
        return 4
    return 0


if __name__ == "__main__":
    sys.exit(main())
