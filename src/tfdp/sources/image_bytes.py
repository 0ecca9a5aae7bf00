"""Encoded image bytes: their format, whether TensorFlow's decoders would take them, decoding.

This module owns what tfdp knows of image files' bytes: :func:`sniff` (the
format from the header, and why the bytes would not decode) and :func:`decode`
(to a chosen channel count). All of it runs inside a graph.

TensorFlow's decoders do not name the file they fail on, so a source checks
the bytes before decoding: an empty file, an unrecognised header, a truncated
JPEG (no end-of-image marker after the image data, embedded EXIF thumbnails
skipped), a truncated PNG (no ``IEND`` chunk), a BMP whose size does not match
its header, or a truncated WebP (shorter than its RIFF header says). The checks
only flag files TensorFlow's decoders reject (a JPEG with junk after its end
marker still decodes). GIF and BMP files are checked by header only; damage
deep inside the compressed data that only the decoder notices is left to it.

Example:
    >>> png = tf.io.encode_png(tf.zeros([2, 2, 3], tf.uint8))
    >>> sniff(tf.strings.substr(png, 0, tf.strings.length(png) - 12))[1].numpy()
    b'truncated or corrupt PNG (no IEND chunk)'
"""

from __future__ import annotations

import tensorflow as tf

_JPEG_MAGIC = b"\xff\xd8\xff"
_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
_PNG_IEND = b"\x00\x00\x00\x00IEND\xaeB`\x82"
_JPEG_EOI = b"\xff\xd9"
# Upper bound on the markers walked while looking for a JPEG's first scan; past
# it the file is passed to the decoder unjudged (never rejected on a guess).
_JPEG_MAX_STEPS = 512


def _contains(data: tf.Tensor, needle: bytes) -> tf.Tensor:
    """Whether the scalar string ``data`` contains ``needle`` (binary-safe)."""
    return tf.size(tf.strings.split(data, sep=needle, maxsplit=1)) > 1


def _byte_values(data: tf.Tensor, pos: tf.Tensor, count: int) -> tf.Tensor:
    """``count`` bytes of ``data`` from ``pos`` as int32, zero past the end."""
    size = tf.strings.length(data)
    chunk = tf.strings.substr(data, tf.minimum(pos, size), count)
    padded = tf.strings.join([chunk, tf.constant(b"\x00" * count)])
    return tf.cast(tf.io.decode_raw(tf.strings.substr(padded, 0, count), tf.uint8), tf.int32)


