"""Seed 003: a distributed sampler with ``make_even`` padding whose ranks agree.

The scenario
    A PyTorch-style distributed ``Sampler`` with ``shuffle`` and ``make_even``:
    each epoch the index list is shuffled, padded up to a multiple of the world
    size ``W`` -- by wrapping around when the shortfall is smaller than the
    data set, otherwise with random extra indices -- and rank ``r`` takes
    every ``W``-th entry starting at ``r``. ``set_epoch`` reseeds the shuffle.

What the seed got wrong
    * The random extras come from the global, unseeded ``np.random``. Every
      rank is a separate process, so every rank draws *different* extras: the
      ranks no longer slice one common padded list, which samples are doubled
      depends on each process's RNG state, a rerun (or a resumed run) sees
      other data, and no process can tell what the others trained on
      (demonstrated below by simulating the seed's processes).
    * ``__len__`` is ``ceil(N / W)`` until the first ``__iter__`` has run, even
      with ``make_even=False``, where some ranks get one index fewer.

How tfdp fixes it
    ``tfdp.DistributedSampler(padding="random")`` draws the extras from a
    generator keyed by ``(seed, epoch)``, so every rank computes the same
    padded list and the union over ranks covers every sample; ``padding="wrap"``
    is torch's own ``DistributedSampler``; ``padding=None`` leaves ranks uneven
    by at most one, with every sample exactly once, and ``len(sampler)`` is
    right before any iteration. The samplers are pure NumPy: this script never
    imports TensorFlow.

Run:
    python examples/make_even_sampler.py            # the demo and a sweep of (N, W, epoch)
    python examples/make_even_sampler.py --quick    # the demo and a small sweep
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter

import numpy as np

import tfdp


def fail(message: str) -> None:
    """Stop with a non-zero exit status: a check of this example failed."""
    print(f"CHECK FAILED: {message}", file=sys.stderr)
    raise SystemExit(1)


def rank_indices(n: int, w: int, epoch: int, seed: int, **options) -> list[np.ndarray]:
    """Every rank's indices for one epoch (each rank builds its own sampler, as processes do)."""
    out = []
    for rank in range(w):
        sampler = tfdp.DistributedSampler(n, num_replicas=w, rank=rank, seed=seed, **options)
        sampler.set_epoch(epoch)
        out.append(sampler.indices())
    return out


