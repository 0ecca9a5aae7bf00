"""DeiT's / timm's augmentation flags of ``tfdp train``: which stages they build, with which
parameters, in timm's order; the loss and metrics they choose; their checks, config-file keys,
aliases and resume policy. Small and cheap: nothing trains here (the whole recipe's run is
tests/test_recipe_whole.py; the stages' values against timm's, tests/test_timm_augment.py).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from tfdp.errors import ConfigError
from tfdp.recipe.augment_options import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    check_augment_options,
    deit_stages,
)
from tfdp.recipe.config import TrainConfig, check_config, load_config_file

DEIT = dict(
    aa="rand-m9-mstd0.5-inc1",
    color_jitter=0.3,
    reprob=0.25,
    remode="pixel",
    recount=1,
    mixup=0.8,
    cutmix=1.0,
    mixup_prob=1.0,
    mixup_switch_prob=0.5,
    mixup_mode="batch",
    smoothing=0.1,
)


def _names(compose):
    return [type(s).__name__ for s in compose.stages]


def test_without_the_flags_the_pipelines_are_the_ones_before_them():
    """Runs from before the flags keep their augmentation (stage list and so seeds), and their
    models' inputs in [0, 1] (no normalisation). The held-out images, which no seed touches,
    get DeiT's transform (tests/test_eval_transform.py): the centre crop resampled where
    torchvision's Resize + CenterCrop samples, not a whole-pixel window stretched."""
    from tfdp.recipe.data import build_augment

    digits = build_augment(TrainConfig(), (8, 8, 1), 1 / 16, True)
    assert _names(digits) == ["RandomShift", "ToFloat"] and digits.stages[1].scale == 1 / 16
    folder = TrainConfig(data="x", image_size=32)
    rrc = build_augment(folder, (32, 32, 3), 1 / 255, True)
    assert _names(rrc) == ["RandomResizedCrop", "RandomFlip", "ToFloat"]
    assert (rrc.stages[0].interpolation, rrc.stages[0].antialias) == ("bilinear", False)
    held_out = build_augment(folder, (32, 32, 3), 1 / 255, False)
    assert _names(held_out) == ["ResizeCenterCrop", "ToFloat"]
    assert (held_out.stages[0].crop_ratio, held_out.stages[0].interpolation) == (0.875, "bicubic")


def test_deits_flags_build_timms_stages_in_create_transforms_order():
    from tfdp.recipe.data import build_augment

    cfg = TrainConfig(data="x", image_size=32, train_interpolation="bicubic", **DEIT)
    aug = build_augment(cfg, (32, 32, 3), 1 / 255, True, num_classes=7)
    assert _names(aug) == ["RandomResizedCrop", "RandomFlip", "RandAugment", "ToFloat",
                           "Normalize", "RandomErasing", "Normalize", "Mixup"]  # fmt: skip
    rrc, _, ra, to_float, norm, erase, denorm, mix = aug.stages
    assert (rrc.interpolation, rrc.antialias) == ("bicubic", True)  # PIL's resize: antialiased
    spec = ra.spec
    assert (spec.magnitude, spec.magnitude_std, spec.increasing, spec.num_layers, spec.prob) == (
        9, 0.5, True, 2, 0.5)  # fmt: skip
    assert ra.interpolation == "bicubic"
    assert ra.fill == (124.0, 116.0, 104.0)  # timm: round(255 * IMAGENET_DEFAULT_MEAN)
    assert to_float.scale == 1 / 255  # uint8 pixels go to RandAugment as they are
    assert (norm.mean, norm.std) == (IMAGENET_MEAN, IMAGENET_STD)
    e = erase.spec
    assert (e.probability, e.mode, e.min_count, e.max_count) == (0.25, "pixel", 1, 1)
    assert (e.min_area, e.max_area, e.min_aspect) == (0.02, 1 / 3, 0.3)  # timm's defaults
    np.testing.assert_allclose(denorm.std, [1 / s for s in IMAGENET_STD])
    m = mix.spec
    assert (m.mixup_alpha, m.cutmix_alpha, m.prob, m.switch_prob, m.mode) == (
        0.8, 1.0, 1.0, 0.5, "batch")  # fmt: skip
    assert (m.label_smoothing, m.num_classes, m.correct_lam, m.cutmix_minmax) == (
        0.1, 7, True, None)  # fmt: skip


