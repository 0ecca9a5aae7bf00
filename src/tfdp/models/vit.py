"""The ViT / DeiT builder: timm's ``VisionTransformer`` (and DeiT's distilled one) in Keras.

This module owns :func:`vision_transformer`, which builds a model of
:data:`tfdp.models.MODELS` (or any :class:`~tfdp.models.ViTSpec`) for an
input shape and a class count, randomly initialised as timm initialises it.
It is built on keras-hub's layers where their architecture is timm's: the
patch embedding (a ``patch x patch`` convolution of stride ``patch``, the
class token first, learned position embeddings added to every token) and the
encoder block (pre-norm: ``x + attn(norm1(x))``, then ``x + mlp(norm2(x))``;
layer norms of epsilon 1e-6, query / key / value biases, exact GELU), then a
final layer norm and the head on the class token -- timm's
``global_pool="token"``. tfdp adds only what keras-hub lacks:

- stochastic depth (:class:`tfdp.models.DropPath` on both residual branches
  of every block, at timm's rates, :func:`tfdp.models.drop_path_rates`), in
  :class:`Block`, a subclass of keras-hub's block whose ``call`` adds it;
- the distilled model's second head and the average of the two at inference
  (:class:`tfdp.models.DistilledHeads`, on keras-hub's DeiT embedding with
  its distillation token);
- timm's initialisation (:func:`timm_init`): linear and attention weights
  normal with standard deviation 0.02 (timm's ``trunc_normal_(std=.02)``
  truncates at +-2, a hundred deviations: the same law) and zero biases, the
  position embeddings and the distillation token normal(0.02), the class
  token normal(1e-6), the patch convolution torch's default
  (uniform within ``1 / sqrt(fan_in)``), layer norms one and zero;
- layers that load from a saved ``.keras`` file (:class:`PatchEmbed`,
  :class:`DistilledPatchEmbed`: keras-hub's write keys their constructors
  refuse, :mod:`tfdp._compat.keras_hub`).

The models are channels-last; the class count comes from the caller.

Example:
    >>> from tfdp.models import ViTSpec
    >>> model = vision_transformer(ViTSpec("demo", width=32, depth=2, heads=2), (32, 32, 3), 5)
    >>> model.output_shape, model.get_layer("patch_embed").num_patches
    ((None, 5), 4)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import keras

from tfdp._compat.keras_hub import CONFIG_ONLY_KEYS, vit_layers
from tfdp.errors import ConfigError, ConfigTypeError
from tfdp.models.distill import DistilledHeads
from tfdp.models.drop_path import DropPath
from tfdp.models.names import ViTSpec, drop_path_rates, model_spec

#: timm's ``partial(nn.LayerNorm, eps=1e-6)`` of every ViT / DeiT model.
LAYER_NORM_EPSILON = 1e-6

_Patches, _DistilledPatches, _Block = vit_layers()


def _loadable(config: dict[str, Any], base: str) -> dict[str, Any]:
    """``config`` without the keys keras-hub's ``base`` writes but does not take back."""
    return {k: v for k, v in config.items() if k not in CONFIG_ONLY_KEYS[base]}


@keras.saving.register_keras_serializable(package="tfdp")
class PatchEmbed(_Patches):
    """keras-hub's ViT patch embedding (class token, position embeddings), loadable from a file.

    Example:
        >>> layer = PatchEmbed(image_size=(32, 32), patch_size=(16, 16), hidden_dim=8)
        >>> type(PatchEmbed.from_config(layer.get_config())).__name__
        'PatchEmbed'
    """

    def get_config(self) -> dict[str, Any]:
        """keras-hub's configuration, without the keys its constructor refuses."""
        config = _loadable(super().get_config(), "ViTPatchingAndEmbedding")
        config["use_patch_bias"] = self.use_patch_bias
        return config


@keras.saving.register_keras_serializable(package="tfdp")
class DistilledPatchEmbed(_DistilledPatches):
    """keras-hub's DeiT embedding (class and distillation tokens), loadable from a file.

    Example:
        >>> layer = DistilledPatchEmbed(image_size=(32, 32), patch_size=(16, 16), hidden_dim=8)
        >>> layer.num_positions  # 4 patches, the class and the distillation token
        6
    """

    def get_config(self) -> dict[str, Any]:
        """keras-hub's configuration, without the keys its constructor refuses."""
        return _loadable(super().get_config(), "DeiTEmbeddings")


