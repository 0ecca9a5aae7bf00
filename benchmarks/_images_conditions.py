"""bench_images' conditions (issue 27): a core kept busy, TFRecord shards, end to end.

``bench_images.py`` measures its pipelines on an otherwise idle process. Real
training never has idle cores, so this module measures the same comparison
(tfdp's input against Model Garden's, RA and plain) in three conditions, for
the image folder and for ImageNet-format TFRecord shards:

* ``idle``: the rounds of ``bench_images.run_window`` as they are.
* ``busy``: the same rounds while one core is kept busy by a background
  process the bench starts and stops itself (:func:`busy_core`: a Python
  loop, ``nice`` 0, the same priority as the bench).
* ``e2e``: end to end, a small CNN trained by :class:`tfdp.train.Trainer` on
  the 2 replicas for a fixed number of steps, fed by each pipeline (images/s
  of training; one Trainer, so the same model, global batch and compiled step
  for every input; Model Garden's pipeline through
  ``strategy.distribute_datasets_from_function``, as :class:`ModelGardenInput`).

TFRecords: ``write_imagenet_shards`` writes the folder's JPEG bytes, unchanged,
as ImageNet-format ``tf.train.Example`` records (``image/encoded``,
``image/format``, ``image/class/label``, ``image/height``, ``image/width``)
into 16 shards with ``tf.io.TFRecordWriter`` -- not with tfdp's writer, so no
tfdp manifest exists. tfdp reads them with ``TFRecordSource(features=...,
decode=..., images="encoded")``; Model Garden's TFRecord input is transcribed
from ``official/core/input_reader.py`` (shuffled file list, ``interleave`` of
``TFRecordDataset`` with ``cycle_length`` 16, ``shuffle`` of records, parse
per example, ``decode_and_crop_jpeg`` as in ``bench_images.model_garden_parse``).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from tfdp._compat.fast.process import release_in_background

#: Rounds, timed batches (training steps) and warm-up per measurement, fresh datasets' first
#: batches per round, for each mode. The quick folder's epoch is 4 steps: a window of 8
#: covers two epoch starts of every pipeline (a TFRecord stream's cost is at its epoch starts).
CONFIG = {
    "quick": {"rounds": 2, "window": 8, "warmup": 2, "firsts": 1, "train_steps": 8},
    "full": {"rounds": 5, "window": 12, "warmup": 3, "firsts": 3, "train_steps": 12},
}
#: The sources and the conditions measured (bench_images' --kinds and --only-conditions pick).
KINDS = ("folder", "tfrecord")
CONDITIONS = ("idle", "busy", "e2e")
SHARDS = 16
CYCLE_LENGTH = 16
FEATURES = {
    "image/encoded": tf.io.FixedLenFeature([], tf.string),
    "image/class/label": tf.io.FixedLenFeature([], tf.int64),
}


# --------------------------------------------------------------------------- busy core
@contextlib.contextmanager
def busy_core() -> Iterator[int]:
    """One core kept busy by a child process for the duration (its pid is yielded)."""
    child = subprocess.Popen(
        [sys.executable, "-c", "while True: pass"],
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        time.sleep(0.3)  # running before the first measurement
        yield child.pid
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()


# --------------------------------------------------------------------------- TFRecords
def write_imagenet_shards(paths: list[str], labels: np.ndarray, out: Path) -> list[str]:
    """The files' bytes as ImageNet-format records in ``SHARDS`` shards (cached under ``out``)."""
    files = [str(out / f"train-{i:05d}-of-{SHARDS:05d}") for i in range(SHARDS)]
    done = out / ".complete"
    if done.exists():
        return files
    out.mkdir(parents=True, exist_ok=True)
    order = np.random.default_rng(0).permutation(len(paths))  # shards mix the classes
    for shard, chunk in enumerate(np.array_split(order, SHARDS)):
        with tf.io.TFRecordWriter(files[shard]) as writer:
            for i in chunk:
                data = Path(paths[i]).read_bytes()
                h, w, _ = (int(v) for v in tf.image.extract_jpeg_shape(data).numpy())
                feature = {
                    "image/encoded": _bytes(data),
                    "image/format": _bytes(b"jpeg"),
                    "image/class/label": _int(int(labels[i])),
                    "image/height": _int(h),
                    "image/width": _int(w),
                }
                example = tf.train.Example(features=tf.train.Features(feature=feature))
                writer.write(example.SerializeToString())
    done.write_text(f"{len(paths)}\n")
    return files


