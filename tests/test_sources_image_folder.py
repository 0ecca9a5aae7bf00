"""ImageFolderSource: listing order, in-graph loading, and errors that name the file."""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
Image = pytest.importorskip("PIL.Image")

from tfdp.sources.image_bytes import sniff  # noqa: E402
from tfdp.sources.image_folder import PLACEHOLDER_SIZE, ImageFolderSource  # noqa: E402

RNG = np.random.default_rng(1234)


def _pixels(h: int, w: int, mode: str = "RGB") -> np.ndarray:
    shape = (h, w) if mode == "L" else (h, w, len(mode))
    return RNG.integers(0, 256, shape, dtype=np.uint8)


def _encode(array: np.ndarray, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, fmt, **kw)
    return buf.getvalue()


def _write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _jpeg_with_thumbnail() -> bytes:
    """A JPEG whose APP1 segment embeds a complete thumbnail JPEG (as EXIF does)."""
    main = _encode(_pixels(40, 30), "JPEG", quality=90)
    thumb = _encode(_pixels(8, 8), "JPEG")
    payload = b"Exif\x00\x00II*\x00" + thumb
    app1 = b"\xff\xe1" + (len(payload) + 2).to_bytes(2, "big") + payload
    return main[:2] + app1 + main[2:]


@pytest.fixture
def tree(tmp_path: Path) -> dict:
    """root/<class>/<image> with PNG (lossless) and JPEG files, a nested folder and noise."""
    root = tmp_path / "train"
    arrays = {}
    for cls, names in {
        "dog": ["b.png", "a.png", "c.JPEG"],
        "cat": ["z.jpg", "y.png"],
        "ant": ["x.png"],
    }.items():
        for i, name in enumerate(names):
            h, w = 5 + i, 7 + 2 * i
            arr = _pixels(h, w)
            fmt = "PNG" if name.endswith(".png") else "JPEG"
            path = _write(root / cls / name, _encode(arr, fmt, quality=95))
            # What PIL decodes (for JPEG: the lossy round trip, not ``arr``).
            arrays[f"{cls}/{name}"] = np.asarray(Image.open(path).convert("RGB"))
    # A nested folder (torchvision walks class folders recursively) and files to ignore.
    nested = _pixels(3, 4)
    _write(root / "cat" / "sub" / "n.png", _encode(nested, "PNG"))
    arrays["cat/sub/n.png"] = nested
    _write(root / "cat" / "notes.txt", b"not an image")
    _write(root / "README.md", b"loose file in root: ignored")
    return {"root": root, "arrays": arrays}


def _collect(src: ImageFolderSource, fn=None) -> list:
    fn = fn or src.load
    ds = tf.data.Dataset.range(src.num_examples).map(fn, num_parallel_calls=4, deterministic=True)
    return list(ds.as_numpy_iterator())


# -- listing ---------------------------------------------------------------------------


def test_classes_and_order_match_torchvision_rules(tree):
    src = ImageFolderSource(tree["root"])
    assert src.classes == ["ant", "cat", "dog"]
    assert src.class_to_index == {"ant": 0, "cat": 1, "dog": 2}
    rel = [os.path.relpath(p, tree["root"]).replace(os.sep, "/") for p in src.paths]
    # Per class: directories in sorted path order, files sorted within each;
    # extensions matched case-insensitively (c.JPEG), other files ignored.
    assert rel == [
        "ant/x.png",
        "cat/y.png",
        "cat/z.jpg",
        "cat/sub/n.png",
        "dog/a.png",
        "dog/b.png",
        "dog/c.JPEG",
    ]
    assert src.num_examples == len(src) == 7
    assert src.labels.dtype == np.int64
    assert src.labels.tolist() == [0, 1, 1, 1, 2, 2, 2]
    assert src.paths.dtype.kind == "U"
    assert all(src.path(i) == src.paths[i] for i in range(src.num_examples))
    assert src.streaming is False


def test_listing_is_deterministic_and_follows_extensions(tree):
    a = ImageFolderSource(tree["root"])
    b = ImageFolderSource(str(tree["root"]))
    assert a.paths.tolist() == b.paths.tolist()
    only_png = ImageFolderSource(tree["root"], extensions=".png")
    assert all(p.endswith(".png") for p in only_png.paths)
    assert only_png.num_examples == 5


# -- loading ----------------------------------------------------------------------------


