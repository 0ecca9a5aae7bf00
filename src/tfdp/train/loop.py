"""The distributed custom training loop: :class:`Trainer`.

This module owns the train step (every step's loss and gradient are the mean
over the rows the step actually holds, over all replicas and micro-batches;
gradient accumulation; clipping by global norm *after* the all-reduce; mixed
precision with synchronised loss scaling), the compiled step functions
(straight-line for one step per call, an Orbit-style ``tf.range`` loop for
several, cached by what they depend on), the epoch loop (loop epoch ``e`` is
exactly sampler epoch ``e``) with exact mid-epoch resume from checkpoints,
and the per-epoch log line, progress bar, metrics.jsonl and TensorBoard
scalars. Exact evaluation lives in :mod:`tfdp.train.evaluate`.

Example:
    >>> import keras, numpy as np, tensorflow as tf
    >>> from tfdp import DistributedInput, ArraySource
    >>> strategy = tf.distribute.get_strategy()
    >>> src = ArraySource((np.random.rand(64, 3).astype("float32"), np.arange(64) % 2))
    >>> trainer = Trainer(strategy, lambda: keras.Sequential([keras.Input((3,)),
    ...     keras.layers.Dense(2)]), lambda: keras.optimizers.SGD(0.1),
    ...     "sparse_categorical_crossentropy_from_logits", progress=False, verbose=0)
    >>> hist = trainer.fit(DistributedInput(strategy, src, batch_size=16), epochs=1)
    >>> len(hist)
    1
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import keras
import tensorflow as tf

from tfdp.distribute import worker_info
from tfdp.input import DistributedInput
from tfdp.sources.base import SkipReportingSource
from tfdp.train.evaluate import Evaluator, PerExampleLoss, unpack_batch
from tfdp.train.guard import NonFiniteError, apply_if_finite, check_policy, nonfinite_local

__all__ = ["TrainState", "Trainer"]

log = logging.getLogger("tfdp")
Factory = Callable[[], Any]


@dataclass
class TrainState:
    """Where training stands: epoch, optimizer step within it, global optimizer step.

    ``last_loss`` is the loss of the latest optimizer step and ``step_losses``
    those of every step of the latest compiled call (each the mean over the
    rows of its step, regularisation included, as every replica computes it).

    Example:
        >>> TrainState(epoch=1, step=3, global_step=13).epoch
        1
    """

    epoch: int = 0
    step: int = 0
    global_step: int = 0
    stopped_early: bool = False
    last_loss: float = float("nan")
    step_losses: list[float] = field(default_factory=list)
    skipped_steps: int = 0
    stop_reason: str | None = None
    history: list[dict[str, Any]] = field(default_factory=list)


def _build(obj: Any) -> Any:
    return (
        obj()
        if callable(obj) and not isinstance(obj, (keras.Model, keras.optimizers.Optimizer))
        else obj
    )


class Trainer:
    """Synchronous data-parallel training of any Keras 3 model under any tf.distribute strategy.

    Args:
        strategy: The strategy (None: the current one).
        model: A Keras model built inside ``strategy.scope()``, or a factory
            ``() -> model`` (called inside the scope).
        optimizer: A Keras optimizer or a factory. Its own ``clipnorm`` /
            ``global_clipnorm`` would clip per-replica partial gradients before
            the all-reduce, so they are refused: use ``clip_global_norm``.
        loss: Per-example loss: a Keras loss with ``reduction="none"``, a
            function ``(y_true, y_pred) -> [B]``, or a name
            (``"sparse_categorical_crossentropy"``, ``..._from_logits``).
            Losses with a mean reduction are refused: under a strategy, Keras
            >= 3.8 already divides them by the replica count. A step's loss
            (and gradient) is ``sum(sample_weight * loss) / rows`` over the
            rows the step holds on all replicas and micro-batches -- a last,
            partial batch is its own true mean -- plus the model's
            regularisation losses once; rows of sample weight 0 (evaluation
            padding, skipped files) add 0 to the sum and count in ``rows``,
            as with ``tf.nn.compute_average_loss`` or a PyTorch
            ``(loss * w).mean()``. A static per-replica batch dimension
            (``drop_remainder=True``) makes ``rows`` a constant; a dynamic one
            costs one scalar all-reduce per step.
        metrics: Keras metrics (instances or names); cloned for evaluation.
        steps_per_call: Optimizer steps per ``tf.function`` call (a
            ``tf.range`` loop, as Orbit does), to amortise Python overhead.
        accumulation_steps: Micro-batches whose gradients are summed per
            optimizer step (the effective batch is ``k`` global batches). An
            epoch of ``S`` batches makes ``ceil(S / k)`` optimizer steps; the
            last holds the ``S mod k`` leftover batches (when non-zero) and,
            like every step, is the mean over the rows it holds.
        clip_global_norm: Clip the all-reduced gradient to this global norm.
        mixed_precision: ``None``, ``"mixed_float16"`` (with dynamic loss
            scaling, skip decisions synchronised across replicas) or
            ``"mixed_bfloat16"``. Set before the model factory runs.
        jit_compile: Compile the replica step with XLA.
        run_dir: Where checkpoints, metrics.jsonl and TensorBoard logs go
            (chief only writes logs; every worker joins checkpoint saves).
        checkpoint_every: Save every N optimizer steps (and at every epoch end).
        max_to_keep: Checkpoints kept.
        progress: A progress bar on the chief, showing the running mean of
            the epoch's step losses (already reduced over replicas and
            workers: it reads no metric, so it is safe under
            MultiWorkerMirroredStrategy).
        verbose: 1 prints a line per epoch on the chief; 0 is quiet.
        record_samples: Append, per step and global rank, the example ids
            each replica consumed, as JSON lines, to this file (the input must
            have ``return_ids=True``; the ids are all-gathered, so the chief
            writes every rank's).
        on_nonfinite: A step whose loss or gradient is NaN or infinite (on
            any replica: the check is all-reduced, so every replica and worker
            decides alike) is never applied. ``"stop"`` (default): :meth:`fit`
            raises :class:`tfdp.train.NonFiniteError` naming the step, without
            saving (the latest checkpoint stays the last good one).
            ``"skip"``: the step is skipped -- its data consumed, no variable
            or optimizer state (nor the iteration count a schedule reads)
            changed -- with a warning and ``skipped_steps`` in the epoch's
            record. ``"ignore"``: no check (saves still refuse non-finite
            variables). Under ``mixed_float16`` a non-finite *gradient* is the
            loss scaler's business (skipped and rescaled); the loss is checked.
            A gradient whose all-reduced sum overflows although every
            replica's part is finite is caught here only with
            ``clip_global_norm`` (which computes the summed norm), otherwise at
            the next step's loss.

    Raises:
        ValueError: for a model built outside the scope, a loss with a mean
            reduction, optimizer-side clipping, or bad numbers.

    Example:
        >>> Trainer.__name__
        'Trainer'
    """

    def __init__(
        self,
        strategy: tf.distribute.Strategy | None,
        model: keras.Model | Factory,
        optimizer: keras.optimizers.Optimizer | Factory,
        loss: Any,
        *,
        metrics: Sequence[Any] = (),
        steps_per_call: int = 1,
        accumulation_steps: int = 1,
        clip_global_norm: float | None = None,
        mixed_precision: str | None = None,
        jit_compile: bool = False,
        run_dir: str | os.PathLike[str] | None = None,
        checkpoint_every: int | None = None,
        max_to_keep: int = 3,
        progress: bool = True,
        verbose: int = 1,
        record_samples: str | os.PathLike[str] | None = None,
        on_nonfinite: str = "stop",
    ) -> None:
        self.strategy = strategy if strategy is not None else tf.distribute.get_strategy()
        self.info = worker_info(self.strategy)
        for name, value in (
            ("steps_per_call", steps_per_call),
            ("accumulation_steps", accumulation_steps),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if clip_global_norm is not None and not clip_global_norm > 0:
            raise ValueError(f"clip_global_norm must be > 0 or None, got {clip_global_norm!r}")
        if mixed_precision not in (None, "float32", "mixed_float16", "mixed_bfloat16"):
            raise ValueError(
                "mixed_precision must be None, 'mixed_float16' or 'mixed_bfloat16', "
                f"got {mixed_precision!r}"
            )
        if checkpoint_every is not None and checkpoint_every < 1:
            raise ValueError(f"checkpoint_every must be >= 1 or None, got {checkpoint_every!r}")
        self.steps_per_call = steps_per_call
        self.accumulation_steps = accumulation_steps
        self.clip_global_norm = clip_global_norm
        self.mixed_precision = mixed_precision
        self.jit_compile = jit_compile
        self.run_dir = os.fspath(run_dir) if run_dir is not None else None
        self.checkpoint_every = checkpoint_every
        self.max_to_keep = max_to_keep
        self.progress = progress and self.info.is_chief
        self.verbose = verbose if self.info.is_chief else 0
        self._stop = threading.Event()
        self._agree_fn: Any = None
        self.record_samples = os.fspath(record_samples) if record_samples is not None else None
        self.on_nonfinite = check_policy(on_nonfinite)

        if mixed_precision in ("mixed_float16", "mixed_bfloat16"):
            keras.mixed_precision.set_dtype_policy(mixed_precision)
        with self.strategy.scope():
            self.model = _build(model)
            optimizer = _build(optimizer)
            if not isinstance(self.model, keras.Model):
                raise ValueError(
                    f"model must be a keras.Model or a factory of one, got {self.model!r}"
                )
            if not isinstance(optimizer, keras.optimizers.Optimizer):
                raise ValueError(
                    f"optimizer must be a Keras optimizer or a factory, got {optimizer!r}"
                )
            for attr in ("clipnorm", "global_clipnorm", "clipvalue"):
                if getattr(optimizer, attr, None):
                    raise ValueError(
                        f"optimizer.{attr} clips each replica's partial gradient before the "
                        "all-reduce, which is wrong under a strategy; build the optimizer without "
                        f"it and pass Trainer(clip_global_norm=...) instead"
                    )
            if mixed_precision == "mixed_float16" and not isinstance(
                optimizer, keras.optimizers.LossScaleOptimizer
            ):
                optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
            self.optimizer = optimizer
            self._check_model_in_scope()
            self.optimizer.build(self.model.trainable_variables)
            self.loss = PerExampleLoss(loss)
            self.train_loss = keras.metrics.Mean(name="loss")
            self.train_metrics = [
                keras.metrics.get(m) if isinstance(m, str) else m for m in metrics
            ]
            self.evaluator = Evaluator(self.strategy, self.model, self.loss, self.train_metrics)
        self._train_fns: dict[tuple[Any, ...], Any] = {}
        self._grad_fn: Any = None
        self._input_return_ids = False
        self._ckpt: Any = None
        self.state = TrainState()

    # -- checks ---------------------------------------------------------------
    def _check_model_in_scope(self) -> None:
        if not self.model.built or not self.model.variables:
            raise ValueError(
                "the model has no variables yet: build it (keras.Input or model.build) inside "
                "strategy.scope(), or pass a factory"
            )
        for v in self.model.variables:
            var = getattr(v, "value", v)
            if not self.strategy.extended.variable_created_in_scope(var):
                raise ValueError(
                    f"model variable {v.path if hasattr(v, 'path') else v.name} was created "
                    "outside strategy.scope(): build the model inside `with strategy.scope():`, "
                    "or pass a factory `lambda: build_model()` and tfdp builds it there"
                )

    # -- the step ---------------------------------------------------------------
    def _step_rows(self, batches: tuple[Any, ...]) -> int | tf.Tensor:
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

    def _gradients(
        self, batches: tuple[Any, ...], rows: Any
    ) -> tuple[list[tf.Tensor], tf.Tensor, list[tuple[Any, ...]]]:
        """This replica's summed gradients over the micro-batches, its loss share, and outputs.

        Each micro-batch contributes ``sum(sample_weight * loss) / rows``, ``rows``
        the rows of the whole optimizer step over all replicas and micro-batches
        (see :meth:`_step_rows`), so the all-reduced gradient is that of the mean
        over the step's rows; the regularisation losses are added once per step
        (a ``1 / (replicas * micro-batches)`` share each). The outputs,
        ``(y, predictions, sample_weight, per-example loss)`` per micro-batch,
        feed the metrics once the step is known to be applied. Runs in replica
        context and only reads the model's variables, so it can be XLA-compiled.
        """
        model = self.model
        tvars = model.trainable_variables
        lso = (
            self.optimizer
            if isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer)
            else None
        )
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
            for m in self.train_metrics:
                m.update_state(y, pred, sample_weight=w)

    def _replica_step(
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
        lso = opt if isinstance(opt, keras.optimizers.LossScaleOptimizer) else None
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
        rows = self._step_rows(batches)
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
                multi_worker=self.info.num_workers > 1,
            )
            if self.on_nonfinite == "skip":  # a skipped step leaves the metrics out too
                ok = tf.reduce_sum(flags) == 0
                tf.cond(ok, lambda: self._update_metrics(outputs), lambda: None)
            else:  # "stop": a flagged step ends the run
                self._update_metrics(outputs)
        if record_width:
            return total_loss, flags, ids
        return total_loss, flags

    # -- the compiled functions ------------------------------------------------------
    def _train_function(self, spec: str, group: int, multi: bool, batch_size: int) -> Any:
        """The compiled function for steps of ``group`` micro-batches, cached by what it needs.

        A function depends on the element structure and shapes of the input
        (``spec``: whether ids come along, a static or dynamic batch dimension), the
        number of micro-batches per step, whether a call holds one step
        (straight-line) or several (a ``tf.range`` loop), and, when recording
        ids, the per-replica batch size; a second :meth:`fit` with another
        input gets functions of its own. Every function returns, per step it
        ran, ``[loss, replicas with a non-finite loss, with a non-finite
        gradient]`` (``[n, 3]``, the loss reduced over the replicas; a call
        with ``on_nonfinite="stop"`` ends at the first flagged step) and, when
        ``record_samples`` is set, the steps' ids as a second output.
        """
        with_ids = bool(self._input_return_ids)
        width = batch_size if self.record_samples else 0
        key = (spec, with_ids, width, group, multi)
        fn = self._train_fns.get(key)
        if fn is None:
            fn = self._build_train_function(group, multi, with_ids, width)
            self._train_fns[key] = fn
        return fn

    def _build_train_function(self, group: int, multi: bool, with_ids: bool, width: int) -> Any:
        if self._grad_fn is None:
            self._grad_fn = self._gradients
            if self.jit_compile:  # the forward/backward pass; the update stays outside XLA
                self._grad_fn = tf.function(self._gradients, jit_compile=True)
        strategy = self.strategy
        record = bool(width)

        def replica_step(batches: tuple[Any, ...]) -> Any:
            return self._replica_step(batches, with_ids, width)

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

    def _write_records(self, ids: Any, first_step: int, world: int) -> None:
        """Append ``record_samples`` lines: per step, micro-batch and global rank."""
        if not self.info.is_chief or self.record_samples is None:
            return
        arr = ids.numpy()  # [n, k, W * B], -1 where a batch is partial
        n, k, total = arr.shape
        b = total // world
        with open(self.record_samples, "a") as f:
            for i in range(n):
                for m in range(k):
                    for r in range(world):
                        row = arr[i, m, r * b : (r + 1) * b]
                        rec = {
                            "epoch": self.state.epoch,
                            "step": first_step + i,
                            "rank": r,
                            "ids": row[row >= 0].tolist(),
                        }
                        if self.accumulation_steps > 1:
                            rec["micro_batch"] = m
                        f.write(json.dumps(rec) + "\n")

    def _nonfinite_error(self, i: int, losses: list[float], flags: Any) -> NonFiniteError:
        """The error for step ``i`` of the latest call (the steps before it were applied)."""
        self.state.step += i
        self.state.global_step += i
        self.state.stopped_early = True
        self.state.stop_reason = "nonfinite"
        weights_finite = all(
            bool(tf.reduce_all(tf.math.is_finite(v))) for v in self.model.trainable_variables
        )
        detail = ""
        if not weights_finite:
            detail += (
                "; the weights were already non-finite before this step (a non-finite "
                "learning rate, or an update that overflowed)"
            )
        mgr = self._checkpoint_manager()
        if mgr is not None:
            latest = mgr.latest
            detail += (
                f"; the latest checkpoint, {latest}, is from before it"
                if latest
                else "; no checkpoint was written"
            )
        return NonFiniteError(
            global_step=self.state.global_step + 1,
            epoch=self.state.epoch,
            step=self.state.step,
            what="loss" if flags[i][0] else "gradient",
            value=losses[i],
            detail=detail,
        )

    # -- checkpoints --------------------------------------------------------------
    def _checkpoint_manager(self) -> Any:
        if self._ckpt is None and self.run_dir is not None:
            from tfdp.checkpoint import CheckpointManager, keras_trackables

            self._ckpt = CheckpointManager(
                os.path.join(self.run_dir, "checkpoints"),
                strategy=self.strategy,
                max_to_keep=self.max_to_keep,
                **keras_trackables(self.model, self.optimizer),
                # The epoch's training-metric accumulators: a resumed epoch's line covers it all.
                metric_states=[
                    getattr(v, "value", v)
                    for m in (self.train_loss, *self.train_metrics)
                    for v in m.variables
                ],
            )
            self._ckpt.check_writable()
        return self._ckpt

    def _data_config(self, train_input: DistributedInput) -> dict[str, Any]:
        from tfdp.checkpoint import input_config

        return input_config(
            train_input, accumulation_steps=self.accumulation_steps, seed=train_input.seed
        )

    def _save(self, train_input: DistributedInput) -> None:
        mgr = self._checkpoint_manager()
        if mgr is None:
            return
        from tfdp.checkpoint import DataPosition

        k = self.accumulation_steps
        position = DataPosition.from_input(  # the batch position in the sampler epoch
            train_input,
            self.state.epoch,
            min(self.state.step * k, train_input.steps_per_epoch),
            accumulation_steps=k,
            seed=train_input.seed,
        )
        mgr.save(position, self.state.global_step)

    def restore(self, train_input: DistributedInput) -> bool:
        """Restore the latest checkpoint of ``run_dir``; True if there was one.

        The saved data position must match ``train_input`` (world size, batch
        size, sampler configuration), else a ValueError names what differs.
        The epoch's training-metric accumulators come back too, and
        ``metrics.jsonl`` keeps only the lines up to the restored step (a line
        written just before a crash, for steps the resumed run trains again,
        would otherwise appear twice).
        """
        mgr = self._checkpoint_manager()
        if mgr is None:
            return False
        restored = mgr.restore(expected_config=self._data_config(train_input))
        if restored is None:
            self._truncate_log(0)
            return False
        position, global_step = restored
        if position.step % self.accumulation_steps:
            raise ValueError(
                f"checkpoint {mgr.latest} stores batch {position.step} of epoch "
                f"{position.epoch}, not the start of an optimizer step of "
                f"accumulation_steps={self.accumulation_steps} micro-batches"
            )
        self.state.epoch = position.epoch
        self.state.step = position.step // self.accumulation_steps
        self.state.global_step = int(global_step)
        self._truncate_log(self.state.global_step)
        if self.verbose:
            print(f"resumed from {mgr.restored}: epoch {position.epoch}, step {position.step}")
        return True

    def _agreed_stop(self) -> bool:
        """Whether any worker was asked to stop: all workers must stop at the same step.

        Single-process jobs read the local flag; multi-worker jobs all-reduce
        it (one scalar collective per call), so a SIGTERM to one worker stops
        the whole group at one step, where every worker joins the save.
        """
        local = self._stop.is_set()
        if self.info.num_workers == 1:
            return local
        if self._agree_fn is None:

            @tf.function
            def agree(flag: tf.Tensor) -> tf.Tensor:
                per_replica = self.strategy.run(tf.identity, args=(flag,))
                return self.strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

            self._agree_fn = agree
        agreed = float(self._agree_fn(tf.constant(1.0 if local else 0.0))) > 0
        if agreed and not local:
            self._stop.set()
            self.state.stop_reason = self.state.stop_reason or "peer"
        return agreed

    def request_stop(self, reason: str = "request") -> None:
        """Ask :meth:`fit` to save a checkpoint and return at the next step (thread-safe).

        In a multi-worker job every worker stops at the same step (see
        :meth:`_agreed_stop`); ``state.stop_reason`` records ``reason``.
        """
        self.state.stop_reason = reason
        self._stop.set()

    # -- logging ------------------------------------------------------------------
    def _truncate_log(self, global_step: int) -> None:
        """Rewrite ``metrics.jsonl`` atomically without its lines past ``global_step`` (chief)."""
        if not self.info.is_chief or self.run_dir is None:
            return
        path = os.path.join(self.run_dir, "metrics.jsonl")
        if not os.path.exists(path):
            return
        with open(path) as f:
            lines = f.read().splitlines()
        kept = []
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:  # a line torn by a crash mid-write
                continue
            if isinstance(record, dict) and record.get("global_step", 0) <= global_step:
                kept.append(line)
        if len(kept) == len(lines):
            return
        log.warning(
            "tfdp: %s: dropped %d line(s) past the restored step %d (written before a crash)",
            path,
            len(lines) - len(kept),
            global_step,
        )
        tmp = f"{path}.tmp-{uuid.uuid4().hex}"
        with open(tmp, "w") as f:
            f.write("".join(line + "\n" for line in kept))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    def _log_epoch(self, record: dict[str, Any], writer: Any) -> None:
        if not self.info.is_chief:
            return
        if self.verbose:
            parts = [f"epoch {record['epoch'] + 1}", f"{record['time']:.1f}s"]
            parts += [
                f"{k} {v:.4f}"
                for k, v in record.items()
                if k not in ("epoch", "time", "step", "samples_per_s", "lr", "global_step")
                and isinstance(v, float)
            ]
            parts.append(f"{record['samples_per_s']:.0f} samples/s")
            print("  ".join(parts), flush=True)
        if self.run_dir is not None:
            os.makedirs(self.run_dir, exist_ok=True)
            with open(os.path.join(self.run_dir, "metrics.jsonl"), "a") as f:
                f.write(json.dumps(record) + "\n")
        if writer is not None:
            with writer.as_default(step=record["global_step"]):
                for k, v in record.items():
                    if isinstance(v, (int, float)) and k not in ("epoch", "step", "global_step"):
                        tf.summary.scalar(k, v)
            writer.flush()

    def _learning_rate(self) -> float:
        try:
            return float(keras.ops.convert_to_numpy(self.optimizer.learning_rate))
        except Exception:  # a schedule object or anything unreadable
            return float("nan")

    # -- the loop -------------------------------------------------------------------
    def fit(
        self,
        train_input: DistributedInput,
        epochs: int,
        *,
        eval_input: DistributedInput | None = None,
        resume: bool = True,
        max_steps: int | None = None,
        on_step: Callable[[TrainState], None] | None = None,
    ) -> list[dict[str, Any]]:
        """Train for ``epochs`` epochs (resuming from ``run_dir`` when a checkpoint exists).

        Epoch ``e`` of the loop is exactly sampler epoch ``e`` of
        ``train_input``: its ``S = train_input.steps_per_epoch`` batches make
        ``ceil(S / accumulation_steps)`` optimizer steps, the last of which
        holds the ``S mod accumulation_steps`` leftover micro-batches (when
        non-zero) and is the mean over the rows it holds, like every step.
        ``fit`` may be called again with another input (another batch size,
        ``return_ids``, ...): it continues from ``state.epoch`` with steps
        compiled for that input.

        Args:
            train_input: The training input (built on the same strategy).
            epochs: Total epochs (a resumed run continues up to this number).
            eval_input: Exact evaluation after every epoch (``sampler="eval"``).
            resume: Restore the latest checkpoint of ``run_dir`` first.
            max_steps: Stop (saving a checkpoint) once the global step reaches
                this -- a deliberate stop, as a preemption would cause.
            on_step: Called on every process after each ``tf.function`` call;
                ``state.step_losses`` holds the losses of that call's steps.

        Returns:
            One record per epoch completed in this call (also in ``metrics.jsonl``).
        """
        if train_input.strategy is not self.strategy:
            raise ValueError("train_input was built on another strategy than the trainer's")
        k = self.accumulation_steps
        batches_per_epoch = train_input.steps_per_epoch
        full_steps, tail = divmod(batches_per_epoch, k)
        steps_per_epoch = full_steps + (1 if tail else 0)
        if self.run_dir is not None:
            self._checkpoint_manager()  # fails before the first step if the directory is unwritable
        if resume:
            self.restore(train_input)
        if self.record_samples and not train_input.return_ids:
            raise ValueError(
                "record_samples needs the ids of each batch: build the training input with "
                "DistributedInput(..., return_ids=True)"
            )
        self._input_return_ids = train_input.return_ids
        writer = None
        if self.run_dir is not None and self.info.is_chief:
            writer = tf.summary.create_file_writer(os.path.join(self.run_dir, "tensorboard"))
        records: list[dict[str, Any]] = []
        self._stop.clear()
        # One endless stream of reshuffled epochs, built once: each loop epoch consumes
        # exactly the S batches of its sampler epoch, so the two stay aligned.
        dataset = iterator = None
        spec = ""
        if self.state.epoch < epochs:
            dataset = train_input.epochs(
                self.state.epoch,
                epochs - self.state.epoch,
                min(self.state.step * k, batches_per_epoch),
            )
            iterator = iter(dataset)
            spec = str(dataset.element_spec)
        while self.state.epoch < epochs:
            epoch = self.state.epoch
            bar = (
                keras.utils.Progbar(steps_per_epoch, stateful_metrics=["loss"])
                if self.progress
                else None
            )
            t0 = time.perf_counter()
            batches_done = skipped = 0
            loss_sum, loss_count = 0.0, 0
            while self.state.step < steps_per_epoch:
                if self.state.step < full_steps:
                    group, n = k, min(self.steps_per_call, full_steps - self.state.step)
                else:  # the epoch's last, shorter group
                    group, n = tail, 1
                if self.checkpoint_every:
                    n = min(
                        n, self.checkpoint_every - self.state.global_step % self.checkpoint_every
                    )
                if max_steps is not None:
                    n = min(n, max_steps - self.state.global_step)
                if n <= 0:
                    break
                fn = self._train_function(spec, group, n > 1, train_input.batch_size)
                out = fn(iterator, n)
                if self.record_samples:
                    out, ids = out
                    self._write_records(ids, self.state.step, train_input.num_replicas)
                steps = out.numpy()  # [steps run, 3]: loss, non-finite flags
                losses, flags = steps[:, 0].tolist(), steps[:, 1:]
                bad = [i for i in range(len(losses)) if flags[i].any()]
                if bad and self.on_nonfinite == "stop":  # the call ended at that step
                    raise self._nonfinite_error(bad[0], losses, flags)
                for i in bad:  # "skip": not applied; its data is consumed
                    log.warning(
                        "tfdp: skipped optimizer step %d (epoch %d, step %d): non-finite %s",
                        self.state.global_step + i + 1,
                        epoch + 1,
                        self.state.step + i + 1,
                        "loss" if flags[i][0] else "gradient",
                    )
                skipped += len(bad)
                self.state.skipped_steps += len(bad)
                self.state.step_losses = losses
                self.state.last_loss = losses[-1]
                self.state.step += n
                self.state.global_step += n
                batches_done += n * group
                good = [v for i, v in enumerate(losses) if i not in bad]
                loss_sum += sum(good)
                loss_count += len(good)
                if bar is not None:  # already-reduced step losses: no metric read, no collective
                    mean = loss_sum / loss_count if loss_count else float("nan")
                    bar.update(self.state.step, values=[("loss", mean)])
                if on_step is not None:
                    on_step(self.state)
                due = self.checkpoint_every and self.state.global_step % self.checkpoint_every == 0
                stop = self._agreed_stop() or (
                    max_steps is not None and self.state.global_step >= max_steps
                )
                if (due or stop) and self.state.step < steps_per_epoch:
                    self._save(train_input)
                if stop:
                    break
            if self.state.step < steps_per_epoch:  # stopped mid-epoch
                self.state.stopped_early = True
                return records
            elapsed = time.perf_counter() - t0
            record: dict[str, Any] = {
                "epoch": epoch,
                "step": steps_per_epoch,
                "global_step": self.state.global_step,
                "time": elapsed,
                "loss": float(self.train_loss.result()),
            }
            for m in self.train_metrics:
                record[m.name] = float(m.result())
            samples = batches_done * train_input.global_batch_size
            record["samples_per_s"] = samples / max(elapsed, 1e-9)
            record["lr"] = self._learning_rate()
            if skipped:
                record["skipped_steps"] = skipped
            self.train_loss.reset_state()
            for m in self.train_metrics:
                m.reset_state()
            if eval_input is not None:
                for name, value in self.evaluator.evaluate(eval_input).items():
                    record[f"val_{name}"] = value
            source = train_input.source
            if isinstance(source, SkipReportingSource) and source.skipped_files():
                record["skipped_files"] = len(source.skipped_files())  # read with weight 0
                if self.verbose:
                    print(source.report(), flush=True)
            self.state.epoch, self.state.step = epoch + 1, 0
            # The line first: a crash between the two re-runs (part of) the epoch from an
            # older checkpoint, and the resume drops the line (see restore).
            self._log_epoch(record, writer)
            self._save(train_input)
            records.append(record)
            self.state.history.append(record)
            if self._agreed_stop() or (
                max_steps is not None and self.state.global_step >= max_steps
            ):
                self.state.stopped_early = self.state.epoch < epochs
                break
        return records

    def evaluate(self, eval_input: DistributedInput) -> dict[str, float]:
        """Exact distributed evaluation (padding weighted 0): ``{"loss": ..., metric: ...}``."""
        return self.evaluator.evaluate(eval_input)
