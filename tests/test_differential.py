"""The training loops against an independent single-device reference, across their configurations.

A configuration -- examples (fewer than one global batch, or many steps), replicas 1-4
(MirroredStrategy over the first k logical CPUs), per-replica batch, accumulation steps, steps
per call, drop_remainder, the sampler and its options (each padding, drop_last, integer and
fractional repeats, selection, an injected permutation), the source (arrays, TFRecord shards
with or without the block shuffle, an image folder), clipping, an L2 regulariser, an
augmentation (per example or batched), training sample weights, exact evaluation on a held-out
set, mixed precision, XLA, ``checkpoint_every``, ``on_nonfinite`` with a poisoned example, a
stop or a crash and the resume (in the same trainer, a fresh one, or on another world size),
a second ``fit`` with another batch size -- trains with :class:`tfdp.train.Trainer` and with
:func:`tfdp.train.fit`. Asserted: every replica received, step by step, the ids of the
reference layout (the Trainer's ``record_samples``; on the fit path a layer of the model reads
each row's id from the data), each epoch's coverage, every step's loss, each epoch's ``val_*``
against a plain mean over the whole held-out set, the step a non-finite run stops at, and the
final weights (1e-5; mixed precision looser). The reference (tests/reference.py) states the
layouts as torch, DeiT and timm write them and trains with a plain ``GradientTape``.

CI runs the named cases (each option meeting several replicas) and a derandomized search of
``TFDP_DIFF_EXAMPLES`` (default 2) draws per loop; ``TFDP_DIFF_EXAMPLES=200`` runs a longer one
and ``TFDP_DIFF_RANDOM=1`` a randomized one, by hand. ``scripts/plant_check.py`` plants known
bugs in a copy of ``src`` and shows that this file catches each.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import traceback
from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from differential import (
    Config,
    CrashError,
    Data,
    Recorder,
    Watch,
    assert_coverage,
    check_outcome,
    configs,
    eval_input_for,
    example_id,
    executed_steps,
    expected_records,
    latest_checkpoint,
    make_model,
    make_optimizer,
    make_source,
    per_example_loss,
    per_replica_ids,
    plan_run,
    reference_run,
    tolerance,
    training_input,
    with_policy,
)
from tfdp.errors import StateError
from tfdp.train import NonFiniteError, Trainer, fit

EXAMPLES = int(os.environ.get("TFDP_DIFF_EXAMPLES", "2"))
RANDOMIZED = os.environ.get("TFDP_DIFF_RANDOM", "0") not in ("", "0")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(max(600, 60 * EXAMPLES))]
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=not RANDOMIZED,  # CI: the same draws every run
    # CI reports the first failing draw as drawn: shrinking a run of this size takes minutes.
    **({} if RANDOMIZED else {"database": None, "phases": (Phase.explicit, Phase.generate)}),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


# -- the Trainer -----------------------------------------------------------------------------


def _check_trainer(mirrored_of: Any, cfg: Config) -> None:
    tf.config.experimental.enable_op_determinism()
    w, k = cfg.replicas, cfg.accumulation
    data = Data(cfg, make_source(cfg))
    plan = plan_run(cfg, data)
    strategy = mirrored_of(w)
    inp = training_input(strategy, cfg, cfg.batch, plan.first)
    if inp is None:
        return
    strategy2 = mirrored_of(plan.w2)
    second = None
    if plan.more is not None and plan.refused2 is None and not plan.fewer:
        second = training_input(strategy2, cfg, cfg.second_batch, plan.more)
    steps = plan.steps(second is not None)
    _check_stream_content(strategy, cfg, data, steps, plan.first)
    expected = reference_run(cfg, data, steps)
    losses: dict[int, float] = {}
    val: dict[int, dict[str, float]] = {}
    crashed: list[int] = []

    def on_step(state: Any) -> None:
        g = state.global_step
        for i, v in enumerate(state.step_losses):
            losses[g - len(state.step_losses) + i] = v
        if cfg.stop == "crash" and not crashed and g >= plan.stop:
            crashed.append(g)
            raise CrashError

    with tempfile.TemporaryDirectory(prefix="tfdp-diff-run-") as work:
        record = os.path.join(work, "ids.jsonl")

        def trainer(strat: Any) -> Trainer:
            return Trainer(
                strat,
                lambda: make_model(cfg),
                lambda: make_optimizer(cfg),
                per_example_loss(),
                metrics=["sparse_categorical_accuracy"] if cfg.eval_n else (),
                steps_per_call=cfg.steps_per_call,
                accumulation_steps=k,
                clip_global_norm=cfg.clip,
                mixed_precision=cfg.mixed,
                jit_compile=cfg.xla,
                run_dir=work if cfg.stop else None,
                checkpoint_every=cfg.checkpoint_every,
                progress=False,
                verbose=0,
                record_samples=record,
                on_nonfinite=cfg.on_nonfinite,
            )

        def run(tr: Trainer, data_in: Any, epochs: int, strat: Any, **kw: Any) -> None:
            kw.update(on_step=on_step, callbacks=[Watch(val)])
            tr.fit(data_in, epochs, eval_input=eval_input_for(strat, cfg), **kw)

        tr, error, done = trainer(strategy), None, True
        try:
            with contextlib.suppress(CrashError):
                run(tr, inp, cfg.epochs, strategy, max_steps=plan.stop if cfg.stop else None)
            if cfg.stop is not None:
                assert tr.state.global_step == plan.stop or cfg.stop == "crash"
                inp2 = inp
                if plan.w2 != w:
                    inp2 = training_input(
                        strategy2, cfg, w * cfg.batch // plan.w2, plan.refused2 or []
                    )
                if inp2 is not None:
                    tr = trainer(strategy2) if cfg.fresh else tr
                    try:
                        run(tr, inp2, cfg.epochs, strategy2)
                        assert not plan.fewer, (
                            "resumed where the last step cannot feed every replica"
                        )
                    except StateError as e:
                        assert plan.fewer and "fewer than the" in str(e), e
                done = inp2 is not None and not plan.fewer  # else the run ends at the stop
            finished = (tr.state.global_step, tr.state.stopped_early)  # checked after the ids
            if second is not None and done:
                run(tr, second, cfg.epochs + 1, strategy2, resume=False)
        except NonFiniteError as e:
            error = e
        with open(record) as f:
            got = [json.loads(line) for line in f]
        weights = [v.numpy() for v in tr.model.weights]

    if cfg.stop is not None and (plan.refused2 or plan.fewer):  # the run ends at the stop
        steps = steps[: plan.stop]
        expected = reference_run(cfg, data, steps)
    crash = crashed[0] if crashed else None
    resumed = latest_checkpoint(cfg, steps, crash, False) if crash else 0
    executed = executed_steps(steps, crash, resumed, expected.stop)
    want = expected_records([steps[i] for i in executed], k)
    assert_coverage(got, want)
    assert got == want  # every replica received the layout's ids, step by step
    if done and error is None:
        assert finished == (plan.stop + len(plan.rest), False)  # global step, stopped early
    tol = tolerance(cfg)
    assert set(losses) <= set(executed)
    got_losses = [losses[i] for i in sorted(losses)]
    want_losses = [expected.losses[i] for i in sorted(losses)]
    np.testing.assert_allclose(got_losses, want_losses, atol=tol, rtol=tol)  # every step's mean
    check_outcome(cfg, expected, error, val, weights)


def _check_stream_content(
    strategy: Any, cfg: Config, data: Any, steps: list, expected: Any
) -> None:
    """A TFRecord stream's examples, replica by replica, are the reference's (block shuffle
    included): a stream's recorded ids are its positions, so its content is checked here."""
    if cfg.source != "tfrecord" or not steps:
        return
    inp = training_input(strategy, cfg, cfg.batch, expected, return_ids=False)
    epoch = steps[0].epoch
    micro = [m for s in steps if s.epoch == epoch and s.ranks == inp.num_replicas for m in s.micro]
    compared = 0
    for m, batch in zip(micro, inp.epoch(epoch), strict=False):
        for rank, x in enumerate(strategy.experimental_local_results(batch[0])):
            want = data.examples([e for e, _ in m[rank]], epoch, steps[0].lanes)
            got = [example_id(row) for row in np.asarray(x)]
            assert got == [example_id(ex[0]) for ex in want], (epoch, rank, got)
            compared += 1
    assert compared, "no batch of the stream compared"


