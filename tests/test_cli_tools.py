"""tfdp plot / tfdp data convert / tfdp data inspect, on real files in tmp_path."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tfdp.cli import main
from tfdp.cli import plot as cli_plot
from tfdp.cli.convert import convert_data
from tfdp.cli.inspect import inspect_data
from tfdp.cli.plot import read_metrics

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _sorted_pairs(images: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Images and labels in a canonical order: by label, then by pixel bytes."""
    order = sorted(range(len(labels)), key=lambda i: (int(labels[i]), images[i].tobytes()))
    return images[order], labels[order]


def _no_temp_left(folder: Path) -> None:
    assert [p.name for p in folder.iterdir() if ".tmp-" in p.name] == []


# -- tfdp plot -------------------------------------------------------------------------------


def _write_metrics(run: Path, epochs: int = 4) -> Path:
    run.mkdir(parents=True, exist_ok=True)
    lines = []
    for e in range(epochs):
        lines.append(
            json.dumps(
                {
                    "epoch": e,
                    "time": 1.5,
                    "loss": 2.0 / (e + 1),
                    "sparse_categorical_accuracy": 0.5 + 0.1 * e,
                    "val_loss": 2.2 / (e + 1),
                    "val_sparse_categorical_accuracy": 0.45 + 0.1 * e,
                    "samples_per_s": 1000.0 + 10 * e,
                    "lr": 0.1,
                    "global_step": 10 * (e + 1),
                }
            )
        )
    path = run / "metrics.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_plot_writes_a_png_of_the_documented_size(tmp_path, capsys):
    import matplotlib.image

    run = tmp_path / "run"
    _write_metrics(run)
    code, out, err = _run(capsys, "plot", str(run))
    assert (code, err) == (0, "")
    path = Path(out.strip())
    assert path == run / "curves.png"
    assert path.read_bytes()[:8] == PNG_MAGIC
    assert matplotlib.image.imread(str(path)).shape[:2] == (450, 1500)
    _no_temp_left(run)

    other = tmp_path / "elsewhere.png"
    code, out, _ = _run(capsys, "plot", str(run), "--out", str(other))
    assert code == 0 and out.strip() == str(other)
    assert other.read_bytes()[:8] == PNG_MAGIC


def test_plot_without_accuracy_or_speed_still_draws(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"epoch": 0, "loss": 1.0}\n{"epoch": 1, "loss": 0.5}\n')
    assert Path(cli_plot.plot_metrics(run)).read_bytes()[:8] == PNG_MAGIC


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('{"epoch": 0, "loss": 1}\n{"epoch": 1, "loss": 0.5}\n{"epoch": 2, "loss":\n', "line 3"),
        ('{"epoch": 0, "loss": 1}\n\n{"epoch": 1, "loss": 0.5}\n', "line 2: empty"),
        ('{"epoch": 0, "loss": 1}\n[1, 2]\n', "line 2: expected a JSON object"),
        ("", "is empty"),
    ],
)
def test_plot_names_the_bad_line(tmp_path, capsys, text, needle):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(text)
    with pytest.raises(ValueError, match=needle):
        read_metrics(run / "metrics.jsonl")
    code, out, err = _run(capsys, "plot", str(run))
    assert code == 2 and out == ""
    assert err.startswith("tfdp: error: ") and needle in err and "metrics.jsonl" in err
    assert not (run / "curves.png").exists()
    _no_temp_left(run)


def test_plot_missing_inputs(tmp_path, capsys):
    with pytest.raises(FileNotFoundError, match="RUN_DIR"):
        cli_plot.plot_metrics(tmp_path / "nope")
    (tmp_path / "run").mkdir()
    with pytest.raises(FileNotFoundError, match=r"metrics\.jsonl"):
        cli_plot.plot_metrics(tmp_path / "run")
    code, _, err = _run(capsys, "plot", str(tmp_path / "run"))
    assert code == 2 and "metrics.jsonl" in err
    _write_metrics(tmp_path / "run")
    with pytest.raises(FileNotFoundError, match="--out"):
        cli_plot.plot_metrics(tmp_path / "run", tmp_path / "no" / "dir" / "x.png")


# -- tfdp data convert -----------------------------------------------------------------------


