"""The replica step and its compiled functions: :class:`TrainStep`.

This module owns what one ``tf.function`` call of the training loop does:
every optimizer step's loss and gradient are the mean over the rows the step
actually holds, over all replicas and micro-batches (gradient accumulation,
with the epoch's last, shorter group of micro-batches); the gradient is
clipped by global norm *after* the all-reduce; under ``mixed_float16`` every
replica takes the loss scaler's skip decision alike; a non-finite step is
never applied (the check is all-reduced, see :mod:`tfdp.train.guard`). It
builds the compiled functions (straight-line for one step per call, an
Orbit-style ``tf.range`` loop for several) and caches them by what they
depend on. The epoch loop, checkpoints and logs live in
:mod:`tfdp.train.loop` and :mod:`tfdp.train.logs`.

Example:
    >>> import keras, numpy as np, tensorflow as tf
    >>> from tfdp.train.evaluate import PerExampleLoss
    >>> strategy = tf.distribute.get_strategy()
    >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    >>> opt = keras.optimizers.SGD(0.1)
    >>> opt.build(model.trainable_variables)
    >>> step = TrainStep(strategy, model, opt, PerExampleLoss("mse"), keras.metrics.Mean())
    >>> data = tf.data.Dataset.from_tensors((np.ones((4, 3), "float32"), np.zeros((4, 2))))
    >>> out = step.function(str(data.element_spec), group=1, multi=False)(iter(data), 1)
    >>> out.shape  # one step: [loss, replicas with a non-finite loss, ... gradient]
    TensorShape([1, 3])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
import tensorflow as tf

from tfdp.train.evaluate import PerExampleLoss, unpack_batch
from tfdp.train.guard import apply_if_finite, check_policy, nonfinite_local

__all__ = ["TrainStep"]


class TrainStep:
    """One optimizer step on every replica, and the compiled functions running ``n`` of them.

    Args:
        strategy: The strategy the model and optimizer live under.
        model: The Keras model (built in the strategy's scope).
        optimizer: Its optimizer (built; a ``LossScaleOptimizer`` under
            ``mixed_float16``).
        loss: The per-example loss.
        train_loss: The epoch's mean-loss metric (updated with applied steps only).
        metrics: The epoch's training metrics.
        clip_global_norm: Clip the all-reduced gradient to this global norm.
        on_nonfinite: ``"stop"``, ``"skip"`` or ``"ignore"`` (see
            :class:`tfdp.train.Trainer`).
        jit_compile: Compile the forward/backward pass with XLA.
        multi_worker: Whether the strategy spans several workers.

    Example:
        >>> TrainStep.__name__
        'TrainStep'
    """

    def __init__(
        self,
        strategy: tf.distribute.Strategy,
        model: keras.Model,
        optimizer: keras.optimizers.Optimizer,
        loss: PerExampleLoss,
        train_loss: keras.metrics.Metric,
        metrics: Sequence[keras.metrics.Metric] = (),
        *,
        clip_global_norm: float | None = None,
        on_nonfinite: str = "stop",
        jit_compile: bool = False,
        multi_worker: bool = False,
    ) -> None:
        self.strategy = strategy
        self.model = model
        self.optimizer = optimizer
        self.loss = loss
        self.train_loss = train_loss
        self.metrics = list(metrics)
        self.clip_global_norm = clip_global_norm
        self.on_nonfinite = check_policy(on_nonfinite)
        self.jit_compile = jit_compile
        self.multi_worker = multi_worker
        self._fns: dict[tuple[Any, ...], Any] = {}
        self._grad_fn: Any = None

    @property
    def _loss_scale_optimizer(self) -> keras.optimizers.LossScaleOptimizer | None:
        opt = self.optimizer
        return opt if isinstance(opt, keras.optimizers.LossScaleOptimizer) else None

    # -- the step, in replica context ----------------------------------------------------
    def step_rows(self, batches: tuple[Any, ...]) -> int | tf.Tensor:
        """Rows of one optimizer step over all replicas and micro-batches: the loss divisor.

        Static per-replica batch dimensions (``drop_remainder=True``) give a
        Python int, ``B * replicas * micro-batches``, and no collective; a
        dynamic one (a last, partial batch) costs one scalar all-reduce of the
        local row count. Runs in replica context.
        """
        leaves = [tf.nest.flatten(unpack_batch(b)[0])[0] for b in batches]
        sizes = [leaf.shape[0] if leaf.shape.rank else None for leaf in leaves]
        if all(isinstance(s, int) for s in sizes):
            return sum(sizes) * int(self.strategy.num_replicas_in_sync)
        local = tf.add_n([tf.cast(tf.shape(leaf)[0], tf.float32) for leaf in leaves])
        total = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, local)
        return tf.cast(tf.round(total), tf.int64)

    def gradients(
        self, batches: tuple[Any, ...], rows: Any
    ) -> tuple[list[tf.Tensor], tf.Tensor, list[tuple[Any, ...]]]:
        """This replica's summed gradients over the micro-batches, its loss share, and outputs.

        Each micro-batch contributes ``sum(sample_weight * loss) / rows``, ``rows``
        the rows of the whole optimizer step over all replicas and micro-batches
        (see :meth:`step_rows`), so the all-reduced gradient is that of the mean
        over the step's rows; the regularisation losses are added once per step
        (a ``1 / (replicas * micro-batches)`` share each). The outputs,
        ``(y, predictions, sample_weight, per-example loss)`` per micro-batch,
        feed the metrics once the step is known to be applied. Runs in replica
        context and only reads the model's variables, so it can be XLA-compiled.
        """
        model = self.model
        tvars = model.trainable_variables
        lso = self._loss_scale_optimizer
        group = len(batches)
        grads_sum: list[Any] | None = None
        total_loss = tf.constant(0.0)
        outputs = []
        for batch in batches:
            x, y, w = unpack_batch(batch)
            with tf.GradientTape() as tape:
                pred = model(x, training=True)
                per_ex = self.loss(y, pred)
                weighted = per_ex if w is None else per_ex * tf.cast(w, per_ex.dtype)
                loss = tf.nn.compute_average_loss(weighted, global_batch_size=rows)
                if model.losses:
                    reg = tf.add_n([tf.cast(v, tf.float32) for v in model.losses])
                    loss += tf.nn.scale_regularization_loss(reg) / group
                scaled = lso.scale_loss(loss) if lso is not None else loss
            total_loss += tf.cast(loss, tf.float32)
            grads = tape.gradient(scaled, tvars)
            grads = [
                tf.zeros_like(v) if g is None else g for g, v in zip(grads, tvars, strict=True)
            ]
            grads_sum = (
                grads
                if grads_sum is None
                else [a + g for a, g in zip(grads_sum, grads, strict=True)]
            )
            outputs.append((y, pred, w, per_ex))
        assert grads_sum is not None
        return grads_sum, total_loss, outputs

    def _update_metrics(self, outputs: list[tuple[Any, ...]]) -> None:
        """The epoch's training metrics, from a step's outputs (replica context)."""
        for y, pred, w, per_ex in outputs:
            self.train_loss.update_state(per_ex, sample_weight=w)
            for m in self.metrics:
                m.update_state(y, pred, sample_weight=w)

    def replica_step(
        self, batches: tuple[Any, ...], with_ids: bool = False, record_width: int = 0
    ) -> Any:
        """One optimizer step on this replica's micro-batches: gradients, clipping, update.

        Returns this replica's loss share and the step's non-finite flags
        (``[replicas with a non-finite loss, with a non-finite gradient]``,
        summed over the replicas: the same on every replica; zeros with
        ``on_nonfinite="ignore"``); with ``record_width`` (the per-replica
        batch size) also the step's all-gathered ids, ``[micro-batches,
        replicas * record_width]`` in global rank order, padded with -1 where
        a batch is partial. A step with a non-finite flag is not applied and
        does not update the metrics.
        """
        opt = self.optimizer
        tvars = self.model.trainable_variables
        lso = self._loss_scale_optimizer
        ctx = tf.distribute.get_replica_context()
        ids = None
        if with_ids:  # elements are (example, {"index", "position"})
            if record_width:
                ids = tf.stack(
                    [
                        tf.pad(
                            bt[1]["index"],
                            [[0, record_width - tf.shape(bt[1]["index"])[0]]],
                            constant_values=-1,
                        )
                        for bt in batches
                    ]
                )  # [k, B]
                ids = ctx.all_gather(ids, axis=1)  # [k, W * B], in global rank order
            batches = tuple(bt[0] for bt in batches)
        rows = self.step_rows(batches)
        grads_sum, total_loss, outputs = self._grad_fn(batches, rows)
        check = self.on_nonfinite != "ignore"
        local = nonfinite_local(total_loss, grads_sum) if check or lso is not None else None
        local_flags = None
        if check:
            # Under mixed_float16 an overflowing gradient is the loss scaler's business
            # (skip and rescale); the loss is checked in every case.
            local_flags = local if lso is None else local * tf.constant([1.0, 0.0])
        if lso is not None:
            # Keras decides skip/apply from replica 0's local gradients: make every replica's
            # gradients non-finite when any replica's are, so all replicas decide alike.
            any_bad = ctx.all_reduce(tf.distribute.ReduceOp.SUM, local[1]) > 0
            grads_sum = [
                tf.where(any_bad, tf.fill(tf.shape(g), float("nan")), g)
                if g.dtype.is_floating
                else g
                for g in grads_sum
            ]
        if self.clip_global_norm is not None:
            total = ctx.all_reduce(tf.distribute.ReduceOp.SUM, grads_sum)
            norm = tf.linalg.global_norm([tf.cast(t, tf.float32) for t in total])
            if lso is not None:
                norm = norm / tf.cast(lso.dynamic_scale, tf.float32)
            factor = tf.minimum(1.0, self.clip_global_norm / tf.maximum(norm, 1e-12))
            grads_sum = [g * tf.cast(factor, g.dtype) for g in grads_sum]
            if local_flags is not None and lso is None:  # the summed gradient overflowed
                overflow = tf.cast(tf.logical_not(tf.math.is_finite(norm)), tf.float32)
                local_flags = tf.maximum(local_flags, tf.stack([0.0, overflow]))
        if local_flags is None:
            opt.apply_gradients(zip(grads_sum, tvars, strict=True))
            self._update_metrics(outputs)
            flags = tf.zeros([2])
        else:
            flags = apply_if_finite(
                local_flags,
                lambda g: opt.apply_gradients(zip(g, tvars, strict=True)),
                grads_sum,
                multi_worker=self.multi_worker,
            )
            if self.on_nonfinite == "skip":  # a skipped step leaves the metrics out too
                ok = tf.reduce_sum(flags) == 0
                tf.cond(ok, lambda: self._update_metrics(outputs), lambda: None)
            else:  # "stop": a flagged step ends the run
                self._update_metrics(outputs)
        if record_width:
            return total_loss, flags, ids
        return total_loss, flags

    # -- the compiled functions ----------------------------------------------------------
    def function(
        self, spec: str, group: int, multi: bool, with_ids: bool = False, width: int = 0
    ) -> Any:
        """The compiled function ``(iterator, n) -> steps`` for steps of ``group`` micro-batches.

        Cached by what it depends on: the element structure and shapes of the
        input (``spec``: whether ids come along, a static or dynamic batch
        dimension), whether the elements carry ids (``with_ids``), the number
        of micro-batches per step, whether a call holds one step
        (straight-line) or several (a ``tf.range`` loop), and, when recording
        ids, the per-replica batch size (``width``; 0 records nothing); a
        second input gets functions of its own. Every function returns, per
        step it ran, ``[loss, replicas with a non-finite loss, with a
        non-finite gradient]`` (``[n, 3]``, the loss reduced over the replicas;
        a call with ``on_nonfinite="stop"`` ends at the first flagged step)
        and, when ``width`` is set, the steps' ids as a second output.
        """
        key = (spec, with_ids, width, group, multi)
        fn = self._fns.get(key)
        if fn is None:
            fn = self._build(group, multi, with_ids, width)
            self._fns[key] = fn
        return fn

    def _build(self, group: int, multi: bool, with_ids: bool, width: int) -> Any:
        if self._grad_fn is None:
            self._grad_fn = self.gradients
            if self.jit_compile:  # the forward/backward pass; the update stays outside XLA
                self._grad_fn = tf.function(self.gradients, jit_compile=True)
        strategy = self.strategy
        record = bool(width)

        def replica_step(batches: tuple[Any, ...]) -> Any:
            return self.replica_step(batches, with_ids, width)

        def one_step(iterator: Any) -> tuple[tf.Tensor, Any]:
            """``[loss, flags...]`` of one step (and its ids when recording)."""
            batches = tuple(next(iterator) for _ in range(group))
            out = strategy.run(replica_step, args=(batches,))
            local = strategy.experimental_local_results
            loss = strategy.reduce(tf.distribute.ReduceOp.SUM, out[0], axis=None)
            flags = local(out[1])[0]  # summed over the replicas in the step
            step = tf.concat([tf.reshape(loss, [1]), flags], 0)
            return step, (local(out[2])[0] if record else None)

        if not multi:

            @tf.function
            def train_1(iterator: Any) -> Any:  # straight-line: no loop
                step, ids = one_step(iterator)
                step = tf.expand_dims(step, 0)
                return (step, tf.expand_dims(ids, 0)) if record else step

            return lambda iterator, n: train_1(iterator)

        stop_early = self.on_nonfinite == "stop"

        @tf.function
        def train_loop(iterator: Any, n: tf.Tensor) -> Any:  # Orbit-style multi-step
            steps = tf.TensorArray(tf.float32, size=0, dynamic_size=True)
            ids_out = tf.TensorArray(tf.int64, size=0, dynamic_size=True)
            for i in tf.range(n):
                step, ids = one_step(iterator)
                j = tf.cast(i, tf.int32)
                steps = steps.write(j, step)
                if record:
                    ids_out = ids_out.write(j, ids)
                if stop_early and tf.reduce_sum(step[1:]) > 0:
                    break  # every replica and worker breaks at the same step
            return (steps.stack(), ids_out.stack()) if record else steps.stack()

        constants: dict[int, tf.Tensor] = {}

        def call(iterator: Any, n: int) -> Any:
            if n not in constants:
                constants[n] = tf.constant(n, tf.int64)
            return train_loop(iterator, constants[n])

        return call
