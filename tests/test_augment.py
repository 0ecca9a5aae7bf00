"""Tests for tfdp.augment: the per-sample hash, every augmentation, Compose, tf.data use."""

from __future__ import annotations

import collections
import math

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from tfdp import augment
from tfdp.errors import DataError
from tfdp.seeding import MURMUR_SALT_UNIFORM
from tfdp.windows.plan import split_window

M32 = 0xFFFFFFFF


# ------------------------------------------------------------------ reference implementations


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & M32


def murmur3_32(data: bytes, seed: int) -> int:
    """Plain-Python MurmurHash3_x86_32 on bytes (with tail handling)."""
    c1, c2 = 0xCC9E2D51, 0x1B873593
    h = seed & M32
    n_blocks = len(data) // 4
    for i in range(n_blocks):
        k = int.from_bytes(data[4 * i : 4 * i + 4], "little")
        k = _rotl((k * c1) & M32, 15) * c2 & M32
        h = (_rotl(h ^ k, 13) * 5 + 0xE6546B64) & M32
    tail = data[4 * n_blocks :]
    if tail:
        k = int.from_bytes(tail, "little")
        k = _rotl((k * c1) & M32, 15) * c2 & M32
        h ^= k
    h ^= len(data)
    h ^= h >> 16
    h = h * 0x85EBCA6B & M32
    h ^= h >> 13
    h = h * 0xC2B2AE35 & M32
    return h ^ (h >> 16)


def reference_uniform(seed0: int, seed1: int, j: int) -> float:
    data = (
        (seed0 & (2**64 - 1)).to_bytes(8, "little")
        + (seed1 & (2**64 - 1)).to_bytes(8, "little")
        + j.to_bytes(4, "little")
    )
    return (murmur3_32(data, MURMUR_SALT_UNIFORM) >> 8) / 2**24


def seeds_for(positions, key: int = 0) -> np.ndarray:
    positions = np.asarray(positions, np.int64)
    return np.stack([np.full_like(positions, key), positions], axis=1)


