"""Built-in models for the ``tfdp train`` command, and loading a user's model factory.

This module owns the small CNN (digits-sized inputs), a ResNet-style network,
and model references: ``"cnn"``, ``"resnet"``, a ViT / DeiT model by timm's
name (``"deit_tiny_patch16_224"``: :mod:`tfdp.models`, on keras-hub), a
``keras.applications`` name (``"resnet50"``,
``"keras.applications:EfficientNetB0"``) or ``"module:function"``
(:func:`check_model_ref` checks one without importing Keras, so a bad
reference -- or a ViT / DeiT model without the ``tfdp[models]`` extra -- is
refused before TensorFlow loads;
:func:`load_factory` resolves it; :func:`call_factory` calls it with
keywords, its own errors reported as the user's model's).

Example:
    >>> model = small_cnn((8, 8, 1), 10)
    >>> model.output_shape
    (None, 10)
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from tfdp.errors import ConfigError
from tfdp.models.names import MODELS, is_model_name, model_spec, require_keras_hub

if TYPE_CHECKING:
    import keras

#: The models :func:`build_model` knows by name.
BUILTIN_MODELS = ("cnn", "resnet")

#: ``keras.applications``' model functions (Keras 3.15; tests/test_networks.py pins the list):
#: ``--model resnet50`` or ``--model keras.applications:ResNet50`` names one, built with
#: random weights (``weights=None``) and logits out (``classifier_activation=None``).
KERAS_APPLICATIONS = (
    *(f"ConvNeXt{s}" for s in ("Base", "Large", "Small", "Tiny", "XLarge")),
    "DenseNet121",
    "DenseNet169",
    "DenseNet201",
    *(f"EfficientNetB{i}" for i in range(8)),
    *(f"EfficientNetV2{s}" for s in ("B0", "B1", "B2", "B3", "L", "M", "S")),
    "InceptionResNetV2",
    "InceptionV3",
    "MobileNet",
    "MobileNetV2",
    "MobileNetV3Large",
    "MobileNetV3Small",
    "NASNetLarge",
    "NASNetMobile",
    *(f"ResNet{d}{v}" for d in (50, 101, 152) for v in ("", "V2")),
    "VGG16",
    "VGG19",
    "Xception",
)
_APPLICATIONS_BY_LOWER = {name.lower(): name for name in KERAS_APPLICATIONS}
_APPLICATIONS_MODULE = "keras.applications"


def small_cnn(input_shape: Sequence[int], num_classes: int, width: int = 32) -> keras.Model:
    """A small CNN: three 3x3 convolutions, one 2x2 pooling, a dense head; outputs logits.

    Example:
        >>> small_cnn((28, 28, 1), 10).count_params() > 0
        True
    """
    import keras

    inputs = keras.Input(tuple(input_shape))
    x = keras.layers.Conv2D(width, 3, padding="same", activation="relu")(inputs)
    x = keras.layers.Conv2D(width, 3, padding="same", activation="relu")(x)
    x = keras.layers.MaxPooling2D(2)(x)
    x = keras.layers.Conv2D(2 * width, 3, padding="same", activation="relu")(x)
    x = keras.layers.Flatten()(x)  # small inputs: keep the spatial layout
    x = keras.layers.Dense(2 * width, activation="relu")(x)
    outputs = keras.layers.Dense(num_classes, dtype="float32")(x)
    return keras.Model(inputs, outputs, name="small_cnn")


#: Inputs at least this large (height and width) get ResNet's ImageNet stem.
IMAGENET_STEM_MIN_SIZE = 64


def resnet(
    input_shape: Sequence[int], num_classes: int, width: int = 32, blocks: Sequence[int] = (2, 2)
) -> keras.Model:
    """A ResNet-style network (pre-activation basic blocks, stride-2 stages); outputs logits.

    Small inputs (digits, CIFAR) start with one 3x3 convolution at full
    resolution; inputs of at least ``IMAGENET_STEM_MIN_SIZE`` pixels a side
    (ImageNet-sized, e.g. ``--image-size 224``) with ResNet's ImageNet stem,
    a 7x7 stride-2 convolution and a 3x3 stride-2 max pooling, so the blocks
    run at a quarter of the resolution.

    Example:
        >>> resnet((32, 32, 3), 10, width=8).output_shape
        (None, 10)
        >>> [layer.name for layer in resnet((224, 224, 3), 10, width=8).layers[1:3]]
        ['stem_conv', 'stem_pool']
    """
    import keras

    inputs = keras.Input(tuple(input_shape))
    if min(input_shape[0], input_shape[1]) >= IMAGENET_STEM_MIN_SIZE:
        x = keras.layers.Conv2D(
            width, 7, strides=2, padding="same", use_bias=False, name="stem_conv"
        )(inputs)
        x = keras.layers.MaxPooling2D(3, strides=2, padding="same", name="stem_pool")(x)
    else:
        x = keras.layers.Conv2D(width, 3, padding="same", use_bias=False)(inputs)
    for stage, count in enumerate(blocks):
        filters = width * 2**stage
        for block in range(count):
            stride = 2 if (stage > 0 and block == 0) else 1
            shortcut = x
            y = keras.layers.BatchNormalization()(x)
            y = keras.layers.ReLU()(y)
            if stride != 1 or shortcut.shape[-1] != filters:
                shortcut = keras.layers.Conv2D(filters, 1, strides=stride, use_bias=False)(y)
            y = keras.layers.Conv2D(filters, 3, strides=stride, padding="same", use_bias=False)(y)
            y = keras.layers.BatchNormalization()(y)
            y = keras.layers.ReLU()(y)
            y = keras.layers.Conv2D(filters, 3, padding="same", use_bias=False)(y)
            x = keras.layers.Add()([shortcut, y])
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.ReLU()(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    outputs = keras.layers.Dense(num_classes, dtype="float32")(x)
    return keras.Model(inputs, outputs, name="resnet")


def _resolve(ref: str) -> str:
    """``ref`` with a bare ``keras.applications`` name (any case) spelt ``module:function``."""
    if ref in BUILTIN_MODELS or ":" in ref or is_model_name(ref):
        return ref
    name = _APPLICATIONS_BY_LOWER.get(ref.lower())
    return f"{_APPLICATIONS_MODULE}:{name}" if name else ref


def check_model_ref(ref: str) -> str:
    """``ref`` if it names a built-in, ViT / DeiT or ``keras.applications`` model, or a factory.

    Cheap (imports nothing): it checks the form; :func:`load_factory`
    imports the module and finds the function. A ``keras.applications`` name
    may be given bare, in any case (``"resnet50"``). A ViT / DeiT name
    (:data:`tfdp.models.MODELS`) needs keras-hub, the ``tfdp[models]`` extra:
    found (not imported) here.

    Raises:
        ConfigError: naming the reference and the valid forms (every ViT / DeiT
            name, and the nearest known name), or the missing extra.

    Example:
        >>> check_model_ref("resnet"), check_model_ref("my_models:wide_resnet")
        ('resnet', 'my_models:wide_resnet')
        >>> check_model_ref("efficientnetb0"), check_model_ref("deit_tiny_patch16_224")
        ('efficientnetb0', 'deit_tiny_patch16_224')
        >>> check_model_ref("deit_tiny")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        tfdp.errors.ConfigError: model: 'deit_tiny': expected 'cnn', 'resnet', a ViT / DeiT name (deit_base_distilled_patch16_224, ..., vit_tiny_patch16_224; did you mean 'deit_tiny_patch16_224'?), a keras.applications name (resnet50, efficientnetb0, convnexttiny, ...) or 'module:function'
    """  # noqa: E501
    resolved = _resolve(ref)
    if resolved in BUILTIN_MODELS:
        return ref
    if is_model_name(resolved):
        require_keras_hub(ref)
        return ref
    module_name, sep, attr = resolved.partition(":")
    if not sep or not module_name.strip() or not attr.strip():
        names = ", ".join(map(repr, BUILTIN_MODELS))
        close = difflib.get_close_matches(ref.lower(), [*MODELS, *_APPLICATIONS_BY_LOWER], n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigError(
            f"{ref!r}: expected {names}, a ViT / DeiT name ({', '.join(MODELS)}{hint}), "
            "a keras.applications name (resnet50, efficientnetb0, convnexttiny, ...) or "
            "'module:function'",
            argument="model",
        )
    if module_name == _APPLICATIONS_MODULE and attr not in KERAS_APPLICATIONS:
        raise ConfigError(
            f"{ref!r}: keras.applications has no model {attr!r}; it has "
            + ", ".join(KERAS_APPLICATIONS),
            argument="model",
        )
    return ref


def _with_cwd_on_path() -> None:
    """Let ``module:function`` find a module in the current folder, as ``python -m`` does.

    The folder goes last on ``sys.path``: an installed package of the same name wins.
    """
    cwd = os.getcwd()
    if "" not in sys.path and cwd not in sys.path:
        sys.path.append(cwd)


def check_model_module(ref: str) -> None:
    """Refuse a ``"module:function"`` reference whose module cannot be found (no import).

    The module is looked up without being imported (a dotted name's parent
    packages are imported), so a misspelt module is refused before TensorFlow
    loads; whether it has the function is known only once it is imported
    (:func:`load_factory`). The current folder is searched too (last).
    Built-in names pass.

    Raises:
        ConfigError: naming the reference and the module.

    Example:
        >>> check_model_module("tfdp.recipe.networks:small_cnn")
        >>> check_model_module("no_such_module_xyz:net")
        Traceback (most recent call last):
        ...
        tfdp.errors.ConfigError: model: 'no_such_module_xyz:net': cannot import module 'no_such_module_xyz' (No module named 'no_such_module_xyz')
    """  # noqa: E501
    resolved = _resolve(check_model_ref(ref))
    if (
        resolved in BUILTIN_MODELS
        or is_model_name(resolved)
        or resolved.startswith(_APPLICATIONS_MODULE + ":")
    ):
        return
    _with_cwd_on_path()
    module_name = resolved.partition(":")[0]
    try:
        found = importlib.util.find_spec(module_name) is not None
    except (ImportError, ValueError):  # a parent package that is missing or broken
        found = False
    if not found:
        raise ConfigError(
            f"{ref!r}: cannot import module {module_name!r} (No module named {module_name!r})",
            argument="model",
        )


def load_factory(ref: str) -> Callable[..., keras.Model]:
    """Resolve ``"package.module:function"`` (or a ``keras.applications`` name) to the function.

    The current folder is on the import path (last), so a ``my_models.py``
    beside the command is found without ``PYTHONPATH``.

    Raises:
        ConfigError: naming the reference when it has another form (see
            :func:`check_model_ref`), or the module or function is missing,
            or importing the module fails.

    Example:
        >>> load_factory("tfdp.recipe.networks:small_cnn").__name__
        'small_cnn'
        >>> load_factory("resnet50").__name__
        'ResNet50'
    """
    module_name, _, attr = _resolve(check_model_ref(ref)).partition(":")
    _with_cwd_on_path()
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(
            f"{ref!r}: cannot import module {module_name!r} ({exc})", argument="model"
        ) from None
    except Exception as exc:  # the user's module fails as it is imported: theirs to fix
        raise ConfigError(
            f"{ref!r}: importing module {module_name!r} failed: {type(exc).__name__}: {exc}",
            argument="model",
        ) from exc
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ConfigError(
            f"{ref!r}: module {module_name!r} has no function {attr!r}", argument="model"
        )
    return fn


def _factory_arguments(
    fn: Callable[..., Any], input_shape: tuple[int, ...], num_classes: int, drop_path: float = 0.0
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """How :func:`call_factory` calls ``fn``: keywords where its signature names them.

    ``input_shape=`` and ``num_classes=`` (or ``classes=``, as
    ``keras.applications`` names it) when the signature has them (or takes
    ``**kwargs``), ``weights=None`` and ``classifier_activation=None`` when it
    has those; a factory naming neither gets ``(input_shape, num_classes)``
    positionally. A ``drop_path`` rate goes in as ``drop_path_rate=`` (timm's
    name), which the signature must name (or take ``**kwargs``).

    Raises:
        ConfigError: a ``drop_path`` rate for a factory that takes none.
    """
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a builtin or C callable: no signature to read
        params = {}
    var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    if drop_path and "drop_path_rate" not in params and not var_kw:
        name = getattr(fn, "__name__", repr(fn))
        raise ConfigError(
            f"{drop_path:g}: model factory {name} takes no drop_path_rate argument "
            "(give it one, or leave it 0)",
            argument="drop_path",
        )
    if not params:
        return (input_shape, num_classes), {}
    kwargs: dict[str, Any] = {}
    if "input_shape" in params or var_kw:
        kwargs["input_shape"] = input_shape
    if "num_classes" in params:
        kwargs["num_classes"] = num_classes
    elif "classes" in params:
        kwargs["classes"] = num_classes
    elif var_kw:
        kwargs["num_classes"] = num_classes
    if drop_path:
        kwargs["drop_path_rate"] = drop_path
    if "input_shape" not in kwargs or not ({"num_classes", "classes"} & set(kwargs)):
        extra = {"drop_path_rate": drop_path} if drop_path else {}
        return (input_shape, num_classes), extra
    if "weights" in params:
        kwargs["weights"] = None  # never a download: the run trains from its seeded weights
    if "classifier_activation" in params:
        kwargs["classifier_activation"] = None  # logits, as the loss expects
    return (), kwargs


def call_factory(
    ref: str,
    fn: Callable[..., Any],
    input_shape: Sequence[int],
    num_classes: int,
    drop_path: float = 0.0,
) -> keras.Model:
    """Call model factory ``fn`` (named ``ref``) and check that it returns a Keras model.

    Keywords where its signature names them (see :func:`_factory_arguments`):
    ``keras.applications.ResNet50`` is called as ``ResNet50(input_shape=...,
    classes=..., weights=None, classifier_activation=None)``. The model must
    output logits, one per class. A ``drop_path`` rate (stochastic depth)
    goes in as ``drop_path_rate=``.

    Raises:
        ConfigError: the factory takes no ``drop_path_rate`` for a rate, raised (its error, its type and the arguments
            given are in the message: the model is the user's to fix), returned
            no ``keras.Model``, or a model whose output is not ``num_classes`` wide.

    Example:
        >>> from tfdp.recipe.networks import load_factory
        >>> call_factory("cnn", small_cnn, (8, 8, 1), 10).output_shape
        (None, 10)
        >>> call_factory("resnet50", load_factory("resnet50"), (8, 8, 3), 10)
        Traceback (most recent call last):
        ...
        tfdp.errors.ConfigError: model: 'resnet50': ResNet50(input_shape=(8, 8, 3), classes=10, weights=None, classifier_activation=None) raised ValueError: Input size must be at least 32x32; Received: input_shape=(8, 8, 3)
    """  # noqa: E501
    import keras

    shape = tuple(int(d) for d in input_shape)
    args, kwargs = _factory_arguments(fn, shape, num_classes, drop_path)
    name = getattr(fn, "__name__", repr(fn))
    shown = ", ".join([*map(repr, args), *(f"{k}={v!r}" for k, v in kwargs.items())])
    try:
        model = fn(*args, **kwargs)
    except Exception as exc:  # the factory is the user's code (or their choice of model)
        detail = " ".join(str(exc).split())
        raise ConfigError(
            f"{ref!r}: {name}({shown}) raised {type(exc).__name__}: {detail}",
            argument="model",
        ) from exc
    if not isinstance(model, keras.Model):
        raise ConfigError(
            f"{ref!r} returned {type(model).__name__}, not a keras.Model", argument="model"
        )
    width = model.output_shape[-1] if isinstance(model.output_shape, tuple) else None
    if width != num_classes:
        raise ConfigError(
            f"{ref!r}: its output has shape {model.output_shape}, expected "
            f"(..., {num_classes}): one logit per class",
            argument="model",
        )
    return model


def build_model(
    name: str,
    input_shape: Sequence[int],
    num_classes: int,
    *,
    drop_path: float = 0.0,
    seed: int = 0,
) -> keras.Model:
    """Build ``"cnn"``, ``"resnet"``, a ViT / DeiT, a ``keras.applications`` model or a factory.

    A ViT / DeiT name (:data:`tfdp.models.MODELS`) is built by
    :func:`tfdp.models.vision_transformer` with stochastic depth ``drop_path``
    (its draws keyed by ``seed``: the run's); a factory gets ``drop_path`` as
    ``drop_path_rate``; the other models have none.

    Raises:
        ConfigError: a bad reference, or a ``drop_path`` rate for a model without
            stochastic depth, naming the argument.

    Example:
        >>> build_model("cnn", (8, 8, 1), 10).name
        'small_cnn'
        >>> build_model("keras.applications:MobileNet", (32, 32, 3), 5).output_shape
        (None, 5)
        >>> build_model("vit_tiny_patch16_224", (32, 32, 3), 5, drop_path=0.1).output_shape
        (None, 5)
    """
    if is_model_name(name):
        check_model_ref(name)  # the extra, named before keras-hub is imported
        from tfdp.models.vit import vision_transformer

        return vision_transformer(
            model_spec(name), input_shape, num_classes, drop_path=drop_path, seed=seed
        )
    if drop_path and ":" not in _resolve(name):
        raise ConfigError(
            f"{drop_path:g}: {{model}} {name!r} has no stochastic depth (a ViT / DeiT "
            "model or a factory taking drop_path_rate has)",
            argument="drop_path",
            mentions=["model"],
        )
    if name == "cnn":
        return small_cnn(input_shape, num_classes)
    if name == "resnet":
        return resnet(input_shape, num_classes)
    return call_factory(name, load_factory(name), input_shape, num_classes, drop_path)
