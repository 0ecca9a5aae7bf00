"""The parity harness: a PyTorch DDP run ported to tfdp trains the same, step for step (issue 38).

One launch of tests/ddp_side.py -- 2 torch processes, DistributedDataParallel over gloo on
127.0.0.1, timm's optimizers, schedules, losses and Mixup, driven as timm's ``train.py`` and
DeiT's ``main.py`` drive them -- trains every row of :data:`CASES` and hands back, per row,
every optimizer step's loss and rate, the final weights, the order each rank saw and the Mixup
draws timm made. tfdp trains each row on a real MirroredStrategy over 2 logical CPU devices,
with :class:`tfdp.train.Trainer` and with :func:`tfdp.train.fit`, from torch's initial weights
(copied into Keras) and in torch's order (docs/guide.md's ``permutation=`` recipe: torch's
``randperm`` seeded ``seed + epoch``, as ``DistributedSampler`` seeds it), with what ``tfdp
train`` builds from the same options (:func:`tfdp.recipe.model.build_optimizer`,
:func:`~tfdp.recipe.model.training_loss`). Every step's loss and rate and the final weights
must agree to 1e-5 in float32.

A row is one line of :data:`CASES`: the options it changes from :class:`Case`'s defaults (an
optimizer is ``opt``, timm's name, which both sides map -- timm's ``create_optimizer_v2`` and
tfdp's ``build_optimizer``; a dtype is ``dtype``), the paths it runs on, and the paths where it
is expected to fail, with the reason. The ``adamw`` / ``adam`` rows train with what ``--opt
adamw`` / ``--opt adam`` build, torch's update (:mod:`tfdp.optim`); the ``float64`` row trains
in float64 on both paths (the weights to 1e-12; fit's logged losses are Keras's float32
tracker's). Uneven per-rank batches (DDP's mean of local means, ``loss_weighting="replicas"``)
are checked against a transcription of DDP's rule in tests/test_loss_weighting.py: tfdp's
input gives ranks uneven batches only in an epoch resumed at another world size.

Cost: about 33 CPU-s beyond the test session's start, of which the torch side is about 5 (one
interpreter imports torch and timm, then forks the 2 ranks) and each tfdp run 1 to 3 (one
strategy for all of them).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import reference_stack

reference_stack.ensure("torch", "torchvision", "timm")  # torch runs in ddp_side's processes

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from conftest import free_ports  # noqa: E402
from tfdp import ArraySource, DistributedInput, DistributedSampler  # noqa: E402
from tfdp.augment import Mixup  # noqa: E402
from tfdp.augment.mixup import MixParams  # noqa: E402
from tfdp.optim import TimmCosine  # noqa: E402
from tfdp.recipe import TrainConfig  # noqa: E402
from tfdp.recipe.digits import load_digits  # noqa: E402
from tfdp.recipe.model import build_optimizer, training_loss  # noqa: E402
from tfdp.seeding import epoch_seed_key  # noqa: E402
from tfdp.train import Trainer, fit  # noqa: E402

# One worker runs the module: its torch fixture (one DDP launch for every row) runs once.
pytestmark = [pytest.mark.torch, pytest.mark.xdist_group("ddp_parity")]

SIDE = Path(__file__).resolve().parent / "ddp_side.py"
WORLD = 2
HIDDEN = 32  # ddp_side.HIDDEN
CLASSES = 10
TOLERANCE = {"float32": 1e-5, "float64": 1e-12}
TRAINER = ("trainer",)
DEIT_MIX = {"mixup_alpha": 0.8, "cutmix_alpha": 1.0, "switch_prob": 0.5, "label_smoothing": 0.1}


@dataclasses.dataclass(frozen=True)
class Case:
    """One row: a torch DDP run and its tfdp port (the fields are both sides' options).

    The default is timm's ``--opt momentum`` (torch's SGD, momentum 0.9, L2 weight decay on the
    2-D weights) at a constant rate, 2 epochs of 201 digits (torch's sampler pads them to 202)
    in batches of 16 per rank, the DataLoader dropping the last partial batch.
    """

    name: str
    opt: str = "momentum"  # timm's name: momentum, sgd (Nesterov), adamw, adam
    lr: float = 0.1
    momentum: float = 0.9
    weight_decay: float = 1e-3
    sched: str = "constant"  # or "cosine" (timm's CosineLRScheduler)
    sched_on_updates: bool = True  # timm's --sched-on-updates (step_update); else per epoch
    driver: str = "timm"  # per epoch: timm's train.py (step(epoch + 1)) or DeiT's (step(epoch))
    warmup_epochs: int = 0
    warmup_lr: float = 0.0
    min_lr: float = 0.0
    epochs: int = 2
    n: int = 201
    batch: int = 16  # per rank
    seed: int = 7  # DistributedSampler's (and DeiT's numpy seed: seed + rank)
    sampler_drop_last: bool = False
    loader_drop_last: bool = True  # tfdp: drop_remainder
    smoothing: float = 0.0
    clip_grad: float | None = None
    accum: int = 1
    mixup: dict[str, Any] | None = None  # timm Mixup's arguments (batch mode)
    dtype: str = "float32"
    paths: tuple[str, ...] = ("trainer", "fit")
    xfail: tuple[tuple[str, str], ...] = ()  # (path, reason): strict expected failures

    def request(self) -> dict[str, Any]:
        """What ddp_side.py reads: the options, without tfdp's paths and marks."""
        out = dataclasses.asdict(self)
        del out["paths"], out["xfail"]
        return out


COSINE = {"sched": "cosine", "epochs": 3, "warmup_epochs": 1, "warmup_lr": 1e-2, "min_lr": 1e-3}
PER_EPOCH = {**COSINE, "sched_on_updates": False, "paths": TRAINER}

# fmt: off
CASES = [
    Case("sgd_momentum"),
    Case("sgd_nesterov", opt="sgd", lr=0.05, weight_decay=0.0, paths=TRAINER),
    Case("cosine_per_step", **COSINE),
    Case("cosine_per_epoch", **PER_EPOCH),
    Case("cosine_deit", **{**PER_EPOCH, "epochs": 4}, driver="deit"),
    Case("label_smoothing", smoothing=0.1, sampler_drop_last=True),  # and both drop_lasts
    Case("clip_grad", clip_grad=0.5, paths=TRAINER),  # fit: Keras's clipnorm is per replica
    Case("accumulation", accum=2, batch=14, paths=TRAINER),  # 7 batches: 3 groups of 2, 1
    Case("partial_last_batch", loader_drop_last=False),  # 101 per rank: 6 x 16 + 5
    Case("sampler_drop_last", sampler_drop_last=True, loader_drop_last=False),  # 100: + 4
    Case("mixup_cutmix", mixup=DEIT_MIX),
    Case("adamw", opt="adamw", lr=1e-3, weight_decay=0.05),
    Case("adam", opt="adam", lr=1e-3, weight_decay=0.0),
    # 0.125: Keras keeps a constant rate in a float32 variable (0.1 would be 0.1 + 1.5e-9)
    Case("float64", dtype="float64", lr=0.125),
]
# fmt: on


def _params() -> list[Any]:
    out = []
    for case in CASES:
        reasons = dict(case.xfail)
        for path in case.paths:
            marks = (
                [pytest.mark.xfail(strict=True, reason=reasons[path])] if path in reasons else []
            )
            out.append(pytest.param(case, path, id=f"{case.name}-{path}", marks=marks))
    return out


def _data() -> tuple[np.ndarray, np.ndarray]:
    """The first 240 training digits, levels 0..16 scaled to [0, 1] (exact in float32)."""
    x, y = load_digits("train")
    return (x[:240].astype(np.float32) / 16.0), y[:240]


@pytest.fixture(scope="module")
def torch_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every row trained by torch DDP: one launch of ddp_side.py (2 ranks, gloo)."""
    tmp = tmp_path_factory.mktemp("ddp")
    x, y = _data()
    np.savez(tmp / "data.npz", x=x, y=y, classes=CLASSES)
    request = {
        "port": free_ports(1)[0],
        "data": str(tmp / "data.npz"),
        "init_seed": 0,
        "cases": [case.request() for case in CASES],
    }
    (tmp / "request.json").write_text(json.dumps(request))
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, str(SIDE), str(tmp / "request.json")],
        capture_output=True,
        text=True,
        timeout=600,  # bounds a hang only
        env=env,
        check=False,
    )
    assert proc.returncode == 0, f"ddp_side.py failed ({proc.returncode}):\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout)


# -- tfdp's side --------------------------------------------------------------------------------
class TimmDraws(Mixup):
    """tfdp's Mixup applying the draws timm made in the torch run (see ddp_side.mix).

    :meth:`draw` finds the batch from its first seed, ``[epoch key, position]``: rank ``r``'s
    ``k``-th entry of an epoch is position ``r + k * W`` of the sampler's global list, so its
    batch ``s`` starts at ``r + s * B * W`` (``B`` per rank); the rest is tfdp's
    :meth:`~tfdp.augment.Mixup.apply`.
    """

    def __init__(self, draws: list[list[dict]], case: Case, steps: int) -> None:
        super().__init__(**case.mixup, num_classes=CLASSES)
        flat = [draws[r][e * steps + s] for e in range(case.epochs) for s in range(steps)
                for r in range(WORLD)]  # fmt: skip
        self.keys = tf.constant([epoch_seed_key(case.seed, e) for e in range(case.epochs)])
        self.lam = tf.constant([d["lam"] for d in flat], tf.float64)
        self.cut = tf.constant([d["cutmix"] for d in flat])
        self.box = tf.constant([d["box"] for d in flat], tf.int32)
        self.batch, self.steps = case.batch, steps

    def draw(self, seeds: tf.Tensor, height: Any, width: Any) -> MixParams:
        epoch = tf.argmax(tf.cast(tf.equal(self.keys, seeds[0, 0]), tf.int32))
        pos = seeds[0, 1]
        step, rank = pos // (self.batch * WORLD), pos % WORLD
        i = (epoch * self.steps + step) * WORLD + rank
        return MixParams.per_batch(
            self.lam[i], self.cut[i], self.box[i], tf.shape(seeds, out_type=tf.int64)[0]
        )


def _input(strategy: Any, case: Case, ran: dict[str, Any], augment: Any = None) -> Any:
    """The case's tfdp input: torch's permutation of every epoch, torch's batch, drop_last."""
    x, y = _data()
    perms = ran["perms"]
    sampler = DistributedSampler(
        case.n,
        WORLD,
        0,
        seed=case.seed,
        drop_last=case.sampler_drop_last,
        permutation=lambda epoch: np.asarray(perms[epoch]),
    )
    return DistributedInput(
        strategy,
        ArraySource((x[: case.n].astype(case.dtype), y[: case.n])),
        sampler=sampler,
        batch_size=case.batch,
        drop_remainder=case.loader_drop_last,
        augment=augment,
        seed=case.seed,
    )


def _config(case: Case) -> TrainConfig:
    """The `tfdp train` options of the case."""
    mix = case.mixup or {}
    return TrainConfig(
        optimizer=case.opt,
        lr=case.lr,
        momentum=case.momentum,
        weight_decay=case.weight_decay,
        schedule=case.sched,
        epochs=case.epochs,
        warmup_epochs=case.warmup_epochs,
        warmup_lr=case.warmup_lr,
        min_lr=case.min_lr,
        sched_on_updates=case.sched_on_updates,
        sched_one_epoch_late=case.driver == "deit",  # DeiT's main.py: step(epoch)
        accum_steps=case.accum,
        clip_grad=case.clip_grad,
        smoothing=mix.get("label_smoothing", case.smoothing),
        mixup=mix.get("mixup_alpha", 0.0),
        cutmix=mix.get("cutmix_alpha", 0.0),
        mixup_switch_prob=mix.get("switch_prob", 0.5),
    )


def _model_and_optimizer(case: Case, init: list[Any], steps: int) -> tuple[Any, Any]:
    """torch's initial MLP in Keras (kernels transposed), and `tfdp train`'s optimizer."""
    model = keras.Sequential(
        [
            keras.Input((8, 8, 1), dtype=case.dtype),
            keras.layers.Flatten(dtype=case.dtype),
            keras.layers.Dense(HIDDEN, activation="relu", dtype=case.dtype),
            keras.layers.Dense(CLASSES, dtype=case.dtype),
        ]
    )
    w1, b1, w2, b2 = (np.asarray(w) for w in init)
    model.set_weights([w1.T, b1, w2.T, b2])
    optimizer = build_optimizer(_config(case), steps, model)
    return model, optimizer


def _fit_loss(case: Case) -> Any:
    """The recipe's loss as ``model.compile`` takes it: mean-reduced, in the model's dtype (a
    Keras loss computes in float32 unless given ``dtype``)."""
    loss = training_loss(_config(case), CLASSES)
    if case.mixup:
        return keras.losses.CategoricalCrossentropy(from_logits=True, dtype=case.dtype)
    if isinstance(loss, str):
        return keras.losses.SparseCategoricalCrossentropy(from_logits=True, dtype=case.dtype)
    return loss


def _rate(optimizer: Any) -> float:
    """The rate the optimizer's next step uses."""
    return float(keras.ops.convert_to_numpy(optimizer.learning_rate))


class StepLosses(keras.callbacks.Callback):
    """Each step's loss and rate on the fit path.

    Keras's ``loss`` in the batch logs is the running mean of the epoch; the metrics reset
    before every batch (``Model.reset_metrics``) make it that step's own loss.
    """

    def __init__(self, losses: list[float], lrs: list[float]) -> None:
        super().__init__()
        self.losses, self.lrs = losses, lrs

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        self.model.reset_metrics()
        self.lrs.append(_rate(self.model.optimizer))

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self.losses.append(float(logs["loss"]))


def tfdp_run(strategy: Any, case: Case, path: str, ran: dict[str, Any], init: list[Any]) -> dict:
    """The case trained by tfdp on ``path``: every step's loss and rate, the final weights."""
    probe = _input(strategy, case, ran)
    steps = -(-probe.steps_per_epoch // case.accum)  # optimizer steps per epoch
    augment = TimmDraws(ran["mix"], case, probe.steps_per_epoch) if case.mixup else None
    train = _input(strategy, case, ran, augment) if augment else probe
    losses: list[float] = []
    lrs: list[float] = []
    with strategy.scope():
        model, optimizer = _model_and_optimizer(case, init, steps)
    if path == "trainer":
        trainer = Trainer(
            strategy,
            model,
            optimizer,
            training_loss(_config(case), CLASSES),
            accumulation_steps=case.accum,
            clip_global_norm=case.clip_grad,
            progress=False,
            verbose=0,
        )
        lrs.append(_rate(optimizer))

        def on_step(state: Any) -> None:
            losses.extend(state.step_losses)
            lrs.append(_rate(optimizer))  # the next step's

        trainer.fit(train, case.epochs, on_step=on_step)
        lrs.pop()
    else:
        with strategy.scope():
            model.compile(optimizer=optimizer, loss=_fit_loss(case))
        fit(model, train, case.epochs, callbacks=[StepLosses(losses, lrs)], verbose=0)
    return {"losses": losses, "lrs": lrs, "weights": [w.numpy() for w in model.weights]}


def _torch_weights(ran: dict[str, Any]) -> list[np.ndarray]:
    """torch's final parameters in Keras's layout (kernels [in, out])."""
    w1, b1, w2, b2 = (np.asarray(w) for w in ran["weights"])
    return [w1.T, b1, w2.T, b2]


def _assert_close(name: str, got: Any, want: Any, tol: float) -> None:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, f"{name}: {got.shape} against torch's {want.shape}"
    diff = np.abs(got - want)
    if diff.size and diff.max() > tol:
        first = np.flatnonzero(diff.reshape(-1) > tol)[0]
        pytest.fail(
            f"{name}: max |tfdp - torch| = {diff.max():.3g} > {tol:g}; first at flat index "
            f"{first}: {got.reshape(-1)[first]!r} against {want.reshape(-1)[first]!r}",
            pytrace=False,
        )


def _exercised(case: Case, ran: dict[str, Any]) -> None:
    """The row really exercises what it is about (in torch's run)."""
    per_rank = (case.n // WORLD) if case.sampler_drop_last else -(-case.n // WORLD)
    batches = (per_rank // case.batch) if case.loader_drop_last else -(-per_rank // case.batch)
    assert len(ran["losses"]) == case.epochs * -(-batches // case.accum)
    if case.clip_grad is not None:
        assert max(ran["norms"]) > case.clip_grad, "no step was clipped"
    if case.accum > 1:
        assert batches % case.accum, "no shorter last accumulation group"
    if not case.loader_drop_last:
        assert per_rank % case.batch, "no partial last batch"
    if case.sampler_drop_last:
        assert case.n % WORLD, "the sampler's drop_last drops nothing"
    if case.sched != "constant":
        assert len(set(ran["lrs"])) > 2, "the rate did not change"
    if case.mixup:
        draws = [d for rank in ran["mix"] for d in rank]
        assert {d["cutmix"] for d in draws} == {True, False}, "Mixup and CutMix both drawn"
    if case.driver == "deit":  # DeiT's rates are not timm's train.py's
        spe = len(ran["lrs"]) // case.epochs
        timm = TimmCosine(case.lr, case.epochs, case.warmup_epochs, case.warmup_lr, case.min_lr,
                          steps_per_t=spe)  # fmt: skip
        assert not np.allclose([float(timm(k)) for k in range(len(ran["lrs"]))], ran["lrs"])


@pytest.mark.parametrize(("case", "path"), _params())
def test_tfdp_trains_as_torch_ddp_step_for_step(case, path, torch_runs, mirrored_of):
    """Every optimizer step's loss and rate, and the final weights, equal torch DDP's."""
    ran = torch_runs["cases"][case.name]
    _exercised(case, ran)
    got = tfdp_run(mirrored_of(WORLD), case, path, ran, torch_runs["init"])
    tol = TOLERANCE[case.dtype]
    # fit's losses come from Keras's loss tracker, a float32 Mean whatever the model's dtype
    loss_tol = max(tol, TOLERANCE["float32"]) if path == "fit" else tol
    _assert_close("the rates", got["lrs"], ran["lrs"], tol * 1e-2)
    _assert_close("the step losses", got["losses"], ran["losses"], loss_tol)
    for k, (w, want) in enumerate(zip(got["weights"], _torch_weights(ran), strict=True)):
        _assert_close(f"final weight {k}", w, want, tol)


def test_every_rank_takes_torchs_samples_in_torchs_order(torch_runs):
    """The recipe's sampler (torch's permutation given) deals each rank torch's list, every
    epoch of every row (what the step-for-step comparison stands on)."""
    for case in CASES:
        ran = torch_runs["cases"][case.name]
        for rank in range(WORLD):
            sampler = DistributedSampler(
                case.n,
                WORLD,
                rank,
                seed=case.seed,
                drop_last=case.sampler_drop_last,
                permutation=lambda epoch, perms=ran["perms"]: np.asarray(perms[epoch]),
            )
            for epoch in range(case.epochs):
                sampler.set_epoch(epoch)
                assert sampler.indices().tolist() == ran["order"][rank][epoch], (case, rank)


def test_mixed_batches_are_the_ones_timm_mixed(torch_runs, mirrored_of):
    """tfdp's Mixup, given the draws timm made (lambda, switch, box), mixes every rank's every
    batch as timm did: the same images and soft targets (1e-6: float32 weights)."""
    (case,) = [c for c in CASES if c.mixup]
    ran = torch_runs["cases"][case.name]
    strategy = mirrored_of(WORLD)
    steps = _input(strategy, case, ran).steps_per_epoch
    train = _input(strategy, case, ran, TimmDraws(ran["mix"], case, steps))
    for rank in range(WORLD):
        got = list(train.rank_dataset(rank, 0, case.epochs))
        want = ran["mix"][rank]
        assert len(got) == len(want) == case.epochs * steps
        for k, ((x, target), mixed) in enumerate(zip(got, want, strict=True)):
            np.testing.assert_allclose(x.numpy(), mixed["x"], atol=1e-6, err_msg=f"{rank} {k}")
            np.testing.assert_allclose(target.numpy(), mixed["target"], atol=1e-6)


def test_the_porting_guide_names_this_harness_and_its_parts():
    """docs/guide.md's "What reproduces a PyTorch run step for step" points here, by names that
    exist: the module, its rows and its replay of timm's draws."""
    guide = (Path(__file__).resolve().parents[1] / "docs/guide.md").read_text()
    section = guide.split("### What reproduces a PyTorch run step for step", 1)[1]
    section = section.split("\n### ", 1)[0]
    assert "`tests/test_ddp_parity.py`" in section
    assert "`cosine_deit` row" in section and "cosine_deit" in {c.name for c in CASES}
    assert "`TimmDraws`" in section and issubclass(TimmDraws, Mixup)
    assert "`MixParams.per_batch(lam, cutmix, box, batch_size)`" in section
    assert list(inspect.signature(MixParams.per_batch).parameters) == [
        "lam", "cutmix", "box", "batch_size"]  # fmt: skip
