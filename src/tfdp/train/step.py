"""The replica step and its compiled functions: :class:`TrainStep`.

This module owns what one ``tf.function`` call of the training loop does:
every optimizer step's loss and gradient are the mean over the rows the step
actually holds, over all replicas and micro-batches (gradient accumulation,
with the epoch's last, shorter group of micro-batches), or, with
``loss_weighting="replicas"``, the mean of every replica's own mean (see
:mod:`tfdp.train.weighting`); the loss is computed, reduced and all-reduced
in the model's type (float64 for a float64 model, see
:mod:`tfdp.train.dtypes`); the gradient is clipped by global norm *after* the
all-reduce; under ``mixed_float16`` every replica takes the loss scaler's
skip decision alike; a non-finite step is never applied (the check is
all-reduced, see :mod:`tfdp.train.guard`). A step's results are named (the
loss, the non-finite flags, each replica's own loss -- riding in the
gradients' all-reduce -- and ``grad_norm`` when it clips): a call returns
them as :class:`tfdp.train.parts.StepOutputs`, and a quantity added to
:meth:`TrainStep.replica_step`'s outputs reaches the step line, TensorBoard
and ``metrics.jsonl`` by its name. It builds the compiled functions
(straight-line for one step per call, an Orbit-style ``tf.range`` loop for
several) and caches them by what they depend on. The epoch loop,
checkpoints and logs live in :mod:`tfdp.train.loop` and
:mod:`tfdp.train.logs`.

Example:
    >>> import keras, numpy as np, tensorflow as tf
    >>> from tfdp.train.evaluate import PerExampleLoss
    >>> strategy = tf.distribute.get_strategy()
    >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    >>> opt = keras.optimizers.SGD(0.1)
    >>> opt.build(model.trainable_variables)
    >>> step = TrainStep(strategy, model, opt, PerExampleLoss("mse"), keras.metrics.Mean(),
    ...                  clip_global_norm=1.0)
    >>> data = tf.data.Dataset.from_tensors((np.ones((4, 3), "float32"), np.zeros((4, 2))))
    >>> out = step.bind(iter(data), str(data.element_spec), group=1, n=1)()
    >>> len(out), out.replica_losses.shape, sorted(out.scalars)  # one step, one replica
    (1, (1, 1), ['grad_norm'])
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from tfdp._autograph import plain
from tfdp._compat.fast.graph import bound_call
from tfdp._compat.keras import gradients_reduced
from tfdp.train.compression import compressed_all_reduce
from tfdp.train.dtypes import all_reduce_sum, loss_dtype
from tfdp.train.evaluate import PerExampleLoss, unpack_batch
from tfdp.train.guard import (
    apply_if_finite,
    apply_reduced_if_finite,
    check_policy,
    nonfinite_local,
)
from tfdp.train.parts import StepOutputs
from tfdp.train.weighting import check_loss_weighting


def _plus(total: Any, value: Any) -> Any:
    """``total + value``, where None is nothing (no op for a first term, or a missing one)."""
    if value is None:
        return total
    return value if total is None else total + value


def _rows(x: Any) -> int | tf.Tensor:
    """The rows of a batch: its static batch dimension, else its dynamic one (int32)."""
    leaf = tf.nest.flatten(x)[0]
    size = leaf.shape[0] if leaf.shape.rank else None
    return size if isinstance(size, int) else tf.shape(leaf)[0]


class _Packing:
    """A step's named outputs as one vector of the step's type in the graph, and back on the host.

    A compiled call returns its steps' outputs packed, ``[n, width]`` (one
    tensor to fetch, one row written per step of the multi-step loop); the
    names, shapes and types are those of the step it packs, learnt when the
    step is traced, and :meth:`unpack` restores each name from the fetched
    rows, in its own type.
    """

    def __init__(self, dtype: tf.DType) -> None:
        self.dtype = dtype
        #: Per name: its columns ``[start, stop)``, its shape, its NumPy type (None: the pack's).
        self.layout: list[tuple[str, int, int, tuple[int, ...], Any]] = []

    def pack(self, named: dict[str, tf.Tensor]) -> tf.Tensor:
        """One step's outputs as one vector (graph; records the layout): the scalars first."""
        order = sorted(named, key=lambda name: named[name].shape.rank != 0)  # stable
        self.layout, start = [], 0
        for name in order:
            value = named[name]
            shape = tuple(int(d) for d in value.shape)
            stop = start + int(np.prod(shape, dtype=np.int64))
            own = None if value.dtype == self.dtype else value.dtype.as_numpy_dtype
            self.layout.append((name, start, stop, shape, own))
            start = stop
        values = [tf.cast(named[name], self.dtype) for name in order]
        scalars = [v for v in values if v.shape.rank == 0]
        parts = [tf.stack(scalars)] if scalars else []
        parts += [tf.reshape(v, [-1]) for v in values[len(scalars) :]]
        return tf.concat(parts, 0) if len(parts) > 1 else parts[0]

    def unpack(self, rows: Any) -> dict[str, Any]:
        """The named outputs of fetched ``[n, width]`` rows (host, NumPy)."""
        rows = rows.numpy()
        n = len(rows)
        out = {}
        for name, start, stop, shape, own in self.layout:
            value = rows[:, start:stop].reshape((n, *shape))
            out[name] = value if own is None else value.astype(own)
        return out


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
        gradient_compression: ``None`` (the exact all-reduce, in the gradients'
            own type) or ``"fp16"`` / ``"bf16"``: gradients rounded to that type
            before the sum (see :mod:`tfdp.train.compression`).
        loss_weighting: ``"rows"`` (the mean over the step's rows) or
            ``"replicas"`` (the mean of every replica's own mean, PyTorch
            DDP's; see :mod:`tfdp.train.weighting`).

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
        >>> out = call()  # StepOutputs: every step's loss, flags, each replica's own loss
        >>> [round(v, 4) for v in out.loss.tolist()], out.flagged.tolist()  # Dense learns
        ([1.0, 0.16], [False, False])
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
        loss_weighting: str = "rows",
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
        self.loss_weighting = check_loss_weighting(loss_weighting)
        #: The type of the loss, its reduction and its all-reduce (float64 for a float64 model).
        self.dtype = loss_dtype(model)
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
        sizes = [_rows(unpack_batch(b)[0]) for b in batches]
        if all(isinstance(s, int) for s in sizes):
            return sum(sizes) * int(self.strategy.num_replicas_in_sync)  # type: ignore[arg-type]
        local = tf.add_n([tf.cast(size, tf.float32) for size in sizes])
        total = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, local)
        return tf.cast(tf.round(total), tf.int64)

    def gradients(
        self, batches: tuple[Any, ...], rows: Any
    ) -> tuple[list[tf.Tensor], tf.Tensor, tf.Tensor, list[tuple[Any, ...]]]:
        """This replica's summed gradients, its loss share, its own loss, and its outputs.

        With ``loss_weighting="rows"`` each micro-batch contributes
        ``sum(sample_weight * loss) / rows``, ``rows`` the rows of the whole
        optimizer step over all replicas and micro-batches (see
        :meth:`step_rows`), so the all-reduced gradient is that of the mean
        over the step's rows; with ``"replicas"`` it contributes its own mean
        divided by ``replicas * micro-batches`` (``rows`` unused). The
        regularisation losses are added once per step (a ``1 / (replicas *
        micro-batches)`` share each). The replica's own loss is its mean over
        its own rows of the step (``"replicas"``: the mean of its
        micro-batches' means), regularisation included, as a PyTorch rank
        computes and logs its loss. All in the step's type (:attr:`dtype`).
        The outputs, ``(y, predictions, sample_weight, per-example loss)`` per
        micro-batch, feed the metrics once the step is known to be applied.
        Runs in replica context and only reads the model's variables, so it
        can be XLA-compiled.
        """
        model = self.model
        tvars = model.trainable_variables
        lso = self._loss_scale_optimizer
        dtype = self.dtype
        group = len(batches)
        per_replica = self.loss_weighting == "replicas"
        replicas = int(self.strategy.num_replicas_in_sync)
        grads_sum: list[Any] | None = None
        total_loss: Any = None
        own: Any = None  # "rows": the sum over its rows; "replicas": of its means
        own_rows: Any = 0
        regularisation: Any = None
        outputs = []
        for batch in batches:
            x, y, w = unpack_batch(batch)
            local = _rows(x)
            with tf.GradientTape() as tape:
                pred = model(x, training=True)
                per_ex = tf.cast(self.loss(y, pred), dtype)
                weighted = per_ex if w is None else per_ex * tf.cast(w, per_ex.dtype)
                summed = tf.reduce_sum(weighted)
                divisor = local * replicas * group if per_replica else rows
                loss = tf.math.divide_no_nan(summed, tf.cast(divisor, dtype))
                reg = tf.add_n([tf.cast(v, dtype) for v in model.losses]) if model.losses else None
                if reg is not None:
                    loss += tf.nn.scale_regularization_loss(reg) / group
                scaled = lso.scale_loss(loss) if lso is not None else loss
            total_loss = _plus(total_loss, loss)
            regularisation = _plus(regularisation, reg)
            if per_replica:
                own = _plus(own, tf.math.divide_no_nan(summed, tf.cast(local, dtype)))
            else:
                own, own_rows = _plus(own, summed), own_rows + local
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
        own = own / group if per_replica else tf.math.divide_no_nan(own, tf.cast(own_rows, dtype))
        if regularisation is not None:
            own += regularisation / group
        return grads_sum, total_loss, own, outputs

    def _update_metrics(self, outputs: list[tuple[Any, ...]]) -> None:
        """The epoch's training metrics, from a step's outputs (replica context)."""
        for y, pred, w, per_ex in outputs:
            self.train_loss.update_state(per_ex, sample_weight=w)
            for m in self.metrics:
                m.update_state(y, pred, sample_weight=w)

    def replica_step(
        self, batches: tuple[Any, ...], with_ids: bool = False, record_width: int = 0
    ) -> dict[str, Any]:
        """One optimizer step on this replica's micro-batches: gradients, clipping, update.

        Returns the step's outputs by name, every one the same on every
        replica: ``loss`` (summed over the replicas: the step's weighted
        mean), ``loss_nonfinite`` / ``gradient_nonfinite`` (non-zero when so;
        zeros with ``on_nonfinite="ignore"``), ``replica_losses`` (each
        replica's own loss, ``[replicas]`` in global replica order: one-hot
        rows summed in the gradients' all-reduce, no collective of their own),
        ``grad_norm`` when clipping (the global norm of the all-reduced
        gradient, before it is clipped), and, with ``record_width`` (the
        per-replica batch size), ``ids``: the step's all-gathered ids,
        ``[micro-batches, replicas * record_width]`` in global rank order,
        padded with -1 where a batch is partial. Any other name added here is
        a scalar the loop and the logs tell by that name. A step with a
        non-finite flag is not applied and does not update the metrics.

        The gradients and the loss are all-reduced in one collective (one per
        type, when the model's gradients are not of the loss's type), then
        clipped (the global norm of the reduced gradient), checked and
        applied: the optimizer is handed the reduced gradients
        (:func:`tfdp._compat.keras.gradients_reduced`, set while the step is
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
        rows = self.step_rows(batches) if self.loss_weighting == "rows" else None
        grads_sum, total_loss, own, outputs = self._grad_fn(batches, rows)
        replicas = int(self.strategy.num_replicas_in_sync)
        mine = tf.one_hot(ctx.replica_id_in_sync_group, replicas, dtype=self.dtype) * own
        if self._loss_scale_optimizer is not None:
            out = self._loss_scaled_update(grads_sum, total_loss, mine)
        else:
            out = self._reduced_update(grads_sum, total_loss, mine)
        flags = out.pop("nonfinite")
        if self.on_nonfinite == "skip":  # a skipped step leaves the metrics out too
            tf.cond(tf.reduce_sum(flags) == 0, lambda: self._update_metrics(outputs), lambda: None)
        else:  # "stop": a flagged step ends the run; "ignore": no flags
            self._update_metrics(outputs)
        out["loss_nonfinite"], out["gradient_nonfinite"] = flags[0], flags[1]
        if record_width:
            out["ids"] = ids
        return out

    def _apply(self, grads: list[Any]) -> None:
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables, strict=True))

    def _clipped(self, grads: list[Any], norm: tf.Tensor) -> list[Any]:
        one = tf.constant(1.0, norm.dtype)
        factor = tf.minimum(one, self.clip_global_norm / tf.maximum(norm, 1e-12))
        return [g * tf.cast(factor, g.dtype) for g in grads]

    def _reduced_update(
        self, grads: list[Any], loss: tf.Tensor, mine: tf.Tensor
    ) -> dict[str, tf.Tensor]:
        """All-reduce gradients, loss and own losses together, clip, check once and apply."""
        ctx = tf.distribute.get_replica_context()
        if self.gradient_compression is None:
            *grads, loss, mine = all_reduce_sum(ctx, [*grads, loss, mine])
        else:  # 16-bit gradients cannot share a pack with the loss
            grads = compressed_all_reduce(ctx, grads, self.gradient_compression)
            loss, mine = all_reduce_sum(ctx, [loss, mine])
        out = {"loss": loss, "replica_losses": mine}
        checked = None
        if self.clip_global_norm is not None:
            norm = tf.linalg.global_norm([tf.cast(g, self.dtype) for g in grads])
            grads = self._clipped(grads, norm)
            checked = [norm]  # non-finite exactly when a gradient is, or their sum overflowed
            out["grad_norm"] = norm
        if self.on_nonfinite == "ignore":
            self._apply(grads)
            out["nonfinite"] = tf.zeros([2])
        else:
            out["nonfinite"] = apply_reduced_if_finite(loss, grads, self._apply, checked=checked)
        return out

    def _loss_scaled_update(
        self, grads: list[Any], loss: tf.Tensor, mine: tf.Tensor
    ) -> dict[str, tf.Tensor]:
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
        out = {}
        if self.clip_global_norm is not None:
            total = ctx.all_reduce(tf.distribute.ReduceOp.SUM, grads)
            norm = tf.linalg.global_norm([tf.cast(t, self.dtype) for t in total])
            norm = norm / tf.cast(lso.dynamic_scale, self.dtype)
            grads = self._clipped(grads, norm)
            out["grad_norm"] = norm
        loss, mine = ctx.all_reduce(tf.distribute.ReduceOp.SUM, [loss, mine])
        out.update(loss=loss, replica_losses=mine)
        if self.on_nonfinite == "ignore":
            self._apply(grads)
            out["nonfinite"] = tf.zeros([2])
        else:
            out["nonfinite"] = apply_if_finite(
                local * tf.constant([1.0, 0.0]), self._apply, grads, multi_worker=self.multi_worker
            )
        return out

    # -- the compiled functions ----------------------------------------------------------
    def bind(
        self,
        iterator: Any,
        spec: str,
        group: int,
        n: int,
        with_ids: bool = False,
        width: int = 0,
    ) -> Callable[[], StepOutputs]:
        """``() -> StepOutputs``: a compiled call of ``n`` steps of ``group`` micro-batches.

        The call runs ``n`` optimizer steps on ``iterator`` and returns, by
        name, every step's outputs (:meth:`replica_step`; a call with
        ``on_nonfinite="stop"`` ends at the first flagged step). The compiled
        function is cached by what it depends on: the element structure and
        shapes of the input (``spec``: whether ids come along, a static or
        dynamic batch dimension), whether the elements carry ids
        (``with_ids``), the number of micro-batches per step, whether a call
        holds one step (straight-line) or several (a ``tf.range`` loop), and,
        when recording ids, the per-replica batch size (``width``; 0 records
        nothing); a second input gets functions of its own. It is called
        without ``tf.function``'s per-call look-up of its trace by the
        arguments' types (:func:`tfdp._compat.fast.graph.bound_call`), which for a
        distributed iterator costs about as much as a small step.

        Example:
            See :class:`TrainStep`.
        """
        fn, packing = self._traced(spec, group, n > 1, with_ids, width)
        call = bound_call(fn, iterator, self._count(n)) if n > 1 else bound_call(fn, iterator)
        if not width:
            return lambda: StepOutputs.from_named(packing.unpack(call()))

        def with_ids() -> StepOutputs:
            packed, ids = call()
            return StepOutputs.from_named({**packing.unpack(packed), "ids": ids})

        return with_ids

    def _count(self, n: int) -> tf.Tensor:
        """``n`` as an int64 tensor, one per value (not a new one per call)."""
        if n not in self._counts:
            self._counts[n] = tf.constant(n, tf.int64)
        return self._counts[n]

    def _traced(
        self, spec: str, group: int, multi: bool, with_ids: bool, width: int
    ) -> tuple[Any, _Packing]:
        key = (spec, with_ids, width, group, multi)
        fn = self._fns.get(key)
        if fn is None:
            fn = self._build(group, multi, with_ids, width)
            self._fns[key] = fn
        return fn

    def _build(self, group: int, multi: bool, with_ids: bool, width: int) -> tuple[Any, _Packing]:
        """The ``tf.function`` of one step (``multi=False``) or of ``n`` (a ``tf.range`` loop).

        It returns the steps' outputs packed (``[n, width]``, see :class:`_Packing`) and,
        when recording, their ids (``[n, micro-batches, replicas * width]``).
        """
        if self._grad_fn is None:
            self._grad_fn = self.gradients
            if self.jit_compile:  # the forward/backward pass; the update stays outside XLA
                self._grad_fn = tf.function(self.gradients, jit_compile=True, autograph=False)
        strategy = self.strategy
        lso = self._loss_scale_optimizer

        def reduced() -> Any:  # the optimizer gets all-reduced gradients (the LSO reduces itself)
            return gradients_reduced(self.optimizer) if lso is None else contextlib.nullcontext()

        def replica_step(batches: tuple[Any, ...]) -> Any:
            return self.replica_step(batches, with_ids, width)

        # tfdp's step is traced without AutoGraph, as Keras traces its train step: the user's
        # model and metrics run as written, a user's loss function as AutoGraph converts it
        # (tfdp._autograph). Only the multi-step loop below is converted, for its tf.range.
        packing = _Packing(self.dtype)

        @plain
        def one_step(iterator: Any) -> tuple[tf.Tensor, Any, tf.Tensor]:
            """One step's outputs packed, its ids apart, and whether it was flagged."""
            batches = tuple(next(iterator) for _ in range(group))
            with reduced():
                out = strategy.run(replica_step, args=(batches,))
            # Every output is all-reduced (the same on every replica): the first local replica's.
            first = {name: strategy.experimental_local_results(v)[0] for name, v in out.items()}
            ids = first.pop("ids", None)
            flagged = first["loss_nonfinite"] + first["gradient_nonfinite"] > 0
            return packing.pack(first), ids, flagged

        if not multi:

            @tf.function(autograph=False)
            def train_1(iterator: Any) -> Any:  # straight-line: no loop
                step, ids, _ = one_step(iterator)
                step = tf.expand_dims(step, 0)
                return (step, tf.expand_dims(ids, 0)) if width else step

            return train_1, packing

        stop_early = self.on_nonfinite == "stop"

        @tf.function
        def train_loop(iterator: Any, n: tf.Tensor) -> Any:  # Orbit-style multi-step
            steps = tf.TensorArray(self.dtype, size=0, dynamic_size=True)
            ids_out = tf.TensorArray(tf.int64, size=0, dynamic_size=True)
            for i in tf.range(n):
                step, ids, flagged = one_step(iterator)
                j = tf.cast(i, tf.int32)
                steps = steps.write(j, step)
                if width:
                    ids_out = ids_out.write(j, ids)
                if stop_early and flagged:
                    break  # every replica and worker breaks at the same step
            return (steps.stack(), ids_out.stack()) if width else steps.stack()

        return train_loop, packing
