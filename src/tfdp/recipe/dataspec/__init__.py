"""Opening a data spec -- ``digits``, a ``.npz`` file, an image folder, TFRecord shards -- checked.

This module owns what a data spec means and what the data must hold, for
every path that reads one (``tfdp train``, ``tfdp evaluate``, ``tfdp data
inspect`` and ``tfdp data convert``): :func:`open_source` finds the format of
a spec in the one registry of data formats
(:data:`tfdp.recipe.dataspec.formats.FORMATS`) and opens it into an
:class:`OpenedData`, and :func:`check_labels` / :func:`check_images` are the
one validation of labels and pixels.

The rules (errors name the file, the key and the offending values):

* **Labels** are integers ``[N]`` (``[N, 1]`` is read as ``[N]``). Floats
  holding integer values and bools are converted (said in ``notes``);
  non-integral, non-finite or negative values are refused. The number of
  classes ``K`` is ``len(classes)`` when the data names its classes, else the
  ``num_classes`` given, else the largest label + 1 -- and then every class
  in ``[0, K)`` must occur: a stray label (one ``1000`` among ``0..9``) is
  refused instead of silently building a 1,001-class model. Labels must be
  below ``K``. A single class is allowed with a warning in ``notes``.
* **Pixels**: ``uint8`` is read as ``0..255`` (scale ``1/255``); floats must
  be finite and in ``[0, 1]`` (used as they are, scale 1); other integer
  types holding ``0..255`` are converted to ``uint8``, bools to ``0/1``
  (both said in ``notes``); anything else is refused. The bundled digits are
  levels ``0..16`` (scale ``1/16``).
* **TFRecord** shards need the manifest ``write_tfrecords`` writes, which
  may also hold the class names and label counts (``tfdp data convert`` adds
  them). Without them the labels are read once (the label feature only) to
  count the classes.

It speaks the library's words: an error names the Python argument at fault
(``spec``, ``num_classes``; :attr:`tfdp.errors.TfdpError.argument`), and each
caller says it in its own (the training job renames ``spec`` to its option
``data`` with :func:`tfdp.errors.renaming`; ``tfdp data`` says it ``SRC``).
Importing this module loads no TensorFlow; opening a spec does.

The package holds one module per concern: ``contract`` (what a data format
is: :class:`~tfdp.recipe.dataspec.contract.DataFormat`), ``formats/`` (one
module per format, and their registry), ``checks`` (labels, pixels, class
names), ``opened`` (:class:`OpenedData`), ``arrays`` (what formats of arrays
share), ``shards`` (reading a stream of records: labels, into memory) and
``writing`` (what writers of directories share).

Example:
    >>> data = open_source("digits")
    >>> data.kind, data.num_examples, data.num_classes, data.scale
    ('digits', 1797, 10, 0.0625)
"""

from __future__ import annotations

from collections.abc import Sequence

from tfdp.errors import ConfigError
from tfdp.recipe.dataspec.checks import check_class_names, check_images, check_labels
from tfdp.recipe.dataspec.contract import OpenRequest
from tfdp.recipe.dataspec.formats import find_format
from tfdp.recipe.dataspec.opened import OpenedData, RecordLayout
from tfdp.recipe.dataspec.shards import (
    in_memory,
    random_access,
    read_error,
    read_labels,
    resize_uint8,
)

__all__ = [
    "OpenedData",
    "RecordLayout",
    "check_class_names",
    "check_images",
    "check_labels",
    "in_memory",
    "open_source",
    "random_access",
    "read_error",
    "read_labels",
    "resize_uint8",
]


def open_source(
    spec: str,
    *,
    num_classes: int | None = None,
    channels: int | None = None,
    on_bad_file: str = "raise",
    require_all_classes: bool = True,
    read_all_labels: bool = False,
    class_names: Sequence[str] | None = None,
) -> OpenedData:
    """Open a data spec: ``"digits"``, a .npz file, an image folder, or TFRecord shards.

    The first registered format that recognises ``spec`` opens it
    (:func:`tfdp.recipe.dataspec.formats.find_format`). TFRecord shards are
    given as their directory, their manifest (``*.manifest.json``), one of
    their files or a glob of some of them (then the classes are not taken
    from the manifest's counts, which cover all files).

    Args:
        spec: What to open.
        num_classes: The number of classes, when the caller knows it (held-out
            data: the training data's); see :func:`check_labels`.
        channels: Decode an image folder to this many channels (default: the
            most found among a sample of its files).
        on_bad_file: Image folders: ``"raise"`` or ``"skip"`` (see
            :class:`tfdp.ImageFolderSource`'s ``on_error``).
        require_all_classes: See :func:`check_labels`.
        read_all_labels: TFRecord data whose manifest has no class list: read
            the labels (:func:`read_labels`) to count and check the classes.
            Otherwise ``num_classes`` stays None.
        class_names: The class names the data must have, when it names its
            classes (held-out data: the training data's); see :func:`check_class_names`.

    Raises:
        tfdp.errors.DataError: ``spec`` does not exist (``argument="spec"``),
            is not a data set tfdp reads, or fails a check (naming the file,
            the key and the values).
        FileNotFoundError: a glob of TFRecord files matches none.

    Example:
        >>> import tempfile, os, numpy as np
        >>> path = os.path.join(tempfile.mkdtemp(), "d.npz")
        >>> np.savez(path, images=np.zeros((3, 2, 2), np.uint8), labels=[0.0, 1.0, 1.0])
        >>> data = open_source(path)
        >>> data.kind, data.num_classes, data.image_shape, data.notes
        ('npz', 2, (2, 2, 1), [".../d.npz (key 'labels'): float64 labels hold integer values: read as int64"])
    """  # noqa: E501
    if on_bad_file not in ("raise", "skip"):
        raise ConfigError(f"must be 'raise' or 'skip', got {on_bad_file!r}", argument="on_bad_file")
    request = OpenRequest(
        num_classes=num_classes,
        channels=channels,
        on_bad_file=on_bad_file,
        require_all_classes=require_all_classes,
        read_all_labels=read_all_labels,
        class_names=class_names,
    )
    data = find_format(spec).open(spec, request)
    data.spec = spec
    return data
