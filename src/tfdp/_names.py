"""The on-disk names tfdp's writers and readers agree on, free of TensorFlow.

This module owns file-name conventions that both the TensorFlow-free data-spec
layer (:mod:`tfdp.recipe.dataspec`) and the TFRecord writer/reader
(:mod:`tfdp.sources.tfrecord`) must share, so neither copies them.

Example:
    >>> "train" + MANIFEST_SUFFIX
    'train.manifest.json'
"""

from __future__ import annotations

#: The manifest of ``write_tfrecords(..., prefix=p)`` is ``<out_dir>/<p>.manifest.json``.
MANIFEST_SUFFIX = ".manifest.json"
