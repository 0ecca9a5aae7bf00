"""Exact distributed evaluation, and the per-example loss both training and evaluation use.

This module owns :class:`PerExampleLoss` (which refuses mean-reduced Keras
losses, the trap of Keras >= 3.8 dividing by the replica count under a
strategy, and computes in the model's type: a Keras loss narrower than it
rebuilt, see :mod:`tfdp.train.dtypes`), :func:`per_example_loss` (which
rebuilds a loss as ``compile`` takes it with ``reduction="none"``),
:func:`unpack_batch`, and :class:`Evaluator`: metrics updated in replica
context with the evaluation sampler's weights (padding weighted 0), read in
cross-replica context -- equal to a single-device pass over the whole set,
whatever the replica count; the loss accumulated in the model's type
(float64 for a float64 model).

Example:
    >>> import numpy as np
    >>> loss = PerExampleLoss("sparse_categorical_crossentropy")
    >>> loss(np.array([0, 1]), np.array([[0.9, 0.1], [0.2, 0.8]])).shape
    TensorShape([2])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
import tensorflow as tf

from tfdp._autograph import plain, user_code
from tfdp._compat.fast.process import release_in_background
from tfdp.errors import ConfigError, DataError
from tfdp.train.dtypes import check_floating, loss_dtype, widened

_NAMED = {
    "sparse_categorical_crossentropy": lambda: keras.losses.SparseCategoricalCrossentropy(
        reduction="none"
    ),
    "sparse_categorical_crossentropy_from_logits": lambda: (
        keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    ),
    "categorical_crossentropy": lambda: keras.losses.CategoricalCrossentropy(reduction="none"),
    "categorical_crossentropy_from_logits": lambda: keras.losses.CategoricalCrossentropy(
        from_logits=True, reduction="none"
    ),
    "binary_crossentropy": lambda: keras.losses.BinaryCrossentropy(reduction="none"),
    "binary_crossentropy_from_logits": lambda: keras.losses.BinaryCrossentropy(
        from_logits=True, reduction="none"
    ),
    "mse": lambda: keras.losses.MeanSquaredError(reduction="none"),
    "mean_squared_error": lambda: keras.losses.MeanSquaredError(reduction="none"),
}


def unpack_batch(batch: Any) -> tuple[Any, Any, Any]:
    """Split a batch into ``(x, y, sample_weight)`` like ``model.fit`` does.

    Example:
        >>> unpack_batch((1, 2))
        (1, 2, None)
    """
    if isinstance(batch, dict) and "sample_weight" in batch:
        rest = {k: v for k, v in batch.items() if k != "sample_weight"}
        return rest, None, batch["sample_weight"]
    if isinstance(batch, (tuple, list)):
        if len(batch) == 2:
            return batch[0], batch[1], None
        if len(batch) == 3:
            return batch[0], batch[1], batch[2]
        raise DataError(
            "must be (x, y), (x, y, sample_weight) or a dict (with 'sample_weight'), got "
            f"a {type(batch).__name__} of {len(batch)}",
            argument="batch",
        )
    return batch, None, None


class PerExampleLoss:
    """A loss returning one value per example, in ``dtype``, whatever it is given.

    Args:
        loss: A Keras ``Loss`` with ``reduction="none"``, a function
            ``(y_true, y_pred) -> per-example losses``, or a name from
            ``sparse_categorical_crossentropy[_from_logits]``,
            ``categorical_crossentropy[_from_logits]``,
            ``binary_crossentropy[_from_logits]``, ``mse``.
        dtype: The type of the values (the model's loss type,
            :func:`tfdp.train.dtypes.loss_dtype`). A Keras loss computing in a
            narrower type (Keras's losses compute in ``keras.config.floatx()``
            unless built with a ``dtype``) is rebuilt to compute in it, so a
            float64 model's loss is float64 throughout.

    Raises:
        tfdp.errors.ConfigError: for an unknown name, something that is no loss, a Keras
            loss with a mean (or sum) reduction, naming the fix; when called, a
            prediction or a loss value whose type is not a real floating-point
            one, or a loss that fails on a prediction of a type other than
            float32 (a float32 constant against a float64 prediction), naming
            the type.

    Example:
        >>> import numpy as np
        >>> PerExampleLoss("mse").name
        'mean_squared_error'
        >>> PerExampleLoss("mse", "float64")(np.zeros([2, 1]), np.ones([2, 1])).dtype.name
        'float64'
    """

    def __init__(self, loss: Any, dtype: Any = "float32") -> None:
        self.dtype = tf.as_dtype(dtype)
        if isinstance(loss, PerExampleLoss):
            loss = loss.loss
        self.loss = loss  # as given (a name, a Keras loss, a function): rebuilt for another dtype
        if isinstance(loss, str):
            if loss not in _NAMED:
                raise ConfigError(
                    f"{loss!r} is not a known name; valid names: {sorted(_NAMED)}",
                    argument="loss",
                )
            loss = _NAMED[loss]()
        if isinstance(loss, keras.losses.Loss):
            if loss.reduction not in (None, "none"):
                raise ConfigError(
                    f"{loss.name!r} has reduction={loss.reduction!r}: under a tf.distribute "
                    "strategy Keras >= 3.8 divides a mean-reduced loss by the replica count, "
                    "scaling gradients wrongly. Build it with reduction='none' (e.g. "
                    f"keras.losses.{type(loss).__name__}(reduction='none')): tfdp averages over "
                    "the global batch itself",
                    argument="loss",
                )
            loss = widened(loss, self.dtype)
        elif not callable(loss):
            raise ConfigError(
                f"must be a Keras loss, a callable or a name, got {loss!r}", argument="loss"
            )
        self.fn: Any = user_code(loss)  # a user's function: converted by AutoGraph, as tf.function
        self.name: str = getattr(loss, "name", getattr(loss, "__name__", "loss"))

    def __call__(self, y_true: Any, y_pred: Any) -> tf.Tensor:
        """Per-example losses, shape ``[B]``, in :attr:`dtype` (trailing axes averaged)."""
        check_floating("the model's prediction", y_pred)
        types = sorted({tf.as_dtype(leaf.dtype).name for leaf in tf.nest.flatten(y_pred)})
        try:
            values = tf.convert_to_tensor(self.fn(y_true, y_pred))
        except (TypeError, tf.errors.InvalidArgumentError) as error:
            if types == ["float32"]:
                raise  # not a matter of the prediction's type
            raise ConfigError(
                f"{self.name!r} failed on the model's {' / '.join(types)} prediction (a loss "
                "written for float32 values may not take another type: compute it in the "
                f"prediction's type): {error}",
                argument="loss",
            ) from error
        check_floating(f"the output of loss {self.name!r}", values)
        values = tf.cast(values, self.dtype)
        if values.shape.rank == 0:
            raise ConfigError(
                "returned a scalar: it must return one value per example "
                "(a Keras loss with reduction='none')",
                argument="loss",
            )
        if values.shape.rank and values.shape.rank > 1:
            values = tf.reduce_mean(values, axis=list(range(1, values.shape.rank)))
        return values


def per_example_loss(loss: Any, dtype: Any = "float32") -> PerExampleLoss:
    """The per-example version of a loss as ``model.compile`` takes it, in ``dtype``.

    A Keras ``Loss`` with a reduction is rebuilt with ``reduction="none"``
    (under a strategy tfdp averages over the global batch itself); a name is
    one of :class:`PerExampleLoss`'s or any ``keras.losses.get`` knows; a
    function or a :class:`PerExampleLoss` is used as it is. ``dtype`` is
    :class:`PerExampleLoss`'s.

    Example:
        >>> loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        >>> per_example_loss(loss)(tf.constant([0, 1]), tf.constant([[2.0, 0.0], [0.0, 2.0]])).shape
        TensorShape([2])
    """
    if isinstance(loss, keras.losses.Loss) and loss.reduction not in (None, "none"):
        config = {**loss.get_config(), "reduction": "none"}
        loss = type(loss).from_config(config)
    elif isinstance(loss, str) and loss not in _NAMED:
        try:
            loss = keras.losses.get(loss)
        except ValueError:
            raise ConfigError(
                f"{loss!r} is not a known name; valid names: {sorted(_NAMED)} or any Keras "
                "loss name (keras.losses.get)",
                argument="loss",
            ) from None
    return PerExampleLoss(loss, dtype)


class Evaluator:
    """Exact evaluation of a model under a strategy.

    Args:
        strategy: The strategy the model lives under (``None``: the default strategy).
        model: The Keras model.
        loss: Anything :class:`PerExampleLoss` accepts; computed and averaged in
            the model's loss type (:func:`tfdp.train.dtypes.loss_dtype`:
            float64 for a float64 model).
        metrics: Keras metrics to mirror (they are cloned: training state is untouched).

    Example:
        >>> import keras, numpy as np, tensorflow as tf
        >>> from tfdp import ArraySource, DistributedInput
        >>> x, y = np.ones([5, 2], np.float32), np.array([0, 0, 1, 1, 2])
        >>> dense = keras.layers.Dense(3, kernel_initializer="zeros")
        >>> model = keras.Sequential([keras.Input((2,)), dense])
        >>> inp = DistributedInput(None, ArraySource((x, y)), sampler="eval", batch_size=2)
        >>> ev = Evaluator(tf.distribute.get_strategy(), model,
        ...                "sparse_categorical_crossentropy_from_logits",
        ...                [keras.metrics.SparseCategoricalAccuracy()])
        >>> out = ev.evaluate(inp)  # 6 slots, the padding weighted 0: 2 of 5 right
        >>> round(out["loss"], 4), round(out["sparse_categorical_accuracy"], 4)
        (1.0986, 0.4)
    """

    def __init__(
        self, strategy: Any, model: keras.Model, loss: Any, metrics: Sequence[Any] = ()
    ) -> None:
        self.strategy = strategy if strategy is not None else tf.distribute.get_strategy()
        self.model = model
        dtype = loss_dtype(model)
        self.loss = PerExampleLoss(loss, dtype)
        strategy = self.strategy
        with strategy.scope():
            self.loss_metric = keras.metrics.Mean(name="loss", dtype=dtype.name)
            self.metrics = []
            for m in metrics:
                m = keras.metrics.get(m) if isinstance(m, str) else m
                self.metrics.append(type(m).from_config(m.get_config()))
        self._fn: Any = None
        self._dataset: tuple[Any, Any] | None = None

    def _replica_step(self, batch: Any) -> None:
        x, y, w = unpack_batch(batch)
        pred = self.model(x, training=False)
        per_ex = self.loss(y, pred)
        self.loss_metric.update_state(per_ex, sample_weight=w)
        for m in self.metrics:
            m.update_state(y, pred, sample_weight=w)

    def evaluate(self, eval_input: Any) -> dict[str, float]:
        """Run over one epoch of ``eval_input`` and return ``{"loss": ..., name: value}``.

        Use ``DistributedInput(..., sampler="eval")`` for exact results: its
        weights mark padding 0, so every real sample counts exactly once.
        """
        if self._fn is None:
            step = plain(self._replica_step)

            @tf.function
            def run(iterator: Any, n: tf.Tensor) -> tf.Tensor:
                for _ in tf.range(n):
                    self.strategy.run(step, args=(next(iterator),))
                # Read to the end: a multi-device iterator dropped while a replica's prefetch is
                # still fetching "the end" cancels that fetch, and TensorFlow logs "Local
                # rendezvous is aborting with status: CANCELLED" (at random, up to every epoch).
                return iterator.get_next_as_optional().has_value()

            self._fn = run
        self.loss_metric.reset_state()
        for m in self.metrics:
            m.reset_state()
        # The distributed dataset is built once per input; each evaluation iterates it anew.
        if self._dataset is None or self._dataset[0] is not eval_input:
            self._dataset = (eval_input, eval_input.epoch(0))
        steps = eval_input.steps_per_epoch
        held = [iter(self._dataset[1])]
        try:
            more = bool(self._fn(held[0], tf.constant(steps, tf.int64)))
        finally:
            # Destroyed off this thread: TensorFlow's teardown of an iterator can wait seconds
            # (see tfdp._compat.fast.process.release_in_background).
            release_in_background(held)
        if more:
            raise RuntimeError(
                f"tfdp: the evaluation input holds more than its steps_per_epoch={steps} "
                "batches: the evaluation would not cover it exactly (a bug of tfdp's input)"
            )
        out = {"loss": float(self.loss_metric.result())}
        for m in self.metrics:
            out[m.name] = float(m.result())
        return out


def evaluate(
    strategy: Any, model: keras.Model, eval_input: Any, loss: Any, metrics: Sequence[Any] = ()
) -> dict[str, float]:
    """One-shot exact evaluation (for the ``model.fit`` path): see :class:`Evaluator`.

    Example:
        >>> import keras, numpy as np
        >>> from tfdp import ArraySource, DistributedInput
        >>> x, y = np.ones([7, 2], np.float32), np.zeros([7])
        >>> dense = keras.layers.Dense(1, kernel_initializer="zeros")
        >>> model = keras.Sequential([keras.Input((2,)), dense])
        >>> inp = DistributedInput(None, ArraySource((x, y - 2)), sampler="eval", batch_size=4)
        >>> evaluate(None, model, inp, "mse")  # (0 - (-2))^2 over the 7 real examples
        {'loss': 4.0}
    """
    return Evaluator(strategy, model, loss, metrics).evaluate(eval_input)
