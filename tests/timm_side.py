"""timm's side of the reference checks: runs in a process of its own, never with TensorFlow.

Importing torchvision (which ``import timm`` does) after TensorFlow in one process crashes it
(a segmentation fault with torch 2.14 / TF 2.21), so the tests call these functions through
:func:`timm_ref.call`, in a fresh interpreter that imports timm and torch only. Each function
takes and returns plain data (lists, dicts, NumPy arrays) and may batch several cases per call:
a process costs a few seconds to start.
"""

from __future__ import annotations

import pickle
import sys
from typing import Any


class _Sized:
    """A data set stand-in: the samplers only call len()."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n


def repeat_aug_lists(cases: list[tuple]) -> list[Any]:
    """timm's ``RepeatAugSampler`` lists of every rank, per case (or an error string).

    A case is ``(n, num_replicas, num_repeats, selected_round, selected_ratio, epoch)``.
    """
    from timm.data.distributed_sampler import RepeatAugSampler

    out: list[Any] = []
    for n, w, repeats, selected_round, selected_ratio, epoch in cases:
        ranks = []
        try:
            for rank in range(w):
                ref = RepeatAugSampler(
                    _Sized(n),
                    num_replicas=w,
                    rank=rank,
                    shuffle=True,
                    num_repeats=repeats,
                    selected_round=selected_round,
                    selected_ratio=selected_ratio,
                )
                ref.set_epoch(epoch)
                ranks.append(list(ref))
        except (TypeError, RuntimeError) as err:  # an older timm without fractional repeats
            out.append(f"{type(err).__name__}: {err}")
            continue
        out.append(ranks)
    return out


class _Uniforms:
    """A stand-in for ``random`` / ``numpy.random`` that hands out given uniforms in order.

    Maps them as tfdp does: ``uniform(a, b) = a + (b - a) * u``, ``randint(a, b)``
    inclusive (``random``) as ``a + floor(u * (b - a + 1))``, numpy's exclusive
    ``randint(a, b)`` as ``a + floor(u * (b - a))``; ``random()`` is ``u``.
    """

    def __init__(self, values: list[float], numpy_style: bool = False) -> None:
        self.values = list(values)
        self.numpy_style = numpy_style

    def _next(self) -> float:
        return self.values.pop(0)

    def random(self) -> float:
        return self._next()

    def uniform(self, a: float, b: float) -> float:
        return a + (b - a) * self._next()

    def randint(self, a: int, b: int, size: Any = None) -> Any:
        import math

        span = (b - a) if self.numpy_style else (b - a + 1)
        value = a + min(math.floor(self._next() * span), span - 1)
        return value if size is None else [value] * size


def rand_augment_ops(image: Any, cases: list[tuple]) -> list[Any]:
    """timm's RandAugment ops (``AugmentOp``, probability 1, no magnitude noise) on ``image``.

    ``image`` is uint8 ``[H, W, 3]``; a case is ``(op name, magnitude, negate, interpolation,
    fill)``; the result is the uint8 output, or the error's text.
    """
    import numpy as np
    from PIL import Image
    from timm.data import auto_augment as aa

    filters = {"nearest": Image.NEAREST, "bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC}
    pil = Image.fromarray(np.asarray(image, np.uint8))
    out: list[Any] = []
    for name, magnitude, negate, interpolation, fill in cases:
        aa.random = _Uniforms([0.9 if negate else 0.1] * 4)  # _randomly_negate: > 0.5 negates
        hparams = {
            "img_mean": tuple(fill),
            "interpolation": filters[interpolation],
            "translate_const": 100,
        }
        op = aa.AugmentOp(name, prob=1.0, magnitude=magnitude, hparams=hparams)
        try:
            out.append(np.asarray(op(pil)))
        except ValueError as err:
            out.append(f"{type(err).__name__}: {err}")
    return out


def random_erasing_cases(images: Any, cases: list[tuple]) -> list[Any]:
    """timm's ``RandomErasing`` of float ``images`` ``[N, H, W, C]`` with given uniforms.

    A case is ``(index, kwargs, uniforms)``: the image, the constructor's
    arguments (``device='cpu'`` added) and the uniforms its ``random`` calls get
    in order. Returns each result ``[H, W, C]`` (the noise of ``pixel`` / ``rand``
    modes is torch's own).
    """
    import numpy as np
    import torch
    from timm.data import random_erasing as re

    out = []
    for index, kwargs, uniforms in cases:
        re.random = _Uniforms(uniforms)
        erase = re.RandomErasing(device="cpu", **kwargs)
        x = torch.from_numpy(np.ascontiguousarray(np.asarray(images[index]).transpose(2, 0, 1)))
        out.append(erase(x.clone()).numpy().transpose(1, 2, 0))
    return out


def mixup_cases(images: Any, labels: Any, cases: list[tuple]) -> list[tuple[Any, Any]]:
    """timm's ``Mixup`` on a batch with given lambdas, switches and box uniforms.

    ``images`` float32 ``[B, H, W, C]``, ``labels`` int ``[B]``. A case is
    ``(kwargs, lam, use_cutmix, uniforms)``: the constructor's arguments, the
    lambda and switch its parameter draw returns (one each for ``"batch"``,
    arrays for ``"elem"`` / ``"pair"``), and the uniforms ``np.random.randint``
    gets for the boxes, in order. Returns ``(mixed images [B, H, W, C], soft
    targets [B, K])`` per case.
    """
    import numpy as np
    import torch
    from timm.data import mixup as mx

    out = []
    for kwargs, lam, use_cutmix, uniforms in cases:
        shim = _Uniforms(uniforms, numpy_style=True)
        mx.np = type("np_shim", (), {})()  # numpy, with random.randint from the uniforms
        for name in dir(np):
            if not name.startswith("__"):
                setattr(mx.np, name, getattr(np, name))
        mx.np.random = shim
        mix = mx.Mixup(**kwargs)
        if kwargs.get("mode", "batch") == "batch":
            mix._params_per_batch = lambda lam=lam, cut=use_cutmix: (float(lam), bool(cut))
        else:
            mix._params_per_elem = lambda n, lam=lam, cut=use_cutmix: (
                np.asarray(lam, np.float32)[:n].copy(),
                np.asarray(cut, bool)[:n].copy(),
            )
        x = torch.from_numpy(np.ascontiguousarray(np.asarray(images).transpose(0, 3, 1, 2)))
        y = torch.from_numpy(np.asarray(labels, np.int64))
        mixed, target = mix(x.clone(), y)
        out.append((mixed.numpy().transpose(0, 2, 3, 1), target.numpy()))
        mx.np = np
    return out


def color_jitter_cases(image: Any, cases: list[tuple]) -> list[Any]:
    """torchvision's ``ColorJitter`` (PIL path) on uint8 ``image`` with given parameters.

    A case is ``(constructor args, order, brightness, contrast, saturation, hue)``:
    what ``get_params`` returns. Returns the uint8 outputs.
    """
    import numpy as np
    import torch
    from PIL import Image
    from torchvision import transforms

    out = []
    for args, order, *factors in cases:
        jitter = transforms.ColorJitter(*args)
        params = (torch.tensor(order), *factors)
        jitter.get_params = lambda *a, p=params: p
        out.append(np.asarray(jitter(Image.fromarray(np.asarray(image, np.uint8)))))
    return out


def resized_crop_cases(image: Any, cases: list[tuple]) -> list[Any]:
    """timm's ``RandomResizedCropAndInterpolation`` on uint8 ``image`` for given boxes.

    A case is ``(top, left, height, width, size, interpolation)``: what ``get_params``
    returns, the output side and timm's interpolation name. Returns the uint8 outputs.
    """
    import numpy as np
    from PIL import Image
    from timm.data.transforms import RandomResizedCropAndInterpolation

    out = []
    for top, left, h, w, size, interpolation in cases:
        crop = RandomResizedCropAndInterpolation(size, interpolation=interpolation)
        crop.get_params = lambda *a, box=(top, left, h, w), **k: box
        out.append(np.asarray(crop(Image.fromarray(np.asarray(image, np.uint8)))))
    return out


def eval_transform_images(
    images: list[Any], size: int, crop_pct: float, mean: Any, std: Any
) -> Any:
    """timm's held-out transform (``create_transform(is_training=False)``, bicubic, DeiT's) of
    uint8 ``images`` ``[H, W, 3]`` (PIL images made from them); float32 ``[N, size, size, 3]``."""
    import numpy as np
    from PIL import Image
    from timm.data import create_transform

    t = create_transform(
        size, is_training=False, crop_pct=crop_pct, interpolation="bicubic", mean=mean, std=std
    )
    return np.stack(
        [t(Image.fromarray(np.asarray(im, np.uint8))).numpy() for im in images]
    ).transpose(0, 2, 3, 1)


def eval_transform_files(paths: list[str], size: int, crop_pct: float, mean: Any, std: Any) -> Any:
    """The same transform of image files, opened as timm's folder data set opens them (PIL,
    converted to RGB)."""
    import numpy as np
    from PIL import Image

    images = []
    for path in paths:
        with open(path, "rb") as f:
            images.append(np.asarray(Image.open(f).convert("RGB")))
    return eval_transform_images(images, size, crop_pct, mean, std)


def eval_geometry(cases: list[tuple[int, int, int, float]]) -> list[tuple[int, int, int, int]]:
    """Where timm's held-out transform crops, per case ``(H, W, size, crop_pct)``: the size
    torchvision's ``Resize`` gives an ``H x W`` image, and ``CenterCrop``'s top-left corner in
    it, ``(new_h, new_w, top, left)``, read off images (the crop of an image whose pixels hold
    their own coordinates)."""
    import numpy as np
    from PIL import Image
    from timm.data import create_transform

    out = []
    for height, width, size, crop_pct in cases:
        resize, crop = create_transform(
            size, is_training=False, crop_pct=crop_pct, interpolation="bicubic"
        ).transforms[:2]
        new_w, new_h = resize(Image.new("L", (width, height))).size
        where = np.arange(new_h * new_w, dtype=np.int32).reshape(new_h, new_w)
        corner = int(np.asarray(crop(Image.fromarray(where, "I")))[0, 0])
        out.append((new_h, new_w, corner // new_w, corner % new_w))
    return out


def train_transform_names(aa: str, reprob: float) -> list[str]:
    """The stages of timm's training transform, ``create_transform(is_training=True)``."""
    from timm.data import create_transform

    t = create_transform(
        224, is_training=True, auto_augment=aa, re_prob=reprob, interpolation="bicubic"
    )
    return [type(stage).__name__ for stage in t.transforms]


def soft_target_losses(logits: Any, targets: Any) -> Any:
    """timm's ``SoftTargetCrossEntropy`` of each sample alone (its mean over a batch of one)."""
    import numpy as np
    import torch
    from timm.loss import SoftTargetCrossEntropy

    loss = SoftTargetCrossEntropy()
    x = torch.from_numpy(np.asarray(logits, np.float32))
    t = torch.from_numpy(np.asarray(targets, np.float32))
    return np.array([float(loss(x[i : i + 1], t[i : i + 1])) for i in range(len(x))])


def many(calls: list[tuple[str, tuple]]) -> list[Any]:
    """Several of these functions in one process: ``[(name, args), ...]`` -> their results."""
    return [globals()[name](*args) for name, args in calls]


def main() -> None:
    """Read ``(function name, args, kwargs)`` pickled on stdin; write the result pickled."""
    name, args, kwargs = pickle.load(sys.stdin.buffer)
    result = globals()[name](*args, **kwargs)
    pickle.dump(result, sys.stdout.buffer)


if __name__ == "__main__":
    main()
