"""Private Keras reaches (see :mod:`tfdp._compat`).

A model's metrics container, optimizer slots, untracked attributes, checkpoint keys,
seed-generator states, and the fit path's step overrides.

Example:
    >>> checkpoint_value_key("step")
    'step/.ATTRIBUTES/VARIABLE_VALUE'
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from tfdp.errors import ConfigTypeError


def compiled_metrics_container(model: Any) -> Any | None:
    """Keras 3's container of a compiled model's metrics (``model._compile_metrics``), or None.

    It has ``built``, ``build(y_true, y_pred)`` and ``metrics``; ``None`` when
    the model was compiled without metrics.

    Example:
        >>> import keras
        >>> m = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
        >>> m.compile(loss="mse", metrics=["mae"])
        >>> compiled_metrics_container(m).built
        False
    """
    return getattr(model, "_compile_metrics", None)


def optimizer_slot(optimizer: Any, slots: list[Any], variable: Any) -> Any:
    """The slot of ``variable`` in ``slots`` (a list ``optimizer.build`` made in variable order).

    Inside ``update_step`` under a strategy ``variable`` is a replica's
    component; Keras's ``_get_variable_index`` maps it to its index as Keras's
    own optimizers do.

    Example:
        >>> import keras
        >>> v = keras.Variable([1.0, 2.0]); opt = keras.optimizers.SGD(momentum=0.9)
        >>> opt.build([v])
        >>> optimizer_slot(opt, opt.momentums, v) is opt.momentums[0]
        True
    """
    return slots[optimizer._get_variable_index(variable)]


class DecaysInUpdateStep:
    """A Keras optimizer's base (listed first) whose ``update_step`` applies ``weight_decay``.

    Keras applies an optimizer's ``weight_decay`` itself, decoupled
    (``p -= p * wd * lr``, ``wd`` cast to the weight's dtype through float32),
    in ``_apply_weight_decay``, before it calls ``update_step``; an optimizer
    whose step decays in its own way (torch's L2 term, torch's ``p * (1 - lr *
    wd)`` in double precision) turns that pass off here, as Keras's own
    ``Muon`` does. ``weight_decay`` stays the optimizer's attribute and config.

    Example:
        >>> import keras
        >>> class NoDecay(DecaysInUpdateStep, keras.optimizers.SGD):
        ...     pass
        >>> w = keras.Variable([1.0])
        >>> _ = NoDecay(0.5, weight_decay=0.1).apply_gradients([(keras.ops.zeros((1,)), w)])
        >>> float(w.numpy()[0])  # Keras's SGD alone: 1 - 1 * 0.1 * 0.5
        1.0
    """

    def _apply_weight_decay(self, variables: Any) -> None:
        """Nothing: the optimizer's update step decays."""


def weight_decay_applies(optimizer: Any, variable: Any) -> bool:
    """Whether ``optimizer`` decays ``variable``: not excluded by ``exclude_from_weight_decay``.

    Keras's ``_use_weight_decay`` reads what the public
    ``optimizer.exclude_from_weight_decay(var_list=..., var_names=...)`` set (the
    variables, or a pattern of their names); under a strategy ``variable`` may
    be a replica's component of a distributed one, mapped as Keras maps it.

    Example:
        >>> import keras
        >>> w, b = keras.Variable([[1.0]]), keras.Variable([1.0])
        >>> opt = keras.optimizers.SGD(); opt.exclude_from_weight_decay(var_list=[b])
        >>> weight_decay_applies(opt, w), weight_decay_applies(opt, b)
        (True, False)
    """
    return bool(optimizer._use_weight_decay(variable))


def checkpoint_value_key(name: str) -> str:
    """The key of the variable tracked as ``name`` on a ``tf.train.Checkpoint``, in its files.

    What ``tf.train.load_checkpoint(path).get_tensor(key)`` takes.

    Example:
        >>> checkpoint_value_key("data_position")
        'data_position/.ATTRIBUTES/VARIABLE_VALUE'
    """
    return f"{name}/.ATTRIBUTES/VARIABLE_VALUE"


def backing_variable(variable: Any) -> Any:
    """The ``tf.Variable`` behind a Keras variable (``variable.value``); others as they are.

    Only for Keras variables and plain tensors: a ``tf.Variable`` has a
    ``value`` *method*, which this returns as is (as the call sites always did).

    Example:
        >>> import keras, tensorflow as tf
        >>> isinstance(backing_variable(keras.Variable(1.0)), tf.Variable)
        True
    """
    return getattr(variable, "value", variable)


def attach_optimizer(model: Any, optimizer: Any) -> None:
    """Makes ``model.optimizer`` the optimizer a custom loop trains it with, untracked.

    Keras callbacks (``TensorBoard``'s learning-rate scalar,
    ``ReduceLROnPlateau``, ``LearningRateScheduler``) read ``model.optimizer``,
    which only ``compile`` sets. Set as Keras would (``model.optimizer = ...``)
    it would become a checkpoint dependency of the model and move the
    optimizer's keys under ``model/optimizer/``; set with
    ``object.__setattr__`` the model's checkpoints and saved files stay as they
    are (tfdp checkpoints the optimizer beside the model).

    Example:
        >>> import tempfile, keras, tensorflow as tf
        >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
        >>> attach_optimizer(model, keras.optimizers.SGD(0.25))
        >>> float(model.optimizer.learning_rate)
        0.25
        >>> path = tf.train.Checkpoint(model=model).write(tempfile.mkdtemp() + "/c")
        >>> [key for key, _ in tf.train.list_variables(path) if "optimizer" in key]
        []
    """
    object.__setattr__(model, "optimizer", optimizer)


def hold_untracked(layer: Any, name: str, value: Any) -> None:
    """Sets ``layer.<name> = value`` without Keras or TensorFlow tracking it.

    A Keras layer tracks every layer, variable or model assigned to it: its
    variables join the layer's ``variables`` / ``weights`` (trained, saved) and
    the layer's checkpoints. Set with ``object.__setattr__`` (as
    :func:`attach_optimizer` does) the value is a plain attribute: a model
    holding a frozen teacher this way neither trains, saves nor checkpoints it.

    Example:
        >>> import keras
        >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
        >>> hold_untracked(model, "teacher", keras.Sequential([keras.Input((2,)),
        ...                                                   keras.layers.Dense(3)]))
        >>> model.teacher.output_shape, len(model.weights)
        ((None, 3), 2)
    """
    object.__setattr__(layer, name, value)


def seed_generator_states(model: Any) -> list[Any]:
    """The state variables of a Keras model's ``SeedGenerator`` objects (dropout, random layers).

    ``tf.train.Checkpoint(model=...)`` does not save them: an exact resume
    must. Found by the ``seed_generator`` in their variable path.

    Example:
        >>> import keras
        >>> m = keras.Sequential([keras.Input((2,)), keras.layers.Dropout(0.5)])
        >>> len(seed_generator_states(m))
        1
    """
    return [backing_variable(v) for v in model.variables if "seed_generator" in v.path]


_REDUCED_LOCK = threading.Lock()
_REDUCED_DEPTH: dict[int, int] = {}


@contextmanager
def gradients_reduced(optimizer: Any) -> Iterator[None]:
    """Inside, ``optimizer.apply_gradients`` takes gradients that are already all-reduced.

    Keras's TensorFlow optimizer all-reduces (sums over the replicas) the
    gradients it is given in a replica context, in ``_all_reduce_sum_gradients``,
    before its merge call applies them. A step that has summed its gradients
    already (to check them, clip them, or fold other values into the same
    collective) sets that method to the identity on the optimizer instance
    while it traces the update, and only then: any other update (a custom
    train step's ``optimizer.apply``) is reduced by Keras as always. Nothing
    else of the update changes: learning rate, weight decay, iteration count,
    EMA, constraints. Re-entrant: the replica threads of a
    ``call_for_each_replica`` may each enter it around their own part of one
    update (they run one at a time, and each calls the method before its first
    merge call); the method comes back when the last one leaves.

    Example:
        >>> import keras
        >>> opt = keras.optimizers.SGD(0.5)
        >>> with gradients_reduced(opt):
        ...     opt._all_reduce_sum_gradients([(1.0, None)])
        [(1.0, None)]
        >>> "_all_reduce_sum_gradients" in vars(opt)
        False
    """
    name = "_all_reduce_sum_gradients"
    if not hasattr(optimizer, name):  # not Keras's TensorFlow optimizer: nothing to replace
        raise ConfigTypeError(
            f"optimizer must be a Keras optimizer of the TensorFlow backend "
            f"(keras.optimizers.*), got a {type(optimizer).__name__} without {name}: tfdp "
            "cannot hand it gradients it has all-reduced",
            argument="optimizer",
        )
    key = id(optimizer)
    with _REDUCED_LOCK:
        _REDUCED_DEPTH[key] = _REDUCED_DEPTH.get(key, 0) + 1
        if _REDUCED_DEPTH[key] == 1:
            object.__setattr__(optimizer, name, list)
    try:
        yield
    finally:
        with _REDUCED_LOCK:
            _REDUCED_DEPTH[key] -= 1
            if not _REDUCED_DEPTH[key]:
                del _REDUCED_DEPTH[key]
                object.__delattr__(optimizer, name)


#: A wrapper of a method: ``wrap(original) -> replacement``.
Wrapper = Callable[[Callable[..., Any]], Callable[..., Any]]


@contextmanager
def fit_step_overrides(
    model: Any, *, train_step: Wrapper | None = None, apply_gradients: Wrapper | None = None
) -> Iterator[None]:
    """Inside, ``model.fit`` runs a step that ``train_step`` / ``apply_gradients`` wrap.

    Keras 3 (TensorFlow backend) traces ``model.train_step`` into
    ``model.train_function`` the first time ``fit`` needs it, and its
    ``train_step`` updates through ``model.optimizer.apply_gradients``, handing
    it the replica's own gradients (in the replica context; the optimizer
    all-reduces them itself). Each wrapper gets the original method and returns
    its replacement, set on the instance; the cached train function is dropped
    on entry and on exit, so that ``fit`` traces the step with the replacements
    inside and without them afterwards. A custom ``train_step`` that updates
    through ``optimizer.apply`` does not reach ``apply_gradients``.

    Example:
        >>> import keras, numpy as np
        >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
        >>> model.compile("sgd", "mse")
        >>> calls = []
        >>> def counted(original):
        ...     def step(data):
        ...         calls.append("traced")
        ...         return original(data)
        ...     return step
        >>> with fit_step_overrides(model, train_step=counted):
        ...     _ = model.fit(np.ones((4, 2)), np.ones((4, 1)), epochs=2, verbose=0)
        >>> calls, "train_step" in vars(model), model.train_function is None
        (['traced'], False, True)
    """
    installed: list[tuple[Any, str]] = []
    for obj, name, wrap in (
        (model, "train_step", train_step),
        (model.optimizer, "apply_gradients", apply_gradients),
    ):
        if wrap is not None:
            setattr(obj, name, wrap(getattr(obj, name)))
            installed.append((obj, name))
    model.train_function = None  # traced again, with the replacements
    try:
        yield
    finally:
        for obj, name in reversed(installed):
            delattr(obj, name)  # the class's method again
        model.train_function = None
