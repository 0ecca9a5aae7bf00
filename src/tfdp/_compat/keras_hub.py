"""Private keras-hub reaches (see :mod:`tfdp._compat`): its ViT / DeiT layers.

keras-hub 0.32 exports ``ViTBackbone`` and ``DeiTBackbone`` but not their
layers, which :mod:`tfdp.models.vit` builds on (to add drop path to the
blocks and DeiT's distillation head): they live in
``keras_hub.src.models.vit.vit_layers`` and ``...deit.deit_layers``. Their
``get_config`` also writes keys their ``__init__`` does not take (the patch
embeddings' ``num_patches`` / ``num_positions``, the block's ``key_dim``),
so they load from a saved model only through a subclass that leaves them out
(:data:`CONFIG_ONLY_KEYS`). The block's sub-layers are the attributes
``layer_norm_1``, ``mha``, ``dropout``, ``layer_norm_2`` and ``mlp`` its
``build`` sets. Imported by its path, never by :mod:`tfdp._compat` itself:
keras-hub is an optional extra (``tfdp[models]``).

Example:
    >>> patches, distilled, block = vit_layers()
    >>> patches.__name__, distilled.__name__, block.__name__
    ('ViTPatchingAndEmbedding', 'DeiTEmbeddings', 'ViTEncoderBlock')
"""

from __future__ import annotations

from typing import Any

#: Keys each layer's ``get_config`` writes that its ``__init__`` does not take.
CONFIG_ONLY_KEYS = {
    "ViTPatchingAndEmbedding": ("num_patches", "num_positions"),
    "DeiTEmbeddings": ("num_patches", "num_positions"),
    "ViTEncoderBlock": ("key_dim",),
}


def vit_layers() -> tuple[Any, Any, Any]:
    """keras-hub's ``(ViTPatchingAndEmbedding, DeiTEmbeddings, ViTEncoderBlock)`` classes.

    ``ViTPatchingAndEmbedding``: the patches' convolution, a class token and
    position embeddings (an ``Embedding`` layer's ``embeddings``, ``[N + 1,
    D]``); ``DeiTEmbeddings``: the same with a distillation token after the
    class token, position embeddings ``[1, N + 2, D]`` and a dropout;
    ``ViTEncoderBlock``: pre-norm attention and MLP, each added back.

    Example:
        See the module's.
    """
    from keras_hub.src.models.deit.deit_layers import DeiTEmbeddings
    from keras_hub.src.models.vit.vit_layers import ViTEncoderBlock, ViTPatchingAndEmbedding

    return ViTPatchingAndEmbedding, DeiTEmbeddings, ViTEncoderBlock
