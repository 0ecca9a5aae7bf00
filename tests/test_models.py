"""tfdp.models: DeiT's / ViT's models by timm's names against timm, timm's weights, drop path.

timm runs in a process of its own (tests/timm_models_side.py through timm_ref.call); full-size
models are built (not called) for the parameter counts only, every other check runs at 32x32.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
import keras  # noqa: E402

import timm_ref  # noqa: E402
from tfdp import seeding  # noqa: E402
from tfdp._arrays import NUMPY  # noqa: E402
from tfdp.checkpoint import keras_trackables  # noqa: E402
from tfdp.errors import ConfigError, DataError  # noqa: E402
from tfdp.models import (  # noqa: E402
    MODELS,
    DropPath,
    ViTSpec,
    drop_path_rates,
    model_spec,
    no_weight_decay,
    require_keras_hub,
    resample_pos_embed,
    vision_transformer,
)
from tfdp.models.drop_path import row_uniforms  # noqa: E402
from tfdp.models.weights import (  # noqa: E402
    from_timm,
    load_timm_weights,
    read_state_dict,
    timm_shapes,
)
from tfdp.random.counter_hash import uniforms  # noqa: E402

TINY = ViTSpec("tiny_test", width=16, depth=3, heads=2)
RATE_CASES = [(0.1, 12), (0.0, 12), (0.3, 7), (0.5, 1), (0.2, 2), (0.05, 24)]


def _resample_cases():
    rng = np.random.default_rng(3)
    cases = []
    for old, new, prefix in [(4, (2, 2), 1), (2, (5, 5), 2), (3, (2, 4), 1), (14, (6, 6), 1)]:
        pos = rng.normal(size=(1, prefix + old * old, 8)).astype(np.float32)
        for antialias in (True, False):
            cases.append((pos, new, prefix, antialias))
    return cases


@pytest.fixture(scope="module")
def timm_side(tmp_path_factory):
    """Every timm-side result of this module, from one process: counts, rates, resampling and
    two randomly initialised timm models saved (a DeiT-wrapped .pth and a .safetensors)."""
    folder = tmp_path_factory.mktemp("timm")
    x = np.random.default_rng(0).normal(size=(2, 32, 32, 3)).astype(np.float32)
    exports = [
        {"name": "deit_tiny_distilled_patch16_224", "img_size": 32, "num_classes": 5, "seed": 1,
         "path": str(folder / "deit_tiny_distilled.pth"), "wrap": True, "x": x},
        {"name": "deit_small_patch16_224", "img_size": 32, "num_classes": 7, "seed": 2,
         "path": str(folder / "deit_small.safetensors"), "x": x},
    ]  # fmt: skip
    out = timm_ref.call(
        "many",
        [
            ("param_counts", (list(MODELS), 10)),
            ("drop_path_rates", (RATE_CASES,)),
            ("resample", (_resample_cases(),)),
            ("export", (exports,)),
        ],
        side="timm_models_side",
    )
    return {"counts": out[0], "rates": out[1], "resampled": out[2], "exports": out[3],
            "cases": exports, "x": x}  # fmt: skip


def test_each_names_parameter_count_and_sizes_are_timms(timm_side):
    """Every name at 224 for 10 classes has timm's create_model(name, num_classes=10) parameter
    count, all of them trainable (the drop paths' counters are no weights), and as many of them
    exempt from weight decay as timm's optimizer exempts (no_weight_decay). The vit_* names are
    built from the deit_* ones' sizes (their table rows differ in mean / std only), so the six
    deit_* models are built."""
    counts = timm_side["counts"]
    for name, spec in MODELS.items():
        arch = counts[name]
        assert (spec.width, spec.depth, spec.heads, spec.distilled, spec.patch) == (
            arch["embed_dim"], arch["depth"], arch["num_heads"], arch["distilled"], 16,
        ), name  # fmt: skip
        if name.startswith("vit_"):
            twin = model_spec(name.replace("vit_", "deit_"))
            assert (spec.width, spec.depth, spec.heads, spec.mlp_ratio) == (
                twin.width,
                twin.depth,
                twin.heads,
                twin.mlp_ratio,
            ) and not spec.distilled
            assert arch["params"] == counts[twin.name]["params"]
            continue
        model = vision_transformer(name, (224, 224, 3), 10, drop_path=0.1, init=False)
        trainable = sum(int(np.prod(v.shape)) for v in model.trainable_weights)
        assert trainable == model.count_params() == arch["params"], name
        exempt = sum(int(np.prod(v.shape)) for v in no_weight_decay(model))
        assert exempt == arch["no_decay"], name  # timm's optimizer's no-decay group
        del model
        keras.backend.clear_session()


def test_drop_path_rates_are_timms_rule(timm_side):
    assert [drop_path_rates(r, d) for r, d in RATE_CASES] == timm_side["rates"]
    model = vision_transformer(TINY, (32, 32, 3), 2, drop_path=0.3)
    rates = [model.get_layer(f"blocks_{i}").drop_path1.rate for i in range(TINY.depth)]
    assert (
        rates == drop_path_rates(0.3, TINY.depth) == [0.0, 0.15000000596046448, 0.30000001192092896]
    )


def test_pos_embed_resampling_is_timms_resample_abs_pos_embed(timm_side):
    """Antialiased (timm's default, its loading of pretrained weights) and not (DeiT's main.py
    --finetune, F.interpolate bicubic): down, up and to a non-square grid, 1 or 2 prefix tokens."""
    for (pos, new, prefix, antialias), ref in zip(
        _resample_cases(), timm_side["resampled"], strict=True
    ):
        ours = resample_pos_embed(pos, new, prefix, antialias=antialias)
        assert ours.shape == ref.shape
        np.testing.assert_allclose(ours, ref, atol=2e-6, rtol=0)
        np.testing.assert_array_equal(ours[:, :prefix], pos[:, :prefix])  # the tokens kept


def _logits_equal(ours, theirs):
    assert np.abs(np.asarray(ours) - theirs).max() < 1e-4


def test_converted_safetensors_logits_equal_timms(timm_side):
    """deit_small at 32x32 (4 patches), 7 classes, from timm's randomly initialised (and
    perturbed) weights saved as .safetensors (no torch here): the same logits to 1e-4."""
    case, ref = timm_side["cases"][1], timm_side["exports"][1]
    model = from_timm(case["name"], read_state_dict(case["path"]), source=case["path"])
    assert model.input_shape == (None, 32, 32, 3) and model.output_shape == (None, 7)
    _logits_equal(model(timm_side["x"]), ref["eval"])


def test_tfdp_models_import_of_a_deit_pth_gives_timms_logits(timm_side, tmp_path):
    """The command reads DeiT's {"model": state} .pth (torch, before TensorFlow loads), builds
    deit_tiny_distilled for it (5 classes, 32x32) and saves it: its inference logits are timm's
    (the two heads averaged), its two heads in distilled training timm's too."""
    case, ref = timm_side["cases"][0], timm_side["exports"][0]
    out = tmp_path / "deit.keras"
    done = subprocess.run(
        [sys.executable, "-m", "tfdp", "models", "import", case["name"], "--from", case["path"],
         "--out", str(out)],
        capture_output=True, text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "5 classes, 32x32x3 inputs" in done.stdout and not list(tmp_path.glob(".*"))
    from tfdp.models import load_model

    model = load_model(out)
    _logits_equal(model(timm_side["x"]), ref["eval"])
    model.get_layer("heads").distilled_training = True
    both = model(timm_side["x"], training=True).numpy()
    _logits_equal(both[:, 0], ref["heads"][0])
    _logits_equal(both[:, 1], ref["heads"][1])


def _tiny_state(model, value=0.0):
    return {k: np.full(s, value, np.float32) for k, s in timm_shapes(model).items()}


def test_a_state_dict_that_does_not_fit_names_its_first_bad_key():
    model = vision_transformer(TINY, (32, 32, 3), 5)
    good = _tiny_state(model)
    missing = {k: v for k, v in good.items() if k != "blocks.1.attn.qkv.bias"}
    with pytest.raises(DataError, match=r"^ckpt has no key 'blocks.1.attn.qkv.bias' "
                                        r"\(the model needs shape \(48,\)\)$"):  # fmt: skip
        load_timm_weights(model, missing, source="ckpt")
    wrong = {**good, "blocks.0.mlp.fc1.weight": np.zeros((64, 8), np.float32)}
    with pytest.raises(DataError, match=r"key 'blocks.0.mlp.fc1.weight' has shape \(64, 8\), "
                                        r"the model needs \(64, 16\)"):  # fmt: skip
        load_timm_weights(model, wrong)
    extra = {**good, "dist_token": np.zeros((1, 1, 16), np.float32)}
    with pytest.raises(DataError, match=r"key 'dist_token' \(shape \(1, 1, 16\)\) is not a "
                                        r"weight of 'tiny_test'"):  # fmt: skip
        load_timm_weights(model, extra)
    other_head = {**good, "head.weight": np.ones((9, 16), np.float32),
                  "head.bias": np.ones(9, np.float32)}  # fmt: skip
    with pytest.raises(DataError, match=r"has 9 classes, the model 5: fine-tuning re-initial"):
        load_timm_weights(model, other_head)
    before = model.get_layer("head").kernel.numpy()
    notes = load_timm_weights(model, other_head, finetune=True, source="ckpt")
    assert notes == ["head re-initialised (ckpt has 9 classes, the model 5)"]
    np.testing.assert_array_equal(model.get_layer("head").kernel.numpy(), before)
    assert float(np.abs(model.get_layer("norm").gamma.numpy()).max()) == 0.0  # the rest loaded


def test_finetune_resamples_pos_embed_as_deit_and_import_as_timm():
    """A 4x4 grid's embeddings into a 2x2 model: DeiT's interpolation when fine-tuning, timm's
    antialiased one when importing; the class token's row kept."""
    model = vision_transformer(TINY, (32, 32, 3), 5)
    state = _tiny_state(model, 0.5)
    pos = np.random.default_rng(1).normal(size=(1, 17, 16)).astype(np.float32)
    state["pos_embed"] = pos
    for finetune in (True, False):
        notes = load_timm_weights(model, state, finetune=finetune)
        assert notes == ["position embeddings resampled from 4x4 to 2x2 patches"]
        got = model.get_layer("patch_embed").position_embedding.embeddings.numpy()
        want = resample_pos_embed(pos, (2, 2), 1, antialias=not finetune)[0]
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(got[0], pos[0, 0])


def test_models_are_keras_hubs_blocks_with_timms_init_and_load_back(tmp_path):
    from keras_hub.src.models.vit.vit_layers import ViTEncoderBlock

    keras.utils.set_random_seed(0)
    spec = ViTSpec("wide", width=96, depth=2, heads=3, distilled=True)
    model = vision_transformer(spec, (32, 32, 3), 4, drop_path=0.2)
    block = model.get_layer("blocks_1")
    assert isinstance(block, ViTEncoderBlock) and block.layer_norm_1.epsilon == 1e-6
    assert block.mlp.dense_1.activation.__name__ == "gelu"
    assert model.get_layer("norm").epsilon == 1e-6
    v = {w.path: w.numpy() for w in model.trainable_weights}
    assert abs(v["blocks_0/mha/query/kernel"].std() - 0.02) < 0.002
    assert abs(v["blocks_1/mlp/dense_2/kernel"].std() - 0.02) < 0.002
    assert abs(v["patch_embed/position_embedding"].std() - 0.02) < 0.004
    assert abs(v["patch_embed/distillation_token"].std() - 0.02) < 0.01
    assert 0 < np.abs(v["patch_embed/class_token"]).max() < 1e-5
    assert not v["blocks_0/mha/query/bias"].any() and not v["heads/head_dist/bias"].any()
    assert (v["blocks_0/ln_1/gamma"] == 1).all() and not v["norm/beta"].any()
    bound = 1 / np.sqrt(16 * 16 * 3)
    conv = v["patch_embed/patch_embedding/kernel"]
    assert np.abs(conv).max() <= bound and conv.std() > 0.9 * bound / np.sqrt(3)
    model.save(tmp_path / "m.keras")
    from tfdp.models import load_model

    loaded = load_model(tmp_path / "m.keras")
    x = np.random.default_rng(0).normal(size=(2, 32, 32, 3)).astype(np.float32)
    np.testing.assert_array_equal(loaded(x), model(x))
    rate = drop_path_rates(0.2, 2)[1]  # float32's 0.2, as timm's (torch.linspace)
    assert loaded.get_layer("blocks_1").drop_path2.rate == block.drop_path2.rate == rate


# -- drop path ---------------------------------------------------------------------------------


def test_drop_path_draws_are_the_counter_hash_of_key_call_replica_row():
    """A NumPy transcription: row b of replica r at call c of layer i draws the uniform of
    [drop_path_key(seed, i), c * 2**32 + r * 2**20 + b]."""
    key = seeding.drop_path_key(7, 5)
    for calls, replica in [(0, 0), (3, 1), (12345, 3)]:
        got = row_uniforms(tf.constant([key, calls], tf.int64), 6, replica).numpy()
        seeds = np.array([[key, calls * 2**32 + replica * 2**20 + b] for b in range(6)], np.int64)
        np.testing.assert_array_equal(got, uniforms(seeds, 1, NUMPY)[:, 0])
    assert seeding.TAG_DROP_PATH.to_bytes(4, "big") == b"DROP"
    assert seeding.drop_path_key(7, 5) != seeding.drop_path_key(7, 4) != seeding.drop_path_key(8, 4)


def test_drop_path_keeps_rows_at_its_rate_scaled_and_is_the_identity_at_inference():
    layer = DropPath(0.3, seed=1, index=2)
    x = np.ones((20000, 2, 3), np.float32)
    np.testing.assert_array_equal(layer(x, training=False), x)
    np.testing.assert_array_equal(layer(x), x)
    out = layer(x, training=True).numpy()
    rows = out.reshape(20000, -1)
    assert (rows == rows[:, :1]).all()  # one decision per row (sample)
    values = set(np.unique(rows).tolist())
    assert values == {0.0, float(np.float32(1) / np.float32(0.7))}
    kept = (rows[:, 0] > 0).mean()
    assert abs(kept - 0.7) < 4 * np.sqrt(0.7 * 0.3 / 20000)  # binomial: 4 standard deviations
    assert np.abs(out.mean() - 1.0) < 0.02  # scaled by 1 / keep: the mean is kept
    second = layer(x, training=True).numpy()
    assert not np.array_equal(second, out)  # the next call draws anew
    with pytest.raises(ConfigError, match=r"^rate: must be in \[0, 1\), got 1.0"):
        DropPath(1.0)


def test_drop_path_draws_resume_bit_identically_from_a_checkpoint(tmp_path):
    """The draws are a pure function of (seed, layer, training call, replica, row): a model
    built again from the same seed draws the same; restored from a checkpoint (the counters are
    tfdp's rng_states) it continues exactly as the uninterrupted model."""
    x = np.random.default_rng(0).normal(size=(8, 32, 32, 3)).astype(np.float32)

    def build():
        keras.utils.set_random_seed(4)
        return vision_transformer(TINY, (32, 32, 3), 3, drop_path=0.5, seed=11)

    first = build()
    trackables = keras_trackables(first, keras.optimizers.SGD())
    assert len(trackables["rng_states"]) == 2 * (TINY.depth - 1)  # block 0's rate is 0
    ckpt = tf.train.Checkpoint(model=first, rng_states=trackables["rng_states"])
    a0 = first(x, training=True).numpy()
    path = ckpt.write(str(tmp_path / "ck"))
    a1, a2 = (first(x, training=True).numpy() for _ in range(2))
    assert not np.array_equal(a1, a2)
    again = build()
    np.testing.assert_array_equal(again(x, training=True), a0)  # same seed: same draws
    restored = build()
    tf.train.Checkpoint(model=restored, rng_states=keras_trackables(
        restored, keras.optimizers.SGD())["rng_states"]).read(path).assert_consumed()  # fmt: skip
    np.testing.assert_array_equal(restored(x, training=True), a1)
    np.testing.assert_array_equal(restored(x, training=True), a2)
    other_seed = vision_transformer(TINY, (32, 32, 3), 3, drop_path=0.5, seed=12)
    other_seed.set_weights(again.get_weights())
    assert not np.array_equal(other_seed(x, training=True), a0)
    np.testing.assert_array_equal(first(x, training=False), first(x, training=False))


def test_each_replica_draws_for_its_own_rows(mirrored_of):
    """Under a MirroredStrategy every replica draws its rows' decisions (timm seeds each rank
    apart): replica r's mask is row_uniforms(state, B, r) < keep, not replica 0's."""
    strategy = mirrored_of(2)
    with strategy.scope():
        layer = DropPath(0.5, seed=3, index=1)
    x = tf.ones((64, 1))

    @tf.function
    def run():
        return strategy.run(lambda: layer(x, training=True))

    masks = [t.numpy()[:, 0] > 0 for t in strategy.experimental_local_results(run())]
    key = seeding.drop_path_key(3, 1)
    for r, mask in enumerate(masks):
        want = row_uniforms(tf.constant([key, 0], tf.int64), 64, r).numpy() < 0.5
        np.testing.assert_array_equal(mask, want)
    assert not np.array_equal(masks[0], masks[1])
    states = strategy.experimental_local_results(layer.seed_generator.state.value)
    assert [s.numpy().tolist() for s in states] == [[key, 1], [key, 1]]  # one call counted


# -- names and bad input -----------------------------------------------------------------------


def test_bad_names_shapes_and_rates_name_the_argument(monkeypatch):
    with pytest.raises(ConfigError, match=r"did you mean 'deit_tiny_patch16_224'\?\): "
                                          r"deit_base_distilled_patch16_224, ") as err:  # fmt: skip
        model_spec("deit_tiny_patch")
    assert err.value.argument == "model" and all(n in str(err.value) for n in MODELS)
    with pytest.raises(ConfigError, match=r"^input_shape: \(40, 40, 3\): height and width must "
                                          r"be multiples of the patch size 16"):  # fmt: skip
        vision_transformer("deit_tiny_patch16_224", (40, 40, 3), 3)
    with pytest.raises(ConfigError, match=r"^drop_path: must be in \[0, 1\), got 1.5") as err:
        vision_transformer("deit_tiny_patch16_224", (32, 32, 3), 3, drop_path=1.5)
    assert err.value.argument == "drop_path"
    real = __import__("importlib.util").util.find_spec
    monkeypatch.setattr(
        "importlib.util.find_spec", lambda name, *a: None if name == "keras_hub" else real(name)
    )
    with pytest.raises(ConfigError, match=r"pip install 'tfdp\[models\]'$"):
        require_keras_hub("vit_base_patch16_224")


def test_read_state_dict_refuses_files_that_hold_none(tmp_path):
    (tmp_path / "x.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(DataError, match=r"^path: '.*x.safetensors' is not a readable "):
        read_state_dict(tmp_path / "x.safetensors")
    (tmp_path / "x.npz").write_bytes(b"")
    with pytest.raises(DataError, match=r"expected a timm / DeiT checkpoint \(.pth, .pt, "):
        read_state_dict(tmp_path / "x.npz")
