"""The examples/ scripts run end to end with --quick (one per seed scenario), as users run them.

Each example is a separate process (it configures its own strategy before TensorFlow
initialises), started from a temporary working directory; the tests check the exit status and
the line that states what the example demonstrates.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
TIMEOUT = 300  # generous: a hang fails the test, a slow machine does not

pytestmark = pytest.mark.slow


def run(args: list[str], cwd: Path, timeout: float = TIMEOUT) -> str:
    """Run a command with TensorFlow's C++ logging quiet; assert exit 0; return stdout + stderr."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "TFDP_STARTUP_TIMEOUT": "120"}
    proc = subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{args} exited with {proc.returncode}:\n{out[-4000:]}"
    return out


def example(name: str, *args: str, cwd: Path) -> str:
    return run([sys.executable, str(EXAMPLES / f"{name}.py"), *args], cwd)


def test_every_example_is_tested():
    scripts = {p.stem for p in EXAMPLES.glob("*.py")}
    assert scripts == {
        "repeated_augmentation",
        "tfrecord_custom_loop",
        "custom_loop_and_fit",
        "make_even_sampler",
        "digits_cnn",
    }


def test_repeated_augmentation(tmp_path):
    out = example("repeated_augmentation", "--quick", cwd=tmp_path)
    # The copies of a sample went to different replicas of the same step, augmented differently.
    copy = r"rank \d slot \d+ \(pos \d+\)"
    assert re.search(rf"sample +\d+: 3 copies -> {copy}, {copy}, {copy}", out)
    assert "copies on the same rank: 0" in out
    assert "a rerun of step 0 is identical: True" in out
    assert "RepeatAugSampler(200 examples): ValueError" in out
    assert re.search(r"held-out after epoch 1: loss [\d.]+, accuracy [\d.]+ \(exact", out)
    assert re.search(r"^OK$", out, re.MULTILINE)


def test_tfrecord_custom_loop_resumes(tmp_path):
    out_dir = tmp_path / "out"
    first = example(
        "tfrecord_custom_loop", "--quick", "--out", str(out_dir), "--max-steps", "5", cwd=tmp_path
    )
    assert "wrote 8 TFRecord shards of 1437 digits" in first
    assert "stopped in epoch 1, after its step 5 (global step 5), checkpoint saved" in first
    assert "resumed from" not in first
    second = example("tfrecord_custom_loop", "--quick", "--out", str(out_dir), cwd=tmp_path)
    assert "reusing the TFRecord shards" in second
    resumed = r"resumed from \S+ckpt-5: in epoch 1, after its step 5 \(global step 5\)"
    assert re.search(resumed, second)
    assert re.search(r"epoch 1 +[\d.]+s +loss", second)  # the seed's per-epoch time and loss
    assert "done: 1 epoch(s), global step 22" in second


def _final_loss(out: str) -> float:
    match = re.search(r"custom loop: final held-out loss ([\d.]+)", out)
    assert match, out[-3000:]
    return float(match.group(1))


@pytest.fixture(scope="module")
def single_process_run(tmp_path_factory) -> str:
    return example("custom_loop_and_fit", "--quick", cwd=tmp_path_factory.mktemp("cl"))


@pytest.mark.xdist_group("examples_single_process")  # its module fixture runs once
def test_custom_loop_and_fit_agree(single_process_run):
    out = single_process_run
    assert "the seed's loop 2.00x" in out and "per-replica input 1.00x" in out
    match = re.search(r"max \|w_custom_loop - w_model_fit\| = (\S+);", out)
    assert match, out[-3000:]
    assert float(match.group(1)) <= 1e-5
    assert "OK: the custom loop and model.fit agree" in out


@pytest.mark.xdist_group("examples_single_process")  # its module fixture runs once
def test_custom_loop_under_tfdp_launch(single_process_run, tmp_path):
    """2 workers (one replica each) train like 2 replicas in one process; only the chief prints."""
    out = run(
        [
            sys.executable,
            "-m",
            "tfdp.launch",
            "--workers",
            "2",
            "--",
            sys.executable,
            str(EXAMPLES / "custom_loop_and_fit.py"),
            "--quick",
        ],
        tmp_path,
    )
    assert "[worker 0] strategy: MultiWorkerMirroredStrategy, 2 replicas over 2 worker(s)" in out
    assert "[worker 0] OK: the custom loop trained on 2 workers" in out
    assert not re.search(r"^\[worker 1\] .*(strategy:|custom loop|OK)", out, re.MULTILINE)
    assert _final_loss(out) == pytest.approx(_final_loss(single_process_run), abs=1e-5)


def test_make_even_sampler(tmp_path):
    out = example("make_even_sampler", "--quick", cwd=tmp_path)
    assert "padded to 8, shortfall 5 -> random extra indices" in out
    assert "processes hold" in out  # the seed's ranks disagree ...
    assert re.search(r"tfdp: one padded list \[.*\] for all 8 ranks", out)  # ... tfdp's agree
    assert "OK: all ranks agree (TensorFlow never imported)" in out


def test_digits_cnn(tmp_path):
    out = example("digits_cnn", "--quick", cwd=tmp_path)
    assert "the seed's reduce_mean 2.00x, compute_average_loss(global batch) 1.00x" in out
    assert "Epoch 2/2" in out  # model.fit ran
    assert re.search(r"held-out \(exact, each of the 360 digits once\): loss [\d.]+", out)
    assert re.search(r"^OK$", out, re.MULTILINE)
