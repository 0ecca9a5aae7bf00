"""torch's optimizers and timm's schedule, run in a process of their own for every case at once.

The cases (random weights and gradients, learning rates that change every step, weight decay
on the 2-D weight only or on both, float32 and float64) are made here in the test process and
sent to one interpreter that imports torch (and timm, for the schedules) and no TensorFlow
(``python tests/torch_optim_side.py`` reads the request on stdin and prints the results):
:func:`results` runs it once per test process, for tests/test_optim.py and
tests/test_recipe_optim.py alike (their cross-checks share one xdist group, :data:`GROUP`).
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

#: The xdist group of every test that reads :func:`results` (one subprocess per worker).
GROUP = "torch_optim_side"
#: Learning rates of the steps: float32 numbers exactly (Keras keeps a constant rate in float32).
LRS = [2.0**-10, 2.0**-11, 3 * 2.0**-12, 2.0**-9, 2.0**-12, 5 * 2.0**-13]
STEPS = len(LRS)
#: The Adam cases: (name, optimizer, dtype, decay, decay the bias too, amsgrad, betas, eps).
ADAM_CASES = [
    ("adam-l2-f64", "adam", "float64", 0.05, False, False, (0.9, 0.999), 1e-8),
    ("adam-l2-amsgrad-f32", "adam", "float32", 0.05, False, True, (0.9, 0.999), 1e-8),
    ("adam-plain-f32", "adam", "float32", 0.0, False, False, (0.9, 0.999), 1e-8),
    ("adamw-f64", "adamw", "float64", 0.05, False, False, (0.9, 0.999), 1e-8),
    ("adamw-all-amsgrad-f32", "adamw", "float32", 0.1, True, True, (0.9, 0.999), 1e-8),
    ("adamw-betas-eps-amsgrad-f64", "adamw", "float64", 0.02, False, True, (0.8, 0.99), 1e-6),
]
#: The SGD cases of the recipe's names: (name, nesterov, dtype); momentum 0.9, L2 0.05 (weight).
SGD_CASES = [("sgd", True, "float64"), ("momentum", False, "float64"), ("sgd", True, "float32")]
#: timm's CosineLRScheduler: (base, epochs, warmup, warmup_lr, min_lr, steps per epoch, on_updates)
SCHEDULE_CASES = [
    (5e-4, 6, 2, 1e-6, 1e-5, 4, False),
    (0.1, 5, 1, 0.0, 0.0, 3, True),
    (1e-3, 4, 0, 0.0, 1e-4, 2, False),
]


def case_inputs(seed: int, dtype: str = "float64") -> dict[str, Any]:
    """A 3x2 weight, a bias, and ``STEPS`` gradients of each, in ``dtype``.

    Half the bias's gradients are tiny (1e-9 .. 1e-7): there the root of ``v`` is below
    ``eps``, where torch's Adam and Keras's differ most.
    """
    rng = np.random.default_rng(seed)
    w0, b0 = rng.normal(size=(3, 2)), rng.normal(size=2)
    grads = []
    for _ in range(STEPS):
        gw, gb = rng.normal(size=(3, 2)), rng.normal(size=2)
        gb[1] *= 10.0 ** rng.uniform(-9, -7)
        grads.append((gw, gb))
    cast = lambda a: np.asarray(a, dtype)  # noqa: E731
    return {
        "w0": cast(w0),
        "b0": cast(b0),
        "grads": [(cast(gw), cast(gb)) for gw, gb in grads],
    }


def _plain(inputs: dict[str, Any]) -> dict[str, Any]:
    """The inputs as JSON (float32 values are floats exactly)."""
    return {
        "w0": inputs["w0"].tolist(),
        "b0": inputs["b0"].tolist(),
        "grads": [[gw.tolist(), gb.tolist()] for gw, gb in inputs["grads"]],
    }


@functools.cache
def results() -> dict[str, Any]:
    """torch's weights after every step of every case (``adam`` / ``sgd``: ``{name: [[w, b]
    per step]}``) and timm's rates of every schedule case (``schedules``: None without timm)."""
    request = {
        "lrs": LRS,
        "adam": [
            [name, opt, dtype, decay, both, amsgrad, betas, eps, _plain(case_inputs(i, dtype))]
            for i, (name, opt, dtype, decay, both, amsgrad, betas, eps) in enumerate(ADAM_CASES)
        ],
        "sgd": [
            [f"{name}-{dtype}", nesterov, dtype, _plain(case_inputs(100 + i, dtype))]
            for i, (name, nesterov, dtype) in enumerate(SGD_CASES)
        ],
        "schedules": SCHEDULE_CASES,
    }
    proc = subprocess.run(
        [sys.executable, str(Path(__file__))],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


# -- the torch side (runs in its own process) ----------------------------------------------------


def _run(opt: Any, params: list[Any], grads: list[Any], lrs: list[float], dtype: Any) -> list:
    """The parameters after every step."""
    import torch

    out = []
    for lr, step_grads in zip(lrs, grads, strict=True):
        for group in opt.param_groups:
            group["lr"] = lr
        for p, g in zip(params, step_grads, strict=True):
            p.grad = torch.tensor(g, dtype=dtype)
        opt.step()
        out.append([p.detach().tolist() for p in params])
    return out


def _torch_side(request: dict[str, Any]) -> dict[str, Any]:
    import importlib.util

    import torch

    lrs = request["lrs"]
    out: dict[str, Any] = {"adam": {}, "sgd": {}, "schedules": None}
    for name, opt, dtype, decay, both, amsgrad, betas, eps, data in request["adam"]:
        dt = getattr(torch, dtype)
        w = torch.nn.Parameter(torch.tensor(data["w0"], dtype=dt))
        b = torch.nn.Parameter(torch.tensor(data["b0"], dtype=dt))
        groups = [{"params": [w], "weight_decay": decay},
                  {"params": [b], "weight_decay": decay if both else 0.0}]  # fmt: skip
        kind = torch.optim.Adam if opt == "adam" else torch.optim.AdamW
        o = kind(groups, lr=lrs[0], betas=tuple(betas), eps=eps, amsgrad=amsgrad, foreach=False)
        out["adam"][name] = _run(o, [w, b], data["grads"], lrs, dt)
    for name, nesterov, dtype, data in request["sgd"]:
        dt = getattr(torch, dtype)
        w = torch.nn.Parameter(torch.tensor(data["w0"], dtype=dt))
        b = torch.nn.Parameter(torch.tensor(data["b0"], dtype=dt))
        # timm's param groups: weight decay for the 2-D weight only (filter_bias_and_bn)
        groups = [{"params": [w], "weight_decay": 0.05}, {"params": [b], "weight_decay": 0.0}]
        o = torch.optim.SGD(groups, lr=lrs[0], momentum=0.9, nesterov=nesterov, foreach=False)
        out["sgd"][name] = _run(o, [w, b], data["grads"], lrs, dt)
    if all(importlib.util.find_spec(m) is not None for m in ("torchvision", "timm")):
        from timm.scheduler import CosineLRScheduler

        out["schedules"] = []
        for base, epochs, warmup, warmup_lr, min_lr, spe, on_updates in request["schedules"]:
            o = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=base)
            units = spe if on_updates else 1
            s = CosineLRScheduler(o, t_initial=epochs * units, warmup_t=warmup * units,
                                  warmup_lr_init=warmup_lr, lr_min=min_lr,
                                  t_in_epochs=not on_updates)  # fmt: skip
            rates = []
            for epoch in range(epochs + 1):
                for step in range(spe):
                    rates.append(o.param_groups[0]["lr"])
                    if on_updates:
                        s.step_update(epoch * spe + step + 1)
                s.step(epoch + 1)
            out["schedules"].append(rates)
    return out


if __name__ == "__main__":
    print(json.dumps(_torch_side(json.loads(sys.stdin.read()))))
