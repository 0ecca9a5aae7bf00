"""DeiT's held-out transform (``ResizeCenterCrop``) against torchvision's and timm's own.

DeiT and timm evaluate with ``Resize(int(size / crop_ratio), bicubic)`` of the shorter side and
``CenterCrop(size)`` on PIL images (tests/timm_side.py runs timm's ``create_transform`` in a
process of its own). tfdp plans the same crop in the original image and resamples it there
(one window, decoded alone from a JPEG), with PIL's sampling positions and filter support:

========================================  =================================================
what                                      measured (10 photo-like JPEGs of ImageNet's sizes,
                                          and 41x57 / 100x150 ones: enlarged)
========================================  =================================================
the geometry: resized size, crop corner   equal to torchvision's, box for box (int()
(torchvision's, read off real images)     truncation, round half to even), 300 cases
the same pixels through both transforms   0.27-0.31 levels on average, at most 18 (PIL rounds
(PIL-decoded, 0..255 levels)              each pass to uint8 and clips a bicubic's overshoot
                                          there; tfdp keeps float32): more than 2 levels on
                                          0.03-0.10% of the values
JPEG files end to end: tfdp's window      0.93-1.04 levels on average, at most 18.4: TF's
path against timm's PIL loader            JPEG decode (libjpeg's fast integer IDCT) differs
                                          from PIL's (the accurate one) by up to 7 levels
the earlier CenterCrop (a whole-pixel     3-9.5 levels on average, up to 157: the crop box
window, stretched)                        off by up to a pixel, the scale by one
========================================  =================================================

CPU cost: about 10 s (one timm process, 30 resizes to 224, a hypothesis property on boxes).
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

import timm_ref
from photos import write_folder
from tfdp import augment
from tfdp.errors import ConfigError
from tfdp.sources import ImageFolderSource
from tfdp.windows.plan import split_window

pytestmark = [pytest.mark.torch, pytest.mark.xdist_group("eval_transform")]

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
#: ImageNet's sizes, portrait and landscape, and images smaller than the crop.
SIZES = [(375, 500), (500, 333), (333, 500), (240, 320), (100, 150), (41, 57), (224, 224),
         (300, 257), (500, 375), (281, 500)]  # fmt: skip
#: (size, crop ratio): DeiT's, another, and one that keeps the whole shorter side.
SETTINGS = [(224, 0.875), (96, 0.9), (32, 1.0)]


def torchvision_crop(height: int, width: int, size: int, ratio: float) -> tuple[int, ...]:
    """The resized size and CenterCrop's corner, transcribed from torchvision 0.29
    (``_compute_resized_output_size``, ``center_crop``) and DeiT (``int(size / ratio)``)."""
    short_side = int(size / ratio)
    short, long = (width, height) if width <= height else (height, width)
    new_short, new_long = short_side, int(short_side * long / short)
    new_w, new_h = (new_short, new_long) if width <= height else (new_long, new_short)
    top = int(round((new_h - size) / 2.0))  # noqa: RUF046 (torchvision's words)
    left = int(round((new_w - size) / 2.0))  # noqa: RUF046
    return new_h, new_w, top, left


def box_in_original(height, width, size, new_h, new_w, top, left) -> list[float]:
    """The crop of the resized image in the original's pixels (PIL's ``x * in / out``)."""
    return [top * height / new_h, left * width / new_w, size * height / new_h, size * width / new_w]


def _geometry_cases() -> list[tuple[int, int, int, float]]:
    rng = np.random.default_rng(35)
    edges = [(1, 1, 224, 0.875), (1, 40, 32, 1.0), (7, 300, 224, 0.875), (300, 7, 224, 0.875),
             (224, 224, 224, 0.875), (223, 224, 224, 0.875), (225, 224, 224, 0.875),
             (256, 341, 224, 0.875), (375, 500, 224, 0.875), (500, 375, 384, 1.0),
             (333, 500, 224, 0.9), (17, 19, 7, 0.33)]  # fmt: skip
    random = [
        (int(h), int(w), int(s), float(r))
        for h, w, s, r in zip(
            rng.integers(1, 1200, 288),
            rng.integers(1, 1200, 288),
            rng.integers(1, 300, 288),
            rng.uniform(0.3, 1.0, 288),
            strict=True,
        )
        if max(h, w) / min(h, w) <= 40  # the coordinate image stays small
    ]
    return edges + random


GEOMETRY = _geometry_cases()


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = write_folder(tmp_path_factory.mktemp("eval"), len(SIZES), classes=1, sizes=SIZES, seed=4)
    return ImageFolderSource(root)


@pytest.fixture(scope="module")
def timm(folder):
    """Every timm computation of this module, in one process of its own."""
    paths = [folder.path(i) for i in range(folder.num_examples)]
    calls = [("eval_geometry", (GEOMETRY,))]
    calls += [("eval_transform_files", (paths, s, r, MEAN, STD)) for s, r in SETTINGS]
    calls += [("train_transform_names", ("rand-m9-mstd0.5-inc1", 0.25))]
    geometry, *outputs, train_names = timm_ref.call("many", calls)
    return {"geometry": geometry, "outputs": outputs, "train_names": train_names}


def _pipeline(size: int, ratio: float) -> augment.Compose:
    return augment.Compose(
        [augment.ResizeCenterCrop(size, ratio), augment.ToFloat(), augment.Normalize(MEAN, STD)]
    )


def _levels(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The difference of two normalised images in 0..255 levels of the pixels."""
    return np.abs(a - b) * np.asarray(STD) * 255


