"""DeiT's held-out options in the training job: normalisation, the crop ratio, the rate rule.

``--mean`` / ``--std`` (timm's; ImageNet's by default for the DeiT / ViT models, none for the
others), ``--eval-crop-ratio`` (DeiT's), ``--lr-rule`` (DeiT's ``lr x batch / 512``, timm's
``--lr-base`` rule): their values in the pipelines, config.json and resume, the rate a run
trains with and says, ``tfdp evaluate`` using the run's transform, bad values refused before
TensorFlow loads, and the examples' DeiT configs. The transform's pixels against timm's:
tests/test_eval_transform.py.

CPU cost: about 12 s (one 1-epoch run on 16 small JPEGs, its resume and three evaluations, one
Python process for the refusals, the rest pure Python or a few small batches).
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from photos import write_folder
from tfdp.errors import ConfigError
from tfdp.recipe import TrainConfig, build_augment, check_config, load_config_file
from tfdp.recipe.augment_options import IMAGENET_MEAN, IMAGENET_STD, default_normalization
from tfdp.recipe.lr_rule import learning_rate
from tfdp.recipe.resume import read_run_config, resolve_resume, write_run_config

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------ normalisation


@pytest.mark.parametrize(
    ("model", "normalised"),
    [
        ("deit_tiny_patch16_224", True),
        ("deit_base_distilled_patch16_224", True),
        ("vit_small_patch16_224", "inception"),
        ("cnn", False),
        ("resnet", False),
        ("resnet50", False),
        ("my_models:deit_small", False),
    ],
)
def test_the_default_normalisation_follows_the_model_name(model, normalised):
    want = (IMAGENET_MEAN, IMAGENET_STD) if normalised else ((0.0,), (1.0,))
    if normalised == "inception":  # timm's vit_* configuration: its weights expect it
        want = ((0.5,) * 3, (0.5,) * 3)
    assert default_normalization(model) == want
    cfg = TrainConfig(model=model)
    assert (cfg.mean, cfg.std) == want  # resolved when the options are made
    assert TrainConfig(model=model, mean=[0.5], std=(0.25, 0.5, 1)).mean == (0.5,)


def test_normalisation_and_crop_ratio_are_recorded_and_are_the_runs_identity(tmp_path):
    run = str(tmp_path)
    cfg = TrainConfig(model="deit_tiny_patch16_224", eval_crop_ratio=0.9, lr_rule="deit")
    write_run_config(run, cfg, [])
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["mean"] == list(IMAGENET_MEAN) and saved["std"] == list(IMAGENET_STD)
    assert saved["eval_crop_ratio"] == 0.9
    options, _ = read_run_config(str(tmp_path / "config.json"))
    assert TrainConfig(**options) == cfg
    # A resume keeps them, refuses another, and may change the rate's rule (recorded).
    resumed = resolve_resume(run, TrainConfig(lr_rule="timm"), given={"lr_rule"})
    assert (resumed.config.mean, resumed.config.eval_crop_ratio) == (IMAGENET_MEAN, 0.9)
    assert resumed.changed == {"lr_rule": ("deit", "timm")}
    for name, value, message in (
        ("mean", [0.5], "--mean (the run has (0.485, 0.456, 0.406), now (0.5,))"),
        ("eval_crop_ratio", 1.0, "--eval-crop-ratio (the run has 0.9, now 1.0)"),
    ):
        with pytest.raises(ConfigError, match=re.escape(message)):
            resolve_resume(run, TrainConfig(**{name: value}), given={name})
    # A run from before the options (no such keys): its model's values, so a cnn stays as it was
    # (trained with SGD: a format-1 run of Keras's adam / adamw is not resumed at all).
    old = TrainConfig(optimizer="sgd").to_dict()
    old = {k: v for k, v in old.items() if k not in ("mean", "std")}
    old.pop("eval_crop_ratio")
    (tmp_path / "config.json").write_text(json.dumps(old))
    resumed = resolve_resume(run, TrainConfig(), given=set())
    assert (resumed.config.mean, resumed.config.std) == ((0.0,), (1.0,))
    assert resumed.config.eval_crop_ratio == 0.875


def _images(channels: int) -> np.ndarray:
    return np.random.default_rng(2).integers(0, 256, (3, 20, 26, channels)).astype(np.uint8)


@pytest.mark.parametrize("channels", [3, 1])
def test_training_and_held_out_images_are_normalised_alike(channels):
    """The pipelines' output is (x / 255 - mean) / std (grey images: the means' average)."""
    cfg = TrainConfig(data="x", image_size=12, model="deit_tiny_patch16_224", augment="none")
    images = _images(channels)
    mean, std = np.asarray(IMAGENET_MEAN), np.asarray(IMAGENET_STD)
    if channels == 1:
        mean, std = mean.mean(keepdims=True), std.mean(keepdims=True)
    seeds = tf.zeros([3, 2], tf.int64)
    batch = (tf.constant(images), tf.range(3))  # (images, labels), as the input hands them
    train, _ = build_augment(cfg, (12, 12, channels), 1 / 255, True)(batch, seeds)
    resized = tf.image.resize(tf.cast(images, tf.float32), [12, 12]).numpy()
    np.testing.assert_allclose(train.numpy(), (resized / 255 - mean) / std, atol=1e-5)
    cfg = TrainConfig(data="x", image_size=12, model="deit_tiny_patch16_224")  # resized-crop
    held_out = build_augment(cfg, (12, 12, channels), 1 / 255, False)
    crop = held_out.stages[0](tf.constant(images), seeds).numpy()
    got = held_out(tf.constant(images), seeds).numpy()
    np.testing.assert_allclose(got, (crop / 255 - mean) / std, atol=1e-5)
    plain = build_augment(TrainConfig(data="x", image_size=12), (12, 12, channels), 1 / 255, False)
    np.testing.assert_allclose(plain(tf.constant(images), seeds).numpy(), crop / 255, atol=1e-6)


def test_normalised_runs_erase_normalised_images_and_others_as_before():
    """timm erases after its Normalize: a 'const' box is 0 (the mean). Without normalisation
    the recipe erases in ImageNet's units and maps back: the box is the mean colour."""
    images = tf.constant(_images(3))
    seeds = tf.constant([[0, i] for i in range(3)], tf.int64)
    for model, fill in (("deit_small_patch16_224", (0.0, 0.0, 0.0)), ("cnn", IMAGENET_MEAN)):
        cfg = TrainConfig(data="x", model=model, augment="none", reprob=1.0, remode="const")
        out = build_augment(cfg, (20, 26, 3), 1 / 255, True)(images, seeds).numpy()
        erased = np.all(np.abs(out - np.asarray(fill)) < 1e-6, axis=-1)
        assert erased.mean() > 0.02, model  # a box in every image (1/50 to 1/3 of it)
        assert all(erased[i].any() for i in range(3)), model


