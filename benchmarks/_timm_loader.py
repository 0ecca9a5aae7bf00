"""timm's side of bench_images.py's DeiT comparison: DeiT's training input, in a process of its own.

Importing torchvision (which timm does) in a process that has loaded TensorFlow crashes it,
so ``bench_images.py --deit-only`` runs this script as a subprocess. It builds what DeiT's
``main.py`` trains on -- timm's ``create_loader(..., is_training=True,
auto_augment='rand-m9-mstd0.5-inc1', interpolation='bicubic', re_prob=0.25, re_mode='pixel',
color_jitter=0.3)`` (timm drops the colour jitter next to RandAugment, as in DeiT), a torch
DataLoader with one worker per core, and timm's ``Mixup`` (mixup 0.8, cutmix 1.0, switch 0.5,
smoothing 0.1) applied to each batch in the main process as DeiT's training loop does -- then
answers commands on stdin, one JSON line each on stdout:

* ``run WARMUP COUNT``: take WARMUP batches, then time COUNT batches (Mixup included):
  ``{"images", "wall", "cpu"}``, cpu the seconds of this process and its workers
  (``/proc/<pid>/stat``);
* ``quit``.

timm 1.0.31's increasing Posterize asks Pillow for 0 bits at magnitude 10 (about one image
in 600 with DeiT's magnitude noise), which Pillow >= 10 refuses with an exception that stops
the loader: here, as in older Pillow (and tfdp), 0 bits gives black.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def _cpu_seconds(pids: list[int]) -> float:
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
        except (FileNotFoundError, ProcessLookupError, IndexError):
            pass
    return total


def posterize_zero_is_black() -> None:
    """timm's Posterize at 0 bits gives black (as in Pillow < 10 and tfdp), not an exception."""
    from timm.data import auto_augment as aa

    posterize = aa.posterize

    def zero_is_black(img, bits_to_keep, **kwargs):
        if bits_to_keep <= 0:
            return img.point(lambda _: 0)
        return posterize(img, bits_to_keep, **kwargs)

    aa.posterize = zero_is_black
    aa.NAME_TO_OP.update({k: zero_is_black for k in aa.NAME_TO_OP if "Posterize" in k})


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--folder", required=True)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--size", type=int, default=224)
    args = ap.parse_args()

    import torch
    from timm.data import ImageDataset, Mixup, create_loader

    torch.set_num_threads(1)
    posterize_zero_is_black()

    dataset = ImageDataset(args.folder)
    loader = create_loader(
        dataset,
        input_size=(3, args.size, args.size),
        batch_size=args.batch,
        is_training=True,
        use_prefetcher=False,  # DeiT: transforms (normalise, erase) in the workers
        color_jitter=0.3,
        auto_augment="rand-m9-mstd0.5-inc1",
        interpolation="bicubic",
        re_prob=0.25,
        re_mode="pixel",
        re_count=1,
        num_workers=args.workers,
        persistent_workers=True,
        pin_memory=False,
    )
    classes = sum(1 for entry in os.scandir(args.folder) if entry.is_dir())
    mixup = Mixup(
        mixup_alpha=0.8, cutmix_alpha=1.0, prob=1.0, switch_prob=0.5, mode="batch",
        label_smoothing=0.1, num_classes=max(classes, 2),
    )  # fmt: skip
    batches = iter(loader)

    def take() -> int:
        nonlocal batches
        try:
            x, y = next(batches)
        except StopIteration:
            batches = iter(loader)
            x, y = next(batches)
        x, y = mixup(x, y)
        return len(x)

    take()  # start the workers
    print(json.dumps({"ready": True, "workers": args.workers}), flush=True)
    for line in sys.stdin:
        words = line.split()
        if not words or words[0] == "quit":
            break
        warmup, count = int(words[1]), int(words[2])
        for _ in range(warmup):
            take()
        pids = [os.getpid(), *(w.pid for w in getattr(batches, "_workers", []))]
        c0, t0 = _cpu_seconds(pids), time.perf_counter()
        images = sum(take() for _ in range(count))
        wall = time.perf_counter() - t0
        pids = [os.getpid(), *(w.pid for w in getattr(batches, "_workers", []))]
        print(json.dumps({"images": images, "wall": wall, "cpu": _cpu_seconds(pids) - c0}),
              flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
