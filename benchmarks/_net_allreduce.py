"""Worker script of bench_allreduce.py: time all-reduces (TensorFlow ring or torch gloo).

``tf``: ``tfdp.make_strategy("multi_worker")`` from TF_CONFIG (MultiWorkerMirroredStrategy,
ring over gRPC), then for every size and variant (``TENSORS:VARIANT``) a ``tf.function`` that
all-reduces a list of that many float32 tensors of that total size (a gradient list), timed
call by call:

- ``default``: ``ReplicaContext.all_reduce`` with the strategy's options (tfdp's);
- ``packN``: ``CommunicationOptions(bytes_per_pack=N MB)`` for that call;
- ``pack0``: every tensor in one pack, as TensorFlow's own default (``bytes_per_pack=0``);
- ``fp16``: the tensors cast to float16 before the all-reduce and back after (the casts
  timed too; the bandwidth counts the float32 bytes, as a user sees it);
- ``fp16+packN``: both.

Then, with ``--step-variants``, a training step's time: ``tfdp.train.Trainer`` on an MLP of
``--step-mb`` megabytes of float32 weights (``Dense`` 512 -> H -> H -> 10), 32 examples per
replica, one step per call, timed over ``--step-steps`` steps after a warm-up; ``local``: the
same model under ``OneDeviceStrategy`` in the same process (no all-reduce, the compute alone),
``default``: the Trainer under the multi-worker strategy, ``fp16`` / ``bf16``:
``Trainer(gradient_compression=...)``. Printed as ``AR_STEP {json}`` (``ms_per_step``).

``gloo``: ``torch.distributed`` with the gloo backend (``RANK``, ``WORLD_SIZE``,
``MASTER_ADDR``, ``MASTER_PORT``; ``GLOO_SOCKET_IFNAME`` picks the interface), ``all_reduce``
of one float32 tensor per size (gloo's ring, as DDP's buckets use it).

Every rank prints ``AR_RESULT {json}`` per case: ``impl``, ``variant``, ``mb`` (float32
megabytes, 2**20), ``tensors``, ``times`` (seconds per call, after ``--warmup`` untimed ones).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time


def _parts(total_bytes: int, tensors: int) -> list[int]:
    """Element counts of ``tensors`` float32 tensors of ``total_bytes`` together."""
    n = total_bytes // 4
    base = n // tensors
    return [base + (1 if i < n - base * tensors else 0) for i in range(tensors)]


def _emit(record: dict) -> None:
    print("AR_RESULT " + json.dumps(record), flush=True)


def run_tf(args: argparse.Namespace) -> None:
    import tensorflow as tf

    from tfdp.distribute import make_strategy

    strategy = make_strategy("multi_worker", startup_timeout=120,
                             bytes_per_pack=args.bytes_per_pack)  # fmt: skip
    rank = strategy.cluster_resolver.task_id
    for mb in args.sizes:
        for case in args.variants:
            tensors, _, variant = case.rpartition(":")
            tensors = int(tensors or args.tensors)
            parts = _parts(int(mb * 2**20), tensors)
            xs = [tf.fill([n], float(rank + 1)) for n in parts]
            tokens = variant.split("+")
            fp16 = "fp16" in tokens
            options = None
            for token in tokens:
                if token.startswith("pack"):
                    # A per-call 0 would not override the strategy's packing (TensorFlow's
                    # Options.merge skips zeros): one pack of everything is a pack this large.
                    pack = int(float(token[4:]) * 2**20) or 2**62
                    options = tf.distribute.experimental.CommunicationOptions(bytes_per_pack=pack)

            @tf.function
            def reduce(xs, fp16=fp16, options=options):
                def replica(xs):
                    ctx = tf.distribute.get_replica_context()
                    values = [tf.cast(x, tf.float16) if fp16 else tf.identity(x) for x in xs]
                    out = ctx.all_reduce(tf.distribute.ReduceOp.SUM, values, options=options)
                    out = [tf.cast(y, tf.float32) for y in out]
                    return tf.add_n([y[0] for y in out])  # 3.0 each: both ranks summed

                return strategy.run(replica, args=(xs,))

            times = []
            for i in range(args.warmup + args.iters):
                t0 = time.perf_counter()
                value = float(reduce(xs))
                if i >= args.warmup:
                    times.append(time.perf_counter() - t0)
            assert value == 3.0 * len(parts), value  # the sum really happened
            _emit({"impl": "tf", "variant": variant, "mb": mb, "tensors": tensors,
                   "times": times, "rank": rank})  # fmt: skip
    if args.step_variants:
        run_steps(args, strategy)


def _hidden(mb: float) -> int:
    """H such that 512*H + H*H + 10*H float32 weights come closest to ``mb`` megabytes."""
    n = mb * 2**20 / 4
    return int((-(522) + (522**2 + 4 * n) ** 0.5) / 2)


def run_steps(args: argparse.Namespace, strategy: object) -> None:
    import keras
    import numpy as np
    import tensorflow as tf

    from tfdp import ArraySource, DistributedInput
    from tfdp.train import Trainer, TrainState

    hidden = _hidden(args.step_mb)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8192, 512), dtype=np.float32)
    y = rng.integers(0, 10, size=8192)

    def model() -> keras.Model:
        keras.utils.set_random_seed(0)
        return keras.Sequential([keras.Input((512,)),
                                 keras.layers.Dense(hidden, activation="relu"),
                                 keras.layers.Dense(hidden, activation="relu"),
                                 keras.layers.Dense(10)])  # fmt: skip

    for variant in args.step_variants:
        where = tf.distribute.OneDeviceStrategy("/cpu:0") if variant == "local" else strategy
        trainer = Trainer(where, model, lambda: keras.optimizers.SGD(0.01),
                          "sparse_categorical_crossentropy_from_logits", progress=False,
                          verbose=0, gradient_compression=variant if variant in (
                              "fp16", "bf16") else None)  # fmt: skip
        inp = DistributedInput(where, ArraySource((x, y)), batch_size=32, seed=0)
        trainer.fit(inp, epochs=1, max_steps=args.warmup_steps, resume=False)
        marks: list[float] = []
        trainer.state = TrainState()
        trainer.fit(inp, epochs=1, max_steps=args.step_steps, resume=False,
                    on_step=lambda _s, marks=marks: marks.append(time.perf_counter()))  # fmt: skip
        gaps = sorted(b - a for a, b in itertools.pairwise(marks))
        params = sum(int(np.prod(v.shape)) for v in trainer.model.trainable_variables)
        print("AR_STEP " + json.dumps({"variant": variant, "mb": params * 4 / 2**20,
              "ms_per_step": 1e3 * gaps[len(gaps) // 2], "best_ms": 1e3 * gaps[0],
              "rank": strategy.cluster_resolver.task_id}), flush=True)  # fmt: skip


def run_gloo(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=int(os.environ["RANK"]),
                            world_size=int(os.environ["WORLD_SIZE"]))  # fmt: skip
    rank = dist.get_rank()
    for mb in args.sizes:
        x = torch.full((int(mb * 2**20) // 4,), float(rank + 1))
        times = []
        for i in range(args.warmup + args.iters):
            y = x.clone()
            t0 = time.perf_counter()
            dist.all_reduce(y)
            if i >= args.warmup:
                times.append(time.perf_counter() - t0)
        assert float(y[0]) == 3.0
        _emit({"impl": "gloo", "variant": "gloo", "mb": mb, "tensors": 1, "times": times,
               "rank": rank})  # fmt: skip
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("impl", choices=["tf", "gloo"])
    ap.add_argument("--sizes", type=lambda s: [float(v) for v in s.split(",")], required=True,
                    help="megabytes (2**20) of float32, comma-separated")  # fmt: skip
    ap.add_argument(
        "--variants",
        type=lambda s: s.split(","),
        default=["default"],
        help="[TENSORS:]VARIANT,...: default, packN (MB), pack0, fp16, fp16+packN",
    )
    ap.add_argument("--bytes-per-pack", type=int, default=None,
                    help="make_strategy(bytes_per_pack=...) (default: tfdp's)")  # fmt: skip
    ap.add_argument("--tensors", type=int, default=1, help="tensors the size is split into")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--step-variants", type=lambda s: s.split(",") if s else [], default=[])
    ap.add_argument("--step-mb", type=float, default=16.0, help="the MLP's weights, megabytes")
    ap.add_argument("--warmup-steps", type=int, default=3)
    ap.add_argument("--step-steps", type=int, default=10)
    args = ap.parse_args()
    (run_tf if args.impl == "tf" else run_gloo)(args)
    sys.stdout.flush()
    # Skip TensorFlow's interpreter teardown (seconds): every collective has completed.
    os._exit(0)


if __name__ == "__main__":
    main()