def test_the_crop_is_torchvisions_box_for_box(timm):
    """The real torchvision (timm's transforms) resizes to the transcription's size and crops
    at its corner; tfdp's plan is that box in the original image, to float rounding."""
    assert [tuple(g) for g in timm["geometry"]] == [torchvision_crop(*c) for c in GEOMETRY]
    for (h, w, size, ratio), (new_h, new_w, top, left) in zip(
        GEOMETRY, timm["geometry"], strict=True
    ):
        crop = augment.ResizeCenterCrop(size, ratio)
        assert crop.geometry.resized_shapes(np.array([[h, w]])).tolist() == [[new_h, new_w]]
        want = box_in_original(h, w, size, new_h, new_w, top, left)
        np.testing.assert_allclose(
            crop.geometry.source_boxes(np.array([[h, w]]))[0], want, atol=1e-9
        )


def test_same_pixels_through_timms_transform_and_tfdps(folder, timm):
    """PIL-decoded pixels: what is left is PIL's rounding (its uint8 passes), not geometry."""
    arrays = [np.asarray(Image.open(folder.path(i)).convert("RGB")) for i in range(len(SIZES))]
    for (size, ratio), ref in zip(SETTINGS, timm["outputs"], strict=True):
        pipe = _pipeline(size, ratio)
        got = np.stack([pipe(tf.constant(a[None]), [[0, 0]])[0].numpy() for a in arrays])
        diff = _levels(got, ref)
        # measured: mean 0.27-0.31, max 17.9 (224), 14.8 (96), 4.2 (32); > 2 on <= 0.1%
        assert diff.mean() <= 0.4 and diff.max() <= 24 and np.mean(diff > 2) <= 0.002, (
            size,
            diff.mean(),
            diff.max(),
            np.mean(diff > 2),
        )


def test_jpeg_files_through_the_window_path_against_timms_loader(folder, timm):
    """End to end from the files: TF's JPEG decode is libjpeg's fast IDCT (PIL's is the
    accurate one: up to 7 levels apart), the rest is the transform's rounding."""
    n = folder.num_examples
    for (size, ratio), ref in zip(SETTINGS, timm["outputs"], strict=True):
        pipe = split_window(_pipeline(size, ratio))
        request = pipe.request(tf.zeros([n, 2], tf.int64), on_host=True)
        (images, _), _ = folder.load_windows(tf.range(n, dtype=tf.int64), request)
        diff = _levels(images.numpy(), ref)
        # measured: mean 0.93-1.04, max 18.4
        assert diff.mean() <= 1.3 and diff.max() <= 24, (size, diff.mean(), diff.max())


def test_the_old_whole_pixel_centre_crop_is_much_further_from_timm(folder, timm):
    """What the exact placement buys: CenterCrop's stretched whole-pixel window (bicubic,
    antialiased) differs 10x more from DeiT's transform on the same pixels."""
    arrays = [np.asarray(Image.open(folder.path(i)).convert("RGB")) for i in range(4)]
    crop = augment.CenterCrop(224, 0.875, "bicubic", antialias=True)
    ref = timm["outputs"][0][:4]
    old = np.stack([crop(tf.constant(a[None]), [[0, 0]])[0].numpy() for a in arrays])
    new = np.stack([_pipeline(224, 0.875)(tf.constant(a[None]), [[0, 0]])[0] for a in arrays])
    norm = (old / 255 - np.asarray(MEAN)) / np.asarray(STD)
    assert _levels(norm, ref).mean() >= 10 * _levels(new, ref).mean()


