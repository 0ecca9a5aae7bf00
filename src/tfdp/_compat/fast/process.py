"""Speed tricks of the process, each with its public-API fallback (see :mod:`tfdp._compat`).

Dropping iterators off the caller's thread, ending the process without TensorFlow's teardown,
and TensorFlow's BFC host allocator; each checks the switch (:mod:`.switch`) when it is used.

Example:
    >>> env = {}
    >>> prefer_bfc_cpu_allocator(env); env
    {'TF_CPU_ALLOCATOR_USE_BFC': 'true'}
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

from tfdp._compat.fast.switch import trick_on
from tfdp._compat.process import in_coordinated_job
from tfdp.errors import ConfigError

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

    Relies on no private API, but on that TensorFlow defect (an iterator's
    destructor may block) and on CPython's exit (a daemon thread inside
    TensorFlow's teardown at finalisation aborts the process: waited for at
    exit). Fallback (``release_in_background`` off, see :mod:`.switch`): the
    objects are dropped on the caller's thread, which waits as long as their
    destruction takes.

    Example:
        >>> import tensorflow as tf
        >>> held = [iter(tf.data.Dataset.range(3))]
        >>> release_in_background(held); held
        []
    """
    if not trick_on("release_in_background"):
        held.clear()  # the objects' last references: destroyed here, on this thread
        return
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

    Reaches into CPython's exit sequence (``threading._shutdown``,
    ``atexit._run_exitfuncs``, ``os._exit``). Fallback (``end_process`` off,
    see :mod:`.switch`): ``sys.exit(status)``, the interpreter's whole exit.

    Args:
        status: The process's exit status.

    Example:
        >>> import subprocess, sys
        >>> code = ("import atexit; from tfdp._compat.fast.process import end_process; "
        ...         "atexit.register(print, 'atexit ran'); print('done'); end_process(3)")
        >>> run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        >>> run.returncode, run.stdout.split()
        (3, ['done', 'atexit', 'ran'])
    """
    try:
        fast = trick_on("end_process")
    except ConfigError:  # a bad TFDP_SPEED_TRICKS, which the command has reported: the plain exit
        fast = False
    if in_coordinated_job() or not fast:
        sys.exit(status)
    threading._shutdown()  # type: ignore[attr-defined]  # what Py_FinalizeEx does first
    atexit.unregister(wait_for_releases)
    atexit._run_exitfuncs()  # type: ignore[attr-defined]  # then the atexit handlers
    for stream in (sys.stdout, sys.stderr):
        with suppress(Exception):  # a closed pipe: nothing more can be said
            stream.flush()
    os._exit(status)


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

    Reaches into an environment variable TensorFlow reads but does not
    document (``process_state.cc``). Fallback (``bfc_cpu_allocator`` off in
    ``environ``, see :mod:`.switch`): ``environ`` is left as it is
    (TensorFlow's default allocator).

    Example:
        >>> env = {}
        >>> prefer_bfc_cpu_allocator(env); env
        {'TF_CPU_ALLOCATOR_USE_BFC': 'true'}
        >>> env = {"TF_CPU_ALLOCATOR_USE_BFC": "false"}
        >>> prefer_bfc_cpu_allocator(env); env["TF_CPU_ALLOCATOR_USE_BFC"]
        'false'
        >>> env = {"TFDP_SPEED_TRICKS": "0"}  # the trick off: TensorFlow's own allocator
        >>> prefer_bfc_cpu_allocator(env); env
        {'TFDP_SPEED_TRICKS': '0'}
    """
    if trick_on("bfc_cpu_allocator", environ):
        environ.setdefault(CPU_ALLOCATOR_ENV, "true")
