"""Benchmark tfdp's training loops against a minimal hand-written loop and ``model.fit``.

Everything runs in one process, on the same model, data and strategy:
``MirroredStrategy`` over 2 logical CPU devices (configured before any other
TensorFlow work), a 64-128-10 MLP (``Dense(128, relu)``, ``Dense(10)`` on 64
float32 features), global batch 64 (32 per replica), 65,536 synthetic
examples with int64 labels in [0, 10), ``keras.optimizers.SGD(0.01)``. Every
variant has its own model (same initial weights) and optimizer.

Variants (optimizer steps per second):

* ``handwritten_1``: the minimal hand-written ``strategy.run`` loop (seed 002's
  loop corrected for Keras 3): per-example loss with ``reduction="none"``,
  ``tf.nn.compute_average_loss(global_batch_size=64)``, a ``GradientTape``,
  ``optimizer.apply_gradients`` inside the replica function; a
  ``@tf.function`` train step called once per step from Python on
  ``iter(strategy.experimental_distribute_dataset(ds))``, ``ds`` an in-memory
  ``from_tensor_slices((x, y)).repeat().batch(64).prefetch(AUTOTUNE)``.
* ``handwritten_16``: the same loop, 16 steps per ``tf.function`` call (a
  ``tf.range`` loop, as Orbit does).
* ``handwritten_1_tfdp_input`` / ``handwritten_16_tfdp_input``: the same two
  loops fed by tfdp's ``DistributedInput`` (separates input cost from loop cost).
* ``handwritten_1_batch_arg`` (context): ``for batch in dist_ds:
  train_step(batch)`` -- the batch, not the iterator, is the argument.
* ``handwritten_1_bound`` (context): ``handwritten_1`` called as the Trainer calls
  its function, bound once to the iterator (``tfdp._compat.fast.graph.bound_call``), so that
  ``trainer_1 / handwritten_1_bound`` is the Trainer's own cost at equal dispatch.
* ``trainer_1`` / ``trainer_16``: ``tfdp.train.Trainer(steps_per_call=1 / 16,
  progress=False, verbose=0)``, no run_dir, ``fit`` over many epochs; its
  default ``on_nonfinite="stop"`` checks every step's loss and gradients
  (all-reduced) before the update.
* ``trainer_1_nocheck`` / ``trainer_16_nocheck``: the same with
  ``on_nonfinite="ignore"``; ``nonfinite_check_overhead`` is the paired ratio
  ``trainer_1_nocheck / trainer_1`` (1.05x would say the check costs 5%).
* ``trainer_1_unbound`` / ``trainer_16_unbound``: ``trainer_1`` / ``trainer_16`` with the
  ``bound_call`` speed trick off (``TFDP_SPEED_TRICKS`` naming every other trick, set while
  they run): each call looks its trace up, as ``tf.function`` does;
  ``speed_trick_bound_call`` is the paired ratio ``trainer_1 / trainer_1_unbound``.
* ``model_fit``: ``model.fit`` (compiled in the scope, ``steps_per_epoch`` set,
  ``verbose=0``) on ``inp.epochs(0, n)``.
* ``tfdp_fit``: ``tfdp.train.fit`` (the fit path) on the same input;
  ``tfdp_fit_nocheck`` the same with ``on_nonfinite="ignore"``.

The tfdp-fed variants share one ``DistributedInput(strategy, ArraySource((x,
y)), batch_size=32)`` (the default shuffling ``"distributed"`` sampler).

Timing. The machine this runs on is shared, so the variants are interleaved
finely: every variant runs as a session that trains on and on, and a round
asks each session in turn (order rotated every round) for one chunk of C
steps (64; 32 with ``--quick``). The hand-written loops run in the main
thread; ``Trainer.fit``, ``model.fit`` and ``tfdp.train.fit`` run in their own
threads and hand over at their per-step hook (Trainer's ``on_step``, Keras's
``on_train_batch_begin``, which adds no batch-end hook), where they block
while the other sessions run. A chunk's clock
starts when its session resumes and stops at the hook after its C-th step,
so it holds exactly C steps of that loop's own work, Python included. Before
the rounds every session is compiled and runs 64 steps, then 32 untimed ones.
A chunk during which a loop crossed an epoch boundary is kept apart (it holds
the loop's per-epoch work) and reported separately.

Reported per variant: steps/s of its best "repeat" (16 consecutive rounds,
1,024 steps; 8 rounds, 256 steps with ``--quick``), the median chunk rate, and
process CPU time per step (all threads; steadier than wall time on a shared
machine). Ratios, targets included, are medians over rounds of the per-round
ratio of the two variants' chunk rates: chunks measured within about a second
of each other. The ratio of the best repeats is printed beside them.

The excess time of the chunks that held an epoch boundary is printed as each
loop's per-epoch cost.

Usage:
    .venv/bin/python benchmarks/bench_train.py            # 64 rounds x 64 steps (~1.5-2 min)
    .venv/bin/python benchmarks/bench_train.py --quick    # 16 rounds x 32 steps (< 1 min)
    .venv/bin/python benchmarks/bench_train.py --only trainer_1 handwritten_1 --rounds 200

The headline figures come last, one ``name: value`` per line.
"""

