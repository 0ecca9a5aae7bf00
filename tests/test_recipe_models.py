"""Models by name for ``tfdp train --model``: keras.applications, a module in the current folder,
factories called with keywords, and a factory's own errors reported as the user's (exit 2);
DeiT's / ViT's models by timm's names with drop path, --finetune and distillation (issue 35)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tfdp.errors import ConfigError
from tfdp.models import MODELS
from tfdp.recipe.networks import (
    KERAS_APPLICATIONS,
    _factory_arguments,
    build_model,
    check_model_module,
    check_model_ref,
)


def test_the_keras_applications_list_is_keras_own():
    import keras

    names = {n for n in dir(keras.applications) if n[0].isupper()}
    assert set(KERAS_APPLICATIONS) == {n for n in names if callable(getattr(keras.applications, n))}


def test_references_are_checked_before_keras_loads():
    assert check_model_ref("ResNet50") == "ResNet50"  # a bare name, any case
    ref = "keras.applications:EfficientNetB0"
    assert check_model_ref(ref) == ref
    with pytest.raises(ConfigError, match=r"keras\.applications has no model 'ResNet51'"):
        check_model_ref("keras.applications:ResNet51")
    with pytest.raises(ConfigError, match=r"a keras\.applications name") as err:
        check_model_ref("resnet51")
    assert err.value.argument == "model"


def _resnet50_like(include_top=True, weights="imagenet", input_shape=None, classes=1000,
                   classifier_activation="softmax"):  # fmt: skip
    raise AssertionError("not called")


def test_factories_are_called_with_the_keywords_their_signatures_name():
    shape = (32, 32, 3)
    assert _factory_arguments(_resnet50_like, shape, 7) == (
        (),
        {"input_shape": shape, "classes": 7, "weights": None, "classifier_activation": None},
    )
    assert _factory_arguments(lambda input_shape, num_classes, width=8: 0, shape, 7) == (
        (),
        {"input_shape": shape, "num_classes": 7},
    )
    assert _factory_arguments(lambda **kw: 0, shape, 7) == (
        (),
        {"input_shape": shape, "num_classes": 7},
    )
    # A factory of other parameter names keeps tfdp's old positional call.
    assert _factory_arguments(lambda shape, n: 0, shape, 7) == ((shape, 7), {})


MODULE = """
import keras

def net(input_shape, num_classes):
    return keras.Sequential([keras.Input(input_shape), keras.layers.Flatten(),
                             keras.layers.Dense(num_classes)])

def broken(input_shape, num_classes):
    raise ValueError("my factory cannot build this")

def too_wide(input_shape, num_classes):
    return keras.Sequential([keras.Input(input_shape), keras.layers.Flatten(),
                             keras.layers.Dense(num_classes + 1)])
"""


@pytest.fixture
def models_here(tmp_path, monkeypatch):
    """A ``models_i26.py`` in the current folder, which is not on the import path."""
    (tmp_path / "models_i26.py").write_text(MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "models_i26", raising=False)
    return tmp_path


def test_a_module_in_the_current_folder_is_found_and_its_errors_are_the_users(models_here):
    check_model_module("models_i26:net")  # found before anything is imported
    assert build_model("models_i26:net", (8, 8, 1), 10).output_shape == (None, 10)
    with pytest.raises(ConfigError, match=r"broken\(input_shape=\(8, 8, 1\), num_classes=10\) "
                       "raised ValueError: my factory cannot build this"):  # fmt: skip
        build_model("models_i26:broken", (8, 8, 1), 10)
    with pytest.raises(ConfigError, match=r"expected \(\.\.\., 10\): one logit per class"):
        build_model("models_i26:too_wide", (8, 8, 1), 10)
    assert build_model("resnet50", (32, 32, 3), 10).output_shape == (None, 10)


def test_a_failing_factory_is_exit_2_naming_model_not_a_bug(models_here, capsys):
    from tfdp.cli import main

    argv = ["train", "--model", "models_i26:broken", "--epochs", "1", "--replicas", "4"]
    assert main([*argv, "--run-dir", str(models_here / "run")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tfdp: error: --model: 'models_i26:broken': broken(") and "bug" not in err


# -- DeiT's and ViT's models by name, drop path, --finetune, distillation (issue 35) -----------


def test_vit_names_are_models_and_an_unknown_name_lists_every_one():
    for name in MODELS:
        assert check_model_ref(name) == name
        check_model_module(name)  # nothing to import: a built-in
    listed = r"a ViT / DeiT name \(deit_base_distilled_patch16_224, .*; did you mean "
    with pytest.raises(ConfigError, match=listed + r"'deit_small_patch16_224'\?\)") as err:
        check_model_ref("deit_smal_patch16_224")
    assert all(name in str(err.value) for name in MODELS) and err.value.argument == "model"
    with pytest.raises(ConfigError, match=r"^drop_path: 0.1: model 'cnn' has no stochastic depth"):
        build_model("cnn", (8, 8, 1), 10, drop_path=0.1)
    with pytest.raises(ConfigError, match=r"model factory _resnet50_like takes no drop_path_rate"):
        _factory_arguments(_resnet50_like, (32, 32, 3), 10, drop_path=0.1)
    assert _factory_arguments(lambda input_shape, num_classes, drop_path_rate=0: 0, (32, 32, 3),
                              10, drop_path=0.1)[1]["drop_path_rate"] == 0.1  # fmt: skip


EVERY_REFUSAL = """
import json, sys
from tfdp.cli import main
results = []
cases = json.loads(sys.argv[1])
for hide, argv in cases:
    if hide:  # keras-hub not installed (importlib.util.find_spec finds None)
        sys.modules["keras_hub"] = None
    code = main(argv)
    results.append([code, "tensorflow" in sys.modules])
