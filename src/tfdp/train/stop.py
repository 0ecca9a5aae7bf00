"""Stopping a run at one step on every worker: :class:`StopAgreement`.

This module owns how the training loop decides to stop early. A stop is asked
for by :meth:`StopAgreement.request` (a signal handler, any thread) or by a
Keras callback setting ``model.stop_training``. One process decides alone; the
workers of a multi-worker job all-reduce their two flags (one collective of
two scalars per compiled call), so a SIGTERM to one worker, or one worker's
callback, stops the whole group at the same step, where every worker joins the
checkpoint save; a peer's callback stop sets ``model.stop_training`` here too.

Example:
    >>> import keras, tensorflow as tf
    >>> model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    >>> stop = StopAgreement(tf.distribute.get_strategy(), num_workers=1)
    >>> model.stop_training = False  # as fit starts
    >>> stop.agreed(model)
    (False, None)
    >>> model.stop_training = True
    >>> stop.agreed(model)
    (True, 'callback')
    >>> stop.request(); stop.agreed(model)
    (True, None)
"""

from __future__ import annotations

import threading
from typing import Any

import tensorflow as tf


class StopAgreement:
    """Whether to stop now, agreed by every worker at the same step.

    Args:
        strategy: The strategy whose replicas (and workers) agree.
        num_workers: Workers in the job; with one, no collective runs.

    Example:
        See the module docstring.
    """

    def __init__(self, strategy: tf.distribute.Strategy, num_workers: int) -> None:
        self.strategy = strategy
        self.num_workers = num_workers
        self._requested = threading.Event()
        self._agree_fn: Any = None

    def request(self) -> None:
        """Ask for a stop at the next agreement (thread-safe: a signal handler may call it)."""
        self._requested.set()

    def clear(self) -> None:
        """Forget a request (a new ``fit`` starts)."""
        self._requested.clear()

    def agreed(self, model: Any) -> tuple[bool, str | None]:
        """``(stop, reason)``: whether any worker asked to stop, and why, if it was not asked here.

        ``reason`` is ``"peer"`` when another worker's request stops this one,
        ``"callback"`` when a callback's ``model.stop_training`` (here or on a
        peer) does and nobody requested a stop, else None (a request made here:
        its caller knows why). On every worker of a multi-worker job this is a
        collective: all of them must call it at the same step.
        """
        requested = self._requested.is_set()
        by_callback = bool(model.stop_training)
        reason = None
        if self.num_workers > 1:
            flags = self._agree(tf.constant([float(requested), float(by_callback)])).numpy() > 0
            if flags[0] and not requested:
                self._requested.set()
                reason = "peer"
            if flags[1] and not by_callback:
                model.stop_training = True
            requested, by_callback = bool(flags[0]), bool(flags[1])
        if by_callback and not requested:
            reason = "callback"
        return requested or by_callback, reason

    def _agree(self, local: tf.Tensor) -> tf.Tensor:
        """``local`` flags summed over the workers (every replica holds the same)."""
        if self._agree_fn is None:
            strategy = self.strategy

            @tf.function(autograph=False)
            def agree(flags: tf.Tensor) -> tf.Tensor:
                per_replica = strategy.run(tf.identity, args=(flags,))
                return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

            self._agree_fn = agree
        return self._agree_fn(local)
