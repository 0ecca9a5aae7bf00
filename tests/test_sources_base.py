"""The source contracts (tfdp.sources.base, tfdp.windows.contract), the augmentation ones
(tfdp.augment.contract), and the input layer's dispatch on them."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from tfdp import augment  # noqa: E402
from tfdp.input import DistributedInput  # noqa: E402
from tfdp.sources import (  # noqa: E402
    ArraySource,
    ImageFolderSource,
    TFRecordSource,
    base,
    write_tfrecords,
)
from tfdp.windows import contract as window_contract  # noqa: E402

SRC = Path(__file__).resolve().parents[1] / "src" / "tfdp"


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("folder")
    for c in "ab":
        (root / c).mkdir()
        for i in range(2):
            png = tf.io.encode_png(tf.zeros([4, 4, 3], tf.uint8))
            tf.io.write_file(str(root / c / f"{i}.png"), png)
    return root


def test_shipped_sources_meet_their_contracts(folder, tmp_path):
    arrays = ArraySource((np.zeros((4, 2), "float32"), np.arange(4)))
    images = ImageFolderSource(folder)
    stream = TFRecordSource(write_tfrecords(np.zeros((4, 2), "float32"), tmp_path, num_shards=2))
    table = {
        "arrays": (arrays, {"RandomAccessSource", "BatchSource"}),
        "folder": (
            images,
            {
                "RandomAccessSource",
                "WeightedSource",
                "WindowSource",
                "EncodedImageSource",
                "PathSource",
                "SkipReportingSource",
            },
        ),
        "tfrecord": (stream, {"StreamingSource"}),
    }
    names = [
        "RandomAccessSource",
        "BatchSource",
        "WeightedSource",
        "WindowSource",
        "EncodedImageSource",
        "PathSource",
        "SkipReportingSource",
        "StreamingSource",
    ]
    protocols = {n: getattr(window_contract, n, None) or getattr(base, n) for n in names}
    for what, (src, expected) in table.items():
        met = {n for n in names if isinstance(src, protocols[n])}
        assert met == expected, what


class _Duck:
    """A random-access source with no base class and no ``streaming`` attribute."""

    def __init__(self, n: int) -> None:
        self.num_examples = n
        self.element_spec = tf.TensorSpec([], tf.int64)

    def load(self, index):
        return tf.cast(index, tf.int64) * 10


def test_a_duck_typed_source_is_read_by_index():
    inp = DistributedInput(None, _Duck(6), batch_size=3, sampler="eval")
    got = [x.numpy().tolist() for x, _w in inp.rank_dataset(0)]
    assert got == [[0, 10, 20], [30, 40, 50]]
    assert inp.streaming is False


def test_an_object_meeting_no_contract_is_refused_naming_the_argument():
    with pytest.raises(TypeError, match=r"^source: must be a random-access source .* got list$"):
        DistributedInput(None, [1, 2, 3], batch_size=1)


def test_augmentations_are_told_apart_by_the_protocol():
    assert augment.is_batched_augmentation(augment.RandomFlip())
    assert augment.is_batched_augmentation(augment.Compose([augment.ToFloat()]))
    assert not augment.is_batched_augmentation(lambda example, seed: example)

    class Flagged:
        batched = False

        def __call__(self, example, seed):
            return example

    assert isinstance(Flagged(), augment.BatchedAugmentation)  # the attribute is declared ...
    assert not augment.is_batched_augmentation(Flagged())  # ... and says per-example
    with pytest.raises(TypeError, match="stages: must be batched"):
        augment.Compose([Flagged()])


def test_per_example_and_batched_augmentations_see_their_kind_of_input():
    seen = {}

    def per_example(example, seed):
        seen["example_rank"] = example[0].shape.rank
        seen["seed_shape"] = tuple(seed.shape)
        return example

    src = ArraySource((np.zeros((4, 3), "float32"), np.arange(4)))
    inp = DistributedInput(None, src, batch_size=2, augment=per_example)
    next(iter(inp.rank_dataset(0)))
    assert seen == {"example_rank": 1, "seed_shape": (2,)}

    class Batched:
        batched = True

        def __call__(self, example, seeds):
            seen["batch_rank"] = example[0].shape.rank
            seen["seeds_shape"] = tuple(seeds.shape)
            return example

    inp = DistributedInput(None, src, batch_size=2, augment=Batched())
    next(iter(inp.rank_dataset(0)))
    assert seen["batch_rank"] == 2 and seen["seeds_shape"] == (2, 2)  # gathered as a batch


def test_no_probing_of_sources_or_augmentations_left():
    """The input layer, sources and augmentations dispatch on the Protocols, not on hasattr."""
    files = [
        *sorted((SRC / "input").rglob("*.py")),
        *sorted((SRC / "windows").rglob("*.py")),
        *sorted((SRC / "augment").rglob("*.py")),
        *sorted((SRC / "sources").rglob("*.py")),
    ]
    probe = re.compile(r"hasattr\(|getattr\((?:self\.)?(?:source|data|fn|stage|augment)\b")
    found = [
        f"{f.name}:{i}: {line.strip()}"
        for f in files
        for i, line in enumerate(f.read_text().splitlines(), 1)
        if probe.search(line) and "namedtuple" not in line
    ]
    assert found == []


def test_array_record_imports_no_private_name_of_tfrecord():
    text = (SRC / "sources" / "array_record.py").read_text()
    assert not re.search(r"from tfdp\.sources\.tfrecord\S* import .*\b_[a-z]", text)


def test_importing_the_contracts_loads_no_tensorflow():
    code = (
        "import sys, tfdp.sources.base, tfdp.seeding, tfdp.indices; "
        "print('tensorflow' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
