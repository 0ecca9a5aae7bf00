"""Seed 002: one model, two training paths -- a custom loop and ``model.fit`` -- that agree.

The scenario
    A hands-on guide to ``tf.distribute``: pick a strategy (MirroredStrategy
    on several devices, a fallback on one), make a synthetic data set, build
    a Keras model in ``strategy.scope()``, train it with a custom loop
    (``strategy.run`` + ``strategy.reduce`` + an accuracy metric) and again
    with ``model.compile`` / ``model.fit``; then scale out to several machines
    with MultiWorkerMirroredStrategy and TF_CONFIG.

What the seed got wrong
    * Its custom loop iterates the *undistributed* dataset, so ``strategy.run``
      hands every replica the whole global batch: the summed loss and the
      all-reduced gradients come out W times too large (shown below).
    * Nothing is said about resuming, about which worker writes checkpoints,
      or about a dead worker.

How tfdp fixes it
    One :class:`tfdp.DistributedInput` feeds both paths: replica ``r`` gets
    exactly ``sampler(rank=r)``'s indices, batch after batch, whatever the
    strategy. :class:`tfdp.train.Trainer` is the custom loop (per-example loss
    averaged over the *global* batch, ``strategy.run``, ``strategy.reduce``);
    :func:`tfdp.train.fit` drives ``model.fit`` on the same input, with
    each fit epoch exactly one sampler epoch. Both evaluate exactly
    (``sampler="eval"``: padding weighted 0). Trained from the same initial
    weights with SGD -- which is order-sensitive -- they end with the same
    weights, to float32 round-off: this script prints the difference.

Multi-worker (the seed's last section)
    ``make_strategy("auto")`` returns MultiWorkerMirroredStrategy whenever
    TF_CONFIG is set (validated first: a malformed TF_CONFIG is an error
    naming the field, not a hang). ``tfdp launch`` starts N local workers
    with the right TF_CONFIG each -- TensorFlow's missing ``torchrun``::

        tfdp launch --workers 2 -- python examples/custom_loop_and_fit.py --quick

    (or ``python -m tfdp.launch ...``). On CPU every worker is one replica, so
    2 workers give the same world size, the same per-replica streams and the
    same results as ``--replicas 2`` in one process. Keras 3's ``model.fit``
    does not run under MultiWorkerMirroredStrategy (tensorflow/tensorflow#72388),
    so there the script trains with the custom loop only. Sharding is tfdp's own
    (per-replica samplers; tf.data auto-sharding is off), so the seed's
    DATA/FILE auto-shard choice does not arise. Only the chief
    (``worker_info(strategy).is_chief``) prints -- and, given a ``run_dir``,
    writes logs; every worker joins checkpoint saves, which belong on shared
    storage. A worker that dies makes its peers' collectives fail after
    ``collective_timeout`` instead of hanging; ``tfdp launch --max-restarts``
    restarts the group, which resumes from the last checkpoint.

Run:
    python examples/custom_loop_and_fit.py --quick       # 2 logical CPU replicas, ~20 s
    python examples/custom_loop_and_fit.py               # 5 epochs on 8192 examples
    python -m tfdp.launch --workers 2 -- python examples/custom_loop_and_fit.py --quick
"""

from __future__ import annotations

import argparse
import sys

# The strategy must be configured before any other TensorFlow work: see main().
from tfdp.distribute import make_strategy, worker_info

FEATURES = 10


def synthetic(n: int, seed: int):
    """The seed's synthetic set: 10 normal features, label = sign of a noisy linear score.

    NumPy with a fixed seed, so every worker of a multi-worker job builds the same data.
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    coeffs = np.random.default_rng(1234).normal(size=(FEATURES, 1))  # one rule for all splits
    x = rng.normal(size=(n, FEATURES)).astype("float32")
    score = x @ coeffs + rng.normal(scale=0.1, size=(n, 1))
    return x, (score > 0).astype("float32")


def build_model(seed: int):
    """The seed's model; the same initial weights on every call (and every worker)."""
    import keras

    keras.utils.set_random_seed(seed)
    return keras.Sequential(
        [
            keras.Input((FEATURES,)),
            keras.layers.Dense(16, activation="relu"),
            keras.layers.Dense(8, activation="relu"),
            keras.layers.Dense(1, activation="sigmoid"),
        ]
    )


