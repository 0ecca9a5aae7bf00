"""timm's side of bench_deit.py: DeiT-Ti trained as timm's train.py trains it (a subprocess).

torch / torchvision and TensorFlow do not share the benchmark's process (as ``_timm_loader.py``),
so ``bench_deit.py`` runs this script as a subprocess. It drives timm's library pieces as
timm's ``train.py`` does under ``torchrun --nproc_per_node 1`` (a process group of one, gloo,
so that ``create_loader`` takes ``num_aug_repeats``: timm's Repeated Augmentation sampler needs
``distributed=True``):

* ``timm.create_model('deit_tiny_patch16_224', num_classes=K, drop_path_rate=0.1)``, wrapped in
  ``DistributedDataParallel``;
* ``create_loader(ImageDataset(folder), is_training=True, use_prefetcher=False,
  num_aug_repeats=3, auto_augment='rand-m9-mstd0.5-inc1', interpolation='bicubic',
  re_prob=0.25, re_mode='pixel', re_count=1, color_jitter=0.3, distributed=True, ...)`` with
  ``--workers`` DataLoader workers (train.py's ``--workers``), ``Mixup(mixup_alpha=0.8,
  cutmix_alpha=1.0, switch_prob=0.5, mode='batch', label_smoothing=0.1)`` per batch in the main
  process (train.py without ``--prefetcher``), ``SoftTargetCrossEntropy``;
* ``create_optimizer_v2(model, opt='adamw', lr=5e-4 * batch / 512, weight_decay=0.05)`` (no
  decay for biases, norms, tokens and position embeddings), ``create_scheduler_v2`` (cosine,
  warm-up 5 epochs from 1e-6, min 1e-5, stepped per epoch), ``ModelEmaV3(decay=0.99996)``
  updated after every optimizer step with its step count, as train.py's ``update_ema``.

``--threads`` is ``torch.set_num_threads`` of the main process (the step); each DataLoader
worker runs one thread, as torch sets them. It answers commands on stdin, one JSON line each
on stdout:

* ``run WARMUP COUNT``: WARMUP training steps, then COUNT timed ones: ``{"images", "wall",
  "cpu", "data"}`` -- ``cpu`` the seconds of this process and its workers, ``data`` the wall
  seconds the loop waited for the loader and Mixup (train.py's ``data_time``);
* ``step COUNT``: COUNT training steps on one batch already loaded and mixed (the step alone):
  ``{"images", "wall", "cpu"}``;
* ``quit``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

from _timm_loader import _cpu_seconds, posterize_zero_is_black

#: DeiT's main.py defaults (as examples/deit_tiny_imagenet.toml has them).
DEIT = dict(lr=5e-4, weight_decay=0.05, epochs=300, warmup_epochs=5, warmup_lr=1e-6, min_lr=1e-5)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--folder", required=True)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--model", default="deit_tiny_patch16_224")
    ap.add_argument("--drop-path", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import timm
    import torch
    import torch.distributed as dist
    from timm.data import ImageDataset, Mixup, create_loader
    from timm.loss import SoftTargetCrossEntropy
    from timm.optim import create_optimizer_v2
    from timm.scheduler import create_scheduler_v2
    from timm.utils import ModelEmaV3
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    posterize_zero_is_black()
    with tempfile.NamedTemporaryFile(prefix="tfdp_bench_deit_pg_", delete=False) as f:
        rendezvous = f.name
    os.unlink(rendezvous)  # the file store creates it
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=0, world_size=1)

    dataset = ImageDataset(args.folder)
    classes = sum(1 for entry in os.scandir(args.folder) if entry.is_dir())
    model = timm.create_model(args.model, num_classes=classes, drop_path_rate=args.drop_path)
    loader = create_loader(
        dataset,
        input_size=(3, args.size, args.size),
        batch_size=args.batch,
        is_training=True,
        use_prefetcher=False,
        no_aug=False,
        re_prob=0.25,
        re_mode="pixel",
        re_count=1,
        color_jitter=0.3,
        auto_augment="rand-m9-mstd0.5-inc1",
        num_aug_repeats=3,
        interpolation="bicubic",
        num_workers=args.workers,
        distributed=True,
        pin_memory=False,
        device=torch.device("cpu"),
        persistent_workers=True,
    )
    mixup = Mixup(
        mixup_alpha=0.8, cutmix_alpha=1.0, prob=1.0, switch_prob=0.5, mode="batch",
        label_smoothing=0.1, num_classes=classes,
    )  # fmt: skip
    loss_fn = SoftTargetCrossEntropy()
    lr = DEIT["lr"] * args.batch / 512  # DeiT's main.py: lr x global batch / 512
    optimizer = create_optimizer_v2(model, opt="adamw", lr=lr, weight_decay=DEIT["weight_decay"])
    scheduler, _ = create_scheduler_v2(
        optimizer, sched="cosine", num_epochs=DEIT["epochs"], warmup_epochs=DEIT["warmup_epochs"],
        warmup_lr=DEIT["warmup_lr"], min_lr=DEIT["min_lr"],
    )  # fmt: skip
    ema = ModelEmaV3(model, decay=0.99996)
    ddp = DistributedDataParallel(model)
    ddp.train()
    state = {"epoch": 0, "updates": 0}
    batches = iter(loader)

    def next_batch():
        nonlocal batches
        try:
            return next(batches)
        except StopIteration:  # train.py: the epoch's end steps the schedule
            state["epoch"] += 1
            scheduler.step(state["epoch"])
            loader.sampler.set_epoch(state["epoch"])
            batches = iter(loader)
            return next(batches)

    def step(x, y) -> None:
        out = ddp(x)
        loss = loss_fn(out, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        state["updates"] += 1
        ema.update(model, step=state["updates"])

    def pids() -> list[int]:
        return [os.getpid(), *(w.pid for w in getattr(batches, "_workers", []))]

    print(json.dumps({"ready": True, "workers": args.workers, "threads": args.threads,
                      "lr": lr, "classes": classes}), flush=True)  # fmt: skip
    for line in sys.stdin:
        words = line.split()
        if not words or words[0] == "quit":
            break
        if words[0] == "step":
            x, y = mixup(*next_batch())
            count = int(words[1])
            c0, t0 = _cpu_seconds(pids()), time.perf_counter()
            for _ in range(count):
                step(x, y)
            wall = time.perf_counter() - t0
            print(json.dumps({"images": count * len(x), "wall": wall,
                              "cpu": _cpu_seconds(pids()) - c0}), flush=True)  # fmt: skip
            continue
        warmup, count = int(words[1]), int(words[2])
        for _ in range(warmup):
            step(*mixup(*next_batch()))
        c0, t0, data, images = _cpu_seconds(pids()), time.perf_counter(), 0.0, 0
        for _ in range(count):
            d0 = time.perf_counter()
            x, y = mixup(*next_batch())
            data += time.perf_counter() - d0
            step(x, y)
            images += len(x)
        wall = time.perf_counter() - t0
        print(json.dumps({"images": images, "wall": wall, "cpu": _cpu_seconds(pids()) - c0,
                          "data": data}), flush=True)  # fmt: skip
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
