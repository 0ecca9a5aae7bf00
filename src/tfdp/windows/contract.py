"""The contracts of the window path, as Protocols: stage, plan, source and input layer meet here.

This module owns the interfaces the window path's parts talk through, so that
none of them imports another's classes:

====================  ==========================================================================
Protocol              members (who offers them, who uses them)
====================  ==========================================================================
WindowGeometry        ``placed``, ``windows(xp, shapes, params)``, ``placements(xp, shapes,
                      params)``: which pixels of each image a stage reads, and how they map to
                      its output, in TensorFlow or NumPy (:mod:`tfdp.windows.geometry`); a
                      window stage holds one
WindowStage           ``size``, ``placed``, ``plans_on_host``, ``windows`` / ``host_windows``,
                      ``placements`` / ``host_placements``, ``resize``: a window stage
                      (:class:`tfdp.augment.WindowAugmentation`); the plans call it
WindowPlan            ``windows(shapes)``, ``finish(window, j)``, ``output_spec(window_spec)``:
                      the augmentation's side for ``N`` entries, every draw made
                      (:class:`tfdp.windows.plan.WindowRequest`); a source calls it
WindowSource          ``load_windows(indices, plan)``: a source that decodes only the window
                      each entry keeps (:class:`tfdp.sources.ImageFolderSource`); the loader
                      calls it
EpochEntries          ``rank_entries(rank, epoch, start)``: the input layer's planned entries
                      (:class:`tfdp.input.entries.EntryPlan`); the loader calls it
ElementFinisher       ``finish_element(example, indices, positions, weights)``: the input
                      layer's last touch of a loaded batch
                      (:class:`tfdp.input.examples.ExamplePipeline`); the loader calls it
====================  ==========================================================================

This module imports no TensorFlow.

Example:
    >>> import numpy as np
    >>> from tfdp.sources import ArraySource
    >>> isinstance(ArraySource(np.zeros((2, 4, 4, 3))), WindowSource)
    False
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:  # pragma: no cover - annotations only
    import numpy as np
    import tensorflow as tf

__all__ = [
    "ElementFinisher",
    "EpochEntries",
    "WindowGeometry",
    "WindowPlan",
    "WindowSource",
    "WindowStage",
]


class WindowGeometry(Protocol):
    """Which pixels of each image a window stage reads, and how they map to its output.

    ``windows(xp, shapes, params)``: the windows int32 ``[N, 4]`` ``(top,
    left, height, width)`` of images of ``shapes`` ``[N, 2]`` for samples with
    the stage's drawn ``params``, computed with the array library ``xp``
    (:data:`tfdp._arrays.TENSORFLOW` or :data:`tfdp._arrays.NUMPY`, the same
    bits). ``placed``: whether the output is not the whole window stretched
    to the stage's size; then ``placements(xp, shapes, params)`` gives float32
    ``[N, 4]`` ``(scale_y, scale_x, translation_y, translation_x)`` of the
    output in each window. :mod:`tfdp.windows.geometry` holds tfdp's.
    """

    placed: bool

    def windows(self, xp: Any, shapes: Any, params: Any) -> Any:
        """The windows ``[N, 4]`` int32 of images of ``shapes`` ``[N, 2]``."""
        ...

    def placements(self, xp: Any, shapes: Any, params: Any) -> Any:
        """A placed geometry's placements ``[N, 4]`` float32 (see the class)."""
        ...


class WindowStage(Protocol):
    """A window stage as the window path's plans use it (:class:`tfdp.augment.WindowAugmentation`).

    ``windows(shapes, params)`` / ``placements(shapes, params)``: the
    windows (and a :attr:`placed` stage's placements) of images of
    ``shapes`` for the drawn ``params``, in the graph; ``host_windows`` /
    ``host_placements``: the same by NumPy, when ``plans_on_host``;
    ``resize(window)`` or ``resize(window, placement)``: one window's output,
    float32 ``[*size, C]``.
    """

    size: tuple[int, int]
    placed: bool
    plans_on_host: bool

    def windows(self, shapes: tf.Tensor, params: tf.Tensor) -> tf.Tensor:
        """The windows ``[N, 4]`` int32 (in the graph)."""
        ...

    def host_windows(self, shapes: np.ndarray, params: np.ndarray) -> np.ndarray:
        """The windows ``[N, 4]`` int32, by NumPy."""
        ...

    def placements(self, shapes: tf.Tensor, params: tf.Tensor) -> tf.Tensor:
        """A placed stage's placements ``[N, 4]`` float32 (in the graph)."""
        ...

    def host_placements(self, shapes: np.ndarray, params: np.ndarray) -> np.ndarray:
        """A placed stage's placements ``[N, 4]`` float32, by NumPy."""
        ...

    def resize(self, window: tf.Tensor, placement: tf.Tensor | None = None) -> tf.Tensor:
        """One window ``[h, w, C]`` resized to the stage's output."""
        ...


