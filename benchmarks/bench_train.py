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

Timing: every variant is compiled and warmed up first. A measurement is the
steady-state rate over a fixed number of steps (1,008 = 63 x 16; 256 with
``--quick``), timed between two host-side timestamps taken *after* the first
call (``tf.function`` call, ``Trainer`` ``on_step``, or Keras
``on_train_batch_begin``), so iterator creation and the first batch's latency
are excluded for every variant alike. The Trainer's timed window always lies
inside one epoch (1,024 steps), so it holds no epoch-end work. Rounds are
interleaved (one measurement of every variant per round, the order rotated
each round); a variant's figure is its best round, and the ratios are ratios
of those bests, all from the same run. The median of per-round ratios is
printed as a check. The machine may be shared: the load average is printed.

Usage:
    .venv/bin/python benchmarks/bench_train.py            # 1,008 steps x 5 rounds (~2-3 min)
    .venv/bin/python benchmarks/bench_train.py --quick    # 256 steps x 2 rounds (< 1 min)
    .venv/bin/python benchmarks/bench_train.py --only trainer_1 --rounds 20  # e.g. for py-spy

The headline figures come last, one ``name: value`` per line.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402  (the logical devices must be configured first)

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
FULL_STEPS, FULL_ROUNDS = 1008, 5
QUICK_STEPS, QUICK_ROUNDS = 256, 2
WARMUP_STEPS = 64
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


@dataclass
class Variant:
    """One thing to time: ``measure(steps)`` returns (seconds, steps) of a steady-state window."""

    name: str
    input_name: str
    steps_per_call: int
    warmup: Callable[[], None]
    measure: Callable[[int], tuple[float, int]]
    rates: list[float] = field(default_factory=list)

    @property
    def best(self) -> float:
        return max(self.rates) if self.rates else float("nan")

    @property
    def median(self) -> float:
        return statistics.median(self.rates) if self.rates else float("nan")


