"""Models by name for ``tfdp train --model``: keras.applications, a module in the current folder,
factories called with keywords, and a factory's own errors reported as the user's (exit 2)."""

from __future__ import annotations

import sys

import pytest

from tfdp.errors import ConfigError
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
    assert err.startswith("tfdp: error: --model 'models_i26:broken': broken(") and "bug" not in err