from __future__ import annotations

import os
import time

_T_START = time.perf_counter()
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

# 2 logical CPU devices, before any other TensorFlow work (hence the late imports below).
_CPUS = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(_CPUS[0], [tf.config.LogicalDeviceConfiguration()] * 2)

import argparse  # noqa: E402
import datetime as _dt  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from typing import Any  # noqa: E402

import keras  # noqa: E402
import numpy as np  # noqa: E402

import tfdp  # noqa: E402
from tfdp._compat.fast.graph import bound_call  # noqa: E402
from tfdp._compat.fast.switch import SPEED_TRICKS_ENV, TRICKS  # noqa: E402
from tfdp.input import DistributedInput  # noqa: E402
from tfdp.sources import ArraySource  # noqa: E402
from tfdp.train import Trainer  # noqa: E402
from tfdp.train import fit as tfdp_fit  # noqa: E402

NUM_EXAMPLES = 65_536
FEATURES = 64
HIDDEN = 128
CLASSES = 10
GLOBAL_BATCH = 64
PER_REPLICA = 32
STEPS_PER_EPOCH = NUM_EXAMPLES // GLOBAL_BATCH
LR = 0.01
MULTI = 16  # steps per call of the multi-step variants
FULL_CHUNK, FULL_ROUNDS, FULL_REPEAT = 64, 64, 16  # 4 repeats of 1,024 steps per variant
QUICK_CHUNK, QUICK_ROUNDS, QUICK_REPEAT = 32, 16, 8  # 2 repeats of 256 steps per variant
WARMUP_STEPS = 64
LEAD_STEPS = 32  # untimed steps after the warm-up (a fresh iterator's ramp-up)
FOREVER = 10**9  # epochs for the loops that run until the benchmark stops them
TARGET_T1_VS_H1 = 0.97
TARGET_T16_VS_H1 = 1.8
TARGET_T16_VS_FIT = 4.0

Clock = tuple[float, float]  # (wall, process CPU) seconds
_KEEP_ALIVE: list[Any] = []


def _now() -> Clock:
    return time.perf_counter(), time.process_time()


@dataclass
class Window:
    """One timed chunk: wall and CPU seconds, steps, and whether an epoch boundary fell in it."""

    wall: float
    cpu: float
    steps: int
    crossed: bool = False

    @property
    def rate(self) -> float:
        return self.steps / self.wall


def _window(a: Clock, b: Clock, steps: int, crossed: bool = False) -> Window:
    return Window(b[0] - a[0], b[1] - a[1], steps, crossed)


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


