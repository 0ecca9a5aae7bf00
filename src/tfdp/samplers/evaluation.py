"""``DistributedEvalSampler``: exact distributed evaluation (equal ranks, padding masked).

This module owns the evaluation sampler: every rank runs the same number of
steps over ``range(num_examples)``, and :meth:`DistributedEvalSampler.mask`
says which entries are padding, so that metrics weighted by it equal one
pass over the whole set. It has no position to resume (an evaluation runs
whole at any world size). NumPy only.

Example:
    >>> DistributedEvalSampler(5, num_replicas=2, rank=0).mask().tolist()
    [True, True, True]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tfdp import indices as _ix
from tfdp._util import check_int
from tfdp.errors import StateError
from tfdp.samplers.base import PermutationCallable, Sampler


class DistributedEvalSampler(Sampler):
    """Exact distributed evaluation: equal-length ranks plus a mask of the padding.

    Pads ``range(num_examples)`` by wrapping like
    ``DistributedSampler(shuffle=False)`` so every replica runs the same number
    of steps (optionally to a multiple of ``multiple_of``, e.g. the per-replica
    batch size, so every batch is full), and :meth:`mask` says which entries
    are real. Weighting padding 0 makes distributed metrics equal to a
    single-device pass over the whole set -- unlike timm's
    ``OrderedDistributedSampler``, whose padding counts twice.

    Args:
        num_examples: Size of the evaluation set.
        num_replicas: World size.
        rank: This replica's global rank.
        multiple_of: Pad each rank's share to a multiple of this (default 1).
        permutation: Optional ``epoch -> permutation`` (default: the identity).

    Example:
        >>> s = DistributedEvalSampler(5, num_replicas=2, rank=1)
        >>> s.indices().tolist(), s.mask().tolist()
        ([1, 3, 0], [True, True, False])
    """

    _KIND = "DistributedEvalSampler"

    def __init__(
        self,
        num_examples: int,
        num_replicas: int,
        rank: int,
        multiple_of: int = 1,
        *,
        permutation: PermutationCallable | None = None,
    ) -> None:
        super().__init__(num_examples, num_replicas, rank, permutation=permutation)
        self.multiple_of = check_int("multiple_of", multiple_of, 1)
        self._len = _ix.eval_num_samples(self.num_examples, self.num_replicas, self.multiple_of)

    def _config(self) -> dict[str, Any]:
        cfg = super()._config()
        cfg.pop("seed")
        return {**cfg, "multiple_of": self.multiple_of}

    def _length(self) -> int:
        return self._len

    def _global_entries(self, positions: np.ndarray) -> np.ndarray:
        return self._epoch_permutation(shuffle=False)(positions % self.num_examples)

    def _compute(self, start: int, stop: int) -> np.ndarray:
        return self.indices_and_mask(start, stop)[0]

    def follow(self, plan: Sampler, start: int = 0) -> None:
        """Refused: exact evaluation has no position to continue, it runs whole at any world size.

        Raises:
            StateError: always.

        Example:
            >>> DistributedEvalSampler(4, 2, 0).follow(DistributedEvalSampler(4, 1, 0))
            Traceback (most recent call last):
            ...
            tfdp.errors.StateError: a DistributedEvalSampler has no position to continue: exact evaluation runs whole at any world size
        """  # noqa: E501
        raise StateError(
            "a DistributedEvalSampler has no position to continue: exact evaluation "
            "runs whole at any world size"
        )

    def indices_and_mask(
        self, start: int = 0, stop: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`indices` and :meth:`mask` together, computed once.

        Example:
            >>> idx, mask = DistributedEvalSampler(3, 2, 1).indices_and_mask()
            >>> idx.tolist(), mask.tolist()
            ([1, 0], [True, False])
        """
        return _ix.eval_indices(
            self._epoch_permutation(shuffle=False),
            self.num_examples,
            self.num_replicas,
            self.rank,
            multiple_of=self.multiple_of,
            start=start,
            stop=stop,
        )

    def mask(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """True where the entry is a real sample, False where it is padding.

        Example:
            >>> DistributedEvalSampler(3, 2, 1).mask().tolist()
            [True, False]
        """
        return self.positions(start, stop) < self.num_examples

    def weights(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """:meth:`mask` as float32 sample weights (1 real, 0 padding).

        Example:
            >>> DistributedEvalSampler(3, 2, 1).weights().tolist()
            [1.0, 0.0]
        """
        return self.mask(start, stop).astype(np.float32)