def gradient_scale_of_the_seed(strategy, x, y, per_replica: int, seed: int) -> tuple[float, float]:
    """Gradient norm of one step, relative to a single-device step on the same global batch.

    Returns ``(seed_ratio, tfdp_ratio)``: the seed's loop passes the undistributed global
    batch to ``strategy.run`` (every replica computes on all of it); tfdp gives replica ``r``
    its own slice. Both average over the global batch, and the all-reduce sums.
    """
    import keras
    import tensorflow as tf

    w = strategy.num_replicas_in_sync
    global_batch = per_replica * w
    x, y = tf.constant(x[:global_batch]), tf.constant(y[:global_batch])
    loss_fn = keras.losses.BinaryCrossentropy(reduction="none")
    with strategy.scope():
        model = build_model(seed)

    def grads_of(xb, yb):
        with tf.GradientTape() as tape:
            per_example = loss_fn(yb, model(xb, training=True))
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
        return tape.gradient(loss, model.trainable_variables)

    def norm_after_allreduce(grads):
        ctx = tf.distribute.get_replica_context()
        return tf.linalg.global_norm(ctx.all_reduce(tf.distribute.ReduceOp.SUM, grads))

    def seed_step():  # every replica sees the whole global batch
        return norm_after_allreduce(grads_of(x, y))

    def tfdp_step():  # replica r sees rows [r * B, (r + 1) * B) only
        rid = tf.distribute.get_replica_context().replica_id_in_sync_group
        rows = slice(rid * per_replica, (rid + 1) * per_replica)
        return norm_after_allreduce(grads_of(x[rows], y[rows]))

    @tf.function
    def run(step):  # every replica holds the same all-reduced norm
        return strategy.reduce(tf.distribute.ReduceOp.MEAN, strategy.run(step), axis=None)

    reference = float(tf.linalg.global_norm(grads_of(x, y)))  # one device, whole batch
    return float(run(seed_step)) / reference, float(run(tfdp_step)) / reference