# --------------------------------------------------------------------------- hand-written loop
def handwritten(
    strategy: tf.distribute.Strategy, make_iter: Callable[[], Any], steps_per_call: int
) -> tuple[Callable[[], None], Callable[[int], tuple[float, int]]]:
    """The minimal strategy.run loop; ``make_iter()`` gives a distributed iterator (endless)."""
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

    def warmup() -> None:
        for _ in range(max(2, WARMUP_STEPS // steps_per_call)):
            loss = call()
        float(loss)

    def measure(steps: int) -> tuple[float, int]:
        calls = steps // steps_per_call
        loss = call()  # the window opens after one call, as for every variant
        float(loss)
        t0 = time.perf_counter()
        for _ in range(calls):
            loss = call()
        float(loss)
        return time.perf_counter() - t0, calls * steps_per_call

    return warmup, measure


def handwritten_batch_arg(
    strategy: tf.distribute.Strategy, dist_ds: Any
) -> tuple[Callable[[], None], Callable[[int], tuple[float, int]]]:
    """``for batch in dist_ds: train_step(batch)`` -- the batch is the tf.function argument."""
    with strategy.scope():
        model = make_model()
        opt = make_optimizer()
        opt.build(model.trainable_variables)
    loss_obj = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    tvars = model.trainable_variables

    def replica_step(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            per_example = loss_obj(y, model(x, training=True))
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)
        grads = tape.gradient(loss, tvars)
        opt.apply_gradients(zip(grads, tvars, strict=True))
        return loss

    @tf.function
    def train_step(batch: Any) -> tf.Tensor:
        per_replica = strategy.run(replica_step, args=batch)
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    iterator = iter(dist_ds)

    def warmup() -> None:
        for _ in range(WARMUP_STEPS):
            loss = train_step(next(iterator))
        float(loss)

    def measure(steps: int) -> tuple[float, int]:
        float(train_step(next(iterator)))
        t0 = time.perf_counter()
        for _, batch in zip(range(steps), iterator, strict=False):
            loss = train_step(batch)
        float(loss)
        return time.perf_counter() - t0, steps

    return warmup, measure


# --------------------------------------------------------------------------- tfdp Trainer
def trainer_variant(
    strategy: tf.distribute.Strategy, inp: DistributedInput, steps_per_call: int
) -> tuple[Callable[[], None], Callable[[int], tuple[float, int]]]:
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
    marks: list[tuple[float, int]] = []

    def on_step(state: Any) -> None:
        marks.append((time.perf_counter(), state.global_step))

    def run(steps: int) -> None:
        state = trainer.state
        if state.step != 0:  # start every window at an epoch start: no epoch-end work inside
            state.epoch, state.step = state.epoch + 1, 0
        if steps > spe:
            raise ValueError(f"a timed window must fit in one epoch ({spe} steps)")
        trainer.fit(
            inp,
            epochs=state.epoch + 1,
            max_steps=state.global_step + steps,
            on_step=on_step,
        )

    def warmup() -> None:
        run(max(2 * steps_per_call, WARMUP_STEPS))

    def measure(steps: int) -> tuple[float, int]:
        marks.clear()
        run(steps_per_call + steps)
        (t0, g0), (t1, g1) = marks[0], marks[-1]
        return t1 - t0, g1 - g0

    return warmup, measure


# --------------------------------------------------------------------------- model.fit paths
class _BatchBeginClock(keras.callbacks.Callback):
    """Timestamps at ``on_train_batch_begin``; overrides no ``*_batch_end`` hook.

    Keras dispatches batch-end callbacks on a thread pool unless a callback
    overrides a batch-end hook, so this clock leaves ``model.fit`` as it is.
    """

    def __init__(self) -> None:
        super().__init__()
        self.marks: list[float] = []

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        self.marks.append(time.perf_counter())


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
) -> tuple[Callable[[], None], Callable[[int], tuple[float, int]], keras.Model]:
    model = compiled_model(strategy)
    spe = inp.steps_per_epoch

    def run(batches: int, clock: keras.callbacks.Callback | None = None) -> None:
        epochs_of_data = math.ceil(batches / spe)
        model.fit(
            inp.epochs(0, epochs_of_data),
            epochs=1,
            steps_per_epoch=batches,
            verbose=0,
            shuffle=False,
            callbacks=[clock] if clock is not None else [],
        )

    def warmup() -> None:
        run(WARMUP_STEPS)

    def measure(steps: int) -> tuple[float, int]:
        clock = _BatchBeginClock()
        run(steps + 2, clock)  # window: begin of batch 1 -> begin of batch steps + 1
        return clock.marks[steps + 1] - clock.marks[1], steps

    return warmup, measure, model


def tfdp_fit_variant(
    strategy: tf.distribute.Strategy, inp: DistributedInput
) -> tuple[Callable[[], None], Callable[[int], tuple[float, int]]]:
    model = compiled_model(strategy)

    def warmup() -> None:
        tfdp_fit(model, inp, epochs=1, max_steps=WARMUP_STEPS, verbose=0)

    def measure(steps: int) -> tuple[float, int]:
        clock = _BatchBeginClock()
        tfdp_fit(model, inp, epochs=1, max_steps=steps + 2, callbacks=[clock], verbose=0)
        return clock.marks[steps + 1] - clock.marks[1], steps

    return warmup, measure


# --------------------------------------------------------------------------- main
def build_variants(
    strategy: tf.distribute.Strategy, x: np.ndarray, y: np.ndarray, inp: DistributedInput
) -> tuple[list[Variant], dict[str, Any]]:
    def memory_iter() -> Any:
        ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat()
        ds = ds.batch(GLOBAL_BATCH, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
        return iter(strategy.experimental_distribute_dataset(ds))

    def memory_dist_ds() -> Any:
        ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat()
        ds = ds.batch(GLOBAL_BATCH, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
        return strategy.experimental_distribute_dataset(ds)

    def tfdp_iter() -> Any:
        return iter(inp.epochs(0, None))

    mem, tin = "tf.data in memory", "tfdp DistributedInput"
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
        Variant("trainer_1", tin, 1, *trainer_variant(strategy, inp, 1)),
        Variant("trainer_16", tin, MULTI, *trainer_variant(strategy, inp, MULTI)),
    ]
    fit_warmup, fit_measure, fit_model = model_fit_variant(strategy, inp)
    variants.append(Variant("model_fit", tin, 1, fit_warmup, fit_measure))
    variants.append(Variant("tfdp_fit", tin, 1, *tfdp_fit_variant(strategy, inp)))
    return variants, {"fit_model": fit_model}


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else float("nan")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--quick", action="store_true", help="256 steps x 2 rounds (under a minute)")
    ap.add_argument("--steps", type=int, default=None, help="timed steps per measurement")
    ap.add_argument("--rounds", type=int, default=None, help="interleaved rounds")
    ap.add_argument("--only", nargs="*", default=None, help="time only these variants")
    args = ap.parse_args(argv)
    steps = args.steps or (QUICK_STEPS if args.quick else FULL_STEPS)
    rounds = args.rounds or (QUICK_ROUNDS if args.quick else FULL_ROUNDS)
    if steps % MULTI or steps + MULTI > NUM_EXAMPLES // GLOBAL_BATCH:
        ap.error(f"--steps must be a multiple of {MULTI} and at most "
                 f"{NUM_EXAMPLES // GLOBAL_BATCH - MULTI}")
    wall0 = time.perf_counter()

    devices = [d.name for d in tf.config.list_logical_devices("CPU")]
    strategy = tf.distribute.MirroredStrategy(devices)
    x, y = make_data()
    inp = DistributedInput(strategy, ArraySource((x, y)), batch_size=PER_REPLICA)
    assert inp.global_batch_size == GLOBAL_BATCH

    print("bench_train: steady-state optimizer steps/s, MLP 64-128-10, global batch 64")
    print(f"date {_dt.date.today()}  python {platform.python_version()}  "
          f"tensorflow {tf.__version__}  keras {keras.__version__}  tfdp {tfdp.__version__}  "
          f"numpy {np.__version__}")
    print(f"machine {platform.machine()} {platform.system()}, os.cpu_count() = {os.cpu_count()}; "
          f"strategy {type(strategy).__name__} over {devices} "
          f"({strategy.num_replicas_in_sync} replicas), "
          f"cross-device ops {type(strategy.extended._cross_device_ops).__name__}")
    print(f"data {NUM_EXAMPLES:,} x {FEATURES} float32, int64 labels; {inp!r}")
    print(f"timed: {steps} steps per measurement, {rounds} interleaved rounds "
          f"({'--quick' if args.quick else 'full'} mode); best round reported")
    load0 = os.getloadavg()
    print(f"load average at start: {load0[0]:.2f} / {load0[1]:.2f} / {load0[2]:.2f} "
          "(the machine is shared with other processes)")
    print(flush=True)

    t_build = time.perf_counter()
    variants, extra = build_variants(strategy, x, y, inp)
    if args.only:
        unknown = set(args.only) - {v.name for v in variants}
        if unknown:
            ap.error(f"unknown variants {sorted(unknown)}")
        variants = [v for v in variants if v.name in args.only]
    for v in variants:
        t = time.perf_counter()
        v.warmup()
        print(f"  warm-up {v.name:<27} {time.perf_counter() - t:6.1f} s", flush=True)
    print(f"  model.fit jit_compile resolved to {extra['fit_model'].jit_compile}; "
          f"set-up + warm-up {time.perf_counter() - t_build:.1f} s")
    print(flush=True)

    per_round: list[dict[str, float]] = []
    for r in range(rounds):
        order = variants[r % len(variants):] + variants[: r % len(variants)]
        this: dict[str, float] = {}
        for v in order:
            gc.collect()
            seconds, done = v.measure(steps)
            if done != steps:
                raise RuntimeError(f"{v.name}: timed {done} steps, expected {steps}")
            v.rates.append(done / seconds)
            this[v.name] = done / seconds
        per_round.append(this)
        print(f"  round {r + 1}/{rounds}: "
              + "  ".join(f"{v.name} {this[v.name]:.0f}" for v in variants), flush=True)
    print()

    by = {v.name: v for v in variants}

    def best(name: str) -> float:
        return by[name].best if name in by else float("nan")

    def round_ratio(a: str, b: str) -> float:
        vals = [rd[a] / rd[b] for rd in per_round if a in rd and b in rd]
        return statistics.median(vals) if vals else float("nan")

    h1, fit = best("handwritten_1"), best("model_fit")
    print(f"{'variant':<27} {'input':<22} {'steps/call':>10} {'best steps/s':>13} "
          f"{'median':>8} {'ms/step':>8} {'vs handwritten_1':>17} {'vs model_fit':>13}")
    for v in variants:
        print(f"{v.name:<27} {v.input_name:<22} {v.steps_per_call:>10} {v.best:>13,.0f} "
              f"{v.median:>8,.0f} {1e3 / v.best:>8.3f} {_ratio(v.best, h1):>16.2f}x "
              f"{_ratio(v.best, fit):>12.2f}x")
    print()

    t1_h1 = _ratio(best("trainer_1"), h1)
    t16_h1 = _ratio(best("trainer_16"), h1)
    t16_fit = _ratio(best("trainer_16"), fit)
    t1_h1t = _ratio(best("trainer_1"), best("handwritten_1_tfdp_input"))
    t16_h16t = _ratio(best("trainer_16"), best("handwritten_16_tfdp_input"))
    h1t_h1 = _ratio(best("handwritten_1_tfdp_input"), h1)
    checks = [
        ("trainer_1 / handwritten_1", t1_h1, TARGET_T1_VS_H1,
         round_ratio("trainer_1", "handwritten_1")),
        ("trainer_16 / handwritten_1", t16_h1, TARGET_T16_VS_H1,
         round_ratio("trainer_16", "handwritten_1")),
        ("trainer_16 / model_fit", t16_fit, TARGET_T16_VS_FIT,
         round_ratio("trainer_16", "model_fit")),
    ]
    print("targets (ratio of best rounds; median of per-round ratios in brackets):")
    for label, value, target, med in checks:
        verdict = "n/a" if math.isnan(value) else ("PASS" if value >= target else "FAIL")
        print(f"  {label:<28} {value:6.2f}x  (median {med:.2f}x)  target >= {target}x -> {verdict}")
    print("same input, loop cost only:")
    print(f"  trainer_1 / handwritten_1_tfdp_input    {t1_h1t:6.2f}x  "
          f"(median {round_ratio('trainer_1', 'handwritten_1_tfdp_input'):.2f}x)")
    print(f"  trainer_16 / handwritten_16_tfdp_input  {t16_h16t:6.2f}x  "
          f"(median {round_ratio('trainer_16', 'handwritten_16_tfdp_input'):.2f}x)")
    print("input cost only:")
    print(f"  handwritten_1_tfdp_input / handwritten_1 {h1t_h1:6.2f}x  "
          f"(median {round_ratio('handwritten_1_tfdp_input', 'handwritten_1'):.2f}x)")
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
        ("ratio_trainer1_vs_handwritten1_tfdp_input", f"{t1_h1t:.2f}x"),
        ("ratio_trainer16_vs_handwritten16_tfdp_input", f"{t16_h16t:.2f}x"),
    ]
    for (label, value, target, _), key in zip(
        checks, ("target_trainer1_vs_handwritten1", "target_trainer16_vs_handwritten1",
                 "target_trainer16_vs_fit"), strict=True
    ):
        head.append((key, "n/a" if math.isnan(value) else
                     ("PASS" if value >= target else "FAIL")))
    for name, value in head:
        print(f"{name}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
