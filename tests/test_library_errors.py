"""Library errors: user-fixable input raises the tfdp.errors family, naming the Python argument."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from tfdp.distribute import parse_tf_config  # noqa: E402
from tfdp.errors import ConfigError, DataError, TfdpError  # noqa: E402
from tfdp.input import DistributedInput  # noqa: E402
from tfdp.sources import ArraySource, TFRecordSource, write_tfrecords  # noqa: E402
from tfdp.sources.tfrecord import read_manifest  # noqa: E402

SRC = Path(__file__).resolve().parents[1] / "src" / "tfdp"


def test_bad_arguments_raise_config_errors_naming_the_argument():
    src = ArraySource(np.zeros((8, 2), "float32"))
    with pytest.raises(ConfigError, match=r"^batch_size must be an integer >= 1"):
        DistributedInput(None, src, batch_size=0)
    with pytest.raises(ConfigError, match=r"^sampler must be one of"):
        DistributedInput(None, src, sampler="nope", batch_size=2)
    with pytest.raises(ConfigError, match=r"^num_shards must be in"):
        write_tfrecords(np.zeros((2, 1), "float32"), "/nonexistent-unused", num_shards=5)
    with pytest.raises(ConfigError, match="TF_CONFIG is not valid JSON"):
        parse_tf_config("{")
    with pytest.raises(ConfigError, match=r"^all arrays must have the same number"):
        ArraySource((np.zeros(3), np.zeros(4)))


def test_bad_data_raises_data_errors_naming_the_file(tmp_path):
    bad = tmp_path / "x.manifest.json"
    bad.write_text("{not json")
    with pytest.raises(DataError, match=re.escape(str(bad))):
        read_manifest(bad)
    files = write_tfrecords(np.zeros((4, 2), "float32"), tmp_path / "d", num_shards=2)
    with pytest.raises(DataError, match=re.escape(files[0]) + ".*feature 'x'"):
        TFRecordSource(files, {"x": tf.io.FixedLenFeature([2], tf.float32)})
    assert issubclass(DataError, TfdpError) and issubclass(TfdpError, ValueError)


def test_the_library_speaks_no_cli_flags():
    """Only cli/ (the commands) and recipe/ (the main job, whose options are the flags) name
    flags; the library names its Python arguments (TfdpError.argument for the CLI to say). The
    modules of recipe/ that the commands share speak the library's words too (the commands say
    them their way: tfdp.errors.said_as)."""
    shared = {"dataspec", "digits.py", "networks.py", "rundir.py"}
    owned = [
        p
        for p in sorted(SRC.rglob("*.py"))
        if p.relative_to(SRC).parts[0] not in {"cli", "recipe", "__main__.py"}
        or (p.relative_to(SRC).parts[0] == "recipe" and p.relative_to(SRC).parts[1] in shared)
    ]
    in_recipe = {
        p.relative_to(SRC).parts[1] for p in owned if p.relative_to(SRC).parts[0] == "recipe"
    }
    assert in_recipe == shared  # the scan reaches them
    flag = re.compile(r"""["'][^"'\n]*(?<![\w-])--[a-z][a-z-]+""")
    found = [
        f"{p.name}:{i}: {line.strip()}"
        for p in owned
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if flag.search(line) and ">>>" not in line
    ]
    assert found == []
