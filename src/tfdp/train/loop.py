"""The distributed custom training loop: :class:`Trainer`.

This module owns the train step (per-example loss scaled by the global batch,
gradient accumulation, clipping by global norm *after* the all-reduce, mixed
precision with synchronised loss scaling), the Orbit-style multi-step
``tf.function``, the epoch loop with exact mid-epoch resume from
checkpoints, and the per-epoch log line, progress bar, metrics.jsonl and
TensorBoard scalars. Exact evaluation lives in :mod:`tfdp.train.evaluate`.

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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import keras
import tensorflow as tf

from tfdp.distribute import worker_info
from tfdp.input import DistributedInput
from tfdp.train.evaluate import Evaluator, PerExampleLoss, unpack_batch

__all__ = ["TrainState", "Trainer"]

log = logging.getLogger("tfdp")
Factory = Callable[[], Any]


@dataclass
class TrainState:
    """Where training stands: epoch, step within it, global optimizer step.

    Example:
        >>> TrainState(epoch=1, step=3, global_step=13).epoch
        1
    """

    epoch: int = 0
    step: int = 0
    global_step: int = 0
    stopped_early: bool = False
    last_loss: float = float("nan")
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
            >= 3.8 already divides them by the replica count.
        metrics: Keras metrics (instances or names); cloned for evaluation.
        steps_per_call: Optimizer steps per ``tf.function`` call (a
            ``tf.range`` loop, as Orbit does), to amortise Python overhead.
        accumulation_steps: Micro-batches whose gradients are summed per
            optimizer step (the effective batch is ``k`` global batches).
        clip_global_norm: Clip the all-reduced gradient to this global norm.
        mixed_precision: ``None``, ``"mixed_float16"`` (with dynamic loss
            scaling, skip decisions synchronised across replicas) or
            ``"mixed_bfloat16"``. Set before the model factory runs.
        jit_compile: Compile the replica step with XLA.
        run_dir: Where checkpoints, metrics.jsonl and TensorBoard logs go
            (chief only writes logs; every worker joins checkpoint saves).
        checkpoint_every: Save every N optimizer steps (and at every epoch end).
        max_to_keep: Checkpoints kept.
        progress: A progress bar on the chief.
        verbose: 1 prints a line per epoch on the chief; 0 is quiet.
        record_samples: Append, per step and global rank, the example ids
            each replica consumed, as JSON lines, to this file (the input must
            have ``return_ids=True``; the ids are all-gathered, so the chief
            writes every rank's).

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
        self._with_ids = False

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
        self._train_fn: Any = None
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
    def _gradients(
        self, batches: tuple[Any, ...], global_batch: int
    ) -> tuple[list[tf.Tensor], tf.Tensor]:
        """This replica's summed gradients over the micro-batches, and its loss share.

        Runs in replica context; touches only replica-local state (the model's
        variables read, the metrics' local copies), so it can be XLA-compiled.
        """
        model = self.model
        tvars = model.trainable_variables
        lso = (
            self.optimizer
            if isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer)
            else None
        )
        k = len(batches)
        grads_sum: list[Any] | None = None
        total_loss = tf.constant(0.0)
        for batch in batches:
            x, y, w = unpack_batch(batch)
            with tf.GradientTape() as tape:
                pred = model(x, training=True)
                per_ex = self.loss(y, pred)
                weighted = per_ex if w is None else per_ex * tf.cast(w, per_ex.dtype)
                loss = tf.nn.compute_average_loss(weighted, global_batch_size=global_batch * k)
                if model.losses:
                    reg = tf.add_n([tf.cast(v, tf.float32) for v in model.losses])
                    loss += tf.nn.scale_regularization_loss(reg) / k
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
            self.train_loss.update_state(per_ex, sample_weight=w)
            for m in self.train_metrics:
                m.update_state(y, pred, sample_weight=w)
        assert grads_sum is not None
        return grads_sum, total_loss

    def _replica_step(self, batches: tuple[Any, ...], global_batch: int) -> Any:
        opt = self.optimizer
        tvars = self.model.trainable_variables
        lso = opt if isinstance(opt, keras.optimizers.LossScaleOptimizer) else None
        ctx = tf.distribute.get_replica_context()
        ids = None
        if self._with_ids:  # elements are (example, {"index", "position"})
            ids = tf.stack([b[1]["index"] for b in batches])  # [k, B]
            batches = tuple(b[0] for b in batches)
            if self.record_samples:
                ids = ctx.all_gather(ids, axis=1)  # [k, W * B], in global rank order
        grads_sum, total_loss = self._grad_fn(batches, global_batch)
        if lso is not None:
            # Keras decides skip/apply from replica 0's local gradients: make every replica's
            # gradients non-finite when any replica's are, so all replicas decide alike.
            local_bad = tf.cast(
                tf.logical_not(
                    tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in grads_sum])
                ),
                tf.float32,
            )
            any_bad = ctx.all_reduce(tf.distribute.ReduceOp.SUM, local_bad) > 0
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
        opt.apply_gradients(zip(grads_sum, tvars, strict=True))
        if self.record_samples:
            return total_loss, ids
        return total_loss

    def _make_train_fn(self, global_batch: int) -> Any:
        k = self.accumulation_steps
        replica_step = self._replica_step
        self._grad_fn = self._gradients
        if self.jit_compile:  # the forward/backward pass; the update stays outside XLA
            self._grad_fn = tf.function(self._gradients, jit_compile=True)

        reduce_sum = tf.distribute.ReduceOp.SUM

        def one_step(iterator: Any) -> Any:
            batches = tuple(next(iterator) for _ in range(k))
            return self.strategy.run(replica_step, args=(batches, global_batch))

        @tf.function
        def train_1(iterator: Any) -> tf.Tensor:  # straight-line: no loop overhead
            return self.strategy.reduce(reduce_sum, one_step(iterator), axis=None)

        @tf.function
        def train_loop(iterator: Any, n: tf.Tensor) -> tf.Tensor:  # Orbit-style multi-step
            loss = tf.constant(0.0)
            for _ in tf.range(n):
                loss = self.strategy.reduce(reduce_sum, one_step(iterator), axis=None)
            return loss

        def train_n(iterator: Any, n: int) -> tf.Tensor:
            return train_1(iterator) if n == 1 else train_loop(iterator, tf.constant(n, tf.int64))

        @tf.function
        def train_n_recording(iterator: Any, n: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            loss = tf.constant(0.0)
            ids = tf.TensorArray(tf.int64, size=tf.cast(n, tf.int32))
            for i in tf.range(n):
                per_loss, per_ids = one_step(iterator)
                loss = self.strategy.reduce(reduce_sum, per_loss, axis=None)
                ids = ids.write(
                    tf.cast(i, tf.int32), self.strategy.experimental_local_results(per_ids)[0]
                )
            return loss, ids.stack()

        if self.record_samples:
            return lambda iterator, n: train_n_recording(iterator, tf.constant(n, tf.int64))
        return train_n_recording if self.record_samples else train_n

    def _write_records(self, ids: Any, first_step: int, world: int) -> None:
        """Append ``--record-samples`` lines: per step, micro-batch and global rank."""
        if not self.info.is_chief or self.record_samples is None:
            return
        arr = ids.numpy()  # [n, k, W * B]
        n, k, total = arr.shape
        b = total // world
        with open(self.record_samples, "a") as f:
            for i in range(n):
                for m in range(k):
                    for r in range(world):
                        rec = {
                            "epoch": self.state.epoch,
                            "step": first_step + i,
                            "rank": r,
                            "ids": arr[i, m, r * b : (r + 1) * b].tolist(),
                        }
                        if k > 1:
                            rec["micro_batch"] = m
                        f.write(json.dumps(rec) + "\n")

    # -- checkpoints --------------------------------------------------------------
    def _checkpoint_manager(self) -> Any:
        if self._ckpt is None and self.run_dir is not None:
            from tfdp.checkpoint import CheckpointManager, keras_trackables

            self._ckpt = CheckpointManager(
                os.path.join(self.run_dir, "checkpoints"),
                strategy=self.strategy,
                max_to_keep=self.max_to_keep,
                **keras_trackables(self.model, self.optimizer),
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
        position = DataPosition.from_input(
            train_input,
            self.state.epoch,
            self.state.step * k,
            accumulation_steps=k,
            seed=train_input.seed,
        )
        mgr.save(position, self.state.global_step)

    def restore(self, train_input: DistributedInput) -> bool:
        """Restore the latest checkpoint of ``run_dir``; True if there was one.

        The saved data position must match ``train_input`` (world size, batch
        size, sampler configuration), else a ValueError names what differs.
        """
        mgr = self._checkpoint_manager()
        if mgr is None:
            return False
        restored = mgr.restore(expected_config=self._data_config(train_input))
        if restored is None:
            return False
        position, global_step = restored
        self.state.epoch = position.epoch
        self.state.step = position.step // self.accumulation_steps
        self.state.global_step = int(global_step)
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

        Args:
            train_input: The training input (built on the same strategy).
            epochs: Total epochs (a resumed run continues up to this number).
            eval_input: Exact evaluation after every epoch (``sampler="eval"``).
            resume: Restore the latest checkpoint of ``run_dir`` first.
            max_steps: Stop (saving a checkpoint) once the global step reaches
                this -- a deliberate stop, as a preemption would cause.
            on_step: Called on every process after each ``tf.function`` call.

        Returns:
            One record per epoch trained in this call (also in ``metrics.jsonl``).
        """
        if train_input.strategy is not self.strategy:
            raise ValueError("train_input was built on another strategy than the trainer's")
        k = self.accumulation_steps
        steps_per_epoch = train_input.steps_per_epoch // k
        if steps_per_epoch < 1:
            raise ValueError(
                f"accumulation_steps={k} exceeds the {train_input.steps_per_epoch} batches "
                "of an epoch"
            )
        if self.run_dir is not None:
            self._checkpoint_manager()  # fails before the first step if the directory is unwritable
        if resume:
            self.restore(train_input)
        if self.record_samples and not train_input.return_ids:
            raise ValueError(
                "record_samples needs the ids of each batch: build the training input with "
                "DistributedInput(..., return_ids=True)"
            )
        if self._train_fn is None:
            self._with_ids = train_input.return_ids
            self._train_fn = self._make_train_fn(train_input.global_batch_size)
        writer = None
        if self.run_dir is not None and self.info.is_chief:
            writer = tf.summary.create_file_writer(os.path.join(self.run_dir, "tensorboard"))
        records: list[dict[str, Any]] = []
        samples_per_step = train_input.global_batch_size * k
        self._stop.clear()
        # One endless stream of reshuffled epochs, built once: each epoch is exactly
        # steps_per_epoch * k batches, so sampler epochs and loop epochs stay aligned.
        iterator = None
        if self.state.epoch < epochs:
            iterator = iter(
                train_input.epochs(self.state.epoch, epochs - self.state.epoch, self.state.step * k)
            )
        while self.state.epoch < epochs:
            epoch = self.state.epoch
            bar = (
                keras.utils.Progbar(steps_per_epoch, stateful_metrics=["loss"])
                if self.progress
                else None
            )
            t0 = time.perf_counter()
            steps_done = 0
            while self.state.step < steps_per_epoch:
                n = min(self.steps_per_call, steps_per_epoch - self.state.step)
                if self.checkpoint_every:
                    n = min(
                        n, self.checkpoint_every - self.state.global_step % self.checkpoint_every
                    )
                if max_steps is not None:
                    n = min(n, max_steps - self.state.global_step)
                if n <= 0:
                    break
                out = self._train_fn(iterator, n)
                if self.record_samples:
                    out, ids = out
                    self._write_records(ids, self.state.step, train_input.num_replicas)
                self.state.last_loss = float(out)
                self.state.step += n
                self.state.global_step += n
                steps_done += n
                if bar is not None:
                    bar.update(self.state.step, values=[("loss", float(self.train_loss.result()))])
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
            record["samples_per_s"] = steps_done * samples_per_step / max(elapsed, 1e-9)
            record["lr"] = self._learning_rate()
            self.train_loss.reset_state()
            for m in self.train_metrics:
                m.reset_state()
            if eval_input is not None:
                for name, value in self.evaluator.evaluate(eval_input).items():
                    record[f"val_{name}"] = value
            skipped = getattr(train_input.source, "skipped_files", None)
            if skipped is not None and skipped():  # bad files read with weight 0: say so
                record["skipped_files"] = len(skipped())
                if self.verbose:
                    print(train_input.source.report(), flush=True)
            self.state.epoch, self.state.step = epoch + 1, 0
            self._save(train_input)
            self._log_epoch(record, writer)
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
