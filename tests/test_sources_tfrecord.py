"""write_tfrecords and TFRecordSource: shards, manifest, and the Repeated-Augmentation stream."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from reference import lanes_by_hand  # noqa: E402
from tfdp.sources.tfrecord import (  # noqa: E402
    MANIFEST_SUFFIX,
    TFRecordSource,
    read_manifest,
    write_tfrecords,
)

N = 96
SHARDS = 8


def _images(n: int) -> np.ndarray:
    return np.random.default_rng(7).integers(0, 256, (n, 4, 5, 3), dtype=np.uint8)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("tfrecords")
    images, ids = _images(N), np.arange(N, dtype=np.int64)
    files = write_tfrecords((images, ids), out, num_shards=SHARDS)
    return {"out": out, "files": files, "images": images, "ids": ids}


@pytest.fixture(scope="module")
def source(data) -> TFRecordSource:
    return TFRecordSource(data["files"])


def _read_all(src: TFRecordSource) -> list:
    ds = tf.data.TFRecordDataset(src.files, compression_type=src.compression or "")
    return list(ds.map(src.parse).as_numpy_iterator())


# -- writer and manifest ----------------------------------------------------------------------


def test_manifest_and_balanced_shards(data):
    out = data["out"]
    manifest = json.loads((out / ("data" + MANIFEST_SUFFIX)).read_text())
    assert manifest["files"] == [f"data-{i:05d}-of-{SHARDS:05d}.tfrecord" for i in range(SHARDS)]
    assert [os.path.basename(f) for f in data["files"]] == manifest["files"]
    assert manifest["counts"] == [N // SHARDS] * SHARDS and manifest["num_examples"] == N
    image, label = manifest["features"]
    assert (image["name"], image["encoding"], image["dtype"], image["shape"]) == (
        "image",
        "png",
        "uint8",
        [4, 5, 3],
    )
    assert image["keys"] == {"image": {"kind": "FixedLenFeature", "shape": [], "dtype": "string"}}
    assert (label["name"], label["encoding"], label["dtype"]) == ("label", "int64", "int64")
    assert manifest["structure"] == "tuple"
    assert not [p for p in os.listdir(out) if ".tmp-" in p]
    for path, count in zip(data["files"], manifest["counts"], strict=True):
        assert sum(1 for _ in tf.data.TFRecordDataset(path)) == count


def test_unbalanced_count_splits_differ_by_at_most_one(tmp_path, capsys):
    files = write_tfrecords(np.zeros((10, 1), "float32"), tmp_path, num_shards=4, progress=True)
    counts = [sum(1 for _ in tf.data.TFRecordDataset(f)) for f in files]
    assert counts == [3, 3, 2, 2]
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 4 and "shard 4/4 (2 records)" in lines[-1]


def test_round_trip_tuple(data, source):
    assert source.manifest is not None and source.num_examples == N
    records = _read_all(source)
    ids = sorted(int(label) for _, label in records)
    assert ids == list(range(N))  # every example exactly once
    for image, label in records:
        np.testing.assert_array_equal(image, data["images"][label])
    # Written in a shuffled order (shuffle_seed=0), not the arrays' order.
    assert [int(label) for _, label in records] != list(range(N))
    image_spec, label_spec = source.element_spec
    assert image_spec.shape.as_list() == [4, 5, 3] and image_spec.dtype == tf.uint8
    assert label_spec.dtype == tf.int64


def test_round_trip_dict_of_many_dtypes(tmp_path):
    n = 9
    rng = np.random.default_rng(3)
    arrays = {
        "gray": rng.integers(0, 256, (n, 5, 6), dtype=np.uint8),
        "rgba": rng.integers(0, 256, (n, 2, 3, 4), dtype=np.uint8),
        "f32": rng.standard_normal((n, 3)).astype(np.float32),
        "f16": rng.standard_normal((n,)).astype(np.float16),
        "f64": rng.standard_normal((n, 2)),
        "i16": rng.integers(-300, 300, (n,)).astype(np.int16),
        "u64": rng.integers(0, 2**62, (n, 2), dtype=np.uint64) * 3,
        "flag": rng.integers(0, 2, (n, 2)).astype(bool),
        "name": np.array([f"item-{i}" for i in range(n)]),
        "id": np.arange(n),
    }
    files = write_tfrecords(arrays, tmp_path, num_shards=2, prefix="mixed", shuffle_seed=None)
    manifest = read_manifest(tmp_path / ("mixed" + MANIFEST_SUFFIX))
    encodings = {f["name"]: f["encoding"] for f in manifest["features"]}
    assert encodings == {
        "gray": "png",
        "rgba": "png",
        "f32": "float",
        "f16": "float",
        "f64": "raw",
        "i16": "int64",
        "u64": "raw",
        "flag": "int64",
        "name": "bytes",
        "id": "int64",
    }
    src = TFRecordSource(tmp_path / ("mixed" + MANIFEST_SUFFIX))  # a manifest path works too
    assert src.files == files
    records = _read_all(src)
    assert [int(r["id"]) for r in records] == list(range(n))  # shuffle_seed=None keeps order
    for i, rec in enumerate(records):
        for key, arr in arrays.items():
            expected = arr[i].astype(object) if key == "name" else arr[i]
            got = rec[key].decode() if key == "name" else rec[key]
            assert np.asarray(got).dtype == np.asarray(expected).dtype or key == "name", key
            np.testing.assert_array_equal(got, expected, err_msg=key)


def test_features_rename_and_choose_encodings(tmp_path):
    x = _images(6)
    files = write_tfrecords(
        (x, np.arange(6)), tmp_path, num_shards=2, features={"pixels": "raw", "target": None}
    )
    src = TFRecordSource(files)
    assert sorted(src.features) == ["pixels", "pixels/shape", "target"]
    for pixels, target in _read_all(src):
        np.testing.assert_array_equal(pixels, x[target])
    with pytest.raises(ValueError, match="'png' needs uint8"):
        write_tfrecords(
            (np.zeros((4, 2), "float32"),), tmp_path, num_shards=1, features={"a": "png"}
        )
    with pytest.raises(ValueError, match="num_shards"):
        write_tfrecords(np.zeros((4, 2)), tmp_path, num_shards=5)


def test_write_from_a_source_and_refuse_placeholders(tmp_path):
    from tfdp.sources.image_folder import ImageFolderSource

    root = tmp_path / "imgs"
    expected = {}
    for c in range(2):
        (root / f"c{c}").mkdir(parents=True)
        for i in range(3):
            img = np.full((3 + i, 2 + c, 3), 40 * i + c, np.uint8)
            path = root / f"c{c}" / f"{i}.png"
            tf.io.write_file(str(path), tf.io.encode_png(img))
            expected[str(path)] = img
    folder = ImageFolderSource(root)
    out = tmp_path / "out"
    files = write_tfrecords(folder, out, num_shards=2)
    src = TFRecordSource(files)
    got = sorted((int(label), image.shape, int(image[0, 0, 0])) for image, label in _read_all(src))
    want = sorted(
        (
            int(folder.labels[i]),
            expected[folder.path(i)].shape,
            int(expected[folder.path(i)][0, 0, 0]),
        )
        for i in range(folder.num_examples)
    )
    assert got == want
    assert src.element_spec[0].shape.as_list() == [None, None, 3]

    (root / "c1" / "bad.png").write_bytes(b"garbage")
    skipping = ImageFolderSource(root, on_error="skip")
    with pytest.raises(ValueError, match=r"bad\.png"):
        write_tfrecords(skipping, tmp_path / "out2", num_shards=2)
    assert not (tmp_path / "out2" / ("data" + MANIFEST_SUFFIX)).exists()


class _FailingSource:
    """A random-access source whose example ``fail_at`` cannot be loaded."""

    streaming = False

    def __init__(self, n: int, fail_at: int) -> None:
        self.num_examples = n
        self.fail_at = fail_at
        self.element_spec = (tf.TensorSpec([2], tf.float32), tf.TensorSpec([], tf.int64))

    def load(self, index):
        check = tf.debugging.Assert(index != self.fail_at, ["cannot load", index])
        with tf.control_dependencies([check]):
            return tf.fill([2], tf.cast(index, tf.float32)), tf.identity(index)


def test_failed_write_leaves_nothing_half_written(tmp_path):
    good = write_tfrecords(_FailingSource(20, fail_at=-1), tmp_path, num_shards=4)
    manifest_path = tmp_path / ("data" + MANIFEST_SUFFIX)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(tf.errors.InvalidArgumentError, match="cannot load"):
        write_tfrecords(_FailingSource(20, fail_at=17), tmp_path, num_shards=4, shuffle_seed=None)
    after = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert after == before  # the earlier dataset is intact, no temp file is left
    assert len(TFRecordSource(good).files) == 4
    # A successful rewrite replaces the manifest.
    write_tfrecords(_FailingSource(20, fail_at=-1), tmp_path, num_shards=2)
    assert len(json.loads(manifest_path.read_text())["files"]) == 2
    assert not [p for p in os.listdir(tmp_path) if ".tmp-" in p]


def test_gzip_round_trip(tmp_path):
    files = write_tfrecords(
        (np.arange(12, dtype="float32")[:, None], np.arange(12)),
        tmp_path,
        num_shards=3,
        compression="GZIP",
    )
    src = TFRecordSource(files)
    assert src.compression == "GZIP"
    assert sorted(int(y) for _, y in _read_all(src)) == list(range(12))
    with pytest.raises(ValueError, match="compression: 'ZLIB', but the manifest says 'GZIP'"):
        TFRecordSource(files, compression="ZLIB")
    # Without a manifest, a compressed file read as uncompressed is named.
    lone = tmp_path / "lone" / "part.tfrecord"
    lone.parent.mkdir()
    lone.write_bytes(Path(files[0]).read_bytes())
    features = {"image": tf.io.FixedLenFeature([1], tf.float32)}
    with pytest.raises(ValueError, match=re.escape(str(lone))):
        TFRecordSource([str(lone)], features)
    assert TFRecordSource([str(lone)], features, compression="GZIP").num_examples == 4


# -- the stream -------------------------------------------------------------------------------
# An epoch's stream: the files permuted by (seed, epoch) and dealt to L = min(F, W) lanes, lane j
# the round-robin interleave of files[perm[j::L]], block-shuffled; stream index s = j + m * L.


def _lanes_by_hand(src, w: int, *, seed: int, epoch: int, shuffle: bool) -> list[list[int]]:
    """Every lane's labels, read plainly (tests/reference.py), before any block shuffle (one
    read of the files for all lanes: a read per lane parsed every file again)."""
    plain = TFRecordSource(src.files, shuffle_buffer=0)
    return [[int(y) for _, y in lane] for lane in lanes_by_hand(plain, w, seed, epoch, shuffle)]


def _stream_labels(src, indices, w, *, seed=0, epoch=0, shuffle=True) -> list[int]:
    ds = src.stream(indices, num_replicas=w, seed=seed, epoch=epoch, shuffle=shuffle)
    return [int(y) for _, y in ds.as_numpy_iterator()]


@pytest.mark.parametrize("w", [1, 3, 4, 8, 11])
def test_lanes_partition_the_files(source, w):
    lanes = source.num_lanes(w)
    assert lanes == min(SHARDS, w)
    for epoch in range(3):
        got = [source.lane_files(j, num_replicas=w, seed=5, epoch=epoch) for j in range(lanes)]
        assert sorted(f for g in got for f in g) == sorted(source.files)
        assert {len(g) for g in got} <= {SHARDS // lanes, -(-SHARDS // lanes)}
        plain = [
            source.lane_files(j, num_replicas=w, seed=5, epoch=epoch, shuffle=False)
            for j in range(lanes)
        ]
        assert plain == [source.files[j::lanes] for j in range(lanes)]
    a = source.lane_files(0, num_replicas=4, seed=5, epoch=0)
    assert a != source.lane_files(0, num_replicas=4, seed=5, epoch=1) or a != source.lane_files(
        0, num_replicas=4, seed=6, epoch=0
    )


@pytest.mark.parametrize(
    ("counts", "w", "expected"),
    [
        ([12] * 8, 4, 96),  # balanced, F a multiple of L: nothing dropped
        ([13] * 4 + [12] * 4, 4, 96),  # lanes of two files: the two smallest, 12 + 12, per lane
        ([12] * 8, 3, 3 * 24),  # lanes of 2 or 3 files: the smallest has 2
        ([12] * 8, 16, 8 * 12),  # fewer files than replicas: 8 lanes
        ([5, 0, 7, 9], 2, 2 * 5),  # the two smallest files: 0 + 5
    ],
)
def test_stream_length_is_the_smallest_possible_lane(tmp_path, counts, w, expected):
    paths = []
    for i, c in enumerate(counts):
        path = str(tmp_path / f"f{i}.tfrecord")
        with tf.io.TFRecordWriter(path) as writer:
            for _ in range(c):
                writer.write(b"")
        paths.append(path)
    src = TFRecordSource(paths, USER_FEATURES, counts=counts, check_files=False)
    assert src.stream_length(w) == expected


@pytest.mark.parametrize(
    ("w", "shuffle"),
    # lanes of 4 files, of 2 or 3 files, of one file (fewer files than replicas); the files
    # permuted or not (the permutation itself: test_lanes_partition_the_files)
    [(2, False), (3, True), (16, True)],
)
def test_stream_yields_the_wanted_indices_in_order(data, w, shuffle):
    """Arbitrary index lists (repeats, wraps, backwards) against lanes read by hand."""
    src = TFRecordSource(data["files"], shuffle_buffer=0)  # the lanes are plain round robins
    lanes, length = src.num_lanes(w), src.stream_length(w)
    per_lane = length // lanes
    by_hand = [lane[:per_lane] for lane in _lanes_by_hand(src, w, seed=3, epoch=2, shuffle=shuffle)]
    rng = np.random.default_rng(w)
    cases = [
        np.arange(length),  # the whole stream
        np.arange(1, length, w),  # one rank of a DistributedSampler
        np.repeat(np.arange(0, length, 2), 2),  # each wanted twice in a row
        np.concatenate([np.arange(length - 5, length), np.arange(7)]),  # wrapped padding
        rng.integers(0, length, 40),  # random order: many passes
        np.array([], np.int64),
    ]
    for idx in cases:
        got = _stream_labels(src, idx, w, seed=3, epoch=2, shuffle=shuffle)
        assert got == [by_hand[s % lanes][s // lanes] for s in idx.tolist()]


def test_block_shuffle_permutes_within_blocks_and_is_keyed(data):
    w, block = 4, 5
    src = TFRecordSource(data["files"], shuffle_buffer=block)
    lanes, length = src.num_lanes(w), src.stream_length(w)
    per_lane = length // lanes
    seen = {}
    for epoch in (0, 1):
        by_hand = _lanes_by_hand(src, w, seed=3, epoch=epoch, shuffle=True)
        for j in range(lanes):
            got = _stream_labels(src, np.arange(j, length, lanes), w, seed=3, epoch=epoch)
            plain = by_hand[j]
            for q in range(0, per_lane, block):  # each block: a permutation of the plain one
                top = min(q + block, per_lane)
                assert set(got[q:top]) <= set(plain[q : q + block])
            assert got != plain[:per_lane]  # ... and really shuffled
            seen[epoch, j] = got
    assert seen[0, 0] != seen[1, 0]
    assert _stream_labels(
        TFRecordSource(data["files"], shuffle_buffer=block), np.arange(9), w, seed=3, epoch=1
    ) == [seen[1, s % lanes][s // lanes] for s in range(9)]  # a rerun in a fresh source: identical


def test_stream_epoch_as_a_tensor_equals_the_int(source):
    idx = np.arange(3, 40, 4)
    want = _stream_labels(source, idx, 4, seed=1, epoch=2)
    ds = tf.data.Dataset.range(2, 3).flat_map(
        lambda e: source.stream(idx, num_replicas=4, seed=1, epoch=e)
    )
    assert [int(y) for _, y in ds.as_numpy_iterator()] == want


def test_stream_options(source):
    ds = source.stream(np.arange(4), num_replicas=2, seed=0, epoch=0)
    assert ds.options().deterministic is True
    policy = ds.options().experimental_distribute.auto_shard_policy
    assert policy == tf.data.experimental.AutoShardPolicy.OFF


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"indices": [96]}, r"\[0, 96\)"),
        ({"indices": [-1]}, r"\[0, 96\)"),
        ({"num_replicas": 0}, "num_replicas"),
        ({"seed": -1}, "seed"),
    ],
)
def test_stream_argument_errors(source, kwargs, match):
    args = {"indices": [0], "num_replicas": 4, "seed": 0, "epoch": 0, **kwargs}
    with pytest.raises(ValueError, match=match):
        source.stream(**args)


# -- user files, features and counts ---------------------------------------------------------------


def _write_user_files(directory: Path, num_files: int = 4, per_file: int = 5) -> list[str]:
    """Plain TFRecords of tf.train.Example, as a user's own pipeline writes them (no manifest)."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for f in range(num_files):
        path = str(directory / f"user-{f}.tfrecord")
        with tf.io.TFRecordWriter(path) as writer:
            for j in range(per_file):
                i = f * per_file + j
                feats = {
                    "x": tf.train.Feature(float_list=tf.train.FloatList(value=[i, -i])),
                    "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[i])),
                }
                writer.write(
                    tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString()
                )
        paths.append(path)
    return paths


