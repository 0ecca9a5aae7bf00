"""``--model-ema`` and ``model_best.keras`` at their own level: the EMA under a strategy is
timm's update rule after the first step, swapped in and out exactly; the best model is kept by
the chosen metric across a resume, written by the chief only."""

from __future__ import annotations

import json

import numpy as np

from tfdp.recipe import TrainConfig
from tfdp.recipe.best import BEST_FILE, BestModel
from tfdp.recipe.ema import EmaEvaluator, ema_weights
from tfdp.recipe.model import build_optimizer


def test_the_ema_under_a_strategy_is_timms_rule_and_swaps_back_exactly(mirrored_of):
    import keras
    import tensorflow as tf

    strategy = mirrored_of(2)
    decay, lr = 0.75, 0.5
    cfg = TrainConfig(optimizer="momentum", schedule="constant", lr=lr, model_ema=True,
                      model_ema_decay=decay)  # fmt: skip
    with strategy.scope():
        model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1, use_bias=False)])
        opt = build_optimizer(cfg, 1, model)
        opt.build(model.trainable_variables)
    kernel = model.trainable_variables[0]
    grads = [np.array([[1.0], [-2.0]]), np.array([[0.5], [0.25]]), np.array([[-1.0], [3.0]])]

    @tf.function
    def step(g):
        def apply():
            opt.apply_gradients([(tf.cast(g, tf.float32), kernel)])

        strategy.run(apply)

    seen = []
    for g in grads:
        step(g)
        seen.append(kernel.numpy().copy())
    # timm's ModelEma: ema = decay * ema + (1 - decay) * weights after every step; Keras's
    # average starts at the weights after the first step.
    ema = seen[0]
    for w in seen[1:]:
        ema = decay * ema + (1 - decay) * w
    with ema_weights(model, opt):
        for replica in strategy.experimental_local_results(kernel.value):
            np.testing.assert_allclose(replica.numpy(), ema, rtol=1e-6)
    np.testing.assert_array_equal(kernel.numpy(), seen[-1])  # restored bit for bit

    class Weights:  # an evaluator reporting the weights it sees
        def evaluate(self, eval_input):
            return {"w": float(kernel.numpy()[1, 0])}

    out = EmaEvaluator(Weights(), model, opt).evaluate(None)
    assert out == {"w": float(seen[-1][1, 0]), "ema_w": float(np.float32(ema[1, 0]))}


def test_the_best_model_follows_the_metric_across_a_resume_and_only_the_chief_writes(tmp_path):
    import keras

    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    worker = BestModel(str(tmp_path), "val_top5", is_chief=False)
    worker.set_model(model)
    worker.on_epoch_end(0, {"val_top5": 0.5})
    assert not (tmp_path / BEST_FILE).exists() and worker.best["value"] == 0.5
    best = BestModel(str(tmp_path), "val_top5", is_chief=True)
    best.set_model(model)
    best.on_epoch_end(0, {"val_top5": 0.5})
    best.on_epoch_end(1, {"val_top5": float("nan")})  # never "best"
    best.on_epoch_end(2, {"val_top5": 0.4})
    record = json.loads((tmp_path / "model_best.json").read_text())
    assert record == {"metric": "val_top5", "value": 0.5, "epoch": 1}
    again = BestModel(str(tmp_path), "val_top5", is_chief=True)  # a resumed run
    again.set_model(model)
    again.on_epoch_end(3, {"val_top5": 0.45})
    assert again.best["epoch"] == 1
    again.on_epoch_end(4, {"val_top5": 0.9})
    assert json.loads((tmp_path / "model_best.json").read_text())["epoch"] == 5
    other = BestModel(str(tmp_path), "val_loss", is_chief=True)  # another metric: starts over
    assert other.best is None
