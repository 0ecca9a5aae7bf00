"""Divergence: a non-finite loss or gradient is never applied and never saved (issue 10, item 1).

Faults are injected as data (one example with a NaN feature) or as a learning rate of 1e30;
each test asserts that the fault really happened (the step it names is the first whose batch
holds the NaN example; the saved weights really make the next loss non-finite).
"""

from __future__ import annotations

import gc
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from reference import epoch_batches, optimizer_steps
from tfdp import ArraySource, DistributedInput
from tfdp._compat.fast.process import wait_for_releases
from tfdp.checkpoint import CheckpointManager, DataPosition, NonFiniteCheckpointError
from tfdp.train import NonFiniteError, Trainer, fit

N = 48
X = np.random.default_rng(4).normal(size=(N, 6)).astype(np.float32)
Y = (X[:, 0] > 0).astype(np.int64)
LOSS = "sparse_categorical_crossentropy_from_logits"


def _poisoned(strategy) -> tuple[DistributedInput, int]:
    """The input with one NaN feature: in the example rank 1 reads first in epoch 0's step 5."""
    poisoned = int(epoch_batches(_input(strategy, (X, Y)), 0)[4][1][0])
    x = X.copy()
    x[poisoned, 2] = np.nan
    return _input(strategy, (x, Y)), poisoned


def _model(activation: str = "tanh") -> keras.Model:
    keras.utils.set_random_seed(3)
    return keras.Sequential(
        [keras.Input((6,)), keras.layers.Dense(4, activation), keras.layers.Dense(2)]
    )


def _input(strategy, data, **kw) -> DistributedInput:
    kw.setdefault("batch_size", 3)
    return DistributedInput(strategy, ArraySource(data), seed=1, **kw)


def _trainer(strategy, run_dir=None, **kw) -> Trainer:
    kw.setdefault("progress", False)
    kw.setdefault("verbose", 0)
    return Trainer(
        strategy, _model, lambda: keras.optimizers.Adam(0.05), LOSS, run_dir=run_dir, **kw
    )


def _poisoned_steps(inp: DistributedInput, poisoned: int, epochs: int, k: int = 1) -> list[int]:
    """Global optimizer steps (1-based) whose batches hold the poisoned example."""
    out, g = [], 0
    for e in range(epochs):
        for step in optimizer_steps(epoch_batches(inp, e), k):
            g += 1
            if any(poisoned in ids for micro in step for ids in micro):
                out.append(g)
    return out


def _finite_checkpoint(path: str) -> None:
    reader = tf.train.load_checkpoint(path)
    for name, dtype in reader.get_variable_to_dtype_map().items():
        if dtype.is_floating:
            assert np.isfinite(reader.get_tensor(name)).all(), name


def _iterators() -> list[tf.distribute.DistributedIterator]:
    return [o for o in gc.get_objects() if isinstance(o, tf.distribute.DistributedIterator)]


def _step_of(path: str) -> int:
    return int(path.rsplit("-", 1)[1])


@pytest.fixture(scope="module")
def clean_weights(mirrored_of):
    """The weights after the 4 steps before the poisoned one, trained on the clean data (one
    step per call: calls of several steps train bit-identically, tests/test_train.py)."""
    tf.config.experimental.enable_op_determinism()
    strategy = mirrored_of(2)
    clean = _trainer(strategy)
    clean.fit(_input(strategy, (X, Y)), 2, max_steps=4)
    return [w.numpy() for w in clean.model.weights]


