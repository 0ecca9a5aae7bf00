"""Benchmark tfdp's JPEG image-folder input against TF Model Garden's ImageNet input.

All pipelines read the same folder of photo-like JPEGs (ImageNet's layout and
typical sizes, 375x500 and alike, quality 90, made locally by
``tests/photos.py`` and cached under ``/tmp``, or ``--folder``), and deliver
the same thing: float32 ``[64, 224, 224, 3]`` batches, RandomResizedCrop'd
(area 0.08-1, ratio 3/4-4/3), randomly flipped and normalised with ImageNet's
mean and std, to each of 2 replicas (MirroredStrategy over 2 logical CPU
devices, global batch 128), through ``strategy.distribute_datasets_from_function``:

* ``tfdp_ra``: ``DistributedInput(strategy, ImageFolderSource(root),
  sampler="repeat_aug", sampler_options={"num_repeats": 3, "selected_round": 0},
  global_batch_size=128, augment=Compose([RandomResizedCrop(224), RandomFlip(),
  Normalize(mean, std)]))`` -- the window path (each file of a chunk read and
  decoded once, over its windows only).
* ``tfdp_plain``: the same with ``sampler="distributed"``.
* ``model_garden``: a transcription (written here) of TF Model Garden's
  ImageNet training input, ``official/vision/dataloaders/classification_input.py``
  (``Parser._parse_train_image`` with ``decode_jpeg_only=True``) and
  ``official/vision/ops/preprocess_ops.py``: ``extract_jpeg_shape``,
  ``sample_distorted_bounding_box`` (``random_crop_image_v2``: area 0.08-1,
  ratio 3/4-4/3, 10 attempts), ``decode_and_crop_jpeg`` of the box, the
  centre-crop fallback (``center_crop_image_v2``), ``random_flip_left_right``,
  ``tf.image.resize`` (bilinear), ``normalize_image`` with ``MEAN_RGB`` /
  ``STDDEV_RGB``, ``convert_image_dtype``; per example in a parallel map
  (AUTOTUNE), ``batch(64, drop_remainder=True)``, ``prefetch(AUTOTUNE)``, after
  ``from_tensor_slices(paths, labels).shuffle(10000).repeat()`` (it reads the
  files, where Model Garden parses ``tf.train.Example`` records: same bytes).
* ``naive`` (full mode): decode the whole JPEG, then the same steps on the
  decoded image (Model Garden's ``decode_jpeg_only=False`` path:
  ``random_crop_image``).
* ``tfdp_per_example`` (full mode): tfdp's per-example path, what every
  image folder used before the window path (whole file decoded, then the
  augmentation on a batch of one), with ``sampler="repeat_aug"``.

* ``deit_vs_timm`` (when timm is installed; after the others in the full mode,
  alone with ``--deit-only``, left out by ``--quick`` without ``--deit-only``
  and by ``--no-deit``): DeiT's whole training input (issue 26) -- Repeated
  Augmentation 3, RandomResizedCrop bicubic (low-pass filtered as PIL's
  resize), flip, RandAugment ``rand-m9-mstd0.5-inc1``, colour jitter 0.3 as
  timm applies it (not next to RandAugment), normalise, RandomErasing 0.25
  ``pixel``, Mixup 0.8 / CutMix 1.0 (switch 0.5, smoothing 0.1) on each
  replica's batch -- in tfdp against timm's own training loader
  (``timm.data.create_loader(..., auto_augment='rand-m9-mstd0.5-inc1',
  re_prob=0.25, ...)``, a torch DataLoader with one worker per core, timm's
  ``Mixup`` per batch in the main process as DeiT's loop), run by
  ``_timm_loader.py`` in a subprocess (torchvision and TensorFlow cannot share
  a process). The two sides take turns, each timed while the other is idle.

How it measures. One process. Each round visits every pipeline in turn (the
order rotates): from an idle process it builds a new epoch's dataset, creates
its iterator and takes its first batch, ``FIRST_SAMPLES`` times
(``first_batch``: the cost of starting an epoch with a new dataset, the
round's median; the build and the iterator's creation are also shown apart);
then, on the last iterator, pulls ``WARMUP`` batches and times ``window``
batches (images/s, and process CPU ms per image: all threads, the steadier
measure on a shared machine); then drops the iterator and waits until the
process is idle, so no pipeline prefetches during another's window. Ratios
are medians over rounds of the per-round ratios. The first round's first
first batch (tracing included) is reported apart as ``cold``. The full mode
also times the first batch of a new epoch inside one stream -- what tfdp's
trainer and ``model.fit`` path iterate, and Model Garden's ``repeat()``ed
pipeline -- against each stream's median batch. A closing breakdown times
single operations on one thread (decode of the whole file, of the window,
resize, normalisation...) to show what bounds each pipeline.

Usage (on a shared machine, under the lock, e.g.
``flock /work/notes/bench.lock .venv/bin/python benchmarks/bench_images.py``):
    python benchmarks/bench_images.py            # 3,000 images, 7 rounds (~15 min on 2 cores)
    python benchmarks/bench_images.py --quick    # 600 images, 3 rounds, 3 pipelines (~1 min)
    python benchmarks/bench_images.py --quick --deit-only   # DeiT's input vs timm's (~1 min)
    python benchmarks/bench_images.py --quick --held-out-only  # DeiT's held-out crop (~1 min)
    python benchmarks/bench_images.py --quick --speed-tricks-only  # the map trick on / off
    python benchmarks/bench_images.py --quick --conditions only --kinds tfrecord \
        --only-conditions idle   # the TFRecord input alone, one condition (< 1 min)

TensorFlow runs with the host allocator tfdp's CLI and launcher give it (BFC,
:func:`tfdp._compat.fast.process.prefer_bfc_cpu_allocator`); ``TF_CPU_ALLOCATOR_USE_BFC=false`` in
the environment, or ``TFDP_SPEED_TRICKS`` without ``bfc_cpu_allocator``, measures with malloc's
(every buffer of 32 MiB or more faulted in anew; oneDNN's allocator where TensorFlow turns oneDNN
on).

The headline figures come last, one ``name: value`` per line.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gc
import json
import os
import platform
import resource
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
from tfdp._compat.fast.process import (
    CPU_ALLOCATOR_ENV,
    prefer_bfc_cpu_allocator,
    release_in_background,
    wait_for_releases,
)

# TensorFlow's host allocator as tfdp's CLI and launcher give it (BFC: no page faults for
# every batch); TF_CPU_ALLOCATOR_USE_BFC=false in the environment measures malloc's.
prefer_bfc_cpu_allocator(os.environ)

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

GLOBAL_BATCH = 128
REPLICAS = 2
SIZE = 224
MEAN_RGB = (0.485 * 255, 0.456 * 255, 0.406 * 255)  # Model Garden's preprocess_ops.MEAN_RGB
STDDEV_RGB = (0.229 * 255, 0.224 * 255, 0.225 * 255)
WARMUP = 3
QUICK_WARMUP = 2
FULL = {"images": 3000, "rounds": 7, "window": 20, "warmup": WARMUP}
QUICK = {"images": 600, "rounds": 3, "window": 4, "warmup": QUICK_WARMUP}
FIRST_SAMPLES = 3  # fresh datasets per pipeline and round: their first batches' median
TARGETS = {"ra": 1.2, "plain": 1.0, "first_batch": 1.5}
SHUFFLE = 10_000


# --------------------------------------------------------------------------- set-up
def configure_devices() -> tf.distribute.Strategy:
    cpus = tf.config.list_physical_devices("CPU")
    tf.config.set_logical_device_configuration(
        cpus[0], [tf.config.LogicalDeviceConfiguration()] * REPLICAS
    )
    return tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(REPLICAS)])


def _write_part(args: tuple[str, int, int, int]) -> None:
    from photos import write_folder

    root, start, count, seed = args
    write_folder(root, count, classes=10, seed=seed, first_index=start)


def photo_folder(count: int, seed: int = 0) -> Path:
    """A cached folder of ``count`` photo-like JPEGs (made once, in parallel)."""
    root = Path("/tmp/tfdp_bench_images") / f"photos-{count}-q90-seed{seed}"
    done = root / ".complete"
    if done.exists():
        return root
    print(f"making {count} photo-like JPEGs under {root} (once) ...", flush=True)
    t0 = time.perf_counter()
    parts = os.cpu_count() or 1
    step = -(-count // parts)
    jobs = [
        (str(root), s, min(step, count - s), seed * 1000 + i)
        for i, s in enumerate(range(0, count, step))
    ]
    with ProcessPoolExecutor(parts) as pool:
        list(pool.map(_write_part, jobs))
    done.write_text(f"{count}\n")
    print(f"  done in {time.perf_counter() - t0:.0f}s", flush=True)
    return root


def folder_stats(root: Path) -> str:
    files = sorted(root.glob("*/*.JPEG"))
    sizes = [f.stat().st_size for f in files]
    return (
        f"{len(files)} JPEGs in {len({f.parent for f in files})} classes, "
        f"{np.mean(sizes) / 1024:.0f} KiB mean ({min(sizes) // 1024}-{max(sizes) // 1024} KiB)"
    )


# --------------------------------------------------------------------------- pipelines
def _normalize_image(image: tf.Tensor) -> tf.Tensor:
    """Model Garden's preprocess_ops.normalize_image(image, MEAN_RGB, STDDEV_RGB)."""
    image = tf.image.convert_image_dtype(image, dtype=tf.float32)
    offset = tf.expand_dims(tf.expand_dims(tf.constant(MEAN_RGB), axis=0), axis=0)
    image -= offset
    scale = tf.expand_dims(tf.expand_dims(tf.constant(STDDEV_RGB), axis=0), axis=0)
    image /= scale
    return image


