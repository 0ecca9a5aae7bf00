"""tfdp's commands start quiet: TensorFlow's records logged while it loads, held to its level."""

from __future__ import annotations

import os
import subprocess
import sys

from hypothesis import given
from hypothesis import strategies as st

from tfdp.cli.tf_start import PREAMBLE, below_threshold

RECORD = "{}0000 00:00:1796359657.364888    5846 port.cc:153] {}"
LINES = st.one_of(
    st.builds(RECORD.format, st.sampled_from("IWEF"), st.text("abc ]", max_size=8)),
    st.just(PREAMBLE.decode()),
    st.text("xyz: ", max_size=12),  # anything else (a user's warning, a traceback line)
)


@given(st.lists(LINES, max_size=12), st.integers(0, 4))
def test_only_records_below_the_level_and_absl_s_notice_are_dropped(lines, level):
    data = "".join(f"{line}\n" for line in lines).encode()
    kept = below_threshold(data, level).decode().splitlines()

    def stays(line: str) -> bool:
        if level == 0:
            return True
        if line == PREAMBLE.decode():
            return False
        return not (line[:1] in "IWEF" and "port.cc:153]" in line and "IWEF".index(line[0]) < level)

    assert kept == [line for line in lines if stays(line)]


def test_tensorflow_s_import_notices_are_real_and_come_twice():
    """With the level at 0 the hook drops nothing: the records it is there for are real."""
    script = (
        "import sys; from tfdp.cli import tf_start; tf_start.install(); "
        "sys.stderr.write('mine\\n'); sys.stderr.flush(); import tensorflow"
    )
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "0"}
    env.pop("TFDP_DEBUG", None)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                         timeout=300, check=True)  # fmt: skip
    lines = run.stderr.splitlines()
    assert lines[0] == "mine"
    assert lines.count(PREAMBLE.decode()) == 2  # libtensorflow_framework + the profiler plugin
    assert sum("oneDNN custom operations are on" in line for line in lines) == 2
    quiet = below_threshold(run.stderr.encode(), 2).decode()
    assert quiet.startswith("mine\n") and "oneDNN" not in quiet and "absl" not in quiet
