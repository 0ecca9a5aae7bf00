"""TF_CONFIG, validated: the cluster and this process's task, each field checked.

Pure Python (no TensorFlow): the launcher and the start-up watchdog use it too.
"""

from __future__ import annotations

import json
import os
from typing import Any

from tfdp.errors import ConfigError


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
    if text is None:
        text = os.environ.get("TF_CONFIG", "")
    if not text.strip():
        return None
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"TF_CONFIG is not valid JSON ({exc.msg} at position {exc.pos})"
        ) from None
    if not isinstance(cfg, dict):
        raise ConfigError("TF_CONFIG must be a JSON object with 'cluster' and 'task'")
    cluster = cfg.get("cluster")
    if not isinstance(cluster, dict) or not cluster:
        raise ConfigError(
            "TF_CONFIG['cluster'] is missing or empty: it must map task types to address "
            'lists, e.g. {"worker": ["host0:2222", "host1:2222"]}'
        )
    seen: dict[str, str] = {}
    for task_type, addresses in cluster.items():
        if not isinstance(addresses, list) or not addresses:
            raise ConfigError(
                f"TF_CONFIG['cluster'][{task_type!r}] must be a non-empty list of 'host:port'"
            )
        for i, addr in enumerate(addresses):
            where = f"TF_CONFIG['cluster'][{task_type!r}][{i}]"
            if not isinstance(addr, str) or ":" not in addr:
                raise ConfigError(f"{where} must be 'host:port', got {addr!r}")
            port = addr.rsplit(":", 1)[1]
            if not port.isdigit() or not 0 < int(port) < 65536:
                raise ConfigError(f"{where} has an invalid port in {addr!r} (1..65535)")
            if addr in seen:
                raise ConfigError(f"{where} duplicates {seen[addr]}: address {addr!r} used twice")
            seen[addr] = where
    task = cfg.get("task")
    if not isinstance(task, dict):
        raise ConfigError(
            "TF_CONFIG['task'] is missing: it must say which task this process is, "
            'e.g. {"type": "worker", "index": 0}'
        )
    task_type = task.get("type")
    if task_type not in cluster:
        raise ConfigError(
            f"TF_CONFIG['task']['type'] is {task_type!r}, not a task type of the cluster "
            f"({', '.join(sorted(cluster))})"
        )
    index = task.get("index")
    if isinstance(index, bool) or not isinstance(index, int):
        raise ConfigError(f"TF_CONFIG['task']['index'] must be an integer, got {index!r}")
    if not 0 <= index < len(cluster[task_type]):
        raise ConfigError(
            f"TF_CONFIG['task']['index'] is {index}, out of range for the "
            f"{len(cluster[task_type])} {task_type!r} task(s) "
            f"(valid: 0..{len(cluster[task_type]) - 1})"
        )
    return cfg
