"""``DistributedSampler``: torch's ``DistributedSampler``, exactly, plus the make_even paddings.

This module owns the training sampler that deals a shuffled epoch over the
ranks (padding by wrapping, by random extra draws, or none; or dropping the
tail). NumPy only.

Example:
    >>> DistributedSampler(10, num_replicas=4, rank=1, shuffle=False).indices().tolist()
    [1, 5, 9]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tfdp import indices as _ix
from tfdp.errors import ConfigError
from tfdp.samplers.base import PermutationCallable, Sampler


class DistributedSampler(Sampler):
    """``torch.utils.data.DistributedSampler``, exactly, plus the make_even variants.

    The epoch's order is a permutation keyed by ``(seed, epoch)``. Without
    ``drop_last`` the list is padded to a multiple of ``num_replicas``:
    ``padding="wrap"`` (torch's) repeats its head as often as needed;
    ``padding="random"`` (make_even) wraps when the shortfall is below
    ``num_examples`` and otherwise appends random extra indices drawn from the
    epoch's seeded generator, so every rank agrees; ``padding=None`` leaves
    ranks uneven by at most one. With ``drop_last`` the tail is cut to a
    multiple (``padding`` is then irrelevant). Rank ``r`` takes positions
    ``r, r + W, ...``.

    Args:
        num_examples: Size of the data set.
        num_replicas: World size (total replicas over all workers).
        rank: This replica's global rank.
        shuffle: Shuffle each epoch; False gives ``range(num_examples)`` order.
        seed: Unsigned 64-bit seed; with the epoch it keys the shuffle.
        drop_last: Drop the tail instead of padding.
        padding: ``"wrap"``, ``"random"`` or ``None``.
        permutation: Optional ``epoch -> permutation`` replacing the shuffle.

    Example:
        >>> s = DistributedSampler(10, num_replicas=4, rank=3, shuffle=False)
        >>> s.indices().tolist()
        [3, 7, 1]
        >>> DistributedSampler(10, 4, 3, shuffle=False, drop_last=True).indices().tolist()
        [3, 7]
    """

    _KIND = "DistributedSampler"
    PADDINGS = ("wrap", "random", None)

    def __init__(
        self,
        num_examples: int,
        num_replicas: int,
        rank: int,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        padding: str | None = "wrap",
        *,
        permutation: PermutationCallable | None = None,
    ) -> None:
        super().__init__(num_examples, num_replicas, rank, seed=seed, permutation=permutation)
        if padding not in self.PADDINGS:
            raise ConfigError(
                f"must be one of 'wrap', 'random' or None, got {padding!r}",
                argument="padding",
            )
        if drop_last and self.num_examples < self.num_replicas:
            raise ConfigError(
                "would give every rank an empty epoch with {num_examples}="
                f"{self.num_examples} < {{num_replicas}}={self.num_replicas}: leave it off "
                "(pad the last step), or use fewer replicas",
                argument="drop_last",
                mentions=["num_examples", "num_replicas"],
            )
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        self.padding = padding
        self._len = _ix.distributed_num_samples(
            self.num_examples,
            self.num_replicas,
            self.rank,
            drop_last=self.drop_last,
            padding=self.padding,
        )

    def _config(self) -> dict[str, Any]:
        return {
            **super()._config(),
            "shuffle": self.shuffle,
            "drop_last": self.drop_last,
            "padding": self.padding,
        }

    def _length(self) -> int:
        return self._len

    @property
    def global_length(self) -> int:  # noqa: D102 - Sampler.global_length
        return self.total_size

    @property
    def total_size(self) -> int:
        """Length of the global list after padding or dropping (all ranks together)."""
        if self.padding is None and not self.drop_last:
            return self.num_examples
        return self._len * self.num_replicas

    def _compute(self, start: int, stop: int) -> np.ndarray:
        perm = self._epoch_permutation(self.shuffle)
        extra = None
        shortfall = self.total_size - self.num_examples
        if self.padding == "random" and not self.drop_last and shortfall >= self.num_examples:
            extra = _ix.random_padding_ids(self.num_examples, shortfall, self.seed, self.epoch)
        return _ix.distributed_indices(
            perm,
            self.num_examples,
            self.num_replicas,
            self.rank,
            drop_last=self.drop_last,
            padding=self.padding,
            extra_ids=extra,
            start=start,
            stop=stop,
        )

    def _global_entries(self, positions: np.ndarray) -> np.ndarray:
        perm = self._epoch_permutation(self.shuffle)
        shortfall = self.total_size - self.num_examples
        random_pad = self.padding == "random" and not self.drop_last
        extra = None
        if random_pad and shortfall >= self.num_examples:
            extra = _ix.random_padding_ids(self.num_examples, shortfall, self.seed, self.epoch)
        total = self.total_size if random_pad else self.num_examples
        return _ix.distributed_entries(
            perm, self.num_examples, positions, total=total, extra_ids=extra
        )