def test_round_trip_digits_npz_folder_tfrecord_npz(tmp_path, capsys):
    from tfdp.recipe.digits import load_digits

    images, labels = load_digits("all")

    a = tmp_path / "a.npz"
    code, out, err = _run(capsys, "data", "convert", "digits", str(a))
    assert code == 0, err
    assert "wrote 1797 examples (npz)" in out
    with np.load(a) as z:  # npz keeps the source order exactly
        np.testing.assert_array_equal(z["images"], images)
        np.testing.assert_array_equal(z["labels"], labels)
        assert z["images"].dtype == np.uint8
        assert z["classes"].tolist() == [str(k) for k in range(10)]

    folder = tmp_path / "folder"
    code, out, err = _run(capsys, "data", "convert", str(a), str(folder), "--to", "folder")
    assert code == 0, err
    assert sorted(p.name for p in folder.iterdir()) == [str(k) for k in range(10)]
    files = sorted(folder.glob("*/*.png"))
    assert len(files) == 1797
    assert (folder / str(labels[0]) / "0000.png").read_bytes()[:8] == PNG_MAGIC
    assert len(list((folder / "3").iterdir())) == int((labels == 3).sum())

    shards = tmp_path / "shards"
    code, out, err = _run(capsys, "data", "convert", str(folder), str(shards), "--shards", "3")
    assert code == 0, err
    manifest = json.loads((shards / "data.manifest.json").read_text())
    assert manifest["counts"] == [599, 599, 599]
    assert len(list(shards.glob("*.tfrecord"))) == 3

    b = tmp_path / "b.npz"
    code, out, err = _run(capsys, "data", "convert", str(shards), str(b), "--no-progress")
    assert code == 0, err
    with np.load(b) as z:
        got_images, got_labels = z["images"], z["labels"]
    assert got_images.shape == images.shape and got_images.dtype == np.uint8
    want = _sorted_pairs(images, labels)
    got = _sorted_pairs(got_images, got_labels)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    # The shards are shuffled (write_tfrecords' seeded order), not class-sorted.
    assert not np.array_equal(got_labels, np.sort(got_labels))
    _no_temp_left(tmp_path)


def test_tfrecord_to_tfrecord_reshards(tmp_path):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (12, 5, 4, 3), dtype=np.uint8)
    labels = np.arange(12) % 3
    np.savez(tmp_path / "x.npz", images=images, labels=labels)
    convert_data(str(tmp_path / "x.npz"), tmp_path / "s1", shards=4, progress=False)
    convert_data(str(tmp_path / "s1"), tmp_path / "s2", shards=2, progress=False)
    convert_data(str(tmp_path / "s2" / "data.manifest.json"), tmp_path / "y.npz", progress=False)
    with np.load(tmp_path / "y.npz") as z:
        got = _sorted_pairs(z["images"], z["labels"])
        assert "classes" not in z.files  # none known: no names are invented
    want = _sorted_pairs(images, labels)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


def test_refuses_to_overwrite(tmp_path, capsys):
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("mine")
    code, out, err = _run(capsys, "data", "convert", "digits", str(full), "--to", "folder")
    assert code == 2 and out == ""
    assert "tfdp: error: DST" in err and "not empty" in err
    assert [p.name for p in full.iterdir()] == ["keep.txt"]

    target = tmp_path / "d.npz"
    target.write_bytes(b"precious")
    code, _, err = _run(capsys, "data", "convert", "digits", str(target))
    assert code == 2 and "not empty" in err
    assert target.read_bytes() == b"precious"

    empty = tmp_path / "empty"  # an existing empty directory is fine
    empty.mkdir()
    code, _, err = _run(capsys, "data", "convert", "digits", str(empty), "--no-progress")
    assert code == 0, err
    assert (empty / "data.manifest.json").is_file()
    _no_temp_left(tmp_path)


def _png(array: np.ndarray) -> bytes:
    import tensorflow as tf

    return tf.io.encode_png(array).numpy()


def test_failure_leaves_no_half_written_output(tmp_path, capsys):
    src = tmp_path / "src"
    rng = np.random.default_rng(1)
    for cls in ("a", "b"):
        (src / cls).mkdir(parents=True)
        for i in range(3):
            (src / cls / f"{i}.png").write_bytes(_png(rng.integers(0, 256, (4, 4, 3), np.uint8)))
    bad = src / "b" / "1.png"
    bad.write_bytes(_png(np.zeros((4, 4, 3), np.uint8))[:30])  # truncated
    out_dir = tmp_path / "out"
    for argv in (["--to", "folder"], ["--to", "tfrecord"], ["--to", "npz"]):
        dst = out_dir / ("x.npz" if "npz" in argv else "x")
        code, _, err = _run(capsys, "data", "convert", str(src), str(dst), *argv)
        assert code == 2, argv
        assert "tfdp: error:" in err and str(bad) in err, err
        assert not dst.exists()
        _no_temp_left(out_dir)


