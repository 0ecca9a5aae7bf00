"""Five MultiWorkerMirroredStrategy checks in one pair of worker processes (test helper).

On one strategy, one after another: progress_worker.py (the Trainer's default output and
metrics), callback_stop_worker.py (worker 1's callback stops both at step 5),
nonfinite_worker.py (a NaN on worker 1's replica stops both at step 3), checkpoint_worker.py's
``save`` (only the chief writes: ``argv[1]`` the checkpoint directory, ``argv[2]`` the record
path with ``{task}``), then permutation_worker.py (a user permutation that differs between
workers is refused; last, as it ends in a refusal). One TensorFlow start-up and one cluster
for all five, not five; ``=== <name>`` lines separate their output.
"""

import sys

import callback_stop_worker
import checkpoint_worker
import nonfinite_worker
import permutation_worker
import progress_worker
import tensorflow as tf

SECTIONS = ("progress", "callback_stop", "nonfinite", "checkpoint", "permutation")

if __name__ == "__main__":
    directory, record = sys.argv[1], sys.argv[2]
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    print("=== progress", flush=True)
    progress_worker.main(strategy)
    print("=== callback_stop", flush=True)
    callback_stop_worker.main(strategy, stopper=1, at=5)
    print("=== nonfinite", flush=True)
    nonfinite_worker.main(strategy)
    print("=== checkpoint", flush=True)
    checkpoint_worker.main("save", directory, record, strategy)
    print("=== permutation", flush=True)
    permutation_worker.main(strategy)
