"""tfdp.random: the counter hash's NumPy twin is its TensorFlow definition, bit for bit.

The hash is written once (tfdp.random.counter_hash) against an array namespace; these
properties run that one definition in both libraries on arbitrary int64 seeds and uint32
counters and compare every bit, and tie its finaliser to tfdp.seeding.fmix32. The
TensorFlow side is checked against a plain-Python MurmurHash3 in tests/test_augment.py.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tfdp import augment, seeding
from tfdp import random as tfdp_random
from tfdp._arrays import NUMPY, TENSORFLOW
from tfdp.random.counter_hash import MAX_FOLD_DATA, _Murmur, fold_many, hash_u32, uniforms

INT64 = st.integers(-(2**63), 2**63 - 1)
SEEDS = st.lists(st.tuples(INT64, INT64), min_size=1, max_size=6)
EDGE_SEEDS = [(0, 0), (-1, -1), (2**63 - 1, -(2**63)), (2**32, 2**32 - 1)]


def _both(seeds: list[tuple[int, int]]) -> tuple[np.ndarray, tf.Tensor]:
    return NUMPY.const(seeds, NUMPY.int64), TENSORFLOW.const(seeds, TENSORFLOW.int64)


@settings(max_examples=30, deadline=None)
@given(
    seeds=SEEDS,
    counters=st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=5),
    salt=st.sampled_from([seeding.MURMUR_SALT_UNIFORM, seeding.MURMUR_SALT_FOLD, 0, 2**32 - 1]),
)
@example(seeds=EDGE_SEEDS, counters=[0, 1, 2**31, 2**32 - 1], salt=seeding.MURMUR_SALT_UNIFORM)
def test_the_hash_in_numpy_equals_the_hash_in_tensorflow(seeds, counters, salt):
    host_seeds, graph_seeds = _both(seeds)
    host = hash_u32(host_seeds, NUMPY.const(counters, NUMPY.uint32), salt, NUMPY)
    graph = hash_u32(graph_seeds, TENSORFLOW.const(counters, TENSORFLOW.uint32), salt, TENSORFLOW)
    assert host.dtype == np.uint32 and host.shape == (len(seeds), len(counters))
    np.testing.assert_array_equal(host, graph.numpy())


@settings(max_examples=30, deadline=None)
@given(
    seeds=SEEDS,
    n=st.integers(0, 45),
    datas=st.lists(st.integers(0, MAX_FOLD_DATA), min_size=1, max_size=4),
)
@example(seeds=EDGE_SEEDS, n=40, datas=[0, 1, MAX_FOLD_DATA])
def test_uniforms_and_folds_in_numpy_equal_tensorflows(seeds, n, datas):
    host_seeds, graph_seeds = _both(seeds)
    np.testing.assert_array_equal(
        uniforms(host_seeds, n, NUMPY), uniforms(graph_seeds, n, TENSORFLOW).numpy()
    )
    host = fold_many(host_seeds, datas, NUMPY)
    np.testing.assert_array_equal(host, fold_many(graph_seeds, datas, TENSORFLOW).numpy())
    assert host.dtype == np.int64 and (host[..., 0] >= 0).all()  # 63-bit keys
    np.testing.assert_array_equal(host[..., 1], np.broadcast_to(host_seeds[:, 1:], host.shape[:2]))


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=20))
@example([0, 1, 2**32 - 1])
def test_the_hash_finalises_with_seedings_fmix32(values):
    x = np.array(values, np.uint32)
    want = seeding.fmix32(x.copy())
    np.testing.assert_array_equal(_Murmur(NUMPY).finalise(x), want)
    got = _Murmur(TENSORFLOW).finalise(tf.constant(x, tf.uint32)).numpy()
    np.testing.assert_array_equal(got, want)


@settings(max_examples=20, deadline=None)
@given(
    seeds=SEEDS,
    streams=st.lists(
        st.tuples(st.none() | st.integers(0, 50), st.integers(1, 12)), min_size=1, max_size=4
    ),
)
def test_folded_uniforms_are_the_separate_draws_in_the_graph_and_on_the_host(seeds, streams):
    s = tf.constant(seeds, tf.int64)
    want = [
        tfdp_random.per_sample_uniform(s if i is None else tfdp_random.fold_in(s, i), n).numpy()
        for i, n in streams
    ]
    for on_host in (False, True):
        got = tfdp_random.folded_uniforms(s, streams, on_host=on_host)
        assert [g.shape.as_list() for g in got] == [[len(seeds), n] for _, n in streams]
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g.numpy(), w)


def test_augment_hands_out_the_same_functions():
    assert augment.per_sample_uniform is tfdp_random.per_sample_uniform
    assert augment.fold_in is tfdp_random.fold_in


def test_uniform_int_stays_below_its_count_at_the_top_uniform():
    top = np.float32(1 - 2**-24)  # the largest draw
    got = tfdp_random.uniform_int(tf.constant([top, top, 0.0]), tf.constant([1, 7, 7]))
    assert got.numpy().tolist() == [0, 6, 0]
