"""ArrayRecordSource: random access by index (skipped when array-record is not installed)."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
ar = pytest.importorskip("array_record.python.array_record_module")

from tfdp.sources.array_record import ArrayRecordSource  # noqa: E402

FEATURES = {
    "x": tf.io.FixedLenFeature([3], tf.float32),
    "y": tf.io.FixedLenFeature([], tf.int64),
}


def _write(path, ids):
    writer = ar.ArrayRecordWriter(str(path), "group_size:1")
    for i in ids:
        feats = {
            "x": tf.train.Feature(float_list=tf.train.FloatList(value=[i, 2 * i, -i])),
            "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[i])),
        }
        writer.write(
            tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString()
        )
    writer.close()
    return str(path)


@pytest.fixture
def files(tmp_path):
    return [
        _write(tmp_path / "a-0.array_record", range(7)),
        _write(tmp_path / "a-1.array_record", range(7, 12)),
    ]


def test_random_access_by_index(files, tmp_path):
    src = ArrayRecordSource(str(tmp_path / "a-*.array_record"), FEATURES)
    assert src.files == files and src.num_examples == len(src) == 12 and not src.streaming
    order = np.random.default_rng(0).permutation(12)
    ds = tf.data.Dataset.from_tensor_slices(order).map(
        src.load, num_parallel_calls=4, deterministic=True
    )
    got = list(ds.as_numpy_iterator())
    assert [int(y) for _, y in got] == order.tolist()
    for x, y in got:
        np.testing.assert_array_equal(x, [y, 2 * y, -y])
    x_spec, y_spec = src.element_spec
    assert x_spec.shape.as_list() == [3] and y_spec.dtype == tf.int64


def test_custom_decode(files):
    src = ArrayRecordSource(files, FEATURES, decode=lambda p: p["x"][1])
    assert float(src.load(tf.constant(9, tf.int64))) == 18.0


def test_bad_feature_spec_names_file_and_feature(files):
    spec = {"x": FEATURES["x"], "label": tf.io.FixedLenFeature([], tf.int64)}
    with pytest.raises(ValueError) as info:
        ArrayRecordSource(files, spec)
    assert files[0] in str(info.value) and "'label'" in str(info.value)


def test_missing_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="no file matches"):
        ArrayRecordSource(str(tmp_path / "*.array_record"), FEATURES)
