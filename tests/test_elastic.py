"""Elastic resume: stop on W replicas or workers, continue on W', losing or repeating no sample.

The pure arithmetic (a sampler's global list, the deal of its rest over other ranks, its state
format) is checked against a plain transcription with hypothesis; the Trainer on real
MirroredStrategy replicas (1, 2 and 4 logical CPUs) from its audit trail; the CLI through
``tfdp launch`` with real worker processes stopped by SIGTERM.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import keras
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tfdp import ArraySource, DistributedInput
from tfdp.checkpoint import (
    CheckpointManager,
    CheckpointWarning,
    DataPosition,
    input_config,
)
from tfdp.errors import CheckpointError, StateError
from tfdp.samplers import DistributedSampler, RepeatAugSampler
from tfdp.train import Trainer

# -- a plain transcription of the global list and of the deal -------------------------------


def reference_global_list(sampler):
    """The epoch's global list, built from the ranks' own lists: entry k of rank r at r + k*W."""
    w = sampler.num_replicas
    ranks = [sampler.with_rank(r).indices().tolist() for r in range(w)]
    out = [None] * sum(len(x) for x in ranks)
    for r, entries in enumerate(ranks):
        for k, value in enumerate(entries):
            out[r + k * w] = value
    assert None not in out
    return out


def reference_deal(global_list, start, new_w):
    """Rank r' of new_w takes the remaining entries start + r', start + r' + new_w, ..."""
    positions = list(range(start, len(global_list)))
    return [[(p, global_list[p]) for p in positions[r::new_w]] for r in range(new_w)]


def make_sampler(kind, n, w, rank=0, **kw):
    if kind == "repeat_aug":
        return RepeatAugSampler(n, w, rank, selected_round=0, **kw)
    if kind == "padding_random":
        return DistributedSampler(n, w, rank, padding="random", **kw)
    if kind == "drop_last":
        return DistributedSampler(n, w, rank, drop_last=True, **kw)
    return DistributedSampler(n, w, rank, **kw)


KINDS = ["distributed", "padding_random", "drop_last", "repeat_aug"]


@settings(max_examples=60, deadline=None)
@given(
    kind=st.sampled_from(KINDS),
    n=st.integers(1, 60),
    w=st.integers(1, 6),
    seed=st.integers(0, 2**64 - 1),
    epoch=st.integers(0, 5),
)
def test_global_indices_is_the_interleaved_rank_lists(kind, n, w, seed, epoch):
    if kind == "drop_last" and n < w:
        return
    s = make_sampler(kind, n, w, seed=seed)
    s.set_epoch(epoch)
    expected = reference_global_list(s)
    assert s.global_length == len(expected)
    assert s.global_indices(np.arange(len(expected))).tolist() == expected
    with pytest.raises(ValueError, match="global_length"):
        s.global_indices([len(expected)])


