"""tfdp traces its own graph code without AutoGraph, and a user's code with it.

A user's augmentation, Compose stage, source method or loss function with a Python ``if``
on a tensor works exactly as it would in ``tf.data.Dataset.map`` or ``tf.function``; tfdp's
own functions are left unconverted (tfdp._autograph).
"""

from __future__ import annotations

import functools
from typing import ClassVar

import keras
import numpy as np
import tensorflow as tf

from tfdp import augment
from tfdp._autograph import is_library_code, plain, user_code
from tfdp.input import DistributedInput
from tfdp.sources import ArraySource
from tfdp.train.evaluate import evaluate

N = 12


class NegateLarge:
    """A user's batched augmentation: Python control flow on tensors (AutoGraph's job)."""

    batched: ClassVar[bool] = True

    def __call__(self, example, seeds):
        x, y = example
        if tf.reduce_max(x) > 5.0:  # a tensor condition: needs AutoGraph's tf.cond
            x = -x
        return x, y


def halve_if_positive(example, seed):
    """A user's per-example augmentation with a tensor ``if``."""
    x, y = example
    if tf.reduce_sum(x) > 0:
        x = x / 2
    return x, y


class ClippedSource(ArraySource):
    """A user's source: an override of ``gather`` with a tensor ``if``."""

    def gather(self, index):
        x, y = super().gather(index)
        if tf.reduce_max(x) > 100.0:
            x = tf.minimum(x, 100.0)
        return x, y


def _values(inp: DistributedInput) -> np.ndarray:
    out = []
    for batch in inp.epoch(0):
        out.append(batch[0].numpy())  # (x, y, weight)
    return np.concatenate(out)[:, 0]


def _input(source, augment_fn) -> DistributedInput:
    return DistributedInput(None, source, sampler="eval", batch_size=4, augment=augment_fn)


def _arrays(scale: float = 1.0) -> ArraySource:
    return ArraySource((np.arange(N, dtype=np.float32)[:, None] * scale, np.arange(N)))


def test_user_batched_augmentation_with_tensor_if():
    got = _values(_input(_arrays(), NegateLarge()))
    x = np.arange(N, dtype=np.float32)
    batches = x.reshape(-1, 4)
    want = np.concatenate([-b if b.max() > 5 else b for b in batches])
    np.testing.assert_array_equal(got, want)


def test_user_stage_inside_compose_is_converted():
    got = _values(_input(_arrays(), augment.Compose([NegateLarge()])))
    batches = np.arange(N, dtype=np.float32).reshape(-1, 4)
    np.testing.assert_array_equal(got, np.concatenate([-b if b.max() > 5 else b for b in batches]))


def test_user_per_example_augmentation_with_tensor_if():
    got = _values(_input(_arrays(), halve_if_positive))
    x = np.arange(N, dtype=np.float32)
    np.testing.assert_array_equal(got, np.where(x > 0, x / 2, x))


def test_user_augmentation_in_a_partial_is_converted():
    def scale_if_positive(example, seed, factor):
        x, y = example
        if tf.reduce_sum(x) > 0:
            x = x * factor
        return x, y

    got = _values(_input(_arrays(), functools.partial(scale_if_positive, factor=3.0)))
    x = np.arange(N, dtype=np.float32)
    np.testing.assert_array_equal(got, np.where(x > 0, x * 3, x))


def test_user_source_override_with_tensor_if():
    got = _values(
        _input(ClippedSource((np.arange(N, dtype=np.float32)[:, None] * 20, np.arange(N))), None)
    )
    np.testing.assert_array_equal(got, np.minimum(np.arange(N) * 20.0, 100.0))


def test_user_loss_with_tensor_if_in_evaluation():
    def loss(y_true, y_pred):  # per example; a tensor condition
        err = tf.abs(tf.cast(y_true, tf.float32) - y_pred[:, 0])
        if tf.reduce_max(err) > 1e6:
            err = tf.zeros_like(err)
        return err

    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1, use_bias=False)])
    model.layers[0].set_weights([np.ones((1, 1), np.float32)])  # y_pred = x = y: loss 0
    out = evaluate(tf.distribute.get_strategy(), model, _input(_arrays(), None), loss)
    assert out["loss"] == 0.0


def test_library_and_user_callables_are_told_apart():
    flip = augment.RandomFlip()
    assert is_library_code(flip) and user_code(flip) is flip
    assert is_library_code(tf.nn.relu) and is_library_code(keras.activations.relu)
    assert (
        not is_library_code(halve_if_positive)
        and user_code(halve_if_positive) is not halve_if_positive
    )
    assert not is_library_code(NegateLarge()) and not is_library_code(ClippedSource.gather)


def test_plain_function_does_not_convert_a_tensor_if():
    def cond(x):  # without AutoGraph a tensor condition cannot be a Python bool
        return x if x > 0 else -x

    ds = tf.data.Dataset.from_tensors(tf.constant(1.0))
    try:
        ds.map(plain(cond))
    except TypeError as err:  # OperatorNotAllowedInGraphError is a TypeError
        assert "bool" in str(err)
    else:
        raise AssertionError("plain() converted the function")
    assert list(ds.map(cond).as_numpy_iterator()) == [1.0]  # tf.data's default converts it
