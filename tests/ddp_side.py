"""torch DDP's side of the parity harness (tests/test_ddp_parity.py): runs in processes of its own.

``python tests/ddp_side.py REQUEST.json`` trains every case of the request with PyTorch's
DistributedDataParallel on 2 processes (gloo, 127.0.0.1, ``MASTER_PORT`` from the request), the way
timm's ``train.py`` and DeiT's ``main.py`` train: ``DistributedSampler`` + ``DataLoader``, timm's
``create_optimizer_v2`` (its weight-decay groups), ``create_scheduler_v2`` stepped per update
(``step_update``) or per epoch (timm: ``step(epoch + 1)``; DeiT: ``step(epoch)``), timm's losses,
``clip_grad_norm_`` on DDP's all-reduced gradients, accumulation with ``no_sync`` on all but the
group's last micro-batch (each micro-batch's loss divided by the group's size, as timm's), and
timm's ``Mixup`` with numpy seeded ``seed + rank`` (DeiT's). It prints one JSON object: the
initial weights and, per case, every optimizer step's loss (the mean of the ranks' local losses:
what tfdp's step computes when the ranks hold equal batches), each rank's local loss, the rate
the step used, the gradient norm before clipping, the final weights, and for Mixup the draws
timm made (read from timm's own pieces with numpy's state restored, nothing patched) and the
mixed batches and targets it produced.

One interpreter imports torch and timm once and forks the 2 ranks (``torch.multiprocessing``,
``fork``): the imports are the side's main cost. TensorFlow is never imported here.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from timm.data.mixup import Mixup, cutmix_bbox_and_lam
from timm.loss import LabelSmoothingCrossEntropy, SoftTargetCrossEntropy
from timm.optim import create_optimizer_v2
from timm.scheduler import create_scheduler_v2
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

WORLD = 2
HIDDEN = 32


def mlp(num_features: int, num_classes: int) -> torch.nn.Module:
    """The harness's model: flatten, Linear(features, 32), ReLU, Linear(32, classes)."""
    return torch.nn.Sequential(
        torch.nn.Flatten(),
        torch.nn.Linear(num_features, HIDDEN),
        torch.nn.ReLU(),
        torch.nn.Linear(HIDDEN, num_classes),
    )


def weights(model: torch.nn.Module) -> list[Any]:
    """The model's parameters in order (torch's layout: a Linear's weight is [out, in])."""
    return [p.detach().cpu().tolist() for p in model.parameters()]


def loss_function(case: dict[str, Any]) -> Any:
    """timm's / DeiT's criterion: soft targets under Mixup, label smoothing, or plain CE."""
    if case["mixup"]:
        return SoftTargetCrossEntropy()
    if case["smoothing"]:
        return LabelSmoothingCrossEntropy(smoothing=case["smoothing"])
    return torch.nn.CrossEntropyLoss()


def scheduler(case: dict[str, Any], optimizer: Any, updates_per_epoch: int) -> Any:
    """timm's ``create_scheduler_v2`` as timm's train.py calls it (None: a constant rate)."""
    if case["sched"] == "constant":
        return None
    return create_scheduler_v2(
        optimizer,
        sched=case["sched"],
        num_epochs=case["epochs"],
        warmup_epochs=case["warmup_epochs"],
        warmup_lr=case["warmup_lr"],
        min_lr=case["min_lr"],
        step_on_epochs=not case["sched_on_updates"],
        updates_per_epoch=updates_per_epoch,
    )[0]


def mix(mixup: Mixup, x: torch.Tensor, y: torch.Tensor) -> tuple[Any, ...]:
    """timm's ``Mixup`` on a batch, and the draws it made.

    The draws are read from timm's own pieces -- ``_params_per_batch`` (lambda and the switch)
    and ``cutmix_bbox_and_lam`` (the box and the corrected lambda), which ``_mix_batch`` calls
    in that order -- with numpy's state saved before and restored after, so that the call of
    ``mixup(x, y)`` that follows draws exactly the same numbers. Returns ``(mixed x, targets,
    draw)``, the draw as ``{"lam", "cutmix", "box"}`` (box ``[top, bottom, left, right]``).
    """
    state = np.random.get_state()
    lam, use_cutmix = mixup._params_per_batch()
    box = [0, 0, 0, 0]
    if lam != 1.0 and use_cutmix:
        (top, bottom, left, right), lam = cutmix_bbox_and_lam(
            x.shape, lam, ratio_minmax=mixup.cutmix_minmax, correct_lam=mixup.correct_lam
        )
        box = [int(top), int(bottom), int(left), int(right)]
    np.random.set_state(state)
    mixed, target = mixup(x, y)
    return mixed, target, {"lam": float(lam), "cutmix": bool(use_cutmix), "box": box}