def test_load_decodes_in_graph_with_labels(tree):
    src = ImageFolderSource(tree["root"])
    out = _collect(src)
    assert len(out) == src.num_examples
    for i, (image, label) in enumerate(out):
        key = os.path.relpath(src.path(i), tree["root"]).replace(os.sep, "/")
        expected = tree["arrays"][key]
        assert image.dtype == np.uint8 and image.shape == expected.shape
        assert label == src.labels[i]
        if key.endswith(".png"):
            np.testing.assert_array_equal(image, expected)
        else:  # as PIL decodes it, up to the decoders' rounding and chroma upsampling
            assert np.abs(image.astype(int) - expected.astype(int)).mean() < 3


def test_element_spec_and_static_rank(tree):
    src = ImageFolderSource(tree["root"])
    ds = tf.data.Dataset.range(src.num_examples).map(src.load)
    image_spec, label_spec = ds.element_spec
    assert image_spec.shape.as_list() == [None, None, 3]
    assert label_spec.shape.rank == 0 and label_spec.dtype == tf.int64
    assert src.element_spec == ds.element_spec
    image, label = src.load(tf.constant(0, tf.int64))  # eager works too
    assert image.shape.rank == 3 and label.dtype == tf.int64


@pytest.mark.parametrize("channels", [1, 4])
def test_channels(tree, channels):
    src = ImageFolderSource(tree["root"], channels=channels)
    assert src.element_spec[0].shape.as_list() == [None, None, channels]
    for image, _ in _collect(src):
        assert image.shape[-1] == channels


def test_gray_and_rgba_pngs_become_rgb(tmp_path):
    gray, rgba = _pixels(4, 5, "L"), _pixels(4, 5, "RGBA")
    _write(tmp_path / "r" / "c" / "g.png", _encode(gray, "PNG"))
    _write(tmp_path / "r" / "c" / "h.png", _encode(rgba, "PNG"))
    (g, _), (h, _) = _collect(ImageFolderSource(tmp_path / "r"))
    np.testing.assert_array_equal(g, np.repeat(gray[..., None], 3, axis=-1))
    np.testing.assert_array_equal(h, rgba[..., :3])


# -- construction errors ------------------------------------------------------------------


def test_missing_root(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        ImageFolderSource(tmp_path / "nowhere")


def test_root_is_a_file(tmp_path):
    f = _write(tmp_path / "file.png", b"x")
    with pytest.raises(ValueError, match="not a directory"):
        ImageFolderSource(f)


def test_no_class_folder(tmp_path):
    _write(tmp_path / "r" / "loose.png", _encode(_pixels(2, 2), "PNG"))
    with pytest.raises(FileNotFoundError, match="no class folder"):
        ImageFolderSource(tmp_path / "r")


def test_empty_class_folders_are_named(tmp_path):
    root = tmp_path / "r"
    _write(root / "good" / "a.png", _encode(_pixels(2, 2), "PNG"))
    for i in range(7):
        (root / f"empty{i}").mkdir(parents=True)
    _write(root / "empty0" / "notes.txt", b"no image here")
    with pytest.raises(FileNotFoundError) as info:
        ImageFolderSource(root)
    msg = str(info.value)
    assert "7 class folder(s)" in msg and "'empty0'" in msg and "'empty4'" in msg
    assert "'empty5'" not in msg and "and 2 more" in msg


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"on_error": "ignore"}, "on_error"),
        ({"channels": 2}, "channels"),
        ({"extensions": ()}, "extensions"),
    ],
)
def test_bad_arguments(tree, kwargs, match):
    with pytest.raises(ValueError, match=match):
        ImageFolderSource(tree["root"], **kwargs)


# -- bad files ------------------------------------------------------------------------------


