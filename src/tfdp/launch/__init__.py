"""``tfdp launch``: start, watch, and restart tf.distribute workers, on one node or several.

This package owns the launcher, TensorFlow's missing ``torchrun``: it turns one command
into worker processes configured for ``MultiWorkerMirroredStrategy`` through
``TF_CONFIG``, supervises them, and restarts the whole group on failure. It never imports
TensorFlow. Its layers, each usable on its own:

* :mod:`~tfdp.launch.plan` (pure): the argv and environment of every worker, given the
  cluster (:func:`plan_node`; :func:`plan` for one node), and the checks of a launch's
  values (:func:`parse_nnodes`, :func:`ports_from_base`, :func:`default_rdzv_id`).
* :mod:`~tfdp.launch.supervise` (processes): :func:`launch` runs the workers of one
  node, each in its own process group, prints their output lines as ``[worker i]`` (every
  line, to the end), forwards SIGINT/SIGTERM, stops the group when a worker fails, and
  restarts it up to ``max_restarts`` times with ``TFDP_RESTART`` incremented.
* :mod:`~tfdp.launch.protocol`, :mod:`~tfdp.launch.auth` and :mod:`~tfdp.launch.rendezvous`:
  how the launchers of several nodes meet at the master (node 0) -- one JSON message per
  line, the job id and version checked, each message numbered and, with a shared secret
  (:data:`SECRET_ENV`), authenticated -- and the master's membership of the job, round
  after round, which strangers at its port cannot starve or change
  (:mod:`~tfdp.launch.refusals` tells what it refused).
* :mod:`~tfdp.launch.channel`, :mod:`~tfdp.launch.join` and :mod:`~tfdp.launch.node`:
  :func:`launch_nodes`, the launcher of one node in a job of several (static
  ``--nnodes N`` or elastic ``--nnodes MIN:MAX``): its connection to the master, its join
  (retried), its rounds.
* the command line, ``tfdp launch`` or ``python -m tfdp.launch``, lives in
  :mod:`tfdp.cli.launch`.

POSIX only (process groups and signals).

Example:
    $ tfdp launch --workers 2 --max-restarts 3 -- python train.py --epochs 10
    $ tfdp launch --nnodes 2 --node-rank 0 --master-addr 10.0.0.1 --nproc-per-node 2 -- cmd
"""

from __future__ import annotations

from tfdp.launch.auth import MIN_SECRET_CHARS, SECRET_ENV
from tfdp.launch.node import DEFAULT_MASTER_PORT, launch_nodes
from tfdp.launch.plan import (
    LaunchError,
    NodeSlot,
    WorkerSpec,
    default_rdzv_id,
    parse_nnodes,
    plan,
    plan_node,
    ports_from_base,
)
from tfdp.launch.rendezvous import DEFAULT_LAST_CALL, DEFAULT_RDZV_TIMEOUT, DEFAULT_SILENCE
from tfdp.launch.supervise import DEFAULT_GRACE_SECONDS, PROG, free_ports, launch

__all__ = [
    "DEFAULT_GRACE_SECONDS",
    "DEFAULT_LAST_CALL",
    "DEFAULT_MASTER_PORT",
    "DEFAULT_RDZV_TIMEOUT",
    "DEFAULT_SILENCE",
    "MIN_SECRET_CHARS",
    "PROG",
    "SECRET_ENV",
    "LaunchError",
    "NodeSlot",
    "WorkerSpec",
    "default_rdzv_id",
    "free_ports",
    "launch",
    "launch_nodes",
    "parse_nnodes",
    "plan",
    "plan_node",
    "ports_from_base",
]