class WindowPlan(Protocol):
    """What a window source needs from the augmentation side for ``N`` entries.

    The plan :meth:`WindowSource.load_windows` and
    :func:`tfdp.windows.decode.decode_windows` take:
    ``windows(shapes [N, 2])`` plans every entry's window,
    ``finish(window, j)`` makes entry ``j``'s output from its window's
    pixels, ``output_spec(window_spec)`` is that output's spec.
    :class:`tfdp.windows.plan.WindowRequest` is one. A source calls
    ``windows`` before any ``finish`` (a plan may keep what ``windows``
    planned for the entries: a placed stage's placements).
    """

    def windows(self, shapes: tf.Tensor) -> tf.Tensor:
        """The windows ``[N, 4]`` ``(top, left, height, width)`` for ``shapes`` ``[N, 2]``."""
        ...

    def finish(self, window: tf.Tensor, j: Any) -> tf.Tensor:
        """Entry ``j``'s output from its window's pixels."""
        ...

    def output_spec(self, window: tf.TensorSpec) -> tf.TensorSpec:
        """The spec of :meth:`finish`'s output."""
        ...


@runtime_checkable
class WindowSource(Protocol):
    """A random-access source that can decode just the window each sample needs.

    ``load_windows(indices, plan)`` returns ``(example, weights)`` for the
    ``N`` entries of ``indices`` (int64 ``[N]``, ``N >= 1``, repeats
    allowed): ``example`` is the source's example structure batched, its
    images replaced by ``plan.finish`` of each entry's window, and
    ``weights`` float32 ``[N]`` (0 for a file skipped as unreadable).
    See :mod:`tfdp.windows.decode` for the decoding such sources share.

    Example:
        >>> import os, tempfile, tensorflow as tf
        >>> from tfdp.sources import ImageFolderSource
        >>> root = tempfile.mkdtemp(); os.makedirs(os.path.join(root, "a"))
        >>> tf.io.write_file(os.path.join(root, "a", "x.jpg"),
        ...                  tf.io.encode_jpeg(tf.zeros([4, 4, 3], tf.uint8)))
        >>> isinstance(ImageFolderSource(root), WindowSource)
        True
    """

    def load_windows(self, indices: tf.Tensor, request: WindowPlan) -> tuple[Any, tf.Tensor]:
        """Load the entries' windows (see the class docstring)."""
        ...


@runtime_checkable
class EpochEntries(Protocol):
    """The input layer's planned entries, as the window loader reads them.

    ``rank_entries(rank, epoch, start)`` gives the entries of global rank
    ``rank`` in ``epoch`` from entry ``start`` on, as four arrays of one
    length: file indices (int64), positions in the sampler's global list
    (int64), augmentation keys (int64: each entry's seed is ``[key,
    position]``) and sample weights (float32).

    Example:
        >>> import numpy as np
        >>> from tfdp import DistributedInput
        >>> from tfdp.sources import ArraySource
        >>> inp = DistributedInput(None, ArraySource(np.zeros(4)), batch_size=2)
        >>> isinstance(inp.plan, EpochEntries)
        True
    """

    def rank_entries(
        self, rank: int, epoch: int, start: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(indices, positions, keys, weights)`` of ``rank``'s ``epoch`` from ``start`` on."""
        ...


@runtime_checkable
class ElementFinisher(Protocol):
    """The input layer's last touch of a loaded batch: the element the input yields.

    ``finish_element(example, indices, positions, weights)`` turns a loaded
    batch into the element the input yields (e.g. with the weights appended,
    or the ids), inside the graph.

    Example:
        >>> import numpy as np
        >>> from tfdp import DistributedInput
        >>> from tfdp.sources import ArraySource
        >>> inp = DistributedInput(None, ArraySource(np.zeros(4)), batch_size=2)
        >>> isinstance(inp.examples, ElementFinisher)
        True
    """

    def finish_element(self, example: Any, indices: Any, positions: Any, weights: Any) -> Any:
        """The element the input yields for a loaded batch ``example`` (inside the graph)."""
        ...
