"""Benchmark the held-out accuracy of one short ViT recipe in tfdp and in timm, over seeds.

The recipe (``_deit_parity_model.RECIPE``) is DeiT's on a small real image set: the bundled
UCI digits (1,437 to train on, tfdp's fixed held-out 360), each 8x8 image's 17 levels scaled
to 0..255 and enlarged to 32x32 with PIL's bicubic resize, grey copied to RGB, written once to
two ``.npz`` files under ``/tmp`` that both sides read. The model: a ViT of width 96, 6 blocks,
3 heads, patches of 8 (``_deit_parity_model.SPEC``) -- in tfdp ``tfdp.models.
vision_transformer(ViTSpec(...))`` reached by ``--model _deit_parity_model:vit``, in timm its
``VisionTransformer`` with the same arguments. Both train from their own random
initialisation (timm's law), with:

* Repeated Augmentation (3 repeats, each epoch rounded down to 256: 1,280 samples), batches
  of 64 on one process / replica, the last partial batch dropped (20 steps an epoch);
* random shifts of up to 4 pixels (tfdp ``--augment shift``; torchvision's ``RandomCrop(32,
  padding=4)``), RandAugment ``rand-m5-mstd0.5-inc1`` (bicubic, mean-colour fill; DeiT's m9
  translates a digit by up to 40% of the frame), normalisation (mean 0.5, std 0.5),
  RandomErasing 0.25 ``pixel``, Mixup 0.8 / CutMix 1.0 on half the batches (switch 0.5),
  smoothing 0.1 (soft-target cross-entropy), drop path 0.1;
* torch's AdamW (lr 1e-3, decay 0.05, timm's no-decay set), timm's cosine per update with 3
  epochs of warm-up from 1e-6 to a minimum of 1e-5; no EMA.

Where they differ: each side draws its own random numbers (initial weights, samples,
augmentations, drop path), so a seed of one is not the same run as the seed of the other;
tfdp's RandomErasing / RandAugment / Mixup are timm's algorithms, checked against timm in
tests/test_timm_augment.py, not its PIL / torch code (JPEG-free here: the arrays are the
same pixels). tfdp's drop path is keyed by the model factory's default seed (a ``module:
function`` factory is not given the run's seed), timm's by ``torch.manual_seed``.

How it measures. One process for tfdp (``tfdp.cli.train.train`` of each seed in turn), one
subprocess for timm (``_deit_parity_timm.py``), seeds alternating (tfdp first on even
seeds); each side's held-out accuracy after the last epoch (the model's weights). The target:
the two means within one standard deviation of the seeds (the pooled sample standard
deviation of the two sides, ``sqrt((s_tfdp^2 + s_timm^2) / 2)``).

Usage:
    python benchmarks/bench_deit_parity.py --quick   # a smoke: 1 seed, 1 epoch a side (~40 s;
                                                     # the code paths, no parity figure)
    python benchmarks/bench_deit_parity.py           # 5 seeds, 30 epochs a side (~20-25 min)
    python benchmarks/bench_deit_parity.py --epochs 60   # longer runs, nearer convergence (~45 min)

The headline figures come last, one ``name: value`` per line.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
from tfdp._compat.fast.process import prefer_bfc_cpu_allocator

prefer_bfc_cpu_allocator(os.environ)  # TensorFlow's host allocator as tfdp's CLI gives it

import numpy as np  # noqa: E402

from _deit_parity_model import RECIPE, SIZE, SPEC  # noqa: E402
from bench_images import TimmSide, missing_reference  # noqa: E402

HERE = Path(__file__).resolve().parent
TIMM_SCRIPT = HERE / "_deit_parity_timm.py"
DATA = Path("/tmp/tfdp_bench_deit_parity")
FULL = {"seeds": 5, "epochs": 30}
#: A smoke: every code path once, no accuracy worth comparing.
QUICK = {"seeds": 1, "epochs": 1}


def digits32() -> tuple[str, str]:
    """The digits enlarged to 32x32 RGB, ``(train.npz, test.npz)`` (made once)."""
    from PIL import Image

    from tfdp.recipe.digits import load_digits

    paths = DATA / "digits32_train.npz", DATA / "digits32_test.npz"
    if all(p.exists() for p in paths):
        return str(paths[0]), str(paths[1])
    DATA.mkdir(parents=True, exist_ok=True)
    for path, (x, y) in zip(paths, load_digits(), strict=True):
        grey = np.rint(x[..., 0].astype(np.float64) * 255 / 16).astype(np.uint8)
        big = np.stack([np.asarray(Image.fromarray(g).resize((SIZE, SIZE), Image.BICUBIC))
                        for g in grey])  # fmt: skip
        tmp = path.with_suffix(".tmp.npz")
        np.savez(tmp, images=np.repeat(big[..., None], 3, axis=-1), labels=y)
        os.replace(tmp, path)
    return str(paths[0]), str(paths[1])


def tfdp_config(train: str, test: str, seed: int, epochs: int, run_dir: str):
    """The recipe as ``tfdp train``'s options."""
    from tfdp.recipe import TrainConfig

    r = RECIPE
    return TrainConfig(
        data=train, eval_data=test, model="_deit_parity_model:vit", replicas=1,
        batch_size=r["batch"], epochs=epochs, seed=seed, optimizer="adamw", lr=r["lr"],
        weight_decay=r["weight_decay"], schedule="cosine", warmup_epochs=r["warmup_epochs"],
        warmup_lr=r["warmup_lr"], min_lr=r["min_lr"], sched_on_updates=True,
        drop_path=r["drop_path"], sampler="repeat-aug", repeats=r["repeats"],
        selected_round=r["selected_round"], augment="shift", aa=r["aa"], reprob=r["reprob"],
        remode=r["remode"], mixup=r["mixup"], cutmix=r["cutmix"], mixup_prob=r["mixup_prob"],
        mixup_switch_prob=r["mixup_switch_prob"], mixup_mode=r["mixup_mode"],
        smoothing=r["smoothing"], mean=list(r["mean"]), std=list(r["std"]),
        checkpoint_every=None, progress=False, log_every=0, run_dir=run_dir,
    )  # fmt: skip


