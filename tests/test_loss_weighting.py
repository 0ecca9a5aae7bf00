"""loss_weighting on uneven per-replica batches: "rows" (tfdp's mean over the step's rows) and
"replicas" (PyTorch DDP's mean of every replica's own mean), on the Trainer (with gradient
accumulation) and the fit path, against a plain transcription of each; and each replica's own
loss in ``on_step``. A real 2-replica MirroredStrategy.

Uneven batches, as tfdp makes them: a 3-replica run's epoch of 15 examples (5 per rank, a
global batch of 6) continued on 2 replicas (3 each) from its step 1 -- its list dealt over 2
ranks: batches of 3 + 3, 3 + 3, then 2 + 1 rows (tfdp.DistributedInput.resume_from).
"""

from __future__ import annotations

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfdp import ArraySource, DistributedInput
from tfdp.samplers import DistributedSampler
from tfdp.train import Trainer, fit

RNG = np.random.default_rng(5)
X = RNG.normal(size=(15, 4)).astype("float32")
Y = np.arange(15) % 2
LR = 0.5


def uneven_input(strategy, return_ids: bool = False) -> DistributedInput:
    inp = DistributedInput(
        strategy,
        ArraySource((X, Y)),
        batch_size=3,
        drop_remainder=False,
        return_ids=return_ids,
    )
    old = DistributedSampler(15, 3, 0)  # rank 0 of the 3-replica run, after its step 1
    inp.resume_from(old.state_dict(position=2), step=1)
    return inp


def make_model() -> keras.Model:
    keras.utils.set_random_seed(3)
    return keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(6, "relu"), keras.layers.Dense(2)]
    )


def transcribed(steps: list[list[list[list[int]]]], weighting: str):
    """Plain single-device steps. ``steps[s][m][r]``: the ids of replica ``r``'s micro-batch
    ``m``. "rows": the loss is the mean over all the step's rows; "replicas": the mean over the
    replicas and micro-batches of each one's own mean. A replica's own loss: its mean over its
    rows ("rows"), the mean of its micro-batches' means ("replicas"). Returns the model, every
    step's loss and every step's replica losses."""
    model = make_model()
    opt = keras.optimizers.SGD(LR)
    ce = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    losses, own = [], []
    for micro in steps:
        with tf.GradientTape() as tape:
            per = [[ce(Y[ids], model(X[ids])) for ids in ranks] for ranks in micro]  # [m][r]
            if weighting == "rows":
                loss = tf.reduce_sum([tf.reduce_sum(v) for m in per for v in m]) / sum(
                    len(ids) for ranks in micro for ids in ranks
                )
            else:
                loss = tf.reduce_mean([tf.reduce_mean(v) for m in per for v in m])
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        losses.append(float(loss))
        if weighting == "rows":
            own.append([float(tf.reduce_mean(tf.concat([m[r] for m in per], 0))) for r in (0, 1)])
        else:
            own.append([float(np.mean([tf.reduce_mean(m[r]) for m in per])) for r in (0, 1)])
    return model, losses, own


def recorded_steps(path) -> list[list[list[list[int]]]]:
    """``[step][micro-batch][rank] -> ids`` from a ``record_samples`` file."""
    out: dict[int, dict[int, dict[int, list[int]]]] = {}
    for line in path.read_text().splitlines():
        r = json.loads(line)
        out.setdefault(r["step"], {}).setdefault(r.get("micro_batch", 0), {})[r["rank"]] = r["ids"]
    return [
        [[m[r] for r in sorted(m)] for _, m in sorted(s.items())] for _, s in sorted(out.items())
    ]


@pytest.mark.parametrize("weighting", ["rows", "replicas"])
def test_loss_weighting_on_uneven_batches_is_its_transcription(mirrored_of, tmp_path, weighting):
    """The Trainer with accumulation 2 (steps of 6 + 6 rows and of 2 + 1) and the fit path
    (steps of 6, 6, 3 rows) equal the transcription of their weighting: step losses, each
    replica's own loss, final weights (1e-6); the two weightings really differ. ~8 CPU-s."""
    strategy = mirrored_of(2)
    record = tmp_path / "ids.jsonl"
    trainer = Trainer(
        strategy,
        make_model,
        lambda: keras.optimizers.SGD(LR),
        "sparse_categorical_crossentropy_from_logits",
        accumulation_steps=2,
        steps_per_call=2,
        loss_weighting=weighting,
        record_samples=str(record),
        progress=False,
        verbose=0,
    )
    losses, own = [], []

    def on_step(state) -> None:
        losses.extend(state.step_losses)
        own.extend(state.replica_losses)

    trainer.fit(uneven_input(strategy, return_ids=True), 1, resume=False, on_step=on_step)
    steps = recorded_steps(record)
    assert [[len(ids) for ids in m] for s in steps for m in s] == [[3, 3], [3, 3], [2, 1]]
    model, want, want_own = transcribed(steps, weighting)
    np.testing.assert_allclose(losses, want, rtol=1e-6)
    np.testing.assert_allclose(own, want_own, rtol=1e-6)
    for a, b in zip(trainer.model.weights, model.weights, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-6)
    other, _, _ = transcribed(steps, "replicas" if weighting == "rows" else "rows")
    apart = zip(model.get_weights(), other.get_weights(), strict=True)
    assert max(np.abs(a - b).max() for a, b in apart) > 1e-3

    with strategy.scope():
        compiled = make_model()
        compiled.compile(
            keras.optimizers.SGD(LR), keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        )
    fit(compiled, uneven_input(strategy), 1, verbose=0, loss_weighting=weighting)
    model, _, _ = transcribed([[m] for s in steps for m in s], weighting)  # no accumulation
    for a, b in zip(compiled.weights, model.weights, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-6)