@keras.saving.register_keras_serializable(package="tfdp")
class Block(_Block):
    """keras-hub's ViT encoder block with timm's drop path on both residual branches.

    ``x = x + drop_path1(dropout(attn(norm1(x))))``, then ``x = x +
    drop_path2(mlp(norm2(x)))``: timm's ``Block`` (without layer scale).

    Args:
        num_heads: Attention heads.
        hidden_dim: The width.
        mlp_dim: The MLP's hidden width.
        drop_path: This block's stochastic-depth rate (0: none).
        seed: The run's seed (the drop paths' keys).
        index: The block's index (its drop paths are layers ``2 index`` and ``2 index + 1``).
        **kwargs: keras-hub's ``ViTEncoderBlock`` arguments (``layer_norm_epsilon``, ...).

    Example:
        >>> block = Block(2, 8, 16, drop_path=0.1, index=3)
        >>> block.drop_path1.index, block.drop_path2.index, block.get_config()["drop_path"]
        (6, 7, 0.1)
    """

    def __init__(
        self,
        num_heads: int,
        hidden_dim: int,
        mlp_dim: int,
        drop_path: float = 0.0,
        seed: int = 0,
        index: int = 0,
        **kwargs: Any,
    ) -> None:
        super().__init__(num_heads=num_heads, hidden_dim=hidden_dim, mlp_dim=mlp_dim, **kwargs)
        self.drop_path = float(drop_path)
        self.seed = int(seed)
        self.index = int(index)
        self.drop_path1 = DropPath(drop_path, seed, 2 * index, name="drop_path1")
        self.drop_path2 = DropPath(drop_path, seed, 2 * index + 1, name="drop_path2")

    def call(self, inputs: Any, training: bool | None = None) -> Any:
        """The block on tokens ``[B, T, D]``."""
        x = self.layer_norm_1(inputs)
        x = self.mha(x, x, training=training)
        x = self.dropout(x, training=training)
        x = inputs + self.drop_path1(x, training=training)
        y = self.mlp(self.layer_norm_2(x), training=training)
        return x + self.drop_path2(y, training=training)

    def get_config(self) -> dict[str, Any]:
        """keras-hub's configuration (loadable), and ``drop_path``, ``seed``, ``index``."""
        config = _loadable(super().get_config(), "ViTEncoderBlock")
        config.update(drop_path=self.drop_path, seed=self.seed, index=self.index)
        return config


@keras.saving.register_keras_serializable(package="tfdp")
class ClassToken(keras.layers.Layer):
    """The class token's features (timm's ``global_pool="token"``): ``x[:, 0]``.

    Example:
        >>> import numpy as np
        >>> ClassToken()(np.arange(6, dtype="float32").reshape(1, 3, 2)).numpy().tolist()
        [[0.0, 1.0]]
    """

    def call(self, inputs: Any) -> Any:
        """Token 0 of ``[B, T, D]``."""
        return inputs[:, 0]

    def compute_output_shape(self, input_shape: Any) -> Any:
        """``(B, D)``."""
        return (input_shape[0], input_shape[-1])


def _check_shape(input_shape: Any, patch: int) -> tuple[int, int, int]:
    shape = tuple(input_shape) if isinstance(input_shape, Sequence) else ()
    if len(shape) != 3 or not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
        raise ConfigTypeError(
            f"must be (height, width, channels) integers, got {input_shape!r}",
            argument="input_shape",
        )
    h, w, c = shape
    if min(h, w) < patch or h % patch or w % patch or c < 1:
        raise ConfigError(
            f"{shape}: height and width must be multiples of the patch size {patch} "
            f"(e.g. {max(patch, h - h % patch)}), with at least one channel",
            argument="input_shape",
        )
    return h, w, c


def vision_transformer(
    model: str | ViTSpec,
    input_shape: Sequence[int],
    num_classes: int,
    *,
    drop_path: float = 0.0,
    seed: int = 0,
    init: bool = True,
) -> keras.Model:
    """Model ``model`` (timm's name, or a :class:`~tfdp.models.ViTSpec`) for ``input_shape``.

    Position embeddings for ``input_shape``'s grid of patches (any size that
    is a multiple of the patch), ``num_classes`` logits out (float32 under a
    mixed-precision policy), randomly initialised as timm does
    (:func:`timm_init`, from Keras's seeded random state: call
    ``keras.utils.set_random_seed`` first for a reproducible model). Nothing
    is downloaded; :mod:`tfdp.models.weights` loads timm's or DeiT's weights.

    Args:
        model: A name of :data:`tfdp.models.MODELS` or a spec.
        input_shape: ``(height, width, channels)``.
        num_classes: Classes (the head's width), ``>= 1``.
        drop_path: Stochastic depth's largest rate, in ``[0, 1)`` (timm's
            ``drop_path_rate``: block ``i`` of ``depth`` drops at ``drop_path * i / (depth - 1)``).
        seed: The run's seed, which keys the drop paths' draws.
        init: Give the weights timm's initial values (:func:`timm_init`); False
            keeps Keras's (faster, for a model whose weights are loaded next).

    Raises:
        ConfigError: an unknown name (the known ones listed), a shape that is
            no multiple of the patch, a bad class count or rate, naming the argument.

    Example:
        >>> m = vision_transformer("deit_tiny_distilled_patch16_224", (32, 32, 3), 10)
        >>> m.name, m.output_shape, m.count_params()
        ('deit_tiny_distilled_patch16_224', (None, 10), 5491796)
    """
    spec = model if isinstance(model, ViTSpec) else model_spec(model)
    h, w, c = _check_shape(input_shape, spec.patch)
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
        raise ConfigError(f"must be an integer >= 1, got {num_classes!r}", argument="num_classes")
    rates = drop_path_rates(drop_path, spec.depth)
    inputs = keras.Input((h, w, c), name="images")
    embed = DistilledPatchEmbed if spec.distilled else PatchEmbed
    x = embed(
        image_size=(h, w),
        patch_size=(spec.patch, spec.patch),
        hidden_dim=spec.width,
        num_channels=c,
        name="patch_embed",
    )(inputs)
    for i, rate in enumerate(rates):
        x = Block(
            spec.heads,
            spec.width,
            spec.mlp_dim,
            drop_path=rate,
            seed=seed,
            index=i,
            layer_norm_epsilon=LAYER_NORM_EPSILON,
            name=f"blocks_{i}",
        )(x)
    x = keras.layers.LayerNormalization(epsilon=LAYER_NORM_EPSILON, name="norm")(x)
    if spec.distilled:
        outputs = DistilledHeads(num_classes, name="heads")(x)
    else:
        pooled = ClassToken(name="pool")(x)
        outputs = keras.layers.Dense(num_classes, dtype="float32", name="head")(pooled)
    built = keras.Model(inputs, outputs, name=spec.name)
    if init:
        timm_init(built)
    return built


