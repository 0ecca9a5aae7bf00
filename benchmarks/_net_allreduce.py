"""Worker script of bench_allreduce.py: time all-reduces (TensorFlow ring or torch gloo).

``tf``: ``tfdp.make_strategy("multi_worker")`` from TF_CONFIG (MultiWorkerMirroredStrategy,
ring over gRPC), then for every size and variant a ``tf.function`` that all-reduces a list of
``--tensors`` float32 tensors of that total size (a gradient list), timed call by call:

- ``default``: ``ReplicaContext.all_reduce`` with the strategy's options (tfdp's);
- ``packN``: ``CommunicationOptions(bytes_per_pack=N MB)`` for that call;
- ``pack0``: ``bytes_per_pack=0``, TensorFlow's own default (every tensor in one pack);
- ``fp16``: the tensors cast to float16 before the all-reduce and back after (the casts
  timed too; the bandwidth counts the float32 bytes, as a user sees it);
- ``fp16+packN``: both.

``gloo``: ``torch.distributed`` with the gloo backend (``RANK``, ``WORLD_SIZE``,
``MASTER_ADDR``, ``MASTER_PORT``; ``GLOO_SOCKET_IFNAME`` picks the interface), ``all_reduce``
of one float32 tensor per size (gloo's ring, as DDP's buckets use it).

Every rank prints ``AR_RESULT {json}`` per case: ``impl``, ``variant``, ``mb`` (float32
megabytes, 2**20), ``tensors``, ``times`` (seconds per call, after ``--warmup`` untimed ones).
"""

from __future__ import annotations

import argparse
import json
import os
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

    strategy = make_strategy("multi_worker", startup_timeout=120)
    rank = strategy.cluster_resolver.task_id
    for mb in args.sizes:
        parts = _parts(int(mb * 2**20), args.tensors)
        xs = [tf.fill([n], float(rank + 1)) for n in parts]
        for variant in args.variants:
            tokens = variant.split("+")
            fp16 = "fp16" in tokens
            options = None
            for token in tokens:
                if token.startswith("pack"):
                    pack = int(float(token[4:]) * 2**20)
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
            _emit({"impl": "tf", "variant": variant, "mb": mb, "tensors": args.tensors,
                   "times": times, "rank": rank})  # fmt: skip


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
    ap.add_argument("--variants", type=lambda s: s.split(","), default=["default"])
    ap.add_argument("--tensors", type=int, default=1, help="tensors the size is split into")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--iters", type=int, default=5)
    args = ap.parse_args()
    (run_tf if args.impl == "tf" else run_gloo)(args)


if __name__ == "__main__":
    main()
