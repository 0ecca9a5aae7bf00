"""Sampler objects: configuration, epoch, resumable position, and one rank's indices.

This package owns the three samplers of tfdp and their shared API: ``base``
(:class:`Sampler`, the state format), ``distributed`` (:class:`DistributedSampler`),
``repeat_aug`` (:class:`RepeatAugSampler`) and ``evaluation``
(:class:`DistributedEvalSampler`); the index arithmetic lives in
:mod:`tfdp.indices`. Importing it imports NumPy only, never TensorFlow.

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

from tfdp.samplers.base import Sampler
from tfdp.samplers.distributed import DistributedSampler
from tfdp.samplers.evaluation import DistributedEvalSampler
from tfdp.samplers.repeat_aug import RepeatAugSampler

__all__ = ["DistributedEvalSampler", "DistributedSampler", "RepeatAugSampler", "Sampler"]
