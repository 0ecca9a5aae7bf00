"""The ``tfdp`` command: argument parsing, dispatch, and error reporting.

This module owns the command line. Each subcommand is a small function that
turns parsed arguments into library calls; errors from bad input are printed
as one ``tfdp: error: ...`` line (never a bare traceback) with exit status 2.

Example:
    $ tfdp sampler --num-examples 12 --replicas 4 --repeats 3 --selected-round 0
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from tfdp.samplers import DistributedEvalSampler, DistributedSampler, RepeatAugSampler, Sampler

__all__ = ["main", "sampler_table"]


class _Parser(argparse.ArgumentParser):
    """argparse with "did you mean" suggestions for unknown flags, and no silent abbreviations."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    argv: Sequence[str] = ()

    def _all_flags(self) -> list[str]:
        """Option strings of this parser, or of the sub-command named in ``argv``."""
        flags = []
        for action in self._actions:
            flags += action.option_strings
            if isinstance(action, argparse._SubParsersAction):
                chosen = next((a for a in self.argv if a in action.choices), None)
                if chosen is not None:
                    sub = action.choices[chosen]
                    flags += sub._all_flags() if isinstance(sub, _Parser) else []
        return sorted(set(flags))

    def error(self, message: str) -> None:  # type: ignore[override]
        if "unrecognized arguments:" in message:
            known = self._all_flags()
            hints = []
            for arg in message.split("unrecognized arguments:", 1)[1].split():
                flag = arg.split("=", 1)[0]
                close = difflib.get_close_matches(flag, known, n=1)
                if close:
                    hints.append(f"{flag} -> did you mean {close[0]}?")
            if hints:
                message += " (" + "; ".join(hints) + ")"
        self.exit(2, f"{self.prog}: error: {message}\n")


def _build_sampler(args: argparse.Namespace, rank: int) -> Sampler:
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


