"""DeiT's model options of the training job: stochastic depth, fine-tuning, distillation.

This module owns the options ``tfdp train`` takes with DeiT's ``main.py``
names for its models (``--drop-path``, ``--finetune``, ``--teacher-model``,
``--teacher-path``, ``--distillation-type``, ``--distillation-alpha``,
``--distillation-tau``) as :class:`ModelOptions` (a part of
:class:`tfdp.recipe.config.TrainConfig`), :func:`check_model_options` (their
values and combinations, before TensorFlow loads) and
:func:`check_model_files` (the files they name). Their meaning:

* ``--drop-path``: timm's stochastic depth of the ViT / DeiT models
  (:func:`tfdp.models.drop_path_rates`), or the ``drop_path_rate`` of a
  ``module:function`` factory that takes one;
* ``--finetune``: a timm / DeiT checkpoint the run starts from, as DeiT's
  ``--finetune`` (position embeddings interpolated to the run's grid, a head
  of another class count re-initialised); read once, by a new run;
* ``--teacher-model``: the teacher, a Keras model file (``.keras``, its
  weights inside) or a model the job can build -- a ViT / DeiT name,
  ``cnn``, ``resnet``, a ``keras.applications`` name, ``module:function`` --
  with ``--teacher-path`` its weights (a Keras ``.weights.h5``; for a ViT /
  DeiT name also a timm / DeiT checkpoint, ``.pth`` or ``.safetensors``);
* ``--distillation-type none|soft|hard``, ``--distillation-alpha``,
  ``--distillation-tau``: DeiT's ``DistillationLoss``
  (:func:`tfdp.models.distillation_loss`), of a distilled student
  (``deit_*_distilled_patch16_224``). Without a teacher a distilled model
  trains, as timm trains it, on the average of its two heads.

The teacher is no part of the run's checkpoints; ``config.json`` records it
(path and weights fingerprint), and a resume with other teacher weights is
refused (:mod:`tfdp.recipe.student`). Importing this module loads no
TensorFlow.

Example:
    >>> opts = ModelOptions(distillation_type="hard", teacher_model="teacher.keras")
    >>> distilling(opts), opts.distillation_alpha
    (True, 0.5)
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

from tfdp.errors import ConfigError, DataError, renaming
from tfdp.models.names import DISTILLATION_TYPES, is_model_name, model_spec, require_keras_hub
from tfdp.models.weights import STATE_SUFFIXES
from tfdp.recipe.networks import check_model_module, check_model_ref
from tfdp.recipe.options import option

#: A Keras model file, which holds its weights.
_KERAS_FILE = ".keras"
#: Keras's weights files (``model.load_weights``).
_KERAS_WEIGHTS = ".weights.h5"


@dataclass
class ModelOptions:
    """DeiT's model options (:class:`tfdp.recipe.config.TrainConfig` has them all)."""

    drop_path: float = option(
        0.0,
        "stochastic depth (DeiT's / timm's --drop-path; DeiT trains with 0.1): the largest rate "
        "of the ViT / DeiT models, block i of D dropping each residual branch per sample at "
        "rate * i / (D - 1); a module:function factory gets it as drop_path_rate",
    )
    finetune: str | None = option(
        None,
        "start from the weights of a timm / DeiT checkpoint (.pth, read with torch, or "
        ".safetensors), as DeiT's --finetune: position embeddings interpolated to "
        "--image-size, the class and distillation tokens kept, a head of another class count "
        "re-initialised (ViT / DeiT models)",
    )
    teacher_model: str | None = option(
        None,
        "the distillation teacher: a Keras model file (.keras, with its weights), or a model "
        "as --model names them with its weights in --teacher-path; it must output one logit "
        "per class of the data. Not checkpointed: config.json records it (path, weights "
        "sha256) and a resume with other weights is refused",
        resume="record",
    )
    teacher_path: str | None = option(
        None,
        "the teacher's weights: a Keras .weights.h5, or for a ViT / DeiT --teacher-model a "
        "timm / DeiT checkpoint (.pth, .safetensors)",
        resume="record",
    )
    distillation_type: str = option(
        "none",
        "DeiT's distillation: hard (cross-entropy of the distillation head against the "
        "teacher's argmax) or soft (KL divergence at --distillation-tau); needs a distilled "
        "--model (deit_*_distilled_patch16_224) and --teacher-model. The held-out metrics "
        "average the two heads",
        ("none", *DISTILLATION_TYPES),
    )
    distillation_alpha: float = option(
        0.5,
        "the distillation term's weight: loss = base * (1 - alpha) + distillation * alpha",
        resume="record",
    )
    distillation_tau: float = option(1.0, "the soft distillation's temperature", resume="record")


