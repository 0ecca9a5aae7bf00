"""``tfdp launch``: the command line of the launcher (:mod:`tfdp.launch` is the library half).

This module owns the ``launch`` command's options -- one node: ``--workers`` (alias
``--nproc-per-node`` as torchrun spells it), ``--max-restarts``, ``--port-base``,
``--node-addr`` (alias ``--host``), ``--grace-seconds``; several nodes, torchrun's shape:
``--nnodes N|MIN:MAX``, ``--node-rank``, ``--master-addr``, ``--master-port``,
``--rdzv-id``, ``--rdzv-timeout``, ``--rdzv-last-call``, and ``TFDP_RDZV_SECRET`` (said in
its help) -- and turns them into
:func:`tfdp.launch.launch` (one node) or :func:`tfdp.launch.launch_nodes`;
``python -m tfdp.launch`` runs :func:`main`.

Example:
    $ tfdp launch --workers 2 --max-restarts 3 -- python train.py --epochs 10
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Sequence
from typing import Any

from tfdp.cli.args import Parser, int_at_least, port, seconds
from tfdp.cli.messages import said
from tfdp.launch import (
    DEFAULT_GRACE_SECONDS,
    DEFAULT_LAST_CALL,
    DEFAULT_MASTER_PORT,
    DEFAULT_RDZV_TIMEOUT,
    DEFAULT_SILENCE,
    MIN_SECRET_CHARS,
    PROG,
    SECRET_ENV,
    LaunchError,
    launch,
    launch_nodes,
    parse_nnodes,
)

#: The launcher's arguments this command says otherwise than as ``--<argument>`` (``""``: the
#: message names what to set, e.g. the secret's environment variable).
_WORDS = {
    "env": "",
    "host": "--node-addr",
    "command": "COMMAND",
    "heartbeat": "--heartbeat-timeout",
    "silence": "--heartbeat-timeout",
}

_DESCRIPTION = """\
Run COMMAND as N tf.distribute workers on this node (default 1; TF_CONFIG set for
MultiWorkerMirroredStrategy), print their output as '[worker i] ...', and stop
(or, with --max-restarts, restart) the whole group when one fails. Each worker
also gets torchrun's RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
GROUP_RANK, GROUP_WORLD_SIZE, MASTER_ADDR and MASTER_PORT (the chief's), and
TFDP_WORKER_INDEX, TFDP_NUM_WORKERS and TFDP_RESTART. SIGINT and SIGTERM are
forwarded to every worker (a second one: SIGKILL at once).

Several nodes: run the same command on every node with --nnodes, its own
--node-rank and the master's --master-addr/--master-port. The launchers meet
at node 0's (the master's) rendezvous, which every node must reach, and run
one cluster, workers ordered by node rank. With --max-restarts K, a
lost node (its launcher gone or silent for --heartbeat-timeout seconds) or a
failed worker restarts the group: a static job (--nnodes N) waits for the
lost node to come back, an elastic one (--nnodes MIN:MAX) goes on with the
nodes left if at least MIN remain (a node that comes back joins at the next
restart). Node 0 hosts the rendezvous: losing it ends the job.

Exit status: 0 (the job completed, or this node's workers completed before the
master was lost), the failing worker's code (128+N if killed by signal N), 1 for
a lost node or a rendezvous timeout, 2 for bad arguments or a refused join,
130 on SIGINT, 143 on SIGTERM."""
_EPILOG = f"""\
examples:
  tfdp launch --workers 2 --max-restarts 3 -- python train.py --epochs 10
  # two machines, two workers each (10.0.0.1 is node 0's address):
  tfdp launch --nnodes 2 --node-rank 0 --master-addr 10.0.0.1 --nproc-per-node 2 -- CMD
  tfdp launch --nnodes 2 --node-rank 1 --master-addr 10.0.0.1 --nproc-per-node 2 -- CMD
  # elastic: 2 to 3 machines, up to 3 restarts (each node: its own --node-rank)
  tfdp launch --nnodes 2:3 --max-restarts 3 --node-rank K --master-addr 10.0.0.1 \\
      --nproc-per-node 2 -- tfdp train --run-dir /shared/run