class TimmParity(TimmSide):
    """``_deit_parity_timm.py`` in a subprocess: ``train(seed, epochs)`` -> its accuracy."""

    def __init__(self, train: str, test: str) -> None:
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TIMM_FUSED_ATTN": "0"}
        env.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # bench_deit.TIMM_THREADS
        self.proc = subprocess.Popen(
            [sys.executable, str(TIMM_SCRIPT), "--train", train, "--test", test],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        self._read()

    def train(self, seed: int, epochs: int) -> dict:
        return self.ask(f"train {seed} {epochs}")


def tfdp_run(train: str, test: str, seed: int, epochs: int) -> dict:
    """One seed of the recipe in tfdp: the held-out accuracy after the last epoch."""
    from tfdp.cli.train import train as tfdp_train

    run_dir = tempfile.mkdtemp(prefix=f"tfdp_bench_parity_{seed}_")
    t0 = time.perf_counter()
    status, result = tfdp_train(tfdp_config(train, test, seed, epochs, run_dir))
    assert status == 0, result
    return {"seed": seed, "accuracy": result["val_sparse_categorical_accuracy"],
            "seconds": time.perf_counter() - t0}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--quick", action="store_true", help="a smoke: 1 seed, 1 epoch")
    ap.add_argument("--seeds", type=int)
    ap.add_argument("--epochs", type=int)
    args = ap.parse_args(argv)
    cfg = dict(QUICK if args.quick else FULL)
    for key in ("seeds", "epochs"):
        if getattr(args, key) is not None:
            cfg[key] = getattr(args, key)
    missing = missing_reference()
    if missing:
        print(f"bench_deit_parity: {', '.join(missing)} not installed: nothing to compare with")
        return 0
    train, test = digits32()
    print(f"bench_deit_parity {_dt.datetime.now():%Y-%m-%d %H:%M}: ViT {SPEC} at {SIZE}x{SIZE} "
          f"on the digits (1,437 / 360), {cfg['epochs']} epochs, seeds 0-{cfg['seeds'] - 1}; "
          f"recipe {RECIPE}; load average {os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip
    timm = TimmParity(train, test)
    rows: dict[str, list[dict]] = {"tfdp": [], "timm": []}
    try:
        for seed in range(cfg["seeds"]):
            for side in ("tfdp", "timm") if seed % 2 == 0 else ("timm", "tfdp"):
                if side == "tfdp":
                    row = tfdp_run(train, test, seed, cfg["epochs"])
                else:
                    row = timm.train(seed, cfg["epochs"])
                row["load"] = os.getloadavg()[0]
                rows[side].append(row)
                print(f"  seed {seed} {side}: held-out accuracy {row['accuracy']:.4f} "
                      f"({row['seconds']:.0f}s, load {row['load']:.1f})", flush=True)  # fmt: skip
    finally:
        timm.close()
    acc = {side: np.array([r["accuracy"] for r in rows[side]]) for side in rows}
    mean = {side: float(a.mean()) for side, a in acc.items()}
    std = {side: float(a.std(ddof=1)) if len(a) > 1 else 0.0 for side, a in acc.items()}
    pooled = float(np.sqrt((std["tfdp"] ** 2 + std["timm"] ** 2) / 2))
    diff = mean["tfdp"] - mean["timm"]
    print("\n| seed | tfdp | timm |\n|---:|---:|---:|")
    for a, b in zip(rows["tfdp"], rows["timm"], strict=True):
        print(f"| {a['seed']} | {a['accuracy']:.4f} | {b['accuracy']:.4f} |")
    print(f"| mean | {mean['tfdp']:.4f} | {mean['timm']:.4f} |")
    print(f"| std (ddof 1) | {std['tfdp']:.4f} | {std['timm']:.4f} |")
    seconds = {side: float(np.median([r["seconds"] for r in rows[side]])) for side in rows}
    print(f"\nseconds per run (median): tfdp {seconds['tfdp']:.0f}, timm {seconds['timm']:.0f}; "
          f"load average at the end {os.getloadavg()[0]:.2f}")  # fmt: skip
    ok = abs(diff) <= pooled
    verdict = "not judged (--quick is a smoke)" if args.quick else "PASS" if ok else "FAIL"
    print(f"\ntarget |mean_tfdp - mean_timm| <= pooled std: {verdict} "
          f"({abs(diff):.4f} vs {pooled:.4f})")  # fmt: skip
    heads = {
        "accuracy_mean_tfdp": mean["tfdp"],
        "accuracy_mean_timm": mean["timm"],
        "accuracy_std_tfdp": std["tfdp"],
        "accuracy_std_timm": std["timm"],
        "accuracy_pooled_std": pooled,
        "accuracy_mean_difference": diff,
    }
    for key, value in heads.items():
        print(f"{key}: {value:.4f}")
    sys.stdout.flush()
    os._exit(0)  # skip TensorFlow's slow teardown


if __name__ == "__main__":
    sys.exit(main())
