"""bench_images.py's held-out part: DeiT's held-out transform against the centre crop it replaced.

``tfdp train`` evaluates image folders (``--augment resized-crop``) with DeiT's
``Resize(int(224 / 0.875))`` + ``CenterCrop(224)``, resampled where PIL samples
(``augment.ResizeCenterCrop``: bicubic, low-pass filtered, a window of the pixels the
filter reads); before issue 35 it used ``augment.CenterCrop(224)`` (the whole-pixel
centre window, stretched, bilinear without the filter). Three held-out inputs of the same
folder, each ``DistributedInput(strategy, ImageFolderSource(root), sampler="eval",
global_batch_size=128)`` on the window path, the crop then ``ToFloat`` and ``Normalize``:

* ``resize_center_crop``: DeiT's transform, as ``tfdp train`` builds it now;
* ``center_crop``: the crop before it (bilinear, no filter);
* ``center_crop_bicubic``: that whole-pixel window with the same filter as DeiT's
  (bicubic, antialiased), so the cost of the placement alone shows.

Rounds as bench_images.py's (``run_window``: fresh datasets' first batches, then a timed
window; the order rotates, each pipeline timed while the others are idle). A closing
breakdown times each crop's own work per image -- the window's decode, then its resize -- in
one graph loop over 48 files (process CPU ms per image, best of 3), steadier than the
pipelines' rates on a loaded machine. Run with
``python benchmarks/bench_images.py --quick --held-out-only``.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np


def _crops() -> dict:
    from tfdp import augment

    return {
        "resize_center_crop": augment.ResizeCenterCrop(224, 0.875),
        "center_crop": augment.CenterCrop(224),
        "center_crop_bicubic": augment.CenterCrop(224, 0.875, "bicubic", antialias=True),
    }


def held_out_inputs(strategy, root: Path, batch: int) -> dict:
    """The three held-out inputs of ``root`` (see the module docstring)."""
    from tfdp import augment
    from tfdp.input import DistributedInput
    from tfdp.sources import ImageFolderSource
    from tfdp.windows.loader import WindowedBatches

    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    out = {}
    for name, crop in _crops().items():
        inp = DistributedInput(
            strategy,
            ImageFolderSource(root),
            sampler="eval",
            global_batch_size=batch,
            augment=augment.Compose([crop, augment.ToFloat(), augment.Normalize(mean, std)]),
        )
        assert isinstance(inp.loader, WindowedBatches)
        out[name] = inp
    return out


def held_out_part(strategy, root: Path, cfg: dict, run_window, batch: int) -> dict[str, float]:
    """Rounds over the three inputs; prints each round; returns the headline figures."""
    inputs = held_out_inputs(strategy, root, batch)
    names = list(inputs)
    results: dict[str, list[dict]] = {n: [] for n in names}
    for rnd in range(cfg["rounds"]):
        order = names[rnd % len(names) :] + names[: rnd % len(names)]
        for name in order:
            inp = inputs[name]
            results[name].append(
                run_window(
                    strategy,
                    lambda e, inp=inp: inp.epochs(e, None),
                    rnd + 1,
                    cfg["window"],
                    cfg["warmup"],
                )
            )
        line = "  ".join(f"{n} {results[n][-1]['rate']:.0f}" for n in names)
        print(f"round {rnd + 1}: images/s {line}  (load {os.getloadavg()[0]:.1f})", flush=True)
    print(f"{'held-out input':<22} {'images/s':>9} {'cpu ms/img':>11} {'first batch s':>14}")
    for name in names:
        rate = np.median([r["rate"] for r in results[name]])
        cpu = np.median([r["cpu_ms"] for r in results[name]])
        first = np.median([r["first"] for r in results[name]])
        print(f"{name:<22} {rate:>9.0f} {cpu:>11.2f} {first:>14.3f}")

    print(f"{'per image, one loop':<22} {'decode ms':>9} {'resize ms':>11}")
    for name, (decode, resize) in breakdown(root).items():
        print(f"{name:<22} {decode:>9.2f} {resize:>11.2f}")

    def ratio(a: str, b: str, key: str) -> float:
        pairs = zip(results[a], results[b], strict=True)
        return float(np.median([x[key] / y[key] for x, y in pairs]))

    return {
        "held_out_rate_vs_center_crop": ratio("resize_center_crop", "center_crop", "rate"),
        "held_out_cpu_vs_center_crop": ratio("resize_center_crop", "center_crop", "cpu_ms"),
        "held_out_rate_vs_center_crop_bicubic": ratio(
            "resize_center_crop", "center_crop_bicubic", "rate"
        ),
    }


def breakdown(root: Path, count: int = 48) -> dict[str, tuple[float, float]]:
    """Each crop's window decode and resize: CPU ms per image in one graph loop (best of 3)."""
    import resource

    import tensorflow as tf

    def cpu() -> float:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    files = sorted(root.glob("*/*.JPEG"))[:count]
    datas = tf.constant([f.read_bytes() for f in files])
    shapes = np.stack([tf.image.extract_jpeg_shape(d).numpy()[:2] for d in datas])
    out = {}
    for name, crop in _crops().items():
        params = np.zeros([count, 0], np.float32)
        boxes = tf.constant(crop.host_windows(shapes, params))
        places = tf.constant(crop.host_placements(shapes, params) if crop.placed else params)

        def loop(resize: bool, crop=crop, boxes=boxes, places=places) -> tf.Tensor:
            def body(i: tf.Tensor, acc: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
                window = tf.io.decode_and_crop_jpeg(datas[i], boxes[i], channels=3)
                if resize:
                    window = crop.resize(window, places[i]) if crop.placed else crop.resize(window)
                return i + 1, acc + tf.cast(window[0, 0, 0], tf.float32)

            return tf.while_loop(lambda i, _: i < count, body, (0, 0.0), parallel_iterations=1)[1]

        times = []
        for resize in (False, True):
            fn = tf.function(lambda resize=resize, loop=loop: loop(resize), autograph=False)
            fn()
            best = float("inf")
            for _ in range(3):
                c0 = cpu()
                fn()
                best = min(best, (cpu() - c0) / count * 1e3)
            times.append(best)
        out[name] = (times[0], times[1] - times[0])
    return out