# --------------------------------------------------------------------------- sessions
class Session:
    """A variant that trains chunk after chunk: ``start()``, then ``chunk(steps)`` repeatedly."""

    def __init__(self, name: str, input_name: str, steps_per_call: int) -> None:
        self.name, self.input_name, self.steps_per_call = name, input_name, steps_per_call
        #: TFDP_SPEED_TRICKS while this session runs (None: the process's own).
        self.tricks: str | None = None
        self.windows: list[Window | None] = []  # one per round (None: crossed an epoch)
        self.crossed: list[Window] = []

    def start(self) -> None:
        raise NotImplementedError

    def chunk(self, steps: int) -> Window:
        raise NotImplementedError

    def stop(self) -> None:
        """Release what the session holds (threads)."""


class LoopSession(Session):
    """A hand-written loop driven from the main thread: ``call()`` runs ``steps_per_call`` steps."""

    def __init__(
        self, name: str, input_name: str, steps_per_call: int, call: Callable[[], tf.Tensor]
    ) -> None:
        super().__init__(name, input_name, steps_per_call)
        self._call = call

    def _run(self, steps: int) -> None:
        loss = tf.constant(0.0)
        for _ in range(steps // self.steps_per_call):
            loss = self._call()
        float(loss)

    def start(self) -> None:
        self._run(WARMUP_STEPS + LEAD_STEPS)

    def chunk(self, steps: int) -> Window:
        a = _now()
        self._run(steps)
        return _window(a, _now(), steps)


class _StopSessionError(Exception):
    """Raised at a loop's hook to end its thread."""


class ThreadSession(Session):
    """A loop that owns its control flow (``Trainer.fit``, ``model.fit``), run in a thread.

    ``run(hook)`` trains until the hook raises; the loop calls ``hook(done, epoch)``
    after each of its calls (``done``: steps completed so far). The hook blocks
    between chunks, so only one session runs at a time.
    """

    def __init__(
        self,
        name: str,
        input_name: str,
        steps_per_call: int,
        run: Callable[[Callable[[int, int], None]], None],
    ) -> None:
        super().__init__(name, input_name, steps_per_call)
        self._run = run
        self._go = threading.Semaphore(0)
        self._done = threading.Semaphore(0)
        self._stopping = False
        self._error: BaseException | None = None
        self._target: int | None = None
        self._want = 0
        self._begin: tuple[Clock, int, int] = ((0.0, 0.0), 0, 0)
        self._result: Window | None = None
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)

    def _hook(self, done: int, epoch: int) -> None:
        if self._target is not None and done < self._target:
            return
        end = _now()
        if self._target is not None:
            clock, done0, epoch0 = self._begin
            self._result = _window(clock, end, done - done0, crossed=epoch != epoch0)
        self._done.release()
        self._go.acquire()
        if self._stopping:
            raise _StopSessionError
        self._target = done + self._want
        self._begin = (_now(), done, epoch)

    def _main(self) -> None:
        try:
            self._run(self._hook)
        except _StopSessionError:
            pass
        except BaseException as e:  # reported by the main thread
            self._error = e
        finally:
            self._done.release()

    def _wait(self) -> None:
        self._done.acquire()
        if self._error is not None:
            raise RuntimeError(f"{self.name} failed") from self._error
        if not self._thread.is_alive() and not self._stopping:
            raise RuntimeError(f"{self.name} ended before it was stopped")

    def start(self) -> None:
        self._thread.start()
        self._wait()  # compiled; at its first hook
        for steps in (WARMUP_STEPS, LEAD_STEPS):
            self.chunk(steps)

    def chunk(self, steps: int) -> Window:
        self._want = steps
        self._go.release()
        self._wait()
        assert self._result is not None
        return self._result

    def stop(self) -> None:
        if self._thread.is_alive():
            self._stopping = True
            self._go.release()
            self._thread.join(timeout=5)


