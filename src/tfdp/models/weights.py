"""timm's and DeiT's weights: a state dict read, checked and mapped onto a Keras ViT / DeiT.

This module owns :func:`read_state_dict` (a ``.pth`` / ``.pt`` / ``.bin``
read with ``torch.load(weights_only=True)`` when torch is installed, or a
``.safetensors`` with the ``safetensors`` package's NumPy API; DeiT's
``{"model": ...}`` and timm's ``{"state_dict": ...}`` wrappers and DDP's
``module.`` prefixes removed), :func:`timm_shapes` (the state dict a model
expects), :func:`load_timm_weights` (the mapping: timm's fused ``qkv``
split into Keras attention's query / key / value kernels ``[D, heads,
head_dim]``, linear weights transposed, the patch convolution from
``[D, C, p, p]`` to ``[p, p, C, D]``, position embeddings, class and
distillation tokens, norms and heads) and :func:`resample_pos_embed`
(position embeddings to another grid of patches, bicubically: timm's
``resample_abs_pos_embed``, antialiased, or DeiT's ``main.py``
``F.interpolate``, not). Checking is strict: the first key the model needs
that is missing, or of another shape, and the first key it has no place for
are named, with the shape expected. As DeiT's fine-tuning does,
``finetune=True`` leaves a head of another class count as the model
initialised it.

Example:
    >>> import numpy as np
    >>> pos = np.arange(1 + 4 * 4, dtype="float32").reshape(1, 17, 1)  # class token, 4x4 grid
    >>> resample_pos_embed(pos, (2, 2)).shape
    (1, 5, 1)
"""

from __future__ import annotations

import importlib.util
import math
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tfdp.errors import ConfigError, DataError

#: The files :func:`read_state_dict` reads: torch's (with torch) and safetensors.
STATE_SUFFIXES = (".pth", ".pt", ".bin", ".tar", ".safetensors")
#: Where a checkpoint file keeps its model's state dict (DeiT's ``model``, timm's ``state_dict``).
_WRAPPERS = ("model", "state_dict")


