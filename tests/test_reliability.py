"""`tfdp train` / `evaluate` as a user meets them: resume from config.json, damaged runs,
errors that keep the name, TFRecord shards from `tfdp data convert`, held-out splits.

The bundled digits, one short epoch; a run is trained once per module and copied for each
damage. Most runs are `tfdp.cli.main` in this process, on its 4 logical CPUs (`--replicas
4`); a fresh process where the command line itself matters.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from shards import rewrite_shard
from tfdp.cli import main

ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
# One step per call: a run traces one step function (a call of 5 steps traced two, the
# 5-step call and the epoch's last 1-step call, and tracing is most of a short run's time).
SHORT = ["--epochs", "1", "--no-progress", "--checkpoint-every", "5", "--steps-per-call", "1"]
HERE = ["--replicas", "4"]  # the logical CPUs of this process (tests/conftest.py)


def tfdp(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tfdp.cli", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=ENV,
        timeout=600,
        check=False,
    )


def _metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """One epoch with non-default options: batch 128, a constant learning rate, seed 3."""
    run = tmp_path_factory.mktemp("base") / "run"
    argv = ["train", *SHORT, *HERE, "--batch-size", "128", "--schedule", "constant", "--lr",
            "0.002", "--seed", "3", "--run-dir", str(run)]  # fmt: skip
    assert main(argv) == 0
    return run


@pytest.fixture
def run(base, tmp_path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(base, copy)
    return copy


# -- resume: config.json supplies the options, changes are recorded or refused -----------------


@pytest.mark.xdist_group("reliability_base")  # its module fixture runs once
def test_resume_alone_continues_the_run_and_records_changes(run, capsys):
    before = json.loads((run / "config.json").read_text())
    assert before["batch_size"] == 128 and before["history"][0]["event"] == "start"
    assert (
        main(["train", "--resume", "--run-dir", str(run), "--epochs", "2", "--lr", "0.0005"]) == 0
    )
    assert "--epochs 2 (was 1), --lr 0.0005 (was 0.002)" in capsys.readouterr().out
    config = json.loads((run / "config.json").read_text())
    assert (config["batch_size"], config["seed"], config["lr"], config["epochs"]) == (
        128, 3, 0.0005, 2
    )  # fmt: skip
    entry = config["history"][-1]
    assert entry["event"] == "resume" and entry["global_step"] == _metrics(run)[0]["global_step"]
    assert entry["changed"] == {"epochs": {"from": 1, "to": 2}, "lr": {"from": 0.002, "to": 0.0005}}
    assert [m["lr"] for m in _metrics(run)] == pytest.approx([0.002, 0.0005])  # in effect


@pytest.mark.xdist_group("reliability_base")  # its module fixture runs once
def test_resume_may_change_the_gradient_compression_and_records_it(run, capsys):
    assert main(["train", "--resume", "--run-dir", str(run), "--gradient-compression", "bf16"]) == 0
    assert "--gradient-compression 'bf16' (was 'none')" in capsys.readouterr().out
    config = json.loads((run / "config.json").read_text())
    assert config["gradient_compression"] == "bf16"
    changed = {"gradient_compression": {"from": "none", "to": "bf16"}}
    assert config["history"][-1]["changed"] == changed


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--optimizer", "sgd"], "--optimizer (the run has 'adam', now 'sgd')"),
        (["--mixed-precision", "mixed_float16"], "--mixed-precision (the run has None, now"),
        (["--mixed-precision", "mixed_bfloat16"], "'mixed_bfloat16') cannot change on resume"),
        (["--schedule", "cosine"], "--schedule (the run has 'constant', now 'cosine')"),
        (["--batch-size", "64", "--seed", "0"], "--batch-size (the run has 128, now 64); --seed"),
    ],
)
@pytest.mark.xdist_group("reliability_base")  # its module fixture runs once
def test_resume_refuses_what_the_run_depends_on_naming_it(run, flags, named, capsys):
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    assert main(["train", "--resume", "--run-dir", str(run), *flags]) == 2
    err = capsys.readouterr().err
    assert named in err and "Traceback" not in err
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


@pytest.mark.xdist_group("reliability_base")  # its module fixture runs once
def test_damaged_config_json_is_named(run, capsys):
    config = run / "config.json"
    for content, phrase in (
        (b'{"epochs": 1, "lr": ', "is not valid JSON (Expecting value at line 1"),
        (b"[1, 2, 3]", "must hold a JSON object"),
        (bytes(range(128, 256)), "is not text (UTF-8 JSON)"),
        (b'{"epochs": "many"}', "option 'epochs' must be of type int"),
    ):
        config.write_bytes(content)
        for argv in (["train", "--resume", "--run-dir", str(run)], ["evaluate", str(run)]):
            assert main(argv) == 2
            err = capsys.readouterr().err
            assert str(config) in err and phrase in err, err


@pytest.mark.xdist_group("reliability_base")  # its module fixture runs once
def test_missing_config_json_has_a_way_forward(run, capsys):
    (run / "config.json").unlink()
    assert main(["train", "--run-dir", str(run), "--epochs", "2"]) == 2
    assert "pass --resume to continue it" in capsys.readouterr().err
    assert main(["evaluate", str(run)]) == 2
    assert "tfdp train --resume --run-dir" in capsys.readouterr().err
    argv = ["train", "--resume", "--run-dir", str(run), *SHORT, *HERE, "--epochs", "2",
            "--batch-size", "128", "--schedule", "constant", "--lr", "0.002",
            "--seed", "3"]  # fmt: skip
    assert main(argv) == 0
    assert "config.json was missing: rebuilt from the options given" in capsys.readouterr().err
    assert json.loads((run / "config.json").read_text())["batch_size"] == 128
    assert len(_metrics(run)) == 2
    assert main(["train", "--resume", "--run-dir", str(run), "--batch-size", "64"]) == 2
    assert "--batch-size (the run has 128, now 64)" in capsys.readouterr().err


# -- one restore path with fallback: train and evaluate ----------------------------------------


@pytest.mark.xdist_group("reliability_base")  # its module fixture runs once
def test_evaluate_and_resume_fall_back_past_a_truncated_checkpoint(run, capsys):
    ckpts = run / "checkpoints"
    latest = max(ckpts.glob("ckpt-*.index"), key=lambda p: int(p.stem.split("-")[1]))
    previous = sorted(ckpts.glob("ckpt-*.index"), key=lambda p: int(p.stem.split("-")[1]))[-2]
    data = latest.with_suffix(".data-00000-of-00001")
    os.truncate(data, data.stat().st_size // 2)  # the fault
    from tfdp.checkpoint import CheckpointWarning
    from tfdp.recipe import run_evaluate

    with pytest.warns(CheckpointWarning, match=f"{ckpts / latest.stem} is unreadable"):
        assert run_evaluate(str(run), replicas=4)["checkpoint"] == str(ckpts / previous.stem)
    with pytest.warns(CheckpointWarning):
        assert main(["train", "--resume", "--run-dir", str(run), "--epochs", "2"]) == 0
    assert f"resumed from {ckpts / previous.stem}: " in capsys.readouterr().out


@pytest.mark.xdist_group("reliability_base")  # its module fixture runs once
def test_evaluate_with_a_damaged_state_file(run):
    """The reader's fallback for each kind of damage (empty, binary, stale) is proven on the
    checkpoint manager (tests/test_checkpoint.py); here that `evaluate` uses it, exactly."""
    from tfdp.recipe import run_evaluate

    state = bytes(range(256))
    ckpts = run / "checkpoints"
    latest = max(int(p.stem.split("-")[1]) for p in ckpts.glob("ckpt-*.index"))
    (ckpts / "checkpoint").write_bytes(state)
    out = run_evaluate(str(run), replicas=4)  # in this process: 4 logical CPUs
    assert out["checkpoint"] == str(ckpts / f"ckpt-{latest}")
    assert out["loss"] == pytest.approx(_metrics(run)[-1]["val_loss"], abs=1e-6)
    assert (ckpts / "checkpoint").read_bytes() == state  # evaluating writes nothing


# -- TFRecord shards written by tfdp data convert ----------------------------------------------


def test_held_out_shards_and_folder_files_are_deterministic(tmp_path):
    from tfdp.cli.convert import convert_data
    from tfdp.recipe import TrainConfig, build_data

    convert_data("digits", tmp_path / "shards", shards=4, progress=False)
    for spec in ("shards", "shards/data.manifest.json", "shards/*.tfrecord"):
        data = build_data(TrainConfig(data=str(tmp_path / spec), eval_fraction=0.3))
        assert [os.path.basename(f) for f in data.train.files] == [
            f"data-0000{i}-of-00004.tfrecord" for i in range(2)
        ]
        assert data.eval.num_examples == 898 and data.num_classes == 10
    with pytest.raises(ValueError, match=r"has 4 TFRecord shard\(s\): .* would leave 0"):
        build_data(TrainConfig(data=str(tmp_path / "shards"), eval_fraction=0.99))

    convert_data("digits", tmp_path / "folder", to="folder", progress=False)
    cfg = TrainConfig(data=str(tmp_path / "folder"), image_size=8, seed=5)
    a, b = build_data(cfg), build_data(cfg)
    assert list(a.eval.paths) == list(b.eval.paths)  # the same split every time
    train, held = set(a.train.paths), set(a.eval.paths)
    assert not train & held and len(train | held) == 1797
    per_class = np.bincount(a.eval.labels, minlength=10)
    totals = np.bincount(a.train.labels, minlength=10) + per_class
    np.testing.assert_array_equal(per_class, np.round(totals * 0.1).astype(int))
    other = build_data(TrainConfig(data=str(tmp_path / "folder"), image_size=8, seed=6))
    assert set(other.eval.paths) != held


# -- errors that keep the name -------------------------------------------------------------------


@pytest.fixture
def folder_with_a_bad_file(tmp_path) -> tuple[Path, Path]:
    import tensorflow as tf

    root = tmp_path / "images"
    rng = np.random.default_rng(0)
    for c in ("a", "b"):
        (root / c).mkdir(parents=True)
        for i in range(6):
            png = tf.io.encode_png(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).numpy()
            (root / c / f"{i}.png").write_bytes(png)
    bad = root / "b" / "3.png"
    bad.write_bytes(bad.read_bytes()[:40])  # truncated: no IEND chunk
    return root, bad


SKIP_THEN_FAIL = """
import json, sys
from tfdp.cli import main
for argv in json.loads(sys.argv[1]):
    print("== run", file=sys.stdout, flush=True)
    print("== run", file=sys.stderr, flush=True)
    print("== exit", main(argv), file=sys.stderr, flush=True)