@settings(max_examples=80, deadline=None)
@given(
    kind=st.sampled_from(KINDS),
    n=st.integers(1, 60),
    w=st.integers(1, 6),
    new_w=st.integers(1, 6),
    data=st.data(),
)
def test_a_state_loaded_at_another_world_size_deals_the_rest_exactly_once(kind, n, w, new_w, data):
    if kind == "drop_last" and n < max(w, new_w):
        return
    epoch = data.draw(st.integers(0, 3))
    saver = make_sampler(kind, n, w, seed=7)
    saver.set_epoch(epoch)
    global_list = reference_global_list(saver)
    position = data.draw(st.integers(0, len(saver)))  # entries each rank consumed
    state = json.loads(json.dumps(saver.state_dict(position=position)))
    start = min(position * w, len(global_list))
    assert state["global_position"] == start and state["plan_replicas"] == w
    got = []
    for r in range(new_w):
        s = make_sampler(kind, n, new_w, r, seed=7)
        if new_w != w:
            with pytest.raises(StateError, match="allow_world_size_change=True"):
                s.load_state_dict(state)
        s.load_state_dict(state, allow_world_size_change=True)
        values = list(s)  # from the loaded position on
        got.append(list(zip(s.positions(len(s) - len(values)).tolist(), values, strict=True)))
    if start == 0:  # nothing consumed: the epoch is the new world size's own
        fresh = make_sampler(kind, n, new_w, seed=7)
        fresh.set_epoch(epoch)
        assert [[v for _, v in g] for g in got] == [
            fresh.with_rank(r).indices().tolist() for r in range(new_w)
        ]
    else:
        assert got == reference_deal(global_list, start, new_w)
        # every remaining entry exactly once, nothing consumed twice
        assert sorted(p for g in got for p, _ in g) == list(range(start, len(global_list)))


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(4, 50),
    sizes=st.lists(st.integers(1, 5), min_size=2, max_size=4),
    repeats=st.integers(1, 3),
    data=st.data(),
)
def test_a_chain_of_world_sizes_consumes_the_first_plan_exactly(n, sizes, repeats, data):
    """W -> W' -> W'' ... within one epoch: the consumed entries are the first plan's list.

    (The plan of the first world size that consumed anything: an epoch of which nothing was
    consumed follows the world size it starts on.)
    """
    first = RepeatAugSampler(n, sizes[0], 0, num_repeats=repeats, selected_round=0, seed=3)
    first.set_epoch(2)
    global_list = reference_global_list(first)
    consumed = []
    state = None
    for i, w in enumerate(sizes):
        ranks = [RepeatAugSampler(n, w, r, num_repeats=repeats, selected_round=0, seed=3)
                 for r in range(w)]  # fmt: skip
        for s in ranks:
            if state is None:
                s.set_epoch(2)
            else:
                s.load_state_dict(state, allow_world_size_change=True)
        if state is not None and state["global_position"] == 0:  # nothing consumed yet: the
            global_list, consumed = reference_global_list(ranks[0]), []  # new world's own plan
        rests = []
        for s in ranks:  # each rank's entries from its loaded position on
            values = list(s)
            first_left = len(s) - len(values)
            rests.append((first_left, s.positions(first_left).tolist(), values))
        last = i == len(sizes) - 1
        take = data.draw(st.integers(0, min(len(r[2]) for r in rests)))
        for _, positions, values in rests:  # replicas step together: each takes `take`
            consumed += list(zip(positions, values, strict=True))[: None if last else take]
        state = json.loads(json.dumps(ranks[0].state_dict(position=rests[0][0] + take)))
    assert sorted(p for p, _ in consumed) == list(range(len(consumed)))  # a prefix, once each
    assert Counter(v for _, v in consumed) == Counter(global_list[: len(consumed)])
    assert all(global_list[p] == v for p, v in consumed)


def test_a_state_of_another_format_is_refused_naming_what_differs():
    """One state format: the one written before elastic resume (version 1) no longer loads."""
    saver = DistributedSampler(20, 2, 0, seed=1)
    saver.set_epoch(3)
    state = saver.state_dict(position=4)
    old = {k: v for k, v in state.items() if k not in ("global_position", "plan_replicas")}
    loader = DistributedSampler(20, 2, 1, seed=1)
    with pytest.raises(StateError, match=r"version 1 is not supported \(this tfdp reads version 2"):
        loader.load_state_dict({**old, "version": 1})
    with pytest.raises(StateError, match=r"missing field\(s\) \['global_position', 'plan_"):
        loader.load_state_dict(old)
    loader.load_state_dict(state)  # the current format loads
    assert (loader.epoch, list(loader)) == (3, loader.indices(4).tolist())


def test_repeated_augmentation_copies_land_on_distinct_ranks():
    saver = RepeatAugSampler(50, 2, 0, num_repeats=3, selected_round=0, seed=5)
    saver.set_epoch(1)
    state = saver.state_dict(position=7)
    for new_w in (3, 4, 5):
        owner: dict[int, list[int]] = {}
        for r in range(new_w):
            s = RepeatAugSampler(50, new_w, r, num_repeats=3, selected_round=0, seed=5)
            s.load_state_dict(state, allow_world_size_change=True)
            for p in s.positions().tolist():
                owner.setdefault(p // 3, []).append(r)  # copies of a sample: positions 3i..3i+2
        assert all(len(set(ranks)) == len(ranks) for ranks in owner.values())


def test_refusals_name_the_fix():
    s = DistributedSampler(100, 2, 0)
    other = RepeatAugSampler(100, 3, 0, selected_round=0)
    with pytest.raises(
        StateError, match=r"^plan: must be a DistributedSampler.*a RepeatAugSampler"
    ):
        s.follow(other)
    state = DistributedSampler(100, 4, 0, seed=1).state_dict(position=3)
    with pytest.raises(StateError, match=r"num_replicas: saved 4.*allow_world_size_change=True"):
        s.load_state_dict(state)
    with pytest.raises(StateError, match="seed: saved 1"):
        s.load_state_dict(state, allow_world_size_change=True)  # the configuration still counts


# -- the Trainer on 1, 2 and 4 replicas ---------------------------------------------------------

# 46 examples, 2 copies each, a global batch of 8: 5 steps per epoch on 1 or 2 replicas, 6 on 4.
N, GLOBAL_BATCH, REPEATS = 46, 8, 2
RNG = np.random.default_rng(0)
X = RNG.normal(size=(N, 4)).astype("float32")
Y = (X[:, 0] > 0).astype("int64")


def _input(strategy, return_ids=True):
    return DistributedInput(
        strategy,
        ArraySource((X, Y)),
        sampler="repeat_aug",
        sampler_options={"num_repeats": REPEATS, "selected_round": 0},
        global_batch_size=GLOBAL_BATCH,
        seed=11,
        return_ids=return_ids,
    )


def _trainer(strategy, run_dir, record):
    def model():
        keras.utils.set_random_seed(1)
        return keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])

    schedule = keras.optimizers.schedules.CosineDecay(0.1, 40)
    return Trainer(strategy, model, lambda: keras.optimizers.Adam(schedule),
                   "sparse_categorical_crossentropy_from_logits", run_dir=run_dir,
                   record_samples=record, progress=False, verbose=0)  # fmt: skip