def _bytes(value: bytes) -> tf.train.Feature:
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))


def _int(value: int) -> tf.train.Feature:
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))


def tfrecord_source(files: list[str]) -> Any:
    """tfdp's reading of the shards: explicit features, the JPEG bytes kept encoded."""
    from tfdp.sources import TFRecordSource

    def decode(parsed: dict[str, tf.Tensor]) -> tuple[tf.Tensor, tf.Tensor]:
        return parsed["image/encoded"], tf.cast(parsed["image/class/label"], tf.int32)

    return TFRecordSource(files, features=FEATURES, decode=decode, images="encoded")


def model_garden_tfrecord_dataset(
    files: list[str], parse_bytes: Callable, global_batch: int, shuffle: int
) -> Callable[[int], Callable]:
    """Model Garden's input_reader over the shards: ``epoch -> dataset_fn``."""

    def make(epoch: int) -> Callable:
        def dataset_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
            ds = tf.data.Dataset.from_tensor_slices(files)
            ds = ds.shuffle(len(files), seed=epoch, reshuffle_each_iteration=True).repeat()
            ds = ds.interleave(
                tf.data.TFRecordDataset,
                cycle_length=CYCLE_LENGTH,
                num_parallel_calls=tf.data.AUTOTUNE,
                deterministic=False,
            )
            ds = ds.shuffle(shuffle, seed=epoch)

            def parse(record: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
                parsed = tf.io.parse_single_example(record, FEATURES)
                return parse_bytes(parsed["image/encoded"], parsed["image/class/label"])

            ds = ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE)
            ds = ds.batch(ctx.get_per_replica_batch_size(global_batch), drop_remainder=True)
            return ds.prefetch(tf.data.AUTOTUNE)

        return dataset_fn

    return make


# --------------------------------------------------------------------------- end to end
def small_cnn(classes: int, size: int) -> Any:
    """A small CNN: strided convolutions, so the step costs a fraction of the input."""
    import keras

    return keras.Sequential(
        [
            keras.Input((size, size, 3)),
            keras.layers.Conv2D(16, 7, strides=4, activation="relu"),
            keras.layers.Conv2D(32, 3, strides=2, activation="relu"),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(classes),
        ]
    )


class ModelGardenInput:
    """Model Garden's pipeline as the training input :class:`tfdp.train.Trainer` reads.

    ``Trainer.fit`` reads its input through what :class:`tfdp.DistributedInput`
    offers: the strategy, the batch sizes, the steps of an epoch and one stream
    of epochs. Here the stream is Model Garden's per-worker datasets through
    ``strategy.distribute_datasets_from_function`` (endless: repeated and
    reshuffled by its own seed); an epoch is the full global batches of the
    examples.
    """

    return_ids = False
    seed = 0
    source = None

    def __init__(
        self,
        strategy: tf.distribute.Strategy,
        dataset_fn: Callable[[int], Callable],
        num_examples: int,
        global_batch: int,
    ) -> None:
        self.strategy, self._dataset_fn = strategy, dataset_fn
        self.global_batch_size = global_batch
        self.num_replicas = strategy.num_replicas_in_sync
        self.batch_size = global_batch // self.num_replicas
        self.steps_per_epoch = num_examples // global_batch

    def epoch_steps(self, epoch: int) -> int:
        return self.steps_per_epoch

    def check_permutation_agreement(self, epoch: int) -> None:
        """One process: nothing to agree on."""

    def epochs(
        self, first_epoch: int = 0, num_epochs: int | None = None, start_step: int = 0
    ) -> Any:
        return self.strategy.distribute_datasets_from_function(self._dataset_fn(first_epoch))


