"""Benchmark training on GPUs: DeiT-S and ResNet-50 images/s, tfdp against Keras ``fit``.

Where TensorFlow sees a GPU, every local GPU trains under one ``MirroredStrategy``, in mixed
precision (``mixed_float16``), on a folder of photo-like JPEGs (``tests/photos.py`` at
ImageNet's sizes, cached under ``/tmp`` by ``bench_images.photo_folder``), at 224:

* ``fit``: Keras ``model.fit`` on a plain ``tf.data`` input -- TF Model Garden's ImageNet
  training input as ``bench_images.py`` transcribes it (per example, in a parallel map:
  ``sample_distorted_bounding_box`` + ``decode_and_crop_jpeg``, flip, bilinear resize,
  normalisation; ``shuffle``, ``repeat``, ``batch``, ``prefetch``);
* ``tfdp``: :class:`tfdp.train.Trainer` on tfdp's input (:class:`tfdp.DistributedInput` over
  :class:`tfdp.sources.ImageFolderSource`: the window path, torch's sampler) with the same
  augmentation (RandomResizedCrop, flip, normalisation);
* ``tfdp_deit`` (DeiT-S only): the Trainer on DeiT's whole input (Repeated Augmentation 3,
  bicubic RandomResizedCrop, RandAugment ``rand-m9-mstd0.5-inc1``, erasing, Mixup / CutMix:
  ``bench_images.deit_augment``), the training DeiT's recipe asks of the CPUs;

each with and without XLA (``jit_compile``), so that the faster one is known (``fit``:
``model.compile(jit_compile=...)``; tfdp: ``Trainer(jit_compile=...)``). The models:
``deit_small_patch16_224`` (:func:`tfdp.models.vision_transformer`) with torch's AdamW (DeiT's
rate rule, decay 0.05), ``keras.applications.ResNet50`` (random weights, logits) with torch's
SGD (momentum 0.9, 0.1 x batch / 256, decay 1e-4); the same optimizer classes on both paths.

How it measures. Each variant keeps its own model and training; rounds visit every variant
in turn (the order rotating); a visit trains ``warmup`` steps, then ``steps`` timed ones
(images/s, and the process's CPU seconds per image); medians over rounds. Then tfdp's inputs
alone (``tfdp`` and ``tfdp_deit``: the CPU seconds per image of reading, decoding and
augmenting, every core free): at the GPUs' training rate, the CPU cores tfdp's input needs
per GPU = images/s per GPU x CPU seconds per image.

On a machine where TensorFlow sees no GPU it says so in one line and exits 0.
``--cpu-smoke`` runs every code path on the CPU at tiny sizes (32x32, batch 4, 2 steps, a
folder of 64 small JPEGs): to check the script, not to measure.

Usage:
    python benchmarks/bench_gpu.py              # per GPU: DeiT-S batch 128, ResNet-50 256
    python benchmarks/bench_gpu.py --quick      # one round of 10 steps, no XLA variants
    python benchmarks/bench_gpu.py --cpu-smoke  # the code paths on a CPU (~6 min: XLA compiles)

The headline figures come last, one ``name: value`` per line.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import glob
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

#: Per-GPU batch of each model (DeiT: 128 per GPU fits DeiT-S in 16-bit on 16 GB and more).
BATCH = {"deit_small": 128, "resnet50": 256}
FULL = {"rounds": 3, "warmup": 10, "steps": 40, "xla": (False, True), "images": 3000}
QUICK = {"rounds": 1, "warmup": 5, "steps": 10, "xla": (False,), "images": 600}
SMOKE = {"rounds": 2, "warmup": 1, "steps": 2, "xla": (False, True), "images": 64}


def gpu_driver_present() -> bool:
    """An NVIDIA device node or ``nvidia-smi``: worth loading TensorFlow to look."""
    return bool(glob.glob("/dev/nvidia[0-9]*")) or shutil.which("nvidia-smi") is not None


def build_model(name: str, size: int, classes: int) -> Any:
    import keras

    if name == "deit_small":
        from tfdp.models import vision_transformer

        return vision_transformer("deit_small_patch16_224", (size, size, 3), classes)
    return keras.applications.ResNet50(
        weights=None, input_shape=(size, size, 3), classes=classes, classifier_activation=None
    )


def build_optimizer(name: str, global_batch: int) -> Any:
    from tfdp.optim import TorchAdamW, TorchSGD

    if name == "deit_small":
        return TorchAdamW(5e-4 * global_batch / 512, weight_decay=0.05)
    return TorchSGD(0.1 * global_batch / 256, momentum=0.9, weight_decay=1e-4)


class Variant:
    """One model trained one way; ``visit(warmup, steps)`` continues its training, timed."""

    name: str

    def visit(self, warmup: int, steps: int) -> dict[str, float]:
        raise NotImplementedError


class FitVariant(Variant):
    """Keras ``model.fit`` on the plain ``tf.data`` input."""

    def __init__(self, strategy, bi, model: str, size: int, batch: int, xla: bool, files):
        import keras
        import tensorflow as tf

        self.name = f"{model}/fit" + ("+xla" if xla else "")
        self.batch = batch
        paths, labels = files
        ds = tf.data.Dataset.from_tensor_slices((paths, labels))
        ds = ds.shuffle(10_000).repeat().map(bi.model_garden_parse, tf.data.AUTOTUNE)
        self.dataset = ds.batch(batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
        with strategy.scope():
            self.model = build_model(model, size, int(labels.max()) + 1)
            self.model.compile(
                optimizer=build_optimizer(model, batch),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                jit_compile=xla,
            )

    def visit(self, warmup: int, steps: int) -> dict[str, float]:
        import keras

        from bench_images import cpu_seconds

        marks: dict[int, tuple[float, float]] = {}

        class Marks(keras.callbacks.Callback):
            def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
                if batch + 1 in (warmup, warmup + steps):
                    marks[batch + 1] = (time.perf_counter(), cpu_seconds())

        self.model.fit(self.dataset, epochs=1, steps_per_epoch=warmup + steps, verbose=0,
                       callbacks=[Marks()])  # fmt: skip
        return _rate(marks, warmup, steps, self.batch)


class TrainerVariant(Variant):
    """:class:`tfdp.train.Trainer` on tfdp's input (``deit``: DeiT's whole augmentation)."""

    def __init__(self, strategy, bi, model: str, size: int, batch: int, xla: bool, root,
                 classes: int, deit: bool):  # fmt: skip
        from tfdp.recipe import TrainConfig
        from tfdp.recipe.model import training_loss
        from tfdp.train import Trainer

        self.name = f"{model}/tfdp" + ("_deit" if deit else "") + ("+xla" if xla else "")
        self.batch = batch
        if deit:
            from tfdp.input import DistributedInput
            from tfdp.sources import ImageFolderSource

            self.input = DistributedInput(
                strategy, ImageFolderSource(root), sampler="repeat_aug",
                sampler_options={"num_repeats": 3, "selected_round": 0},
                global_batch_size=batch, augment=bi.deit_augment(classes),
            )  # fmt: skip
            loss = training_loss(TrainConfig(mixup=0.8, cutmix=1.0, smoothing=0.1), classes)
        else:
            bi.GLOBAL_BATCH = batch
            self.input = bi.tfdp_input(strategy, root, "distributed")
            loss = training_loss(TrainConfig(), classes)
        self.trainer = Trainer(
            strategy,
            lambda: build_model(model, size, classes),
            lambda: build_optimizer(model, batch),
            loss,
            mixed_precision="mixed_float16",
            jit_compile=xla,
            progress=False,
            verbose=0,
        )

    def visit(self, warmup: int, steps: int) -> dict[str, float]:
        from bench_images import cpu_seconds

        first, marks = self.trainer.state.global_step, {}

        def on_step(state: Any) -> None:
            if state.global_step - first in (warmup, warmup + steps):
                marks[state.global_step - first] = (time.perf_counter(), cpu_seconds())

        self.trainer.fit(self.input, epochs=10**6, max_steps=first + warmup + steps,
                         on_step=on_step)  # fmt: skip
        return _rate(marks, warmup, steps, self.batch)


def _rate(marks: dict, warmup: int, steps: int, batch: int) -> dict[str, float]:
    (t0, c0), (t1, c1) = marks[warmup], marks[warmup + steps]
    images = steps * batch
    return {"rate": images / (t1 - t0), "cpu_ms": (c1 - c0) / images * 1e3}


def input_cpu_ms(variant: TrainerVariant, batches: int) -> float:
    """CPU ms per image of a Trainer variant's input alone (every core free)."""
    from bench_images import cpu_seconds, wait_idle

    wait_idle()
    it = iter(variant.input.epochs(10**5, None))
    next(it)
    c0 = cpu_seconds()
    for _ in range(batches):
        next(it)
    return (cpu_seconds() - c0) / (batches * variant.batch) * 1e3


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--quick", action="store_true", help="one round of 10 steps, no XLA")
    ap.add_argument("--cpu-smoke", action="store_true",
                    help="every code path on the CPU at tiny sizes (no figures)")  # fmt: skip
    ap.add_argument("--models", nargs="+", choices=sorted(BATCH), default=sorted(BATCH))
    args = ap.parse_args(argv)
    if not args.cpu_smoke and not gpu_driver_present():
        print("bench_gpu: no GPU on this machine (no NVIDIA device or nvidia-smi): nothing "
              "measured; --cpu-smoke runs the code paths on the CPU")  # fmt: skip
        return 0
    from tfdp._compat.fast.process import prefer_bfc_cpu_allocator

    prefer_bfc_cpu_allocator(os.environ)
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if not gpus and not args.cpu_smoke:
        print("bench_gpu: TensorFlow sees no GPU (a CPU build, or no CUDA libraries: pip "
              "install 'tensorflow[and-cuda]'): nothing measured")  # fmt: skip
        return 0
    import numpy as np

    import bench_images as bi

    cfg = SMOKE if args.cpu_smoke else QUICK if args.quick else FULL
    size = 32 if args.cpu_smoke else 224
    bi.SIZE = size  # bench_images' pipelines and DeiT augmentation read their size here
    strategy = tf.distribute.MirroredStrategy()
    n = strategy.num_replicas_in_sync
    if args.cpu_smoke:
        from photos import write_folder

        root = Path("/tmp/tfdp_bench_gpu_smoke")
        if not (root / ".complete").exists():
            write_folder(root, cfg["images"], classes=4, sizes=((40, 48), (48, 40)))
            (root / ".complete").write_text("done\n")
    else:
        root = bi.photo_folder(cfg["images"])
    files = sorted(root.glob("*/*.JPEG"))
    classes = sorted({f.parent.name for f in files})
    labels = np.array([classes.index(f.parent.name) for f in files], np.int32)
    paths = [str(f) for f in files]
    devices = ", ".join(d.name for d in gpus) or "the CPU (--cpu-smoke)"
    print(f"bench_gpu {_dt.datetime.now():%Y-%m-%d %H:%M}: {n} replica(s) on {devices}; "
          f"{bi.folder_stats(root)}; {os.cpu_count()} CPU cores; load average "
          f"{os.getloadavg()[0]:.2f}; {cfg}", flush=True)  # fmt: skip
    import keras

    keras.mixed_precision.set_global_policy("mixed_float16")  # fit's models; the Trainer's own
    variants: list[Variant] = []
    for model in args.models:
        batch = (4 if args.cpu_smoke else BATCH[model]) * n
        for xla in cfg["xla"]:
            variants.append(FitVariant(strategy, bi, model, size, batch, xla, (paths, labels)))
            kinds = (False, True) if model == "deit_small" else (False,)
            for deit in kinds:
                variants.append(TrainerVariant(strategy, bi, model, size, batch, xla, root,
                                               len(classes), deit))  # fmt: skip
    rows: dict[str, list[dict]] = {v.name: [] for v in variants}
    for rnd in range(cfg["rounds"]):
        for i in range(len(variants)):
            v = variants[(i + rnd) % len(variants)]
            t0 = time.perf_counter()
            r = v.visit(cfg["warmup"], cfg["steps"])
            rows[v.name].append(r)
            print(f"  round {rnd + 1} {v.name:28s} {r['rate']:9.1f} images/s "
                  f"{r['cpu_ms']:7.3f} CPU ms/image  ({time.perf_counter() - t0:.0f}s)",
                  flush=True)  # fmt: skip
    rate = {name: float(np.median([r["rate"] for r in rs])) for name, rs in rows.items()}
    heads: dict[str, float] = {}
    for model in args.models:
        fit = max(rate[k] for k in rate if k.startswith(f"{model}/fit"))
        tfdp = max(rate[k] for k in rate if k.startswith(f"{model}/tfdp") and "_deit" not in k)
        heads[f"{model}_images_per_s_per_gpu_fit"] = fit / n
        heads[f"{model}_images_per_s_per_gpu_tfdp"] = tfdp / n
        heads[f"{model}_tfdp_vs_fit"] = tfdp / fit
        for v in variants:
            if not isinstance(v, TrainerVariant) or not v.name.startswith(model):
                continue
            if "+xla" in v.name:
                continue  # the same input as its XLA twin
            ms = input_cpu_ms(v, 2 if args.cpu_smoke else 20)
            kind = "deit_input" if "_deit" in v.name else "input"
            best = max(rate[k] for k in rate if k.startswith(v.name)) / n
            heads[f"{model}_tfdp_{kind}_cpu_ms_per_image"] = ms
            heads[f"{model}_tfdp_{kind}_cores_per_gpu"] = best * ms / 1e3
            print(
                f"  {v.name}: the input alone {ms:.2f} CPU ms/image: at {best:.0f} images/s "
                f"per GPU it needs {best * ms / 1e3:.1f} CPU cores per GPU",
                flush=True,
            )
    print(f"  load average at the end {os.getloadavg()[0]:.2f}")
    if args.cpu_smoke:
        print("(--cpu-smoke: the code paths ran on a CPU at tiny sizes; not a measurement)")
    print()
    for key, value in heads.items():
        print(f"{key}: {value:.2f}")
    sys.stdout.flush()
    os._exit(0)  # skip the slow teardown of TensorFlow's pipelines


if __name__ == "__main__":
    sys.exit(main())
