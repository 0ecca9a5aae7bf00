"""Gradient compression: what rounding to 16 bits before the all-reduce changes, exactly."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfdp.errors import ConfigError
from tfdp.train import Trainer
from tfdp.train.compression import check_compression, compressed_all_reduce

# Multiples of 2**-5 in [1, 2) are exact in float16 and bfloat16, and so is every partial sum
# of four of them (< 8): each addition is exact, in any order. Adding 2**-12, less than half
# a unit in the last place of either type there, is rounded away before the sum.
BASE = np.array([[1.0, 1.5], [1.25, 1.03125], [1.75, 1.96875], [1.5, 1.0]], np.float32)
TINY = np.float32(2**-12)


def _sums(strategy, compression):
    @tf.function
    def run():
        def replica():
            ctx = tf.distribute.get_replica_context()
            rows = tf.constant(BASE + TINY)[ctx.replica_id_in_sync_group]
            return compressed_all_reduce(ctx, [rows, tf.cast(rows, tf.float64)], compression)

        return strategy.run(replica)

    return [strategy.experimental_local_results(t)[0].numpy() for t in run()]


@pytest.mark.parametrize("compression", ["fp16", "bf16"])
def test_each_replica_s_gradient_is_rounded_before_the_sum(mirrored4, compression):
    summed, summed64 = _sums(mirrored4, compression)
    assert summed.dtype == np.float32 and summed64.dtype == np.float64  # cast back
    assert summed.tolist() == BASE.sum(axis=0).tolist()  # the 2**-12 of each part is gone
    assert summed64.tolist() == summed.tolist()  # float64 gradients are rounded alike
    exact = (BASE + TINY).astype(np.float64).sum(axis=0)
    assert not np.allclose(summed, exact, rtol=0, atol=1e-5)  # float32 would have kept it


def test_fp16_overflows_where_float32_does_not(mirrored4):
    @tf.function
    def run():
        def replica():
            ctx = tf.distribute.get_replica_context()
            return compressed_all_reduce(ctx, [tf.constant([40000.0, 1e-9])], "fp16")[0]

        return mirrored4.run(replica)

    value = mirrored4.experimental_local_results(run())[0].numpy()
    assert np.isinf(value[0]) and value[1] == 0.0  # 4 x 40000 > 65504; 1e-9 flushes to 0


def test_bad_values_and_mixed_float16_are_refused():
    with pytest.raises(ConfigError, match="must be None, 'fp16' or 'bf16', got 'fp8'") as bad:
        check_compression("fp8")
    assert bad.value.argument == "gradient_compression"
    with pytest.raises(ConfigError, match="loss scaler all-reduces the scaled gradients"):
        Trainer(None, lambda: keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)]),
                keras.optimizers.SGD, "mse", mixed_precision="mixed_float16",
                gradient_compression="fp16")  # fmt: skip


def test_a_trainer_with_fp16_compression_applies_the_rounded_sum(mirrored4):
    from tfdp import ArraySource, DistributedInput

    x = np.eye(4, dtype=np.float32)
    y = np.array([0.3, 0.7, 1.1, 1.9], np.float32)
    trainer = Trainer(
        mirrored4,
        lambda: keras.Sequential([keras.Input((4,)), keras.layers.Dense(1, use_bias=False)]),
        lambda: keras.optimizers.SGD(1.0),
        "mse",
        progress=False,
        verbose=0,
        gradient_compression="fp16",
    )
    trainer.model.set_weights([np.zeros((4, 1), np.float32)])
    trainer.fit(DistributedInput(mirrored4, ArraySource((x, y)), batch_size=1), epochs=1)
    w = trainer.model.get_weights()[0][:, 0]
    # One step over the 4 rows, one per replica: the gradient of mean((w.x - y)^2) at w = 0 is
    # -y / 2, row i's on replica i alone; SGD(1) makes w = y / 2 in float32 -- here each part
    # rounded to fp16 before the (then exact) sum.
    assert w.tolist() == (y / 2).astype(np.float16).astype(np.float32).tolist()
    assert w.tolist() != (y / 2).tolist()


def test_the_command_line_offers_exactly_the_library_s_compressions():
    from tfdp.recipe.config import GRADIENT_COMPRESSIONS, TrainConfig
    from tfdp.train.compression import COMPRESSIONS

    assert ("none", *COMPRESSIONS) == GRADIENT_COMPRESSIONS
    assert TrainConfig().gradient_compression == "none"  # exact unless asked


def test_tfdp_train_s_flag_reaches_the_trainer_s_step(mirrored4):
    """`tfdp train --gradient-compression X` builds its Trainer with X (none: the exact sum);
    what the Trainer then does with it is the test above."""
    from tfdp.cli import build_parser, train_request
    from tfdp.recipe.run import trainer_options

    parser = build_parser()
    for flag, want in (("none", None), ("fp16", "fp16"), ("bf16", "bf16")):
        cfg, _ = train_request(parser.parse_args(["train", "--gradient-compression", flag]))
        trainer = Trainer(
            mirrored4,
            lambda: keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)]),
            lambda: keras.optimizers.SGD(1.0),
            "mse",
            progress=False,
            verbose=0,
            **trainer_options(cfg),
        )
        assert trainer.train_step.gradient_compression == want
    cfg, _ = train_request(parser.parse_args(["train"]))
    assert trainer_options(cfg)["gradient_compression"] is None  # exact unless asked


def test_tfdp_train_s_jit_compile_reaches_the_job_s_step(mirrored4, tmp_path):
    """`tfdp train --jit-compile` compiles the job's forward / backward pass with XLA (the
    Trainer's step; what XLA computes is the differential test's xla case); off by default."""
    from tfdp.cli import build_parser, train_request
    from tfdp.recipe.data import build_data
    from tfdp.recipe.run import _trainer

    parser = build_parser()
    for argv, want in ((["--jit-compile"], True), ([], False)):
        cfg, _ = train_request(parser.parse_args(["train", *argv]))
        cfg.replicas, cfg.batch_size = 4, 32
        job = _trainer(cfg, mirrored4, build_data(cfg), str(tmp_path / str(want)), None, 4)
        assert job.train_step.jit_compile is want
