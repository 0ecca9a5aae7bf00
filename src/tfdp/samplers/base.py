"""The API every sampler shares: configuration, epoch, resumable position, elastic deal.

This module owns :class:`Sampler` -- what tfdp's samplers have in common (see
:mod:`tfdp.samplers` for the API and elastic resume) -- and the one state
format they save (``state_dict`` / ``load_state_dict``). A sampler says how an
epoch's global list is built by overriding its hooks (``_length``,
``_compute``, ``_global_entries``, ``_config``). NumPy only.

Example:
    >>> from tfdp.samplers import DistributedSampler
    >>> s = DistributedSampler(10, 2, 0)
    >>> s.set_epoch(1)
    >>> s.state_dict(position=2)["global_position"]
    4
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import numpy as np

from tfdp import indices as _ix
from tfdp._util import check_int, config_diffs
from tfdp.errors import ConfigError, ConfigTypeError, StateError

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
                perm = _ix.validate_permutation(self.fn(epoch), self.n)
                perm.setflags(write=False)
            self._perms[epoch] = perm
            while len(self._perms) > self.KEEP:
                del self._perms[next(iter(self._perms))]
            return perm


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
            raise ConfigTypeError(
                "must be None or a callable (epoch) -> permutation of "
                f"range(num_examples), got {type(permutation).__name__}",
                argument="permutation",
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
            >>> from tfdp.samplers import DistributedSampler
            >>> DistributedSampler(10, 4, 0).global_length  # padded to 12
            12
        """
        return self._length() * self.num_replicas

    def global_indices(self, positions: Any) -> np.ndarray:
        """The entries at ``positions`` of the current epoch's global list (this sampler's own).

        Rank ``r``'s entry ``k`` is global position ``r + k * num_replicas``.

        Raises:
            tfdp.errors.ConfigError: for a position outside ``[0, global_length)``.

        Example:
            >>> from tfdp.samplers import DistributedSampler
            >>> s = DistributedSampler(10, 4, 0, shuffle=False)
            >>> s.global_indices([0, 5, 10, 11]).tolist()
            [0, 5, 0, 1]
            >>> s.global_indices([1, 5, 9]).tolist() == s.with_rank(1).indices().tolist()
            True
        """
        q = np.asarray(positions, dtype=np.int64).reshape(-1)
        total = self.global_length
        if q.size and (q.min() < 0 or q.max() >= total):
            raise ConfigError(
                f"must lie in [0, global_length={total}), got {int(q.min())}..{int(q.max())}",
                argument="positions",
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
            >>> from tfdp.samplers import DistributedSampler
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
            >>> from tfdp.samplers import DistributedSampler
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
            >>> from tfdp.samplers import DistributedSampler
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
            StateError: for a plan of another kind or configuration.
            ConfigError: for a ``start`` outside ``[0, plan.global_length]``.

        Example:
            >>> from tfdp.samplers import DistributedSampler
            >>> plan = DistributedSampler(12, 2, 0, shuffle=False)  # stopped on 2 replicas
            >>> s = DistributedSampler(12, 3, 1, shuffle=False)
            >>> s.follow(plan, start=6)  # 6 entries consumed: [6, 12) dealt over 3
            >>> s.indices().tolist(), s.positions().tolist()
            ([7, 10], [7, 10])
        """
        diffs = config_diffs(plan._config(), self._config(), ignore=("num_replicas",))
        if type(plan) is not type(self) or diffs:
            raise StateError(
                f"must be a {self._KIND} of this configuration (num_replicas aside), got "
                f"a {plan._KIND} of another: "
                + ("; ".join(diffs) or f"kind {plan._KIND} vs {self._KIND}"),
                argument="plan",
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
            tfdp.errors.ConfigError: for an argument this sampler does not take.

        Example:
            >>> from tfdp.samplers import DistributedSampler
            >>> s = DistributedSampler(10, 2, 1, seed=3)
            >>> s.replace(shuffle=False).indices().tolist()
            [1, 3, 5, 7, 9]
        """
        kwargs = {**self._config(), "permutation": self.permutation, "rank": self.rank}
        unknown = sorted(set(changes) - set(kwargs))
        if unknown:
            raise ConfigError(
                f"{self._KIND} takes no argument(s) {unknown}; it takes {sorted(kwargs)}",
                argument=unknown[0],
            )
        kwargs.update(changes)
        other = type(self)(**kwargs)
        if other.permutation is self.permutation and other.num_examples == self.num_examples:
            other._perm_cache = self._perm_cache  # one call of permutation(epoch) for all copies
        other.set_epoch(self.epoch)
        return other

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose order :meth:`indices` returns (reseeds the shuffle).

        Example:
            >>> from tfdp.samplers import DistributedSampler
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
            >>> from tfdp.samplers import DistributedSampler
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
            >>> from tfdp.samplers import DistributedSampler
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
            >>> from tfdp.samplers import DistributedSampler
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
            >>> from tfdp.samplers import DistributedSampler
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
            raise StateError(f"sampler {e}") from None
        plan = self if plan_w == self.num_replicas else self.replace(num_replicas=plan_w, rank=0)
        total = plan.global_length
        try:
            # Checked, though the global position is what resumes. Ranks of an uneven sampler
            # (padding=None) differ in length by one: a position saved by a longer rank at its
            # end means "epoch done" for a shorter one.
            check_int("state['position']", state["position"], 0, -(-total // saved_w))
            reached = check_int("state['global_position']", state["global_position"], 0, total)
        except ValueError as e:
            raise StateError(f"sampler {e}") from None
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
