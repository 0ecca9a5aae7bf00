"""Per-op CPU times of timm's DeiT training transforms (PIL / torch, one thread), per image.

The counterpart of ``_deit_ops.py`` (a process without TensorFlow: torchvision and TensorFlow
cannot share one). ``python benchmarks/_timm_ops.py [--folder F] [--count N]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--folder", type=Path, default=Path("/tmp/tfdp_bench_images/photos-600-q90-seed0")
    )
    ap.add_argument("--count", type=int, default=48)
    args = ap.parse_args()
    import torch
    from PIL import Image
    from timm.data import Mixup
    from timm.data import auto_augment as aa
    from timm.data.random_erasing import RandomErasing
    from torchvision import transforms

    torch.set_num_threads(1)
    files = sorted(args.folder.glob("*/*.JPEG"))[: args.count]
    datas = [f.read_bytes() for f in files]
    import io

    def decode(d):
        img = Image.open(io.BytesIO(d))
        return img.convert("RGB")

    imgs = [decode(d) for d in datas]
    rrc = transforms.RandomResizedCrop(224, interpolation=transforms.InterpolationMode.BICUBIC)
    crops = [rrc(im) for im in imgs]
    hparams = {"translate_const": 100, "img_mean": (124, 116, 104)}
    ops = aa._RAND_INCREASING_TRANSFORMS
    norm = transforms.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
    tensors = [norm(transforms.functional.to_tensor(c)) for c in crops]
    erase = RandomErasing(1.0, mode="pixel", device="cpu")
    batch = torch.stack(tensors[:48] if len(tensors) >= 48 else tensors)
    mix = Mixup(
        mixup_alpha=0.8,
        cutmix_alpha=1.0,
        prob=1.0,
        switch_prob=0.5,
        mode="batch",
        label_smoothing=0.1,
        num_classes=10,
    )
    labels = torch.zeros(len(batch), dtype=torch.long)

    def timed(fn, items):
        best = float("inf")
        for _ in range(3):
            t0 = time.process_time()
            for x in items:
                fn(x)
            best = min(best, (time.process_time() - t0) / len(items) * 1e3)
        return best

    table = {
        "decode (PIL, whole file)": (decode, datas),
        "RRC crop + resize bicubic (PIL)": (rrc, imgs),
        "flip (PIL)": (lambda im: im.transpose(Image.FLIP_LEFT_RIGHT), crops),
        "to_tensor + normalize": (lambda c: norm(transforms.functional.to_tensor(c)), crops),
        "erasing p=1 pixel": (lambda t: erase(t.clone()), tensors),
        "mixup (batch, per image)": (lambda _: mix(batch.clone(), labels), [0] * 4),
    }
    out = {}
    for name, (fn, items) in table.items():
        out[name] = timed(fn, items)
        if name.startswith("mixup"):
            out[name] /= len(batch)
    for name in ops:
        op = aa.AugmentOp(name, prob=1.0, magnitude=9, hparams=hparams)
        out[f"RA op {name}"] = timed(op, crops)
    ra = aa.rand_augment_transform("rand-m9-mstd0.5-inc1", hparams)
    out["randaugment (drawn, 2 layers)"] = timed(ra, crops)
    for name, ms in out.items():
        print(f"{name:40s} {ms:7.3f} ms", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
