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
from tfdp.augment.contract import BatchedAugmentation
from tfdp.random import as_seeds, fold_in

__all__ = ["Compose", "stage_seeds"]


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
        TypeError: If a stage is not callable or lacks ``batched = True``.

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
                raise TypeError(
                    f"Compose stages must be batched augmentations (callable with "
                    f"batched = True), got {stage!r}"
                )
        self.stages = stages

    def __call__(self, example: Any, seeds: Any) -> Any:
        """Apply every stage to the batched ``example`` with per-sample ``seeds`` ``[B, 2]``."""
        seeds = as_seeds(seeds)
        for index, stage in enumerate(self.stages):  # a user's stage as AutoGraph converts it
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
