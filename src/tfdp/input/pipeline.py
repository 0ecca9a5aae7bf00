"""The per-replica input of a strategy: :class:`DistributedInput`, and the one loader it takes.

This module owns :class:`DistributedInput`, the one entry point that turns a
source, a sampler configuration, a batch size and an augmentation into a
``tf.distribute.DistributedDataset`` in which the replica of global rank ``r``
receives exactly ``sampler(rank=r).indices()``, in order, batch after batch,
and :func:`make_loader`, the one factory that picks the back-end loading them.

How: the input plans every rank's entries once (:class:`tfdp.input.entries.EntryPlan`:
the sampler's indices and positions, the epoch's augmentation key, the weights)
and hands the plan to one loader (:class:`tfdp.input.loader.Loader`): a
random-access source's per-rank pipelines (:mod:`tfdp.input.indexed`), a
stream (:mod:`tfdp.input.streams`), or the window loader
(:mod:`tfdp.windows.loader`: a source that decodes windows, e.g. a JPEG image
folder, under an augmentation that starts by cutting one -- each file read and
decoded once per chunk of a step, over its windows only). A worker's dataset
holds its local replicas' batches round-robin: in
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

from collections.abc import Callable
from typing import Any

import tensorflow as tf

from tfdp.elastic import epoch_plan
from tfdp.errors import ConfigError, ConfigTypeError
from tfdp.input.agreement import PermutationAgreement
from tfdp.input.config import SamplerSpec, resolve_batch_size, resolve_sampler
from tfdp.input.entries import EntryPlan
from tfdp.input.examples import ExamplePipeline
from tfdp.input.indexed import IndexedBatches
from tfdp.input.loader import Loader
from tfdp.input.streams import StreamBatches
from tfdp.samplers import DistributedEvalSampler, Sampler
from tfdp.sources.base import RandomAccessSource, StreamingSource
from tfdp.windows.contract import WindowSource
from tfdp.windows.loader import WindowedBatches
from tfdp.windows.plan import split_window


def make_loader(
    plan: EntryPlan, examples: ExamplePipeline, *, num_replicas: int, num_parallel_calls: int
) -> Loader:
    """The one loader of an input's plan: its source and augmentation pick the back-end.

    A streaming source (:class:`tfdp.sources.base.StreamingSource`) is read
    by :class:`~tfdp.input.streams.StreamBatches`; a random-access source
    that decodes windows (:class:`tfdp.windows.contract.WindowSource`) under
    an augmentation that starts with a window stage
    (:func:`tfdp.windows.plan.split_window`) by
    :class:`~tfdp.windows.loader.WindowedBatches`; any other random-access
    source by :class:`~tfdp.input.indexed.IndexedBatches`. Each gives the
    same elements for the plan's entries.

    Args:
        plan: The input's planned entries (:class:`~tfdp.input.entries.EntryPlan`).
        examples: What happens to the loaded examples; it holds the source and
            the augmentation (:class:`~tfdp.input.examples.ExamplePipeline`).
        num_replicas: The world size (a stream's lanes depend on it).
        num_parallel_calls: Parallelism of the loaders' maps.

    Example:
        >>> import numpy as np
        >>> from tfdp import augment
        >>> from tfdp.sources import ArraySource
        >>> inp = DistributedInput(None, ArraySource(np.zeros((4, 8, 8, 3))), batch_size=2,
        ...                        augment=augment.RandomResizedCrop(4))
        >>> loader = make_loader(inp.plan, inp.examples, num_replicas=1, num_parallel_calls=1)
        >>> type(loader).__name__  # arrays: nothing to decode, no window path
        'IndexedBatches'
    """
    source = examples.source
    if isinstance(source, StreamingSource):
        return StreamBatches(
            plan, examples, num_replicas=num_replicas, num_parallel_calls=num_parallel_calls
        )
    windows = split_window(examples.augment) if isinstance(source, WindowSource) else None
    if windows is not None:
        return WindowedBatches(
            source,
            windows,
            plan,
            examples,
            batch_size=plan.batch_size,
            drop_remainder=plan.drop_remainder,
            num_parallel_calls=num_parallel_calls,
        )
    return IndexedBatches(plan, examples, num_parallel_calls=num_parallel_calls)


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
                f"must be a random-access source (num_examples, element_spec, load) or a "
                f"streaming one (num_examples, element_spec, stream_length, stream), see "
                f"tfdp.sources.base; got {type(source).__name__}",
                argument="source",
            )
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
        #: Every rank's entries, epoch by epoch, and their seeds (tfdp.input.entries): planned
        #: once, what every loader loads.
        self.plan = EntryPlan(
            self.sampler,
            batch_size=self.batch_size,
            drop_remainder=self.drop_remainder,
            seed=self.seed,
            streaming=self.streaming,
        )
        self.steps_per_epoch = self.plan.steps_per_epoch
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
        #: The back-end that loads the plan's entries (tfdp.input.loader.Loader; make_loader).
        self.loader = make_loader(
            self.plan,
            self.examples,
            num_replicas=self.num_replicas,
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
        plan = epoch_plan(
            self.sampler,
            state,
            step,
            global_batch_size=self.global_batch_size,
            drop_remainder=self.drop_remainder,
            stream=self.source if self.streaming else None,
        )
        self.plan.follow(plan)

    def epoch_steps(self, epoch: int) -> int:
        """Steps (global batches) of ``epoch``: ``steps_per_epoch``, or an elastic epoch's plan's.

        Example:
            >>> import numpy as np
            >>> from tfdp.sources import ArraySource
            >>> DistributedInput(None, ArraySource(np.arange(10)), batch_size=5).epoch_steps(3)
            2
        """
        return self.plan.epoch_steps(epoch)

    def rank_sampler(self, rank: int, epoch: int) -> Sampler:
        """The sampler of global rank ``rank`` at ``epoch`` (dealing a plan in an elastic epoch).

        Example:
            >>> import numpy as np
            >>> from tfdp.sources import ArraySource
            >>> inp = DistributedInput(None, ArraySource(np.arange(10)), batch_size=5)
            >>> inp.rank_sampler(0, 2).epoch
            2
        """
        return self.plan.rank_sampler(rank, epoch)

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

    # -- the loader's datasets --------------------------------------------------
    def _check_start_step(self, start_step: int, epoch: int | None = None) -> None:
        steps = self.steps_per_epoch if epoch is None else self.epoch_steps(epoch)
        if start_step < 0 or start_step > steps:
            raise ConfigError(
                f"must be in [0, steps_per_epoch={steps}], got {start_step}",
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
            raise ConfigError(f"must be in [0, {self.num_replicas}), got {rank}", argument="rank")
        self._check_start_step(start_step, first_epoch)
        return self.loader.rank(rank, first_epoch, num_epochs, start_step)

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
        PER_WORKER mode; how the ranks' batches are read is the loader's
        (:meth:`tfdp.input.loader.Loader.worker`: one read per file per chunk
        on the window path, one stream per worker for a stream augmented batch
        by batch).
        """
        if input_context is None:
            worker, workers = 0, 1
        else:
            worker, workers = input_context.input_pipeline_id, input_context.num_input_pipelines
        local = self.num_replicas // workers
        ranks = [worker * local + j for j in range(local)]
        self._check_start_step(start_step, first_epoch)
        ds = self.loader.worker(ranks, first_epoch, num_epochs, start_step)
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
