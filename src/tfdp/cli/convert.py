"""``tfdp data convert``: a data set written in another format (digits, .npz, folders, TFRecord).

This module owns :func:`convert_data`: the destination and its format
chosen and checked (``--to``, else from the destination's name), the source
opened and checked by :func:`tfdp.recipe.dataspec.open_source` -- the same as
``tfdp train`` does: what training refuses (non-integral or stray labels,
non-finite pixels, floats outside [0, 1]) is refused here too -- and the
writing left to the destination's format
(:meth:`tfdp.recipe.dataspec.contract.DataFormat.write`, one of
:func:`tfdp.recipe.dataspec.formats.writers`). What each format reads and
writes is said in its module (:mod:`tfdp.recipe.dataspec.formats`): ``.npz``
arrays ``images`` uint8 and ``labels`` int64 (and ``classes``); an image
folder ``DST/<class>/<index>.png``; TFRecord shards in a seeded shuffled
order with a manifest that names the classes (so that ``tfdp train`` knows
them without reading every label), a JPEG folder's files byte for byte.
Output is written under a temporary name and renamed when complete.

Example:
    $ tfdp data convert digits digits.npz
    $ tfdp data convert ~/imagenet/train shards/ --shards 1024 --image-size 224
"""

from __future__ import annotations

import os

from tfdp.cli.progress import Progress
from tfdp.errors import ConfigError, DataError, renaming
from tfdp.recipe.dataspec import OpenedData, open_source, read_error, read_labels
from tfdp.recipe.dataspec.contract import DataFormat, WriteRequest
from tfdp.recipe.dataspec.formats import DEFAULT_WRITER, format_named, writers


def default_destination() -> str:
    """How the destination's format is chosen without ``--to``, in words (for the help).

    Example:
        >>> default_destination()
        'a .npz name -> npz, anything else -> tfrecord'
    """
    named = [f"a {fmt.suffix} name -> {fmt.name}" for fmt in writers() if fmt.suffix]
    return ", ".join([*named, f"anything else -> {DEFAULT_WRITER}"])


def _destination_format(dst: str, to: str | None) -> DataFormat:
    if to is not None:
        names = [fmt.name for fmt in writers()]
        if to not in names:
            raise ConfigError(f"must be one of {', '.join(names)}, got {to!r}", argument="to")
        return format_named(to)
    for fmt in writers():
        if fmt.suffix and dst.endswith(fmt.suffix):
            return fmt
    return format_named(DEFAULT_WRITER)


def _check_dst(dst: str, fmt: DataFormat) -> None:
    """Refuse a destination of the wrong kind or not empty (before any data is opened)."""
    if os.path.isdir(dst):
        if fmt.writes == "file":
            raise ConfigError(
                f"{dst!r} is a directory; --to {fmt.name} writes a file", argument="dst"
            )
        if os.listdir(dst):
            raise ConfigError(
                f"{dst!r} exists and is not empty; remove it or choose another path "
                "(tfdp data convert never overwrites)",
                argument="dst",
            )
    elif os.path.exists(dst):
        if fmt.writes != "file":
            raise ConfigError(
                f"{dst!r} is a file; --to {fmt.name} writes a directory", argument="dst"
            )
        if os.path.getsize(dst) > 0:
            raise ConfigError(
                f"{dst!r} exists and is not empty; remove it or choose another path "
                "(tfdp data convert never overwrites)",
                argument="dst",
            )


def _check_dst_outside(dst: str, data: OpenedData) -> None:
    """Refuse a destination that is the source or lies inside it."""
    if data.root is not None:
        src_real = os.path.realpath(data.root)
        dst_real = os.path.realpath(dst)
        if dst_real == src_real or (
            os.path.isdir(src_real) and os.path.commonpath([src_real, dst_real]) == src_real
        ):
            raise ConfigError(
                f"{dst!r} is {{src}} or lies inside it; write elsewhere",
                argument="dst",
                mentions=["src"],
            )


def convert_data(
    src: str,
    dst: str | os.PathLike[str],
    *,
    to: str | None = None,
    shards: int | None = None,
    image_size: int | None = None,
    num_classes: int | None = None,
    progress: bool = True,
) -> str:
    """Convert a data set between the registered formats (digits, .npz, folders, TFRecord).

    The output is written under a temporary sibling name and renamed when
    complete: an error never leaves a half-written ``dst``. An existing
    non-empty ``dst`` is never overwritten. See the module docstring for the
    formats.

    Args:
        src: ``"digits"``, a .npz file, an image folder, or a TFRecord
            directory / manifest written by ``write_tfrecords``.
        dst: Where to write: a ``.npz`` file, or a directory (TFRecord shards
            or an image folder).
        to: The destination's format (``"tfrecord"``, ``"npz"``, ``"folder"``);
            default from ``dst``: ``.npz`` -> npz, anything else -> tfrecord.
        shards: TFRecord files to write (default: about 10,000 examples per
            file, at least 8, at most one per example).
        image_size: Stretch every image to ``image_size`` x ``image_size``
            (bilinear, antialiased; images of that size are untouched).
            Needed for .npz output when the images differ in size.
        num_classes: The number of classes, when the labels do not use them
            all (see :func:`tfdp.recipe.dataspec.check_labels`).
        progress: Show a progress bar on stderr (when it is a terminal).

    Returns:
        What was written: one summary line, then notes (shards, renumbered classes) if any.

    Raises:
        ConfigError: bad arguments, a non-empty ``dst``.
        DataError: a missing or unreadable ``src``, differing image sizes for .npz
            without ``image_size``, a corrupt image (naming the file).

    Example:
        >>> import os, tempfile
        >>> out = os.path.join(tempfile.mkdtemp(), "digits.npz")
        >>> convert_data("digits", out, progress=False)  # doctest: +ELLIPSIS
        'wrote 1797 examples (npz) to .../digits.npz'
    """
    dst = os.path.expanduser(os.fspath(dst))
    if not dst:
        raise ConfigError("empty", argument="dst")
    fmt = _destination_format(dst, to)
    if shards is not None and "num_shards" not in fmt.write_options:
        takes = " or ".join(f.name for f in writers() if "num_shards" in f.write_options)
        raise ConfigError(f"applies to {takes} output only, not --to {fmt.name}", argument="shards")
    for name, value in (("shards", shards), ("image_size", image_size)):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):
            raise ConfigError(f"must be an integer >= 1, got {value!r}", argument=name)
    _check_dst(dst, fmt)  # before open_source: bad paths are refused before TensorFlow loads
    with renaming({"spec": "src"}):
        data = open_source(src, num_classes=num_classes)
    _check_dst_outside(dst, data)
    if data.dtype != "uint8":
        raise DataError(
            f"{data.where}: holds {data.dtype} images; tfdp data convert writes 8-bit images: "
            "store them as uint8 levels 0..255"
        )
    if data.channels not in (1, 3, 4):
        raise DataError(f"{data.where}: images must have 1, 3 or 4 channels, got {data.channels}")
    import tensorflow as tf

    if data.labels is None:  # TFRecord without a class list: read and check the labels first
        read_labels(data, num_classes=num_classes)

    request = WriteRequest(
        image_size=image_size,
        num_shards=shards,
        progress=lambda total, desc: Progress(total, desc, progress),
    )
    try:
        with renaming({"num_shards": "shards"}):
            written, notes = fmt.write(data, dst, request)
    except tf.errors.OpError as err:
        raise read_error(data, err) from err
    summary = f"wrote {written} examples ({fmt.name}) to {dst}"
    return "\n".join([summary, *notes, *data.notes])