def test_randaugment_fills_with_the_normalisations_mean_colour():
    """timm's create_transform: img_mean = round(255 * mean) of its mean."""
    from tfdp.recipe.augment_options import deit_stages

    aa = "rand-m9-mstd0.5-inc1"
    for mean, fill in (((0.5, 0.4, 0.3), (128.0, 102.0, 76.0)), (None, (124.0, 116.0, 104.0))):
        cfg = TrainConfig(model="deit_tiny_patch16_224", aa=aa, mean=mean)
        (rand_augment,) = [s for s in deit_stages(cfg, 3, 1 / 255, 10) if hasattr(s, "fill")]
        assert rand_augment.fill == fill
    cnn = deit_stages(TrainConfig(aa=aa), 3, 1 / 255, 10)  # no normalisation: ImageNet's colour
    assert [s.fill for s in cnn if hasattr(s, "fill")] == [(124.0, 116.0, 104.0)]


def test_a_normalisation_that_does_not_fit_the_channels_names_the_flag():
    from tfdp.recipe.augment_options import normalization

    with pytest.raises(ConfigError, match=r"mean: 3 values, and the images have 4 channels"):
        normalization(TrainConfig(mean=[0.5, 0.5, 0.5]), 4)
    assert normalization(TrainConfig(mean=[0.5], std=[0.5]), 4) == ((0.5,) * 4, (0.5,) * 4)
    assert normalization(TrainConfig(model="deit_tiny_patch16_224", mean=[0], std=[1]), 3) is None


# ------------------------------------------------------------------ the learning-rate rule


@settings(max_examples=100, deadline=None)
@given(
    lr=st.floats(1e-6, 1.0),
    per_process=st.integers(1, 512),
    world=st.integers(1, 64),
    accum=st.integers(1, 8),
    base_size=st.sampled_from([None, 128, 256, 4096]),
    scale=st.sampled_from([None, "linear", "sqrt"]),
    optimizer=st.sampled_from(["adam", "adamw", "sgd", "nesterov", "momentum", "lion"]),
)
def test_the_rules_are_deits_and_timms(lr, per_process, world, accum, base_size, scale, optimizer):
    common = {"lr": lr, "batch_size": per_process * world, "optimizer": optimizer}
    # DeiT's main.py (no accumulation): linear_scaled_lr = args.lr * args.batch_size *
    # utils.get_world_size() / 512.0
    deit = learning_rate(TrainConfig(lr_rule="deit", **common))
    assert deit == pytest.approx(lr * per_process * world / 512.0, rel=1e-12)
    # timm's train.py, --lr-base given as tfdp's --lr
    global_batch_size = per_process * world * accum
    batch_ratio = global_batch_size / (base_size or 256)
    lr_base_scale = scale
    if not lr_base_scale:
        on = optimizer.lower()
        lr_base_scale = "sqrt" if any([o in on for o in ("ada", "lamb")]) else "linear"
    if lr_base_scale == "sqrt":
        batch_ratio = batch_ratio**0.5
    cfg = TrainConfig(lr_rule="timm", accum_steps=accum, lr_base_size=base_size,
                      lr_base_scale=scale, **common)  # fmt: skip
    assert learning_rate(cfg) == pytest.approx(lr * batch_ratio, rel=1e-12)
    assert learning_rate(TrainConfig(**common)) == lr  # none: as given


