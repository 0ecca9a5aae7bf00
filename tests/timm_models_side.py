"""timm's and DeiT's side of tfdp.models' reference checks: a process of its own, never with TF.

Called through :func:`timm_ref.call` (``side="timm_models_side"``), as timm_side.py is: each
function takes and returns plain data and batches several cases per call (a process costs a
few seconds to start).
"""

from __future__ import annotations

import pickle
import sys
from typing import Any

import numpy as np


def param_counts(names: list[str], num_classes: int) -> dict[str, dict[str, Any]]:
    """Per name, ``timm.create_model(name, num_classes=K)``'s parameter counts and sizes.

    Made on torch's meta device: the parameters' shapes without their memory or initialisation.
    """
    import timm
    import torch
    from timm.optim import param_groups_weight_decay

    out = {}
    for name in names:
        with torch.device("meta"):
            model = timm.create_model(name, pretrained=False, num_classes=num_classes)
        groups = param_groups_weight_decay(
            model, 0.05, no_weight_decay_list=model.no_weight_decay()
        )
        out[name] = {
            "params": sum(p.numel() for p in model.parameters()),
            # what timm's create_optimizer (DeiT's) gives no weight decay
            "no_decay": sum(
                p.numel() for g in groups if not g["weight_decay"] for p in g["params"]
            ),
            "embed_dim": model.embed_dim,
            "depth": len(model.blocks),
            "num_heads": model.blocks[0].attn.num_heads,
            "distilled": hasattr(model, "dist_token"),
        }
    return out


def drop_path_rates(cases: list[tuple[float, int]]) -> list[list[float]]:
    """timm's ``calculate_drop_path_rates(rate, depth)`` (VisionTransformer's ``dpr``) per case."""
    from timm.layers import calculate_drop_path_rates

    return [calculate_drop_path_rates(rate, depth) for rate, depth in cases]


def resample(cases: list[tuple[Any, tuple[int, int], int, bool]]) -> list[Any]:
    """timm's ``resample_abs_pos_embed(posemb, new_size, num_prefix_tokens=, antialias=)``."""
    import torch
    from timm.layers import resample_abs_pos_embed

    return [
        resample_abs_pos_embed(
            torch.from_numpy(np.asarray(pos, np.float32)),
            list(size),
            num_prefix_tokens=prefix,
            interpolation="bicubic",
            antialias=antialias,
        ).numpy()
        for pos, size, prefix, antialias in cases
    ]


def export(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A randomly initialised timm model per case, its state dict saved, its logits on ``x``.

    A case: ``name``, ``img_size``, ``num_classes``, ``seed``, ``path`` (``.pth``: ``torch.save``,
    ``{"model": state}`` when ``wrap`` as DeiT's checkpoints are; ``.safetensors``:
    ``safetensors.torch.save_file``), ``x`` (NHWC float32). Every parameter is perturbed by
    N(0, 0.02) after timm's initialisation, so that no bias is zero and no norm one (every
    mapping is seen). Returns the eval logits and, for a distilled model, its training-mode
    ``(class, distillation)`` logits (``set_distilled_training``; no dropout or drop path).
    """
    import timm
    import torch

    out = []
    for case in cases:
        torch.manual_seed(case["seed"])
        model = timm.create_model(
            case["name"],
            pretrained=False,
            num_classes=case["num_classes"],
            img_size=case["img_size"],
        )
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.02)
        state = {k: v.contiguous() for k, v in model.state_dict().items()}
        path = case["path"]
        if path.endswith(".safetensors"):
            from safetensors.torch import save_file

            save_file(state, path)
        else:
            torch.save({"model": state} if case.get("wrap") else state, path)
        x = torch.from_numpy(np.asarray(case["x"], np.float32)).permute(0, 3, 1, 2)
        model.eval()
        with torch.no_grad():
            result: dict[str, Any] = {"eval": model(x).numpy()}
            if hasattr(model, "set_distilled_training"):
                model.set_distilled_training(True)
                model.train()
                cls, dist = model(x)
                result["heads"] = (cls.numpy(), dist.numpy())
        out.append(result)
    return out


def deit_losses(cases: list[dict[str, Any]]) -> list[float]:
    """DeiT's ``DistillationLoss`` (tests/deit_losses.py: DeiT's losses.py verbatim) per case.

    A case: ``base`` (``"ce"``: ``torch.nn.CrossEntropyLoss()``, ``"smooth"``: timm's
    ``LabelSmoothingCrossEntropy(smoothing)``, ``"soft"``: timm's ``SoftTargetCrossEntropy()``:
    DeiT's main.py's three criteria), ``smoothing``, ``outputs`` / ``outputs_kd`` / ``teacher``
    logits ``[B, K]``, ``labels`` (``[B]`` ints, or ``[B, K]`` soft targets), ``kind``
    (``"none"``, ``"soft"``, ``"hard"``), ``alpha``, ``tau``.
    """
    import torch
    from timm.loss import LabelSmoothingCrossEntropy, SoftTargetCrossEntropy

    from deit_losses import DistillationLoss  # DeiT's own text (tests/deit_losses.py)

    class Teacher(torch.nn.Module):
        def __init__(self, logits: Any) -> None:
            super().__init__()
            self.logits = torch.from_numpy(np.asarray(logits, np.float64))

        def forward(self, inputs: Any) -> Any:
            return self.logits

    out = []
    for case in cases:
        if case["base"] == "ce":
            base = torch.nn.CrossEntropyLoss()
        elif case["base"] == "smooth":
            base = LabelSmoothingCrossEntropy(smoothing=case["smoothing"])
        else:
            base = SoftTargetCrossEntropy()
        loss = DistillationLoss(
            base, Teacher(case["teacher"]), case["kind"], case["alpha"], case["tau"]
        )
        labels = np.asarray(case["labels"])
        labels = torch.from_numpy(labels if labels.ndim == 1 else labels.astype(np.float64))
        outputs = (
            torch.from_numpy(np.asarray(case["outputs"], np.float64)),
            torch.from_numpy(np.asarray(case["outputs_kd"], np.float64)),
        )
        out.append(float(loss(None, outputs, labels)))
    return out


def many(calls: list[tuple[str, tuple]]) -> list[Any]:
    """Several of these functions in one process: ``[(name, args), ...]`` -> their results."""
    return [globals()[name](*args) for name, args in calls]


def main() -> None:
    """Read ``(function name, args, kwargs)`` pickled on stdin; write the result pickled."""
    name, args, kwargs = pickle.load(sys.stdin.buffer)
    pickle.dump(globals()[name](*args, **kwargs), sys.stdout.buffer)


if __name__ == "__main__":
    main()
