"""The contracts of the sources: what a source must offer the input layer, as Protocols.

This module owns the interfaces :class:`tfdp.DistributedInput`,
:func:`tfdp.sources.write_tfrecords` and the Trainer dispatch a source on. Each is a
``typing.Protocol`` (``runtime_checkable``, so ``isinstance`` says which
contract an object meets); a source needs no base class, only the members.

=====================  ======================================================================
Protocol               members (what the input layer does with them)
=====================  ======================================================================
RandomAccessSource     ``num_examples``, ``element_spec``, ``load(index)``: the sampler picks
                       indices, ``load`` reads one inside the graph (scalar int64 in)
BatchSource            + ``gather(indices)``: a whole batch at once (``ArraySource``)
WeightedSource         + ``load_with_weight(index) -> (example, weight)``: weight 0 marks a
                       placeholder for an unreadable file (``ImageFolderSource``)
EncodedImageSource     ``jpeg_files``, ``load_encoded(index)``: the image files as they are,
                       which ``write_tfrecords`` stores byte for byte
PathSource             ``path(index)``: the file behind an example (named in errors)
SkipReportingSource    ``skipped_files()``, ``report()``: unreadable files skipped so far
StreamingSource        ``num_examples``, ``element_spec``, ``stream_length(num_replicas)``,
                       ``stream(indices, *, num_replicas, seed, epoch, shuffle)``: no random
                       access; the sampler picks positions in an epoch's stream
                       (``TFRecordSource``)
=====================  ======================================================================

A source that can decode only the window each sample keeps (a JPEG image
folder) also meets :class:`tfdp.windows.contract.WindowSource`; the
augmentations' contracts are :mod:`tfdp.augment.contract`'s.

A random-access source may also declare ``streaming = False`` and a
streaming one ``streaming = True`` (informative: the dispatch is on the
methods above). This module imports no TensorFlow.

Example:
    >>> import numpy as np
    >>> from tfdp.sources import ArraySource
    >>> src = ArraySource(np.arange(4))
    >>> isinstance(src, RandomAccessSource), isinstance(src, BatchSource)
    (True, True)
    >>> isinstance(src, StreamingSource), isinstance(src, WeightedSource)
    (False, False)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:  # pragma: no cover - annotations only
    import tensorflow as tf

__all__ = [
    "BatchSource",
    "EncodedImageSource",
    "PathSource",
    "RandomAccessSource",
    "SkipReportingSource",
    "StreamingSource",
    "WeightedSource",
]


@runtime_checkable
class RandomAccessSource(Protocol):
    """Examples read by index: the sampler chooses the indices.

    ``load(index)`` must be graph-compatible (it runs in ``tf.data.Dataset.map``
    with a scalar int64 ``index``) and return one example whose structure and
    dtypes match ``element_spec``.

    Example:
        >>> import numpy as np
        >>> from tfdp.sources import ArraySource
        >>> isinstance(ArraySource(np.zeros((3, 2))), RandomAccessSource)
        True
    """

    num_examples: int
    element_spec: Any

    def load(self, index: Any) -> Any:
        """Example ``index`` (a scalar int64 tensor), inside the graph."""
        ...


@runtime_checkable
class BatchSource(RandomAccessSource, Protocol):
    """A random-access source that fetches a whole batch at once (``gather``).

    :class:`tfdp.DistributedInput` uses ``gather`` when there is no
    augmentation or a batched one; a per-example augmentation takes ``load``.

    Example:
        >>> import numpy as np
        >>> from tfdp.sources import ArraySource
        >>> ArraySource(np.arange(5)).gather([4, 0]).numpy().tolist()
        [4, 0]
    """

    def gather(self, indices: Any) -> Any:
        """The examples at ``indices`` (int64 ``[B]``), batched."""
        ...


@runtime_checkable
class WeightedSource(RandomAccessSource, Protocol):
    """A random-access source that can mark an example as a placeholder (weight 0).

    The input layer multiplies the sample weight by it, so a skipped
    unreadable file counts for nothing while every rank keeps its step count.

    Example:
        >>> import os, tempfile
        >>> from tfdp.sources import ImageFolderSource
        >>> root = tempfile.mkdtemp(); os.makedirs(os.path.join(root, "a"))
        >>> open(os.path.join(root, "a", "1.png"), "wb").close()
        >>> isinstance(ImageFolderSource(root, on_error="skip"), WeightedSource)
        True
    """

    def load_with_weight(self, index: Any) -> tuple[Any, Any]:
        """``(example, weight)``: weight float32, 0.0 for a placeholder, else 1.0."""
        ...


@runtime_checkable
class EncodedImageSource(Protocol):
    """A source that can hand over its images' files as they are (e.g. an image folder).

    ``jpeg_files`` says whether every file is a JPEG (by name); ``load_encoded(i)``
    returns ``(example, problem)``: example ``i`` with its image replaced by
    the file's bytes, and ``""`` when those bytes are a sound JPEG, else why
    not. :func:`tfdp.sources.write_tfrecords` then stores the files byte for
    byte (encoding ``"jpeg"``), which a window stage decodes window by window.

    Example:
        >>> import numpy as np
        >>> from tfdp.sources import ArraySource
        >>> isinstance(ArraySource(np.zeros((2, 4, 4, 3))), EncodedImageSource)
        False
    """

    jpeg_files: bool

    def load_encoded(self, index: Any) -> tuple[Any, Any]:
        """Example ``index`` with the image's file bytes, and the problem (``""``: none)."""
        ...


