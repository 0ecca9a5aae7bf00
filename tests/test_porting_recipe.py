"""docs/guide.md's recipe for porting a PyTorch run's order, checked against real PyTorch.

Needs torch (tests/reference_stack.py: a failure where the reference stack is required).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import reference_stack

torch = reference_stack.need("torch")

from torch.utils.data import DistributedSampler as TorchDistributedSampler  # noqa: E402

import tfdp  # noqa: E402

pytestmark = pytest.mark.torch
GUIDE = (Path(__file__).resolve().parents[1] / "docs/guide.md").read_text()


class _Sized:
    """A data set stand-in: torch's sampler only calls len()."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


def test_the_guides_porting_recipe_reproduces_torch_for_every_rank_and_epoch():
    """docs/guide.md's `permutation=` recipe, run as written: every rank of every epoch equals
    torch's DistributedSampler (a generator seeded with seed + epoch, as torch's own)."""
    (recipe,) = [b for b in re.findall(r"```python\n(.*?)```", GUIDE, flags=re.S) if "torch" in b]
    n, w, seed = 23, 4, 5  # 23 does not divide by 4: padding too
    for r in range(w):
        scope = {"tfdp": tfdp, "N": n, "W": w, "r": r, "seed": seed}
        exec(recipe, scope)
        ours = scope["sampler"]
        ref = TorchDistributedSampler(_Sized(n), num_replicas=w, rank=r, shuffle=True, seed=seed)
        for epoch in (0, 1, 2, 7):
            ours.set_epoch(epoch)
            ref.set_epoch(epoch)
            expected = list(ref)
            assert ours.indices().tolist() == expected, (r, epoch)
            assert list(ours) == expected, (r, epoch)  # iterated: the same list again