def _records(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def _plan(strategy, epoch):
    """What an uninterrupted run consumes in ``epoch``: per step, per rank, its ids."""
    inp = _input(strategy)
    out = []
    for step in range(inp.steps_per_epoch):
        b = inp.batch_size
        out.append([inp.rank_sampler(r, epoch).indices(step * b, step * b + b).tolist()
                    for r in range(inp.num_replicas)])  # fmt: skip
    return out


@pytest.fixture(scope="module")
def stopped(mirrored_of, tmp_path_factory):
    """A run on W in {1, 2, 4} stopped at a random step of epoch 0."""
    rng = np.random.default_rng(int(os.environ.get("TFDP_ELASTIC_SEED", "13")))
    out = {}
    for w in (1, 2, 4):
        steps = _input(mirrored_of(w)).steps_per_epoch
        stop = int(rng.integers(1, steps))  # inside epoch 0
        run = tmp_path_factory.mktemp(f"w{w}")
        tr = _trainer(mirrored_of(w), run / "run", run / "ids.jsonl")
        tr.fit(_input(mirrored_of(w)), 2, max_steps=stop)
        assert tr.state.stopped_early and tr.state.epoch == 0 and tr.state.step == stop
        out[w] = (run, stop)
    return out


@pytest.mark.parametrize(("w", "new_w"), [(1, 2), (1, 4), (2, 1), (2, 4), (4, 1), (4, 2)])
@pytest.mark.xdist_group("elastic_stopped")  # its module fixture runs once
def test_trainer_resumed_on_another_replica_count(mirrored_of, stopped, tmp_path, w, new_w):
    run, step = stopped[w]
    shutil.copytree(run, tmp_path, dirs_exist_ok=True)
    before = _records(tmp_path / "ids.jsonl")
    inp = _input(mirrored_of(new_w))
    tr = _trainer(mirrored_of(new_w), tmp_path / "run", tmp_path / "ids.jsonl")
    tr.fit(inp, 2)
    records = _records(tmp_path / "ids.jsonl")[len(before) :]
    old_steps = _input(mirrored_of(w)).steps_per_epoch
    # global step, optimizer iterations (the schedule) continue where the run stopped
    assert tr.state.global_step == old_steps + inp.steps_per_epoch
    assert int(tr.optimizer.iterations.numpy()) == tr.state.global_step
    # the interrupted epoch: its multiset of ids is the uninterrupted W run's, exactly
    plan = _plan(mirrored_of(w), 0)
    epoch0 = [i for rec in before if rec["epoch"] == 0 for i in rec["ids"]]
    epoch0 += [i for rec in records if rec["epoch"] == 0 for i in rec["ids"]]
    assert Counter(epoch0) == Counter(i for s in plan for ids in s for i in ids)
    assert len(epoch0) == old_steps * GLOBAL_BATCH
    resumed_steps = sorted({rec["step"] for rec in records if rec["epoch"] == 0})
    assert resumed_steps == list(range(step, old_steps))  # the plan's steps, counted on
    assert {rec["rank"] for rec in records if rec["epoch"] == 0} == set(range(new_w))
    # Repeated Augmentation: with W' >= R the copies of a sample in one step are on distinct ranks
    if new_w >= REPEATS:
        for s in resumed_steps:
            at = [(rec["rank"], i) for rec in records if (rec["epoch"], rec["step"]) == (0, s)
                  for i in rec["ids"]]  # fmt: skip
            for sample in {i for _, i in at}:
                ranks = [r for r, i in at if i == sample]
                assert len(ranks) == len(set(ranks))
    # the next epoch is a fresh W' run's, step by step and rank by rank
    fresh = _plan(mirrored_of(new_w), 1)
    got = [[rec["ids"] for rec in records if (rec["epoch"], rec["step"]) == (1, s)]
           for s in range(inp.steps_per_epoch)]  # fmt: skip
    assert got == fresh


def test_keras_fit_path_resumed_on_another_replica_count(mirrored_of, tmp_path):
    from tfdp.train import fit

    def compiled(strategy):
        with strategy.scope():
            keras.utils.set_random_seed(1)
            model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
            model.compile(
                keras.optimizers.SGD(0.1),
                keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            )
        return model

    old, new = _input(mirrored_of(4), False), _input(mirrored_of(2), False)
    assert (old.steps_per_epoch, new.steps_per_epoch) == (6, 5)
    fit(compiled(mirrored_of(4)), old, 2, run_dir=tmp_path, max_steps=4, verbose=0)
    model = compiled(mirrored_of(2))
    hist = fit(model, new, 2, run_dir=tmp_path, checkpoint_every=1, verbose=0)
    assert len(hist.history["loss"]) == 2  # interrupted epoch, then a whole one
    assert int(model.optimizer.iterations.numpy()) == 6 + 5
    position, step = CheckpointManager(tmp_path / "checkpoints", model=model,
                                       optimizer=model.optimizer).restore(partial=True)  # fmt: skip
    assert (position.epoch, position.step, step) == (2, 0, 11)


@pytest.mark.xdist_group("elastic_stopped")  # its module fixture runs once
def test_trainer_refuses_a_global_batch_that_changed(mirrored_of, stopped, tmp_path):
    run, _ = stopped[2]
    shutil.copytree(run, tmp_path, dirs_exist_ok=True)
    inp = DistributedInput(mirrored_of(4), ArraySource((X, Y)), sampler="repeat_aug",
                           sampler_options={"num_repeats": REPEATS, "selected_round": 0},
                           batch_size=4, seed=11, return_ids=True)  # fmt: skip
    tr = _trainer(mirrored_of(4), tmp_path / "run", None)
    with pytest.raises(StateError, match=r"global_batch_size: saved 8, now 16[\s\S]*1, 2, 4, 8"):
        tr.fit(inp, 2)


def test_a_global_batch_not_divided_by_the_replicas_names_the_valid_counts(mirrored_of):
    with pytest.raises(ValueError, match="global_batch_size: 6 must be a positive multiple"):
        DistributedInput(mirrored_of(4), ArraySource((X, Y)), global_batch_size=6)


def test_a_checkpoint_of_another_format_is_not_restored_and_says_why(mirrored_of, tmp_path):
    """A data position written before elastic resume (version 1) is not read: the refusal names
    its version, and nothing is restored."""
    inp = _input(mirrored_of(2))
    layer = keras.layers.Dense(1)
    layer.build((None, 2))
    manager = CheckpointManager(tmp_path, layer=layer)
    position = DataPosition.from_input(inp, 1, 2)
    old_sampler = {k: v for k, v in position.sampler.items()
                   if k not in ("global_position", "plan_replicas")}  # fmt: skip
    old_config = {k: v for k, v in position.config.items()
                  if k not in ("global_batch_size", "streaming")}  # fmt: skip
    old = DataPosition(1, 2, {**old_sampler, "version": 1}, old_config)
    text = json.loads(old.to_json())
    text["version"] = 1
    manager._step.assign(5)  # write it exactly as version 1 did
    manager._data.assign(json.dumps(text, sort_keys=True))
    manager._manager.save(checkpoint_number=5)
    with pytest.raises(ValueError, match=r"version 1 is not supported \(this tfdp reads version 2"):
        DataPosition.from_json(json.dumps(text))
    with pytest.warns(CheckpointWarning), pytest.raises(CheckpointError) as err:
        CheckpointManager(tmp_path, layer=layer).restore(input_config(inp))
    assert "ckpt-5: StateError: data position version 1 is not supported" in str(err.value)


# -- the CLI: 2 workers stopped by SIGTERM, resumed on 3 through `tfdp launch` -------------------

CLI_ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}
# One epoch of the digits at a global batch of 60 (2 and 3 divide it): about 26 steps.
TRAIN = ["train", "--sampler", "distributed", "--batch-size", "60", "--epochs", "1",
         "--model", "elastic_model:tiny", "--steps-per-call", "1", "--seed", "4",
         "--no-progress"]  # fmt: skip


