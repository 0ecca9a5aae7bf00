"""Window decoding: sources that decode only the window of an image an augmentation keeps.

This module owns the decoding side of the contract between a window-decoding source and
the input layer (:class:`WindowSource`, defined in :mod:`tfdp.sources.base` and
re-exported here) and the decoding loop such sources share
(:func:`decode_windows`). The augmentation side of the contract is
:class:`tfdp.augment.WindowRequest`: it plans each sample's window from the
image's shape and the sample's seed, and finishes a decoded window into the
sample's output.

How a batch of ``N`` entries (file indices, repeats allowed) is loaded:

1. each distinct file is read once; one vectorised check finds the complete
   JPEGs (:func:`complete_jpegs`), whose shapes come from their headers
   (``tf.image.extract_jpeg_shape``); the source checks every other file on
   its own (naming it in an error, or replacing it by a placeholder) and
   decodes it whole;
2. every entry's window is planned at once (vectorised over the ``N``
   entries) by the request;
3. each distinct file is decoded once: for a JPEG, only the union of its
   entries' windows (``tf.io.decode_and_crop_jpeg``), widened by one column
   on each side -- libjpeg's chroma upsampling at a cut column differs from a
   full decode, one column away it does not, so every window's pixels equal
   a full decode's bit for bit;
4. every entry's window is cut from its file's region and finished (resized,
   then the per-image stages).

Under Repeated Augmentation the copies of a sample that land in the same
batch share one read and one decode.

Example:
    >>> import os, tempfile, tensorflow as tf
    >>> from tfdp.augment import RandomResizedCrop, split_window
    >>> from tfdp.sources import ImageFolderSource
    >>> root = tempfile.mkdtemp(); os.makedirs(os.path.join(root, "a"))
    >>> tf.io.write_file(os.path.join(root, "a", "x.jpg"),
    ...                  tf.io.encode_jpeg(tf.zeros([30, 40, 3], tf.uint8)))
    >>> src = ImageFolderSource(root)
    >>> isinstance(src, WindowSource)
    True
    >>> request = split_window(RandomResizedCrop(8)).request(tf.constant([[0, 0], [0, 1]]))
    >>> (images, labels), weights = src.load_windows(tf.constant([0, 0]), request)
    >>> images.shape, labels.numpy().tolist(), weights.numpy().tolist()
    (TensorShape([2, 8, 8, 3]), [0, 0], [1.0, 1.0])
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, NamedTuple

import tensorflow as tf

from tfdp.sources.base import WindowPlan, WindowSource

__all__ = [
    "Decoded",
    "WindowPlan",
    "WindowSource",
    "complete_jpegs",
    "decode_windows",
    "encoded_windows",
    "jpeg_window",
    "read_files",
]


#: Files decoded (and windows finished) at once inside one batch: one per core, so a
#: batch alone -- the first of a new iterator -- spreads over the machine.
PARALLEL_DECODES = os.cpu_count() or 1

_JPEG_MAGIC = b"\xff\xd8\xff"
_JPEG_EOI = b"\xff\xd9"


def complete_jpegs(data: tf.Tensor) -> tf.Tensor:
    """Which encoded images ``data`` (string ``[n]``) are JPEGs that end with their end marker.

    A vectorised check (one set of ops for the whole batch): JPEG's magic
    bytes at the start and the end-of-image marker as the last two bytes.
    Such files take the fast path (shape from the header, window decode);
    everything else is checked file by file.

    Example:
        >>> import tensorflow as tf
        >>> jpeg = tf.io.encode_jpeg(tf.zeros([2, 2, 3], tf.uint8))
        >>> complete_jpegs(tf.stack([jpeg, jpeg[...] + b"junk"])).numpy().tolist()
        [True, False]
    """
    size = tf.strings.length(data)
    magic = tf.strings.substr(data, tf.zeros_like(size), tf.fill(tf.shape(size), 3))
    tail = tf.strings.substr(data, tf.maximum(size - 2, 0), tf.fill(tf.shape(size), 2))
    return tf.equal(magic, _JPEG_MAGIC) & tf.equal(tail, _JPEG_EOI) & (size >= 4)


class Decoded(NamedTuple):
    """A file the fast path does not take, decoded (or replaced) by the source.

    Attributes:
        image: uint8 ``[H, W, C]``: the decoded image (a placeholder for an
            unreadable file the source skips).
        ok: Scalar bool: False for a placeholder.
    """

    image: tf.Tensor
    ok: tf.Tensor


def jpeg_window(data: tf.Tensor, window: tf.Tensor, channels: int) -> tf.Tensor:
    """Decode the ``window`` ``(top, left, height, width)`` of a JPEG to ``channels`` channels.

    libjpeg decodes 1 or 3 channels; for 4 an opaque alpha channel is added
    (what decoding the whole file and converting it gives).

    Example:
        >>> import tensorflow as tf
        >>> data = tf.io.encode_jpeg(tf.zeros([16, 24, 3], tf.uint8))
        >>> jpeg_window(data, tf.constant([2, 3, 5, 7]), 4).shape
        TensorShape([5, 7, 4])
    """
    image = tf.io.decode_and_crop_jpeg(data, window, channels=min(channels, 3))
    if channels == 4:
        alpha = tf.fill(tf.concat([tf.shape(image)[:2], [1]], 0), tf.constant(255, tf.uint8))
        image = tf.concat([image, alpha], -1)
    image.set_shape([None, None, channels])
    return image


def read_files(paths: tf.Tensor) -> tf.TensorArray:
    """The bytes of the files ``paths`` (string ``[n]``), one ``tf.io.read_file`` each.

    Returned as a ``tf.TensorArray`` (its reads share the bytes; slicing a
    string tensor would copy them).

    Example:
        >>> import os, tempfile, tensorflow as tf
        >>> path = os.path.join(tempfile.mkdtemp(), "x.bin")
        >>> tf.io.write_file(path, b"abc")
        >>> read_files(tf.constant([path, path])).stack().numpy().tolist()
        [b'abc', b'abc']
    """

    def body(i: tf.Tensor, data: Any) -> Any:
        return data.write(i, tf.io.read_file(paths[i]))

    count = tf.size(paths)
    files = tf.TensorArray(tf.string, count, element_shape=[], clear_after_read=False)
    return _loop(count, body, files)


def _loop(
    count: tf.Tensor, body: Callable[[tf.Tensor, Any], Any], state: Any, parallel: int = 1
) -> Any:
    """``state = body(i, state)`` for ``i`` in ``[0, count)``: a ``tf.while_loop``.

    With ``parallel > 1``, up to that many iterations run at once: their
    decodes and resizes overlap, while the writes to ``state`` (a chain of
    ``tf.TensorArray`` writes) stay in order. Each iteration's values depend
    only on its index, so the result is the same.
    """
    _, state = tf.while_loop(
        lambda i, _: i < count,
        lambda i, st: (i + 1, body(i, st)),
        (tf.constant(0), state),
        parallel_iterations=parallel,
    )
    return state


def decode_windows(
    data: tf.TensorArray,
    decode_other: Callable[[tf.Tensor], Decoded],
    entry_file: tf.Tensor,
    request: WindowPlan,
    channels: int,
) -> tuple[tf.Tensor, tf.Tensor]:
    """Decode each file once and finish every entry's window (see the module docstring).

    Args:
        data: The encoded bytes of the ``n`` distinct files (a ``tf.TensorArray``
            of scalar strings that can be read more than once, e.g. :func:`read_files`).
        decode_other: ``i -> Decoded`` for a file ``i`` that is not a complete
            JPEG (:func:`complete_jpegs`): the source checks it (raising an
            error that names it, or replacing it by a placeholder) and decodes
            it whole.
        entry_file: int32 ``[N]``: the file of each entry (``N >= 1``).
        request: The augmentation's plan for the ``N`` entries (a
            :class:`tfdp.augment.WindowRequest`).
        channels: Channels of the decoded images.

    Returns:
        ``(outputs, ok)``: ``request.finish`` of every entry's window,
        stacked ``[N, ...]`` in entry order, and each file's ``ok`` ``[n]``.
    """
    count = data.size()
    fast = complete_jpegs(data.stack())
    fast_files = tf.cast(tf.where(fast)[:, 0], tf.int32)
    other_files = tf.cast(tf.where(~fast)[:, 0], tf.int32)
    pixels = tf.TensorArray(
        tf.uint8, count, infer_shape=False, element_shape=[None, None, channels]
    )

    def measure(i: tf.Tensor, state: Any) -> Any:
        shapes, images, ok = state
        f = other_files[i]
        decoded = decode_other(f)
        image = tf.ensure_shape(decoded.image, [None, None, channels])
        return shapes.write(f, tf.shape(image)[:2]), images.write(f, image), ok.write(f, decoded.ok)

    def measure_jpeg(i: tf.Tensor, shapes: Any) -> Any:
        f = fast_files[i]
        return shapes.write(f, tf.image.extract_jpeg_shape(data.read(f))[:2])

    shapes = tf.TensorArray(tf.int32, count, element_shape=[2])
    ok = tf.TensorArray(tf.bool, count, element_shape=[])
    shapes, pixels, ok = _loop(tf.size(other_files), measure, (shapes, pixels, ok))
    shapes = _loop(tf.size(fast_files), measure_jpeg, shapes).stack()
    ok = _merge_ok(ok, other_files, count)

    boxes = request.windows(tf.gather(shapes, entry_file))  # [N, 4], vectorised
    top, left, height, width = tf.unstack(boxes, num=4, axis=1)
    # The union of each file's windows; one more column on each side for libjpeg (see above).
    u_top = tf.math.unsorted_segment_min(top, entry_file, count)
    u_bottom = tf.math.unsorted_segment_max(top + height, entry_file, count)
    u_left = tf.math.unsorted_segment_min(left, entry_file, count)
    u_right = tf.math.unsorted_segment_max(left + width, entry_file, count)
    margin = tf.cast(fast, tf.int32)
    u_left = tf.maximum(u_left - margin, 0)
    u_right = tf.minimum(u_right + margin, shapes[:, 1])
    unions = tf.stack([u_top, u_left, u_bottom - u_top, u_right - u_left], axis=1)

    def decode_jpeg(i: tf.Tensor, regions: Any) -> Any:
        f = fast_files[i]
        return regions.write(f, jpeg_window(data.read(f), unions[f], channels))

    def cut_decoded(i: tf.Tensor, regions: Any) -> Any:
        f = other_files[i]
        return regions.write(f, tf.slice(pixels.read(f), _yx0(unions[f]), _hw(unions[f])))

    regions = tf.TensorArray(
        tf.uint8,
        count,
        infer_shape=False,
        element_shape=[None, None, channels],
        clear_after_read=False,  # read once per entry of the file
    )
    regions = _loop(tf.size(fast_files), decode_jpeg, regions, PARALLEL_DECODES)
    regions = _loop(tf.size(other_files), cut_decoded, regions)

    # Each entry's window inside its file's region, as tf.slice arguments.
    starts = tf.stack([top - tf.gather(u_top, entry_file), left - tf.gather(u_left, entry_file)], 1)
    sizes = tf.stack([height, width], 1)

    def finish(j: tf.Tensor, out: Any) -> Any:
        window = tf.slice(regions.read(entry_file[j]), _pad0(starts[j]), _pad_all(sizes[j]))
        return out.write(j, request.finish(window, j))

    n = tf.size(entry_file)
    spec = request.output_spec(tf.TensorSpec([None, None, channels], tf.uint8))
    out = _loop(
        n, finish, tf.TensorArray(spec.dtype, n, element_shape=spec.shape), PARALLEL_DECODES
    )
    return out.stack(), ok


def _merge_ok(ok: Any, other_files: tf.Tensor, count: tf.Tensor) -> tf.Tensor:
    """Per-file ``ok``: True for the fast-path JPEGs, the source's verdict for the others."""
    verdicts = tf.cond(
        tf.size(other_files) > 0,
        lambda: ok.gather(other_files),
        lambda: tf.zeros([0], tf.bool),
    )
    return tf.tensor_scatter_nd_update(
        tf.ones([count], tf.bool), other_files[:, tf.newaxis], verdicts
    )


