"""tfdp.checkpoint on real strategies and real files: resume exactness, fallback, errors."""

from __future__ import annotations

import json
import os
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfdp.checkpoint import (
    CheckpointCallback,
    CheckpointManager,
    CheckpointWarning,
    DataPosition,
    input_config,
    remove_interrupted_saves,
)
from tfdp.distribute import resolver_role as _role  # the chief rule checkpoints rely on
from tfdp.errors import CheckpointError
from tfdp.input import DistributedInput
from tfdp.sources import ArraySource

N = 64  # repeat_aug, 4 replicas, batch 4: 4 steps per epoch


def _input(strategy, batch_size: int = 4) -> DistributedInput:
    rng = np.random.default_rng(0)
    src = ArraySource((rng.normal(size=(N, 3)).astype("float32"), np.arange(N) % 3))
    return DistributedInput(
        strategy,
        src,
        sampler="repeat_aug",
        sampler_options={"selected_round": 0},
        batch_size=batch_size,
    )


def _model_and_optimizer(strategy):
    with strategy.scope():
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(3)])
        model.set_weights([np.linspace(-1, 1, 9, dtype="float32").reshape(3, 3), np.zeros(3)])
        opt = keras.optimizers.Adam(0.05)
        opt.build(model.trainable_variables)
    return model, opt


def _trainer(strategy, model, opt):
    loss_fn = keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction="sum_over_batch_size"
    )

    @tf.function
    def train_step(batch):
        x, y = batch
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True)) / strategy.num_replicas_in_sync
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))

    def train(inp, epoch: int, start_step: int, stop_step: int) -> None:
        for step, batch in enumerate(inp.epoch(epoch, start_step=start_step), start=start_step):
            if step == stop_step:
                break
            strategy.run(train_step, args=(batch,))

    return train


def _state(model, opt) -> list[np.ndarray]:
    return [np.array(v) for v in model.get_weights()] + [np.array(v.numpy()) for v in opt.variables]


def _assert_same(a: list[np.ndarray], b: list[np.ndarray]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)


def _dense(seed: int = 0):
    layer = keras.layers.Dense(2)
    layer.build((None, 3))
    layer.kernel.assign(np.full((3, 2), seed, "float32"))
    return layer


def _save_three(directory, **kwargs) -> CheckpointManager:
    layer = _dense()
    manager = CheckpointManager(directory, layer=layer, **kwargs)
    for step in (10, 20, 30):
        layer.kernel.assign(np.full((3, 2), step, "float32"))
        manager.save(DataPosition(0, step, config={"batch_size": 4}), global_step=step)
    return manager


def _data_file(path: str) -> Path:
    return Path(path + ".data-00000-of-00001")


# -- DataPosition ------------------------------------------------------------------------------


def test_data_position_json_round_trip_and_validation():
    p = DataPosition(3, 7, {"epoch": 3, "position": 28}, {"sampler": {"seed": (1, 2)}, "w": 4})
    assert p.config["sampler"]["seed"] == [1, 2]  # stored as JSON would
    assert DataPosition.from_json(p.to_json()) == p
    assert DataPosition.from_json(p.to_json().encode()) == p
    with pytest.raises(ValueError, match="step: must be an integer >= 0"):
        DataPosition(0, -1)
    with pytest.raises(ValueError, match="JSON-serialisable"):
        DataPosition(0, 0, config={"f": object()})
    with pytest.raises(ValueError, match="not a tfdp data position"):
        DataPosition.from_json('{"epoch": 1}')
    bad = json.loads(p.to_json())
    bad["version"] = 99
    with pytest.raises(ValueError, match="version 99"):
        DataPosition.from_json(json.dumps(bad))


def test_from_input_rolls_over_and_records_sampler(mirrored4):
    inp = _input(mirrored4)
    spe = inp.steps_per_epoch
    assert spe == 4
    p = DataPosition.from_input(inp, 1, spe + 2, run="x")
    assert (p.epoch, p.step) == (2, 2)
    assert p.sampler["epoch"] == 2 and p.sampler["position"] == 2 * inp.batch_size
    end = DataPosition.from_input(inp, 0, spe)  # the end of epoch 0 is the start of epoch 1
    assert (end.epoch, end.step, end.sampler["position"]) == (1, 0, 0)
    assert p.config == input_config(inp, run="x")
    assert p.config["num_replicas"] == 4 and p.config["batch_size"] == 4
    assert p.config["sampler"]["kind"] == "RepeatAugSampler"
    # The stored sampler state resumes a sampler exactly there.
    s = inp.sampler.with_rank(3)
    s.load_state_dict(p.sampler)
    assert list(s)[:4] == s.indices(8, 12).tolist()


