"""Seed 001: a multi-replica custom training loop over TFRecord files, with checkpoints that resume.

The scenario
    Training data lives in TFRecord files. Records are parsed and preprocessed
    *before* distribution, the dataset is distributed over the replicas, the
    model, optimizer and checkpoint manager are built in ``strategy.scope()``,
    the per-example loss is averaged over the *global* batch
    (``tf.nn.compute_average_loss(per_example, global_batch_size)``), the step
    runs under ``strategy.run`` and the per-replica losses are summed with
    ``strategy.reduce(SUM)``; every epoch prints its time and loss and a
    checkpoint is written every few steps.

What the seed got wrong
    * ``strategy.experimental_run_v2`` no longer exists (it is ``strategy.run``).
    * ``tf.keras.losses.Reduction.NONE`` is gone in Keras 3: a per-example loss
      is ``keras.losses.SparseCategoricalCrossentropy(reduction="none")``.
    * ``EPSILON`` and ``checkpoint_dir`` are never defined.
    * Saving is shown but resuming is not: a restarted job starts from scratch,
      and even a restored model would restart the epoch's data from the top.

How tfdp fixes it
    :func:`tfdp.sources.write_tfrecords` writes balanced shards plus a
    manifest (features, encodings, record counts);
    :class:`tfdp.sources.TFRecordSource` streams them -- the files, permuted
    every epoch by a key of ``(seed, epoch)``, are dealt to one lane per
    replica, and the sampler picks each replica's records from the lanes,
    every replica taking the same number of steps -- and
    :class:`tfdp.train.Trainer` is the seed's custom loop done right:
    ``strategy.run`` of a step whose per-example loss is averaged over the
    global batch, ``strategy.reduce(SUM)`` of the loss, a per-epoch line with
    time and loss, and a checkpoint every ``checkpoint_every`` steps that holds
    the model, the optimizer *and the data position* (epoch and step). Run the
    script twice with the same ``--out``: the second run prints
    ``resumed from ...`` and continues at the saved step, mid-epoch included.

Run:
    python examples/tfrecord_custom_loop.py --quick --max-steps 5  # stops early (a "crash")
    python examples/tfrecord_custom_loop.py --quick                # "resumed from ...", finishes
    python examples/tfrecord_custom_loop.py --fresh                # start over: 6 epochs
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

# The strategy must be configured before any other TensorFlow work: see main().
from tfdp.distribute import make_strategy

DEFAULT_OUT = os.path.join(tempfile.gettempdir(), "tfdp-examples", "tfrecord_custom_loop")


def main(argv: list[str] | None = None) -> int:
    """Write the digits to TFRecords (once), train from them with checkpoints, resume if asked."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 epoch (a smoke test)")
    parser.add_argument(
        "--out", default=DEFAULT_OUT, help=f"shards and run directory (default {DEFAULT_OUT})"
    )
    parser.add_argument("--fresh", action="store_true", help="delete --out first (no resume)")
    parser.add_argument("--replicas", type=int, default=2, help="logical CPU replicas")
    parser.add_argument("--epochs", type=int, default=None, help="default: 6 (--quick: 1)")
    parser.add_argument("--batch-size", type=int, default=32, help="per replica")
    parser.add_argument("--shards", type=int, default=8, help="TFRecord files to write")
    parser.add_argument("--checkpoint-every", type=int, default=10, help="optimizer steps")
    parser.add_argument(
        "--max-steps", type=int, default=None, help="stop (with a checkpoint) at this global step"
    )
    args = parser.parse_args(argv)
    epochs = args.epochs or (1 if args.quick else 6)

    # 1. The strategy first: logical CPUs under MirroredStrategy (on GPUs use "auto").
    strategy = make_strategy("cpu", cpu_replicas=args.replicas)

    import keras

    from tfdp import ArraySource, DistributedInput
    from tfdp import augment as aug
    from tfdp.recipe import load_digits, small_cnn
    from tfdp.sources import TFRecordSource, write_tfrecords
    from tfdp.train import Trainer

    if args.fresh and os.path.isdir(args.out):
        shutil.rmtree(args.out)
    data_dir = os.path.join(args.out, "tfrecords")
    run_dir = os.path.join(args.out, "run")
    (x_train, y_train), (x_test, y_test) = load_digits()

    # 2. The TFRecord shards: written once (atomically), reused by later runs. Images are
    # stored as PNG, labels as int64; the manifest records features and counts.
    manifest = os.path.join(data_dir, "digits.manifest.json")
    if os.path.exists(manifest):
        print(f"reusing the TFRecord shards in {data_dir}")
    else:
        files = write_tfrecords(
            (x_train, y_train), data_dir, num_shards=args.shards, prefix="digits"
        )
        print(f"wrote {len(files)} TFRecord shards of {len(y_train)} digits to {data_dir}")

    # 3. Stream them. Parsing and decoding happen per record inside each replica's pipeline
    # (the seed's "preprocess before distributing"); the seeded augmentation and the scaling
    # to [0, 1] (digits have levels 0..16) follow, still before the batch reaches a replica.
    source = TFRecordSource(manifest)
    print(source)
    train_input = DistributedInput(
        strategy,
        source,
        sampler="distributed",
        batch_size=args.batch_size,
        augment=aug.Compose([aug.RandomShift(1), aug.ToFloat(scale=1 / 16)]),
        seed=0,
    )
    print(
        f"{train_input.num_replicas} replicas x {train_input.batch_size} per replica = global "
        f"batch {train_input.global_batch_size}, {train_input.steps_per_epoch} steps per epoch"
    )
    # Exact evaluation needs random access: the held-out split stays in memory.
    eval_input = DistributedInput(
        strategy,
        ArraySource((x_test, y_test)),
        sampler="eval",
        batch_size=args.batch_size,
        augment=aug.ToFloat(scale=1 / 16),
    )

    # 4. The custom loop. The Trainer builds model and optimizer in strategy.scope() (from
    # factories), and its step is the seed's, in today's API:
    #   per_example = loss(labels, model(images, training=True))          # reduction="none"
    #   loss = tf.nn.compute_average_loss(per_example, global_batch_size)
    #   grads = tape.gradient(loss, model.trainable_variables)           # summed by all-reduce
    #   strategy.run(step, ...); strategy.reduce(ReduceOp.SUM, per_replica_loss, axis=None)
    # Checkpoints go to <out>/run/checkpoints every --checkpoint-every steps and at each epoch
    # end; fit() restores the latest one first (the seed's missing half).
    keras.utils.set_random_seed(0)
    trainer = Trainer(
        strategy,
        lambda: small_cnn((8, 8, 1), 10),
        lambda: keras.optimizers.Adam(2e-3),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none"),
        metrics=["sparse_categorical_accuracy"],
        run_dir=run_dir,
        checkpoint_every=args.checkpoint_every,
        progress=False,
    )
    history = trainer.fit(train_input, epochs, eval_input=eval_input, max_steps=args.max_steps)
    state = trainer.state
    if state.stopped_early:
        print(
            f"stopped in epoch {state.epoch + 1}, after its step {state.step} (global step "
            f"{state.global_step}), checkpoint saved: run the same command without --max-steps "
            "to resume"
        )
    else:
        if history.epoch:  # fit evaluated after every epoch it trained
            result = {k[4:]: v[-1] for k, v in history.history.items() if k.startswith("val_")}
        else:  # a rerun of a finished job: nothing left to train
            result = trainer.evaluate(eval_input)
        print(
            f"done: {state.epoch} epoch(s), global step {state.global_step}; held-out loss "
            f"{result['loss']:.4f}, accuracy {result['sparse_categorical_accuracy']:.4f} (exact)"
        )
        print(f"checkpoints in {os.path.join(run_dir, 'checkpoints')}; run again to resume")
    return 0


if __name__ == "__main__":
    sys.exit(main())
