"""Image folders in the ImageNet layout ``root/<class>/<image>``, read by index inside the graph.

This module owns :class:`ImageFolderSource`: the file list (built once, with
``os.scandir``), the class ids, a graph-compatible ``load(index)`` that
reads and decodes one file with TensorFlow ops -- no per-sample Python --
and ``load_windows(indices, request)``, which decodes only the window each
sample's augmentation keeps (see :mod:`tfdp.windows`).

Order and class ids match ``torchvision.datasets.ImageFolder``
(:mod:`tfdp.sources.folder_listing`): index ``i`` is the same image as
``torchvision``'s ``dataset.samples[i]``.

TensorFlow's decoders do not name the file they fail on, so ``load`` checks
the bytes inside the graph before decoding (:mod:`tfdp.sources.image_bytes`)
and raises an error whose message names the path. With ``on_error="skip"``
such a file yields a placeholder image with weight 0 instead (see
:meth:`ImageFolderSource.load_with_weight`), so the number of samples -- and
every rank's step count -- never changes.

Limits: damage deep inside the compressed data that only the decoder notices
raises TensorFlow's own decode error, which does not name the file (find
such files once with :meth:`ImageFolderSource.find_bad_files`); a file that
cannot be *opened* (deleted after construction, no permission) raises
TensorFlow's ``NotFoundError``/``PermissionDeniedError``, which names the
path, in both modes -- a failed read cannot be caught inside a graph.

Example:
    >>> import os, tempfile, tensorflow as tf
    >>> root = tempfile.mkdtemp()
    >>> for cls in ("cat", "dog"):
    ...     os.makedirs(os.path.join(root, cls))
    ...     png = tf.io.encode_png(tf.zeros([4, 6, 3], tf.uint8))
    ...     tf.io.write_file(os.path.join(root, cls, "a.png"), png)
    >>> src = ImageFolderSource(root)
    >>> src.classes, src.num_examples
    (['cat', 'dog'], 2)
    >>> image, label = src.load(1)
    >>> image.shape, int(label)
    (TensorShape([4, 6, 3]), 1)
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from functools import cached_property
from typing import Any

import numpy as np
import tensorflow as tf

from tfdp._autograph import plain
from tfdp.errors import ConfigError
from tfdp.sources.folder_listing import list_folder, normalise_extensions
from tfdp.sources.image_bytes import FORMAT_NAMES, JPEG, decode, sniff
from tfdp.windows.contract import WindowPlan
from tfdp.windows.decode import Decoded, decode_windows, read_files

#: Height and width of the placeholder image ``on_error="skip"`` returns for a bad file.
PLACEHOLDER_SIZE = 16

_MAX_LISTED = 5
_JPEG_NAMES_BYTES = tuple(e.encode() for e in (".jpg", ".jpeg", ".jpe"))


class ImageFolderSource:
    """Random access to an image folder ``root/<class>/<image>`` (ImageNet layout).

    The file list is read once, at construction, in ``torchvision``'s order
    (see the module docstring); as in ``torchvision``, every sub-folder of
    ``root`` is a class, hidden ones (``.ipynb_checkpoints``) included.
    ``load(i)`` reads and decodes file ``i`` inside the graph and returns
    ``(image, label)``: ``image`` uint8 ``[H, W, channels]`` (static rank 3;
    sizes vary), ``label`` int64. :meth:`load_windows` reads a batch of
    files and decodes only the windows an augmentation keeps (a
    :class:`tfdp.windows.contract.WindowSource`); :class:`tfdp.DistributedInput`
    uses it whenever the augmentation starts with a window stage
    (:class:`tfdp.augment.RandomResizedCrop`, :class:`tfdp.augment.CenterCrop`).

    Args:
        root: The folder holding one sub-folder per class.
        extensions: File endings that count as images (case-insensitive).
        on_error: ``"raise"`` (default): a corrupt file raises, when read, an
            error naming its path. ``"skip"``: it yields a zero placeholder
            image of ``PLACEHOLDER_SIZE`` pixels square with weight 0 in
            :meth:`load_with_weight`, and is recorded in :meth:`skipped_files`;
            the number of samples never changes, so ranks stay in lock-step.
        channels: Colour channels of the decoded image: 1, 3 or 4.

    Attributes:
        classes: Sorted class folder names; ``classes[k]`` has label ``k``.
        class_to_index: ``{class name: label}``.
        num_examples: Number of image files.
        labels: int64 array of the labels, in file order.
        paths: str array of the file paths (built on first access: on
            ImageNet about 250 MB, whereas the source itself keeps only the
            compact relative paths).

    Raises:
        FileNotFoundError: ``root`` does not exist; it has no class folder; a
            class folder has no image (the empty ones are named).
        tfdp.errors.ConfigError: ``root`` is not a directory; a bad ``on_error``,
            ``channels`` or ``extensions``.

    Example:
        >>> import os, tempfile, tensorflow as tf
        >>> root = tempfile.mkdtemp()
        >>> os.makedirs(os.path.join(root, "n01"))
        >>> tf.io.write_file(os.path.join(root, "n01", "x.png"),
        ...                  tf.io.encode_png(tf.zeros([3, 5, 3], tf.uint8)))
        >>> src = ImageFolderSource(root)
        >>> ds = tf.data.Dataset.range(src.num_examples).map(src.load)
        >>> [(img.shape.as_list(), int(y)) for img, y in ds]
        [([3, 5, 3], 0)]
    """

    streaming = False

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        extensions: str | Iterable[str] = (".jpg", ".jpeg", ".png"),
        on_error: str = "raise",
        channels: int = 3,
    ) -> None:
        if on_error not in ("raise", "skip"):
            raise ConfigError(f"must be 'raise' or 'skip', got {on_error!r}", argument="on_error")
        if isinstance(channels, bool) or channels not in (1, 3, 4):
            raise ConfigError(f"must be 1, 3 or 4, got {channels!r}", argument="channels")
        self.extensions = normalise_extensions(extensions)
        self.on_error = on_error
        self.channels = int(channels)
        listing = list_folder(root, self.extensions)
        self.root = listing.root
        self.classes: list[str] = listing.classes
        self.class_to_index: dict[str, int] = {c: i for i, c in enumerate(self.classes)}
        rel, counts = listing.relative_paths, listing.counts
        self.num_examples = len(rel)
        self._rel = np.array(rel, dtype=np.bytes_)
        self.labels = np.repeat(np.arange(len(self.classes), dtype=np.int64), counts)
        self._tensors: tuple[tf.Tensor, tf.Tensor] | None = None
        self._prefix = os.fsencode(self.root + os.sep)
        self._lock = threading.Lock()
        self._skipped: dict[str, str] = {}
        self._skip_events = 0

    # -- metadata -----------------------------------------------------------------
    @cached_property
    def paths(self) -> np.ndarray:
        """All file paths, in index order, as a NumPy str array (built on first access)."""
        return np.array([self.path(i) for i in range(self.num_examples)], dtype=np.str_)

    def path(self, index: int) -> str:
        """The path of file ``index`` (cheap: no array of all paths is built).

        Example:
            >>> import os, tempfile, tensorflow as tf
            >>> root = tempfile.mkdtemp(); os.makedirs(os.path.join(root, "a"))
            >>> tf.io.write_file(os.path.join(root, "a", "1.png"),
            ...                  tf.io.encode_png(tf.zeros([1, 1, 3], tf.uint8)))
            >>> ImageFolderSource(root).path(0).endswith(os.path.join("a", "1.png"))
            True
        """
        return os.fsdecode(self._prefix + self._rel[int(index)])

    @property
    def element_spec(self) -> tuple[tf.TensorSpec, tf.TensorSpec]:
        """``(image uint8 [None, None, channels], label int64 [])``."""
        return (
            tf.TensorSpec([None, None, self.channels], tf.uint8),
            tf.TensorSpec([], tf.int64),
        )

    def __len__(self) -> int:
        return self.num_examples

    def __repr__(self) -> str:
        return (
            f"ImageFolderSource(root={self.root!r}, num_examples={self.num_examples}, "
            f"num_classes={len(self.classes)}, on_error={self.on_error!r})"
        )

    # -- graph-side loading ---------------------------------------------------------
    def _table(self) -> tuple[tf.Tensor, tf.Tensor]:
        if self._tensors is None:
            with tf.init_scope(), tf.device("/cpu:0"):  # eager, even when first traced
                self._tensors = (tf.constant(self._rel), tf.constant(self.labels))
        return self._tensors

    def _decode(self, data: tf.Tensor, fmt: tf.Tensor) -> tf.Tensor:
        return decode(data, fmt, self.channels)

    def _read(self, index: Any, on_error: str) -> tuple[tuple[tf.Tensor, tf.Tensor], tf.Tensor]:
        rel, labels = self._table()
        index = tf.cast(index, tf.int64)
        path = tf.strings.join([tf.constant(self._prefix), tf.gather(rel, index)])
        label = tf.gather(labels, index)
        data = tf.io.read_file(path)
        fmt, problem = sniff(data)
        ok = tf.equal(problem, "")
        if on_error == "raise":
            message = tf.strings.join(
                ["ImageFolderSource: cannot decode image ", path, ": ", problem]
            )
            check = tf.debugging.Assert(ok, [message], summarize=1)
            with tf.control_dependencies([check]):
                image = self._decode(tf.identity(data), fmt)
            return (image, label), tf.constant(1.0)

        def bad() -> tuple[tf.Tensor, tf.Tensor]:
            token = tf.numpy_function(
                self._note_skip, [index, problem], tf.int64, stateful=True, name="note_skip"
            )
            with tf.control_dependencies([token]):
                placeholder = tf.zeros(
                    [PLACEHOLDER_SIZE, PLACEHOLDER_SIZE, self.channels], tf.uint8
                )
            return placeholder, tf.constant(0.0)

        image, weight = tf.cond(ok, lambda: (self._decode(data, fmt), tf.constant(1.0)), bad)
        image.set_shape([None, None, self.channels])
        return (image, label), weight

    def _decode_whole(self, data: tf.Tensor, index: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """Check one file the window path cannot take fast; ``(decoded image, problem)``.

        An unreadable file gives the placeholder and its problem (recorded as
        skipped under ``on_error="skip"``); the caller raises under ``"raise"``.
        """
        fmt, problem = sniff(data)

        def placeholder() -> tf.Tensor:
            if self.on_error == "skip":
                token = tf.numpy_function(
                    self._note_skip, [index, problem], tf.int64, stateful=True, name="note_skip"
                )
            else:
                token = tf.constant(0, tf.int64)
            with tf.control_dependencies([token]):
                return tf.zeros([PLACEHOLDER_SIZE, PLACEHOLDER_SIZE, self.channels], tf.uint8)

        image = tf.cond(tf.equal(problem, ""), lambda: self._decode(data, fmt), placeholder)
        return image, problem

    def load_windows(
        self, indices: Any, request: WindowPlan
    ) -> tuple[tuple[tf.Tensor, tf.Tensor], tf.Tensor]:
        """Read the files at ``indices`` and decode only the windows ``request`` plans.

        Each distinct file is read and decoded once, however often it occurs
        in ``indices`` (the copies of Repeated Augmentation); a JPEG is
        decoded only over the union of its windows, other formats in full
        (see :mod:`tfdp.windows.decode`). The result for every entry equals
        ``request``'s augmentation of the fully decoded image, bit for bit.
        Errors as in :meth:`load_with_weight` (``on_error``).

        Args:
            indices: int ``[N]``, ``N >= 1``: file indices, repeats allowed.
            request: The augmentation's plan for these ``N`` samples (a
                :class:`tfdp.windows.plan.WindowRequest`).

        Returns:
            ``((images [N, ...], labels int64 [N]), weights float32 [N])``;
            ``images`` are what ``request.finish`` makes of each window.

        Example:
            >>> import os, tempfile, tensorflow as tf
            >>> from tfdp.augment import CenterCrop
            >>> from tfdp.windows.plan import split_window
            >>> root = tempfile.mkdtemp(); os.makedirs(os.path.join(root, "a"))
            >>> tf.io.write_file(os.path.join(root, "a", "1.jpg"),
            ...                  tf.io.encode_jpeg(tf.zeros([40, 60, 3], tf.uint8)))
            >>> request = split_window(CenterCrop(16)).request(tf.zeros([1, 2], tf.int64))
            >>> (images, labels), weights = ImageFolderSource(root).load_windows([0], request)
            >>> images.shape, float(weights[0])
            (TensorShape([1, 16, 16, 3]), 1.0)
        """
        rel, labels = self._table()
        indices = tf.cast(tf.reshape(indices, [-1]), tf.int64)
        files, entry_file = tf.unique(indices, out_idx=tf.int32)
        paths = tf.strings.join([tf.constant(self._prefix), tf.gather(rel, files)])
        data = read_files(paths)

        def decode_other(f: tf.Tensor) -> Decoded:
            # The files the fast path does not take (other formats, damaged JPEGs) are rare:
            # checked and decoded eagerly, outside the graph -- the checks' many functions
            # would otherwise be instantiated and optimised with every iterator.
            image, problem = tf.py_function(
                self._decode_whole, [data.read(f), files[f]], [tf.uint8, tf.string]
            )
            image.set_shape([None, None, self.channels])
            problem.set_shape([])
            ok = tf.equal(problem, "")
            if self.on_error == "raise":
                message = tf.strings.join(
                    ["ImageFolderSource: cannot decode image ", paths[f], ": ", problem]
                )
                with tf.control_dependencies([tf.debugging.Assert(ok, [message], summarize=1)]):
                    image = tf.identity(image)
            return Decoded(image, ok)

        images, ok = decode_windows(data, decode_other, entry_file, request, self.channels)
        weights = tf.cast(tf.gather(ok, entry_file), tf.float32)
        return (images, tf.gather(labels, indices)), weights

    @cached_property
    def jpeg_files(self) -> bool:
        """Whether every file is a JPEG by its name (``.jpg``, ``.jpeg``, ``.jpe``; any case).

        Example:
            >>> import os, tempfile, tensorflow as tf
            >>> root = tempfile.mkdtemp(); os.makedirs(os.path.join(root, "a"))
            >>> tf.io.write_file(os.path.join(root, "a", "1.JPEG"),
            ...                  tf.io.encode_jpeg(tf.zeros([2, 2, 3], tf.uint8)))
            >>> ImageFolderSource(root).jpeg_files
            True
        """
        names = np.char.lower(self._rel)
        return bool(np.all(np.any([np.char.endswith(names, e) for e in _JPEG_NAMES_BYTES], 0)))

    def load_encoded(self, index: Any) -> tuple[tuple[tf.Tensor, tf.Tensor], tf.Tensor]:
        """File ``index``'s bytes as they are, its label, and why it is not a sound JPEG.

        For writing the folder as TFRecord shards without re-encoding
        (:func:`tfdp.sources.write_tfrecords`, encoding ``"jpeg"``).

        Returns:
            ``((bytes, label int64), problem)``: ``problem`` is ``""`` for a
            sound JPEG, else the reason (another format, or what is broken).

        Example:
            >>> import os, tempfile, tensorflow as tf
            >>> root = tempfile.mkdtemp(); os.makedirs(os.path.join(root, "a"))
            >>> tf.io.write_file(os.path.join(root, "a", "1.png"),
            ...                  tf.io.encode_png(tf.zeros([2, 2, 3], tf.uint8)))
            >>> (data, label), problem = ImageFolderSource(root).load_encoded(0)
            >>> problem.numpy()
            b'a PNG file, not a JPEG'
        """
        rel, labels = self._table()
        index = tf.cast(index, tf.int64)
        data = tf.io.read_file(tf.strings.join([tf.constant(self._prefix), tf.gather(rel, index)]))
        fmt, problem = sniff(data)
        names = tf.constant([f"a {name}" for name in FORMAT_NAMES])
        other = tf.strings.join([tf.gather(names, fmt), " file, not a JPEG"])
        problem = tf.where(tf.equal(problem, "") & tf.not_equal(fmt, JPEG), other, problem)
        return (data, tf.gather(labels, index)), problem

    def load(self, index: Any) -> tuple[tf.Tensor, tf.Tensor]:
        """Read and decode file ``index``: ``(image uint8 [H, W, C], label int64)``.

        Graph-compatible (use it in ``tf.data.Dataset.map``). Under
        ``on_error="raise"`` a bad file raises ``InvalidArgumentError`` naming
        its path; under ``"skip"`` it gives the placeholder (see
        :meth:`load_with_weight` for the weight that marks it).

        Example:
            >>> import os, tempfile, tensorflow as tf
            >>> root = tempfile.mkdtemp(); os.makedirs(os.path.join(root, "a"))
            >>> tf.io.write_file(os.path.join(root, "a", "1.png"),
            ...                  tf.io.encode_png(tf.zeros([2, 3, 1], tf.uint8)))
            >>> image, label = ImageFolderSource(root).load(0)
            >>> image.shape, image.dtype, label.dtype
            (TensorShape([2, 3, 3]), tf.uint8, tf.int64)
        """
        example, _ = self._read(index, self.on_error)
        return example

    def load_with_weight(self, index: Any) -> tuple[tuple[tf.Tensor, tf.Tensor], tf.Tensor]:
        """Like :meth:`load`, plus a float32 weight: 0.0 for a skipped bad file, else 1.0.

        Example:
            >>> import os, tempfile, tensorflow as tf
            >>> root = tempfile.mkdtemp(); os.makedirs(os.path.join(root, "a"))
            >>> tf.io.write_file(os.path.join(root, "a", "1.jpg"), b"garbage")
            >>> src = ImageFolderSource(root, on_error="skip")
            >>> (image, label), weight = src.load_with_weight(0)
            >>> image.shape, float(weight), len(src.skipped_files())
            (TensorShape([16, 16, 3]), 0.0, 1)
        """
        return self._read(index, self.on_error)

    # -- skipped files -------------------------------------------------------------------
    def _note_skip(self, index: np.ndarray, problem: np.ndarray) -> np.int64:
        path = self.path(int(index))
        reason = problem.decode("utf-8", "replace") if isinstance(problem, bytes) else str(problem)
        with self._lock:
            self._skipped.setdefault(path, reason)
            self._skip_events += 1
        return np.int64(0)

    def skipped_files(self) -> list[str]:
        """Paths of the bad files skipped so far in this process, sorted.

        Counted on the Python side when a bad file is read (each file once,
        however often it is read); a process only knows the reads it did.

        Example:
            >>> import os, tempfile, tensorflow as tf
            >>> root = tempfile.mkdtemp(); os.makedirs(os.path.join(root, "a"))
            >>> tf.io.write_file(os.path.join(root, "a", "1.png"), b"")
            >>> src = ImageFolderSource(root, on_error="skip")
            >>> _ = src.load(0)
            >>> [os.path.basename(p) for p in src.skipped_files()]
            ['1.png']
        """
        with self._lock:
            return sorted(self._skipped)

    def report(self) -> str:
        """A one-line summary of the bad files skipped so far (see :meth:`skipped_files`).

        Example:
            >>> import os, tempfile, tensorflow as tf
            >>> root = tempfile.mkdtemp(); os.makedirs(os.path.join(root, "a"))
            >>> tf.io.write_file(os.path.join(root, "a", "1.png"),
            ...                  tf.io.encode_png(tf.zeros([1, 1, 3], tf.uint8)))
            >>> ImageFolderSource(root, on_error="skip").report()
            'ImageFolderSource: 0 of 1 files skipped'
        """
        with self._lock:
            items = sorted(self._skipped.items())
            events = self._skip_events
        line = f"ImageFolderSource: {len(items)} of {self.num_examples} files skipped"
        if not items:
            return line
        shown = "; ".join(f"{p} ({why})" for p, why in items[:_MAX_LISTED])
        more = f"; and {len(items) - _MAX_LISTED} more" if len(items) > _MAX_LISTED else ""
        return f"{line} ({events} reads replaced by placeholders): {shown}{more}"

    def find_bad_files(self, num_parallel_calls: int = tf.data.AUTOTUNE) -> list[str]:
        """Read and decode every file once; return the paths that fail, sorted.

        A one-off scan (a full pass over the data) that also catches the
        damage only the decoder notices, which :meth:`load` cannot attribute
        to a file. It does not touch :meth:`skipped_files`.

        Example:
            >>> import os, tempfile, tensorflow as tf
            >>> root = tempfile.mkdtemp(); os.makedirs(os.path.join(root, "a"))
            >>> tf.io.write_file(os.path.join(root, "a", "bad.png"), b"junk")
            >>> tf.io.write_file(os.path.join(root, "a", "ok.png"),
            ...                  tf.io.encode_png(tf.zeros([1, 1, 3], tf.uint8)))
            >>> [os.path.basename(p) for p in ImageFolderSource(root).find_bad_files()]
            ['bad.png']
        """

        def good(index: tf.Tensor) -> tf.Tensor:
            (image, _), _ = self._read(index, "raise")
            with tf.control_dependencies([image]):
                return tf.identity(index)

        ds = tf.data.Dataset.range(self.num_examples).map(plain(good), num_parallel_calls)
        ds = ds.ignore_errors(log_warning=False)
        seen = np.zeros(self.num_examples, bool)
        for index in ds.as_numpy_iterator():
            seen[index] = True
        return sorted(self.path(i) for i in np.flatnonzero(~seen))

    # -- subsets (added for held-out splits; keep at the end of the class) ----------------
    def subset(self, indices: Any) -> ImageFolderSource:
        """A source over the files at ``indices`` (in that order), sharing root and classes.

        Labels keep the class ids of the whole folder (``classes`` is
        unchanged), so a held-out split of a folder evaluates with the labels
        the model was trained on. The subset keeps ``on_error``, ``channels``
        and ``extensions``; its skipped-file record starts empty.

        Raises:
            tfdp.errors.ConfigError: for indices that are not integers in ``[0, num_examples)``,
                repeated, or none at all.

        Example:
            >>> import os, tempfile, tensorflow as tf
            >>> root = tempfile.mkdtemp()
            >>> for cls in ("a", "b"):
            ...     os.makedirs(os.path.join(root, cls))
            ...     for i in range(2):
            ...         tf.io.write_file(os.path.join(root, cls, f"{i}.png"),
            ...                          tf.io.encode_png(tf.zeros([1, 1, 3], tf.uint8)))
            >>> part = ImageFolderSource(root).subset([3, 0])
            >>> part.num_examples, part.labels.tolist(), os.path.basename(part.path(0))
            (2, [1, 0], '1.png')
        """
        import copy

        idx = np.asarray(indices)
        if idx.ndim != 1 or idx.size == 0 or idx.dtype.kind not in "iu":
            raise ConfigError(
                f"must be a non-empty 1-D list of integers, got {indices!r}",
                argument="indices",
            )
        if idx.min() < 0 or idx.max() >= self.num_examples:
            raise ConfigError(
                f"must be in [0, {self.num_examples}), got {int(idx.min())}..{int(idx.max())}",
                argument="indices",
            )
        if len(np.unique(idx)) != len(idx):
            raise ConfigError(
                "must not repeat a file (each index in [0, num_examples) once)",
                argument="indices",
            )
        part = copy.copy(self)
        part.__dict__.pop("paths", None)  # the cached_property of the whole folder
        part._rel = self._rel[idx]
        part.labels = self.labels[idx]
        part.num_examples = len(idx)
        part._tensors = None
        part._lock = threading.Lock()
        part._skipped = {}
        part._skip_events = 0
        return part