def distilling(cfg: Any) -> bool:
    """Whether ``cfg`` distils from a teacher (``--distillation-type`` soft or hard).

    Example:
        >>> distilling(ModelOptions()), distilling(ModelOptions(distillation_type="soft"))
        (False, True)
    """
    return cfg.distillation_type != "none"


def keras_teacher(cfg: Any) -> bool:
    """Whether ``--teacher-model`` is a Keras model file (``.keras``), rather than a model name.

    Example:
        >>> keras_teacher(ModelOptions(teacher_model="t.keras")), keras_teacher(ModelOptions())
        (True, False)
    """
    return bool(cfg.teacher_model) and str(cfg.teacher_model).endswith(_KERAS_FILE)


#: The model builders' ``model`` as the teacher's option (the student's is ``model`` too).
_TEACHER = {"model": "teacher_model"}


def check_model_options(cfg: Any) -> None:
    """Refuse model option values no run can use, naming the flag and what is valid.

    Pure Python (before TensorFlow loads): the ranges, the combinations
    (a teacher for distillation, a distilled student, weights for a teacher
    that is built, a ViT / DeiT model for ``--finetune``) and the
    ``tfdp[models]`` extra for a ViT / DeiT model or teacher.

    Raises:
        ConfigError: for the first bad value.

    Example:
        >>> check_model_options(ModelOptions(distillation_type="hard"))
        Traceback (most recent call last):
        ...
        tfdp.errors.ConfigError: distillation_type: hard needs a teacher: give --teacher-model (a .keras file, or a model with its weights in --teacher-path)
    """  # noqa: E501
    model = getattr(cfg, "model", "")
    vit = is_model_name(model)
    if vit:
        require_keras_hub(model)
    size = getattr(cfg, "image_size", None)
    if vit and size is not None and size % model_spec(model).patch:
        patch = model_spec(model).patch
        fits = max(patch, size - size % patch)
        raise ConfigError(
            f"{size}: --model {model} takes images whose size is a multiple of its "
            f"patch, {patch} (e.g. {fits} or {fits + patch})",
            argument="image_size",
        )
    if not (isinstance(cfg.drop_path, (int, float)) and 0 <= cfg.drop_path < 1):
        raise ConfigError(f"must be in [0, 1), got {cfg.drop_path}", argument="drop_path")
    if cfg.drop_path and not vit and ":" not in model:
        raise ConfigError(
            f"{cfg.drop_path:g}: model {model!r} has no stochastic depth; use a ViT / "
            "DeiT --model (deit_tiny_patch16_224, ...) or a module:function factory taking "
            "drop_path_rate",
            argument="drop_path",
        )
    if not 0 <= cfg.distillation_alpha <= 1:
        raise ConfigError(
            f"must be in [0, 1], got {cfg.distillation_alpha}", argument="distillation_alpha"
        )
    if not (math.isfinite(cfg.distillation_tau) and cfg.distillation_tau > 0):
        raise ConfigError(
            f"must be a finite number > 0, got {cfg.distillation_tau}", argument="distillation_tau"
        )
    _check_finetune(cfg, model, vit)
    _check_teacher(cfg, model, vit)


