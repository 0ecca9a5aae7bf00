"""timm's side of bench_deit_parity.py: the short ViT recipe trained by timm, one seed a command.

A process without TensorFlow (as ``_timm_loader.py``). It trains timm's ``VisionTransformer``
of ``_deit_parity_model.SPEC`` (``img_size=32``, ``class_token``, ``global_pool='token'``,
``qkv_bias``, layer norms of epsilon 1e-6: timm's defaults; ``drop_path_rate``) as timm's
``train.py`` does with ``--sched-on-updates``, on the arrays of ``--train`` (a ``.npz`` of
uint8 ``images [N, 32, 32, 3]`` and ``labels``), and measures the held-out accuracy on
``--test`` after the last epoch:

* the samples: timm's ``RepeatAugSampler`` (3 repeats, each epoch rounded down to a multiple
  of 256, ``set_epoch`` each epoch), batches of 64, the last partial batch dropped, two
  DataLoader workers (one per core);
* each image: ``RandomCrop(32, padding=4)`` (zeros: tfdp's ``RandomShift(4)``), then the
  stages of timm's ``create_transform(32, is_training=True, auto_augment=aa,
  interpolation='bicubic', re_prob=0.25, re_mode='pixel', mean, std)`` after its
  RandomResizedCrop (``hflip=0``: no flip) -- RandAugment, ``ToTensor``, ``Normalize``,
  ``RandomErasing``;
* each batch: timm's ``Mixup`` (0.8 / 1.0, probability 0.5, switch 0.5, batch mode,
  smoothing 0.1),
  ``SoftTargetCrossEntropy``;
* ``create_optimizer_v2(model, 'adamw', lr, weight_decay)`` (no decay for biases, norms,
  tokens, position embeddings), ``create_scheduler_v2('cosine', warm-up, per update)``,
  ``scheduler.step_update(updates)`` after each step;
* the model is evaluated (``model.eval()``) on the normalised held-out images.

Commands on stdin: ``train SEED EPOCHS`` answers ``{"seed", "accuracy", "seconds"}``; ``quit``.
timm's attention written out (``TIMM_FUSED_ATTN=0``, set by the bench: torch's fused
attention is the slower one on this CPU; the same function), and torch's OpenMP threads
waiting passively (``OMP_WAIT_POLICY=PASSIVE``: on a shared machine spinning barriers make a
step of this small ViT 10x slower).
"""

from __future__ import annotations

import json
import os
import sys
import time

from _deit_parity_model import RECIPE, SIZE, SPEC
from _timm_loader import posterize_zero_is_black


def main() -> int:
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--train", required=True)
    ap.add_argument("--test", required=True)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()

    import numpy as np
    import torch
    from PIL import Image
    from timm.data import Mixup, create_transform
    from timm.data.distributed_sampler import RepeatAugSampler
    from timm.loss import SoftTargetCrossEntropy
    from timm.models.vision_transformer import VisionTransformer
    from timm.optim import create_optimizer_v2
    from timm.scheduler import create_scheduler_v2
    from torchvision import transforms

    torch.set_num_threads(args.threads)
    posterize_zero_is_black()
    train, test = np.load(args.train), np.load(args.test)
    classes = int(train["labels"].max()) + 1
    r = RECIPE
    timm_train = create_transform(
        SIZE, is_training=True, hflip=0.0, auto_augment=r["aa"], interpolation="bicubic",
        re_prob=r["reprob"], re_mode=r["remode"], mean=r["mean"], std=r["std"],
    )  # fmt: skip
    crop, *stages = timm_train.transforms
    assert type(crop).__name__ == "RandomResizedCropAndInterpolation", timm_train
    assert [type(s).__name__ for s in stages] == [
        "RandAugment", "MaybeToTensor", "Normalize", "RandomErasing",
    ], timm_train  # fmt: skip
    transform = transforms.Compose([transforms.RandomCrop(SIZE, padding=r["shift"]), *stages])

    class Arrays(torch.utils.data.Dataset):
        def __init__(self, images, labels, transform):
            self.images, self.labels, self.transform = images, labels, transform

        def __len__(self):
            return len(self.labels)

        def __getitem__(self, i):
            return self.transform(Image.fromarray(self.images[i])), int(self.labels[i])

    mean = torch.tensor(r["mean"]).view(1, 3, 1, 1)
    std = torch.tensor(r["std"]).view(1, 3, 1, 1)
    x_test = (torch.from_numpy(test["images"]).permute(0, 3, 1, 2).float() / 255 - mean) / std
    y_test = torch.from_numpy(test["labels"].astype(np.int64))

    def run(seed: int, epochs: int) -> float:
        torch.manual_seed(seed)
        np.random.seed(seed)
        dataset = Arrays(train["images"], train["labels"], transform)
        sampler = RepeatAugSampler(
            dataset, num_replicas=1, rank=0, num_repeats=r["repeats"],
            selected_round=r["selected_round"],
        )  # fmt: skip
        loader = torch.utils.data.DataLoader(
            dataset, batch_size=r["batch"], sampler=sampler, num_workers=args.threads,
            drop_last=True, persistent_workers=True,
        )  # fmt: skip
        model = VisionTransformer(
            img_size=SIZE, patch_size=SPEC["patch"], num_classes=classes,
            embed_dim=SPEC["width"], depth=SPEC["depth"], num_heads=SPEC["heads"],
            mlp_ratio=SPEC["mlp_ratio"], drop_path_rate=r["drop_path"],
        )  # fmt: skip
        mixup = Mixup(
            mixup_alpha=r["mixup"], cutmix_alpha=r["cutmix"], prob=r["mixup_prob"],
            switch_prob=r["mixup_switch_prob"], mode=r["mixup_mode"],
            label_smoothing=r["smoothing"], num_classes=classes,
        )  # fmt: skip
        loss_fn = SoftTargetCrossEntropy()
        optimizer = create_optimizer_v2(
            model, opt="adamw", lr=r["lr"], weight_decay=r["weight_decay"]
        )
        scheduler, _ = create_scheduler_v2(
            optimizer, sched="cosine", num_epochs=epochs, warmup_epochs=r["warmup_epochs"],
            warmup_lr=r["warmup_lr"], min_lr=r["min_lr"], step_on_epochs=False,
            updates_per_epoch=len(loader),
        )  # fmt: skip
        updates = 0
        for epoch in range(epochs):
            sampler.set_epoch(epoch)
            model.train()
            for x, y in loader:
                x, y = mixup(x, y)
                loss = loss_fn(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                updates += 1
                scheduler.step_update(num_updates=updates)
            scheduler.step(epoch + 1)
        model.eval()
        with torch.no_grad():
            predicted = torch.cat([model(x).argmax(-1) for x in x_test.split(256)])
        return float((predicted == y_test).float().mean())

    print(json.dumps({"ready": True, "classes": classes}), flush=True)
    for line in sys.stdin:
        words = line.split()
        if not words or words[0] == "quit":
            break
        seed, epochs = int(words[1]), int(words[2])
        t0 = time.perf_counter()
        accuracy = run(seed, epochs)
        print(json.dumps({"seed": seed, "accuracy": accuracy,
                          "seconds": time.perf_counter() - t0}), flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
