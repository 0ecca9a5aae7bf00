"""Test session set-up: 4 logical CPU devices before TensorFlow initialises.

MirroredStrategy over these gives 4 real replicas on a CPU-only machine.
TensorFlow is configured in ``pytest_configure``, before any test module can
initialise it (the pure-NumPy modules check their TF-freedom in subprocesses).
"""

from __future__ import annotations

import gc
import os
import socket
import sys
import threading
from pathlib import Path

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
NUM_LOGICAL_CPUS = 4
# Worker scripts run as separate processes; they are not test modules.
collect_ignore = ["workers", "mw.py"]
TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))


def configure_tf() -> None:
    """Split the CPU into NUM_LOGICAL_CPUS logical devices (idempotent)."""
    import tensorflow as tf

    cpus = tf.config.list_physical_devices("CPU")  # does not initialise the runtime
    if tf.config.get_logical_device_configuration(cpus[0]):
        return
    # list_logical_devices() would initialise the runtime: configure first, check after.
    tf.config.set_logical_device_configuration(
        cpus[0], [tf.config.LogicalDeviceConfiguration()] * NUM_LOGICAL_CPUS
    )


def collect_garbage_off_the_test_thread(period: float = 0.1) -> threading.Thread:
    """Run Python's garbage collection on a daemon thread instead of the tests' thread.

    Destroying a tf.data iterator can wait up to a minute in TensorFlow 2.21 (see
    ``tfdp._compat.fast.process.release_in_background``). Iterators a test leaves in reference
    cycles (Keras and tf.distribute objects hold many) are destroyed by the garbage collector
    whenever it runs: on the tests' thread, an unrelated later test sat idle for minutes. Here the
    young generation is collected every ``period`` seconds, the middle one every 10 periods, all
    every 300 (Python's automatic collection, disabled, does about as much).
    """

    def run() -> None:
        n = 0
        while not _STOP_COLLECTING.wait(period):
            n += 1
            gc.collect(2 if n % 300 == 0 else 1 if n % 10 == 0 else 0)

    gc.disable()
    thread = threading.Thread(target=run, name="tests-garbage-collector", daemon=True)
    thread.start()
    return thread


_STOP_COLLECTING = threading.Event()
_COLLECTOR: list[threading.Thread] = []


def pytest_configure(config: pytest.Config) -> None:
    configure_tf()
    _COLLECTOR.append(collect_garbage_off_the_test_thread())


def pytest_unconfigure(config: pytest.Config) -> None:
    # Not left inside TensorFlow's teardown when the interpreter finalises (the process would
    # abort: a daemon thread is unwound by force there).
    _STOP_COLLECTING.set()
    for thread in _COLLECTOR:
        thread.join()
    gc.enable()


@pytest.fixture(scope="session")
def mirrored4():
    """A real MirroredStrategy over 4 logical CPU devices."""
    configure_tf()
    import tensorflow as tf

    assert len(tf.config.list_logical_devices("CPU")) == NUM_LOGICAL_CPUS
    from tfdp.distribute import make_strategy

    # make_strategy's: the CLI run in this process (tfdp.cli.main) shares it, and its keys
    strategy = make_strategy("cpu", cpu_replicas=NUM_LOGICAL_CPUS)
    assert strategy.num_replicas_in_sync == NUM_LOGICAL_CPUS
    return strategy


@pytest.fixture(scope="session")
def mirrored_of(mirrored4):
    """``k -> MirroredStrategy`` over the first k logical CPU devices (one per k per session).

    k = 4 is ``mirrored4`` (collective all-reduce). The others reduce through one device:
    collective group keys are per process and start at 1 in every strategy, so a second
    collective MirroredStrategy of another size in the same process joins group 1 with the
    wrong size, which aborts every collective of the process.
    """
    import tensorflow as tf

    cache: dict[int, tf.distribute.Strategy] = {NUM_LOGICAL_CPUS: mirrored4}

    def get(k: int) -> tf.distribute.Strategy:
        if k not in cache:
            cache[k] = tf.distribute.MirroredStrategy(
                [f"/cpu:{i}" for i in range(k)],
                cross_device_ops=tf.distribute.ReductionToOneDevice(),
            )
        return cache[k]

    return get


def free_ports(n: int) -> list[int]:
    """n distinct free TCP ports on 127.0.0.1."""
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


@pytest.fixture(autouse=True)
def _no_strategy_scope_left_entered(request):
    """A test that leaves a strategy's scope entered breaks every later test of its process
    ("Mixing different tf.distribute.Strategy objects"): name it here, where it happens."""
    yield
    tf = sys.modules.get("tensorflow")
    if tf is not None and tf.distribute.has_strategy():
        strategy = tf.distribute.get_strategy()
        pytest.fail(f"{request.node.nodeid} left {strategy!r}'s scope entered", pytrace=False)
