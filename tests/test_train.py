"""The Trainer and the fit path on a real 4-replica MirroredStrategy, against references."""

from __future__ import annotations

import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from reference import Reference, epoch_batches, optimizer_steps
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


def reference_loop(inp, epochs, lr=0.1, clip=None, l2=0.0, accumulate=1):
    """A plain single-device GradientTape loop over the same global batches (tests/reference.py)."""
    model = make_model(l2)
    lf = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    ref = Reference(model, keras.optimizers.SGD(lr), lf, lambda ids: (X[ids], Y[ids], None), clip)
    losses = [
        ref.step(step)
        for epoch in range(epochs)
        for step in optimizer_steps(epoch_batches(inp, epoch), accumulate)
    ]
    return model, losses


def trainer(strategy, **kw):
    kw.setdefault("progress", False)
    kw.setdefault("verbose", 0)
    l2 = kw.pop("l2", 0.0)
    loss = kw.pop("loss", LOSS)
    return Trainer(strategy, lambda: make_model(l2), lambda: keras.optimizers.SGD(0.1), loss, **kw)


@pytest.mark.parametrize(
    ("replicas", "sampler", "options", "kwargs"),
    [
        (4, "distributed", {}, {}),  # 4 replicas: the collective all-reduce
        # 2 replicas (reduced through one device) where the option, not the count, is the point
        (2, "distributed", {}, {"accumulation_steps": 3, "steps_per_call": 2}),  # 16 = 5 * 3 + 1
    ],
)
def test_trainer_equals_single_device_loop(mirrored_of, replicas, sampler, options, kwargs):
    """The Trainer's weights and step losses are a plain single-device loop's (1e-5).

    Clipping, an L2 regulariser, Repeated Augmentation and accumulation of 2, each on several
    replicas, are the differential test's named cases (tests/test_differential.py:
    ``tfrecord-block-shuffle-weights-accumulation-clip-skip``,
    ``l2-eval-padded-3-replicas-calls-of-3-resume-in-place``), against the same reference."""
    strategy = mirrored_of(replicas)
    inp = DistributedInput(  # a global batch of 16: 16 batches per epoch
        strategy,
        ArraySource((X, Y)),
        sampler=sampler,
        sampler_options=options,
        batch_size=16 // replicas,
    )
    l2 = kwargs.get("l2", 0.0)
    tr = trainer(strategy, **kwargs)
    tr_losses = []
    tr.fit(inp, 2, on_step=lambda st: tr_losses.extend(st.step_losses))
    ref, ref_losses = reference_loop(
        inp,
        2,
        clip=kwargs.get("clip_global_norm"),
        l2=l2,
        accumulate=kwargs.get("accumulation_steps", 1),
    )
    for a, b in zip(tr.model.weights, ref.weights, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-5)
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


