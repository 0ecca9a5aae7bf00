"""A worker's local ranks read from a stream as one: each step's records decoded once.

This module owns how the local replicas of a worker share one read of a
streaming source (:class:`tfdp.sources.TFRecordSource`) when its records are
augmented batch by batch (JPEG records kept encoded, a window stage first):
:func:`step_rows` lays the local ranks' entries out step by step -- every
rank's batch of a step together, in stream order -- and the pipeline
(:meth:`tfdp.DistributedInput.worker_dataset`) reads those rows in one stream,
augments a step's rows as one batch and deals them back to the ranks' batches
(:meth:`tfdp.input.examples.ExamplePipeline.stream_step`).

Why: under Repeated Augmentation a sample's copies go to several ranks. Read
rank by rank, each copy of an image is decoded in its rank's batch; read as
one batch per step, the window stage decodes an image once for all its copies
in the step (:func:`tfdp.windows.decode.encoded_windows` reads and decodes
the copies of an image in a batch once), as the image-folder window path does.
The values are the same bit for bit: a batched augmentation's rows are its
per-row results (seeds per row), and each rank receives the rows of its
entries in its order.

Example:
    >>> import numpy as np
    >>> rank0 = (np.array([0, 0, 1, 2]), np.array([0, 2, 4, 6]))
    >>> rank1 = (np.array([0, 1, 1, 2]), np.array([1, 3, 5, 7]))
    >>> idx, pos, slot = step_rows([rank0, rank1], batch_size=2)
    >>> idx.tolist(), pos.tolist(), slot.tolist()
    ([0, 0, 0, 1, 1, 1, 2, 2], [0, 2, 1, 3, 4, 5, 6, 7], [0, 1, 2, 3, 0, 2, 1, 3])
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["step_rows"]


def step_rows(
    per_rank: Sequence[tuple[np.ndarray, np.ndarray]], batch_size: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The local ranks' stream entries as one batch per step, each step in stream order.

    Args:
        per_rank: Each local rank's ``(indices, positions)`` (stream indices
            and sampler positions), in its order; the ranks' whole batches
            are used (a last partial batch is dropped).
        batch_size: Entries per rank per step.

    Returns:
        ``(indices, positions, slots)``, each ``[steps * R * batch_size]`` for
        ``R`` ranks: step ``t``'s ``R * batch_size`` rows sorted by stream
        index (stably), and each row's slot in the step's rank batches (rank
        ``j``'s entry ``b`` at ``j * batch_size + b``). ``None`` when the
        ranks have different numbers of whole batches (they are then read
        rank by rank).

    Example:
        >>> import numpy as np
        >>> idx, pos, slot = step_rows([(np.array([5, 1]), np.array([0, 2])),
        ...                             (np.array([3, 3]), np.array([1, 3]))], batch_size=2)
        >>> idx.tolist(), slot.tolist()
        ([1, 3, 3, 5], [1, 2, 3, 0])
        >>> step_rows([(np.arange(4), np.arange(4)), (np.arange(2), np.arange(2))], 2) is None
        True
    """
    b = int(batch_size)
    steps = {len(idx) // b for idx, _ in per_rank}
    if len(steps) != 1:
        return None
    (n,) = steps
    ranks = len(per_rank)

    def by_step(arrays: list[np.ndarray]) -> np.ndarray:  # [steps, ranks * b], rank-major
        stacked = np.stack([np.asarray(a, np.int64)[: n * b].reshape(n, b) for a in arrays], 1)
        return stacked.reshape(n, ranks * b)

    idx = by_step([i for i, _ in per_rank])
    pos = by_step([p for _, p in per_rank])
    slot = np.argsort(idx, axis=1, kind="stable")
    return (
        np.take_along_axis(idx, slot, 1).reshape(-1),
        np.take_along_axis(pos, slot, 1).reshape(-1),
        slot.reshape(-1).astype(np.int64),
    )
