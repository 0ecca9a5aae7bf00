"""tfdp: synchronous data-parallel training for TensorFlow 2 / Keras 3 on tf.distribute.

This module owns tfdp's public API. The samplers are plain NumPy and load
eagerly; everything that needs TensorFlow is imported on first use, so
``import tfdp`` (and the samplers) never pulls TensorFlow in.

Example:
    >>> import tfdp
    >>> tfdp.RepeatAugSampler(1024, num_replicas=4, rank=0).indices().shape
    (256,)
"""

from __future__ import annotations

from tfdp._lazy import lazy_names
from tfdp.samplers import DistributedEvalSampler, DistributedSampler, RepeatAugSampler, Sampler

__version__ = "0.1.0"

# Public names that live in modules importing TensorFlow: loaded on first access.
_LAZY: dict[str, str] = {
    "DistributedInput": "tfdp.input",
    "ArraySource": "tfdp.sources.arrays",
    "ImageFolderSource": "tfdp.sources.image_folder",
    "TFRecordSource": "tfdp.sources.tfrecord",
    "write_tfrecords": "tfdp.sources.tfrecord",
    "TorchAdam": "tfdp.optim",
    "TorchAdamW": "tfdp.optim",
    "TorchSGD": "tfdp.optim",
    "TimmCosine": "tfdp.optim",
}
# Its modules and packages, reachable as attributes (``tfdp.augment.RandomCrop``) on first access.
_SUBMODULES = {
    "augment",
    "checkpoint",
    "cli",
    "distribute",
    "elastic",
    "errors",
    "indices",
    "input",
    "launch",
    "losses",
    "models",
    "optim",
    "random",
    "recipe",
    "samplers",
    "seeding",
    "sources",
    "train",
    "windows",
}

__all__ = [
    "DistributedEvalSampler",
    "DistributedSampler",
    "RepeatAugSampler",
    "Sampler",
    "__version__",
    *_LAZY,
]

__getattr__, __dir__ = lazy_names(__name__, _LAZY, _SUBMODULES)
