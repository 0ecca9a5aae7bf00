"""Mixup / CutMix with timm's semantics: a batch stage that mixes each replica's batch.

Example:
    >>> import tensorflow as tf
    >>> mix = Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, label_smoothing=0.1, num_classes=4)
    >>> images, targets = mix((tf.ones([4, 8, 8, 3]), tf.constant([0, 1, 2, 3])), [[7, p] for p in
    ...                        range(4)])
    >>> tuple(targets.shape), round(float(tf.reduce_sum(targets[0])), 5)
    ((4, 4), 1.0)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, NamedTuple

import tensorflow as tf

from tfdp.augment._fast import select
from tfdp.augment._pil_ops import as_double
from tfdp.augment.base import as_images, get_image, put_image, replace_item
from tfdp.augment.spec import MixupSpec
from tfdp.errors import ConfigError
from tfdp.random import as_seeds, fold_in, per_sample_uniform
from tfdp.random.distributions import BETA_UNIFORMS, beta
from tfdp.seeding import TAG_MIX

#: Uniforms of one draw: apply, switch, box (4), and a Beta for Mixup and one for CutMix.
_DRAWS = 6 + 2 * BETA_UNIFORMS


class MixParams(NamedTuple):
    """What :meth:`Mixup.draw` draws for a batch of ``B`` samples, per sample.

    Attributes:
        lam: float64 ``[B]``: sample ``i``'s weight against its partner ``B - 1 - i``
            (1: unmixed; after CutMix, corrected to the box's area).
        cutmix: bool ``[B]``: CutMix (the box) rather than Mixup (the blend).
        box: int32 ``[B, 4]``: CutMix's ``(top, bottom, left, right)``, clipped to the image.
    """

    lam: tf.Tensor
    cutmix: tf.Tensor
    box: tf.Tensor

    @classmethod
    def per_batch(cls, lam: Any, cutmix: Any, box: Any, batch_size: Any) -> MixParams:
        """One ``"batch"``-mode draw given from outside, for every sample of a batch.

        The numbers timm's ``Mixup`` draws for a batch: the lambda and switch of its
        ``_params_per_batch`` and, for CutMix, the box ``(top, bottom, left, right)`` and the
        corrected lambda of its ``cutmix_bbox_and_lam`` (give any box without CutMix).
        :meth:`Mixup.apply` then mixes as that draw did (to replay a run's draws in an
        input, return them from an override of :meth:`Mixup.draw`).

        Example:
            >>> import tensorflow as tf
            >>> p = MixParams.per_batch(0.75, True, [0, 2, 0, 1], 3)
            >>> p.lam.numpy().tolist(), p.cutmix.numpy().tolist(), p.box.shape.as_list()
            ([0.75, 0.75, 0.75], [True, True, True], [3, 4])
        """
        lam = tf.cast(lam, tf.float64)
        cutmix = tf.convert_to_tensor(cutmix, tf.bool)
        box = tf.cast(box, tf.int32)
        return cls(
            tf.fill(tf.reshape(batch_size, [1]), lam),
            tf.fill(tf.reshape(batch_size, [1]), cutmix),
            tf.tile(box[tf.newaxis], tf.stack([tf.cast(batch_size, tf.int32), 1])),
        )


def mixup_target(
    labels: tf.Tensor, num_classes: int, lam: tf.Tensor, smoothing: float = 0.0
) -> tf.Tensor:
    """The ``mixup_target`` of timm: smoothed one-hot targets mixed with the reversed batch's.

    ``y = one_hot(labels)`` with ``off = smoothing / num_classes`` and ``on =
    1 - smoothing + off``; the target of sample ``i`` is ``lam[i] * y[i] +
    (1 - lam[i]) * y[B - 1 - i]``.

    Args:
        labels: Integer class labels ``[B]``.
        num_classes: ``K``.
        lam: float64 ``[B]`` (or a scalar).
        smoothing: Label smoothing in ``[0, 1)``.

    Returns:
        float32 ``[B, K]``.

    Example:
        >>> import tensorflow as tf
        >>> mixup_target(tf.constant([0, 1]), 2, tf.constant(0.75, tf.float64)).numpy().tolist()
        [[0.75, 0.25], [0.25, 0.75]]
    """
    off = smoothing / num_classes
    on = 1.0 - smoothing + off
    y1 = tf.one_hot(tf.cast(labels, tf.int32), num_classes, on_value=on, off_value=off)
    y2 = tf.reverse(y1, [0])
    lam = as_double(lam)
    if lam.shape.rank:
        lam = lam[:, tf.newaxis]
    return y1 * tf.cast(lam, tf.float32) + y2 * tf.cast(1.0 - lam, tf.float32)


def cutmix_box(
    lam: tf.Tensor,
    u: tf.Tensor,
    height: Any,
    width: Any,
    minmax: tuple[float, float] | None = None,
    correct_lam: bool = True,
) -> tuple[tf.Tensor, tf.Tensor]:
    """The ``cutmix_bbox_and_lam`` of timm, from uniforms: CutMix's boxes and their lambdas.

    Without ``minmax`` (timm's ``rand_bbox``): sides ``int(side * sqrt(1 -
    lam))``, centre ``(floor(u0 * H), floor(u1 * W))`` (numpy's ``randint(0,
    H)``), clipped to the image. With ``minmax`` (``rand_bbox_minmax``): sides
    ``randint(int(side * min), int(side * max))`` and the corner uniform over
    the positions that fit (``u2``, ``u3``). The lambda is ``1 - box area /
    image area`` when ``correct_lam`` or ``minmax``, else ``lam``.

    Args:
        lam: float64 ``[N]``.
        u: Uniforms ``[N, 4]``.
        height: Image height.
        width: Image width.
        minmax: ``(min, max)`` fractions of the sides, or None.
        correct_lam: Lambda from the clipped box.

    Returns:
        ``(box, lam)``: int32 ``[N, 4]`` ``(top, bottom, left, right)``, float64 ``[N]``.

    Example:
        >>> import tensorflow as tf
        >>> box, lam = cutmix_box(tf.constant([0.75], tf.float64), tf.constant([[0.5] * 4]), 8, 8)
        >>> box.numpy().tolist(), lam.numpy().tolist()
        ([[2, 6, 2, 6]], [0.75])
    """
    lam = as_double(lam)
    u = as_double(u)
    h, w = tf.cast(height, tf.float64), tf.cast(width, tf.float64)
    if minmax is None:  # rand_bbox
        ratio = tf.sqrt(1.0 - lam)
        cut_h, cut_w = tf.floor(h * ratio), tf.floor(w * ratio)
        cy = tf.minimum(tf.floor(u[:, 0] * h), h - 1)  # np.random.randint(0, H)
        cx = tf.minimum(tf.floor(u[:, 1] * w), w - 1)
        top = tf.clip_by_value(cy - tf.math.floordiv(cut_h, 2.0), 0.0, h)
        bottom = tf.clip_by_value(cy + tf.math.floordiv(cut_h + 1, 2.0), 0.0, h)
        left = tf.clip_by_value(cx - tf.math.floordiv(cut_w, 2.0), 0.0, w)
        right = tf.clip_by_value(cx + tf.math.floordiv(cut_w + 1, 2.0), 0.0, w)
    else:  # rand_bbox_minmax: randint(int(H * min), int(H * max)), then the corner
        lo_h, hi_h = tf.floor(h * minmax[0]), tf.floor(h * minmax[1])
        lo_w, hi_w = tf.floor(w * minmax[0]), tf.floor(w * minmax[1])
        span_h, span_w = hi_h - lo_h, hi_w - lo_w  # (numpy refuses an empty span)
        cut_h = lo_h + tf.minimum(tf.floor(u[:, 0] * span_h), tf.maximum(span_h - 1, 0.0))
        cut_w = lo_w + tf.minimum(tf.floor(u[:, 1] * span_w), tf.maximum(span_w - 1, 0.0))
        top = tf.minimum(tf.floor(u[:, 2] * (h - cut_h + 1)), h - cut_h)
        left = tf.minimum(tf.floor(u[:, 3] * (w - cut_w + 1)), w - cut_w)
        bottom, right = top + cut_h, left + cut_w
    if correct_lam or minmax is not None:
        lam = 1.0 - (bottom - top) * (right - left) / (h * w)
    box = tf.cast(tf.stack([top, bottom, left, right], axis=1), tf.int32)
    return box, lam


def _mix(images: tf.Tensor, partner: tf.Tensor, params: MixParams) -> tf.Tensor:
    """``images`` (``[..., H, W, C]``) mixed with ``partner`` by one draw (scalar ``params``).

    Scalars and a mask of the image's own shape, broadcast over the leading
    axis only: TensorFlow's CPU kernels broadcast a ``[B, 1, 1, 1]`` weight or
    a ``[B, H, W, 1]`` mask several times slower than they run an elementwise op.
    """
    return tf.cond(
        params.cutmix,
        lambda: select(_box_mask(images, params.box), partner, images),
        lambda: tf.cond(params.lam != 1.0, lambda: _blend(images, partner, params.lam),
                        lambda: images),
    )  # fmt: skip


def _box_mask(images: tf.Tensor, box: tf.Tensor) -> tf.Tensor:
    """The bool mask ``[H, W, C]`` of CutMix's ``box`` ``(top, bottom, left, right)``."""
    shape = tf.shape(images)
    rows = tf.range(shape[-3])[:, tf.newaxis]
    cols = tf.range(shape[-2])[tf.newaxis, :]
    top, bottom, left, right = tf.unstack(box)
    inside = (rows >= top) & (rows < bottom) & (cols >= left) & (cols < right)
    return tf.tile(inside[..., tf.newaxis], tf.stack([1, 1, shape[-1]]))