def main(argv: list[str] | None = None) -> int:
    """Train the same model with the Trainer and with fit on the same input; compare."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 epochs on 1024 examples")
    parser.add_argument("--replicas", type=int, default=2, help="logical CPU replicas (1 process)")
    parser.add_argument("--epochs", type=int, default=None, help="default: 5 (--quick: 2)")
    parser.add_argument("--examples", type=int, default=None, help="default 8192 (--quick: 1024)")
    parser.add_argument("--batch-size", type=int, default=32, help="per replica")
    parser.add_argument("--lr", type=float, default=0.1, help="SGD learning rate")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    epochs = args.epochs or (2 if args.quick else 5)
    n = args.examples or (1024 if args.quick else 8192)

    # 1. The strategy first. "auto": MultiWorkerMirroredStrategy under TF_CONFIG (tfdp launch),
    # MirroredStrategy on several GPUs, else cpu_replicas logical CPUs under MirroredStrategy.
    strategy = make_strategy("auto", cpu_replicas=args.replicas)
    info = worker_info(strategy)

    def say(*parts: object) -> None:  # only the chief prints
        if info.is_chief:
            print(*parts, flush=True)

    import keras
    import numpy as np
    import tensorflow as tf

    from tfdp import ArraySource, DistributedInput
    from tfdp.train import Trainer, fit

    name = type(strategy).__name__  # MultiWorkerMirroredStrategy's class is CollectiveAllReduce...
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        name = "MultiWorkerMirroredStrategy"
    say(
        f"strategy: {name}, {info.num_replicas} replicas over "
        f"{info.num_workers} worker(s); this is worker {info.worker_index} (chief)"
    )

    # 2. Data: synthetic, as in the seed; one input object for both paths.
    x, y = synthetic(n, args.seed)
    x_test, y_test = synthetic(n // 4 + 3, args.seed + 1)  # not a multiple of any batch
    train_input = DistributedInput(
        strategy, ArraySource((x, y)), sampler="distributed", batch_size=args.batch_size
    )
    eval_input = DistributedInput(
        strategy, ArraySource((x_test, y_test)), sampler="eval", batch_size=args.batch_size
    )
    say(train_input)

    # The seed's defect, measured: pass the undistributed global batch to strategy.run and the
    # all-reduced gradient is W times the single-device one.
    seed_ratio, tfdp_ratio = gradient_scale_of_the_seed(strategy, x, y, args.batch_size, args.seed)
    say(
        f"gradient vs one device on the same global batch: the seed's loop {seed_ratio:.2f}x "
        f"(every replica got the whole batch), per-replica input {tfdp_ratio:.2f}x"
    )
    if abs(tfdp_ratio - 1) > 1e-3 or abs(seed_ratio - info.num_replicas) > 1e-3 * seed_ratio:
        say("CHECK FAILED: unexpected gradient scale")
        return 1

    # 3. Path A: the custom loop (tfdp's Trainer). Model and optimizer are built from the
    # factories inside strategy.scope(); the loss is per example (reduction="none").
    say("\n-- custom loop (tfdp.train.Trainer) --")
    trainer = Trainer(
        strategy,
        lambda: build_model(args.seed),
        lambda: keras.optimizers.SGD(args.lr),
        keras.losses.BinaryCrossentropy(reduction="none"),
        metrics=["binary_accuracy"],
        progress=False,
    )
    trainer.fit(train_input, epochs, eval_input=eval_input)
    loop_val = trainer.state.history[-1]
    # Same world size, same streams: 2 workers print the same value as --replicas 2.
    say(f"custom loop: final held-out loss {loop_val['val_loss']:.6f}")
    if info.num_workers > 1:
        # Keras 3 (3.15 here) cannot run model.fit under MultiWorkerMirroredStrategy: fit's
        # first build reduces the distributed batch (a tuple of PerReplica) with
        # strategy.reduce, and its train step reduces scalar logs with axis=0 ("Invalid
        # reduction dimension 0 for input with 0 dimensions", tensorflow/tensorflow#72388).
        # The custom loop is the multi-worker path; the comparison below needs one process.
        say("model.fit under MultiWorkerMirroredStrategy: skipped (Keras 3 cannot, see source)")
        say(f"OK: the custom loop trained on {info.num_workers} workers")
        return 0

    # 4. Path B: model.fit through tfdp.train.fit, on the same input. The model is compiled
    # inside the scope with Keras's usual mean-reduced loss: under a strategy Keras >= 3.8
    # divides it by the replica count itself, so the step is the Trainer's step.
    say("\n-- model.fit (tfdp.train.fit) --")
    with strategy.scope():
        model = build_model(args.seed)
        model.compile(
            keras.optimizers.SGD(args.lr),
            keras.losses.BinaryCrossentropy(),
            metrics=["binary_accuracy"],
        )
    history = fit(model, train_input, epochs, eval_input=eval_input, verbose=2).history

    # 5. Same data order, same initial weights, same steps: the same weights.
    diff = max(
        float(np.max(np.abs(a.numpy() - b.numpy())))
        for a, b in zip(trainer.model.weights, model.weights, strict=True)
    )
    val_diff = abs(history["val_loss"][-1] - loop_val["val_loss"])
    say(
        f"\nheld-out ({len(y_test)} examples, exact): custom loop loss {loop_val['val_loss']:.5f} "
        f"acc {loop_val['val_binary_accuracy']:.4f}; model.fit loss {history['val_loss'][-1]:.5f} "
        f"acc {history['val_binary_accuracy'][-1]:.4f}"
    )
    say(f"max |w_custom_loop - w_model_fit| = {diff:.2e}; |val_loss difference| = {val_diff:.2e}")
    if diff > 1e-4 or val_diff > 1e-4:
        say("CHECK FAILED: the two paths disagree")
        return 1
    say("OK: the custom loop and model.fit agree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