def _jpeg_scan_start(data: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Walk a JPEG's marker segments to its first start-of-scan.

    Returns ``(status, pos)``: status 1 with the offset of the first SOS
    marker, 0 when the data ended (or an EOI came) before any scan, -1 when
    the walk gave up (too many markers): no verdict.
    """
    size = tf.strings.length(data)

    def body(
        pos: tf.Tensor, status: tf.Tensor, steps: tf.Tensor
    ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        b = _byte_values(data, pos, 4)
        marker = b[1]
        seg_len = b[2] * 256 + b[3]
        standalone = (marker == 0x01) | (marker == 0xD8) | ((marker >= 0xD0) & (marker <= 0xD7))
        # libjpeg skips stray bytes before a marker and 0xFF fill bytes: so do we.
        step = tf.where(
            (b[0] != 0xFF) | (marker == 0xFF),
            1,
            tf.where(standalone, 2, 2 + seg_len),
        )
        at_end = pos + 4 > size
        found = (b[0] == 0xFF) & (marker == 0xDA)
        eoi = (b[0] == 0xFF) & (marker == 0xD9)
        new_status = tf.where(found, 1, tf.where(at_end | eoi, 0, status))
        new_steps = steps + 1
        new_status = tf.where((new_status == 2) & (new_steps >= _JPEG_MAX_STEPS), -1, new_status)
        return pos + tf.where(new_status == 2, step, 0), new_status, new_steps

    pos, status, _ = tf.while_loop(
        lambda pos, status, steps: status == 2,
        body,
        (tf.constant(2), tf.constant(2), tf.constant(0)),
    )
    return status, pos


def _jpeg_problem(data: tf.Tensor) -> tf.Tensor:
    """Empty string for a JPEG whose image data is followed by an end-of-image marker."""
    size = tf.strings.length(data)
    ends_with_eoi = tf.strings.substr(data, tf.maximum(size - 2, 0), 2) == _JPEG_EOI

    def walk() -> tf.Tensor:
        status, pos = _jpeg_scan_start(data)
        rest = tf.strings.substr(data, tf.minimum(pos + 2, size), size)
        complete = (status == -1) | ((status == 1) & _contains(rest, _JPEG_EOI))
        return tf.where(
            complete,
            tf.constant(""),
            tf.constant("truncated or corrupt JPEG (no end-of-image marker after the image data)"),
        )

    return tf.cond(ends_with_eoi, lambda: tf.constant(""), walk)


def _png_problem(data: tf.Tensor) -> tf.Tensor:
    """Empty string for a PNG that has its ``IEND`` chunk (CRC included)."""
    size = tf.strings.length(data)
    tail = tf.strings.substr(data, tf.maximum(size - 12, 0), 12)
    return tf.cond(
        (tail == _PNG_IEND) | _contains(data, _PNG_IEND),
        lambda: tf.constant(""),
        lambda: tf.constant("truncated or corrupt PNG (no IEND chunk)"),
    )


def _le_uint(head: tf.Tensor, offset: int, nbytes: int) -> tf.Tensor:
    """Little-endian unsigned integer of ``nbytes`` at ``offset`` of ``head``, as int64."""
    b = tf.cast(tf.io.decode_raw(tf.strings.substr(head, offset, nbytes), tf.uint8), tf.int64)
    return sum(b[i] * 2 ** (8 * i) for i in range(nbytes))


def _webp_problem(head: tf.Tensor, size: tf.Tensor) -> tf.Tensor:
    """Empty string for a WebP at least as long as its RIFF header says."""
    short = tf.cast(size, tf.int64) < _le_uint(head, 4, 4) + 8
    return tf.where(short, tf.constant("truncated WebP (shorter than its RIFF header)"), "")


def _bmp_problem(head: tf.Tensor, size: tf.Tensor) -> tf.Tensor:
    """Empty string for a BMP whose size is what TensorFlow's decoder requires (exactly)."""
    offset = _le_uint(head, 10, 4)
    width = _le_uint(head, 18, 4)
    height = _le_uint(head, 22, 4)
    height = tf.where(height >= 2**31, height - 2**32, height)  # signed: negative = top-down
    channels = _le_uint(head, 28, 2) // 8
    row = (channels * width + 3) // 4 * 4
    ok = (
        (tf.cast(size, tf.int64) >= 32)
        & ((channels == 1) | (channels == 3) | (channels == 4))
        & (width > 0)
        & (height != 0)
        & (tf.cast(size, tf.int64) == offset + row * tf.abs(height))
    )
    return tf.where(ok, "", tf.constant("truncated or corrupt BMP (size does not match header)"))


#: Format codes of :func:`sniff` (``FORMAT_NAMES[code]`` names one).
UNKNOWN, JPEG, PNG, GIF, BMP, WEBP = range(6)
FORMAT_NAMES = ("unknown", "JPEG", "PNG", "GIF", "BMP", "WebP")


def sniff(data: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """``(format code, problem)`` of encoded image bytes; problem ``""`` when sound.

    Example:
        >>> fmt, problem = sniff(tf.io.encode_png(tf.zeros([2, 2, 3], tf.uint8)))
        >>> FORMAT_NAMES[int(fmt)], problem.numpy()
        ('PNG', b'')
        >>> sniff(tf.constant(b"not an image"))[1].numpy()
        b'not a JPEG, PNG, GIF, BMP or WebP file (unrecognised header)'
    """
    size = tf.strings.length(data)
    head = tf.strings.join([tf.strings.substr(data, 0, 32), tf.constant(b"\x00" * 32)])
    is_jpeg = tf.strings.substr(head, 0, 3) == _JPEG_MAGIC
    is_png = tf.strings.substr(head, 0, 8) == _PNG_MAGIC
    sig6 = tf.strings.substr(head, 0, 6)
    is_gif = (sig6 == b"GIF87a") | (sig6 == b"GIF89a")
    is_bmp = tf.strings.substr(head, 0, 2) == b"BM"
    is_webp = (tf.strings.substr(head, 0, 4) == b"RIFF") & (
        tf.strings.substr(head, 8, 4) == b"WEBP"
    )
    fmt = tf.where(
        is_jpeg,
        JPEG,
        tf.where(
            is_png,
            PNG,
            tf.where(is_gif, GIF, tf.where(is_bmp, BMP, tf.where(is_webp, WEBP, UNKNOWN))),
        ),
    )
    problem = tf.switch_case(
        fmt,
        [
            lambda: tf.constant("not a JPEG, PNG, GIF, BMP or WebP file (unrecognised header)"),
            lambda: _jpeg_problem(data),
            lambda: _png_problem(data),
            lambda: tf.constant(""),
            lambda: _bmp_problem(head, size),
            lambda: _webp_problem(head, size),
        ],
    )
    problem = tf.where(size == 0, tf.constant("empty file"), problem)
    return fmt, problem


def to_channels(image: tf.Tensor, channels: int) -> tf.Tensor:
    """A decoded uint8 image with 1, 3 or 4 channels, converted to ``channels`` channels.

    Example:
        >>> to_channels(tf.zeros([2, 2, 1], tf.uint8), 4).shape
        TensorShape([2, 2, 4])
    """
    have = tf.shape(image)[-1]
    if channels == 1:
        return tf.cond(
            have == 1,
            lambda: image,
            lambda: tf.image.rgb_to_grayscale(image[..., :3]),
        )
    rgb = tf.cond(have == 1, lambda: tf.tile(image[..., :1], [1, 1, 3]), lambda: image[..., :3])
    if channels == 3:
        return rgb
    opaque = tf.constant(255, tf.uint8)
    return tf.cond(
        have == 4,
        lambda: image,
        lambda: tf.concat([rgb, tf.fill(tf.concat([tf.shape(rgb)[:2], [1]], 0), opaque)], -1),
    )


def decode(data: tf.Tensor, fmt: tf.Tensor, channels: int) -> tf.Tensor:
    """Decode sound image bytes of format ``fmt`` (:func:`sniff`) to uint8 ``[H, W, channels]``.

    PNG (and JPEG, up to 3 channels) decode straight to the wanted channels;
    TensorFlow's other decoders refuse some channel counts, so those decode
    as stored and are converted (:func:`to_channels`).

    Example:
        >>> data = tf.io.encode_png(tf.zeros([2, 3, 1], tf.uint8))
        >>> decode(data, sniff(data)[0], 3).shape
        TensorShape([2, 3, 3])
    """

    def as_stored() -> tf.Tensor:
        image = tf.io.decode_image(data, channels=0, expand_animations=False)
        return to_channels(image, channels)

    direct = fmt == PNG
    if channels < 4:
        direct |= fmt == JPEG
    image = tf.cond(
        direct,
        lambda: tf.io.decode_image(data, channels=channels, expand_animations=False),
        as_stored,
    )
    image.set_shape([None, None, channels])
    return image
