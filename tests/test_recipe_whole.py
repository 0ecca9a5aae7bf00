"""DeiT's recipe on the command line as one run -- RA, RandAugment, erasing, Mixup / CutMix,
smoothing, EMA, accumulation, clipping: interrupted by a real SIGINT mid-epoch and resumed, it
ends with the uninterrupted run's weights, EMA weights and best model, bit for bit (one small
whole run: the recipe's parts are tested apart in test_recipe_optim.py, test_recipe_models.py
and test_recipe_augment.py; an (id, copy)'s augmentation at 1 and 3 replicas in
test_deit_augment.py).

The three runs share one process of 2 replicas (tests/workers/recipe_whole.py): two replicas
meet every part that a resume must restore per replica (each rank's place in the RA sampler's
epoch, the per-sample seeds, Mixup on each replica's batch, the all-reduced step), and a
dense model on 8x8 digits gives the fewest ops to trace.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

WORKER = Path(__file__).resolve().parent / "workers" / "recipe_whole.py"
STOP_AT = 3  # global step: 64 examples, 4 micro-batches of 16 = 2 optimizer steps an epoch


def _weights(path):
    import keras

    return [np.asarray(w) for w in keras.models.load_model(path, compile=False).get_weights()]


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


def test_the_whole_recipe_stopped_by_sigint_and_resumed_is_the_uninterrupted_run(tmp_path):
    data = _digits_npz(tmp_path / "digits.npz")
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    proc = subprocess.run(
        [sys.executable, str(WORKER), data, str(tmp_path), "2", str(STOP_AT)],
        capture_output=True, text=True, env=env, timeout=600, check=False,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    results = json.loads(line[len("RESULT ") :])
    (status, done), (cut_status, stopped), (resumed_status, resumed) = (
        results[k] for k in ("whole", "cut", "resumed")
    )
    assert status == 0 and done["global_step"] == 6
    assert (cut_status, stopped["stop_reason"], stopped["global_step"]) == (130, "SIGINT", STOP_AT)
    assert (stopped["epoch"], stopped["step"]) == (1, 1)  # mid-epoch, after an epoch's end
    assert "SIGINT: saving a checkpoint and stopping" in out
    assert not results["cut_saved_a_model"]
    assert resumed_status == 0 and resumed["global_step"] == 6 and not resumed["stopped_early"]

    whole, cut = tmp_path / "whole", tmp_path / "cut"
    assert resumed["weights_sha256"] == done["weights_sha256"]
    for name in ("model.keras", "model_ema.keras", "model_best.keras"):
        for a, b in zip(_weights(whole / name), _weights(cut / name), strict=True):
            np.testing.assert_array_equal(a, b, err_msg=name)
    best = json.loads((whole / "model_best.json").read_text())
    assert json.loads((cut / "model_best.json").read_text()) == best
    ema, model = _weights(whole / "model_ema.keras"), _weights(whole / "model.keras")
    assert any(not np.array_equal(a, b) for a, b in zip(ema, model, strict=True))
    # Every epoch's record: the held-out metrics of both weights (bit-identical weights) and the
    # rate exactly; the training loss's mean was summed on across the stop (float rounding).
    want, got = _epoch_lines(whole), _epoch_lines(cut)
    assert [x["epoch"] for x in got] == [0, 1, 2]
    for a, b in zip(want, got, strict=True):
        assert b.pop("loss") == pytest.approx(a.pop("loss"), rel=1e-6)
        assert a == b
    last = want[-1]
    assert (
        last["val_ema_sparse_categorical_accuracy"]
        == resumed["val_ema_sparse_categorical_accuracy"]
    )
    assert {"val_top5", "soft_target_accuracy"} <= set(last) and "top5" not in last
    assert json.loads((cut / "config.json").read_text())["model_ema"] is True
