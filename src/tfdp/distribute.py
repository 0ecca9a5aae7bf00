"""Strategy choice and strategy facts: TF_CONFIG, Slurm, logical CPUs; who this process is.

This module owns picking and building the strategy (:func:`make_strategy`,
with TF_CONFIG validated by :func:`parse_tf_config`) and the questions every
other part asks of a ``tf.distribute`` strategy -- how many workers, which
one is this, is it the chief, how many replicas per worker -- answered the
same way for MirroredStrategy, MultiWorkerMirroredStrategy, OneDeviceStrategy
and the default strategy.

Example:
    >>> import tensorflow as tf
    >>> info = worker_info(tf.distribute.get_strategy())
    >>> info.is_chief, info.num_workers, info.num_replicas
    (True, 1, 1)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import tensorflow as tf

__all__ = [
    "STRATEGY_KINDS",
    "WorkerInfo",
    "make_strategy",
    "parse_tf_config",
    "resolver_role",
    "worker_info",
]


@dataclass(frozen=True)
class WorkerInfo:
    """Where this process sits in a synchronous data-parallel job.

    Attributes:
        num_replicas: Replicas in sync over all workers (the world size).
        num_workers: Processes (workers) in the job.
        worker_index: This worker's index in ``[0, num_workers)``.
        replicas_per_worker: Local replicas of every worker.
        task_type: The TF_CONFIG task type (``"worker"``, ``"chief"``) or None.
        is_chief: True for the one process that writes logs and checkpoints.

    Example:
        >>> WorkerInfo(4, 2, 1, 2, "worker", False).first_rank
        2
    """

    num_replicas: int
    num_workers: int
    worker_index: int
    replicas_per_worker: int
    task_type: str | None
    is_chief: bool

    @property
    def first_rank(self) -> int:
        """Global rank of this worker's first local replica."""
        return self.worker_index * self.replicas_per_worker


