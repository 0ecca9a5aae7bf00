"""The process around TensorFlow: its start, the release of iterators, and its end.

The host allocator and the coordination service's heartbeat (set before TensorFlow starts),
dropping iterators off the caller's thread, closing a failed all-reduce's pools, and ending
the process without TensorFlow's teardown (see :mod:`tfdp._compat`).

Example:
    >>> in_coordinated_job()  # a one-process run
    False
"""

from __future__ import annotations

import atexit
import os
import queue
import sys
import threading
from collections.abc import MutableMapping
from contextlib import suppress
from typing import Any, NoReturn

__all__ = [
    "CPU_ALLOCATOR_ENV",
    "RELEASE_THREAD_NAME",
    "close_failed_reduce_pools",
    "configure_heartbeat",
    "end_process",
    "in_coordinated_job",
    "prefer_bfc_cpu_allocator",
    "release_in_background",
    "wait_for_releases",
]


_RELEASE_QUEUE: queue.Queue[list[Any]] = queue.Queue()
_RELEASE_LOCK = threading.Lock()
_RELEASE_STARTED: list[bool] = []  # one release thread per process, started at the first use
#: The name of the thread on which :func:`release_in_background` drops what it is handed.
RELEASE_THREAD_NAME = "tfdp-release"


def release_in_background(held: list[Any]) -> None:
    """Drop the objects of ``held`` (emptied in place) on a daemon thread, not the caller's.

    In TensorFlow 2.21, destroying a ``tf.data`` iterator waits for the
    iterator's autotuning thread, and that thread does not always see the
    cancellation: it then sleeps to the end of its optimisation period, which
    doubles from 10 ms up to 60 s while the iterator lives. An iterator read
    for 3 s took about 2 s to destroy in 1 to 6 of 8 drops, depending on the run
    (``benchmarks/bench_iterator_release.py``); the wait grows with the
    iterator's age. A training loop that
    drops its training stream at the end of ``fit`` and its evaluation
    iterator after every evaluation would wait that long each time; handed
    here, they are destroyed on one daemon thread while the caller goes on.
    The caller must keep no other reference to them. A process waits at its
    exit for what it handed over to be released.

    Example:
        >>> import tensorflow as tf
        >>> held = [iter(tf.data.Dataset.range(3))]
        >>> release_in_background(held); held
        []
    """
    with _RELEASE_LOCK:
        if not _RELEASE_STARTED:
            # A daemon thread still inside TensorFlow's teardown when the interpreter finalises
            # is unwound by force, and the process aborts ("FATAL: exception not rethrown"):
            # at exit, what was handed over is released first.
            atexit.register(wait_for_releases)
            threading.Thread(target=_release_forever, name=RELEASE_THREAD_NAME, daemon=True).start()
            _RELEASE_STARTED.append(True)
    _RELEASE_QUEUE.put(list(held))
    held.clear()


def _release_forever() -> None:
    """The release thread: drop each list of objects handed over, one list at a time."""
    while True:
        batch = _RELEASE_QUEUE.get()
        batch.clear()  # the objects' last references: they are destroyed here
        del batch
        _RELEASE_QUEUE.task_done()


def wait_for_releases() -> None:
    """Return once everything handed to :func:`release_in_background` so far is dropped.

    Example:
        >>> import weakref
        >>> class Box: pass
        >>> held = [Box()]; alive = weakref.ref(held[0])
        >>> release_in_background(held); wait_for_releases(); alive() is None
        True
    """
    _RELEASE_QUEUE.join()


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


def end_process(status: int) -> NoReturn:
    """End the process with ``status`` as the interpreter would, but skip TensorFlow's teardown.

    The interpreter's exit first joins the threads that are not daemons and
    runs the ``atexit`` handlers; then it finalises every module and object,
    and TensorFlow's C++ runtime tears down. That teardown takes about a
    second, and what :func:`release_in_background` was handed must be released
    first (:func:`wait_for_releases`): a ``tf.data`` iterator whose
    autotuning thread sleeps waits out its period -- seconds after a short
    run, up to a minute after a long one -- after the work is done. Here the
    threads are joined and every ``atexit`` handler but that wait runs (the
    interpreter's own order, so a user's handlers, logging's flush and
    ``concurrent.futures``' joins still run), the standard streams are flushed,
    and the process ends (``os._exit``): the iterators' memory goes with it.

    A task of a multi-worker job (:func:`in_coordinated_job`) exits the usual
    way instead: its teardown tells the job's coordination service that it
    ended, which the other tasks wait for.

    Args:
        status: The process's exit status.

    Example:
        >>> import subprocess, sys
        >>> code = ("import atexit; from tfdp._compat import end_process; "
        ...         "atexit.register(print, 'atexit ran'); print('done'); end_process(3)")
        >>> run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        >>> run.returncode, run.stdout.split()
        (3, ['done', 'atexit', 'ran'])
    """
    if in_coordinated_job():
        sys.exit(status)
    threading._shutdown()  # type: ignore[attr-defined]  # what Py_FinalizeEx does first
    atexit.unregister(wait_for_releases)
    atexit._run_exitfuncs()  # type: ignore[attr-defined]  # then the atexit handlers
    for stream in (sys.stdout, sys.stderr):
        with suppress(Exception):  # a closed pipe: nothing more can be said
            stream.flush()
    os._exit(status)


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


#: TensorFlow's switch to a BFC allocator for host memory (read once, at its first allocation).
CPU_ALLOCATOR_ENV = "TF_CPU_ALLOCATOR_USE_BFC"


def prefer_bfc_cpu_allocator(environ: MutableMapping[str, str]) -> None:
    """Ask the TensorFlow of a process not yet started (``environ``) for its BFC host allocator.

    TensorFlow's default host allocator is ``malloc``, and glibc maps every
    buffer of 32 MiB or more afresh (``mmap``) and unmaps it when freed: a
    DeiT batch of 64 224x224 float32 images (38.5 MB) faults its pages in
    anew at every step. The BFC allocator (growing as needed, up to
    ``TF_CPU_BFC_MEM_LIMIT_IN_MB``, 64 GiB by default) keeps freed memory for
    the next buffer: ``benchmarks/bench_images.py --deit-only`` measured 35
    instead of 1,900-2,600 page faults per image and about 1.5x the images/s.
    Values never change. An environment that sets the variable already
    keeps it (``TF_CPU_ALLOCATOR_USE_BFC=false``: malloc); it must be set before
    TensorFlow's first host allocation (the CLI and the launcher's workers).
    Where TensorFlow turns oneDNN on (CPUs with AVX-512), its host allocator
    keeps freed memory already, whatever the variable says.

    Example:
        >>> env = {}
        >>> prefer_bfc_cpu_allocator(env); env
        {'TF_CPU_ALLOCATOR_USE_BFC': 'true'}
        >>> env = {"TF_CPU_ALLOCATOR_USE_BFC": "false"}
        >>> prefer_bfc_cpu_allocator(env); env["TF_CPU_ALLOCATOR_USE_BFC"]
        'false'
    """
    environ.setdefault(CPU_ALLOCATOR_ENV, "true")
