"""Stochastic depth (timm's ``DropPath``), its draws a pure function of the run's position.

keras-hub's ViT blocks have no drop path; this module owns the one layer
tfdp adds for it, :class:`DropPath`, and :func:`row_uniforms`, its draws.
In training, each row (sample) of a residual branch's output is kept with
probability ``1 - rate`` and then scaled by ``1 / (1 - rate)``, or zeroed --
timm's ``drop_path(x, rate, training, scale_by_keep=True)``; at inference the
layer is the identity.

A row's draw is the counter hash's uniform (:mod:`tfdp.random`) of the seed
``[key, position]``: ``key`` is :func:`tfdp.seeding.drop_path_key` of the
run's seed and the layer's index (block ``i``'s attention branch ``2 i``,
its MLP branch ``2 i + 1``), ``position`` packs the layer's training-call
count ``c``, the replica ``r`` (``replica_id_in_sync_group``) and the row
``b``: ``c * 2**32 + r * 2**20 + b`` (so rows below 2**20 per replica,
replicas below 2**12, calls below 2**31). The call count lives in a Keras
``SeedGenerator``'s state, ``[key, c]``, which tfdp's checkpoints save with
the model's random layers' states (:func:`tfdp.checkpoint.keras_trackables`):
a run resumed from a checkpoint draws what the uninterrupted run drew, and
every replica draws for its own rows (timm seeds each rank apart).

Example:
    >>> import numpy as np
    >>> layer = DropPath(0.5, seed=0, index=1)
    >>> x = np.ones((6, 2, 3), "float32")
    >>> bool((layer(x, training=False) == x).numpy().all())  # inference: identity
    True
    >>> sorted(set(np.unique(layer(x, training=True).numpy()).tolist()))  # kept rows x2
    [0.0, 2.0]
"""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from tfdp.errors import ConfigError
from tfdp.random import per_sample_uniform
from tfdp.seeding import drop_path_key

#: What ``position`` counts a call and a replica in (see the module's text).
_CALL_UNIT = 2**32
_REPLICA_UNIT = 2**20


def row_uniforms(state: Any, rows: Any, replica: Any = 0) -> tf.Tensor:
    """The drop-path uniforms ``[rows]`` of one call: state ``[key, calls]``, a replica's rows.

    Row ``b``'s uniform is :func:`tfdp.random.per_sample_uniform` of
    ``[key, calls * 2**32 + replica * 2**20 + b]`` (its first draw).

    Example:
        >>> import tensorflow as tf
        >>> u = row_uniforms(tf.constant([7, 0], tf.int64), 3, replica=1)
        >>> v = row_uniforms(tf.constant([7, 0], tf.int64), 4, replica=1)
        >>> bool(tf.reduce_all(u == v[:3])), bool(tf.reduce_all((u >= 0) & (u < 1)))
        (True, True)
    """
    state = tf.cast(state, tf.int64)
    rows = tf.range(tf.cast(rows, tf.int64), dtype=tf.int64)
    base = state[1] * _CALL_UNIT + tf.cast(replica, tf.int64) * _REPLICA_UNIT
    seeds = tf.stack([tf.fill(tf.shape(rows), state[0]), base + rows], axis=1)
    return per_sample_uniform(seeds, 1)[:, 0]


def _replica_id() -> Any:
    """This replica's index in its sync group (0 outside a replica context)."""
    ctx = tf.distribute.get_replica_context()
    return 0 if ctx is None else ctx.replica_id_in_sync_group


@keras.saving.register_keras_serializable(package="tfdp")
class DropPath(keras.layers.Layer):
    """timm's ``DropPath``: each row kept with probability ``1 - rate`` (and scaled), in training.

    Args:
        rate: The probability of dropping a row, in ``[0, 1)``; 0 is the identity.
        seed: The run's seed (its key: :func:`tfdp.seeding.drop_path_key`).
        index: This layer's index among the model's drop-path layers.
        **kwargs: ``keras.layers.Layer``'s (``name``, ``dtype``).

    Raises:
        ConfigError: a rate outside ``[0, 1)`` (``argument="rate"``).

    Example:
        >>> DropPath(0.1, seed=3, index=4).get_config()["index"]
        4
        >>> DropPath(1.0)
        Traceback (most recent call last):
        ...
        tfdp.errors.ConfigError: rate: must be in [0, 1), got 1.0
    """

    def __init__(self, rate: float, seed: int = 0, index: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 <= rate < 1:
            raise ConfigError(f"must be in [0, 1), got {rate!r}", argument="rate")
        self.rate = float(rate)
        self.seed = int(seed)
        self.index = int(index)
        self.seed_generator = (
            keras.random.SeedGenerator(drop_path_key(self.seed, self.index), name="seed_generator")
            if self.rate > 0
            else None
        )

    def call(self, inputs: Any, training: bool | None = None) -> Any:
        """``inputs`` with each row kept and scaled, or zeroed, in training; else as it is."""
        if not training or self.seed_generator is None:
            return inputs
        state = self.seed_generator.next()  # [key, calls]; the call count advances by one
        u = row_uniforms(state, tf.shape(inputs)[0], _replica_id())
        keep = 1.0 - self.rate
        mask = tf.cast(u < keep, inputs.dtype) / tf.cast(keep, inputs.dtype)
        shape = tf.concat([tf.shape(mask), tf.ones([tf.rank(inputs) - 1], tf.int32)], 0)
        return inputs * tf.reshape(mask, shape)

    def compute_output_shape(self, input_shape: Any) -> Any:
        """The input's shape."""
        return input_shape

    def get_config(self) -> dict[str, Any]:
        """The layer's configuration: Keras's, and ``rate``, ``seed``, ``index``."""
        return {**super().get_config(), "rate": self.rate, "seed": self.seed, "index": self.index}
