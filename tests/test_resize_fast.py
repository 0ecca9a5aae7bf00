"""The antialiased resize of the window stages in two row passes: bit for bit tf.image.resize's.

``tfdp.augment._fast.resize_antialiased`` reorders ``ScaleAndTranslate``'s work (two vertical
passes with 2-D transposes between them) and must give exactly its float32 values: shrinking,
enlarging, one axis of each, one-pixel sides, any channel count, uint8 and float inputs, shapes
known or not when traced; and the window stages (RandomResizedCrop, CenterCrop) use it.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from tfdp import augment
from tfdp.augment import _fast

METHODS = sorted(_fast.SEPARABLE)


def _plain(image: tf.Tensor, size: tuple[int, int], method: str) -> np.ndarray:
    return tf.image.resize(image, size, method=method, antialias=True).numpy()


def _image(rng: np.random.Generator, h: int, w: int, c: int, dtype: str) -> tf.Tensor:
    pixels = rng.integers(0, 256, size=(h, w, c))
    if dtype == "float32":  # values off the integers too: more rounding to agree on
        return tf.constant(pixels + rng.random((h, w, c)), tf.float32)
    return tf.constant(pixels, tf.dtypes.as_dtype(dtype))


@settings(max_examples=40, deadline=None)
@given(
    h=st.integers(1, 90),
    w=st.integers(1, 90),
    out_h=st.integers(1, 40),
    out_w=st.integers(1, 40),
    c=st.sampled_from([1, 3, 4]),
    dtype=st.sampled_from(["uint8", "float32"]),
    method=st.sampled_from(METHODS),
    seed=st.integers(0, 2**32 - 1),
)
def test_bit_for_bit_tf_image_resize(h, w, out_h, out_w, c, dtype, method, seed):
    image = _image(np.random.default_rng(seed), h, w, c, dtype)
    fast = _fast.resize_antialiased(image, (out_h, out_w), method)
    assert fast.dtype == tf.float32 and tuple(fast.shape) == (out_h, out_w, c)
    np.testing.assert_array_equal(fast.numpy(), _plain(image, (out_h, out_w), method))


@settings(max_examples=40, deadline=None)
@given(
    h=st.integers(1, 90),
    w=st.integers(1, 90),
    out=st.integers(1, 40),
    scale=st.tuples(st.floats(0.05, 4.0), st.floats(0.05, 4.0)),
    shift=st.tuples(st.floats(-30.0, 5.0), st.floats(-30.0, 5.0)),
    dtype=st.sampled_from(["uint8", "float32"]),
    method=st.sampled_from(METHODS),
    seed=st.integers(0, 2**32 - 1),
)
def test_a_placement_is_scale_and_translate_bit_for_bit(
    h, w, out, scale, shift, dtype, method, seed
):
    """A placed window's resize (ResizeCenterCrop's): ScaleAndTranslate's own values with that
    scale and translation."""
    image = _image(np.random.default_rng(seed), h, w, 3, dtype)
    placement = tf.constant([*scale, *shift], tf.float32)
    fast = _fast.resize_antialiased(image, (out, out), method, placement)
    want = tf.raw_ops.ScaleAndTranslate(
        images=tf.cast(image, tf.float32)[tf.newaxis],
        size=[out, out],
        scale=placement[:2],
        translation=placement[2:],
        kernel_type=_fast.SEPARABLE[method],
        antialias=True,
    )[0]
    np.testing.assert_array_equal(fast.numpy(), want.numpy())


@pytest.mark.parametrize("method", METHODS)
def test_photo_sized_windows_traced_without_shapes(method):
    """Windows as RandomResizedCrop cuts them from photos, shapes unknown to the trace."""
    rng = np.random.default_rng(7)
    fast = tf.function(
        lambda im: _fast.resize_antialiased(im, (224, 224), method),
        input_signature=[tf.TensorSpec([None, None, None], tf.uint8)],
    )
    for h, w in [(375, 500), (61, 80), (224, 224), (500, 17), (1, 300), (150, 600)]:
        image = _image(rng, h, w, 3, "uint8")
        np.testing.assert_array_equal(fast(image).numpy(), _plain(image, (224, 224), method))


def test_the_window_stages_use_it_with_the_same_values():
    rng = np.random.default_rng(3)
    images = _image(rng, 120, 90, 3, "uint8")[tf.newaxis]
    seeds = [[5, 0]]
    rrc = augment.RandomResizedCrop(32, interpolation="bicubic", antialias=True)
    top, left, h, w = (int(v[0]) for v in rrc.crop_boxes(seeds, 120, 90))
    want = _plain(images[0, top : top + h, left : left + w], (32, 32), "bicubic")
    np.testing.assert_array_equal(rrc(images, seeds)[0].numpy(), want)
    crop = augment.CenterCrop(40, interpolation="bilinear", antialias=True)
    ((top, left, h, w),) = crop.host_windows(np.array([[120, 90]]), np.zeros([1, 0], np.float32))
    want = _plain(images[0, top : top + h, left : left + w], (40, 40), "bilinear")
    np.testing.assert_array_equal(crop(images, seeds)[0].numpy(), want)