# --------------------------------------------------------------------------- hand-written loop
def _replica_step_fn(
    strategy: tf.distribute.Strategy,
) -> Callable[[tf.Tensor, tf.Tensor], tf.Tensor]:
    """A fresh model and optimizer in the scope, and seed 002's replica step for Keras 3."""
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
    name: str,
    input_name: str,
    strategy: tf.distribute.Strategy,
    iterator: Any,
    steps_per_call: int,
    bound: bool = False,
) -> LoopSession:
    """The minimal strategy.run loop over an endless distributed iterator.

    ``bound``: call the one-step function as the Trainer does, bound once to its
    iterator (``tfdp._compat.fast.graph.bound_call``: no per-call trace look-up).
    """
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

    n_const = tf.constant(steps_per_call, tf.int64)
    if steps_per_call == 1:
        call = bound_call(train_step, iterator) if bound else lambda: train_step(iterator)
        return LoopSession(name, input_name, 1, call)
    return LoopSession(name, input_name, steps_per_call, lambda: train_n(iterator, n_const))


def handwritten_batch_arg(
    name: str, input_name: str, strategy: tf.distribute.Strategy, dist_ds: Any
) -> LoopSession:
    """``for batch in dist_ds: train_step(batch)``: the batch is the tf.function argument."""
    replica_step = _replica_step_fn(strategy)

    @tf.function
    def train_step(batch: Any) -> tf.Tensor:
        per_replica = strategy.run(replica_step, args=batch)
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    iterator = iter(dist_ds)
    return LoopSession(name, input_name, 1, lambda: train_step(next(iterator)))


# --------------------------------------------------------------------------- tfdp and Keras loops
def trainer_session(
    name: str,
    strategy: tf.distribute.Strategy,
    inp: DistributedInput,
    steps_per_call: int,
    on_nonfinite: str = "stop",
    without: str | None = None,
) -> ThreadSession:
    """A Trainer's session; ``without``: the speed trick off while it runs."""
    trainer = Trainer(
        strategy,
        make_model,
        make_optimizer,
        "sparse_categorical_crossentropy_from_logits",
        steps_per_call=steps_per_call,
        progress=False,
        verbose=0,
        on_nonfinite=on_nonfinite,
    )

    def run(hook: Callable[[int, int], None]) -> None:
        trainer.fit(inp, epochs=FOREVER, on_step=lambda s: hook(s.global_step, s.epoch))

    session = ThreadSession(name, "tfdp DistributedInput", steps_per_call, run)
    if without is not None:
        session.tricks = ",".join(t for t in TRICKS if t != without)
    return session


class _KerasHook(keras.callbacks.Callback):
    """Calls the session hook at ``on_train_batch_begin``: after the previous step.

    It overrides no batch-end hook, as a plain ``model.fit`` has none. (Keras's
    TensorFlow backend calls batch ends synchronously in any case: it does not
    dispatch them to threads there.)
    """

    def __init__(self, hook: Callable[[int, int], None], steps_per_epoch: int) -> None:
        super().__init__()
        self.hook, self.steps_per_epoch, self.epoch = hook, steps_per_epoch, 0

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self.epoch = epoch

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        self.hook(self.epoch * self.steps_per_epoch + batch, self.epoch)


def compiled_model(strategy: tf.distribute.Strategy) -> keras.Model:
    with strategy.scope():
        model = make_model()
        model.compile(
            optimizer=make_optimizer(),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            steps_per_execution=1,
        )
    return model


def model_fit_session(
    name: str, strategy: tf.distribute.Strategy, inp: DistributedInput
) -> tuple[ThreadSession, keras.Model]:
    model = compiled_model(strategy)
    spe = inp.steps_per_epoch

    def run(hook: Callable[[int, int], None]) -> None:
        model.fit(
            inp.epochs(0, FOREVER),
            epochs=FOREVER,
            steps_per_epoch=spe,
            verbose=0,
            shuffle=False,
            callbacks=[_KerasHook(hook, spe)],
        )

    return ThreadSession(name, "tfdp DistributedInput", 1, run), model


def tfdp_fit_session(
    name: str, strategy: tf.distribute.Strategy, inp: DistributedInput, on_nonfinite: str = "stop"
) -> ThreadSession:
    model = compiled_model(strategy)

    def run(hook: Callable[[int, int], None]) -> None:
        tfdp_fit(
            model,
            inp,
            epochs=FOREVER,
            callbacks=[_KerasHook(hook, inp.steps_per_epoch)],
            verbose=0,
            on_nonfinite=on_nonfinite,
        )

    return ThreadSession(name, "tfdp DistributedInput", 1, run)


