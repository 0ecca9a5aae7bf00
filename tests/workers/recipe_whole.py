"""DeiT's whole recipe three times in one process, for tests/test_recipe_whole.py (test helper).

Usage: recipe_whole.py DATA OUT REPLICAS STOP_AT. Trains ``OUT/whole`` uninterrupted; trains
``OUT/cut``, which sends itself a real SIGINT after global step STOP_AT (the handler of
``tfdp train`` asks for a checkpoint and a stop); resumes ``OUT/cut`` with nothing but
``--resume``. Prints one ``RESULT <json>`` line: the three runs' exit statuses and results,
and whether the stopped run saved a final model.

A process of its own: ``--replicas`` other than the test session's 4 logical CPUs needs a
TensorFlow configured for them, and the three runs share its start.
"""

import json
import os
import signal
import sys

import keras

from tfdp._compat.fast.process import end_process
from tfdp.cli.train import train
from tfdp.recipe import TrainConfig

#: DeiT's recipe (timm's flags): RA sampler (the default), RandAugment, erasing, Mixup / CutMix,
#: smoothing, AdamW with decay, cosine per update, clipping, accumulation, EMA.
RECIPE = dict(
    epochs=3,
    eval_fraction=0.2,
    batch_size=16,
    deterministic=True,
    optimizer="adamw",
    weight_decay=0.05,
    lr=2e-3,
    warmup_epochs=0,
    min_lr=1e-5,
    sched_on_updates=True,
    smoothing=0.1,  # carried by Mixup's soft targets
    aa="rand-m9-mstd0.5-inc1",  # DeiT's: 2 ops of all 15 per sample
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
    model="recipe_whole:tiny",  # what is trained is not the point: the fewest ops to trace
)


def tiny(input_shape, num_classes):
    """Logits of a dense layer: a kernel (decayed) and a bias (not decayed), nothing else."""
    inputs = keras.Input(input_shape)
    return keras.Model(inputs, keras.layers.Dense(num_classes)(keras.layers.Flatten()(inputs)))


def main() -> int:
    data, out, replicas, stop_at = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    recipe = dict(RECIPE, data=data, replicas=replicas)
    results = {}
    results["whole"] = train(TrainConfig(**recipe, run_dir=os.path.join(out, "whole")))

    def sigint(state):
        if state.global_step == stop_at:
            os.kill(os.getpid(), signal.SIGINT)

    cut = os.path.join(out, "cut")
    results["cut"] = train(TrainConfig(**recipe, run_dir=cut), on_step=sigint)
    results["cut_saved_a_model"] = os.path.exists(os.path.join(cut, "model.keras"))
    results["resumed"] = train(TrainConfig(resume=True, run_dir=cut), given=frozenset())
    print("RESULT " + json.dumps(results, default=str), flush=True)
    return 0


if __name__ == "__main__":
    end_process(main())  # as the tfdp process ends (tfdp.cli.app.run)