@pytest.mark.parametrize("steps_per_call", [1, 3])
@pytest.mark.xdist_group("nonfinite_clean_weights")  # its module fixture runs once
def test_trainer_stops_at_the_nonfinite_step_without_applying_or_saving_it(
    mirrored_of, tmp_path, steps_per_call, clean_weights
):
    tf.config.experimental.enable_op_determinism()
    strategy = mirrored_of(2)
    inp, poisoned = _poisoned(strategy)
    bad = _poisoned_steps(inp, poisoned, 2)[0]
    assert bad == 5  # some good steps and a checkpoint come first
    tr = _trainer(strategy, tmp_path / "run", checkpoint_every=2, steps_per_call=steps_per_call)
    before = {id(o) for o in _iterators()}
    with pytest.raises(NonFiniteError) as info:
        tr.fit(inp, 2)
    # The kept exception holds fit's frames, not its input stream: that iterator is gone,
    # with no garbage collection, once fit's release of it is done (on tfdp's release thread).
    wait_for_releases()
    assert [o for o in _iterators() if id(o) not in before] == []
    err = info.value
    assert err.global_step == bad and err.what in ("loss", "gradient")  # the poisoned step
    assert f"optimizer step {bad} " in str(err) and "not applied" in str(err)
    assert tr.state.global_step == bad - 1 and tr.state.stop_reason == "nonfinite"
    latest = tf.train.latest_checkpoint(str(tmp_path / "run" / "checkpoints"))
    assert _step_of(latest) == (bad - 1) // 2 * 2  # nothing saved at or after the bad step
    _finite_checkpoint(latest)
    # The weights are those after step bad - 1, bit for bit: the bad update was not applied.
    for a, b in zip(tr.model.weights, clean_weights, strict=True):
        np.testing.assert_array_equal(a.numpy(), b)


def test_trainer_skip_policy_skips_exactly_the_nonfinite_steps(mirrored_of, tmp_path):
    strategy = mirrored_of(2)
    inp, poisoned = _poisoned(strategy)
    expected = _poisoned_steps(inp, poisoned, 2)
    # Clipping: the check is of the reduced gradient's global norm (computed anyway).
    tr = _trainer(
        strategy, tmp_path / "run", on_nonfinite="skip", steps_per_call=2, clip_global_norm=1.0
    )
    tr.fit(inp, 2)
    records = tr.state.history
    assert tr.state.skipped_steps == len(expected) == 2  # once per epoch
    assert [r.get("skipped_steps") for r in records] == [1, 1]
    assert all(np.isfinite(r["loss"]) for r in records)  # metrics leave skipped steps out
    assert all(np.isfinite(w.numpy()).all() for w in tr.model.weights)
    _finite_checkpoint(tf.train.latest_checkpoint(str(tmp_path / "run" / "checkpoints")))
    # "ignore": the NaN reaches the weights, and the save refuses to write them.
    careless = _trainer(strategy, tmp_path / "careless", on_nonfinite="ignore")
    with pytest.raises(NonFiniteCheckpointError, match="NaN or infinite"):
        careless.fit(inp, 1)
    assert not np.isfinite(careless.model.weights[0].numpy()).all()
    assert tf.train.latest_checkpoint(str(tmp_path / "careless" / "checkpoints")) is None


def test_mixed_float16_stops_on_a_nonfinite_loss(mirrored_of):
    """Under mixed_float16 the loss scaler owns gradient overflow; a NaN loss still stops."""
    strategy = mirrored_of(2)
    inp, poisoned = _poisoned(strategy)
    try:
        tr = _trainer(strategy, mixed_precision="mixed_float16")
        with pytest.raises(NonFiniteError) as info:
            tr.fit(inp, 1)
    finally:
        keras.mixed_precision.set_dtype_policy("float32")
    assert info.value.global_step == _poisoned_steps(inp, poisoned, 1)[0]
    assert info.value.what == "loss"


def test_huge_learning_rate_is_stopped_and_the_saved_weights_are_finite(mirrored_of, tmp_path):
    strategy = mirrored_of(2)
    inp = _input(strategy, (X, Y))
    tr = Trainer(
        strategy,
        lambda: _model("relu"),  # unbounded activations: huge weights overflow the logits
        lambda: keras.optimizers.SGD(1e30),
        LOSS,
        run_dir=tmp_path,
        checkpoint_every=1,
        progress=False,
        verbose=0,
    )
    with pytest.raises(NonFiniteError) as info:
        tr.fit(inp, 1)
    step = info.value.global_step
    latest = tf.train.latest_checkpoint(str(tmp_path / "checkpoints"))
    assert _step_of(latest) == step - 1
    _finite_checkpoint(latest)
    # The fault really happened: from the saved (finite) weights, the loss of the next batch is
    # not finite.
    model = _model("relu")
    tf.train.Checkpoint(model=model).restore(latest).expect_partial()
    ids = np.concatenate(optimizer_steps(epoch_batches(inp, 0), 1)[step - 1][0])
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(Y[ids], model(X[ids]))
    assert not np.isfinite(float(loss))