# -- round trip and exact resume under MirroredStrategy ----------------------------------------


def _reference_state(strategy) -> list[np.ndarray]:
    """Model and optimizer state after an uninterrupted custom-loop run of spe + 3 steps."""
    inp = _input(strategy)
    spe = inp.steps_per_epoch
    model, opt = _model_and_optimizer(strategy)
    train = _trainer(strategy, model, opt)
    train(inp, 0, 0, spe)
    train(inp, 1, 0, 3)
    return _state(model, opt)


def _manager(strategy, directory, model, opt, in_scope: bool) -> CheckpointManager:
    if not in_scope:
        return CheckpointManager(directory, strategy=strategy, model=model, optimizer=opt)
    with strategy.scope():
        return CheckpointManager(directory, strategy=strategy, model=model, optimizer=opt)


def test_custom_loop_resume_is_exact(mirrored4, tmp_path):
    """Saved by a manager made outside the strategy's scope, restored by one made inside it
    and trained on: the uninterrupted run's state, bit for bit. That state saved from inside
    the scope and restored outside it into fresh objects: the same state again (a manager
    made in either context saves and restores the other's)."""
    inp = _input(mirrored4)
    spe = inp.steps_per_epoch
    total = spe + 3  # crosses an epoch boundary; the interruption falls mid-epoch
    cut = spe + 1
    reference = _reference_state(mirrored4)

    # Interrupted after `cut` steps.
    model, opt = _model_and_optimizer(mirrored4)
    manager = _manager(mirrored4, tmp_path, model, opt, in_scope=False)
    for var in (manager._step, manager._data, manager.checkpoint.save_counter):
        assert not isinstance(var, tf.distribute.DistributedValues)
    assert manager.restore() is None
    train = _trainer(mirrored4, model, opt)
    train(inp, 0, 0, spe)
    train(inp, 1, 0, cut - spe)
    saved_position = DataPosition.from_input(inp, 1, cut - spe)
    saved_state = _state(model, opt)
    path = manager.save(saved_position, global_step=cut)
    assert path == str(tmp_path / f"ckpt-{cut}")
    del model, opt, manager, train

    # Fresh objects (the other creation context), restore, finish the run.
    model, opt = _model_and_optimizer(mirrored4)
    assert not np.array_equal(model.get_weights()[0], saved_state[0])
    manager = _manager(mirrored4, tmp_path, model, opt, in_scope=True)
    for var in (manager._step, manager._data, manager.checkpoint.save_counter):
        assert not isinstance(var, tf.distribute.DistributedValues)
    position, step = manager.restore(expected_config=input_config(_input(mirrored4)))
    assert position == saved_position and step == cut
    assert int(opt.iterations.numpy()) == cut
    _assert_same(_state(model, opt), saved_state)
    train = _trainer(mirrored4, model, opt)
    train(inp, position.epoch, position.step, total - spe)
    _assert_same(_state(model, opt), reference)

    # The in-scope manager saves; fresh objects restore through an out-of-scope one.
    final_position = DataPosition.from_input(inp, 1, total - spe)
    manager.save(final_position, global_step=total)
    del model, opt, manager, train
    model, opt = _model_and_optimizer(mirrored4)
    assert not np.array_equal(model.get_weights()[0], reference[0])
    manager = _manager(mirrored4, tmp_path, model, opt, in_scope=False)
    position, step = manager.restore(expected_config=input_config(_input(mirrored4)))
    assert position == final_position and step == total
    assert int(opt.iterations.numpy()) == total
    _assert_same(_state(model, opt), reference)


