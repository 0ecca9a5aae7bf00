"""The training job's model and optimizer, and what is kept of the model at the end.

This module owns :func:`build_optimizer` (the options' optimizer and
learning-rate schedule), :func:`training_loss` (cross-entropy, label-smoothed,
or soft-target under Mixup; DeiT's distillation loss around it),
:func:`job_metrics` (top-1, top-5) and :func:`training_metrics` (soft-target
accuracy under Mixup; on the class head when distilling),
:func:`model_factory` (the seeded model builder the Trainer calls inside the
strategy's scope: stochastic depth, ``--finetune``, the teacher), :func:`save_model` (the final
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
import sys
from collections.abc import Callable
from typing import Any

from tfdp._util import replaced_atomically
from tfdp.errors import renaming
from tfdp.recipe.config import SGD_OPTIMIZERS, TrainConfig
from tfdp.recipe.model_options import distilling

#: The model builders' arguments as the job's options say them.
_BUILDER_OPTIONS = {"input_shape": "image_size"}

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
    for adam and the SGDs), none for timm's no-decay group of ``model`` when it
    is given: its weights of one dimension (biases, normalisation:
    :func:`~tfdp.optim.decays`), and a ViT / DeiT's biases, tokens and position
    embeddings (:func:`tfdp.models.no_weight_decay`, timm's ``no_weight_decay()``).
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

    from tfdp.optim import TimmCosine, TorchAdam, TorchAdamW, TorchSGD

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
        opt.exclude_from_weight_decay(var_list=_no_decay(cfg, model))
    return opt


def _no_decay(cfg: TrainConfig, model: Any) -> list[Any]:
    """The weights timm's optimizer gives no decay (its ``param_groups_weight_decay``).

    A ViT / DeiT's biases, tokens and position embeddings
    (:func:`tfdp.models.no_weight_decay`) -- a model named by timm's name, or one
    a ``module:function`` factory built with :func:`tfdp.models.vision_transformer`
    -- else the weights of one dimension.
    """
    from tfdp.models.names import is_model_name

    if is_model_name(cfg.model) or _is_vision_transformer(model):
        from tfdp.models import no_weight_decay

        return no_weight_decay(model)
    from tfdp.optim import decays

    return [v for v in model.trainable_variables if not decays(v)]


def _is_vision_transformer(model: Any) -> bool:
    """Whether ``model`` (or a Distiller's student) is :func:`tfdp.models.vision_transformer`'s.

    Its patch embedding is tfdp's; the module that defines it is loaded when such a model
    exists, so a model of another kind costs no import (nor keras-hub).
    """
    vit = sys.modules.get("tfdp.models.vit")
    if vit is None:
        return False
    import keras

    embeddings = (vit.PatchEmbed, vit.DistilledPatchEmbed)
    models = [model] if isinstance(model, keras.Model) else []  # else: variables alone
    while models:
        layers = models.pop().layers
        if any(isinstance(layer, embeddings) for layer in layers):
            return True
        models += [layer for layer in layers if isinstance(layer, keras.Model)]
    return False


def training_loss(cfg: TrainConfig, num_classes: int) -> Any:
    """The training loss: cross-entropy from logits, label-smoothed by ``cfg.smoothing``.

    Smoothing ``s`` is timm's ``LabelSmoothingCrossEntropy``: the target
    ``(1 - s) * onehot + s / K`` (Keras's ``label_smoothing``), one loss per example.
    With ``--mixup`` / ``--cutmix`` the targets are Mixup's soft ones, already
    smoothed by ``s`` (timm's ``mixup_target``): the loss is then timm's
    ``SoftTargetCrossEntropy`` (:func:`tfdp.losses.soft_target_cross_entropy`),
    as DeiT's, which smooths nothing again. With ``--distillation-type`` soft
    or hard that loss is DeiT's base criterion, on the class head, inside
    DeiT's ``DistillationLoss`` (:func:`tfdp.models.distillation_loss`, per
    example, over the :class:`~tfdp.models.Distiller`'s ``[B, 3, K]``).

    Example:
        >>> import numpy as np
        >>> loss = training_loss(TrainConfig(smoothing=0.1), 4)
        >>> out = loss(np.array([2]), np.log(np.array([[0.1, 0.2, 0.6, 0.1]], "float32")))
        >>> round(float(out[0]), 5)  # 0.9 * -log(.6) + 0.1 * mean(-log p)
        0.62788
        >>> training_loss(TrainConfig(smoothing=0.1, cutmix=1.0), 4).name
        'soft_target_ce'
        >>> training_loss(TrainConfig(model="deit_tiny_distilled_patch16_224",
        ...     distillation_type="hard", teacher_model="t.keras"), 4).__name__
        'deit_hard_distillation'
    """
    base = _base_loss(cfg, num_classes)
    if not distilling(cfg):
        return base
    from tfdp.models.distill import distillation_loss
    from tfdp.train.evaluate import per_example_loss

    return distillation_loss(
        per_example_loss(base), cfg.distillation_type, cfg.distillation_alpha, cfg.distillation_tau
    )


def _base_loss(cfg: TrainConfig, num_classes: int) -> Any:
    """:func:`training_loss` without distillation (DeiT's base criterion)."""
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

    When distilling, each reads the class head of the
    :class:`~tfdp.models.Distiller`'s training output (:class:`tfdp.models.ClassHead`).

    Example:
        >>> [m.name for m in training_metrics(TrainConfig(mixup=0.8), 10)]
        ['soft_target_accuracy']
    """
    from tfdp.recipe.augment_options import mixing

    if not mixing(cfg):
        out = job_metrics(num_classes)
    else:
        from tfdp.losses import soft_target_accuracy

        out = [soft_target_accuracy(name="soft_target_accuracy")]
    if not distilling(cfg):
        return out
    from tfdp.models.distill import ClassHead

    return [ClassHead(m) for m in out]


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
    cfg: TrainConfig, shape: tuple[int, int, int], num_classes: int, files: Any = None
) -> Callable[[], Any]:
    """A function building ``cfg.model`` with weights seeded by ``cfg.seed``.

    With ``--drop-path`` (its draws keyed by ``cfg.seed`` too); started from
    ``files``' ``--finetune`` state dict; when distilling, the student and
    ``files``' teacher in a :class:`~tfdp.models.Distiller` (without
    ``files``: no teacher, for a checkpoint read back). See
    :func:`tfdp.recipe.student.student_and_teacher`.

    Example:
        >>> model = model_factory(TrainConfig(), (8, 8, 1), 10)()
        >>> model.output_shape
        (None, 10)
    """

    def build() -> Any:
        import keras

        from tfdp.recipe.networks import build_model

        keras.utils.set_random_seed(cfg.seed)
        with renaming(_BUILDER_OPTIONS):  # the builders' arguments, as the job's options
            model = build_model(
                cfg.model, shape, num_classes, drop_path=cfg.drop_path, seed=cfg.seed
            )
        if files is None and not distilling(cfg):
            return model
        from tfdp.recipe.student import student_and_teacher

        return student_and_teacher(cfg, model, shape, num_classes, files)

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
