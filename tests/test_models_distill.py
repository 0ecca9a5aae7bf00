"""DeiT's distillation in tfdp: the loss against DeiT's own (torch), the Distiller, ClassHead.

DeiT's ``DistillationLoss`` runs verbatim (tests/deit_losses.py) in a process of its own
(tests/timm_models_side.py); tfdp's per-example loss is the recipe's (``training_loss``), so
the base criteria are the job's own (cross-entropy, label smoothing, Mixup's soft targets).
"""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
import keras  # noqa: E402

import timm_ref  # noqa: E402
from tfdp import ArraySource, DistributedInput  # noqa: E402
from tfdp.checkpoint import keras_trackables  # noqa: E402
from tfdp.errors import ConfigError  # noqa: E402
from tfdp.models import ClassHead, Distiller, ViTSpec, vision_transformer  # noqa: E402
from tfdp.recipe.config import TrainConfig  # noqa: E402
from tfdp.recipe.model import training_loss  # noqa: E402

B, K = 6, 5
SETTINGS = [("soft", 0.5, 1.0), ("soft", 0.9, 2.0), ("soft", 0.0, 0.5), ("soft", 1.0, 3.0),
            ("hard", 0.5, 1.0), ("hard", 0.1, 1.0), ("hard", 1.0, 1.0)]  # fmt: skip
BASES = {"ce": {}, "smooth": {"smoothing": 0.1}, "soft": {"mixup": 0.8, "smoothing": 0.1}}


def _config(kind, alpha, tau, **base):
    return TrainConfig(model="deit_tiny_distilled_patch16_224", teacher_model="t.keras",
                       distillation_type=kind, distillation_alpha=alpha, distillation_tau=tau,
                       **base)  # fmt: skip


def _logits(seed):
    rng = np.random.default_rng(seed)
    pred = (rng.normal(size=(B, 3, K)) * 2).astype(np.float32)
    labels = rng.integers(0, K, size=B)
    soft = rng.dirichlet(np.ones(K), size=B).astype(np.float32)
    return pred, labels, soft


def test_the_loss_is_deits_distillation_loss_and_its_mean_over_replicas():
    """Each base criterion x soft / hard x alpha x tau: the batch mean of tfdp's per-example loss
    is DeiT's DistillationLoss of that batch (outputs = class head, outputs_kd = distillation
    head, the teacher's logits); and over 2 replicas of 3 rows, tfdp's sum / global batch (what
    compute_average_loss all-reduces) is the mean of the replicas' DeiT losses, as DDP's."""
    cases, ours = [], []
    for i, (base, extra) in enumerate(BASES.items()):
        for j, (kind, alpha, tau) in enumerate(SETTINGS):
            pred, labels, soft = _logits(10 * i + j)
            y = soft if base == "soft" else labels
            per = training_loss(_config(kind, alpha, tau, **extra), K)(y, pred).numpy()
            assert per.shape == (B,)
            ours.append(per)
            for rows in (slice(0, B), slice(0, 3), slice(3, B)):
                cases.append({"base": base, "smoothing": extra.get("smoothing", 0.0),
                              "outputs": pred[rows, 0], "outputs_kd": pred[rows, 1],
                              "teacher": pred[rows, 2], "labels": y[rows], "kind": kind,
                              "alpha": alpha, "tau": tau})  # fmt: skip
    deit = np.array(timm_ref.call("deit_losses", cases, side="timm_models_side")).reshape(-1, 3)
    for per, (whole, first, second) in zip(ours, deit, strict=True):
        np.testing.assert_allclose(per.mean(), whole, rtol=2e-6, atol=1e-7)
        replicas = tf.nn.compute_average_loss(per[:3], global_batch_size=B) + (
            tf.nn.compute_average_loss(per[3:], global_batch_size=B)
        )
        np.testing.assert_allclose(float(replicas), (first + second) / 2, rtol=2e-6, atol=1e-7)


def _student(drop_path=0.0):
    keras.utils.set_random_seed(1)
    spec = ViTSpec("student", width=16, depth=2, heads=2, distilled=True)
    return vision_transformer(spec, (16, 16, 3), K, drop_path=drop_path, seed=5)


def _teacher(classes=K):
    keras.utils.set_random_seed(2)
    return keras.Sequential(
        [keras.Input((16, 16, 3)), keras.layers.Flatten(), keras.layers.Dropout(0.9),
         keras.layers.Dense(classes, name="teacher_dense")], name="teacher",
    )  # fmt: skip