def test_colour_jitter_only_without_aa_and_randaugment_on_0_255_values():
    from tfdp.recipe.data import build_augment

    cfg = TrainConfig(color_jitter=0.3, reprob=0.5, remode="const", recount=3)
    aug = build_augment(cfg, (8, 8, 1), 1 / 16, True)
    assert _names(aug) == ["RandomShift", "ToFloat", "ColorJitter", "ToFloat", "Normalize",
                           "RandomErasing", "Normalize"]  # fmt: skip
    assert aug.stages[1].scale == 255 / 16  # the digits' 0..16 levels as 0..255 values
    assert aug.stages[2].spec.brightness_range == (0.7, 1.3)
    assert aug.stages[2].spec.hue_range == (0.0, 0.0)  # timm: (v, v, v), no hue
    assert (aug.stages[5].spec.mode, aug.stages[5].spec.max_count) == ("const", 3)
    mean, std = sum(IMAGENET_MEAN) / 3, sum(IMAGENET_STD) / 3  # one channel: the averages
    assert aug.stages[4].mean == (mean,) and aug.stages[4].std == (std,)
    with_aa = deit_stages(TrainConfig(aa="rand-m9-n3", color_jitter=0.3), 1, 1 / 16, None)
    assert [type(s).__name__ for s in with_aa] == ["ToFloat", "RandAugment", "ToFloat"]
    assert with_aa[1].fill == (float(round(255 * mean)),) and with_aa[1].spec.num_layers == 3


def test_the_pixels_reach_randaugment_as_0_255_and_the_model_as_0_1():
    import tensorflow as tf

    from tfdp.recipe.data import build_augment

    cfg = TrainConfig(aa="rand-m0-n1-p0")  # every op skipped: the values pass unchanged
    aug = build_augment(cfg, (8, 8, 1), 1 / 16, True)
    levels = np.arange(64.0).reshape(1, 8, 8, 1) % 17  # the digits' 0..16
    images = tf.constant(levels, tf.uint8)
    seeds = tf.constant([[3, 0]], tf.int64)
    before_ra = aug.run(images, seeds, 1, 2)
    np.testing.assert_allclose(before_ra.numpy(), levels * 255 / 16, rtol=1e-6)
    out = aug.run(images, seeds, 1)
    # RandAugment rounds to 8-bit values, as timm's PIL images are.
    np.testing.assert_allclose(out.numpy(), np.round(levels * 255 / 16) / 255, atol=1e-7)


def test_erasing_fills_in_normalised_units_and_leaves_the_rest():
    """timm erases normalised images: an erased pixel is mean + std * noise in [0, 1] units
    (const: the mean colour), the others stay as they were (to float rounding)."""
    import tensorflow as tf

    stages = deit_stages(TrainConfig(reprob=1.0, remode="const"), 3, 1 / 255, None)
    from tfdp.augment import Compose

    aug = Compose(stages)
    images = tf.fill([4, 16, 16, 3], tf.constant(255, tf.uint8))
    seeds = tf.stack([tf.fill([4], tf.constant(5, tf.int64)), tf.range(4, dtype=tf.int64)], 1)
    out = aug(images, seeds).numpy()
    erased = np.any(np.abs(out - 1.0) > 1e-5, axis=-1)
    assert erased.any(axis=(1, 2)).all()  # probability 1: every image has a box
    np.testing.assert_allclose(out[erased], np.broadcast_to(IMAGENET_MEAN, out[erased].shape),
                               atol=1e-6)  # fmt: skip
    np.testing.assert_allclose(out[~erased], 1.0, atol=1e-6)
    pixel = Compose(deit_stages(TrainConfig(reprob=1.0), 3, 1 / 255, None))(images, seeds)
    boxes = np.any(np.abs(pixel.numpy() - 1.0) > 1e-5, axis=-1)
    noise = (pixel.numpy()[boxes] - IMAGENET_MEAN) / IMAGENET_STD  # back to timm's units
    assert noise.size > 300 and abs(noise.mean()) < 0.2 and 0.8 < noise.std() < 1.2


