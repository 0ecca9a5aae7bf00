"""Benchmark an optimizer step of tfdp.optim.TorchAdamW against keras.optimizers.AdamW.

One process, no strategy (the default one), float32 variables shaped as a ViT's (timm's
``vit_small_patch16_224`` without ``--quick``: 22.1 M weights in 152 variables;
``vit_tiny_patch16_224`` with it: 5.7 M, also in 152), their gradients fixed random tensors. Both
optimizers as DeiT's recipe builds them: weight decay 0.05 except for the weights of one
dimension (timm's rule, ``tfdp.optim.decays``, through ``exclude_from_weight_decay``),
timm's cosine schedule (``tfdp.optim.TimmCosine``), epsilon 1e-8. Each optimizer is built
first, then its step (``optimizer.apply(grads)``) compiled once in a ``tf.function``.

Variants (what one compiled step does):

* ``torch_adamw``: ``tfdp.optim.TorchAdamW`` (torch's update: bias corrections and the step
  size in float64 per variable, ``eps`` added to the corrected root, the decay
  ``p * (1 - lr * wd)`` in the update's own assignment);
* ``keras_adamw``: ``keras.optimizers.AdamW`` (Keras's update; its decay a pass of its own
  over the decayed variables before the update);
* ``torch_adam`` (context): ``tfdp.optim.TorchAdam`` without weight decay (the cost of the
  Adam step alone).

Timing. The machine is shared, so the variants are interleaved finely: a round runs each
variant (order rotated every round) for a chunk of C steps (C = 8) and times it by wall
clock and by process CPU time. Before the rounds every step function is traced and run 4
times. Reported per variant: milliseconds per step, best and median chunk; CPU
milliseconds per step (median). The ratio is the median over rounds of the per-round
ratio of the two variants' chunk times (chunks measured within a second of each other).

Usage:
    .venv/bin/python benchmarks/bench_optim.py            # ViT-S/16's variables, 40 rounds
    .venv/bin/python benchmarks/bench_optim.py --quick    # ViT-Ti/16's, 8 rounds (< 1 min)

The headline figures come last, one ``name: value`` per line.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

#: timm's ViTs: (embedding dimension, depth), patch 16, 224 x 224 images, 1,000 classes.
VITS = {"vit_small_patch16_224": (384, 12), "vit_tiny_patch16_224": (192, 12)}


def vit_shapes(dim: int, depth: int, classes: int = 1000) -> list[tuple[int, ...]]:
    """The shapes of a timm ViT's trainable weights (patch 16, 224 x 224, MLP ratio 4)."""
    shapes: list[tuple[int, ...]] = [(16, 16, 3, dim), (dim,), (1, 1, dim), (1, 197, dim)]
    for _ in range(depth):
        shapes += [(dim,), (dim,), (dim, 3 * dim), (3 * dim,), (dim, dim), (dim,)]  # norm1, attn
        shapes += [(dim,), (dim,), (dim, 4 * dim), (4 * dim,), (4 * dim, dim), (dim,)]  # norm2, mlp
    return [*shapes, (dim,), (dim,), (dim, classes), (classes,)]  # final norm, head


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=None)
    args = ap.parse_args()
    model = "vit_tiny_patch16_224" if args.quick else "vit_small_patch16_224"
    rounds = args.rounds or (8 if args.quick else 40)
    chunk = 8
    load = os.getloadavg()[0]
    print(f"bench_optim: {model}'s variables, {rounds} rounds of {chunk} steps; load average "
          f"{load:.2f}", flush=True)  # fmt: skip

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import numpy as np
    import tensorflow as tf

    from tfdp.optim import TimmCosine, TorchAdam, TorchAdamW, decays

    shapes = vit_shapes(*VITS[model])
    rng = np.random.default_rng(0)
    weights = [rng.normal(0, 0.02, s).astype("float32") for s in shapes]
    grads = [tf.constant(rng.normal(0, 1e-3, s).astype("float32")) for s in shapes]
    print(f"{sum(w.size for w in weights) / 1e6:.1f} M weights in {len(shapes)} variables, "
          f"{sum(len(s) > 1 for s in shapes)} decayed", flush=True)  # fmt: skip

    def schedule() -> TimmCosine:
        return TimmCosine(5e-4, t_initial=10_000, warmup_t=100, warmup_lr_init=1e-6)

    makers = {
        "torch_adamw": lambda: TorchAdamW(schedule(), weight_decay=0.05),
        "keras_adamw": lambda: keras.optimizers.AdamW(schedule(), weight_decay=0.05, epsilon=1e-8),
        "torch_adam": lambda: TorchAdam(schedule()),
    }
    steps = {}
    for name, make in makers.items():
        variables = [keras.Variable(w) for w in weights]
        opt = make()
        opt.exclude_from_weight_decay([v for v in variables if not decays(v)])
        opt.build(variables)
        steps[name] = tf.function(lambda opt=opt: opt.apply(grads))
        for _ in range(4):  # trace, then warm up
            steps[name]()
        _ = variables[0].numpy()

    times: dict[str, list[float]] = {name: [] for name in steps}
    cpu: dict[str, list[float]] = {name: [] for name in steps}
    names = list(steps)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(chunk):
                steps[name]()
            t1, c1 = time.perf_counter(), time.process_time()
            times[name].append((t1 - t0) / chunk)
            cpu[name].append((c1 - c0) / chunk)

    print("\n| variant | step ms, best | step ms, median | CPU ms per step, median |")
    print("|---|---:|---:|---:|")
    for name in names:
        t, c = times[name], cpu[name]
        print(f"| {name} | {min(t) * 1e3:.1f} | {statistics.median(t) * 1e3:.1f} | "
              f"{statistics.median(c) * 1e3:.1f} |")  # fmt: skip
    ratio = statistics.median(
        a / b for a, b in zip(times["torch_adamw"], times["keras_adamw"], strict=True)
    )
    cpu_ratio = statistics.median(
        a / b for a, b in zip(cpu["torch_adamw"], cpu["keras_adamw"], strict=True)
    )
    print()
    print(f"torch_adamw_step_ms: {statistics.median(times['torch_adamw']) * 1e3:.1f}")
    print(f"keras_adamw_step_ms: {statistics.median(times['keras_adamw']) * 1e3:.1f}")
    print(f"torch_adamw_over_keras_adamw_step_time: {ratio:.2f}")
    print(f"torch_adamw_over_keras_adamw_cpu_time: {cpu_ratio:.2f}")
    print(f"load_average_start: {load:.2f}")
    print(f"load_average_end: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
