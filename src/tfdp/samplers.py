"""Sampler objects: configuration, epoch, resumable position, and one rank's indices.

This module owns the three samplers of tfdp and their shared API; the index
arithmetic lives in :mod:`tfdp.indices`. Importing it imports NumPy only,
never TensorFlow.

Every sampler takes ``num_examples``, ``num_replicas`` and ``rank``; has
``set_epoch(epoch)``; ``indices()`` returning this rank's epoch as a 1-D int64
array (``indices(start, stop)`` computes only that slice, O(stop - start));
``__len__``; ``__iter__`` (which resumes from a loaded position); a readable
``__repr__``; and JSON-serialisable ``state_dict()`` / ``load_state_dict()``.

Elastic resume: rank ``r``'s ``k``-th entry is position ``r + k * W`` of the
epoch's *global* list (``global_indices``), so a state stores the global
position reached, and ``load_state_dict(state, allow_world_size_change=True)``
at another world size ``W'`` deals the rest of that epoch's list over the
``W'`` ranks (:meth:`Sampler.follow`): every remaining entry exactly once. The
next epoch follows ``W'``'s own plan.
Every sampler accepts ``permutation=`` -- a callable ``epoch -> permutation of
range(num_examples)`` that replaces the built-in shuffle -- so its output can
be checked element for element against PyTorch given torch's own permutation.
It is called once per epoch per process and its result kept (shared by the
sampler's :meth:`~Sampler.with_rank` and :meth:`~Sampler.replace` copies), so
every rank of a process deals the same list; :meth:`Sampler.permutation_fingerprint`
lets workers compare theirs (``DistributedInput`` does, under several workers).

Example:
    >>> s = RepeatAugSampler(1000, num_replicas=4, rank=1, selected_round=0)
    >>> s.set_epoch(2)
    >>> len(s), s.indices().shape
    (250, (250,))
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import numpy as np

from tfdp import indices as _ix
from tfdp._util import check_int, config_diffs
from tfdp.errors import StateError

__all__ = ["DistributedEvalSampler", "DistributedSampler", "RepeatAugSampler", "Sampler"]

# The state format: "global_position" is the prefix of the epoch's global list consumed, and
# "plan_replicas" the world size whose global list the epoch follows. One version is read.
_STATE_VERSION = 2
_STATE_FIELDS = frozenset(
    {"sampler", "version", "config", "epoch", "position", "global_position", "plan_replicas"}
)
PermutationCallable = Callable[[int], Any]


class _PermutationCache:
    """A user permutation's result for the latest epochs: one call per epoch per process.

    Shared by a sampler and its copies (every rank of a process), and locked, so
    that ranks built on different threads (``tf.data``) deal one list even when
    the callable returns another order at every call (a shared generator).
    """

    KEEP = 3  # epochs kept: the one training, the next one prefetched, the previous one

    def __init__(self, fn: PermutationCallable, n: int) -> None:
        self.fn, self.n = fn, n
        self._lock = threading.Lock()
        self._perms: dict[int, np.ndarray] = {}  # least recently used first

    def get(self, epoch: int) -> np.ndarray:
        with self._lock:
            perm = self._perms.pop(epoch, None)
            if perm is None:
                perm = _ix.validate_permutation(self.fn(epoch), self.n, "permutation(epoch)")
                perm.setflags(write=False)
            self._perms[epoch] = perm
            while len(self._perms) > self.KEEP:
                del self._perms[next(iter(self._perms))]
            return perm


def _is_positive_number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
        return False
    try:
        return math.isfinite(float(value)) and value > 0
    except OverflowError:
        return False


def _plain_number(value: Any) -> int | float:
    """A Python int when integer-valued, else a Python float (JSON-safe, NumPy-free)."""
    return int(value) if float(value).is_integer() else float(value)


class Sampler:
    """The API shared by tfdp's samplers (not instantiated directly).

    Subclasses define ``_length``, :meth:`_compute`, ``_global_entries`` and :meth:`_config`.
    """

    _KIND: ClassVar[str] = "Sampler"

    def __init__(
        self,
        num_examples: int,
        num_replicas: int,
        rank: int,
        *,
        seed: int = 0,
        permutation: PermutationCallable | None = None,
    ) -> None:
        self.num_examples = check_int("num_examples", num_examples, 1, _ix.MAX_EXAMPLES)
        self.num_replicas = check_int("num_replicas", num_replicas, 1)
        self.rank = check_int(
            "rank", rank, 0, self.num_replicas - 1, f" (num_replicas={self.num_replicas})"
        )
        self.seed = check_int("seed", seed, 0, _ix.MAX_SEED, " (an unsigned 64-bit integer)")
        if permutation is not None and not callable(permutation):
            raise ValueError(
                "permutation must be None or a callable (epoch) -> permutation of "
                f"range(num_examples), got {type(permutation).__name__}"
            )
        self.permutation = permutation
        self._perm_cache = (
            None if permutation is None else _PermutationCache(permutation, self.num_examples)
        )
        self.epoch = 0
        self._resume_position = 0
        self._yielded = 0
        # Elastic epoch (see follow): the sampler whose global list this epoch deals, and from
        # which global position; None outside such an epoch.
        self._plan: Sampler | None = None
        self._deal_start = 0

    # -- subclass hooks -------------------------------------------------------
    def _length(self) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    def _global_entries(self, positions: np.ndarray) -> np.ndarray:  # pragma: no cover
        raise NotImplementedError

    def __len__(self) -> int:
        """Entries of this rank in the current epoch (of the dealt rest in an elastic epoch)."""
        if self._plan is not None:
            return len(
                range(self._deal_start + self.rank, self._plan.global_length, self.num_replicas)
            )
        return self._length()

    def _compute(self, start: int, stop: int) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def _config(self) -> dict[str, Any]:
        return {
            "num_examples": self.num_examples,
            "num_replicas": self.num_replicas,
            "seed": self.seed,
            "permutation": "custom" if self.permutation is not None else None,
        }

    @property
    def global_length(self) -> int:
        """Entries of the epoch's global list: all ranks together (padded, or what is kept).

        Example:
            >>> DistributedSampler(10, 4, 0).global_length  # padded to 12
            12
        """
        return self._length() * self.num_replicas

    def global_indices(self, positions: Any) -> np.ndarray:
        """The entries at ``positions`` of the current epoch's global list (this sampler's own).

        Rank ``r``'s entry ``k`` is global position ``r + k * num_replicas``.

        Raises:
            ValueError: for a position outside ``[0, global_length)``.

        Example:
            >>> s = DistributedSampler(10, 4, 0, shuffle=False)
            >>> s.global_indices([0, 5, 10, 11]).tolist()
            [0, 5, 0, 1]
            >>> s.global_indices([1, 5, 9]).tolist() == s.with_rank(1).indices().tolist()
            True
        """
        q = np.asarray(positions, dtype=np.int64).reshape(-1)
        total = self.global_length
        if q.size and (q.min() < 0 or q.max() >= total):
            raise ValueError(
                f"global positions must lie in [0, global_length={total}), got "
                f"{int(q.min())}..{int(q.max())}"
            )
        return self._global_entries(q)

    # -- the permutation of the current epoch --------------------------------
    def _epoch_permutation(self, shuffle: bool = True) -> _ix.PermutationFn:
        if self._perm_cache is not None:
            return _ix.array_permutation(self._perm_cache.get(self.epoch))
        if not shuffle:
            return _ix.identity_permutation
        return _ix.KeyedPermutation(self.num_examples, self.seed, self.epoch)

    def permutation_fingerprint(self, epoch: int | None = None) -> int | None:
        """A 64-bit fingerprint of ``permutation(epoch)``'s result; None without ``permutation=``.

        The permutation is the one this process's ranks deal (computed once per
        epoch and kept), so equal fingerprints on every worker mean every worker
        deals the same list. ``epoch`` defaults to the current one.

        Example:
            >>> s = DistributedSampler(4, 2, 0, permutation=lambda epoch: [3, 1, 0, 2])
            >>> s.permutation_fingerprint() == s.with_rank(1).permutation_fingerprint(0)
            True
            >>> DistributedSampler(4, 2, 0).permutation_fingerprint() is None
            True
        """
        if self._perm_cache is None:
            return None
        epoch = self.epoch if epoch is None else check_int("epoch", epoch, 0, 2**63 - 1)
        digest = hashlib.blake2b(self._perm_cache.get(epoch).tobytes(), digest_size=8).digest()
        return int.from_bytes(digest, "little")

    # -- public API -------------------------------------------------------------
    def with_rank(self, rank: int) -> Sampler:
        """A sampler of the same configuration and epoch for another rank.

        Example:
            >>> DistributedSampler(10, 4, 0, shuffle=False).with_rank(3).indices().tolist()
            [3, 7, 1]
        """
        other = self.replace(rank=rank)
        if self._plan is not None:
            other.follow(self._plan, self._deal_start)
        return other

    @property
    def plan(self) -> Sampler | None:
        """In an elastic epoch (:meth:`follow`), the rank-0 sampler whose list it deals, else None.

        Example:
            >>> DistributedSampler(10, 2, 0).plan is None
            True
        """
        return self._plan

    def follow(self, plan: Sampler, start: int = 0) -> None:
        """Deal the rest of ``plan``'s epoch over this sampler's ranks (an elastic epoch).

        ``plan`` is a sampler of the same kind and configuration at another
        world size (e.g. the one a run was stopped on). From now until the
        epoch changes, rank ``r`` of this sampler's ``W`` takes positions
        ``start + r + k * W`` of ``plan``'s global list for the epoch: the
        ranks together take every position in ``[start, plan.global_length)``
        exactly once. :meth:`indices`, :meth:`positions` (in ``plan``'s list,
        which keys augmentation seeds), ``len`` and :meth:`state_dict` follow
        the deal; :meth:`set_epoch` to another epoch ends it.
        :meth:`load_state_dict` calls this when a state's epoch follows another
        world size.

        Raises:
            StateError: for a plan of another kind or configuration, or a
                ``start`` outside ``[0, plan.global_length]``.

        Example:
            >>> plan = DistributedSampler(12, 2, 0, shuffle=False)  # stopped on 2 replicas
            >>> s = DistributedSampler(12, 3, 1, shuffle=False)
            >>> s.follow(plan, start=6)  # 6 entries consumed: [6, 12) dealt over 3
            >>> s.indices().tolist(), s.positions().tolist()
            ([7, 10], [7, 10])
        """
        diffs = config_diffs(plan._config(), self._config(), ignore=("num_replicas",))
        if type(plan) is not type(self) or diffs:
            raise StateError(
                f"cannot follow a {plan._KIND} of another configuration: "
                + ("; ".join(diffs) or f"kind {plan._KIND} vs {self._KIND}")
            )
        check_int("start", start, 0, plan.global_length, " (a global position of the plan)")
        self.set_epoch(plan.epoch)
        self._plan = plan.replace(rank=0)
        self._deal_start = int(start)
        self._resume_position = 0
        self._yielded = 0

    def replace(self, **changes: Any) -> Sampler:
        """A sampler of the same kind, rank and epoch with some constructor arguments changed.

        Raises:
            ValueError: for an argument this sampler does not take.

        Example:
            >>> s = DistributedSampler(10, 2, 1, seed=3)
            >>> s.replace(shuffle=False).indices().tolist()
            [1, 3, 5, 7, 9]
        """
        kwargs = {**self._config(), "permutation": self.permutation, "rank": self.rank}
        unknown = sorted(set(changes) - set(kwargs))
        if unknown:
            raise ValueError(f"{self._KIND} takes no argument(s) {unknown}")
        kwargs.update(changes)
        other = type(self)(**kwargs)
        if other.permutation is self.permutation and other.num_examples == self.num_examples:
            other._perm_cache = self._perm_cache  # one call of permutation(epoch) for all copies
        other.set_epoch(self.epoch)
        return other

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose order :meth:`indices` returns (reseeds the shuffle).

        Example:
            >>> s = DistributedSampler(10, 2, 0)
            >>> s.set_epoch(1)
            >>> s.epoch
            1
        """
        epoch = check_int("epoch", epoch, 0, 2**63 - 1)
        if epoch != self.epoch:
            self._resume_position = 0
            self._yielded = 0
            self._plan = None  # an elastic epoch ends with it
            self._deal_start = 0
        self.epoch = epoch

    def indices(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """This rank's indices for the current epoch, or entries ``[start, stop)`` of them.

        Only the requested slice is computed. Returns a 1-D int64 array.

        Example:
            >>> s = DistributedSampler(10, 2, 1, shuffle=False)
            >>> s.indices().tolist(), s.indices(1, 3).tolist()
            ([1, 3, 5, 7, 9], [3, 5])
        """
        length = len(self)
        stop = length if stop is None else max(0, min(int(stop), length))
        start = max(0, min(int(start), stop))
        if self._plan is not None:
            return self._plan.global_indices(self.positions(start, stop))
        return self._compute(start, stop)

    def positions(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Positions in the epoch's global (padded) list of the entries :meth:`indices` returns.

        Entry ``k`` of rank ``r`` sits at position ``r + k * num_replicas``; the
        position identifies a sample *copy* uniquely within an epoch (the R
        copies of Repeated Augmentation have distinct positions), which is what
        tfdp keys per-sample augmentation seeds on.

        Example:
            >>> DistributedSampler(10, 4, 2).positions(0, 3).tolist()
            [2, 6, 10]
        """
        length = len(self)
        stop = length if stop is None else max(0, min(int(stop), length))
        start = max(0, min(int(start), stop))
        first = self._deal_start + self.rank
        return first + self.num_replicas * np.arange(start, stop, dtype=np.int64)

    def __iter__(self) -> Iterator[int]:
        """Iterate this rank's epoch as Python ints, from a loaded position onward."""
        start = self._resume_position
        self._resume_position = 0
        self._yielded = start
        chunk = 1 << 16
        for lo in range(start, len(self), chunk):
            for value in self.indices(lo, lo + chunk).tolist():
                self._yielded += 1
                yield value

    def state_dict(self, position: int | None = None) -> dict[str, Any]:
        """A JSON-serialisable state: configuration, epoch and position in the epoch.

        ``position`` counts this rank's entries; the state also holds the
        ``global_position`` they amount to (the prefix of the epoch's global
        list all ranks together consumed) and ``plan_replicas``, the world size
        whose global list the epoch follows (this sampler's own, unless the
        epoch was resumed on another world size: see :meth:`follow`).

        Args:
            position: Entries of this epoch already consumed. Defaults to what
                :meth:`__iter__` has yielded so far (or a loaded position not yet
                iterated).

        Example:
            >>> s = DistributedSampler(10, 2, 0)
            >>> s.set_epoch(3)
            >>> st = s.state_dict(position=2)
            >>> st["epoch"], st["position"], st["global_position"], st["plan_replicas"]
            (3, 2, 4, 2)
        """
        if position is None:
            position = self._yielded or self._resume_position
        limit = -(-(self._plan_list_length() - self._deal_start) // self.num_replicas)
        position = check_int("position", position, 0, max(len(self), limit))
        plan = self._plan if self._plan is not None else self
        return {
            "sampler": self._KIND,
            "version": _STATE_VERSION,
            "config": self._config(),
            "rank": self.rank,
            "epoch": self.epoch,
            "position": position,
            "global_position": min(
                self._deal_start + position * self.num_replicas, self._plan_list_length()
            ),
            "plan_replicas": plan.num_replicas,
        }

    def _plan_list_length(self) -> int:
        """Length of the global list the current epoch follows (the plan's in an elastic one)."""
        return (self._plan if self._plan is not None else self).global_length

    def load_state_dict(
        self, state: dict[str, Any], *, allow_world_size_change: bool = False
    ) -> None:
        """Restore epoch and position from :meth:`state_dict`; the next iteration resumes there.

        A state saved by another rank of the same job loads (every rank shares
        epoch and position). A state from a sampler of another kind or
        configuration is refused. A state saved at another world size
        (``num_replicas``) is refused too unless ``allow_world_size_change``:
        then the rest of the saved epoch's global list is dealt over this
        sampler's ranks (:meth:`follow`), every remaining entry exactly once;
        the next epoch follows this world size's own plan.

        Raises:
            StateError: naming each field that differs, or a malformed state.

        Example:
            >>> a = DistributedSampler(10, 2, 0); a.set_epoch(4)
            >>> b = DistributedSampler(10, 2, 1); b.load_state_dict(a.state_dict(position=1))
            >>> b.epoch, list(b)[:1] == b.indices(1, 2).tolist()
            (4, True)
            >>> c = DistributedSampler(10, 3, 2)  # resumed on 3 replicas
            >>> c.load_state_dict(a.state_dict(position=1), allow_world_size_change=True)
            >>> c.positions().tolist()  # positions 0, 1 were consumed on 2 replicas
            [4, 7]
        """
        if not isinstance(state, dict):
            raise StateError(f"sampler state must be a dict, got {type(state).__name__}")
        if "version" in state and state["version"] != _STATE_VERSION:
            raise StateError(
                f"sampler state version {state['version']!r} is not supported "
                f"(this tfdp reads version {_STATE_VERSION})"
            )
        missing = _STATE_FIELDS - set(state)
        if missing:
            raise StateError(f"sampler state is missing field(s) {sorted(missing)}")
        if state["sampler"] != self._KIND:
            raise StateError(
                f"sampler state was saved by a {state['sampler']}, cannot load into a {self._KIND}"
            )
        theirs = state["config"]
        if not isinstance(theirs, dict):
            raise StateError(f"sampler state's config must be a dict, got {theirs!r}")
        ignore = ("num_replicas",) if allow_world_size_change else ()
        diffs = config_diffs(theirs, self._config(), ignore=ignore)
        if diffs:
            hint = ""
            if any(d.startswith("num_replicas:") for d in diffs):
                hint = (
                    " (to continue the saved epoch at this world size, dealing its rest over "
                    "this sampler's ranks, pass allow_world_size_change=True)"
                )
            raise StateError(
                f"sampler state was saved with another {self._KIND} configuration; "
                "differing field(s): " + "; ".join(diffs) + hint
            )
        saved_w = theirs.get("num_replicas")
        try:
            saved_w = check_int("state['config']['num_replicas']", saved_w, 1)
            plan_w = check_int("state['plan_replicas']", state["plan_replicas"], 1)
            epoch = check_int("state['epoch']", state["epoch"], 0, 2**63 - 1)
        except ValueError as e:
            raise StateError(str(e)) from None
        plan = self if plan_w == self.num_replicas else self.replace(num_replicas=plan_w, rank=0)
        total = plan.global_length
        try:
            # Checked, though the global position is what resumes. Ranks of an uneven sampler
            # (padding=None) differ in length by one: a position saved by a longer rank at its
            # end means "epoch done" for a shorter one.
            check_int("state['position']", state["position"], 0, -(-total // saved_w))
            reached = check_int("state['global_position']", state["global_position"], 0, total)
        except ValueError as e:
            raise StateError(str(e)) from None
        self._plan, self._deal_start = None, 0
        self.set_epoch(epoch)
        w = self.num_replicas
        if reached == 0:  # nothing consumed: the epoch follows this world size's own plan
            self._resume_position = 0
        elif plan is self and (reached % w == 0 or reached >= total):
            self._resume_position = min(-(-reached // w), len(self))  # this world size's list
        else:
            plan.set_epoch(epoch)
            self.follow(plan, reached)
        self._yielded = 0

    def __repr__(self) -> str:
        cfg = {k: v for k, v in self._config().items() if k not in ("num_examples",)}
        args = ", ".join(f"{k}={v!r}" for k, v in cfg.items() if v is not None)
        return (
            f"{self._KIND}(num_examples={self.num_examples}, rank={self.rank}, {args}, "
            f"epoch={self.epoch}, len={len(self)})"
        )


class DistributedSampler(Sampler):
    """``torch.utils.data.DistributedSampler``, exactly, plus the make_even variants.

    The epoch's order is a permutation keyed by ``(seed, epoch)``. Without
    ``drop_last`` the list is padded to a multiple of ``num_replicas``:
    ``padding="wrap"`` (torch's) repeats its head as often as needed;
    ``padding="random"`` (make_even) wraps when the shortfall is below
    ``num_examples`` and otherwise appends random extra indices drawn from the
    epoch's seeded generator, so every rank agrees; ``padding=None`` leaves
    ranks uneven by at most one. With ``drop_last`` the tail is cut to a
    multiple (``padding`` is then irrelevant). Rank ``r`` takes positions
    ``r, r + W, ...``.

    Args:
        num_examples: Size of the data set.
        num_replicas: World size (total replicas over all workers).
        rank: This replica's global rank.
        shuffle: Shuffle each epoch; False gives ``range(num_examples)`` order.
        seed: Unsigned 64-bit seed; with the epoch it keys the shuffle.
        drop_last: Drop the tail instead of padding.
        padding: ``"wrap"``, ``"random"`` or ``None``.
        permutation: Optional ``epoch -> permutation`` replacing the shuffle.

    Example:
        >>> s = DistributedSampler(10, num_replicas=4, rank=3, shuffle=False)
        >>> s.indices().tolist()
        [3, 7, 1]
        >>> DistributedSampler(10, 4, 3, shuffle=False, drop_last=True).indices().tolist()
        [3, 7]
    """

    _KIND = "DistributedSampler"
    PADDINGS = ("wrap", "random", None)

    def __init__(
        self,
        num_examples: int,
        num_replicas: int,
        rank: int,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        padding: str | None = "wrap",
        *,
        permutation: PermutationCallable | None = None,
    ) -> None:
        super().__init__(num_examples, num_replicas, rank, seed=seed, permutation=permutation)
        if padding not in self.PADDINGS:
            raise ValueError(f"padding must be one of 'wrap', 'random' or None, got {padding!r}")
        if drop_last and self.num_examples < self.num_replicas:
            raise ValueError(
                f"drop_last=True with num_examples={self.num_examples} < "
                f"num_replicas={self.num_replicas} would give every rank an empty epoch; "
                "use drop_last=False or fewer replicas"
            )
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        self.padding = padding
        self._len = _ix.distributed_num_samples(
            self.num_examples,
            self.num_replicas,
            self.rank,
            drop_last=self.drop_last,
            padding=self.padding,
        )

    def _config(self) -> dict[str, Any]:
        return {
            **super()._config(),
            "shuffle": self.shuffle,
            "drop_last": self.drop_last,
            "padding": self.padding,
        }

    def _length(self) -> int:
        return self._len

    @property
    def global_length(self) -> int:  # noqa: D102 - Sampler.global_length
        return self.total_size

    @property
    def total_size(self) -> int:
        """Length of the global list after padding or dropping (all ranks together)."""
        if self.padding is None and not self.drop_last:
            return self.num_examples
        return self._len * self.num_replicas

    def _compute(self, start: int, stop: int) -> np.ndarray:
        perm = self._epoch_permutation(self.shuffle)
        extra = None
        shortfall = self.total_size - self.num_examples
        if self.padding == "random" and not self.drop_last and shortfall >= self.num_examples:
            extra = _ix.random_padding_ids(self.num_examples, shortfall, self.seed, self.epoch)
        return _ix.distributed_indices(
            perm,
            self.num_examples,
            self.num_replicas,
            self.rank,
            drop_last=self.drop_last,
            padding=self.padding,
            extra_ids=extra,
            start=start,
            stop=stop,
        )

    def _global_entries(self, positions: np.ndarray) -> np.ndarray:
        perm = self._epoch_permutation(self.shuffle)
        shortfall = self.total_size - self.num_examples
        random_pad = self.padding == "random" and not self.drop_last
        extra = None
        if random_pad and shortfall >= self.num_examples:
            extra = _ix.random_padding_ids(self.num_examples, shortfall, self.seed, self.epoch)
        total = self.total_size if random_pad else self.num_examples
        return _ix.distributed_entries(
            perm, self.num_examples, positions, total=total, extra_ids=extra
        )


class RepeatAugSampler(Sampler):
    """Repeated Augmentation: DeiT's ``RASampler`` and timm's ``RepeatAugSampler``.

    Each permuted index is repeated ``num_repeats`` times in a row (timm's
    non-integer repeats too: entry ``i`` is ``perm[floor(i / R)]`` for
    ``i < ceil(R * N)``), the list is padded by wrapping to a multiple of
    ``num_replicas``, rank ``r`` takes positions ``r, r + W, ...`` -- so with
    ``W >= R`` the copies of a sample land on different ranks in the same
    step -- and keeps the first
    ``floor(N // selected_round * selected_round / selected_ratio)`` of them
    (``ceil(N / selected_ratio)`` when ``selected_round=0``; the ratio defaults
    to ``num_replicas``). Unlike DeiT and timm, whose order depends on the
    epoch alone, ``seed`` keys the order too.

    Args:
        num_examples: Size of the data set.
        num_replicas: World size.
        rank: This replica's global rank.
        num_repeats: Copies of each sample per epoch (``>= 1``, may be fractional).
        shuffle: Shuffle each epoch.
        seed: Unsigned 64-bit seed.
        selected_round: Round the selected count down to multiples of this
            (DeiT: 256); 0 disables rounding.
        selected_ratio: Divide the data set size by this to get the per-rank
            count (default: ``num_replicas``).
        permutation: Optional ``epoch -> permutation`` replacing the shuffle.

    Raises:
        ValueError: for bad arguments, and when an epoch would select no sample
            (DeiT's ``N < 256``), naming the fix.

    Example:
        >>> s = RepeatAugSampler(8, num_replicas=3, rank=0, shuffle=False, selected_round=0)
        >>> s.indices().tolist()
        [0, 1, 2]
    """

    _KIND = "RepeatAugSampler"

    def __init__(
        self,
        num_examples: int,
        num_replicas: int,
        rank: int,
        num_repeats: float = 3,
        shuffle: bool = True,
        seed: int = 0,
        selected_round: int = 256,
        selected_ratio: float | None = None,
        *,
        permutation: PermutationCallable | None = None,
    ) -> None:
        super().__init__(num_examples, num_replicas, rank, seed=seed, permutation=permutation)
        if not _is_positive_number(num_repeats) or num_repeats < 1:
            raise ValueError(f"num_repeats must be a finite number >= 1, got {num_repeats!r}")
        self.selected_round = check_int("selected_round", selected_round, 0)
        if selected_ratio is not None and not _is_positive_number(selected_ratio):
            raise ValueError(
                "selected_ratio must be None (num_replicas) or a number > 0, "
                f"got {selected_ratio!r}"
            )
        self.num_repeats = _plain_number(num_repeats)
        self.selected_ratio = None if selected_ratio is None else _plain_number(selected_ratio)
        if self.selected_ratio is not None and not math.isfinite(
            self.num_examples / self.selected_ratio
        ):
            raise ValueError(
                f"selected_ratio={selected_ratio!r} is too small: num_examples / selected_ratio "
                "must be finite"
            )
        self.shuffle = bool(shuffle)
        self.num_samples, self.total_size, self.num_selected = _ix.repeat_aug_sizes(
            self.num_examples,
            self.num_replicas,
            self.num_repeats,
            self.selected_round,
            self.selected_ratio,
        )
        if self.num_selected < 1:
            ratio = self.num_replicas if selected_ratio is None else selected_ratio
            raise ValueError(
                f"RepeatAugSampler would select no sample per epoch: num_examples="
                f"{self.num_examples} // selected_round={self.selected_round} * "
                f"{self.selected_round} / selected_ratio={ratio} < 1. Pass a smaller "
                f"selected_round (at most {self.num_examples}, e.g. selected_round=0 to keep "
                f"ceil(num_examples / selected_ratio))"
            )

    def _config(self) -> dict[str, Any]:
        return {
            **super()._config(),
            "num_repeats": self.num_repeats,
            "shuffle": self.shuffle,
            "selected_round": self.selected_round,
            "selected_ratio": self.selected_ratio,
        }

    def _length(self) -> int:
        return self.num_selected

    def _global_entries(self, positions: np.ndarray) -> np.ndarray:
        perm = self._epoch_permutation(self.shuffle)
        return _ix.repeat_aug_entries(perm, self.num_examples, self.num_repeats, positions)

    def _compute(self, start: int, stop: int) -> np.ndarray:
        perm = self._epoch_permutation(self.shuffle)
        return _ix.repeat_aug_indices(
            perm,
            self.num_examples,
            self.num_replicas,
            self.rank,
            self.num_repeats,
            start=start,
            stop=stop,
        )


class DistributedEvalSampler(Sampler):
    """Exact distributed evaluation: equal-length ranks plus a mask of the padding.

    Pads ``range(num_examples)`` by wrapping like
    ``DistributedSampler(shuffle=False)`` so every replica runs the same number
    of steps (optionally to a multiple of ``multiple_of``, e.g. the per-replica
    batch size, so every batch is full), and :meth:`mask` says which entries
    are real. Weighting padding 0 makes distributed metrics equal to a
    single-device pass over the whole set -- unlike timm's
    ``OrderedDistributedSampler``, whose padding counts twice.

    Args:
        num_examples: Size of the evaluation set.
        num_replicas: World size.
        rank: This replica's global rank.
        multiple_of: Pad each rank's share to a multiple of this (default 1).
        permutation: Optional ``epoch -> permutation`` (default: the identity).

    Example:
        >>> s = DistributedEvalSampler(5, num_replicas=2, rank=1)
        >>> s.indices().tolist(), s.mask().tolist()
        ([1, 3, 0], [True, True, False])
    """

    _KIND = "DistributedEvalSampler"

    def __init__(
        self,
        num_examples: int,
        num_replicas: int,
        rank: int,
        multiple_of: int = 1,
        *,
        permutation: PermutationCallable | None = None,
    ) -> None:
        super().__init__(num_examples, num_replicas, rank, permutation=permutation)
        self.multiple_of = check_int("multiple_of", multiple_of, 1)
        self._len = _ix.eval_num_samples(self.num_examples, self.num_replicas, self.multiple_of)

    def _config(self) -> dict[str, Any]:
        cfg = super()._config()
        cfg.pop("seed")
        return {**cfg, "multiple_of": self.multiple_of}

    def _length(self) -> int:
        return self._len

    def _global_entries(self, positions: np.ndarray) -> np.ndarray:
        return self._epoch_permutation(shuffle=False)(positions % self.num_examples)

    def _compute(self, start: int, stop: int) -> np.ndarray:
        return self.indices_and_mask(start, stop)[0]

    def follow(self, plan: Sampler, start: int = 0) -> None:
        """Refused: exact evaluation has no position to continue, it runs whole at any world size.

        Raises:
            StateError: always.

        Example:
            >>> DistributedEvalSampler(4, 2, 0).follow(DistributedEvalSampler(4, 1, 0))
            Traceback (most recent call last):
            ...
            tfdp.errors.StateError: a DistributedEvalSampler has no position to continue: exact evaluation runs whole at any world size
        """  # noqa: E501
        raise StateError(
            "a DistributedEvalSampler has no position to continue: exact evaluation "
            "runs whole at any world size"
        )

    def indices_and_mask(
        self, start: int = 0, stop: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`indices` and :meth:`mask` together, computed once.

        Example:
            >>> idx, mask = DistributedEvalSampler(3, 2, 1).indices_and_mask()
            >>> idx.tolist(), mask.tolist()
            ([1, 0], [True, False])
        """
        return _ix.eval_indices(
            self._epoch_permutation(shuffle=False),
            self.num_examples,
            self.num_replicas,
            self.rank,
            multiple_of=self.multiple_of,
            start=start,
            stop=stop,
        )

    def mask(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """True where the entry is a real sample, False where it is padding.

        Example:
            >>> DistributedEvalSampler(3, 2, 1).mask().tolist()
            [True, False]
        """
        return self.positions(start, stop) < self.num_examples

    def weights(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """:meth:`mask` as float32 sample weights (1 real, 0 padding).

        Example:
            >>> DistributedEvalSampler(3, 2, 1).weights().tolist()
            [1.0, 0.0]
        """
        return self.mask(start, stop).astype(np.float32)
