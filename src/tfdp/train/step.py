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
    >>> out.shape  # one step: [loss, the loss is non-finite, the gradient is]
    TensorShape([1, 3])
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import keras
import tensorflow as tf

from tfdp._autograph import plain
from tfdp._compat import bound_call, gradients_reduced
from tfdp.train.compression import compressed_all_reduce
from tfdp.train.evaluate import PerExampleLoss, unpack_batch
from tfdp.train.guard import (
    apply_if_finite,
    apply_reduced_if_finite,
    check_policy,
    nonfinite_local,
)

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
        gradient_compression: ``None`` (exact float32 all-reduce) or ``"fp16"`` /
            ``"bf16"``: gradients rounded to that type before the sum (see
            :mod:`tfdp.train.compression`).

    Example:
        >>> import keras, numpy as np, tensorflow as tf
        >>> from tfdp import ArraySource, DistributedInput
        >>> from tfdp.train.evaluate import PerExampleLoss
        >>> strategy = tf.distribute.get_strategy()
        >>> dense = keras.layers.Dense(1, kernel_initializer="zeros")
        >>> model = keras.Sequential([keras.Input((2,)), dense])
        >>> opt = keras.optimizers.SGD(0.1)
        >>> opt.build(model.trainable_variables)
        >>> step = TrainStep(strategy, model, opt, PerExampleLoss("mse"), keras.metrics.Mean())
        >>> inp = DistributedInput(None, ArraySource((np.ones([4, 2], np.float32),
        ...                                           np.ones([4], np.float32))), batch_size=2)
        >>> dataset = inp.epochs()
        >>> call = step.bind(iter(dataset), str(dataset.element_spec), group=1, n=2)
        >>> steps = call().numpy().tolist()  # per step: [loss, loss / gradient non-finite]
        >>> [[round(v, 4) for v in row] for row in steps]  # Dense's kernel and bias learn
        [[1.0, 0.0, 0.0], [0.16, 0.0, 0.0]]
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
        gradient_compression: str | None = None,
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
        self.gradient_compression = gradient_compression
        self._fns: dict[tuple[Any, ...], Any] = {}
        self._counts: dict[int, tf.Tensor] = {}
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

        Returns the step's loss (summed over the replicas: the mean over the
        step's rows, the same on every replica) and its non-finite flags
        (``[the loss is non-finite, the gradient is]``, non-zero when so, the
        same on every replica; zeros with ``on_nonfinite="ignore"``); with
        ``record_width`` (the per-replica batch size) also the step's
        all-gathered ids, ``[micro-batches, replicas * record_width]`` in
        global rank order, padded with -1 where a batch is partial. A step
        with a non-finite flag is not applied and does not update the metrics.

        The gradients and the loss are all-reduced in one collective, then
        clipped (the global norm of the reduced gradient), checked and
        applied: the optimizer is handed the reduced gradients
        (:func:`tfdp._compat.gradients_reduced`, set while the step is
        traced). Under ``mixed_float16`` the loss scaler's optimizer reduces
        them itself and decides on overflow (see :meth:`_loss_scaled_update`).
        """
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
        if self._loss_scale_optimizer is not None:
            loss, flags = self._loss_scaled_update(grads_sum, total_loss)
        else:
            loss, flags = self._reduced_update(grads_sum, total_loss)
        if self.on_nonfinite == "skip":  # a skipped step leaves the metrics out too
            tf.cond(tf.reduce_sum(flags) == 0, lambda: self._update_metrics(outputs), lambda: None)
        else:  # "stop": a flagged step ends the run; "ignore": no flags
            self._update_metrics(outputs)
        if record_width:
            return loss, flags, ids
        return loss, flags

    def _apply(self, grads: list[Any]) -> None:
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables, strict=True))

    def _reduced_update(self, grads: list[Any], loss: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """All-reduce gradients and loss together, clip, check once and apply (replica context)."""
        ctx = tf.distribute.get_replica_context()
        if self.gradient_compression is None:
            reduced = ctx.all_reduce(tf.distribute.ReduceOp.SUM, [*grads, loss])
            grads, loss = list(reduced[:-1]), reduced[-1]
        else:  # 16-bit gradients cannot share a pack with the float32 loss
            grads = compressed_all_reduce(ctx, grads, self.gradient_compression)
            loss = ctx.all_reduce(tf.distribute.ReduceOp.SUM, loss)
        checked = None
        if self.clip_global_norm is not None:
            norm = tf.linalg.global_norm([tf.cast(g, tf.float32) for g in grads])
            factor = tf.minimum(1.0, self.clip_global_norm / tf.maximum(norm, 1e-12))
            grads = [g * tf.cast(factor, g.dtype) for g in grads]
            checked = [norm]  # non-finite exactly when a gradient is, or their sum overflowed
        if self.on_nonfinite == "ignore":
            self._apply(grads)
            return loss, tf.zeros([2])
        return loss, apply_reduced_if_finite(loss, grads, self._apply, checked=checked)

    def _loss_scaled_update(self, grads: list[Any], loss: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """The ``mixed_float16`` update: the loss scaler reduces, and skips overflowing steps.

        Keras decides skip/apply from replica 0's local gradients: every replica's
        gradients are made non-finite when any replica's are, so all decide alike.
        A non-finite loss stops (or skips) the step as always; a non-finite
        gradient is the loss scaler's business (skipped and rescaled), not flagged.
        """
        lso = self._loss_scale_optimizer
        assert lso is not None
        ctx = tf.distribute.get_replica_context()
        local = nonfinite_local(loss, grads)
        any_bad = ctx.all_reduce(tf.distribute.ReduceOp.SUM, local[1]) > 0
        grads = [
            tf.where(any_bad, tf.fill(tf.shape(g), float("nan")), g) if g.dtype.is_floating else g
            for g in grads
        ]
        if self.clip_global_norm is not None:
            total = ctx.all_reduce(tf.distribute.ReduceOp.SUM, grads)
            norm = tf.linalg.global_norm([tf.cast(t, tf.float32) for t in total])
            norm = norm / tf.cast(lso.dynamic_scale, tf.float32)
            factor = tf.minimum(1.0, self.clip_global_norm / tf.maximum(norm, 1e-12))
            grads = [g * tf.cast(factor, g.dtype) for g in grads]
        loss = ctx.all_reduce(tf.distribute.ReduceOp.SUM, loss)
        if self.on_nonfinite == "ignore":
            self._apply(grads)
            return loss, tf.zeros([2])
        flags = apply_if_finite(
            local * tf.constant([1.0, 0.0]), self._apply, grads, multi_worker=self.multi_worker
        )
        return loss, flags

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
        step it ran, ``[loss, the loss is non-finite, the gradient is]``
        (``[n, 3]``, the loss the mean over the step's rows; a flag non-zero
        when so; a call with ``on_nonfinite="stop"`` ends at the first flagged
        step) and, when ``width`` is set, the steps' ids as a second output.
        """
        fn = self._traced(spec, group, multi, with_ids, width)
        if not multi:
            return lambda iterator, n: fn(iterator)
        return lambda iterator, n: fn(iterator, self._count(n))

    def bind(
        self,
        iterator: Any,
        spec: str,
        group: int,
        n: int,
        with_ids: bool = False,
        width: int = 0,
    ) -> Any:
        """``() -> steps``: :meth:`function`'s call of ``n`` steps on ``iterator``, bound once.

        What the training loop calls: the same compiled function, without
        ``tf.function``'s per-call look-up of its trace by the arguments' types
        (:func:`tfdp._compat.bound_call`), which for a distributed iterator
        costs about as much as a small step.

        Example:
            See :class:`TrainStep`.
        """
        fn = self._traced(spec, group, n > 1, with_ids, width)
        return bound_call(fn, iterator, self._count(n)) if n > 1 else bound_call(fn, iterator)

    def _count(self, n: int) -> tf.Tensor:
        """``n`` as an int64 tensor, one per value (not a new one per call)."""
        if n not in self._counts:
            self._counts[n] = tf.constant(n, tf.int64)
        return self._counts[n]

    def _traced(self, spec: str, group: int, multi: bool, with_ids: bool, width: int) -> Any:
        key = (spec, with_ids, width, group, multi)
        fn = self._fns.get(key)
        if fn is None:
            fn = self._build(group, multi, with_ids, width)
            self._fns[key] = fn
        return fn

    def _build(self, group: int, multi: bool, with_ids: bool, width: int) -> Any:
        """The ``tf.function`` of one step (``multi=False``) or of ``n`` (a ``tf.range`` loop)."""
        if self._grad_fn is None:
            self._grad_fn = self.gradients
            if self.jit_compile:  # the forward/backward pass; the update stays outside XLA
                self._grad_fn = tf.function(self.gradients, jit_compile=True, autograph=False)
        strategy = self.strategy
        record = bool(width)
        lso = self._loss_scale_optimizer

        def reduced() -> Any:  # the optimizer gets all-reduced gradients (the LSO reduces itself)
            return gradients_reduced(self.optimizer) if lso is None else contextlib.nullcontext()

        def replica_step(batches: tuple[Any, ...]) -> Any:
            return self.replica_step(batches, with_ids, width)

        # tfdp's step is traced without AutoGraph, as Keras traces its train step: the user's
        # model and metrics run as written, a user's loss function as AutoGraph converts it
        # (tfdp._autograph). Only the multi-step loop below is converted, for its tf.range.
        @plain
        def one_step(iterator: Any) -> tuple[tf.Tensor, Any]:
            """``[loss, flags...]`` of one step (and its ids when recording)."""
            batches = tuple(next(iterator) for _ in range(group))
            with reduced():
                out = strategy.run(replica_step, args=(batches,))
            local = strategy.experimental_local_results
            # The loss and the flags are all-reduced: the same on every replica.
            step = tf.concat([tf.reshape(local(out[0])[0], [1]), local(out[1])[0]], 0)
            return step, (local(out[2])[0] if record else None)

        if not multi:

            @tf.function(autograph=False)
            def train_1(iterator: Any) -> Any:  # straight-line: no loop
                step, ids = one_step(iterator)
                step = tf.expand_dims(step, 0)
                return (step, tf.expand_dims(ids, 0)) if record else step

            return train_1

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

        return train_loop
