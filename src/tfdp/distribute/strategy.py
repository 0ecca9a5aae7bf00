"""Picking and building the strategy: TF_CONFIG, Slurm, logical CPUs, TPUs (:func:`make_strategy`).

This module owns strategy selection and the multi-worker start-up: the
TF_CONFIG check (:mod:`tfdp.distribute.tf_config`), the start-up watchdog
(:mod:`tfdp.distribute.watchdog`) and the first collective that proves every
worker joined.

Example:
    >>> STRATEGY_KINDS[:3]
    ('auto', 'mirrored', 'multi_worker')
"""

from __future__ import annotations

import os
import shutil
from typing import Any

import tensorflow as tf

from tfdp._compat.process import configure_heartbeat
from tfdp.distribute.tf_config import parse_tf_config
from tfdp.distribute.watchdog import start as start_watchdog
from tfdp.errors import ConfigError

STRATEGY_KINDS = ("auto", "mirrored", "multi_worker", "one_device", "cpu", "tpu")

#: Multi-worker all-reduces group the gradients into packs of at least this many bytes, each
#: its own collective. TensorFlow's default (0) concatenates every gradient into one tensor,
#: and its gRPC ring is slower than linear in the tensor's size: on two simulated machines a
#: 100 MB gradient list of 32 tensors all-reduced in 0.30 s in 4 MB packs against 1.44 s in
#: one (docs/benchmarks.md, "All-reduce between machines"). Packing changes no sum's terms
#: (with three or more workers, the ring may add them in another order).
DEFAULT_BYTES_PER_PACK = 4 * 2**20


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
        if not current and have == n:  # initialised as it would be: one device per CPU
            return [f"/cpu:{i}" for i in range(n)]
        raise ConfigError(
            f"{n} needs {n} logical CPU devices, but TensorFlow is already "
            f"initialised with {have}: call tfdp.make_strategy(cpu_replicas={n}) before any "
            "other TensorFlow work (creating tensors, models or datasets)",
            argument="cpu_replicas",
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
    options: dict[str, Any] = {
        "port_base": int(os.environ.get("TFDP_SLURM_PORT_BASE", "8888") or 8888)
    }
    if "CUDA_VISIBLE_DEVICES" not in os.environ and shutil.which("nvidia-smi") is None:
        tasks = os.environ.get("SLURM_STEP_NUM_TASKS") or os.environ.get("SLURM_NTASKS") or "1"
        options.update(gpus_per_node=int(tasks), gpus_per_task=1, auto_set_gpu=False)
    return options


def _heartbeat_timeout(seconds: float | None) -> float | None:
    """``seconds``, else ``$TFDP_HEARTBEAT_TIMEOUT``, else None (TensorFlow's default), checked."""
    given = seconds
    if given is None:
        given = os.environ.get("TFDP_HEARTBEAT_TIMEOUT") or None
    if given is None:
        return None
    try:
        value = float(given)
    except (TypeError, ValueError):
        value = float("nan")
    if not 0 < value < float("inf"):
        valid = f"must be a number of seconds > 0, got {given!r}"
        if seconds is not None:
            raise ConfigError(valid, argument="heartbeat_timeout")
        raise ConfigError(f"TFDP_HEARTBEAT_TIMEOUT {valid}")
    return value


#: One MirroredStrategy per device set and process (see :func:`_local_mirrored`).
_LOCAL: dict[tuple[str, ...] | None, tf.distribute.Strategy] = {}


def _local_mirrored(devices: list[str] | None) -> tf.distribute.Strategy:
    """The process's MirroredStrategy over ``devices`` (``None``: every GPU), made once.

    Collective group and instance keys start at the same values in every
    strategy object of a process, so the collectives of a second strategy over
    the same devices (a second training in a notebook, a test after another)
    meet the first's at the same keys with other shapes, and TensorFlow aborts
    every collective of the process. One strategy per device set keeps the
    keys increasing.
    """
    key = tuple(devices) if devices is not None else None
    if key not in _LOCAL:
        _LOCAL[key] = tf.distribute.MirroredStrategy(devices)
    return _LOCAL[key]


def make_strategy(
    kind: str = "auto",
    *,
    cpu_replicas: int | None = None,
    collective_timeout: float | None = None,
    startup_timeout: float | None = None,
    communication: str = "auto",
    bytes_per_pack: int | None = None,
    heartbeat_timeout: float | None = None,
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
        bytes_per_pack: Multi-worker all-reduces of several tensors (the
            gradients) go in packs of at least this many bytes, one collective
            each (default :data:`DEFAULT_BYTES_PER_PACK`, 4 MiB; 0 is
            TensorFlow's own default, one pack). Each value is summed from
            the same terms either way (with three or more workers, the ring
            may add them in another order).
        heartbeat_timeout: Seconds without a heartbeat after which TensorFlow's
            coordination service declares a worker lost and aborts the job's
            collectives (multi-worker; default: ``$TFDP_HEARTBEAT_TIMEOUT``,
            else TensorFlow's 10 s). A lost peer then ends training with
            :class:`tfdp.train.PeerLostError` a few seconds later. Raise it
            when heavy traffic on loaded machines delays heartbeats (a false
            loss); lower it to be told sooner.
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
        raise ConfigError(
            f"must be one of {', '.join(STRATEGY_KINDS)}, got {kind!r}", argument="kind"
        )
    if cpu_replicas is not None and (isinstance(cpu_replicas, bool) or cpu_replicas < 1):
        raise ConfigError(f"must be an integer >= 1, got {cpu_replicas!r}", argument="cpu_replicas")
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
            raise ConfigError(
                f"must be 'auto', 'ring' or 'nccl', got {communication!r}", argument="communication"
            )
        pack = DEFAULT_BYTES_PER_PACK if bytes_per_pack is None else bytes_per_pack
        if isinstance(pack, bool) or not isinstance(pack, int) or pack < 0:
            raise ConfigError(
                f"must be an integer >= 0 (0: one pack), got {bytes_per_pack!r}",
                argument="bytes_per_pack",
            )
        options = tf.distribute.experimental.CommunicationOptions(
            implementation=impl, timeout_seconds=collective_timeout, bytes_per_pack=pack
        )
        timeout = _heartbeat_timeout(heartbeat_timeout)
        resolver = None
        if parse_tf_config() is None:
            if "SLURM_JOB_ID" not in os.environ:
                raise ConfigError(
                    "strategy 'multi_worker' needs TF_CONFIG (set by tfdp launch, Kubeflow's "
                    "TFJob or Ray) or a Slurm job step"
                )
            resolver = tf.distribute.cluster_resolver.SlurmClusterResolver(**_slurm_options())
        if timeout is not None:
            if resolver is None:
                cfg = parse_tf_config()
                assert cfg is not None
                cluster, task_type = cfg["cluster"], cfg["task"]["type"]
            else:
                cluster, task_type = resolver.cluster_spec().as_dict(), resolver.task_type
            configure_heartbeat(cluster, task_type, timeout)
        done = start_watchdog(startup_timeout)
        try:
            strategy = tf.distribute.MultiWorkerMirroredStrategy(
                cluster_resolver=resolver, communication_options=options
            )
        except tf.errors.UnknownError as exc:
            done.set()
            if "Could not start gRPC server" not in str(exc):
                raise
            raise ConfigError(_server_failure()) from None
        # A first collective: returns only once every worker is up and connected. In a
        # tf.function, as TensorFlow asks (run eagerly, it warns of "significant overhead").
        tf.function(
            lambda: strategy.reduce("SUM", strategy.run(lambda: tf.constant(1.0)), axis=None),
            autograph=False,
        )()
        done.set()
        return strategy
    if kind == "tpu":
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    if kind == "cpu":
        return _local_mirrored(_configure_logical_cpus(cpu_replicas or 2))
    gpus = tf.config.list_physical_devices("GPU")
    if kind == "mirrored":
        if gpus:
            return _local_mirrored(None)
        return _local_mirrored(_configure_logical_cpus(cpu_replicas or 1))
    return tf.distribute.OneDeviceStrategy("/gpu:0" if gpus else "/cpu:0")
