"""Evaluating a run: its latest readable checkpoint, exactly, on its held-out split.

This module owns :func:`run_evaluate`, what ``tfdp evaluate RUN_DIR`` does: the run's options
read back from its ``config.json``, its data, model and held-out input built as training built
them (:mod:`tfdp.recipe.run` trains; this only reads), the checkpoint found as a resume finds it,
and :func:`tfdp.train.evaluate` run on any replica count with the same result.

Example:
    >>> run_evaluate("/nonexistent/run")
    Traceback (most recent call last):
    ...
    tfdp.errors.StateError: '/nonexistent/run' is not a tfdp run directory (no config.json)
"""

from __future__ import annotations

import os
from typing import Any

from tfdp.errors import StateError
from tfdp.recipe.config import TrainConfig, check_config, check_paths
from tfdp.recipe.data import build_data, eval_input
from tfdp.recipe.model import job_metrics, model_factory
from tfdp.recipe.resume import has_checkpoints, read_run_config


def run_evaluate(run_dir: str, replicas: int | None = None) -> dict[str, Any]:
    """Evaluate the latest readable checkpoint of ``run_dir`` on its held-out split, exactly.

    The result is the same whatever the replica count. The checkpoint is
    found as training's resume finds it (:meth:`tfdp.checkpoint.CheckpointManager.restore`:
    a corrupt or truncated newest one is skipped for the previous one, with a
    warning); ``"checkpoint"`` in the result names the one evaluated.

    Raises:
        StateError: ``run_dir`` has no (readable) ``config.json`` or no checkpoint.
    """
    path = os.path.join(run_dir, "config.json")
    if not os.path.isfile(path):
        hint = ""
        if has_checkpoints(run_dir):
            hint = (
                ": it has checkpoints, but their data and model are described by config.json; "
                f"rebuild it with `tfdp train --resume --run-dir {run_dir}` and the run's options"
            )
        raise StateError(f"{run_dir!r} is not a tfdp run directory (no config.json){hint}")
    saved, _ = read_run_config(path)
    cfg = TrainConfig(**saved)
    if replicas is not None:
        cfg.replicas = replicas
    check_config(cfg)
    check_paths(cfg)
    from tfdp.distribute import make_strategy

    strategy = make_strategy(
        "auto" if cfg.strategy == "multi_worker" else cfg.strategy, cpu_replicas=cfg.replicas
    )
    from tfdp.checkpoint import CheckpointManager
    from tfdp.train import evaluate

    data = build_data(cfg)
    w = strategy.num_replicas_in_sync
    with strategy.scope():
        model = model_factory(cfg, data.shape, data.num_classes)()
    ckpt_dir = os.path.join(run_dir, "checkpoints")
    manager = CheckpointManager(ckpt_dir, strategy=strategy, read_only=True, model=model)
    if manager.restore(partial=True) is None:
        raise StateError(f"{run_dir!r} has no checkpoint under {ckpt_dir!r}")
    out = evaluate(
        strategy,
        model,
        eval_input(cfg, strategy, data),
        "sparse_categorical_crossentropy_from_logits",
        job_metrics(data.num_classes),
    )
    out["replicas"] = w
    out["checkpoint"] = manager.restored
    return out
