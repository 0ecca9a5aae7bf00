"""Built-in models for the ``tfdp train`` command, and loading a user's model factory.

This module owns the small CNN (digits-sized inputs), a ResNet-style network,
and model references: ``"cnn"``, ``"resnet"`` or ``"module:function"``
(:func:`check_model_ref` checks one without importing Keras, so a bad
reference is refused before TensorFlow loads; :func:`load_factory` resolves it).

Example:
    >>> model = small_cnn((8, 8, 1), 10)
    >>> model.output_shape
    (None, 10)
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from tfdp.errors import ConfigError

if TYPE_CHECKING:
    import keras

__all__ = [
    "BUILTIN_MODELS",
    "IMAGENET_STEM_MIN_SIZE",
    "build_model",
    "check_model_module",
    "check_model_ref",
    "load_factory",
    "resnet",
    "small_cnn",
]

#: The models :func:`build_model` knows by name.
BUILTIN_MODELS = ("cnn", "resnet")


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


def check_model_ref(ref: str) -> str:
    """``ref`` if it names a built-in model or has the form ``"module:function"``.

    Cheap (imports nothing): it checks the form; :func:`load_factory`
    imports the module and finds the function.

    Raises:
        ConfigError: naming the reference and the valid forms.

    Example:
        >>> check_model_ref("resnet"), check_model_ref("my_models:wide_resnet")
        ('resnet', 'my_models:wide_resnet')
        >>> check_model_ref("nosuch")
        Traceback (most recent call last):
        ...
        tfdp.errors.ConfigError: model 'nosuch': expected 'cnn', 'resnet' or 'module:function'
    """
    if ref in BUILTIN_MODELS:
        return ref
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name.strip() or not attr.strip():
        names = ", ".join(map(repr, BUILTIN_MODELS))
        raise ConfigError(f"model {ref!r}: expected {names} or 'module:function'", argument="model")
    return ref


def check_model_module(ref: str) -> None:
    """Refuse a ``"module:function"`` reference whose module cannot be found (no import).

    The module is looked up without being imported (a dotted name's parent
    packages are imported), so a misspelt module is refused before TensorFlow
    loads; whether it has the function is known only once it is imported
    (:func:`load_factory`). Built-in names pass.

    Raises:
        ConfigError: naming the reference and the module.

    Example:
        >>> check_model_module("tfdp.recipe.networks:small_cnn")
        >>> check_model_module("no_such_module_xyz:net")
        Traceback (most recent call last):
        ...
        tfdp.errors.ConfigError: model 'no_such_module_xyz:net': cannot import module 'no_such_module_xyz' (No module named 'no_such_module_xyz')
    """  # noqa: E501
    if check_model_ref(ref) in BUILTIN_MODELS:
        return
    module_name = ref.partition(":")[0]
    try:
        found = importlib.util.find_spec(module_name) is not None
    except (ImportError, ValueError):  # a parent package that is missing or broken
        found = False
    if not found:
        raise ConfigError(
            f"model {ref!r}: cannot import module {module_name!r} (No module named "
            f"{module_name!r})",
            argument="model",
        )


def load_factory(ref: str) -> Callable[..., keras.Model]:
    """Resolve ``"package.module:function"`` to the function (a model factory).

    Raises:
        ConfigError: naming the reference when it has another form (see
            :func:`check_model_ref`) or the module or function is missing.

    Example:
        >>> load_factory("tfdp.recipe.networks:small_cnn").__name__
        'small_cnn'
    """
    module_name, _, attr = check_model_ref(ref).partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(
            f"model {ref!r}: cannot import module {module_name!r} ({exc})", argument="model"
        ) from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ConfigError(
            f"model {ref!r}: module {module_name!r} has no function {attr!r}", argument="model"
        )
    return fn


def build_model(name: str, input_shape: Sequence[int], num_classes: int) -> keras.Model:
    """Build ``"cnn"``, ``"resnet"`` or a user's ``module:function(input_shape, num_classes)``.

    Example:
        >>> build_model("cnn", (8, 8, 1), 10).name
        'small_cnn'
    """
    import keras

    if name == "cnn":
        return small_cnn(input_shape, num_classes)
    if name == "resnet":
        return resnet(input_shape, num_classes)
    model = load_factory(name)(tuple(input_shape), num_classes)
    if not isinstance(model, keras.Model):
        raise ConfigError(
            f"model {name!r} returned {type(model).__name__}, not a keras.Model", argument="model"
        )
    return model
