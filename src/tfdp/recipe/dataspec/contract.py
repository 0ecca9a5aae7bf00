"""What a data format is to tfdp: the :class:`DataFormat` contract and the requests it serves.

This module owns the contract every data format meets -- recognise a spec,
open it (:class:`OpenRequest`), hold out a part of it (:class:`HeldOut`),
write a data set in it (:class:`WriteRequest`, reporting to a
:class:`ProgressBar`) -- and nothing else: the formats themselves are one
module each in :mod:`tfdp.recipe.dataspec.formats`, whose registry is the one
list of them that ``open_source``, the training job's held-out split and
``tfdp data convert`` / ``inspect`` read.

Like every module of :mod:`tfdp.recipe.dataspec`, it speaks the library's
words: a format's errors name the Python arguments (``spec``, ``eval_fraction``,
``image_size``, ``num_shards``), which each caller says its way.

Example:
    >>> request = WriteRequest(image_size=32)
    >>> bar = request.progress(10, "npz <- digits")
    >>> bar.update(3); bar.close()
    >>> OpenRequest().require_all_classes, request.num_shards
    (True, None)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from tfdp.recipe.dataspec.opened import OpenedData

__all__ = ["DataFormat", "HeldOut", "OpenRequest", "ProgressBar", "WriteRequest", "quiet"]


@dataclass(frozen=True)
class OpenRequest:
    """What the caller asks of opening a spec (:func:`tfdp.recipe.dataspec.open_source`'s options).

    A format uses those that apply to it and ignores the others.

    Attributes:
        num_classes: The number of classes, when the caller knows it (held-out
            data: the training data's); see :func:`~tfdp.recipe.dataspec.checks.check_labels`.
        channels: Decode images to this many channels (a format whose channel
            count is chosen when decoding; None: its own choice).
        on_bad_file: ``"raise"`` or ``"skip"`` an unreadable file (formats of files).
        require_all_classes: See :func:`~tfdp.recipe.dataspec.checks.check_labels`.
        read_all_labels: Labels not known without reading every record are read
            (else ``labels`` and possibly ``num_classes`` stay None).
        class_names: The class names the data must have, when it names its
            classes; see :func:`~tfdp.recipe.dataspec.checks.check_class_names`.

    Example:
        >>> OpenRequest(num_classes=10).num_classes
        10
    """

    num_classes: int | None = None
    channels: int | None = None
    on_bad_file: str = "raise"
    require_all_classes: bool = True
    read_all_labels: bool = False
    class_names: Sequence[str] | None = None


@dataclass(frozen=True)
class HeldOut:
    """A data set split for training and exact evaluation (:meth:`DataFormat.split`).

    Attributes:
        train: The source to train on (random access, or a stream).
        eval: The held-out source, random access (exact evaluation reads each example once).
        how: How the held-out part was chosen, in words (``"a seeded 0.1 of the
            examples"``), for the run's start line.
        by_fraction: Whether the held-out part's size follows ``eval_fraction``
            (not for a split the data set fixes, like the digits').

    Example:
        >>> HeldOut([1, 2, 3], [4], "the last example").by_fraction
        True
    """

    train: Any
    eval: Any
    how: str
    by_fraction: bool = True


class ProgressBar(Protocol):
    """Where a writer reports the examples it has done (a command's progress bar, or nothing)."""

    def update(self, n: int = 1) -> None:
        """Count ``n`` more examples done."""

    def close(self) -> None:
        """End the bar (closing twice is harmless)."""


class _Quiet:
    """A progress bar that shows nothing."""

    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def quiet(total: int, desc: str) -> ProgressBar:
    """A bar for ``total`` examples that shows nothing (:class:`WriteRequest`'s default).

    Example:
        >>> quiet(5, "writing").update(2)
    """
    return _Quiet()


@dataclass(frozen=True)
class WriteRequest:
    """How to write a data set (:meth:`DataFormat.write`).

    Attributes:
        image_size: Stretch every image to ``image_size`` x ``image_size``
            (bilinear, antialiased; images of that size are untouched).
        num_shards: Files to write, for a format that shards (one whose
            ``write_options`` name it; default: its own choice).
        progress: Makes a progress bar from ``(total, description)``.

    Example:
        >>> WriteRequest(num_shards=4).image_size is None
        True
    """

    image_size: int | None = None
    num_shards: int | None = None
    progress: Callable[[int, str], ProgressBar] = field(default=quiet, repr=False)


class DataFormat(Protocol):
    """One data format tfdp reads (and perhaps writes): one class per format, one registration.

    A format is registered once, in :data:`tfdp.recipe.dataspec.formats.FORMATS`;
    opening (:func:`tfdp.recipe.dataspec.open_source`), the training job's
    held-out split and ``tfdp data convert`` / ``inspect`` find it there. It
    describes itself by ``name`` and ``about``, and the data it opens by
    :class:`~tfdp.recipe.dataspec.opened.OpenedData`'s ``details`` and ``notes``.

    Attributes:
        name: Its name: ``OpenedData.kind`` of what it opens, and the name a
            writer is chosen by (``"npz"``).
        about: How a spec of it is given, for lists of what tfdp reads
            (``"a .npz file"``).
        channels_chosen: Whether the channel count of its images is chosen when
            they are decoded (then held-out data is decoded to the training
            data's: :attr:`OpenRequest.channels`).
        writes: ``"file"`` or ``"directory"``: what :meth:`write` makes; None
            when it writes nothing.
        suffix: A destination named with this ending is written in this format
            unless another is asked for (``".npz"``); None: only when asked for.
        write_options: The :class:`WriteRequest` fields beyond ``image_size`` it
            uses (``{"num_shards"}``); asking another format for them is refused.
    """

    name: str
    about: str
    channels_chosen: bool
    writes: Literal["file", "directory"] | None
    suffix: str | None
    write_options: frozenset[str]

    def recognise(self, spec: str) -> bool:
        """Whether ``spec`` is a data set of this format (cheap: no TensorFlow, no decoding).

        Raises:
            tfdp.errors.DataError: ``spec`` is recognisably of this format but
                cannot be read (shards without their manifest).
        """
        ...

    def open(self, spec: str, request: OpenRequest) -> OpenedData:
        """Open and check ``spec`` (one this format recognised).

        The result holds its source (random access in ``source``, or a stream in
        ``stream`` with its ``layout``), labels and classes when known, the
        pixel scale, where it lies on disk (``root``) and how it describes itself
        (``details``, ``notes``).

        Raises:
            tfdp.errors.DataError: naming the file, the key and the values at fault.
        """
        ...

    def split(
        self, data: OpenedData, *, eval_fraction: float, seed: int, image_size: int | None
    ) -> HeldOut:
        """Hold out a part of ``data`` for evaluation, the same for every run of ``seed``.

        Args:
            data: What :meth:`open` gave.
            eval_fraction: About how much to hold out, in ``(0, 1)``.
            seed: The run's seed (a seeded split draws from it alone).
            image_size: The size images are resized to, if any (a stream's
                held-out part is read into memory, which needs one size).

        Raises:
            tfdp.errors.DataError: too little data to split so (naming ``spec``,
                ``eval_fraction`` or ``eval_data``: what would help).
        """
        ...

    def write(self, data: OpenedData, dst: str, request: WriteRequest) -> tuple[int, list[str]]:
        """Write ``data`` (8-bit images, labels known) to ``dst`` in this format.

        ``dst`` is absent or empty; the output is published whole (written under
        a temporary name, renamed when complete) or not at all. Only called
        when :attr:`writes` is not None.

        Returns:
            The examples written, and notes on what was written (one line each).
        """
        ...
