"""The `tfdp` command: sampler table, train/evaluate options, and bad input without tracebacks."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from tfdp.cli import main, sampler_table
from tfdp.recipe import TrainConfig, coerce, load_config_file
from tfdp.samplers import RepeatAugSampler


def tfdp(*args: str, cwd=None, timeout=600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.run(
        [sys.executable, "-m", "tfdp.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=timeout,
        check=False,
    )


def test_sampler_table_shows_ra_copies_on_different_ranks(capsys):
    samplers = [RepeatAugSampler(12, 4, r, shuffle=False, selected_round=0) for r in range(4)]
    table = sampler_table(samplers).splitlines()
    assert table[0].split() == ["step", "rank", "0", "rank", "1", "rank", "2", "rank", "3"]
    assert table[1].split() == ["0", "0", "0", "0", "1"]  # sample 0's 3 copies: ranks 0-2
    assert (
        main(
            [
                "sampler",
                "--num-examples",
                "12",
                "--replicas",
                "4",
                "--selected-round",
                "0",
                "--no-shuffle",
            ]
        )
        == 0
    )
    assert "rank 3" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["train", "--epoch", "3"], "--epoch -> did you mean --epochs?"),
        (["train", "--epochz", "3"], "did you mean --epochs"),
        (["train", "--batch-size", "abc"], "expected an integer"),
        (["train", "--sampler", "ra"], "must be one of"),
        (["train", "--model", "nosuch", "--epochs", "1"], "--model: 'nosuch': expected 'cnn'"),
        (
            ["sampler", "--num-examples", "100", "--replicas", "4", "--selected-round", "256"],
            "smaller --selected-round",
        ),
    ],
)
def test_bad_flags_are_one_clear_line(args, message, capsys):
    try:
        code = main(args)
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def test_config_files_yaml_toml_and_errors(tmp_path):
    (tmp_path / "a.toml").write_text('epochs = 3\nbatch-size = 32\nsampler = "distributed"\n')
    assert load_config_file(tmp_path / "a.toml") == {
        "epochs": 3,
        "batch_size": 32,
        "sampler": "distributed",
    }
    (tmp_path / "b.yaml").write_text("epochs: 2\nlr: 0.01\n")
    assert load_config_file(tmp_path / "b.yaml") == {"epochs": 2, "lr": 0.01}
    (tmp_path / "typo.yaml").write_text("epoch: 2\n")
    with pytest.raises(ValueError, match="unknown option 'epoch'; did you mean 'epochs'"):
        load_config_file(tmp_path / "typo.yaml")
    (tmp_path / "type.toml").write_text('epochs = "many"\n')
    with pytest.raises(ValueError, match="'epochs' must be of type int"):
        load_config_file(tmp_path / "type.toml")
    with pytest.raises(ValueError, match="does not exist"):
        load_config_file(tmp_path / "missing.toml")
    with pytest.raises(ValueError, match="must be one of"):
        coerce("sampler", "ra", "--sampler")


def test_flags_win_over_the_config_file(tmp_path):
    from tfdp.cli import build_parser, train_request

    (tmp_path / "c.toml").write_text("epochs = 7\nbatch-size = 32\n")
    args = build_parser().parse_args(
        ["train", "--config", str(tmp_path / "c.toml"), "--epochs", "2"]
    )
    cfg, given = train_request(args)
    assert given == {"epochs", "batch_size"}
    assert (cfg.epochs, cfg.batch_size) == (2, 32)
    assert isinstance(cfg, TrainConfig)


def test_train_bad_input_without_tracebacks(tmp_path):
    missing = tfdp("train", "--data", str(tmp_path / "nope"), "--epochs", "1", cwd=tmp_path)
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    assert "Traceback" not in missing.stderr
    (tmp_path / "bad.yaml").write_text("epochs: [1, 2]\n")
    bad = tfdp("train", "--config", str(tmp_path / "bad.yaml"), cwd=tmp_path)
    assert bad.returncode == 2 and "'epochs' must be of type int" in bad.stderr


def test_train_resume_and_refusals(tmp_path, capsys):
    """A run trained, refused, resumed: in this process on its 4 logical CPUs (the command as a
    process: tests/test_readme.py; `tfdp evaluate` on another replica count than the run's:
    README block 4 there)."""
    run = tmp_path / "run"
    argv = ["train", "--epochs", "1", "--run-dir", str(run), "--no-progress", "--replicas", "4",
            "--steps-per-call", "1",  # one traced step function (calls of 4 traced two)
            "--record-samples", str(tmp_path / "ids.jsonl")]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr().err[-2000:]
    capsys.readouterr()
    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(metrics) == 1
    ids = [json.loads(x) for x in (tmp_path / "ids.jsonl").read_text().splitlines()]
    assert {r["rank"] for r in ids} == {0, 1, 2, 3} and len(ids[0]["ids"]) == 16  # 64 / 4
    # refused before TensorFlow starts
    assert main(["train", "--epochs", "1", "--run-dir", str(run)]) == 2
    assert "already holds a run" in capsys.readouterr().err
    assert main(["train", "--epochs", "2", "--run-dir", str(run), "--resume",
                 "--batch-size", "32"]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert "cannot change on resume" in err and "--batch-size (the run has 64, now 32)" in err
    assert main(["train", "--epochs", "3", "--run-dir", str(run), "--resume", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "resumed from" in out
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 3
    # stdout is not a terminal: a step line every DEFAULT_LOG_EVERY = 50 steps (22 per epoch),
    # counted in global steps across the resume
    steps = re.findall(r"^epoch (\d+)  step (\d+)/22  global_step (\d+)  loss", out, re.M)
    assert steps == [("3", "6", "50")], out