print(json.dumps(results))
"""


def test_every_model_refusal_comes_before_tensorflow_loads(tmp_path):
    """Bad model options and missing files, `tfdp models import` included, and the tfdp[models]
    extra missing: exit 2, one line naming the flag or file and what is valid, before
    TensorFlow loads (one process, TensorFlow never imported)."""
    t = str(tmp_path)
    (tmp_path / "t.keras").write_text("x")
    vit = ["train", "--model", "deit_tiny_patch16_224", "--run-dir", f"{t}/r"]
    dist = ["train", "--model", "deit_tiny_distilled_patch16_224", "--run-dir", f"{t}/r"]
    cases = [
        (["train", "--model", "deit_tiny", "--run-dir", f"{t}/r"],
         "--model: 'deit_tiny': expected 'cnn', 'resnet', a ViT / DeiT name "
         "(deit_base_distilled_patch16_224, deit_base_patch16_224"),
        ([*vit, "--image-size", "40"], "--image-size: 40: --model deit_tiny_patch16_224 takes "
         "images whose size is a multiple of its patch, 16 (e.g. 32 or 48)"),
        ([*vit, "--drop-path", "1.0"], "--drop-path: must be in [0, 1), got 1.0"),
        ([*vit, "--drop-path", "-0.1"], "--drop-path: must be in [0, 1), got -0.1"),
        (["train", "--drop-path", "0.1", "--run-dir", f"{t}/r"],
         "--drop-path: 0.1: model 'cnn' has no stochastic depth"),
        ([*dist, "--distillation-type", "hard"], "--distillation-type: hard needs a teacher: "
         "give --teacher-model"),
        ([*vit, "--distillation-type", "soft", "--teacher-model", f"{t}/t.keras"],
         "--model 'deit_tiny_patch16_224' has none; use deit_*_distilled_patch16_224 (e.g. "
         "deit_tiny_distilled_patch16_224)"),
        ([*dist, "--distillation-type", "hard", "--teacher-model", f"{t}/no.keras"],
         f"--teacher-model: '{t}/no.keras' does not exist"),
        ([*dist, "--teacher-model", f"{t}/t.keras"],
         "--teacher-model: given, but --distillation-type is none"),
        ([*dist, "--distillation-type", "hard", "--teacher-model", "deit_base_patch16_224"],
         "give its weights in --teacher-path"),
        ([*dist, "--distillation-type", "hard", "--teacher-model", "deit_base_patch16_224",
          "--teacher-path", f"{t}/no.pth"], f"--teacher-path: '{t}/no.pth' does not exist"),
        ([*dist, "--distillation-type", "hard", "--teacher-model", "nosuch_teacher",
          "--teacher-path", f"{t}/w.weights.h5"], "--teacher-model: 'nosuch_teacher': expected"),
        ([*dist, "--distillation-type", "soft", "--teacher-model", f"{t}/t.keras",
          "--distillation-tau", "0"], "--distillation-tau: must be a finite number > 0, got 0.0"),
        ([*dist, "--distillation-type", "soft", "--teacher-model", f"{t}/t.keras",
          "--distillation-alpha", "1.5"], "--distillation-alpha: must be in [0, 1], got 1.5"),
        ([*vit, "--finetune", f"{t}/no.pth"], f"--finetune: '{t}/no.pth' does not exist"),
        ([*vit, "--finetune", f"{t}/t.keras"], "expected a timm / DeiT checkpoint (.pth, .pt"),
        (["train", "--finetune", f"{t}/x.pth", "--run-dir", f"{t}/r"],
         "--finetune: loads timm / DeiT checkpoints into the ViT / DeiT models"),
        (["models", "import", "deit_tiny", "--from", f"{t}/x.pth", "--out", f"{t}/m.keras"],
         "NAME: 'deit_tiny' is not one of the ViT / DeiT names (did you mean "
         "'deit_tiny_patch16_224'?)"),
        (["models", "import", "deit_tiny_patch16_224", "--from", f"{t}/x.pth", "--out",
          f"{t}/m.keras"], f"--from: '{t}/x.pth' does not exist"),
        (["models", "import", "deit_tiny_patch16_224", "--from", f"{t}/t.keras", "--out",
          f"{t}/m.h5"], f"--out: '{t}/m.h5': give a .keras file name"),
    ]  # fmt: skip
    hidden = [
        (vit, "--model: 'deit_tiny_patch16_224' is built on keras-hub, which is not installed: "
         "pip install 'tfdp[models]'"),
        (["models", "import", "vit_small_patch16_224", "--from", f"{t}/x.pth", "--out",
          f"{t}/m.keras"], "NAME: 'vit_small_patch16_224' is built on keras-hub, which is not "
         "installed: pip install 'tfdp[models]'"),
    ]  # fmt: skip
    argvs = [[False, argv] for argv, _ in cases] + [[True, argv] for argv, _ in hidden]
    out = subprocess.run(
        [sys.executable, "-c", EVERY_REFUSAL, json.dumps(argvs)], capture_output=True, text=True,
        cwd=tmp_path, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}, timeout=300, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    results = json.loads(out.stdout.splitlines()[-1])
    assert results == [[2, False]] * len(argvs), out.stderr
    errors = [line for line in out.stderr.splitlines() if line.startswith("tfdp: error: ")]
    assert len(errors) == len(argvs), out.stderr
    for line, (_, message) in zip(errors, [*cases, *hidden], strict=True):
        assert message in line, (message, line)
    assert "Traceback" not in out.stderr and not (tmp_path / "r").exists()


def test_finetune_starts_a_student_as_deit_does_and_says_so():
    """--finetune's state dict (DeiT-Ti at 224, 1000 classes) into the run's model (32x32, 3
    classes): position embeddings interpolated as DeiT's main.py does, the head left new, the
    rest loaded; the start line says what was adapted."""
    from tfdp.models import resample_pos_embed, vision_transformer
    from tfdp.models.weights import timm_shapes
    from tfdp.recipe.config import TrainConfig
    from tfdp.recipe.student import ModelFiles, start_notes, student_and_teacher

    big = timm_shapes(vision_transformer("deit_tiny_patch16_224", (224, 224, 3), 1000, init=False))
    rng = np.random.default_rng(0)
    state = {k: rng.normal(size=s).astype(np.float32) for k, s in big.items()}
    cfg = TrainConfig(model="deit_tiny_patch16_224", finetune="deit_tiny.pth")
    files = ModelFiles(finetune=state)
    model = build_model(cfg.model, (32, 32, 3), 3)
    head = model.get_layer("head").kernel.numpy()
    assert student_and_teacher(cfg, model, (32, 32, 3), 3, files) is model
    pos = model.get_layer("patch_embed").position_embedding.embeddings.numpy()
    np.testing.assert_array_equal(pos, resample_pos_embed(state["pos_embed"], (2, 2),
                                                          antialias=False)[0])  # fmt: skip
    np.testing.assert_array_equal(model.get_layer("head").kernel.numpy(), head)
    np.testing.assert_array_equal(model.get_layer("norm").gamma.numpy(), state["norm.weight"])
    assert start_notes(cfg, files, {}) == [
        "fine-tuning from 'deit_tiny.pth': position embeddings resampled from 14x14 to 2x2 "
        "patches; head re-initialised (--finetune 'deit_tiny.pth' has 1000 classes, the model 3)"
    ]


# The DeiT commands end to end (DeiT-Ti with drop path, distilled from a .keras teacher, stopped
# and resumed; `tfdp evaluate`; the refusals that come after TensorFlow loads):
# tests/test_recipe_whole.py, one process for all of them.


def test_the_jobs_training_metrics_sum_every_replica(mirrored_of, tmp_path):
    """The job's training metrics (top-5, Mixup's soft-target accuracy, a distilled run's
    ClassHead wrappers) are made in the strategy's scope: sync-on-read accumulators, which a
    worker's read sums over every replica (made outside, under MultiWorkerMirroredStrategy each
    worker would report its own replicas' only)."""
    from types import SimpleNamespace

    from tfdp.recipe.config import TrainConfig
    from tfdp.recipe.run import _trainer

    strategy = mirrored_of(2)
    data = SimpleNamespace(shape=(32, 32, 3), num_classes=12)
    for cfg in (
        TrainConfig(mixup=0.8, schedule="constant"),
        TrainConfig(
            model="deit_tiny_distilled_patch16_224",
            distillation_type="hard",
            teacher_model="t.keras",
            schedule="constant",
        ),
    ):
        trainer = _trainer(cfg, strategy, data, str(tmp_path / cfg.model), None, 4)
        names = [m.name for m in trainer.train_step.metrics]
        assert names == (["soft_target_accuracy"] if cfg.mixup else
                         ["sparse_categorical_accuracy", "top5"])  # fmt: skip
        kinds = {type(v.value).__name__ for m in trainer.train_step.metrics for v in m.variables}
        assert kinds == {"SyncOnReadVariable"}, (cfg.model, kinds)