def test_the_distiller_stacks_heads_and_a_frozen_teacher_and_infers_the_heads_average(tmp_path):
    student, teacher = _student(drop_path=0.3), _teacher()
    model = Distiller(student, teacher)
    x = np.random.default_rng(0).normal(size=(4, 16, 16, 3)).astype(np.float32)
    with tf.GradientTape(persistent=True) as tape:
        pred = model(x, training=True)
        loss = tf.reduce_sum(pred)
    assert pred.shape == (4, 3, K)
    # the teacher ran in inference mode (its dropout of 0.9 off), on the same images
    np.testing.assert_allclose(pred[:, 2], teacher(x, training=False), rtol=1e-6)
    assert all(g is None for g in tape.gradient(loss, teacher.trainable_variables))
    assert all(g is not None for g in tape.gradient(loss, model.trainable_variables))
    owned = {id(v) for v in model.variables}
    assert not any(id(v) in owned for v in teacher.variables)  # neither trained nor saved
    # inference: the student's, its two heads averaged
    heads = student.get_layer("heads")
    tokens = keras.Model(student.input, student.get_layer("norm").output)(x)
    cls, dist = heads.head(tokens[:, 0]), heads.head_dist(tokens[:, 1])
    np.testing.assert_allclose(model(x), (cls + dist) / 2, rtol=1e-5, atol=1e-6)
    # checkpoints: the student and its drop paths' counters, no teacher
    states = keras_trackables(model, keras.optimizers.SGD())["rng_states"]
    assert len(states) == 2  # block 1's two drop paths
    path = tf.train.Checkpoint(model=model, rng_states=states).write(str(tmp_path / "c"))
    keys = [k for k, _ in tf.train.list_variables(path)]
    assert any("student" in k for k in keys) and not any("teacher" in k for k in keys)
    # saving saves the student: its output the heads' average
    model.save(tmp_path / "m.keras")
    from tfdp.models import load_model

    saved = load_model(tmp_path / "m.keras")
    assert saved.name == "student" and saved.output_shape == (None, K)
    np.testing.assert_allclose(saved(x), model(x), rtol=1e-6)


def test_the_distiller_refuses_what_it_cannot_train():
    with pytest.raises(ConfigError, match=r"^student: 'tiny' has no distillation head") as err:
        Distiller(vision_transformer(ViTSpec("tiny", 16, 1, 2), (16, 16, 3), K), _teacher())
    assert err.value.argument == "student"
    with pytest.raises(ConfigError, match=r"^teacher: 'teacher' outputs \(None, 3\), the student "
                                          r"5 classes") as err:  # fmt: skip
        Distiller(_student(), _teacher(3))
    assert err.value.argument == "teacher"
    with pytest.raises(ConfigError, match=r"^model: 'student_distiller' is a Distiller: train it "
                                          r"with tfdp.train.Trainer"):  # fmt: skip
        Distiller(_student(), _teacher()).compile("sgd", "mse")


def test_class_head_metrics_read_the_class_head_and_clone():
    pred, labels, _ = _logits(0)
    metric = ClassHead(keras.metrics.SparseCategoricalAccuracy())
    metric.update_state(labels, pred)
    plain = keras.metrics.SparseCategoricalAccuracy()
    plain.update_state(labels, pred[:, 0])
    assert metric.name == "sparse_categorical_accuracy" and float(metric.result()) == float(
        plain.result()
    )
    clone = type(metric).from_config(metric.get_config())  # what the Evaluator does
    clone.update_state(labels, pred[:, 1])  # an inference [B, K] is read as it is
    check = keras.metrics.SparseCategoricalAccuracy()
    check.update_state(labels, pred[:, 1])
    assert float(clone.result()) == float(check.result())


def test_a_trainer_step_is_the_mean_of_deits_loss_over_the_global_batch(mirrored_of):
    """The Trainer's custom loop on 2 replicas (each its own half of the batch, its own teacher
    call): the step's loss is the mean of the per-example DeiT loss over the whole batch,
    computed here on one device; the weights are those the loop trained (lr 0: unchanged)."""
    strategy = mirrored_of(2)
    rng = np.random.default_rng(4)
    x = rng.normal(size=(8, 16, 16, 3)).astype(np.float32)
    y = rng.integers(0, K, size=8)
    cfg = _config("soft", 0.7, 2.0)
    from tfdp.train import Trainer

    trainer = Trainer(
        strategy,
        lambda: Distiller(_student(), _teacher()),
        lambda: keras.optimizers.SGD(0.0),
        training_loss(cfg, K),
        metrics=[ClassHead(keras.metrics.SparseCategoricalAccuracy())],
        progress=False,
        verbose=0,
        steps_per_call=1,
    )
    inp = DistributedInput(
        strategy, ArraySource((x, y)), sampler="distributed", global_batch_size=8, seed=0
    )
    trainer.fit(inp, 1)
    reference = Distiller(_student(), _teacher())
    want = training_loss(cfg, K)(y, reference(x, training=True)).numpy().mean()
    np.testing.assert_allclose(trainer.state.history[-1]["loss"], want, rtol=1e-5)
    accuracy = keras.metrics.SparseCategoricalAccuracy()
    accuracy.update_state(y, reference(x, training=True)[:, 0])
    assert trainer.state.history[-1]["sparse_categorical_accuracy"] == pytest.approx(
        float(accuracy.result())
    )
