"""The floating-point type a model trains in, and the types tfdp refuses, by name.

This module owns tfdp's rule for a model's dtype. A model trains in the type
of its trainable variables: the gradients and their all-reduce are in that
type, and the loss -- the per-example values, their reduction over the step's
rows, its all-reduce, the clipping norm, the loss metrics -- in
:func:`loss_dtype`: float64 for float64 variables, float32 otherwise
(float32 variables, the float32 variables of ``mixed_float16`` /
``mixed_bfloat16`` with their reduced compute, bfloat16 variables: a loss
summed over rows in bfloat16 would keep 8 bits). What cannot train so is
refused with a :class:`tfdp.errors.ConfigError` naming the type
(:func:`check_trainable`, :func:`check_floating`): float16 variables (they
would train without loss scaling: ``mixed_float16`` keeps float32 variables
and scales the loss), complex variables, a prediction or a loss value of a
type that is not a real floating-point one; and, on the ``model.fit`` path
where Keras computes the loss, a loss that would compute a float64 model's
loss in a narrower type (:func:`check_compiled_loss`).

Example:
    >>> import keras
    >>> model = keras.Sequential([keras.Input((2,), dtype="float64"),
    ...                           keras.layers.Dense(1, dtype="float64")])
    >>> loss_dtype(model).name
    'float64'
    >>> check_floating("the model's prediction", tf.constant([1, 2]))
    Traceback (most recent call last):
    ...
    tfdp.errors.ConfigError: loss: the model's prediction is int32: a loss takes and returns real floating-point values (float32, float64, bfloat16, float16)
"""  # noqa: E501

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from tfdp.errors import ConfigError

_REAL_FLOATS = "float32, float64, bfloat16, float16"


def _dtypes(model: keras.Model) -> dict[str, tf.DType]:
    """The trainable variables' types, by the path of the first variable of each type."""
    out: dict[str, tf.DType] = {}
    for v in model.trainable_variables:
        dtype = tf.as_dtype(v.dtype)
        if dtype not in out.values():
            out[getattr(v, "path", v.name)] = dtype
    return out


def loss_dtype(model: keras.Model) -> tf.DType:
    """The type of ``model``'s loss, its reduction and all-reduce: float64 or float32.

    float64 when a trainable variable is float64, float32 otherwise (mixed
    precision keeps float32 variables: its loss is float32, as Keras's).

    Example:
        >>> import keras
        >>> loss_dtype(keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])).name
        'float32'
    """
    return tf.float64 if tf.float64 in _dtypes(model).values() else tf.float32


def check_trainable(model: keras.Model, argument: str = "model") -> None:
    """Refuse trainable variables tfdp cannot train in their own type, naming the variable.

    Raises:
        tfdp.errors.ConfigError: a float16 variable (no loss scaling: use
            ``mixed_precision="mixed_float16"``) or a complex one.

    Example:
        >>> import keras
        >>> half = [keras.Input((2,), dtype="float16"), keras.layers.Dense(1, dtype="float16", name="head")]
        >>> check_trainable(keras.Sequential(half, name="net"))
        Traceback (most recent call last):
        ...
        tfdp.errors.ConfigError: model: variable net/head/kernel is float16: float16 variables would train without loss scaling (small gradients flush to 0); use mixed_precision='mixed_float16' (float32 variables, float16 compute, dynamic loss scaling), or bfloat16 or float32 variables
    """  # noqa: E501
    for path, dtype in _dtypes(model).items():
        if dtype == tf.float16:
            raise ConfigError(
                f"variable {path} is float16: float16 variables would train without "
                "loss scaling (small gradients flush to 0); use mixed_precision='mixed_float16' "
                "(float32 variables, float16 compute, dynamic loss scaling), or bfloat16 or "
                "float32 variables",
                argument=argument,
            )
        if not dtype.is_floating:
            raise ConfigError(
                f"variable {path} is {dtype.name}: tfdp trains real floating-point "
                f"variables ({_REAL_FLOATS})",
                argument=argument,
            )


def check_floating(what: str, value: Any, argument: str = "loss") -> None:
    """Refuse a value (or any leaf of a structure) whose type is not a real floating-point one.

    Raises:
        tfdp.errors.ConfigError: naming ``what`` and the type.

    Example:
        >>> check_floating("the model's prediction", {"a": tf.ones([2], tf.float64)})
        >>> check_floating("the output of loss 'f'", tf.constant([1 + 2j]))
        Traceback (most recent call last):
        ...
        tfdp.errors.ConfigError: loss: the output of loss 'f' is complex128: a loss takes and returns real floating-point values (float32, float64, bfloat16, float16)
    """  # noqa: E501
    for leaf in tf.nest.flatten(value):
        dtype = tf.as_dtype(leaf.dtype if hasattr(leaf, "dtype") else type(leaf))
        if not dtype.is_floating:
            raise ConfigError(
                f"{what} is {dtype.name}: a loss takes and returns real floating-point values "
                f"({_REAL_FLOATS})",
                argument=argument,
            )


