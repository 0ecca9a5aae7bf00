"""What happens to an input's loaded examples: augmentation, batch stages, weights and ids.

This module owns :class:`ExamplePipeline`, the part of a
:class:`~tfdp.input.DistributedInput` that turns loaded examples into the
elements a replica receives: the seeded augmentation (per example, or batched;
the stages that mix a batch's samples run after batching), the sample weight
and the audit ids (:meth:`ExamplePipeline.finish_element`), and the
``tf.function`` s of these steps traced once per input and element spec, so
that a new dataset (every epoch, a resume) traces a thin call instead of the
whole augmentation graph. Which indices are loaded, and in which order, is the
pipeline's business (:mod:`tfdp.input.pipeline`), not this module's.

An augmentation's seed for an entry is ``[key, position]``: the epoch's key
(:func:`tfdp.seeding.epoch_seed_key`) and the entry's place in the sampler's
padded global list, so the copies of a sample differ and a rerun repeats them.

Example:
    >>> import numpy as np
    >>> from tfdp.sources import ArraySource
    >>> ex = ExamplePipeline(ArraySource(np.arange(4)), None, batch_size=2,
    ...                      drop_remainder=True, with_weights=True, return_ids=False)
    >>> ex.finish_element((10, 20), 1, 5, 0.5)
    (10, 20, 0.5)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf

from tfdp._autograph import plain, user_code
from tfdp._compat.fast.graph import lightly_optimized_map
from tfdp.augment.base import get_image, put_image
from tfdp.augment.compose import split_batch_stages
from tfdp.augment.contract import is_batched_augmentation
from tfdp.random import sample_seeds
from tfdp.sources.base import WeightedSource
from tfdp.windows.decode import encoded_request
from tfdp.windows.plan import WindowPipeline, split_window


class ExamplePipeline:
    """Loaded examples -> an input's elements: augmented, batched, weighted, with ids.

    Args:
        source: The input's source (``load`` / ``gather`` / ``load_with_weight``
            are called here for random access; a stream's records come in).
        augment: The input's augmentation (see :class:`tfdp.DistributedInput`), or None.
        batch_size: Examples per replica per step.
        drop_remainder: Whether a last partial batch is dropped.
        with_weights: Append a float32 sample weight to every element.
        return_ids: Pair every element with ``{"index": ..., "position": ...}``.
        num_parallel_calls: Parallelism of the maps this part adds.

    Example:
        >>> import numpy as np, tensorflow as tf
        >>> from tfdp.sources import ArraySource
        >>> ex = ExamplePipeline(ArraySource(np.arange(4)), None, batch_size=2,
        ...                      drop_remainder=True, with_weights=False, return_ids=True)
        >>> ex.finish_element(7, 3, 9, 1.0)
        (7, {'index': 3, 'position': 9})
    """

    def __init__(
        self,
        source: Any,
        augment: Callable[..., Any] | None,
        *,
        batch_size: int,
        drop_remainder: bool,
        with_weights: bool,
        return_ids: bool,
        num_parallel_calls: int = tf.data.AUTOTUNE,
    ) -> None:
        self.source = source
        self.augment = augment
        # What this input calls in the graph: tfdp's own code as is, a user's as AutoGraph
        # converts it (see tfdp._autograph).
        self._augment = user_code(augment) if augment is not None else None
        # Stages that mix the samples of a batch (tfdp.augment.contract.BatchStage) run on each
        # replica's batch: a per-example path applies the rest per example, these after .batch.
        self._per_sample, self._batch_stages = split_batch_stages(augment)
        # A stream's batches of encoded images go through the window plan (see augment_records).
        self._records_plan = _records_plan(augment)
        self._augment_fn: Any = None  # see shared_augment
        self._traced_functions: dict[str, Any] = {}  # see traced
        self.batch_size = int(batch_size)
        self.drop_remainder = bool(drop_remainder)
        self.with_weights = bool(with_weights)
        self.return_ids = bool(return_ids)
        self.num_parallel_calls = num_parallel_calls

    def finish_element(self, example: Any, idx: Any, pos: Any, weight: Any) -> Any:
        """The element for a loaded ``example``: its weight and ids added.

        ``with_weights`` appends ``weight`` (to a tuple, or as a dict's
        ``"sample_weight"``); ``return_ids`` pairs the element with
        ``{"index": idx, "position": pos}``.

        Example:
            >>> import numpy as np
            >>> from tfdp.sources import ArraySource
            >>> ex = ExamplePipeline(ArraySource(np.arange(4)), None, batch_size=2,
            ...                      drop_remainder=True, with_weights=True, return_ids=True)
            >>> ex.finish_element({"x": 10}, 1, 5, 0.5)
            ({'x': 10, 'sample_weight': 0.5}, {'index': 1, 'position': 5})
        """
        if self.with_weights:
            if isinstance(example, dict):
                example = {**example, "sample_weight": weight}
            elif isinstance(example, (tuple, list)):
                example = (*example, weight)
            else:
                example = (example, weight)
        if self.return_ids:
            return example, {"index": idx, "position": pos}
        return example

    def batched(self, ds: tf.data.Dataset, traced: bool = False) -> tf.data.Dataset:
        """A per-example dataset batched; its elements finished (batch stages, weights, ids).

        ``traced``: the finishing function is traced once per input and element
        spec (:meth:`traced`), for a dataset built anew every epoch.
        """
        ds = ds.batch(self.batch_size, drop_remainder=self.drop_remainder)
        if self._batch_stages is None:  # the examples were finished one by one
            return ds
        parallel = self.num_parallel_calls
        if traced:
            spec = ds.element_spec
            finish = self.traced(f"finish_batch {spec}", self.finish_batch, list(spec))
            return lightly_optimized_map(ds, finish, parallel)
        return ds.map(plain(self.finish_batch), num_parallel_calls=parallel, deterministic=True)

    def traced(self, name: str, fn: Callable[..., Any], signature: list[Any]) -> Any:
        """``fn`` as a ``tf.function`` of ``signature``, made once per input and ``name``.

        What the input's maps call: a new dataset (every epoch, a resume)
        then traces a thin call instead of the whole loading and augmentation
        graph, and its iterators instantiate it optimised lightly
        (:func:`tfdp._compat.fast.graph.lightly_optimized_map`): a DeiT pipeline cost every
        epoch seconds of tracing and of Grappler on its RandAugment branches.

        Example:
            >>> import numpy as np, tensorflow as tf
            >>> from tfdp.sources import ArraySource
            >>> ex = ExamplePipeline(ArraySource(np.arange(4)), None, batch_size=2,
            ...                      drop_remainder=True, with_weights=False, return_ids=False)
            >>> double = ex.traced("double", lambda x: 2 * x, [tf.TensorSpec([], tf.int64)])
            >>> int(double(tf.constant(4, tf.int64))), ex.traced("double", None, []) is double
            (8, True)
        """
        traced = self._traced_functions.get(name)
        if traced is None:
            traced = tf.function(plain(fn), input_signature=signature, autograph=False)
            self._traced_functions[name] = traced
        return traced

    def finish_batch(self, example: Any, idx: Any, pos: Any, key: Any, weight: Any) -> Any:
        """A batch of per-example augmented examples, through the batch stages, finished."""
        example = self._batch_stages(example, sample_seeds(key, pos))
        return self.finish_element(example, idx, pos, weight)

    def finish_one(self, example: Any, idx: Any, pos: Any, key: Any, weight: Any) -> Any:
        """An example's element, or (with batch stages) what the batch map needs."""
        if self._batch_stages is None:
            return self.finish_element(example, idx, pos, weight)
        return example, idx, pos, key, weight

    def load_batch(self, idx: Any, pos: Any, key: Any, weight: Any) -> Any:
        """A batch gathered from the source by ``idx``, augmented as one, finished."""
        example = user_code(self.source.gather)(idx)
        if self._augment is not None:
            example = self.shared_augment()(example, sample_seeds(key, pos))
        return self.finish_element(example, idx, pos, weight)

    def shared_augment(self) -> Any:
        """The batched augmentation as one ``tf.function`` shared by every rank's pipeline.

        Each rank's dataset (and each call of ``epochs``) would trace the
        augmentation into its own map function; called through one
        ``tf.function``, it is traced once per input signature and the rank
        pipelines call that graph (the same ops: the same values).
        """
        if self._augment_fn is None:
            self._augment_fn = tf.function(self._augment, autograph=False)
        return self._augment_fn

    def load_one(self, idx: Any, pos: Any, key: Any, weight: Any) -> Any:
        """One example loaded from the source (weight 0 if skipped), augmented, finished."""
        if isinstance(self.source, WeightedSource):
            example, ok = user_code(self.source.load_with_weight)(idx)
            weight = weight * tf.cast(ok, tf.float32)
        else:
            example = user_code(self.source.load)(idx)
        return self.finish_one(self.augment_one(example, key, pos), idx, pos, key, weight)

    def augment_one(self, example: Any, key: Any, pos: Any) -> Any:
        """The per-sample stages on one example (the batch stages come after batching)."""
        if self._batch_stages is None:  # the kind is the user's callable's, not its wrapper's
            kind, augment = self.augment, self._augment
        else:
            kind = augment = self._per_sample
        if augment is None:
            return example
        seed = tf.stack([key, pos])
        if is_batched_augmentation(kind):
            batch = tf.nest.map_structure(lambda t: tf.expand_dims(t, 0), example)
            out = augment(batch, tf.expand_dims(seed, 0))
            return tf.nest.map_structure(lambda t: t[0], out)
        return augment(example, seed)

    def augments_stream_batches(self) -> bool:
        """Whether a stream's records are augmented batch by batch.

        So they are for a batched augmentation of examples whose every component
        has a fixed shape (so that examples batch before it).

        Example:
            >>> import numpy as np
            >>> from tfdp.sources import ArraySource
            >>> ExamplePipeline(ArraySource(np.arange(4)), None, batch_size=2, drop_remainder=True,
            ...                 with_weights=False, return_ids=False).augments_stream_batches()
            False
        """
        if self._augment is None or not is_batched_augmentation(self.augment):
            return False
        specs = tf.nest.flatten(self.source.element_spec)
        return all(s.shape.is_fully_defined() for s in specs)

    def has_batch_stages(self) -> bool:
        """Whether the augmentation has stages that mix a batch's samples (run after batching).

        Example:
            >>> import numpy as np
            >>> from tfdp.sources import ArraySource
            >>> ExamplePipeline(ArraySource(np.arange(4)), None, batch_size=2, drop_remainder=True,
            ...                 with_weights=False, return_ids=False).has_batch_stages()
            False
        """
        return self._batch_stages is not None

    def augment_records(self, example: Any, seeds: Any) -> Any:
        """A batch of a stream's records augmented (seeds ``[B, 2]``): the augmentation's values.

        Encoded images (``TFRecordSource(images="encoded")``) under an
        augmentation that is a window stage and per-image stages go through
        the window plan (:func:`tfdp.windows.decode.encoded_request`): each
        distinct image decoded once, over its windows, and every sample
        finished (resized, the per-image stages) inside the decoding loop, as
        the image-folder window path does -- the same values as the
        augmentation on the batch, without its passes over the whole batch.
        """
        plan = self._records_plan
        if plan is not None:
            images = get_image(example, plan.window.image_key)
            if isinstance(images, tf.Tensor) and images.dtype == tf.string:
                out = encoded_request(images, plan.request(seeds, on_host=True))
                return put_image(example, out, plan.window.image_key)
        return self._augment(example, seeds)

    def stream_batch(self, example: Any, idx: Any, pos: Any, key: Any) -> Any:
        """A batch of a stream's records, augmented as one (seeds per row), finished."""
        example = self.augment_records(example, sample_seeds(key, pos))
        return self.finish_element(example, idx, pos, tf.ones(tf.shape(pos), tf.float32))

    def stream_step(self, example: Any, idx: Any, pos: Any, key: Any, slot: Any) -> Any:
        """A step's records of every local rank, augmented as one batch: the ranks' elements.

        ``slot``: each row's place in the step's rank batches (rank ``j``'s
        entry ``b`` at ``j * batch_size + b``, :func:`tfdp.input.streams.step_rows`).
        The rows are put in that order first (records and ids: cheap), so the
        augmented batch is the ranks' batches back to back, cut apart without
        a copy. Returns one element per rank (a tuple), finished -- or, with
        batch stages, what :meth:`finish_batch` needs, the per-sample stages
        applied (the batch stages run on each rank's batch). A batched
        augmentation's rows are its per-row results, so each rank's rows
        equal :meth:`stream_batch`'s on its batch.
        """
        order = tf.math.invert_permutation(slot)
        example, idx, pos, key = tf.nest.map_structure(
            lambda t: tf.gather(t, order), (example, idx, pos, key)
        )
        if self._batch_stages is None:
            out = self.stream_batch(example, idx, pos, key)
        else:
            if self._per_sample is not None:
                example = self._per_sample(example, sample_seeds(key, pos))
            out = (example, idx, pos, key, tf.ones(tf.shape(pos), tf.float32))
        b = self.batch_size
        ranks = int(slot.shape[0]) // b

        def cut(t: tf.Tensor) -> list[tf.Tensor]:  # unstack on axis 0 shares the buffer
            batches = tf.reshape(t, tf.concat([[ranks, b], tf.shape(t)[1:]], 0))
            return [tf.ensure_shape(x, [b, *t.shape[1:]]) for x in tf.unstack(batches, ranks)]

        leaves = [cut(t) for t in tf.nest.flatten(out)]
        return tuple(
            tf.nest.pack_sequence_as(out, [leaf[j] for leaf in leaves]) for j in range(ranks)
        )

    def stream_one(self, example: Any, idx: Any, pos: Any, key: Any) -> Any:
        """One record of a stream, augmented, finished (or passed on to the batch stages)."""
        example = self.augment_one(example, key, pos)
        return self.finish_one(example, idx, pos, key, tf.constant(1.0))


def _records_plan(augment: Any) -> WindowPipeline | None:
    """The window plan of an augmentation of window and per-image stages only, else None."""
    plan = split_window(augment)
    if plan is None or plan.batch_stages:
        return None
    key = plan.window.image_key
    if any(stage.image_key != key for _, stage in plan.image_stages):
        return None
    return plan