def seed_padded_lists(n: int, w: int, epoch: int, run: int) -> list[list[int]]:
    """The full padded list each rank's process builds in the seed's ``Sampler.__iter__``.

    Each process shuffles with the epoch as seed (that part agrees across
    ranks) but draws the random extras from its own unseeded global RNG --
    simulated with a generator per (run, rank) so the demo is reproducible.
    Rank ``r`` then keeps ``its_list[r::W]``.
    """
    total = -(-n // w) * w
    out = []
    for rank in range(w):
        indices = np.random.default_rng(epoch).permutation(n).tolist()
        if len(indices) < total:
            if total - len(indices) < len(indices):
                indices += indices[: total - len(indices)]
            else:
                process_rng = np.random.default_rng([run, rank])  # np.random, unseeded
                extra = process_rng.integers(0, len(indices), size=total - len(indices))
                indices += [indices[i] for i in extra]
        out.append(indices)
    return out


def tfdp_padded_list(n: int, w: int, epoch: int, seed: int) -> list[int]:
    """The padded list tfdp's ranks slice: rank ``r``'s ``k``-th index is entry ``r + k * W``."""
    per_rank = rank_indices(n, w, epoch, seed, padding="random")
    return [int(per_rank[p % w][p // w]) for p in range(len(per_rank[0]) * w)]


def show(title: str, per_rank: list) -> None:
    """Print every rank's indices and what the union over ranks covers."""
    print(f"  {title}")
    for rank, idx in enumerate(per_rank):
        print(f"    rank {rank}: {list(map(int, idx))}  (len {len(idx)})")


def coverage(per_rank: list, n: int) -> tuple[list[int], list[int]]:
    """(samples no rank received, samples received more than once) over all ranks."""
    counts = Counter(int(i) for idx in per_rank for i in idx)
    missing = [i for i in range(n) if counts[i] == 0]
    repeated = sorted(i for i, c in counts.items() if c > 1)
    return missing, repeated


def check_configuration(n: int, w: int, epoch: int, seed: int) -> None:
    """Assert tfdp's guarantees for one (N, W, epoch) under every padding mode."""
    for padding in ("random", "wrap"):
        per_rank = rank_indices(n, w, epoch, seed, padding=padding)
        lengths = {len(idx) for idx in per_rank}
        if len(lengths) != 1:
            fail(f"padding={padding!r}, N={n}, W={w}: uneven rank lengths {lengths}")
        missing, _ = coverage(per_rank, n)
        if missing:
            fail(f"padding={padding!r}, N={n}, W={w}, epoch={epoch}: samples {missing} lost")
        # Every rank slices the *same* padded list: the ranks' entries interleave into it.
        total = lengths.pop() * w
        if total != -(-n // w) * w:
            fail(f"padding={padding!r}, N={n}, W={w}: total {total} is not ceil(N/W)*W")
    per_rank = rank_indices(n, w, epoch, seed, padding=None)
    lengths = [len(idx) for idx in per_rank]
    if max(lengths) - min(lengths) > 1:
        fail(f"padding=None, N={n}, W={w}: lengths {lengths} differ by more than one")
    flat = np.sort(np.concatenate(per_rank))
    if not np.array_equal(flat, np.arange(n)):
        fail(f"padding=None, N={n}, W={w}: not every sample exactly once")
    for rank in range(w):  # __len__ is right before any iteration (the seed's was not)
        if len(tfdp.DistributedSampler(n, w, rank, padding=None)) != lengths[rank]:
            fail(f"padding=None, N={n}, W={w}, rank {rank}: len() disagrees with indices()")


def demo(n: int, w: int, seed: int) -> None:
    """Print every rank's indices for N examples over W ranks, for each padding mode."""
    total = -(-n // w) * w
    branch = "wrap around" if total - n < n else "random extra indices"
    print(f"\nN={n} examples, W={w} ranks: padded to {total}, shortfall {total - n} -> {branch}")
    for padding in ("random", "wrap", None):
        per_rank = rank_indices(n, w, epoch=0, seed=seed, padding=padding)
        show(f"tfdp DistributedSampler(padding={padding!r}):", per_rank)
        missing, repeated = coverage(per_rank, n)
        print(f"    -> missing {missing}, seen twice or more {repeated}")
        if missing:
            fail(f"padding={padding!r} lost samples {missing}")
    if branch == "random extra indices":
        # Two epochs draw different extras, but within an epoch all ranks agree.
        e1 = rank_indices(n, w, epoch=1, seed=seed, padding="random")
        show("tfdp padding='random', epoch 1 (reshuffled, new extras, ranks still agree):", e1)
        # The seed: every process pads with its own extras, so the ranks do not share a list.
        for run in (1, 2):
            lists = seed_padded_lists(n, w, epoch=0, run=run)
            seed_ranks = [lst[r::w] for r, lst in enumerate(lists)]
            show(
                f"the seed's make_even, run {run} (unseeded np.random in each process):", seed_ranks
            )
            distinct = len({tuple(lst) for lst in lists})
            print(f"    -> the {w} processes hold {distinct} different padded lists")
        if distinct == 1:
            fail("the simulated seed unexpectedly agreed across processes")
        again = tfdp_padded_list(n, w, 0, seed)
        if again != tfdp_padded_list(n, w, 0, seed):
            fail("tfdp's padded list changed between runs")
        print(f"  tfdp: one padded list {again} for all {w} ranks, identical in every run")


def main(argv: list[str] | None = None) -> int:
    """Run the demo and the sweep; return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small sweep (well under a second)")
    parser.add_argument("--seed", type=int, default=0, help="the sampler seed")
    args = parser.parse_args(argv)

    print("tfdp.DistributedSampler: make_even padding that every rank agrees on")
    demo(10, 4, args.seed)  # shortfall 2 < 10: wrap around (random == wrap here)
    demo(3, 8, args.seed)  # shortfall 5 >= 3: random extras, seeded by (seed, epoch)

    max_n, max_w, epochs = (24, 9, 2) if args.quick else (80, 17, 4)
    configurations = 0
    for n in range(1, max_n + 1):
        for w in range(1, max_w + 1):
            for epoch in range(epochs):
                check_configuration(n, w, epoch, args.seed)
                configurations += 1
    print(
        f"\nsweep: {configurations} configurations (N<={max_n}, W<={max_w}, {epochs} epochs): "
        "padding='random'/'wrap' cover every sample with equal rank lengths; padding=None "
        "gives every sample exactly once, lengths within one, len() right before iterating"
    )
    if "tensorflow" in sys.modules:
        fail("the samplers imported TensorFlow")
    print("OK: all ranks agree (TensorFlow never imported)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
