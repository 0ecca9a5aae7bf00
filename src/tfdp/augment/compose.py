"""Compose: stages applied in order, each with seeds of its own (``fold_in(seeds, i)``).

Example:
    >>> import tensorflow as tf
    >>> from tfdp.augment import RandomFlip, ToFloat
    >>> aug = Compose([ToFloat(), RandomFlip()])
    >>> aug(tf.zeros([2, 4, 4, 3], tf.uint8), [[0, 0], [0, 1]]).dtype.name
    'float32'
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import tensorflow as tf

from tfdp._autograph import user_code
from tfdp.augment.base import Augmentation
from tfdp.augment.contract import BatchedAugmentation, is_batch_stage
from tfdp.errors import ConfigTypeError
from tfdp.random import as_seeds, fold_in


class Compose:
    """Apply batched augmentations in order, each with its own derived seeds.

    Stage ``i`` is called as ``stage(example, fold_in(seeds, i))`` (a
    deterministic :class:`Augmentation`, ``random = False``, gets ``seeds``
    unchanged: it ignores them), so the stages draw from independent streams
    (two ``RandomFlip`` stages do not flip the same samples) while every draw
    still depends only on the sample's own seed. Stages may be any callables with ``batched = True``
    (including other :class:`Compose` objects); each handles the example
    structure itself.

    Args:
        stages: The augmentations, applied first to last.

    Raises:
        tfdp.errors.ConfigTypeError: A stage is not callable or lacks ``batched = True``.

    Example:
        >>> import tensorflow as tf
        >>> from tfdp.augment import Normalize, RandomShift, ToFloat
        >>> aug = Compose([RandomShift(2), ToFloat(), Normalize(0.5, 0.25)])
        >>> images, labels = aug((tf.zeros([2, 28, 28, 1], tf.uint8), tf.constant([3, 5])),
        ...                      [[0, 0], [0, 1]])
        >>> tuple(images.shape), labels.numpy().tolist()
        ((2, 28, 28, 1), [3, 5])
    """

    batched: ClassVar[bool] = True

    def __init__(self, stages: Sequence[Callable[[Any, tf.Tensor], Any]]) -> None:
        stages = list(stages)
        for stage in stages:
            if not isinstance(stage, BatchedAugmentation) or stage.batched is not True:
                raise ConfigTypeError(
                    f"must be batched augmentations (callable with batched = True), got {stage!r}",
                    argument="stages",
                )
        self.stages = stages

    @property
    def mixes_samples(self) -> bool:
        """Whether a stage mixes the samples of a batch (then this is a batch stage too).

        Example:
            >>> from tfdp.augment import Mixup, RandomFlip
            >>> Compose([RandomFlip()]).mixes_samples, Compose([Mixup(num_classes=3)]).mixes_samples
            (False, True)
        """
        return any(is_batch_stage(stage) for stage in self.stages)

    def __call__(self, example: Any, seeds: Any) -> Any:
        """Apply every stage to the batched ``example`` with per-sample ``seeds`` ``[B, 2]``."""
        return self.run(example, seeds)

    def run(self, example: Any, seeds: Any, start: int = 0, stop: int | None = None) -> Any:
        """Apply stages ``start`` to ``stop`` (exclusive), each with its own index's seeds.

        Example:
            >>> import tensorflow as tf
            >>> from tfdp.augment import RandomFlip, ToFloat
            >>> aug = Compose([ToFloat(), RandomFlip(p=1.0)])
            >>> aug.run(tf.ones([1, 1, 2, 1], tf.uint8), [[0, 0]], stop=1).dtype.name
            'float32'
        """
        seeds = as_seeds(seeds)
        stop = len(self.stages) if stop is None else stop
        for index in range(start, stop):  # a user's stage as AutoGraph converts it
            stage = self.stages[index]
            example = user_code(stage)(example, stage_seeds(seeds, index, stage))
        return example

    def __len__(self) -> int:
        return len(self.stages)

    def __repr__(self) -> str:
        return f"Compose({self.stages!r})"


def stage_seeds(seeds: tf.Tensor, index: int | None, stage: Any) -> tf.Tensor:
    """The seeds :class:`Compose` gives stage ``index`` (``None``: a bare stage).

    ``fold_in(seeds, index)``, or ``seeds`` unchanged for a deterministic
    :class:`~tfdp.augment.Augmentation` (``random = False``: it ignores them).

    Example:
        >>> import tensorflow as tf
        >>> from tfdp.augment import ToFloat
        >>> seeds = tf.constant([[1, 2]], tf.int64)
        >>> stage_seeds(seeds, 3, ToFloat()).numpy().tolist(), stage_seeds(seeds, None, 0) is seeds
        ([[1, 2]], True)
    """
    if index is None or (isinstance(stage, Augmentation) and not stage.random):
        return seeds
    return fold_in(seeds, index)


class _Stages:
    """Stages ``[start, stop)`` of a :class:`Compose`, with their seeds: a part of a split."""

    batched: ClassVar[bool] = True

    def __init__(self, compose: Compose, start: int, stop: int | None) -> None:
        self.compose, self.start, self.stop = compose, start, stop

    def __call__(self, example: Any, seeds: Any) -> Any:
        return self.compose.run(example, seeds, self.start, self.stop)

    def __repr__(self) -> str:
        return f"{self.compose!r}.stages[{self.start}:{'' if self.stop is None else self.stop}]"


def split_batch_stages(augment: Any) -> tuple[Any, Any]:
    """``(per_sample, batch)``: ``augment`` cut before its first stage that mixes samples.

    ``per_sample`` (None if empty) may run on a batch of one; ``batch`` (None
    when nothing mixes samples) runs on each replica's assembled batch with
    the batch's seeds, its stages seeded as in ``augment``
    (:class:`tfdp.augment.contract.BatchStage`). Applying one then the other
    equals ``augment`` on the batch.

    Example:
        >>> from tfdp.augment import Mixup, Normalize, RandomFlip
        >>> aug = Compose([RandomFlip(), Normalize(0.5, 0.5), Mixup(num_classes=4)])
        >>> split_batch_stages(aug)[1]  # doctest: +ELLIPSIS
        Compose([...]).stages[2:]
        >>> split_batch_stages(RandomFlip())[1] is None
        True
    """
    if isinstance(augment, Compose):
        for index, stage in enumerate(augment.stages):
            if is_batch_stage(stage):
                head = _Stages(augment, 0, index) if index else None
                return head, _Stages(augment, index, None)
        return augment, None
    if is_batch_stage(augment):
        return None, augment
    return augment, None