def test_checkpoint_manager_refuses_nonfinite_variables(tmp_path):
    model = _model()
    manager = CheckpointManager(tmp_path, model=model)
    manager.save(DataPosition(0, 1), 1)
    kernel = model.layers[0].kernel
    kernel.assign(tf.tensor_scatter_nd_update(kernel, [[0, 1]], [np.inf]))
    with pytest.raises(NonFiniteCheckpointError) as info:
        manager.save(DataPosition(0, 2), 2)
    assert kernel.path in str(info.value) and "ckpt-1" in str(info.value)
    assert manager.latest.endswith("ckpt-1") and not os.path.exists(f"{tmp_path}/ckpt-2.index")


def _compiled(strategy) -> keras.Model:
    with strategy.scope():
        model = _model()
        model.compile(
            keras.optimizers.Adam(0.05),
            keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
    return model


def test_fit_path_stops_before_the_checkpoint_of_the_nonfinite_step(mirrored_of, tmp_path):
    tf.config.experimental.enable_op_determinism()
    strategy = mirrored_of(2)
    inp, poisoned = _poisoned(strategy)
    bad = _poisoned_steps(inp, poisoned, 2)[0]
    model = _compiled(strategy)
    with pytest.raises(NonFiniteError) as info:
        fit(model, inp, 2, run_dir=tmp_path, checkpoint_every=1, verbose=0)
    assert info.value.global_step == bad and info.value.what == "gradient"
    latest = tf.train.latest_checkpoint(str(tmp_path / "checkpoints"))
    assert _step_of(latest) == bad - 1
    _finite_checkpoint(latest)
    assert int(model.optimizer.iterations.numpy()) == bad - 1  # not applied
    clean = _compiled(strategy)
    fit(clean, _input(strategy, (X, Y)), 2, max_steps=bad - 1, verbose=0)
    for a, b in zip(model.weights, clean.weights, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    # The optimizer is the user's own again after fit.
    assert "apply_gradients" not in vars(model.optimizer)
    skipping = _compiled(strategy)
    fit(skipping, inp, 2, verbose=0, on_nonfinite="skip")
    assert int(skipping.optimizer.iterations.numpy()) == 2 * inp.steps_per_epoch - 2
    assert all(np.isfinite(w.numpy()).all() for w in skipping.weights)


def test_fit_path_stops_at_a_nonfinite_loss_with_finite_gradients(mirrored_of):
    """The loss alone is NaN (an added loss, no gradient): fit stops at that very step."""
    strategy = mirrored_of(2)
    _, poisoned = _poisoned(strategy)
    x = X.copy()
    x[poisoned, 5] = np.nan  # read only by the added loss
    inp = _input(strategy, (x, Y))
    bad = _poisoned_steps(inp, poisoned, 1)[0]

    class Probe(keras.layers.Layer):
        def call(self, inputs):
            self.add_loss(tf.stop_gradient(tf.reduce_sum(inputs[:, 5])) * 0.0)  # NaN there
            return inputs[:, :5]

    with strategy.scope():
        keras.utils.set_random_seed(3)
        model = keras.Sequential([keras.Input((6,)), Probe(), keras.layers.Dense(2)])
        model.compile(
            keras.optimizers.SGD(0.1),
            keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
    with pytest.raises(NonFiniteError) as info:
        fit(model, inp, 1, verbose=0)
    err = info.value
    assert (err.global_step, err.what) == (bad, "loss") and "was applied" in str(err)
    assert int(model.optimizer.iterations.numpy()) == bad  # finite gradients: applied
    assert "train_step" not in vars(model) and "apply_gradients" not in vars(model.optimizer)


def test_fit_path_leaves_a_custom_train_step_with_optimizer_apply_alone(mirrored_of):
    """The guard wraps apply_gradients only; a train step updating through optimizer.apply
    trains exactly as under a plain model.fit (Keras still all-reduces its gradients)."""
    strategy = mirrored_of(2)

    class Custom(keras.Model):
        def train_step(self, data):
            x, y = data
            with tf.GradientTape() as tape:
                loss = self.compute_loss(x=x, y=y, y_pred=self(x, training=True))
            grads = tape.gradient(loss, self.trainable_variables)
            self.optimizer.apply(grads, self.trainable_variables)
            return {"loss": loss}

    def compiled() -> keras.Model:
        with strategy.scope():
            keras.utils.set_random_seed(3)
            inputs = keras.Input((6,))
            model = Custom(inputs, keras.layers.Dense(2)(keras.layers.Dense(4, "tanh")(inputs)))
            model.compile(
                keras.optimizers.SGD(0.1),
                keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            )
        return model

    inp = _input(strategy, (X, Y))
    ours, plain = compiled(), compiled()
    fit(ours, inp, 1, verbose=0)
    plain.fit(inp.epochs(0, 1), epochs=1, steps_per_epoch=inp.steps_per_epoch, verbose=0)
    for a, b in zip(ours.weights, plain.weights, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


# Two workers agree on the non-finite step: tests/test_multiworker.py (one pair of worker
# processes runs it with the other MultiWorkerMirroredStrategy checks).


def _tfdp_train(capsys, *args: str) -> tuple[int, str]:
    """``tfdp train ...`` in this process (on its 4 logical CPUs): the exit code and stderr.

    In-process: the CLI's own points here are its exit codes and messages, and a process of
    its own would import TensorFlow again (the refusals come before or at a step, and a
    stopped run leaves no strategy scope entered: tests/conftest.py checks).
    """
    from tfdp.cli import main

    capsys.readouterr()
    code = main(["train", *args])
    return code, capsys.readouterr().err


FAST = [
    "--epochs",
    "2",
    "--steps-per-call",
    "3",
    "--no-progress",
    "--model",
    "cnn",
    "--batch-size",
    "32",
    "--replicas",
    "4",  # the logical CPUs of this process (tests/conftest.py)
    "--deterministic",
]


def test_cli_huge_learning_rate_exits_nonzero_naming_the_step(tmp_path, capsys):
    run = tmp_path / "run"
    code, stderr = _tfdp_train(
        capsys,
        *FAST,
        "--lr",
        "1e30",
        "--optimizer",
        "sgd",
        "--schedule",
        "constant",
        "--checkpoint-every",
        "1",
        "--run-dir",
        str(run),
    )
    assert code == 3, stderr[-2000:]
    line = [x for x in stderr.splitlines() if "non-finite" in x]
    assert line and "optimizer step" in line[0], stderr[-2000:]
    step = int(line[0].split("optimizer step ")[1].split()[0])
    latest = tf.train.latest_checkpoint(str(run / "checkpoints"))
    assert _step_of(latest) == step - 1  # the last good step, saved finite
    _finite_checkpoint(latest)
    weights = tf.train.load_checkpoint(latest)
    largest = max(
        np.abs(weights.get_tensor(n)).max()
        for n, d in weights.get_variable_to_dtype_map().items()
        if d.is_floating and "trainable_variables" in n
    )
    assert largest > 1e20  # the fault really happened: lr 1e30 blew the weights up


def test_cli_refuses_a_nan_pixel_before_training(tmp_path, capsys):
    """Since issue 10 the data layer checks pixels: a NaN one is named before any step runs.

    (The step that reads a non-finite value is named by the Trainer: the tests above.)
    """
    from tfdp import DistributedSampler

    rng = np.random.default_rng(0)
    images = rng.random((64, 8, 8, 1)).astype(np.float32)
    labels = np.arange(64) % 3
    np.savez(tmp_path / "held.npz", images=images[:16], labels=labels[:16])
    nan_at = int(DistributedSampler(64, 4, 1, seed=0).indices()[4 * 2])
    images[nan_at, 4, 4, 0] = np.nan
    np.savez(tmp_path / "data.npz", images=images, labels=labels)
    run = tmp_path / "run"
    code, stderr = _tfdp_train(
        capsys,
        *FAST,
        "--batch-size",
        "8",
        "--data",
        str(tmp_path / "data.npz"),
        "--eval-data",
        str(tmp_path / "held.npz"),
        "--run-dir",
        str(run),
    )
    assert code == 2, stderr[-2000:]  # bad input
    assert f"1 pixel value(s) are NaN or infinite (in example(s) {nan_at})" in stderr
    assert "Traceback" not in stderr
    assert tf.train.latest_checkpoint(str(run / "checkpoints")) is None
