"""Window decoding: decode only the window of an image that each entry keeps.

This module owns the decoding loop that window-decoding sources share
(:func:`decode_windows`, called by :meth:`tfdp.sources.ImageFolderSource.load_windows`)
and its use on a batch of encoded images (:func:`encoded_windows`, what a
window stage does with ``TFRecordSource(images="encoded")``). It knows the
augmentation only through :class:`tfdp.windows.contract.WindowPlan`: the
plan says where each entry's window is, given the images' shapes, and
finishes a decoded window into the entry's output.

How a batch of ``N`` entries (file indices, repeats allowed) is loaded:

1. each distinct file is read once; one vectorised check finds the complete
   JPEGs (:func:`complete_jpegs`), whose shapes come from their headers
   (``tf.image.extract_jpeg_shape``); the source checks every other file on
   its own (naming it in an error, or replacing it by a placeholder) and
   decodes it whole -- in a function of its own, called only when the batch
   holds such a file, so a new ``tf.data`` iterator does not instantiate it;
2. every entry's window is planned at once (vectorised over the ``N``
   entries) by the request;
3. each distinct JPEG is decoded once, over the union of its entries'
   windows only (``tf.io.decode_and_crop_jpeg``), widened by one column on
   each side -- libjpeg's chroma upsampling at a cut column differs from a
   full decode, one column away it does not, so every window's pixels equal
   a full decode's bit for bit; another file's region is its whole image;
4. every entry's window is cut from its file's region and finished (resized,
   then the per-image stages).

Under Repeated Augmentation the copies of a sample that land in the same
batch share one read and one decode.

Example:
    >>> import os, tempfile, tensorflow as tf
    >>> from tfdp.augment import RandomResizedCrop
    >>> from tfdp.sources import ImageFolderSource
    >>> from tfdp.windows.plan import split_window
    >>> root = tempfile.mkdtemp(); os.makedirs(os.path.join(root, "a"))
    >>> tf.io.write_file(os.path.join(root, "a", "x.jpg"),
    ...                  tf.io.encode_jpeg(tf.zeros([30, 40, 3], tf.uint8)))
    >>> src = ImageFolderSource(root)
    >>> request = split_window(RandomResizedCrop(8)).request(tf.constant([[0, 0], [0, 1]]))
    >>> (images, labels), weights = src.load_windows(tf.constant([0, 0]), request)
    >>> images.shape, labels.numpy().tolist(), weights.numpy().tolist()
    (TensorShape([2, 8, 8, 3]), [0, 0], [1.0, 1.0])
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import tensorflow as tf

from tfdp.windows.contract import WindowPlan, WindowStage
from tfdp.windows.geometry import StageWindows
from tfdp.windows.parallelism import PARALLEL_DECODES

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
            :class:`tfdp.windows.plan.WindowRequest`).
        channels: Channels of the decoded images.

    Returns:
        ``(outputs, ok)``: ``request.finish`` of every entry's window,
        stacked ``[N, ...]`` in entry order, and each file's ``ok`` ``[n]``.
    """
    count = data.size()
    fast = complete_jpegs(data.stack())
    fast_files = tf.cast(tf.where(fast)[:, 0], tf.int32)
    other_files = tf.cast(tf.where(~fast)[:, 0], tf.int32)
    shapes = tf.TensorArray(tf.int32, count, element_shape=[2])
    regions = tf.TensorArray(
        tf.uint8,
        count,
        infer_shape=False,
        element_shape=[None, None, channels],
        clear_after_read=False,  # read once per entry of the file
    )
    ok = tf.ones([count], tf.bool)

    def decode_others(shapes: Any, regions: Any, ok: tf.Tensor) -> Any:
        """The other files decoded whole: each one's region is the whole image."""

        def one(i: tf.Tensor, state: Any) -> Any:
            shapes, regions, verdicts = state
            f = other_files[i]
            decoded = decode_other(f)
            image = tf.ensure_shape(decoded.image, [None, None, channels])
            shape = tf.shape(image)[:2]
            return shapes.write(f, shape), regions.write(f, image), verdicts.write(i, decoded.ok)

        n = tf.size(other_files)
        verdicts = tf.TensorArray(tf.bool, n, element_shape=[])
        shapes, regions, verdicts = _loop(n, one, (shapes, regions, verdicts))
        ok = tf.tensor_scatter_nd_update(ok, other_files[:, tf.newaxis], verdicts.stack())
        return shapes, regions, ok

    # Other formats and damaged JPEGs are rare: their decoding is a function of its own,
    # instantiated only when a chunk holds one (not by every new iterator).
    others = tf.function(
        decode_others, autograph=False, experimental_attributes={"_noinline": True}
    )

    def decoded_others() -> Any:
        shape_flow, region_flow, verdicts = others(shapes, regions, ok)
        # A tf.function returns a TensorArray as its flow: the same arrays, rewrapped.
        return (
            tf.TensorArray(tf.int32, flow=shape_flow),
            tf.TensorArray(tf.uint8, infer_shape=False, clear_after_read=False, flow=region_flow),
            verdicts,
        )

    if tf.executing_eagerly():  # (a function would capture the eager arrays)
        if tf.size(other_files) > 0:
            shapes, regions, ok = decode_others(shapes, regions, ok)
    else:
        shapes, regions, ok = tf.cond(
            tf.size(other_files) > 0, decoded_others, lambda: (shapes, regions, ok)
        )

    def measure_jpeg(i: tf.Tensor, shapes: Any) -> Any:
        f = tf.gather(fast_files, i)
        return shapes.write(f, tf.image.extract_jpeg_shape(data.read(f))[:2])

    shapes = tf.ensure_shape(_loop(tf.size(fast_files), measure_jpeg, shapes).stack(), [None, 2])
    boxes = request.windows(tf.gather(shapes, entry_file))  # [N, 4], vectorised
    top, left, height, width = tf.unstack(boxes, num=4, axis=1)
    # The union of each JPEG's windows, one more column on each side for libjpeg (see
    # above); another file's region is its whole image.
    heights, widths = shapes[:, 0], shapes[:, 1]
    u_top = tf.where(fast, tf.math.unsorted_segment_min(top, entry_file, count), 0)
    u_bottom = tf.math.unsorted_segment_max(top + height, entry_file, count)
    u_bottom = tf.where(fast, u_bottom, heights)
    u_left = tf.math.unsorted_segment_min(left, entry_file, count) - 1
    u_left = tf.where(fast, tf.maximum(u_left, 0), 0)
    u_right = tf.math.unsorted_segment_max(left + width, entry_file, count) + 1
    u_right = tf.where(fast, tf.minimum(u_right, widths), widths)
    unions = tf.stack([u_top, u_left, u_bottom - u_top, u_right - u_left], axis=1)

    # Each loop reads one row of a plan per iteration (few captured tensors: every one
    # is a loop variable, instantiated with each new iterator).
    decodes = tf.concat([fast_files[:, tf.newaxis], tf.gather(unions, fast_files)], 1)

    def decode_jpeg(i: tf.Tensor, regions: Any) -> Any:
        f, union = tf.split(tf.gather(decodes, i), [1, 4])
        return regions.write(f[0], jpeg_window(data.read(f[0]), union, channels))

    regions = _loop(tf.size(fast_files), decode_jpeg, regions, PARALLEL_DECODES)

    # Each entry's file and window inside its file's region (tf.slice arguments).
    n = tf.size(entry_file)
    begin = [top - tf.gather(u_top, entry_file), left - tf.gather(u_left, entry_file), 0 * top]
    cuts = tf.stack([entry_file, *begin, height, width, tf.fill([n], -1)], 1)

    def finished(j: tf.Tensor) -> tf.Tensor:
        f, begin, size = tf.split(tf.gather(cuts, j), [1, 3, 3])
        region = tf.ensure_shape(regions.read(f[0]), [None, None, channels])
        window = tf.ensure_shape(tf.slice(region, begin, size), [None, None, channels])
        return request.finish(window, j)

    spec = request.output_spec(tf.TensorSpec([None, None, channels], tf.uint8))
    out = _loop(
        n,
        lambda j, ta: ta.write(j, finished(j)),
        tf.TensorArray(spec.dtype, n, element_shape=spec.shape),
        PARALLEL_DECODES,
    )
    return out.stack(), ok


