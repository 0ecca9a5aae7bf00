"""timm's side of the reference checks: runs in a process of its own, never with TensorFlow.

Importing torchvision (which ``import timm`` does) after TensorFlow in one process crashes it
(a segmentation fault with torch 2.14 / TF 2.21), so the tests call these functions through
:func:`timm_ref.call`, in a fresh interpreter that imports timm and torch only. Each function
takes and returns plain data (lists, dicts, NumPy arrays) and may batch several cases per call:
a process costs a few seconds to start.
"""

from __future__ import annotations

import pickle
import sys
from typing import Any


class _Sized:
    """A data set stand-in: the samplers only call len()."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n


def repeat_aug_lists(cases: list[tuple]) -> list[Any]:
    """timm's ``RepeatAugSampler`` lists of every rank, per case (or an error string).

    A case is ``(n, num_replicas, num_repeats, selected_round, selected_ratio, epoch)``.
    """
    from timm.data.distributed_sampler import RepeatAugSampler

    out: list[Any] = []
    for n, w, repeats, selected_round, selected_ratio, epoch in cases:
        ranks = []
        try:
            for rank in range(w):
                ref = RepeatAugSampler(
                    _Sized(n),
                    num_replicas=w,
                    rank=rank,
                    shuffle=True,
                    num_repeats=repeats,
                    selected_round=selected_round,
                    selected_ratio=selected_ratio,
                )
                ref.set_epoch(epoch)
                ranks.append(list(ref))
        except (TypeError, RuntimeError) as err:  # an older timm without fractional repeats
            out.append(f"{type(err).__name__}: {err}")
            continue
        out.append(ranks)
    return out


def main() -> None:
    """Read ``(function name, args, kwargs)`` pickled on stdin; write the result pickled."""
    name, args, kwargs = pickle.load(sys.stdin.buffer)
    result = globals()[name](*args, **kwargs)
    pickle.dump(result, sys.stdout.buffer)


if __name__ == "__main__":
    main()
