"""The training job's model and optimizer, and what is kept of the model at the end.

This module owns :func:`build_optimizer` (the options' optimizer and
learning-rate schedule), :func:`model_factory` (the seeded model builder the
Trainer calls inside the strategy's scope), :func:`save_model` (the final
``model.keras`` of a run, written atomically) and
:func:`weights_fingerprint` (a short hash that is equal on every worker of
a healthy job).

Example:
    >>> opt = build_optimizer(TrainConfig(optimizer="sgd", schedule="constant"), 10)
    >>> type(opt).__name__, round(float(opt.learning_rate), 6)
    ('SGD', 0.003)
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from tfdp._util import replaced_atomically
from tfdp.recipe.config import TrainConfig

__all__ = [
    "MODEL_FILE",
    "build_optimizer",
    "model_factory",
    "save_model",
    "weights_fingerprint",
]

#: The final model's file in the run directory (``keras.models.load_model`` reads it).
MODEL_FILE = "model.keras"


def build_optimizer(cfg: TrainConfig, steps_per_epoch: int) -> Any:
    """The optimizer of ``cfg``: cosine decay after a one-epoch warm-up, or a constant rate.

    Example:
        >>> type(build_optimizer(TrainConfig(), 10)).__name__
        'Adam'
    """
    import keras

    lr: Any = cfg.lr
    if cfg.schedule == "cosine":
        total = max(1, cfg.epochs * steps_per_epoch)
        warmup = min(steps_per_epoch, total // 2)
        lr = keras.optimizers.schedules.CosineDecay(
            0.0 if warmup else cfg.lr,
            total - warmup,
            warmup_target=cfg.lr if warmup else None,
            warmup_steps=warmup,
        )
    if cfg.optimizer == "adam":
        return keras.optimizers.Adam(lr)
    if cfg.optimizer == "adamw":
        return keras.optimizers.AdamW(lr, weight_decay=cfg.weight_decay or 0.004)
    return keras.optimizers.SGD(lr, momentum=0.9, weight_decay=cfg.weight_decay or None)


def model_factory(
    cfg: TrainConfig, shape: tuple[int, int, int], num_classes: int
) -> Callable[[], Any]:
    """A function building ``cfg.model`` with weights seeded by ``cfg.seed``.

    Example:
        >>> model = model_factory(TrainConfig(), (8, 8, 1), 10)()
        >>> model.output_shape
        (None, 10)
    """

    def build() -> Any:
        import keras

        from tfdp.recipe.networks import build_model

        keras.utils.set_random_seed(cfg.seed)
        return build_model(cfg.model, shape, num_classes)

    return build


def save_model(model: Any, run_dir: str | os.PathLike[str]) -> str:
    """Save ``model`` as ``run_dir/model.keras`` (a temporary file renamed when complete).

    Returns:
        The path written.

    Example:
        >>> import keras, tempfile
        >>> m = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
        >>> path = save_model(m, tempfile.mkdtemp())
        >>> keras.models.load_model(path).output_shape
        (None, 1)
    """
    target = os.path.join(os.fspath(run_dir), MODEL_FILE)
    with replaced_atomically(target, suffix=".keras") as tmp:  # Keras wants the extension
        model.save(tmp)
    return target


def weights_fingerprint(model: Any) -> str:
    """A short SHA-256 of a model's weights: equal on every worker of a healthy job.

    Example:
        >>> import keras
        >>> m = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
        >>> len(weights_fingerprint(m))
        16
    """
    import hashlib

    import numpy as np

    digest = hashlib.sha256()
    for w in model.weights:
        digest.update(np.ascontiguousarray(w.numpy()).tobytes())
    return digest.hexdigest()[:16]
