"""Sources + samplers -> per-replica ``tf.data`` input under any ``tf.distribute`` strategy.

This package owns :class:`DistributedInput`, the one entry point that turns a
source, a sampler configuration, a batch size and an augmentation into a
``tf.distribute.DistributedDataset`` in which the replica of global rank ``r``
receives exactly ``sampler(rank=r).indices()``, in order, batch after batch:
``pipeline`` (:class:`DistributedInput`, and ``make_loader``, the one factory of
its back-end), ``entries`` (each rank's entries -- ids, positions, seeds,
weights -- planned once for every loader), ``loader`` (the Protocol every
back-end meets), ``indexed`` and ``streams`` (the back-ends of a random-access
and of a streaming source; the window path's is :mod:`tfdp.windows.loader`),
``examples`` (what happens to loaded examples: augmentation, batch stages,
weights and ids), ``config`` (the batch size and sampler it is given, checked
against the source and the strategy) and ``agreement`` (the workers'
agreement on a user ``permutation=``).

Example:
    >>> import numpy as np
    >>> from tfdp.sources import ArraySource
    >>> DistributedInput(None, ArraySource(np.arange(64)), batch_size=8).steps_per_epoch
    8
"""

from tfdp.input.pipeline import DistributedInput

__all__ = ["DistributedInput"]
