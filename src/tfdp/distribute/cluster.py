"""Who this process is under a ``tf.distribute`` strategy: workers, chief, replicas per worker.

This module owns the questions every other part asks of a strategy -- how
many workers, which one is this, is it the chief, how many replicas per
worker -- answered the same way for MirroredStrategy,
MultiWorkerMirroredStrategy, OneDeviceStrategy and the default strategy.

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