def _plot_sampler(samplers: Sequence[Sampler], batch_size: int, path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ValueError("--png needs matplotlib: pip install 'tfdp[plot]'") from exc
    idx = np.stack([s.indices() for s in samplers])  # [W, K]
    w, k = idx.shape
    fig, ax = plt.subplots(figsize=(min(2 + 0.45 * k, 40), min(1 + 0.5 * w, 30)))
    ax.imshow(idx, aspect="auto", cmap="tab20", interpolation="nearest")
    if k * w <= 2000:
        for r in range(w):
            for j in range(k):
                ax.text(j, r, str(int(idx[r, j])), ha="center", va="center", fontsize=7)
    for j in range(batch_size, k, batch_size):
        ax.axvline(j - 0.5, color="black", linewidth=1.5)
    ax.set_xlabel(f"position in the rank's epoch (steps of {batch_size})")
    ax.set_ylabel("rank")
    ax.set_yticks(range(w))
    ax.set_title(repr(samplers[0]).split("(")[0] + f": {w} ranks, sample ids per rank")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _cmd_sampler(args: argparse.Namespace) -> int:
    samplers = [_build_sampler(args, r) for r in range(args.replicas)]
    for s in samplers:
        s.set_epoch(args.epoch)
    print(repr(samplers[0]).replace("rank=0, ", ""))
    print(sampler_table(samplers, args.batch_size, args.max_steps))
    if args.png:
        _plot_sampler(samplers, args.batch_size, args.png)
        print(f"wrote {args.png}")
    return 0


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def _arg_type(name: str, type_name: str) -> Any:
    def convert(text: str) -> Any:
        if text.lower() in ("none", "null") and "None" in type_name:
            return None
        try:
            if type_name.startswith("int"):
                return int(text)
            if type_name.startswith("float"):
                return float(text)
        except ValueError:
            kind = "an integer" if type_name.startswith("int") else "a number"
            raise argparse.ArgumentTypeError(f"expected {kind}, got {text!r}") from None
        return text

    convert.__name__ = type_name.split(" ")[0]
    return convert


def _add_train_options(p: argparse.ArgumentParser) -> None:
    from tfdp.job import TrainConfig

    p.add_argument(
        "--config",
        default=None,
        metavar="FILE",
        help="YAML or TOML file of options (flags given here win)",
    )
    for name, f in TrainConfig.fields().items():
        flag = "--" + name.replace("_", "-")
        type_name = str(f.type)
        default = f.default
        help_text = f"{f.metadata['help']} (default: {default})"
        if type_name.startswith("bool"):
            p.add_argument(
                flag, dest=name, default=None, action=argparse.BooleanOptionalAction, help=help_text
            )
            continue
        choices = f.metadata.get("choices")
        p.add_argument(
            flag,
            dest=name,
            default=None,
            type=_arg_type(name, type_name),
            metavar=name.upper()
            if choices is None
            else "{" + ",".join(str(c) for c in choices) + "}",
            help=help_text,
        )


def _train_request(args: argparse.Namespace) -> tuple[Any, frozenset[str]]:
    """The job's options from ``--config`` and the flags (flags win), and which were given."""
    from tfdp.job import TrainConfig, coerce, load_config_file

    values: dict[str, Any] = {}
    if args.config:
        values.update(load_config_file(args.config))
    for name in TrainConfig.fields():
        given = getattr(args, name, None)
        if given is not None:
            values[name] = coerce(name, given, f"--{name.replace('_', '-')}")
    return TrainConfig(**values), frozenset(values)


def _train_config(args: argparse.Namespace) -> Any:
    """The job's options from ``--config`` and the flags (flags win)."""
    return _train_request(args)[0]


def _quiet_tf() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _cmd_train(args: argparse.Namespace) -> int:
    cfg, given = _train_request(args)
    _quiet_tf()
    from tfdp.checkpoint import NonFiniteCheckpointError
    from tfdp.job import run_train
    from tfdp.train import NonFiniteError

    try:
        result = run_train(cfg, given=given)
    except (NonFiniteError, NonFiniteCheckpointError) as exc:  # diverged: its own status
        print(f"tfdp train: error: {exc}", file=sys.stderr)
        return 3
    # A stop by Ctrl-C / SIGTERM (or a peer's) saved a checkpoint: exit with the conventional
    # status so that a launcher or scheduler knows the job is unfinished and can restart it.
    reason = result.get("stop_reason")
    if result.get("stopped_early") and reason:
        return 130 if reason == "SIGINT" else 143
    return 0


def _cmd_evaluate(args: argparse.Namespace) -> int:
    import json

    _quiet_tf()
    from tfdp.job import run_evaluate

    print(json.dumps(run_evaluate(args.run_dir, args.replicas), indent=2))
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tfdp", description="Synchronous data-parallel training for TF/Keras.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    tp = sub.add_parser(
        "train",
        help="train a model (default: a small CNN on the bundled digits)",
        description="Train with Repeated Augmentation on MirroredStrategy (logical CPU replicas "
        "without a GPU), evaluating exactly on a held-out split after every epoch: --eval-data, "
        "else a deterministic part of --data (see --eval-fraction). Every option can also come "
        "from --config FILE (YAML or TOML); flags win. One run writes a run directory at a time "
        "(a lock file holds its pid and host). Ctrl-C saves a checkpoint and stops; a second "
        "Ctrl-C exits at once without saving.",
    )
    _add_train_options(tp)
    tp.set_defaults(func=_cmd_train)
    ep = sub.add_parser(
        "evaluate",
        help="evaluate a run's latest checkpoint on its held-out split",
        description="Exact evaluation: the same metrics whatever --replicas.",
    )
    ep.add_argument("run_dir", help="a run directory written by tfdp train")
    ep.add_argument(
        "--replicas",
        type=_positive_int,
        default=None,
        help="logical CPU replicas (default: the run's)",
    )
    ep.set_defaults(func=_cmd_evaluate)
    from tfdp import cli_tools, launch

    launch.register(sub)
    cli_tools.register(sub)
    sp = sub.add_parser(
        "sampler",
        help="show which rank takes which sample at which step",
        description="Print (and optionally draw) one epoch of a tfdp sampler for every rank.",
    )
    sp.add_argument("--num-examples", type=_positive_int, required=True, help="data set size N")
    sp.add_argument("--replicas", type=_positive_int, default=4, help="world size W (default 4)")
    sp.add_argument(
        "--sampler",
        choices=["repeat-aug", "distributed", "eval"],
        default="repeat-aug",
        help="which sampler (default repeat-aug)",
    )
    sp.add_argument("--repeats", type=float, default=3, help="repeat-aug: copies per sample")
    sp.add_argument(
        "--selected-round",
        type=int,
        default=256,
        help="repeat-aug: round the per-epoch count down to this (DeiT: 256; 0: off)",
    )
    sp.add_argument(
        "--selected-ratio",
        type=float,
        default=None,
        help="repeat-aug: divide N by this for the per-rank count (default W)",
    )
    sp.add_argument(
        "--padding",
        choices=["wrap", "random", "none"],
        default="wrap",
        help="distributed: how the list is padded to a multiple of W",
    )
    sp.add_argument("--drop-last", action="store_true", help="distributed: drop the tail")
    sp.add_argument("--no-shuffle", action="store_true", help="keep the data set order")
    sp.add_argument("--seed", type=int, default=0, help="shuffle seed (default 0)")
    sp.add_argument("--epoch", type=int, default=0, help="epoch to show (default 0)")
    sp.add_argument(
        "--batch-size",
        type=_positive_int,
        default=1,
        help="samples per replica per step (default 1)",
    )
    sp.add_argument("--max-steps", type=_positive_int, default=20, help="rows to print")
    sp.add_argument("--png", default=None, help="also draw the layout to this PNG file")
    sp.set_defaults(func=_cmd_sampler)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``tfdp`` command; returns the exit status.

    Example:
        >>> main(["sampler", "--num-examples", "4", "--replicas", "2",
        ...       "--sampler", "distributed", "--no-shuffle"])  # doctest: +NORMALIZE_WHITESPACE
        DistributedSampler(num_examples=4, num_replicas=2, seed=0, shuffle=False,
          drop_last=False, padding='wrap', epoch=0, len=2)
        step  rank 0  rank 1
        0     0       1
        1     2       3
        0
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow loads
    parser = _parser()
    parser.argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 0
    from tfdp.errors import user_message
    from tfdp.rundir import RunLockedError

    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError, PermissionError, RunLockedError) as exc:
        print(f"tfdp: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("tfdp: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # no bare tracebacks: one line, the full trace on request
        if os.environ.get("TFDP_DEBUG"):
            raise
        print(
            f"tfdp: error: {user_message(exc)} (set TFDP_DEBUG=1 for the traceback)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
