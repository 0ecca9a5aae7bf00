"""Pure index algorithms: a permutation in, one rank's sample indices out.

This module owns the arithmetic behind every tfdp sampler and nothing else:
no TensorFlow, no state, no I/O. Each function evaluates only the positions a
rank actually needs, so one rank's epoch costs O(N*R/W) time and memory rather
than the O(N*R) of materialising the whole repeated, padded list.

The key observation: in PyTorch's ``DistributedSampler`` and in DeiT's /
timm's Repeated Augmentation sampler, rank ``r`` of ``W`` takes positions
``r, r + W, r + 2W, ...`` of a list that is the epoch's permutation, each entry
repeated ``R`` times, padded by wrapping. Entry ``q`` of that list is
``perm[(q mod L) // R]`` (``L`` the unpadded length), so a permutation that can
be evaluated at chosen positions -- :class:`KeyedPermutation`, a cycle-walking
Feistel bijection keyed by ``(seed, epoch)`` -- gives a rank its indices
without building anything of size N. The keys, tags and hash finalisers
come from :mod:`tfdp.seeding`.

Example:
    >>> perm = KeyedPermutation(10, seed=0, epoch=0)
    >>> sorted(perm(np.arange(10)).tolist()) == list(range(10))
    True
    >>> repeat_aug_indices(identity_permutation, 4, 2, 0, 3, stop=6).tolist()
    [0, 0, 1, 2, 2, 3]
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from tfdp.errors import ConfigError
from tfdp.seeding import fmix32, fmix64, padding_seed_sequence, round_keys

__all__ = [
    "MAX_EXAMPLES",
    "MAX_SEED",
    "KeyedPermutation",
    "PermutationFn",
    "array_permutation",
    "distributed_entries",
    "distributed_indices",
    "distributed_num_samples",
    "eval_indices",
    "eval_num_samples",
    "identity_permutation",
    "random_padding_ids",
    "repeat_aug_entries",
    "repeat_aug_indices",
    "repeat_aug_sizes",
    "repeated_length",
    "validate_permutation",
]

#: Seeds are unsigned 64-bit integers: ``0 <= seed <= MAX_SEED``.
MAX_SEED = 2**64 - 1
#: The largest data set the samplers index (2**53: float math stays exact, as in timm's).
MAX_EXAMPLES = 2**53

#: A permutation of ``range(n)`` evaluated at chosen positions: ``positions -> perm[positions]``.
PermutationFn = Callable[[np.ndarray], np.ndarray]

_FEISTEL_ROUNDS = 6
# Below this size a Feistel network on so few bits is measurably non-uniform;
# a materialised Philox-seeded shuffle is both exact and cheap there.
_SMALL_N = 4096


class KeyedPermutation:
    """A pseudo-random permutation of ``range(n)`` keyed by ``(seed, epoch)``.

    For ``n > 4096``: a Feistel network over a near-square mixed-radix domain
    ``a * b >= n`` (``a = ceil(sqrt(n))``, ``b = ceil(n / a)``): the state
    ``x = L * b + R`` goes through rounds ``(L, R) -> (R, (L + F(R)) mod a)``
    with the radices swapping each round, where ``F`` is MurmurHash3's
    finaliser of ``R`` xor a round key (keys from :func:`round_keys`) scaled to
    ``[0, a)``. Values landing in ``[n, a * b)`` -- fewer than ``a``, about
    ``sqrt(n)`` -- are walked again until they fall inside (cycle walking),
    which keeps it a bijection on ``range(n)``. Evaluating it at ``m``
    positions costs O(m) time and memory, whatever ``n``. For ``n <= 4096``,
    where so small a domain makes a Feistel network measurably non-uniform, a
    materialised shuffle by a Philox generator keyed alike. The same
    ``(n, seed, epoch)`` gives the same permutation in every process, on every
    platform.

    What it guarantees, and what not: for every key it is a bijection of
    ``range(n)``, and the key (seed, epoch) selects it deterministically. For
    ``n <= 4096`` it is a uniform shuffle (as uniform as the Philox
    generator). For larger ``n`` it is **not** a uniform draw from all ``n!``
    permutations -- a 6-round Feistel network reaches only a small,
    structured subset of them. For instance its parity can be fixed: when
    the domain is ``a * a`` with ``a`` odd, every round is an even
    permutation of it, so for ``n = 4225 = 65**2`` every key gives an even
    permutation (and for ``n = 5000``, cycle-walked in ``71**2``, every key
    measured gave an odd one). What is measured instead
    (``tests/test_indices.py``) is closeness to uniform where a sampler
    needs it: the images of fixed positions and of neighbouring pairs, and
    XOR differentials, are spread evenly over epochs and over seeds.

    Args:
        n: Size of the permuted range, ``1 <= n <= MAX_EXAMPLES``.
        seed: Unsigned 64-bit seed.
        epoch: Non-negative epoch; each epoch is an independent permutation.

    Example:
        >>> p = KeyedPermutation(1000, seed=7, epoch=3)
        >>> p(np.array([0, 1, 2])).shape
        (3,)
        >>> np.array_equal(np.sort(p(np.arange(1000))), np.arange(1000))
        True
    """

    def __init__(self, n: int, seed: int, epoch: int) -> None:
        if not 1 <= n <= MAX_EXAMPLES:
            raise ConfigError(f"must be in [1, {MAX_EXAMPLES}], got {n}", argument="n")
        self.n = int(n)
        self._table: np.ndarray | None = None
        if self.n <= _SMALL_N:
            rng = np.random.Generator(np.random.Philox(key=round_keys(seed, epoch, 2)))
            self._table = rng.permutation(self.n).astype(np.int64)
            return
        a = math.isqrt(self.n - 1) + 1
        b = -(-self.n // a)
        # 32-bit lanes while the domain fits; the scaled hash needs radix * 2**16 < 2**32.
        self._wide = a * b > 0xFFFF_FFFF or max(a, b) > 0xFFFF
        dt = np.uint64 if self._wide else np.uint32
        self._dtype = dt
        self._a, self._b = dt(a), dt(b)
        self._shift = dt(32 if self._wide else 16)
        self._mix = fmix64 if self._wide else fmix32
        self._keys = [
            dt(k) for k in round_keys(seed, epoch, _FEISTEL_ROUNDS, 64 if self._wide else 32)
        ]

    def _rounds(self, x: np.ndarray) -> np.ndarray:
        left = x // self._b
        right = x - left * self._b
        radix_l, radix_r = self._a, self._b
        for key in self._keys:
            f = right ^ key
            self._mix(f)
            f >>= self._shift  # keep the top half of the hash ...
            f *= radix_l  # ... and scale it to [0, radix_l) (multiply-shift, no division)
            f >>= self._shift
            f += left
            np.minimum(
                f, f - radix_l, out=f
            )  # (left + F) mod radix_l: f - radix_l wraps if f < radix_l
            left, right = right, f
            radix_l, radix_r = radix_r, radix_l
        left *= radix_r
        left += right
        return left

    def __call__(self, positions: np.ndarray) -> np.ndarray:
        """Return ``perm[positions]`` as int64 (positions must lie in ``[0, n)``)."""
        pos = np.asarray(positions)
        if self._table is not None:
            return self._table[pos]
        x = self._rounds(pos.astype(self._dtype))
        bound = self._dtype(self.n)
        todo = np.flatnonzero(x >= bound)
        while todo.size:
            y = self._rounds(x[todo])
            x[todo] = y
            todo = todo[y >= bound]
        return x.astype(np.int64)

    def __repr__(self) -> str:
        return f"KeyedPermutation(n={self.n})"


def identity_permutation(positions: np.ndarray) -> np.ndarray:
    """The unshuffled order: ``perm[i] = i``.

    Example:
        >>> identity_permutation(np.array([3, 1])).tolist()
        [3, 1]
    """
    return np.asarray(positions, dtype=np.int64)


def array_permutation(perm: np.ndarray) -> PermutationFn:
    """Wrap a materialised permutation array as a :data:`PermutationFn`.

    Example:
        >>> array_permutation(np.array([2, 0, 1]))(np.array([0, 2])).tolist()
        [2, 1]
    """
    arr = np.asarray(perm, dtype=np.int64)
    return lambda positions: arr[np.asarray(positions, dtype=np.int64)]


def validate_permutation(perm: object, n: int, name: str = "permutation") -> np.ndarray:
    """Check that ``perm`` is a 1-D permutation of ``range(n)`` and return it as int64.

    Raises:
        tfdp.errors.ConfigError: naming ``name``, when the shape, the length, or the values
            are wrong.

    Example:
        >>> validate_permutation([1, 0, 2], 3).tolist()
        [1, 0, 2]
    """
    arr = np.asarray(perm)
    if arr.ndim != 1:
        raise ConfigError(
            f"must return a 1-D permutation of range(num_examples={n}), got shape {arr.shape}",
            argument=name,
        )
    if arr.shape[0] != n:
        raise ConfigError(
            f"must return a permutation of range(num_examples={n}), "
            f"got an array of length {arr.shape[0]}",
            argument=name,
        )
    if arr.dtype.kind not in "iu":
        if arr.dtype.kind == "f" and np.all(np.mod(arr, 1) == 0):
            arr = arr.astype(np.int64)
        else:
            raise ConfigError(
                f"must return integers (a permutation of range(num_examples={n})), "
                f"got dtype {arr.dtype}",
                argument=name,
            )
    arr = arr.astype(np.int64, copy=False)
    if n and (arr.min() < 0 or arr.max() >= n or np.bincount(arr, minlength=n).max() != 1):
        raise ConfigError(
            f"must return a permutation of range(num_examples={n}): "
            "every value in [0, num_examples) exactly once",
            argument=name,
        )
    return arr


def random_padding_ids(n: int, count: int, seed: int, epoch: int) -> np.ndarray:
    """The random extra positions of ``padding="random"``, drawn from the epoch's generator.

    ``count`` draws uniform in ``[0, n)`` from a Philox generator keyed by
    ``(seed, epoch)``, identical in every process, so all ranks pad alike.

    Example:
        >>> a = random_padding_ids(5, 3, seed=0, epoch=1)
        >>> np.array_equal(a, random_padding_ids(5, 3, seed=0, epoch=1))
        True
    """
    rng = np.random.Generator(np.random.Philox(padding_seed_sequence(seed, epoch)))
    return rng.integers(0, n, size=count, dtype=np.int64)


def _slice_bounds(length: int, start: int, stop: int | None) -> tuple[int, int]:
    stop = length if stop is None else min(int(stop), length)
    start = min(max(0, int(start)), stop)
    return start, stop


def distributed_num_samples(
    n: int, num_replicas: int, rank: int, *, drop_last: bool = False, padding: str | None = "wrap"
) -> int:
    """Length of one rank's epoch in :func:`distributed_indices`.

    Example:
        >>> distributed_num_samples(10, 4, 3), distributed_num_samples(10, 4, 3, drop_last=True)
        (3, 2)
        >>> distributed_num_samples(10, 4, 3, padding=None)
        2
    """
    if drop_last:
        return n // num_replicas
    if padding is None:
        return len(range(rank, n, num_replicas))
    return -(-n // num_replicas)


def distributed_indices(
    perm: PermutationFn,
    n: int,
    num_replicas: int,
    rank: int,
    *,
    drop_last: bool = False,
    padding: str | None = "wrap",
    extra_ids: np.ndarray | None = None,
    start: int = 0,
    stop: int | None = None,
) -> np.ndarray:
    """One rank's indices under ``torch.utils.data.DistributedSampler``'s layout.

    The list is the permutation of ``range(n)``; without ``drop_last`` it is
    padded to a multiple of ``num_replicas`` (``"wrap"``: its head, as often as
    needed; ``"random"``: the head when the shortfall is below ``n``, otherwise
    ``perm[extra_ids]``; ``None``: not padded, ranks uneven by at most one);
    with ``drop_last`` its tail is cut to a multiple. Rank ``r`` takes
    positions ``r, r + W, ...``. Only entries ``[start, stop)`` of the rank's
    list are computed.

    Args:
        perm: The epoch's permutation, evaluated at positions.
        n: Number of examples.
        num_replicas: World size ``W``.
        rank: This rank, ``0 <= rank < W``.
        drop_last: Cut the tail instead of padding.
        padding: ``"wrap"``, ``"random"`` or ``None``.
        extra_ids: For ``"random"``, the ``total - n`` draws of :func:`random_padding_ids`.
        start: First entry of the rank's list to return.
        stop: One past the last entry (default: the end).

    Example:
        >>> distributed_indices(identity_permutation, 5, 2, 1).tolist()
        [1, 3, 0]
    """
    length = distributed_num_samples(n, num_replicas, rank, drop_last=drop_last, padding=padding)
    start, stop = _slice_bounds(length, start, stop)
    q = rank + num_replicas * np.arange(start, stop, dtype=np.int64)
    total = length * num_replicas if padding == "random" and not drop_last else n
    return distributed_entries(perm, n, q, total=total, extra_ids=extra_ids)


def distributed_entries(
    perm: PermutationFn,
    n: int,
    q: np.ndarray,
    *,
    total: int,
    extra_ids: np.ndarray | None = None,
) -> np.ndarray:
    """Entries at global positions ``q`` of :func:`distributed_indices`' padded list.

    Entry ``q`` is ``perm[q mod n]`` (the list wrapped), except under random
    padding of more than ``n`` entries (``total - n >= n``), where entry
    ``q >= n`` is ``perm[extra_ids[q - n]]``. ``total`` is the padded length
    (only random padding reads it).

    Example:
        >>> distributed_entries(identity_permutation, 5, np.array([4, 5, 6]), total=6).tolist()
        [4, 0, 1]
    """
    q = np.asarray(q, dtype=np.int64)
    shortfall = total - n
    if shortfall >= n:
        out = np.empty(q.shape, dtype=np.int64)
        real = q < n
        out[real] = perm(q[real])
        if extra_ids is None or len(extra_ids) != shortfall:
            raise ConfigError(
                f"must hold {shortfall} ids for padding='random' (total - n), got "
                f"{None if extra_ids is None else len(extra_ids)}",
                argument="extra_ids",
            )
        out[~real] = perm(np.asarray(extra_ids, dtype=np.int64)[q[~real] - n])
        return out
    return perm(q % n)


def repeat_aug_sizes(
    n: int,
    num_replicas: int,
    num_repeats: float,
    selected_round: int = 256,
    selected_ratio: float | None = None,
) -> tuple[int, int, int]:
    """``(num_samples, total_size, num_selected)`` of DeiT's / timm's RA sampler.

    ``num_samples = ceil(n * R / W)`` entries per rank before selection,
    ``total_size = num_samples * W`` the padded list, and ``num_selected`` the
    entries a rank keeps: ``floor(n // selected_round * selected_round / ratio)``
    (``ceil(n / ratio)`` when ``selected_round`` is 0), ``ratio`` defaulting to
    ``W``, never more than ``num_samples``. Integer arguments use exact integer
    arithmetic; float ones follow timm's float expressions.

    Example:
        >>> repeat_aug_sizes(1000, 8, 3)
        (375, 3000, 96)
        >>> repeat_aug_sizes(1000, 8, 3, selected_round=0)
        (375, 3000, 125)
    """
    ratio = num_replicas if selected_ratio is None else selected_ratio
    if float(num_repeats).is_integer():
        num_samples = -(-n * int(num_repeats) // num_replicas)
    else:
        num_samples = math.ceil(n * num_repeats / num_replicas)
    total_size = num_samples * num_replicas
    if selected_round:
        rounded = n // selected_round * selected_round
        if float(ratio).is_integer():
            num_selected = rounded // int(ratio)
        else:
            num_selected = math.floor(rounded / ratio)
    elif float(ratio).is_integer():
        num_selected = -(-n // int(ratio))
    else:
        num_selected = math.ceil(n / ratio)
    return num_samples, total_size, min(num_selected, num_samples)


def repeated_length(n: int, num_repeats: float) -> int:
    """Length of the repeated list before padding: ``ceil(R * n)`` (``R * n`` for integer R).

    Example:
        >>> repeated_length(10, 3), repeated_length(10, 1.5), repeated_length(3, 1.5)
        (30, 15, 5)
    """
    if float(num_repeats).is_integer():
        return n * int(num_repeats)
    return math.ceil(num_repeats * n)


def repeat_aug_indices(
    perm: PermutationFn,
    n: int,
    num_replicas: int,
    rank: int,
    num_repeats: float,
    *,
    start: int = 0,
    stop: int | None = None,
) -> np.ndarray:
    """One rank's indices under DeiT's RASampler / timm's RepeatAugSampler layout.

    Entry ``i`` of the repeated list is ``perm[floor(i / R)]`` for
    ``i < ceil(R * n)``; the list is padded by wrapping to a multiple of
    ``W``; rank ``r`` takes positions ``r, r + W, ...``. The caller bounds the
    result with ``stop`` (the number selected, see :func:`repeat_aug_sizes`);
    without it the rank's whole ``num_samples`` entries are returned.

    Example:
        >>> repeat_aug_indices(identity_permutation, 4, 2, 1, 3).tolist()
        [0, 1, 1, 2, 3, 3]
    """
    num_samples, _, _ = repeat_aug_sizes(n, num_replicas, num_repeats, 0, 1)
    start, stop = _slice_bounds(num_samples, start, stop)
    q = rank + num_replicas * np.arange(start, stop, dtype=np.int64)
    return repeat_aug_entries(perm, n, num_repeats, q)


def repeat_aug_entries(
    perm: PermutationFn, n: int, num_repeats: float, q: np.ndarray
) -> np.ndarray:
    """Entries at global positions ``q`` of :func:`repeat_aug_indices`' repeated, padded list.

    Entry ``q`` is ``perm[floor((q mod ceil(R * n)) / R)]``: the ``R`` copies
    of a sample are consecutive positions.

    Example:
        >>> repeat_aug_entries(identity_permutation, 4, 3, np.array([0, 2, 3, 12])).tolist()
        [0, 0, 1, 0]
    """
    q = np.array(q, dtype=np.int64)
    length = repeated_length(n, num_repeats)
    if q.size and q.max() >= length:
        q %= length
    if float(num_repeats).is_integer():
        pos = q // int(num_repeats)
    else:
        pos = np.floor_divide(q.astype(np.float64), float(num_repeats)).astype(np.int64)
    return perm(pos)


def eval_num_samples(n: int, num_replicas: int, multiple_of: int = 1) -> int:
    """Length of every rank's share in :func:`eval_indices`.

    Example:
        >>> eval_num_samples(10, 4), eval_num_samples(10, 4, multiple_of=2)
        (3, 4)
    """
    per_rank = -(-n // num_replicas)
    return -(-per_rank // multiple_of) * multiple_of


def eval_indices(
    perm: PermutationFn,
    n: int,
    num_replicas: int,
    rank: int,
    *,
    multiple_of: int = 1,
    start: int = 0,
    stop: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """One rank's indices and real-sample mask for exact distributed evaluation.

    The list ``perm`` (the identity for ordered evaluation) is padded by
    wrapping until every rank's share has the same length, a multiple of
    ``multiple_of`` (pass the per-replica batch size to make every batch
    full); rank ``r`` takes positions ``r, r + W, ...``. ``mask`` is True for
    real samples and False for padding, so each real sample has weight 1 on
    exactly one rank.

    Example:
        >>> idx, mask = eval_indices(identity_permutation, 5, 2, 1)
        >>> idx.tolist(), mask.tolist()
        ([1, 3, 0], [True, True, False])
    """
    start, stop = _slice_bounds(eval_num_samples(n, num_replicas, multiple_of), start, stop)
    q = rank + num_replicas * np.arange(start, stop, dtype=np.int64)
    return perm(q % n), q < n