# -- the model.fit path ----------------------------------------------------------------------


def _check_fit(mirrored_of: Any, cfg: Config) -> None:
    """:func:`tfdp.train.fit`: Keras's step on tfdp input, with exact resume and evaluation."""
    tf.config.experimental.enable_op_determinism()
    w = cfg.replicas
    data = Data(cfg, make_source(cfg))
    plan = plan_run(cfg, data)
    strategy = mirrored_of(w)
    inp = training_input(strategy, cfg, cfg.batch, plan.first, return_ids=False)
    if inp is None:
        return
    strategy2 = mirrored_of(plan.w2)
    steps = plan.steps(False)
    recorder = Recorder()
    val: dict[int, dict[str, float]] = {}

    def compiled(strat: Any) -> keras.Model:
        with strat.scope():
            model = with_policy(cfg, lambda: make_model(cfg, recorder))
            model.compile(
                make_optimizer(cfg),
                keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                metrics=["sparse_categorical_accuracy"] if cfg.eval_n else None,
            )
        return model

    seen: list[list[list[int]]] = []  # per fit call: the ids each replica's model saw
    error = None
    with tempfile.TemporaryDirectory(prefix="tfdp-diff-fit-") as work:
        watch = Watch(val, plan.stop if cfg.stop == "crash" else None)

        def run(model: keras.Model, data_in: Any, strat: Any, **kw: Any) -> None:
            try:
                fit(
                    model,
                    data_in,
                    cfg.epochs,
                    run_dir=work,
                    eval_input=eval_input_for(strat, cfg),
                    checkpoint_every=cfg.checkpoint_every,
                    callbacks=[watch],
                    on_nonfinite=cfg.on_nonfinite,
                    verbose=0,
                    **kw,
                )
            except CrashError as e:
                # Keras's fit frames hold its iterator: freed here, not by a later garbage
                # collection (which was measured stalling 60 s tearing it down).
                traceback.clear_frames(e.__traceback__)
                raise
            finally:
                seen.append(recorder.take())

        model = compiled(strategy)
        try:
            with contextlib.suppress(CrashError):
                run(model, inp, strategy, max_steps=plan.stop if cfg.stop == "stop" else None)
            if cfg.stop is not None:
                inp2 = inp
                if plan.w2 != w:
                    inp2 = training_input(
                        strategy2, cfg, w * cfg.batch // plan.w2, plan.refused2 or [], False
                    )
                if inp2 is not None:
                    model = compiled(strategy2) if cfg.fresh else model
                    try:
                        run(model, inp2, strategy2)
                        assert not plan.fewer, (
                            "resumed where the last step cannot feed every replica"
                        )
                    except StateError as e:
                        assert plan.fewer and "fewer than the" in str(e), e
        except NonFiniteError as e:
            error = e
        weights = [v.numpy() for v in model.weights]

    if cfg.stop is not None and (plan.refused2 or plan.fewer):
        steps = steps[: plan.stop]
    expected = reference_run(cfg, data, steps)
    crash = watch.crashed
    resumed = latest_checkpoint(cfg, steps, crash, True) if crash else 0
    executed = executed_steps(steps, crash, resumed, expected.stop)
    # The fit calls in order: the first up to its stop, crash or error; the resume from there.
    cut = len(executed) if not cfg.stop else min(len(executed), crash or plan.stop)
    calls = [executed[:cut], executed[cut:]][: len(seen)]
    for call, ids in zip(calls, seen, strict=True):
        want = per_replica_ids([steps[i] for i in call], data)
        assert ids == want  # every replica's model was fed its rank's rows, in order
    check_outcome(cfg, expected, error, val, weights)