def read_state_dict(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """The state dict of a timm / DeiT checkpoint file, as float32 NumPy arrays by key.

    Raises:
        DataError: (``argument="path"``) a missing or unreadable file, or one
            that holds no state dict.
        ConfigError: (``argument="path"``) a torch file without torch, or a
            ``.safetensors`` file without the safetensors package.

    Example:
        >>> read_state_dict("/no/such.pth")
        Traceback (most recent call last):
        ...
        tfdp.errors.DataError: path: '/no/such.pth' does not exist
    """
    p = Path(path)
    if not p.is_file():
        raise DataError(f"{str(p)!r} does not exist", argument="path")
    if p.suffix not in STATE_SUFFIXES:
        raise DataError(
            f"{str(p)!r}: expected a timm / DeiT checkpoint (" + ", ".join(STATE_SUFFIXES) + ")",
            argument="path",
        )
    raw = _read_safetensors(p) if p.suffix == ".safetensors" else _read_torch(p)
    state = _unwrap(raw, p)
    return {k.removeprefix("module."): _array(v, p, k) for k, v in state.items()}


def _read_safetensors(p: Path) -> Mapping[str, Any]:
    if importlib.util.find_spec("safetensors") is None:
        raise ConfigError(
            f"{str(p)!r}: reading .safetensors needs the safetensors package: "
            "pip install safetensors",
            argument="path",
        )
    from safetensors.numpy import load_file

    try:
        return load_file(str(p))
    except Exception as exc:  # its own error types: a bad header, an unknown dtype
        raise DataError(
            f"{str(p)!r} is not a readable .safetensors file: {exc}", argument="path"
        ) from None


def _read_torch(p: Path) -> Any:
    if importlib.util.find_spec("torch") is None:
        raise ConfigError(
            f"{str(p)!r}: reading {p.suffix} files needs torch, which is not installed "
            "(pip install torch), or convert the state dict to .safetensors",
            argument="path",
        )
    import torch

    try:
        return torch.load(str(p), map_location="cpu", weights_only=True)
    except Exception as exc:  # torch's unpickling errors of every kind
        detail = " ".join(str(exc).split())[:300]
        raise DataError(
            f"{str(p)!r} is not a readable torch checkpoint of tensors: {detail}",
            argument="path",
        ) from None


def _unwrap(raw: Any, p: Path) -> Mapping[str, Any]:
    if isinstance(raw, Mapping):
        for key in _WRAPPERS:
            if isinstance(raw.get(key), Mapping):
                return raw[key]
        if raw and all(isinstance(k, str) for k in raw):
            return raw
    raise DataError(
        f"{str(p)!r} holds no state dict (a mapping of names to tensors, or one under "
        "'model' or 'state_dict')",
        argument="path",
    )


def _array(value: Any, p: Path, key: str) -> np.ndarray:
    if hasattr(value, "detach"):  # a torch tensor
        value = value.detach().float().cpu().numpy()
    try:
        return np.asarray(value, dtype=np.float32)
    except (TypeError, ValueError):
        raise DataError(f"{str(p)!r}: key {key!r} is not a tensor", argument="path") from None


# -- what a model expects ----------------------------------------------------------------------


def _structure(model: Any) -> dict[str, Any]:
    """Width, depth, heads, patch, grid, prefix tokens and classes of a ViT / DeiT Keras model."""
    from tfdp.models.distill import distilled_heads

    embed = model.get_layer("patch_embed")
    heads = distilled_heads(model)
    blocks = [layer for layer in model.layers if layer.name.startswith("blocks_")]
    p = tuple(embed.patch_size)
    grid = (embed.image_size[0] // p[0], embed.image_size[1] // p[1])
    classes = heads.num_classes if heads is not None else model.get_layer("head").units
    return {
        "width": int(embed.hidden_dim),
        "depth": len(blocks),
        "heads": int(blocks[0].num_heads),
        "mlp": int(blocks[0].mlp_dim),
        "patch": p,
        "channels": int(embed.num_channels),
        "grid": grid,
        "prefix": 2 if heads is not None else 1,
        "classes": int(classes),
    }


def timm_shapes(model: Any) -> dict[str, tuple[int, ...]]:
    """The state dict timm's model of ``model``'s architecture has: shapes by key, in order.

    Example:
        >>> from tfdp.models import vision_transformer
        >>> shapes = timm_shapes(vision_transformer("deit_tiny_patch16_224", (32, 32, 3), 10))
        >>> shapes["pos_embed"], shapes["blocks.0.attn.qkv.weight"], len(shapes)
        ((1, 5, 192), (576, 192), 152)
    """
    s = _structure(model)
    d, m, k = s["width"], s["mlp"], s["classes"]
    tokens = s["grid"][0] * s["grid"][1] + s["prefix"]
    out: dict[str, tuple[int, ...]] = {"cls_token": (1, 1, d), "pos_embed": (1, tokens, d)}
    if s["prefix"] == 2:
        out["dist_token"] = (1, 1, d)
    out["patch_embed.proj.weight"] = (d, s["channels"], *s["patch"])
    out["patch_embed.proj.bias"] = (d,)
    for i in range(s["depth"]):
        b = f"blocks.{i}."
        out.update(
            {
                b + "norm1.weight": (d,),
                b + "norm1.bias": (d,),
                b + "attn.qkv.weight": (3 * d, d),
                b + "attn.qkv.bias": (3 * d,),
                b + "attn.proj.weight": (d, d),
                b + "attn.proj.bias": (d,),
                b + "norm2.weight": (d,),
                b + "norm2.bias": (d,),
                b + "mlp.fc1.weight": (m, d),
                b + "mlp.fc1.bias": (m,),
                b + "mlp.fc2.weight": (d, m),
                b + "mlp.fc2.bias": (d,),
            }
        )
    out.update({"norm.weight": (d,), "norm.bias": (d,), "head.weight": (k, d), "head.bias": (k,)})
    if s["prefix"] == 2:
        out.update({"head_dist.weight": (k, d), "head_dist.bias": (k,)})
    return out


def _plan(model: Any) -> list[tuple[str, Any, Callable[[np.ndarray], np.ndarray]]]:
    """``(timm key, Keras variable, timm value -> Keras value)`` for every weight of ``model``."""
    s = _structure(model)
    d, h = s["width"], s["heads"]
    hd = d // h
    embed = model.get_layer("patch_embed")

    def same(a: np.ndarray) -> np.ndarray:
        return a

    def linear(a: np.ndarray) -> np.ndarray:
        return a.T

    plan: list[tuple[str, Any, Callable[[np.ndarray], np.ndarray]]] = [
        ("cls_token", embed.class_token, same),
    ]
    if s["prefix"] == 2:
        plan.append(("pos_embed", embed.position_embedding, same))
        plan.append(("dist_token", embed.distillation_token, same))
    else:
        plan.append(("pos_embed", embed.position_embedding.embeddings, lambda a: a[0]))
    conv = embed.patch_embedding
    plan.append(("patch_embed.proj.weight", conv.kernel, lambda a: a.transpose(2, 3, 1, 0)))
    plan.append(("patch_embed.proj.bias", conv.bias, same))
    for i in range(s["depth"]):
        block = model.get_layer(f"blocks_{i}")
        weights = {v.path.split(f"blocks_{i}/", 1)[1]: v for v in block.weights}
        b = f"blocks.{i}."
        for j, name in enumerate(("query", "key", "value")):
            rows = slice(j * d, (j + 1) * d)
            plan.append(
                (
                    b + "attn.qkv.weight",
                    weights[f"mha/{name}/kernel"],
                    lambda a, r=rows: a[r].T.reshape(d, h, hd),
                )
            )
            plan.append(
                (
                    b + "attn.qkv.bias",
                    weights[f"mha/{name}/bias"],
                    lambda a, r=rows: a[r].reshape(h, hd),
                )
            )
        plan += [
            (
                b + "attn.proj.weight",
                weights["mha/attention_output/kernel"],
                lambda a: a.T.reshape(h, hd, d),
            ),
            (b + "attn.proj.bias", weights["mha/attention_output/bias"], same),
            (b + "norm1.weight", weights["ln_1/gamma"], same),
            (b + "norm1.bias", weights["ln_1/beta"], same),
            (b + "norm2.weight", weights["ln_2/gamma"], same),
            (b + "norm2.bias", weights["ln_2/beta"], same),
            (b + "mlp.fc1.weight", weights["mlp/dense_1/kernel"], linear),
            (b + "mlp.fc1.bias", weights["mlp/dense_1/bias"], same),
            (b + "mlp.fc2.weight", weights["mlp/dense_2/kernel"], linear),
            (b + "mlp.fc2.bias", weights["mlp/dense_2/bias"], same),
        ]
    norm = model.get_layer("norm")
    plan += [("norm.weight", norm.gamma, same), ("norm.bias", norm.beta, same)]
    if s["prefix"] == 2:
        heads = model.get_layer("heads")
        plan += [
            ("head.weight", heads.head.kernel, linear),
            ("head.bias", heads.head.bias, same),
            ("head_dist.weight", heads.head_dist.kernel, linear),
            ("head_dist.bias", heads.head_dist.bias, same),
        ]
    else:
        head = model.get_layer("head")
        plan += [("head.weight", head.kernel, linear), ("head.bias", head.bias, same)]
    return plan


def _grid_of(tokens: int, prefix: int) -> tuple[int, int] | None:
    side = math.isqrt(max(tokens - prefix, 0))
    return (side, side) if side * side == tokens - prefix and side > 0 else None


def load_timm_weights(
    model: Any,
    state: Mapping[str, np.ndarray],
    *,
    finetune: bool = False,
    source: str = "state dict",
) -> list[str]:
    """Set ``model``'s weights (a :func:`~tfdp.models.vision_transformer` model) from timm's.

    Every key of ``state`` must be one of the model's (:func:`timm_shapes`)
    and every one of the model's must be there, of its shape, except:

    - ``pos_embed`` of another (square) grid: resampled to the model's
      (:func:`resample_pos_embed`; antialiased as timm loads pretrained
      weights, or, with ``finetune``, as DeiT's ``main.py`` interpolates);
      the class and distillation tokens' rows are kept;
    - with ``finetune``, the heads (``head.*``, ``head_dist.*``) of another
      class count: left as the model initialised them, as DeiT's fine-tuning.

    Args:
        model: The Keras model.
        state: timm's state dict (:func:`read_state_dict`).
        finetune: DeiT's fine-tuning rules (see above).
        source: What ``state`` is, for messages (its file).

    Returns:
        What was adapted, in words (empty when the state dict fit as it is).

    Raises:
        DataError: naming ``source``, the first missing, mismatched or unexpected
            key, its shape and the one expected.

    Example:
        >>> from tfdp.models import vision_transformer
        >>> model = vision_transformer("deit_tiny_patch16_224", (32, 32, 3), 10)
        >>> load_timm_weights(model, {"cls_token": np.zeros((1, 1, 192), "float32")})
        Traceback (most recent call last):
        ...
        tfdp.errors.DataError: state dict has no key 'pos_embed' (the model needs shape (1, 5, 192))
    """
    expected = timm_shapes(model)
    s = _structure(model)
    unexpected = [k for k in state if k not in expected]
    notes: list[str] = []
    values = dict(state)
    skip: set[str] = set()
    for key, shape in expected.items():
        if key not in values:
            raise DataError(f"{source} has no key {key!r} (the model needs shape {shape})")
        got = tuple(values[key].shape)
        if got == shape:
            continue
        old = _grid_of(got[1], s["prefix"]) if key == "pos_embed" and len(got) == 3 else None
        if old is not None and got[0] == 1 and got[2] == shape[2]:
            values[key] = resample_pos_embed(
                values[key], s["grid"], s["prefix"], antialias=not finetune
            )
            notes.append(
                f"position embeddings resampled from {old[0]}x{old[1]} to "
                f"{s['grid'][0]}x{s['grid'][1]} patches"
            )
            continue
        if finetune and key.split(".")[0] in ("head", "head_dist"):
            skip.add(key)
            continue
        hint = ""
        if key.split(".")[0] in ("head", "head_dist"):
            hint = (
                f" ({source} has {got[0]} classes, the model {shape[0]}: fine-tuning "
                "re-initialises the head)"
            )
        raise DataError(f"{source}: key {key!r} has shape {got}, the model needs {shape}{hint}")
    if unexpected:
        raise DataError(
            f"{source}: key {unexpected[0]!r} (shape {tuple(state[unexpected[0]].shape)}) is not "
            f"a weight of {model.name!r}"
            + (f", nor are {len(unexpected) - 1} more" if len(unexpected) > 1 else "")
            + " (a checkpoint of another model?)"
        )
    if skip:
        notes.append(
            f"head re-initialised ({source} has {values['head.weight'].shape[0]} classes, the "
            f"model {s['classes']})"
        )
    for key, variable, convert in _plan(model):
        if key not in skip:
            variable.assign(convert(values[key]).astype(np.float32))
    return notes


def from_timm(
    name: str,
    state: Mapping[str, np.ndarray],
    *,
    image_size: int | None = None,
    source: str = "state dict",
) -> Any:
    """The Keras model ``name`` with the weights of timm's / DeiT's state dict ``state``.

    Its class count and channels are the state dict's (``head.weight``,
    ``patch_embed.proj.weight``), its input size the state dict's grid of
    position embeddings times the patch, or ``image_size`` (the embeddings
    then resampled as timm's ``create_model(..., img_size=...)`` does).
    Strict otherwise (:func:`load_timm_weights`).

    Raises:
        ConfigError: an unknown ``name``, an ``image_size`` that is no multiple of the patch.
        DataError: a state dict that does not fit, naming ``source`` and the key.

    Example:
        >>> from tfdp.models import vision_transformer
        >>> timm_like = {k: np.zeros(v, "float32") for k, v in timm_shapes(
        ...     vision_transformer("deit_tiny_patch16_224", (48, 48, 3), 7, init=False)).items()}
        >>> from_timm("deit_tiny_patch16_224", timm_like).input_shape
        (None, 48, 48, 3)
    """
    from tfdp.models.names import model_spec
    from tfdp.models.vit import vision_transformer

    spec = model_spec(name)
    for key in ("head.weight", "patch_embed.proj.weight", "pos_embed"):
        if key not in state or np.ndim(state[key]) < 2:
            raise DataError(f"{source} has no key {key!r} of timm's {spec.name}")
    classes, channels = (
        int(state["head.weight"].shape[0]),
        int(state["patch_embed.proj.weight"].shape[1]),
    )
    grid = _grid_of(int(state["pos_embed"].shape[1]), spec.prefix_tokens)
    if image_size is None:
        if grid is None:
            raise DataError(
                f"{source}: key 'pos_embed' (shape {tuple(state['pos_embed'].shape)}) is no "
                f"square grid of patches after {spec.prefix_tokens} prefix token(s)"
            )
        image_size = grid[0] * spec.patch
    model = vision_transformer(spec, (image_size, image_size, channels), classes, init=False)
    load_timm_weights(model, state, source=source)
    return model


# -- position embeddings -----------------------------------------------------------------------


def _cubic_aa(x: np.ndarray) -> np.ndarray:
    """PIL's / torch's antialiased bicubic filter (``a = -0.5``)."""
    a = -0.5
    x = np.abs(x)
    return np.where(
        x < 1,
        ((a + 2) * x - (a + 3)) * x * x + 1,
        np.where(x < 2, (((x - 5) * x + 8) * x - 4) * a, 0.0),
    )


def _cubic(x: np.ndarray) -> np.ndarray:
    """The (non-antialiased) bicubic convolution (``a = -0.75``)."""
    a = -0.75
    x = np.abs(x)
    return np.where(
        x <= 1,
        ((a + 2) * x - (a + 3)) * x * x + 1,
        np.where(x < 2, ((a * x - 5 * a) * x + 8 * a) * x - 4 * a, 0.0),
    )


def _weights_aa(n_in: int, n_out: int) -> np.ndarray:
    """``[n_out, n_in]``: torch's ``interpolate(bicubic, antialias=True)`` along one axis."""
    scale = n_in / n_out
    support = 2.0 * scale if scale >= 1 else 2.0
    inv = 1.0 / scale if scale >= 1 else 1.0
    w = np.zeros((n_out, n_in))
    for i in range(n_out):
        center = scale * (i + 0.5)
        lo = max(int(center - support + 0.5), 0)
        hi = min(int(center + support + 0.5), n_in)
        taps = _cubic_aa((np.arange(lo, hi) - center + 0.5) * inv)
        total = taps.sum()
        w[i, lo:hi] = taps / total if total != 0 else taps
    return w


def _weights(n_in: int, n_out: int) -> np.ndarray:
    """``[n_out, n_in]``: torch's ``interpolate(bicubic, align_corners=False)`` along one axis."""
    scale = n_in / n_out
    w = np.zeros((n_out, n_in))
    for i in range(n_out):
        src = scale * (i + 0.5) - 0.5
        x0 = math.floor(src)
        t = src - x0
        for off in (-1, 0, 1, 2):
            w[i, min(max(x0 + off, 0), n_in - 1)] += _cubic(np.array(t - off))
    return w


def resample_pos_embed(
    posemb: np.ndarray,
    new_size: Sequence[int],
    num_prefix_tokens: int = 1,
    old_size: Sequence[int] | None = None,
    *,
    antialias: bool = True,
) -> np.ndarray:
    """Position embeddings ``[1, prefix + h * w, D]`` resampled bicubically to ``new_size``.

    timm's ``resample_abs_pos_embed(posemb, new_size, old_size, num_prefix_tokens,
    "bicubic", antialias)``: the prefix tokens' rows (class, distillation)
    kept, the grid's resampled as an image (a square ``old_size`` unless
    given). ``antialias=True`` is timm's default (its loading of pretrained
    weights); ``antialias=False`` is DeiT's ``main.py`` fine-tuning
    (``F.interpolate(mode="bicubic", align_corners=False)``).

    Raises:
        ConfigError: a shape that is not ``[1, prefix + h * w, D]`` (``argument="posemb"``).

    Example:
        >>> pos = np.concatenate([np.full((1, 1, 2), 7.0), np.ones((1, 16, 2))], 1)
        >>> out = resample_pos_embed(pos, (2, 2))
        >>> out.shape, out[0, 0].tolist(), np.allclose(out[0, 1:], 1.0)  # prefix kept
        ((1, 5, 2), [7.0, 7.0], True)
    """
    posemb = np.asarray(posemb, dtype=np.float32)
    tokens = posemb.shape[1] - num_prefix_tokens if posemb.ndim == 3 else -1
    if old_size is not None:
        grid: tuple[int, ...] | None = tuple(int(d) for d in old_size)
    else:
        grid = _grid_of(tokens + num_prefix_tokens, num_prefix_tokens)
    if posemb.ndim != 3 or posemb.shape[0] != 1 or grid is None or grid[0] * grid[1] != tokens:
        raise ConfigError(
            f"must be [1, {num_prefix_tokens} + h * w, D] (a square grid unless old_size "
            f"is given), got shape {posemb.shape}",
            argument="posemb",
        )
    new = (int(new_size[0]), int(new_size[1]))
    if grid == new:
        return posemb
    make = _weights_aa if antialias else _weights
    rows, cols = make(grid[0], new[0]), make(grid[1], new[1])
    image = posemb[0, num_prefix_tokens:].reshape(grid[0], grid[1], -1).astype(np.float64)
    out = np.einsum("ih,hwd,jw->ijd", rows, image, cols).reshape(1, new[0] * new[1], -1)
    return np.concatenate([posemb[:, :num_prefix_tokens], out.astype(np.float32)], axis=1)