def _launch(workers, *args):
    return [sys.executable, "-m", "tfdp.cli", "launch", "--workers", str(workers), "--",
            sys.executable, "-m", "tfdp.cli", *TRAIN, *args]  # fmt: skip


@pytest.mark.slow
def test_two_workers_stopped_by_sigterm_resume_on_three_through_launch(tmp_path):
    run, ids = tmp_path / "run", tmp_path / "ids.jsonl"
    repo = Path(__file__).resolve().parents[1]
    workers = Path(__file__).resolve().parent / "workers"  # elastic_model.py
    env = {**CLI_ENV, "PYTHONPATH": f"{workers}{os.pathsep}{CLI_ENV.get('PYTHONPATH', '')}"}
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "env": env, "cwd": repo}
    # 100 ms a step in the first run only, so that SIGTERM lands mid-epoch; the resumed run
    # goes at full speed (its model has no sleeping layer and no variables fewer).
    first = subprocess.Popen(_launch(2, "--run-dir", run, "--record-samples", ids),
                             **{**pipes, "env": {**env, "TFDP_ELASTIC_SLOW": "1"}})  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and first.poll() is None:  # a few steps in, then stop
            if ids.exists() and len(ids.read_text().splitlines()) >= 3 * 2:
                break
            time.sleep(0.05)
        assert first.poll() is None, first.communicate()[0].decode(errors="replace")[-3000:]
        first.send_signal(signal.SIGTERM)
        out = first.communicate(timeout=300)[0].decode(errors="replace")
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 128 + signal.SIGTERM, out[-3000:]
    stopped = re.search(r"stopped in epoch (\d+) of \d+, after its step (\d+)", out)
    assert stopped, out[-3000:]  # the fault happened: the group stopped mid-run
    epoch, step = int(stopped.group(1)) - 1, int(stopped.group(2))  # epochs count from 1
    before = _records(ids)
    second = subprocess.run(_launch(3, "--resume", "--run-dir", run), **pipes, timeout=600)
    out2 = second.stdout.decode(errors="replace")
    assert second.returncode == 0, out2[-3000:]
    records = _records(ids)[len(before) :]
    assert {r["rank"] for r in records} == {0, 1, 2}
    # the interrupted epoch: every entry of the 2-worker plan exactly once
    n = int(re.search(r"(\d+) training /", out).group(1))
    plan = DistributedSampler(n, 2, 0, seed=4)
    plan.set_epoch(epoch)
    steps = plan.global_length // 60
    consumed = [i for r in before + records if r["epoch"] == epoch for i in r["ids"]]
    assert Counter(consumed) == Counter(plan.global_indices(np.arange(steps * 60)).tolist())
    assert sorted({r["step"] for r in records if r["epoch"] == epoch}) == list(range(step, steps))
    config = json.loads((run / "config.json").read_text())
    assert config["history"][-1]["event"] == "resume"
    hashes = set(re.findall(r"weights sha256 (\w+)", out2))
    assert len(hashes) == 1  # the three workers hold the same weights