def rand_images(shape, dtype=np.uint8, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype == np.uint8:
        return rng.integers(0, 256, size=shape, dtype=np.uint8)
    return rng.random(shape).astype(dtype)


def uniforms(seeds, n: int) -> np.ndarray:
    return augment.per_sample_uniform(tf.constant(seeds, tf.int64), n).numpy()


# ------------------------------------------------------------------ per_sample_uniform / fold_in


def test_reference_murmur_matches_published_vectors():
    assert murmur3_32(b"", 0) == 0
    assert murmur3_32(b"", 1) == 0x514E28B7
    assert murmur3_32(b"test", 0) == 0xBA6BD213
    assert murmur3_32(b"Hello, world!", 1234) == 0xFAF6CDB3
    assert murmur3_32(b"The quick brown fox jumps over the lazy dog", 0x9747B28C) == 0x2FA826CD


def test_uniform_matches_reference_hash_including_negative_and_large_seeds():
    seeds = [
        [0, 0],
        [0, 1],
        [1, 0],
        [-1, 7],
        [2**63 - 1, -(2**63)],
        [123456789012345, 987654321],
        [-5, 2**40 + 3],
    ]
    got = uniforms(seeds, 5)
    want = np.array([[reference_uniform(s0, s1, j) for j in range(5)] for s0, s1 in seeds])
    np.testing.assert_array_equal(got, want.astype(np.float32))


def test_uniform_shape_dtype_range_and_prefix_property():
    seeds = seeds_for(range(50), key=3)
    u = augment.per_sample_uniform(seeds, 7)
    assert u.shape == (50, 7) and u.dtype == tf.float32
    u = u.numpy()
    assert u.min() >= 0 and u.max() < 1
    np.testing.assert_array_equal(uniforms(seeds, 3), u[:, :3])
    assert augment.per_sample_uniform(seeds, 0).shape == (50, 0)
    # int32 seeds are accepted and mean the same as int64.
    np.testing.assert_array_equal(augment.per_sample_uniform(seeds.astype(np.int32), 7).numpy(), u)


def test_uniform_statistics_and_decorrelation():
    n_samples, n_draws = 20000, 4
    u = uniforms(seeds_for(range(n_samples), key=0), n_draws)
    u_next_key = uniforms(seeds_for(range(n_samples), key=1), n_draws)
    assert np.all(np.abs(u.mean(axis=0) - 0.5) < 0.01)
    assert np.all(np.abs(u.var(axis=0) - 1 / 12) < 0.003)
    # Counters of one sample, neighbouring positions, neighbouring epoch keys: uncorrelated.
    corr = np.corrcoef(u.T)
    assert np.all(np.abs(corr[np.triu_indices(n_draws, 1)]) < 0.03)
    assert abs(np.corrcoef(u[:-1, 0], u[1:, 0])[0, 1]) < 0.03
    for j in range(n_draws):
        assert abs(np.corrcoef(u[:, j], u_next_key[:, j])[0, 1]) < 0.03
    # Uniform histogram (chi-square, 16 bins, df = 15; 99.9% quantile ~ 37.7).
    for j in range(n_draws):
        counts = np.bincount((u[:, j] * 16).astype(int), minlength=16)
        expected = n_samples / 16
        assert ((counts - expected) ** 2 / expected).sum() < 37.7
    # Each of the 24 bits is set about half the time.
    bits = (u[:, 0] * 2**24).astype(np.int64)
    for bit in range(24):
        assert abs(((bits >> bit) & 1).mean() - 0.5) < 0.02


def test_uniform_rejects_bad_arguments():
    with pytest.raises(ValueError):
        augment.per_sample_uniform([[0, 0]], -1)
    with pytest.raises(TypeError):
        augment.per_sample_uniform([[0.0, 1.0]], 2)
    with pytest.raises(ValueError):
        augment.per_sample_uniform([[0, 0, 0]], 2)


def test_fold_in_keeps_position_and_separates_streams():
    seeds = seeds_for(range(1000), key=9)
    folded = [augment.fold_in(seeds, i).numpy() for i in range(3)]
    for f in folded:
        assert f.dtype == np.int64
        np.testing.assert_array_equal(f[:, 1], seeds[:, 1])
        assert np.all(f[:, 0] >= 0)
        assert len(np.unique(f[:, 0])) == 1000  # depends on the position too
    assert not np.any(folded[0][:, 0] == folded[1][:, 0])
    assert not np.any(folded[1][:, 0] == folded[2][:, 0])
    # Depends on the epoch key; deterministic.
    assert not np.any(
        augment.fold_in(seeds_for(range(1000), key=10), 0).numpy()[:, 0] == folded[0][:, 0]
    )
    np.testing.assert_array_equal(augment.fold_in(seeds, 1).numpy(), folded[1])
    # Streams are uncorrelated with each other and with the unfolded draws.
    u = [uniforms(seeds, 1)[:, 0]] + [uniforms(f, 1)[:, 0] for f in folded]
    corr = np.corrcoef(np.stack(u))
    assert np.all(np.abs(corr[np.triu_indices(4, 1)]) < 0.1)
    with pytest.raises(ValueError):
        augment.fold_in(seeds, -1)


# ------------------------------------------------------------------ properties of every stage

ALL_AUGS = {
    "crop_constant": lambda: augment.RandomCrop(16, padding=4, fill=7),
    "crop_reflect": lambda: augment.RandomCrop((12, 18), padding=(3, 5), pad_mode="reflect"),
    "crop_symmetric": lambda: augment.RandomCrop(16, padding=2, pad_mode="symmetric"),
    "crop_edge": lambda: augment.RandomCrop(16, padding=3, pad_mode="edge"),
    "resized_crop": lambda: augment.RandomResizedCrop(12),
    "flip": lambda: augment.RandomFlip(),
    "flip_both": lambda: augment.RandomFlip(vertical=True, p=0.7),
    "brightness": lambda: augment.RandomBrightness(0.3),
    "shift": lambda: augment.RandomShift(3),
    "to_float": lambda: augment.ToFloat(),
    "normalize": lambda: augment.Normalize([1.0, 2.0, 3.0], [0.5, 2.0, 4.0]),
    "resize_center_crop": lambda: augment.ResizeCenterCrop(12, 0.75),
    "compose": lambda: augment.Compose(
        [
            augment.ToFloat(),
            augment.RandomCrop(16, padding=2),
            augment.RandomFlip(),
            augment.RandomBrightness(0.1),
        ]
    ),
}
RANDOM_AUGS = [k for k in ALL_AUGS if k not in ("to_float", "normalize", "resize_center_crop")]
FLOAT_OUTPUT = {"resized_crop", "brightness", "to_float", "normalize", "compose",
                "resize_center_crop"}  # fmt: skip


def _expected_shape(name: str, batch: int, h: int, w: int) -> tuple[int, ...]:
    return {
        "crop_constant": (batch, 16, 16, 3),
        "crop_reflect": (batch, 12, 18, 3),
        "crop_symmetric": (batch, 16, 16, 3),
        "crop_edge": (batch, 16, 16, 3),
        "resized_crop": (batch, 12, 12, 3),
        "resize_center_crop": (batch, 12, 12, 3),
        "compose": (batch, 16, 16, 3),
    }.get(name, (batch, h, w, 3))


@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
@pytest.mark.parametrize("name", list(ALL_AUGS))
def test_shape_dtype_determinism_and_batch_invariance(name, dtype):
    aug = ALL_AUGS[name]()
    assert aug.batched is True and type(aug).batched is True
    images = rand_images((6, 20, 24, 3), dtype, seed=1)
    seeds = np.array([[0, 0], [0, 1], [5, 3], [-2, 11], [2**40, 7], [0, 2]], np.int64)
    out = aug(tf.constant(images), tf.constant(seeds))
    assert tuple(out.shape) == _expected_shape(name, 6, 20, 24)
    want_dtype = tf.float32 if (name in FLOAT_OUTPUT or dtype == np.float32) else tf.uint8
    assert out.dtype == want_dtype
    out = out.numpy()
    # Same seeds -> identical output.
    np.testing.assert_array_equal(aug(images, seeds).numpy(), out)
    # Each sample alone (batch of 1) equals its row of the batch.
    for b in range(6):
        single = aug(images[b : b + 1], seeds[b : b + 1]).numpy()
        np.testing.assert_array_equal(single[0], out[b])
    # Reordering the batch reorders the output.
    perm = np.array([3, 0, 5, 1, 4, 2])
    np.testing.assert_array_equal(aug(images[perm], seeds[perm]).numpy(), out[perm])


@pytest.mark.parametrize("name", RANDOM_AUGS)
def test_copies_of_one_sample_with_distinct_positions_differ(name):
    aug = ALL_AUGS[name]()
    copies = 16
    images = np.repeat(rand_images((1, 20, 24, 3), np.float32, seed=2), copies, axis=0)
    out = aug(images, seeds_for(range(copies), key=4)).numpy()
    distinct = len({o.tobytes() for o in out})
    # Flips have only 2 (or 4) outcomes; everything else should almost never repeat.
    minimum = {"flip": 2, "flip_both": 3}.get(name, copies - 3)
    assert distinct >= minimum
    # ... and a different epoch key gives different augmentations of the same copies.
    other = aug(images, seeds_for(range(copies), key=5)).numpy()
    assert not np.array_equal(out, other)


@pytest.mark.parametrize("name", RANDOM_AUGS)
def test_same_results_in_tf_function_with_unknown_shapes(name):
    aug = ALL_AUGS[name]()
    images = rand_images((5, 20, 24, 3), np.uint8, seed=3)
    seeds = seeds_for(range(5), key=1)
    eager = aug(images, seeds).numpy()
    fn = tf.function(
        lambda x, s: aug(x, s),
        input_signature=[
            tf.TensorSpec([None, None, None, 3], tf.uint8),
            tf.TensorSpec([None, 2], tf.int64),
        ],
    )
    np.testing.assert_array_equal(fn(images, seeds).numpy(), eager)


# ------------------------------------------------------------------ example structures


def test_example_structures_are_preserved():
    aug = augment.RandomFlip(p=1.0)
    images = rand_images((2, 4, 5, 3), np.uint8)
    flipped = images[:, :, ::-1]
    seeds = seeds_for(range(2))
    labels = tf.constant([1, 2])

    out = aug((images, labels, "meta"), seeds)
    assert isinstance(out, tuple) and len(out) == 3 and out[1] is labels and out[2] == "meta"
    np.testing.assert_array_equal(out[0].numpy(), flipped)

    out = aug([images, labels], seeds)
    assert isinstance(out, list) and out[1] is labels
    np.testing.assert_array_equal(out[0].numpy(), flipped)

    pair = collections.namedtuple("Pair", ["x", "y"])
    out = aug(pair(images, labels), seeds)
    assert isinstance(out, pair) and out.y is labels
    np.testing.assert_array_equal(out.x.numpy(), flipped)

    out = augment.RandomFlip(p=1.0, image_key="pixels")({"pixels": images, "label": labels}, seeds)
    assert set(out) == {"pixels", "label"} and out["label"] is labels
    np.testing.assert_array_equal(out["pixels"].numpy(), flipped)

    np.testing.assert_array_equal(aug(images, seeds).numpy(), flipped)

    with pytest.raises(DataError, match="image_key: 'image' is not a key"):
        aug({"pixels": images}, seeds)
    with pytest.raises(ValueError):
        aug(images[0], seeds)  # a single image, not a batch
    with pytest.raises(ValueError):
        aug(images, seeds_for(range(3)))  # seeds / batch mismatch


# ------------------------------------------------------------------ RandomCrop


def _find_offsets(window: np.ndarray, padded: np.ndarray) -> list[tuple[int, int]]:
    h, w = window.shape[:2]
    return [
        (y, x)
        for y in range(padded.shape[0] - h + 1)
        for x in range(padded.shape[1] - w + 1)
        if np.array_equal(padded[y : y + h, x : x + w], window)
    ]


@pytest.mark.parametrize(
    ("mode", "image_hw", "size", "padding"),
    [
        ("constant", (10, 12), (10, 12), (3, 3)),
        ("reflect", (10, 12), (8, 12), (2, 4)),
        ("symmetric", (10, 12), (10, 10), (3, 2)),
        ("edge", (10, 12), (12, 12), (2, 2)),
        ("reflect", (5, 4), (9, 9), (6, 7)),  # padding larger than the image: repeated mirroring
        ("symmetric", (5, 4), (9, 9), (6, 7)),
    ],
)
def test_random_crop_is_a_window_of_the_padded_image(mode, image_hw, size, padding):
    h, w = image_hw
    n = 80
    base = np.arange(h * w * 2, dtype=np.float32).reshape(h, w, 2) + 1.0
    images = np.stack([base + 1000 * i for i in range(n)])
    aug = augment.RandomCrop(size, padding=padding, pad_mode=mode, fill=-1)
    out = aug(images, seeds_for(range(n), key=2)).numpy()
    assert out.shape == (n, *size, 2)
    pad_width = ((padding[0], padding[0]), (padding[1], padding[1]), (0, 0))
    kwargs = {"constant_values": -1} if mode == "constant" else {}
    offsets = set()
    for i in range(n):
        padded = np.pad(images[i], pad_width, mode=mode, **kwargs)
        found = _find_offsets(out[i], padded)
        assert found, f"sample {i}: output is not a window of the padded image"
        offsets.update(found)  # several offsets can match when the padding repeats content
    # Offsets are per sample and reach both ends of the valid range.
    ys, xs = zip(*offsets, strict=True)
    range_y = h + 2 * padding[0] - size[0]
    range_x = w + 2 * padding[1] - size[1]
    assert len(offsets) >= min(10, (range_y + 1) * (range_x + 1))
    assert (min(ys), max(ys)) == (0, range_y)
    assert (min(xs), max(xs)) == (0, range_x)


def test_random_crop_offsets_are_uniform():
    n = 4000
    aug = augment.RandomCrop(1, padding=0)
    image = np.arange(9, dtype=np.float32).reshape(1, 9, 1, 1)  # 9 rows, 1 column
    out = aug(np.repeat(image, n, axis=0), seeds_for(range(n), key=8)).numpy().ravel()
    counts = np.bincount(out.astype(int), minlength=9)
    expected = n / 9
    assert ((counts - expected) ** 2 / expected).sum() < 26.1  # chi-square df=8, 99.9%


def test_random_crop_validates_sizes():
    with pytest.raises(ValueError):
        augment.RandomCrop(8, pad_mode="wrap")
    with pytest.raises(ValueError):
        augment.RandomCrop(0)
    with pytest.raises(ValueError):
        augment.RandomCrop(8, padding=-1)
    with pytest.raises(ValueError):
        augment.RandomCrop(12, padding=1)(np.zeros((2, 8, 8, 1), np.float32), seeds_for(range(2)))
    fn = tf.function(
        lambda x, s: augment.RandomCrop(12, padding=1)(x, s),
        input_signature=[
            tf.TensorSpec([None, None, None, 1], tf.float32),
            tf.TensorSpec([None, 2], tf.int64),
        ],
    )
    with pytest.raises(tf.errors.InvalidArgumentError):
        fn(np.zeros((2, 8, 8, 1), np.float32), seeds_for(range(2)))


# ------------------------------------------------------------------ RandomShift


def _shift_reference(image: np.ndarray, dy: int, dx: int, fill: float) -> np.ndarray:
    h, w = image.shape[:2]
    out = np.full_like(image, fill)
    ys, xs = slice(max(dy, 0), min(h, h + dy)), slice(max(dx, 0), min(w, w + dx))
    src_y, src_x = slice(max(-dy, 0), min(h, h - dy)), slice(max(-dx, 0), min(w, w - dx))
    out[ys, xs] = image[src_y, src_x]
    return out


@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
def test_random_shift_content(dtype):
    n, max_shift = 200, (2, 3)
    images = rand_images((n, 9, 11, 1), dtype, seed=5)
    images = np.maximum(images, 1) if dtype == np.uint8 else images + 1  # never equal to fill
    out = augment.RandomShift(max_shift, fill=0)(images, seeds_for(range(n), key=6))
    assert out.dtype == tf.as_dtype(dtype) and out.shape == images.shape
    out = out.numpy()
    seen = set()
    for i in range(n):
        matches = [
            (dy, dx)
            for dy in range(-max_shift[0], max_shift[0] + 1)
            for dx in range(-max_shift[1], max_shift[1] + 1)
            if np.array_equal(out[i], _shift_reference(images[i], dy, dx, 0))
        ]
        assert len(matches) == 1, f"sample {i} is not a single shift of its input"
        seen.add(matches[0])
    # Every shift in the range occurs, including both signs and zero.
    assert seen == {
        (dy, dx)
        for dy in range(-max_shift[0], max_shift[0] + 1)
        for dx in range(-max_shift[1], max_shift[1] + 1)
    }


def test_random_shift_zero_is_identity():
    images = rand_images((4, 6, 6, 3), np.uint8)
    np.testing.assert_array_equal(
        augment.RandomShift(0)(images, seeds_for(range(4))).numpy(), images
    )


# ------------------------------------------------------------------ RandomFlip


def test_random_flip_flips_about_half_the_samples():
    n = 4000
    image = rand_images((1, 5, 7, 3), np.uint8, seed=7)
    images = np.repeat(image, n, axis=0)
    out = augment.RandomFlip()(images, seeds_for(range(n), key=3)).numpy()
    flipped = np.all(out == image[:, :, ::-1], axis=(1, 2, 3))
    same = np.all(out == image, axis=(1, 2, 3))
    assert np.all(flipped ^ same)  # every output is exactly one of the two
    assert 0.47 < flipped.mean() < 0.53
    # Decisions for neighbouring positions are not correlated.
    assert abs(np.corrcoef(flipped[:-1], flipped[1:])[0, 1]) < 0.05


def test_random_flip_probability_and_vertical():
    n = 2000
    image = rand_images((1, 5, 7, 1), np.float32, seed=8)
    images = np.repeat(image, n, axis=0)
    seeds = seeds_for(range(n), key=1)
    np.testing.assert_array_equal(augment.RandomFlip(p=0.0)(images, seeds).numpy(), images)
    np.testing.assert_array_equal(
        augment.RandomFlip(p=1.0)(images, seeds).numpy(), images[:, :, ::-1]
    )
    out = augment.RandomFlip(horizontal=False, vertical=True, p=0.25)(images, seeds).numpy()
    vflip = np.all(out == image[:, ::-1], axis=(1, 2, 3))
    assert np.all(vflip | np.all(out == image, axis=(1, 2, 3)))
    assert 0.21 < vflip.mean() < 0.29
    out = augment.RandomFlip(horizontal=True, vertical=True)(images, seeds).numpy()
    outcomes = [
        np.all(out == v, axis=(1, 2, 3))
        for v in (image, image[:, ::-1], image[:, :, ::-1], image[:, ::-1, ::-1])
    ]
    assert np.all(np.sum(outcomes, axis=0) == 1)
    assert all(0.21 < o.mean() < 0.29 for o in outcomes)  # independent decisions per axis
    with pytest.raises(ValueError):
        augment.RandomFlip(horizontal=False)
    with pytest.raises(ValueError):
        augment.RandomFlip(p=1.5)


# ------------------------------------------------------------------ RandomBrightness


def test_random_brightness_delta_per_sample_within_bounds():
    n, max_delta = 3000, 0.25
    images = rand_images((n, 3, 4, 2), np.float32, seed=9)
    out = augment.RandomBrightness(max_delta)(images, seeds_for(range(n), key=2))
    assert out.dtype == tf.float32
    diff = out.numpy() - images
    delta = diff[:, 0, 0, 0]
    np.testing.assert_allclose(
        diff, np.broadcast_to(delta[:, None, None, None], diff.shape), atol=1e-6
    )
    assert np.all(np.abs(delta) <= max_delta + 1e-6)
    assert delta.min() < -0.9 * max_delta and delta.max() > 0.9 * max_delta
    assert abs(delta.mean()) < 0.01
    assert abs(delta.var() - max_delta**2 / 3) < 0.002


def test_random_brightness_uint8_and_clipping():
    images = np.full((500, 2, 2, 3), 250, np.uint8)
    out = augment.RandomBrightness(20)(images, seeds_for(range(500))).numpy()
    assert out.dtype == np.float32 and out.max() > 255 and out.min() < 250  # no rescaling
    clipped = augment.RandomBrightness(20, value_range=(0, 255))(
        images, seeds_for(range(500))
    ).numpy()
    assert clipped.max() == 255 and clipped.min() >= 230
    np.testing.assert_array_equal(clipped, np.clip(out, 0, 255))
    with pytest.raises(ValueError):
        augment.RandomBrightness(-1)


# ------------------------------------------------------------------ RandomResizedCrop


def _torchvision_params(
    u: np.ndarray, height: int, width: int, scale, ratio, attempts=10, fell_back=False
):
    """torchvision's RandomResizedCrop.get_params, fed with our uniforms instead of torch's.

    With ``fell_back=True``, return whether no attempt fitted instead of the box.
    """
    area = height * width
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for k in range(attempts):
        us, ur, ui, uj = (float(v) for v in u[4 * k : 4 * k + 4])
        target_area = area * (scale[0] + us * (scale[1] - scale[0]))
        aspect = math.exp(log_ratio[0] + ur * (log_ratio[1] - log_ratio[0]))
        w = round(math.sqrt(target_area * aspect))
        h = round(math.sqrt(target_area / aspect))
        if 0 < w <= width and 0 < h <= height:
            return (
                False
                if fell_back
                else (int(ui * (height - h + 1)), int(uj * (width - w + 1)), h, w)
            )
    if fell_back:
        return True
    in_ratio = width / height
    if in_ratio < min(ratio):
        w, h = width, round(width / min(ratio))
    elif in_ratio > max(ratio):
        h, w = height, round(height * max(ratio))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


@pytest.mark.parametrize(
    ("hw", "scale", "ratio", "min_distinct"),
    [
        ((64, 48), (0.08, 1.0), (3 / 4, 4 / 3), 500),
        ((30, 90), (0.5, 1.0), (0.5, 2.0), 150),
        ((20, 20), (0.9, 1.0), (0.2, 5.0), 10),  # about half the samples fall back
    ],
)
def test_resized_crop_boxes_match_torchvision_algorithm(hw, scale, ratio, min_distinct):
    n = 600
    seeds = seeds_for(range(n), key=11)
    aug = augment.RandomResizedCrop(8, scale=scale, ratio=ratio)
    got = np.stack([t.numpy() for t in aug.crop_boxes(seeds, *hw)], axis=1)
    u = uniforms(seeds, 40)
    want = np.array([_torchvision_params(u[i], *hw, scale, ratio) for i in range(n)])
    np.testing.assert_array_equal(got, want)
    top, left, h, w = got.T
    assert np.all((top >= 0) & (left >= 0) & (h >= 1) & (w >= 1))
    assert np.all((top + h <= hw[0]) & (left + w <= hw[1]))
    assert len({tuple(r) for r in got}) >= min_distinct


def test_resized_crop_fallback_is_clamped_center_crop():
    aug = augment.RandomResizedCrop(8, scale=(1.5, 2.0))  # never fits -> always the fallback
    top, left, h, w = (t.numpy() for t in aug.crop_boxes(seeds_for(range(5)), 40, 100))
    assert np.all(h == 40) and np.all(w == 53) and np.all(top == 0) and np.all(left == 23)
    top, left, h, w = (t.numpy() for t in aug.crop_boxes(seeds_for(range(5)), 100, 40))
    assert np.all(w == 40) and np.all(h == 53) and np.all(left == 0) and np.all(top == 23)
    top, left, h, w = (t.numpy() for t in aug.crop_boxes(seeds_for(range(5)), 30, 33))
    assert np.all(h == 30) and np.all(w == 33) and np.all(top == 0) and np.all(left == 0)


@pytest.mark.parametrize(
    ("interpolation", "antialias"),
    [("bilinear", False), ("nearest", False), ("bicubic", False), ("bilinear", True)],
)
def test_resized_crop_content_is_the_resized_box(interpolation, antialias):
    n, size = 12, (10, 14)
    images = rand_images((n, 40, 30, 3), np.uint8, seed=12)
    seeds = seeds_for(range(n), key=3)
    aug = augment.RandomResizedCrop(
        size, scale=(0.2, 1.0), interpolation=interpolation, antialias=antialias
    )
    out = aug(images, seeds)
    assert out.shape == (n, *size, 3) and out.dtype == tf.float32
    out = out.numpy()
    boxes = np.stack([t.numpy() for t in aug.crop_boxes(seeds, 40, 30)], axis=1)
    for i, (top, left, h, w) in enumerate(boxes):
        # The box alone, resized with half-pixel centres (torchvision's and Model Garden's
        # convention): bit for bit tf.image.resize of the crop.
        crop = images[i, top : top + h, left : left + w]
        want = tf.image.resize(crop, size, method=interpolation, antialias=antialias)
        np.testing.assert_array_equal(out[i], tf.cast(want, tf.float32).numpy())


def test_resized_crop_has_no_zero_filled_edge():
    # Issue 14: the old crop_and_resize path sampled the box corner to corner in float32; when
    # the box touched the right or bottom edge, rounding put the last sample point just outside
    # the image and that row or column came out 0 (about 0.15% of 224 outputs of 375x500
    # images, 5 of these 200 edge-touching samples).
    h, w = 375, 500
    rrc = augment.RandomResizedCrop(224)
    seeds = seeds_for(range(20000), key=9)
    top, left, ch, cw = (t.numpy() for t in rrc.crop_boxes(seeds, h, w))
    edge = np.flatnonzero((top + ch == h) | (left + cw == w))[:200]
    assert len(edge) == 200
    images = tf.fill([len(edge), h, w, 3], tf.constant(200, tf.uint8))
    out = rrc(images, seeds[edge]).numpy()
    assert out.min() == out.max() == 200.0  # a constant image stays constant, edges included


def test_resized_crop_windows_take_one_shape_per_sample():
    rrc = augment.RandomResizedCrop(16)
    seeds = seeds_for(range(40), key=5)
    shapes = np.array([[375, 500], [500, 375], [20, 20], [7, 300]] * 10, np.int32)
    got = rrc.windows(tf.constant(shapes), rrc.draw(tf.constant(seeds))).numpy()
    for i, (h, w) in enumerate(shapes):
        single = np.stack([t.numpy() for t in rrc.crop_boxes(seeds[i : i + 1], h, w)], 1)[0]
        np.testing.assert_array_equal(got[i], single)
    u = uniforms(seeds, 40)
    want = [
        _torchvision_params(u[i], h, w, (0.08, 1.0), (3 / 4, 4 / 3))
        for i, (h, w) in enumerate(shapes)
    ]
    np.testing.assert_array_equal(got, np.array(want))


def test_host_windows_equal_the_graph_windows_at_scale():
    """NumPy plans the window path's boxes; they are TensorFlow's, box for box.

    The two libraries' float64 ``exp`` differ in the last bit for about one
    log-ratio draw in eight here, but a box changes only if ``sqrt(area *
    ratio)`` lands within ~1e-13 of a half pixel: 100,000 boxes per stage on
    random image sizes, all equal.
    """
    rng = np.random.default_rng(0)
    n = 100_000
    shapes = rng.integers(1, 2000, size=(n, 2)).astype(np.int32)
    seeds = seeds_for(range(n), key=11)
    stages = [
        augment.RandomResizedCrop(224),
        augment.RandomResizedCrop((224, 160), scale=(0.35, 1.0), ratio=(0.5, 2.0), attempts=3),
        augment.CenterCrop(224),
        augment.CenterCrop((224, 160), crop_fraction=0.95),
        augment.ResizeCenterCrop(224),
        augment.ResizeCenterCrop(97, 0.9, "bilinear"),
    ]
    for stage in stages:
        assert stage.plans_on_host
        params = stage.draw(seeds)
        graph = stage.windows(tf.constant(shapes), params).numpy()
        np.testing.assert_array_equal(stage.host_windows(shapes, params.numpy()), graph)
        if stage.placed:  # and the placements of the resize in each window
            graph = stage.placements(tf.constant(shapes), params).numpy()
            np.testing.assert_array_equal(stage.host_placements(shapes, params.numpy()), graph)


def test_a_window_stage_of_ones_own_plans_in_the_graph():
    class Corner(augment.WindowAugmentation):
        def windows(self, shapes, params):
            return tf.concat([tf.zeros_like(shapes), tf.minimum(shapes, 4)], axis=1)

    stage = Corner(4)
    assert not stage.plans_on_host
    request = split_window(stage).request(seeds_for(range(2)), on_host=True)
    boxes = request.windows(tf.constant([[10, 12], [3, 9]])).numpy()
    assert boxes.tolist() == [[0, 0, 4, 4], [0, 0, 3, 4]]


def test_a_window_stage_of_ones_own_with_a_geometry_plans_on_the_host_as_in_the_graph():
    class CornerWindows:  # a tfdp.windows.contract.WindowGeometry: the top-left 4 x 4 at most
        placed = False

        def windows(self, xp, shapes, params):
            shapes = xp.cast(shapes, xp.int32)
            zero = shapes[:, 0] * 0
            corner = [xp.minimum(shapes[:, 0], 4), xp.minimum(shapes[:, 1], 4)]
            return xp.stack([zero, zero, *corner], axis=1)

        def placements(self, xp, shapes, params):
            raise AssertionError("a stretched window has no placements")

    class Corner(augment.WindowAugmentation):
        def __init__(self, size):
            super().__init__(size)
            self.geometry = CornerWindows()

    stage = Corner(4)
    assert stage.plans_on_host and not stage.placed and repr(stage).startswith("Corner(size=")
    shapes = tf.constant([[10, 12], [3, 9]])
    host = split_window(stage).request(seeds_for(range(2)), on_host=True).windows(shapes)
    graph = split_window(stage).request(seeds_for(range(2))).windows(shapes)
    assert host.numpy().tolist() == graph.numpy().tolist() == [[0, 0, 4, 4], [0, 0, 3, 4]]
    images = tf.reshape(tf.range(2 * 6 * 6, dtype=tf.float32), [2, 6, 6, 1])
    np.testing.assert_array_equal(stage(images, seeds_for(range(2))), images[:, :4, :4])
    assert "geometry" not in repr(augment.ResizeCenterCrop(224))  # the stage's arguments only


def test_a_window_stage_of_ones_own_with_host_windows_plans_on_the_host():
    class Corner(augment.WindowAugmentation):
        def windows(self, shapes, params):
            return tf.concat([tf.zeros_like(shapes), tf.minimum(shapes, 4)], axis=1)

        def host_windows(self, shapes, params):
            return np.concatenate([np.zeros_like(shapes), np.minimum(shapes, 5)], 1).astype(
                np.int32
            )

    stage = Corner(4)
    assert stage.plans_on_host
    request = split_window(stage).request(seeds_for(range(2)), on_host=True)
    boxes = request.windows(tf.constant([[10, 12], [3, 9]])).numpy()
    assert boxes.tolist() == [[0, 0, 5, 5], [0, 0, 3, 5]]  # the host's windows, not the graph's


@settings(max_examples=25, deadline=None)
@given(
    height=st.integers(1, 600),
    width=st.integers(1, 600),
    scale=st.tuples(st.floats(0.01, 1.0), st.floats(0.0, 1.0)).map(lambda t: (t[0], t[0] + t[1])),
    log_ratio=st.tuples(st.floats(-1.5, 1.5), st.floats(0.0, 1.5)),
    key=st.integers(-(2**40), 2**40),
)
def test_resized_crop_boxes_equal_the_transcription_for_any_shape(
    height, width, scale, log_ratio, key
):
    ratio = (math.exp(log_ratio[0]), math.exp(log_ratio[0] + log_ratio[1]))
    rrc = augment.RandomResizedCrop(8, scale=scale, ratio=ratio)
    seeds = seeds_for(range(64), key=key)
    got = np.stack([t.numpy() for t in rrc.crop_boxes(seeds, height, width)], axis=1)
    u = uniforms(seeds, 40)
    want = np.array([_torchvision_params(u[i], height, width, scale, ratio) for i in range(64)])
    # Where torchvision's fallback rounds a side to 0 (and fails), ours keeps one pixel.
    empty = (want[:, 2] == 0) | (want[:, 3] == 0)
    np.testing.assert_array_equal(got[~empty], want[~empty])
    np.testing.assert_array_equal(got[empty, 2:], np.maximum(want[empty, 2:], 1))
    top, left, h, w = got.T
    assert np.all((top >= 0) & (left >= 0) & (h >= 1) & (w >= 1))
    assert np.all((top + h <= height) & (left + w <= width))


def _torch_get_params(rng, height, width, scale, ratio, fell_back=False):
    """torchvision.transforms.RandomResizedCrop.get_params with NumPy's generator for torch's."""
    area = height * width
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target_area = area * rng.uniform(scale[0], scale[1])
        aspect = math.exp(rng.uniform(log_ratio[0], log_ratio[1]))
        w = round(math.sqrt(target_area * aspect))
        h = round(math.sqrt(target_area / aspect))
        if 0 < w <= width and 0 < h <= height:
            box = int(rng.integers(0, height - h + 1)), int(rng.integers(0, width - w + 1)), h, w
            return False if fell_back else box
    if fell_back:
        return True
    in_ratio = width / height
    if in_ratio < min(ratio):
        w, h = width, round(width / min(ratio))
    elif in_ratio > max(ratio):
        h, w = height, round(height * max(ratio))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def _ks_statistic(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sample Kolmogorov-Smirnov statistic (plain NumPy)."""
    grid = np.sort(np.concatenate([a, b]))
    cdf_a = np.searchsorted(np.sort(a), grid, side="right") / len(a)
    cdf_b = np.searchsorted(np.sort(b), grid, side="right") / len(b)
    return float(np.abs(cdf_a - cdf_b).max())


@pytest.mark.parametrize(
    ("hw", "scale", "ratio"),
    [((375, 500), (0.08, 1.0), (3 / 4, 4 / 3)), ((60, 300), (0.3, 1.0), (3 / 4, 4 / 3))],
)
def test_resized_crop_statistics_match_torchvision(hw, scale, ratio):
    # Our boxes (our hash) against torchvision's get_params with an independent generator:
    # the same distributions of area, aspect ratio and position, and the same fallback rate.
    n = 20000
    height, width = hw
    rrc = augment.RandomResizedCrop(8, scale=scale, ratio=ratio)
    ours = np.stack([t.numpy() for t in rrc.crop_boxes(seeds_for(range(n), key=21), *hw)], 1)
    rng = np.random.default_rng(2024)
    theirs = np.array([_torch_get_params(rng, height, width, scale, ratio) for _ in range(n)])

    def features(boxes):
        top, left, h, w = boxes.T.astype(np.float64)
        return {
            "area": h * w / (height * width),
            "log_aspect": np.log(w / h),
            "top": (top + 0.5) / (height - h + 1),  # relative position in [0, 1]
            "left": (left + 0.5) / (width - w + 1),
        }

    critical = 1.95 * math.sqrt(2 / n)  # KS at alpha = 0.001
    for name, a in features(ours).items():
        d = _ks_statistic(a, features(theirs)[name])
        assert d < critical, (name, d, critical)
    # Fallback rate: our attempts are torchvision's attempts fed with our uniforms.
    u = uniforms(seeds_for(range(n), key=21), 40)
    fell_ours = np.mean(
        [_torchvision_params(u[i], height, width, scale, ratio, fell_back=True) for i in range(n)]
    )
    fell_theirs = np.mean(
        [_torch_get_params(rng, height, width, scale, ratio, fell_back=True) for _ in range(n)]
    )
    p = (fell_ours + fell_theirs) / 2
    assert abs(fell_ours - fell_theirs) <= 4 * math.sqrt(max(p * (1 - p), 1e-4) * 2 / n) + 1e-9


def test_resized_crop_validates_arguments():
    for kwargs in (
        {"scale": (0.0, 1.0)},
        {"scale": (0.5, 0.2)},
        {"ratio": (2.0, 1.0)},
        {"interpolation": "hamming"},
        {"interpolation": "random"},
        {"attempts": 0},
    ):
        with pytest.raises(ValueError):
            augment.RandomResizedCrop(8, **kwargs)
    # tf.image.resize's methods, and timm's names for two of them
    for name, method in (("lanczos", "lanczos3"), ("box", "area"), ("lanczos5", "lanczos5")):
        crop = augment.CenterCrop(6, crop_fraction=1.0, interpolation=name)
        image = tf.reshape(tf.range(10 * 10 * 3, dtype=tf.float32), [1, 10, 10, 3])
        want = tf.image.resize(image[0], [6, 6], method=method)
        np.testing.assert_array_equal(crop(image, [[0, 0]])[0].numpy(), want.numpy())


def _center_crop_reference(height, width, size, fraction):
    """DeiT's eval transform in the original image: Resize(short side to S / fraction), then
    CenterCrop(size), with torchvision's rounding, mapped back to original pixels."""
    per_out = min(height, width) * fraction / min(size)
    h = max(1, min(height, round(per_out * size[0])))
    w = max(1, min(width, round(per_out * size[1])))
    return round((height - h) / 2), round((width - w) / 2), h, w


@pytest.mark.parametrize("fraction", [0.875, 1.0, 0.5])
def test_center_crop_windows_and_content(fraction):
    size = (24, 20)
    crop = augment.CenterCrop(size, crop_fraction=fraction)
    shapes = np.array([[375, 500], [500, 375], [31, 40], [7, 300], [1, 1], [224, 224]], np.int32)
    got = crop.windows(tf.constant(shapes), crop.draw(tf.zeros([6, 2], tf.int64))).numpy()
    want = [_center_crop_reference(h, w, size, fraction) for h, w in shapes]
    np.testing.assert_array_equal(got, np.array(want))
    images = rand_images((3, 60, 44, 3), np.uint8, seed=4)
    out = crop(images, seeds_for(range(3))).numpy()
    top, left, h, w = _center_crop_reference(60, 44, size, fraction)
    for i in range(3):
        want = tf.image.resize(images[i, top : top + h, left : left + w], size).numpy()
        np.testing.assert_array_equal(out[i], want)
    with pytest.raises(ValueError, match="crop_fraction"):
        augment.CenterCrop(8, crop_fraction=0.0)


@pytest.mark.parametrize("name", [k for k in ALL_AUGS if k != "compose"])
def test_draw_then_apply_equals_augment_and_applies_row_by_row(name):
    aug = ALL_AUGS[name]()
    images = tf.constant(rand_images((5, 20, 24, 3), np.uint8, seed=8))
    seeds = tf.constant(seeds_for(range(5), key=6))
    params = aug.draw(seeds)
    assert params.shape[0] == 5
    whole = aug.apply(images, params).numpy()
    np.testing.assert_array_equal(whole, aug.augment(images, seeds).numpy())
    for b in range(5):  # one sample at a time, with its row of the draws: the same values
        one = aug.apply(images[b : b + 1], params[b : b + 1]).numpy()
        np.testing.assert_array_equal(one[0], whole[b])


def test_user_augmentation_with_only_augment_still_composes():
    class Invert(augment.Augmentation):
        def augment(self, images, seeds):
            return 255.0 - tf.cast(images, tf.float32)

    inv = Invert()
    images = rand_images((2, 4, 4, 1), np.uint8)
    np.testing.assert_array_equal(
        inv.apply(images, inv.draw(seeds_for(range(2)))).numpy(), 255.0 - images
    )

    class Nothing(augment.Augmentation):
        pass

    with pytest.raises(NotImplementedError, match="neither augment nor apply"):
        Nothing()(images, seeds_for(range(2)))


def test_normalize_is_bit_identical_to_plain_broadcasting():
    mean, std = (123.675, 116.28, 103.53), (58.395, 57.12, 57.375)
    # A small image meets a whole-image constant, a larger one a tiled row: the same values.
    for dtype, shape in ((np.uint8, (3, 17, 23, 3)), (np.float32, (2, 40, 50, 3))):
        images = rand_images(shape, dtype, seed=5)
        got = augment.Normalize(mean, std)(images, seeds_for(range(shape[0]))).numpy()
        want = (tf.cast(images, tf.float32) - tf.constant(mean)) / tf.constant(std)
        np.testing.assert_array_equal(got, want.numpy())
    with pytest.raises(ValueError, match="3 per-channel values for images with 1 channels"):
        augment.Normalize(mean, std)(rand_images((1, 4, 4, 1)), seeds_for([0]))
    with pytest.raises(ValueError, match="std: differs in length from mean"):
        augment.Normalize((1.0, 2.0), (1.0, 2.0, 3.0))


# ------------------------------------------------------------------ split_window


def test_split_window_structure():
    rrc, flip, norm = augment.RandomResizedCrop(8), augment.RandomFlip(), augment.Normalize(0, 1)
    mixer = augment.Compose([augment.RandomFlip()])  # a batched callable, not an Augmentation
    pipe = split_window(augment.Compose([rrc, flip, norm, mixer, flip]))
    assert pipe.window is rrc and pipe.window_index == 0
    assert [(i, s) for i, s in pipe.image_stages] == [(1, flip), (2, norm)]
    assert [(i, s) for i, s in pipe.batch_stages] == [(3, mixer), (4, flip)]
    bare = split_window(rrc)
    assert bare.window is rrc and bare.window_index is None and not bare.image_stages
    assert split_window(augment.Compose([flip, rrc])) is None
    assert split_window(flip) is None
    assert split_window(augment.Compose([])) is None
    assert split_window(None) is None


@pytest.mark.parametrize("bare", [False, True])
def test_window_request_reproduces_the_augmentation_on_decoded_images(bare):
    size = (12, 10)
    stages = [
        augment.RandomResizedCrop(size, scale=(0.1, 1.0)),
        augment.RandomFlip(),
        augment.RandomBrightness(10.0),
        augment.Normalize((100.0, 110.0, 120.0), (50.0, 60.0, 70.0)),
        augment.Compose([augment.RandomFlip(vertical=True, horizontal=False)]),
    ]
    aug = stages[0] if bare else augment.Compose(stages)
    pipe = split_window(aug)
    n = 9
    # Images of different sizes: each sample alone through the augmentation is the reference.
    images = [rand_images((1, 20 + 3 * i, 31 - 2 * i, 3), np.uint8, seed=i) for i in range(n)]
    seeds = seeds_for(np.arange(n) * 5 + 1, key=-3)
    want = np.concatenate([aug(images[i], seeds[i : i + 1]).numpy() for i in range(n)])
    req = pipe.request(seeds)
    shapes = np.array([im.shape[1:3] for im in images], np.int32)
    boxes = req.windows(tf.constant(shapes)).numpy()
    got = []
    for j, (top, left, h, w) in enumerate(boxes):
        got.append(req.finish(images[j][0, top : top + h, left : left + w], j).numpy())
    got = pipe.finish_batch(tf.constant(np.stack(got)), seeds).numpy()
    np.testing.assert_array_equal(got, want)


# ------------------------------------------------------------------ deterministic helpers


def test_to_float_and_normalize():
    images = rand_images((3, 4, 4, 3), np.uint8)
    out = augment.ToFloat()(images, seeds_for(range(3))).numpy()
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, images / 255.0, rtol=1e-6)
    np.testing.assert_allclose(
        augment.ToFloat(2.0)(images, seeds_for(range(3))).numpy(), images * 2.0
    )
    mean, std = [10.0, 20.0, 30.0], [2.0, 4.0, 8.0]
    out = augment.Normalize(mean, std)(images, seeds_for(range(3))).numpy()
    np.testing.assert_allclose(out, (images - np.array(mean)) / np.array(std), rtol=1e-6)
    out = augment.Normalize(0.5, 0.25)(images.astype(np.float32) / 255, seeds_for(range(3))).numpy()
    np.testing.assert_allclose(out, (images / 255 - 0.5) / 0.25, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError):
        augment.Normalize(0.0, [1.0, 0.0, 1.0])


# ------------------------------------------------------------------ Compose


def test_compose_applies_stages_with_folded_seeds():
    stages = [
        augment.ToFloat(),
        augment.RandomShift(2),
        augment.RandomFlip(),
        augment.RandomBrightness(0.1),
    ]
    images = rand_images((6, 8, 9, 3), np.uint8)
    seeds = seeds_for(range(6), key=2)
    labels = tf.range(6)
    out, out_labels = augment.Compose(stages)((images, labels), seeds)
    assert out_labels is labels
    manual = tf.constant(images)
    for i, stage in enumerate(stages):
        manual = stage(manual, augment.fold_in(seeds, i))
    np.testing.assert_array_equal(out.numpy(), manual.numpy())
    # Stage seeds differ from the raw seeds: not the same as applying the stages directly.
    direct = tf.constant(images)
    for stage in stages:
        direct = stage(direct, seeds)
    assert not np.array_equal(out.numpy(), direct.numpy())


def test_compose_stages_are_independent():
    n = 4000
    image = rand_images((1, 4, 6, 1), np.uint8, seed=3)
    images = np.repeat(image, n, axis=0)
    seeds = seeds_for(range(n), key=0)
    # Two flips with the same draws would cancel; independent ones flip about half the samples.
    out = augment.Compose([augment.RandomFlip(), augment.RandomFlip()])(images, seeds).numpy()
    net_flipped = np.all(out == image[:, :, ::-1], axis=(1, 2, 3)).mean()
    assert 0.46 < net_flipped < 0.54
    # Deltas of two brightness stages are uncorrelated.
    zeros = np.zeros((n, 1, 1, 1), np.float32)
    stages = [augment.RandomBrightness(1.0), augment.RandomBrightness(1.0)]
    d = [s(zeros, augment.fold_in(seeds, i)).numpy().ravel() for i, s in enumerate(stages)]
    assert abs(np.corrcoef(d[0], d[1])[0, 1]) < 0.05
    total = augment.Compose(stages)(zeros, seeds).numpy().ravel()
    np.testing.assert_allclose(total, d[0] + d[1], atol=1e-6)
    # Nested Compose works and is itself batched.
    nested = augment.Compose([augment.Compose([augment.RandomFlip()]), augment.RandomShift(1)])
    assert nested.batched is True and len(nested) == 2
    assert nested(images[:3], seeds[:3]).shape == (3, 4, 6, 1)


def test_compose_rejects_unbatched_stages():
    with pytest.raises(TypeError):
        augment.Compose([lambda example, seed: example])
    with pytest.raises(TypeError):
        augment.Compose([augment.RandomFlip(), "flip"])


# ------------------------------------------------------------------ tf.data


def test_inside_tf_data_map_on_batches_with_unknown_batch_size():
    n, batch = 22, 5  # last batch is partial, so the batch dimension is None
    images = rand_images((n, 20, 24, 3), np.uint8, seed=13)
    labels = np.arange(n)
    seeds = seeds_for(np.arange(n) * 3 + 1, key=7)
    aug = augment.Compose(
        [
            augment.RandomCrop(20, padding=4, pad_mode="reflect"),
            augment.RandomFlip(),
            augment.ToFloat(),
            augment.RandomBrightness(0.1),
            augment.RandomResizedCrop(16, scale=(0.25, 1.0)),
        ]
    )
    ds = tf.data.Dataset.from_tensor_slices(({"image": images, "label": labels}, seeds))
    ds = ds.batch(batch).map(aug, num_parallel_calls=2, deterministic=True)
    assert ds.element_spec["image"].shape.as_list() == [None, 16, 16, 3]
    got = list(ds.as_numpy_iterator())
    got_images = np.concatenate([b["image"] for b in got])
    np.testing.assert_array_equal(np.concatenate([b["label"] for b in got]), labels)
    eager = aug({"image": images, "label": labels}, seeds)["image"].numpy()
    np.testing.assert_array_equal(got_images, eager)
    # A different batching of the same samples gives the same per-sample results.
    ds7 = tf.data.Dataset.from_tensor_slices(((images, labels), seeds)).batch(7)
    got7 = np.concatenate([x for (x, _) in ds7.map(lambda ex, s: aug(ex, s)).as_numpy_iterator()])
    np.testing.assert_array_equal(got7, eager)


# ------------------------------------------------------------------ draws on the host


_SEED_VALUES = st.integers(-(2**63), 2**63 - 1)


@settings(max_examples=40, deadline=None)
@given(
    seeds=st.lists(st.tuples(_SEED_VALUES, _SEED_VALUES), min_size=1, max_size=9),
    pipeline=st.sampled_from(["rrc_flip", "rrc_bright_flip", "bare_rrc", "center"]),
)
def test_host_draws_equal_the_graph_draws_bit_for_bit(seeds, pipeline):
    """The window path draws with NumPy (``on_host``): every number and box as TensorFlow's."""
    stages = {
        "rrc_flip": augment.Compose([augment.RandomResizedCrop(8), augment.RandomFlip()]),
        "rrc_bright_flip": augment.Compose(
            [augment.RandomResizedCrop(8), augment.RandomBrightness(0.3), augment.RandomFlip()]
        ),
        "bare_rrc": augment.RandomResizedCrop(8),
        "center": augment.Compose([augment.CenterCrop(8), augment.RandomFlip()]),
    }[pipeline]
    pipe = split_window(stages)
    s = tf.constant(seeds, tf.int64)
    graph, host = pipe.request(s), pipe.request(s, on_host=True)
    shapes = tf.constant([[375, 500], [9, 9], [500, 17]] * 3)[: len(seeds)]
    np.testing.assert_array_equal(graph.windows(shapes).numpy(), host.windows(shapes).numpy())
    for g, h in zip(graph._stage_params, host._stage_params, strict=True):
        np.testing.assert_array_equal(g.numpy(), h.numpy())
    image = tf.cast(tf.reshape(tf.range(9 * 9 * 3) % 251, [9, 9, 3]), tf.uint8)
    for j in range(len(seeds)):
        np.testing.assert_array_equal(graph.finish(image, j).numpy(), host.finish(image, j).numpy())
