"""The differential test's configurations, data, reference layout of a run, models and checks.

Read by tests/test_differential.py, which runs the loops and holds the cases: a :class:`Config`
and its hypothesis draws (:func:`configs`); the data, whose every example carries its id (a
feature row's first value is ``id / 64``, an image's first byte ``id``) so that a model can
tell which rows it was fed; :class:`Data`, the examples behind sampler entries, read plainly
(TFRecord lanes by hand); :func:`plan_run`, the reference layout of a whole run -- the first
fit, its stop or crash, the resume (also on another world size), a second fit -- built on
tests/reference.py's lists; the model (with :class:`IdTap`, which records each replica's ids
or poisons a row); :func:`reference_run`, the plain single-device run; and the checks of a
run's outcome.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf
from hypothesis import strategies as st

from reference import (
    Reference,
    check_coverage,
    deal_batches,
    optimizer_steps,
    permutation,
    plain_evaluation,
    repeated_augmentation_list,
    stream_lanes,
    torch_distributed_list,
)
from tfdp import ArraySource, DistributedInput
from tfdp.seeding import epoch_seed_key
from tfdp.sources import ImageFolderSource, TFRecordSource, write_tfrecords
from tfdp.train import NonFiniteError

MAX_N = 41
CLASSES = 3
LR = 0.3
SEED = 3
ID_SCALE = 64.0  # a feature row's id is 64 * its first feature (an image's: its first byte)
_rng = np.random.default_rng(11)
FEATURES = _rng.normal(size=(MAX_N, 4)).astype(np.float32)
FEATURES[:, 0] = np.arange(MAX_N) / ID_SCALE
IMAGES = _rng.integers(0, 256, size=(MAX_N, 2, 2, 3), dtype=np.uint8)
IMAGES[:, 0, 0, 0] = np.arange(MAX_N)
LABELS = (np.arange(MAX_N) * 7 % CLASSES).astype(np.int64)
WEIGHTS = _rng.uniform(0.25, 2.0, size=MAX_N).astype(np.float32)
VAL_N = 13
VAL_FEATURES = _rng.normal(size=(VAL_N, 4)).astype(np.float32)
VAL_FEATURES[:, 0] = (ID_SCALE + np.arange(VAL_N)) / ID_SCALE  # ids 64.. never poisoned
VAL_IMAGES = _rng.integers(0, 256, size=(VAL_N, 2, 2, 3), dtype=np.uint8)
VAL_IMAGES[:, 0, 0, 0] = ID_SCALE + np.arange(VAL_N)
VAL_LABELS = (np.arange(VAL_N) * 5 % CLASSES).astype(np.int64)
_FILES_ROOT = tempfile.mkdtemp(prefix="tfdp-diff-files-")
atexit.register(shutil.rmtree, _FILES_ROOT, True)
_FILES: dict[tuple[Any, ...], Any] = {}


@dataclass
class Config:
    """One configuration of a run (the defaults: the plainest one)."""

    replicas: int
    n: int
    batch: int
    source: str = "arrays"  # "arrays", "tfrecord" or "image_folder"
    shards: int = 1
    shuffle_buffer: int = 0
    sampler: str = "distributed"  # or "repeat_aug"
    options: dict[str, Any] = field(
        default_factory=lambda: {"padding": "wrap", "drop_last": False, "shuffle": True}
    )
    injected: bool = False  # the order from permutation=, independent of tfdp's
    drop_remainder: bool = True
    epochs: int = 1
    accumulation: int = 1
    steps_per_call: int = 1
    clip: float | None = None
    l2: float = 0.0
    augment: str | None = None  # "example" or "batched"
    weights: bool = False
    eval_n: int | None = None
    eval_batch: int = 1
    mixed: str | None = None
    xla: bool = False
    checkpoint_every: int | None = None
    stop: str | None = None  # "stop" (max_steps) or "crash" (an exception after a step)
    stop_at: float = 0.5  # where, as a fraction of the first fit's steps
    resume_replicas: int | None = None  # resume on another world size (same global batch)
    fresh: bool = True  # resume in a new trainer and model
    on_nonfinite: str = "stop"
    poison: int | None = None  # an id whose rows make the step's loss NaN
    second_batch: int | None = None  # a second fit, one more epoch, at this batch size


@st.composite
def configs(draw: Any, loop: bool = True, replicas: tuple[int, int] = (1, 4)) -> Config:
    w = draw(st.integers(*replicas))
    n = draw(st.one_of(st.sampled_from([w, 5, 7, 11, 13]), st.integers(w, MAX_N)))
    source = draw(st.sampled_from(["arrays", "arrays", "tfrecord", "image_folder"]))
    cfg = Config(replicas=w, n=max(n, w), batch=draw(st.integers(1, 4)), source=source)
    if source == "tfrecord":
        cfg.shards = draw(st.integers(1, min(cfg.n, 5)))
        cfg.shuffle_buffer = draw(st.sampled_from([0, 2, 3]))
    cfg.sampler = draw(st.sampled_from(["distributed", "repeat_aug"]))
    if cfg.sampler == "distributed":
        cfg.options = {
            "padding": draw(st.sampled_from(["wrap", "random", None])),
            "drop_last": draw(st.booleans()),
            "shuffle": draw(st.booleans()),
        }
    else:
        cfg.options = {
            "num_repeats": draw(st.sampled_from([1, 2, 3, 1.5, 2.5])),
            "selected_round": draw(st.sampled_from([0, 0, 2, 4])),
            "selected_ratio": draw(st.sampled_from([None, None, 1.5, w + 0.5])),
            "shuffle": draw(st.booleans()),
        }
    cfg.injected = source != "tfrecord" and draw(st.booleans())
    cfg.drop_remainder = draw(st.booleans())
    cfg.epochs = draw(st.integers(1, 2))
    cfg.l2 = draw(st.sampled_from([0.0, 0.01]))
    cfg.augment = draw(st.sampled_from([None, None, "example", "batched"]))
    cfg.weights = source != "image_folder" and draw(st.booleans())
    if draw(st.booleans()):
        cfg.eval_n, cfg.eval_batch = draw(st.sampled_from([5, 7, 13])), draw(st.integers(1, 3))
    cfg.mixed = draw(st.sampled_from([None] * 8 + ["mixed_bfloat16", "mixed_float16"]))
    cfg.stop = draw(st.sampled_from([None, None, "stop", "crash"]))
    cfg.stop_at = draw(st.floats(0.05, 0.95))
    if cfg.stop is not None:
        cfg.checkpoint_every = draw(st.sampled_from([None, 1, 2, 3]))
        cfg.fresh = cfg.stop == "crash" or draw(st.booleans())  # a crash: a new process
        others = [v for v in range(1, 5) if v != w and w * cfg.batch % v == 0]
        if cfg.stop == "stop" and others and draw(st.booleans()):
            cfg.resume_replicas, cfg.fresh = draw(st.sampled_from(others)), True
    if draw(st.integers(0, 3)) == 0:
        cfg.poison = draw(st.integers(0, cfg.n - 1))
        cfg.on_nonfinite = draw(st.sampled_from(["stop", "skip"]))
    if cfg.mixed == "mixed_float16":
        cfg.poison = None  # a non-finite gradient is the loss scaler's business there
    if loop:
        cfg.accumulation = draw(st.integers(1, 3))
        cfg.steps_per_call = draw(st.integers(1, 3))
        cfg.clip = draw(st.sampled_from([None, 0.05]))
        cfg.xla = draw(st.integers(0, 9)) == 0
        if draw(st.integers(0, 3)) == 0:
            cfg.second_batch = draw(st.integers(1, 3))
    return cfg


# -- data: sources, and the examples behind entries ----------------------------------------


def make_source(cfg: Config) -> Any:
    """The configuration's training source over the first ``n`` examples (files cached)."""
    n = cfg.n
    arrays = (FEATURES[:n], LABELS[:n]) + ((WEIGHTS[:n],) if cfg.weights else ())
    if cfg.source == "arrays":
        return ArraySource(arrays)
    key = (cfg.source, n, cfg.shards, cfg.weights)
    if key not in _FILES:
        out = tempfile.mkdtemp(dir=_FILES_ROOT)
        if cfg.source == "tfrecord":
            _FILES[key] = write_tfrecords(arrays, out, num_shards=cfg.shards)
        else:
            for i in range(n):
                folder = os.path.join(out, f"class{LABELS[i]}")
                os.makedirs(folder, exist_ok=True)
                tf.io.write_file(os.path.join(folder, f"{i:04d}.png"), tf.io.encode_png(IMAGES[i]))
            _FILES[key] = out
    if cfg.source == "tfrecord":
        return TFRecordSource(_FILES[key], shuffle_buffer=cfg.shuffle_buffer)
    return ImageFolderSource(_FILES[key])