def encoded_windows(
    data: tf.Tensor, stage: WindowStage, params: tf.Tensor, channels: int = 3
) -> tf.Tensor:
    """A window stage applied to encoded images ``data`` (string ``[B]``): windows decoded alone.

    What :class:`tfdp.augment.WindowAugmentation` does with a batch of
    encoded images (e.g. JPEG records kept encoded,
    ``TFRecordSource(images="encoded")``): JPEGs have only their window
    decoded, other formats are decoded whole; images are decoded to
    ``channels`` channels. The stage's plan is a
    :class:`tfdp.windows.geometry.StageWindows` planned in the graph.
    Bit-identical to the stage on the decoded images.

    Example:
        >>> import tensorflow as tf
        >>> from tfdp.augment import RandomResizedCrop
        >>> rrc = RandomResizedCrop(8)
        >>> data = tf.stack([tf.io.encode_jpeg(tf.zeros([20, 30, 3], tf.uint8))] * 2)
        >>> seeds = tf.constant([[0, 0], [0, 1]], tf.int64)
        >>> encoded_windows(data, rrc, rrc.draw(seeds)).shape
        TensorShape([2, 8, 8, 3])
    """
    return encoded_request(data, StageWindows(stage, params), channels)


def encoded_request(data: tf.Tensor, request: WindowPlan, channels: int = 3) -> tf.Tensor:
    """A batch of encoded images ``data`` (string ``[B]``) through a window plan ``request``.

    Each distinct image is read and decoded once, over the union of its
    entries' windows (a JPEG) or whole (another format); every entry's window
    is finished by ``request.finish`` (e.g. a
    :class:`tfdp.windows.plan.WindowRequest`: resized, then the per-image
    stages) inside the decoding loop, as the image-folder window path does.

    Example:
        >>> import tensorflow as tf
        >>> from tfdp.augment import Compose, RandomFlip, RandomResizedCrop
        >>> from tfdp.windows.plan import split_window
        >>> pipe = split_window(Compose([RandomResizedCrop(8), RandomFlip()]))
        >>> data = tf.stack([tf.io.encode_jpeg(tf.zeros([20, 30, 3], tf.uint8))] * 2)
        >>> encoded_request(data, pipe.request(tf.constant([[0, 0], [0, 1]], tf.int64))).shape
        TensorShape([2, 8, 8, 3])
    """
    # Copies of one image (Repeated Augmentation's, in one batch) are read and decoded once.
    unique, entries = tf.unique(data)
    files = tf.TensorArray(tf.string, tf.size(unique), element_shape=[], clear_after_read=False)
    files = files.unstack(unique)

    def decode_whole(f: tf.Tensor) -> Decoded:
        image = tf.io.decode_image(files.read(f), channels=channels, expand_animations=False)
        return Decoded(image, tf.constant(True))

    out, _ = decode_windows(files, decode_whole, entries, request, channels)
    return out
