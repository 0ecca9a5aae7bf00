"""The training job's learning-rate rule: ``--lr`` as given, or scaled by the batch (DeiT, timm).

This module owns the options ``--lr-rule``, ``--lr-base-size`` and
``--lr-base-scale`` (:class:`LrRuleOptions`, a part of
:class:`tfdp.recipe.config.TrainConfig`), their checks
(:func:`check_lr_rule`), the rate a run trains with (:func:`learning_rate`:
the peak of the schedule) and how the start line says it (:func:`lr_note`).
The batch a rule scales by is the samples of one optimizer step: the global
``--batch-size`` (all replicas, all workers) times ``--accum-steps``, as timm
counts it (DeiT has no accumulation).

* ``none`` (the default): ``--lr`` is the rate, as tfdp has always taken it
  (DeiT's ``--unscale-lr``). Existing runs and commands keep their rate.
* ``deit``: ``--lr x batch / 512`` (DeiT's ``main.py``: ``linear_scaled_lr =
  args.lr * args.batch_size * utils.get_world_size() / 512.0``, on unless
  ``--unscale-lr``); ``examples/deit.toml`` asks for it.
* ``timm``: ``--lr x (batch / --lr-base-size)``, or its square root
  (``--lr-base-scale``): timm's ``train.py`` rule for ``--lr-base`` when no
  ``--lr`` is given; ``--lr`` is timm's ``--lr-base`` here.

Every rule keeps ``--warmup-lr`` and ``--min-lr`` as given (DeiT and timm scale
only the base rate). The rate is printed on the start line and recorded in
``config.json``'s history (``learning_rate`` of each start and resume). Loads
no TensorFlow.

Example:
    >>> from tfdp.recipe.config import TrainConfig
    >>> cfg = TrainConfig(lr=5e-4, lr_rule="deit", batch_size=1024)
    >>> learning_rate(cfg), lr_note(cfg)
    (0.001, "--lr 0.0005 x 1024 / 512: DeiT's rule")
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tfdp.errors import ConfigError
from tfdp.recipe.options import option

#: ``--lr-rule``'s values.
LR_RULES = ("none", "deit", "timm")
#: DeiT's divisor: ``args.lr * global batch / 512.0``.
DEIT_BASE_SIZE = 512
#: timm's ``--lr-base-size`` default.
TIMM_BASE_SIZE = 256


@dataclass
class LrRuleOptions:
    """How ``--lr`` becomes the rate a run trains with (a part of ``TrainConfig``).

    A resumed run may change them, as ``--lr`` (recorded in ``config.json``'s
    history): the global batch they scale by cannot change on resume.

    Example:
        >>> LrRuleOptions().lr_rule, LrRuleOptions().lr_base_size
        ('none', None)
    """

    lr_rule: str = option(
        "none",
        "how --lr becomes the rate trained with (the schedule's peak; printed on the start line, "
        "recorded in config.json): none takes --lr as given (tfdp's rule, DeiT's --unscale-lr); "
        "deit: --lr x batch / 512 (DeiT's main.py); timm: --lr x batch / --lr-base-size, or its "
        "square root with --lr-base-scale sqrt (timm's --lr-base rule: give its --lr-base as "
        "--lr). batch: the samples of one optimizer step, --batch-size (global) x --accum-steps",
        LR_RULES,
        resume="record",
    )
    lr_base_size: int | None = option(
        None,
        "--lr-rule timm: the batch --lr is the rate of (timm's --lr-base-size)",
        resume="record",
        computed=f"{TIMM_BASE_SIZE} (timm's)",
    )
    lr_base_scale: str | None = option(
        None,
        "--lr-rule timm: the rate grows with the batch linearly or as its square root (timm's "
        "--lr-base-scale)",
        ("linear", "sqrt"),
        resume="record",
        computed="sqrt for adam and adamw, linear for the others (timm's rule: 'ada' or 'lamb' "
        "in the optimizer's name)",
    )


def _batch(cfg: Any) -> int:
    """The samples of one optimizer step: the global batch times the accumulated steps."""
    return int(cfg.batch_size) * int(cfg.accum_steps)


def timm_scale(cfg: Any) -> str:
    """``--lr-base-scale`` as given, else timm's choice by the optimizer's name.

    Example:
        >>> from tfdp.recipe.config import TrainConfig
        >>> timm_scale(TrainConfig(optimizer="adamw")), timm_scale(TrainConfig(optimizer="sgd"))
        ('sqrt', 'linear')
    """
    if cfg.lr_base_scale is not None:
        return str(cfg.lr_base_scale)
    name = str(cfg.optimizer).lower()
    return "sqrt" if any(o in name for o in ("ada", "lamb")) else "linear"


def learning_rate(cfg: Any) -> float:
    """The rate the run trains with (the schedule's peak): ``--lr`` under ``--lr-rule``.

    ``cfg.batch_size`` is the global batch (``--batch-size-per-replica``
    already multiplied out by the run).

    Example:
        >>> from tfdp.recipe.config import TrainConfig
        >>> learning_rate(TrainConfig(lr=0.1, lr_rule="timm", optimizer="sgd", batch_size=1024))
        0.4
        >>> learning_rate(TrainConfig(lr=1e-3, lr_rule="timm", batch_size=1024))  # adam: sqrt
        0.002
        >>> learning_rate(TrainConfig(lr=0.003))
        0.003
    """
    if cfg.lr_rule == "deit":
        return cfg.lr * _batch(cfg) / float(DEIT_BASE_SIZE)
    if cfg.lr_rule == "timm":
        ratio = _batch(cfg) / (cfg.lr_base_size or TIMM_BASE_SIZE)
        if timm_scale(cfg) == "sqrt":
            ratio = ratio**0.5
        return cfg.lr * ratio
    return float(cfg.lr)


def lr_note(cfg: Any) -> str:
    """How :func:`learning_rate` came from ``--lr``, for the start line ('' under ``none``).

    Example:
        >>> from tfdp.recipe.config import TrainConfig
        >>> lr_note(TrainConfig(lr=0.1, lr_rule="timm", batch_size=64))
        "--lr 0.1 x sqrt(64 / 256): timm's rule"
    """
    batch = _batch(cfg)
    if cfg.lr_rule == "deit":
        return f"--lr {cfg.lr:g} x {batch} / {DEIT_BASE_SIZE}: DeiT's rule"
    if cfg.lr_rule == "timm":
        ratio = f"{batch} / {cfg.lr_base_size or TIMM_BASE_SIZE}"
        ratio = f"sqrt({ratio})" if timm_scale(cfg) == "sqrt" else ratio
        return f"--lr {cfg.lr:g} x {ratio}: timm's rule"
    return ""


def check_lr_rule(cfg: Any) -> None:
    """Refuse a rule's options that do nothing or cannot be used, naming the flag.

    Raises:
        ConfigError: ``--lr-base-size`` below 1, or it or ``--lr-base-scale``
            given without ``--lr-rule timm``.

    Example:
        >>> from tfdp.recipe.config import TrainConfig
        >>> check_lr_rule(TrainConfig(lr_rule="deit", lr_base_size=256))
        Traceback (most recent call last):
        ...
        tfdp.errors.ConfigError: lr_base_size: belongs to --lr-rule timm (the batch its base rate is for): it does nothing with --lr-rule deit (DeiT's rule divides by 512); leave it out or use --lr-rule timm
    """  # noqa: E501
    if cfg.lr_base_size is not None and cfg.lr_base_size < 1:
        raise ConfigError(
            f"must be an integer >= 1, got {cfg.lr_base_size}", argument="lr_base_size"
        )
    if cfg.lr_rule == "timm":
        return
    rule = "DeiT's rule divides by 512" if cfg.lr_rule == "deit" else "--lr is taken as given"
    what = {
        "lr_base_size": (cfg.lr_base_size, "the batch its base rate is for"),
        "lr_base_scale": (cfg.lr_base_scale, "how its rate grows with the batch"),
    }
    for name, (value, meaning) in what.items():
        if value is not None:
            raise ConfigError(
                f"belongs to --lr-rule timm ({meaning}): it does nothing with --lr-rule "
                f"{cfg.lr_rule} ({rule}); leave it out or use --lr-rule timm",
                argument=name,
            )