def _initial(path: str, patch_fan_in: int) -> Any:
    """The initializer timm gives the variable at ``path`` (None: Keras's, the layer norms)."""
    leaf = path.rsplit("/", 1)[-1]
    if "patch_embedding/" in path:  # torch's Conv2d default: kaiming_uniform(a=sqrt(5)), bias too
        bound = 1 / math.sqrt(patch_fan_in)
        return keras.initializers.RandomUniform(-bound, bound)
    if leaf == "class_token":
        return keras.initializers.RandomNormal(stddev=1e-6)
    if leaf in ("distillation_token", "position_embedding") or "position_embedding/" in path:
        return keras.initializers.RandomNormal(stddev=0.02)
    if leaf in ("gamma", "beta"):
        return None
    if leaf == "kernel":
        return keras.initializers.RandomNormal(stddev=0.02)
    if leaf == "bias":
        return keras.initializers.Zeros()
    return None  # none other in these models (tests/test_models.py checks every variable)


def timm_init(model: keras.Model) -> None:
    """Give a :func:`vision_transformer` model timm's initial weights (in place, Keras-seeded).

    See the module's text for the laws. Only trainable variables change.

    Example:
        >>> from tfdp.models import ViTSpec
        >>> m = vision_transformer(ViTSpec("demo", width=32, depth=1, heads=2), (16, 16, 3), 2)
        >>> float(abs(m.get_layer("head").bias).numpy().max())
        0.0
    """
    kernel = model.get_layer("patch_embed").patch_embedding.kernel.shape  # (p, p, c, width)
    fan_in = int(kernel[0] * kernel[1] * kernel[2])
    for variable in model.trainable_variables:
        shape = tuple(int(d) for d in variable.shape)
        initializer = _initial(variable.path, fan_in)
        if initializer is not None:
            variable.assign(initializer(shape, dtype=variable.dtype))


def load_model(path: Any, **kwargs: Any) -> keras.Model:
    """``keras.models.load_model(path)`` once tfdp's layers are registered (they are, here).

    A ``.keras`` file of these models names tfdp's layers (``tfdp>Block``,
    ...), which Keras finds once their modules are imported: this function's
    module is one of them; ``import tfdp.models.vit`` before Keras's own
    ``load_model`` does the same.

    Example:
        >>> import tempfile
        >>> from tfdp.models import ViTSpec
        >>> path = tempfile.mkdtemp() + "/m.keras"
        >>> spec = ViTSpec("demo", width=16, depth=1, heads=2)
        >>> vision_transformer(spec, (16, 16, 3), 2).save(path)
        >>> load_model(path).name
        'demo'
    """
    return keras.models.load_model(path, **kwargs)


#: What timm's ``VisionTransformer.no_weight_decay()`` names: the position embeddings and tokens.
_NO_DECAY_LEAVES = ("class_token", "distillation_token", "position_embedding", "embeddings")


def no_weight_decay(model: keras.Model) -> list[Any]:
    """The trainable variables timm's optimizer gives no weight decay, of a model of this module.

    timm's ``param_groups_weight_decay`` exempts every bias, every weight of
    one dimension (the layer norms') and the model's ``no_weight_decay()``:
    ``pos_embed``, ``cls_token``, ``dist_token``. In Keras the query / key /
    value biases are ``[heads, head_dim]`` and the tokens ``[1, 1, D]``: a
    rule by dimension alone would decay them. (A :class:`~tfdp.models.Distiller`
    has its student's.)

    Example:
        >>> from tfdp.models import ViTSpec
        >>> m = vision_transformer(ViTSpec("demo", width=16, depth=1, heads=2), (16, 16, 3), 2)
        >>> sorted({v.path.split("/")[-1] for v in no_weight_decay(m)})
        ['beta', 'bias', 'class_token', 'embeddings', 'gamma']
    """
    return [
        v
        for v in model.trainable_variables
        if len(v.shape) <= 1 or v.path.rsplit("/", 1)[-1] in ("bias", *_NO_DECAY_LEAVES)
    ]
