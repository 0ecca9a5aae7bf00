"""The registry of data formats (tfdp.recipe.dataspec.formats): the held-out split of every
registered format against a plain transcription of the rule it had before the registry, and a
new format added as one class and one registration, taken by every command with no other change.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pytest

from tfdp._util import replaced_atomically
from tfdp.cli import main
from tfdp.recipe import TrainConfig, build_data
from tfdp.recipe.dataspec import check_images, check_labels, open_source
from tfdp.recipe.dataspec import formats as registry
from tfdp.recipe.dataspec.arrays import arrays_data
from tfdp.recipe.dataspec.contract import DataFormat, HeldOut, OpenRequest, WriteRequest
from tfdp.recipe.dataspec.formats import format_named

# -- the held-out split of every registered format, as it was ---------------------------------

#: The constants the old rules used (written out: a change of either would move every split).
DIGITS_SPLIT_SEED, DIGITS_HELD_OUT = 20_261_130, 360
FOLDER_SPLIT_TAG = 0x5EED_F01D


def _old_arrays_split(x, y, fraction, seed):
    """recipe/data.py's _split_arrays before the registry."""
    order = np.random.default_rng(seed).permutation(len(y))
    cut = max(1, round(len(y) * fraction))
    return (x[order[cut:]], y[order[cut:]]), (x[order[:cut]], y[order[:cut]])


