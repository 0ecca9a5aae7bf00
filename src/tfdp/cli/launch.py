"""``tfdp launch``: the command line of the launcher (:mod:`tfdp.launch` is the library half).

This module owns the ``launch`` command's options (``--workers``, alias
``--nproc-per-node`` as torchrun spells it, ``--max-restarts``,
``--port-base``, ``--host``, ``--grace-seconds``) and turns them into
:func:`tfdp.launch.launch`; ``python -m tfdp.launch`` runs :func:`main`.

Example:
    $ tfdp launch --workers 2 --max-restarts 3 -- python train.py --epochs 10
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from tfdp.cli.args import Parser, in_flags, int_at_least, port, seconds
from tfdp.launch import DEFAULT_GRACE_SECONDS, PROG, LaunchError, launch

__all__ = ["add_arguments", "add_parser", "main", "run"]

_DESCRIPTION = """\
Run COMMAND as N local tf.distribute workers (TF_CONFIG set for
MultiWorkerMirroredStrategy), print their output as '[worker i] ...', and stop
(or, with --max-restarts, restart) the whole group when one fails. Each worker
also gets torchrun's RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
MASTER_ADDR and MASTER_PORT, and TFDP_WORKER_INDEX, TFDP_NUM_WORKERS and
TFDP_RESTART. SIGINT and SIGTERM are forwarded to every worker (a second one:
SIGKILL at once). Exit status: 0, the failing worker's code (128+N if killed
by signal N), 130 on SIGINT, 143 on SIGTERM."""
_EPILOG = """\
example:
  tfdp launch --workers 2 --max-restarts 3 -- python train.py --epochs 10"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the launcher's options to ``parser`` (a ``tfdp launch`` or standalone parser)."""
    parser.add_argument(
        "--workers",
        "--nproc-per-node",
        dest="workers",
        type=int_at_least(1),
        required=True,
        metavar="N",
        help="number of workers (--nproc-per-node, torchrun's name, is the same)",
    )
    parser.add_argument(
        "--max-restarts",
        type=int_at_least(0),
        default=0,
        metavar="K",
        help="restart the whole group up to K times after a failure (default 0)",
    )
    parser.add_argument(
        "--port-base",
        type=port,
        default=None,
        metavar="P",
        help="worker i listens on port P+i (default: free ports chosen at each start)",
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="the workers' address (default 127.0.0.1)"
    )
    parser.add_argument(
        "--grace-seconds",
        type=seconds,
        default=DEFAULT_GRACE_SECONDS,
        metavar="S",
        help=f"seconds between SIGTERM and SIGKILL when stopping workers "
        f"(default {DEFAULT_GRACE_SECONDS:g})",
    )
    parser.add_argument(
        "worker_command",
        nargs=argparse.REMAINDER,
        metavar="-- COMMAND ...",
        help="the worker command and its arguments",
    )
    parser.set_defaults(func=run)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``tfdp launch`` to a ``tfdp`` sub-command set; returns its parser.

    Example:
        >>> parser = Parser(prog="tfdp")
        >>> _ = add_parser(parser.add_subparsers(dest="command"))
        >>> args = parser.parse_args(["launch", "--nproc-per-node", "2", "--", "python", "t.py"])
        >>> args.workers, args.worker_command, args.func is run
        (2, ['--', 'python', 't.py'], True)
    """
    parser = subparsers.add_parser(
        "launch",
        help="run a command as N local tf.distribute workers",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser)
    return parser


def run(args: argparse.Namespace) -> int:
    """Run ``tfdp launch`` from parsed arguments; returns the exit status.

    Errors are printed as one ``tfdp launch: error: ...`` line: status 2 for bad
    arguments, 127 (126) when the command is not found (not executable).

    Example:
        >>> args = argparse.Namespace(workers=2, max_restarts=0, port_base=None,
        ...     host="127.0.0.1", grace_seconds=30.0, worker_command=["--"])
        >>> run(args)
        2
    """
    command = list(args.worker_command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        print(
            f"{PROG}: error: no command to run: give the command after --, "
            f"e.g. {PROG} --workers 2 -- python train.py",
            file=sys.stderr,
            flush=True,
        )
        return 2
    try:
        return launch(
            command,
            args.workers,
            max_restarts=args.max_restarts,
            port_base=args.port_base,
            host=args.host,
            grace_seconds=args.grace_seconds,
        )
    except LaunchError as exc:
        print(f"{PROG}: error: {in_flags(exc)}", file=sys.stderr, flush=True)
        cause = exc.__cause__
        if isinstance(cause, FileNotFoundError):
            return 127
        if isinstance(cause, PermissionError):
            return 126
        return 2


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``tfdp launch`` standalone (``python -m tfdp.launch``); returns the exit status.

    Args:
        argv: The arguments after the program name (default ``sys.argv[1:]``).

    Example:
        >>> main(["--workers", "1", "--", sys.executable, "-c", "print('hi')"])
        [worker 0] hi
        0
    """
    parser = Parser(
        prog=PROG,
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))
