"""Benchmark tfdp's training loops against a minimal hand-written loop and ``model.fit``.

Everything runs in one process, on the same model, data and strategy:
``MirroredStrategy`` over 2 logical CPU devices (configured before any other
TensorFlow work), a 64-128-10 MLP (``Dense(128, relu)``, ``Dense(10)`` on 64
float32 features), global batch 64 (32 per replica), 65,536 synthetic
examples with int64 labels in [0, 10), ``keras.optimizers.SGD(0.01)``. Every
variant gets its own model (same initial weights) and optimizer.

Variants (steps/s of optimizer steps):

* ``handwritten_1``: the minimal hand-written ``strategy.run`` loop (seed 002's
  loop corrected for Keras 3): per-example loss with ``reduction="none"``,
  ``tf.nn.compute_average_loss(global_batch_size=64)``, a ``GradientTape``,
  ``optimizer.apply_gradients`` inside the replica function; a
  ``@tf.function`` train step called once per step from Python on
  ``iter(strategy.experimental_distribute_dataset(ds))``, where ``ds`` is an
  in-memory ``from_tensor_slices((x, y)).repeat().batch(64).prefetch()``.
* ``handwritten_16``: the same loop, 16 steps per ``tf.function`` call (a
  ``tf.range`` loop, as Orbit does).
* ``handwritten_1_tfdp_input`` / ``handwritten_16_tfdp_input``: the same two
  loops fed by tfdp's ``DistributedInput`` (separates input cost from loop cost).
* ``handwritten_1_batch_arg`` (context): the loop written as
  ``for batch in dist_ds: step(batch)`` -- the batch, not the iterator, is the
  ``tf.function`` argument.
* ``trainer_1`` / ``trainer_16``: ``tfdp.train.Trainer(steps_per_call=1 / 16,
  progress=False, verbose=0)``, no run_dir.
* ``model_fit``: ``model.fit`` (compiled in the scope, ``steps_per_epoch`` set,
  ``verbose=0``) on ``inp.epochs(0, n)``.
* ``tfdp_fit``: ``tfdp.train.fit`` (the fit path) on the same input.

The tfdp-fed variants all use one ``DistributedInput(strategy,
ArraySource((x, y)), batch_size=32)`` (the default shuffling
``"distributed"`` sampler).

Timing: every variant is compiled and warmed up first. A measurement runs 32
untimed steps (a fresh iterator's ramp-up) and then times a fixed number of
steps (976 = 61 x 16; 256 with ``--quick``) between two host-side clocks
(after a ``tf.function`` call, at the Trainer's ``on_step``, or at Keras's
``on_train_batch_begin``), so iterator creation and the first batches are
excluded for every variant alike; a Trainer window always lies inside one
epoch (1,024 steps), so it holds no epoch-end work. Rounds are interleaved
(one measurement of every variant per round, the order rotated each round); a
variant's figure is its best round, the target ratios are ratios of those
bests, all from the same run, and the median of the per-round ratios is
printed beside them. Process CPU time per step (all threads) is printed too:
on a shared machine it is steadier than wall time.

What Trainer.fit pays once per epoch on top -- a new distributed iterator
(``iter(inp.epoch(e))``), its first batch and its teardown -- is timed on its
own after the rounds (``--epoch-rows`` also times whole ``fit()`` epochs of
the Trainers and of ``model.fit`` in the rounds; slow and noisy).

Usage:
    .venv/bin/python benchmarks/bench_train.py            # 976 steps x 7 rounds (~3 min)
    .venv/bin/python benchmarks/bench_train.py --quick    # 256 steps x 2 rounds (< 1 min)
    .venv/bin/python benchmarks/bench_train.py --only trainer_1 --rounds 20  # e.g. for py-spy

The headline figures come last, one ``name: value`` per line.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf

# 2 logical CPU devices, before any other TensorFlow work (hence the late imports below).
_CPUS = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(
    _CPUS[0], [tf.config.LogicalDeviceConfiguration()] * 2
)

import argparse  # noqa: E402
import datetime as _dt  # noqa: E402
import gc  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from typing import Any  # noqa: E402

import keras  # noqa: E402
import numpy as np  # noqa: E402

import tfdp  # noqa: E402
from tfdp.input import DistributedInput  # noqa: E402
from tfdp.sources import ArraySource  # noqa: E402
from tfdp.train import Trainer  # noqa: E402
from tfdp.train.fit import fit as tfdp_fit  # noqa: E402

NUM_EXAMPLES = 65_536
FEATURES = 64
HIDDEN = 128
CLASSES = 10
GLOBAL_BATCH = 64
PER_REPLICA = 32
LR = 0.01
MULTI = 16  # steps per call of the multi-step variants
FULL_STEPS, FULL_ROUNDS = 976, 7
ITERATOR_REPEATS = 3
QUICK_STEPS, QUICK_ROUNDS = 256, 2
WARMUP_STEPS = 64
LEAD_STEPS = 32  # untimed steps before every window (a fresh iterator's ramp-up)
TARGET_T1_VS_H1 = 0.97
TARGET_T16_VS_H1 = 1.8
TARGET_T16_VS_FIT = 4.0


# --------------------------------------------------------------------------- set-up
def make_data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((NUM_EXAMPLES, FEATURES), dtype=np.float32)
    y = rng.integers(0, CLASSES, NUM_EXAMPLES).astype(np.int64)
    return x, y


def make_model() -> keras.Model:
    """The 64-128-10 MLP, with the same initial weights every time."""
    keras.utils.set_random_seed(1234)
    return keras.Sequential(
        [
            keras.Input((FEATURES,)),
            keras.layers.Dense(HIDDEN, activation="relu"),
            keras.layers.Dense(CLASSES),
        ]
    )


def make_optimizer() -> keras.optimizers.Optimizer:
    return keras.optimizers.SGD(LR)


Clock = tuple[float, float]  # (wall, process CPU) seconds


def _now() -> Clock:
    return time.perf_counter(), time.process_time()


@dataclass
class Window:
    """A timed stretch of steady-state training."""

    wall: float
    cpu: float
    steps: int


def _window(a: Clock, b: Clock, steps: int) -> Window:
    return Window(b[0] - a[0], b[1] - a[1], steps)


@dataclass
class Variant:
    """One thing to time: ``measure(steps)`` returns a :class:`Window` of ``steps`` steps."""

    name: str
    input_name: str
    steps_per_call: int
    warmup: Callable[[], None]
    measure: Callable[[int], Window]
    rates: list[float] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)
    note: str = ""

    @property
    def best(self) -> float:
        return max(self.rates) if self.rates else float("nan")

    @property
    def median(self) -> float:
        return statistics.median(self.rates) if self.rates else float("nan")


# --------------------------------------------------------------------------- hand-written loop
def _replica_step_fn(
    strategy: tf.distribute.Strategy,
) -> Callable[[tf.Tensor, tf.Tensor], tf.Tensor]:
    """A fresh model + optimizer in the scope and the per-replica step of seed 002 (Keras 3)."""
    with strategy.scope():
        model = make_model()
        opt = make_optimizer()
        opt.build(model.trainable_variables)
    loss_obj = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    tvars = model.trainable_variables

    def replica_step(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            per_example = loss_obj(y, logits)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)
        grads = tape.gradient(loss, tvars)
        opt.apply_gradients(zip(grads, tvars, strict=True))
        return loss

    return replica_step


def handwritten(
    strategy: tf.distribute.Strategy, make_iter: Callable[[], Any], steps_per_call: int
) -> tuple[Callable[[], None], Callable[[int], Window]]:
    """The minimal strategy.run loop; ``make_iter()`` gives an endless distributed iterator."""
    replica_step = _replica_step_fn(strategy)

    def one_step(iterator: Any) -> tf.Tensor:
        x, y = next(iterator)
        per_replica = strategy.run(replica_step, args=(x, y))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    @tf.function
    def train_step(iterator: Any) -> tf.Tensor:
        return one_step(iterator)

    @tf.function
    def train_n(iterator: Any, n: tf.Tensor) -> tf.Tensor:
        loss = tf.constant(0.0)
        for _ in tf.range(n):
            loss = one_step(iterator)
        return loss

    iterator = make_iter()
    n_const = tf.constant(steps_per_call, tf.int64)

    def call() -> tf.Tensor:
        if steps_per_call == 1:
            return train_step(iterator)
        return train_n(iterator, n_const)

    def steps(count: int) -> None:
        loss = tf.constant(0.0)
        for _ in range(count // steps_per_call):
            loss = call()
        float(loss)

    def warmup() -> None:
        steps(WARMUP_STEPS)

    def measure(count: int) -> Window:
        steps(LEAD_STEPS)
        a = _now()
        steps(count)
        return _window(a, _now(), count)

    return warmup, measure


def handwritten_batch_arg(
    strategy: tf.distribute.Strategy, dist_ds: Any
) -> tuple[Callable[[], None], Callable[[int], Window]]:
    """``for batch in dist_ds: train_step(batch)`` -- the batch is the tf.function argument."""
    replica_step = _replica_step_fn(strategy)

    @tf.function
    def train_step(batch: Any) -> tf.Tensor:
        per_replica = strategy.run(replica_step, args=batch)
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    iterator = iter(dist_ds)

    def steps(count: int) -> None:
        loss = tf.constant(0.0)
        for _, batch in zip(range(count), iterator, strict=False):
            loss = train_step(batch)
        float(loss)

    def warmup() -> None:
        steps(WARMUP_STEPS)

    def measure(count: int) -> Window:
        steps(LEAD_STEPS)
        a = _now()
        steps(count)
        return _window(a, _now(), count)

    return warmup, measure


# --------------------------------------------------------------------------- tfdp Trainer
def trainer_variant(
    strategy: tf.distribute.Strategy, inp: DistributedInput, steps_per_call: int
) -> tuple[Callable[[], None], Callable[[int], Window], Callable[[int], Window]]:
    """Warm-up, steady-state measure, and whole-epoch measure of one Trainer."""
    trainer = Trainer(
        strategy,
        make_model,
        make_optimizer,
        "sparse_categorical_crossentropy_from_logits",
        steps_per_call=steps_per_call,
        progress=False,
        verbose=0,
    )
    spe = inp.steps_per_epoch
    marks: list[tuple[Clock, int]] = []

    def on_step(state: Any) -> None:
        marks.append((_now(), state.global_step))

    def new_epoch() -> None:
        state = trainer.state
        if state.step != 0:  # every run starts at an epoch start: no epoch end inside a window
            state.epoch, state.step = state.epoch + 1, 0

    def run(count: int) -> None:
        new_epoch()
        if count > spe:
            raise ValueError(f"a timed run must fit in one epoch ({spe} steps)")
        trainer.fit(
            inp,
            epochs=trainer.state.epoch + 1,
            max_steps=trainer.state.global_step + count,
            on_step=on_step,
        )

    def warmup() -> None:
        run(max(2 * steps_per_call, WARMUP_STEPS))

    def measure(count: int) -> Window:
        marks.clear()
        g_start = trainer.state.global_step
        run(LEAD_STEPS + count)
        a, g_a = next((m, g) for m, g in marks if g - g_start >= LEAD_STEPS)
        b, g_b = marks[-1]
        return _window(a, b, g_b - g_a)

    def measure_epoch(count: int) -> Window:
        """One whole ``fit`` epoch, wall to wall (``count`` is ignored)."""
        new_epoch()
        a = _now()
        trainer.fit(inp, epochs=trainer.state.epoch + 1)
        return _window(a, _now(), spe)

    return warmup, measure, measure_epoch


# --------------------------------------------------------------------------- model.fit paths
class _BatchBeginClock(keras.callbacks.Callback):
    """Clocks at ``on_train_batch_begin``; overrides no ``*_batch_end`` hook.

    Keras dispatches batch-end callbacks on a thread pool unless a callback
    overrides a batch-end hook, so this clock leaves ``model.fit`` as it is.
    """

    def __init__(self) -> None:
        super().__init__()
        self.marks: list[Clock] = []

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        self.marks.append(_now())

    def window(self, count: int) -> Window:
        # begin of batch LEAD -> begin of batch LEAD + count: `count` whole steps
        return _window(self.marks[LEAD_STEPS], self.marks[LEAD_STEPS + count], count)


def compiled_model(strategy: tf.distribute.Strategy) -> keras.Model:
    with strategy.scope():
        model = make_model()
        model.compile(
            optimizer=make_optimizer(),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            steps_per_execution=1,
        )
    return model


def model_fit_variant(
    strategy: tf.distribute.Strategy, inp: DistributedInput
) -> tuple[Callable[[], None], Callable[[int], Window], Callable[[int], Window], keras.Model]:
    """Warm-up, steady-state measure, whole-epoch measure, and the compiled model."""
    model = compiled_model(strategy)
    spe = inp.steps_per_epoch

    def run(batches: int, clock: keras.callbacks.Callback | None = None) -> None:
        model.fit(
            inp.epochs(0, math.ceil(batches / spe)),
            epochs=1,
            steps_per_epoch=batches,
            verbose=0,
            shuffle=False,
            callbacks=[clock] if clock is not None else [],
        )

    def warmup() -> None:
        run(WARMUP_STEPS)

    def measure(count: int) -> Window:
        clock = _BatchBeginClock()
        run(LEAD_STEPS + count + 1, clock)
        return clock.window(count)

    def measure_epoch(count: int) -> Window:
        """One whole ``model.fit`` call of one epoch, wall to wall (``count`` is ignored)."""
        a = _now()
        run(spe)
        return _window(a, _now(), spe)

    return warmup, measure, measure_epoch, model


def tfdp_fit_variant(
    strategy: tf.distribute.Strategy, inp: DistributedInput
) -> tuple[Callable[[], None], Callable[[int], Window]]:
    model = compiled_model(strategy)

    def warmup() -> None:
        tfdp_fit(model, inp, epochs=1, max_steps=WARMUP_STEPS, verbose=0)

    def measure(count: int) -> Window:
        clock = _BatchBeginClock()
        tfdp_fit(
            model, inp, epochs=1, max_steps=LEAD_STEPS + count + 1, callbacks=[clock], verbose=0
        )
        return clock.window(count)

    return warmup, measure


# --------------------------------------------------------------------------- per-epoch cost
def iterator_lifecycle(inp: DistributedInput, epoch: int) -> tuple[float, float, float]:
    """Seconds to create ``iter(inp.epoch(epoch))``, get its first batch, and delete it.

    ``Trainer.fit`` pays these once per epoch (``iter(train_input.epoch(...))``).
    """
    gc.collect()
    t0 = time.perf_counter()
    iterator = iter(inp.epoch(epoch))
    t1 = time.perf_counter()
    next(iterator)
    t2 = time.perf_counter()
    del iterator
    gc.collect()
    t3 = time.perf_counter()
    return t1 - t0, t2 - t1, t3 - t2


# --------------------------------------------------------------------------- main
def build_variants(
    strategy: tf.distribute.Strategy,
    x: np.ndarray,
    y: np.ndarray,
    inp: DistributedInput,
    epoch_rows: bool,
) -> tuple[list[Variant], keras.Model]:
    def memory_dist_ds() -> Any:
        ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat()
        ds = ds.batch(GLOBAL_BATCH, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
        return strategy.experimental_distribute_dataset(ds)

    def memory_iter() -> Any:
        return iter(memory_dist_ds())

    def tfdp_iter() -> Any:
        return iter(inp.epochs(0, None))

    mem, tin = "tf.data in memory", "tfdp DistributedInput"
    t1_warm, t1_measure, t1_epoch = trainer_variant(strategy, inp, 1)
    t16_warm, t16_measure, t16_epoch = trainer_variant(strategy, inp, MULTI)
    fit_warm, fit_measure, fit_epoch, fit_model = model_fit_variant(strategy, inp)
    variants = [
        Variant("handwritten_1", mem, 1, *handwritten(strategy, memory_iter, 1)),
        Variant("handwritten_16", mem, MULTI, *handwritten(strategy, memory_iter, MULTI)),
        Variant("handwritten_1_tfdp_input", tin, 1, *handwritten(strategy, tfdp_iter, 1)),
        Variant(
            "handwritten_16_tfdp_input", tin, MULTI, *handwritten(strategy, tfdp_iter, MULTI)
        ),
        Variant(
            "handwritten_1_batch_arg", mem, 1, *handwritten_batch_arg(strategy, memory_dist_ds())
        ),
        Variant("trainer_1", tin, 1, t1_warm, t1_measure),
        Variant("trainer_16", tin, MULTI, t16_warm, t16_measure),
        Variant("model_fit", tin, 1, fit_warm, fit_measure),
        Variant("tfdp_fit", tin, 1, *tfdp_fit_variant(strategy, inp)),
    ]
    if epoch_rows:
        variants += [
            Variant("trainer_1_epoch", tin, 1, lambda: None, t1_epoch, note="whole epoch"),
            Variant("trainer_16_epoch", tin, MULTI, lambda: None, t16_epoch, note="whole epoch"),
            Variant("model_fit_epoch", tin, 1, lambda: None, fit_epoch, note="whole epoch"),
        ]
    return variants, fit_model


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else float("nan")


def _verdict(value: float, target: float) -> str:
    return "n/a" if math.isnan(value) else ("PASS" if value >= target else "FAIL")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--quick", action="store_true", help="256 steps x 2 rounds (under a minute)")
    ap.add_argument("--steps", type=int, default=None, help="timed steps per measurement")
    ap.add_argument("--rounds", type=int, default=None, help="interleaved rounds")
    ap.add_argument("--only", nargs="*", default=None, help="time only these variants")
    ap.add_argument("--epoch-rows", action="store_true",
                    help="also time whole fit() epochs in the rounds (slow and noisy)")
    args = ap.parse_args(argv)
    steps = args.steps or (QUICK_STEPS if args.quick else FULL_STEPS)
    rounds = args.rounds or (QUICK_ROUNDS if args.quick else FULL_ROUNDS)
    epoch_rows = args.epoch_rows
    spe = NUM_EXAMPLES // GLOBAL_BATCH
    if steps < MULTI or steps % MULTI or LEAD_STEPS + steps + 1 > spe:
        ap.error(f"--steps must be a positive multiple of {MULTI}, at most "
                 f"{(spe - LEAD_STEPS - 1) // MULTI * MULTI}")
    wall0 = time.perf_counter()

    devices = [d.name for d in tf.config.list_logical_devices("CPU")]
    strategy = tf.distribute.MirroredStrategy(devices)
    x, y = make_data()
    inp = DistributedInput(strategy, ArraySource((x, y)), batch_size=PER_REPLICA)
    assert inp.global_batch_size == GLOBAL_BATCH and inp.steps_per_epoch == spe

    print("bench_train: steady-state optimizer steps/s, MLP 64-128-10, global batch 64")
    print(f"date {_dt.date.today()}  python {platform.python_version()}  "
          f"tensorflow {tf.__version__}  keras {keras.__version__}  tfdp {tfdp.__version__}  "
          f"numpy {np.__version__}")
    print(f"machine {platform.machine()} {platform.system()}, os.cpu_count() = {os.cpu_count()}; "
          f"{type(strategy).__name__} over {devices} ({strategy.num_replicas_in_sync} replicas, "
          f"{type(strategy.extended._cross_device_ops).__name__})")
    print(f"data {NUM_EXAMPLES:,} x {FEATURES} float32, int64 labels; {inp!r}")
    print(f"timed: {steps} steps per measurement after {LEAD_STEPS} untimed ones, {rounds} "
          f"interleaved rounds ({'--quick' if args.quick else 'full'} mode); best round reported")
    load0 = os.getloadavg()
    print(f"load average at start: {load0[0]:.2f} / {load0[1]:.2f} / {load0[2]:.2f} "
          "(the machine is shared with other processes)")
    print(flush=True)

    t_build = time.perf_counter()
    variants, fit_model = build_variants(strategy, x, y, inp, epoch_rows)
    if args.only:
        unknown = set(args.only) - {v.name for v in variants}
        if unknown:
            ap.error(f"unknown variants {sorted(unknown)}")
        variants = [v for v in variants if v.name in args.only]
    for v in variants:
        t = time.perf_counter()
        v.warmup()
        if v.note != "whole epoch":
            print(f"  warm-up {v.name:<26} {time.perf_counter() - t:5.1f} s", flush=True)
    print(f"  model.fit jit_compile resolved to {fit_model.jit_compile}; "
          f"set-up + warm-up {time.perf_counter() - t_build:.1f} s")
    print(flush=True)

    per_round: list[dict[str, float]] = []
    for r in range(rounds):
        k = r % len(variants)
        this: dict[str, float] = {}
        for v in variants[k:] + variants[:k]:
            gc.collect()
            w = v.measure(steps)
            if v.note != "whole epoch" and w.steps != steps:
                raise RuntimeError(f"{v.name}: timed {w.steps} steps, expected {steps}")
            v.rates.append(w.steps / w.wall)
            v.cpu_ms.append(1e3 * w.cpu / w.steps)
            this[v.name] = w.steps / w.wall
        per_round.append(this)
        print(f"  round {r + 1}/{rounds} steps/s: "
              + "  ".join(f"{v.name} {this[v.name]:.0f}" for v in variants), flush=True)
    print()

    lifecycle = [iterator_lifecycle(inp, 1000 + i) for i in range(ITERATOR_REPEATS)]
    create, first, delete = (statistics.median(c) for c in zip(*lifecycle, strict=True))
    per_epoch_iter = create + first + delete

    by = {v.name: v for v in variants}

    def best(name: str) -> float:
        return by[name].best if name in by else float("nan")

    def round_ratio(a: str, b: str) -> float:
        vals = [rd[a] / rd[b] for rd in per_round if a in rd and b in rd]
        return statistics.median(vals) if vals else float("nan")

    h1, fit = best("handwritten_1"), best("model_fit")
    print(f"{'variant':<26} {'input':<22} {'steps/call':>10} {'best steps/s':>12} "
          f"{'median':>7} {'ms/step':>8} {'CPU ms/step':>11} {'vs hand_1':>10} "
          f"{'vs model_fit':>12}")
    for v in variants:
        cpu = statistics.median(v.cpu_ms) if v.cpu_ms else float("nan")
        print(f"{v.name:<26} {v.input_name:<22} {v.steps_per_call:>10} {v.best:>12,.0f} "
              f"{v.median:>7,.0f} {1e3 / v.best:>8.3f} {cpu:>11.3f} {_ratio(v.best, h1):>9.2f}x "
              f"{_ratio(v.best, fit):>11.2f}x")
    print("(ms/step from the best round; CPU ms/step: process CPU time, all threads, median "
          "round; *_epoch rows: a whole fit() epoch of 1,024 steps, wall to wall)")
    print()

    t1_h1 = _ratio(best("trainer_1"), h1)
    t16_h1 = _ratio(best("trainer_16"), h1)
    t16_fit = _ratio(best("trainer_16"), fit)
    checks = [
        ("trainer_1 / handwritten_1", t1_h1, TARGET_T1_VS_H1, ("trainer_1", "handwritten_1")),
        ("trainer_16 / handwritten_1", t16_h1, TARGET_T16_VS_H1, ("trainer_16", "handwritten_1")),
        ("trainer_16 / model_fit", t16_fit, TARGET_T16_VS_FIT, ("trainer_16", "model_fit")),
    ]
    print("targets (verdict on the ratio of best rounds; the median of the per-round ratios, "
          "measured minutes apart at most, in brackets):")
    for label, value, target, pair in checks:
        med = round_ratio(*pair)
        verdict, med_verdict = _verdict(value, target), _verdict(med, target)
        flag = "" if med_verdict == verdict else f"  [borderline: the median says {med_verdict}]"
        print(f"  {label:<42} {value:5.2f}x  (median {med:.2f}x)  target >= {target}x -> "
              f"{verdict}{flag}")
    context = [
        ("same input, loop cost only", "trainer_1", "handwritten_1_tfdp_input"),
        ("same input, loop cost only", "trainer_16", "handwritten_16_tfdp_input"),
        ("input cost only", "handwritten_1_tfdp_input", "handwritten_1"),
        ("input cost only", "handwritten_16_tfdp_input", "handwritten_16"),
        ("16 steps per call, hand-written", "handwritten_16", "handwritten_1"),
        ("16 steps per call, hand-written", "handwritten_16", "model_fit"),
        ("fit path", "tfdp_fit", "model_fit"),
        ("iterator vs batch argument", "handwritten_1_batch_arg", "handwritten_1"),
        ("whole epochs", "trainer_1_epoch", "model_fit_epoch"),
        ("whole epochs", "trainer_16_epoch", "model_fit_epoch"),
    ]
    print("context:")
    for label, a, b in context:
        if a in by and b in by:
            print(f"  {a + ' / ' + b:<52} {_ratio(best(a), best(b)):5.2f}x  "
                  f"(median {round_ratio(a, b):.2f}x)  {label}")
    for ep, st in (("trainer_1_epoch", "trainer_1"), (f"trainer_{MULTI}_epoch",
                   f"trainer_{MULTI}"), ("model_fit_epoch", "model_fit")):
        if ep in by and st in by:
            per_epoch = by[ep].median
            overhead = spe / per_epoch - spe / by[st].median
            print(f"  {ep}: {per_epoch:,.0f} steps/s over one whole fit() epoch (median) -> "
                  f"{1e3 * overhead:,.0f} ms above {spe} steps at {st}'s median rate")
    if any(v.note == "whole epoch" for v in variants):
        print("  (that fixed cost: a new distributed iterator and its teardown, the first "
              "batches, epoch-end work; Trainer pays it every epoch, model.fit once per call)")
    print(f"  a new epoch iterator, iter(inp.epoch(e)) (median of {ITERATOR_REPEATS}): create "
          f"{1e3 * create:.0f} ms, first batch {1e3 * first:.0f} ms, delete {1e3 * delete:.0f} ms "
          f"-> {1e3 * per_epoch_iter:.0f} ms, paid by Trainer.fit every epoch")
    for name in ("trainer_1", f"trainer_{MULTI}"):
        if name in by:
            compute = spe / by[name].best
            print(f"    = {100 * per_epoch_iter / compute:.0f}% of an epoch's {spe} steps at "
                  f"{name}'s best rate ({compute:.2f} s)")
    load = os.getloadavg()
    print(f"load average at end: {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}; "
          f"wall time {time.perf_counter() - wall0:.0f} s")
    print()

    head = [
        ("handwritten_1_steps_per_s", f"{h1:.0f}"),
        ("handwritten_16_steps_per_s", f"{best('handwritten_16'):.0f}"),
        ("handwritten_1_tfdp_input_steps_per_s", f"{best('handwritten_1_tfdp_input'):.0f}"),
        ("handwritten_16_tfdp_input_steps_per_s", f"{best('handwritten_16_tfdp_input'):.0f}"),
        ("trainer_1_steps_per_s", f"{best('trainer_1'):.0f}"),
        ("trainer_16_steps_per_s", f"{best('trainer_16'):.0f}"),
        ("fit_steps_per_s", f"{fit:.0f}"),
        ("tfdp_fit_steps_per_s", f"{best('tfdp_fit'):.0f}"),
        ("ratio_trainer1_vs_handwritten1", f"{t1_h1:.2f}x"),
        ("ratio_trainer16_vs_handwritten1", f"{t16_h1:.2f}x"),
        ("ratio_trainer16_vs_fit", f"{t16_fit:.2f}x"),
        ("ratio_trainer1_vs_handwritten1_tfdp_input",
         f"{_ratio(best('trainer_1'), best('handwritten_1_tfdp_input')):.2f}x"),
        ("ratio_trainer16_vs_handwritten16_tfdp_input",
         f"{_ratio(best('trainer_16'), best('handwritten_16_tfdp_input')):.2f}x"),
        ("epoch_iterator_ms", f"{1e3 * per_epoch_iter:.0f}"),
        ("target_trainer1_vs_handwritten1", _verdict(t1_h1, TARGET_T1_VS_H1)),
        ("target_trainer16_vs_handwritten1", _verdict(t16_h1, TARGET_T16_VS_H1)),
        ("target_trainer16_vs_fit", _verdict(t16_fit, TARGET_T16_VS_FIT)),
    ]
    for name, value in head:
        print(f"{name}: {value}")
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip the interpreter's teardown of TensorFlow (iterators, threads): about 10 s here.
    os._exit(code)