def _bad_tree(tmp_path: Path) -> tuple[Path, dict[str, Path]]:
    root = tmp_path / "r"
    good_jpg = _encode(_pixels(20, 16), "JPEG")
    good_png = _encode(_pixels(6, 6), "PNG")
    thumb = _jpeg_with_thumbnail()
    bad = {
        "garbage": _write(root / "a" / "garbage.jpg", RNG.bytes(300)),
        "truncated_jpeg": _write(root / "a" / "trunc.jpg", good_jpg[: len(good_jpg) // 2]),
        "truncated_png": _write(root / "b" / "trunc.png", good_png[: len(good_png) - 20]),
        "empty": _write(root / "b" / "empty.png", b""),
        # Cut inside the main image: the thumbnail's end marker must not fool the check.
        "truncated_thumb_jpeg": _write(root / "b" / "thumb_trunc.jpg", thumb[:-40]),
    }
    _write(root / "a" / "good.jpg", good_jpg)
    _write(root / "b" / "good.png", good_png)
    _write(root / "b" / "thumb.jpg", thumb)
    _write(root / "b" / "trailing.jpg", good_jpg + b"\x00" * 64)  # junk after EOI decodes fine
    return root, bad


@pytest.mark.parametrize(
    "which", ["garbage", "truncated_jpeg", "truncated_png", "empty", "truncated_thumb_jpeg"]
)
def test_raise_mode_error_names_the_file(tmp_path, which):
    root, bad = _bad_tree(tmp_path)
    src = ImageFolderSource(root)
    index = src.paths.tolist().index(str(bad[which]))
    ds = tf.data.Dataset.from_tensors(tf.constant(index, tf.int64)).map(src.load)
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        list(ds)
    assert str(bad[which]) in str(info.value)
    with pytest.raises(tf.errors.InvalidArgumentError, match=str(bad[which])):
        src.load(index)  # eagerly as well


def test_raise_mode_reads_good_files(tmp_path):
    root, bad = _bad_tree(tmp_path)
    src = ImageFolderSource(root)
    bad_paths = {str(p) for p in bad.values()}
    for i in range(src.num_examples):
        if src.path(i) not in bad_paths:
            image, _ = src.load(i)
            assert image.shape[-1] == 3


def test_file_removed_after_listing_names_the_file(tmp_path):
    root = tmp_path / "r"
    gone = _write(root / "a" / "gone.png", _encode(_pixels(2, 2), "PNG"))
    src = ImageFolderSource(root)
    gone.unlink()
    ds = tf.data.Dataset.range(1).map(src.load)
    with pytest.raises(tf.errors.NotFoundError, match=str(gone)):
        list(ds)


def test_skip_mode_keeps_count_and_reports(tmp_path):
    root, bad = _bad_tree(tmp_path)
    src = ImageFolderSource(root, on_error="skip")
    assert src.report().endswith("0 of 9 files skipped")
    for _ in range(2):  # the second epoch must not double-count files
        out = _collect(src, src.load_with_weight)
        assert len(out) == src.num_examples  # ranks stay in lock-step
    bad_paths = sorted(str(p) for p in bad.values())
    for i, ((image, label), weight) in enumerate(out):
        assert label == src.labels[i]
        if src.path(i) in bad_paths:
            assert weight == 0.0
            assert image.shape == (PLACEHOLDER_SIZE, PLACEHOLDER_SIZE, 3) and not image.any()
        else:
            assert weight == 1.0 and image.shape[-1] == 3
    assert src.skipped_files() == bad_paths
    line = src.report()
    assert "\n" not in line and "5 of 9 files skipped" in line
    assert str(bad["garbage"]) in line and "unrecognised header" in line
    # load() (without the weight) also substitutes the placeholder.
    image, _ = src.load(src.paths.tolist().index(str(bad["empty"])))
    assert image.shape == (PLACEHOLDER_SIZE, PLACEHOLDER_SIZE, 3)


def test_find_bad_files(tmp_path):
    root, bad = _bad_tree(tmp_path)
    src = ImageFolderSource(root, on_error="skip")
    assert src.find_bad_files() == sorted(str(p) for p in bad.values())
    assert src.skipped_files() == []  # the scan does not count as skipping


@pytest.mark.parametrize(
    "data, ok",
    [
        (_encode(_pixels(9, 9), "JPEG", progressive=True), True),
        (_encode(_pixels(9, 9), "JPEG", progressive=True)[:-2], False),
        (_encode(_pixels(9, 9), "BMP"), True),
        (_encode(_pixels(9, 9), "BMP")[:-1], False),
        (_encode(_pixels(9, 9), "WEBP"), True),
        (_encode(_pixels(9, 9), "WEBP")[:-10], False),
        (_encode(_pixels(9, 9), "GIF"), True),
        (b"\xff\xd8", False),
    ],
)
def test_sniff_agrees_with_the_decoder(data, ok):
    problem = sniff(tf.constant(data))[1].numpy()
    assert (problem == b"") == ok
    if ok:
        tf.io.decode_image(data, channels=3, expand_animations=False)
    else:
        with pytest.raises(tf.errors.InvalidArgumentError):
            tf.io.decode_image(data, channels=3, expand_animations=False)
