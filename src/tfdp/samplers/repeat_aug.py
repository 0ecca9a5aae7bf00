"""``RepeatAugSampler``: Repeated Augmentation, as DeiT's ``RASampler`` and timm's deal it.

This module owns the training sampler that repeats each sample of a shuffled
epoch ``num_repeats`` times over the ranks and keeps DeiT's selected count.
NumPy only.

Example:
    >>> RepeatAugSampler(6, num_replicas=3, rank=1, shuffle=False, selected_round=0).indices()
    array([0, 1])
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tfdp import indices as _ix
from tfdp._util import check_int
from tfdp.errors import ConfigError
from tfdp.samplers.base import PermutationCallable, Sampler


def _is_positive_number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
        return False
    try:
        return math.isfinite(float(value)) and value > 0
    except OverflowError:
        return False


def _plain_number(value: Any) -> int | float:
    """A Python int when integer-valued, else a Python float (JSON-safe, NumPy-free)."""
    return int(value) if float(value).is_integer() else float(value)


class RepeatAugSampler(Sampler):
    """Repeated Augmentation: DeiT's ``RASampler`` and timm's ``RepeatAugSampler``.

    Each permuted index is repeated ``num_repeats`` times in a row (timm's
    non-integer repeats too: entry ``i`` is ``perm[floor(i / R)]`` for
    ``i < ceil(R * N)``), the list is padded by wrapping to a multiple of
    ``num_replicas``, rank ``r`` takes positions ``r, r + W, ...`` -- so with
    ``W >= R`` the copies of a sample land on different ranks in the same
    step -- and keeps the first
    ``floor(N // selected_round * selected_round / selected_ratio)`` of them
    (``ceil(N / selected_ratio)`` when ``selected_round=0``; the ratio defaults
    to ``num_replicas``). Unlike DeiT and timm, whose order depends on the
    epoch alone, ``seed`` keys the order too.

    Args:
        num_examples: Size of the data set.
        num_replicas: World size.
        rank: This replica's global rank.
        num_repeats: Copies of each sample per epoch (``>= 1``, may be fractional).
        shuffle: Shuffle each epoch.
        seed: Unsigned 64-bit seed.
        selected_round: Round the selected count down to multiples of this
            (DeiT: 256); 0 disables rounding.
        selected_ratio: Divide the data set size by this to get the per-rank
            count (default: ``num_replicas``).
        permutation: Optional ``epoch -> permutation`` replacing the shuffle.

    Raises:
        tfdp.errors.ConfigError: for bad arguments, and when an epoch would select no
            sample (DeiT's ``N < 256``), naming the fix.

    Example:
        >>> s = RepeatAugSampler(8, num_replicas=3, rank=0, shuffle=False, selected_round=0)
        >>> s.indices().tolist()
        [0, 1, 2]
    """

    _KIND = "RepeatAugSampler"

    def __init__(
        self,
        num_examples: int,
        num_replicas: int,
        rank: int,
        num_repeats: float = 3,
        shuffle: bool = True,
        seed: int = 0,
        selected_round: int = 256,
        selected_ratio: float | None = None,
        *,
        permutation: PermutationCallable | None = None,
    ) -> None:
        super().__init__(num_examples, num_replicas, rank, seed=seed, permutation=permutation)
        if not _is_positive_number(num_repeats) or num_repeats < 1:
            raise ConfigError(
                f"must be a finite number >= 1, got {num_repeats!r}",
                argument="num_repeats",
            )
        self.selected_round = check_int("selected_round", selected_round, 0)
        if selected_ratio is not None and not _is_positive_number(selected_ratio):
            raise ConfigError(
                f"must be None ({{num_replicas}}) or a number > 0, got {selected_ratio!r}",
                argument="selected_ratio",
                mentions=["num_replicas"],
            )
        self.num_repeats = _plain_number(num_repeats)
        self.selected_ratio = None if selected_ratio is None else _plain_number(selected_ratio)
        if self.selected_ratio is not None and not math.isfinite(
            self.num_examples / self.selected_ratio
        ):
            raise ConfigError(
                f"{selected_ratio!r} is too small: num_examples / selected_ratio must be finite",
                argument="selected_ratio",
            )
        self.shuffle = bool(shuffle)
        self.num_samples, self.total_size, self.num_selected = _ix.repeat_aug_sizes(
            self.num_examples,
            self.num_replicas,
            self.num_repeats,
            self.selected_round,
            self.selected_ratio,
        )
        if self.num_selected < 1:
            ratio = self.num_replicas if selected_ratio is None else selected_ratio
            raise ConfigError(
                "RepeatAugSampler would select no sample per epoch: num_examples="
                f"{self.num_examples} // selected_round={self.selected_round} * "
                f"{self.selected_round} / selected_ratio={ratio} < 1. Pass a smaller "
                f"{{selected_round}} (at most {self.num_examples}, e.g. {{selected_round}}=0 to "
                "keep ceil(num_examples / selected_ratio))",
                argument="selected_round",
                mentions=["selected_round"],
            )

    def _config(self) -> dict[str, Any]:
        return {
            **super()._config(),
            "num_repeats": self.num_repeats,
            "shuffle": self.shuffle,
            "selected_round": self.selected_round,
            "selected_ratio": self.selected_ratio,
        }

    def _length(self) -> int:
        return self.num_selected

    def _global_entries(self, positions: np.ndarray) -> np.ndarray:
        perm = self._epoch_permutation(self.shuffle)
        return _ix.repeat_aug_entries(perm, self.num_examples, self.num_repeats, positions)

    def _compute(self, start: int, stop: int) -> np.ndarray:
        perm = self._epoch_permutation(self.shuffle)
        return _ix.repeat_aug_indices(
            perm,
            self.num_examples,
            self.num_replicas,
            self.rank,
            self.num_repeats,
            start=start,
            stop=stop,
        )