def test_fit_callback_resume_is_exact(mirrored4, tmp_path):
    inp = _input(mirrored4)
    spe = inp.steps_per_epoch
    total, every = 2 * spe + 2, spe - 1
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    model, opt = _model_and_optimizer(mirrored4)
    with mirrored4.scope():
        model.compile(opt, loss)
    model.fit(inp.epochs(0), epochs=1, steps_per_epoch=total, verbose=0, shuffle=False)
    reference = _state(model, opt)

    # Interrupted: fit stops after 2 * every steps; the callback saved at every, 2 * every.
    model, opt = _model_and_optimizer(mirrored4)
    with mirrored4.scope():
        model.compile(opt, loss)
    manager = CheckpointManager(tmp_path, strategy=mirrored4, model=model, optimizer=opt)
    cb = CheckpointCallback(manager, inp, every_n_steps=every, save_at_end=False)
    model.fit(
        inp.epochs(0), epochs=2, steps_per_epoch=every, verbose=0, shuffle=False, callbacks=[cb]
    )
    assert [Path(p).name for p in manager.checkpoints] == [f"ckpt-{every}", f"ckpt-{2 * every}"]

    model, opt = _model_and_optimizer(mirrored4)
    with mirrored4.scope():
        model.compile(opt, loss)
    manager = CheckpointManager(tmp_path, strategy=mirrored4, model=model, optimizer=opt)
    start, step = manager.restore(expected_config=input_config(inp))
    assert step == 2 * every and (start.epoch, start.step) == divmod(2 * every, spe)
    cb = CheckpointCallback(manager, inp, every_n_steps=every, start=start, global_step=step)
    model.fit(
        inp.epochs(start.epoch, start_step=start.step),
        epochs=1,
        steps_per_epoch=total - step,
        verbose=0,
        shuffle=False,
        callbacks=[cb],
    )
    _assert_same(_state(model, opt), reference)
    # save_at_end wrote the final position.
    final, final_step = manager.restore()
    assert final_step == total and (final.epoch, final.step) == divmod(total, spe)


# -- bookkeeping -------------------------------------------------------------------------------


def test_max_to_keep_and_should_save(tmp_path):
    manager = CheckpointManager(tmp_path, max_to_keep=2, layer=_dense())
    saved = [
        s for s in range(1, 12) if manager.should_save(s, 3) and manager.save(DataPosition(0, s), s)
    ]
    assert saved == [3, 6, 9]
    assert [Path(p).name for p in manager.checkpoints] == ["ckpt-6", "ckpt-9"]
    assert Path(manager.latest).name == "ckpt-9"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "checkpoint",
        "ckpt-6.data-00000-of-00001",
        "ckpt-6.index",
        "ckpt-9.data-00000-of-00001",
        "ckpt-9.index",
    ]
    # A new manager on the same directory continues the bookkeeping.
    again = CheckpointManager(tmp_path, max_to_keep=2, layer=_dense())
    assert again.restore()[1] == 9
    assert not again.should_save(9, 3) and again.should_save(12, 3)
    again.save(DataPosition(0, 12), 12)
    assert [Path(p).name for p in again.checkpoints] == ["ckpt-9", "ckpt-12"]


def test_restore_on_empty_directory_is_none(tmp_path):
    manager = CheckpointManager(tmp_path / "new", layer=_dense())
    assert manager.restore() is None and manager.latest is None and manager.checkpoints == []


def test_reserved_names_refused(tmp_path):
    with pytest.raises(ValueError, match="reserved"):
        CheckpointManager(tmp_path, step=tf.Variable(1))
    with pytest.raises(ValueError, match="nothing to checkpoint"):
        CheckpointManager(tmp_path)


# -- corruption and fallback -------------------------------------------------------------------


