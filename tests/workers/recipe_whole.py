"""DeiT's whole recipe three times in one process, for tests/test_recipe_whole.py (test helper).

Usage: recipe_whole.py RECIPE DATA OUT REPLICAS STOP_AT. Trains ``OUT/whole`` uninterrupted;
trains ``OUT/cut``, which sends itself a real SIGINT after global step STOP_AT (the handler of
``tfdp train`` asks for a checkpoint and a stop); resumes ``OUT/cut`` with nothing but
``--resume``. Prints one ``RESULT <json>`` line: the three runs' exit statuses and results,
and whether the stopped run saved a final model.

RECIPE ``digits``: the recipe's every part on a dense model of the 8x8 digits (DATA a .npz).
RECIPE ``deit``: ``examples/deit.toml`` as the command line reads it, on DeiT-Ti distilled
(``--model deit_tiny_distilled_patch16_224 --drop-path 0.1 --distillation-type hard
--teacher-model teacher.keras``) and an image folder (DATA, 3 classes) at 32x32, in OUT, where
it first writes the teachers (small CNNs: ``teacher.keras``, ``teacher_other.keras`` of other
weights, ``teacher5.keras`` of 5 classes) and ``bad.safetensors`` (a DeiT-Ti state dict that
does not fit) -- TensorFlow's work before ``tfdp train`` configures it for one replica, as a
user's script would. Around the three runs,
what a DeiT user meets on the command line, in the same process (``tfdp.cli.main``): a resume
of ``OUT/cut`` with other teacher weights at the teacher's path, refused before the resume
that succeeds; ``tfdp evaluate OUT/whole``; a teacher of another class count and a
``--finetune`` checkpoint whose keys do not fit, refused. Their exit statuses are in the
result's ``codes``.

A process of its own: ``--replicas`` other than the test session's 4 logical CPUs needs a
TensorFlow configured for them, and every run shares its start.
"""

import json
import os
import shutil
import signal
import sys
import time

import keras

from tfdp._compat.fast.process import end_process
from tfdp.cli.train import train
from tfdp.recipe import TrainConfig

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples")

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


def deit_flags(data: str, replicas: int) -> list[str]:
    """``tfdp train``'s flags of the DeiT run: examples/deit.toml, DeiT-Ti distilled, a folder."""
    per_replica = 4  # Mixup's batch mode pairs the rows of each replica's batch
    return [
        "--config", os.path.join(EXAMPLES, "deit.toml"), "--data", data, "--image-size", "32",
        "--model", "deit_tiny_distilled_patch16_224", "--drop-path", "0.1",
        "--distillation-type", "hard", "--teacher-model", "teacher.keras",
        "--epochs", "2", "--batch-size", str(per_replica * replicas), "--eval-fraction", "0.2",
        # the rate deit.toml trains the digits with (2e-3 after DeiT's rule), from step 1
        "--lr", str(1.6e-2 * 64 / (per_replica * replicas)), "--warmup-epochs", "0",
        "--replicas", str(replicas), "--steps-per-call", "1", "--deterministic",
        "--no-progress", "--log-every", "0",
    ]  # fmt: skip


def save_teacher(path: str, classes: int, seed: int) -> None:
    """A small CNN teacher of ``classes`` logits, its weights from ``seed``."""
    from tfdp.recipe.networks import small_cnn

    keras.utils.set_random_seed(seed)
    small_cnn((32, 32, 3), classes, width=4).save(path)


def save_bad_finetune(path: str) -> None:
    """DeiT-Ti distilled's state dict at 224 (ImageNet's) with a wrong shape in block 3."""
    import numpy as np
    from safetensors.numpy import save_file

    from tfdp.models import vision_transformer
    from tfdp.models.weights import timm_shapes

    model = vision_transformer("deit_tiny_distilled_patch16_224", (224, 224, 3), 1000, init=False)
    shapes = timm_shapes(model)
    shapes["blocks.3.attn.proj.weight"] = (192, 96)
    save_file({k: np.zeros(s, np.float32) for k, s in shapes.items()}, path)


def main() -> int:
    recipe_name, data, out = sys.argv[1], sys.argv[2], sys.argv[3]
    replicas, stop_at = int(sys.argv[4]), int(sys.argv[5])
    whole, cut = os.path.join(out, "whole"), os.path.join(out, "cut")
    results, codes, cpu = {}, {}, {}  # cpu: this process's CPU seconds after each part
    if recipe_name == "deit":
        from tfdp.cli import main as tfdp
        from tfdp.cli.app import build_parser
        from tfdp.cli.train import train_request

        os.chdir(out)  # --teacher-model teacher.keras: a path relative to the folder
        save_teacher("teacher.keras", 3, 0)
        save_teacher("teacher_other.keras", 3, 1)
        save_teacher("teacher5.keras", 5, 0)
        save_bad_finetune("bad.safetensors")
        flags = deit_flags(data, replicas)

        def config(run_dir):
            return train_request(build_parser().parse_args(["train", *flags, "--run-dir", run_dir]))
    else:
        from tfdp.cli import main as tfdp

        recipe = dict(RECIPE, data=data, replicas=replicas)

        def config(run_dir):
            return TrainConfig(**recipe, run_dir=run_dir), None

    cpu["start"] = time.process_time()
    cfg, given = config(whole)
    results["whole"] = train(cfg, given=given)
    cpu["whole"] = time.process_time()

    def sigint(state):
        if state.global_step == stop_at:
            os.kill(os.getpid(), signal.SIGINT)

    cfg, given = config(cut)
    results["cut"] = train(cfg, given=given, on_step=sigint)
    results["cut_saved_a_model"] = os.path.exists(os.path.join(cut, "model.keras"))
    cpu["cut"] = time.process_time()
    if recipe_name == "deit":  # the same path, other weights: the resume is refused
        shutil.copy("teacher.keras", "teacher.keras.kept")
        shutil.copy("teacher_other.keras", "teacher.keras")
        codes["other_teacher"] = tfdp(["train", "--resume", "--run-dir", cut, "--no-progress"])
        os.replace("teacher.keras.kept", "teacher.keras")
    results["resumed"] = train(TrainConfig(resume=True, run_dir=cut), given=frozenset())
    cpu["resumed"] = time.process_time()
    if recipe_name == "deit":
        codes["evaluate"] = tfdp(["evaluate", whole])
        cpu["evaluate"] = time.process_time()
        five = ["--teacher-model", "teacher5.keras", "--run-dir", "five"]
        codes["five_classes"] = tfdp(["train", *flags, *five])
        ft = ["--finetune", "bad.safetensors", "--run-dir", "ft"]
        codes["bad_finetune"] = tfdp(["train", *flags, *ft])
        cpu["refusals"] = time.process_time()
    results["codes"], results["cpu"] = codes, cpu
    print("RESULT " + json.dumps(results, default=str), flush=True)
    return 0


if __name__ == "__main__":
    end_process(main())  # as the tfdp process ends (tfdp.cli.app.run)