def widened(loss: Any, dtype: tf.DType) -> Any:
    """A Keras loss computing in a narrower type than ``dtype``, rebuilt to compute in ``dtype``.

    Keras's losses convert the predictions to their own ``dtype`` (float32
    unless built with another, whatever the model's), so a float64 model's
    loss would be float32. Anything else is returned as it is.

    Raises:
        tfdp.errors.ConfigError: a loss class that cannot be rebuilt with a
            ``dtype``, naming the fix.

    Example:
        >>> loss = keras.losses.MeanSquaredError(reduction="none")
        >>> widened(loss, tf.float64).dtype, widened(loss, tf.float32) is loss
        ('float64', True)
    """
    if not isinstance(loss, keras.losses.Loss) or not _narrower(loss.dtype, dtype):
        return loss
    try:
        return type(loss).from_config({**loss.get_config(), "dtype": dtype.name})
    except TypeError:
        raise ConfigError(
            f"{loss.name!r} computes in {loss.dtype} but the model's variables are "
            f"{dtype.name}: build it with dtype={dtype.name!r} (a Keras loss's dtype argument)",
            argument="loss",
        ) from None


def _narrower(have: Any, want: tf.DType) -> bool:
    have = tf.as_dtype(have)
    return have.is_floating and have.size < want.size


def check_compiled_loss(model: keras.Model) -> None:
    """Refuse a compiled loss that computes a float64 model's loss in a narrower type (fit path).

    ``model.fit`` computes the loss with the compiled Keras loss, in its
    ``dtype``: a string or a function compiles to a loss of
    ``keras.config.floatx()``.

    Raises:
        tfdp.errors.ConfigError: naming both types and the fix.

    Example:
        >>> model = keras.Sequential([keras.Input((2,), dtype="float64"),
        ...                           keras.layers.Dense(1, dtype="float64")])
        >>> model.compile("sgd", keras.losses.MeanSquaredError(dtype="float64"))
        >>> check_compiled_loss(model)
        >>> model.compile("sgd", "mse")
        >>> check_compiled_loss(model)
        Traceback (most recent call last):
        ...
        tfdp.errors.ConfigError: model: its compiled loss 'mse' computes in float32 but its variables are float64: compile with a loss built with dtype='float64' (e.g. keras.losses.SparseCategoricalCrossentropy(dtype='float64')), or set keras.config.set_floatx('float64') first
    """  # noqa: E501
    want = loss_dtype(model)
    compiled = getattr(model, "loss", None)
    leaves = (
        list(compiled.values())
        if isinstance(compiled, dict)
        else list(compiled)
        if isinstance(compiled, (list, tuple))
        else [compiled]
    )
    for loss in leaves:
        if loss is None:
            continue
        have = loss.dtype if isinstance(loss, keras.losses.Loss) else keras.config.floatx()
        if _narrower(have, want):
            keras_loss = isinstance(loss, keras.losses.Loss)
            name = loss.name if keras_loss else getattr(loss, "__name__", loss)
            example = type(loss).__name__ if keras_loss else "SparseCategoricalCrossentropy"
            raise ConfigError(
                f"its compiled loss {name!r} computes in {tf.as_dtype(have).name} but its "
                f"variables are {want.name}: compile with a loss built with "
                f"dtype={want.name!r} (e.g. keras.losses.{example}(dtype={want.name!r})), or set "
                f"keras.config.set_floatx({want.name!r}) first",
                argument="model",
            )


def all_reduce_sum(ctx: tf.distribute.ReplicaContext, tensors: list[Any]) -> list[Any]:
    """The sum over the replicas of ``tensors``, each in its own type (replica context).

    One collective per type among them: one for a model of one type, whose
    gradients and loss share it; a float32 loss beside bfloat16 gradients, or
    variables of two types, make one each.

    Example:
        >>> strategy = tf.distribute.get_strategy()
        >>> def replica():
        ...     ctx = tf.distribute.get_replica_context()
        ...     return all_reduce_sum(ctx, [tf.constant(1.5, tf.float64), tf.constant([2.0])])
        >>> [t.dtype.name for t in strategy.run(replica)]
        ['float64', 'float32']
    """
    groups: dict[tf.DType, list[int]] = {}
    for i, t in enumerate(tensors):
        groups.setdefault(t.dtype, []).append(i)
    out: list[Any] = [None] * len(tensors)
    for members in groups.values():
        reduced = ctx.all_reduce(tf.distribute.ReduceOp.SUM, [tensors[i] for i in members])
        for i, value in zip(members, reduced, strict=True):
            out[i] = value
    return out
