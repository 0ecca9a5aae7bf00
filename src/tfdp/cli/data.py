"""``tfdp data convert`` and ``tfdp data inspect``: the command-line half of the data tools.

This module owns the ``data`` command's parsers and handlers; the work is
done by :func:`tfdp.cli.convert.convert_data` and
:func:`tfdp.cli.inspect.inspect_data`. A progress bar is drawn on stderr
only when stderr is a terminal.

Example:
    $ tfdp data convert digits shards --shards 10
    $ tfdp data inspect shards
"""

from __future__ import annotations

import argparse
from typing import Any

from tfdp.cli.args import int_at_least

#: The arguments of :func:`~tfdp.cli.convert.convert_data` and
#: :func:`~tfdp.cli.inspect.inspect_data` said as positionals (the others as their flags).
_WORDS = {"src": "SRC", "dst": "DST"}

_NUM_CLASSES_HELP = (
    "number of classes, when some have no example (default: the class names, else the "
    "largest label + 1, and then every label below it must occur)"
)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``tfdp data`` (with ``convert`` and ``inspect``) to a ``tfdp`` sub-command set.

    The formats named in the help and ``--to``'s choices are the registered ones
    (:data:`tfdp.recipe.dataspec.formats.FORMATS`).
    """
    from tfdp.cli.convert import default_destination
    from tfdp.recipe.dataspec.formats import FORMATS, listed, writers

    src_help = listed()
    targets = [fmt.name for fmt in writers()]
    dp = subparsers.add_parser(
        "data",
        help=f"convert or inspect data sets ({', '.join(fmt.name for fmt in FORMATS)})",
        description=f"Data set tools. SRC is {src_help}.",
    )
    actions = dp.add_subparsers(dest="data_command", metavar="ACTION", required=True)
    cp = actions.add_parser(
        "convert",
        help=f"convert SRC to another format ({', '.join(targets)})",
        description="Convert SRC to DST. The format of DST is --to, else inferred: "
        f"{default_destination()}. DST is written under a temporary name and "
        "renamed when complete; an existing non-empty DST is never overwritten. Progress is "
        "shown on stderr when it is a terminal.",
    )
    cp.add_argument("src", metavar="SRC", help=src_help)
    cp.add_argument("dst", metavar="DST", help="output .npz file or directory")
    cp.add_argument("--to", choices=targets, default=None, help="output format (default: from DST)")
    cp.add_argument(
        "--shards",
        type=int_at_least(1),
        default=None,
        metavar="N",
        help="TFRecord files to write (default: ~10,000 examples each, at least 8)",
    )
    cp.add_argument(
        "--image-size",
        type=int_at_least(1),
        default=None,
        metavar="S",
        help="stretch every image to S x S (needed for .npz when sizes differ; TFRecord shards "
        "of a JPEG folder then hold PNGs instead of the JPEG files byte for byte)",
    )
    cp.add_argument("--no-progress", action="store_true", help="no progress bar")
    cp.add_argument(
        "--num-classes", type=int_at_least(1), default=None, metavar="K", help=_NUM_CLASSES_HELP
    )
    cp.set_defaults(func=run_convert, argument_words=_WORDS)

    ip = actions.add_parser(
        "inspect",
        help="describe SRC: kind, size, classes, image shapes, a few examples",
        description="Print what SRC holds: its kind, number of examples, classes (with counts "
        "when the labels are known without decoding: digits, .npz, image folders), image "
        "shape and dtype, and a few examples (index, label, shape, min/max pixel).",
    )
    ip.add_argument("src", metavar="SRC", help=src_help)
    ip.add_argument(
        "--examples",
        type=int_at_least(0),
        default=5,
        metavar="K",
        help="examples to show",
    )
    ip.add_argument(
        "--num-classes", type=int_at_least(1), default=None, metavar="K", help=_NUM_CLASSES_HELP
    )
    ip.set_defaults(func=run_inspect, argument_words=_WORDS)
    return dp


def run_convert(args: argparse.Namespace) -> int:
    """Run ``tfdp data convert`` from parsed arguments; returns the exit status."""
    from tfdp.cli.convert import convert_data

    print(
        convert_data(
            args.src,
            args.dst,
            to=args.to,
            shards=args.shards,
            image_size=args.image_size,
            num_classes=args.num_classes,
            progress=not args.no_progress,
        )
    )
    return 0


def run_inspect(args: argparse.Namespace) -> int:
    """Run ``tfdp data inspect`` from parsed arguments; returns the exit status."""
    from tfdp.cli.inspect import inspect_data

    print(inspect_data(args.src, args.examples, args.num_classes))
    return 0