def test_a_teacher_by_name_gets_its_weights_from_teacher_path(tmp_path):
    """--teacher-model as the job builds it: `cnn` with a Keras .weights.h5, a DeiT name with a
    timm state dict (read before TensorFlow: ModelFiles.teacher); weights of another model are
    refused naming --teacher-model."""
    import keras

    from tfdp.models.weights import timm_shapes
    from tfdp.recipe.config import TrainConfig
    from tfdp.recipe.networks import small_cnn
    from tfdp.recipe.student import ModelFiles, student_and_teacher

    shape = (32, 32, 3)
    student = build_model("deit_tiny_distilled_patch16_224", shape, 3)
    keras.utils.set_random_seed(3)
    small_cnn(shape, 3).save_weights(tmp_path / "cnn.weights.h5")
    weights = str(tmp_path / "cnn.weights.h5")
    cfg = TrainConfig(model="deit_tiny_distilled_patch16_224", distillation_type="hard",
                      teacher_model="cnn", teacher_path=weights)  # fmt: skip
    model = student_and_teacher(cfg, student, shape, 3, ModelFiles())
    keras.utils.set_random_seed(3)
    for a, b in zip(model.teacher.weights, small_cnn(shape, 3).weights, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    deit = build_model("deit_tiny_patch16_224", shape, 3)
    state = {k: np.full(s, 0.25, np.float32) for k, s in timm_shapes(deit).items()}
    cfg.teacher_model, cfg.teacher_path = "deit_tiny_patch16_224", "deit.safetensors"
    model = student_and_teacher(cfg, student, shape, 3, ModelFiles(teacher=state))
    assert all((w.numpy() == 0.25).all() for w in model.teacher.trainable_weights)
    cfg.teacher_model, cfg.teacher_path = "resnet", weights
    with pytest.raises(ConfigError, match=r"^teacher_model: 'resnet': "):
        student_and_teacher(cfg, student, shape, 3, ModelFiles())


def test_a_factorys_vision_transformer_gets_timms_no_decay_set_as_a_named_one():
    """A `module:function` factory returning tfdp's vision_transformer (a narrower ViT, as
    benchmarks/bench_deit_parity.py trains) is exempt from decay where timm's optimizer
    exempts it: tokens, position embeddings and the [heads, head_dim] attention biases too,
    as the named models; a Distiller's student alike; other models: weights of one dimension."""
    from tfdp.models import Distiller, ViTSpec, no_weight_decay, vision_transformer
    from tfdp.recipe.config import TrainConfig
    from tfdp.recipe.model import _no_decay
    from tfdp.recipe.networks import small_cnn

    factory = TrainConfig(model="my_models:vit")
    for distilled in (False, True):
        spec = ViTSpec("narrow", width=16, depth=1, heads=2, patch=8, distilled=distilled)
        model = vision_transformer(spec, (16, 16, 3), 3)
        exempt = {v.path for v in _no_decay(factory, model)}
        assert exempt == {v.path for v in no_weight_decay(model)}
        assert {p.rsplit("/", 1)[-1] for p in exempt} >= {"class_token", "bias"}
        assert any(len(v.shape) == 2 and v.path in exempt for v in model.trainable_variables)
    student = model
    distiller = Distiller(student, small_cnn((16, 16, 3), 3, width=4))
    assert {v.path for v in _no_decay(factory, distiller)} == {
        v.path for v in no_weight_decay(student)
    }
    cnn = small_cnn((16, 16, 3), 3, width=4)
    assert _no_decay(factory, cnn) == [v for v in cnn.trainable_variables if len(v.shape) == 1]