class Training:
    """One :class:`tfdp.train.Trainer` of a small CNN, fed by every input in turn.

    The same model, optimizer and global batch for every input: each
    measurement continues the same training (its epochs and steps) on another
    input, so every input is read by the same compiled step.
    """

    def __init__(self, strategy: tf.distribute.Strategy, classes: int, size: int) -> None:
        import keras

        from tfdp.train import Trainer

        self.trainer = Trainer(
            strategy,
            lambda: small_cnn(classes, size),
            lambda: keras.optimizers.SGD(0.01, momentum=0.9),
            "sparse_categorical_crossentropy_from_logits",
            progress=False,
            verbose=0,
        )

    def rate(
        self, train_input: Any, steps: int, warmup: int, global_batch: int
    ) -> dict[str, float]:
        """Images/s of ``Trainer.fit`` on ``train_input`` over ``steps`` steps after ``warmup``.

        Timed from the end of the ``warmup``-th step to the end of the last one
        (``on_step``, called after every step); CPU ms per image likewise. The
        Trainer hands its stream to ``release_in_background`` when ``fit`` ends.
        """
        from bench_images import cpu_seconds, wait_idle

        wait_idle()
        state = self.trainer.state
        first, marks = state.global_step, {}

        def on_step(now: Any) -> None:
            if now.global_step - first in (warmup, warmup + steps):
                marks[now.global_step - first] = (time.perf_counter(), cpu_seconds())

        self.trainer.fit(
            train_input, epochs=10**6, max_steps=first + warmup + steps, on_step=on_step
        )
        (t0, c0), (t1, c1) = marks[warmup], marks[warmup + steps]
        images = steps * global_batch
        return {"rate": images / (t1 - t0), "cpu_ms": (c1 - c0) / images * 1e3}


# --------------------------------------------------------------------------- rounds
def epochs_of(train_input: Any) -> Callable[[int], Any]:
    """``epoch -> distributed dataset`` of an input: its endless stream from that epoch on."""
    return lambda epoch: train_input.epochs(epoch, None)


def cold_start(strategy: tf.distribute.Strategy, train_input: Any, epoch: int) -> float:
    """Seconds to a pipeline's first dataset's first batch, from an idle process (untimed)."""
    from bench_images import touch, wait_idle

    wait_idle()
    t0 = time.perf_counter()
    dds = train_input.epochs(epoch, None)
    it = iter(dds)
    touch(strategy, next(it))
    seconds = time.perf_counter() - t0
    held = [it, dds]
    del it, dds
    release_in_background(held)
    return seconds


def run_rounds(
    pipelines: dict[str, Callable[[], dict[str, float]]], rounds: int, label: str
) -> dict[str, list[dict[str, float]]]:
    """``rounds`` rounds over the pipelines (order rotating), each entry a measurement dict."""
    names = list(pipelines)
    results: dict[str, list[dict[str, float]]] = {n: [] for n in names}
    for rnd in range(rounds):
        order = names[rnd % len(names) :] + names[: rnd % len(names)]
        for name in order:
            results[name].append(pipelines[name]())
        load = os.getloadavg()[0]
        for name in names:
            results[name][-1]["load"] = load
        line = "  ".join(f"{n} {results[n][-1]['rate']:.0f}" for n in names)
        print(f"  {label} round {rnd + 1}: images/s {line}  (load {load:.1f})", flush=True)
    return results


def ratio(results: dict[str, list[dict]], a: str, b: str, key: str = "rate") -> float:
    """The median over rounds of the per-round ratio ``a / b``."""
    return float(np.median([x[key] / y[key] for x, y in zip(results[a], results[b], strict=True)]))