def worker_info(strategy: Any = None) -> WorkerInfo:
    """Describe this process's place in ``strategy``'s job (default: the current strategy).

    The chief is the task of type ``"chief"``, or worker 0 when the cluster
    has no chief; single-process strategies are always chief.

    Example:
        >>> import tensorflow as tf
        >>> worker_info(tf.distribute.OneDeviceStrategy("/cpu:0")).replicas_per_worker
        1
    """
    strategy = strategy if strategy is not None else tf.distribute.get_strategy()
    replicas = int(strategy.num_replicas_in_sync)
    resolver = getattr(strategy, "cluster_resolver", None)
    is_chief, task_type, task_id = resolver_role(resolver)
    if resolver is None or task_type is None:
        return WorkerInfo(replicas, 1, 0, replicas, None, True)
    spec = resolver.cluster_spec().as_dict()
    workers = max(1, len(spec.get("worker", [])) + len(spec.get("chief", [])))
    index = int(task_id or 0)
    if task_type == "worker" and "chief" in spec:
        index += len(spec["chief"])
    return WorkerInfo(replicas, workers, index, max(1, replicas // workers), task_type, is_chief)


def resolver_role(resolver: Any) -> tuple[bool, str | None, int | None]:
    """``(is_chief, task_type, task_id)`` from a cluster resolver (``None``: a single process).

    The chief is the ``"chief"`` task, or ``"worker"`` 0 when the cluster has
    no chief -- TensorFlow's rule (``multi_worker_util.is_chief``). The one
    place tfdp decides who writes logs and checkpoints.

    Example:
        >>> resolver_role(None)
        (True, None, None)
    """
    if resolver is None:
        return True, None, None
    task_type = getattr(resolver, "task_type", None)
    task_id = getattr(resolver, "task_id", None)
    if task_type is None:
        return True, None, task_id
    task_id = int(task_id or 0)
    if task_type == "chief":
        return True, task_type, task_id
    try:
        jobs = resolver.cluster_spec().as_dict()
    except (AttributeError, ValueError):
        jobs = {}
    return (task_type == "worker" and task_id == 0 and "chief" not in jobs), task_type, task_id


# -- TF_CONFIG -------------------------------------------------------------------------------------


def parse_tf_config(text: str | None = None) -> dict[str, Any] | None:
    """Parse and validate TF_CONFIG (default: the environment's); None when unset or empty.

    Checks what MultiWorkerMirroredStrategy would otherwise fail on obscurely
    or hang on: malformed JSON, a missing ``cluster`` or ``task``, a task type
    not in the cluster, an index out of range, malformed or duplicate
    addresses.

    Raises:
        ValueError: naming the TF_CONFIG field at fault and what would be valid.

    Example:
        >>> cfg = parse_tf_config('{"cluster": {"worker": ["127.0.0.1:2222", "127.0.0.1:2223"]},'
        ...                       ' "task": {"type": "worker", "index": 1}}')
        >>> cfg["task"]["index"]
        1
    """
    import json
    import os

    if text is None:
        text = os.environ.get("TF_CONFIG", "")
    if not text.strip():
        return None
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"TF_CONFIG is not valid JSON ({exc.msg} at position {exc.pos})") from None
    if not isinstance(cfg, dict):
        raise ValueError("TF_CONFIG must be a JSON object with 'cluster' and 'task'")
    cluster = cfg.get("cluster")
    if not isinstance(cluster, dict) or not cluster:
        raise ValueError(
            "TF_CONFIG['cluster'] is missing or empty: it must map task types to address "
            'lists, e.g. {"worker": ["host0:2222", "host1:2222"]}'
        )
    seen: dict[str, str] = {}
    for task_type, addresses in cluster.items():
        if not isinstance(addresses, list) or not addresses:
            raise ValueError(
                f"TF_CONFIG['cluster'][{task_type!r}] must be a non-empty list of 'host:port'"
            )
        for i, addr in enumerate(addresses):
            where = f"TF_CONFIG['cluster'][{task_type!r}][{i}]"
            if not isinstance(addr, str) or ":" not in addr:
                raise ValueError(f"{where} must be 'host:port', got {addr!r}")
            port = addr.rsplit(":", 1)[1]
            if not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"{where} has an invalid port in {addr!r} (1..65535)")
            if addr in seen:
                raise ValueError(f"{where} duplicates {seen[addr]}: address {addr!r} used twice")
            seen[addr] = where
    task = cfg.get("task")
    if not isinstance(task, dict):
        raise ValueError(
            "TF_CONFIG['task'] is missing: it must say which task this process is, "
            'e.g. {"type": "worker", "index": 0}'
        )
    task_type = task.get("type")
    if task_type not in cluster:
        raise ValueError(
            f"TF_CONFIG['task']['type'] is {task_type!r}, not a task type of the cluster "
            f"({', '.join(sorted(cluster))})"
        )
    index = task.get("index")
    if isinstance(index, bool) or not isinstance(index, int):
        raise ValueError(f"TF_CONFIG['task']['index'] must be an integer, got {index!r}")
    if not 0 <= index < len(cluster[task_type]):
        raise ValueError(
            f"TF_CONFIG['task']['index'] is {index}, out of range for the "
            f"{len(cluster[task_type])} {task_type!r} task(s) "
            f"(valid: 0..{len(cluster[task_type]) - 1})"
        )
    return cfg


# -- strategy selection ---------------------------------------------------------------------------


STRATEGY_KINDS = ("auto", "mirrored", "multi_worker", "one_device", "cpu", "tpu")

_WATCHDOG = r"""
import json, os, select, signal, socket, sys
pid, timeout, peers = int(sys.argv[1]), float(sys.argv[2]), json.loads(sys.argv[3])
ready, _, _ = select.select([sys.stdin], [], [], timeout)
if ready:  # the parent said "connected" (or exited): nothing to do
    sys.exit(0)
def reachable(address):
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=2):
            return True
    except OSError:
        return False
bad = [a for a in peers if not reachable(a)]
detail = ("unreachable peer(s): " + ", ".join(bad)) if bad else (
    "every peer address accepts connections, but not all workers joined")
sys.stderr.write(
    f"tfdp: error: the workers did not all connect within {timeout:g}s ({detail}). Check "
    "TF_CONFIG's addresses and ports, that every worker was started (each with its own task "
    "index), and the firewall; raise TFDP_STARTUP_TIMEOUT for slow starts.\n")
sys.stderr.flush()
os.kill(pid, signal.SIGKILL)
"""


