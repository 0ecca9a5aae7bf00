"""The Trainer and the fit path on a real 4-replica MirroredStrategy, against references."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfdp import ArraySource, DistributedInput
from tfdp.train import Trainer, evaluate, fit

N = 256
RNG = np.random.default_rng(0)
X = RNG.normal(size=(N, 8)).astype("float32")
Y = (X[:, 0] + 0.3 * X[:, 1] > 0).astype("int64")
LOSS = "sparse_categorical_crossentropy_from_logits"
DROPOUT = 0.2


def make_model(l2: float = 0.0) -> keras.Model:
    keras.utils.set_random_seed(1)
    reg = keras.regularizers.L2(l2) if l2 else None
    return keras.Sequential(
        [
            keras.Input((8,)),
            keras.layers.Dense(16, activation="relu", kernel_regularizer=reg),
            keras.layers.Dense(2),
        ]
    )


def rank_order(inp: DistributedInput, epoch: int) -> list[np.ndarray]:
    out = []
    for r in range(inp.num_replicas):
        s = inp.sampler.with_rank(r)
        s.set_epoch(epoch)
        out.append(s.indices())
    return out


def reference_loop(inp, epochs, lr=0.1, clip=None, l2=0.0, accumulate=1):
    """A plain single-device GradientTape loop over the same global batches."""
    model = make_model(l2)
    opt = keras.optimizers.SGD(lr)
    lf = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    b = inp.batch_size
    losses = []
    for epoch in range(epochs):
        order = rank_order(inp, epoch)
        for step in range(inp.steps_per_epoch // accumulate):
            grads_sum, step_loss = None, 0.0
            for micro in range(accumulate):
                k = step * accumulate + micro
                idx = np.concatenate([o[k * b : (k + 1) * b] for o in order])
                with tf.GradientTape() as tape:
                    loss = lf(Y[idx], model(X[idx])) / accumulate
                    if model.losses:
                        loss += tf.add_n(model.losses) / accumulate
                grads = tape.gradient(loss, model.trainable_variables)
                step_loss += float(loss)
                grads_sum = (
                    grads
                    if grads_sum is None
                    else [a + g for a, g in zip(grads_sum, grads, strict=True)]
                )
            if clip:
                grads_sum, _ = tf.clip_by_global_norm(grads_sum, clip)
            opt.apply_gradients(zip(grads_sum, model.trainable_variables, strict=True))
            losses.append(step_loss)
    return model, losses


def trainer(strategy, **kw):
    kw.setdefault("progress", False)
    kw.setdefault("verbose", 0)
    l2 = kw.pop("l2", 0.0)
    loss = kw.pop("loss", LOSS)
    return Trainer(strategy, lambda: make_model(l2), lambda: keras.optimizers.SGD(0.1), loss, **kw)


@pytest.mark.parametrize(
    ("sampler", "options", "kwargs"),
    [
        ("distributed", {}, {}),
        ("repeat_aug", {"selected_round": 0}, {"clip_global_norm": 0.5}),
        ("distributed", {}, {"l2": 0.01, "steps_per_call": 3}),
        ("distributed", {}, {"accumulation_steps": 2}),
    ],
)
def test_trainer_equals_single_device_loop(mirrored4, sampler, options, kwargs):
    inp = DistributedInput(
        mirrored4, ArraySource((X, Y)), sampler=sampler, sampler_options=options, batch_size=4
    )
    l2 = kwargs.get("l2", 0.0)
    tr = trainer(mirrored4, **kwargs)
    losses = []
    tr_losses = losses if kwargs.get("steps_per_call", 1) == 1 else None
    tr.fit(inp, 2, on_step=lambda st: losses.append(st.last_loss))
    ref, ref_losses = reference_loop(
        inp,
        2,
        clip=kwargs.get("clip_global_norm"),
        l2=l2,
        accumulate=kwargs.get("accumulation_steps", 1),
    )
    for a, b in zip(tr.model.weights, ref.weights, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-5)
    if tr_losses is not None:
        assert len(tr_losses) == len(ref_losses)
        np.testing.assert_allclose(tr_losses, ref_losses, atol=1e-5)
    # Weights really moved: the comparison is not between two untrained models.
    assert (
        max(
            np.abs(a.numpy() - b.numpy()).max()
            for a, b in zip(tr.model.weights, make_model(l2).weights, strict=True)
        )
        > 1e-2
    )


def test_steps_per_call_bit_identical(mirrored4):
    inp = DistributedInput(mirrored4, ArraySource((X, Y)), batch_size=4)
    a, b = trainer(mirrored4), trainer(mirrored4, steps_per_call=5)
    a.fit(inp, 1)
    b.fit(inp, 1)
    for u, v in zip(a.model.weights, b.model.weights, strict=True):
        np.testing.assert_array_equal(u.numpy(), v.numpy())


def test_exact_evaluation_prime_size(mirrored4):
    n = 101  # prime
    one = tf.distribute.OneDeviceStrategy("/cpu:0")
    model = make_model()
    metrics = ["sparse_categorical_accuracy"]
    src = ArraySource((X[:n], Y[:n]))
    with mirrored4.scope():
        m4 = make_model()
    m4.set_weights(model.get_weights())
    with one.scope():
        m1 = make_model()
    m1.set_weights(model.get_weights())
    for bs in (1, 4, 7):
        r4 = evaluate(
            mirrored4,
            m4,
            DistributedInput(mirrored4, src, sampler="eval", batch_size=bs),
            LOSS,
            metrics,
        )
        r1 = evaluate(
            one, m1, DistributedInput(one, src, sampler="eval", batch_size=n), LOSS, metrics
        )
        for key in r1:
            assert abs(r4[key] - r1[key]) < 1e-6, (bs, key, r4, r1)
    # and both equal a NumPy computation over the whole set
    logits = model(X[:n]).numpy()
    acc = float(np.mean(np.argmax(logits, 1) == Y[:n]))
    assert abs(r1["sparse_categorical_accuracy"] - acc) < 1e-6


def test_mixed_precision_and_xla_train(mirrored4):
    inp = DistributedInput(mirrored4, ArraySource((X, Y)), batch_size=8)
    try:
        for policy in ("mixed_float16", "mixed_bfloat16"):
            tr = trainer(mirrored4, mixed_precision=policy, clip_global_norm=1.0)
            assert tr.model.layers[0].compute_dtype == policy.split("_")[1]
            rec = tr.fit(inp, 2)
            assert np.isfinite(rec[-1]["loss"]) and rec[-1]["loss"] < rec[0]["loss"] + 0.05
    finally:
        keras.mixed_precision.set_dtype_policy("float32")
    tr = trainer(mirrored4, jit_compile=True)
    rec = tr.fit(inp, 1)
    assert np.isfinite(rec[0]["loss"])


def test_fit_path_sees_the_same_order_as_the_trainer(mirrored4):
    inp = DistributedInput(
        mirrored4,
        ArraySource((X, Y)),
        sampler="repeat_aug",
        sampler_options={"selected_round": 0},
        batch_size=4,
    )
    ev = DistributedInput(mirrored4, ArraySource((X[:101], Y[:101])), sampler="eval", batch_size=4)
    tr = trainer(mirrored4, metrics=["sparse_categorical_accuracy"])
    tr.fit(inp, 2, eval_input=ev)
    with mirrored4.scope():
        model = make_model()
        model.compile(
            keras.optimizers.SGD(0.1),
            keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["sparse_categorical_accuracy"],
        )
    hist = fit(model, inp, 2, eval_input=ev, verbose=0)
    # SGD is order-sensitive: equal weights after two reshuffled epochs mean equal sample order.
    for a, b in zip(tr.model.weights, model.weights, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-6)
    last = tr.state.history[-1]
    assert abs(hist["val_loss"][-1] - last["val_loss"]) < 1e-6
    assert (
        abs(hist["val_sparse_categorical_accuracy"][-1] - last["val_sparse_categorical_accuracy"])
        < 1e-6
    )


# -- bad input ------------------------------------------------------------------------------------


def test_model_built_outside_scope(mirrored4):
    outside = make_model()
    with pytest.raises(ValueError, match=r"outside strategy\.scope"):
        Trainer(mirrored4, outside, keras.optimizers.SGD(0.1), LOSS)


def test_mean_reduced_loss_refused(mirrored4):
    with pytest.raises(ValueError, match="reduction='none'"):
        trainer(mirrored4, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))


def test_optimizer_clipnorm_refused(mirrored4):
    with pytest.raises(ValueError, match="clip_global_norm"):
        Trainer(mirrored4, make_model, lambda: keras.optimizers.SGD(0.1, global_clipnorm=1.0), LOSS)


def test_fit_refuses_steps_per_execution(mirrored4):
    inp = DistributedInput(mirrored4, ArraySource((X, Y)), batch_size=4)
    with mirrored4.scope():
        model = make_model()
        model.compile(
            "sgd",
            keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            steps_per_execution=4,
        )
    with pytest.raises(ValueError, match="steps_per_execution"):
        fit(model, inp, 1, verbose=0)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"steps_per_call": 0}, "steps_per_call"),
        ({"accumulation_steps": 0}, "accumulation_steps"),
        ({"mixed_precision": "fp8"}, "mixed_precision"),
        ({"clip_global_norm": -1.0}, "clip_global_norm"),
    ],
)
def test_bad_numbers(mirrored4, kw, match):
    with pytest.raises(ValueError, match=match):
        trainer(mirrored4, **kw)


# -- checkpoints and exact resume -----------------------------------------------------------------


def _image_input(strategy, return_ids=False):
    from tfdp.augment import Compose, RandomCrop, RandomFlip, ToFloat

    rng = np.random.default_rng(3)
    images = rng.integers(0, 255, size=(120, 8, 8, 3), dtype=np.uint8)
    labels = (images[:, :4].mean(axis=(1, 2, 3)) > images[:, 4:].mean(axis=(1, 2, 3))).astype(
        "int64"
    )
    return DistributedInput(
        strategy,
        ArraySource((images, labels)),
        sampler="repeat_aug",
        sampler_options={"selected_round": 0},
        batch_size=4,
        seed=5,
        return_ids=return_ids,
        augment=Compose([RandomCrop(8, padding=2), RandomFlip(), ToFloat()]),
    )


def _cnn():
    keras.utils.set_random_seed(2)
    return keras.Sequential(
        [
            keras.Input((8, 8, 3)),
            keras.layers.Conv2D(4, 3, activation="relu"),
            keras.layers.Dropout(DROPOUT),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(2),
        ]
    )


def _cnn_trainer(strategy, run_dir, record=None):
    return Trainer(
        strategy,
        _cnn,
        lambda: keras.optimizers.Adam(1e-2),
        LOSS,
        metrics=["sparse_categorical_accuracy"],
        run_dir=run_dir,
        checkpoint_every=3,
        steps_per_call=2,
        progress=False,
        verbose=0,
        record_samples=record,
    )


def _records(path):
    import json

    return [json.loads(line) for line in open(path)]


def test_trainer_exact_mid_epoch_resume(mirrored4, tmp_path):
    tf.config.experimental.enable_op_determinism()
    inp = _image_input(mirrored4, return_ids=True)
    full = _cnn_trainer(mirrored4, tmp_path / "full", tmp_path / "full.jsonl")
    full.fit(inp, 2)
    assert full.state.epoch == 2 and not full.state.stopped_early

    first = _cnn_trainer(mirrored4, tmp_path / "cut", tmp_path / "cut.jsonl")
    first.fit(inp, 2, max_steps=5)  # a stop in the middle of epoch 0
    assert first.state.stopped_early and (first.state.epoch, first.state.step) == (0, 5)
    assert inp.steps_per_epoch > 5
    # the stop really happened: the newest checkpoint is at global step 5, mid-epoch
    assert tf.train.latest_checkpoint(str(tmp_path / "cut" / "checkpoints")).endswith("ckpt-5")
    second = _cnn_trainer(mirrored4, tmp_path / "cut", tmp_path / "cut.jsonl")
    assert any(  # before resuming, the fresh model differs from the stopped one
        not np.array_equal(a.numpy(), b.numpy())
        for a, b in zip(first.model.weights, second.model.weights, strict=True)
    )
    second.fit(inp, 2)
    assert second.state.global_step == full.state.global_step
    for a, b in zip(full.model.weights, second.model.weights, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())  # bit-identical
    for a, b in zip(full.optimizer.variables, second.optimizer.variables, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # ... and the resumed run consumed exactly the samples of the uninterrupted one
    assert _records(tmp_path / "cut.jsonl") == _records(tmp_path / "full.jsonl")
    lines = [r for r in _records(tmp_path / "full.jsonl") if r["epoch"] == 0 and r["step"] == 0]
    assert [r["rank"] for r in lines] == [0, 1, 2, 3]
    s = inp.sampler.with_rank(2)
    assert lines[2]["ids"] == s.indices(0, 4).tolist()
    # logs: one metrics.jsonl line per epoch, TensorBoard events
    assert len(_records(tmp_path / "full" / "metrics.jsonl")) == 2
    assert list((tmp_path / "full" / "tensorboard").glob("events.out.tfevents.*"))


def test_resume_with_another_configuration_is_refused(mirrored4, tmp_path):
    inp = _image_input(mirrored4)
    _cnn_trainer(mirrored4, tmp_path / "run").fit(inp, 1, max_steps=3)
    other = DistributedInput(
        mirrored4,
        inp.source,
        sampler="repeat_aug",
        sampler_options={"selected_round": 0},
        batch_size=2,
        seed=5,
    )
    with pytest.raises(ValueError, match="batch_size: saved 4, now 2"):
        _cnn_trainer(mirrored4, tmp_path / "run").fit(other, 1)


def test_unwritable_run_dir_fails_before_the_first_step(mirrored4, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    tr = _cnn_trainer(mirrored4, blocker / "run")
    with pytest.raises(Exception, match="file"):
        tr.fit(_image_input(mirrored4), 1)
    assert tr.state.global_step == 0


def test_fit_path_exact_mid_epoch_resume(mirrored4, tmp_path):
    tf.config.experimental.enable_op_determinism()
    inp = _image_input(mirrored4)

    def compiled():
        with mirrored4.scope():
            model = _cnn()
            model.compile(
                keras.optimizers.Adam(1e-2),
                keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            )
        return model

    full = compiled()
    fit(full, inp, 2, run_dir=tmp_path / "full", checkpoint_every=3, verbose=0)
    cut = compiled()
    fit(cut, inp, 2, run_dir=tmp_path / "cut", checkpoint_every=3, max_steps=7, verbose=0)
    assert tf.train.latest_checkpoint(str(tmp_path / "cut" / "checkpoints")).endswith("ckpt-7")
    resumed = compiled()
    fit(resumed, inp, 2, run_dir=tmp_path / "cut", checkpoint_every=3, verbose=0)
    for a, b in zip(full.weights, resumed.weights, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