def test_steps_per_call_and_a_mean_reduced_loss_train_bit_identically(mirrored_of):
    """Calls of 5 steps (16 = 3 * 5 + 1) train bit-identically to calls of one; a loss as
    model.compile takes it (mean-reduced) trains exactly as the reduction='none' one, and not
    divided by the replica count as Keras's mean reduction would be (the reference)."""
    strategy = mirrored_of(2)
    inp = DistributedInput(strategy, ArraySource((X, Y)), batch_size=8)  # 16 steps
    alias = trainer(strategy)
    mean = trainer(
        strategy,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        steps_per_call=5,
    )
    alias.fit(inp, 1)
    mean.fit(inp, 1)
    for a, b in zip(alias.model.weights, mean.model.weights, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    ref, _ = reference_loop(inp, 1)
    for a, b in zip(mean.model.weights, ref.weights, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-5)
    with pytest.raises(ValueError, match="reduction='sum'"):
        trainer(strategy, loss=keras.losses.MeanSquaredError(reduction="sum"))


def test_evaluation_reads_its_input_to_the_end(mirrored4):
    """An evaluation reads one past its steps, to the input's end: a multi-device iterator
    dropped while a replica still fetches "the end" cancels that fetch, and TensorFlow logged
    "Local rendezvous is aborting with status: CANCELLED" (4 evaluations in 100 on 2 CPU
    replicas, at random; none in 200 since). Read to the end, an input that held more than its
    steps would be caught: here one whose step count is one short."""
    from tfdp.train.evaluate import Evaluator, per_example_loss

    with mirrored4.scope():
        model = make_model()
    evaluator = Evaluator(mirrored4, model, per_example_loss(LOSS), [])
    inp = DistributedInput(mirrored4, ArraySource((X[:101], Y[:101])), sampler="eval", batch_size=4)
    assert evaluator.evaluate(inp)["loss"] > 0
    inp.steps_per_epoch -= 1  # the dataset still holds one more batch per replica
    with pytest.raises(RuntimeError, match="more than its steps_per_epoch=6 batches"):
        evaluator.evaluate(inp)


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
    r1 = evaluate(one, m1, DistributedInput(one, src, sampler="eval", batch_size=n), LOSS, metrics)
    for bs in (1, 7):  # 101 = 4 * 25 + 1 and 4 * 28 - 11: 3 and 11 padding rows
        r4 = evaluate(
            mirrored4,
            m4,
            DistributedInput(mirrored4, src, sampler="eval", batch_size=bs),
            LOSS,
            metrics,
        )
        for key in r1:
            assert abs(r4[key] - r1[key]) < 1e-6, (bs, key, r4, r1)
    # and both equal a NumPy computation over the whole set
    logits = model(X[:n]).numpy()
    acc = float(np.mean(np.argmax(logits, 1) == Y[:n]))
    assert abs(r1["sparse_categorical_accuracy"] - acc) < 1e-6


def test_mixed_precision_and_xla_train(mirrored_of):
    strategy = mirrored_of(2)
    inp = DistributedInput(strategy, ArraySource((X, Y)), batch_size=16)
    try:
        for policy in ("mixed_float16", "mixed_bfloat16"):
            tr = trainer(strategy, mixed_precision=policy, clip_global_norm=1.0)
            assert tr.model.layers[0].compute_dtype == policy.split("_")[1]
            # the policy was Keras's global one only while the model was built
            assert keras.config.dtype_policy().name == "float32"
            loss = tr.fit(inp, 2).history["loss"]
            assert np.isfinite(loss[-1]) and loss[-1] < loss[0] + 0.05
    finally:
        keras.mixed_precision.set_dtype_policy("float32")
    tr = trainer(strategy, jit_compile=True)
    assert np.isfinite(tr.fit(inp, 1).history["loss"][0])


# The fit path's order (each replica's ids, step by step), weights and held-out metrics, against
# the same reference as the Trainer's: tests/test_differential.py's fit-path cases.


# -- bad input ------------------------------------------------------------------------------------


def test_model_built_outside_scope(mirrored4):
    outside = make_model()
    with pytest.raises(ValueError, match=r"outside strategy\.scope"):
        Trainer(mirrored4, outside, keras.optimizers.SGD(0.1), LOSS)


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


def test_a_trainer_of_parts_trains_as_the_constructor_and_refuses_a_part_of_the_wrong_kind(
    mirrored_of,
):
    """Trainer.from_parts with the parts the constructor builds trains to the same weights, with
    the options that live in the parts (log_every cuts the calls) honoured; a part that does not
    meet its Protocol is named."""
    from tfdp.errors import ConfigError
    from tfdp.train.assemble import default_parts

    strategy = mirrored_of(2)
    inp = DistributedInput(strategy, ArraySource((X, Y)), batch_size=16)  # 8 steps per epoch
    built = trainer(strategy, steps_per_call=4, log_every=3)
    parts = default_parts(
        strategy,
        make_model,
        lambda: keras.optimizers.SGD(0.1),
        LOSS,
        log_every=3,
        progress=False,
        verbose=0,
    )
    composed = Trainer.from_parts(parts, steps_per_call=4)
    sizes = {"built": [], "composed": []}
    for name, tr in (("built", built), ("composed", composed)):
        tr.fit(inp, 1, on_step=lambda st, name=name: sizes[name].append(len(st.step_losses)))
    assert sizes["built"] == sizes["composed"] == [3, 3, 2]  # calls of 4 cut to land on step 3k
    for a, b in zip(built.model.weights, composed.model.weights, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert composed.model is parts.step.model and composed.optimizer is parts.step.optimizer
    parts.logs = object()
    with pytest.raises(ConfigError, match=r"^logs: must meet tfdp\.train\.parts\.RunLog") as err:
        Trainer.from_parts(parts)
    assert err.value.argument == "logs"


# -- checkpoints and exact resume -----------------------------------------------------------------


def _image_input(strategy, return_ids=False, batch_size=4):
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
        batch_size=batch_size,
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
        checkpoint_every=3,  # one step per call: each fresh Trainer traces its step once
        progress=False,
        verbose=0,
        record_samples=record,
    )


def _records(path):
    import json

    return [json.loads(line) for line in open(path)]


def test_trainer_exact_mid_epoch_resume(mirrored_of, tmp_path):
    """A stop in the middle of epoch 1 (epoch 0's line and checkpoint written), resumed by fresh
    objects: bit-identical weights and optimizer state, exactly the samples of the uninterrupted
    run, the resumed epoch's metrics line covering all its steps (the metrics of the steps before
    the stop survive), one line per epoch and none twice, the resumed fit's history holding only
    the epoch it ran. A resume with another input configuration is refused, the run left intact.
    2 replicas: a Trainer traces its steps per replica (the 4-replica collective path is in
    test_trainer_equals_single_device_loop; resumes onto 4 replicas are in test_elastic)."""
    tf.config.experimental.enable_op_determinism()
    strategy = mirrored_of(2)
    inp = _image_input(strategy, return_ids=True, batch_size=8)
    spe = inp.steps_per_epoch
    assert spe == 7
    full = _cnn_trainer(strategy, tmp_path / "full", tmp_path / "full.jsonl")
    full.fit(inp, 2)
    assert full.state.epoch == 2 and not full.state.stopped_early

    first = _cnn_trainer(strategy, tmp_path / "cut", tmp_path / "cut.jsonl")
    first.fit(inp, 2, max_steps=spe + 2)  # a stop in the middle of epoch 1
    assert first.state.stopped_early and (first.state.epoch, first.state.step) == (1, 2)
    # the stop really happened: the newest checkpoint is at global step 9, mid-epoch
    assert tf.train.latest_checkpoint(str(tmp_path / "cut" / "checkpoints")).endswith("ckpt-9")
    other = DistributedInput(
        strategy,
        inp.source,
        sampler="repeat_aug",
        sampler_options={"selected_round": 0},
        batch_size=4,
        seed=5,
    )
    with pytest.raises(ValueError, match="batch_size: saved 8, now 4"):
        _cnn_trainer(strategy, tmp_path / "cut").fit(other, 2)
    second = _cnn_trainer(strategy, tmp_path / "cut", tmp_path / "cut.jsonl")
    assert any(  # before resuming, the fresh model differs from the stopped one
        not np.array_equal(a.numpy(), b.numpy())
        for a, b in zip(first.model.weights, second.model.weights, strict=True)
    )
    assert second.fit(inp, 2).epoch == [1]
    assert [r["epoch"] for r in second.state.history] == [1]
    assert second.state.global_step == full.state.global_step
    for a, b in zip(full.model.weights, second.model.weights, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())  # bit-identical
    for a, b in zip(full.optimizer.variables, second.optimizer.variables, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # ... and the resumed run consumed exactly the samples of the uninterrupted one
    assert _records(tmp_path / "cut.jsonl") == _records(tmp_path / "full.jsonl")
    lines = [r for r in _records(tmp_path / "full.jsonl") if r["epoch"] == 0 and r["step"] == 0]
    assert [r["rank"] for r in lines] == [0, 1]
    s = inp.sampler.with_rank(1)
    assert lines[1]["ids"] == s.indices(0, 8).tolist()
    # logs: one metrics.jsonl line per epoch, none twice, the resumed one over all its steps
    want, got = (
        _lines(tmp_path / "full" / "metrics.jsonl"),
        _lines(tmp_path / "cut" / "metrics.jsonl"),
    )
    assert [r["global_step"] for r in got] == [spe, 2 * spe]
    assert "sparse_categorical_accuracy" in got[1]
    for a, b in zip(want, got, strict=True):
        assert a.keys() == b.keys()
        for key in a:
            assert a[key] == pytest.approx(b[key], rel=1e-6), key
    assert list((tmp_path / "full" / "tensorboard" / "train").glob("events.out.tfevents.*"))


def test_unwritable_run_dir_fails_before_the_first_step(mirrored4, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    tr = _cnn_trainer(mirrored4, blocker / "run")
    with pytest.raises(Exception, match="file"):
        tr.fit(_image_input(mirrored4), 1)
    assert tr.state.global_step == 0


def test_fit_path_exact_mid_epoch_resume(mirrored_of, tmp_path):
    """2 replicas: a fit traces its step per replica (the 4-replica Trainer case is above)."""
    tf.config.experimental.enable_op_determinism()
    strategy = mirrored_of(2)
    inp = _image_input(strategy, batch_size=8)  # 7 steps per epoch

    def compiled():
        with strategy.scope():
            model = _cnn()
            model.compile(
                keras.optimizers.Adam(1e-2),
                keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            )
        return model

    full = compiled()
    fit(full, inp, 2, run_dir=tmp_path / "full", checkpoint_every=3, verbose=0)
    cut = compiled()
    fit(cut, inp, 2, run_dir=tmp_path / "cut", checkpoint_every=3, max_steps=5, verbose=0)
    assert tf.train.latest_checkpoint(str(tmp_path / "cut" / "checkpoints")).endswith("ckpt-5")
    resumed = compiled()
    fit(resumed, inp, 2, run_dir=tmp_path / "cut", checkpoint_every=3, verbose=0)
    for a, b in zip(full.weights, resumed.weights, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


# -- exactness on every path (issue 9) ----------------------------------------------------------

LN2 = float(np.log(2.0))


def _zero_model() -> keras.Model:
    """Logits 0 for every input: each example's loss is ln 2 (with SGD(0.0), forever)."""
    return keras.Sequential([keras.Input((8,)), keras.layers.Dense(2, kernel_initializer="zeros")])


def _frozen_trainer(strategy, **kw):
    return Trainer(
        strategy,
        _zero_model,
        lambda: keras.optimizers.SGD(0.0),
        LOSS,
        progress=False,
        verbose=0,
        **kw,
    )


def _step_losses(tr, inp, epochs) -> list[float]:
    losses: list[float] = []
    # One step per call: last_loss is the step's loss.
    tr.fit(inp, epochs, on_step=lambda state: losses.append(state.last_loss))
    return losses


def test_partial_last_batch_is_its_own_mean(mirrored_of):
    strategy = mirrored_of(2)
    # 20 examples, 2 replicas, batch 4: 10 per rank in batches of 4, 4, 2.
    partial = DistributedInput(
        strategy, ArraySource((X[:20], Y[:20])), batch_size=4, drop_remainder=False
    )
    losses = _step_losses(_frozen_trainer(strategy), partial, 1)
    np.testing.assert_allclose(losses, [LN2] * 3, rtol=1e-6)  # not 0.347 for the last


def test_second_fit_follows_its_input(mirrored_of):
    """Another global batch size, then ids in the elements: the steps follow the input."""
    strategy = mirrored_of(2)
    tr = _frozen_trainer(strategy)
    small = DistributedInput(strategy, ArraySource((X[:16], Y[:16])), batch_size=4)
    np.testing.assert_allclose(_step_losses(tr, small, 1), [LN2] * 2, rtol=1e-6)
    bigger = DistributedInput(strategy, ArraySource((X[:32], Y[:32])), batch_size=8)
    np.testing.assert_allclose(_step_losses(tr, bigger, 2), [LN2] * 2, rtol=1e-6)  # not 1.386
    with_ids = DistributedInput(
        strategy, ArraySource((X[:32], Y[:32])), batch_size=8, return_ids=True
    )
    np.testing.assert_allclose(_step_losses(tr, with_ids, 3), [LN2] * 2, rtol=1e-6)


def test_zero_weight_rows_add_nothing_and_count(mirrored_of):
    """Rows of weight 0 (evaluation padding) add 0 to the sum and count in the mean."""
    strategy = mirrored_of(2)
    padded = DistributedInput(strategy, ArraySource((X[:21], Y[:21])), sampler="eval", batch_size=4)
    losses = _step_losses(_frozen_trainer(strategy), padded, 1)
    masks = [padded.sampler.with_rank(r).mask() for r in range(2)]
    real = [sum(int(m[4 * s : 4 * s + 4].sum()) for m in masks) for s in range(3)]
    assert real == [8, 8, 5]
    np.testing.assert_allclose(losses, [LN2 * n / 8 for n in real], rtol=1e-6)


def test_accumulation_epoch_is_the_sampler_epoch_and_resume_is_bit_identical(mirrored_of, tmp_path):
    """5 batches per epoch, accumulation 2: steps of 2, 2 and 1 batches; resume at an epoch's end
    and before a shorter step."""
    tf.config.experimental.enable_op_determinism()
    strategy = mirrored_of(2)
    inp = DistributedInput(strategy, ArraySource((X[:40], Y[:40])), batch_size=4, return_ids=True)
    assert inp.steps_per_epoch == 5

    def run(name, **fit_kw):
        tr = trainer(
            strategy,
            accumulation_steps=2,
            run_dir=tmp_path / name,
            record_samples=tmp_path / f"{name}.jsonl",
        )
        tr.fit(inp, 3, **fit_kw)
        return tr

    full = run("full")
    assert full.state.global_step == 9 and not full.state.stopped_early
    expected = [
        {"epoch": e, "step": i, "rank": r, "ids": ids.tolist(), "micro_batch": m}
        for e in range(3)
        for i, step in enumerate(optimizer_steps(epoch_batches(inp, e), 2))
        for m, micro in enumerate(step)
        for r, ids in enumerate(micro)
    ]
    assert _records(tmp_path / "full.jsonl") == expected  # loop epoch e = sampler epoch e
    # One run stopped twice: at the end of epoch 0, then before the last, shorter step of
    # epoch 1; each stop resumed by fresh objects.
    for stop in (3, 5):
        cut = run("cut", max_steps=stop)
        assert cut.state.global_step == stop and cut.state.stopped_early
    resumed = run("cut")
    assert resumed.state.global_step == 9
    for a, b in zip(full.model.weights, resumed.model.weights, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert _records(tmp_path / "cut.jsonl") == expected


def test_a_fit_that_runs_to_its_end_is_not_stopped_early_by_an_earlier_fit(mirrored_of):
    """``state.stopped_early`` / ``stop_reason`` describe the latest fit, not an earlier one."""

    class StopAtOnce(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            self.model.stop_training = True

    strategy = mirrored_of(2)
    inp = DistributedInput(strategy, ArraySource((X[:32], Y[:32])), batch_size=8)  # 2 steps
    tr = trainer(strategy)
    tr.fit(inp, 2, callbacks=[StopAtOnce()])
    assert tr.state.stopped_early and tr.state.stop_reason == "callback"
    assert tr.state.global_step == 1
    tr.fit(inp, 2)  # the same trainer goes on, to the end
    assert tr.state.global_step == 4
    assert not tr.state.stopped_early and tr.state.stop_reason is None


def test_mid_epoch_stop_adds_no_history_and_fit_resume_honours_max_steps(mirrored_of, tmp_path):
    strategy = mirrored_of(2)  # 2 replicas: every fit traces its step once per replica
    inp = DistributedInput(strategy, ArraySource((X[:128], Y[:128])), batch_size=8)  # 8 steps
    tr = trainer(strategy)
    hist = tr.fit(inp, 2, max_steps=5)
    assert hist.history == {} and hist.epoch == [] and tr.state.history == []

    def compiled():
        with strategy.scope():
            model = make_model()
            model.compile(
                keras.optimizers.SGD(0.1),
                keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            )
        return model

    first = compiled()
    hist = fit(first, inp, 2, run_dir=tmp_path, max_steps=5, verbose=0).history
    assert hist and all(v == [] for v in hist.values())  # no entry for the partial epoch
    again = compiled()
    fit(again, inp, 2, run_dir=tmp_path, max_steps=5, verbose=0)  # already at max_steps
    assert tf.train.latest_checkpoint(str(tmp_path / "checkpoints")).endswith("ckpt-5")
    assert int(again.optimizer.iterations.numpy()) == 5  # restored, and not one step more
    for a, b in zip(first.weights, again.weights, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    hist = fit(again, inp, 2, run_dir=tmp_path, max_steps=8, verbose=0)  # to the epoch's end
    assert len(hist.history["loss"]) == 1 and hist.epoch == [0]
    assert int(again.optimizer.iterations.numpy()) == 8


# -- logs after a resume (issue 10, item 9) ----------------------------------------------------

_TIMING = ("time", "samples_per_s")


def _lines(path) -> list[dict]:
    return [
        {k: v for k, v in r.items() if k not in _TIMING}
        for r in (json.loads(x) for x in open(path).read().splitlines())
    ]


def _log_fault(run_dir, fault: str, reference_dir=None):
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).parent / "workers" / "log_fault.py"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    reference = [] if reference_dir is None else [str(reference_dir)]
    return subprocess.run(
        [sys.executable, str(script), str(run_dir), fault, *reference],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )


def test_a_kill_at_an_epoch_end_neither_loses_nor_duplicates_a_line(tmp_path):
    """SIGKILL between epoch 1's line and its checkpoint; the resumed run SIGKILLed right after
    epoch 2's checkpoint; resumed again, it ends as an uninterrupted run (three processes: the
    last also trains the uninterrupted run, by fresh objects, after its resume)."""
    run, clean = tmp_path / "run", tmp_path / "clean"
    killed = _log_fault(run, "after_log")
    assert killed.returncode == -9 and "FAULT SIGKILL" in killed.stdout  # the kill happened
    assert [r["epoch"] for r in _lines(run / "metrics.jsonl")] == [0]  # the line is there
    killed = _log_fault(run, "after_save")  # resumes mid-epoch 1, whose line it has
    assert killed.returncode == -9 and "FAULT SIGKILL" in killed.stdout, killed.stderr[-2000:]
    assert [r["epoch"] for r in _lines(run / "metrics.jsonl")] == [0, 1]  # not 0 twice
    resumed = _log_fault(run, "none", reference_dir=clean)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    digests = json.loads(resumed.stdout.split("RESULT ")[1])
    assert digests["weights"] == digests["reference"]  # the same final weights
    want, got = _lines(clean / "metrics.jsonl"), _lines(run / "metrics.jsonl")
    assert [r["epoch"] for r in want] == [0, 1, 2]
    assert [r["epoch"] for r in got] == [0, 1, 2]  # no line lost, none twice
    for a, b in zip(want, got, strict=True):
        assert a.keys() == b.keys()
        for key in a:
            assert a[key] == pytest.approx(b[key], rel=1e-6), key