def _yx0(window: tf.Tensor) -> tf.Tensor:
    return tf.concat([window[:2], [0]], 0)


def _hw(window: tf.Tensor) -> tf.Tensor:
    return tf.concat([window[2:], [-1]], 0)


def _pad0(yx: tf.Tensor) -> tf.Tensor:
    return tf.concat([yx, [0]], 0)


def _pad_all(hw: tf.Tensor) -> tf.Tensor:
    return tf.concat([hw, [-1]], 0)


class _StageWindows:
    """A :class:`WindowPlan` of one window stage with its drawn parameters (no later stages)."""

    def __init__(self, stage: Any, params: tf.Tensor, channels: int) -> None:
        self.stage, self.params, self.channels = stage, params, channels

    def windows(self, shapes: tf.Tensor) -> tf.Tensor:
        return self.stage.windows(shapes, self.params)

    def finish(self, window: tf.Tensor, j: Any) -> tf.Tensor:
        return self.stage.resize(window)

    def output_spec(self, window: tf.TensorSpec) -> tf.TensorSpec:
        return tf.TensorSpec([*self.stage.size, self.channels], tf.float32)


def encoded_windows(data: tf.Tensor, stage: Any, params: tf.Tensor, channels: int = 3) -> tf.Tensor:
    """A window stage applied to encoded images ``data`` (string ``[B]``): windows decoded alone.

    What :class:`tfdp.augment.WindowAugmentation` does with a batch of
    encoded images (e.g. JPEG records kept encoded,
    ``TFRecordSource(images="encoded")``): JPEGs have only their window
    decoded, other formats are decoded whole; images are decoded to
    ``channels`` channels. Bit-identical to the stage on the decoded images.

    Example:
        >>> import tensorflow as tf
        >>> from tfdp.augment import RandomResizedCrop
        >>> rrc = RandomResizedCrop(8)
        >>> data = tf.stack([tf.io.encode_jpeg(tf.zeros([20, 30, 3], tf.uint8))] * 2)
        >>> seeds = tf.constant([[0, 0], [0, 1]], tf.int64)
        >>> encoded_windows(data, rrc, rrc.draw(seeds)).shape
        TensorShape([2, 8, 8, 3])
    """
    count = tf.size(data)
    files = tf.TensorArray(tf.string, count, element_shape=[], clear_after_read=False)
    files = files.unstack(data)

    def decode_whole(f: tf.Tensor) -> Decoded:
        image = tf.io.decode_image(files.read(f), channels=channels, expand_animations=False)
        return Decoded(image, tf.constant(True))

    entries = tf.range(count)
    out, _ = decode_windows(
        files, decode_whole, entries, _StageWindows(stage, params, channels), channels
    )
    return out
