"""``tfdp sampler``: show which rank takes which sample at which step, as text or a picture.

This module owns the ``sampler`` command: :func:`add_parser` (its options,
with the same names and defaults as ``tfdp train``'s sampler options),
:func:`run`, :func:`sampler_table` (the text table) and :func:`draw_layout`
(the ``--png`` picture: every sample id its own colour, neighbouring ids far
apart in hue, padding copies hatched and listed in the legend). Importing it
loads no TensorFlow.

Example:
    $ tfdp sampler --num-examples 12 --replicas 4 --repeats 3 --png layout.png
"""

from __future__ import annotations

import argparse
import math
import textwrap
from collections.abc import Sequence
from typing import Any

import numpy as np

from tfdp.cli.args import import_extra, int_at_least
from tfdp.cli.plot import image_format
from tfdp.recipe.config import TrainConfig
from tfdp.samplers import DistributedEvalSampler, DistributedSampler, RepeatAugSampler, Sampler

_GOLDEN = (math.sqrt(5) - 1) / 2  # hue step: consecutive ids land far apart on the colour wheel


def _default(name: str) -> Any:
    return TrainConfig.fields()[name].default


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``tfdp sampler`` to a ``tfdp`` sub-command set; returns its parser."""
    sp = subparsers.add_parser(
        "sampler",
        help="show which rank takes which sample at which step",
        description="Print (and optionally draw) one epoch of a tfdp sampler for every rank. "
        "The options and their defaults are tfdp train's.",
    )
    sp.add_argument("--num-examples", type=int_at_least(1), required=True, help="data set size N")
    sp.add_argument("--replicas", type=int_at_least(1), default=4, help="world size W")
    sp.add_argument(
        "--sampler",
        type=lambda text: text.replace("_", "-"),
        choices=["repeat-aug", "distributed", "eval"],
        default=_default("sampler"),
        help="which sampler (repeat_aug is the same as repeat-aug)",
    )
    sp.add_argument(
        "--repeats",
        type=float,
        default=_default("repeats"),
        help="repeat-aug: copies per sample",
    )
    sp.add_argument(
        "--selected-round",
        type=int_at_least(0),
        default=_default("selected_round"),
        help="repeat-aug: round the per-epoch count down to a multiple of this (DeiT: 256; "
        "0: off, as in tfdp train)",
    )
    sp.add_argument(
        "--selected-ratio",
        type=float,
        default=None,
        help="repeat-aug: divide N by this for the per-rank count (default: W)",
    )
    sp.add_argument(
        "--padding",
        choices=["wrap", "random", "none"],
        default="wrap",
        help="distributed: how the list is padded to a multiple of W",
    )
    sp.add_argument("--drop-last", action="store_true", help="distributed: drop the tail")
    sp.add_argument("--no-shuffle", action="store_true", help="keep the data set order")
    sp.add_argument("--seed", type=int_at_least(0), default=_default("seed"), help="shuffle seed")
    sp.add_argument(
        "--epoch",
        type=int_at_least(0),
        default=0,
        help="the epoch to show as sampler.set_epoch and metrics.jsonl count it: 0 is the "
        "first (the picture's title counts from 1, as the console does)",
    )
    sp.add_argument(
        "--batch-size",
        type=int_at_least(1),
        default=1,
        help="samples per replica per step",
    )
    sp.add_argument("--max-steps", type=int_at_least(1), default=20, help="rows to print")
    sp.add_argument(
        "--png", default=None, metavar="FILE", help="also draw the layout to this image file"
    )
    sp.set_defaults(func=run, argument_words=_WORDS)
    return sp


#: The samplers' arguments this command's flags name otherwise (the rest are their own words).
_WORDS = {"num_repeats": "--repeats", "num_replicas": "--replicas"}


def build_samplers(args: argparse.Namespace) -> list[Sampler]:
    """One sampler per rank from the parsed options, at ``args.epoch``.

    Raises:
        tfdp.errors.ConfigError: the sampler refuses the options (its ``argument`` names
            them: the command says them as :data:`_WORDS` does).

    Example:
        >>> ns = argparse.Namespace(sampler="eval", num_examples=3, replicas=2, epoch=0)
        >>> [s.indices().tolist() for s in build_samplers(ns)]
        [[0, 2], [1, 0]]
    """
    out = [_build(args, rank) for rank in range(args.replicas)]
    for s in out:
        s.set_epoch(args.epoch)
    return out


def _build(args: argparse.Namespace, rank: int) -> Sampler:
    if args.sampler == "repeat-aug":
        return RepeatAugSampler(
            args.num_examples,
            args.replicas,
            rank,
            num_repeats=args.repeats,
            shuffle=not args.no_shuffle,
            seed=args.seed,
            selected_round=args.selected_round,
            selected_ratio=args.selected_ratio,
        )
    if args.sampler == "distributed":
        padding = None if args.padding == "none" else args.padding
        return DistributedSampler(
            args.num_examples,
            args.replicas,
            rank,
            shuffle=not args.no_shuffle,
            seed=args.seed,
            drop_last=args.drop_last,
            padding=padding,
        )
    return DistributedEvalSampler(args.num_examples, args.replicas, rank)


def sampler_table(samplers: Sequence[Sampler], batch_size: int = 1, max_steps: int = 20) -> str:
    """Render which rank takes which sample at which step as a text table.

    Args:
        samplers: One sampler per rank, in rank order, all at the same epoch.
        batch_size: Samples per replica per step.
        max_steps: Rows to show; the rest is summarised in one line.

    Example:
        >>> s = [DistributedSampler(4, 2, r, shuffle=False) for r in range(2)]
        >>> print(sampler_table(s))
        step  rank 0  rank 1
        0     0       1
        1     2       3
    """
    per_rank = [s.indices() for s in samplers]
    steps = -(-len(per_rank[0]) // batch_size) if len(per_rank[0]) else 0
    header = ["step"] + [f"rank {r}" for r in range(len(samplers))]
    rows = []
    for step in range(min(steps, max_steps)):
        cells = [str(step)]
        for idx in per_rank:
            chunk = idx[step * batch_size : (step + 1) * batch_size]
            cells.append(",".join(str(int(v)) for v in chunk) or "-")
        rows.append(cells)
    widths = [max(len(r[c]) for r in [header, *rows]) for c in range(len(header))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip()
        for r in [header, *rows]
    ]
    if steps > max_steps:
        lines.append(f"... {steps - max_steps} more step(s) ({steps} in all)")
    return "\n".join(lines)


def padding_mask(sampler: Sampler) -> np.ndarray:
    """True where a rank's entry is a padding copy (added to even out the ranks).

    Example:
        >>> padding_mask(DistributedSampler(5, 2, 1, shuffle=False)).tolist()
        [False, False, True]
    """
    if isinstance(sampler, DistributedEvalSampler):
        return ~sampler.mask()
    if isinstance(sampler, RepeatAugSampler):
        n, r = sampler.num_examples, sampler.num_repeats
        real = n * int(r) if float(r).is_integer() else math.ceil(n * r)
    else:
        real = sampler.num_examples
    return sampler.positions() >= real


def id_colour(sample_id: int) -> tuple[float, float, float]:
    """An RGB colour for a sample id: consecutive ids get hues far apart, none repeats exactly.

    Example:
        >>> id_colour(0) != id_colour(1)
        True
    """
    import colorsys

    hue = (sample_id * _GOLDEN) % 1.0
    light = 0.62 + 0.12 * ((sample_id // 7) % 2)  # a second cue for close hues
    return colorsys.hls_to_rgb(hue, light, 0.75)


def draw_layout(samplers: Sequence[Sampler], batch_size: int, path: str) -> str:
    """Draw one epoch's layout (ranks x positions) to ``path``; the format from its extension.

    The picture is :func:`layout_figure`'s.

    Returns:
        The path written.
    """
    import_extra("matplotlib", "plot", "--png")
    fmt = image_format(path, "png")
    layout_figure(samplers, batch_size).savefig(path, format=fmt, dpi=120)
    return path


def layout_figure(samplers: Sequence[Sampler], batch_size: int) -> Any:
    """One epoch's layout (ranks x positions) as a matplotlib figure.

    Each cell holds the sample id, coloured by :func:`id_colour`; padding
    copies are hatched and said so in the legend; step boundaries are lines.
    Both axes have integer ticks only: ranks, and positions in a rank's epoch.

    Example:
        >>> fig = layout_figure([DistributedSampler(6, 2, r) for r in range(2)], 1)
        >>> fig.axes[0].get_ylabel()
        'rank'
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch, Rectangle
    from matplotlib.ticker import MaxNLocator

    idx = np.stack([s.indices() for s in samplers])  # [W, K]
    pad = np.stack([padding_mask(s) for s in samplers])
    w, k = idx.shape
    width, height = min(2.5 + 0.45 * max(k, 1), 40), min(1.6 + 0.5 * w, 30)
    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for r in range(w):
        for j in range(k):
            ax.add_patch(
                Rectangle(
                    (j - 0.5, r - 0.5),
                    1,
                    1,
                    facecolor=id_colour(int(idx[r, j])),
                    edgecolor="white",
                    hatch="///" if pad[r, j] else None,
                )
            )
            if k * w <= 2000:
                ax.text(j, r, str(int(idx[r, j])), ha="center", va="center", fontsize=7)
    for j in range(batch_size, k, batch_size):
        ax.axvline(j - 0.5, color="black", linewidth=1.5)
    ax.set_xlim(-0.5, k - 0.5)
    ax.set_ylim(w - 0.5, -0.5)
    ax.set_xlabel(f"position in the rank's epoch (steps of {batch_size})")
    ax.set_ylabel("rank")
    ax.set_yticks(range(w))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
    s = samplers[0]
    # Epochs are counted from 1 where a person reads them (set_epoch takes the 0-based index).
    title = f"{type(s).__name__}: {w} ranks x {k} samples, epoch {s.epoch + 1}"
    if isinstance(s, RepeatAugSampler):
        title += f", {s.num_repeats:g} repeats"
    chars = max(20, int(width * 72 / 7.5))  # what fits at 10-point type
    ax.set_title("\n".join(textwrap.wrap(title, chars)), fontsize=10)
    if pad.any():
        ax.legend(
            handles=[Patch(facecolor="white", edgecolor="grey", hatch="///")],
            labels=[f"padding copy ({int(pad.sum())})"],
            loc="upper left",
            bbox_to_anchor=(1.0, 1.0),
            fontsize=8,
        )
    fig.tight_layout()
    return fig


def run(args: argparse.Namespace) -> int:
    """Run ``tfdp sampler`` from parsed arguments; returns the exit status."""
    samplers = build_samplers(args)
    print(repr(samplers[0]).replace("rank=0, ", ""))
    print(sampler_table(samplers, args.batch_size, args.max_steps))
    if args.png:
        print(f"wrote {draw_layout(samplers, args.batch_size, args.png)}")
    return 0