"""


def test_a_corrupt_image_is_named_or_skipped(tmp_path, folder_with_a_bad_file):
    root, bad = folder_with_a_bad_file  # held out too: evaluation reads every file
    # The command's part: its exit status, its one line naming the file, the flag recorded. One
    # replica (the skipping itself: tests/test_sources_image_folder.py, tests/test_windows.py).
    common = ["train", "--data", str(root), "--eval-data", str(root), "--image-size", "8",
              "--batch-size", "4", *SHORT, "--replicas", "1"]  # fmt: skip
    # Not in this process: a replica that fails aborts the process's collectives, and
    # TensorFlow needs a new process after that (later tests here would inherit the abort).
    # One process for both runs, the failing one last: the exit statuses are main()'s.
    runs = [[*common, "--on-bad-file", "skip", "--run-dir", str(tmp_path / "r2")],
            [*common, "--run-dir", str(tmp_path / "r1")]]  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-c", SKIP_THEN_FAIL, json.dumps(runs)], capture_output=True,
        text=True, env=ENV, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    _, skipped_out, failed_out = proc.stdout.split("== run\n")
    _, skipped_err, failed_err = proc.stderr.split("== run\n")
    assert skipped_err.rstrip().endswith("== exit 0"), skipped_err[-3000:]
    out = skipped_out + skipped_err
    reports = [ln for ln in out.splitlines() if "ImageFolderSource: 1 of 12 files skipped" in ln]
    assert reports and all(str(bad) in ln for ln in reports)  # training's or held-out's
    assert json.loads((tmp_path / "r2" / "config.json").read_text())["on_bad_file"] == "skip"
    assert failed_err.rstrip().endswith("== exit 1"), failed_err[-3000:]
    line = [ln for ln in failed_err.splitlines() if ln.startswith("tfdp: error:")][-1]
    assert str(bad) in line and "truncated or corrupt PNG" in line
    assert "Graph execution error" not in line
    assert "ImageFolderSource: 1 of" not in failed_out + failed_err  # the error run skips none


def test_meaningful_line_of_real_tensorflow_errors(folder_with_a_bad_file):
    import tensorflow as tf

    from tfdp.cli.messages import user_message
    from tfdp.sources import ImageFolderSource

    root, bad = folder_with_a_bad_file
    src = ImageFolderSource(root)
    ds = tf.data.Dataset.range(src.num_examples).map(src.load)

    @tf.function
    def read_all() -> tf.Tensor:
        total = tf.constant(0, tf.int64)
        for image, _ in ds:
            total += tf.reduce_sum(tf.cast(image, tf.int64))
        return total

    with pytest.raises(tf.errors.InvalidArgumentError) as err:
        read_all()
    assert err.value.message.startswith("Graph execution error")  # what was shown before
    assert user_message(err.value) == (
        f"InvalidArgumentError: ImageFolderSource: cannot decode image {bad}: truncated or "
        "corrupt PNG (no IEND chunk)"
    )

    @tf.function
    def loss(labels: tf.Tensor) -> tf.Tensor:
        return tf.nn.sparse_softmax_cross_entropy_with_logits(labels, tf.zeros([3, 4]))

    with pytest.raises(tf.errors.InvalidArgumentError) as err:
        loss(tf.constant([1, -1, 2]))
    # The kernel's own words: "Received a label value of -1 ..." or, with op determinism on
    # (an earlier test in this process may have set it), "indices[1] = -1 is not in [0, 4)".
    message = user_message(err.value)
    assert "Graph execution error" not in message and "Detected at node" not in message
    assert "-1" in message and "[0, 4)" in message, message


def test_meaningful_line_names_the_peer():
    """The text TensorFlow 2.21 gave worker 0 when worker 1 was killed (captured)."""
    from tfdp.cli.messages import meaningful_line

    text = (
        "Graph execution error:\n\nDetected at node CollectiveReduceV2 defined at (most recent "
        "call last):\n<stack traces unavailable>\nCollective ops is aborted by: recvmsg:"
        "Connection reset by peer\nAdditional GRPC error information from remote target "
        "/job:worker/replica:0/task:1 while calling /tensorflow.WorkerService/RecvBuf:\n"
        ':UNKNOWN:Error received from peer  {grpc_status:14, grpc_message:"recvmsg:Connection '
        'reset by peer"}\nThe error could be from a previous operation. Restart your program '
        "to reset.\n\t [[{{node CollectiveReduceV2}}]] [Op:__inference_agree_2011]"
    )
    assert meaningful_line(text) == (
        "Collective ops is aborted by: recvmsg:Connection reset by peer "
        "(from /job:worker/replica:0/task:1)"
    )


# -- small ones ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--image-size", "-4"], "--image-size: must be an integer >= 1, got -4"),
        (["--image-size", "0"], "--image-size: must be an integer >= 1, got 0"),
        (["--lr", "nan"], "--lr: must be a finite number > 0, got nan"),
        (["--lr", "inf"], "--lr: must be a finite number > 0, got inf"),
        (["--lr", "0"], "--lr: must be a finite number > 0"),
        (["--epochs", "0"], "--epochs: must be an integer >= 1"),
        (["--batch-size", "-8"], "--batch-size: must be an integer >= 1"),
        (["--replicas", "0"], "--replicas: must be an integer >= 1"),
        (["--steps-per-call", "0"], "--steps-per-call: must be an integer >= 1"),
        (["--checkpoint-every", "0"], "--checkpoint-every: must be an integer >= 1"),
        (["--num-classes", "0"], "--num-classes: must be an integer >= 1"),
        (["--eval-fraction", "1"], "--eval-fraction: must be in (0, 1)"),
        (["--repeats", "0.5"], "--repeats: must be a finite number >= 1"),
        (["--seed", "-1"], "--seed: must be an integer >= 0"),
        (["--weight-decay", "-0.1"], "--weight-decay: must be a finite number >= 0"),
        (["--selected-round", "-2"], "--selected-round: must be an integer >= 0"),
        (["--on-bad-file", "ignore"], "must be one of ['error', 'skip']"),
        (
            ["--gradient-compression", "fp16", "--mixed-precision", "mixed_float16"],
            "--gradient-compression: fp16 cannot be combined with --mixed-precision mixed_float16",
        ),
        (["--aa", "rand-m9-mstd0.5-foo"], "--aa: 'rand-m9-mstd0.5-foo': unknown section 'foo'"),
        (["--aa", "v0"], "--aa: 'v0': only timm's RandAugment strings are supported"),
        (["--aa", "rand-m15"], "magnitude 15 (section 'm15') is above its bound 10"),
        (["--aa", "rand-m9-n0"], "section 'n0': n (ops per image) must be >= 1"),
        (["--reprob", "1.5"], "--reprob: must be a number in [0, 1], got 1.5"),
        (["--reprob", "-0.25"], "--reprob: must be a number in [0, 1], got -0.25"),
        (["--remode", "zeros"], "must be one of ['pixel', 'rand', 'const']"),
        (["--mixup", "-0.8"], "--mixup: must be a finite number >= 0"),
        (["--cutmix", "-1"], "--cutmix: must be a finite number >= 0"),
        (["--mixup", "0.8", "--mixup-prob", "1.2"], "--mixup-prob: must be a number in [0, 1]"),
        (["--mixup-mode", "half"], "must be one of ['batch', 'pair', 'elem'], got 'half'"),
        (["--smoothing", "1"], "--smoothing: must be in [0, 1), got 1.0"),
        (["--smoothing", "-0.1"], "--smoothing: must be in [0, 1), got -0.1"),
    ],
)
def test_bad_numbers_are_refused_before_anything_runs(flags, message, capsys, tmp_path):
    assert main(["train", *flags, "--run-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and "in user code" not in err
    assert not (tmp_path / "r").exists()


def test_config_files_that_are_not_text_or_not_valid_are_named(tmp_path, capsys):
    binary = tmp_path / "b.toml"
    binary.write_bytes(bytes(range(256)))
    broken = tmp_path / "c.toml"
    broken.write_text("epochs = \n")
    for path, phrase in ((binary, "is not a text file"), (broken, "could not be parsed")):
        assert main(["train", "--config", str(path)]) == 2
        err = capsys.readouterr().err
        assert f"config file {str(path)!r}" in err and phrase in err, err


def test_equal_size_folder_is_not_said_to_vary_and_big_batches_name_the_flag(tmp_path):
    from tfdp.cli.convert import convert_data
    from tfdp.recipe import TrainConfig, build_data, check_one_step

    convert_data("digits", tmp_path / "folder", to="folder", progress=False)
    with pytest.raises(ValueError) as err:
        build_data(TrainConfig(data=str(tmp_path / "folder")))
    assert "varying" not in str(err.value)
    assert "give --image-size S" in str(err.value) and "8x8" in str(err.value)
    small = tmp_path / "small.npz"
    np.savez(small, images=np.zeros((30, 4, 4), np.uint8), labels=np.arange(30) % 2)
    cfg = TrainConfig(data=str(tmp_path / "small.npz"), batch_size=512)
    with pytest.raises(ValueError) as err:
        check_one_step(cfg, build_data(cfg), 2)
    assert "batch_size: 512 is more than one epoch holds" in str(err.value)
    assert "at most 28" in str(err.value) and "drop_remainder" not in str(err.value)


# -- data checks and TFRecord counts, as the CLI and the stream meet them -----------------------


def _npz(path: Path, labels=None) -> str:
    images = np.random.default_rng(0).integers(0, 256, (30, 6, 6, 1), dtype=np.uint8)
    np.savez(path, images=images, labels=np.arange(30) % 3 if labels is None else labels)
    return str(path)


def _shards(tmp: Path, n: int) -> Path:
    from tfdp.cli.convert import convert_data

    convert_data(_npz(tmp / "src.npz"), tmp / "shards", shards=n, progress=False)
    return tmp / "shards"


def test_float_labels_are_refused_and_one_class_is_warned_about(tmp_path, capsys):
    floats = _npz(tmp_path / "f.npz", labels=np.arange(30) % 3 + 0.5)
    argv = ["train", "--data", floats, "--epochs", "1", *HERE, "--run-dir", str(tmp_path / "r1")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "f.npz (key 'labels'): labels must be integer class ids; 30 are not" in err
    assert not (tmp_path / "r1").exists()  # refused before anything was written
    from tfdp.recipe import TrainConfig, build_data

    single = _npz(tmp_path / "o.npz", labels=np.zeros(30, int))
    one = build_data(TrainConfig(data=single))
    assert any(n.startswith("warning: ") and "a single class" in n for n in one.notes)
    argv = ["train", "--data", single, "--mixup", "0.8", "--batch-size", "8", *HERE, "--run-dir",
            str(tmp_path / "r2")]  # fmt: skip
    assert main(argv) == 2  # soft targets need classes: refused before a step, not a bug
    err = capsys.readouterr().err
    assert "--mixup: mixes class labels into soft targets (as --cutmix does)" in err, err
    assert "at least 2 classes, and this one has 1" in err and "Traceback" not in err


def test_stream_checks_counts_as_it_reads(tmp_path):
    """An epoch of a short shard used to end early, silently, so epochs drifted."""
    import tensorflow as tf

    from tfdp.input import DistributedInput
    from tfdp.sources import TFRecordSource

    shards = _shards(tmp_path, n=2)
    src = TFRecordSource(str(shards / "data.manifest.json"), shuffle_buffer=0)
    inp = DistributedInput(None, src, sampler="distributed", batch_size=5, drop_remainder=False)
    assert sum(1 for _ in inp.epoch(0)) == inp.steps_per_epoch == 6
    short = sorted(shards.glob("*.tfrecord"))[0]
    rewrite_shard(short, 4)
    with pytest.raises(tf.errors.FailedPreconditionError, match="expected to contain 15 elements"):
        sum(1 for _ in inp.epoch(0))
    assert src.count_problems() == [
        f"{short} holds 4 readable records, not the 15 listed for it (the file is truncated or "
        "corrupt after record 4, or was rewritten after its manifest)"
    ]


def test_data_convert_output_is_only_what_was_written(tmp_path, capsys):
    """The old converter printed the manifest's total even when it wrote fewer examples."""
    shards = _shards(tmp_path, n=4)
    rewrite_shard(sorted(shards.glob("*.tfrecord"))[0], 2)
    assert main(["data", "convert", str(shards), str(tmp_path / "x.npz"), "--no-progress"]) == 2
    out, err = capsys.readouterr()
    assert "wrote" not in out and not (tmp_path / "x.npz").exists()
    assert "data-00000-of-00004.tfrecord holds 2 readable records, not the 8" in err
