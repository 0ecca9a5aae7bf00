"""DeiT's recipe on the command line as one run, stopped by a real SIGINT mid-epoch and resumed:
it ends with the uninterrupted run's weights, EMA weights and best model, bit for bit.

Two runs of the recipe, each the three runs (uninterrupted, stopped, resumed) in one process
(tests/workers/recipe_whole.py), and each a small whole: the recipe's parts are tested apart in
test_recipe_optim.py, test_recipe_models.py and test_recipe_augment.py; an (id, copy)'s
augmentation at 1 and 3 replicas in test_deit_augment.py.

* The digits: RA, RandAugment, erasing, Mixup / CutMix, smoothing, EMA, accumulation, clipping,
  on 2 replicas and a dense model: two replicas meet every part that a resume must restore per
  replica (each rank's place in the RA sampler's epoch, the per-sample seeds, Mixup on each
  replica's batch, the all-reduced step), and a dense model on 8x8 digits gives the fewest ops
  to trace.
* DeiT itself (issue 35): examples/deit.toml's recipe on DeiT-Ti distilled with drop path 0.1
  and hard distillation from a small CNN teacher, on a JPEG folder at 32x32, one replica (a
  12-block ViT costs 30-60 s to trace per run; the per-replica parts are the digits run's, and
  drop path's draws per replica are tests/test_models.py's). The same process also does what
  the DeiT commands must refuse after TensorFlow loads (a resume with other teacher weights, a
  teacher of another class count, a --finetune checkpoint that does not fit) and
  `tfdp evaluate` of the distilled run: the end-to-end test of the DeiT commands.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from photos import write_folder

WORKER = Path(__file__).resolve().parent / "workers" / "recipe_whole.py"
STOP_AT = 3  # global step: 2 optimizer steps an epoch (both recipes), so epoch 1's first


def _weights(path: Path) -> dict[str, np.ndarray]:
    """Every weight a ``.keras`` file holds, by its path in the file (read without building
    the model: a ViT takes seconds to build)."""
    import h5py

    with zipfile.ZipFile(path) as archive:
        data = io.BytesIO(archive.read("model.weights.h5"))
    out: dict[str, np.ndarray] = {}
    with h5py.File(data, "r") as f:
        f.visititems(
            lambda name, x: out.update({name: x[()]}) if isinstance(x, h5py.Dataset) else None
        )
    return out


def _digits_npz(path):
    """80 of the digits as float pixels in [0, 1]: 16 held out (--eval-fraction 0.2), 64 to
    train on, which make 4 batches of 16 and 2 optimizer steps per epoch."""
    from tfdp.recipe.digits import load_digits

    (x, y), _ = load_digits()
    np.savez(path, x=x[:80].astype("float32") / 16, y=y[:80])
    return str(path)


def _epoch_lines(run: Path) -> list[dict]:
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    # The step's own scalars (grad_norm), as samples/s, are means over the steps this process
    # ran: an epoch's record after a resume covers the steps since (train/epochs.py).
    out = ("time", "samples_per_s", "grad_norm")
    return [{k: v for k, v in x.items() if k not in out} for x in lines]


def _three_runs(tmp_path: Path, recipe: str, data: str, replicas: int):
    """The worker's RESULT and its output (stdout + stderr)."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    proc = subprocess.run(
        [sys.executable, str(WORKER), recipe, data, str(tmp_path), str(replicas), str(STOP_AT)],
        capture_output=True, text=True, env=env, timeout=900, check=False,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    return json.loads(line[len("RESULT ") :]), proc


def _assert_resumed_is_the_whole_run(tmp_path: Path, results: dict, out: str, steps: int) -> dict:
    """The stopped run stopped mid-epoch, after an epoch's end, and resumed to the uninterrupted
    run's weights, EMA weights, best model and epoch records; returns the last epoch's record."""
    (status, done), (cut_status, stopped), (resumed_status, resumed) = (
        results[k] for k in ("whole", "cut", "resumed")
    )
    assert status == 0 and done["global_step"] == steps
    assert (cut_status, stopped["stop_reason"], stopped["global_step"]) == (130, "SIGINT", STOP_AT)
    assert (stopped["epoch"], stopped["step"]) == (1, 1)  # mid-epoch, after an epoch's end
    assert "SIGINT: saving a checkpoint and stopping" in out
    assert not results["cut_saved_a_model"]
    assert resumed_status == 0 and resumed["global_step"] == steps
    assert not resumed["stopped_early"]

    whole, cut = tmp_path / "whole", tmp_path / "cut"
    assert resumed["weights_sha256"] == done["weights_sha256"]
    for name in ("model.keras", "model_ema.keras", "model_best.keras"):
        want, got = _weights(whole / name), _weights(cut / name)
        assert list(want) == list(got) and want, name
        for key, value in want.items():
            np.testing.assert_array_equal(got[key], value, err_msg=f"{name}: {key}")
    best = json.loads((whole / "model_best.json").read_text())
    assert json.loads((cut / "model_best.json").read_text()) == best
    ema, model = _weights(whole / "model_ema.keras"), _weights(whole / "model.keras")
    assert list(ema) == list(model) and any(not np.array_equal(ema[k], model[k]) for k in ema)
    # Every epoch's record: the held-out metrics of both weights (bit-identical weights) and the
    # rate exactly; the training loss's mean was summed on across the stop (float rounding).
    want, got = _epoch_lines(whole), _epoch_lines(cut)
    assert [x["epoch"] for x in got] == list(range(len(want)))
    for a, b in zip(want, got, strict=True):
        assert b.pop("loss") == pytest.approx(a.pop("loss"), rel=1e-6)
        assert a == b
    last = want[-1]
    assert (
        last["val_ema_sparse_categorical_accuracy"]
        == resumed["val_ema_sparse_categorical_accuracy"]
    )
    assert json.loads((cut / "config.json").read_text())["model_ema"] is True
    return last


