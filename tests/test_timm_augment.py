"""DeiT's augmentations against timm's own code (run in a process of its own: tests/timm_side.py).

Each check feeds timm and tfdp the same image and the same random decisions (a magnitude and
a sign, an erasing's uniforms, Mixup's lambda, switch and box) and compares the outputs:

========================================  =================================================
what                                      tolerance, and why
========================================  =================================================
RandAugment colour ops (AutoContrast,     exact: PIL's 8-bit arithmetic reproduced (integer
Equalize, Invert, Posterize, Solarize,    sums, PIL's float32 blends, its lookup tables)
SolarizeAdd, Color, Contrast, Brightness,
Sharpness, and the increasing variants)
RandAugment geometric ops (Rotate,        1 level on at most 0.5% of the pixels: PIL's double
ShearX/Y, TranslateX/YRel), bicubic,      coordinates and its cubic's expression and order,
bilinear, nearest                         but compiled by XLA, which fuses multiply-adds (one
                                          rounding for two): a value within rounding of an
                                          integer can truncate the other way (measured: 0 to
                                          0.04% of the pixels; nearest: exact)
Posterize to 0 bits (magnitude < 2.5;     timm asks Pillow 13 for 0 bits and fails; tfdp
increasing: magnitude 10)                 gives black (what Pillow gave before)
ColorJitter (torchvision, PIL path)       exact
RandomResizedCrop, bicubic / bilinear,   0.3 levels on average, more than 2 on at most 0.1%
low-pass filtered (antialias), as        of the pixels (measured: 0.19-0.23, max 16):
timm's PIL resize, the same box          tf.image.resize's scaled kernel is not PIL's
                                          (rounded as PIL's uint8); without the filter a
                                          shrink differs by 2.4-5 on average
RandomErasing "const"                     exact (the same boxes from the same uniforms)
RandomErasing "pixel" / "rand"            the same boxes (the noise is each one's own)
Mixup / CutMix, batch / pair / elem       images and soft targets to 1e-6 (float32
                                          weights rounded apart)
SoftTargetCrossEntropy                    1e-5 (float32 log-softmax)
========================================  =================================================
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import tensorflow as tf

import timm_ref
from photos import photo
from tfdp import augment
from tfdp.augment.mixup import MixParams, cutmix_box
from tfdp.augment.spec import RAND_INCREASING_OPS, RAND_OPS
from tfdp.losses import soft_target_cross_entropy

# One worker runs the whole module: its timm fixture (a process of its own) starts once.
pytestmark = [pytest.mark.torch, pytest.mark.xdist_group("timm_augment")]

FILL = (124, 116, 104)
IMAGE = photo(40, 52, np.random.default_rng(3))


def _op_params(name: str, negate: bool) -> tuple[augment.RandAugment, np.ndarray]:
    """A one-layer RandAugment whose draws pick op ``name`` with ``negate``."""
    ops = RAND_OPS if name in RAND_OPS else RAND_INCREASING_OPS
    k = ops.index(name)
    params = np.array([[(k + 0.5) / len(ops), 0.0, 0.3, 0.7, 0.9 if negate else 0.1, 0.2]])
    return ops, params.astype(np.float32)


def _tfdp_ops(cases) -> list[np.ndarray]:
    """tfdp's output for each case ``(name, magnitude, negate, interpolation, fill)``.

    The cases of one configuration (magnitude, op set, interpolation) run as the rows of one
    batch through one traced call: each row is its own sample (what the per-sample tests of
    tests/test_deit_augment.py prove), and one call costs what one eager sample did.
    """
    groups: dict[tuple, list[int]] = {}
    for j, (name, magnitude, _, interpolation, _) in enumerate(cases):
        increasing = name not in RAND_OPS
        groups.setdefault((magnitude, increasing, interpolation), []).append(j)
    out: list = [None] * len(cases)
    for (magnitude, increasing, interpolation), rows in groups.items():
        ra = augment.RandAugment(
            magnitude, num_layers=1, prob=1.0, increasing=increasing, fill=FILL,
            interpolation=interpolation,
        )  # fmt: skip
        params = np.concatenate([_op_params(cases[j][0], cases[j][2])[1] for j in rows])
        images = np.repeat(IMAGE[np.newaxis], len(rows), 0)
        batch = tf.function(ra.apply, autograph=False)(tf.constant(images), tf.constant(params))
        for j, image in zip(rows, batch.numpy(), strict=True):
            out[j] = image
    return out


GEOMETRIC = {"Rotate", "ShearX", "ShearY", "TranslateXRel", "TranslateYRel"}
SIGNED = GEOMETRIC | {f"{op}Increasing" for op in ("Color", "Contrast", "Brightness", "Sharpness")}


def _rand_augment_cases() -> list[tuple]:
    cases = []
    for name in sorted(set(RAND_OPS) | set(RAND_INCREASING_OPS)):
        for magnitude in (0, 4.4, 9, 10):
            for negate in (False, True) if name in SIGNED else (False,):
                cases.append((name, magnitude, negate, "bicubic", FILL))
    for name in sorted(GEOMETRIC):
        for interpolation in ("bilinear", "nearest"):
            cases.append((name, 8.6, True, interpolation, FILL))
    return cases


def test_rand_augment_ops_equal_timms(timm):
    cases = _rand_augment_cases()
    want = timm["rand_augment_ops"]
    checked = 0
    for (name, magnitude, negate, interpolation, _), ref, ours in zip(
        cases, want, _tfdp_ops(cases), strict=True
    ):
        where = f"{name} m={magnitude} negate={negate} {interpolation}"
        bits = int(magnitude / 10 * 4)
        if name.startswith("Posterize") and (4 - bits if "Increasing" in name else bits) == 0:
            assert isinstance(ref, str) and "bits" in ref, where  # Pillow refuses 0 bits
            assert (ours == 0).all(), where
            continue
        assert not isinstance(ref, str), (where, ref)
        diff = np.abs(ours - ref.astype(np.float32))
        if name in GEOMETRIC:
            assert diff.max() <= 1 and np.mean(diff > 0) <= 0.005, (where, diff.max())
        else:
            assert diff.max() == 0, (where, diff.max(), np.mean(diff > 0))
        checked += 1
    assert checked == len(cases) - 2  # Posterize at 0, PosterizeIncreasing at 10


def _color_jitter_cases() -> tuple[list[tuple], list[np.ndarray]]:
    jitter = augment.ColorJitter(0.4, 0.4, 0.4, 0.2)
    cases, ours = [], []
    rng = np.random.default_rng(0)
    for _ in range(6):
        u = rng.random(8).astype(np.float32)
        out = jitter.apply(tf.constant(IMAGE[np.newaxis]), tf.constant(u[np.newaxis])).numpy()[0]
        order = np.argsort(u[:4], kind="stable").tolist()
        spec = jitter.spec
        ranges = [spec.brightness_range, spec.contrast_range, spec.saturation_range, spec.hue_range]
        factors = [float(lo + u[4 + k] * (hi - lo)) for k, (lo, hi) in enumerate(ranges)]
        cases.append(((0.4, 0.4, 0.4, 0.2), order, *factors))
        ours.append(out)
    return cases, ours


def test_color_jitter_equals_torchvisions(timm):
    cases, ours = _color_jitter_cases()
    for case, mine, ref in zip(cases, ours, timm["color_jitter_cases"], strict=True):
        np.testing.assert_array_equal(mine, ref.astype(np.float32), err_msg=str(case))


def _timm_erasing_uniforms(spec, u: np.ndarray, height: int, width: int) -> list[float]:
    """The uniforms timm's ``random`` calls get, in order, for tfdp's draws ``u`` (a replay)."""
    out = [float(u[0])]
    if u[0] >= spec.probability:
        return out
    count = spec.min_count
    if spec.min_count != spec.max_count:
        out.append(float(u[1]))
        span = spec.max_count - spec.min_count + 1
        count = spec.min_count + min(math.floor(u[1] * span), span - 1)
    for k in range(count):
        block = u[2 + 44 * k : 2 + 44 * k + 40].reshape(10, 4)
        for area_u, aspect_u, top_u, left_u in block.astype(np.float64):
            out += [area_u, aspect_u]
            target = (spec.min_area + (spec.max_area - spec.min_area) * area_u) * (height * width)
            target /= count
            log_lo, log_hi = math.log(spec.min_aspect), math.log(spec.max_aspect)
            aspect = math.exp(log_lo + (log_hi - log_lo) * aspect_u)
            h = round(math.sqrt(target * aspect))  # half to even, as timm's int(round(...))
            w = round(math.sqrt(target / aspect))
            if w < width and h < height:
                out += [top_u, left_u]
                break
    return out


ERASE_IMAGES = np.random.default_rng(1).standard_normal((3, 24, 30, 3)).astype(np.float32)


def _erasing_cases() -> tuple[list[tuple], list[np.ndarray]]:
    images = ERASE_IMAGES
    configs = [
        {"probability": 1.0, "mode": "const"},
        {"probability": 1.0, "mode": "const", "max_count": 3, "min_area": 0.1},
        {"probability": 0.5, "mode": "pixel", "min_aspect": 0.5},
        {"probability": 1.0, "mode": "rand", "max_area": 0.6, "max_count": 2},
        {"probability": 1.0, "mode": "pixel", "min_area": 0.9, "max_area": 0.95},  # never fits
    ]
    cases, ours = [], []
    for c, kwargs in enumerate(configs):
        erase = augment.RandomErasing(**kwargs)
        for j in range(4):
            seeds = tf.constant([[c, j]], tf.int64)
            params = erase.draw(seeds)
            index = j % len(images)
            ours.append(erase.apply(tf.constant(images[index : index + 1]), params).numpy()[0])
            uniforms = _timm_erasing_uniforms(erase.spec, params.numpy()[0], 24, 30)
            cases.append((index, kwargs, uniforms))
    return cases, ours


def test_random_erasing_boxes_and_fill_equal_timms(timm):
    images = ERASE_IMAGES
    cases, ours = _erasing_cases()
    want = timm["random_erasing_cases"]
    erased = 0
    for (index, kwargs, _), mine, ref in zip(cases, ours, want, strict=True):
        if kwargs["mode"] == "const":
            np.testing.assert_array_equal(mine, ref, err_msg=str(kwargs))
        else:
            changed_ours = mine != images[index]
            np.testing.assert_array_equal(changed_ours, ref != images[index], err_msg=str(kwargs))
        erased += int((mine != images[index]).any())
    assert erased >= 10  # the cases erase something


def _mix_inputs():
    rng = np.random.default_rng(2)
    images = rng.standard_normal((6, 12, 10, 3)).astype(np.float32)
    labels = np.array([0, 3, 1, 4, 2, 3])
    return images, labels


BASE_MIX = {"mixup_alpha": 0.8, "cutmix_alpha": 1.0, "label_smoothing": 0.1, "num_classes": 5}
MIX_CASES = [  # (kwargs, lam, use_cutmix, box uniforms)
    (BASE_MIX, 0.7, False, []),
    (BASE_MIX, 0.6, True, [0.3, 0.8]),
    (BASE_MIX, 0.1, True, [0.95, 0.02]),  # a box clipped by the corner: lambda corrected
    (BASE_MIX, 1.0, False, []),  # not mixed
    ({**BASE_MIX, "correct_lam": False}, 0.45, True, [0.5, 0.5]),
    ({**BASE_MIX, "cutmix_minmax": (0.2, 0.8)}, 0.5, True, [0.1, 0.7, 0.4, 0.9]),
    ({**BASE_MIX, "label_smoothing": 0.0}, 0.33, False, []),
    (
        {**BASE_MIX, "mode": "elem"},
        [0.7, 0.2, 1.0, 0.55, 0.4, 0.9],
        [False, True, False, True, False, True],
        [0.1, 0.2, 0.6, 0.9, 0.3, 0.3],
    ),
    ({**BASE_MIX, "mode": "pair"}, [0.35, 0.6, 0.8], [True, False, True], [0.5, 0.4, 0.2, 0.9]),
]


def _tfdp_mix(images, labels, kwargs, lam, cut, uniforms):
    """tfdp's Mixup applied with timm's draws: lambdas, switches, and each box's uniforms."""
    batch, height, width = images.shape[:3]
    mode = kwargs.get("mode", "batch")
    lam = np.atleast_1d(np.asarray(lam, np.float64))
    cut = np.atleast_1d(np.asarray(cut, bool))
    n = {"batch": 1, "pair": batch // 2, "elem": batch}[mode]
    if mode != "batch":  # timm's per-element lambdas are float32
        lam = lam.astype(np.float32).astype(np.float64)
    u = np.zeros((n, 4))  # each CutMix element takes the next uniforms, as timm's loop does
    queue = list(uniforms)
    for i in range(n):
        if cut[i] and lam[i] != 1.0:
            take = 4 if kwargs.get("cutmix_minmax") else 2
            u[i, :take], queue = queue[:take], queue[take:]
    minmax, correct = kwargs.get("cutmix_minmax"), kwargs.get("correct_lam", True)
    box, corrected = cutmix_box(tf.constant(lam), tf.constant(u), height, width, minmax, correct)
    cutmix = tf.constant(cut & (lam != 1.0))
    params = MixParams(tf.where(cutmix, corrected, tf.constant(lam)), cutmix, box)
    if mode == "batch":
        params = MixParams(*(tf.repeat(t, batch, axis=0) for t in params))
    elif mode == "pair":
        first = tf.minimum(tf.range(batch), batch - 1 - tf.range(batch))
        params = MixParams(*(tf.gather(t, first) for t in params))
    return augment.Mixup(**kwargs).apply(tf.constant(images), tf.constant(labels), params)


def test_mixup_and_cutmix_equal_timms_given_the_same_draws(timm):
    images, labels = _mix_inputs()
    for case, (ref_x, ref_y) in zip(MIX_CASES, timm["mixup_cases"], strict=True):
        x, y = _tfdp_mix(images, labels, *case)
        np.testing.assert_allclose(x.numpy(), ref_x, atol=1e-6, err_msg=str(case))
        np.testing.assert_allclose(y.numpy(), ref_y, atol=1e-6, err_msg=str(case))


LOGITS = np.random.default_rng(4).standard_normal((5, 7)).astype(np.float32) * 3
TARGETS = np.random.default_rng(5).dirichlet(np.ones(7), size=5).astype(np.float32)


def test_soft_target_cross_entropy_equals_timms_per_sample(timm):
    ours = soft_target_cross_entropy()(tf.constant(TARGETS), tf.constant(LOGITS)).numpy()
    np.testing.assert_allclose(ours, timm["soft_target_losses"], rtol=1e-5)


@pytest.fixture(scope="module")
def timm():
    """Every timm computation of this module, in one process of its own (one start-up)."""
    timm_ref.skip_unless_available()
    images, labels = _mix_inputs()
    calls = {
        "rand_augment_ops": (IMAGE, _rand_augment_cases()),
        "color_jitter_cases": (IMAGE, _color_jitter_cases()[0]),
        "random_erasing_cases": (ERASE_IMAGES, _erasing_cases()[0]),
        "mixup_cases": (images, labels, MIX_CASES),
        "soft_target_losses": (LOGITS, TARGETS),
        "resized_crop_cases": (CROP_IMAGE, CROP_CASES),
    }
    results = timm_ref.call("many", list(calls.items()))
    return dict(zip(calls, results, strict=True))


CROP_IMAGE = photo(300, 400, np.random.default_rng(5))
#: (top, left, height, width, size, interpolation): shrinks, a stretch, an enlargement.
CROP_CASES = [
    (0, 0, 300, 400, 224, "bicubic"),
    (17, 40, 250, 333, 224, "bicubic"),
    (60, 90, 180, 120, 96, "bicubic"),
    (100, 150, 80, 100, 160, "bicubic"),
    (17, 40, 250, 333, 224, "bilinear"),
]


def _tfdp_crop(case, antialias: bool) -> np.ndarray:
    top, left, h, w, size, interpolation = case
    crop = augment.RandomResizedCrop(size, interpolation=interpolation, antialias=antialias)
    out = crop.resize(tf.constant(CROP_IMAGE[top : top + h, left : left + w])).numpy()
    return np.clip(np.round(out), 0, 255)  # PIL's uint8


def test_resized_crop_bicubic_is_close_to_timms(timm):
    for case, ref in zip(CROP_CASES, timm["resized_crop_cases"], strict=True):
        ref = ref.astype(np.float32)
        diff = np.abs(_tfdp_crop(case, antialias=True) - ref)
        assert diff.mean() <= 0.3 and np.mean(diff > 2) <= 0.001, (case, diff.mean(), diff.max())
        if case[2] > case[4] and case[3] > case[4]:  # a shrink: the filter matters
            plain = np.abs(_tfdp_crop(case, antialias=False) - ref).mean()
            assert plain >= 3 * diff.mean(), (case, plain, diff.mean())
