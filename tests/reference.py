"""An independent reference for the training loops (test helper; no tfdp sampler, input or train).

What a correct data-parallel run does, written plainly:

* **The samplers' lists.** An epoch is one global list of sample entries, written here as
  PyTorch, DeiT and timm write it: :func:`torch_distributed_list` (``DistributedSampler``:
  torch's wrap padding, tfdp's seeded random padding, ``drop_last``, no padding) and
  :func:`repeated_augmentation_list` (DeiT's ``RASampler`` / timm's ``RepeatAugSampler``:
  integer and fractional repeats, ``selected_round`` / ``selected_ratio``). Rank ``r`` of ``W``
  holds entries ``r, r + W, ...`` of it. :func:`check_coverage` states what each layout covers.
* **The steps.** Step ``i`` of an epoch holds the list's positions ``[i G, (i + 1) G)``
  (``G`` the global batch), dealt round-robin over the ranks; a run resumed on another world
  size deals the rest of the interrupted epoch's list over its own ranks
  (:func:`deal_batches`). An optimizer step is ``k`` consecutive batches.
* **The streams.** A TFRecord epoch is ``min(files, W)`` lanes read by hand from the files
  (:func:`stream_lanes`, the block shuffle included); stream entry ``s`` is record
  ``s // L`` of lane ``s % L``.
* **The step itself.** :class:`Reference` makes one ``GradientTape`` step over the
  concatenation of all replicas' rows: the loss the mean over those rows (``sample_weight``
  multiplies each row's loss, every row counts in the denominator) plus the regularisation
  losses once, the gradient clipped by global norm, applied only when loss and gradient are
  finite. :func:`plain_evaluation` is a plain mean over a whole held-out set.

The randomness comes from tfdp's seed derivations only where a layout is keyed by them (pinned
by tests/test_seeding.py and tests/test_indices.py): the shuffle permutation
(:class:`tfdp.indices.KeyedPermutation`; draws also inject an independent permutation through
the samplers' ``permutation=``), random padding's draws, a TFRecord lane's block-shuffle key
and the augmentation key of an epoch. The layouts on top of them are stated here.

The last section keeps the helpers older tests read (``epoch_batches``, ``rank_lists``,
``lanes_by_hand``): built on tfdp's own samplers, for tests that take the sampler as given;
the differential test (tests/test_differential.py, tests/differential.py) does not use them.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from tfdp.indices import KeyedPermutation
from tfdp.seeding import padding_seed_sequence, stream_block_key

# -- the samplers' global lists -------------------------------------------------------------


def permutation(n: int, seed: int, epoch: int, shuffle: bool, injected: Any = None) -> list[int]:
    """The epoch's order of ``range(n)``: an injected ``epoch -> permutation``, else tfdp's."""
    if injected is not None:
        return [int(i) for i in injected(epoch)]
    if not shuffle:
        return list(range(n))
    return KeyedPermutation(n, seed, epoch)(np.arange(n)).tolist()


def torch_distributed_list(
    perm: Sequence[int],
    num_replicas: int,
    drop_last: bool,
    padding: str | None,
    seed: int = 0,
    epoch: int = 0,
) -> list[int] | str:
    """``torch.utils.data.DistributedSampler``'s list, or the reason tfdp refuses the layout.

    torch: ``num_samples = ceil((n - W) / W)`` with ``drop_last`` and ``n % W != 0``, else
    ``ceil(n / W)``; the list is the permutation cut to ``num_samples * W`` (``drop_last``)
    or padded to it by repeating its head as often as needed (``"wrap"``). tfdp's
    ``"random"`` pads with the head too while the shortfall is below ``n``, otherwise with
    ``perm[draws]``, the draws uniform from a Philox generator of the padding seed sequence;
    ``None`` does not pad (ranks uneven: refused by the input unless ``W`` divides ``n``).
    """
    n, w = len(perm), num_replicas
    if drop_last and n < w:
        return "drop_last=True"
    num_samples = math.ceil((n - w) / w) if drop_last and n % w != 0 else math.ceil(n / w)
    total_size = num_samples * w
    indices = list(perm)
    if drop_last:
        return indices[:total_size]
    padding_size = total_size - n
    if padding is None:
        return indices if padding_size == 0 else "uneven"
    if padding == "random" and padding_size >= n:
        rng = np.random.Generator(np.random.Philox(padding_seed_sequence(seed, epoch)))
        return indices + [indices[i] for i in rng.integers(0, n, size=padding_size).tolist()]
    return indices + (indices * math.ceil(padding_size / n))[:padding_size]


def repeated_augmentation_sizes(
    n: int,
    num_replicas: int,
    num_repeats: float,
    selected_round: int,
    selected_ratio: float | None,
) -> tuple[int, int, int]:
    """``(num_samples, total_size, num_selected)`` as timm computes them (DeiT's rounding).

    ``num_samples = ceil(n R / W)``, ``total_size = num_samples * W``, ``num_selected =
    floor(n // round * round / ratio)`` (``ceil(n / ratio)`` without rounding), the ratio
    defaulting to ``W``, at most ``num_samples``.
    """
    num_samples = math.ceil(n * num_repeats / num_replicas)
    ratio = selected_ratio or num_replicas
    if selected_round:
        num_selected = math.floor(n // selected_round * selected_round / ratio)
    else:
        num_selected = math.ceil(n / ratio)
    return num_samples, num_samples * num_replicas, min(num_selected, num_samples)


def repeated_augmentation_list(
    perm: Sequence[int],
    num_replicas: int,
    num_repeats: float,
    selected_round: int,
    selected_ratio: float | None,
) -> list[int] | str:
    """DeiT's ``RASampler`` / timm's ``RepeatAugSampler`` list (all ranks' kept entries).

    Each entry of the permutation repeated ``R`` times in a row (fractional ``R``: entry ``i``
    of the ``ceil(R n)`` is ``perm[int(i // R)]``), wrapped to ``num_samples * W`` with
    ``num_samples = ceil(n R / W)``; rank ``r`` keeps the first ``num_selected`` of its
    entries ``r, r + W, ...``, which together are the list's first ``num_selected * W``.
    ``num_selected = floor(n // round * round / ratio)`` (DeiT; ``ceil(n / ratio)`` without
    rounding), the ratio defaulting to ``W``, at most ``num_samples``. When that is 0 tfdp
    refuses (DeiT would train an empty epoch; timm 1.0.31 falls back to ``ceil(n / ratio)``).
    """
    n, w = len(perm), num_replicas
    _, _, num_selected = repeated_augmentation_sizes(
        n, w, num_repeats, selected_round, selected_ratio
    )
    if num_selected < 1:
        return "select no sample"
    if float(num_repeats).is_integer():
        repeated = [i for i in perm for _ in range(int(num_repeats))]
    else:
        repeated = [perm[int(i // num_repeats)] for i in range(math.ceil(num_repeats * n))]
    return [repeated[q % len(repeated)] for q in range(num_selected * w)]


def check_coverage(kind: str, options: dict[str, Any], n: int, w: int, entries: list[int]) -> None:
    """What an epoch's list covers, stated apart from how it is laid out."""
    count = Counter(entries)
    assert set(count) <= set(range(n)), "entries outside the data set"
    if kind == "distributed" and options.get("drop_last"):
        assert len(entries) == n // w * w and max(count.values()) == 1, "drop_last: distinct"
    elif kind == "distributed":  # padded to a multiple of W: everything once, a few twice
        assert len(entries) == -(-n // w) * w and set(count) == set(range(n)), "not covered"
        assert max(count.values()) <= 2
    else:  # RA: a prefix of the repeated list (wrapped): each pass holds a sample <= ceil(R) times
        r, length = options["num_repeats"], math.ceil(options["num_repeats"] * n)
        assert max(count.values()) <= math.ceil(r) * -(-len(entries) // length)
        if len(entries) >= length:  # the whole repeated list: every sample
            assert set(count) == set(range(n)), "not covered"


# -- the steps -------------------------------------------------------------------------------


def deal_batches(
    entries: Sequence[int], global_batch: int, ranks: int, drop_remainder: bool, first: int = 0
) -> list[list[list[tuple[int, int]]]]:
    """``[batch][rank] -> [(entry, position)]``: an epoch's batches from batch ``first`` on.

    Batch ``i`` holds positions ``[i G, (i + 1) G)`` of the list (the last one partial unless
    ``drop_remainder``), position ``p`` going to rank ``(p - i G) % ranks`` -- which is rank
    ``p % W`` of the world size that made the list, and the deal of the rest of the list over
    the ranks of a run resumed on another world size.
    """
    total, g = len(entries), global_batch
    steps = total // g if drop_remainder else -(-total // g)
    out = []
    for i in range(first, steps):
        window = range(i * g, min((i + 1) * g, total))
        out.append(
            [[(entries[p], p) for p in window if (p - i * g) % ranks == r] for r in range(ranks)]
        )
    return out


def optimizer_steps(batches: list, k: int) -> list[list]:
    """Group an epoch's batches into optimizer steps of ``k`` micro-batches (the last shorter)."""
    return [batches[i : i + k] for i in range(0, len(batches), k)]


# -- streams ---------------------------------------------------------------------------------


def stream_lanes(
    files: Sequence[str],
    parse: Callable[[Any], Any],
    num_replicas: int,
    seed: int,
    epoch: int,
    shuffle: bool,
    shuffle_buffer: int,
) -> list[list[Any]]:
    """A TFRecord stream's lanes, each cut to the stream's length, as lists of parsed examples.

    ``L = min(F, W)`` lanes: the files permuted by ``KeyedPermutation(F, seed, epoch)`` (in
    order without shuffle), lane ``j`` the round-robin interleave of ``files[perm[j::L]]``;
    with shuffle, the lane's consecutive blocks of ``shuffle_buffer`` records each permuted
    by ``stateless_shuffle`` with seed ``[stream_block_key(seed, epoch, j), block]``. Every
    lane is cut to ``M`` records, the records of the ``F // L`` smallest files, so the stream
    (``L * M`` entries, entry ``s`` record ``s // L`` of lane ``s % L``) has one length.
    """
    lanes = min(len(files), num_replicas)
    records = [list(tf.data.TFRecordDataset(f).as_numpy_iterator()) for f in files]
    per_lane = sum(sorted(len(r) for r in records)[: len(files) // lanes])
    order = np.arange(len(files))
    if shuffle:
        order = KeyedPermutation(len(files), seed, epoch)(order)
    out = []
    for j in range(lanes):
        mine = [records[i] for i in order[j::lanes]]
        lane = [f[m] for m in range(max(map(len, mine))) for f in mine if m < len(f)]
        if shuffle and shuffle_buffer > 1:
            key = stream_block_key(seed, epoch, j)
            shuffled = []
            for b in range(0, len(lane), shuffle_buffer):
                block = lane[b : b + shuffle_buffer]
                p = tf.random.experimental.stateless_shuffle(
                    tf.range(len(block), dtype=tf.int64),
                    seed=tf.constant([key, b // shuffle_buffer], tf.int64),
                )
                shuffled += [block[i] for i in p.numpy().tolist()]
            lane = shuffled
        out.append([tuple(np.asarray(t) for t in parse(r)) for r in lane[:per_lane]])
    return out


# -- the step --------------------------------------------------------------------------------


class Reference:
    """A single-device model trained step by step on given global samples.

    Args:
        model: A Keras model (built, outside any strategy).
        optimizer: A Keras optimizer.
        loss: Per-example loss ``(y, logits) -> [n]``.
        fetch: ``ids -> (x, y, sample_weight or None)``, for :meth:`step`.
        clip: Global-norm clip of the gradient, or None (``norm``: the latest step's
            gradient norm before clipping).
        dtype: The type the loss is computed and reduced in, and the gradients cast to (the
            model's: float64 for a float64 model).
    """

    def __init__(
        self,
        model: keras.Model,
        optimizer: keras.optimizers.Optimizer,
        loss: Callable[[Any, Any], Any],
        fetch: Callable[[np.ndarray], tuple[Any, Any, Any]] | None = None,
        clip: float | None = None,
        compiled: bool = False,
        dtype: str = "float32",
    ) -> None:
        self.model, self.optimizer, self.loss, self.fetch, self.clip = (
            model,
            optimizer,
            loss,
            fetch,
            clip,
        )
        self.dtype = tf.as_dtype(dtype)
        self.norm = float("nan")
        # The same ops traced once (a long run's eager Keras calls cost ~20 ms a step).
        self._gradients = (
            tf.function(self._loss_and_gradients, reduce_retracing=True)
            if compiled
            else self._loss_and_gradients
        )

    def step(self, micro_batches: Sequence[Sequence[np.ndarray]]) -> float:
        """One step over all ranks' ids of ``micro_batches`` (through ``fetch``); its loss."""
        assert self.fetch is not None
        ids = np.concatenate([ids for micro in micro_batches for ids in micro])
        return self.step_rows(*self.fetch(ids), skip_nonfinite=False)[0]

    def _loss_and_gradients(self, x: Any, y: Any, w: Any) -> tuple[Any, list[Any]]:
        tvars = self.model.trainable_variables
        with tf.GradientTape() as tape:
            per_ex = tf.cast(self.loss(y, self.model(x, training=True)), self.dtype)
            if w is not None:
                per_ex = per_ex * tf.cast(w, self.dtype)
            loss = tf.reduce_sum(per_ex) / tf.cast(tf.shape(per_ex)[0], self.dtype)
            if self.model.losses:
                loss += tf.add_n([tf.cast(v, self.dtype) for v in self.model.losses])
        grads = tape.gradient(loss, tvars)
        return loss, [tf.cast(g, self.dtype) for g in grads]

    def step_rows(self, x: Any, y: Any, w: Any, skip_nonfinite: bool = True) -> tuple[float, bool]:
        """One optimizer step over all the step's rows; ``(loss, applied)``."""
        loss, grads = self._gradients(x, y, w)
        finite = bool(tf.math.is_finite(loss)) and all(
            bool(tf.reduce_all(tf.math.is_finite(g))) for g in grads
        )
        if finite or not skip_nonfinite:
            if self.clip is not None:
                grads, norm = tf.clip_by_global_norm(grads, self.clip)
                self.norm = float(norm)
            self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables, strict=True))
        return float(loss), finite


def plain_evaluation(model: keras.Model, x: Any, y: Any, loss: Callable) -> dict[str, float]:
    """Loss and accuracy as plain means over a whole held-out set, on one device."""
    logits = model(x, training=False)
    per_ex = tf.cast(loss(y, logits), tf.float32).numpy()
    right = np.argmax(np.asarray(logits, np.float32), axis=-1) == np.asarray(y)
    return {"loss": float(per_ex.mean()), "sparse_categorical_accuracy": float(right.mean())}


# -- helpers of other test modules -----------------------------------------------------------
# Built on tfdp's own samplers and read by tests that take the sampler as given (test_train,
# test_nonfinite, test_input, test_sources_tfrecord); the differential test does not use them.


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