def _corrupt(path: str, how: str) -> None:
    data, index = _data_file(path), Path(path + ".index")
    if how == "truncate_data":
        size = data.stat().st_size
        os.truncate(data, size // 2)
        assert data.stat().st_size == size // 2
    elif how == "delete_data":
        data.unlink()
        assert not data.exists()
    elif how == "garble_index":
        raw = index.read_bytes()
        index.write_bytes(bytes(b ^ 0x5A for b in raw))
        assert index.read_bytes() != raw and len(index.read_bytes()) == len(raw)
    elif how == "flip_data_bytes":
        raw = bytearray(data.read_bytes())
        raw[len(raw) // 2 : len(raw) // 2 + 4] = bytes(
            b ^ 0xFF for b in raw[len(raw) // 2 : len(raw) // 2 + 4]
        )
        data.write_bytes(bytes(raw))
    else:  # pragma: no cover
        raise AssertionError(how)


@pytest.mark.parametrize("how", ["truncate_data", "delete_data", "garble_index", "flip_data_bytes"])
def test_corrupt_newest_falls_back_to_previous(tmp_path, how, caplog):
    manager = _save_three(tmp_path)
    newest = manager.latest
    assert Path(newest).name == "ckpt-30"
    _corrupt(newest, how)

    layer = _dense(seed=-1)
    fresh = CheckpointManager(tmp_path, layer=layer)
    with pytest.warns(
        CheckpointWarning, match=r"ckpt-30 is unreadable.*previous checkpoint .*ckpt-20"
    ):
        position, step = fresh.restore(expected_config={"batch_size": 4})
    assert step == 20 and position == DataPosition(0, 20, config={"batch_size": 4})
    np.testing.assert_array_equal(layer.kernel.numpy(), np.full((3, 2), 20, "float32"))
    assert any("ckpt-30" in r.getMessage() for r in caplog.records if r.name == "tfdp.checkpoint")


def test_all_corrupt_is_a_clear_error(tmp_path):
    manager = _save_three(tmp_path)
    paths = manager.checkpoints
    for path, how in zip(paths, ["truncate_data", "delete_data", "garble_index"], strict=True):
        _corrupt(path, how)
    layer = _dense(seed=-1)
    with pytest.warns(CheckpointWarning), pytest.raises(CheckpointError) as err:
        CheckpointManager(tmp_path, layer=layer).restore()
    message = str(err.value)
    assert "none of the 3 checkpoint(s)" in message
    for path in paths:
        assert path in message
    np.testing.assert_array_equal(layer.kernel.numpy(), np.full((3, 2), -1, "float32"))


def test_leftovers_of_a_crashed_save_are_ignored(tmp_path):
    _save_three(tmp_path)
    # What a crash mid-save can leave: a temp shard directory, a half-written next checkpoint
    # (not yet named in the state file), a temp state file, a worker temp directory.
    (tmp_path / "ckpt-40_temp").mkdir()
    (tmp_path / "ckpt-40_temp" / "part-00000-of-00001.data-00000-of-00001").write_bytes(b"\0" * 7)
    (tmp_path / "ckpt-40.data-00000-of-00001").write_bytes(b"garbage")
    (tmp_path / "checkpoint.tmp1234").write_text("garbage")
    (tmp_path / ".tfdp_tmp_worker_1").mkdir()
    layer = _dense(seed=-1)
    position, step = CheckpointManager(tmp_path, layer=layer).restore()
    assert step == 30 and position.step == 30
    np.testing.assert_array_equal(layer.kernel.numpy(), np.full((3, 2), 30, "float32"))


def test_missing_state_file_scans_the_directory(tmp_path):
    _save_three(tmp_path)
    (tmp_path / "checkpoint").unlink()
    layer = _dense(seed=-1)
    with pytest.warns(CheckpointWarning, match="state file"):
        _, step = CheckpointManager(tmp_path, layer=layer).restore()
    assert step == 30


# -- configuration mismatch --------------------------------------------------------------------


def test_config_mismatch_names_each_field(mirrored4, tmp_path):
    inp = _input(mirrored4, batch_size=4)
    manager = CheckpointManager(tmp_path, layer=_dense())
    manager.save(DataPosition.from_input(inp, 0, 2), 2)
    other = _input(tf.distribute.OneDeviceStrategy("/cpu:0"), batch_size=8)
    layer = _dense(seed=-1)
    with pytest.raises(ValueError) as err:
        CheckpointManager(tmp_path, layer=layer).restore(expected_config=input_config(other))
    message = str(err.value)
    assert "num_replicas: saved 4, now 1" in message
    assert "batch_size: saved 4, now 8" in message
    assert "same world size" in message and "new checkpoint directory" in message
    assert "sampler.seed" not in message  # equal fields are not listed
    np.testing.assert_array_equal(layer.kernel.numpy(), np.full((3, 2), -1, "float32"))  # untouched
    with pytest.raises(ValueError, match=r"sampler\.num_repeats: saved 3, now 2"):
        cfg = input_config(inp)
        cfg["sampler"]["num_repeats"] = 2
        CheckpointManager(tmp_path, layer=_dense()).restore(expected_config=cfg)
    with pytest.raises(ValueError, match="run: saved <absent>, now 'b'"):
        CheckpointManager(tmp_path, layer=_dense()).restore({**input_config(inp), "run": "b"})


def test_checkpoint_of_another_model_is_refused(tmp_path):
    _save_three(tmp_path)
    other = keras.layers.Dense(2)
    other.build((None, 5))  # kernel (5, 2) instead of (3, 2)
    with pytest.raises(ValueError, match="incompatible tensor with shape"):
        CheckpointManager(tmp_path, layer=other).restore()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # Keras repr of its variables
def test_checkpoint_without_these_objects_is_refused(tmp_path):
    _save_three(tmp_path)
    with pytest.raises(ValueError, match="does not match the objects"):
        CheckpointManager(tmp_path, renamed=_dense()).restore()


# -- unwritable directory ----------------------------------------------------------------------


def test_unwritable_directory_under_a_file(tmp_path):
    (tmp_path / "afile").write_text("x")
    target = tmp_path / "afile" / "ckpt"
    manager = CheckpointManager(target, layer=_dense())
    with pytest.raises(CheckpointError, match="not writable") as err:
        manager.check_writable()
    assert str(target) in str(err.value)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_unwritable_directory_read_only(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(CheckpointError, match="not writable") as err:
            CheckpointManager(ro / "ckpt", layer=_dense()).check_writable()
        assert str(ro / "ckpt") in str(err.value)
    finally:
        ro.chmod(0o700)


def test_writable_directory_is_created_and_left_clean(tmp_path):
    target = tmp_path / "a" / "b"
    CheckpointManager(target, layer=_dense()).check_writable()
    assert target.is_dir() and list(target.iterdir()) == []


# -- multi-worker --------------------------------------------------------------------------------


def test_roles_from_cluster_resolvers():
    SimpleClusterResolver = tf.distribute.cluster_resolver.SimpleClusterResolver  # noqa: N806

    two = tf.train.ClusterSpec({"worker": ["a:1", "b:1"]})
    with_chief = tf.train.ClusterSpec({"chief": ["c:1"], "worker": ["a:1", "b:1"]})
    assert _role(None) == (True, None, None)
    assert _role(SimpleClusterResolver(two, task_type="worker", task_id=0))[0]
    assert not _role(SimpleClusterResolver(two, task_type="worker", task_id=1))[0]
    assert _role(SimpleClusterResolver(with_chief, task_type="chief", task_id=0))[0]
    assert not _role(SimpleClusterResolver(with_chief, task_type="worker", task_id=0))[0]
    assert not _role(SimpleClusterResolver(with_chief, task_type="evaluator", task_id=0))[0]


def test_non_chief_from_tf_config_leaves_nothing(tmp_path, monkeypatch):
    cluster = {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}
    monkeypatch.setenv(
        "TF_CONFIG", json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 1}})
    )
    directory = tmp_path / "ckpt"
    manager = CheckpointManager(directory, layer=_dense())  # no strategy: TF_CONFIG decides
    assert not manager.is_chief and manager.write_directory != str(directory)
    manager.check_writable()
    assert manager.save(DataPosition(0, 1), 1) == str(directory / "ckpt-1")
    assert list(directory.iterdir()) == [] and manager.restore() is None