def test_mixup_targets_carry_the_smoothing_once():
    """With mixup on, --smoothing goes into Mixup's targets (timm's mixup_target) and the loss
    is the soft-target cross-entropy: for a batch that is not mixed (--mixup-prob 0) the loss is
    exactly the label-smoothed cross-entropy of the plain run -- smoothed once, not twice."""
    import tensorflow as tf

    from tfdp.recipe.model import training_loss

    rng = np.random.default_rng(0)
    labels = tf.constant(rng.integers(0, 5, 6))
    logits = tf.constant(rng.normal(size=(6, 5)), tf.float32)
    mixed = TrainConfig(mixup=0.8, mixup_prob=0.0, smoothing=0.2)
    mix = deit_stages(mixed, 1, 1.0, 5)[-1]
    _, targets = mix((tf.zeros([6, 2, 2, 1]), labels), tf.zeros([6, 2], tf.int64))
    np.testing.assert_allclose(targets.numpy(), np.eye(5)[labels.numpy()] * 0.8 + 0.2 / 5,
                               rtol=1e-6)  # fmt: skip
    soft = training_loss(mixed, 5)(targets, logits).numpy()
    logp = logits.numpy() - np.log(np.exp(logits.numpy()).sum(-1, keepdims=True))
    np.testing.assert_allclose(soft, -(targets.numpy() * logp).sum(-1), rtol=1e-5)  # timm's
    plain = training_loss(TrainConfig(smoothing=0.2), 5)(labels, logits).numpy()
    np.testing.assert_allclose(soft, plain, rtol=1e-5)


def test_the_training_metrics_under_mixup_are_soft_and_held_out_ones_plain():
    import tensorflow as tf

    from tfdp.recipe.model import job_metrics, training_loss, training_metrics

    assert training_loss(TrainConfig(), 10) == "sparse_categorical_crossentropy_from_logits"
    (acc,) = training_metrics(TrainConfig(cutmix=1.0), 10)
    acc.update_state(tf.constant([[0.3, 0.7], [0.6, 0.4]]), tf.constant([[0.0, 1.0], [0.0, 1.0]]))
    assert acc.name == "soft_target_accuracy" and float(acc.result()) == 0.5  # argmax vs argmax
    plain = training_metrics(TrainConfig(), 10)
    assert [m if isinstance(m, str) else m.name for m in plain] == [
        m if isinstance(m, str) else m.name for m in job_metrics(10)]  # fmt: skip


def test_mixup_needs_two_classes():
    with pytest.raises(
        ConfigError, match=r"^mixup: mixes class labels .* at least 2 classes.* has 1"
    ):
        deit_stages(TrainConfig(mixup=0.8), 3, 1 / 255, 1)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"aa": "rand-m9-foo"}, r"aa: 'rand-m9-foo': unknown section 'foo'; valid sections"),
        ({"aa": "original"}, r"aa: 'original': only timm's RandAugment strings"),
        ({"aa": "rand-m10-mmax8"}, r"magnitude 10 \(section 'm10'\) is above its bound 8"),
        ({"aa": "rand-m9-p1.5"}, r"p \(probability of each op\) must be in \[0, 1\]"),
        ({"color_jitter": -0.5}, r"color_jitter: must be a number >= 0"),
        ({"reprob": 1.5}, r"reprob: must be a number in \[0, 1\], got 1.5"),
        ({"recount": 0}, r"recount: must be an integer >= 1"),
        ({"mixup": -0.1}, r"mixup: must be a finite number >= 0"),
        ({"cutmix": math.inf}, r"cutmix: must be a finite number >= 0"),
        ({"mixup": 0.8, "mixup_prob": 1.5}, r"mixup_prob: must be a number in \[0, 1\]"),
        ({"cutmix": 1.0, "mixup_switch_prob": -1.0}, r"mixup_switch_prob: must be a number in"),
        ({"cutmix": 1.0, "mixup_mode": "half"}, r"mixup_mode: must be one of \('batch'"),
        ({"aa": "rand-m9", "train_interpolation": "box"}, r"--aa: RandAugment's geometric ops"),
        ({"train_interpolation": "bicubic"}, r"resizes nothing here: .*this run's is shift"),
    ],
)
def test_bad_augmentation_values_are_refused_naming_the_flag(options, message):
    with pytest.raises(ConfigError, match=message) as info:
        check_config(TrainConfig(**options))
    assert info.value.argument in TrainConfig.fields()  # an option: the CLI says it as its flag