@runtime_checkable
class PathSource(Protocol):
    """A source whose examples are files: ``path(index)`` names the one behind an example.

    Example:
        >>> import numpy as np
        >>> from tfdp.sources import ArraySource
        >>> isinstance(ArraySource(np.zeros(2)), PathSource)
        False
    """

    def path(self, index: int) -> str:
        """The file of example ``index``."""
        ...


@runtime_checkable
class SkipReportingSource(Protocol):
    """A source that skips unreadable files (weight 0) and can say which it skipped.

    Example:
        >>> import os, tempfile
        >>> from tfdp.sources import ImageFolderSource
        >>> root = tempfile.mkdtemp(); os.makedirs(os.path.join(root, "a"))
        >>> open(os.path.join(root, "a", "1.png"), "wb").close()
        >>> src = ImageFolderSource(root, on_error="skip")
        >>> isinstance(src, SkipReportingSource), src.skipped_files()
        (True, [])
    """

    def skipped_files(self) -> list[str]:
        """Paths of the files skipped so far in this process."""
        ...

    def report(self) -> str:
        """One line about the files skipped so far."""
        ...


@runtime_checkable
class StreamingSource(Protocol):
    """Examples read as a stream (no random access): an epoch is a stream of records.

    ``stream_length(num_replicas)`` is the number of records of every epoch's
    stream; ``stream(indices, num_replicas=, seed=, epoch=, shuffle=)`` yields
    the examples at those stream positions, in that order (repeats allowed).
    :class:`tfdp.DistributedInput` runs the sampler's arithmetic on
    ``stream_length`` records with the identity permutation and hands each
    rank's positions to ``stream``; the source does the shuffling (keyed by
    ``seed`` and ``epoch``) when ``shuffle`` is on.

    Example:
        >>> import tempfile, numpy as np
        >>> from tfdp.sources import ArraySource, TFRecordSource, write_tfrecords
        >>> files = write_tfrecords(np.zeros((4, 1), "float32"), tempfile.mkdtemp(), num_shards=2)
        >>> isinstance(TFRecordSource(files), StreamingSource)
        True
        >>> isinstance(ArraySource(np.zeros(4)), StreamingSource)
        False
    """

    num_examples: int
    element_spec: Any

    def stream_length(self, num_replicas: int) -> int:
        """Records of every epoch's stream for ``num_replicas`` replicas."""
        ...

    def stream(
        self,
        indices: Any,
        *,
        num_replicas: int,
        seed: int = 0,
        epoch: Any = 0,
        shuffle: bool = True,
    ) -> tf.data.Dataset:
        """The examples at stream positions ``indices`` of ``epoch``, in order."""
        ...
