"""What the input layer accepts as an augmentation: the two contracts, as Protocols.

This module owns the interfaces :class:`tfdp.DistributedInput` dispatches an
augmentation on (with ``isinstance``, never ``hasattr``):

=========================  =====================================================================
Protocol                   members (what the input layer does with them)
=========================  =====================================================================
BatchedAugmentation        ``batched`` (True) and ``__call__(batch, seeds[B, 2])``: called on
                           whole batches (every stage of :mod:`tfdp.augment`, ``Compose``)
PerExampleAugmentation     ``__call__(example, seed[2])``, stateless random ops: called per
                           example (a plain function)
BatchStage                 ``batched`` and ``mixes_samples`` (True) and ``__call__(batch,
                           seeds[B, 2])``: a stage whose output for a sample depends on the
                           other samples of the batch (:class:`tfdp.augment.Mixup`); the input
                           layer applies it, and every stage after it, to each replica's
                           assembled batch, on every path
=========================  =====================================================================

The seeds are handed in (``[key(seed, epoch), position]``, see
:mod:`tfdp.random`); an augmentation holds no random state. This module
imports no TensorFlow.

Example:
    >>> is_batched_augmentation(lambda example, seed: example)
    False
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

__all__ = [
    "AugmentationFn",
    "BatchStage",
    "BatchedAugmentation",
    "PerExampleAugmentation",
    "is_batch_stage",
    "is_batched_augmentation",
]


@runtime_checkable
class BatchedAugmentation(Protocol):
    """An augmentation of whole batches: ``aug(batch, seeds[B, 2]) -> batch``, ``batched = True``.

    Every random decision for sample ``b`` must depend on ``seeds[b]`` only
    (so a sample's augmentation is the same whatever batch it lands in). The
    ``batched`` attribute must be ``True``: it is the explicit statement that
    the callable takes a batch (see :func:`is_batched_augmentation`). All of
    :mod:`tfdp.augment` meets this contract.

    Example:
        >>> from tfdp import augment
        >>> isinstance(augment.RandomFlip(), BatchedAugmentation)
        True
    """

    batched: bool

    def __call__(self, example: Any, seeds: Any) -> Any:
        """The augmented batch ``example`` with per-sample ``seeds`` int64 ``[B, 2]``."""
        ...


@runtime_checkable
class PerExampleAugmentation(Protocol):
    """An augmentation of one example: ``fn(example, seed[2]) -> example`` (no ``batched``).

    Stateless random ops only (``tf.random.stateless_*`` with ``seed``), so a
    rerun or a resumed run augments alike.

    Example:
        >>> isinstance(lambda example, seed: example, PerExampleAugmentation)
        True
    """

    def __call__(self, example: Any, seed: Any) -> Any:
        """The augmented ``example`` with its ``seed`` int64 ``[2]``."""
        ...


@runtime_checkable
class BatchStage(Protocol):
    """A stage that mixes the samples of a batch: ``mixes_samples = True`` (and ``batched``).

    Its output for a sample depends on the batch it is in (Mixup pairs
    sample ``i`` with sample ``B - 1 - i``), so it must see the batch a
    replica trains on: the input layer applies it -- and every stage after it
    -- after batching, to each replica's batch, whatever the path (a
    window-decoding source, a per-example source, a batch source, a stream).
    Its seeds are the batch's per-sample seeds (``[B, 2]``).

    Example:
        >>> from tfdp import augment
        >>> isinstance(augment.Mixup(num_classes=10), BatchStage)
        True
    """

    batched: bool
    mixes_samples: bool

    def __call__(self, example: Any, seeds: Any) -> Any:
        """The mixed batch ``example`` with per-sample ``seeds`` int64 ``[B, 2]``."""
        ...


def is_batch_stage(fn: Any) -> bool:
    """Whether ``fn`` mixes the samples of a batch (a :class:`BatchStage` that says so).

    Example:
        >>> from tfdp import augment
        >>> is_batch_stage(augment.Mixup(num_classes=10)), is_batch_stage(augment.RandomFlip())
        (True, False)
    """
    return isinstance(fn, BatchStage) and bool(fn.mixes_samples)


#: Either kind of augmentation, as :class:`tfdp.DistributedInput` accepts it (not to be confused
#: with :class:`tfdp.augment.Augmentation`, the base class of tfdp's batched augmentations).
AugmentationFn = BatchedAugmentation | PerExampleAugmentation


def is_batched_augmentation(fn: Any) -> bool:
    """Whether ``fn`` is a :class:`BatchedAugmentation` (its ``batched`` attribute is true).

    Anything else callable is a per-example augmentation.

    Example:
        >>> from tfdp import augment
        >>> is_batched_augmentation(augment.RandomFlip()), is_batched_augmentation(print)
        (True, False)
    """
    return isinstance(fn, BatchedAugmentation) and bool(fn.batched)