class Injected:
    """An order independent of tfdp's shuffle: ``epoch -> permutation`` (the samplers' option)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __call__(self, epoch: int) -> np.ndarray:
        return np.random.default_rng([77, epoch]).permutation(self.n)


def sampler_options(cfg: Config) -> dict[str, Any]:
    return {**cfg.options, **({"permutation": Injected(cfg.n)} if cfg.injected else {})}


_MASK_F = tf.constant([0.0, 1.0, 1.0, 1.0])  # the id slot is never augmented
_MASK_U8 = tf.constant(np.ones((2, 2, 3), np.uint8) - (np.arange(12) == 0).reshape(2, 2, 3))


def augment_one(example: Any, seed: Any) -> Any:
    """A per-example augmentation with stateless ops: the same seed, the same result."""
    x = example[0]
    if x.dtype == tf.uint8:
        shift = tf.random.stateless_uniform([], seed, 0, 40, dtype=tf.int32)
        x = x + tf.cast(shift, tf.uint8) * _MASK_U8
    else:
        x = x + 0.1 * tf.random.stateless_uniform(tf.shape(x), seed, -1.0, 1.0) * _MASK_F
    return (x, *example[1:])


class BatchedAugment:
    """:func:`augment_one` as a batched augmentation (``aug(batch, seeds[B, 2])``)."""

    batched = True

    def __call__(self, batch: Any, seeds: Any) -> Any:
        x = tf.map_fn(
            lambda a: augment_one((a[0],), a[1])[0],
            (batch[0], seeds),
            fn_output_signature=batch[0].dtype,
        )
        return (x, *batch[1:])


class Data:
    """The examples behind a configuration's sampler entries, read plainly (reference side)."""

    def __init__(self, cfg: Config, source: Any) -> None:
        self.cfg = cfg
        self._lanes: dict[tuple[int, int], list] = {}
        self.files, self.parse, self.ids_of = None, None, np.arange(cfg.n)
        if cfg.source == "tfrecord":
            self.files, self.parse = source.files, source.parse
            self.counts = sorted(sum(1 for _ in tf.data.TFRecordDataset(f)) for f in self.files)
        if cfg.source == "image_folder":  # source index -> the id in the file name
            self.ids_of = np.array(
                [int(os.path.basename(source.path(i))[:4]) for i in range(cfg.n)]
            )

    def stream_length(self, w: int) -> int:
        """A stream's entries for ``w`` replicas (the ``F // L`` smallest files per lane)."""
        lanes = min(len(self.counts), w)
        return lanes * sum(self.counts[: len(self.counts) // lanes])

    def entries(self, w: int) -> int:
        """How many entries a sampler of ``w`` replicas permutes."""
        return self.stream_length(w) if self.cfg.source == "tfrecord" else self.cfg.n

    def examples(self, entries: list[int], epoch: int, w: int) -> list[tuple]:
        """The examples ``(x, y[, weight])`` at sampler ``entries`` (a stream of ``w`` lanes)."""
        cfg = self.cfg
        if cfg.source == "tfrecord":
            key = (epoch, w)
            if key not in self._lanes:
                shuffle = cfg.options["shuffle"]
                self._lanes[key] = stream_lanes(
                    self.files, self.parse, w, SEED, epoch, shuffle, cfg.shuffle_buffer
                )
            lanes = self._lanes[key]
            return [lanes[s % len(lanes)][s // len(lanes)] for s in entries]
        out = []
        for e in entries:
            i = int(self.ids_of[e])
            x = IMAGES[i] if cfg.source == "image_folder" else FEATURES[i]
            out.append((x, LABELS[i]) + ((WEIGHTS[i],) if cfg.weights else ()))
        return out

    def rows(self, micro: list, epoch: int, w: int) -> tuple[Any, Any, Any, list[int]]:
        """A step's rows over its micro-batches and ranks: ``x, y, weight, example ids``."""
        pairs = [pair for batch in micro for rank in batch for pair in rank]
        examples = self.examples([e for e, _ in pairs], epoch, w)
        if self.cfg.augment is not None:
            key = epoch_seed_key(SEED, epoch)
            examples = [
                tuple(np.asarray(t) for t in augment_one(tuple(map(tf.constant, ex)), [key, p]))
                for ex, (_, p) in zip(examples, pairs, strict=True)
            ]
        x = np.stack([ex[0] for ex in examples])
        y = np.array([ex[1] for ex in examples])
        weight = np.array([ex[2] for ex in examples], np.float32) if self.cfg.weights else None
        return x, y, weight, [example_id(ex[0]) for ex in examples]


def example_id(x: np.ndarray) -> int:
    return int(x.flat[0]) if x.dtype == np.uint8 else round(float(x.flat[0]) * ID_SCALE)


# -- the reference layout of a run ---------------------------------------------------------


@dataclass
class Step:
    """One expected optimizer step: ``micro[m][rank] -> [(entry, position)]``."""

    epoch: int
    step: int
    ranks: int
    lanes: int  # the world size of the epoch's stream (its lanes)
    micro: list


def epoch_steps(
    cfg: Config,
    data: Data,
    w: int,
    batch: int,
    epoch: int,
    plan: int | None = None,
    first: int = 0,
) -> list[Step] | str:
    """An epoch's optimizer steps on ``w`` ranks (the list of ``plan`` ranks), or a refusal."""
    lw = plan or w
    n = data.entries(lw)
    if n < lw:
        return "fewer than the"
    streaming = cfg.source == "tfrecord"
    injected = Injected(n) if cfg.injected else None
    perm = permutation(n, SEED, epoch, cfg.options["shuffle"] and not streaming, injected)
    if cfg.sampler == "distributed":
        o = cfg.options
        entries = torch_distributed_list(perm, lw, o["drop_last"], o["padding"], SEED, epoch)
    else:
        o = cfg.options
        entries = repeated_augmentation_list(
            perm, lw, o["num_repeats"], o["selected_round"], o["selected_ratio"]
        )
    if isinstance(entries, str):
        return entries
    check_coverage(cfg.sampler, cfg.options, n, lw, entries)
    batches = deal_batches(entries, w * batch, w, cfg.drop_remainder, first)
    if not batches and first == 0:
        return "no full step"
    k = cfg.accumulation
    return [
        Step(epoch, first // k + j, w, lw, micro)
        for j, micro in enumerate(optimizer_steps(batches, k))
    ]


def run_steps(cfg: Config, data: Data, w: int, batch: int, epochs: range) -> list[Step] | str:
    out: list[Step] = []
    for e in epochs:
        steps = epoch_steps(cfg, data, w, batch, e)
        if isinstance(steps, str):
            return steps
        out += steps
    return out


@dataclass
class Plan:
    """The reference layout of a run: the first fit, where it stops, the resume, a second fit."""

    first: list[Step] | str  # the first fit's steps, uninterrupted (or why tfdp refuses them)
    stop: int = 0  # steps the first fit runs before its stop or crash
    w2: int = 1  # the resume's world size
    refused2: str | None = None  # why tfdp refuses the resume's input (another world size)
    rest: list[Step] = field(default_factory=list)  # the resume's steps
    fewer: bool = False  # the resumed epoch's last step has fewer samples than replicas
    more: list[Step] | str | None = None  # the second fit's steps

    def steps(self, second: bool) -> list[Step]:
        assert isinstance(self.first, list)
        more = self.more if second and isinstance(self.more, list) else []
        return self.first[: self.stop] + self.rest + more


def plan_run(cfg: Config, data: Data) -> Plan:
    w, k = cfg.replicas, cfg.accumulation
    first = run_steps(cfg, data, w, cfg.batch, range(cfg.epochs))
    if isinstance(first, str):
        return Plan(first)
    plan = Plan(first, len(first), cfg.resume_replicas or w)
    if cfg.stop is not None:
        plan.stop = min(len(first), max(1, int(cfg.stop_at * len(first))))
        ends = [i + 1 for i in range(len(first) - 1) if first[i + 1].epoch != first[i].epoch]
        if plan.w2 != w and cfg.source == "tfrecord":  # a stream changes world size at epoch ends
            plan.stop, plan.w2 = (ends[0], plan.w2) if ends else (plan.stop, w)
    w2, rest = plan.w2, first[plan.stop :]
    if w2 == w or not rest:
        plan.rest = rest
    else:  # the same global batch on w2 replicas
        b2 = w * cfg.batch // w2
        own = run_steps(cfg, data, w2, b2, range(cfg.epochs))
        if isinstance(own, str):
            plan.refused2 = own
            return plan
        nxt = rest[0]
        if nxt.step > 0:  # mid-epoch: the rest of the epoch's list dealt over the new ranks
            dealt = epoch_steps(cfg, data, w2, b2, nxt.epoch, w, nxt.step * k)
            assert isinstance(dealt, list)
            plan.fewer = min(len(r) for r in dealt[-1].micro[-1]) == 0
            plan.rest += dealt
        plan.rest += [
            s for s in own if s.epoch > nxt.epoch or (s.epoch == nxt.epoch and nxt.step == 0)
        ]
    if cfg.second_batch is not None:
        plan.more = run_steps(cfg, data, w2, cfg.second_batch, range(cfg.epochs, cfg.epochs + 1))
    return plan


def expected_records(steps: list[Step], k: int) -> list[dict[str, Any]]:
    """The ``record_samples`` lines of ``steps``."""
    out = []
    for s in steps:
        for m, micro in enumerate(s.micro):
            for r, pairs in enumerate(micro):
                rec = {"epoch": s.epoch, "step": s.step, "rank": r, "ids": [e for e, _ in pairs]}
                if k > 1:
                    rec["micro_batch"] = m
                out.append(rec)
    return out


def per_replica_ids(steps: list[Step], data: Data) -> list[list[int]]:
    """The example ids each replica's model sees over ``steps``, in order."""
    out: list[list[int]] = [[] for _ in range(steps[0].ranks)] if steps else []
    for s in steps:
        for micro in s.micro:
            for r, pairs in enumerate(micro):
                out[r] += [
                    example_id(ex[0])
                    for ex in data.examples([e for e, _ in pairs], s.epoch, s.lanes)
                ]
    return out


# -- models ----------------------------------------------------------------------------------


class Recorder:
    """The example ids each replica's model was trained on (fit path), in order."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ids: dict[int, list[int]] = {}

    def add(self, replica: Any, ids: Any) -> np.int64:
        with self.lock:
            self.ids.setdefault(int(replica), []).extend(np.asarray(ids).tolist())
        return np.int64(0)

    def take(self) -> list[list[int]]:
        with self.lock:
            out = [self.ids[r] for r in sorted(self.ids)]
            self.ids = {}
        return out


class IdTap(keras.layers.Layer):
    """Reads each row's example id from its data: records it, or poisons the row (NaN)."""

    def __init__(self, scale: float, poison: int | None, recorder: Recorder | None) -> None:
        super().__init__(dtype="float32", trainable=False)
        self.scale, self.poison, self.recorder = scale, poison, recorder

    def call(self, x: Any, training: Any = None) -> Any:
        x = tf.cast(x, tf.float32)
        ids = tf.cast(tf.round(tf.reshape(x, [tf.shape(x)[0], -1])[:, 0] * self.scale), tf.int64)
        if self.recorder is not None and training:
            replica = tf.distribute.get_replica_context().replica_id_in_sync_group
            done = tf.numpy_function(self.recorder.add, [replica, ids], tf.int64, stateful=True)
            with tf.control_dependencies([done]):
                x = tf.identity(x)
        if self.poison is not None:
            bad = tf.where(tf.equal(ids, self.poison), float("nan"), 0.0)
            x = x + tf.reshape(bad, [-1] + [1] * (len(x.shape) - 1))
        return x


def make_model(cfg: Config, recorder: Recorder | None = None) -> keras.Model:
    keras.utils.set_random_seed(5)
    reg = keras.regularizers.L2(cfg.l2) if cfg.l2 else None
    image = cfg.source == "image_folder"
    layers: list[Any] = [keras.Input((2, 2, 3), dtype="uint8") if image else keras.Input((4,))]
    layers.append(IdTap(1.0 if image else ID_SCALE, cfg.poison, recorder))
    if image:
        layers.append(keras.layers.Rescaling(1 / 255.0))
    layers += [
        keras.layers.Flatten(),
        keras.layers.Dense(5, activation="tanh", kernel_regularizer=reg),
        keras.layers.Dense(CLASSES),
    ]
    return keras.Sequential(layers)


def per_example_loss() -> keras.losses.Loss:
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")


def make_optimizer(cfg: Config) -> keras.optimizers.Optimizer:
    if cfg.mixed == "mixed_float16":  # a small scale: no overflow step for the scaler to skip
        return keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(LR), initial_scale=16.0)
    return keras.optimizers.SGD(LR)


def with_policy(cfg: Config, build: Any) -> Any:
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(cfg.mixed or "float32")
    try:
        return build()
    finally:
        keras.config.set_dtype_policy(previous)


def tolerance(cfg: Config) -> float:
    return {None: 1e-5, "mixed_bfloat16": 3e-2, "mixed_float16": 5e-3}[cfg.mixed]


# -- the reference run -----------------------------------------------------------------------


@dataclass
class Expected:
    """What the reference says a run does: every step's loss, whether it was applied, each
    epoch's evaluation, and the weights at the end (or before a step that stops the run)."""

    losses: list[float]
    applied: list[bool]
    val: dict[int, dict[str, float]]  # epoch -> plain evaluation after it
    weights: list[np.ndarray]
    stop: int | None  # the non-finite step that stops the run (on_nonfinite="stop")


def reference_run(cfg: Config, data: Data, steps: list[Step]) -> Expected:
    model = with_policy(cfg, lambda: make_model(cfg))
    ref = Reference(
        model, keras.optimizers.SGD(LR), per_example_loss(), clip=cfg.clip, compiled=len(steps) > 8
    )
    out = Expected([], [], {}, [], None)
    val_set = held_out(cfg)
    for i, s in enumerate(steps):
        x, y, w, _ = data.rows(s.micro, s.epoch, s.lanes)
        loss, applied = ref.step_rows(x, y, w)
        out.losses.append(loss)
        out.applied.append(applied)
        if not applied and cfg.on_nonfinite == "stop":
            out.stop = i
            break
        if cfg.eval_n and (i + 1 == len(steps) or steps[i + 1].epoch != s.epoch):
            out.val[s.epoch] = plain_evaluation(model, *val_set, per_example_loss())
    out.weights = [v.numpy() for v in model.weights]
    return out


def held_out(cfg: Config) -> tuple[np.ndarray, np.ndarray]:
    x = VAL_IMAGES if cfg.source == "image_folder" else VAL_FEATURES
    return x[: cfg.eval_n], VAL_LABELS[: cfg.eval_n]


def eval_input_for(strategy: Any, cfg: Config) -> DistributedInput | None:
    if not cfg.eval_n:
        return None
    src = ArraySource(held_out(cfg))
    return DistributedInput(strategy, src, sampler="eval", batch_size=cfg.eval_batch)


def training_input(
    strategy: Any, cfg: Config, batch: int, expected: Any, return_ids: bool = True
) -> Any:
    """The training input; None (asserting tfdp's refusal) where the reference says it refuses."""
    augment = {None: None, "example": augment_one, "batched": BatchedAugment()}[cfg.augment]
    try:
        inp = DistributedInput(
            strategy,
            make_source(cfg),
            sampler=cfg.sampler,
            sampler_options=sampler_options(cfg),
            batch_size=batch,
            drop_remainder=cfg.drop_remainder,
            return_ids=return_ids,
            augment=augment,
            seed=SEED,
        )
    except ValueError as e:
        assert isinstance(expected, str), f"refused, but the reference lays it out: {e}"
        assert expected in str(e), (expected, str(e))
        return None
    assert not isinstance(expected, str), f"the reference refuses ({expected}); tfdp did not"
    return inp


class CrashError(Exception):
    """A deliberate crash after a step: the resume must start from the latest checkpoint."""


def latest_checkpoint(cfg: Config, steps: list[Step], crash: int, saved_at_crash: bool) -> int:
    """The latest step saved when a run crashes after step ``crash``: a ``checkpoint_every``
    multiple or an epoch end (the crashed step's own epoch-end save never happens; its periodic
    one does on the fit path, whose checkpoint callback runs before the user's)."""
    ends = {i + 1 for i in range(len(steps) - 1) if steps[i + 1].epoch != steps[i].epoch}
    every = cfg.checkpoint_every or 0
    saved = {g for g in range(1, crash) if g in ends or (every and g % every == 0)}
    if saved_at_crash and every and crash % every == 0:
        saved.add(crash)
    return max(saved, default=0)


def executed_steps(
    steps: list[Step], crash: int | None, resumed_at: int, stop: int | None
) -> list[int]:
    """The indices of the steps a run executes: a crash re-runs from its checkpoint, a
    non-finite step with ``on_nonfinite="stop"`` ends the run (itself executed)."""
    seq = list(range(len(steps)))
    if crash is not None:
        seq = list(range(crash)) + list(range(resumed_at, len(steps)))
    if stop is not None:
        seq = seq[: seq.index(stop) + 1]
    return seq


class Watch(keras.callbacks.Callback):
    """Each epoch's ``val_*`` (a re-run epoch's later values win) and the crash of a fit path."""

    def __init__(self, val: dict[int, dict[str, float]], crash_at: int | None = None) -> None:
        super().__init__()
        self.val, self.crash_at, self.batches, self.crashed = val, crash_at, 0, None

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        if logs and "val_loss" in logs:
            self.val[epoch] = {
                "loss": logs["val_loss"],
                "sparse_categorical_accuracy": logs["val_sparse_categorical_accuracy"],
            }

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:  # the fit path only
        self.batches += 1
        if self.crash_at is not None and self.crashed is None and self.batches >= self.crash_at:
            self.crashed = self.batches
            raise CrashError


def check_outcome(
    cfg: Config,
    expected: Expected,
    error: NonFiniteError | None,
    val: dict[int, dict[str, float]],
    weights: list[Any],
) -> None:
    """The run's non-finite stop, each epoch's evaluation and the final weights."""
    tol = tolerance(cfg)
    if expected.stop is not None:
        assert error is not None, f"step {expected.stop + 1} is not finite: the run must stop"
        assert error.global_step == expected.stop + 1, (error.global_step, expected.stop + 1)
    else:
        assert error is None, error
    if cfg.eval_n:
        assert sorted(val) == sorted(expected.val), "the epochs evaluated"
        for e, want in expected.val.items():  # exact evaluation: a plain mean over the set
            for key, value in want.items():
                assert val[e][key] == pytest.approx(value, abs=tol), (e, key, val[e], want)
    for a, b in zip(weights, expected.weights, strict=True):
        np.testing.assert_allclose(np.asarray(a, np.float32), b, atol=tol, rtol=tol)


def assert_coverage(got: list[dict], want: list[dict]) -> None:
    """Each epoch's ids over all ranks as a multiset (the step-by-step comparison follows)."""
    for e in sorted({r["epoch"] for r in want}):
        g = sorted(i for r in got if r["epoch"] == e for i in r["ids"])
        x = sorted(i for r in want if r["epoch"] == e for i in r["ids"])
        missing = sorted((Counter(x) - Counter(g)).elements())
        extra = sorted((Counter(g) - Counter(x)).elements())
        assert g == x, f"epoch {e}: ids laid out, not fed {missing}; fed, not laid out {extra}"