The rendezvous listens on --master-addr:--master-port (default port
{DEFAULT_MASTER_PORT}); every node presents the job id --rdzv-id (default: derived from
COMMAND, so every node must run the same command). On a shared network, set
{SECRET_ENV} (at least {MIN_SECRET_CHARS} characters, the same on every node) to
authenticate every rendezvous message with an HMAC: without it, anyone who
reaches the port and knows the job id can join. It does not encrypt, and does
not guard TensorFlow's own ports (the workers')."""


def _nnodes(text: str) -> tuple[int, int]:
    try:
        return parse_nnodes(text)
    except LaunchError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the launcher's options to ``parser`` (a ``tfdp launch`` or standalone parser)."""
    parser.add_argument(
        "--workers",
        "--nproc-per-node",
        dest="workers",
        type=int_at_least(1),
        default=1,
        metavar="N",
        help="number of workers on this node; --nproc-per-node, torchrun's name, is the same "
        "(default 1)",
    )
    parser.add_argument(
        "--max-restarts",
        type=int_at_least(0),
        default=0,
        metavar="K",
        help="restart the whole group up to K times after a failure or a lost node (default 0)",
    )
    parser.add_argument(
        "--port-base",
        type=port,
        default=None,
        metavar="P",
        help="worker i of this node listens on port P+i (default: free ports chosen at each start)",
    )
    parser.add_argument(
        "--node-addr",
        "--host",
        dest="node_addr",
        default=None,
        metavar="HOST",
        help="this node's address, where its workers are reached (default: 127.0.0.1 on "
        "one node; with several, the address this node's connection to the master leaves "
        "from -- give it when that is ambiguous)",
    )
    parser.add_argument(
        "--grace-seconds",
        type=seconds,
        default=DEFAULT_GRACE_SECONDS,
        metavar="S",
        help=f"seconds between SIGTERM and SIGKILL when stopping workers "
        f"(default {DEFAULT_GRACE_SECONDS:g})",
    )
    nodes = parser.add_argument_group("several nodes (torchrun's flags)")
    nodes.add_argument(
        "--nnodes",
        type=_nnodes,
        default="1",  # argparse parses a string default with `type`: (1, 1)
        metavar="N|MIN:MAX",
        help="how many nodes: N, or MIN:MAX for an elastic job; 1 is this node only (default 1)",
    )
    nodes.add_argument(
        "--node-rank",
        type=int_at_least(0),
        default=None,
        metavar="K",
        help="this node's rank, 0..MAX-1, one per node (required with several nodes; "
        "node 0 hosts the rendezvous)",
    )
    nodes.add_argument(
        "--master-addr",
        default="127.0.0.1",
        metavar="HOST",
        help="node 0's address, where the rendezvous listens (default 127.0.0.1)",
    )
    nodes.add_argument(
        "--master-port",
        type=port,
        default=DEFAULT_MASTER_PORT,
        metavar="P",
        help=f"the rendezvous port on the master (default {DEFAULT_MASTER_PORT})",
    )
    nodes.add_argument(
        "--rdzv-id",
        default=None,
        metavar="ID",
        help="the job id every node presents (default: derived from the command, the same "
        "on every node that runs the same command)",
    )
    nodes.add_argument(
        "--rdzv-timeout",
        type=seconds,
        default=DEFAULT_RDZV_TIMEOUT,
        metavar="S",
        help="seconds to wait for the master and for the nodes to (re)join "
        f"(default {DEFAULT_RDZV_TIMEOUT:g})",
    )
    nodes.add_argument(
        "--rdzv-last-call",
        type=seconds,
        default=DEFAULT_LAST_CALL,
        metavar="S",
        help="with --nnodes MIN:MAX, seconds the first start waits for more nodes once MIN "
        f"joined (default {DEFAULT_LAST_CALL:g})",
    )
    nodes.add_argument(
        "--heartbeat-timeout",
        type=seconds,
        default=DEFAULT_SILENCE,
        metavar="S",
        help="seconds without a heartbeat after which a node (or the master) is lost, with "
        "a heartbeat every S/10 (at most every second); also the workers' TensorFlow "
        f"heartbeat timeout (TFDP_HEARTBEAT_TIMEOUT) unless set (default {DEFAULT_SILENCE:g})",
    )
    parser.add_argument(
        "worker_command",
        nargs=argparse.REMAINDER,
        metavar="-- COMMAND ...",
        help="the worker command and its arguments",
    )
    parser.set_defaults(func=run, argument_words=_WORDS)


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
        help="run a command as tf.distribute workers, on one node or several",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser)
    return parser


