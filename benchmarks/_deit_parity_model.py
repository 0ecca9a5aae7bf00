"""The ViT and the recipe of bench_deit_parity.py, shared by its tfdp and timm sides.

``vit`` is the ``module:function`` factory ``tfdp train --model _deit_parity_model:vit``
reaches: :func:`tfdp.models.vision_transformer` of :data:`SPEC` (timm's ``VisionTransformer``
with the same width, depth, heads, patch and MLP ratio: ``_deit_parity_timm.py`` builds it).
:data:`RECIPE` holds the options both sides train with. Importing this module loads no
TensorFlow (the timm side imports it too).
"""

from __future__ import annotations

from typing import Any

#: A narrower, shallower DeiT-Ti: width 96 (DeiT-Ti's 192), 6 blocks (12), 3 heads of 32,
#: MLP 4x, patches of 8 on the 32x32 images (16 patches and the class token).
SPEC = {"width": 96, "depth": 6, "heads": 3, "mlp_ratio": 4.0, "patch": 8}
SIZE = 32

#: The recipe both sides train (timm's flag names; tfdp's are the same words): DeiT's kinds of
#: augmentation at gentler strengths (30 epochs of 1,280 samples: 18-47% held out, both sides,
#: docs/benchmarks.md).
RECIPE = {
    "batch": 64,
    "lr": 1e-3,
    "weight_decay": 0.05,
    "warmup_epochs": 3,
    "warmup_lr": 1e-6,
    "min_lr": 1e-5,
    "drop_path": 0.1,
    "repeats": 3,
    "selected_round": 256,
    "aa": "rand-m5-mstd0.5-inc1",  # DeiT's m9 moves a 32x32 digit off its frame
    "reprob": 0.25,
    "remode": "pixel",
    "mixup": 0.8,
    "cutmix": 1.0,
    "mixup_prob": 0.5,  # DeiT's 1.0: half the batches mixed, for a 60-epoch run
    "mixup_switch_prob": 0.5,
    "mixup_mode": "batch",
    "smoothing": 0.1,
    "shift": 4,  # tfdp --augment shift (its RandomShift of 32 // 8); torchvision's padding
    "mean": (0.5, 0.5, 0.5),
    "std": (0.5, 0.5, 0.5),
}


def vit(input_shape: Any, num_classes: int, drop_path_rate: float = 0.0) -> Any:
    """tfdp's ViT of :data:`SPEC` for ``input_shape`` and ``num_classes``, timm-initialised."""
    from tfdp.models import ViTSpec, vision_transformer

    spec = ViTSpec("vit_parity", **SPEC)
    return vision_transformer(spec, input_shape, num_classes, drop_path=drop_path_rate)
