"""The training loops against an independent single-device reference, across their configurations.

Hypothesis draws a configuration -- examples (primes, fewer than one global batch), replicas
1-4 (MirroredStrategy over the first k logical CPUs), per-replica batch, accumulation steps,
steps per call, drop_remainder, sampler kind and options (each padding mode, drop_last,
integer and fractional repeats, selection), source kind (arrays, TFRecord files, an image
folder), clipping, an L2 regulariser, a stop-and-resume at a random step, a second ``fit`` with
another batch size -- trains with :class:`tfdp.train.Trainer`, and asserts per step that the ids
each replica received are the sampler's and that the loss is the reference's mean over the
step's samples, and that the final weights equal the reference's (to 1e-5). The reference
(tests/reference.py) is a plain ``GradientTape`` loop over the concatenation of all replicas'
samples of each step; it imports nothing from ``tfdp.train``. The same for ``tfdp.train.fit``
where it applies (no accumulation, steps per call, clipping or record of ids there).

CI runs a bounded number of examples; ``TFDP_DIFF_EXAMPLES=200 pytest tests/test_differential.py``
runs a longer search by hand.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reference import Reference, epoch_batches, lanes_by_hand, optimizer_steps
from tfdp import ArraySource, DistributedInput
from tfdp.sources import ImageFolderSource, TFRecordSource, write_tfrecords
from tfdp.train import Trainer, fit

EXAMPLES = int(os.environ.get("TFDP_DIFF_EXAMPLES", "10"))
pytestmark = [pytest.mark.slow, pytest.mark.timeout(max(600, 120 * EXAMPLES))]
FIT_EXAMPLES = max(1, EXAMPLES // 3)
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
MAX_N = 41
CLASSES = 3
LR = 0.3
FEATURES = np.random.default_rng(11).normal(size=(MAX_N, 4)).astype(np.float32)
IMAGES = np.random.default_rng(12).integers(0, 256, size=(MAX_N, 2, 2, 3), dtype=np.uint8)
LABELS = (np.arange(MAX_N) * 7 % CLASSES).astype(np.int64)
PRIMES = [2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41]
_FILES: dict[tuple[Any, ...], Any] = {}


def _per_example_loss() -> keras.losses.Loss:
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")


@dataclass
class Config:
    """One drawn configuration."""

    replicas: int
    n: int
    batch: int
    source: str
    sampler: str
    options: dict[str, Any]
    drop_remainder: bool
    accumulation: int = 1
    steps_per_call: int = 1
    clip: float | None = None
    l2: float = 0.0
    epochs: int = 1
    stop_at: float | None = None  # a fraction of the run's steps
    second_batch: int | None = None
    shards: int = 1
    extra: dict[str, Any] = field(default_factory=dict)


@st.composite
def configs(draw: Any, loop: bool = True) -> Config:
    replicas = draw(st.integers(1, 4))
    n = draw(
        st.one_of(
            st.sampled_from([p for p in PRIMES if p >= replicas]), st.integers(replicas, MAX_N)
        )
    )
    batch = draw(st.integers(1, 4))
    source = draw(st.sampled_from(["arrays", "tfrecord", "image_folder"]))
    shards = draw(st.integers(1, min(n, 6))) if source == "tfrecord" else 1
    sampler = draw(st.sampled_from(["distributed", "repeat_aug"]))
    if sampler == "distributed":
        options: dict[str, Any] = {
            "padding": draw(st.sampled_from(["wrap", "random", None])),
            "drop_last": draw(st.booleans()),
            "shuffle": draw(st.booleans()),
        }
    else:
        options = {
            "num_repeats": draw(st.sampled_from([1, 2, 3, 1.5, 2.5])),
            "selected_round": draw(st.sampled_from([0, 0, 2, 4])),
            "selected_ratio": draw(st.sampled_from([None, None, 1.5, replicas + 0.5])),
            "shuffle": draw(st.booleans()),
        }
    cfg = Config(
        replicas=replicas,
        n=n,
        batch=batch,
        source=source,
        sampler=sampler,
        options=options,
        drop_remainder=draw(st.booleans()),
        shards=shards,
        epochs=draw(st.integers(1, 2)),
        l2=draw(st.sampled_from([0.0, 0.01])),
        stop_at=draw(st.one_of(st.none(), st.floats(0.05, 0.95))),
        second_batch=draw(st.one_of(st.none(), st.integers(1, 4))),
    )
    if loop:
        cfg.accumulation = draw(st.integers(1, 3))
        cfg.steps_per_call = draw(st.integers(1, 3))
        cfg.clip = draw(st.sampled_from([None, 0.05]))
    return cfg


# -- sources ------------------------------------------------------------------------------------


def _source(cfg: Config) -> Any:
    """The drawn source over the first ``n`` examples (files written once per configuration)."""
    n = cfg.n
    if cfg.source == "arrays":
        return ArraySource((FEATURES[:n], LABELS[:n]))
    key = (cfg.source, n, cfg.shards)
    if key not in _FILES:
        out = tempfile.mkdtemp(prefix="tfdp-diff-")
        if cfg.source == "tfrecord":
            _FILES[key] = write_tfrecords((FEATURES[:n], LABELS[:n]), out, num_shards=cfg.shards)
        else:
            for i in range(n):
                folder = os.path.join(out, f"class{LABELS[i]}")
                os.makedirs(folder, exist_ok=True)
                tf.io.write_file(os.path.join(folder, f"{i:04d}.png"), tf.io.encode_png(IMAGES[i]))
            _FILES[key] = out
    if cfg.source == "tfrecord":
        return TFRecordSource(_FILES[key], shuffle_buffer=0)  # lanes readable by hand
    return ImageFolderSource(_FILES[key])


def _fetcher(inp: DistributedInput, cfg: Config) -> Any:
    """``epoch -> (ids -> (x, y, None))``: the examples the sampler's ids stand for."""
    src = inp.source
    if cfg.source == "arrays":
        return lambda epoch: lambda ids: (FEATURES[ids], LABELS[ids], None)
    if cfg.source == "image_folder":  # index -> the id in the file name
        ids_of = np.array([int(os.path.basename(src.path(i))[:4]) for i in range(src.num_examples)])
        return lambda epoch: lambda ids: (IMAGES[ids_of[ids]], LABELS[ids_of[ids]], None)

    def for_epoch(epoch: int) -> Any:  # a stream: stream index -> the record in its lane
        shuffle = inp.sampler.shuffle
        lanes = lanes_by_hand(src, inp.num_replicas, inp.seed, epoch, shuffle)
        count = len(lanes)

        def fetch(ids: np.ndarray) -> tuple[Any, Any, None]:
            records = [lanes[s % count][s // count] for s in ids.tolist()]
            return np.stack([x for x, _ in records]), np.array([y for _, y in records]), None

        return fetch

    return for_epoch


def _input(strategy: Any, cfg: Config, batch: int, return_ids: bool = True) -> DistributedInput:
    return DistributedInput(
        strategy,
        _source(cfg),
        sampler=cfg.sampler,
        sampler_options=cfg.options,
        batch_size=batch,
        drop_remainder=cfg.drop_remainder,
        return_ids=return_ids,
        seed=3,
    )


def _valid_input(strategy: Any, cfg: Config, batch: int, return_ids: bool = True) -> Any:
    """The input, or None for a configuration tfdp refuses (for a reason it names)."""
    try:
        return _input(strategy, cfg, batch, return_ids)
    except ValueError as e:
        known = ("uneven", "no full step", "select no sample", "fewer than the", "drop_last=True")
        assert any(k in str(e) for k in known), e
        return None


# -- models -------------------------------------------------------------------------------------


def _model(cfg: Config) -> keras.Model:
    keras.utils.set_random_seed(5)
    reg = keras.regularizers.L2(cfg.l2) if cfg.l2 else None
    if cfg.source == "image_folder":
        head = [keras.Input((2, 2, 3), dtype="uint8"), keras.layers.Rescaling(1 / 255.0)]
    else:
        head = [keras.Input((4,))]
    return keras.Sequential(
        [
            *head,
            keras.layers.Flatten(),
            keras.layers.Dense(5, activation="tanh", kernel_regularizer=reg),
            keras.layers.Dense(CLASSES),
        ]
    )


# -- the Trainer --------------------------------------------------------------------------------


def _plan(inputs: list[tuple[DistributedInput, int, int]], k: int) -> list[dict[str, Any]]:
    """Expected optimizer steps: ``[(input, first epoch, last epoch)]`` -> steps with their ids."""
    steps = []
    for inp, first, last in inputs:
        for epoch in range(first, last):
            for i, step in enumerate(optimizer_steps(epoch_batches(inp, epoch), k)):
                steps.append({"input": inp, "epoch": epoch, "step": i, "micro": step})
    return steps


def _expected_records(plan: list[dict[str, Any]], k: int) -> list[dict[str, Any]]:
    out = []
    for s in plan:
        for m, micro in enumerate(s["micro"]):
            for r, ids in enumerate(micro):
                rec = {"epoch": s["epoch"], "step": s["step"], "rank": r, "ids": ids.tolist()}
                if k > 1:
                    rec["micro_batch"] = m
                out.append(rec)
    return out


def _reference(cfg: Config, plan: list[dict[str, Any]]) -> tuple[keras.Model, list[float]]:
    model = _model(cfg)
    ref = Reference(model, keras.optimizers.SGD(LR), _per_example_loss(), None, cfg.clip)
    fetchers: dict[int, Any] = {}
    losses = []
    for s in plan:
        inp = s["input"]
        if id(inp) not in fetchers:
            fetchers[id(inp)] = _fetcher(inp, cfg)
        ref.fetch = fetchers[id(inp)](s["epoch"])
        losses.append(ref.step(s["micro"]))
    return model, losses


def _trainer(strategy: Any, cfg: Config, run_dir: str | None, record: str) -> Trainer:
    return Trainer(
        strategy,
        lambda: _model(cfg),
        lambda: keras.optimizers.SGD(LR),
        _per_example_loss(),
        steps_per_call=cfg.steps_per_call,
        accumulation_steps=cfg.accumulation,
        clip_global_norm=cfg.clip,
        run_dir=run_dir,
        progress=False,
        verbose=0,
        record_samples=record,
    )


def _assert_weights(got: keras.Model, want: keras.Model) -> None:
    for a, b in zip(got.weights, want.weights, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-5, rtol=0)


@SETTINGS
@given(cfg=configs())
def test_trainer_equals_the_reference(mirrored_of, cfg):
    tf.config.experimental.enable_op_determinism()
    strategy = mirrored_of(cfg.replicas)
    inp = _valid_input(strategy, cfg, cfg.batch)
    if inp is None:
        return
    second = None
    if cfg.second_batch is not None:
        second = _valid_input(strategy, cfg, cfg.second_batch)
    k = cfg.accumulation
    inputs = [(inp, 0, cfg.epochs)] + ([(second, cfg.epochs, cfg.epochs + 1)] if second else [])
    plan = _plan(inputs, k)
    first_steps = len(_plan(inputs[:1], k))
    work = tempfile.mkdtemp(prefix="tfdp-diff-run-")
    record = os.path.join(work, "ids.jsonl")
    losses: list[float] = []

    def on_step(state):
        losses.extend(state.step_losses)

    tr = _trainer(strategy, cfg, work if cfg.stop_at is not None else None, record)
    if cfg.stop_at is not None:
        stop = max(1, int(cfg.stop_at * first_steps))
        tr.fit(inp, cfg.epochs, max_steps=stop, on_step=on_step)
        assert tr.state.global_step == stop
        tr = _trainer(strategy, cfg, work, record)  # a fresh process would do the same
        tr.fit(inp, cfg.epochs, on_step=on_step)
    else:
        tr.fit(inp, cfg.epochs, on_step=on_step)
    assert tr.state.global_step == first_steps and not tr.state.stopped_early
    if second is not None:
        tr.fit(second, cfg.epochs + 1, resume=False, on_step=on_step)
    with open(record) as f:
        got = [json.loads(line) for line in f]
    assert got == _expected_records(plan, k)  # every replica received the sampler's ids
    model, ref_losses = _reference(cfg, plan)
    np.testing.assert_allclose(losses, ref_losses, atol=1e-5, rtol=0)  # every step's mean
    _assert_weights(tr.model, model)


# -- the model.fit path -------------------------------------------------------------------------


@settings(
    max_examples=FIT_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(cfg=configs(loop=False))
def test_fit_path_equals_the_reference(mirrored_of, cfg):
    """``tfdp.train.fit``: Keras's step on tfdp input, with exact resume (no ids recorded)."""
    tf.config.experimental.enable_op_determinism()
    strategy = mirrored_of(cfg.replicas)
    inp = _valid_input(strategy, cfg, cfg.batch, return_ids=False)
    if inp is None:
        return
    # Keras's loss is each replica's mean divided by the replica count: the step's mean when
    # every replica holds as many rows, as tfdp's samplers ensure.
    plan = _plan([(inp, 0, cfg.epochs)], 1)

    def compiled() -> keras.Model:
        with strategy.scope():
            model = _model(cfg)
            model.compile(
                keras.optimizers.SGD(LR),
                keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            )
        return model

    work = tempfile.mkdtemp(prefix="tfdp-diff-fit-")
    model = compiled()
    if cfg.stop_at is not None:
        stop = max(1, int(cfg.stop_at * len(plan)))
        fit(model, inp, cfg.epochs, run_dir=work, max_steps=stop, verbose=0)
        assert int(model.optimizer.iterations.numpy()) == stop
        model = compiled()
    fit(model, inp, cfg.epochs, run_dir=work, verbose=0)
    assert int(model.optimizer.iterations.numpy()) == len(plan)
    ref, _ = _reference(cfg, plan)
    _assert_weights(model, ref)