USER_FEATURES = {
    "x": tf.io.FixedLenFeature([2], tf.float32),
    "y": tf.io.FixedLenFeature([], tf.int64),
}


def test_user_features_decode_and_counting(tmp_path):
    paths = _write_user_files(tmp_path / "u")
    src = TFRecordSource(
        str(tmp_path / "u" / "user-*.tfrecord"),
        USER_FEATURES,
        decode=lambda p: (p["x"] * 2.0, p["y"]),
    )
    assert src.files == paths and src.manifest is None
    assert src.counts.tolist() == [5] * 4 and src.num_examples == 20  # counted once
    ids = []
    for x, y in src.stream(np.arange(20), num_replicas=2, seed=0, epoch=0).as_numpy_iterator():
        np.testing.assert_allclose(x, [2.0 * y, -2.0 * y])
        ids.append(int(y))
    assert sorted(ids) == list(range(20))
    # Default decode: the parsed values as a tuple in the key order of `features`.
    plain = TFRecordSource(paths, USER_FEATURES, counts=[5] * 4)
    x, y = plain.parse(next(iter(tf.data.TFRecordDataset(paths[1]))))
    assert x.numpy().tolist() == [5.0, -5.0] and int(y) == 5
    by_path = TFRecordSource(paths, {"y": USER_FEATURES["y"]}, counts=dict.fromkeys(paths, 5))
    assert by_path.parse(next(iter(tf.data.TFRecordDataset(paths[0])))).shape == ()
    with pytest.raises(ValueError, match="4 files"):
        TFRecordSource(paths, USER_FEATURES, counts=[5, 5])
    with pytest.raises(ValueError, match="needs a manifest"):
        TFRecordSource(paths)


