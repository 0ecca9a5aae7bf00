"""Benchmark tfdp's Repeated-Augmentation input against plain tf.data and seed 000's skip/take.

Three pipelines over the same random CIFAR-sized data (uint8 images
``[N, 32, 32, 3]``, int64 labels), measured in one run:

* ``tfdp_ra`` (a): ``DistributedInput(tf.distribute.get_strategy(),
  ArraySource((x, y)), sampler="repeat_aug", sampler_options={"selected_round": 0},
  batch_size=256, augment=Compose([RandomCrop(32, padding=4), RandomFlip()]))``,
  iterated through ``inp.worker_dataset(None, 0, num_epochs)``: index-driven,
  batched gather, batched per-sample seeded augmentation.
* ``plain_tfdata`` (b), the common user baseline, no sampler:
  ``from_tensor_slices((x, y)).shuffle(10000).map(pad 4 + tf.image.random_crop +
  tf.image.random_flip_left_right, num_parallel_calls=AUTOTUNE).batch(256)
  .prefetch(AUTOTUNE)``.
* ``seed000`` (c): an index dataset (the RA sampler's indices) mapped with
  ``lambda i: base.skip(i).take(1).get_single_element()`` over a
  ``from_tensor_slices`` base dataset: O(N) per sample.

Every batch is pulled eagerly from a Python iterator (the elements are
materialised tensors) and touched (``.numpy()`` plus one element read). The
first batches of each iterator are a warm-up and are not timed; the time to
the first batch (iterator creation + first element) is reported on its own.
Besides wall-clock samples/s, each window records the process CPU time (all
threads) per sample, which other processes on a shared machine disturb much
less; it is printed as a diagnostic, the targets use wall clock.

Rounds: the pipelines of every N are built first; each round then times (a)
and (b) at every N, and the table shows the median over rounds [min-max], so a
burst of load from elsewhere hits all sizes alike. Full mode times whole
epochs: at small N several epochs back to back so that every window is at
least ``MIN_FULL_SAMPLES`` samples (``worker_dataset(None, 0, k)`` for tfdp,
``.shuffle(10000).repeat(k)`` for plain tf.data); plain windows are capped at
``PLAIN_FULL_CAP`` samples (one plain epoch at N = 1M takes about a minute).
``--quick`` times a fixed number of batches from endless datasets, at fewer
sizes, and skips the breakdown.

The full run ends with a breakdown at N = 50,000 (what limits (a): no
augmentation, crop or flip alone, tf.data knobs, batch size; op-level timings
of the gather and of each augmentation stage), including
:class:`FusedCropFlipPrototype`, a faster bit-identical crop+flip that is not
part of tfdp.

``--speed-tricks`` measures only the ``lightly_optimized_map`` speed trick
(``tfdp._compat.fast``): (a) at N = 10k and 50k with every trick on, and with
``TFDP_SPEED_TRICKS`` naming every other trick (set while that input is built and read), in
alternated rounds, each window whole epochs (every epoch's dataset is new: its map functions
instantiated anew); the per-round ratios on / off of samples/s, CPU per sample and the first
batch.

Usage:
    python benchmarks/bench_input.py            # N = 10k, 50k, 200k, 1M + breakdown (~5-8 min)
    python benchmarks/bench_input.py --quick    # N = 10k, 50k, 200k (under a minute)
    python benchmarks/bench_input.py --speed-tricks [--rounds 7]   # lightly_optimized_map

The headline figures come last, one ``name: value`` per line.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gc
import math
import os
import platform
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

import tfdp
from tfdp.augment import Compose, RandomCrop, RandomFlip
from tfdp.input import DistributedInput
from tfdp.samplers import RepeatAugSampler
from tfdp.sources import ArraySource

BATCH = 256
SHUFFLE_BUFFER = 10_000
IMAGE_SHAPE = (32, 32, 3)
PAD = 4
WARMUP_BATCHES = 5
FULL_SIZES = (10_000, 50_000, 200_000, 1_000_000)
QUICK_SIZES = (10_000, 50_000, 200_000)
QUICK_BATCHES = 60
QUICK_ROUNDS = 2
FULL_ROUNDS = 3
MIN_FULL_SAMPLES = 200_000
PLAIN_FULL_CAP = 400_000  # full mode: plain (b) windows beyond this many samples are capped
SEED000_SIZES_FULL = (1_000, 4_000, 16_000)
SEED000_SIZES_QUICK = (1_000, 4_000)
SEED000_SAMPLES = 300
SEED000_SAMPLES_QUICK = 100
SEED000_WARMUP = 10
BREAKDOWN_N = 50_000
BREAKDOWN_BATCHES = 120
BREAKDOWN_ROUNDS = 3
RATIO_N = 50_000
RATIO_TARGET = 2.0
FLATNESS_TARGET = 1.2  # max/min of tfdp's samples/s over N: "flat within 20%"
BLOCK = 50_000  # random images generated once and tiled (the content does not matter)


# --------------------------------------------------------------------------- data
def make_data(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Random uint8 images [n, 32, 32, 3] and int64 labels; one random block, tiled."""
    rng = np.random.default_rng(seed)
    block = rng.integers(0, 256, (min(n, BLOCK), *IMAGE_SHAPE), dtype=np.uint8)
    x = np.empty((n, *IMAGE_SHAPE), np.uint8)
    for start in range(0, n, BLOCK):
        stop = min(n, start + BLOCK)
        x[start:stop] = block[: stop - start]
    y = rng.integers(0, 10, n).astype(np.int64)
    return x, y