def _blend(images: tf.Tensor, partner: tf.Tensor, lam: tf.Tensor) -> tf.Tensor:
    """Float32 weights, as torch's ``x.mul_(lam) + x_flip.mul_(1 - lam)``."""
    return images * tf.cast(lam, tf.float32) + partner * tf.cast(1.0 - lam, tf.float32)


def _mix_batch(images: tf.Tensor, params: MixParams) -> tf.Tensor:
    """Batch mode: every sample ``i`` mixed with ``B - 1 - i`` by one draw (scalar ``params``).

    Sample by sample, the rows gathered in a ``tf.TensorArray`` and stacked: the
    partner is a row read, not a reversed copy of the batch. The same float32
    operations per value as on the whole batch.
    """
    n = tf.shape(images)[0]

    def rows(one: Any) -> tf.Tensor:
        def body(i: tf.Tensor, out: tf.TensorArray) -> tuple[tf.Tensor, tf.TensorArray]:
            return i + 1, out.write(i, one(images[i], images[n - 1 - i]))

        out = tf.TensorArray(tf.float32, n, element_shape=images.shape[1:])
        _, out = tf.while_loop(lambda i, _: i < n, body, (tf.constant(0), out))
        batch = out.stack()
        batch.set_shape(images.shape)
        return batch

    def cut() -> tf.Tensor:
        inside = _box_mask(images, params.box)
        return rows(lambda x, p: select(inside, p, x))

    return tf.cond(
        params.cutmix,
        cut,
        lambda: tf.cond(params.lam != 1.0, lambda: rows(lambda x, p: _blend(x, p, params.lam)),
                        lambda: images),
    )  # fmt: skip


