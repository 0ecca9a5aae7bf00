"""Seed 004: synchronous data-parallel CNN classification with ``model.fit``, scaled correctly.

The scenario
    Data parallelism explained: every device holds a full replica of the
    model, computes gradients on its share of the batch, and the gradients
    are all-reduced every step (synchronous, MirroredStrategy) before the
    identical update. The seed builds a Keras CNN under ``strategy.scope()``,
    distributes MNIST, writes a ``strategy.run`` train step, and trains an
    image classifier with ``model.fit``.

What the seed got wrong
    * Its ``train_step`` reduces the loss with a plain ``tf.reduce_mean`` over
      the replica's batch. The all-reduce *sums* the replicas' gradients, so
      with W replicas the update is W times too large (measured below). The
      right per-replica loss is ``tf.nn.compute_average_loss(per_example,
      global_batch_size)``: the mean over the *global* batch.
    * The step does not even parse: the ``tf.reduce_mean(`` call is never closed.
    * MNIST is downloaded at run time (no network here).

How tfdp fixes it
    The bundled UCI digits (8x8, 1,797 images, :func:`tfdp.recipe.digits.load_digits`)
    stand in for MNIST: no download. :class:`tfdp.DistributedInput` feeds each
    replica its own shard (sampler indices -> batched gather -> seeded
    augmentation), :func:`tfdp.train.fit` runs ``model.fit`` on it -- each
    fit epoch is exactly one sampler epoch -- and validates *exactly*
    (``sampler="eval"``: the padding that evens out the replicas is weighted 0,
    so each of the 360 held-out digits counts once). In ``model.fit`` the usual
    mean-reduced Keras loss is right: under a strategy Keras >= 3.8 divides it
    by the replica count before the gradients are summed (in a custom loop use
    ``reduction="none"`` and ``compute_average_loss``, as
    :class:`tfdp.train.Trainer` does -- it refuses a mean-reduced loss).

Run:
    python examples/digits_cnn.py --quick      # 2 epochs, 2 logical CPU replicas
    python examples/digits_cnn.py              # 15 epochs (~95% held-out accuracy)
"""

from __future__ import annotations

import argparse
import sys

# The strategy must be configured before any other TensorFlow work: see main().
from tfdp.distribute import make_strategy, worker_info


def seed_cnn(seed: int):
    """The seed's CNN (conv 3x3 -> max-pool -> dense 128 -> softmax), sized for 8x8 digits."""
    import keras

    keras.utils.set_random_seed(seed)
    return keras.Sequential(
        [
            keras.Input((8, 8, 1)),
            keras.layers.Conv2D(32, (3, 3), activation="relu"),
            keras.layers.MaxPooling2D((2, 2)),
            keras.layers.Flatten(),
            keras.layers.Dense(128, activation="relu"),
            keras.layers.Dense(10, activation="softmax"),
        ]
    )


def gradient_scales(strategy, images, labels, seed: int) -> tuple[float, float]:
    """One step's all-reduced gradient norm relative to one device on the same global batch.

    Every replica gets its own ``len(images) / W`` rows. Returns ``(seed_ratio,
    fixed_ratio)``: the seed's plain mean over the replica's batch, and
    ``compute_average_loss`` over the global batch.
    """
    import keras
    import tensorflow as tf

    w = strategy.num_replicas_in_sync
    global_batch = len(images)
    per_replica = global_batch // w
    images, labels = tf.constant(images), tf.constant(labels)
    per_example_loss = keras.losses.SparseCategoricalCrossentropy(reduction="none")
    with strategy.scope():
        model = seed_cnn(seed)

    def replica_norm(fixed: bool):
        rid = tf.distribute.get_replica_context().replica_id_in_sync_group
        rows = slice(rid * per_replica, (rid + 1) * per_replica)
        with tf.GradientTape() as tape:
            losses = per_example_loss(labels[rows], model(images[rows], training=True))
            if fixed:
                loss = tf.nn.compute_average_loss(losses, global_batch_size=global_batch)
            else:  # the seed: tf.reduce_mean(...) over this replica's batch only
                loss = tf.reduce_mean(losses)
        grads = tape.gradient(loss, model.trainable_variables)
        ctx = tf.distribute.get_replica_context()
        return tf.linalg.global_norm(ctx.all_reduce(tf.distribute.ReduceOp.SUM, grads))

    @tf.function
    def run(fixed: bool):  # every replica holds the same all-reduced norm
        per_replica_norm = strategy.run(replica_norm, args=(fixed,))
        return strategy.reduce(tf.distribute.ReduceOp.MEAN, per_replica_norm, axis=None)

    with tf.GradientTape() as tape:  # the reference: one device, the whole global batch
        loss = tf.reduce_mean(per_example_loss(labels, model(images, training=True)))
    reference = float(tf.linalg.global_norm(tape.gradient(loss, model.trainable_variables)))
    return float(run(False)) / reference, float(run(True)) / reference