@pytest.mark.parametrize(
    "features, feature, what",
    [
        (
            {"x": tf.io.FixedLenFeature([2], tf.float32), "z": tf.io.FixedLenFeature([], tf.int64)},
            "z",
            "missing",
        ),
        (
            {
                "x": tf.io.FixedLenFeature([2], tf.float32),
                "y": tf.io.FixedLenFeature([], tf.float32),
            },
            "y",
            "int64_list",
        ),
        ({"x": tf.io.FixedLenFeature([3], tf.float32)}, "x", "needs 3"),
        ({"x": tf.io.VarLenFeature(tf.string)}, "x", "float_list"),
    ],
)
def test_bad_feature_spec_names_file_and_feature(tmp_path, features, feature, what):
    paths = _write_user_files(tmp_path / "u")
    with pytest.raises(ValueError) as info:
        TFRecordSource(paths, features, counts=[5] * 4)
    msg = str(info.value)
    assert paths[0] in msg and repr(feature) in msg and what in msg


def test_one_foreign_file_is_named(tmp_path, data):
    foreign = _write_user_files(tmp_path / "u", num_files=1)
    files = [*data["files"], *foreign]
    counts = [N // SHARDS] * SHARDS + [5]
    spec = TFRecordSource(data["files"]).features
    with pytest.raises(ValueError) as info:
        TFRecordSource(files, spec, counts=counts)
    assert foreign[0] in str(info.value) and "'image'" in str(info.value)


def test_counts_must_agree_with_manifest(data):
    with pytest.raises(ValueError, match="disagrees"):
        TFRecordSource(data["files"], counts=[1] * SHARDS)
    assert TFRecordSource(data["files"], counts=[N // SHARDS] * SHARDS).num_examples == N


def test_missing_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="no file matches"):
        TFRecordSource(str(tmp_path / "*.tfrecord"), USER_FEATURES)
    with pytest.raises(FileNotFoundError, match=r"nope\.tfrecord"):
        TFRecordSource([str(tmp_path / "nope.tfrecord")], USER_FEATURES)