class Mixup:
    """timm's ``Mixup`` (``timm.data.mixup``) as a batch stage: each replica's batch is mixed.

    Sample ``i`` is mixed with sample ``B - 1 - i`` of the same batch (timm's
    ``x.flip(0)``, which DeiT applies to each process's batch). In ``"batch"``
    mode (DeiT's) one draw serves the whole batch: with probability ``prob``
    the batch is mixed, by CutMix with probability ``switch_prob`` when both
    are on; lambda ~ Beta(alpha, alpha) of the chosen one. Mixup blends
    ``lam * x[i] + (1 - lam) * x[B-1-i]``; CutMix pastes the partner's box
    (timm's ``rand_bbox``: side ``int(side * sqrt(1 - lam))`` centred at a
    uniform pixel, clipped; or ``cutmix_minmax``'s ``rand_bbox_minmax``) and,
    with ``correct_lam``, sets lambda to the unpasted fraction. ``"pair"``
    draws per pair, ``"elem"`` per sample. The labels -- integer classes
    ``[B]`` -- become timm's soft targets ``[B, num_classes]``
    (:func:`mixup_target`, with ``label_smoothing``): train with a soft-target
    cross-entropy (:func:`tfdp.losses.soft_target_cross_entropy`).

    The draws are a function of the batch's first seed (``"elem"`` / ``"pair"``:
    of each sample's) with ``TAG_MIX`` folded in (:mod:`tfdp.seeding`), so
    they repeat exactly on a rerun or a resumed run. What a sample is mixed
    with depends on the batch it lands in -- the per-replica batch -- as in
    DeiT: a run resumed on another number of replicas (elastic) pairs the
    samples differently, and changes nothing else. The numbers are
    tfdp's, not numpy's: the same distributions, not timm's values.

    Written here rather than reusing ``keras.layers.MixUp`` / ``CutMix``,
    which pair samples by a random permutation, draw lambda per sample,
    take no switch probability and keep hard labels.

    It is a :class:`tfdp.augment.contract.BatchStage`: put it last in a
    :class:`~tfdp.augment.Compose` (after ``Normalize`` and ``RandomErasing``,
    as DeiT mixes after its transforms).

    Args:
        mixup_alpha: Mixup's Beta parameter; Mixup is on if > 0.
        cutmix_alpha: CutMix's Beta parameter; CutMix is on if > 0.
        cutmix_minmax: ``(min, max)`` fractions of the sides for CutMix's box.
        prob: Probability of mixing.
        switch_prob: Probability of CutMix rather than Mixup when both are on.
        mode: ``"batch"``, ``"pair"`` or ``"elem"``.
        correct_lam: Lambda from the clipped box's area.
        label_smoothing: Smoothing of the targets, in ``[0, 1)``.
        num_classes: Number of classes (required).
        image_key: Key of the images when the example is a dict.
        label_key: Key of the labels when the example is a dict (else the
            second element of a tuple).

    Example:
        >>> Mixup(0.8, 1.0, num_classes=1000).spec.switch_prob
        0.5
    """

    batched: ClassVar[bool] = True
    mixes_samples: ClassVar[bool] = True

    def __init__(
        self,
        mixup_alpha: float = 1.0,
        cutmix_alpha: float = 0.0,
        cutmix_minmax: tuple[float, float] | None = None,
        prob: float = 1.0,
        switch_prob: float = 0.5,
        mode: str = "batch",
        correct_lam: bool = True,
        label_smoothing: float = 0.1,
        num_classes: int | None = None,
        *,
        image_key: str = "image",
        label_key: str = "label",
    ) -> None:
        self.spec = MixupSpec(
            mixup_alpha, cutmix_alpha, cutmix_minmax, prob, switch_prob, mode, bool(correct_lam),
            label_smoothing, num_classes,
        )  # fmt: skip
        self.image_key = image_key
        self.label_key = label_key

    # -- the example ----------------------------------------------------------------------
    def _labels(self, example: Any) -> tf.Tensor:
        if isinstance(example, Mapping):
            if self.label_key not in example:
                raise ConfigError(
                    f"the example has no label key {self.label_key!r} (keys: "
                    f"{sorted(example)}); Mixup needs class labels",
                    argument="label_key",
                )
            labels = example[self.label_key]
        elif isinstance(example, (tuple, list)) and len(example) >= 2:
            labels = example[1]
        else:
            raise ConfigError(
                "Mixup needs (images, labels) examples or a dict with a label key, got "
                f"{type(example).__name__}",
                argument="labels",
            )
        labels = tf.convert_to_tensor(labels)
        rank = labels.shape.rank
        if rank == 2 and labels.shape[1] == 1:
            labels = labels[:, 0]
        if not labels.dtype.is_integer or labels.shape.rank != 1:
            raise ConfigError(
                f"Mixup needs integer class labels [batch] (a classification data set), "
                f"got {labels.dtype.name} of shape {labels.shape}",
                argument="labels",
            )
        return labels

    def _put_labels(self, example: Any, targets: tf.Tensor) -> Any:
        return replace_item(example, 1, self.label_key, targets)

    def __call__(self, example: Any, seeds: Any) -> Any:
        """Mix the batched ``example``'s images and turn its labels into soft targets."""
        seeds = as_seeds(seeds)
        images = as_images(get_image(example, self.image_key))
        labels = self._labels(example)
        shape = tf.shape(images)
        params = self.draw(seeds, shape[1], shape[2])
        images, targets = self.apply(images, labels, params)
        return self._put_labels(put_image(example, images, self.image_key), targets)

    # -- draw -----------------------------------------------------------------------------
    def draw(self, seeds: tf.Tensor, height: Any, width: Any) -> MixParams:
        """The batch's draws (see :class:`MixParams`) for images of ``height x width``.

        Example:
            >>> import tensorflow as tf
            >>> mix = Mixup(0.0, 1.0, num_classes=3)  # CutMix only
            >>> p = mix.draw(tf.constant([[1, 0], [1, 1]], tf.int64), 10, 10)
            >>> p.cutmix.numpy().tolist(), bool(p.lam[0] == p.lam[1])
            ([True, True], True)
        """
        spec = self.spec
        seeds = as_seeds(seeds)
        batch = tf.shape(seeds)[0]
        rows = fold_in(seeds[:1] if spec.mode == "batch" else seeds, TAG_MIX)
        u = tf.cast(per_sample_uniform(rows, _DRAWS), tf.float64)
        mixed = u[:, 0] < spec.prob
        if spec.mixup_alpha > 0 and spec.cutmix_alpha > 0:
            cutmix = u[:, 1] < spec.switch_prob
        else:
            cutmix = tf.fill(tf.shape(mixed), spec.cutmix_alpha > 0)
        one = tf.ones_like(u[:, 0])
        lam_mix = beta(u[:, 6 : 6 + BETA_UNIFORMS], spec.mixup_alpha) if spec.mixup_alpha else one
        lam_cut = beta(u[:, 6 + BETA_UNIFORMS :], spec.cutmix_alpha) if spec.cutmix_alpha else one
        lam = tf.where(mixed, tf.where(cutmix, lam_cut, lam_mix), one)
        cutmix &= mixed
        box, corrected = cutmix_box(
            lam, u[:, 2:6], height, width, spec.cutmix_minmax, spec.correct_lam
        )
        lam = tf.where(cutmix, corrected, lam)
        params = MixParams(lam, cutmix, box)
        if spec.mode == "batch":  # one draw, every sample
            return MixParams(*(tf.repeat(t, batch, axis=0) for t in params))
        if spec.mode == "pair":  # sample i's draw for i and B - 1 - i (the middle one unmixed)
            index = tf.range(batch)
            first = tf.minimum(index, batch - 1 - index)
            params = MixParams(*(tf.gather(t, first) for t in params))
            middle = index == batch - 1 - index
            return params._replace(
                lam=tf.where(middle, tf.ones_like(params.lam), params.lam),
                cutmix=params.cutmix & ~middle,
            )
        return params

    # -- apply ----------------------------------------------------------------------------
    def apply(self, images: tf.Tensor, labels: tf.Tensor, params: MixParams) -> tuple[Any, Any]:
        """Mix ``images`` ``[B, H, W, C]`` with their reversed batch; soft targets of ``labels``.

        Sample ``i`` with ``cutmix[i]`` takes its partner's pixels inside
        ``box[i]``; otherwise, when ``lam[i] != 1``, ``x[i] * lam + x[B-1-i] *
        (1 - lam)`` (float32 weights, as torch's); the targets are
        :func:`mixup_target` of ``lam``. Returns ``(images float32, targets
        float32 [B, num_classes])``.

        Example:
            >>> import tensorflow as tf
            >>> mix = Mixup(1.0, num_classes=2, label_smoothing=0.0)
            >>> p = MixParams(tf.constant([0.25, 0.25], tf.float64), tf.constant([False, False]),
            ...               tf.zeros([2, 4], tf.int32))
            >>> x, y = mix.apply(tf.constant([[[[0.0]]], [[[4.0]]]]), tf.constant([0, 1]), p)
            >>> x[:, 0, 0, 0].numpy().tolist(), y.numpy().tolist()
            ([3.0, 1.0], [[0.25, 0.75], [0.75, 0.25]])
        """
        images = tf.cast(images, tf.float32)
        if self.spec.mode == "batch":  # one lambda and one box: scalars and one mask
            out = _mix_batch(images, MixParams(*(t[0] for t in params)))
        else:  # each sample its own, with the same arithmetic
            partner = tf.reverse(images, [0])
            spec = tf.TensorSpec(images.shape[1:], tf.float32)
            out = tf.map_fn(
                lambda a: _mix(a[0], a[1], MixParams(*a[2:])),
                (images, partner, *params),
                fn_output_signature=spec,
            )
        lam = params.lam
        if self.spec.num_classes is not None:
            limit = tf.cast(self.spec.num_classes, labels.dtype)
            check = tf.debugging.Assert(
                tf.reduce_all((labels >= 0) & (labels < limit)),
                ["Mixup: labels must be class ids in [0, num_classes) =", [0, limit], labels],
                summarize=8,
            )
            with tf.control_dependencies([check]):
                labels = tf.identity(labels)
        targets = mixup_target(labels, int(self.spec.num_classes), lam, self.spec.label_smoothing)
        return out, targets

    def __repr__(self) -> str:
        return f"Mixup({self.spec!r})"