def _startup_watchdog(timeout: float | None) -> Any:
    """Guard start-up with a separate process that ends this one if peers never connect.

    TensorFlow waits for missing peers inside a C++ call that holds the GIL
    and ignores SIGTERM, so no thread or signal handler of this process can
    act: a small watchdog process does, printing which peer addresses are
    unreachable before it kills this process. Returns an object whose
    ``set()`` stands the watchdog down.
    """
    import json
    import os
    import subprocess
    import sys

    if timeout is None:
        timeout = float(os.environ.get("TFDP_STARTUP_TIMEOUT", "300"))
    cfg = parse_tf_config()
    peers: list[str] = []
    if cfg is not None:
        me = cfg["cluster"][cfg["task"]["type"]][cfg["task"]["index"]]
        peers = [a for addrs in cfg["cluster"].values() for a in addrs if a != me]
    proc = subprocess.Popen(
        [sys.executable, "-c", _WATCHDOG, str(os.getpid()), str(timeout), json.dumps(peers)],
        stdin=subprocess.PIPE,
    )

    class _Done:
        def set(self) -> None:
            assert proc.stdin is not None
            proc.stdin.close()  # select() in the watchdog returns: it exits quietly
            proc.wait()

    return _Done()


def _server_failure() -> str:
    """Why this worker's gRPC server could not start, naming its TF_CONFIG address."""
    import errno
    import socket

    cfg = parse_tf_config()
    if cfg is None:
        return "could not start this worker's gRPC server (the cluster came from Slurm)"
    task = cfg["task"]
    address = cfg["cluster"][task["type"]][task["index"]]
    host, _, port = address.rpartition(":")
    cause = "the address cannot be bound here"
    try:
        with socket.socket(socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET) as s:
            s.bind((host.strip("[]"), int(port)))
    except OSError as err:
        if err.errno == errno.EADDRINUSE:
            cause = (
                f"port {port} is already in use: another process holds it -- another worker "
                f"started with the same TF_CONFIG task ({task['type']} {task['index']})?"
            )
        else:
            cause = f"{address} cannot be bound on this machine ({err.strerror})"
    else:
        cause = "the address could be bound a moment later (a port race?)"
    return (
        f"could not start the gRPC server of TF_CONFIG task {task['type']} {task['index']} at "
        f"{address}: {cause}. Every worker needs its own task index and a free port on its own "
        "host"
    )


def _configure_logical_cpus(n: int) -> list[str]:
    cpus = tf.config.list_physical_devices("CPU")
    current = tf.config.get_logical_device_configuration(cpus[0])
    if current and len(current) == n:
        return [f"/cpu:{i}" for i in range(n)]
    try:
        tf.config.set_logical_device_configuration(
            cpus[0], [tf.config.LogicalDeviceConfiguration()] * n
        )
    except RuntimeError:
        have = len(tf.config.list_logical_devices("CPU"))
        raise ValueError(
            f"cpu_replicas={n} needs {n} logical CPU devices, but TensorFlow is already "
            f"initialised with {have}: call tfdp.make_strategy(cpu_replicas={n}) before any "
            "other TensorFlow work (creating tensors, models or datasets)"
        ) from None
    return [f"/cpu:{i}" for i in range(n)]


def _slurm_options() -> dict[str, Any]:
    """SlurmClusterResolver's options: the port base, and CPU nodes (no nvidia-smi) handled.

    The resolver counts GPUs with ``nvidia-smi`` unless ``CUDA_VISIBLE_DEVICES``
    is set (a CPU node without it fails), and gives a node only as many tasks
    as it has GPU slots. On a CPU node: one nominal slot per task of the step,
    and ``CUDA_VISIBLE_DEVICES`` left alone. ``TFDP_SLURM_PORT_BASE`` (default
    8888, the resolver's) is the port of a node's first task.
    """
    import os
    import shutil

    options: dict[str, Any] = {
        "port_base": int(os.environ.get("TFDP_SLURM_PORT_BASE", "8888") or 8888)
    }
    if "CUDA_VISIBLE_DEVICES" not in os.environ and shutil.which("nvidia-smi") is None:
        tasks = os.environ.get("SLURM_STEP_NUM_TASKS") or os.environ.get("SLURM_NTASKS") or "1"
        options.update(gpus_per_node=int(tasks), gpus_per_task=1, auto_set_gpu=False)
    return options


