"""A float64 model trains and evaluates in float64 on both paths; the types tfdp cannot train
are refused by name (tfdp/train/dtypes.py), on a real 2-replica MirroredStrategy."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from reference import Reference, epoch_batches
from tfdp import ArraySource, DistributedInput
from tfdp.errors import ConfigError
from tfdp.train import Trainer, fit

RNG = np.random.default_rng(7)
X = RNG.normal(size=(24, 5))  # float64
Y = (np.arange(24) * 5) % 3
HELD_X, HELD_Y = RNG.normal(size=(7, 5)), np.arange(7) % 3
LOSS = "sparse_categorical_crossentropy_from_logits"
LR = 0.5


def model64() -> keras.Model:
    keras.utils.set_random_seed(4)
    return keras.Sequential(
        [
            keras.Input((5,), dtype="float64"),
            keras.layers.Dense(6, activation="tanh", dtype="float64"),
            keras.layers.Dense(3, dtype="float64"),
        ]
    )


def loss64() -> keras.losses.Loss:
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True, dtype="float64")


def plain_cross_entropy(model: keras.Model, x: np.ndarray, y: np.ndarray) -> float:
    """The mean cross-entropy over a whole set, in float64 NumPy."""
    logits = np.asarray(model(x, training=False), np.float64)
    top = logits.max(axis=1, keepdims=True)
    log_z = top[:, 0] + np.log(np.exp(logits - top).sum(axis=1))
    return float(np.mean(log_z - logits[np.arange(len(y)), y]))


def test_a_float64_model_trains_and_evaluates_in_float64_on_both_paths(mirrored_of):
    """The Trainer (calls of 3 steps) and the fit path equal a plain float64 GradientTape
    loop step by step to 1e-12 -- loss, gradient norm, weights -- so the loss, its reduction
    and the all-reduce are float64's (in float32 they differ by ~1e-8); the exact evaluation
    of both paths is a float64 mean over the held-out set. ~10 CPU-s."""
    strategy = mirrored_of(2)
    inp = DistributedInput(strategy, ArraySource((X, Y)), batch_size=3)  # 4 steps an epoch
    held_out = DistributedInput(
        strategy, ArraySource((HELD_X, HELD_Y)), sampler="eval", batch_size=2
    )
    model = model64()
    per_example = keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction="none", dtype="float64"
    )
    fetch = lambda ids: (X[ids], Y[ids], None)  # noqa: E731
    ref = Reference(model, keras.optimizers.SGD(LR), per_example, fetch, 1e9, dtype="float64")
    want_losses, want_norms = [], []
    for epoch in range(2):
        for step in epoch_batches(inp, epoch):
            want_losses.append(ref.step([step]))
            want_norms.append(ref.norm)

    trainer = Trainer(
        strategy,
        model64,
        lambda: keras.optimizers.SGD(LR),
        LOSS,  # a named loss: built in the model's type
        steps_per_call=3,
        clip_global_norm=1e9,  # never clips; the step reports the norm
        progress=False,
        verbose=0,
    )
    losses, norms = [], []

    def on_step(state) -> None:
        losses.extend(state.step_losses)
        norms.extend(state.outputs.scalars["grad_norm"].tolist())

    history = trainer.fit(inp, 2, eval_input=held_out, on_step=on_step)
    assert trainer.state.outputs.loss.dtype == np.float64
    np.testing.assert_allclose(losses, want_losses, rtol=0, atol=1e-12)
    np.testing.assert_allclose(norms, want_norms, rtol=1e-12)
    for a, b in zip(trainer.model.weights, model.weights, strict=True):
        assert a.dtype == "float64"
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=0, atol=1e-12)

    with strategy.scope():
        compiled = model64()
        compiled.compile(keras.optimizers.SGD(LR), loss64())
    fit_history = fit(compiled, inp, 2, eval_input=held_out, verbose=0)
    for a, b in zip(compiled.weights, model.weights, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=0, atol=1e-12)

    want = plain_cross_entropy(model, HELD_X, HELD_Y)
    assert history.history["val_loss"][-1] == pytest.approx(want, abs=1e-12)
    assert fit_history.history["val_loss"][-1] == pytest.approx(want, abs=1e-12)
    # The comparison can fail: the same model's loss computed in float32 is ~1e-8 away.
    low = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(HELD_Y, model(HELD_X))
    assert abs(float(low) - want) > 1e-12


def test_types_tfdp_cannot_train_are_refused_naming_them(mirrored_of):
    """float16 variables (no loss scaling), an integer prediction and a float64 one a float32
    loss function cannot take, and on the fit path a float64 model whose compiled loss computes
    in float32: each a ConfigError naming the type. ~4 CPU-s."""
    strategy = mirrored_of(2)

    def half() -> keras.Model:
        return keras.Sequential(
            [keras.Input((5,), dtype="float16"), keras.layers.Dense(3, dtype="float16")]
        )

    with pytest.raises(ConfigError, match=r"variable .*kernel is float16: .*mixed_float16") as e:
        Trainer(strategy, half, lambda: keras.optimizers.SGD(LR), LOSS)
    assert e.value.argument == "model"
    with strategy.scope():
        compiled = half()
        compiled.compile(keras.optimizers.SGD(LR), loss64())
    inp = DistributedInput(strategy, ArraySource((X, Y)), batch_size=3)
    with pytest.raises(ConfigError, match=r"is float16"):
        fit(compiled, inp, 1, verbose=0)

    def rounded() -> keras.Model:  # float variables, an int32 output
        inputs = keras.Input((5,))
        logits = keras.layers.Dense(3)(inputs)
        return keras.Model(inputs, keras.layers.Lambda(lambda t: tf.cast(t, "int32"))(logits))

    trainer = Trainer(
        strategy, rounded, lambda: keras.optimizers.SGD(LR), LOSS, progress=False, verbose=0
    )
    with pytest.raises(ConfigError, match=r"the model's prediction is int32: a loss takes"):
        trainer.fit(
            DistributedInput(strategy, ArraySource((X.astype("float32"), Y)), batch_size=3), 1
        )

    def float32_only(y_true, y_pred):  # a float32 constant: cannot take a float64 prediction
        return tf.reduce_sum(tf.square(y_pred - tf.constant(1.0)), axis=-1)

    trainer = Trainer(
        strategy, model64, lambda: keras.optimizers.SGD(LR), float32_only, progress=False, verbose=0
    )
    with pytest.raises(ConfigError, match=r"loss: 'float32_only' failed on the model's float64"):
        trainer.fit(inp, 1)

    with strategy.scope():
        compiled = model64()
        compiled.compile(keras.optimizers.SGD(LR), "sparse_categorical_crossentropy")
    with pytest.raises(ConfigError, match=r"computes in float32 but its variables are float64"):
        fit(compiled, inp, 1, verbose=0)
