"""write_tfrecords and TFRecordSource: shards, manifest, and the Repeated-Augmentation stream."""

from __future__ import annotations

import collections
import json
import os
import re
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from tfdp.sources.tfrecord import (  # noqa: E402
    MANIFEST_SUFFIX,
    TFRecordSource,
    read_manifest,
    write_tfrecords,
)

N = 96
SHARDS = 8
BATCH = 4


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


def _rank_stream(src, *, rank, w, r, epoch, batch=BATCH, seed=0) -> tuple[list, list]:
    ds = src.stream(
        rank=rank, num_replicas=w, num_repeats=r, seed=seed, epoch=epoch, batch_size=batch
    )
    ids, positions = [], []
    for (_, label), pos in ds.as_numpy_iterator():
        ids.append(int(label))
        positions.append(int(pos))
    return ids, positions


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
    with pytest.raises(ValueError, match="compression='ZLIB' but the manifest says 'GZIP'"):
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


@pytest.mark.parametrize("world, repeats", [(4, 2), (4, 1), (3, 3)])
def test_stream_repeated_augmentation_layout(source, world, repeats):
    groups = world // repeats
    steps = source.steps_per_epoch(world, repeats, BATCH)
    assert (
        steps == N // groups // BATCH
    )  # balanced shards, file count a multiple of groups: nothing lost
    epochs = {}
    for epoch in (0, 1):
        streams = [
            _rank_stream(source, rank=k, w=world, r=repeats, epoch=epoch) for k in range(world)
        ]
        for ids, _ in streams:
            assert len(ids) == steps * BATCH  # every rank takes the same number of steps
        counts = collections.Counter(i for ids, _ in streams for i in ids)
        assert counts == {i: repeats for i in range(N)}  # each record R times, none lost
        where = collections.defaultdict(list)
        for rank, (ids, positions) in enumerate(streams):
            assert positions == [k * world + rank for k in range(len(ids))]
            for k, i in enumerate(ids):
                where[i].append((rank, k))
        for i, places in where.items():
            ranks = [rank for rank, _ in places]
            assert len(set(ranks)) == repeats, i  # R distinct ranks ...
            assert len({rank // repeats for rank in ranks}) == 1  # ... of one group ...
            assert len({k // BATCH for _, k in places}) == 1  # ... in the same step
        all_positions = [p for _, positions in streams for p in positions]
        assert len(set(all_positions)) == len(all_positions)
        epochs[epoch] = streams
    assert epochs[0][0][0] != epochs[1][0][0]  # the order changes between epochs
    rerun = TFRecordSource(source.files)
    assert _rank_stream(rerun, rank=world - 1, w=world, r=repeats, epoch=1) == epochs[1][world - 1]


def test_stream_seed_changes_order(source):
    a = _rank_stream(source, rank=0, w=2, r=1, epoch=0, seed=0)[0]
    b = _rank_stream(source, rank=0, w=2, r=1, epoch=0, seed=1)[0]
    assert a != b and len(a) == len(b)


def test_stream_without_shuffle_buffer_is_still_a_partition(data):
    src = TFRecordSource(data["files"], shuffle_buffer=0)
    ids = [_rank_stream(src, rank=k, w=2, r=1, epoch=3)[0] for k in range(2)]
    assert sorted(ids[0] + ids[1]) == list(range(N))


def test_group_files_partition_the_files(source):
    for epoch in range(3):
        groups = [
            source.group_files(rank=r, num_replicas=8, num_repeats=2, seed=5, epoch=epoch)
            for r in range(0, 8, 2)
        ]
        flat = [f for g in groups for f in g]
        assert sorted(flat) == sorted(source.files) and all(len(g) == 2 for g in groups)
    assert source.group_files(
        rank=0, num_replicas=4, num_repeats=2, seed=5, epoch=0
    ) == source.group_files(rank=1, num_replicas=4, num_repeats=2, seed=5, epoch=0)


def test_file_count_not_a_multiple_of_groups(source):
    # 8 files over 3 groups: shares of 2 or 3 files; every rank still takes the same steps.
    steps = source.steps_per_epoch(3, 1, BATCH)
    assert steps == 2 * (N // SHARDS) // BATCH
    for epoch in (0, 1):
        streams = [_rank_stream(source, rank=k, w=3, r=1, epoch=epoch)[0] for k in range(3)]
        assert [len(s) for s in streams] == [steps * BATCH] * 3
        flat = [i for s in streams for i in s]
        assert len(set(flat)) == len(flat)  # R=1: no record twice


@pytest.mark.parametrize("batch", [2, 8])
def test_unbalanced_shards_same_steps_on_every_rank(tmp_path, batch):
    n = 100
    files = write_tfrecords((np.zeros((n, 1), "float32"), np.arange(n)), tmp_path, num_shards=8)
    src = TFRecordSource(files)
    assert src.counts.tolist() == [13] * 4 + [12] * 4
    steps = src.steps_per_epoch(4, 2, batch)
    assert steps == (12 * 4) // batch  # the smallest possible group share: 4 files of 12
    for epoch in range(3):
        lengths = [
            len(_rank_stream(src, rank=k, w=4, r=2, epoch=epoch, batch=batch)[0]) for k in range(4)
        ]
        assert lengths == [steps * batch] * 4


def test_stream_options(source):
    ds = source.stream(rank=0, num_replicas=2, num_repeats=1, seed=0, epoch=0, batch_size=4)
    assert ds.options().deterministic is True
    policy = ds.options().experimental_distribute.auto_shard_policy
    assert policy == tf.data.experimental.AutoShardPolicy.OFF
    _, pos = ds.element_spec
    assert pos.dtype == tf.int64 and pos.shape.rank == 0


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"num_replicas": 4, "num_repeats": 3}, r"num_repeats=3.*num_replicas=4"),
        ({"num_replicas": 4, "num_repeats": 1.5}, "num_repeats"),
        ({"num_replicas": 4, "num_repeats": 0}, "num_repeats=0"),
        ({"num_replicas": 16, "num_repeats": 1}, r"8 file\(s\).*16 groups"),
        ({"num_replicas": 4, "num_repeats": 2, "rank": 4}, "rank"),
        ({"num_replicas": 2, "num_repeats": 1, "batch_size": 49}, "too few records"),
    ],
)
def test_stream_argument_errors(source, kwargs, match):
    args = {"rank": 0, "seed": 0, "epoch": 0, "batch_size": 4, **kwargs}
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
    for r in range(2):
        for (x, y), _ in src.stream(
            rank=r, num_replicas=2, num_repeats=1, seed=0, epoch=0, batch_size=5
        ).as_numpy_iterator():
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