def make_strategy(
    kind: str = "auto",
    *,
    cpu_replicas: int | None = None,
    collective_timeout: float | None = None,
    startup_timeout: float | None = None,
    communication: str = "auto",
    tpu: str | None = None,
) -> tf.distribute.Strategy:
    """Pick and build the strategy for this process, the way clusters configure TensorFlow.

    ``kind="auto"``: TF_CONFIG set -> MultiWorkerMirroredStrategy (validated
    first, see :func:`parse_tf_config`); a Slurm job step with several tasks ->
    MultiWorkerMirroredStrategy over ``SlurmClusterResolver``; several GPUs ->
    MirroredStrategy; one GPU -> OneDeviceStrategy on it; otherwise
    ``cpu_replicas`` logical CPU devices under MirroredStrategy when given, else
    OneDeviceStrategy on the CPU. Explicit kinds: ``"mirrored"``,
    ``"multi_worker"``, ``"one_device"``, ``"cpu"`` (MirroredStrategy over
    ``cpu_replicas`` logical CPUs, for tests and demos) and ``"tpu"``
    (``TPUClusterResolver(tpu)``; follows the documented API, untested here).

    Args:
        kind: One of ``STRATEGY_KINDS``.
        cpu_replicas: Logical CPU replicas (must be set before TF initialises).
        collective_timeout: Seconds after which one collective op fails
            (multi-worker). Default None: TensorFlow's coordination service
            already fails the job when a peer stops sending heartbeats (a dead
            worker is reported as "unhealthy"), and in TF 2.21 a per-op timeout
            starts one sleeping thread per collective, which exhausted the
            thread limit of a fast-stepping job (see docs/benchmarks.md).
        startup_timeout: Seconds the workers have to find each other
            (default: ``$TFDP_STARTUP_TIMEOUT`` or 300). TensorFlow waits for
            missing peers forever, in C++, deaf to signals; past this time a
            watchdog process prints which peer addresses are unreachable and
            ends this process (SIGKILL).
        communication: ``"auto"``, ``"ring"`` or ``"nccl"`` (multi-worker).
        tpu: TPU name or address for ``kind="tpu"``.

    Raises:
        ValueError: for an unknown kind, a bad TF_CONFIG, or logical CPUs
            requested after TensorFlow initialised.

    Example:
        >>> make_strategy("one_device").num_replicas_in_sync
        1
    """
    import os

    if kind not in STRATEGY_KINDS:
        raise ValueError(f"strategy kind must be one of {', '.join(STRATEGY_KINDS)}, got {kind!r}")
    if cpu_replicas is not None and (isinstance(cpu_replicas, bool) or cpu_replicas < 1):
        raise ValueError(f"cpu_replicas must be an integer >= 1, got {cpu_replicas!r}")
    if kind == "auto":
        slurm = int(os.environ.get("SLURM_NTASKS", "1") or 1) > 1 and "SLURM_JOB_ID" in os.environ
        if parse_tf_config() is not None or slurm:
            kind = "multi_worker"
        elif len(tf.config.list_physical_devices("GPU")) > 1:
            kind = "mirrored"
        elif cpu_replicas and not tf.config.list_physical_devices("GPU"):
            kind = "cpu"
        else:
            kind = "one_device"
    if kind == "multi_worker":
        impl = {
            "auto": tf.distribute.experimental.CommunicationImplementation.AUTO,
            "ring": tf.distribute.experimental.CommunicationImplementation.RING,
            "nccl": tf.distribute.experimental.CommunicationImplementation.NCCL,
        }.get(communication)
        if impl is None:
            raise ValueError(
                f"communication must be 'auto', 'ring' or 'nccl', got {communication!r}"
            )
        options = tf.distribute.experimental.CommunicationOptions(
            implementation=impl, timeout_seconds=collective_timeout
        )
        resolver = None
        if parse_tf_config() is None:
            if "SLURM_JOB_ID" not in os.environ:
                raise ValueError(
                    "strategy 'multi_worker' needs TF_CONFIG (set by tfdp launch, Kubeflow's "
                    "TFJob or Ray) or a Slurm job step"
                )
            resolver = tf.distribute.cluster_resolver.SlurmClusterResolver(**_slurm_options())
        done = _startup_watchdog(startup_timeout)
        try:
            strategy = tf.distribute.MultiWorkerMirroredStrategy(
                cluster_resolver=resolver, communication_options=options
            )
        except tf.errors.UnknownError as exc:
            done.set()
            if "Could not start gRPC server" not in str(exc):
                raise
            raise ValueError(_server_failure()) from None
        # A first collective: returns only once every worker is up and connected.
        strategy.reduce("SUM", strategy.run(lambda: tf.constant(1.0)), axis=None)
        done.set()
        return strategy
    if kind == "tpu":
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    if kind == "cpu":
        return tf.distribute.MirroredStrategy(_configure_logical_cpus(cpu_replicas or 2))
    gpus = tf.config.list_physical_devices("GPU")
    if kind == "mirrored":
        if gpus:
            return tf.distribute.MirroredStrategy()
        return tf.distribute.MirroredStrategy(_configure_logical_cpus(cpu_replicas or 1))
    return tf.distribute.OneDeviceStrategy("/gpu:0" if gpus else "/cpu:0")