def test_the_whole_recipe_stopped_by_sigint_and_resumed_is_the_uninterrupted_run(tmp_path):
    data = _digits_npz(tmp_path / "digits.npz")
    results, proc = _three_runs(tmp_path, "digits", data, 2)
    out = proc.stdout + proc.stderr
    # 64 examples, 4 micro-batches of 16 = 2 optimizer steps an epoch, 3 epochs
    last = _assert_resumed_is_the_whole_run(tmp_path, results, out, 6)
    assert {"val_top5", "soft_target_accuracy"} <= set(last) and "top5" not in last


def test_deit_tiny_distilled_whole_recipe_resumes_bit_identically_and_its_commands_refuse(
    tmp_path,
):
    """examples/deit.toml on `--model deit_tiny_distilled_patch16_224 --drop-path 0.1
    --distillation-type hard --teacher-model teacher.keras` (RA, RandAugment, erasing, Mixup /
    CutMix, smoothing, EMA, DeiT's rate rule and per-epoch cosine), 12 JPEGs of 3 classes at
    32x32 (9 to train on: 2 steps of 4 an epoch, 2 epochs): stopped by SIGINT in epoch 1 and
    resumed, it is the uninterrupted run bit for bit. The run records its teacher and saves the
    student (two heads averaged), which `tfdp evaluate` reads back; a resume with other teacher
    weights at the teacher's path (before the resume that succeeds), a teacher of another class
    count and a --finetune checkpoint whose keys do not fit are refused, naming the flag and
    the key."""
    data = str(write_folder(tmp_path / "photos", 12, classes=3, sizes=((36, 40),), seed=2))
    results, proc = _three_runs(tmp_path, "deit", data, 1)
    out = proc.stdout + proc.stderr
    _assert_resumed_is_the_whole_run(tmp_path, results, out, 4)
    assert results["codes"] == {
        "other_teacher": 2, "evaluate": 0, "five_classes": 2, "bad_finetune": 2,
    }, out[-3000:]  # fmt: skip

    whole = tmp_path / "whole"
    cfg = json.loads((tmp_path / "cut" / "config.json").read_text())
    assert (cfg["model"], cfg["drop_path"], cfg["distillation_type"]) == (
        "deit_tiny_distilled_patch16_224", 0.1, "hard",
    )  # fmt: skip
    assert cfg["aa"] == "rand-m9-mstd0.5-inc1" and cfg["mixup"] == 0.8 and cfg["reprob"] == 0.25
    record = cfg["history"][0]["teacher"]
    assert record["model"] == "teacher.keras" and len(record["sha256"]) == 16
    assert cfg["history"][1]["event"] == "resume" and len(cfg["history"]) == 2  # refused: none
    assert f"distilling (hard, alpha 0.5) from teacher 'teacher.keras' (weights sha256 " \
           f"{record['sha256']})" in proc.stdout  # fmt: skip
    errors = [x for x in proc.stderr.splitlines() if x.startswith("tfdp: error: ")]
    other, five, finetune = errors
    assert other.startswith("tfdp: error: the teacher now (--teacher-model 'teacher.keras', "
                            "weights sha256 ")  # fmt: skip
    assert f"is not the run's (--teacher-model 'teacher.keras', weights sha256 " \
           f"{record['sha256']})" in other  # fmt: skip
    assert "--teacher-model: 'teacher5.keras' outputs (None, 5), the data has 3 classes" in five
    assert ("--finetune 'bad.safetensors': key 'blocks.3.attn.proj.weight' has shape (192, 96), "
            "the model needs (192, 192)") in finetune  # fmt: skip
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "five").exists() and not (tmp_path / "ft").exists()
    from tfdp.models import load_model

    student = load_model(whole / "model.keras")
    assert student.name == "deit_tiny_distilled_patch16_224"
    assert student.output_shape == (None, 3) and student.get_layer("heads").num_classes == 3
    stdout = proc.stdout
    evaluated = json.loads(stdout[stdout.index("{\n") : stdout.index("\n}") + 2])
    assert evaluated["sparse_categorical_accuracy"] == pytest.approx(
        _epoch_lines(whole)[-1]["val_sparse_categorical_accuracy"]
    )
