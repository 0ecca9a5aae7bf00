"""The per-replica pipelines of :class:`DistributedInput`: one rank's ids -> batches, interleaved.

This module owns :class:`DistributedInput`, the one entry point that turns a
source, a sampler configuration, a batch size and an augmentation into a
``tf.distribute.DistributedDataset`` in which the replica of global rank ``r``
receives exactly ``sampler(rank=r).indices()``, in order, batch after batch.

How: for every local replica the worker builds an index-driven pipeline
(sampler indices -> batch -> gather/load -> seeded augmentation), and the
worker's dataset interleaves them round-robin. In
``distribute_datasets_from_function``'s default PER_WORKER mode, element
``k`` of a worker's dataset goes to its local replica ``k mod L``, so local
replica ``j`` of worker ``w`` -- global rank ``w * L + j`` -- gets its own
stream. The same code serves MirroredStrategy, MultiWorkerMirroredStrategy,
OneDeviceStrategy and the default strategy; tf.data auto-sharding is off (the
sampler shards).

Augmentation seeds are ``[key(seed, epoch), position]`` (the key is
:func:`tfdp.seeding.epoch_seed_key`), where ``position``
is the entry's place in the sampler's padded global list: the R copies of a
sample (Repeated Augmentation) get different augmentations, while a rerun or
a run resumed mid-epoch gets identical ones.

Its configuration (batch size, sampler) is checked by :mod:`tfdp.input.config`;
the workers' agreement on a user ``permutation=`` is :mod:`tfdp.input.agreement`.

A source that decodes windows (:class:`tfdp.windows.contract.WindowSource`,
e.g. a JPEG image folder) with an augmentation that starts by cutting one
is loaded by the window loader instead (:func:`tfdp.windows.loader.window_loader`
says when): the same elements, but each file is read and decoded once per
chunk of a step, over its windows only.

Example:
    >>> import numpy as np, tensorflow as tf
    >>> from tfdp.sources import ArraySource
    >>> src = ArraySource((np.zeros((64, 4), "float32"), np.arange(64)))
    >>> inp = DistributedInput(tf.distribute.get_strategy(), src, batch_size=8)
    >>> inp.steps_per_epoch
    8
    >>> x, y = next(iter(inp.epoch(0)))
    >>> x.shape
    TensorShape([8, 4])
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

from tfdp._autograph import plain
from tfdp._compat import lightly_optimized_map
from tfdp._util import deterministic_unsharded
from tfdp.augment.contract import is_batched_augmentation
from tfdp.elastic import epoch_plan, plan_steps
from tfdp.errors import ConfigError, ConfigTypeError
from tfdp.input.agreement import PermutationAgreement
from tfdp.input.config import (
    SamplerSpec,
    resolve_batch_size,
    resolve_sampler,
    stream_index_sampler,
)
from tfdp.input.examples import ExamplePipeline
from tfdp.input.streams import StreamBatches
from tfdp.samplers import DistributedEvalSampler, Sampler
from tfdp.seeding import epoch_seed_key
from tfdp.sources.base import BatchSource, RandomAccessSource, StreamingSource
from tfdp.windows.loader import window_loader

__all__ = ["DistributedInput"]

_INF_EPOCHS = 2**62


class DistributedInput:
    """Index-driven, per-replica input for a ``tf.distribute`` strategy.

    Args:
        strategy: Any ``tf.distribute.Strategy``; ``None`` means the current
            (default) strategy.
        source: A random-access source
            (:class:`tfdp.sources.base.RandomAccessSource`: ``load``, and
            ``gather`` if a :class:`~tfdp.sources.base.BatchSource`, e.g.
            :class:`tfdp.sources.ArraySource`) or a streaming one
            (:class:`tfdp.sources.base.StreamingSource`, e.g.
            :class:`tfdp.sources.TFRecordSource`).
            A stream is indexed by position in the epoch's stream: the
            sampler runs on ``source.stream_length(num_replicas)`` records
            with the identity permutation (the source shuffles files and
            blocks when the sampler's ``shuffle`` is on), so every sampler
            option means what it means for an array of that length. A
            sampler's ``permutation=`` and ``sampler="eval"`` need random access.
        sampler: ``"distributed"``, ``"repeat_aug"``, ``"eval"``, a
            :class:`tfdp.Sampler` instance (a template: its configuration is
            used for every rank; ``num_replicas`` must equal the strategy's),
            or a callable ``(num_examples, num_replicas, rank) -> Sampler``.
        batch_size: Examples per replica per step.
        global_batch_size: Alternatively, examples per step over all replicas
            (must be a multiple of the replica count).
        augment: ``None``; a batched augmentation
            (:class:`tfdp.augment.BatchedAugmentation`: ``batched = True``,
            called as ``aug(batch, seeds[B, 2])``, see :mod:`tfdp.augment`); or a
            per-example function ``fn(example, seed[2]) -> example`` using
            stateless random ops (:class:`~tfdp.augment.PerExampleAugmentation`).
        seed: Keys the sampler's shuffle (for named samplers) and the
            augmentation seeds.
        sampler_options: Keyword arguments for a named sampler (e.g.
            ``{"num_repeats": 3, "selected_round": 0}``).
        drop_remainder: Drop a last partial batch (default: True, except for
            ``"eval"``, whose batches are all full by construction).
        with_weights: Append a float32 sample weight (0 for padding) to every
            element; default True for ``"eval"``.
        return_ids: Yield ``(element, {"index": [B], "position": [B]})`` --
            the audit trail of which sample each replica received (for a
            streaming source, ``index`` is the stream index).
        num_parallel_calls: Parallelism of the load/augment map.

    Raises:
        ConfigTypeError: for a source that meets neither source contract (a TypeError too).
        ConfigError: for a batch size of 0 or one that does not divide, a
            sampler whose ``num_replicas`` differs from the strategy's, fewer
            examples than replicas, or an epoch with no full step.

    Example:
        >>> import numpy as np, tensorflow as tf
        >>> from tfdp.sources import ArraySource
        >>> src = ArraySource((np.zeros((30, 2), "float32"), np.arange(30)))
        >>> inp = DistributedInput(None, src, sampler="eval", batch_size=4)
        >>> [int(w.numpy().sum()) for _, _, w in inp.epoch(0)]
        [4, 4, 4, 4, 4, 4, 4, 2]
    """

    def __init__(
        self,
        strategy: tf.distribute.Strategy | None,
        source: Any,
        *,
        sampler: SamplerSpec = "distributed",
        batch_size: int | None = None,
        global_batch_size: int | None = None,
        augment: Callable[..., Any] | None = None,
        seed: int = 0,
        sampler_options: dict[str, Any] | None = None,
        drop_remainder: bool | None = None,
        with_weights: bool | None = None,
        return_ids: bool = False,
        num_parallel_calls: int = tf.data.AUTOTUNE,
    ) -> None:
        self.strategy = strategy if strategy is not None else tf.distribute.get_strategy()
        self.source = source
        self.num_replicas = int(self.strategy.num_replicas_in_sync)
        self.batch_size = resolve_batch_size(
            batch_size, global_batch_size, num_replicas=self.num_replicas
        )
        self.global_batch_size = self.batch_size * self.num_replicas
        self.augment = augment
        self.seed = int(seed)
        self.return_ids = bool(return_ids)
        self.num_parallel_calls = num_parallel_calls
        self.streaming = isinstance(source, StreamingSource)
        if not self.streaming and not isinstance(source, RandomAccessSource):
            raise ConfigTypeError(
                f"source must be a random-access source (num_examples, element_spec, load) or a "
                f"streaming one (num_examples, element_spec, stream_length, stream), see "
                f"tfdp.sources.base; got {type(source).__name__}",
                argument="source",
            )
        # Elastic resume (see resume_from): epoch -> the rank-0 sampler of another world size
        # whose global list that epoch deals over this input's ranks.
        self._plans: dict[int, Sampler] = {}
        self._agreement = PermutationAgreement(self.strategy)
        # A stream is indexed by its position in the epoch's stream (see
        # tfdp.sources.TFRecordSource): the samplers run on the stream's length.
        if self.streaming:
            num_examples = int(source.stream_length(self.num_replicas))
            what = f"the stream of {type(source).__name__} holds {num_examples} record(s) per epoch"
        else:
            num_examples = int(source.num_examples)
            what = f"the source has {num_examples} example(s)"
        if num_examples < self.num_replicas:
            raise ConfigError(
                f"{what}, fewer than the {self.num_replicas} replicas of the strategy: every "
                "replica needs at least one"
            )
        self.sampler = resolve_sampler(
            sampler,
            num_examples,
            dict(sampler_options or {}),
            num_replicas=self.num_replicas,
            batch_size=self.batch_size,
            seed=self.seed,
            streaming=self.streaming,
        )
        is_eval = isinstance(self.sampler, DistributedEvalSampler)
        self.drop_remainder = (not is_eval) if drop_remainder is None else bool(drop_remainder)
        self.with_weights = is_eval if with_weights is None else bool(with_weights)
        # A stream's samplers pick stream indices (refused here for a sampler that cannot).
        stream_sampler = stream_index_sampler(self.sampler) if self.streaming else None
        per_rank = len(self.sampler)
        if self.drop_remainder:
            self.steps_per_epoch = per_rank // self.batch_size
        else:
            self.steps_per_epoch = math.ceil(per_rank / self.batch_size)
        if self.steps_per_epoch < 1:
            raise ConfigError(
                f"batch_size={self.batch_size} per replica gives no full step per epoch: each "
                f"replica gets {per_rank} example(s) per epoch; use a smaller batch size or "
                "drop_remainder=False"
            )
        #: What happens to loaded examples (augmentation, batch stages, weights, ids).
        self.examples = ExamplePipeline(
            source,
            augment,
            batch_size=self.batch_size,
            drop_remainder=self.drop_remainder,
            with_weights=self.with_weights,
            return_ids=self.return_ids,
            num_parallel_calls=num_parallel_calls,
        )
        #: A streaming source's batches (tfdp.input.streams), else None.
        self.streams: StreamBatches | None = None
        if self.streaming:
            self.streams = StreamBatches(
                source,
                stream_sampler,
                self.examples,
                num_replicas=self.num_replicas,
                seed=self.seed,
                shuffle=self.sampler.shuffle,  # type: ignore[attr-defined]
                num_parallel_calls=num_parallel_calls,
            )
        #: The window loader when the window path applies (tfdp.windows), else None.
        self.window_loader = window_loader(
            source,
            augment,
            self,
            batch_size=self.batch_size,
            drop_remainder=self.drop_remainder,
            num_parallel_calls=num_parallel_calls,
        )

    # -- elastic resume -----------------------------------------------------------
    def resume_from(self, state: dict[str, Any] | None, step: int) -> None:
        """Continue the epoch of a checkpoint's sampler state, saved at this or another world size.

        At another world size (same global batch) that epoch deals the rest of
        the saved world size's list over this input's ranks; see
        :func:`tfdp.elastic.epoch_plan`, which also says what is refused.

        Example:
            >>> import numpy as np
            >>> from tfdp.samplers import DistributedSampler
            >>> from tfdp.sources import ArraySource
            >>> old = DistributedSampler(64, 2, 0)  # a run on 2 replicas, stopped after 3 steps
            >>> old.set_epoch(1)
            >>> inp = DistributedInput(None, ArraySource(np.arange(64)), global_batch_size=8)
            >>> inp.resume_from(old.state_dict(position=3 * 4), step=3)
            >>> inp.epoch_steps(1), inp.rank_sampler(0, 1).positions(3 * 8, 3 * 8 + 2).tolist()
            (8, [24, 25])
        """
        plan = epoch_plan(self, state, step)
        self._plans = {} if plan is None else {plan.epoch: plan}

    def epoch_steps(self, epoch: int) -> int:
        """Steps (global batches) of ``epoch``: ``steps_per_epoch``, or an elastic epoch's plan's.

        Example:
            >>> import numpy as np
            >>> from tfdp.sources import ArraySource
            >>> DistributedInput(None, ArraySource(np.arange(10)), batch_size=5).epoch_steps(3)
            2
        """
        plan = self._plans.get(int(epoch))
        if plan is None:
            return self.steps_per_epoch
        return plan_steps(plan, self.global_batch_size, self.drop_remainder)

    def rank_sampler(self, rank: int, epoch: int) -> Sampler:
        """The sampler of global rank ``rank`` at ``epoch`` (dealing a plan in an elastic epoch).

        Example:
            >>> import numpy as np
            >>> from tfdp.sources import ArraySource
            >>> inp = DistributedInput(None, ArraySource(np.arange(10)), batch_size=5)
            >>> inp.rank_sampler(0, 2).epoch
            2
        """
        sampler = self.sampler.with_rank(rank)
        sampler.set_epoch(int(epoch))
        plan = self._plans.get(int(epoch))
        if plan is not None:
            sampler.follow(plan)
        return sampler

    # -- a user permutation, the same on every worker ------------------------------------
    def check_permutation_agreement(self, epoch: int) -> None:
        """Refuse ``epoch`` when the workers' ``permutation(epoch)`` results differ.

        Only with a user ``permutation=`` under several workers (otherwise every
        rank is in this process and deals the one permutation it computed):
        every worker's fingerprint of the epoch's permutation
        (:meth:`tfdp.Sampler.permutation_fingerprint`) is all-gathered -- one
        small collective, which every worker must join -- and compared.

        Raises:
            ConfigError: naming the epoch and each worker's fingerprint
                (``argument="permutation"``).

        Example:
            >>> import numpy as np
            >>> from tfdp.samplers import DistributedSampler
            >>> from tfdp.sources import ArraySource
            >>> s = DistributedSampler(8, 1, 0, permutation=lambda e: np.roll(np.arange(8), e))
            >>> DistributedInput(None, ArraySource(np.arange(8)), sampler=s,
            ...                  batch_size=4).check_permutation_agreement(0)  # one worker: ok
        """
        self._agreement.check(self.sampler, epoch)

    # -- per-rank pipelines -----------------------------------------------------
    def rank_entries(self, rank: int, epoch: int, start: int) -> tuple[np.ndarray, ...]:
        """Global rank ``rank``'s entries of ``epoch`` from entry ``start`` on.

        Returns ``(indices, positions, keys, weights)``: the example indices
        (int64), their positions in the sampler's global list (int64), the
        augmentation keys (int64; an entry's seed is ``[key, position]``) and
        the sample weights (float32: the evaluation sampler's mask, else 1).

        Example:
            >>> import numpy as np
            >>> from tfdp.sources import ArraySource
            >>> src = ArraySource(np.arange(6))
            >>> inp = DistributedInput(None, src, sampler="eval", batch_size=4)
            >>> idx, pos, key, weight = inp.rank_entries(0, 0, 2)
            >>> idx.tolist(), pos.tolist(), weight.tolist()
            ([2, 3, 4, 5, 0, 1], [2, 3, 4, 5, 6, 7], [1.0, 1.0, 1.0, 1.0, 0.0, 0.0])
        """
        sampler = self.rank_sampler(rank, int(epoch))
        stop = None  # an elastic epoch: every rank's share of the plan's whole steps
        if sampler.plan is not None and self.drop_remainder:
            stop = self.epoch_steps(int(epoch)) * self.batch_size
        idx = sampler.indices(int(start), stop)
        pos = sampler.positions(int(start), stop)
        if isinstance(sampler, DistributedEvalSampler):
            weight = sampler.mask(int(start)).astype(np.float32)
        else:
            weight = np.ones(idx.shape, np.float32)
        key = np.full(idx.shape, epoch_seed_key(self.seed, int(epoch)), np.int64)
        return idx, pos, key, weight

    def _index_dataset(
        self, rank: int, first_epoch: int, num_epochs: int | None, start_step: int
    ) -> tf.data.Dataset:
        """Epoch after epoch of this rank's batches; each epoch batched on its own."""
        start = start_step * self.batch_size
        batched = isinstance(self.source, BatchSource) and (
            self.augment is None or is_batched_augmentation(self.augment)
        )

        rows = self.batch_size if self.drop_remainder else None  # the batches' static size
        vector, scalar = tf.TensorSpec([rows], tf.int64), tf.TensorSpec([], tf.int64)
        ex = self.examples
        load_batch = ex.traced(
            "load_batch", ex.load_batch, [vector] * 3 + [tf.TensorSpec([rows], tf.float32)]
        )
        scalars = [scalar] * 3 + [tf.TensorSpec([], tf.float32)]
        load_one = ex.traced("load_one", ex.load_one, scalars)

        def per_epoch(epoch: tf.Tensor) -> tf.data.Dataset:
            first = tf.cast(tf.equal(epoch, first_epoch), tf.int64) * start
            arrays = tf.numpy_function(
                lambda e, s: self.rank_entries(rank, int(e), int(s)),
                [epoch, first],
                [tf.int64, tf.int64, tf.int64, tf.float32],
                stateful=False,
            )
            for a in arrays:
                a.set_shape([None])
            if batched:
                # Batch the index arrays by a reshape (one slice per batch, not per example).
                b = self.batch_size
                full = tf.shape(arrays[0], out_type=tf.int64)[0] // b * b
                ds = tf.data.Dataset.from_tensor_slices(
                    tuple(tf.reshape(a[:full], [-1, b]) for a in arrays)
                )
                if not self.drop_remainder:  # the last, partial batch
                    tail = tf.data.Dataset.from_tensor_slices(tuple(a[full:] for a in arrays))
                    ds = ds.concatenate(tail.batch(b))
                return lightly_optimized_map(ds, load_batch, self.num_parallel_calls)
            ds = tf.data.Dataset.from_tensor_slices(tuple(arrays))
            ds = lightly_optimized_map(ds, load_one, self.num_parallel_calls)
            return self.examples.batched(ds, traced=True)

        last = _INF_EPOCHS if num_epochs is None else first_epoch + num_epochs
        return tf.data.Dataset.range(first_epoch, last).flat_map(plain(per_epoch))

    def finish_element(self, example: Any, idx: Any, pos: Any, weight: Any) -> Any:
        """The element this input yields for a loaded ``example``: its weight and ids added.

        See :meth:`tfdp.input.examples.ExamplePipeline.finish_element`.

        Example:
            >>> import numpy as np
            >>> from tfdp.sources import ArraySource
            >>> inp = DistributedInput(None, ArraySource(np.arange(4)), batch_size=2,
            ...                        with_weights=True, return_ids=True)
            >>> inp.finish_element((10, 20), 1, 5, 0.5)
            ((10, 20, 0.5), {'index': 1, 'position': 5})
        """
        return self.examples.finish_element(example, idx, pos, weight)

    def _check_start_step(self, start_step: int, epoch: int | None = None) -> None:
        steps = self.steps_per_epoch if epoch is None else self.epoch_steps(epoch)
        if start_step < 0 or start_step > steps:
            raise ConfigError(
                f"start_step must be in [0, steps_per_epoch={steps}], got {start_step}",
                argument="start_step",
            )

    def rank_dataset(
        self, rank: int, first_epoch: int = 0, num_epochs: int | None = 1, start_step: int = 0
    ) -> tf.data.Dataset:
        """The per-replica batches of global rank ``rank``: a plain ``tf.data.Dataset``.

        Args:
            rank: Global rank in ``[0, num_replicas)``.
            first_epoch: Epoch to start at.
            num_epochs: Epochs to cover (``None``: endless).
            start_step: Steps of ``first_epoch`` to skip, without reading them.

        Example:
            >>> import numpy as np
            >>> from tfdp.sources import ArraySource
            >>> src = ArraySource(np.arange(10))
            >>> inp = DistributedInput(None, src, sampler="eval", batch_size=5)
            >>> [x.numpy().tolist() for x, _ in inp.rank_dataset(0)]
            [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]
        """
        if not 0 <= rank < self.num_replicas:
            raise ConfigError(
                f"rank must be in [0, {self.num_replicas}), got {rank}", argument="rank"
            )
        self._check_start_step(start_step, first_epoch)
        if self.streaming:
            ds = self.streams.rank(rank, first_epoch, num_epochs, start_step)
        elif self.window_loader is not None:
            ds = self.window_loader.dataset([rank], first_epoch, num_epochs, start_step)
        else:
            ds = self._index_dataset(rank, first_epoch, num_epochs, start_step)
        return deterministic_unsharded(ds)

    def worker_dataset(
        self,
        input_context: tf.distribute.InputContext | None = None,
        first_epoch: int = 0,
        num_epochs: int | None = 1,
        start_step: int = 0,
    ) -> tf.data.Dataset:
        """The dataset of one worker: its local ranks' batches interleaved round-robin.

        Element ``k`` is for local replica ``k mod L``, which is how
        ``distribute_datasets_from_function`` deals a worker's elements in
        PER_WORKER mode.
        """
        if input_context is None:
            worker, workers = 0, 1
        else:
            worker, workers = input_context.input_pipeline_id, input_context.num_input_pipelines
        local = self.num_replicas // workers
        ranks = [worker * local + j for j in range(local)]
        if self.window_loader is not None:  # all local ranks together: one read per file per chunk
            self._check_start_step(start_step, first_epoch)
            ds = self.window_loader.dataset(ranks, first_epoch, num_epochs, start_step)
            return deterministic_unsharded(ds).prefetch(tf.data.AUTOTUNE)
        if self.streaming:  # every local rank's step read and augmented as one, if it applies
            self._check_start_step(start_step, first_epoch)
            shared = self.streams.shared(ranks, first_epoch, num_epochs, start_step)
            if shared is not None:
                return shared.prefetch(tf.data.AUTOTUNE)
        parts = [self.rank_dataset(r, first_epoch, num_epochs, start_step) for r in ranks]
        if len(parts) == 1:
            ds = parts[0]
        else:
            choice = tf.data.Dataset.range(local).repeat()
            ds = tf.data.Dataset.choose_from_datasets(parts, choice, stop_on_empty_dataset=True)
        return ds.prefetch(tf.data.AUTOTUNE)

    # -- distributed datasets ---------------------------------------------------
    def epochs(
        self, first_epoch: int = 0, num_epochs: int | None = None, start_step: int = 0
    ) -> tf.distribute.DistributedDataset:
        """Several epochs back to back, each reshuffled: for ``model.fit``.

        Pass ``steps_per_epoch=self.steps_per_epoch`` to ``fit``: it then keeps
        one iterator across epochs and each fit epoch is exactly one sampler
        epoch (``initial_epoch=first_epoch`` when resuming).

        Args:
            first_epoch: The sampler epoch of the first element.
            num_epochs: How many epochs (``None``: endless).
            start_step: Steps of ``first_epoch`` already done (resume), skipped
                without reading them.
        """
        return self.strategy.distribute_datasets_from_function(
            lambda ctx: self.worker_dataset(ctx, first_epoch, num_epochs, start_step)
        )

    def epoch(self, epoch: int, start_step: int = 0) -> tf.distribute.DistributedDataset:
        """One epoch (for a custom loop): ``for batch in inp.epoch(e): strategy.run(...)``.

        The dataset of epoch ``e`` is the same whatever ran before in the process.

        Under several workers, with a user ``permutation=``, every worker must
        call it: it first checks that the workers agree on the epoch's
        permutation (:meth:`check_permutation_agreement`).

        Args:
            epoch: Sampler epoch.
            start_step: Steps already done in this epoch (mid-epoch resume).
        """
        self.check_permutation_agreement(epoch)
        return self.epochs(epoch, 1, start_step)

    def __repr__(self) -> str:
        return (
            f"DistributedInput(replicas={self.num_replicas}, batch_size={self.batch_size}, "
            f"steps_per_epoch={self.steps_per_epoch}, sampler={self.sampler!r})"
        )
