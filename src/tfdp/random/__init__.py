"""Per-sample randomness: counter-based draws from each sample's own seed.

This package owns how an augmentation turns a sample's seed into random
numbers. The seed of a sample is ``[key, position]``: ``key`` is
:func:`tfdp.seeding.epoch_seed_key` of the run's seed and the epoch (every
derivation of a run's keys lives in :mod:`tfdp.seeding`), ``position`` the
entry's place in the sampler's padded global list, so the copies of a sample
under Repeated Augmentation differ and a rerun or a resumed run draws alike.
The framework hands the seeds in (as Grain and Keras 3's stateless layers
do); nothing here holds state.

=========================  ===============================================================
module                     owns
=========================  ===============================================================
``counter_hash``           MurmurHash3 of ``(seed words, counter)``, written once for
                           TensorFlow and NumPy (``tfdp._arrays``): the same bits
``draws``                  :func:`sample_seeds` (``[key, position]``), :func:`as_seeds`,
                           :func:`per_sample_uniform`, :func:`fold_in`, :func:`uniform_int`,
                           :func:`folded_uniforms` (several streams at once, on the host
                           with ``on_host``)
=========================  ===============================================================

Every random decision for sample ``b`` is a function of ``seeds[b]`` only:
augmenting a batch equals augmenting each sample alone.

Example:
    >>> import tensorflow as tf
    >>> seeds = tf.constant([[5, 0], [5, 1]], tf.int64)
    >>> u = per_sample_uniform(seeds, 4)
    >>> bool(tf.reduce_all(per_sample_uniform(seeds[1:], 2) == u[1:, :2]))
    True
"""

from __future__ import annotations

from tfdp.random.draws import (
    as_seeds,
    fold_in,
    folded_uniforms,
    per_sample_uniform,
    sample_seeds,
    uniform_int,
)

__all__ = [
    "as_seeds",
    "fold_in",
    "folded_uniforms",
    "per_sample_uniform",
    "sample_seeds",
    "uniform_int",
]