# --------------------------------------------------------------------------- main
def build_sessions(
    strategy: tf.distribute.Strategy, x: np.ndarray, y: np.ndarray, inp: DistributedInput
) -> tuple[list[Session], keras.Model]:
    def memory_dist_ds() -> Any:
        ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat()
        ds = ds.batch(GLOBAL_BATCH, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
        return strategy.experimental_distribute_dataset(ds)

    def tfdp_iter() -> Any:
        return iter(inp.epochs(0, None))

    mem, tin = "tf.data in memory", "tfdp DistributedInput"
    fit_session, fit_model = model_fit_session("model_fit", strategy, inp)
    sessions: list[Session] = [
        handwritten("handwritten_1", mem, strategy, iter(memory_dist_ds()), 1),
        handwritten("handwritten_16", mem, strategy, iter(memory_dist_ds()), MULTI),
        handwritten("handwritten_1_tfdp_input", tin, strategy, tfdp_iter(), 1),
        handwritten("handwritten_16_tfdp_input", tin, strategy, tfdp_iter(), MULTI),
        handwritten_batch_arg("handwritten_1_batch_arg", mem, strategy, memory_dist_ds()),
        handwritten("handwritten_1_bound", mem, strategy, iter(memory_dist_ds()), 1, bound=True),
        trainer_session("trainer_1", strategy, inp, 1),
        trainer_session("trainer_16", strategy, inp, MULTI),
        trainer_session("trainer_1_nocheck", strategy, inp, 1, "ignore"),
        trainer_session("trainer_16_nocheck", strategy, inp, MULTI, "ignore"),
        trainer_session("trainer_1_unbound", strategy, inp, 1, without="bound_call"),
        trainer_session("trainer_16_unbound", strategy, inp, MULTI, without="bound_call"),
        fit_session,
        tfdp_fit_session("tfdp_fit", strategy, inp),
        tfdp_fit_session("tfdp_fit_nocheck", strategy, inp, "ignore"),
    ]
    return sessions, fit_model


def _git_state() -> str:
    """The commit of the checkout tfdp is imported from, and whether src/ has local changes."""
    import subprocess

    src = os.path.dirname(os.path.abspath(tfdp.__file__))
    try:
        head = subprocess.run(
            ["git", "-C", src, "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", src, "status", "--porcelain", "--", "."],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return src
    return f"{src} at commit {head}" + (" with uncommitted changes in src/" if dirty else "")


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else float("nan")


def _verdict(value: float, target: float) -> str:
    return "n/a" if math.isnan(value) else ("PASS" if value >= target else "FAIL")


@dataclass
class Stats:
    """A session's figures over the rounds."""

    best: float = float("nan")  # steps/s of the best repeat
    median: float = float("nan")  # median chunk steps/s
    cpu_ms: float = float("nan")  # process CPU ms per step, all kept chunks
    repeats: list[float] = field(default_factory=list)


def stats(s: Session, repeat: int) -> Stats:
    kept = [w for w in s.windows if w is not None]
    if not kept:
        return Stats()
    reps = []
    for i in range(0, len(s.windows), repeat):
        group = [w for w in s.windows[i : i + repeat] if w is not None]
        if group:
            reps.append(sum(w.steps for w in group) / sum(w.wall for w in group))
    return Stats(
        best=max(reps),
        median=statistics.median(w.rate for w in kept),
        cpu_ms=1e3 * sum(w.cpu for w in kept) / sum(w.steps for w in kept),
        repeats=reps,
    )


def paired(a: Session, b: Session) -> float:
    """Median over rounds of a's chunk rate over b's (rounds where neither crossed an epoch)."""
    vals = [
        wa.rate / wb.rate
        for wa, wb in zip(a.windows, b.windows, strict=True)
        if wa is not None and wb is not None
    ]
    return statistics.median(vals) if vals else float("nan")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--quick", action="store_true", help="16 rounds x 32 steps (under a minute)")
    ap.add_argument("--chunk", type=int, default=None, help="steps per chunk (a multiple of 16)")
    ap.add_argument("--rounds", type=int, default=None, help="interleaved rounds")
    ap.add_argument("--only", nargs="*", default=None, help="run only these variants")
    args = ap.parse_args(argv)
    chunk = args.chunk or (QUICK_CHUNK if args.quick else FULL_CHUNK)
    rounds = args.rounds or (QUICK_ROUNDS if args.quick else FULL_ROUNDS)
    repeat = QUICK_REPEAT if args.quick else FULL_REPEAT
    if chunk < MULTI or chunk % MULTI:
        ap.error(f"--chunk must be a positive multiple of {MULTI}")
    wall0 = time.perf_counter()
    import_s = wall0 - _T_START

    devices = [d.name for d in tf.config.list_logical_devices("CPU")]
    strategy = tf.distribute.MirroredStrategy(devices)
    x, y = make_data()
    inp = DistributedInput(strategy, ArraySource((x, y)), batch_size=PER_REPLICA)
    assert inp.global_batch_size == GLOBAL_BATCH and inp.steps_per_epoch == STEPS_PER_EPOCH

    print("bench_train: optimizer steps/s, MLP 64-128-10, global batch 64, finely interleaved")
    print(
        f"date {_dt.date.today()}  python {platform.python_version()}  "
        f"tensorflow {tf.__version__}  keras {keras.__version__}  tfdp {tfdp.__version__}  "
        f"numpy {np.__version__}"
    )
    print(
        f"machine {platform.machine()} {platform.system()}, os.cpu_count() = {os.cpu_count()}; "
        f"{type(strategy).__name__} over {devices} ({strategy.num_replicas_in_sync} replicas, "
        f"{type(strategy.extended._cross_device_ops).__name__})"
    )
    print(f"tfdp source: {_git_state()}")
    print(f"data {NUM_EXAMPLES:,} x {FEATURES} float32, int64 labels; {inp!r}")
    print(
        f"timed: {rounds} rounds x {chunk}-step chunks per variant ({rounds * chunk:,} steps "
        f"each), repeats of {repeat} rounds ({repeat * chunk:,} steps); "
        f"{'--quick' if args.quick else 'full'} mode"
    )
    load0 = os.getloadavg()
    print(
        f"load average at start: {load0[0]:.2f} / {load0[1]:.2f} / {load0[2]:.2f} "
        "(the machine is shared with other processes)"
    )
    print(flush=True)

    t_build = time.perf_counter()
    sessions, fit_model = build_sessions(strategy, x, y, inp)
    if args.only:
        unknown = set(args.only) - {s.name for s in sessions}
        if unknown:
            ap.error(f"unknown variants {sorted(unknown)}")
        sessions = [s for s in sessions if s.name in args.only]
    process_tricks = os.environ.get(SPEED_TRICKS_ENV)

    def switch(s: Session) -> None:
        """The speed tricks of ``s`` for as long as it runs (one session runs at a time)."""
        value = s.tricks if s.tricks is not None else process_tricks
        if value is None:
            os.environ.pop(SPEED_TRICKS_ENV, None)
        else:
            os.environ[SPEED_TRICKS_ENV] = value

    for s in sessions:
        t = time.perf_counter()
        switch(s)
        s.start()
        print(
            f"  compile + {WARMUP_STEPS + LEAD_STEPS} steps {s.name:<26} "
            f"{time.perf_counter() - t:5.1f} s",
            flush=True,
        )
    print(
        f"  model.fit jit_compile resolved to {fit_model.jit_compile}; "
        f"set-up {time.perf_counter() - t_build:.1f} s",
        flush=True,
    )

    t_rounds = time.perf_counter()
    try:
        for r in range(rounds):
            k = r % len(sessions)
            for s in sessions[k:] + sessions[:k]:
                switch(s)
                w = s.chunk(chunk)
                if w.steps != chunk:
                    raise RuntimeError(f"{s.name}: a chunk of {w.steps} steps, expected {chunk}")
                s.windows.append(None if w.crossed else w)
                if w.crossed:
                    s.crossed.append(w)
            if (r + 1) % repeat == 0:
                print(
                    f"  rounds {r + 2 - repeat}-{r + 1} done "
                    f"({time.perf_counter() - t_rounds:.0f} s)",
                    flush=True,
                )
    finally:
        for s in sessions:
            s.stop()
    print()

    by = {s.name: s for s in sessions}
    st = {s.name: stats(s, repeat) for s in sessions}

    def best(name: str) -> float:
        return st[name].best if name in st else float("nan")

    def pr(a: str, b: str) -> float:
        return paired(by[a], by[b]) if a in by and b in by else float("nan")

    print(
        f"{'variant':<26} {'input':<22} {'steps/call':>10} {'best steps/s':>12} "
        f"{'median':>7} {'ms/step':>8} {'CPU ms/step':>11} {'vs hand_1':>10} "
        f"{'vs model_fit':>12}"
    )
    for s in sessions:
        v = st[s.name]
        print(
            f"{s.name:<26} {s.input_name:<22} {s.steps_per_call:>10} {v.best:>12,.0f} "
            f"{v.median:>7,.0f} {1e3 / v.best:>8.3f} {v.cpu_ms:>11.3f} "
            f"{pr(s.name, 'handwritten_1'):>9.2f}x {pr(s.name, 'model_fit'):>11.2f}x"
        )
    print(
        "(best steps/s and ms/step: the best repeat; median: of the chunks; CPU: process CPU "
        "time, all threads; vs: median of per-round ratios)"
    )
    print()

    checks = [
        ("trainer_1", "handwritten_1", TARGET_T1_VS_H1),
        ("trainer_16", "handwritten_1", TARGET_T16_VS_H1),
        ("trainer_16", "model_fit", TARGET_T16_VS_FIT),
    ]
    print("targets (median of per-round ratios; ratio of the best repeats in brackets):")
    verdicts = []
    for a, b, target in checks:
        value, of_best = pr(a, b), _ratio(best(a), best(b))
        verdict = _verdict(value, target)
        verdicts.append(verdict)
        flag = "" if _verdict(of_best, target) == verdict else "  [borderline: bests disagree]"
        print(
            f"  {a + ' / ' + b:<40} {value:5.2f}x  ({of_best:.2f}x)  target >= {target}x -> "
            f"{verdict}{flag}"
        )
    context = [
        ("trainer_1", "handwritten_1_tfdp_input", "same input: loop cost only"),
        ("trainer_16", "handwritten_16_tfdp_input", "same input: loop cost only"),
        ("handwritten_1_tfdp_input", "handwritten_1", "same loop: input cost only"),
        ("handwritten_16_tfdp_input", "handwritten_16", "same loop: input cost only"),
        ("handwritten_16", "handwritten_1", "16 steps per call, hand-written"),
        ("handwritten_16", "model_fit", "16 steps per call, hand-written"),
        ("tfdp_fit", "model_fit", "the fit path"),
        ("tfdp_fit_nocheck", "model_fit", "the fit path without the non-finite check"),
        ("tfdp_fit_nocheck", "tfdp_fit", "the non-finite check's cost in the fit path"),
        ("trainer_1_nocheck", "trainer_1", "the non-finite check's cost, 1 step per call"),
        ("trainer_16_nocheck", "trainer_16", "the non-finite check's cost, 16 steps per call"),
        ("handwritten_1_batch_arg", "handwritten_1", "batch vs iterator as the argument"),
        ("handwritten_1_bound", "handwritten_1", "its call bound once, as the Trainer's"),
        ("trainer_1", "handwritten_1_bound", "same call: the Trainer's loop and input cost"),
        ("trainer_1", "trainer_1_unbound", "the bound_call speed trick on / off"),
        ("trainer_16", "trainer_16_unbound", "the bound_call speed trick on / off, 16 steps"),
    ]
    print("context (median of per-round ratios; ratio of the best repeats in brackets):")
    for a, b, label in context:
        if a in by and b in by:
            print(
                f"  {a + ' / ' + b:<52} {pr(a, b):5.2f}x  "
                f"({_ratio(best(a), best(b)):.2f}x)  {label}"
            )
    for s in sessions:
        if s.crossed and not math.isnan(st[s.name].median):
            extra = [w.wall - w.steps / st[s.name].median for w in s.crossed]
            print(
                f"  {s.name}: {len(extra)} chunk(s) held an epoch boundary; the boundary cost "
                f"{1e3 * statistics.median(extra):,.0f} ms (median excess over its median chunk)"
            )
    load = os.getloadavg()
    print(
        f"load average at end: {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}; wall time "
        f"{time.perf_counter() - _T_START:.0f} s ({import_s:.0f} s of it importing)"
    )
    print()

    head = [
        ("handwritten_1_steps_per_s", f"{best('handwritten_1'):.0f}"),
        ("handwritten_16_steps_per_s", f"{best('handwritten_16'):.0f}"),
        ("handwritten_1_tfdp_input_steps_per_s", f"{best('handwritten_1_tfdp_input'):.0f}"),
        ("handwritten_16_tfdp_input_steps_per_s", f"{best('handwritten_16_tfdp_input'):.0f}"),
        ("trainer_1_steps_per_s", f"{best('trainer_1'):.0f}"),
        ("trainer_16_steps_per_s", f"{best('trainer_16'):.0f}"),
        ("fit_steps_per_s", f"{best('model_fit'):.0f}"),
        ("tfdp_fit_steps_per_s", f"{best('tfdp_fit'):.0f}"),
        ("ratio_trainer1_vs_handwritten1", f"{pr('trainer_1', 'handwritten_1'):.2f}x"),
        ("ratio_trainer16_vs_handwritten1", f"{pr('trainer_16', 'handwritten_1'):.2f}x"),
        ("ratio_trainer16_vs_fit", f"{pr('trainer_16', 'model_fit'):.2f}x"),
        (
            "ratio_trainer1_vs_handwritten1_tfdp_input",
            f"{pr('trainer_1', 'handwritten_1_tfdp_input'):.2f}x",
        ),
        (
            "ratio_trainer16_vs_handwritten16_tfdp_input",
            f"{pr('trainer_16', 'handwritten_16_tfdp_input'):.2f}x",
        ),
        (
            "ratio_trainer1_vs_handwritten1_bound",
            f"{pr('trainer_1', 'handwritten_1_bound'):.2f}x",
        ),
        ("ratio_tfdp_fit_vs_fit", f"{pr('tfdp_fit', 'model_fit'):.2f}x"),
        ("nonfinite_check_overhead_16", f"{pr('trainer_16_nocheck', 'trainer_16'):.2f}x"),
        ("nonfinite_check_overhead", f"{pr('trainer_1_nocheck', 'trainer_1'):.2f}x"),
        ("nonfinite_check_overhead_fit", f"{pr('tfdp_fit_nocheck', 'tfdp_fit'):.2f}x"),
        ("speed_trick_bound_call", f"{pr('trainer_1', 'trainer_1_unbound'):.3f}x"),
        ("speed_trick_bound_call_16", f"{pr('trainer_16', 'trainer_16_unbound'):.3f}x"),
        ("target_trainer1_vs_handwritten1", verdicts[0]),
        ("target_trainer16_vs_handwritten1", verdicts[1]),
        ("target_trainer16_vs_fit", verdicts[2]),
    ]
    for name, value in head:
        print(f"{name}: {value}")
    # Keep the TensorFlow objects alive: destroying the distributed iterators (their tf.data
    # threads) can take minutes on a loaded machine; os._exit below skips it.
    _KEEP_ALIVE.append((sessions, inp, strategy))
    return 0


if __name__ == "__main__":
    code = 1
    try:
        code = main()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # skip the interpreter's teardown of TensorFlow (see _KEEP_ALIVE)