def test_npz_of_differing_sizes_needs_image_size(tmp_path, capsys):
    src = tmp_path / "src"
    rng = np.random.default_rng(2)
    shapes = {"cat": (6, 6, 3), "dog": (9, 5, 3)}
    arrays = {}
    for cls, shape in shapes.items():
        (src / cls).mkdir(parents=True)
        arrays[cls] = rng.integers(0, 256, shape, np.uint8)
        (src / cls / "0.png").write_bytes(_png(arrays[cls]))
    code, _, err = _run(capsys, "data", "convert", str(src), str(tmp_path / "x.npz"))
    assert code == 2 and "--image-size" in err
    assert not (tmp_path / "x.npz").exists()

    code, _, err = _run(
        capsys, "data", "convert", str(src), str(tmp_path / "x.npz"), "--image-size", "6"
    )
    assert code == 0, err
    with np.load(tmp_path / "x.npz") as z:
        assert z["images"].shape == (2, 6, 6, 3)
        assert z["labels"].tolist() == [0, 1]
        assert z["classes"].tolist() == ["cat", "dog"]
        np.testing.assert_array_equal(z["images"][0], arrays["cat"])  # already 6x6: untouched


def test_convert_argument_errors(tmp_path, capsys):
    code, _, err = _run(capsys, "data", "convert", str(tmp_path / "nope"), str(tmp_path / "x"))
    assert code == 2 and "SRC" in err and "does not exist" in err
    code, _, err = _run(
        capsys, "data", "convert", "digits", str(tmp_path / "x.npz"), "--shards", "2"
    )
    assert code == 2 and "--shards" in err
    np.savez(tmp_path / "odd.npz", pixels=np.zeros((2, 3, 3)))
    with pytest.raises(ValueError, match=r"odd\.npz.*'images' \(or 'x'\) and 'labels'"):
        convert_data(str(tmp_path / "odd.npz"), tmp_path / "y.npz", progress=False)
    (tmp_path / "junk.npz").write_bytes(b"not a zip file")
    with pytest.raises(ValueError, match=r"junk\.npz"):
        inspect_data(str(tmp_path / "junk.npz"))
    with pytest.raises(ValueError, match="shards: 5000 is more than"):
        convert_data("digits", tmp_path / "s", shards=5000, progress=False)
    with pytest.raises(SystemExit):  # argparse: exit 2 with a usage message
        main(["data", "convert", "digits", str(tmp_path / "x"), "--to", "csv"])
    assert "invalid choice" in capsys.readouterr().err
    _no_temp_left(tmp_path)


# -- tfdp data inspect -----------------------------------------------------------------------


def test_inspect_digits_prints_size_and_classes(capsys):
    from tfdp.recipe.digits import load_digits

    _, labels = load_digits("all")
    code, out, err = _run(capsys, "data", "inspect", "digits", "--examples", "3")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert "examples: 1797" in lines
    assert "classes: 10" in lines
    counts = np.bincount(labels)
    for k in range(10):
        assert f"  {k}      {k}     {counts[k]}" in lines
    assert "examples (3 of 1797):" in lines
    assert any(line.split()[:3] == ["0", str(labels[0]), "[8,"] for line in lines)


def test_inspect_npz_folder_and_tfrecord(tmp_path):
    rng = np.random.default_rng(3)
    images = rng.integers(0, 256, (7, 3, 2, 1), dtype=np.uint8)
    labels = np.array([0, 0, 0, 2, 2, 1, 2])
    np.savez(tmp_path / "x.npz", images=images, labels=labels)
    text = inspect_data(str(tmp_path / "x.npz"), examples=2)
    assert "examples: 7" in text and "classes: 3" in text
    assert "image: [3, 2, 1] uint8" in text
    assert "  2      -     3" in text  # label 2, no name, 3 examples

    convert_data(str(tmp_path / "x.npz"), tmp_path / "f", to="folder", progress=False)
    text = inspect_data(str(tmp_path / "f"), examples=0)
    assert "examples: 7" in text and "(folder)" in text
    assert "  1      1     1" in text and "examples (" not in text

    convert_data(str(tmp_path / "x.npz"), tmp_path / "t", shards=2, progress=False)
    text = inspect_data(str(tmp_path / "t"), examples=4)
    assert "examples: 7" in text and "(tfrecord)" in text
    assert "files: 2 shard(s)" in text and "examples (4 of 7):" in text


