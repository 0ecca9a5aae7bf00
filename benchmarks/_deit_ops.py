"""Per-op CPU times of DeiT's input in tfdp (one thread), for bench_images' DeiT breakdown.

Run alone: ``python benchmarks/_deit_ops.py [--folder F]``; prints ms per image per op.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf

SIZE = 224
MEAN_RGB = (0.485 * 255, 0.456 * 255, 0.406 * 255)
STDDEV_RGB = (0.229 * 255, 0.224 * 255, 0.225 * 255)


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def timed(op, count: int, reps: int = 3) -> float:
    def loop() -> tf.Tensor:
        def body(i, acc):
            return i + 1, acc + tf.cast(op(i), tf.float32)

        return tf.while_loop(lambda i, _: i < count, body, (0, 0.0), parallel_iterations=1)[1]

    fn = tf.function(loop, autograph=False)
    fn()
    best = float("inf")
    for _ in range(reps):
        c0 = cpu()
        fn()
        best = min(best, (cpu() - c0) / count * 1e3)
    return best


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--folder", type=Path, default=Path("/tmp/tfdp_bench_images/photos-600-q90-seed0")
    )
    ap.add_argument("--count", type=int, default=48)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    from tfdp import augment
    from tfdp.augment import _pil_ops as pil

    files = sorted(args.folder.glob("*/*.JPEG"))[: args.count]
    datas = [f.read_bytes() for f in files]
    decoded = [tf.io.decode_jpeg(d, channels=3) for d in datas]
    rrc = augment.RandomResizedCrop(SIZE, interpolation="bicubic", antialias=True)
    n = len(files)
    seeds = tf.stack([tf.fill([n], tf.constant(7, tf.int64)), tf.range(n, dtype=tf.int64)], 1)
    shapes = tf.stack([tf.shape(d)[:2] for d in decoded])
    boxes = rrc.windows(shapes, rrc.draw(seeds))
    windows = [
        d[b[0] : b[0] + b[2], b[1] : b[1] + b[3]]
        for d, b in zip(decoded, boxes.numpy(), strict=True)
    ]
    datas_t = tf.constant(datas)
    wins = tf.ragged.stack(windows)
    resized = tf.stack([rrc.resize(w) for w in windows])  # float32 [n, 224, 224, 3]
    q = pil.quantize(resized)
    normed = augment.Normalize(MEAN_RGB, STDDEV_RGB).apply(q, tf.zeros([n, 0]))
    ra = augment.RandAugment.from_string("rand-m9-mstd0.5-inc1")
    ra_params = ra.draw(seeds)
    erase = augment.RandomErasing(0.25, mode="pixel")
    erase1 = augment.RandomErasing(1.0, mode="pixel")
    er_params = erase.draw(seeds)
    er1_params = erase1.draw(seeds)
    flip = augment.RandomFlip(p=1.0)
    norm = augment.Normalize(MEAN_RGB, STDDEV_RGB)
    ops = ra._ops
    level = tf.constant([9.0], tf.float64)
    f = tf.constant([False])
    t = tf.constant(True)

    def one_op(k):
        return lambda i: ops.layer(q[i][tf.newaxis], tf.constant(k), t, level, f, t)[0, 0, 0, 0]

    table = {
        "decode window (jpeg)": lambda i: tf.cast(
            tf.io.decode_and_crop_jpeg(datas_t[i], boxes[i], channels=3)[0, 0, 0], tf.float32
        ),
        "resize bicubic antialias": lambda i: rrc.resize(wins[i].to_tensor())[0, 0, 0],
        "resize bicubic antialias (tf.image.resize)": lambda i: tf.image.resize(
            wins[i].to_tensor(), [SIZE, SIZE], method="bicubic", antialias=True
        )[0, 0, 0],
        "resize bicubic plain": lambda i: tf.image.resize(
            wins[i].to_tensor(), [SIZE, SIZE], method="bicubic"
        )[0, 0, 0],
        "resize bilinear plain": lambda i: tf.image.resize(wins[i].to_tensor(), [SIZE, SIZE])[
            0, 0, 0
        ],
        "quantize": lambda i: pil.quantize(resized[i])[0, 0, 0],
        "flip": lambda i: flip.apply(q[i][tf.newaxis], tf.zeros([1, 2]))[0, 0, 0, 0],
        "normalize": lambda i: norm.apply(q[i][tf.newaxis], tf.zeros([1, 0]))[0, 0, 0, 0],
        "erasing p=0.25 (drawn)": lambda i: erase.apply(
            normed[i][tf.newaxis], er_params[i][tf.newaxis]
        )[0, 0, 0, 0],
        "erasing p=1": lambda i: erase1.apply(normed[i][tf.newaxis], er1_params[i][tf.newaxis])[
            0, 0, 0, 0
        ],
        "randaugment (drawn, 2 layers)": lambda i: ra.apply(
            q[i][tf.newaxis], ra_params[i][tf.newaxis]
        )[0, 0, 0, 0],
        "randaugment layer not applied": lambda i: ops.layer(
            q[i][tf.newaxis], tf.constant(0), tf.constant(False), level, f, t
        )[0, 0, 0, 0],
    }
    for k, name in enumerate(ra.spec.ops):
        table[f"RA op {name}"] = one_op(k)
    table["(empty)"] = lambda i: tf.cast(i, tf.float32)
    out = {}
    for name, op in table.items():
        if args.only and args.only not in name:
            continue
        out[name] = timed(op, n)
        print(f"{name:40s} {out[name]:7.3f} ms", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
