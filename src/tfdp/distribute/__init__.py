"""Strategy choice and strategy facts: TF_CONFIG, Slurm, logical CPUs; who this process is.

This package owns picking and building the strategy (:func:`make_strategy`,
in :mod:`~tfdp.distribute.strategy`), TF_CONFIG validated by
:func:`parse_tf_config` (:mod:`~tfdp.distribute.tf_config`, pure Python), the
questions every other part asks of a strategy -- how many workers, which one
is this, is it the chief -- (:func:`worker_info`, :mod:`~tfdp.distribute.cluster`)
the start-up watchdog process (:mod:`~tfdp.distribute.watchdog`, run as
``python -m tfdp.distribute.watchdog``) and the reading of a lost peer from
TensorFlow's error (:mod:`~tfdp.distribute.faults`, pure Python). Names load lazily: importing the
package (as the watchdog process does) loads no TensorFlow.

Example:
    >>> import tensorflow as tf
    >>> from tfdp.distribute import worker_info
    >>> info = worker_info(tf.distribute.get_strategy())
    >>> info.is_chief, info.num_workers, info.num_replicas
    (True, 1, 1)
"""

from __future__ import annotations

from tfdp._lazy import lazy_names

__all__ = [
    "STRATEGY_KINDS",
    "WorkerInfo",
    "make_strategy",
    "parse_tf_config",
    "resolver_role",
    "worker_info",
]

_LAZY = {
    "STRATEGY_KINDS": "tfdp.distribute.strategy",
    "make_strategy": "tfdp.distribute.strategy",
    "WorkerInfo": "tfdp.distribute.cluster",
    "resolver_role": "tfdp.distribute.cluster",
    "worker_info": "tfdp.distribute.cluster",
    "parse_tf_config": "tfdp.distribute.tf_config",
}

__getattr__, __dir__ = lazy_names(__name__, _LAZY)
