"""The window path: image folders decoded window by window, equal to decoding everything.

Every test compares against an independent path: the per-example path of
DistributedInput (whole files decoded, the augmentation on batches of one), a
reference written here (tf.io.decode_jpeg of the whole file, NumPy crop,
flip and normalisation), or the sampler's own indices.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from photos import encode, photo, write_folder
from tfdp import augment
from tfdp.input import DistributedInput
from tfdp.input.indexed import IndexedBatches
from tfdp.seeding import epoch_seed_key
from tfdp.sources import ImageFolderSource
from tfdp.windows.contract import WindowSource
from tfdp.windows.loader import WindowedBatches, chunk_slots
from tfdp.windows.plan import split_window

SIZES = ((45, 60), (60, 45), (33, 50), (50, 33), (37, 50), (40, 52))
MEAN, STD = (123.675, 116.28, 103.53), (58.395, 57.12, 57.375)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """14 photo-like JPEGs of several sizes in 3 classes, plus a PNG and a grayscale JPEG."""
    root = write_folder(tmp_path_factory.mktemp("photos"), 14, classes=3, sizes=SIZES, seed=3)
    rng = np.random.default_rng(7)
    (root / "c01" / "png.png").write_bytes(encode(photo(41, 38, rng), "PNG"))
    (root / "c02" / "gray.jpg").write_bytes(encode(photo(36, 47, rng)[..., 0]))
    return root


@pytest.fixture(scope="module")
def mirrored2():
    from conftest import configure_tf

    configure_tf()
    return tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])


class _NoWindows:
    """The same files through the per-example path (a source that cannot decode windows)."""

    streaming = False

    def __init__(self, source: ImageFolderSource) -> None:
        self.source = source
        self.num_examples = source.num_examples
        self.element_spec = source.element_spec

    def load(self, index):
        return self.source.load(index)

    def load_with_weight(self, index):
        return self.source.load_with_weight(index)


def _train_augment(size=16):
    return augment.Compose(
        [
            augment.RandomResizedCrop(size, scale=(0.05, 1.0)),
            augment.RandomFlip(),
            augment.Normalize(MEAN, STD),
        ]
    )


def _elements(strategy, dds) -> list[list]:
    """Per step, per local replica: the element as NumPy (through the distributed dataset)."""
    steps = []
    for batch in dds:
        leaves = [strategy.experimental_local_results(t) for t in tf.nest.flatten(batch)]
        steps.append(
            [
                tf.nest.pack_sequence_as(batch, [leaf[r].numpy() for leaf in leaves])
                for r in range(len(leaves[0]))
            ]
        )
    return steps


def _assert_same(a, b) -> None:
    tf.nest.map_structure(np.testing.assert_array_equal, a, b)


def _pair(strategy, source, **kwargs):
    windowed = DistributedInput(strategy, source, **kwargs)
    plain = DistributedInput(strategy, _NoWindows(source), **kwargs)
    assert isinstance(windowed.loader, WindowedBatches)
    assert not isinstance(plain.loader, WindowedBatches)
    return windowed, plain


@pytest.mark.parametrize(
    ("replicas", "sampler", "options", "batch", "epoch"),
    [
        (2, "repeat_aug", {"num_repeats": 3, "selected_round": 0}, 4, 3),
        (2, "distributed", {}, 5, 1),
        (4, "repeat_aug", {"num_repeats": 2.5, "selected_round": 0}, 2, 2),
    ],
)
def test_windowed_path_equals_the_per_example_path(
    folder, mirrored2, mirrored4, replicas, sampler, options, batch, epoch
):
    # One epoch other than 0 per case (the epoch's key is in every seed; a new epoch's dataset
    # reusing the traced functions: test_a_new_epochs_dataset_reuses_the_traced_stream_functions).
    strategy = mirrored2 if replicas == 2 else mirrored4
    windowed, plain = _pair(
        strategy,
        ImageFolderSource(folder),
        sampler=sampler,
        sampler_options=options,
        batch_size=batch,
        augment=_train_augment(),
        return_ids=True,
        seed=11,
    )
    got, want = (
        _elements(strategy, windowed.epoch(epoch)),
        _elements(strategy, plain.epoch(epoch)),
    )
    assert len(got) == len(want) == windowed.steps_per_epoch
    _assert_same(got, want)
    for rank in range(replicas):  # and the ids are the sampler's
        s = windowed.sampler.with_rank(rank)
        s.set_epoch(epoch)
        ids = np.concatenate([step[rank][1]["index"] for step in got])
        np.testing.assert_array_equal(ids, s.indices()[: len(ids)])


@pytest.mark.parametrize("drop_remainder", [True, False])
def test_steps_of_several_chunks_with_batch_stages_equal_the_per_example_path(
    folder, mirrored2, drop_remainder
):
    # A nested Compose is a batch stage (applied to each assembled batch); chunks of 2 slots
    # make a step of 6 per replica three chunks; the last step of an epoch may be partial.
    aug = augment.Compose(
        [
            augment.RandomResizedCrop(16, scale=(0.05, 1.0)),
            augment.RandomFlip(),
            augment.Compose([augment.RandomBrightness(0.2), augment.Normalize(MEAN, STD)]),
        ]
    )
    windowed, plain = _pair(
        mirrored2,
        ImageFolderSource(folder),
        sampler="distributed",
        batch_size=6,
        augment=aug,
        drop_remainder=drop_remainder,
        return_ids=True,
        seed=5,
    )
    windowed.loader.chunk_entries = 4
    assert windowed.loader._functions((0, 1)).per_step == 3
    assert windowed.loader.pipeline.batch_stages
    got, want = _elements(mirrored2, windowed.epoch(1)), _elements(mirrored2, plain.epoch(1))
    assert len(got) == len(want) == windowed.steps_per_epoch == (1 if drop_remainder else 2)
    _assert_same(got, want)


def _reference(folder_source, index, position, epoch_key, size=16):
    """Decode the whole file, then crop, resize, flip and normalise by hand."""
    data = tf.io.read_file(folder_source.path(index))
    image = (
        tf.io.decode_jpeg(data, channels=3)
        if data.numpy()[:2] == b"\xff\xd8"
        else (tf.io.decode_png(data, channels=3))
    )
    seeds = tf.constant([[epoch_key, position]], tf.int64)
    rrc = augment.RandomResizedCrop(size, scale=(0.05, 1.0))
    top, left, h, w = (
        int(t[0]) for t in rrc.crop_boxes(augment.fold_in(seeds, 0), *image.shape[:2])
    )
    out = tf.image.resize(image[top : top + h, left : left + w], [size, size]).numpy()
    if augment.per_sample_uniform(augment.fold_in(seeds, 1), 1)[0, 0] < 0.5:
        out = out[:, ::-1]
    return (out - np.array(MEAN, np.float32)) / np.array(STD, np.float32)


def test_windowed_output_equals_a_full_decode_reference(folder):
    src = ImageFolderSource(folder)
    inp = DistributedInput(
        None,
        src,
        sampler="repeat_aug",
        sampler_options={"num_repeats": 3, "selected_round": 0},
        batch_size=8,
        augment=_train_augment(),
        return_ids=True,
        seed=5,
    )
    key = epoch_seed_key(5, 2)
    count = 0
    for (images, labels), ids in inp.epoch(2):
        for image, label, index, position in zip(
            images.numpy(),
            labels.numpy(),
            ids["index"].numpy(),
            ids["position"].numpy(),
            strict=True,
        ):
            assert label == src.labels[index]
            np.testing.assert_array_equal(image, _reference(src, index, position, key))
            count += 1
    assert count == inp.steps_per_epoch * 8


def _counting_reads(monkeypatch) -> list[bytes]:
    """Count the files the window path reads (fault injection: proves the reads happen)."""
    import tfdp.sources.image_folder as image_folder

    read, opened = image_folder.read_files, []

    def note(paths):
        opened.extend(paths.tolist())
        return np.int64(0)

    def counting(paths):
        token = tf.numpy_function(note, [paths], tf.int64, stateful=True)
        with tf.control_dependencies([token]):
            return read(tf.identity(paths))

    monkeypatch.setattr(image_folder, "read_files", counting)
    return opened


def test_each_file_is_read_once_per_chunk_of_a_step(folder, mirrored2, monkeypatch):
    opened = _counting_reads(monkeypatch)
    src = ImageFolderSource(folder)
    batch = 8
    inp = DistributedInput(
        mirrored2,
        src,
        sampler="repeat_aug",
        sampler_options={"num_repeats": 3, "selected_round": 0},
        batch_size=batch,
        augment=_train_augment(),
    )
    steps = len(_elements(mirrored2, inp.epoch(1)))
    # Expected: the distinct files of every chunk (k slots of both replicas) of every step.
    k = chunk_slots(batch, 2)
    lists = []
    for rank in range(2):
        s = inp.sampler.with_rank(rank)
        s.set_epoch(1)
        lists.append(s.indices()[: steps * batch].reshape(steps, batch // k, k))
    chunks = np.concatenate(lists, axis=2).reshape(-1, 2 * k)
    expected = sum(len(set(c.tolist())) for c in chunks)
    assert len(opened) == expected
    assert expected < 0.6 * steps * batch * 2  # RA x3 on 2 replicas: most copies share a read
    assert sorted(set(opened)) == sorted({src.path(i).encode() for i in chunks.ravel()})


def test_a_new_epochs_dataset_reuses_the_traced_stream_functions(folder):
    # What keeps a new dataset's first batch near Model Garden's (bench_images): its build
    # traces only thin calls, its iterator instantiates a small loader graph.
    inp = DistributedInput(
        None, ImageFolderSource(folder), batch_size=4, augment=_train_augment(64), seed=2
    )
    first = [x.numpy() for x, _ in inp.rank_dataset(0, 0).take(2)]
    fns = inp.loader._functions((0,))
    for epoch in (1, 2, 0):
        again = [x.numpy() for x, _ in inp.rank_dataset(0, epoch).take(2)]
    assert inp.loader._functions((0,)) is fns
    for fn in (fns.epoch_rows, fns.load, fns.emit):
        assert fn.experimental_get_tracing_count() == 1
    _assert_same(again, first)  # epoch 0 again: the same batches
    loader = inp.loader._load_chunk.get_concrete_function().graph.as_graph_def()
    nodes = [*loader.node, *(n for f in loader.library.function for n in f.node_def)]
    biggest = max(n.ByteSize() for n in nodes if n.op == "Const")
    assert biggest < 16 * 1024  # no whole-image constant: every iterator would copy it
    # Other formats and damaged JPEGs are decoded by a function called only when present.
    (others,) = [f for f in loader.library.function if "decode_others" in f.signature.name]
    assert others.attr["_noinline"].b


def test_resume_mid_epoch_is_bit_identical(folder, mirrored2):
    inp = DistributedInput(
        mirrored2,
        ImageFolderSource(folder),
        sampler="repeat_aug",
        sampler_options={"selected_round": 0},
        batch_size=1,
        augment=_train_augment(),
        return_ids=True,
    )
    whole = _elements(mirrored2, inp.epoch(1))
    assert len(whole) == 8
    resumed = _elements(mirrored2, inp.epoch(1, start_step=5))
    assert len(resumed) == len(whole) - 5
    _assert_same(resumed, whole[5:])
    _assert_same(_elements(mirrored2, inp.epoch(1)), whole)  # a rerun too
    # The endless stream over epochs equals epoch by epoch (one dataset, no rebuild).
    stream = iter(inp.epochs(1, None, start_step=2))
    per_epoch = whole[2:] + _elements(mirrored2, inp.epoch(2))
    for want in per_epoch:
        got = _elements(mirrored2, [next(stream)])[0]
        _assert_same(got, want)


def test_eval_center_crop_and_partial_batches(folder, mirrored2):
    # (DeiT's placed crop, ResizeCenterCrop, through a source's window path:
    # tests/test_eval_transform.py::test_window_path_encoded_batch_and_decoded_batch_agree)
    aug = augment.Compose([augment.CenterCrop(16), augment.Normalize(MEAN, STD)])
    src = ImageFolderSource(folder)
    windowed, plain = _pair(mirrored2, src, sampler="eval", batch_size=3, augment=aug)
    got = _elements(mirrored2, windowed.epoch(0))
    _assert_same(got, _elements(mirrored2, plain.epoch(0)))
    labels = [y[w > 0] for step in got for (_, y, w) in step]
    assert sorted(np.concatenate(labels).tolist()) == sorted(src.labels.tolist())
    # drop_remainder=False: every replica's last batch is partial (8 files each, batches of 3).
    windowed, plain = _pair(
        mirrored2, src, sampler="distributed", batch_size=3, augment=aug, drop_remainder=False
    )
    got = _elements(mirrored2, windowed.epoch(2))
    _assert_same(got, _elements(mirrored2, plain.epoch(2)))
    assert [step[0][0].shape[0] for step in got] == [3, 3, 2]


@pytest.mark.parametrize("channels", [1, 4])
def test_channels(folder, channels):
    src = ImageFolderSource(folder, channels=channels)
    aug = augment.Compose([augment.RandomResizedCrop(12), augment.RandomFlip()])
    windowed, plain = _pair(None, src, batch_size=4, augment=aug)
    got, want = (
        list(windowed.epoch(0).as_numpy_iterator()),
        list(plain.epoch(0).as_numpy_iterator()),
    )
    _assert_same(got, want)
    assert got[0][0].shape == (4, 12, 12, channels)


def test_bad_files_skip_and_raise(tmp_path):
    root = write_folder(tmp_path / "data", 5, classes=1, sizes=SIZES, seed=1)
    good = (root / "c00" / "img00000.JPEG").read_bytes()
    (root / "c00" / "truncated.JPEG").write_bytes(good[: len(good) // 2])
    (root / "c00" / "empty.JPEG").write_bytes(b"")
    aug = augment.Compose([augment.RandomResizedCrop(12), augment.ToFloat()])
    src = ImageFolderSource(root, on_error="skip")
    windowed, plain = _pair(None, src, sampler="eval", batch_size=4, augment=aug, return_ids=True)
    got, want = (
        list(windowed.epoch(0).as_numpy_iterator()),
        list(plain.epoch(0).as_numpy_iterator()),
    )
    _assert_same(got, want)
    weights = np.concatenate([w for (_, _, w), _ in got])
    ids = np.concatenate([i["index"] for _, i in got])
    bad = {src.path(i).rsplit("/", 1)[-1] for i in ids[(weights == 0) & (ids >= 0)]}
    assert {"truncated.JPEG", "empty.JPEG"} <= bad
    assert any(p.endswith("truncated.JPEG") for p in src.skipped_files())
    strict = DistributedInput(None, ImageFolderSource(root), batch_size=7, augment=aug)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"cannot decode image .*\.JPEG"):
        list(strict.epoch(0))


class _TableWindows(augment.WindowAugmentation):
    """Windows looked up by sample position; 'resize' pads the window into a fixed canvas."""

    def __init__(self, table: np.ndarray, canvas: int) -> None:
        super().__init__(canvas)
        self.table = tf.constant(table, tf.int32)
        self.canvas = canvas

    def draw(self, seeds):
        return seeds

    def windows(self, shapes, params):
        return tf.gather(self.table, params[:, 1])

    def resize(self, window):
        return tf.cast(
            tf.image.pad_to_bounding_box(window, 0, 0, self.canvas, self.canvas), tf.float32
        )


@settings(max_examples=6, deadline=None)
@given(
    sampling=st.sampled_from(["4:2:0", "4:2:2", "4:4:4", "gray", "progressive"]),
    shape=st.sampled_from([(37, 53), (64, 48), (17, 90)]),
    seed=st.integers(0, 2**16),
)
def test_jpeg_windows_are_the_full_decode_pixels(tmp_path_factory, sampling, shape, seed):
    # libjpeg's window decode differs from a full decode at a cut column (chroma
    # upsampling); the union of a file's windows widened by one column must not.
    rng = np.random.default_rng(seed)
    image = photo(*shape, rng)
    kwargs = {"quality": 90}
    if sampling == "gray":
        image = image[..., 0]
    elif sampling == "progressive":
        kwargs["progressive"] = True
    else:
        kwargs["subsampling"] = {"4:4:4": 0, "4:2:2": 1, "4:2:0": 2}[sampling]
    root = tmp_path_factory.mktemp("jpeg")
    (root / "a").mkdir()
    from PIL import Image

    Image.fromarray(image).save(root / "a" / "x.jpg", "JPEG", **kwargs)
    src = ImageFolderSource(root)
    h, w = shape
    n = 24
    tops, lefts = rng.integers(0, h, n), rng.integers(0, w, n)
    table = np.stack(
        [tops, lefts, rng.integers(1, h - tops + 1), rng.integers(1, w - lefts + 1)], axis=1
    )
    aug = _TableWindows(table, max(shape))
    full = tf.io.decode_jpeg(tf.io.read_file(str(root / "a" / "x.jpg")), channels=3).numpy()
    for group in (range(n), range(1), range(5, 7)):  # one file, several windows: one union
        group = list(group)
        seeds = tf.constant([[0, p] for p in group], tf.int64)
        request = split_window(aug).request(seeds)
        (out, _), _ = src.load_windows(tf.zeros([len(group)], tf.int64), request)
        for j, p in enumerate(group):
            t, x, hh, ww = table[p]
            np.testing.assert_array_equal(out.numpy()[j, :hh, :ww], full[t : t + hh, x : x + ww])


def test_window_source_protocol_and_plain_sources(folder):
    from tfdp.sources import ArraySource

    assert isinstance(ImageFolderSource(folder), WindowSource)
    assert not isinstance(ArraySource(np.zeros((4, 8, 8, 3), np.uint8)), WindowSource)
    # An array source with a window augmentation keeps the batched gather path.
    inp = DistributedInput(
        None,
        ArraySource(np.zeros((8, 20, 20, 3), np.uint8)),
        batch_size=4,
        augment=_train_augment(),
    )
    assert isinstance(inp.loader, IndexedBatches)
    assert next(iter(inp.epoch(0))).shape == (4, 16, 16, 3)


@settings(max_examples=200, deadline=None)
@given(batch=st.integers(1, 300), replicas=st.integers(1, 16), target=st.integers(1, 64))
def test_chunk_slots(batch, replicas, target):
    k = chunk_slots(batch, replicas, target)
    assert batch % k == 0 and k >= 1
    assert replicas * k <= target or k == 1
    assert all(batch % j or replicas * j > target for j in range(k + 1, batch + 1))


@pytest.mark.slow
def test_train_resnet_on_an_image_folder_end_to_end(tmp_path, monkeypatch, mirrored_of, capsys):
    # `tfdp train --data <folder> --model resnet --image-size S`: RandomResizedCrop + flip on the
    # window path for training, centre crop for the held-out set, evaluated exactly (every
    # held-out image once, whatever the replica count). The command runs in this process on 2
    # replicas (tests/two_replicas.py; `tfdp train` as a process: the main job in
    # tests/test_readme.py, tests/test_faults.py).
    from tfdp.cli import main
    from two_replicas import answer_two_replicas

    sizes = ((40, 52), (52, 40), (36, 48), (48, 36))
    write_folder(tmp_path / "train", 16, classes=2, sizes=sizes, seed=1)
    write_folder(tmp_path / "val", 6, classes=2, sizes=sizes, seed=2)
    run = tmp_path / "run"
    args = ["--data", str(tmp_path / "train"), "--eval-data", str(tmp_path / "val")]
    answered = answer_two_replicas(monkeypatch, mirrored_of)
    code = main(
        [
            "train",
            *args,
            "--model",
            "resnet",
            "--image-size",
            "24",
            "--epochs",
            "1",
            "--batch-size",
            "8",
            "--run-dir",
            str(run),
            "--no-progress",
        ]
    )
    assert code == 0, capsys.readouterr().err[-3000:]
    assert len(answered) == 1  # trained on 2 replicas
    config = (run / "config.json").read_text()
    assert '"augment": "auto"' in config and '"image_size": 24' in config
    last = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    # evaluated on this session's 4 replicas: what the run logged on its 2 (the 6 held-out
    # images padded to 8 here, not there; `tfdp evaluate` as a command: tests/test_cli.py;
    # exact evaluation at 1 and 4 replicas: tests/test_train.py::test_exact_evaluation_prime_size)
    from tfdp.recipe import run_evaluate

    result = run_evaluate(str(run), replicas=4)
    accuracy = "sparse_categorical_accuracy"
    assert result["replicas"] == 4 and result[accuracy] == last[f"val_{accuracy}"]
    # The loss differs only by float summation order (replicas, reductions).
    assert last["val_loss"] == pytest.approx(result["loss"], rel=1e-4)
    # 6 held-out images: the accuracy is a multiple of 1/6 (each counted exactly once).
    assert abs(result[accuracy] * 6 - round(result[accuracy] * 6)) < 1e-5


def test_build_augment_picks_the_window_recipe_for_image_sizes():
    from tfdp.recipe import TrainConfig, build_augment

    cfg = TrainConfig(data="some/folder", image_size=32)
    train = split_window(build_augment(cfg, (32, 32, 3), 1 / 255, True))
    held_out = split_window(build_augment(cfg, (32, 32, 3), 1 / 255, False))
    assert isinstance(train.window, augment.RandomResizedCrop) and train.window.size == (32, 32)
    assert [type(s).__name__ for _, s in train.image_stages] == ["RandomFlip", "ToFloat"]
    assert isinstance(held_out.window, augment.ResizeCenterCrop)
    digits = build_augment(TrainConfig(), (8, 8, 1), 1 / 16, True)
    assert split_window(digits) is None


# ------------------------------------------------------------------ TFRecord shards of JPEGs


def test_tfrecords_of_a_jpeg_folder_hold_the_files_byte_for_byte(tmp_path):
    from tfdp.sources import TFRecordSource, write_tfrecords
    from tfdp.sources.tfrecord import read_manifest

    root = write_folder(tmp_path / "photos", 9, classes=3, sizes=SIZES, seed=4)
    src = ImageFolderSource(root)
    assert src.jpeg_files
    files = write_tfrecords(src, tmp_path / "shards", num_shards=2)
    manifest = read_manifest(tmp_path / "shards" / "data.manifest.json")
    assert [f["encoding"] for f in manifest["features"]] == ["jpeg", "int64"]
    stored = []
    for record in tf.data.TFRecordDataset(files).as_numpy_iterator():
        feature = tf.train.Example.FromString(record).features.feature
        stored.append((feature["label"].int64_list.value[0], feature["image"].bytes_list.value[0]))
    originals = [(int(src.labels[i]), Path(src.path(i)).read_bytes()) for i in range(9)]
    assert sorted(stored) == sorted(originals)  # the files themselves, not re-encoded
    decoded = TFRecordSource(files)
    assert decoded.element_spec[0].shape.as_list() == [None, None, 3]
    got = sorted(
        (int(y), x.tobytes())
        for x, y in tf.data.TFRecordDataset(files).map(decoded.parse).as_numpy_iterator()
    )
    want = sorted((int(y), x.numpy().tobytes()) for x, y in (src.load(i) for i in range(9)))
    assert got == want
    encoded = TFRecordSource(files, images="encoded")
    assert encoded.element_spec[0] == tf.TensorSpec([], tf.string)
    with pytest.raises(ValueError, match="images: must be 'decoded' or 'encoded'"):
        TFRecordSource(files, images="raw")


def test_jpeg_encoding_refuses_other_formats_and_encodes_arrays(tmp_path):
    from tfdp.sources import TFRecordSource, write_tfrecords
    from tfdp.sources.tfrecord import read_manifest

    root = write_folder(tmp_path / "mixed", 3, classes=1, sizes=SIZES, seed=5)
    (root / "c00" / "z.png").write_bytes(encode(photo(20, 30, np.random.default_rng(1)), "PNG"))
    src = ImageFolderSource(root)
    assert not src.jpeg_files
    write_tfrecords(src, tmp_path / "png", num_shards=1)  # inferred: png, lossless
    assert read_manifest(tmp_path / "png" / "data.manifest.json")["features"][0]["encoding"] == (
        "png"
    )
    with pytest.raises(ValueError, match=r"z\.png.*a PNG file, not a JPEG.*encoding 'png'"):
        write_tfrecords(src, tmp_path / "jpeg", num_shards=1, features={"image": "jpeg"})
    assert not list((tmp_path / "jpeg").glob("*.tfrecord"))  # nothing half-written
    images = np.stack([photo(24, 32, np.random.default_rng(i)) for i in range(4)])
    files = write_tfrecords(
        (images, np.arange(4)), tmp_path / "arrays", num_shards=1, features={"image": "jpeg"}
    )
    back = list(tf.data.TFRecordDataset(files).map(TFRecordSource(files).parse).as_numpy_iterator())
    for x, y in back:  # lossy: exactly TensorFlow's own JPEG round trip at quality 95
        assert x.shape == (24, 32, 3)
        expected = tf.io.decode_jpeg(tf.io.encode_jpeg(images[y], quality=95)).numpy()
        np.testing.assert_array_equal(x, expected)
    with pytest.raises(ValueError, match="'jpeg' needs uint8"):
        write_tfrecords(
            np.zeros((2, 4, 4, 4), np.uint8), tmp_path / "x", num_shards=1, features={"f0": "jpeg"}
        )


def test_encoded_images_through_a_window_stage_equal_decoded_ones(folder):
    from tfdp.windows.decode import encoded_windows

    src = ImageFolderSource(folder)
    # Copies of an image (Repeated Augmentation's) among them, each with windows of its own.
    files = [*range(src.num_examples), 0, 2, 0]
    data = tf.stack([tf.io.read_file(src.path(i)) for i in files])
    rrc = augment.RandomResizedCrop(16, scale=(0.05, 1.0))
    seeds = tf.constant(seeds_for(range(len(files)), key=8))
    params = rrc.draw(seeds)
    got = encoded_windows(data, rrc, params).numpy()  # a PNG and a grayscale JPEG among them
    for i in range(len(files)):
        image = tf.io.decode_image(data[i], channels=3, expand_animations=False)[tf.newaxis]
        want = rrc.apply(image, params[i : i + 1]).numpy()[0]
        np.testing.assert_array_equal(got[i], want)
    # Through __call__ and Compose: a batch of encoded images is accepted by a window stage.
    aug = augment.Compose([rrc, augment.RandomFlip()])
    out, labels = aug((data[:3], tf.constant([1, 2, 3])), seeds[:3])
    assert out.shape == (3, 16, 16, 3) and labels.numpy().tolist() == [1, 2, 3]
    with pytest.raises(ValueError, match="images: must be a batch"):
        augment.RandomFlip()(data[:3], seeds[:3])


def test_encoded_tfrecord_stream_equals_the_decoded_stream(tmp_path, mirrored2):
    from tfdp.sources import TFRecordSource, write_tfrecords

    root = write_folder(tmp_path / "photos", 16, classes=2, sizes=SIZES, seed=6)
    files = write_tfrecords(ImageFolderSource(root), tmp_path / "shards", num_shards=4)
    outputs = []
    for images in ("encoded", "decoded"):
        inp = DistributedInput(
            mirrored2,
            TFRecordSource(files, images=images),
            sampler="repeat_aug",
            sampler_options={"num_repeats": 2, "selected_round": 0},
            batch_size=2,
            augment=_train_augment(),
            seed=3,
        )
        # encoded: augmented batch by batch (scalar strings batch); decoded: one by one
        assert inp.examples.augments_stream_batches() == (images == "encoded")
        outputs.append(_elements(mirrored2, inp.epoch(1)))
    assert len(outputs[0]) >= 2
    _assert_same(outputs[0], outputs[1])


def seeds_for(positions, key: int = 0) -> np.ndarray:
    positions = np.asarray(positions, np.int64)
    return np.stack([np.full_like(positions, key), positions], axis=1)