# --------------------------------------------------------------------------- pipelines
def tfdp_augment() -> Compose:
    return Compose([RandomCrop(IMAGE_SHAPE[0], padding=PAD), RandomFlip()])


_DEFAULT_AUG = object()


def tfdp_input(
    source: ArraySource,
    augment: object = _DEFAULT_AUG,
    batch_size: int = BATCH,
    num_parallel_calls: int = tf.data.AUTOTUNE,
) -> DistributedInput:
    """(a): the RA input of the issue (crop+flip unless ``augment`` is given)."""
    return DistributedInput(
        tf.distribute.get_strategy(),
        source,
        sampler="repeat_aug",
        sampler_options={"selected_round": 0},
        batch_size=batch_size,
        augment=tfdp_augment() if augment is _DEFAULT_AUG else augment,  # type: ignore[arg-type]
        num_parallel_calls=num_parallel_calls,
    )


def plain_augment(image: tf.Tensor, label: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Per-example random crop with 4-pixel zero padding + random horizontal flip."""
    image = tf.pad(image, [[PAD, PAD], [PAD, PAD], [0, 0]])
    image = tf.image.random_crop(image, IMAGE_SHAPE)
    image = tf.image.random_flip_left_right(image)
    return image, label


def plain_dataset(
    x: np.ndarray, y: np.ndarray, epochs: int | None, augment: bool = True
) -> tf.data.Dataset:
    """(b): from_tensor_slices -> shuffle -> map(aug, AUTOTUNE) -> batch -> prefetch.

    ``epochs`` other than 1 inserts ``.repeat(epochs)`` after the shuffle
    (``None``: endless), the usual place for it.
    """
    ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(SHUFFLE_BUFFER)
    if epochs != 1:
        ds = ds.repeat(epochs)
    if augment:
        ds = ds.map(plain_augment, num_parallel_calls=tf.data.AUTOTUNE)
    return ds.batch(BATCH).prefetch(tf.data.AUTOTUNE)


def plain_batched_tfdp_aug(x: np.ndarray, y: np.ndarray) -> tf.data.Dataset:
    """Plain shuffle pipeline, but batch first and apply tfdp's batched augmentation."""
    aug = tfdp_augment()
    ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(SHUFFLE_BUFFER).repeat()
    ds = ds.batch(BATCH, drop_remainder=True).enumerate()

    def apply(step: tf.Tensor, batch: tuple[tf.Tensor, tf.Tensor]) -> tuple[tf.Tensor, tf.Tensor]:
        pos = step * BATCH + tf.range(BATCH, dtype=tf.int64)
        seeds = tf.stack([tf.zeros_like(pos), pos], axis=1)
        return aug(batch, seeds)

    return ds.map(apply, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


def seed000_dataset(x: np.ndarray, y: np.ndarray) -> tf.data.Dataset:
    """(c): the RA sampler's indices, each mapped to ``base.skip(i).take(1)`` -- O(N) each."""
    base = tf.data.Dataset.from_tensor_slices((x, y))
    sampler = RepeatAugSampler(len(x), 1, 0, selected_round=0)
    sampler.set_epoch(0)
    idx = tf.data.Dataset.from_tensor_slices(sampler.indices().astype(np.int64))
    return idx.map(lambda i: base.skip(i).take(1).get_single_element())


# --------------------------------------------------------------------------- measuring
@dataclass
class Timing:
    samples: int
    seconds: float  # wall clock
    first_batch_s: float
    cpu_s: float = math.nan  # process CPU time (all threads) over the same window

    @property
    def cpu_us_per_sample(self) -> float:
        return self.cpu_s / self.samples * 1e6

    @property
    def rate(self) -> float:
        return self.samples / self.seconds


def _touch(element: object, batched: bool = True) -> int:
    """Materialise the images of an element (a tuple whose first entry is the images)."""
    images = element[0] if isinstance(element, tuple) else element
    arr = images.numpy()  # type: ignore[union-attr]
    _ = int(arr.reshape(-1)[-1])
    return int(arr.shape[0]) if batched else 1


def time_iteration(
    ds: Iterable,
    max_elements: int | None,
    warmup: int = WARMUP_BATCHES,
    check: Callable[[object], None] | None = None,
    batched: bool = True,
) -> Timing:
    """Time ``max_elements`` elements (``None``: until exhausted) after ``warmup`` of them."""
    t0 = time.perf_counter()
    it = iter(ds)
    first = next(it)
    first_batch_s = time.perf_counter() - t0
    if check is not None:
        check(first)
    _touch(first, batched)
    for _ in range(warmup - 1):
        _touch(next(it), batched)
    samples = 0
    c0 = time.process_time()
    t0 = time.perf_counter()
    for count, element in enumerate(it, 1):
        samples += _touch(element, batched)
        if max_elements is not None and count >= max_elements:
            break
    seconds = time.perf_counter() - t0
    cpu_s = time.process_time() - c0
    if samples == 0:
        raise RuntimeError("nothing left to time after the warm-up")
    return Timing(samples, seconds, first_batch_s, cpu_s)


def check_batch(expected_batch: int) -> Callable[[object], None]:
    def check(element: object) -> None:
        images, labels = element[0], element[1]  # type: ignore[index]
        if tuple(images.shape) != (expected_batch, *IMAGE_SHAPE) or images.dtype != tf.uint8:
            raise SystemExit(f"unexpected image batch {images.shape} {images.dtype}")
        if tuple(labels.shape) != (expected_batch,):
            raise SystemExit(f"unexpected label batch {labels.shape}")

    return check


def epochs_for(n: int) -> int:
    return max(1, math.ceil(MIN_FULL_SAMPLES / n))


@dataclass
class SizeResult:
    n: int
    epochs: int | None  # epochs per tfdp window (None: endless dataset, fixed window)
    plain_epochs: int | None
    plain_window: int | None  # batches per plain window (None: whole epochs)
    tfdp_source_s: float  # ArraySource construction
    plain_build_s: float  # from_tensor_slices pipeline construction
    tfdp: list[Timing] = field(default_factory=list)  # one per round
    plain: list[Timing] = field(default_factory=list)

    @staticmethod
    def median(timings: list[Timing]) -> float:
        return float(np.median([t.rate for t in timings]))

    @property
    def tfdp_rate(self) -> float:
        return self.median(self.tfdp)

    @property
    def plain_rate(self) -> float:
        return self.median(self.plain)

    @property
    def tfdp_cpu_us(self) -> float:
        return float(np.median([t.cpu_us_per_sample for t in self.tfdp]))

    @property
    def plain_cpu_us(self) -> float:
        return float(np.median([t.cpu_us_per_sample for t in self.plain]))


def measure_sizes(
    x_all: np.ndarray, y_all: np.ndarray, sizes: tuple[int, ...], quick: bool, rounds: int
) -> dict[int, SizeResult]:
    """Round-robin: every round times (a) then (b) at every size, so load spikes spread evenly.

    The sources and pipelines of all sizes are built first and kept; each
    window uses a fresh iterator.
    """
    results: dict[int, SizeResult] = {}
    pipelines: dict[int, tuple[DistributedInput, tf.data.Dataset]] = {}
    for n in sizes:
        x, y = x_all[:n], y_all[:n]
        if quick:
            epochs = plain_epochs = plain_window = None
        else:
            epochs = epochs_for(n)
            if n * epochs > PLAIN_FULL_CAP:  # one plain epoch at 1M is ~1 min: a window
                plain_epochs, plain_window = None, PLAIN_FULL_CAP // BATCH
            else:
                plain_epochs, plain_window = epochs, None
        t0 = time.perf_counter()
        source = ArraySource((x, y))
        source_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        plain = plain_dataset(x, y, plain_epochs)
        plain_build_s = time.perf_counter() - t0
        pipelines[n] = (tfdp_input(source), plain)
        results[n] = SizeResult(n, epochs, plain_epochs, plain_window, source_s, plain_build_s)
        print(
            f"  built N={n:,}: ArraySource {source_s:.2f} s, plain pipeline {plain_build_s:.2f} s",
            flush=True,
        )
    for rnd in range(rounds):
        for n in sizes:
            r = results[n]
            inp, plain = pipelines[n]
            max_batches = QUICK_BATCHES if quick else None
            r.tfdp.append(
                time_iteration(
                    inp.worker_dataset(None, 0, r.epochs), max_batches, check=check_batch(BATCH)
                )
            )
            plain_batches = QUICK_BATCHES if quick else r.plain_window
            r.plain.append(time_iteration(plain, plain_batches, check=check_batch(BATCH)))
        print(
            f"  round {rnd + 1}/{rounds}: "
            + ", ".join(
                f"{_n(n)} {results[n].tfdp[-1].rate:,.0f}/{results[n].plain[-1].rate:,.0f}"
                for n in sizes
            )
            + " samples/s (a)/(b)",
            flush=True,
        )
    del pipelines
    gc.collect()
    return results


def time_op(
    fn: Callable[..., object], args: tuple, reps: int = 100, tries: int = 7
) -> tuple[float, float]:
    """(wall ms, CPU ms) per call of a tf.function on fixed inputs: the best of ``tries``."""
    for _ in range(5):
        fn(*args)
    best_wall = best_cpu = math.inf
    for _ in range(tries):
        c0, t0 = time.process_time(), time.perf_counter()
        for _ in range(reps):
            out = fn(*args)
        tf.nest.map_structure(lambda t: t.numpy(), out)
        best_wall = min(best_wall, (time.perf_counter() - t0) / reps)
        best_cpu = min(best_cpu, (time.process_time() - c0) / reps)
    return best_wall * 1e3, best_cpu * 1e3


class FusedCropFlipPrototype:
    """NOT part of tfdp: a prototype of a faster ``Compose([RandomCrop(32, 4), RandomFlip()])``.

    Same draws (``fold_in`` stage seeds 0 and 1, ``per_sample_uniform``), same
    output bit for bit (checked in :func:`breakdown`), different data movement:
    pad the rows only, one row gather (``W*C``-byte slices), then instead of a
    column gather with ``C``-byte slices (tfdp's hot spot), ``dynamic_partition``
    the batch by (column offset, flip) into ``2 * (2 * pad + 1)`` groups, take a
    static slice (reversed for flipped groups) of each and ``dynamic_stitch``
    them back. Needs static image width and padding.
    """

    batched = True

    def __call__(self, example: tuple, seeds: tf.Tensor) -> tuple:
        from tfdp.augment import fold_in, per_sample_uniform

        images = example[0]
        seeds = tf.cast(seeds, tf.int64)
        offsets = 2 * PAD + 1
        u = per_sample_uniform(fold_in(seeds, 0), 2)
        top = tf.minimum(tf.cast(u[:, 0] * offsets, tf.int32), offsets - 1)
        left = tf.minimum(tf.cast(u[:, 1] * offsets, tf.int32), offsets - 1)
        flip = per_sample_uniform(fold_in(seeds, 1), 2)[:, 0] < 0.5
        height, width = IMAGE_SHAPE[0], IMAGE_SHAPE[1]
        padded = tf.pad(images, [[0, 0], [PAD, PAD], [0, 0], [0, 0]])
        rows = top[:, tf.newaxis] + tf.range(height)[tf.newaxis, :]
        out = tf.gather(padded, rows, axis=1, batch_dims=1)
        out = tf.pad(out, [[0, 0], [0, 0], [PAD, PAD], [0, 0]])
        groups = 2 * left + tf.cast(flip, tf.int32)
        parts = tf.dynamic_partition(out, groups, 2 * offsets)
        ids = tf.dynamic_partition(tf.range(tf.shape(images)[0]), groups, 2 * offsets)
        pieces = []
        for g in range(2 * offsets):
            offset, flipped = divmod(g, 2)
            piece = parts[g][:, :, offset : offset + width, :]
            pieces.append(tf.reverse(piece, [2]) if flipped else piece)
        return (tf.dynamic_stitch(ids, pieces), *example[1:])


def breakdown(x_all: np.ndarray, y_all: np.ndarray, rounds: int) -> None:
    """What limits (a): variants at N = BREAKDOWN_N, round-robin windows, median printed."""
    n = BREAKDOWN_N
    x, y = x_all[:n], y_all[:n]
    source = ArraySource((x, y))
    crop = RandomCrop(IMAGE_SHAPE[0], padding=PAD)
    flip = RandomFlip()
    prototype = FusedCropFlipPrototype()

    def tfdp_ds(**kwargs: object) -> tf.data.Dataset:
        return tfdp_input(source, **kwargs).worker_dataset(None, 0, None)  # type: ignore[arg-type]

    def with_options(**settings: object) -> tf.data.Dataset:
        options = tf.data.Options()
        for key, value in settings.items():
            target = options
            *path, last = key.split("__")
            for part in path:
                target = getattr(target, part)
            setattr(target, last, value)
        return tfdp_ds().with_options(options)

    batches = BREAKDOWN_BATCHES
    variants: list[tuple[str, Iterable, int]] = [
        ("tfdp gather only (augment=None)", tfdp_ds(augment=None), batches),
        ("tfdp RandomFlip only", tfdp_ds(augment=Compose([flip])), batches),
        ("tfdp RandomCrop(32, padding=4) only", tfdp_ds(augment=Compose([crop])), batches),
        ("tfdp crop+flip (= (a), AUTOTUNE)", tfdp_ds(), batches),
        ("tfdp crop+flip, num_parallel_calls=1", tfdp_ds(num_parallel_calls=1), batches),
        ("tfdp crop+flip, num_parallel_calls=2", tfdp_ds(num_parallel_calls=2), batches),
        ("tfdp crop+flip, num_parallel_calls=4", tfdp_ds(num_parallel_calls=4), batches),
        ("tfdp crop+flip, batch_size=1024", tfdp_ds(batch_size=4 * BATCH), batches // 4),
        (
            "tfdp crop+flip, private_threadpool_size=2",
            with_options(threading__private_threadpool_size=2),
            batches,
        ),
        (
            "tfdp crop+flip, map_parallelization=False",
            with_options(experimental_optimization__map_parallelization=False),
            batches,
        ),
        ("tfdp crop+flip via strategy (inp.epochs)", tfdp_input(source).epochs(0, None), batches),
        ("tfdp, fused crop+flip PROTOTYPE (not in tfdp)", tfdp_ds(augment=prototype), batches),
        ("plain tf.data, no augmentation", plain_dataset(x, y, None, augment=False), batches),
        ("plain tf.data (= (b))", plain_dataset(x, y, None), batches),
        ("plain shuffle+batch, then tfdp Compose", plain_batched_tfdp_aug(x, y), batches),
    ]
    rates: dict[str, list[float]] = {name: [] for name, _, _ in variants}
    for _ in range(rounds):
        for name, ds, count in variants:
            rates[name].append(time_iteration(ds, count).rate)
    for name, _, _ in variants:
        r = rates[name]
        print(f"  {name:<50} {np.median(r):>10,.0f}  [{min(r):,.0f}-{max(r):,.0f}]", flush=True)
    del variants
    gc.collect()

    # Op level: one batch of 256 in a tf.function, no tf.data, one thread of work.
    imgs = tf.constant(x[:BATCH])
    labels = tf.constant(y[:BATCH])
    pos = tf.range(BATCH, dtype=tf.int64)
    seeds = tf.stack([tf.fill([BATCH], tf.constant(12345, tf.int64)), pos], axis=1)
    idx = tf.constant(np.random.default_rng(1).integers(0, n, BATCH))
    aug = tfdp_augment()
    want = aug((imgs, labels), seeds)[0].numpy()
    got = prototype((imgs, labels), seeds)[0].numpy()
    same = "bit-identical to Compose" if np.array_equal(want, got) else "DIFFERS from Compose"
    width = IMAGE_SHAPE[1] + 2 * PAD
    cols = tf.constant(
        np.random.default_rng(2).integers(0, 2 * PAD + 1, BATCH)[:, None]
        + np.arange(IMAGE_SHAPE[1])[None, :],
        tf.int32,
    )
    rows_out = tf.zeros([BATCH, IMAGE_SHAPE[0], width, IMAGE_SHAPE[2]], tf.uint8)
    ops: list[tuple[str, Callable[..., object], tuple]] = [
        ("ArraySource.gather(256 indices)", tf.function(source.gather), (idx,)),
        ("RandomCrop(32, padding=4)", tf.function(lambda i, s: crop(i, s)), (imgs, seeds)),
        (
            "  its tf.pad of the batch (H and W)",
            tf.function(lambda i: tf.pad(i, [[0, 0], [PAD, PAD], [PAD, PAD], [0, 0]])),
            (imgs,),
        ),
        (
            "  its column gather (3-byte slices)",
            tf.function(lambda t, c: tf.gather(t, c, axis=2, batch_dims=1)),
            (rows_out, cols),
        ),
        ("RandomFlip()", tf.function(lambda i, s: flip(i, s)), (imgs, seeds)),
        (
            "Compose([crop, flip]) (= (a)'s augmentation)",
            tf.function(lambda i, lab, s: aug((i, lab), s)),
            (imgs, labels, seeds),
        ),
        (
            f"fused PROTOTYPE ({same})",
            tf.function(lambda i, lab, s: prototype((i, lab), s)),
            (imgs, labels, seeds),
        ),
        (
            "reference: copy of the batch (x + 0)",
            tf.function(lambda i: i + tf.constant(0, tf.uint8)),
            (imgs,),
        ),
    ]
    for name, fn, args in ops:
        ms, cpu_ms = time_op(fn, args)
        print(
            f"  {'op: ' + name:<50} {BATCH / (ms / 1e3):>10,.0f}  {ms:.2f} ms wall, "
            f"{cpu_ms:.2f} ms CPU per batch of {BATCH}",
            flush=True,
        )


# --------------------------------------------------------------------------- reporting
def machine_info() -> list[str]:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        with open("/proc/meminfo") as f:
            mem_gib = int(f.readline().split()[1]) / (1 << 20)
    except (OSError, ValueError, IndexError):
        mem_gib = float("nan")
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    return [
        f"machine: {cpu}, os.cpu_count()={os.cpu_count()}, {mem_gib:.1f} GiB RAM, "
        f"{platform.system()} {platform.machine()}",
        f"python {platform.python_version()}, numpy {np.__version__}, tensorflow "
        f"{tf.__version__}, tfdp {tfdp.__version__}",
        f"load average at start (1/5/15 min): {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}",
    ]


def speed_tricks(x_all: np.ndarray, y_all: np.ndarray, rounds: int) -> None:
    """(a) with the ``lightly_optimized_map`` trick on and off, alternated (see the docstring)."""
    from tfdp._compat.fast.switch import SPEED_TRICKS_ENV, TRICKS

    trick = "lightly_optimized_map"
    switch = {"on": ",".join(TRICKS), "off": ",".join(t for t in TRICKS if t != trick)}
    sizes = (10_000, RATIO_N)
    inputs = {}
    for n in sizes:
        source = ArraySource((x_all[:n], y_all[:n]))
        for mode, value in switch.items():
            os.environ[SPEED_TRICKS_ENV] = value
            inputs[n, mode] = tfdp_input(source)
            time_iteration(inputs[n, mode].worker_dataset(None, 0, 1), 2)  # traced
    print(f"(a) with {trick} on / off: {rounds} rounds, whole epochs ({MIN_FULL_SAMPLES:,} "
          "samples or more per window), the order alternating")  # fmt: skip
    timings: dict[tuple[int, str], list[Timing]] = {key: [] for key in inputs}
    for rnd in range(rounds):
        for n in sizes:
            for mode in ("on", "off") if rnd % 2 == 0 else ("off", "on"):
                os.environ[SPEED_TRICKS_ENV] = switch[mode]
                ds = inputs[n, mode].worker_dataset(None, 0, epochs_for(n))
                timings[n, mode].append(time_iteration(ds, None, check=check_batch(BATCH)))
        print(f"  round {rnd + 1}: " + ", ".join(
            f"{_n(n)} {timings[n, 'on'][-1].rate:,.0f}/{timings[n, 'off'][-1].rate:,.0f}"
            for n in sizes) + " samples/s on/off", flush=True)  # fmt: skip
    os.environ[SPEED_TRICKS_ENV] = switch["on"]
    for n in sizes:
        on, off = timings[n, "on"], timings[n, "off"]
        for what, value in (
            ("rate", lambda a, b: a.rate / b.rate),
            ("cpu", lambda a, b: b.cpu_us_per_sample / a.cpu_us_per_sample),
            ("first", lambda a, b: b.first_batch_s / a.first_batch_s),
        ):
            ratios = [value(a, b) for a, b in zip(on, off, strict=True)]
            print(f"  N={_n(n)} {what} on vs off: {np.median(ratios):.3f} "
                  f"[{min(ratios):.2f}-{max(ratios):.2f}]")  # fmt: skip
            print(f"speed_trick_{trick}_{_n(n)}_{what}: {np.median(ratios):.3f}")
        first = [t.first_batch_s for t in on], [t.first_batch_s for t in off]
        print(f"  N={_n(n)} first batch s on {np.median(first[0]):.3f}, off "
              f"{np.median(first[1]):.3f}; samples/s on {np.median([t.rate for t in on]):,.0f}, "
              f"off {np.median([t.rate for t in off]):,.0f}")  # fmt: skip


def _n(n: int) -> str:
    return f"{n // 1_000_000}m" if n >= 1_000_000 and n % 1_000_000 == 0 else f"{n // 1000}k"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument(
        "--quick",
        action="store_true",
        help="N = 10k/50k/200k, a fixed window of batches, no breakdown (under a minute)",
    )
    ap.add_argument(
        "--speed-tricks", action="store_true", help="only lightly_optimized_map, on vs off"
    )
    ap.add_argument("--rounds", type=int, default=None, help="rounds (--speed-tricks: 5)")
    args = ap.parse_args(argv)
    if args.speed_tricks:
        x_all, y_all = make_data(RATIO_N)
        speed_tricks(x_all, y_all, args.rounds or 5)
        return 0
    quick = args.quick
    wall0 = time.perf_counter()
    sizes = QUICK_SIZES if quick else FULL_SIZES
    seed_sizes = SEED000_SIZES_QUICK if quick else SEED000_SIZES_FULL

    print(
        f"bench_input.py{' --quick' if quick else ''}  "
        f"{_dt.datetime.now().isoformat(timespec='seconds')}"
    )
    for line in machine_info():
        print(line)
    print(
        f"batch {BATCH}, images uint8 {IMAGE_SHAPE}, RA sampler R=3 selected_round=0 on "
        f"{tf.distribute.get_strategy().num_replicas_in_sync} replica "
        f"(default strategy), warm-up {WARMUP_BATCHES} batches per iterator"
    )
    if quick:
        print(f"window: {QUICK_BATCHES} batches after the warm-up, endless datasets")
    else:
        print(
            f"window: whole epochs after the warm-up, >= {MIN_FULL_SAMPLES:,} samples "
            f"(several epochs at small N); (b) capped at {PLAIN_FULL_CAP:,} samples"
        )
    print()

    t0 = time.perf_counter()
    x_all, y_all = make_data(max(sizes))
    print(
        f"data: {max(sizes):,} images ({x_all.nbytes / 2**30:.2f} GiB) built in "
        f"{time.perf_counter() - t0:.1f} s"
    )
    print()

    # (a) and (b)
    rounds = QUICK_ROUNDS if quick else FULL_ROUNDS
    print(
        f"(a) tfdp RA input vs (b) plain tf.data, same data and augmentation: {rounds} "
        f"rounds, each timing (a) then (b) at every N"
    )
    hdr = (
        f"{'N':>10} {'window (a)/(b)':>15} {'tfdp_ra samples/s':>27} "
        f"{'plain_tfdata samples/s':>27} {'ratio':>7} {'CPU us/sample':>13} {'src s':>6} "
        f"{'tfdp 1st s':>11} {'plain 1st s':>11}"
    )

    def cell(timings: list[Timing]) -> str:
        rates = [t.rate for t in timings]
        return f"{np.median(rates):,.0f} [{min(rates):,.0f}-{max(rates):,.0f}]"

    def first_cell(timings: list[Timing]) -> str:
        rest = f"/{min(t.first_batch_s for t in timings[1:]):.2f}" if len(timings) > 1 else ""
        return f"{timings[0].first_batch_s:.2f}{rest}"

    def window(epochs: int | None, batches: int | None) -> str:
        return f"{epochs}ep" if batches is None and epochs is not None else f"{batches}b"

    results = measure_sizes(x_all, y_all, sizes, quick, rounds)
    print()
    print(hdr)
    print("-" * len(hdr))
    for n in sizes:
        r = results[n]
        quick_b = QUICK_BATCHES if quick else None
        win = (
            f"{window(r.epochs, quick_b)}/"
            f"{window(r.plain_epochs, quick_b if quick else r.plain_window)}"
        )
        print(
            f"{n:>10,} {win:>15} {cell(r.tfdp):>27} {cell(r.plain):>27} "
            f"{r.tfdp_rate / r.plain_rate:>6.2f}x "
            f"{f'{r.tfdp_cpu_us:.1f}/{r.plain_cpu_us:.1f}':>13} {r.tfdp_source_s:>6.2f} "
            f"{first_cell(r.tfdp):>11} {first_cell(r.plain):>11}"
        )
    print(
        f"  samples/s: wall clock, median of {rounds} rounds [min-max]. ratio: median (a) / "
        "median (b).\n  window: timed span after the warm-up, Nep = N whole epochs, Nb = N "
        "batches. CPU us/sample:\n  process CPU time (all threads) per sample, (a)/(b), median "
        "of rounds -- less sensitive to\n  other processes than wall clock. src s: ArraySource "
        "construction (arrays -> tensors).\n  1st s: iterator creation + first batch, first "
        "round / best later round."
    )
    print()

    # (c)
    seed_samples = SEED000_SAMPLES_QUICK if quick else SEED000_SAMPLES
    print(
        f"(c) seed 000: index dataset mapped with base.skip(i).take(1).get_single_element(); "
        f"{rounds} round-robin rounds of {seed_samples} samples per N"
    )
    hdr_c = f"{'N':>10} {'samples/s':>23} {'ms/sample':>10} {'CPU ms/sample':>14}"
    seed_timings: dict[int, list[Timing]] = {n: [] for n in seed_sizes}
    seed_ds = {n: seed000_dataset(x_all[:n], y_all[:n]) for n in seed_sizes}
    for _ in range(rounds):
        for n in seed_sizes:
            seed_timings[n].append(
                time_iteration(seed_ds[n], seed_samples, warmup=SEED000_WARMUP, batched=False)
            )
    del seed_ds
    print(hdr_c)
    print("-" * len(hdr_c))
    seed_rates: dict[int, float] = {}
    seed_cpu: dict[int, float] = {}
    for n in seed_sizes:
        rates = [t.rate for t in seed_timings[n]]
        seed_rates[n] = float(np.median(rates))
        cpu_ms = float(np.median([t.cpu_us_per_sample for t in seed_timings[n]])) / 1e3
        seed_cpu[n] = cpu_ms
        print(f"{n:>10,} {cell(seed_timings[n]):>23} {1e3 / seed_rates[n]:>10.2f} {cpu_ms:>14.2f}")
    print("  samples/s: median of rounds [min-max]; ms/sample from the median.")
    ns = np.array(sorted(seed_rates), float)
    per = np.array([1.0 / seed_rates[int(v)] for v in ns])
    slope, intercept = np.polyfit(ns, per, 1)
    print(
        f"  per-sample time ~ {intercept * 1e3:.3f} ms + {slope * 1e6:.3f} us x N "
        f"(linear fit, O(N)); time ratio N={_n(int(ns[-1]))} / N={_n(int(ns[0]))}: "
        f"{per[-1] / per[0]:.2f}x for {ns[-1] / ns[0]:.0f}x N"
    )
    for big in (RATIO_N, 1_281_167):
        est = intercept + slope * big
        print(
            f"  extrapolated (not measured) at N={big:,}: {1 / est:,.1f} samples/s, "
            f"one epoch of N samples ~ {big * est / 60:,.0f} min"
        )
    print()

    if not quick:
        print(
            f"breakdown at N={BREAKDOWN_N:,}: samples/s, median [min-max] of {BREAKDOWN_ROUNDS} "
            f"round-robin windows of {BREAKDOWN_BATCHES} batches (endless datasets); op rows: "
            f"a tf.function on one batch, no tf.data, best of 7 x 100 calls"
        )
        breakdown(x_all, y_all, BREAKDOWN_ROUNDS)
        print()

    # Targets.
    rate_a = {n: r.tfdp_rate for n, r in results.items()}
    ratio = results[RATIO_N].tfdp_rate / results[RATIO_N].plain_rate
    flat = max(rate_a.values()) / min(rate_a.values())
    lo_n, hi_n = min(rate_a), max(rate_a)
    print("targets (from the issue):")
    print(
        f"  (a) >= {RATIO_TARGET:g}x (b) at N={RATIO_N:,}, per-sample augmentation: "
        f"{ratio:.2f}x -> {'PASS' if ratio >= RATIO_TARGET else 'FAIL'}"
    )
    if hi_n >= 1_000_000:
        print(
            f"  (a) flat within 20% from N=10,000 to N=1,000,000: max/min = {flat:.3f} -> "
            f"{'PASS' if flat <= FLATNESS_TARGET else 'FAIL'}"
        )
    else:
        print(
            f"  (a) flat within 20% from N=10,000 to N=1,000,000: not evaluated by --quick "
            f"(max N {hi_n:,}); max/min over {_n(lo_n)}..{_n(hi_n)} = {flat:.3f} "
            f"({'within' if flat <= FLATNESS_TARGET else 'outside'} 20%)"
        )
    cpu_ratio = results[RATIO_N].plain_cpu_us / results[RATIO_N].tfdp_cpu_us
    print(
        f"  diagnostic, not the target: CPU time per sample at N={RATIO_N:,}, (b)/(a) = "
        f"{cpu_ratio:.2f}x"
    )
    cpu_a = {n: r.tfdp_cpu_us for n, r in results.items()}
    cpu_flat = max(cpu_a.values()) / min(cpu_a.values())
    print(
        f"  diagnostic, not the target: (a)'s CPU time per sample, max/min over "
        f"{_n(lo_n)}..{_n(hi_n)} = {cpu_flat:.3f} ("
        + ", ".join(f"{_n(n)} {v:.1f} us" for n, v in cpu_a.items())
        + ")"
    )
    growth = per[-1] / per[0]
    lo_s, hi_s = min(seed_sizes), max(seed_sizes)
    cpu_growth = seed_cpu[hi_s] / seed_cpu[lo_s]
    print(
        f"  (c) growth shown: per-sample time x{growth:.2f} wall, x{cpu_growth:.2f} CPU, from "
        f"N={lo_s:,} to N={hi_s:,}"
    )
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    print(
        f"load average at end: {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}; "
        f"wall time {time.perf_counter() - wall0:.0f} s"
    )
    print()

    head: list[tuple[str, str]] = []
    for n in sizes:
        head.append((f"tfdp_ra_samples_per_s_{_n(n)}", f"{rate_a[n]:.0f}"))
    for n in sizes:
        head.append((f"plain_tfdata_samples_per_s_{_n(n)}", f"{results[n].plain_rate:.0f}"))
    head.append((f"ratio_tfdp_vs_plain_{_n(RATIO_N)}", f"{ratio:.2f}x"))
    head.append((f"cpu_time_ratio_plain_vs_tfdp_{_n(RATIO_N)}", f"{cpu_ratio:.2f}x"))
    if hi_n >= 1_000_000:
        head.append(("tfdp_flatness_10k_to_1m", f"{flat:.3f}"))
    else:
        head.append(("tfdp_flatness_10k_to_1m", f"n/a (--quick stops at {_n(hi_n)})"))
        head.append((f"tfdp_flatness_10k_to_{_n(hi_n)}", f"{flat:.3f}"))
    head.append((f"tfdp_cpu_time_flatness_10k_to_{_n(hi_n)}", f"{cpu_flat:.3f}"))
    for n in seed_sizes:
        head.append((f"seed000_samples_per_s_{_n(n)}", f"{seed_rates[n]:.0f}"))
    head.append(("seed000_time_growth_1k_to_4k", f"{(seed_rates[1000] / seed_rates[4000]):.2f}x"))
    head.append(("seed000_cpu_time_growth_1k_to_4k", f"{(seed_cpu[4000] / seed_cpu[1000]):.2f}x"))
    head.append(("target_ratio_2x_at_50k", "PASS" if ratio >= RATIO_TARGET else "FAIL"))
    if hi_n >= 1_000_000:
        head.append(("target_flat_20pct_10k_to_1m", "PASS" if flat <= FLATNESS_TARGET else "FAIL"))
    for name, value in head:
        print(f"{name}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
