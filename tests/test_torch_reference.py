"""Cross-checks against real PyTorch and timm (tests/reference_stack.py: required in CI).

tfdp is given torch's own epoch permutation through ``permutation=`` and must then reproduce
torch's ``DistributedSampler`` (and timm's ``RepeatAugSampler``) element for element.
"""

from __future__ import annotations

import pytest

import reference_stack

torch = reference_stack.need("torch")

from torch.utils.data import DistributedSampler as TorchDistributedSampler  # noqa: E402

import timm_ref  # noqa: E402
from tfdp import DistributedSampler, RepeatAugSampler  # noqa: E402

pytestmark = pytest.mark.torch


class _Sized:
    """A data set stand-in: the samplers only call len()."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


def torch_permutation(n, seed):
    """torch's DistributedSampler shuffle for an epoch: randperm seeded with seed + epoch."""

    def permutation(epoch):
        g = torch.Generator()
        g.manual_seed(seed + epoch)
        return torch.randperm(n, generator=g).numpy()

    return permutation


# (num_examples, num_replicas, epoch, seed, drop_last)
CASES = [
    (1, 1, 0, 0, False),
    (1, 8, 3, 0, False),  # one sample wrapped onto 8 ranks
    (3, 8, 1, 7, False),  # padding longer than the data set
    (10, 4, 0, 0, False),
    (10, 4, 5, 0, True),
    (11, 3, 2, 42, True),
    (12, 4, 1, 1, True),  # divisible: drop_last drops nothing
    (97, 8, 7, 2024, False),
    (97, 8, 7, 2024, True),
    (1000, 7, 13, 123, False),
    (1000, 7, 13, 123, True),
    (4097, 16, 2, 5, False),
    (5000, 64, 9, 99, True),
    (5000, 64, 9, 99, False),
]


@pytest.mark.parametrize(("n", "w", "epoch", "seed", "drop_last"), CASES)
def test_distributed_sampler_equals_torch(n, w, epoch, seed, drop_last):
    for rank in range(w):
        ref = TorchDistributedSampler(
            _Sized(n), num_replicas=w, rank=rank, shuffle=True, seed=seed, drop_last=drop_last
        )
        ref.set_epoch(epoch)
        ours = DistributedSampler(
            n, w, rank, seed=seed, drop_last=drop_last, permutation=torch_permutation(n, seed)
        )
        ours.set_epoch(epoch)
        expected = list(ref)
        assert len(ours) == len(ref)
        assert list(ours) == expected
        assert ours.indices().tolist() == expected


@pytest.mark.parametrize(("n", "w", "epoch", "seed", "drop_last"), CASES)
def test_unshuffled_distributed_sampler_equals_torch(n, w, epoch, seed, drop_last):
    for rank in range(w):
        ref = TorchDistributedSampler(
            _Sized(n), num_replicas=w, rank=rank, shuffle=False, drop_last=drop_last
        )
        ref.set_epoch(epoch)
        ours = DistributedSampler(n, w, rank, shuffle=False, drop_last=drop_last)
        ours.set_epoch(epoch)
        assert list(ours) == list(ref)


def test_drop_last_with_fewer_examples_than_replicas():
    """torch silently gives every rank an empty epoch; tfdp refuses up front."""
    ref = TorchDistributedSampler(_Sized(3), num_replicas=8, rank=0, drop_last=True)
    assert list(ref) == []
    with pytest.raises(ValueError, match="drop_last"):
        DistributedSampler(3, 8, 0, drop_last=True)


# (num_examples, num_replicas, num_repeats, selected_round, selected_ratio, epoch)
TIMM_CASES = [
    (1000, 8, 3, 256, 0, 0),
    (1000, 8, 3, 0, 0, 4),
    (1003, 4, 2, 7, 0, 1),
    (777, 6, 1, 0, 2, 3),
    (5000, 16, 4, 256, 0, 2),
    (500, 8, 1.5, 0, 0, 1),  # non-integer repeats (timm >= 0.9)
]


def test_repeat_aug_sampler_equals_timm():
    """timm's own lists (computed in a process without TensorFlow) for every rank and case."""
    expected = timm_ref.call("repeat_aug_lists", TIMM_CASES)
    for case, ranks in zip(TIMM_CASES, expected, strict=True):
        n, w, repeats, selected_round, selected_ratio, epoch = case
        if isinstance(ranks, str):  # an older timm without fractional repeats
            assert repeats != int(repeats), ranks
            continue

        def timm_permutation(e, n=n):  # timm's RepeatAugSampler seeds with the epoch alone
            g = torch.Generator()
            g.manual_seed(e)
            return torch.randperm(n, generator=g).numpy()

        for rank in range(w):
            ours = RepeatAugSampler(
                n,
                w,
                rank,
                num_repeats=repeats,
                selected_round=selected_round,
                selected_ratio=selected_ratio or None,
                permutation=timm_permutation,
            )
            ours.set_epoch(epoch)
            assert len(ours) == len(ranks[rank]), (case, rank)
            assert list(ours) == ranks[rank], (case, rank)