SIZES = ((40, 52), (52, 40), (36, 48), (48, 36))


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("deit_options")
    write_folder(root / "train", 16, classes=2, sizes=SIZES, seed=1)
    write_folder(root / "val", 6, classes=2, sizes=SIZES, seed=2)
    return root


def _evaluate(main, run: Path, capsys) -> dict:
    assert main(["evaluate", str(run)]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_run_trains_with_its_rule_and_evaluate_uses_its_held_out_transform(
    folders, tmp_path, monkeypatch, mirrored_of, capsys
):
    """`tfdp train --lr-rule deit --eval-crop-ratio 0.75 --mean ... --std ...`: the start line
    says the rate, config.json records it and the transform, the optimizer ran at that rate
    (a constant schedule: the epoch's rate); a resume with another --lr records the new rate;
    `tfdp evaluate` gives the run's own held-out metrics, and other ones when config.json's
    crop ratio or mean is changed."""
    from tfdp.cli import main
    from two_replicas import answer_two_replicas

    answered = answer_two_replicas(monkeypatch, mirrored_of)
    run = tmp_path / "run"
    args = ["train", "--data", str(folders / "train"), "--eval-data", str(folders / "val"),
            "--image-size", "16", "--epochs", "1", "--batch-size", "8", "--lr", "0.004",
            "--lr-rule", "deit", "--sched", "constant", "--eval-crop-ratio", "0.75",
            "--mean", "0.5", "0.4", "0.3", "--std", "0.2", "0.25", "0.3", "--run-dir", str(run),
            "--no-progress", "--log-every", "0"]  # fmt: skip
    assert main(args) == 0, capsys.readouterr().err[-3000:]
    out = capsys.readouterr().out
    assert "lr 6.25e-05 (--lr 0.004 x 8 / 512: DeiT's rule)" in out
    assert "--mean 0.5 0.4 0.3 --std 0.2 0.25 0.3" in out
    config = json.loads((run / "config.json").read_text())
    assert config["history"][0]["learning_rate"] == 0.004 * 8 / 512
    assert (config["lr"], config["lr_rule"], config["eval_crop_ratio"]) == (0.004, "deit", 0.75)
    assert (config["mean"], config["std"]) == ([0.5, 0.4, 0.3], [0.2, 0.25, 0.3])
    last = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["lr"] == pytest.approx(6.25e-05, rel=1e-6)  # float32
    result = _evaluate(main, run, capsys)
    assert result["sparse_categorical_accuracy"] == last["val_sparse_categorical_accuracy"]
    assert result["loss"] == pytest.approx(last["val_loss"], rel=1e-5)
    # A resume may change the rate (recorded with the rule's rate; nothing left to train here).
    assert main(["train", "--resume", "--run-dir", str(run), "--lr", "0.008"]) == 0
    out = capsys.readouterr().out
    assert "--lr 0.008 (was 0.004) (lr 0.000125 (--lr 0.008 x 8 / 512: DeiT's rule))" in out
    config = json.loads((run / "config.json").read_text())
    assert config["history"][-1]["learning_rate"] == 0.008 * 8 / 512
    for key, value in (("eval_crop_ratio", 1.0), ("mean", [0.3, 0.4, 0.5])):
        changed = {**config, key: value}
        (run / "config.json").write_text(json.dumps(changed))
        other = _evaluate(main, run, capsys)
        assert abs(other["loss"] - result["loss"]) > 1e-4, key
    assert len(answered) == 5  # the run, its resume, three evaluations: this session's replicas


# ------------------------------------------------------------------ bad input

REFUSALS = """
import json, sys
from tfdp.cli import main
results = []
for argv in json.loads(sys.argv[1]):
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse: a bad choice
        code = exc.code
    results.append(code)
print(json.dumps([results, "tensorflow" in sys.modules]))
"""

BAD = [
    (["--eval-crop-ratio", "0"], "--eval-crop-ratio: must be in (0, 1]"),
    (["--eval-crop-ratio", "1.5"], "--eval-crop-ratio: must be in (0, 1]"),
    (["--eval-crop-ratio", "nan"], "--eval-crop-ratio: must be in (0, 1]"),
    (["--eval-crop-ratio", "0.9"], "--eval-crop-ratio: 0.9 crops nothing here"),
    (["--mean", "0.5", "0.5"], "--mean: 0.5 0.5: give 1 value (every channel) or 3"),
    (["--std", "0.2", "0.2", "0.2", "0.2"], "--std: 0.2 0.2 0.2 0.2: give 1 value"),
    (["--mean", "123.68", "116.78", "103.94"], "--mean: 123.68 116.78 103.94: every value must"),
    (["--std", "0"], "--std: 0: every value must be in (0, 1]"),
    (["--lr-rule", "linear"], "must be one of ['none', 'deit', 'timm'], got 'linear'"),
    (["--lr-base-size", "128"], "--lr-base-size: belongs to --lr-rule timm"),
    (["--lr-rule", "deit", "--lr-base-scale", "sqrt"], "--lr-base-scale: belongs to --lr-rule"),
    (["--lr-rule", "timm", "--lr-base-size", "0"], "--lr-base-size: must be an integer >= 1"),
]


def test_bad_values_are_refused_naming_the_flag_before_tensorflow_loads(tmp_path):
    (tmp_path / "bad.toml").write_text('mean = "imagenet"\n')
    cases = [*BAD, (["--config", str(tmp_path / "bad.toml")], "option 'mean' must be of type")]
    argvs = [["train", *flags, "--run-dir", str(tmp_path / "r")] for flags, _ in cases]
    proc = subprocess.run(
        [sys.executable, "-c", REFUSALS, json.dumps(argvs)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        check=False,
    )
    codes, tensorflow = json.loads(proc.stdout.splitlines()[-1])
    assert codes == [2] * len(cases) and not tensorflow, proc.stderr
    for _, message in cases:
        assert message in proc.stderr, (message, proc.stderr)
    assert "Traceback" not in proc.stderr and not (tmp_path / "r").exists()


# ------------------------------------------------------------------ the examples

#: DeiT-Ti's ImageNet training (DeiT's README: `--model deit_tiny_patch16_224 --batch-size 256`
#: on 4 GPUs; every other value main.py's default), in tfdp's names.
DEIT_TINY = {
    "model": "deit_tiny_patch16_224", "image_size": 224, "epochs": 300,
    "batch_size_per_replica": 256, "lr": 5e-4, "lr_rule": "deit", "optimizer": "adamw",
    "weight_decay": 0.05, "schedule": "cosine", "warmup_epochs": 5, "warmup_lr": 1e-6,
    "min_lr": 1e-5, "sched_on_updates": False, "smoothing": 0.1, "model_ema": True,
    "model_ema_decay": 0.99996, "sampler": "repeat-aug", "repeats": 3.0, "selected_round": 256,
    "aa": "rand-m9-mstd0.5-inc1", "color_jitter": 0.3, "train_interpolation": "bicubic",
    "reprob": 0.25, "remode": "pixel", "recount": 1, "mixup": 0.8, "cutmix": 1.0,
    "mixup_prob": 1.0, "mixup_switch_prob": 0.5, "mixup_mode": "batch",
    "eval_crop_ratio": 0.875, "mean": IMAGENET_MEAN, "std": IMAGENET_STD,
    "mixed_precision": "mixed_float16", "drop_path": 0.1, "sched_one_epoch_late": True,
}  # fmt: skip


def _example(name: str, tmp_path: Path) -> dict:
    """An example config's options, through tfdp's loader (an unknown key is refused)."""
    return load_config_file(ROOT / "examples" / name)


def _checked(options: dict) -> None:
    """``check_config`` of the options (the model's name too)."""
    check_config(TrainConfig(**options))


def test_the_deit_tiny_imagenet_config_holds_deits_settings(tmp_path):
    options = _example("deit_tiny_imagenet.toml", tmp_path)
    _checked(options)
    cfg = TrainConfig(**options)
    assert {k: getattr(cfg, k) for k in DEIT_TINY} == DEIT_TINY
    # 4 GPUs x 256: DeiT's rate 5e-4 x 1024 / 512
    assert learning_rate(TrainConfig(**{**options, "batch_size": 1024})) == 1e-3


def test_the_deit_config_names_deits_model_and_rule(tmp_path):
    options = _example("deit.toml", tmp_path)
    _checked(options)
    assert options["model"] == "deit_tiny_patch16_224" and options["lr_rule"] == "deit"
    assert math.isclose(learning_rate(TrainConfig(**options)), options["lr"] * 64 / 512)
