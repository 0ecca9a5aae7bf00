"""The ``tfdp`` command: its sub-commands assembled, and every outcome turned into a status.

This module owns :func:`build_parser` (each sub-command comes from its own
module's ``add_parser``), :func:`run` (the process: ``tfdp``, ``python -m
tfdp``) and :func:`main`, the one place where exceptions
become exit statuses: bad input -- :class:`tfdp.errors.TfdpError`, a missing
optional dependency, a run directory in use, a named path that is missing or
not writable -- prints one ``tfdp: error: ...`` line and exits 2 (a
``TfdpError``'s arguments said as the command's flags:
:func:`tfdp.cli.messages.said`, with the words a command sets as its
``argument_words`` default, e.g. ``spec`` -> ``SRC``); a closed
pipe (``tfdp sampler ... | head``) exits quietly; anything else is a bug,
reported as one line asking for a report (the traceback with
``TFDP_DEBUG=1``), exit 1.

Example:
    $ tfdp --version
    $ python -m tfdp sampler --num-examples 12 --replicas 4
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from tfdp._compat.fast.process import end_process, prefer_bfc_cpu_allocator
from tfdp.cli import data, evaluate, launch, models, plot, sampler, tf_start, train
from tfdp.cli.args import MissingExtraError, Parser, quiet_tf
from tfdp.cli.messages import said, user_message
from tfdp.errors import TfdpError

#: Exceptions reported as bad input (exit 2). OSErrors about a named path (a file that does not
#: exist, a directory that cannot be written) are the user's to fix too.
BAD_INPUT: tuple[type[BaseException], ...] = (
    TfdpError,
    MissingExtraError,
    FileNotFoundError,
    NotADirectoryError,
    IsADirectoryError,
    PermissionError,
)
#: Exit status after a closed pipe: 128 + SIGPIPE, as a process killed by SIGPIPE reports.
CLOSED_PIPE_STATUS = 141


def build_parser() -> Parser:
    """The ``tfdp`` parser with every sub-command.

    Example:
        >>> build_parser().parse_args(["plot", "runs/x"]).run_dir
        'runs/x'
    """
    from tfdp import __version__

    parser = Parser(prog="tfdp", description="Synchronous data-parallel training for TF/Keras.")
    parser.add_argument("--version", action="version", version=f"tfdp {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in (train, evaluate, launch, plot, data, sampler, models):
        module.add_parser(sub)
    return parser


def _bad_input(exc: BaseException) -> bool:
    if isinstance(exc, BAD_INPUT):
        return not isinstance(exc, OSError) or exc.filename is not None or bool(exc.args)
    from tfdp.recipe.rundir import RunLockedError

    return isinstance(exc, RunLockedError)


def _runtime_failure(exc: BaseException) -> bool:
    """A failure of the run's world rather than of tfdp's code.

    TensorFlow's runtime errors (a file that does not decode, a peer that died,
    a collective that timed out), OS errors, and tfdp's own run-time stops
    (divergence, a checkpoint that cannot be written, a held run directory).
    """
    tf = sys.modules.get("tensorflow")
    if tf is not None and isinstance(exc, tf.errors.OpError):
        return True
    ours = isinstance(exc, RuntimeError) and type(exc).__module__.startswith("tfdp.")
    return ours or isinstance(exc, (OSError, TimeoutError))


def _quiet_after_closed_pipe() -> int:
    """Point stdout at /dev/null, so that Python's final flush does not complain again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # a stdout without a file descriptor (tests, notebooks)
        pass
    return CLOSED_PIPE_STATUS


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
    quiet_tf()  # before TensorFlow loads
    tf_start.install()  # its first import held to that level too
    parser = build_parser()
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    if not getattr(args, "command", None):
        parser.print_help()
        return 0
    try:
        # Before TensorFlow loads too (the input's batches: no page faults); a bad
        # TFDP_SPEED_TRICKS is said here, as bad input.
        prefer_bfc_cpu_allocator(os.environ)
        status = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, not at exit
        return status
    except BrokenPipeError:
        return _quiet_after_closed_pipe()
    except KeyboardInterrupt:
        print("tfdp: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if _bad_input(exc):
            words = getattr(args, "argument_words", None)  # a command's own, if it has any
            print(f"tfdp: error: {said(exc, words)}", file=sys.stderr)
            return 2
        if os.environ.get("TFDP_DEBUG"):
            raise
        if _runtime_failure(exc):  # the data, a peer, the machine: not a bug of tfdp
            print(f"tfdp: error: {user_message(exc)}", file=sys.stderr)
            return 1
        print(
            f"tfdp: internal error: {user_message(exc)}. This is a bug in tfdp: please report "
            "it with the command you ran (TFDP_DEBUG=1 shows the traceback)",
            file=sys.stderr,
        )
        return 1


def run() -> NoReturn:
    """The ``tfdp`` process (the console script, ``python -m tfdp``): :func:`main`, then its end.

    The process ends as soon as the command is done and its output flushed,
    without waiting for TensorFlow's teardown (:func:`tfdp._compat.fast.process.end_process`:
    after a long run, tf.data's iterators could hold the process up to a minute
    after ``tfdp train`` said it was done). A worker of a multi-worker job exits
    the usual way, which tells its peers it ended.

    Example:
        >>> import subprocess, sys
        >>> done = subprocess.run([sys.executable, "-m", "tfdp", "sampler", "--num-examples",
        ...                        "4", "--replicas", "2", "--sampler", "distributed",
        ...                        "--no-shuffle"], capture_output=True, text=True)
        >>> done.returncode, done.stdout.splitlines()[-1]
        (0, '1     2       3')
    """
    end_process(main())
