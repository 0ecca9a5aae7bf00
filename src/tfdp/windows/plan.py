"""Planning the window path: an augmentation split for a window source, and every draw made.

This module owns :func:`split_window` (an augmentation that starts with a
window stage -> :class:`WindowPipeline`: the window stage, the per-image
stages after it, the batch stages) and :class:`WindowRequest` (what a
source needs for ``N`` samples: their draws, made at once and vectorised, a
:class:`tfdp.windows.contract.WindowPlan`: the window stage's windows by its
geometry, :class:`tfdp.windows.geometry.StageWindows`, then the per-image
stages). With ``on_host`` the draws and the windows are computed by NumPy --
the same bits, one graph node each -- for a graph that is instantiated often
(a ``tf.data`` function). The output for a sample is bit-identical to the
augmentation on the decoded image.

Example:
    >>> import tensorflow as tf
    >>> from tfdp.augment import Compose, RandomFlip, RandomResizedCrop
    >>> pipe = split_window(Compose([RandomResizedCrop(4), RandomFlip()]))
    >>> request = pipe.request(tf.constant([[0, 0], [0, 1]], tf.int64), on_host=True)
    >>> request.windows(tf.constant([[10, 12], [10, 12]])).shape
    TensorShape([2, 4])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf

from tfdp.augment import Augmentation, Compose, WindowAugmentation
from tfdp.augment.compose import stage_seeds
from tfdp.random import as_seeds, fold_in, folded_uniforms
from tfdp.windows.geometry import StageWindows


def _draw(
    seeds: tf.Tensor, stages: Sequence[tuple[int | None, Augmentation]], on_host: bool
) -> list[tf.Tensor]:
    """Every stage's ``draw`` of its :class:`Compose` seeds (index ``None``: the seeds as they are).

    The stages that draw :func:`tfdp.random.per_sample_uniform` numbers share
    two hash passes (:func:`tfdp.random.folded_uniforms`; on the host with
    ``on_host``); the others draw on their own.
    """
    shared = [
        (i, index, stage.draw_count())
        for i, (index, stage) in enumerate(stages)
        if stage.random and stage.draw_count()
    ]
    params: list[tf.Tensor | None] = [None] * len(stages)
    if shared:
        drawn = folded_uniforms(seeds, [(index, n) for _, index, n in shared], on_host=on_host)
        for (i, _, _), p in zip(shared, drawn, strict=True):
            params[i] = p
    for i, (index, stage) in enumerate(stages):
        if params[i] is None:
            params[i] = stage.draw(stage_seeds(seeds, index, stage))
    return params  # type: ignore[return-value]


class WindowRequest:
    """What a window-decoding source needs for ``N`` samples, with every random draw made.

    Built by :meth:`WindowPipeline.request` from the samples' seeds: the
    draws of the window stage and of the per-image stages after it are made
    once, vectorised over the ``N`` samples (with ``on_host``, the
    :func:`tfdp.random.per_sample_uniform` numbers by NumPy on the host: the same values,
    one graph node instead of the hash's). The source then calls
    :meth:`windows` with the images' shapes (read from the file headers) and
    :meth:`finish` on each decoded window.

    Example:
        >>> import tensorflow as tf
        >>> from tfdp.augment import Compose, RandomFlip, RandomResizedCrop
        >>> pipe = split_window(Compose([RandomResizedCrop(4), RandomFlip()]))
        >>> req = pipe.request(tf.constant([[0, 0], [0, 1]], tf.int64))
        >>> boxes = req.windows(tf.constant([[10, 12], [10, 12]]))
        >>> req.finish(tf.zeros([5, 6, 3], tf.uint8), 1).shape
        TensorShape([4, 4, 3])
        >>> host = pipe.request(tf.constant([[0, 0], [0, 1]], tf.int64), on_host=True)
        >>> bool(tf.reduce_all(host.windows(tf.constant([[10, 12], [10, 12]])) == boxes))
        True
    """

    def __init__(
        self, pipeline: WindowPipeline, seeds: tf.Tensor, *, on_host: bool = False
    ) -> None:
        seeds = as_seeds(seeds)
        self.pipeline = pipeline
        self.on_host = bool(on_host)
        stages = [(pipeline.window_index, pipeline.window), *pipeline.image_stages]
        params = _draw(seeds, stages, on_host)
        #: The window stage's plan: its windows (on the host with ``on_host``) and resize.
        self.stage = StageWindows(pipeline.window, params[0], on_host=on_host)
        self._stage_params = params[1:]

    def windows(self, shapes: tf.Tensor) -> tf.Tensor:
        """The windows ``[N, 4]`` int32 ``(top, left, height, width)`` for ``shapes`` ``[N, 2]``.

        With ``on_host``, planned by NumPy (:meth:`WindowAugmentation.host_windows`)
        in one ``tf.numpy_function`` when the stage can. A placed stage's
        placements (:meth:`WindowAugmentation.placements`) are planned here
        too, for :meth:`finish` (:meth:`tfdp.windows.geometry.StageWindows.windows`).
        """
        return self.stage.windows(shapes)

    def finish(self, window: tf.Tensor, j: Any) -> tf.Tensor:
        """Sample ``j``'s output from its window's pixels ``[h, w, C]``.

        The window is resized (a placed stage: with its placement, planned by
        :meth:`windows`, which is called first), then the per-image stages
        apply their drawn parameters (row ``j``).

        Raises:
            StateError: a placed stage's window finished before :meth:`windows` planned it.
        """
        params = [p[j : j + 1] for p in self._stage_params]
        return self._finish(window, self.stage.placement(j), *params)

    def _finish(
        self, window: tf.Tensor, placement: tf.Tensor | None, *params: tf.Tensor
    ) -> tf.Tensor:
        image = self.stage.resize(window, placement)[tf.newaxis]
        for (_, stage), p in zip(self.pipeline.image_stages, params, strict=True):
            image = stage.apply(image, p)
        return image[0]

    def output_spec(self, window: tf.TensorSpec) -> tf.TensorSpec:
        """The spec of :meth:`finish`'s output for windows of spec ``window``.

        Traced on its own (nothing is added to the caller's graph).

        Example:
            >>> import tensorflow as tf
            >>> from tfdp.augment import Compose, RandomResizedCrop, ToFloat
            >>> pipe = split_window(Compose([RandomResizedCrop(4), ToFloat()]))
            >>> req = pipe.request(tf.constant([[0, 0]], tf.int64))
            >>> req.output_spec(tf.TensorSpec([None, None, 3], tf.uint8))
            TensorSpec(shape=(4, 4, 3), dtype=tf.float32, name=None)
        """
        params = [tf.TensorSpec([1, *p.shape[1:]], p.dtype) for p in self._stage_params]
        placement = tf.TensorSpec([4], tf.float32) if self.pipeline.window.placed else None
        traced = tf.function(self._finish, autograph=False).get_concrete_function(
            window, placement, *params
        )
        out = traced.structured_outputs
        return tf.TensorSpec(out.shape, out.dtype)


class WindowPipeline:
    """An augmentation split into a window stage, per-image stages and batch stages.

    Made by :func:`split_window`. For sample seeds ``s``, the augmentation
    equals: cut and resize the window (seeds ``window_index`` folded in, or
    ``s`` itself for a bare window stage), then each per-image stage ``i``
    with ``fold_in(s, i)``, sample by sample, then the batch stages on the
    assembled batch (:meth:`finish_batch`) -- the same values bit for bit as
    calling the augmentation on a batch of the decoded images.

    Attributes:
        window: The :class:`WindowAugmentation`.
        window_index: Its stage index in the :class:`Compose` (``None``: bare).
        image_stages: ``(index, stage)`` of the :class:`Augmentation` stages
            right after the window stage, applied per image.
        batch_stages: ``(index, stage)`` of the remaining stages (other
            callables, e.g. nested :class:`Compose` or a mix of samples),
            applied to the batch.
    """

    def __init__(
        self,
        window: WindowAugmentation,
        window_index: int | None = None,
        image_stages: Sequence[tuple[int, Augmentation]] = (),
        batch_stages: Sequence[tuple[int, Callable[[Any, tf.Tensor], Any]]] = (),
    ) -> None:
        self.window = window
        self.window_index = window_index
        self.image_stages = tuple(image_stages)
        self.batch_stages = tuple(batch_stages)

    @property
    def output_size(self) -> tuple[int, int]:
        """The ``(height, width)`` of the window stage's output."""
        return self.window.size

    def request(self, seeds: Any, *, on_host: bool = False) -> WindowRequest:
        """Draw everything for the samples of ``seeds`` ``[N, 2]`` (see :class:`WindowRequest`).

        ``on_host``: draw the :func:`tfdp.random.per_sample_uniform` numbers with NumPy
        (``tf.numpy_function``), bit-identical, and plan the windows with
        NumPy too (:meth:`WindowRequest.windows`); for a graph instantiated
        often, such as a ``tf.data`` function, which then starts faster.
        """
        return WindowRequest(self, seeds, on_host=on_host)

    def finish_batch(self, example: Any, seeds: Any) -> Any:
        """Apply the batch stages to an assembled batch ``example`` (seeds ``[B, 2]``)."""
        seeds = as_seeds(seeds)
        for index, stage in self.batch_stages:
            example = stage(example, fold_in(seeds, index))
        return example

    def __repr__(self) -> str:
        return (
            f"WindowPipeline(window={self.window!r}, per_image={[s for _, s in self.image_stages]},"
            f" per_batch={[s for _, s in self.batch_stages]})"
        )


def split_window(augment: Any) -> WindowPipeline | None:
    """Split ``augment`` for a window-decoding source, or ``None`` if it has no window stage.

    An augmentation qualifies when it is a :class:`WindowAugmentation`
    itself, or a :class:`Compose` whose first stage is one. The
    :class:`Augmentation` stages that follow it become per-image stages; from
    the first other callable on, the stages are applied to the batch.

    Example:
        >>> from tfdp.augment import Compose, RandomFlip, RandomResizedCrop, ToFloat
        >>> pipe = split_window(Compose([RandomResizedCrop(224), RandomFlip(), ToFloat()]))
        >>> pipe.output_size, [i for i, _ in pipe.image_stages]
        ((224, 224), [1, 2])
        >>> split_window(Compose([RandomFlip()])) is None
        True
    """
    if isinstance(augment, WindowAugmentation):
        return WindowPipeline(augment)
    if not isinstance(augment, Compose) or not augment.stages:
        return None
    first, *rest = augment.stages
    if not isinstance(first, WindowAugmentation):
        return None
    per_image: list[tuple[int, Augmentation]] = []
    index = 1
    for stage in rest:
        if not isinstance(stage, Augmentation):
            break
        per_image.append((index, stage))
        index += 1
    batch = [(i, augment.stages[i]) for i in range(index, len(augment.stages))]
    return WindowPipeline(first, 0, per_image, batch)