def _check_finetune(cfg: Any, model: str, vit: bool) -> None:
    if cfg.finetune is None:
        return
    if not str(cfg.finetune).strip():
        raise ConfigError("empty", argument="finetune")
    if not vit:
        raise ConfigError(
            f"loads timm / DeiT checkpoints into the ViT / DeiT models; --model "
            f"{model!r} is not one (deit_tiny_patch16_224, ...)",
            argument="finetune",
        )
    if not str(cfg.finetune).endswith(STATE_SUFFIXES):
        raise ConfigError(
            f"{cfg.finetune!r}: expected a timm / DeiT checkpoint ("
            + ", ".join(STATE_SUFFIXES)
            + ")",
            argument="finetune",
        )


def _check_teacher(cfg: Any, model: str, vit: bool) -> None:
    kind = cfg.distillation_type
    if kind == "none":
        if cfg.teacher_model or cfg.teacher_path:
            given = "teacher_model" if cfg.teacher_model else "teacher_path"
            raise ConfigError(
                "given, but --distillation-type is none: give --distillation-type "
                "hard or soft to distil from it, or leave the teacher out",
                argument=given,
            )
        return
    if not cfg.teacher_model:
        raise ConfigError(
            f"{kind} needs a teacher: give --teacher-model (a .keras file, "
            "or a model with its weights in --teacher-path)",
            argument="distillation_type",
        )
    if (vit and not model_spec(model).distilled) or (not vit and ":" not in model):
        suggestion = model.replace("_patch16", "_distilled_patch16") if vit else None
        instead = f" (e.g. {suggestion})" if suggestion and is_model_name(suggestion) else ""
        raise ConfigError(
            f"{kind} trains the distillation head of a distilled model: "
            f"--model {model!r} has none; use deit_*_distilled_patch16_224{instead}",
            argument="distillation_type",
        )
    if keras_teacher(cfg):
        if cfg.teacher_path:
            raise ConfigError(
                f"{cfg.teacher_path!r}: --teacher-model {cfg.teacher_model!r} is "
                "a .keras file, which holds its weights; leave --teacher-path out",
                argument="teacher_path",
            )
        return
    with renaming(_TEACHER):
        check_model_ref(cfg.teacher_model)
        if is_model_name(cfg.teacher_model):
            require_keras_hub(cfg.teacher_model)
    if not cfg.teacher_path:
        raise ConfigError(
            f"{cfg.teacher_model!r} is built by the job: give its weights in "
            f"--teacher-path (a Keras {_KERAS_WEIGHTS}"
            + (", or a timm / DeiT checkpoint" if is_model_name(cfg.teacher_model) else "")
            + "), or a .keras file as --teacher-model",
            argument="teacher_model",
        )
    suffixes = (_KERAS_WEIGHTS, *(STATE_SUFFIXES if is_model_name(cfg.teacher_model) else ()))
    if not str(cfg.teacher_path).endswith(suffixes):
        raise ConfigError(
            f"{cfg.teacher_path!r}: expected " + ", ".join(suffixes), argument="teacher_path"
        )


def check_model_files(cfg: Any, *, fresh: bool) -> None:
    """Refuse a teacher or ``--finetune`` file that does not exist (cheap: before TF loads).

    ``--finetune`` is read by a new run only (``fresh``): a resumed run's
    weights are its checkpoint's.

    Raises:
        DataError: naming the option and the path.
        ConfigError: a teacher ``module:function`` whose module cannot be found.

    Example:
        >>> check_model_files(ModelOptions(finetune="/no/such.pth"), fresh=True)
        Traceback (most recent call last):
        ...
        tfdp.errors.DataError: finetune: '/no/such.pth' does not exist
        >>> check_model_files(ModelOptions(finetune="/no/such.pth"), fresh=False)
    """
    named = [
        ("teacher_model", cfg.teacher_model if keras_teacher(cfg) else None),
        ("teacher_path", cfg.teacher_path),
        ("finetune", cfg.finetune if fresh else None),
    ]
    for name, path in named:
        if path is not None and not os.path.isfile(os.path.expanduser(path)):
            raise DataError(f"{path!r} does not exist", argument=name)
    if cfg.teacher_model and not keras_teacher(cfg) and distilling(cfg):
        with renaming(_TEACHER):
            check_model_module(cfg.teacher_model)