def _center_crop_v2(image_bytes: tf.Tensor, image_shape: tf.Tensor) -> tf.Tensor:
    """preprocess_ops.center_crop_image_v2 (fraction 0.875)."""
    shape = tf.cast(image_shape, tf.float32)
    crop_size = 0.875 * tf.math.minimum(shape[0], shape[1])
    crop_offset = tf.cast((shape[:2] - crop_size) / 2.0, dtype=tf.int32)
    crop_size = tf.cast(crop_size, dtype=tf.int32)
    window = tf.stack([crop_offset[0], crop_offset[1], crop_size, crop_size])
    return tf.image.decode_and_crop_jpeg(image_bytes, window, channels=3)


def _distorted_box(shape: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """preprocess_ops.random_crop_image(_v2)'s sample_distorted_bounding_box call."""
    begin, size, _ = tf.image.sample_distorted_bounding_box(
        shape,
        tf.constant([0.0, 0.0, 1.0, 1.0], dtype=tf.float32, shape=[1, 1, 4]),
        seed=1,
        min_object_covered=0.08,
        aspect_ratio_range=(3.0 / 4.0, 4.0 / 3.0),
        area_range=(0.08, 1.0),
        max_attempts=10,
    )
    return begin, size


def _finish_mg(image: tf.Tensor) -> tf.Tensor:
    image = tf.image.random_flip_left_right(image)
    image = tf.image.resize(image, [SIZE, SIZE], method="bilinear")
    image.set_shape([SIZE, SIZE, 3])
    image = _normalize_image(image)
    return tf.image.convert_image_dtype(image, tf.float32)


def model_garden_parse(path: tf.Tensor, label: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """classification_input.Parser._parse_train_image, decode_jpeg_only=True."""
    return model_garden_parse_bytes(tf.io.read_file(path), label)


def model_garden_parse_bytes(
    image_bytes: tf.Tensor, label: tf.Tensor
) -> tuple[tf.Tensor, tf.Tensor]:
    """model_garden_parse of the file's bytes (a TFRecord's ``image/encoded``)."""
    image_shape = tf.image.extract_jpeg_shape(image_bytes)
    begin, size = _distorted_box(image_shape)
    offset_y, offset_x, _ = tf.unstack(begin)
    crop_height, crop_width, _ = tf.unstack(size)
    window = tf.stack([offset_y, offset_x, crop_height, crop_width])
    cropped = tf.image.decode_and_crop_jpeg(image_bytes, window, channels=3)
    image = tf.cond(
        tf.reduce_all(tf.equal(tf.shape(cropped), image_shape)),
        lambda: _center_crop_v2(image_bytes, image_shape),
        lambda: cropped,
    )
    return _finish_mg(image), tf.cast(label, tf.int32)


def naive_parse(path: tf.Tensor, label: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Decode the whole file, then crop (Model Garden's decode_jpeg_only=False path)."""
    image = tf.io.decode_image(tf.io.read_file(path), channels=3, expand_animations=False)
    image.set_shape([None, None, 3])
    begin, size = _distorted_box(tf.shape(image))
    cropped = tf.slice(image, begin, size)
    image = tf.cond(
        tf.reduce_all(tf.equal(tf.shape(cropped), tf.shape(image))),
        lambda: _center_crop_decoded(image),
        lambda: cropped,
    )
    return _finish_mg(image), tf.cast(label, tf.int32)


def _center_crop_decoded(image: tf.Tensor) -> tf.Tensor:
    size = tf.cast(tf.shape(image)[:2], tf.float32)
    crop = 0.875 * tf.math.minimum(size[0], size[1])
    offset = tf.cast((size - crop) / 2.0, tf.int32)
    crop = tf.cast(crop, tf.int32)
    return image[offset[0] : offset[0] + crop, offset[1] : offset[1] + crop, :]


def per_example_dataset(parse: Callable, paths: list[str], labels: np.ndarray, epoch: int):
    def dataset_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        ds = tf.data.Dataset.from_tensor_slices((paths, labels))
        ds = ds.shuffle(SHUFFLE, seed=epoch, reshuffle_each_iteration=True).repeat()
        ds = ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE)
        ds = ds.batch(ctx.get_per_replica_batch_size(GLOBAL_BATCH), drop_remainder=True)
        return ds.prefetch(tf.data.AUTOTUNE)

    return dataset_fn


class NoWindows:
    """The folder as a source without window decoding: tfdp's per-example path."""

    streaming = False

    def __init__(self, source):
        self.source = source
        self.num_examples = source.num_examples
        self.element_spec = source.element_spec

    def load(self, index):
        return self.source.load(index)

    def load_with_weight(self, index):
        return self.source.load_with_weight(index)


def tfdp_input(strategy, root: Path, sampler: str, windows: bool = True, source=None):
    """tfdp's input of the folder ``root`` (or of ``source``, e.g. TFRecords of its JPEGs)."""
    from tfdp import augment
    from tfdp.input import DistributedInput
    from tfdp.sources import ImageFolderSource
    from tfdp.windows.loader import WindowedBatches

    streaming = source is not None
    source = ImageFolderSource(root) if source is None else source
    options = {"num_repeats": 3, "selected_round": 0} if sampler == "repeat_aug" else {}
    inp = DistributedInput(
        strategy,
        source if windows else NoWindows(source),
        sampler=sampler,
        sampler_options=options,
        global_batch_size=GLOBAL_BATCH,
        augment=augment.Compose(
            [
                augment.RandomResizedCrop(SIZE),
                augment.RandomFlip(),
                augment.Normalize(MEAN_RGB, STDDEV_RGB),
            ]
        ),
    )
    assert isinstance(inp.loader, WindowedBatches) == (windows and not streaming)
    return inp


# --------------------------------------------------------------------------- timing
def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def wait_idle(limit: float = 10.0) -> None:
    """Wait until dropped pipelines are destroyed and the process burns under 2% of a core.

    Pipelines drop their iterators through ``release_in_background`` (TensorFlow's
    teardown of one can wait up to a minute): waiting for it here keeps one pipeline's
    teardown out of the next one's timing.
    """
    wait_for_releases()
    gc.collect()
    t_end = time.perf_counter() + limit
    while time.perf_counter() < t_end:
        c0 = cpu_seconds()
        time.sleep(0.1)
        if cpu_seconds() - c0 < 0.002:
            return


def timed_batches(strategy, it, warmup: int, window: int, check) -> tuple[float, float]:
    """``(wall, cpu)`` seconds of ``window`` batches of ``it`` after ``warmup`` untimed ones."""
    for _ in range(warmup):
        check(strategy, next(it))
    t0, c0 = time.perf_counter(), cpu_seconds()
    for _ in range(window):
        check(strategy, next(it))
    return time.perf_counter() - t0, cpu_seconds() - c0


def touch(strategy, batch) -> None:
    images = batch[0]
    for t in strategy.experimental_local_results(images):
        assert t.shape == (GLOBAL_BATCH // REPLICAS, SIZE, SIZE, 3), t.shape
        float(t[0, 0, 0, 0])


def run_window(
    strategy,
    make: Callable[[int], object],
    epoch: int,
    window: int,
    warmup: int = WARMUP,
    firsts: int = FIRST_SAMPLES,
) -> dict:
    """One round of one pipeline: ``firsts`` fresh datasets' first batches, then a window.

    Each first batch is a new epoch's dataset built, its iterator created and
    its first batch taken, from an idle process; the round reports their
    medians. The last iterator then runs the warm-up and the timed window.
    """
    samples = []
    for k in range(firsts):
        wait_idle()
        t0 = time.perf_counter()
        dds = make(epoch * firsts + k)
        t_built = time.perf_counter()
        it = iter(dds)
        t_iter = time.perf_counter()
        touch(strategy, next(it))
        t_first = time.perf_counter()
        # the parts of ``first``: the dataset's construction, the iterator's creation (its
        # functions instantiated), the first batch's wait
        samples.append((t_first - t0, t_built - t0, t_iter - t_built))
        if k < firsts - 1:
            held = [it, dds]
            del it, dds
            release_in_background(held)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    wall, cpu = timed_batches(strategy, it, warmup, window, touch)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    held = [it, dds]
    del it, dds
    release_in_background(held)
    images = window * GLOBAL_BATCH
    first, build, iterator = (float(np.median(column)) for column in zip(*samples, strict=True))
    return {
        "first": first,
        "single_first": samples[0][0],  # the first sample (round 1: tracing included)
        "build": build,
        "iter": iterator,
        "rate": images / wall,
        "cpu_ms": cpu / images * 1e3,
        "faults": faults / images,  # page faults per image (the warm-up's included)
    }


def epoch_boundary(strategy, stream, steps: int, epochs: int = 2) -> tuple[float, float]:
    """Wait for the first batch of a new epoch inside one stream vs the median wait (seconds).

    ``stream`` is an endless distributed dataset of epochs of ``steps``
    batches: tfdp's ``inp.epochs()`` -- what its trainer iterates, a new epoch
    there is not a new dataset or iterator -- and Model Garden's
    ``repeat()``-ed pipeline.
    """
    wait_idle()
    it = iter(stream)
    waits = []
    for _ in range(steps * (epochs + 1)):
        t = time.perf_counter()
        touch(strategy, next(it))
        waits.append(time.perf_counter() - t)
    held = [it]
    del it
    release_in_background(held)
    starts = [waits[steps * e] for e in range(1, epochs + 1)]
    return float(np.median(starts)), float(np.median(waits[1:]))


# --------------------------------------------------------------------------- breakdown
def breakdown(root: Path, count: int = 120) -> dict[str, float]:
    """Single-thread CPU ms per image of the operations the pipelines are made of.

    Each operation runs over ``count`` files inside one ``tf.function`` (a
    sequential ``tf.while_loop``, so the call overhead is shared), with
    TensorFlow's op thread pools at one thread; an empty loop is subtracted.
    """
    from tfdp import augment

    files = sorted(root.glob("*/*.JPEG"))[:count]
    paths = tf.constant([str(f) for f in files])
    datas = tf.constant([f.read_bytes() for f in files])
    shapes = tf.stack([tf.image.extract_jpeg_shape(d)[:2] for d in datas])
    rrc = augment.RandomResizedCrop(SIZE)
    seeds = tf.stack(
        [tf.fill([3 * count], tf.constant(7, tf.int64)), tf.range(3 * count, dtype=tf.int64)], 1
    )
    boxes3 = tf.reshape(rrc.windows(tf.repeat(shapes, 3, axis=0), rrc.draw(seeds)), [count, 3, 4])
    boxes = boxes3[:, 0]
    low = tf.reduce_min(boxes3[..., :2], axis=1)
    union = tf.concat([low, tf.reduce_max(boxes3[..., :2] + boxes3[..., 2:], axis=1) - low], 1)
    decoded = [tf.io.decode_jpeg(d, channels=3) for d in datas]
    windows = tf.ragged.stack(
        [img[b[0] : b[0] + b[2], b[1] : b[1] + b[3]] for img, b in zip(decoded, boxes, strict=True)]
    )
    resized = tf.stack(
        [tf.image.resize(windows[j].to_tensor(), [SIZE, SIZE]) for j in range(count)]
    )
    norm = augment.Normalize(MEAN_RGB, STDDEV_RGB)
    flip = augment.RandomFlip(p=1.0)
    # Reduced-scale (DCT) decoding: a 600x600 window of 750x1000 photos, whole or at 1/2 scale
    # (libjpeg scales while it decodes; the window is then in half-size coordinates).
    from photos import encode, photo

    rng = np.random.default_rng(5)
    big = tf.constant([encode(photo(750, 1000, rng)) for _ in range(12)])

    ops: dict[str, Callable[[tf.Tensor], tf.Tensor]] = {
        "read + extract_jpeg_shape": lambda i: tf.image.extract_jpeg_shape(
            tf.io.read_file(paths[i])
        )[0],
        "decode the whole file": lambda i: tf.io.decode_jpeg(datas[i], channels=3)[0, 0, 0],
        "decode the RRC window": lambda i: tf.io.decode_and_crop_jpeg(
            datas[i], boxes[i], channels=3
        )[0, 0, 0],
        "decode the union of 3 RA windows, per copy (/3)": lambda i: tf.io.decode_and_crop_jpeg(
            datas[i], union[i], channels=3
        )[0, 0, 0],
        "resize the window to 224 (float32)": lambda i: tf.cast(
            tf.image.resize(windows[i].to_tensor(), [SIZE, SIZE])[0, 0, 0], tf.uint8
        ),
        "normalise, channel broadcast (Model Garden)": lambda i: tf.cast(
            _normalize_image(resized[i])[0, 0, 0], tf.uint8
        ),
        "normalise, tfdp Normalize": lambda i: tf.cast(
            norm.apply(resized[i][tf.newaxis], tf.zeros([1, 0]))[0, 0, 0, 0], tf.uint8
        ),
        "flip, tf.reverse of the image (Model Garden)": lambda i: tf.cast(
            tf.reverse(resized[i], [1])[0, 0, 0], tf.uint8
        ),
        "flip, tfdp RandomFlip": lambda i: tf.cast(
            flip.apply(resized[i][tf.newaxis], tf.zeros([1, 2]))[0, 0, 0, 0], tf.uint8
        ),
        "decode a 600x600 window of a 750x1000 JPEG + resize": lambda i: tf.cast(
            tf.image.resize(
                tf.io.decode_and_crop_jpeg(big[i % 12], [75, 200, 600, 600]), [SIZE, SIZE]
            )[0, 0, 0],
            tf.uint8,
        ),
        "  the same window decoded at 1/2 scale (DCT) + resize": lambda i: tf.cast(
            tf.image.resize(
                tf.io.decode_and_crop_jpeg(big[i % 12], [37, 100, 300, 300], ratio=2),
                [SIZE, SIZE],
            )[0, 0, 0],
            tf.uint8,
        ),
        "Model Garden parse (whole)": lambda i: tf.cast(
            model_garden_parse(paths[i], tf.constant(0, tf.int64))[0][0, 0, 0], tf.uint8
        ),
        "(empty loop)": lambda i: tf.cast(i, tf.uint8),
    }

    def timed(op: Callable[[tf.Tensor], tf.Tensor]) -> float:
        def loop() -> tf.Tensor:
            def body(i: tf.Tensor, acc: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
                return i + 1, acc + tf.cast(op(i), tf.int32)

            return tf.while_loop(lambda i, _: i < count, body, (0, 0), parallel_iterations=1)[1]

        fn = tf.function(loop, autograph=False)
        fn()
        best = float("inf")
        for _ in range(3):
            c0 = cpu_seconds()
            fn()
            best = min(best, (cpu_seconds() - c0) / count * 1e3)
        return best

    out = {name: timed(op) for name, op in ops.items()}
    empty = out.pop("(empty loop)")
    out = {name: max(ms - empty, 0.0) for name, ms in out.items()}
    out["decode the union of 3 RA windows, per copy (/3)"] /= 3
    # Windows that 1/2-scale decoding could serve: at least twice the output on both sides.
    sides = boxes3[..., 2:].numpy()
    out["% of this folder's RRC windows >= 2x the output (DCT-eligible)"] = 100 * float(
        np.mean(np.all(sides >= 2 * SIZE, axis=-1))
    )
    return out


# --------------------------------------------------------------------------- DeiT vs timm
# A part of its own: DeiT's whole training input (issue 26) in tfdp and in timm, side by side.
DEIT_AUTO_AUGMENT = "rand-m9-mstd0.5-inc1"
DEIT_TIMM_SCRIPT = Path(__file__).resolve().parent / "_timm_loader.py"


def deit_augment(classes: int):
    """DeiT's training augmentation (its ``main.py`` defaults) as tfdp stages.

    RandomResizedCrop (bicubic, low-pass filtered as PIL's resize), flip, RandAugment
    ``rand-m9-mstd0.5-inc1``, colour jitter 0.3 as timm applies it next to RandAugment (not
    at all), normalisation, random erasing 0.25 ``pixel``, then Mixup 0.8 / CutMix 1.0 (switch
    0.5, smoothing 0.1) on each replica's batch.
    """
    from tfdp import augment
    from tfdp.augment.spec import color_jitter_applies

    stages = [
        augment.RandomResizedCrop(SIZE, interpolation="bicubic", antialias=True),
        augment.RandomFlip(),
        augment.RandAugment.from_string(DEIT_AUTO_AUGMENT),
    ]
    if color_jitter_applies(DEIT_AUTO_AUGMENT):  # timm: no colour jitter next to RandAugment
        stages.append(augment.ColorJitter.from_timm(0.3))
    stages += [
        augment.Normalize(MEAN_RGB, STDDEV_RGB),
        augment.RandomErasing(0.25, mode="pixel"),
        augment.Mixup(0.8, 1.0, switch_prob=0.5, label_smoothing=0.1, num_classes=classes),
    ]
    return augment.Compose(stages)


def deit_input(strategy, root: Path):
    """DeiT's input in tfdp: Repeated Augmentation (3), the window path, DeiT's augmentation."""
    from tfdp.input import DistributedInput
    from tfdp.sources import ImageFolderSource
    from tfdp.windows.loader import WindowedBatches

    source = ImageFolderSource(root)
    inp = DistributedInput(
        strategy,
        source,
        sampler="repeat_aug",
        sampler_options={"num_repeats": 3, "selected_round": 0},
        global_batch_size=GLOBAL_BATCH,
        augment=deit_augment(int(np.max(source.labels)) + 1),
    )
    assert isinstance(inp.loader, WindowedBatches)
    return inp


def missing_reference() -> list[str]:
    """The reference stack's modules (torch, torchvision, timm) not installed here."""
    import importlib.util

    return [m for m in ("torch", "torchvision", "timm") if importlib.util.find_spec(m) is None]


class TimmSide:
    """A timm script in a subprocess (torchvision and TensorFlow cannot share a process),
    asked one command per line, answering one JSON line each; ``proc`` is set by the
    subclass's ``__init__``."""

    proc: Any

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"timm's side stopped (exit status {self.proc.wait()})")
        return json.loads(line)

    def ask(self, command: str) -> dict:
        """Send ``command``; its answer."""
        self.proc.stdin.write(f"{command}\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        try:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.flush()
            self.proc.wait(timeout=60)
        except Exception:
            self.proc.kill()


class TimmLoader(TimmSide):
    """timm's DeiT loader in a subprocess (``_timm_loader.py``). ``run`` times batches of
    ``GLOBAL_BATCH // REPLICAS`` (DeiT's per-process batch), Mixup included."""

    def __init__(self, root: Path, workers: int) -> None:
        import subprocess

        self.proc = subprocess.Popen(
            [sys.executable, str(DEIT_TIMM_SCRIPT), "--folder", str(root),
             "--batch", str(GLOBAL_BATCH // REPLICAS), "--workers", str(workers),
             "--size", str(SIZE)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
        )  # fmt: skip
        self.workers = workers
        self._read()

    def run(self, warmup: int, count: int) -> dict:
        return self.ask(f"run {warmup} {count}")


def deit_tfdp_window(strategy, inp, epoch: int, warmup: int, window: int) -> dict:
    """Images/s and CPU ms per image of tfdp's DeiT input over ``window`` global batches."""
    wait_idle()
    it = iter(inp.epochs(epoch, None))
    wall, cpu = timed_batches(strategy, it, warmup, window, touch_deit)
    held = [it]
    del it
    release_in_background(held)
    images = window * GLOBAL_BATCH
    return {"rate": images / wall, "cpu_ms": cpu / images * 1e3}


def touch_deit(strategy, batch) -> None:
    images, targets = batch[0], batch[1]
    for x, y in zip(*(strategy.experimental_local_results(t) for t in (images, targets)),
                    strict=True):  # fmt: skip
        assert x.shape == (GLOBAL_BATCH // REPLICAS, SIZE, SIZE, 3) and y.shape.rank == 2
        float(x[0, 0, 0, 0])


def deit_vs_timm(strategy, root: Path, cfg: dict) -> dict[str, float]:
    """Rounds of tfdp's and timm's DeiT input, in turns (the order alternating); the ratios.

    timm's loader has one worker per core (``os.cpu_count()``); each side runs while the
    other is idle (tfdp's iterator dropped, timm's workers blocked on a full queue, which
    each side's warm-up batches drain before the timed ones).
    """
    missing = missing_reference()
    if missing:
        print(f"\ndeit_vs_timm: {', '.join(missing)} not installed, skipped")
        return {}
    workers = os.cpu_count() or 1
    half = GLOBAL_BATCH // REPLICAS
    warmup_timm = 2 * workers + 2  # DataLoader's queue: prefetch_factor 2 per worker
    print(
        f"\nDeiT's input (RandomResizedCrop bicubic + flip + RandAugment {DEIT_AUTO_AUGMENT} + "
        "colour jitter 0.3 as timm applies it (not next to RandAugment) + normalise + erasing "
        f"0.25 pixel + Mixup 0.8 / CutMix 1.0, Repeated Augmentation 3): tfdp ({REPLICAS} "
        f"replicas, global batch {GLOBAL_BATCH}) vs timm's create_loader ({workers} workers, "
        f"batch {half}, Mixup in the main process as DeiT), load average "
        f"{os.getloadavg()[0]:.2f}",
        flush=True,
    )
    inp = deit_input(strategy, root)
    t0 = time.perf_counter()
    deit_tfdp_window(strategy, inp, 0, 1, 1)  # tracing and XLA compilation, not timed
    print(f"  tfdp's first batches (tracing, XLA): {time.perf_counter() - t0:.1f}s", flush=True)
    timm = TimmLoader(root, workers)
    tfdp_runs, timm_runs = [], []
    try:
        for rnd in range(cfg["rounds"]):
            sides = ["tfdp", "timm"] if rnd % 2 == 0 else ["timm", "tfdp"]
            for side in sides:
                if side == "tfdp":
                    tfdp_runs.append(
                        deit_tfdp_window(strategy, inp, rnd + 1, cfg["warmup"], cfg["window"])
                    )
                else:
                    wait_idle()
                    r = timm.run(warmup_timm, cfg["window"] * REPLICAS)
                    timm_runs.append(
                        {"rate": r["images"] / r["wall"], "cpu_ms": r["cpu"] / r["images"] * 1e3}
                    )
            print(
                f"  round {rnd + 1}: images/s tfdp {tfdp_runs[-1]['rate']:.0f} "
                f"timm {timm_runs[-1]['rate']:.0f}  (load {os.getloadavg()[0]:.1f})",
                flush=True,
            )
    finally:
        timm.close()
    ratios = [a["rate"] / b["rate"] for a, b in zip(tfdp_runs, timm_runs, strict=True)]
    heads = {
        "deit_vs_timm": float(np.median(ratios)),
        "deit_images_per_s_tfdp": float(np.median([r["rate"] for r in tfdp_runs])),
        "deit_images_per_s_timm": float(np.median([r["rate"] for r in timm_runs])),
        "deit_cpu_ms_per_image_tfdp": float(np.median([r["cpu_ms"] for r in tfdp_runs])),
        "deit_cpu_ms_per_image_timm": float(np.median([r["cpu_ms"] for r in timm_runs])),
    }
    print(f"  load average at the end: {os.getloadavg()[0]:.2f}")
    ok = heads["deit_vs_timm"] >= DEIT_TARGET
    print(f"  target deit_vs_timm >= {DEIT_TARGET}: {'PASS' if ok else 'FAIL'} "
          f"({heads['deit_vs_timm']:.2f})", flush=True)  # fmt: skip
    return heads


#: tfdp's DeiT input against timm's loader, images/s (issue 26).
DEIT_TARGET = 1.5


# --------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument(
        "--quick", action="store_true", help="600 images, 3 short rounds, tfdp and Model Garden"
    )
    ap.add_argument("--folder", type=Path, help="use this image folder instead of making one")
    ap.add_argument("--rounds", type=int, help="rounds (default 7, quick 3)")
    ap.add_argument("--window", type=int, help="timed batches per round (default 20, quick 4)")
    ap.add_argument("--no-breakdown", action="store_true", help="skip the op breakdown")
    ap.add_argument("--no-deit", action="store_true", help="skip DeiT's input vs timm's")
    ap.add_argument("--deit-only", action="store_true", help="only DeiT's input vs timm's")
    ap.add_argument(
        "--held-out-only",
        action="store_true",
        help="only the held-out inputs: DeiT's Resize + CenterCrop against the centre crop "
        "before it (_held_out.py)",
    )
    ap.add_argument(
        "--speed-tricks-only",
        action="store_true",
        help="only the speed trick of the image input, on and off (_speed_tricks.py)",
    )
    ap.add_argument(
        "--conditions",
        choices=("all", "none", "only"),
        help="the conditions' part (busy core, TFRecords, end to end; _images_conditions.py): "
        "run it after the rounds (all), skip it (none), or run it alone (only); "
        "default: all, none with --quick (a quick run stays within a minute)",
    )
    ap.add_argument(
        "--kinds",
        default="folder,tfrecord",
        help="the conditions' sources, comma-separated: folder, tfrecord (default both; "
        "--conditions only --kinds tfrecord iterates on the TFRecord input alone)",
    )
    ap.add_argument(
        "--only-conditions",
        default="idle,busy,e2e",
        help="the conditions measured, comma-separated: idle, busy, e2e (default all)",
    )
    args = ap.parse_args(argv)
    args.kinds = tuple(k for k in args.kinds.split(",") if k)
    args.only_conditions = tuple(c for c in args.only_conditions.split(",") if c)
    for given, valid in (
        (args.kinds, ("folder", "tfrecord")),
        (args.only_conditions, ("idle", "busy", "e2e")),
    ):
        if not given or set(given) - set(valid):
            ap.error(f"expected a comma-separated subset of {', '.join(valid)}, got {given}")
    if args.conditions is None:
        args.conditions = "none" if args.quick else "all"
    cfg = dict(QUICK if args.quick else FULL)
    if args.rounds:
        cfg["rounds"] = args.rounds
    if args.window:
        cfg["window"] = args.window
    strategy = configure_devices()
    root = args.folder or photo_folder(cfg["images"])
    from tfdp.sources import ImageFolderSource

    src = ImageFolderSource(root)
    paths = [src.path(i) for i in range(src.num_examples)]
    labels = src.labels
    load = os.getloadavg()
    print(
        f"bench_images {_dt.datetime.now():%Y-%m-%d %H:%M}, {platform.node()}, "
        f"os.cpu_count()={os.cpu_count()}, Python {platform.python_version()}, "
        f"TensorFlow {tf.__version__}, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, "
        f"{CPU_ALLOCATOR_ENV}={os.environ.get(CPU_ALLOCATOR_ENV, '(unset)')}, "
        f"TFDP_SPEED_TRICKS={os.environ.get('TFDP_SPEED_TRICKS', '(unset)')}"
    )
    print(f"folder: {root}: {folder_stats(root)}")
    if args.conditions == "only":
        return conditions_part(strategy, root, paths, labels, args, {}, [])
    print(
        f"{REPLICAS} replicas (MirroredStrategy, logical CPUs), global batch {GLOBAL_BATCH}, "
        f"output {SIZE}x{SIZE}, {cfg['rounds']} rounds of {cfg['window']} batches after "
        f"{cfg['warmup']} warm-up batches",
        flush=True,
    )
    if args.held_out_only:  # the held-out inputs, and nothing else
        from _held_out import held_out_part

        for key, value in held_out_part(strategy, root, cfg, run_window, GLOBAL_BATCH).items():
            print(f"{key}: {value:.2f}")
        sys.stdout.flush()
        os._exit(0)
    if args.speed_tricks_only:  # the input's speed trick on and off, and nothing else
        from _speed_tricks import speed_tricks_part

        inputs = {
            "tfdp_ra": lambda: tfdp_input(strategy, root, "repeat_aug"),
            "deit": lambda: deit_input(strategy, root),
        }
        for key, value in speed_tricks_part(strategy, cfg, run_window, inputs).items():
            print(f"{key}: {value:.3f}")
        sys.stdout.flush()
        os._exit(0)
    if args.deit_only:  # DeiT's input vs timm's, and nothing else
        for key, value in deit_vs_timm(strategy, root, cfg).items():
            print(f"{key}: {value:.2f}")
        sys.stdout.flush()
        os._exit(0)
    ra = tfdp_input(strategy, root, "repeat_aug")
    plain = tfdp_input(strategy, root, "distributed")
    pipelines: dict[str, Callable[[int], object]] = {
        "tfdp_ra": lambda e: ra.epochs(e, None),
        "tfdp_plain": lambda e: plain.epochs(e, None),
        "model_garden": lambda e: strategy.distribute_datasets_from_function(
            per_example_dataset(model_garden_parse, paths, labels, e)
        ),
    }
    if not args.quick:
        pipelines["naive"] = lambda e: strategy.distribute_datasets_from_function(
            per_example_dataset(naive_parse, paths, labels, e)
        )
        old = tfdp_input(strategy, root, "repeat_aug", windows=False)
        pipelines["tfdp_per_example"] = lambda e: old.epochs(e, None)
    names = list(pipelines)
    results: dict[str, list[dict]] = {n: [] for n in names}
    t_start = time.perf_counter()
    for rnd in range(cfg["rounds"]):
        order = names[rnd % len(names) :] + names[: rnd % len(names)]
        for name in order:
            results[name].append(
                run_window(strategy, pipelines[name], rnd + 1, cfg["window"], cfg["warmup"])
            )
        line = "  ".join(f"{n} {results[n][-1]['rate']:.0f}" for n in names)
        print(f"round {rnd + 1}: images/s {line}  (load {os.getloadavg()[0]:.1f})", flush=True)
    load_end = os.getloadavg()

    def med(name: str, key: str, rounds: slice = slice(None)) -> float:
        return float(np.median([r[key] for r in results[name][rounds]]))

    def ratio(a: str, b: str, key: str = "rate", rounds: slice = slice(None)) -> float:
        return float(
            np.median(
                [
                    x[key] / y[key]
                    for x, y in zip(results[a][rounds], results[b][rounds], strict=True)
                ]
            )
        )

    print()
    print(
        f"{'pipeline':<18} {'images/s':>9} {'[min-max]':>13} {'CPU ms/img':>10} "
        f"{'vs MG':>6} {'first batch s':>14} {'cold s':>7} {'build s':>8} {'iterator s':>10} "
        f"{'faults/img':>10}"
    )
    for name in names:
        rates = [r["rate"] for r in results[name]]
        warm = slice(1, None) if len(results[name]) > 1 else slice(None)
        print(
            f"{name:<18} {np.median(rates):>9.0f} {min(rates):>6.0f}-{max(rates):<6.0f} "
            f"{med(name, 'cpu_ms'):>10.2f} {ratio(name, 'model_garden'):>5.2f}x "
            f"{med(name, 'first', warm):>14.2f} {results[name][0]['single_first']:>7.2f} "
            f"{med(name, 'build', warm):>8.2f} {med(name, 'iter', warm):>10.2f} "
            f"{med(name, 'faults'):>10.0f}"
        )
    print(
        f"(first batch: a new epoch's dataset built, its iterator created and its first batch "
        f"taken, median of {FIRST_SAMPLES} per round over rounds 2-{cfg['rounds']}; cold: "
        f"round 1, tracing included; build and iterator: the first two parts of the first batch)"
    )
    print(f"load average at the end: {load_end[0]:.2f} {load_end[1]:.2f} {load_end[2]:.2f}")
    print(f"wall time of the rounds: {time.perf_counter() - t_start:.0f}s", flush=True)

    boundary = typical = mg_boundary = mg_typical = float("nan")
    if not args.quick:
        boundary, typical = epoch_boundary(strategy, ra.epochs(100, None), ra.steps_per_epoch)
        mg_stream = pipelines["model_garden"](100)
        mg_boundary, mg_typical = epoch_boundary(strategy, mg_stream, len(paths) // GLOBAL_BATCH)
        for name, (b, t) in (
            ("tfdp_ra", (boundary, typical)),
            ("model_garden", (mg_boundary, mg_typical)),
        ):
            print(
                f"{name}, one stream over epochs: first batch of a new epoch {b * 1e3:.0f} ms "
                f"after the previous batch, median batch {t * 1e3:.0f} ms"
            )

    if not (args.quick or args.no_breakdown):
        try:  # possible only before TensorFlow's runtime starts
            tf.config.threading.set_intra_op_parallelism_threads(1)
            threads = "single-thread"
        except RuntimeError:
            threads = "process threads (TensorFlow already running)"
        print(f"\nbreakdown: {threads} CPU ms per image (best of 3 loops over 120 files)")
        for op, ms in breakdown(root).items():
            print(f"  {op:<66} {ms:>6.2f}")

    warm = slice(1, None) if cfg["rounds"] > 1 else slice(None)
    heads = {
        "ra_vs_model_garden": ratio("tfdp_ra", "model_garden"),
        "plain_vs_model_garden": ratio("tfdp_plain", "model_garden"),
        "first_batch_ra_vs_model_garden": ratio("tfdp_ra", "model_garden", "first", warm),
        "first_batch_plain_vs_model_garden": ratio("tfdp_plain", "model_garden", "first", warm),
        "cpu_ms_per_image_tfdp_ra": med("tfdp_ra", "cpu_ms"),
        "cpu_ms_per_image_tfdp_plain": med("tfdp_plain", "cpu_ms"),
        "cpu_ms_per_image_model_garden": med("model_garden", "cpu_ms"),
    }
    if "naive" in results:
        heads["naive_vs_model_garden"] = ratio("naive", "model_garden")
    if "tfdp_per_example" in results:
        heads["per_example_vs_model_garden"] = ratio("tfdp_per_example", "model_garden")
    if not args.quick:
        heads["epoch_boundary_batch_vs_median_batch_tfdp_ra"] = boundary / typical
        heads["first_batch_in_stream_ra_vs_model_garden"] = boundary / mg_boundary
    if not (args.no_deit or args.quick):  # --quick --deit-only: DeiT's part alone, quick
        heads.update(deit_vs_timm(strategy, root, cfg))
    print()
    checks = [
        ("ra_vs_model_garden", ">=", TARGETS["ra"]),
        ("plain_vs_model_garden", ">=", TARGETS["plain"]),
        ("first_batch_ra_vs_model_garden", "<=", TARGETS["first_batch"]),
        ("first_batch_plain_vs_model_garden", "<=", TARGETS["first_batch"]),
    ]
    if args.conditions == "all":
        return conditions_part(strategy, root, paths, labels, args, heads, checks)
    return headlines(heads, checks)


# --------------------------------------------------------------------------- conditions
def conditions_part(strategy, root, paths, labels, args, heads: dict, checks: list) -> int:
    """The conditions of ``_images_conditions`` (issue 27), their targets, then the headlines."""
    from _images_conditions import CONFIG, conditions

    print(f"\nconditions: {', '.join(args.only_conditions)}; {', '.join(args.kinds)}")
    cfg = CONFIG["quick" if args.quick else "full"]
    found = conditions(strategy, root, paths, labels, cfg, args.kinds, args.only_conditions)
    for key in found:
        if key.endswith(("_ra_vs_model_garden", "_plain_vs_model_garden")):
            flavour = "first_batch" if "_first_batch_" in key else key.split("_")[2]
            checks.append((key, "<=" if flavour == "first_batch" else ">=", TARGETS[flavour]))
    return headlines({**heads, **found}, checks)


def headlines(heads: dict[str, float], checks: list[tuple[str, str, float]]) -> int:
    """The targets' verdicts, then one ``name: value`` line per headline; exits the process."""
    print()
    for key, op, target in checks:
        ok = heads[key] >= target if op == ">=" else heads[key] <= target
        print(f"target {key} {op} {target}: {'PASS' if ok else 'FAIL'} ({heads[key]:.2f})")
    for key, value in heads.items():
        print(f"{key}: {value:.2f}")
    sys.stdout.flush()
    os._exit(0)  # skip the slow teardown of the dropped pipelines' threads


if __name__ == "__main__":
    sys.exit(main())
