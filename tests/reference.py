"""An independent single-device reference for the training loops (test helper, no tfdp.train).

What a correct data-parallel step does, written plainly: the sampler says which examples each
rank holds in each batch; an optimizer step of ``k`` micro-batches is one ``GradientTape``
pass over the concatenation of every rank's samples of its micro-batches, the loss the mean
over those rows (``sample_weight`` multiplies each row's loss, every row counts in the
denominator) plus the regularisation losses once, the gradient clipped by global norm, then
applied. Streams are mapped to example ids through lanes read by hand from the files.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from tfdp.indices import KeyedPermutation


def lanes_by_hand(source: Any, num_replicas: int, seed: int, epoch: int, shuffle: bool) -> list:
    """A TFRecord stream's lanes as lists of parsed examples, read plainly (no block shuffle).

    The documented layout: the files permuted by ``KeyedPermutation(F, seed, epoch)`` (the
    identity without shuffle), lane ``j`` the round-robin interleave of ``files[perm[j::L]]``.
    """
    assert source.shuffle_buffer <= 1, "read by hand only without the block shuffle"
    lanes = min(len(source.files), num_replicas)
    order = np.arange(len(source.files))
    if shuffle:
        order = KeyedPermutation(len(source.files), seed, epoch)(order)
    out = []
    for j in range(lanes):
        files = [
            list(tf.data.TFRecordDataset(source.files[i]).map(source.parse).as_numpy_iterator())
            for i in order[j::lanes]
        ]
        lane = []
        for m in range(max(len(f) for f in files)):
            lane += [f[m] for f in files if m < len(f)]
        out.append(lane)
    return out


def rank_lists(inp: Any, epoch: int) -> list[np.ndarray]:
    """Each rank's sampler list for ``epoch`` (stream indices for a streaming input)."""
    sampler = inp.sampler
    if inp.streaming:  # the source shuffles; the sampler picks stream positions, unpermuted
        sampler = sampler.replace(shuffle=False)
    out = []
    for r in range(inp.num_replicas):
        s = sampler.with_rank(r)
        s.set_epoch(epoch)
        out.append(s.indices())
    return out


def epoch_batches(inp: Any, epoch: int) -> list[list[np.ndarray]]:
    """``[batch][rank] -> ids``: the batches of an epoch as the sampler lays them out."""
    lists = rank_lists(inp, epoch)
    b = inp.batch_size
    return [[ids[i * b : (i + 1) * b] for ids in lists] for i in range(inp.steps_per_epoch)]


def optimizer_steps(batches: list, k: int) -> list[list]:
    """Group an epoch's batches into optimizer steps of ``k`` micro-batches (the last shorter)."""
    return [batches[i : i + k] for i in range(0, len(batches), k)]


class Reference:
    """A single-device model trained step by step on given global samples.

    Args:
        model: A Keras model (built, outside any strategy).
        optimizer: A Keras optimizer.
        loss: Per-example loss ``(y, logits) -> [n]``.
        fetch: ``ids -> (x, y, sample_weight or None)`` for a flat array of ids.
        clip: Global-norm clip of the gradient, or None.
    """

    def __init__(
        self,
        model: keras.Model,
        optimizer: keras.optimizers.Optimizer,
        loss: Callable[[Any, Any], Any],
        fetch: Callable[[np.ndarray], tuple[Any, Any, Any]],
        clip: float | None = None,
    ) -> None:
        self.model, self.optimizer, self.loss, self.fetch, self.clip = (
            model,
            optimizer,
            loss,
            fetch,
            clip,
        )

    def step(self, micro_batches: Sequence[Sequence[np.ndarray]]) -> float:
        """One optimizer step over all ranks' samples of ``micro_batches``; returns its loss."""
        ids = np.concatenate([ids for micro in micro_batches for ids in micro])
        x, y, w = self.fetch(ids)
        tvars = self.model.trainable_variables
        with tf.GradientTape() as tape:
            per_ex = tf.cast(self.loss(y, self.model(x, training=True)), tf.float32)
            if w is not None:
                per_ex = per_ex * w
            loss = tf.reduce_sum(per_ex) / len(ids)
            if self.model.losses:
                loss += tf.add_n(self.model.losses)
        grads = tape.gradient(loss, tvars)
        if self.clip is not None:
            grads, _ = tf.clip_by_global_norm(grads, self.clip)
        self.optimizer.apply_gradients(zip(grads, tvars, strict=True))
        return float(loss)