def test_deits_values_pass_and_none_turns_randaugment_off(tmp_path):
    check_augment_options(TrainConfig(**DEIT, train_interpolation="bicubic"))
    (tmp_path / "c.toml").write_text('aa = "none"\ntrain-interpolation = "bicubic"\n')
    cfg = TrainConfig(data="x", image_size=8, **load_config_file(tmp_path / "c.toml"))
    assert (cfg.aa, cfg.train_interpolation) == (None, "bicubic")
    saved = json.loads(json.dumps(TrainConfig(**DEIT).to_dict()))  # config.json and back
    assert TrainConfig(**saved) == TrainConfig(**DEIT)


def test_flags_amp_and_bf16_and_every_augmentation_flag_parse(tmp_path):
    from tfdp.cli import build_parser, train_request

    parser = build_parser()
    argv = ["train", "--aa", "rand-m9-mstd0.5-inc1", "--color-jitter", "0.3", "--reprob", "0.25",
            "--remode", "pixel", "--recount", "2", "--mixup", "0.8", "--cutmix", "1.0",
            "--mixup-prob", "0.9", "--mixup-switch-prob", "0.4", "--mixup-mode", "elem",
            "--train-interpolation", "bicubic", "--amp"]  # fmt: skip
    cfg, given = train_request(parser.parse_args(argv))
    assert (cfg.aa, cfg.color_jitter, cfg.reprob, cfg.remode, cfg.recount) == (
        "rand-m9-mstd0.5-inc1", 0.3, 0.25, "pixel", 2)  # fmt: skip
    assert (cfg.mixup, cfg.cutmix, cfg.mixup_prob, cfg.mixup_switch_prob, cfg.mixup_mode) == (
        0.8, 1.0, 0.9, 0.4, "elem")  # fmt: skip
    assert (cfg.train_interpolation, cfg.mixed_precision) == ("bicubic", "mixed_float16")
    assert {"aa", "mixup_mode", "mixed_precision"} <= given
    cfg, _ = train_request(parser.parse_args(["train", "--bf16", "--aa", "none"]))
    assert (cfg.mixed_precision, cfg.aa) == ("mixed_bfloat16", None)
    with pytest.raises(SystemExit):
        parser.parse_args(["train", "--amp", "--mixed-precision", "mixed_bfloat16"])


def test_a_resume_keeps_the_augmentation_of_the_run(tmp_path):
    """The interrupted epoch's samples must get the augmentation they would have had: a
    different augmentation flag on resume is refused, naming it; the smoothing may change."""
    from tfdp.recipe.resume import resolve_resume, write_run_config

    write_run_config(str(tmp_path), TrainConfig(**DEIT), [])
    with pytest.raises(ConfigError, match=r"--aa \(the run has 'rand-m9-mstd0.5-inc1', now None"):
        resolve_resume(str(tmp_path), TrainConfig(), given={"aa"})
    with pytest.raises(ConfigError, match=r"--reprob .*--mixup .*these cannot change"):
        resolve_resume(str(tmp_path), TrainConfig(mixup=0.1, reprob=0.0), given={"mixup", "reprob"})
    kept = resolve_resume(str(tmp_path), TrainConfig(smoothing=0.0), given={"smoothing"})
    assert kept.config.mixup == 0.8 and kept.changed == {"smoothing": (0.1, 0.0)}
