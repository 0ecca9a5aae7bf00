"""``tfdp evaluate RUN_DIR``: a run's latest checkpoint, evaluated exactly on its held-out split.

This module owns the ``evaluate`` command's parser and handler; the work is
:func:`tfdp.recipe.run_evaluate`, with the run's held-out transform and
normalisation from its ``config.json``. The metrics are the same whatever
``--replicas``, and they are printed as JSON.

Example:
    $ tfdp evaluate runs/quickstart --replicas 4
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from tfdp.cli.args import int_at_least, quiet_tf, require


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``tfdp evaluate`` to a ``tfdp`` sub-command set; returns its parser."""
    ep = subparsers.add_parser(
        "evaluate",
        help="evaluate a run's latest checkpoint on its held-out split",
        description="Exact evaluation: the same metrics whatever --replicas. The held-out "
        "images are transformed as the run's config.json says (--eval-crop-ratio's resize "
        "and centre crop, --mean / --std's normalisation), as training evaluated them.",
    )
    ep.add_argument("run_dir", help="a run directory written by tfdp train")
    ep.add_argument(
        "--replicas",
        type=int_at_least(1),
        default=None,
        help="logical CPU replicas (default: the run's)",
    )
    ep.set_defaults(func=run)
    return ep


def run(args: argparse.Namespace) -> int:
    """Run ``tfdp evaluate`` from parsed arguments; returns the exit status."""
    require("tensorflow", "cpu|gpu", "tfdp evaluate")
    quiet_tf()
    from tfdp.recipe import run_evaluate

    print(json.dumps(run_evaluate(args.run_dir, args.replicas), indent=2))
    return 0