# Under MultiWorkerMirroredStrategy only the chief writes, and fresh processes restore:
# tests/test_multiworker.py (its save runs in the pair of worker processes of the other
# MultiWorkerMirroredStrategy checks).


# -- the state file, leftovers and what was restored (issue 10) --------------------------------


def _state_bytes(how: str, directory: Path) -> bytes:
    if how == "empty":
        return b""
    if how == "binary":
        return bytes(range(256)) * 4
    # "stale": names checkpoints that are gone (a state file from an older copy of the run)
    return b'model_checkpoint_path: "ckpt-90"\nall_model_checkpoint_paths: "ckpt-90"\n'


@pytest.mark.parametrize("how", ["empty", "binary", "stale"])
def test_damaged_state_file_falls_back_to_the_checkpoints_on_disk(tmp_path, how):
    _save_three(tmp_path)
    state = tmp_path / "checkpoint"
    state.write_bytes(_state_bytes(how, tmp_path))
    layer = _dense(seed=-1)
    with pytest.warns(CheckpointWarning):
        manager = CheckpointManager(tmp_path, layer=layer)  # the chief: TF's manager reads it
        _position, step = manager.restore()
    assert step == 30 and manager.restored == str(tmp_path / "ckpt-30")
    np.testing.assert_array_equal(layer.kernel.numpy(), np.full((3, 2), 30, "float32"))
    # The damaged state file is kept (set aside or still there), never silently lost.
    kept = [p for p in tmp_path.iterdir() if p.name.startswith("checkpoint")]
    assert any(p.read_bytes() == _state_bytes(how, tmp_path) for p in kept)
    manager.save(DataPosition(0, 40, config={"batch_size": 4}), global_step=40)
    assert Path(CheckpointManager(tmp_path, layer=_dense()).latest).name == "ckpt-40"


