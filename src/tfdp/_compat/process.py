"""The process around TensorFlow, for correctness: its coordination service, failed reduces.

Whether this process is a task of a multi-worker job, the coordination service's heartbeat
(set before TensorFlow builds the strategy), and closing the pools a failed all-reduce left
open (see :mod:`tfdp._compat`).

Example:
    >>> in_coordinated_job()  # a one-process run
    False
"""

from __future__ import annotations

import sys
from typing import Any


def in_coordinated_job() -> bool:
    """Whether this process is a task of a multi-worker job (TensorFlow's coordination service).

    Reads whether the eager context has a coordination service configured (as
    ``MultiWorkerMirroredStrategy`` or :func:`configure_heartbeat` do); False,
    without importing TensorFlow, in a process that has not imported it.

    Example:
        >>> in_coordinated_job()  # a one-process run
        False
    """
    if "tensorflow" not in sys.modules:
        return False
    from tensorflow.python.eager import context

    return context.context().coordination_service is not None


def close_failed_reduce_pools(error: BaseException) -> int:
    """Close the thread pools a failed eager all-reduce left open; return how many were open.

    TensorFlow 2.21's ``CollectiveAllReduce`` runs an eager all-reduce (a
    sync-on-read metric read, ``strategy.reduce``) on a fresh
    ``multiprocessing.pool.ThreadPool`` that it closes only when every device
    succeeded. When a peer is lost mid-collective, the pool stays open, held by
    a frame of ``error``'s traceback; finalised at interpreter exit, after its
    pipe may be closed, it prints "Exception ignored in ... Pool.__del__ ...
    Bad file descriptor". Closing it when the error is handled keeps the exit
    clean. Closing never blocks (the pool's threads are not joined).

    Example:
        >>> from multiprocessing.pool import ThreadPool
        >>> def failing_reduce():
        ...     pool = ThreadPool(1)
        ...     raise ConnectionError("a peer was lost mid-collective")
        >>> try:
        ...     failing_reduce()
        ... except ConnectionError as err:
        ...     print(close_failed_reduce_pools(err), close_failed_reduce_pools(err))
        1 0
    """
    from multiprocessing.pool import RUN, Pool

    closed, tb = 0, error.__traceback__
    while tb is not None:
        for value in tb.tb_frame.f_locals.values():
            if isinstance(value, Pool) and value._state == RUN:
                value.close()
                closed += 1
        tb = tb.tb_next
    return closed


def configure_heartbeat(cluster: dict[str, Any], task_type: str, timeout: float) -> bool:
    """Set the coordination service's heartbeat timeout for the MultiWorkerMirroredStrategy to come.

    TensorFlow declares a task lost when the job's coordination service (hosted
    by the chief, else worker 0) hears no heartbeat from it for this long (its
    own default: 10 s), and then aborts every collective of the job. Call before
    the strategy is built: it configures the service the way the strategy would
    (standalone, the same leader and coordinated jobs), with this timeout.
    Returns False, changing nothing, for a task the service does not coordinate
    (not ``chief`` or ``worker``) or when the service is configured already.

    Example:
        >>> configure_heartbeat({"ps": ["h:1"]}, "ps", 30.0)  # not coordinated: nothing set
        False
    """
    from tensorflow.compiler.xla.tsl.protobuf import coordination_config_pb2
    from tensorflow.python.eager import context

    jobs = [j for j in ("chief", "worker") if cluster.get(j)]
    ctx = context.context()
    if task_type not in jobs or ctx.coordination_service is not None:
        return False
    leader = "chief" if "chief" in jobs else "worker"
    ctx.configure_coordination_service(
        service_type="standalone",
        service_leader=f"/job:{leader}/replica:0/task:0",
        coordinated_jobs=[
            coordination_config_pb2.CoordinatedJob(name=j, num_tasks=len(cluster[j])) for j in jobs
        ],
        heartbeat_timeout_in_ms=int(timeout * 1000),
    )
    return True