def test_stages_in_timms_training_order(timm):
    """The recipe's training stages for a DeiT model in timm's create_transform order: the
    crop and flip, RandAugment, the pixels to [0, 1] and normalised, then erasing (timm
    erases normalised images); Mixup after, on the batch."""
    from tfdp.recipe import TrainConfig, build_augment

    cfg = TrainConfig(
        data="x",
        image_size=224,
        model="deit_tiny_patch16_224",
        aa="rand-m9-mstd0.5-inc1",
        reprob=0.25,
        mixup=0.8,
    )
    ours = [type(s).__name__ for s in build_augment(cfg, (224, 224, 3), 1 / 255, True, 10).stages]
    names = {"RandomResizedCropAndInterpolation": "RandomResizedCrop",
             "RandomHorizontalFlip": "RandomFlip", "MaybeToTensor": "ToFloat",
             "ToTensor": "ToFloat"}  # fmt: skip
    assert [names.get(n, n) for n in timm["train_names"]] + ["Mixup"] == ours


@settings(max_examples=300, deadline=None)
@given(
    height=st.integers(1, 5000),
    width=st.integers(1, 5000),
    size=st.integers(1, 512),
    ratio=st.floats(0.05, 1.0),
    interpolation=st.sampled_from(["bicubic", "bilinear"]),
)
def test_planned_box_window_and_placement(height, width, size, ratio, interpolation):
    """Any image size: the box tfdp resamples is torchvision's (the transcription above, which
    test_the_crop_is_torchvisions_box_for_box checks against torchvision itself); the window
    holds every pixel the filter reads and lies in the image; the placement maps the output's
    first and last pixel centres to the box's, in the window."""
    crop = augment.ResizeCenterCrop(size, ratio, interpolation)
    shape = np.array([[height, width]])
    box = crop.geometry.source_boxes(shape)[0]
    want = box_in_original(height, width, size, *torchvision_crop(height, width, size, ratio))
    np.testing.assert_allclose(box, want, rtol=1e-12, atol=1e-9)
    (top, left, win_h, win_w) = crop.host_windows(shape, np.zeros([1, 0], np.float32))[0]
    place = crop.host_placements(shape, np.zeros([1, 0], np.float32))[0]
    radius = {"bicubic": 2.0, "bilinear": 1.0}[interpolation]
    for start, length, extent, b0, blen, scale, shift in (
        (top, win_h, height, box[0], box[2], place[0], place[2]),
        (left, win_w, width, box[1], box[3], place[1], place[3]),
    ):
        assert start >= 0 and length >= 1 and start + length <= extent
        per_out = blen / size  # original pixels per output pixel
        r = radius * max(per_out, 1.0)
        first, last = b0 + 0.5 * per_out, b0 + blen - 0.5 * per_out  # output pixel centres
        # ScaleAndTranslate's span around a centre c: ceil(c - r - 0.5) .. floor(c + r - 0.5)
        assert start <= max(np.ceil(first - r - 0.5), 0)
        assert start + length - 1 >= min(np.floor(last + r - 0.5), extent - 1)
        for i, centre in ((0, first), (size - 1, last)):
            tol = 1e-5 * max(extent, 1)  # float32 scale and translation
            assert abs((i + 0.5 - shift) / scale - (centre - start)) <= tol


def test_window_path_encoded_batch_and_decoded_batch_agree(folder):
    """The stage on decoded images, on a batch of encoded ones, and through the window path
    (NumPy-planned, one window decoded per JPEG): bit for bit."""
    from tfdp.windows.decode import encoded_windows

    crop = augment.ResizeCenterCrop(24, 0.8)
    n = folder.num_examples
    data = tf.stack([tf.io.read_file(folder.path(i)) for i in range(n)])
    params = crop.draw(tf.zeros([n, 2], tf.int64))
    encoded = encoded_windows(data, crop, params).numpy()
    request = split_window(crop).request(tf.zeros([n, 2], tf.int64), on_host=True)
    (windowed, _), _ = folder.load_windows(tf.range(n, dtype=tf.int64), request)
    for i in range(n):
        image = tf.io.decode_jpeg(data[i])[tf.newaxis]
        want = crop(image, [[0, i]])[0].numpy()
        np.testing.assert_array_equal(encoded[i], want)
        np.testing.assert_array_equal(windowed[i].numpy(), want)
    shapes = tf.constant(np.array(SIZES, np.int32))
    np.testing.assert_array_equal(
        crop.host_placements(np.array(SIZES), np.zeros([n, 0], np.float32)),
        crop.placements(shapes, tf.zeros([n, 0])).numpy(),
    )


def test_bad_arguments_name_themselves():
    for kwargs, argument in (
        ({"size": 224, "crop_ratio": 0.0}, "crop_ratio"),
        ({"size": 224, "crop_ratio": 1.5}, "crop_ratio"),
        ({"size": (224, 160)}, "size"),
        ({"size": 224, "interpolation": "nearest"}, "interpolation"),
    ):
        with pytest.raises(ConfigError) as err:
            augment.ResizeCenterCrop(**kwargs)
        assert err.value.argument == argument and str(err.value).startswith(argument)