def main(argv: list[str] | None = None) -> int:
    """Train the seed's CNN on the digits with model.fit under a strategy; evaluate exactly."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 epochs (a smoke test)")
    parser.add_argument("--replicas", type=int, default=2, help="logical CPU replicas")
    parser.add_argument("--epochs", type=int, default=None, help="default: 15 (--quick: 2)")
    parser.add_argument("--batch-size", type=int, default=32, help="per replica")
    parser.add_argument("--lr", type=float, default=3e-3, help="Adam learning rate")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    epochs = args.epochs or (2 if args.quick else 15)

    # 1. The strategy first: several GPUs -> MirroredStrategy; on a CPU, cpu_replicas logical
    # devices under MirroredStrategy; under TF_CONFIG, MultiWorkerMirroredStrategy.
    strategy = make_strategy("auto", cpu_replicas=args.replicas)
    info = worker_info(strategy)
    if info.num_workers > 1:
        print("this example runs in one process (model.fit under multi-worker: see examples/")
        print("custom_loop_and_fit.py); start it without tfdp launch", file=sys.stderr)
        return 2

    import keras

    from tfdp import ArraySource, DistributedInput
    from tfdp import augment as aug
    from tfdp.recipe import load_digits
    from tfdp.train import evaluate, fit

    print(f"strategy: {type(strategy).__name__} with {info.num_replicas} replica(s)")

    # 2. The data: bundled, no download. Pixels are levels 0..16; scale them to [0, 1] in the
    # input pipeline, with a seeded 1-pixel random shift for training.
    (x_train, y_train), (x_test, y_test) = load_digits()
    train_input = DistributedInput(
        strategy,
        ArraySource((x_train, y_train)),
        batch_size=args.batch_size,
        augment=aug.Compose([aug.RandomShift(1), aug.ToFloat(scale=1 / 16)]),
        seed=args.seed,
    )
    eval_input = DistributedInput(
        strategy,
        ArraySource((x_test, y_test)),
        sampler="eval",
        batch_size=args.batch_size,
        augment=aug.ToFloat(scale=1 / 16),
    )
    print(
        f"{len(y_train)} training digits: {info.num_replicas} replicas x {args.batch_size} = "
        f"global batch {train_input.global_batch_size}, {train_input.steps_per_epoch} steps "
        f"per epoch; {len(y_test)} held-out digits"
    )

    # 3. The seed's loss scaling, measured on the first global batch.
    first = slice(0, train_input.global_batch_size)
    seed_ratio, fixed_ratio = gradient_scales(
        strategy, x_train[first].astype("float32") / 16, y_train[first], args.seed
    )
    print(
        f"gradient vs one device on the same global batch: the seed's reduce_mean "
        f"{seed_ratio:.2f}x, compute_average_loss(global batch) {fixed_ratio:.2f}x"
    )
    if abs(fixed_ratio - 1) > 1e-3 or abs(seed_ratio - info.num_replicas) > 1e-3 * seed_ratio:
        print("CHECK FAILED: unexpected gradient scale", file=sys.stderr)
        return 1

    # 4. model.fit: model, optimizer and metrics inside the scope. The mean-reduced loss is
    # what model.fit wants (Keras scales it by 1 / replicas under a strategy).
    with strategy.scope():
        model = seed_cnn(args.seed)
        model.compile(
            optimizer=keras.optimizers.Adam(args.lr),
            loss=keras.losses.SparseCategoricalCrossentropy(),
            metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
        )
    history = fit(model, train_input, epochs, eval_input=eval_input, verbose=2).history

    # 5. Exact evaluation, once more on its own (the per-epoch val_* above are the same).
    result = evaluate(
        strategy,
        model,
        eval_input,
        keras.losses.SparseCategoricalCrossentropy(reduction="none"),
        [keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
    )
    print(
        f"held-out (exact, each of the {len(y_test)} digits once): loss {result['loss']:.4f}, "
        f"accuracy {result['accuracy']:.4f}"
    )
    if abs(result["accuracy"] - history["val_accuracy"][-1]) > 1e-6:
        print("CHECK FAILED: evaluate() and fit's validation disagree", file=sys.stderr)
        return 1
    if result["accuracy"] < 0.3:  # chance is 0.1; 2 quick epochs reach well above this
        print("CHECK FAILED: the CNN did not learn", file=sys.stderr)
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
