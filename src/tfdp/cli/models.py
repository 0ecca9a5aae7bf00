"""``tfdp models import | list``: timm's / DeiT's weights into a Keras model file, the names.

This module owns the ``models`` command's parsers and handlers:
``tfdp models import NAME --from CHECKPOINT --out MODEL.keras`` reads a timm
or DeiT state dict (``.pth`` with torch -- DeiT's ``{"model": ...}`` files
too -- or ``.safetensors``), builds model ``NAME`` for it
(:func:`tfdp.models.weights.from_timm`: its class count, channels and input
size, or ``--image-size`` with the position embeddings resampled) and saves
it, written atomically; ``tfdp models list`` prints the names and their
sizes. The name and the file are checked, and the checkpoint read, before
TensorFlow loads. The saved model loads with ``tfdp.models.load_model``
(or ``keras.models.load_model`` after ``import tfdp.models.vit``), serves
as ``tfdp train --teacher-model``, and its output is timm's logits (a
distilled model's two heads averaged).

Example:
    $ tfdp models import deit_small_patch16_224 --from deit_small.pth --out deit_small.keras
    $ tfdp models list
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from tfdp.cli.args import int_at_least, quiet_tf, require
from tfdp.errors import ConfigError, renaming


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``tfdp models`` (with ``import`` and ``list``) to a ``tfdp`` sub-command set."""
    mp = subparsers.add_parser(
        "models",
        help="the ViT / DeiT models: import timm's / DeiT's weights, list the names",
        description="DeiT's and ViT's models by timm's names (tfdp[models], on keras-hub).",
    )
    actions = mp.add_subparsers(dest="models_command", metavar="ACTION", required=True)
    ip = actions.add_parser(
        "import",
        help="convert a timm / DeiT checkpoint to a Keras model file",
        description="Build model NAME for the state dict in --from (its classes, channels and "
        "input size: the position embeddings' grid times the patch, or --image-size) and save "
        "it as --out (a .keras file, written under a temporary name and renamed when "
        "complete). Its logits are timm's on the same input. Nothing is downloaded.",
    )
    ip.add_argument("name", metavar="NAME", help="timm's name, e.g. deit_small_patch16_224")
    ip.add_argument(
        "--from",
        dest="source",
        required=True,
        metavar="CHECKPOINT",
        help="the state dict: .pth / .pt / .bin (read with torch, weights only; DeiT's "
        "{'model': ...} and timm's {'state_dict': ...} files too) or .safetensors",
    )
    ip.add_argument("--out", required=True, metavar="MODEL.keras", help="the Keras model file")
    ip.add_argument(
        "--image-size",
        type=int_at_least(1),
        default=None,
        metavar="S",
        help="build for S x S images (a multiple of the patch), the position embeddings "
        "resampled bicubically as timm does (default: the checkpoint's own size)",
    )
    ip.set_defaults(func=run_import, argument_words=_WORDS)
    lp = actions.add_parser("list", help="the model names and their sizes")
    lp.set_defaults(func=run_list)
    return mp


#: The library's arguments as :func:`import_model` names them.
_ARGUMENTS = {"model": "name", "path": "source", "input_shape": "image_size"}
#: :func:`import_model`'s arguments this command says otherwise than as ``--<argument>``.
_WORDS = {"name": "NAME", "source": "--from"}


def import_model(name: str, source: str, out: str, image_size: int | None = None) -> str:
    """Convert checkpoint ``source`` to model ``name``, saved as ``out``; returns what it did.

    Raises:
        tfdp.errors.TfdpError: a bad name, file or state dict (``argument``: this function's).
    """
    from tfdp.models.names import model_spec, require_keras_hub
    from tfdp.models.weights import read_state_dict

    with renaming(_ARGUMENTS):
        spec = model_spec(name)
        require_keras_hub(spec.name)
        if not out.endswith(".keras"):
            raise ConfigError(f"{out!r}: give a .keras file name", argument="out")
        folder = os.path.dirname(os.path.abspath(out))
        if not os.path.isdir(folder):
            raise ConfigError(f"{out!r}: folder {folder!r} does not exist", argument="out")
        state = read_state_dict(source)  # before TensorFlow loads: torch reads a .pth
    require("tensorflow", "cpu|gpu", "tfdp models import")
    quiet_tf()
    from tfdp._util import replaced_atomically
    from tfdp.models.weights import from_timm

    with renaming(_ARGUMENTS):
        model = from_timm(spec.name, state, image_size=image_size, source=f"--from {source!r}")
    with replaced_atomically(out, suffix=".keras") as tmp:
        model.save(tmp)
    _, height, width, channels = model.input_shape
    return (
        f"imported {spec.name} from {source} ({len(state)} tensors): {model.output_shape[-1]} "
        f"classes, {height}x{width}x{channels} inputs, {model.count_params():,} parameters; "
        f"saved to {out} (tfdp.models.load_model reads it)"
    )


def run_import(args: argparse.Namespace) -> int:
    """Run ``tfdp models import`` from parsed arguments; returns the exit status."""
    print(import_model(args.name, args.source, args.out, args.image_size))
    return 0


def run_list(args: argparse.Namespace) -> int:
    """Run ``tfdp models list``: one line per name (no TensorFlow); returns the exit status."""
    from tfdp.models.names import MODELS

    print("name                             width  depth  heads  distilled")
    for spec in MODELS.values():
        print(
            f"{spec.name:<32} {spec.width:>5}  {spec.depth:>5}  {spec.heads:>5}  "
            f"{'yes' if spec.distilled else 'no'}"
        )
    return 0
