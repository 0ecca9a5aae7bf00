"""One validation of data for every path: tfdp.recipe.dataspec; train / inspect / convert agree.

Labels integral and in range (no stray label inflating the number of classes), pixels of a
stated type and range (no second 1/255), a warning for one class; every error names the file,
the key and the values. Then: TFRecord record counts checked against the manifest as records
are read, by `tfdp data convert` and by the training stream.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shards import rewrite_shard
from tfdp.cli.convert import convert_data
from tfdp.cli.inspect import inspect_data
from tfdp.cli.messages import said
from tfdp.errors import DataError
from tfdp.recipe import TrainConfig, build_data
from tfdp.recipe.dataspec import check_images, check_labels, open_source

RNG = np.random.default_rng(0)
IMAGES = RNG.integers(0, 256, (30, 6, 6, 1), dtype=np.uint8)
LABELS = np.arange(30) % 3


def _npz(path: Path, images=IMAGES, labels=LABELS, **extra) -> str:
    np.savez(path, images=images, labels=labels, **extra)
    return str(path)


# -- labels ----------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 12), min_size=1, max_size=40), st.booleans())
def test_labels_inferred_classes_must_all_occur(values, as_float):
    y = np.asarray(values, np.float32 if as_float else np.int64)
    present = set(values)
    k = max(values) + 1
    if present == set(range(k)):
        got, classes, notes = check_labels(y, "d.npz", "labels")
        np.testing.assert_array_equal(got, np.asarray(values))
        assert got.dtype == np.int64 and classes == k
        assert any("single class" in n for n in notes) == (len(present) == 1)
        assert any("read as int64" in n for n in notes) == as_float
    else:
        with pytest.raises(ValueError, match=r"d\.npz \(key 'labels'\): classes .* no example"):
            check_labels(y, "d.npz", "labels")
    # Stating the number of classes allows gaps (and refuses labels beyond it).
    got, classes, _ = check_labels(y, "d.npz", "labels", num_classes=13)
    assert classes == 13
    if k > 1:
        with pytest.raises(ValueError, match=rf"labels must be in 0..{k - 2} \({k - 1} classes"):
            check_labels(y, "d.npz", "labels", num_classes=k - 1)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 29), st.sampled_from([0.5, -1.0, float("nan"), float("inf"), 2.25]))
def test_labels_bad_value_is_named_with_its_index(at, bad):
    y = LABELS.astype(np.float64)
    y[at] = bad
    with pytest.raises(ValueError) as err:
        check_labels(y, "d.npz", "y")
    message = str(err.value)
    assert message.startswith("d.npz (key 'y'): ")
    assert f"example(s) {at})" in message
    if np.isfinite(bad):
        assert f"{bad:g}" in message


def test_stray_label_is_refused_with_its_value_and_index():
    y = LABELS.copy()
    y[17] = 1000
    with pytest.raises(DataError) as err:
        check_labels(y, "d.npz", "labels")
    message = str(err.value)
    assert "classes 3..999 have no example" in message
    assert "label(s) 1000 occur (at example(s) 17)" in message and "(num_classes)" in message
    assert err.value.argument is None  # the data is at fault; the fix it names is an argument
    assert err.value.mentions == ("num_classes",)  # which a caller says its way
    said = err.value.said(lambda name: "--num-classes" if name == "num_classes" else name)
    assert said == message.replace("(num_classes)", "(--num-classes)")


def test_labels_shape_and_type_errors():
    assert check_labels(LABELS[:, None], "d", "y")[0].shape == (30,)
    with pytest.raises(ValueError, match=r"must be \[N\]"):
        check_labels(np.zeros((3, 2)), "d", "y")
    with pytest.raises(ValueError, match="strings"):
        check_labels(np.array(["cat", "dog"]), "d", "y")
    with pytest.raises(ValueError, match=r"labels must be in 0..1 \(2 classes named\); 1 are not"):
        check_labels(np.array([0, 1, 2]), "d", "y", classes=["a", "b"])


# -- pixels ----------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 5 * 6 * 6 - 1), st.sampled_from([np.nan, np.inf, -np.inf]), st.integers(1, 3))
def test_non_finite_pixels_are_counted_and_named(at, bad, count):
    x = RNG.random((5, 6, 6), dtype=np.float32)
    flat = x.reshape(-1)
    flat[at : at + count] = bad
    count = len(flat[at : at + count])
    with pytest.raises(ValueError) as err:
        check_images(x, "x.npz", "images")
    message = str(err.value)
    assert message.startswith(f"x.npz (key 'images'): {count} pixel value(s) are NaN or infinite")
    assert str(at // 36) in message  # the example holding the first bad value


@pytest.mark.parametrize(
    ("images", "scale", "dtype", "note"),
    [
        (IMAGES, 1 / 255, np.uint8, None),
        (IMAGES.astype(np.float64) / 255, 1.0, np.float32, "float64 images in [0, 1]"),
        (IMAGES > 127, 1.0, np.float32, "bool images read as 0.0 / 1.0"),
        (IMAGES.astype(np.int32), 1 / 255, np.uint8, "int32 images with levels 0..255"),
    ],
)
def test_pixel_types_have_one_stated_meaning(images, scale, dtype, note):
    x, got_scale, notes = check_images(images, "x.npz", "images")
    assert got_scale == scale and x.dtype == dtype and x.shape == (30, 6, 6, 1)
    # What training feeds the model: stored values times the scale, always within [0, 1].
    fed = x.astype(np.float64) * got_scale
    assert fed.min() >= 0 and fed.max() <= 1
    assert fed.max() > 0.5  # not divided by 255 twice
    assert (note is None and not notes) or (note is not None and note in notes[0])


@pytest.mark.parametrize(
    ("images", "match"),
    [
        (np.full((2, 3, 3), 1.5), r"float images must be in \[0, 1\], got values 1.5..1.5"),
        (np.full((2, 3, 3), 300, np.int32), "int32 images hold values 300..300"),
        (np.zeros((2, 3)), r"must be \[N, H, W, C\]"),
        (np.zeros((2, 3, 3), np.complex64), "must be uint8"),
    ],
)
def test_pixel_errors(images, match):
    with pytest.raises(ValueError, match=match):
        check_images(images, "x.npz", "images")


# -- the same verdict on every path ------------------------------------------------------------


def _bad_files(tmp: Path) -> dict[str, tuple[str, str]]:
    """name -> (path, a phrase every path's error must contain)."""
    stray = LABELS.copy()
    stray[17] = 1000
    nan_pixel = IMAGES.astype(np.float32) / 255
    nan_pixel[4, 2, 2, 0] = np.nan
    (tmp / "notzip.npz").write_bytes(b"hello, not a zip")
    return {
        "float_labels": (_npz(tmp / "fl.npz", labels=LABELS + 0.5), "labels must be integer"),
        "stray": (_npz(tmp / "st.npz", labels=stray), "1000"),
        "negative": (_npz(tmp / "ng.npz", labels=LABELS - 1), "labels must be >= 0"),
        "nan_pixel": (_npz(tmp / "np.npz", images=nan_pixel), "1 pixel value(s) are NaN"),
        "range": (_npz(tmp / "rg.npz", images=IMAGES * 2.0), "float images must be in [0, 1]"),
        "not_zip": (str(tmp / "notzip.npz"), "not a .npz file"),
    }


def test_inspect_convert_and_train_give_the_same_verdict(tmp_path):
    for name, (path, phrase) in _bad_files(tmp_path).items():
        for what, call in (
            ("inspect", lambda p=path: inspect_data(p)),
            ("convert", lambda p=path: convert_data(p, tmp_path / "out.npz", progress=False)),
            ("train", lambda p=path: build_data(TrainConfig(data=p))),
            ("eval", lambda p=path: build_data(TrainConfig(data="digits", eval_data=p))),
        ):
            with pytest.raises(ValueError) as err:
                call()
            assert phrase in str(err.value), (name, what, str(err.value))
            assert os.path.basename(path) in str(err.value), (name, what)
            if name == "stray" and what != "eval":  # K inferred: the way out named as data
                assert "(num_classes)" in str(err.value), (what, str(err.value))
                assert "(--num-classes)" in said(err.value), (what, str(err.value))  # the CLI's
        assert not (tmp_path / "out.npz").exists()


def test_train_reads_float_images_as_they_are(tmp_path):
    """float64 images in [0, 1] were scaled by 1/255 a second time; bool images too."""
    data = build_data(TrainConfig(data=_npz(tmp_path / "f.npz", images=IMAGES / 255.0)))
    assert data.train_scale == data.eval_scale == 1.0
    x, _ = data.train.numpy()
    assert x.dtype == np.float32 and 0.5 < x.max() <= 1.0
    data = build_data(TrainConfig(data=_npz(tmp_path / "u.npz")))
    assert data.train_scale == 1 / 255 and data.train.numpy()[0].dtype == np.uint8
    bools = _npz(tmp_path / "b.npz", images=IMAGES > 0)
    assert build_data(TrainConfig(data=bools)).train_scale == 1


def test_eval_folder_with_other_classes_is_refused(tmp_path):
    """A held-out folder whose class folders differ would give its labels other meanings."""
    import tensorflow as tf

    for root, classes in (("a", ("cat", "dog", "eel")), ("b", ("cat", "eel"))):
        for c in classes:
            (tmp_path / root / c).mkdir(parents=True)
            for i in range(2):
                png = tf.io.encode_png(tf.zeros([4, 4, 3], tf.uint8)).numpy()
                (tmp_path / root / c / f"{i}.png").write_bytes(png)
    cfg = TrainConfig(data=str(tmp_path / "a"), eval_data=str(tmp_path / "b"), image_size=4)
    with pytest.raises(ValueError, match=r"b \(its class folders\) names other classes .*'dog'"):
        build_data(cfg)


# -- TFRecord counts ---------------------------------------------------------------------------


def _shards(tmp: Path, n: int = 4) -> Path:
    out = tmp / "shards"
    convert_data(_npz(tmp / "src.npz"), out, shards=n, progress=False)
    return out


def test_convert_verifies_each_shard_against_the_manifest(tmp_path):
    shards = _shards(tmp_path)
    manifest = json.loads((shards / "data.manifest.json").read_text())
    assert manifest["num_classes"] == 3 and manifest["label_counts"] == [10, 10, 10]
    assert convert_data(str(shards), tmp_path / "ok.npz", progress=False).startswith(
        "wrote 30 examples"
    )
    short = shards / manifest["files"][1]
    listed = rewrite_shard(short, 3)
    assert listed == manifest["counts"][1] > 3  # the fault: fewer records than the manifest says
    with pytest.raises(ValueError) as err:
        convert_data(str(shards), tmp_path / "short.npz", progress=False)
    assert f"{short} holds 3 readable records, not the {listed} listed" in str(err.value)
    assert not (tmp_path / "short.npz").exists()


def test_truncated_record_mid_shard_names_the_shard(tmp_path):
    shards = _shards(tmp_path)
    shard = sorted(shards.glob("*.tfrecord"))[2]
    size = shard.stat().st_size
    os.truncate(shard, size // 2 + 5)  # cuts a record in two
    with pytest.raises(ValueError, match=rf"{shard} holds \d readable records, not the 7 listed"):
        convert_data(str(shards), tmp_path / "t.npz", progress=False)
    with pytest.raises(ValueError, match=rf"{shard} holds \d readable records"):
        build_data(TrainConfig(data=str(shards), eval_fraction=0.5))  # held out: read now


def test_open_source_kinds(tmp_path):
    shards = _shards(tmp_path)
    for spec in (str(shards), str(shards / "data.manifest.json"), str(shards / "*.tfrecord")):
        data = open_source(spec, read_all_labels=True)
        assert (data.kind, data.num_examples, data.num_classes) == ("tfrecord", 30, 3)
        assert data.counts().tolist() == [10, 10, 10]
    part = open_source(str(shards / "data-0000[01]*"), read_all_labels=True)
    assert part.num_examples == len(part.labels) == 16
    one = open_source(str(shards / "data-00003-of-00004.tfrecord"), read_all_labels=True)
    assert one.num_examples == len(one.labels) == 7


def test_shards_without_a_class_list_have_their_labels_read_and_checked(tmp_path):
    """Shards written by write_tfrecords alone (or an older tfdp) name no classes."""
    from tfdp.sources import write_tfrecords

    stray = LABELS.copy()
    stray[11] = 40
    for name, labels in (("plain", LABELS), ("stray", stray)):
        write_tfrecords((IMAGES, labels), tmp_path / name, num_shards=3)
    plain = str(tmp_path / "plain")
    assert open_source(plain).num_classes is None  # unknown until the labels are read
    assert "classes: unknown" in inspect_data(plain, examples=0)
    data = open_source(plain, read_all_labels=True)
    assert data.num_classes == 3 and data.counts().tolist() == [10, 10, 10]
    with pytest.raises(ValueError, match=r"classes 3..39 have no example, but label\(s\) 40"):
        build_data(TrainConfig(data=str(tmp_path / "stray")))
    assert build_data(TrainConfig(data=str(tmp_path / "stray"), num_classes=41)).num_classes == 41