def resume_command(args: argparse.Namespace, command: Sequence[str]) -> str:
    """This node's launch command again, with ``--resume`` for a ``tfdp train`` worker.

    Example:
        >>> args = argparse.Namespace(nnodes=(2, 3), node_rank=1, master_addr="10.0.0.1",
        ...     master_port=29400, workers=2, max_restarts=3, rdzv_id=None, node_addr=None)
        >>> print(resume_command(args, ["tfdp", "train", "--run-dir", "/shared/r"]))
        tfdp launch --nnodes 2:3 --node-rank 1 --master-addr 10.0.0.1 --master-port 29400 --nproc-per-node 2 --max-restarts 3 -- tfdp train --resume --run-dir /shared/r
    """  # noqa: E501
    low, high = args.nnodes
    parts = ["tfdp", "launch", "--nnodes", str(low) if low == high else f"{low}:{high}"]
    parts += ["--node-rank", str(args.node_rank), "--master-addr", args.master_addr]
    parts += ["--master-port", str(args.master_port), "--nproc-per-node", str(args.workers)]
    if args.max_restarts:
        parts += ["--max-restarts", str(args.max_restarts)]
    if args.rdzv_id is not None:
        parts += ["--rdzv-id", args.rdzv_id]
    if args.node_addr is not None:
        parts += ["--node-addr", args.node_addr]
    worker = list(command)
    for i, word in enumerate(worker[1:], start=1):
        tfdp = os.path.basename(worker[i - 1]) in ("tfdp", "tfdp.cli")
        if tfdp and word == "train" and "--resume" not in worker:
            worker.insert(i + 1, "--resume")
            break
    return shlex.join([*parts, "--", *worker])


def _error(text: str) -> None:
    print(f"{PROG}: error: {text}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    """Run ``tfdp launch`` from parsed arguments; returns the exit status.

    Errors are printed as one ``tfdp launch: error: ...`` line: status 2 for bad
    arguments, 127 (126) when the command is not found (not executable), 1 for a condition
    of the network or the machine (never a traceback).

    Example:
        >>> args = argparse.Namespace(workers=2, max_restarts=0, port_base=None,
        ...     node_addr=None, grace_seconds=30.0, nnodes=(1, 1), node_rank=None,
        ...     worker_command=["--"])
        >>> run(args)
        2
    """
    command = list(args.worker_command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        _error(f"no command to run: give the command after --, e.g. {PROG} --workers 2 -- "
               "python train.py")  # fmt: skip
        return 2
    low, high = args.nnodes
    try:
        if high == 1:
            if args.node_rank not in (None, 0):
                _error(f"--node-rank: {args.node_rank} is not in 0..0 (--nnodes 1)")
                return 2
            return launch(
                command,
                args.workers,
                max_restarts=args.max_restarts,
                port_base=args.port_base,
                host=args.node_addr or "127.0.0.1",
                grace_seconds=args.grace_seconds,
            )
        if args.node_rank is None:
            _error(
                f"--node-rank: required with --nnodes {low if low == high else f'{low}:{high}'}"
                f": give every node its own rank in 0..{high - 1} (node 0 hosts the rendezvous "
                "at --master-addr)"
            )
            return 2
        return launch_nodes(
            command,
            args.workers,
            node_rank=args.node_rank,
            nnodes=args.nnodes,
            master_addr=args.master_addr,
            master_port=args.master_port,
            node_addr=args.node_addr,
            port_base=args.port_base,
            rdzv_id=args.rdzv_id,
            rdzv_timeout=args.rdzv_timeout,
            rdzv_last_call=args.rdzv_last_call,
            max_restarts=args.max_restarts,
            grace_seconds=args.grace_seconds,
            resume_hint=resume_command(args, command),
            heartbeat=min(1.0, args.heartbeat_timeout / 10),
            silence=args.heartbeat_timeout,
        )
    except LaunchError as exc:
        _error(said(exc, _WORDS))
        cause = exc.__cause__
        if isinstance(cause, FileNotFoundError):
            return 127
        if isinstance(cause, PermissionError):
            return 126
        return 2
    except OSError as exc:  # the network or the machine (the launcher handles what it expects)
        _error(str(exc))
        return 1


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
