"""Window decoding: sources that decode only the window of an image an augmentation keeps.

This module owns the contract between a window-decoding source and the input
layer (:class:`WindowSource`) and the decoding loop such sources share
(:func:`decode_windows`). The augmentation side of the contract is
:class:`tfdp.augment.WindowRequest`: it plans each sample's window from the
image's shape and the sample's seed, and finishes a decoded window into the
sample's output.

How a batch of ``N`` entries (file indices, repeats allowed) is loaded:

1. each distinct file is opened once: read, checked, and its shape taken
   from the JPEG header (``tf.image.extract_jpeg_shape``; other formats are
   decoded here and measured);
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

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol, runtime_checkable

import tensorflow as tf

from tfdp.augment import WindowRequest

__all__ = ["OpenedImage", "WindowSource", "decode_windows", "jpeg_window"]


@runtime_checkable
class WindowSource(Protocol):
    """A random-access source that can decode just the window each sample needs.

    ``load_windows(indices, request)`` returns ``(example, weights)`` for the
    ``N`` entries of ``indices`` (int64 ``[N]``, ``N >= 1``, repeats
    allowed): ``example`` is the source's example structure batched, its
    images replaced by ``request.finish`` of each entry's window, and
    ``weights`` float32 ``[N]`` (0 for a file skipped as unreadable).
    """

    def load_windows(self, indices: tf.Tensor, request: WindowRequest) -> tuple[Any, tf.Tensor]:
        """Load the entries' windows (see the class docstring)."""
        ...


class OpenedImage(NamedTuple):
    """One file opened for window decoding (what :func:`decode_windows` needs of it).

    Attributes:
        jpeg: Scalar bool: ``data`` is a JPEG whose windows libjpeg decodes.
        data: Scalar string: the encoded bytes (used when ``jpeg``).
        image: uint8 ``[H, W, C]``: the decoded image when not ``jpeg``
            (a placeholder for an unreadable file); ``[0, 0, C]`` otherwise.
        shape: int32 ``[2]``: the image's ``(height, width)``.
        ok: Scalar bool: False for a file replaced by a placeholder.
    """

    jpeg: tf.Tensor
    data: tf.Tensor
    image: tf.Tensor
    shape: tf.Tensor
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


def decode_windows(
    count: tf.Tensor,
    open_file: Callable[[tf.Tensor], OpenedImage],
    entry_file: tf.Tensor,
    request: WindowRequest,
    channels: int,
) -> tuple[tf.Tensor, tf.Tensor]:
    """Decode each file once and finish every entry's window (see the module docstring).

    Args:
        count: Number of distinct files (scalar int32).
        open_file: ``i -> OpenedImage`` for file ``i`` in ``[0, count)``
            (graph code: read, check, measure).
        entry_file: int32 ``[N]``: the file of each entry (``N >= 1``).
        request: The augmentation's :class:`tfdp.augment.WindowRequest` for
            the ``N`` entries.
        channels: Channels of the decoded images.

    Returns:
        ``(outputs, ok)``: ``request.finish`` of every entry's window,
        stacked ``[N, ...]`` in entry order, and each file's ``ok`` ``[count]``.
    """

    def open_body(i: tf.Tensor, jpeg: Any, data: Any, images: Any, shapes: Any, ok: Any) -> Any:
        f = open_file(i)
        return (
            i + 1,
            jpeg.write(i, f.jpeg),
            data.write(i, f.data),
            images.write(i, tf.ensure_shape(f.image, [None, None, channels])),
            shapes.write(i, f.shape),
            ok.write(i, f.ok),
        )

    _, jpeg, data, images, shapes, ok = tf.while_loop(
        lambda i, *_: i < count,
        open_body,
        (
            tf.constant(0),
            tf.TensorArray(tf.bool, count, element_shape=[]),
            tf.TensorArray(tf.string, count, element_shape=[]),
            tf.TensorArray(
                tf.uint8, count, infer_shape=False, element_shape=[None, None, channels]
            ),
            tf.TensorArray(tf.int32, count, element_shape=[2]),
            tf.TensorArray(tf.bool, count, element_shape=[]),
        ),
        parallel_iterations=1,
    )
    jpeg, shapes = jpeg.stack(), shapes.stack()
    boxes = request.windows(tf.gather(shapes, entry_file))  # [N, 4], vectorised
    top, left, height, width = tf.unstack(boxes, num=4, axis=1)
    # The union of each file's windows; one more column on each side for libjpeg (see above).
    u_top = tf.math.unsorted_segment_min(top, entry_file, count)
    u_bottom = tf.math.unsorted_segment_max(top + height, entry_file, count)
    u_left = tf.math.unsorted_segment_min(left, entry_file, count)
    u_right = tf.math.unsorted_segment_max(left + width, entry_file, count)
    margin = tf.cast(jpeg, tf.int32)
    u_left = tf.maximum(u_left - margin, 0)
    u_right = tf.minimum(u_right + margin, shapes[:, 1])

    def region_body(i: tf.Tensor, regions: Any) -> Any:
        def window() -> tf.Tensor:
            crop = tf.stack([u_top[i], u_left[i], u_bottom[i] - u_top[i], u_right[i] - u_left[i]])
            return jpeg_window(data.read(i), crop, channels)

        def cut() -> tf.Tensor:
            return images.read(i)[u_top[i] : u_bottom[i], u_left[i] : u_right[i]]

        return i + 1, regions.write(i, tf.cond(jpeg[i], window, cut))

    _, regions = tf.while_loop(
        lambda i, _: i < count,
        region_body,
        (
            tf.constant(0),
            tf.TensorArray(
                tf.uint8,
                count,
                infer_shape=False,
                element_shape=[None, None, channels],
                clear_after_read=False,  # read once per entry of the file
            ),
        ),
        parallel_iterations=1,
    )

    def finish(j: tf.Tensor) -> tf.Tensor:
        f = entry_file[j]
        y, x = top[j] - u_top[f], left[j] - u_left[f]
        return request.finish(regions.read(f)[y : y + height[j], x : x + width[j]], j)

    first = finish(tf.constant(0))  # traced once outside the loop: the outputs' dtype and shape
    n = tf.size(entry_file)
    spec = tf.TensorSpec.from_tensor(first)

    def finish_body(j: tf.Tensor, out: Any) -> Any:
        return j + 1, out.write(j, finish(j))

    _, out = tf.while_loop(
        lambda j, _: j < n,
        finish_body,
        (
            tf.constant(1),
            tf.TensorArray(spec.dtype, n, element_shape=spec.shape).write(0, first),
        ),
        parallel_iterations=1,
    )
    return out.stack(), ok.stack()
