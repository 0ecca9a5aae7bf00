"""DeiT's and ViT's models by timm's names, stochastic depth, timm's weights, DeiT's distillation.

This package owns the models a DeiT user trains, one concern per module:

=================  ====================================================================
module             owns
=================  ====================================================================
``names``          the table of names (:data:`MODELS`, :class:`ViTSpec`),
                   :func:`model_spec`, :func:`drop_path_rates` (timm's rule),
                   :func:`require_keras_hub` (the ``tfdp[models]`` extra); pure Python
``vit``            :func:`vision_transformer`: the builder, on keras-hub's layers,
                   initialised as timm's; :func:`load_model` (a saved one),
                   :func:`no_weight_decay` (what timm's optimizer does not decay)
``drop_path``      :class:`DropPath`: stochastic depth, its draws a pure function of
                   (run seed, layer, training call, replica, row)
``weights``        timm / DeiT state dicts: :func:`read_state_dict` (``.pth``,
                   ``.safetensors``), :func:`load_timm_weights` (strict, or as DeiT's
                   fine-tuning: position embeddings resampled, a head of another class
                   count left new), :func:`resample_pos_embed` (timm's bicubic)
``distill``        DeiT's distillation: :class:`DistilledHeads`, :class:`Distiller`
                   (the teacher held untracked), :func:`distillation_loss`,
                   :class:`ClassHead` (a training metric on the class head)
=================  ====================================================================

The models are built on keras-hub (``pip install 'tfdp[models]'``); the
names table loads without it, and without TensorFlow, so a command checks a
name first. The other names load their module (and TensorFlow) on first use.

Example:
    >>> import tfdp.models as models
    >>> models.model_spec("deit_base_patch16_224").heads, "vision_transformer" in dir(models)
    (12, True)
"""

from __future__ import annotations

from tfdp._lazy import lazy_names
from tfdp.models.names import (
    EXTRA,
    MODELS,
    ViTSpec,
    drop_path_rates,
    is_model_name,
    model_spec,
    require_keras_hub,
)

# Public names whose modules import TensorFlow / keras-hub: loaded on first access.
_LAZY: dict[str, str] = {
    "vision_transformer": "tfdp.models.vit",
    "timm_init": "tfdp.models.vit",
    "load_model": "tfdp.models.vit",
    "no_weight_decay": "tfdp.models.vit",
    "DropPath": "tfdp.models.drop_path",
    "read_state_dict": "tfdp.models.weights",
    "load_timm_weights": "tfdp.models.weights",
    "resample_pos_embed": "tfdp.models.weights",
    "DistilledHeads": "tfdp.models.distill",
    "Distiller": "tfdp.models.distill",
    "ClassHead": "tfdp.models.distill",
    "distillation_loss": "tfdp.models.distill",
}

__all__ = [
    "EXTRA",
    "MODELS",
    "ViTSpec",
    "drop_path_rates",
    "is_model_name",
    "model_spec",
    "require_keras_hub",
    *_LAZY,
]

__getattr__, __dir__ = lazy_names(__name__, _LAZY)
