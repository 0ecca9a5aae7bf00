"""TFRecord shards: a writer for any source or arrays, and a streaming source for training.

This module owns :func:`write_tfrecords` (source or arrays -> balanced
``tf.train.Example`` shards plus a JSON manifest) and :class:`TFRecordSource`,
a *streaming* source: TFRecord files cannot be read by index, so an epoch is
a stream that ranks read in file-sized pieces, and a sampler says which
records of it each rank keeps.

The stream of an epoch for ``W`` replicas: the files are permuted by a key of
``(seed, epoch)`` and dealt to ``L = min(files, W)`` *lanes* (lane ``j``
reads ``files[perm[j::L]]``, interleaved record by record, then shuffled in
blocks by a key of ``(seed, epoch, j)``); stream index ``s = j + m * L`` is
lane ``j``'s ``m``-th record. Every epoch's stream has the same length,
``stream_length(W) = L * M``, ``M`` the records of the smallest lane the
permutation can make (records past ``M`` in a lane are dropped that epoch).
:class:`tfdp.DistributedInput` runs the ordinary sampler arithmetic on that
length with the identity permutation, so every sampler option -- padding,
``drop_last``, Repeated Augmentation with integer or fractional repeats,
selection -- gives a stream epoch of exactly the length and layout it gives
an array of ``stream_length`` examples: with ``W`` files or more a plain
``DistributedSampler`` rank reads one lane, a Repeated-Augmentation rank
reads the ``R`` lanes holding its copies (the ``R`` copies of a record land
on ``R`` different ranks in nearby steps, as DeiT's do).

The records :func:`write_tfrecords` writes (one ``tf.train.Example`` per
example; the manifest says which encoding each feature uses):

=========  =====================================================================
encoding   what the record holds under the feature's name ``k``
=========  =====================================================================
``png``    ``k``: one PNG (uint8 images ``[H, W]``/``[H, W, C]``, C in 1, 3, 4; sizes may vary)
``jpeg``   ``k``: one JPEG (uint8 ``[H, W]``/``[H, W, C]``, C in 1, 3): an image folder's JPEG file
           byte for byte (the default for a folder of JPEGs), arrays encoded at quality 95
``raw``    ``k``: the array's little-endian bytes; ``k/shape``: its shape (int64 list)
``int64``  ``k``: the values as an int64 list (integers and bools of a fixed shape)
``float``  ``k``: the values as a float list (float16/float32 of a fixed shape)
``bytes``  ``k``: the values as a bytes list (strings of a fixed shape)
=========  =====================================================================

Example:
    >>> import tempfile, numpy as np
    >>> out = tempfile.mkdtemp()
    >>> images = np.zeros((10, 4, 4, 3), np.uint8)
    >>> files = write_tfrecords((images, np.arange(10)), out, num_shards=2)
    >>> src = TFRecordSource(files)  # features and counts from the manifest
    >>> src.num_examples, src.stream_length(num_replicas=2)
    (10, 10)
"""

from __future__ import annotations

from tfdp.sources.tfrecord.manifest import MANIFEST_SUFFIX, read_manifest
from tfdp.sources.tfrecord.stream import TFRecordSource
from tfdp.sources.tfrecord.writer import write_tfrecords

__all__ = [
    "MANIFEST_SUFFIX",
    "TFRecordSource",
    "read_manifest",
    "write_tfrecords",
]
