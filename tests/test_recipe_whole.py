"""DeiT's recipe on the command line as one run -- RA, RandAugment, erasing, Mixup / CutMix,
smoothing, EMA, accumulation, clipping: interrupted by a real SIGINT mid-epoch and resumed, it
ends with the uninterrupted run's weights and EMA weights, bit for bit (one small whole run: the
recipe's parts are tested apart in test_recipe_optim.py, test_recipe_models.py and
test_recipe_augment.py).
"""

from __future__ import annotations

import json
import os
import signal

import numpy as np

from tfdp.cli.train import train
from tfdp.recipe import TrainConfig

RECIPE = dict(
    epochs=1,
    replicas=4,  # the test session's logical devices
    deterministic=True,
    optimizer="adamw",
    weight_decay=0.05,
    lr=2e-3,
    warmup_epochs=0,
    min_lr=1e-5,
    sched_on_updates=True,  # (DeiT: per epoch; one epoch here)
    smoothing=0.1,  # carried by Mixup's soft targets
    aa="rand-m9-mstd0.5-inc1",
    reprob=0.25,
    mixup=0.8,
    cutmix=1.0,
    clip_grad=1.0,
    accum_steps=2,
    model_ema=True,
    model_ema_decay=0.9,
    steps_per_call=1,
    progress=False,
    log_every=0,
)


def _weights(path):
    import keras

    return [np.asarray(w) for w in keras.models.load_model(path, compile=False).get_weights()]


def _digits_npz(path):
    """569 of the digits as float pixels in [0, 1]: 57 held out (--eval-fraction 0.1), 512 to
    train on, which make 8 batches of 64 and 4 optimizer steps per epoch (a third of the
    bundled digits' steps and per-sample augmentations: the run's cost is mostly its three
    starts)."""
    from tfdp.recipe.digits import load_digits

    (x, y), _ = load_digits()
    np.savez(path, x=x[:569].astype("float32") / 16, y=y[:569])
    return str(path)


def test_the_whole_recipe_stopped_by_sigint_and_resumed_is_the_uninterrupted_run(tmp_path):
    data = _digits_npz(tmp_path / "digits.npz")
    whole = tmp_path / "whole"
    status, done = train(TrainConfig(**RECIPE, data=data, run_dir=str(whole)))
    assert status == 0

    def sigint_at_step_2(state):
        if state.global_step == 2:
            os.kill(os.getpid(), signal.SIGINT)  # the handler asks for a checkpoint and a stop

    cut = tmp_path / "cut"
    status, stopped = train(
        TrainConfig(**RECIPE, data=data, run_dir=str(cut)), on_step=sigint_at_step_2
    )
    assert (status, stopped["stop_reason"], stopped["epoch"]) == (130, "SIGINT", 0)
    assert 0 < stopped["step"] < 4  # mid-epoch: 8 batches make 4 optimizer steps
    assert not (cut / "model.keras").exists()
    status, resumed = train(TrainConfig(resume=True, run_dir=str(cut)), given=frozenset())
    assert status == 0 and resumed["global_step"] == done["global_step"] == 4

    assert resumed["weights_sha256"] == done["weights_sha256"]
    for name in ("model.keras", "model_ema.keras", "model_best.keras"):
        for a, b in zip(_weights(whole / name), _weights(cut / name), strict=True):
            np.testing.assert_array_equal(a, b, err_msg=name)
    ema, model = _weights(whole / "model_ema.keras"), _weights(whole / "model.keras")
    assert any(not np.array_equal(a, b) for a, b in zip(ema, model, strict=True))
    lines = [json.loads(x) for x in (whole / "metrics.jsonl").read_text().splitlines()]
    last = [x for x in lines if "val_ema_loss" in x][-1]
    assert (
        last["val_ema_sparse_categorical_accuracy"]
        == resumed["val_ema_sparse_categorical_accuracy"]
    )
    assert {"val_top5", "soft_target_accuracy"} <= set(last) and "top5" not in last
    assert json.loads((cut / "config.json").read_text())["model_ema"] is True