def train_case(case: dict[str, Any], data: dict[str, Any], init: list[Any], rank: int) -> dict:
    """One case on this rank: timm's train.py loop (and DeiT's scheduler call when asked)."""
    dtype = torch.float64 if case["dtype"] == "float64" else torch.float32
    x = torch.from_numpy(data["x"][: case["n"]].transpose(0, 3, 1, 2).copy()).to(dtype)  # NCHW
    y = torch.from_numpy(data["y"][: case["n"]])
    model = mlp(int(np.prod(x.shape[1:])), data["classes"]).to(dtype)
    with torch.no_grad():
        for p, value in zip(model.parameters(), init, strict=True):
            p.copy_(torch.tensor(value, dtype=dtype))
    optimizer = create_optimizer_v2(
        model,
        opt=case["opt"],
        lr=case["lr"],
        weight_decay=case["weight_decay"],
        momentum=case["momentum"],
    )
    ddp = DistributedDataParallel(model)
    dataset = TensorDataset(x, y)
    sampler = DistributedSampler(
        dataset,
        num_replicas=WORLD,
        rank=rank,
        shuffle=True,
        seed=case["seed"],
        drop_last=case["sampler_drop_last"],
    )
    loader = DataLoader(
        dataset, batch_size=case["batch"], sampler=sampler, drop_last=case["loader_drop_last"]
    )
    accum = case["accum"]
    updates_per_epoch = (len(loader) + accum - 1) // accum
    schedule = scheduler(case, optimizer, updates_per_epoch)
    criterion = loss_function(case)
    mixup = None
    if case["mixup"]:
        mixup = Mixup(**case["mixup"], num_classes=data["classes"])
        np.random.seed(case["seed"] + rank)  # DeiT: seed = args.seed + get_rank()
    out: dict[str, Any] = {"losses": [], "local": [], "lrs": [], "norms": [], "perms": []}
    mixes: list[dict[str, Any]] = []
    orders: list[list[int]] = []
    num_updates = 0
    for epoch in range(case["epochs"]):
        sampler.set_epoch(epoch)
        orders.append(list(sampler))
        # what DistributedSampler shuffles with (docs/guide.md's recipe), for tfdp's permutation=
        generator = torch.Generator().manual_seed(case["seed"] + epoch)
        out["perms"].append(torch.randperm(case["n"], generator=generator).tolist())
        ddp.train()
        # timm train.py's train_one_epoch, transcribed (its accumulation bookkeeping included)
        accum_steps = accum
        last_accum_steps = len(loader) % accum_steps
        last_batch_idx = len(loader) - 1
        last_batch_idx_to_accum = len(loader) - last_accum_steps
        optimizer.zero_grad()
        local = 0.0
        for batch_idx, (xb, yb) in enumerate(loader):
            last_batch = batch_idx == last_batch_idx
            need_update = last_batch or (batch_idx + 1) % accum_steps == 0
            if batch_idx >= last_batch_idx_to_accum:
                accum_steps = last_accum_steps
            if mixup is not None:
                xb, yb, draw = mix(mixup, xb, yb)
                mixes.append({**draw, "x": xb.permute(0, 2, 3, 1).tolist(), "target": yb.tolist()})

            def forward(xb: torch.Tensor = xb, yb: torch.Tensor = yb, k: int = accum_steps) -> Any:
                loss = criterion(ddp(xb), yb)
                return loss / k if k > 1 else loss

            if not need_update:
                with ddp.no_sync():
                    loss = forward()
                    loss.backward()
            else:
                loss = forward()
                loss.backward()
            local += float(loss.detach())
            if not need_update:
                continue
            if case["clip_grad"] is not None:
                norm = torch.nn.utils.clip_grad_norm_(model.parameters(), case["clip_grad"])
            else:
                norm = torch.linalg.vector_norm(
                    torch.stack([torch.linalg.vector_norm(p.grad) for p in model.parameters()])
                )
            out["lrs"].append(optimizer.param_groups[0]["lr"])
            out["norms"].append(float(norm))
            optimizer.step()
            optimizer.zero_grad()
            num_updates += 1
            both = torch.tensor([local], dtype=torch.float64)
            gathered = [torch.zeros_like(both) for _ in range(WORLD)]
            dist.all_gather(gathered, both)
            out["local"].append([float(g) for g in gathered])
            out["losses"].append(sum(float(g) for g in gathered) / WORLD)
            local = 0.0
            if schedule is not None:
                schedule.step_update(num_updates=num_updates)
        if schedule is not None:
            # timm's train.py: step(epoch + 1); DeiT's main.py: step(epoch)
            schedule.step(epoch if case["driver"] == "deit" else epoch + 1)
    out["weights"] = weights(model)
    out["mix"], out["order"] = gather(mixes), gather(orders)
    return out


def gather(value: Any) -> list[Any]:
    """Every rank's ``value``, by rank."""
    values: list[Any] = [None] * WORLD
    dist.all_gather_object(values, value)
    return values


def worker(rank: int, request: dict[str, Any], out_path: str) -> None:
    """Rank ``rank``: joins the gloo group, trains every case, rank 0 writes the results."""
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(request["port"]))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        with np.load(request["data"]) as f:
            data = {"x": f["x"], "y": f["y"].astype(np.int64), "classes": int(f["classes"])}
        torch.manual_seed(request["init_seed"])
        features = int(np.prod(data["x"].shape[1:]))
        init = weights(mlp(features, data["classes"]))  # torch's default initialisation
        results = {c["name"]: train_case(c, data, init, rank) for c in request["cases"]}
        if rank == 0:
            with open(out_path, "w") as f:
                json.dump({"init": init, "cases": results}, f)
    finally:
        dist.destroy_process_group()


def main() -> None:
    with open(sys.argv[1]) as f:
        request = json.load(f)
    with tempfile.TemporaryDirectory() as tmp:
        out_path = os.path.join(tmp, "out.json")
        mp.start_processes(
            worker, args=(request, out_path), nprocs=WORLD, join=True, start_method="fork"
        )
        with open(out_path) as f:
            sys.stdout.write(f.read())


if __name__ == "__main__":
    main()