def _old_folder_split(labels, num_classes, fraction, seed):
    """recipe/data.py's _split_folder before the registry: (train, held-out) example indices."""
    rng = np.random.default_rng([seed, FOLDER_SPLIT_TAG])
    train, held = [], []
    for k in range(num_classes):
        files = np.flatnonzero(labels == k)
        files = files[rng.permutation(len(files))]
        n = min(len(files) - 1, max(1, round(len(files) * fraction)))
        held.append(files[:n])
        train.append(files[n:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(held))


def _old_shards_split(files, fraction):
    """recipe/data.py's _split_shards before the registry: (train files, held-out files)."""
    files = sorted(files, key=os.path.basename)
    held = math.ceil(fraction * len(files))
    return files[:-held], files[-held:]


def _png(array: np.ndarray) -> bytes:
    import tensorflow as tf

    return tf.io.encode_png(array).numpy()


def _digits_case(tmp: Path):
    from tfdp.recipe.digits import load_digits

    x, y = load_digits("all")
    order = np.random.default_rng(DIGITS_SPLIT_SEED).permutation(len(y))
    train, held = order[:-DIGITS_HELD_OUT], order[-DIGITS_HELD_OUT:]

    def check(part: HeldOut, fraction: float, seed: int) -> None:  # fixed: neither is used
        np.testing.assert_array_equal(part.train.numpy()[0], x[train])
        np.testing.assert_array_equal(part.train.numpy()[1], y[train])
        np.testing.assert_array_equal(part.eval.numpy()[0], x[held])
        np.testing.assert_array_equal(part.eval.numpy()[1], y[held])

    return "digits", check


def _npz_case(tmp: Path):
    rng = np.random.default_rng(11)
    x = rng.integers(0, 256, (37, 3, 2, 1), np.uint8)
    y = np.arange(37) % 4
    np.savez(tmp / "a.npz", images=x, labels=y)

    def check(part: HeldOut, fraction: float, seed: int) -> None:
        want = _old_arrays_split(x, y, fraction, seed)
        for got, (wx, wy) in zip((part.train, part.eval), want, strict=True):
            np.testing.assert_array_equal(got.numpy()[0], wx)
            np.testing.assert_array_equal(got.numpy()[1], wy)

    return str(tmp / "a.npz"), check


def _folder_case(tmp: Path):
    from tfdp.sources import ImageFolderSource

    rng = np.random.default_rng(12)
    for name, n in (("ant", 1), ("bee", 2), ("cat", 5), ("dog", 9)):
        (tmp / "f" / name).mkdir(parents=True)
        for i in range(n):
            pixels = rng.integers(0, 256, (2, 3, 3), np.uint8)
            (tmp / "f" / name / f"{i}.png").write_bytes(_png(pixels))
    listing = ImageFolderSource(str(tmp / "f"))
    paths, labels = np.asarray(listing.paths), np.asarray(listing.labels)

    def check(part: HeldOut, fraction: float, seed: int) -> None:
        train, held = _old_folder_split(labels, 4, fraction, seed)
        assert list(part.train.paths) == list(paths[train])
        assert list(part.eval.paths) == list(paths[held])
        assert list(part.eval.labels) == list(labels[held])

    return str(tmp / "f"), check


def _tfrecord_case(tmp: Path):
    from tfdp.sources import write_tfrecords

    rng = np.random.default_rng(13)
    x = rng.integers(0, 256, (30, 2, 2, 3), np.uint8)
    files = write_tfrecords((x, np.arange(30) % 3), tmp / "t", num_shards=5)
    opened = open_source(str(tmp / "t"))

    def check(part: HeldOut, fraction: float, seed: int) -> None:
        train, held = _old_shards_split(files, fraction)
        assert list(part.train.files) == list(train)
        want = list(opened.records(held).as_numpy_iterator())  # those files, in that order
        np.testing.assert_array_equal(part.eval.numpy()[0], np.stack([im for im, _ in want]))
        np.testing.assert_array_equal(part.eval.numpy()[1], [int(label) for _, label in want])

    return str(tmp / "t"), check


SPLIT_CASES = {
    "digits": _digits_case,
    "npz": _npz_case,
    "folder": _folder_case,
    "tfrecord": _tfrecord_case,
}


def test_split_cases_cover_every_registered_format():
    assert set(SPLIT_CASES) == {fmt.name for fmt in registry.FORMATS}


@pytest.mark.parametrize("name", sorted(SPLIT_CASES))
def test_every_format_splits_as_before(name, tmp_path):
    spec, check = SPLIT_CASES[name](tmp_path)
    data = open_source(spec, read_all_labels=True)
    assert data.kind == name
    for fraction, seed in ((0.1, 0), (0.3, 7), (0.5, 123)):
        part = format_named(name).split(data, eval_fraction=fraction, seed=seed, image_size=None)
        check(part, fraction, seed)


# -- a new format: one class, one registration ------------------------------------------------


class NpyPair:
    """A toy format: images in ``x.npy``, their labels beside them in ``x.labels.npy``; every
    4th example held out. It meets DataFormat with the library's helpers alone."""

    name = "npy"
    about = "a .npy file of images beside its .labels.npy"
    channels_chosen = False
    writes = "file"
    suffix = ".npy"
    write_options = frozenset()

    def recognise(self, spec: str) -> bool:
        path = os.path.expanduser(spec)
        return path.endswith(".npy") and os.path.isfile(path)

    def open(self, spec: str, request: OpenRequest):
        path = os.path.expanduser(spec)
        labels_at = path[: -len(".npy")] + ".labels.npy"
        x, scale, notes = check_images(np.load(path), path)
        y, k, more = check_labels(
            np.load(labels_at),
            labels_at,
            num_classes=request.num_classes,
            require_all_classes=request.require_all_classes,
        )
        return arrays_data(self.name, path, x, y, None, scale, num_classes=k, notes=notes + more)

    def split(self, data, *, eval_fraction: float, seed: int, image_size: int | None) -> HeldOut:
        from tfdp.sources import ArraySource

        x, y = data.source.numpy()
        held = np.arange(len(y)) % 4 == 3
        return HeldOut(
            ArraySource((x[~held], y[~held])),
            ArraySource((x[held], y[held])),
            "every 4th example",
            by_fraction=False,
        )

    def write(self, data, dst: str, request: WriteRequest) -> tuple[int, list[str]]:
        pairs = list(data.dataset().as_numpy_iterator())
        arrays = {
            dst: np.stack([image for image, _ in pairs]),
            dst[: -len(".npy")] + ".labels.npy": np.asarray([label for _, label in pairs]),
        }
        for path, array in arrays.items():
            with replaced_atomically(path) as tmp, open(tmp, "wb") as fh:
                np.save(fh, array)
        return len(pairs), []


def _run(capsys, *argv: str) -> str:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def test_a_new_format_is_one_class_and_one_registration(tmp_path, monkeypatch, capsys):
    toy: DataFormat = NpyPair()
    *readers, folder = registry.FORMATS  # the image folder takes any directory: it stays last
    monkeypatch.setattr(registry, "FORMATS", (*readers, toy, folder))
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(14)
    images = rng.integers(0, 256, (24, 8, 8, 1), np.uint8)
    labels = np.arange(24) % 3
    np.save(tmp_path / "x.npy", images)
    np.save(tmp_path / "x.labels.npy", labels)
    spec = str(tmp_path / "x.npy")

    out = _run(capsys, "data", "inspect", spec, "--examples", "2")
    assert f"source: {spec} (npy)" in out and "classes: 3" in out and "examples (2 of 24)" in out

    data = build_data(TrainConfig(data=spec))  # the recipe's held-out split is the format's
    assert (data.held_out, data.num_classes, data.shape) == ("every 4th example", 3, (8, 8, 1))
    np.testing.assert_array_equal(data.eval.numpy()[1], labels[3::4])
    out = _run(capsys, "train", "--data", spec, "--epochs", "1", "--batch-size", "8",
               "--replicas", "4", "--steps-per-call", "1", "--run-dir", str(tmp_path / "run"),
               "--no-progress")  # fmt: skip
    assert "18 training / 6 held-out examples (every 4th example)" in out
    assert (tmp_path / "run" / "model.keras").is_file()

    _run(capsys, "data", "convert", spec, str(tmp_path / "x.npz"))  # as a source
    with np.load(tmp_path / "x.npz") as z:
        np.testing.assert_array_equal(z["images"], images)
        np.testing.assert_array_equal(z["labels"], labels)
    out = _run(capsys, "data", "convert", "digits", str(tmp_path / "d.npy"))  # as a destination
    assert out.startswith("wrote 1797 examples (npy)")
    with pytest.raises(SystemExit):  # --help
        main(["data", "convert", "--help"])
    assert "--to {npz,tfrecord,npy,folder}" in capsys.readouterr().out
    from tfdp.recipe.digits import load_digits

    x, y = load_digits("all")
    np.testing.assert_array_equal(np.load(tmp_path / "d.npy"), x)
    np.testing.assert_array_equal(np.load(tmp_path / "d.labels.npy"), y)
    with pytest.raises(ValueError, match=r"'digits' \(bundled\), .*a \.npy file of images"):
        open_source(str(tmp_path / "missing.npy"))  # what is valid, said from the registry