def test_streaming_source_changes_world_size_only_at_an_epoch_end(mirrored_of, tmp_path):
    from tfdp.sources import TFRecordSource, write_tfrecords

    source = TFRecordSource(write_tfrecords((X, Y), tmp_path, num_shards=4))
    old = DistributedInput(mirrored_of(4), source, global_batch_size=8)
    new = DistributedInput(mirrored_of(2), source, global_batch_size=8)
    mid = DataPosition.from_input(old, 0, 2)
    with pytest.raises(StateError, match=r"until the epoch ends[\s\S]*random-access source"):
        new.resume_from(mid.sampler, mid.step)
    end = DataPosition.from_input(old, 0, old.steps_per_epoch)  # stored as (1, 0)
    new.resume_from(end.sampler, end.step)  # an epoch end: the next epoch is the new plan's
    assert (end.epoch, end.step) == (1, 0) and new.epoch_steps(1) == new.steps_per_epoch


def test_cli_names_the_replica_counts_that_divide_the_global_batch(tmp_path, capsys):
    from tfdp.cli import main

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"batch_size": 6, "replicas": 2, "epochs": 1}))
    argv = ["train", "--resume", "--run-dir", str(run), "--replicas", "4", "--no-progress"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--batch-size: 6 (the global batch) must be a multiple of the 4 replicas" in err
    assert "(1, 2, 3, 6)" in err
