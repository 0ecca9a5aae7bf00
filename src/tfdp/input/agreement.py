"""The workers' agreement on a user ``permutation=``: one all-gather of a fingerprint per epoch.

This module owns :class:`PermutationAgreement`. A sampler's ``permutation=``
(a user's ``epoch -> permutation``) is called once per epoch in each process;
every worker calls it for itself, so under several workers they compare
their results' fingerprints (:meth:`tfdp.Sampler.permutation_fingerprint`)
at an epoch's start and refuse an epoch they disagree on: one small
collective, which every worker must join.

Example:
    >>> from tfdp.samplers import DistributedSampler
    >>> s = DistributedSampler(4, 1, 0, permutation=lambda epoch: [3, 2, 1, 0])
    >>> PermutationAgreement(None).check(s, 0)  # one worker: nothing to compare
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from tfdp.distribute import worker_info
from tfdp.errors import ConfigError
from tfdp.samplers import Sampler


class PermutationAgreement:
    """Checks that every worker of ``strategy`` got the same ``permutation(epoch)``.

    Args:
        strategy: The input's strategy (``None``: the current one).
    """

    def __init__(self, strategy: tf.distribute.Strategy | None) -> None:
        self.strategy = strategy if strategy is not None else tf.distribute.get_strategy()
        self._gather: Any = None  # the compiled all-gather, built on first use

    def check(self, sampler: Sampler, epoch: int) -> None:
        """Refuse ``epoch`` when the workers' ``permutation(epoch)`` results differ.

        Nothing is compared without a user ``permutation=`` or with one worker.

        Raises:
            tfdp.errors.ConfigError: naming the epoch and each worker's fingerprint
                (``argument="permutation"``).
        """
        fingerprint = sampler.permutation_fingerprint(int(epoch))
        if fingerprint is None:
            return
        info = worker_info(self.strategy)
        if info.num_workers < 2:
            return
        if self._gather is None:
            strategy = self.strategy

            @tf.function(autograph=False)
            def gather(value: tf.Tensor) -> tf.Tensor:
                def replica(v: tf.Tensor) -> tf.Tensor:
                    ctx = tf.distribute.get_replica_context()
                    return ctx.all_gather(v[tf.newaxis], axis=0)

                rows = strategy.run(replica, args=(value,))
                return strategy.experimental_local_results(rows)[0]

            self._gather = gather
        halves = [fingerprint & 0xFFFFFFFF, fingerprint >> 32]  # int64 holds either half
        rows = self._gather(tf.constant(halves, tf.int64)).numpy().tolist()
        firsts = rows[:: info.replicas_per_worker]  # a row per replica, a worker's in a run
        per_worker = [low | high << 32 for low, high in firsts]
        if len(set(per_worker)) > 1:
            shown = ", ".join(f"worker {w}: {fp:016x}" for w, fp in enumerate(per_worker))
            raise ConfigError(
                f"the workers got different permutations for epoch {epoch + 1} "
                f"(permutation({epoch}) fingerprints {shown}), so they would deal different "
                "lists. permutation= must depend on the epoch alone, e.g. torch.randperm(N, "
                "generator=torch.Generator().manual_seed(seed + epoch)), not one generator "
                "shared by every call (see docs/guide.md, Porting from torch / timm)",
                argument="permutation",
            )