def conditions(
    strategy: tf.distribute.Strategy,
    root: Path,
    paths: list[str],
    labels: np.ndarray,
    cfg: dict[str, int],
    kinds: tuple[str, ...] = KINDS,
    conds: tuple[str, ...] = CONDITIONS,
) -> dict[str, float]:
    """The conditions ``conds`` for the sources ``kinds``; returns the headline ratios."""
    import bench_images as bi

    files = write_imagenet_shards(
        paths, labels, Path("/tmp/tfdp_bench_images") / f"imagenet-tfrecords-{root.name}"
    )
    mg_folder = lambda e: bi.per_example_dataset(bi.model_garden_parse, paths, labels, e)  # noqa: E731
    mg_records = model_garden_tfrecord_dataset(files, _parse_bytes(bi), bi.GLOBAL_BATCH, bi.SHUFFLE)
    records = tfrecord_source(files)
    # Each pipeline as what Trainer.fit reads (end to end); its datasets (the other conditions)
    # are its epochs(e, None).
    inputs: dict[str, dict[str, Any]] = {}
    for kind, source, mg in (("folder", None, mg_folder), ("tfrecord", records, mg_records)):
        if kind not in kinds:
            continue
        inputs[kind] = {
            "tfdp_ra": bi.tfdp_input(strategy, root, "repeat_aug", source=source),
            "tfdp_plain": bi.tfdp_input(strategy, root, "distributed", source=source),
            "model_garden": ModelGardenInput(strategy, mg, len(paths), bi.GLOBAL_BATCH),
        }
    training = Training(strategy, int(np.max(labels)) + 1, bi.SIZE)
    heads: dict[str, float] = {}
    table = []
    epoch = itertools.count(1000)  # a new sampler epoch for every dataset
    for kind, pipes in inputs.items():
        if set(conds) - {"e2e"}:
            # Each pipeline's first dataset (tracing its functions) is started once, untimed,
            # as the main comparison leaves its round 1 out of the first batches: otherwise
            # round 1's single first batch of tfdp's new inputs would be a cold start.
            colds = {name: cold_start(strategy, inp, next(epoch)) for name, inp in pipes.items()}
            line = "  ".join(f"{n} {s:.2f}" for n, s in colds.items())
            print(f"  {kind} cold start (untimed in the rounds): first batch s {line}", flush=True)
        for cond in conds:

            def measure(inp: Any, cond: str = cond) -> Callable[[], dict]:
                if cond == "e2e":
                    return lambda: training.rate(
                        inp, cfg["train_steps"], cfg["warmup"], bi.GLOBAL_BATCH
                    )
                return lambda: bi.run_window(
                    strategy, epochs_of(inp), next(epoch), cfg["window"], cfg["warmup"],
                    cfg["firsts"],
                )  # fmt: skip

            runs = {name: measure(inp) for name, inp in pipes.items()}
            with busy_core() if cond == "busy" else contextlib.nullcontext():
                res = run_rounds(runs, cfg["rounds"], f"{kind} {cond}")
            for flavour in ("ra", "plain"):
                value = ratio(res, f"tfdp_{flavour}", "model_garden")
                heads[f"{kind}_{cond}_{flavour}_vs_model_garden"] = value
            if cond != "e2e":
                for flavour in ("ra", "plain"):
                    heads[f"{kind}_{cond}_first_batch_{flavour}_vs_model_garden"] = ratio(
                        res, f"tfdp_{flavour}", "model_garden", "first"
                    )
            loads = [r["load"] for r in res["model_garden"]]
            table.append((kind, cond, res, loads))
    print()
    print(
        f"{'source':<9} {'condition':<9} {'RA vs MG':>9} {'plain vs MG':>12} "
        f"{'MG img/s':>9} {'1st RA/MG':>10} {'1st plain/MG':>13}  load per round"
    )
    for kind, cond, res, loads in table:
        first = (
            f"{ratio(res, 'tfdp_ra', 'model_garden', 'first'):>9.2f}x "
            f"{ratio(res, 'tfdp_plain', 'model_garden', 'first'):>12.2f}x"
            if cond != "e2e"
            else f"{'-':>10} {'-':>13}"
        )
        print(
            f"{kind:<9} {cond:<9} {ratio(res, 'tfdp_ra', 'model_garden'):>8.2f}x "
            f"{ratio(res, 'tfdp_plain', 'model_garden'):>11.2f}x "
            f"{np.median([r['rate'] for r in res['model_garden']]):>9.0f} {first}  "
            + " ".join(f"{v:.1f}" for v in loads)
        )
    print(
        "(idle: the process alone; busy: one core kept busy by a child process; e2e: images/s "
        "of Trainer.fit training a small CNN; ratios: medians of per-round ratios)",
        flush=True,
    )
    return heads


def _parse_bytes(bi: Any) -> Callable:
    """Model Garden's parse of the image bytes (bench_images' transcription, bytes in)."""

    def parse(image_bytes: tf.Tensor, label: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        return bi.model_garden_parse_bytes(image_bytes, label)

    return parse
