"""The training job's model and optimizer, and what is kept of the model at the end.

This module owns :func:`build_optimizer` (the options' optimizer and
learning-rate schedule), :func:`training_loss` (cross-entropy, label-smoothed,
or soft-target under Mixup), :func:`job_metrics` (top-1, top-5) and
:func:`training_metrics` (soft-target accuracy under Mixup),
:func:`model_factory` (the seeded model builder the Trainer calls inside the
strategy's scope), :func:`save_model` (the final
``model.keras`` of a run, written atomically) and
:func:`weights_fingerprint` (a short hash that is equal on every worker of
a healthy job).

Example:
    >>> opt = build_optimizer(TrainConfig(optimizer="adamw", weight_decay=0.0), 10)
    >>> type(opt).__name__, opt.weight_decay  # a 0 stays 0
    ('TorchAdamW', 0.0)
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from tfdp._util import replaced_atomically
from tfdp.recipe.config import SGD_OPTIMIZERS, TrainConfig

__all__ = [
    "EVAL_METRICS",
    "MODEL_FILE",
    "build_optimizer",
    "job_metrics",
    "model_factory",
    "save_model",
    "training_loss",
    "training_metrics",
    "weights_fingerprint",
]

#: The final model's file in the run directory (``keras.models.load_model`` reads it).
MODEL_FILE = "model.keras"


def build_optimizer(cfg: TrainConfig, steps_per_epoch: int, model: Any = None) -> Any:
    """The optimizer of ``cfg`` (``--optimizer``, timm's names) and its learning-rate schedule.

    timm's names build torch's updates (:mod:`tfdp.optim`): ``adam``
    (:class:`~tfdp.optim.TorchAdam`), ``adamw`` (:class:`~tfdp.optim.TorchAdamW`),
    ``sgd`` / ``nesterov`` / ``momentum`` (:class:`~tfdp.optim.TorchSGD`,
    momentum ``cfg.momentum``, 0.9 when not given); ``lion`` is Keras's, and
    ``keras-adam`` / ``keras-adamw`` Keras's Adam / AdamW (epsilon 1e-8, as
    torch's). ``cosine``: timm's cosine (:class:`~tfdp.optim.TimmCosine`) over
    ``cfg.epochs`` with ``cfg.warmup_epochs`` of warm-up from
    ``cfg.warmup_lr`` to ``cfg.min_lr``, per optimizer step or per epoch
    (``cfg.sched_on_updates``), one epoch late as DeiT's with
    ``cfg.sched_one_epoch_late``; ``constant``: ``cfg.lr``. Weight decay as
    timm applies it (decoupled for adamw, lion and Keras's, torch's L2 term
    for adam and the SGDs), none for the one-dimensional weights of ``model``
    (biases, normalisation: :func:`~tfdp.optim.decays`) when it is given.
    ``cfg.model_ema``: Keras's EMA of the trainable weights (``use_ema``,
    ``ema_momentum=cfg.model_ema_decay``), which lives in the optimizer's
    variables and so in its checkpoints.

    Args:
        cfg: The options.
        steps_per_epoch: Optimizer steps per epoch (batches / ``accum_steps``, rounded up).
        model: The model the optimizer trains (its weights of one dimension get no decay).

    Example:
        >>> type(build_optimizer(TrainConfig(), 10)).__name__
        'TorchAdam'
        >>> opt = build_optimizer(TrainConfig(optimizer="sgd", schedule="constant"), 10)
        >>> type(opt).__name__, opt.nesterov, opt.momentum, round(float(opt.learning_rate), 6)
        ('TorchSGD', True, 0.9, 0.003)
        >>> type(build_optimizer(TrainConfig(optimizer="keras-adamw"), 10)).__name__
        'AdamW'
    """
    import keras

    from tfdp.optim import TimmCosine, TorchAdam, TorchAdamW, TorchSGD, decays

    lr: Any = cfg.lr
    if cfg.schedule == "cosine":
        per_t = 1 if cfg.sched_on_updates else max(1, steps_per_epoch)
        units = steps_per_epoch if cfg.sched_on_updates else 1
        lr = TimmCosine(
            cfg.lr,
            t_initial=cfg.epochs * units,
            warmup_t=cfg.warmup_epochs * units,
            warmup_lr_init=cfg.warmup_lr,
            lr_min=cfg.min_lr,
            steps_per_t=per_t,
            t_lag=1 if cfg.sched_one_epoch_late else 0,
        )
    ema = {"use_ema": cfg.model_ema, "ema_momentum": cfg.model_ema_decay}
    wd = cfg.weight_decay
    momentum = 0.9 if cfg.momentum is None else cfg.momentum
    nesterov = cfg.optimizer != "momentum"
    builders = {
        "adam": lambda: TorchAdam(lr, weight_decay=wd, **ema),
        "adamw": lambda: TorchAdamW(lr, weight_decay=wd, **ema),
        "sgd": lambda: TorchSGD(lr, momentum=momentum, nesterov=nesterov, weight_decay=wd, **ema),
        "lion": lambda: keras.optimizers.Lion(lr, weight_decay=wd or None, **ema),
        # torch's eps, as timm's; Keras's Adam decouples a weight decay, as its AdamW
        "keras-adam": lambda: keras.optimizers.Adam(
            lr, epsilon=1e-8, weight_decay=wd or None, **ema
        ),
        "keras-adamw": lambda: keras.optimizers.AdamW(lr, weight_decay=wd, epsilon=1e-8, **ema),
    }
    opt = builders["sgd" if cfg.optimizer in SGD_OPTIMIZERS else cfg.optimizer]()
    if wd and model is not None:
        opt.exclude_from_weight_decay(
            var_list=[v for v in model.trainable_variables if not decays(v)]
        )
    return opt


def training_loss(cfg: TrainConfig, num_classes: int) -> Any:
    """The training loss: cross-entropy from logits, label-smoothed by ``cfg.smoothing``.

    Smoothing ``s`` is timm's ``LabelSmoothingCrossEntropy``: the target
    ``(1 - s) * onehot + s / K`` (Keras's ``label_smoothing``), one loss per example.
    With ``--mixup`` / ``--cutmix`` the targets are Mixup's soft ones, already
    smoothed by ``s`` (timm's ``mixup_target``): the loss is then timm's
    ``SoftTargetCrossEntropy`` (:func:`tfdp.losses.soft_target_cross_entropy`),
    as DeiT's, which smooths nothing again.

    Example:
        >>> import numpy as np
        >>> loss = training_loss(TrainConfig(smoothing=0.1), 4)
        >>> out = loss(np.array([2]), np.log(np.array([[0.1, 0.2, 0.6, 0.1]], "float32")))
        >>> round(float(out[0]), 5)  # 0.9 * -log(.6) + 0.1 * mean(-log p)
        0.62788
        >>> training_loss(TrainConfig(smoothing=0.1, cutmix=1.0), 4).name
        'soft_target_ce'
    """
    from tfdp.recipe.augment_options import mixing

    if mixing(cfg):
        from tfdp.losses import soft_target_cross_entropy

        return soft_target_cross_entropy()
    if not cfg.smoothing:
        return "sparse_categorical_crossentropy_from_logits"
    smoothing = cfg.smoothing

    def smoothed_cross_entropy(y_true: Any, logits: Any) -> Any:
        import keras

        labels = keras.ops.cast(keras.ops.reshape(y_true, [-1]), "int32")
        onehot = keras.ops.one_hot(labels, num_classes, dtype=logits.dtype)
        return keras.losses.categorical_crossentropy(
            onehot, logits, from_logits=True, label_smoothing=smoothing
        )

    return smoothed_cross_entropy


#: What ``--eval-metric`` names, as the held-out record's keys.
EVAL_METRICS = {"top1": "val_sparse_categorical_accuracy", "top5": "val_top5", "loss": "val_loss"}


def training_metrics(cfg: TrainConfig, num_classes: int) -> list[Any]:
    """The training metrics: :func:`job_metrics`, or with soft targets ``soft_target_accuracy``.

    Under Mixup / CutMix the targets are soft: the accuracy reported is the
    argmax of the prediction against the target's argmax (the class with the
    larger weight, :func:`tfdp.losses.soft_target_accuracy`), named apart from
    the plain accuracy it is not comparable with; no top-5. The held-out
    metrics stay :func:`job_metrics` on the plain labels.

    Example:
        >>> [m.name for m in training_metrics(TrainConfig(mixup=0.8), 10)]
        ['soft_target_accuracy']
    """
    from tfdp.recipe.augment_options import mixing

    if not mixing(cfg):
        return job_metrics(num_classes)
    from tfdp.losses import soft_target_accuracy

    return [soft_target_accuracy(name="soft_target_accuracy")]


def job_metrics(num_classes: int) -> list[Any]:
    """Top-1 accuracy, and top-5 (named ``top5``) when there are more than 5 classes.

    Example:
        >>> [m if isinstance(m, str) else m.name for m in job_metrics(10)]
        ['sparse_categorical_accuracy', 'top5']
    """
    import keras

    out: list[Any] = ["sparse_categorical_accuracy"]
    if num_classes > 5:
        out.append(keras.metrics.SparseTopKCategoricalAccuracy(5, name="top5"))
    return out


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


def save_model(model: Any, run_dir: str | os.PathLike[str], name: str = MODEL_FILE) -> str:
    """Save ``model`` as ``run_dir/<name>`` (a temporary file renamed when complete).

    Returns:
        The path written.

    Example:
        >>> import keras, tempfile
        >>> m = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
        >>> path = save_model(m, tempfile.mkdtemp())
        >>> keras.models.load_model(path).output_shape
        (None, 1)
    """
    target = os.path.join(os.fspath(run_dir), name)
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
