"""Private TensorFlow reaches in graphs and threads, for correctness (see :mod:`tfdp._compat`).

Whether a strategy all-reduces without a merge call, and a thread outside a strategy's scope.

Example:
    >>> call_outside_strategy(lambda: 6 * 7)
    42
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def supports_no_merge_call() -> bool:
    """Whether the current strategy can all-reduce in a replica context without a merge call.

    Example:
        >>> supports_no_merge_call() in (True, False)
        True
    """
    import tensorflow as tf

    return bool(tf.__internal__.distribute.strategy_supports_no_merge_call())


def call_outside_strategy(fn: Callable[[], T]) -> T:
    """Call ``fn()`` in a fresh thread: no ``strategy.scope()``, device or variable creator.

    A strategy scope (and its variable creator) is thread-local in TensorFlow,
    and there is no public way to leave one temporarily; variables created in
    a fresh thread are plain ``ResourceVariable`` objects on the host. An
    exception of ``fn`` is re-raised in the caller's thread.

    Example:
        >>> call_outside_strategy(lambda: 6 * 7)
        42
    """
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["value"] = fn()
        except BaseException as e:  # re-raised in the caller's thread
            result["error"] = e

    thread = threading.Thread(target=run, name="tfdp-outside-strategy")
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    return result["value"]
