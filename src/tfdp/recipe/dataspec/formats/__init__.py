"""The data formats tfdp reads and writes: one module each, registered once, here.

This package owns the registry :data:`FORMATS`, the one list of formats that
opening (:func:`tfdp.recipe.dataspec.open_source`), the training job's
held-out split and ``tfdp data convert`` / ``inspect`` all read; each format
is one class meeting :class:`tfdp.recipe.dataspec.contract.DataFormat`, in its
own module: :mod:`~tfdp.recipe.dataspec.formats.digits` (the bundled digits),
:mod:`~tfdp.recipe.dataspec.formats.npz` (``.npz`` arrays),
:mod:`~tfdp.recipe.dataspec.formats.tfrecord` (TFRecord shards) and
:mod:`~tfdp.recipe.dataspec.formats.folder` (image folders).

A new format is one module here and one entry in :data:`FORMATS`: the data
options, ``tfdp data inspect`` and ``tfdp data convert`` (as a source, and as
a destination if it writes) then take it. The order is the order specs are
recognised in: the first format to recognise a spec opens it, so the image
folder, which takes any directory, comes last. Importing this package loads
no TensorFlow.

Example:
    >>> find_format("digits").name, [f.name for f in writers()], listed()
    ('digits', ['npz', 'tfrecord', 'folder'], "'digits' (bundled), a .npz file, the directory / manifest / glob of TFRecord shards written by write_tfrecords, or an image folder")
"""  # noqa: E501

from __future__ import annotations

import os

from tfdp.errors import ConfigError, DataError
from tfdp.recipe.dataspec.contract import DataFormat
from tfdp.recipe.dataspec.formats.digits import Digits
from tfdp.recipe.dataspec.formats.folder import ImageFolder
from tfdp.recipe.dataspec.formats.npz import Npz
from tfdp.recipe.dataspec.formats.tfrecord import TFRecordShards

__all__ = ["DEFAULT_WRITER", "FORMATS", "find_format", "format_named", "listed", "writers"]

#: Every format tfdp reads, in the order specs are recognised (the first that
#: recognises a spec opens it).
FORMATS: tuple[DataFormat, ...] = (Digits(), Npz(), TFRecordShards(), ImageFolder())

#: The format a destination is written in when neither asked for nor told by its name's ending.
DEFAULT_WRITER = "tfrecord"


def find_format(spec: str) -> DataFormat:
    """The first registered format that recognises ``spec``.

    Raises:
        tfdp.errors.DataError: ``spec`` does not exist, or no format reads it
            (``argument="spec"``, listing what would be valid).

    Example:
        >>> find_format("/no/such/data")
        Traceback (most recent call last):
        ...
        tfdp.errors.DataError: spec: '/no/such/data' does not exist (give 'digits' (bundled), a .npz file, the directory / manifest / glob of TFRecord shards written by write_tfrecords, or an image folder)
    """  # noqa: E501
    for fmt in FORMATS:
        if fmt.recognise(spec):
            return fmt
    if not os.path.exists(os.path.expanduser(spec)):
        raise DataError(f"{spec!r} does not exist (give {listed()})", argument="spec")
    raise DataError(f"{spec!r} is no data set tfdp reads (give {listed()})", argument="spec")


def format_named(name: str) -> DataFormat:
    """The registered format called ``name`` (``OpenedData.kind``).

    Raises:
        tfdp.errors.ConfigError: no registered format has that name.

    Example:
        >>> format_named("npz").suffix
        '.npz'
    """
    for fmt in FORMATS:
        if fmt.name == name:
            return fmt
    known = ", ".join(fmt.name for fmt in FORMATS)
    raise ConfigError(f"{name!r} is no registered data format ({known})", argument="name")


def writers() -> tuple[DataFormat, ...]:
    """The registered formats that write data, in registry order.

    Example:
        >>> [f.writes for f in writers()]
        ['file', 'directory', 'directory']
    """
    return tuple(fmt for fmt in FORMATS if fmt.writes is not None)


def listed() -> str:
    """What a spec can be, in words: each format's ``about``, in registry order."""
    abouts = [fmt.about for fmt in FORMATS]
    return abouts[0] if len(abouts) == 1 else ", ".join(abouts[:-1]) + ", or " + abouts[-1]
