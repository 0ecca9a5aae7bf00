"""Two MultiWorkerMirroredStrategy checks in one pair of worker processes (test helper).

progress_worker.py (the Trainer's default output and metrics), then permutation_worker.py
(a user permutation that differs between workers is refused) on the same strategy: one
TensorFlow start-up and one cluster for both. ``=== permutation`` separates their output.
"""

import permutation_worker
import progress_worker
import tensorflow as tf

if __name__ == "__main__":
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    progress_worker.main(strategy)
    print("=== permutation", flush=True)
    permutation_worker.main(strategy)