def test_manifest_suffix_matches_the_writer():
    """The reader (recipe.dataspec, cli.convert) and the writer share one name (tfdp._names)."""
    from tfdp import _names
    from tfdp.sources import tfrecord

    assert _names.MANIFEST_SUFFIX == tfrecord.MANIFEST_SUFFIX


def test_register_adds_plot_and_data():
    import argparse

    from tfdp.cli import data as cli_data

    parser = argparse.ArgumentParser(prog="tfdp")
    sub = parser.add_subparsers(dest="command")
    cli_plot.add_parser(sub)
    cli_data.add_parser(sub)
    args = parser.parse_args(["data", "inspect", "x", "--examples", "0"])
    assert (args.command, args.data_command, args.src, args.examples) == ("data", "inspect", "x", 0)
    args = parser.parse_args(["plot", "run", "--out", "c.png"])
    assert (args.run_dir, args.out) == ("run", "c.png")
    with pytest.raises(SystemExit):
        parser.parse_args(["data", "inspect", "x", "--examples", "-1"])


def test_plot_svg_integer_epochs_and_first_epoch_speed_left_out(tmp_path):
    import xml.etree.ElementTree as ET

    run = tmp_path / "run"
    _write_metrics(run, epochs=3)
    path = Path(cli_plot.plot_metrics(run, tmp_path / "curves.svg"))
    text = path.read_text()
    ET.fromstring(text)  # an SVG document, not a PNG with another name
    assert text.lstrip().startswith("<?xml") and "<svg" in text
    assert "epoch 1 left out: it includes tracing" in text


def test_plot_axes_use_integer_epochs_and_skip_epoch_one_speed(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    run = tmp_path / "run"
    _write_metrics(run, epochs=3)
    drawn = []
    original = Figure.savefig

    def keep(self, *args, **kwargs):  # look at the real figure as it is written
        drawn.append(self)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    cli_plot.plot_metrics(run)
    loss, _, speed = drawn[0].axes
    assert all(float(t).is_integer() for t in loss.get_xticks())
    (line,) = speed.get_lines()
    ys = line.get_ydata()
    assert np.isnan(ys[0]) and list(ys[1:]) == [1010.0, 1020.0]
    assert "epoch 1 left out" in speed.get_title()


def test_convert_of_a_jpeg_folder_stores_the_files_byte_for_byte(tmp_path, capsys):
    """As the README says: TFRecord shards of a JPEG folder hold the files as they are."""
    import tensorflow as tf

    from photos import write_folder

    root = write_folder(tmp_path / "jpegs", 6, classes=2, sizes=[(20, 28), (24, 16)])
    files = {p.read_bytes(): p.parent.name for p in root.glob("*/*.JPEG")}
    code, out, err = _run(capsys, "data", "convert", str(root), str(tmp_path / "s"), "--shards=2")
    assert code == 0, err
    assert "the JPEG files byte for byte" in out
    manifest = json.loads((tmp_path / "s/data.manifest.json").read_text())
    (image,) = [f for f in manifest["features"] if f["name"] == "image"]
    assert image["encoding"] == "jpeg"
    stored = {}
    for shard in manifest["files"]:
        for record in tf.data.TFRecordDataset(str(tmp_path / "s" / shard)):
            example = tf.train.Example.FromString(record.numpy())
            data = example.features.feature["image"].bytes_list.value[0]
            stored[data] = int(example.features.feature["label"].int64_list.value[0])
    assert set(stored) == set(files)  # every record's bytes are one file's bytes, all files
    assert all(f"c{stored[data]:02d}" == name for data, name in files.items())
    assert "examples: 6" in inspect_data(str(tmp_path / "s"), 2)  # and they read back
    # Resized, the images are new pixels: PNG.
    code, out, err = _run(
        capsys, "data", "convert", str(root), str(tmp_path / "r"), "--image-size", "8"
    )
    assert code == 0 and "PNG-encoded" in out, err
    manifest = json.loads((tmp_path / "r/data.manifest.json").read_text())
    assert [f["encoding"] for f in manifest["features"] if f["name"] == "image"] == ["png"]