# -- the searches: first in the file, and in halves (by replica count), so that pytest-xdist
# -- starts the longest items first and balances them

SEARCH = SETTINGS.max_examples  # draws per loop, over both halves
HALVES = [(1, 2), (3, 4)]


@pytest.mark.parametrize("replicas", HALVES, ids=["1-2-replicas", "3-4-replicas"])
@settings(SETTINGS, max_examples=-(-SEARCH // 2))
@given(data=st.data())
def test_trainer_equals_the_reference(mirrored_of, replicas, data):
    _check_trainer(mirrored_of, data.draw(configs(replicas=replicas), label="cfg"))


@pytest.mark.parametrize("replicas", HALVES, ids=["1-2-replicas", "3-4-replicas"])
@settings(SETTINGS, max_examples=-(-SEARCH // 2))
@given(data=st.data())
def test_fit_path_equals_the_reference(mirrored_of, replicas, data):
    _check_fit(mirrored_of, data.draw(configs(loop=False, replicas=replicas), label="cfg"))


# -- the cases CI always runs: every option meeting several replicas ------------------------

RA = {"num_repeats": 2, "selected_round": 0, "selected_ratio": None, "shuffle": True}
RA_FRACTIONAL = {"num_repeats": 1.5, "selected_round": 2, "selected_ratio": 2.5, "shuffle": True}
RANDOM = {"padding": "random", "drop_last": False}
DROP_LAST = {"padding": None, "drop_last": True}
# fmt: off
# Each case meets several replicas with many options at once (a run's fixed cost is its traces,
# so fewer, denser runs); between them they catch every plant of scripts/plant_check.py.
TRAINER_CASES = {
    # 14 on 3 replicas: padded to 5 steps an epoch, calls of 3 and 2 in the first epoch (a call
    # of 2 that ran 3 steps would eat into the next epoch), one of 2 up to the stop at step 7,
    # the resume's of 3; the held-out 7 padded to 12 by the eval batches
    "l2-eval-padded-3-replicas-calls-of-3-resume-in-place": Config(
        replicas=3, n=14, batch=1, l2=0.01, eval_n=7, eval_batch=2, epochs=2, steps_per_call=3,
        stop="stop", stop_at=0.7, fresh=False),
    # blocks of 2: RA's epoch (the stream's first 7 positions) reaches each lane's second block
    "tfrecord-block-shuffle-weights-accumulation-clip-skip": Config(
        replicas=2, n=23, batch=2, source="tfrecord", shards=3, shuffle_buffer=2,
        sampler="repeat_aug", options=RA, weights=True, accumulation=2, clip=0.05, epochs=2,
        poison=5, on_nonfinite="skip"),
    "image-folder-4-replicas-random-padding-augment-batched-nonfinite-stop": Config(
        replicas=4, n=17, batch=2, source="image_folder", augment="batched", l2=0.01,
        options={**RANDOM, "shuffle": True}, drop_remainder=False, steps_per_call=2, poison=9),
    "crash-checkpoint-every-drop-last-injected-second-fit": Config(
        replicas=4, n=18, batch=1, options={**DROP_LAST, "shuffle": True}, injected=True,
        epochs=2, steps_per_call=2, checkpoint_every=2, stop="crash", stop_at=0.6,
        second_batch=2),
    "resume-2-to-4-replicas-fractional-selection-augment-l2": Config(
        replicas=2, n=15, batch=2, epochs=2, stop="stop", stop_at=0.3, resume_replicas=4,
        sampler="repeat_aug", options=RA_FRACTIONAL, augment="example", l2=0.01),
    "resume-4-to-1-replica-accumulation-mixed-float16-xla": Config(
        replicas=4, n=13, batch=1, accumulation=2, epochs=2, stop="stop", stop_at=0.5,
        resume_replicas=1, mixed="mixed_float16", xla=True, drop_remainder=False),
}
FIT_CASES = {
    "l2-eval-padded-3-replicas-crash-checkpoint-every": Config(
        replicas=3, n=10, batch=1, l2=0.01, eval_n=7, eval_batch=2, epochs=2,
        drop_remainder=False, stop="crash", stop_at=0.7, checkpoint_every=3),
    "tfrecord-block-shuffle-weights-augment-batched": Config(
        replicas=2, n=23, batch=2, source="tfrecord", shards=3, shuffle_buffer=3,
        sampler="repeat_aug", options=RA, weights=True, augment="batched", epochs=2),
    "resume-4-to-2-image-folder-fractional-repeats-augment": Config(
        replicas=4, n=14, batch=1, source="image_folder", sampler="repeat_aug",
        options={**RA_FRACTIONAL, "selected_ratio": None}, augment="example", epochs=2,
        stop="stop", stop_at=0.4, resume_replicas=2, injected=True),
    "nonfinite-skip-resume-in-place-mixed-bfloat16": Config(
        replicas=2, n=10, batch=2, poison=4, on_nonfinite="skip", stop="stop", fresh=False,
        mixed="mixed_bfloat16", epochs=2),
    "nonfinite-stop-4-replicas-padded": Config(replicas=4, n=9, batch=1, poison=2),
}
# fmt: on


@pytest.mark.parametrize("cfg", list(TRAINER_CASES.values()), ids=list(TRAINER_CASES))
def test_trainer_case(mirrored_of, cfg):
    _check_trainer(mirrored_of, cfg)


@pytest.mark.parametrize("cfg", list(FIT_CASES.values()), ids=list(FIT_CASES))
def test_fit_path_case(mirrored_of, cfg):
    _check_fit(mirrored_of, cfg)


# -- the speed tricks off: every one's public-API fallback (TFDP_SPEED_TRICKS=0), one case of
# -- each loop (tests/test_compat.py checks each trick both ways)
WITHOUT_SPEED_TRICKS = {
    "trainer": "l2-eval-padded-3-replicas-calls-of-3-resume-in-place",
    "fit": "nonfinite-stop-4-replicas-padded",
}


def test_trainer_case_without_speed_tricks(mirrored_of, monkeypatch):
    """Unbound calls, tf.data's own maps, iterators dropped by the loop: the same run."""
    monkeypatch.setenv("TFDP_SPEED_TRICKS", "0")
    _check_trainer(mirrored_of, TRAINER_CASES[WITHOUT_SPEED_TRICKS["trainer"]])


def test_fit_path_case_without_speed_tricks(mirrored_of, monkeypatch):
    monkeypatch.setenv("TFDP_SPEED_TRICKS", "0")
    _check_fit(mirrored_of, FIT_CASES[WITHOUT_SPEED_TRICKS["fit"]])
