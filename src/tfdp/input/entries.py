"""Each rank's entries of an epoch: which ids, at which positions, with which seeds and weights.

This module owns :class:`EntryPlan`, what :class:`~tfdp.input.DistributedInput`
plans once and every one of its loaders loads (:mod:`tfdp.input.loader`): for a
global rank, an epoch and a first entry, the rank's :class:`RankEntries` -- the
sampler's example indices, their positions in the sampler's padded global list,
each entry's augmentation key and its sample weight -- and the steps of each
epoch. The loaders decide only how the entries are read and batched, never which
they are or how they are seeded.

An entry's augmentation seed is ``[key, position]``: the key is the epoch's
(:func:`tfdp.seeding.epoch_seed_key`, :meth:`EntryPlan.epoch_key`), the
position the entry's place in the sampler's padded global list, so the copies
of a sample (Repeated Augmentation) differ while a rerun, or a run resumed
mid-epoch, repeats them. A streaming source's entries are stream indices: the
sampler with the identity permutation picks them (the source shuffles files
and blocks, :func:`tfdp.input.config.stream_index_sampler`). An elastic epoch
-- a checkpoint's epoch continued on another world size
(:func:`tfdp.elastic.epoch_plan`) -- is dealt over the ranks by
:meth:`EntryPlan.follow`. NumPy only.

Example:
    >>> from tfdp.samplers import DistributedEvalSampler
    >>> plan = EntryPlan(DistributedEvalSampler(6, 1, 0, multiple_of=4), batch_size=4,
    ...                  drop_remainder=False, seed=0)
    >>> entries = plan.rank_entries(0, epoch=0, start=2)
    >>> entries.indices.tolist(), entries.positions.tolist(), entries.weights.tolist()
    ([2, 3, 4, 5, 0, 1], [2, 3, 4, 5, 6, 7], [1.0, 1.0, 1.0, 1.0, 0.0, 0.0])
    >>> plan.steps_per_epoch
    2
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from tfdp.elastic import plan_steps
from tfdp.errors import ConfigError
from tfdp.input.config import stream_index_sampler
from tfdp.samplers import DistributedEvalSampler, Sampler
from tfdp.seeding import epoch_seed_key


class RankEntries(NamedTuple):
    """A rank's entries of an epoch, from a first entry on: four arrays of one length.

    Attributes:
        indices: int64 example indices (stream indices for a streaming source).
        positions: int64 places in the sampler's padded global list.
        keys: int64 augmentation keys (an entry's seed is ``[key, position]``).
        weights: float32 sample weights (the evaluation sampler's mask, else 1).
    """

    indices: np.ndarray
    positions: np.ndarray
    keys: np.ndarray
    weights: np.ndarray


class EntryPlan:
    """The entries each rank loads, epoch by epoch, and their seeds (see the module).

    Args:
        sampler: The input's rank-0 sampler (its state is the input's:
            checkpoints, elastic resume).
        batch_size: Examples per replica per step.
        drop_remainder: Whether an epoch's last partial step is dropped.
        seed: Keys the augmentation seeds.
        streaming: The source is a stream: the entries are stream indices
            (a sampler that cannot pick them is refused here).

    Raises:
        ConfigError: for an epoch with no full step, or (``streaming``) a
            sampler that cannot pick stream indices.

    Example:
        >>> from tfdp.samplers import DistributedSampler
        >>> plan = EntryPlan(DistributedSampler(10, 2, 0, shuffle=False), batch_size=2,
        ...                  drop_remainder=True, seed=0)
        >>> plan.rank_entries(1, epoch=0, start=0).indices.tolist(), plan.steps_per_epoch
        ([1, 3, 5, 7, 9], 2)
    """

    def __init__(
        self,
        sampler: Sampler,
        *,
        batch_size: int,
        drop_remainder: bool,
        seed: int,
        streaming: bool = False,
    ) -> None:
        self.sampler = sampler
        self.batch_size = int(batch_size)
        self.drop_remainder = bool(drop_remainder)
        self.seed = int(seed)
        #: The sampler that picks the entries' indices: the input's, or for a stream its
        #: identity-permuted twin (stream indices; refused here for a sampler that cannot).
        self.index_sampler = stream_index_sampler(sampler) if streaming else sampler
        per_rank = len(sampler)
        if self.drop_remainder:
            self.steps_per_epoch = per_rank // self.batch_size
        else:
            self.steps_per_epoch = math.ceil(per_rank / self.batch_size)
        if self.steps_per_epoch < 1:
            raise ConfigError(
                f"{self.batch_size} per replica gives no full step per epoch: each "
                f"replica gets {per_rank} example(s) per epoch; use a smaller batch size or "
                "drop_remainder=False",
                argument="batch_size",
            )
        # Elastic resume: epoch -> the rank-0 sampler of another world size whose global list
        # that epoch deals over this input's ranks (see follow).
        self._plans: dict[int, Sampler] = {}

    def follow(self, plan: Sampler | None) -> None:
        """Deal ``plan``'s epoch over these ranks (an elastic epoch); None: every epoch its own.

        ``plan`` is :func:`tfdp.elastic.epoch_plan`'s sampler: the rank-0
        sampler of the world size whose global list the epoch follows.

        Example:
            >>> from tfdp.samplers import DistributedSampler
            >>> plan = EntryPlan(DistributedSampler(64, 4, 0), batch_size=2,
            ...                  drop_remainder=True, seed=0)
            >>> old = DistributedSampler(64, 2, 0)  # two replicas; epoch 1 followed on four
            >>> old.set_epoch(1)
            >>> plan.follow(old)
            >>> plan.rank_sampler(0, 1).plan.num_replicas, plan.rank_sampler(0, 2).plan
            (2, None)
        """
        self._plans = {} if plan is None else {plan.epoch: plan}

    def epoch_steps(self, epoch: int) -> int:
        """Steps (global batches) of ``epoch``: ``steps_per_epoch``, or an elastic epoch's plan's.

        Example:
            >>> from tfdp.samplers import DistributedSampler
            >>> EntryPlan(DistributedSampler(10, 1, 0), batch_size=5, drop_remainder=True,
            ...           seed=0).epoch_steps(3)
            2
        """
        plan = self._plans.get(int(epoch))
        if plan is None:
            return self.steps_per_epoch
        global_batch = self.batch_size * self.sampler.num_replicas
        return plan_steps(plan, global_batch, self.drop_remainder)

    def rank_sampler(self, rank: int, epoch: int) -> Sampler:
        """The input's sampler of global rank ``rank`` at ``epoch`` (dealing an elastic plan).

        Example:
            >>> from tfdp.samplers import DistributedSampler
            >>> plan = EntryPlan(DistributedSampler(10, 2, 0), batch_size=5,
            ...                  drop_remainder=True, seed=0)
            >>> sampler = plan.rank_sampler(1, 2)
            >>> sampler.rank, sampler.epoch
            (1, 2)
        """
        return self._dealt(self.sampler, rank, epoch)

    def _dealt(self, sampler: Sampler, rank: int, epoch: int) -> Sampler:
        out = sampler.with_rank(rank)
        out.set_epoch(int(epoch))
        plan = self._plans.get(int(epoch))
        if plan is not None:
            out.follow(plan)
        return out

    def epoch_key(self, epoch: int) -> np.int64:
        """The augmentation key of ``epoch``: the first word of each of its entries' seeds.

        Example:
            >>> from tfdp.samplers import DistributedSampler
            >>> from tfdp.seeding import epoch_seed_key
            >>> plan = EntryPlan(DistributedSampler(4, 1, 0), batch_size=2,
            ...                  drop_remainder=True, seed=7)
            >>> int(plan.epoch_key(3)) == epoch_seed_key(7, 3)
            True
        """
        return np.int64(epoch_seed_key(self.seed, int(epoch)))

    def rank_entries(self, rank: int, epoch: int, start: int) -> RankEntries:
        """Global rank ``rank``'s entries of ``epoch`` from entry ``start`` on.

        In an elastic epoch with ``drop_remainder``, every rank's share of the
        plan's whole steps (the rest of the dealt list is dropped).

        Example:
            >>> from tfdp.samplers import RepeatAugSampler
            >>> plan = EntryPlan(RepeatAugSampler(4, 2, 0, shuffle=False, selected_round=0),
            ...                  batch_size=2, drop_remainder=True, seed=0)
            >>> [plan.rank_entries(r, epoch=0, start=0).indices.tolist() for r in (0, 1)]
            [[0, 0], [0, 1]]
            >>> [plan.rank_entries(r, epoch=0, start=0).positions.tolist() for r in (0, 1)]
            [[0, 2], [1, 3]]
        """
        sampler = self._dealt(self.index_sampler, rank, epoch)
        stop = None
        if sampler.plan is not None and self.drop_remainder:
            stop = self.epoch_steps(int(epoch)) * self.batch_size
        idx = sampler.indices(int(start), stop)
        pos = sampler.positions(int(start), stop)
        if isinstance(sampler, DistributedEvalSampler):
            weight = sampler.mask(int(start)).astype(np.float32)
        else:
            weight = np.ones(idx.shape, np.float32)
        key = np.full(idx.shape, self.epoch_key(epoch), np.int64)
        return RankEntries(idx, pos, key, weight)