@pytest.mark.parametrize("how", ["empty", "binary", "stale"])
def test_a_reader_falls_back_past_a_damaged_state_file_writing_nothing(tmp_path, how):
    """What `tfdp evaluate` does (a read_only manager, partial restore): the newest readable
    checkpoint, and the directory byte for byte as it was (test_reliability evaluates a run)."""
    _save_three(tmp_path)
    (tmp_path / "checkpoint").write_bytes(_state_bytes(how, tmp_path))
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    layer = _dense(seed=-1)
    reader = CheckpointManager(tmp_path, layer=layer, read_only=True)
    with pytest.warns(CheckpointWarning):
        assert reader.restore(partial=True)[1] == 30
    assert reader.restored == str(tmp_path / "ckpt-30")
    np.testing.assert_array_equal(layer.kernel.numpy(), np.full((3, 2), 30, "float32"))
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_restored_names_the_checkpoint_actually_restored(tmp_path):
    manager = _save_three(tmp_path)
    _corrupt(manager.latest, "truncate_data")
    fresh = CheckpointManager(tmp_path, layer=_dense(seed=-1))
    with pytest.warns(CheckpointWarning):
        fresh.restore()
    assert fresh.restored == str(tmp_path / "ckpt-20") != fresh.latest


def test_complete_checkpoint_missing_from_the_state_file_is_used(tmp_path):
    """A save killed after writing ckpt-40 but before updating the state file loses nothing."""
    manager = _save_three(tmp_path)
    state = (tmp_path / "checkpoint").read_bytes()
    manager.checkpoint.layer.kernel.assign(np.full((3, 2), 40, "float32"))
    manager.save(DataPosition(0, 40, config={"batch_size": 4}), global_step=40)
    (tmp_path / "checkpoint").write_bytes(state)  # as if the update never happened
    layer = _dense(seed=-1)
    fresh = CheckpointManager(tmp_path, layer=layer)
    assert Path(fresh.latest).name == "ckpt-30"
    with pytest.warns(CheckpointWarning, match="ckpt-40.*newer than what its state file lists"):
        _, step = fresh.restore()
    assert step == 40 and Path(fresh.restored).name == "ckpt-40"
    np.testing.assert_array_equal(layer.kernel.numpy(), np.full((3, 2), 40, "float32"))


def test_leftover_temp_folders_are_removed_by_the_writer_only(tmp_path):
    _save_three(tmp_path)
    (tmp_path / "ckpt-40_temp").mkdir()  # empty: killed after the merge
    (tmp_path / "ckpt-50_temp").mkdir()  # with a partial shard: killed before the merge
    (tmp_path / "ckpt-50_temp" / "part-00000-of-00001.index").write_bytes(b"\0" * 9)
    (tmp_path / "notes_temp").mkdir()  # not ours: kept
    (tmp_path / "checkpoint").write_bytes(b"")  # and an unreadable state file
    before = sorted(p.name for p in tmp_path.iterdir())
    reader = CheckpointManager(tmp_path, layer=_dense(seed=-1), read_only=True)
    with pytest.warns(CheckpointWarning, match="state file"):
        assert reader.restore()[1] == 30  # a reader (tfdp evaluate) writes nothing
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    with pytest.raises(CheckpointError, match="read_only"):
        reader.save(DataPosition(0, 40), 40)
    removed = remove_interrupted_saves(str(tmp_path))
    assert sorted(Path(p).name for p in removed) == ["ckpt-40_temp", "ckpt-50_temp"]
    names = sorted(p.name for p in tmp_path.iterdir())
    assert "ckpt-40_temp" not in names and "ckpt-50_temp" not in names and "notes_temp" in names


def test_partial_restore_of_a_checkpoint_holding_more(tmp_path, recwarn):
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    opt = keras.optimizers.Adam()
    opt.build(model.trainable_variables)
    CheckpointManager(tmp_path, model=model, optimizer=opt).save(DataPosition(0, 1), 1)
    other = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    manager = CheckpointManager(tmp_path, model=other)
    assert manager.restore(partial=True)[1] == 1
    np.testing.assert_array_equal(other.get_weights()[0], model.get_weights()[0])
