"""The main training job behind ``tfdp train`` and ``tfdp evaluate``: a config in, a run out.

This package owns the job that the command line runs, in modules read
in the order the data flows:

* :mod:`tfdp.recipe.config` -- :class:`TrainConfig` (every option: type,
  default, help, resume policy), config files, cheap checks, the run directory;
  :mod:`tfdp.recipe.augment_options` its DeiT / timm transform options (and the
  stages they build), :mod:`tfdp.recipe.lr_rule` the learning-rate rule,
  :mod:`tfdp.recipe.options` what an option is;
* :mod:`tfdp.recipe.resume` -- a run's ``config.json`` and the resume policy;
* :mod:`tfdp.recipe.data` -- the data, the held-out split and the augmentation;
* :mod:`tfdp.recipe.model` -- the model, the optimizer, the loss, the saved ``model.keras``;
* :mod:`tfdp.recipe.run` -- :func:`run_train`;
* :mod:`tfdp.recipe.evaluation` -- :func:`run_evaluate`.

The training recipe's pieces that need Keras, loaded when a run builds them:
:mod:`tfdp.recipe.ema` (``--model-ema``'s weights evaluated and saved) and
:mod:`tfdp.recipe.best` (``model_best.keras``); the optimizers and the schedule
are the library's (:mod:`tfdp.optim`).

Beside them, what the commands share, in the library's words (the commands say
an error's arguments their way): :mod:`tfdp.recipe.dataspec` (opening and
checking a data spec), :mod:`tfdp.recipe.digits` (the bundled UCI digits),
:mod:`tfdp.recipe.networks` (the built-in models, ``module:function``
factories) and :mod:`tfdp.recipe.rundir` (the run directory's lock and JSON
files). Importing it loads no TensorFlow.

Example:
    >>> cfg = TrainConfig(epochs=1)
    >>> cfg.sampler, cfg.repeats, cfg.replicas
    ('repeat-aug', 3.0, 2)
"""

from __future__ import annotations

from tfdp.recipe.config import (
    OPTIONS_HELP,
    TrainConfig,
    check_config,
    check_given,
    check_paths,
    coerce,
    default_run_dir,
    flag,
    load_config_file,
)
from tfdp.recipe.data import JobData, build_augment, build_data, check_one_step, eval_input
from tfdp.recipe.digits import load_digits
from tfdp.recipe.evaluation import run_evaluate
from tfdp.recipe.model import (
    MODEL_FILE,
    build_optimizer,
    model_factory,
    save_model,
    weights_fingerprint,
)
from tfdp.recipe.networks import small_cnn
from tfdp.recipe.options import RESUME_POLICIES
from tfdp.recipe.resume import Resumed, resolve_resume
from tfdp.recipe.run import Report, StopRelay, replicas_warning, run_train

__all__ = [
    "MODEL_FILE",
    "OPTIONS_HELP",
    "RESUME_POLICIES",
    "JobData",
    "Report",
    "Resumed",
    "StopRelay",
    "TrainConfig",
    "build_augment",
    "build_data",
    "build_optimizer",
    "check_config",
    "check_given",
    "check_one_step",
    "check_paths",
    "coerce",
    "default_run_dir",
    "eval_input",
    "flag",
    "load_config_file",
    "load_digits",
    "model_factory",
    "replicas_warning",
    "resolve_resume",
    "run_evaluate",
    "run_train",
    "save_model",
    "small_cnn",
    "weights_fingerprint",
]
