"""Seeded, stateless, per-sample image augmentations that run on whole batches.

This module owns tfdp's batched augmentations and the counter-based hash they
draw their randomness from. An augmentation is a callable
``aug(example, seeds)``:

* ``example`` is a *batch*: a tuple/list whose first element is the image
  batch ``[B, H, W, C]``, a dict holding the images under ``image_key``
  (default ``"image"``), or a bare image tensor;
* ``seeds`` is an integer tensor ``[B, 2]`` (cast to int64), one stateless
  seed per sample, conventionally ``[epoch_key, position]``.

It returns the example with the same structure and the images replaced, and
carries the class attribute ``batched = True``. Every random decision for
sample ``b`` is a function of ``seeds[b]`` only, never of the batch size or of
the other samples: augmenting a batch equals augmenting each sample alone as a
batch of one. All work is vectorised over the batch (gathers on per-sample
index grids, per-sample selects, ``tf.image.crop_and_resize`` with per-sample
boxes); there is no per-example ``tf.map_fn`` or ``tf.while_loop``. Everything
runs eagerly, inside ``tf.function`` and inside ``tf.data.Dataset.map`` with
unknown (``None``) batch and image sizes.

The randomness comes from :func:`per_sample_uniform`, MurmurHash3 (x86, 32
bit) of the five 32-bit words ``(seed[b, 0] lo, hi, seed[b, 1] lo, hi, j)``
computed with vectorised uint32 multiply/xor/shift ops; :func:`fold_in`
derives independent per-stage seeds (used by :class:`Compose`).

Every built-in stage separates its random *draws* from their *application*:
``aug.augment(images, seeds) == aug.apply(images, aug.draw(seeds))``, where
``draw`` is vectorised over the whole batch of seeds and ``apply`` acts on
images with the drawn parameters (row ``b`` for sample ``b``). A loader can
therefore draw for many samples at once and apply sample by sample.

Window stages (:class:`WindowAugmentation`: :class:`RandomResizedCrop`,
:class:`CenterCrop`) cut one window per image and resize it. Their window is
planned from the image's *shape* and the sample's seed alone
(:meth:`WindowAugmentation.windows`), so a source that can decode just a
window (a JPEG file: :class:`tfdp.sources.ImageFolderSource`) never decodes
the rest; :func:`split_window` splits an augmentation that starts with a
window stage into what such a source needs (:class:`WindowPipeline`). The
window path and the plain batched path give bit-identical results. A window
loader may plan on the host: the built-in stages compute their windows with
one implementation in TensorFlow or NumPy (:meth:`WindowAugmentation.host_windows`;
the same boxes: only ``exp``'s last bit may differ, and boxes are rounded to
whole pixels).

Data-moving stages (:class:`RandomCrop`, :class:`RandomShift`,
:class:`RandomFlip`) keep the input dtype, so uint8 batches stay uint8 and
cheap; :class:`RandomResizedCrop`, :class:`CenterCrop`,
:class:`RandomBrightness`, :class:`Normalize` and :class:`ToFloat` return
float32.

Example:
    >>> import tensorflow as tf
    >>> aug = Compose([ToFloat(), RandomCrop(32, padding=4), RandomFlip()])
    >>> images = tf.zeros([8, 32, 32, 3], tf.uint8)
    >>> labels = tf.range(8)
    >>> seeds = tf.stack([tf.zeros([8], tf.int64), tf.range(8, dtype=tf.int64)], axis=1)
    >>> out_images, out_labels = aug((images, labels), seeds)
    >>> tuple(out_images.shape), out_images.dtype.name
    ((8, 32, 32, 3), 'float32')
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import tensorflow as tf

from tfdp._autograph import user_code
from tfdp.errors import ConfigError
from tfdp.seeding import (
    FMIX32_C1,
    FMIX32_C2,
    MURMUR_C1,
    MURMUR_C2,
    MURMUR_N,
    MURMUR_SALT_FOLD,
    MURMUR_SALT_UNIFORM,
    fmix32,
)
from tfdp.sources.base import BatchedAugmentation

__all__ = [
    "Augmentation",
    "CenterCrop",
    "Compose",
    "Normalize",
    "RandomBrightness",
    "RandomCrop",
    "RandomFlip",
    "RandomResizedCrop",
    "RandomShift",
    "ToFloat",
    "WindowAugmentation",
    "WindowPipeline",
    "WindowRequest",
    "fold_in",
    "per_sample_uniform",
    "split_window",
]

# --------------------------------------------------------------------------------------------
# Counter-based hash (MurmurHash3_x86_32 over five 32-bit words), vectorised in uint32.
# --------------------------------------------------------------------------------------------

# The constants and salts are tfdp.seeding's (the table of every seed derivation).
_HASH_BYTES = 20  # five 32-bit words
_MAX_FOLD_DATA = 2**31 - 1


class _TensorFlowOps:
    """The array operations of the hash, in TensorFlow (graphs and eager)."""

    uint32, int64, float32 = tf.uint32, tf.int64, tf.float32
    shl = staticmethod(tf.bitwise.left_shift)
    shr = staticmethod(tf.bitwise.right_shift)
    bor = staticmethod(tf.bitwise.bitwise_or)
    bxor = staticmethod(tf.bitwise.bitwise_xor)
    band = staticmethod(tf.bitwise.bitwise_and)
    const = staticmethod(tf.constant)
    cast = staticmethod(tf.cast)
    stack = staticmethod(tf.stack)
    reshape = staticmethod(tf.reshape)

    @staticmethod
    def fill_like(x: Any, value: int, dtype: Any) -> Any:
        return tf.fill(tf.shape(x), tf.constant(value, dtype))

    @staticmethod
    def broadcast_like(x: Any, like: Any) -> Any:
        return tf.broadcast_to(x, tf.shape(like))

    @staticmethod
    def counters(n: int) -> Any:
        return tf.cast(tf.range(n), tf.uint32)  # Range has no uint32 kernel

    # The box arithmetic of the window stages (float64 and int32; every op correctly
    # rounded but ``exp``, whose last bit may differ between libraries -- see
    # RandomResizedCrop.windows).
    float64, int32 = tf.float64, tf.int32
    exp = staticmethod(tf.exp)
    sqrt = staticmethod(tf.sqrt)
    round = staticmethod(tf.round)  # half to even, as NumPy's
    floor = staticmethod(tf.floor)
    where = staticmethod(tf.where)
    minimum = staticmethod(tf.minimum)
    maximum = staticmethod(tf.maximum)

    @staticmethod
    def first_true(mask: Any, n: int) -> Any:
        """Index of each row's first True in ``mask`` ``[B, n]`` (``n`` if none)."""
        return tf.reduce_min(tf.where(mask, tf.range(n)[tf.newaxis, :], n), axis=1)

    @staticmethod
    def pick(values: Any, index: Any) -> Any:
        """``values[b, index[b]]`` for every row ``b``."""
        return tf.gather(values, index, axis=1, batch_dims=1)


class _NumPyOps:
    """The same operations in NumPy: the host side of the window path (same integer bits).

    uint32 and int64 arithmetic wraps alike in both libraries, casts between
    them are modular, and right shifts of int64 are arithmetic, so every
    value equals the TensorFlow one exactly.
    """

    uint32, int64, float32 = np.uint32, np.int64, np.float32
    shl = staticmethod(np.left_shift)
    shr = staticmethod(np.right_shift)
    bor = staticmethod(np.bitwise_or)
    bxor = staticmethod(np.bitwise_xor)
    band = staticmethod(np.bitwise_and)
    stack = staticmethod(np.stack)
    reshape = staticmethod(np.reshape)

    @staticmethod
    def const(value: Any, dtype: Any) -> np.ndarray:
        return np.asarray(value, dtype)

    @staticmethod
    def cast(x: Any, dtype: Any) -> np.ndarray:
        return np.asarray(x).astype(dtype)

    @staticmethod
    def fill_like(x: Any, value: int, dtype: Any) -> np.ndarray:
        return np.full(np.shape(x), value, dtype)

    @staticmethod
    def broadcast_like(x: Any, like: Any) -> np.ndarray:
        return np.broadcast_to(x, np.shape(like))

    @staticmethod
    def counters(n: int) -> np.ndarray:
        return np.arange(n, dtype=np.uint32)

    float64, int32 = np.float64, np.int32
    exp = staticmethod(np.exp)
    sqrt = staticmethod(np.sqrt)
    round = staticmethod(np.round)  # half to even, as TensorFlow's
    floor = staticmethod(np.floor)
    where = staticmethod(np.where)
    minimum = staticmethod(np.minimum)
    maximum = staticmethod(np.maximum)

    @staticmethod
    def first_true(mask: Any, n: int) -> np.ndarray:
        return np.min(np.where(mask, np.arange(n)[np.newaxis, :], n), axis=1)

    @staticmethod
    def pick(values: Any, index: Any) -> np.ndarray:
        return np.take_along_axis(values, np.asarray(index)[:, np.newaxis], axis=1)[:, 0]


_Ops = type[_TensorFlowOps] | type[_NumPyOps]


class _Murmur:
    """MurmurHash3_x86_32's constants, made once per hash (a graph gets ~20 nodes, not ~100)."""

    def __init__(self, ops: _Ops) -> None:
        def u32(value: int) -> Any:
            return ops.const(value, ops.uint32)

        self.ops = ops
        self.c1, self.c2 = u32(MURMUR_C1), u32(MURMUR_C2)
        self.five, self.n = u32(5), u32(MURMUR_N)
        self.f1, self.f2 = u32(FMIX32_C1), u32(FMIX32_C2)
        self.shift = {r: u32(r) for r in (8, 13, 15, 16, 17, 19)}

    def rotl(self, x: Any, r: int) -> Any:
        left = self.ops.shl(x, self.shift[r])
        return self.ops.bor(left, self.ops.shr(x, self.shift[32 - r]))

    def xorshift(self, x: Any, r: int) -> Any:
        return self.ops.bxor(x, self.ops.shr(x, self.shift[r]))

    def mix(self, h: Any, k: Any) -> Any:
        k = self.rotl(k * self.c1, 15) * self.c2
        h = self.rotl(self.ops.bxor(h, k), 13)
        return h * self.five + self.n

    def fmix(self, h: Any) -> Any:
        if self.ops is _NumPyOps:  # the project's NumPy finaliser (it works in place)
            return fmix32(np.array(h, np.uint32))
        h = self.xorshift(h, 16) * self.f1
        h = self.xorshift(h, 13) * self.f2
        return self.xorshift(h, 16)


def _hash_u32(seeds: Any, counters: Any, salt: int, ops: _Ops = _TensorFlowOps) -> Any:
    """MurmurHash3 of ``(seeds[..., 0] lo, hi, seeds[..., 1] lo, hi, counter)``.

    ``seeds`` is int64 ``[..., 2]``; ``counters`` is uint32, broadcastable
    against ``[..., 1]``. The seed words are mixed once per seed, then the
    counters are mixed in with broadcasting.
    """
    m = _Murmur(ops)
    # int64 -> uint32 casts are modular, so these are the two's-complement words.
    lo = ops.cast(seeds, ops.uint32)
    hi = ops.cast(ops.shr(seeds, ops.const(32, ops.int64)), ops.uint32)
    h = ops.fill_like(seeds[..., :1], salt, ops.uint32)
    for word in (lo[..., :1], hi[..., :1], lo[..., 1:], hi[..., 1:]):
        h = m.mix(h, word)
    h = m.mix(h, counters)
    return m.fmix(ops.bxor(h, ops.const(_HASH_BYTES, ops.uint32)))


def _uniforms(seeds: Any, n: int, ops: _Ops = _TensorFlowOps) -> Any:
    """:func:`per_sample_uniform` for int64 seeds of any leading shape ``[..., 2]``."""
    bits = _hash_u32(seeds, ops.counters(n), MURMUR_SALT_UNIFORM, ops)
    bits = ops.shr(bits, ops.const(8, ops.uint32))  # 24 bits: exact in float32
    return ops.cast(bits, ops.float32) * ops.const(1.0 / (1 << 24), ops.float32)


def _fold_many(seeds: Any, datas: Sequence[int], ops: _Ops = _TensorFlowOps) -> Any:
    """``fold_in(seeds, d)`` for every ``d`` of ``datas`` at once: int64 ``[B, len(datas), 2]``."""
    counters = ops.const([c for d in datas for c in (2 * d, 2 * d + 1)], ops.uint32)
    words = _hash_u32(seeds, counters, MURMUR_SALT_FOLD, ops)
    words = ops.reshape(ops.cast(words, ops.int64), [-1, len(datas), 2])  # each < 2**32
    high = ops.shl(
        ops.band(words[..., 1], ops.const(0x7FFFFFFF, ops.int64)), ops.const(32, ops.int64)
    )
    keys = ops.bor(high, words[..., 0])
    positions = ops.broadcast_like(seeds[:, 1:], keys)
    return ops.stack([keys, positions], axis=-1)


def _as_seeds(seeds: Any) -> tf.Tensor:
    seeds = tf.convert_to_tensor(seeds)
    if not seeds.dtype.is_integer:
        raise TypeError(f"seeds must be an integer tensor [B, 2], got dtype {seeds.dtype.name}")
    if seeds.shape.rank is not None and (seeds.shape.rank != 2 or seeds.shape[1] not in (2, None)):
        raise ConfigError(f"seeds must have shape [B, 2], got {seeds.shape}")
    return tf.cast(seeds, tf.int64)


def per_sample_uniform(seeds: Any, n: int) -> tf.Tensor:
    """Draw ``n`` uniform numbers in ``[0, 1)`` per sample, statelessly.

    ``out[b, j]`` is the top 24 bits of MurmurHash3_x86_32 of the five 32-bit
    words ``(seeds[b, 0] low, high, seeds[b, 1] low, high, j)``, scaled by
    ``2**-24``; so it depends only on ``seeds[b]`` and ``j``: the same
    ``(seed, j)`` gives the same number whatever the batch, and drawing more
    numbers (a larger ``n``) leaves the first ones unchanged.

    Args:
        seeds: Integer tensor ``[B, 2]`` (any integer dtype; used as int64).
        n: Number of draws per sample, ``>= 0``.

    Returns:
        A float32 tensor ``[B, n]`` with values in ``[0, 1)``, multiples of ``2**-24``.

    Example:
        >>> import tensorflow as tf
        >>> u = per_sample_uniform(tf.constant([[7, 0], [7, 1]], tf.int64), 3)
        >>> tuple(u.shape), u.dtype.name
        ((2, 3), 'float32')
        >>> bool(tf.reduce_all((u >= 0) & (u < 1)))
        True
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ConfigError(f"n must be a non-negative int, got {n!r}")
    return _uniforms(_as_seeds(seeds), n)


def fold_in(seeds: Any, data: int) -> tf.Tensor:
    """Derive per-sample seeds for an independent random stream ``data``.

    ``seed[:, 0]`` is replaced by a 63-bit hash of ``(seed[b, 0], seed[b, 1],
    data)`` (a different hash salt from :func:`per_sample_uniform`), and
    ``seed[:, 1]`` is kept, so samples with distinct positions keep distinct
    seeds. :class:`Compose` gives stage ``i`` the seeds ``fold_in(seeds, i)``.

    Args:
        seeds: Integer tensor ``[B, 2]``.
        data: Stream index, an int in ``[0, 2**31 - 1]``.

    Returns:
        An int64 tensor ``[B, 2]``.

    Example:
        >>> import tensorflow as tf
        >>> seeds = tf.constant([[3, 0], [3, 1]], tf.int64)
        >>> folded = fold_in(seeds, 1)
        >>> folded[:, 1].numpy().tolist(), bool(tf.reduce_all(folded[:, 0] >= 0))
        ([0, 1], True)
    """
    if isinstance(data, bool) or not isinstance(data, int) or not 0 <= data <= _MAX_FOLD_DATA:
        raise ConfigError(f"data must be an int in [0, {_MAX_FOLD_DATA}], got {data!r}")
    return _fold_many(_as_seeds(seeds), [data])[:, 0]


# --------------------------------------------------------------------------------------------
# Example structure and argument helpers.
# --------------------------------------------------------------------------------------------


def _get_image(example: Any, image_key: str) -> Any:
    if isinstance(example, Mapping):
        if image_key not in example:
            raise KeyError(f"example has no image key {image_key!r}; keys: {sorted(example)}")
        return example[image_key]
    if isinstance(example, (tuple, list)):
        if not example:
            raise ConfigError(
                "example is an empty tuple/list; its first element must be the images"
            )
        return example[0]
    return example


def _put_image(example: Any, image: tf.Tensor, image_key: str) -> Any:
    if isinstance(example, Mapping):
        out = dict(example)
        out[image_key] = image
        return out
    if isinstance(example, tuple):
        if hasattr(example, "_fields"):  # namedtuple
            return example._replace(**{example._fields[0]: image})
        return (image, *example[1:])
    if isinstance(example, list):
        return [image, *example[1:]]
    return image


def _as_images(images: Any, encoded: bool = False) -> tf.Tensor:
    images = tf.convert_to_tensor(images)
    if encoded and images.dtype == tf.string:
        if images.shape.rank is not None and images.shape.rank != 1:
            raise ConfigError(f"encoded images must be a batch [B] of strings, got {images.shape}")
        return images
    if images.shape.rank is not None and images.shape.rank != 4:
        raise ConfigError(f"images must be a batch [B, H, W, C], got shape {images.shape}")
    return images


def _pair(value: Any, name: str, minimum: int) -> tuple[int, int]:
    items = tuple(value) if isinstance(value, (tuple, list)) else (value, value)
    if len(items) != 2 or any(
        isinstance(v, bool) or not isinstance(v, int) or v < minimum for v in items
    ):
        raise ConfigError(f"{name} must be an int >= {minimum} or a pair of them, got {value!r}")
    return items[0], items[1]


def _probability(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ConfigError(f"{name} must be a number in [0, 1], got {value!r}")
    return float(value)


def _randint(u: tf.Tensor, count: tf.Tensor) -> tf.Tensor:
    """Map uniforms ``u`` in [0, 1) to int32 in ``[0, count)`` (count >= 1, broadcast)."""
    count = tf.cast(count, tf.int32)
    value = tf.cast(u * tf.cast(count, tf.float32), tf.int32)
    return tf.minimum(value, count - 1)  # guard float rounding of u * count up to count


_PAD_MODES = ("constant", "reflect", "symmetric", "edge")


def _source_index(coords: tf.Tensor, size: tf.Tensor, mode: str) -> tf.Tensor:
    """Map padded-image coordinates to source indices (``np.pad`` modes other than constant)."""
    if mode == "edge":
        return tf.clip_by_value(coords, 0, size - 1)
    if mode == "reflect":  # ... c b | a b c d | c b a ...  (period 2 * (size - 1))
        period = tf.maximum(2 * (size - 1), 1)
        folded = tf.math.floormod(tf.abs(coords), period)
        return tf.where(folded >= size, period - folded, folded)
    # symmetric: ... b a | a b c d | d c ...  (period 2 * size)
    folded = tf.math.floormod(coords, 2 * size)
    return tf.where(folded >= size, 2 * size - 1 - folded, folded)


def _window(
    images: tf.Tensor,
    top: tf.Tensor,
    left: tf.Tensor,
    out_h: int | tf.Tensor,
    out_w: int | tf.Tensor,
    pad: tuple[int, int],
    mode: str,
    fill: float,
) -> tf.Tensor:
    """Per-sample ``out_h x out_w`` windows at ``(top[b], left[b])`` of the padded images.

    Offsets are in padded coordinates. Two batched gathers (rows, then
    columns) on per-sample index grids. Constant padding is one ``tf.pad`` of
    the batch (cheaper than masking the fill in with ``tf.where``); the other
    modes map the coordinates back into the image, so any padding size works.
    """
    rows = top[:, tf.newaxis] + tf.range(out_h)[tf.newaxis, :]  # [B, out_h]
    cols = left[:, tf.newaxis] + tf.range(out_w)[tf.newaxis, :]  # [B, out_w]
    if mode == "constant":
        if pad != (0, 0):
            paddings = [[0, 0], [pad[0], pad[0]], [pad[1], pad[1]], [0, 0]]
            images = tf.pad(images, paddings, constant_values=tf.cast(fill, images.dtype))
    else:
        shape = tf.shape(images)
        rows = _source_index(rows - pad[0], shape[1], mode)
        cols = _source_index(cols - pad[1], shape[2], mode)
    out = tf.gather(images, rows, axis=1, batch_dims=1)  # [B, out_h, W, C]
    return tf.gather(out, cols, axis=2, batch_dims=1)  # [B, out_h, out_w, C]


# --------------------------------------------------------------------------------------------
# Augmentations.
# --------------------------------------------------------------------------------------------


def _no_params(seeds: tf.Tensor) -> tf.Tensor:
    """A ``[B, 0]`` float32 tensor: the draws of a deterministic stage."""
    return tf.zeros(tf.stack([tf.shape(seeds)[0], 0]), tf.float32)


# Up to this many values per image (16 KiB), _per_channel uses a whole-image constant. A
# larger constant is copied by every instantiation of a graph holding it -- a 224x224x3 one
# (588 KiB) cost a new tf.data iterator of the window path 70 ms (bench_images' first batch),
# while the tiled row is as fast (0.108 vs 0.092 ms per 224x224x3 image, one thread).
_WHOLE_IMAGE = 2**12


def _per_channel(images: tf.Tensor, values: float | tuple[float, ...], op: Callable) -> tf.Tensor:
    """``op(images, values)`` with ``values`` per channel (last axis) or one scalar.

    Broadcasting a length-``C`` vector over ``[..., W, C]`` is slow in
    TensorFlow's CPU kernels (about 6x a plain elementwise op at ``C = 3``);
    the images are viewed as ``[..., W * C]`` and the values tiled ``W``
    times instead. Every element meets the same value as with plain
    broadcasting, so the result is bit-identical.
    """
    if not isinstance(values, tuple):
        return op(images, tf.constant(values, tf.float32))
    channels = len(values)
    if images.shape[-1] is not None and images.shape[-1] != channels:
        raise ConfigError(
            f"{channels} per-channel values for images with {images.shape[-1]} channels"
        )
    if images.shape[1:].is_fully_defined() and images.shape[1:].num_elements() <= _WHOLE_IMAGE:
        # The values of a whole image, built once: an elementwise op, no broadcast.
        image = np.broadcast_to(np.float32(values), images.shape[1:])
        return op(images, tf.constant(image[np.newaxis]))
    shape = tf.shape(images)
    wide = tf.reshape(images, tf.concat([shape[:-2], [-1]], 0))
    out = op(wide, tf.tile(tf.constant(values, tf.float32), shape[-2:-1]))
    out = tf.reshape(out, shape)
    out.set_shape(images.shape)
    return out


class Augmentation:
    """Base class of tfdp's batched augmentations.

    Subclasses implement :meth:`augment` on the image batch -- or, to let a
    loader draw for many samples at once and apply sample by sample,
    :meth:`draw` (seeds -> per-sample parameters, vectorised) and
    :meth:`apply` (images, parameters -> images); then
    ``augment(images, seeds) == apply(images, draw(seeds))``. ``__call__``
    handles the example structure (tuple/list with the images first, dict with
    ``image_key``, or a bare tensor) and the seeds. ``batched = True`` tells
    the input layer that the callable takes a whole batch and ``[B, 2]`` seeds.

    The contract every subclass keeps: sample ``b``'s result depends only on
    its image and ``seeds[b]`` (or ``params[b]``), never on the other samples.

    Args:
        image_key: Key of the images when the example is a dict.

    Example:
        >>> import tensorflow as tf
        >>> class Invert(Augmentation):
        ...     def augment(self, images, seeds):
        ...         return 1.0 - tf.cast(images, tf.float32)
        >>> example = {"image": tf.zeros([2, 4, 4, 1]), "label": tf.zeros([2])}
        >>> out = Invert()(example, [[0, 0], [0, 1]])
        >>> sorted(out), float(out["image"][0, 0, 0, 0])
        (['image', 'label'], 1.0)
    """

    batched: ClassVar[bool] = True
    #: False for a deterministic stage (its draws ignore the seeds): Compose then does not
    #: derive seeds for it.
    random: ClassVar[bool] = True
    #: True for a stage that also takes a batch ``[B]`` of encoded images (window stages).
    accepts_encoded: ClassVar[bool] = False

    def __init__(self, *, image_key: str = "image") -> None:
        if not isinstance(image_key, str):
            raise TypeError(f"image_key must be a str, got {image_key!r}")
        self.image_key = image_key

    def __call__(self, example: Any, seeds: Any) -> Any:
        """Augment the images of a batched ``example`` with per-sample ``seeds`` ``[B, 2]``."""
        seeds = _as_seeds(seeds)
        images = _as_images(_get_image(example, self.image_key), self.accepts_encoded)
        batch, seed_batch = images.shape[0], seeds.shape[0]
        if batch is not None and seed_batch is not None and batch != seed_batch:
            raise ConfigError(f"seeds has {seed_batch} rows but the image batch has {batch}")
        return _put_image(example, self.augment(images, seeds), self.image_key)

    def augment(self, images: tf.Tensor, seeds: tf.Tensor) -> tf.Tensor:
        """Return the augmented batch (``images`` ``[B, H, W, C]``, ``seeds`` int64 ``[B, 2]``)."""
        if type(self).apply is Augmentation.apply:
            raise NotImplementedError(f"{type(self).__name__} implements neither augment nor apply")
        return self.apply(images, self.draw(seeds))

    def draw_count(self) -> int | None:
        """How many :func:`per_sample_uniform` numbers :meth:`draw` takes per sample.

        ``None`` (the default) for a stage whose draws are its own (then
        :meth:`draw` returns the seeds themselves). A loader can make the
        draws of several such stages in one pass.

        Example:
            >>> RandomFlip().draw_count(), RandomResizedCrop(8).draw_count(), ToFloat().draw_count()
            (2, 40, 0)
        """
        return 0 if not self.random else None

    def draw(self, seeds: tf.Tensor) -> tf.Tensor:
        """The per-sample random parameters ``[B, ...]`` for int64 ``seeds`` ``[B, 2]``.

        Vectorised over the batch: ``per_sample_uniform(seeds, n)`` for a stage
        with ``draw_count() == n`` (``[B, 0]`` for a deterministic stage), the
        seeds themselves for a stage that draws inside :meth:`augment`.

        Example:
            >>> import tensorflow as tf
            >>> RandomFlip().draw(tf.constant([[0, 0], [0, 1]], tf.int64)).shape
            TensorShape([2, 2])
        """
        count = self.draw_count()
        if count is None:
            return seeds
        if count == 0:
            return _no_params(seeds)
        return _uniforms(_as_seeds(seeds), count)

    def apply(self, images: tf.Tensor, params: tf.Tensor) -> tf.Tensor:
        """Apply the drawn ``params`` (row ``b`` for sample ``b``) to the image batch.

        Example:
            >>> import tensorflow as tf
            >>> flip = RandomFlip(p=1.0)
            >>> images = tf.reshape(tf.range(3), [1, 1, 3, 1])
            >>> seeds = tf.constant([[0, 0]], tf.int64)
            >>> flip.apply(images, flip.draw(seeds))[0, 0, :, 0].numpy().tolist()
            [2, 1, 0]
        """
        if type(self).augment is Augmentation.augment:
            raise NotImplementedError(f"{type(self).__name__} implements neither augment nor apply")
        return self.augment(images, params)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if k != "image_key")
        return f"{type(self).__name__}({args})"


class RandomCrop(Augmentation):
    """Pad, then crop a random window per sample (CIFAR-style "random crop with padding").

    Each sample is padded by ``padding`` pixels on every side (``pad_mode`` as
    in ``np.pad``: ``"constant"`` with ``fill``, ``"reflect"``, ``"symmetric"``
    or ``"edge"``) and a ``size`` window is cut at a per-sample offset drawn
    uniformly from all valid offsets. The padded image is never built: the
    window is two batched gathers on per-sample index grids. The dtype is kept
    (uint8 in, uint8 out).

    Args:
        size: Output ``(height, width)``, or one int for a square window.
        padding: Pixels added on each side: an int, or ``(pad_y, pad_x)``.
        pad_mode: ``"constant"``, ``"reflect"``, ``"symmetric"`` or ``"edge"``.
        fill: Value of the constant padding.
        image_key: Key of the images when the example is a dict.

    Raises:
        ValueError: On bad arguments, or (when the image size is static) if
            the window is larger than the padded image.

    Example:
        >>> import tensorflow as tf
        >>> crop = RandomCrop(32, padding=4, pad_mode="reflect")
        >>> out = crop(tf.zeros([4, 32, 32, 3], tf.uint8), [[0, i] for i in range(4)])
        >>> tuple(out.shape), out.dtype.name
        ((4, 32, 32, 3), 'uint8')
    """

    def __init__(
        self,
        size: int | tuple[int, int],
        padding: int | tuple[int, int] = 0,
        pad_mode: str = "constant",
        fill: float = 0,
        *,
        image_key: str = "image",
    ) -> None:
        super().__init__(image_key=image_key)
        self.size = _pair(size, "size", 1)
        self.padding = _pair(padding, "padding", 0)
        if pad_mode not in _PAD_MODES:
            raise ConfigError(f"pad_mode must be one of {_PAD_MODES}, got {pad_mode!r}")
        self.pad_mode = pad_mode
        self.fill = fill

    def draw_count(self) -> int:
        """Two uniforms per sample: the row and column offsets' draws."""
        return 2

    def apply(self, images: tf.Tensor, params: tf.Tensor) -> tf.Tensor:
        """Return the ``[B, size_h, size_w, C]`` windows (same dtype as ``images``)."""
        (out_h, out_w), (pad_y, pad_x) = self.size, self.padding
        for axis, out, pad in ((1, out_h, pad_y), (2, out_w, pad_x)):
            dim = images.shape[axis]
            if dim is not None and out > dim + 2 * pad:
                raise ConfigError(
                    f"crop size {self.size} exceeds the padded image "
                    f"{images.shape[1:3]} + 2 * {self.padding}"
                )
        shape = tf.shape(images)
        range_y = shape[1] + 2 * pad_y - out_h + 1  # number of valid offsets
        range_x = shape[2] + 2 * pad_x - out_w + 1
        check = tf.debugging.assert_positive(
            tf.minimum(range_y, range_x), message="RandomCrop: crop size exceeds the padded image"
        )
        with tf.control_dependencies([check] if check is not None else []):
            u = tf.identity(params)
        top, left = _randint(u[:, 0], range_y), _randint(u[:, 1], range_x)
        return _window(images, top, left, out_h, out_w, self.padding, self.pad_mode, self.fill)


class RandomShift(Augmentation):
    """Translate each sample by a random integer ``(dy, dx)``, filling the exposed border.

    ``dy`` and ``dx`` are drawn independently and uniformly from
    ``[-max_shift, max_shift]``; ``out[b, i, j] = images[b, i - dy, j - dx]``
    where that pixel exists, else ``fill``. No flips, so it suits digits. The
    dtype and the image size are kept. (Equivalent to
    ``RandomCrop((H, W), padding=max_shift, fill=fill)``.)

    Args:
        max_shift: Largest shift in pixels: an int, or ``(max_dy, max_dx)``.
        fill: Value of the exposed pixels.
        image_key: Key of the images when the example is a dict.

    Example:
        >>> import tensorflow as tf
        >>> shift = RandomShift(2)
        >>> out = shift(tf.ones([3, 28, 28, 1]), [[1, 0], [1, 1], [1, 2]])
        >>> tuple(out.shape), float(tf.reduce_min(out)) in (0.0, 1.0)
        ((3, 28, 28, 1), True)
    """

    def __init__(
        self, max_shift: int | tuple[int, int], fill: float = 0, *, image_key: str = "image"
    ) -> None:
        super().__init__(image_key=image_key)
        self.max_shift = _pair(max_shift, "max_shift", 0)
        self.fill = fill

    def draw_count(self) -> int:
        """Two uniforms per sample: the draws of ``dy`` and ``dx``."""
        return 2

    def apply(self, images: tf.Tensor, params: tf.Tensor) -> tf.Tensor:
        """Return the shifted batch (same shape and dtype as ``images``)."""
        max_dy, max_dx = self.max_shift
        # Offsets into the padded image; the content moves by (max - offset).
        top = _randint(params[:, 0], 2 * max_dy + 1)
        left = _randint(params[:, 1], 2 * max_dx + 1)
        shape = tf.shape(images)
        out = _window(images, top, left, shape[1], shape[2], self.max_shift, "constant", self.fill)
        out.set_shape(images.shape)
        return out


def _reverse(images: tf.Tensor, axis: int) -> tf.Tensor:
    """``tf.reverse(images, [axis])`` of a batch ``[B, H, W, C]``, the fast way for the width.

    TensorFlow reverses the middle axis of a rank-3 tensor with few channels
    in a dedicated kernel, several times faster than a rank-4 reverse: the
    batch is viewed as ``[B * H, W, C]`` for it (the same values).
    """
    if axis != 2 or images.shape[-1] not in (1, 2, 3, 4):
        return tf.reverse(images, [axis])
    shape = tf.shape(images)
    rows = tf.reshape(images, tf.concat([[-1], shape[2:]], 0))
    out = tf.reshape(tf.reverse(rows, [1]), shape)
    out.set_shape(images.shape)
    return out


class RandomFlip(Augmentation):
    """Flip each sample horizontally (and/or vertically) with probability ``p``.

    The flip decision of each axis is an independent per-sample draw; the batch
    is flipped once and the flipped samples are selected (a ``Select`` with a
    per-sample condition). The dtype is kept.

    Args:
        horizontal: Flip left-right (the width axis).
        vertical: Flip top-bottom (the height axis).
        p: Probability of each enabled flip.
        image_key: Key of the images when the example is a dict.

    Example:
        >>> import tensorflow as tf
        >>> images = tf.reshape(tf.range(2 * 1 * 3 * 1), [2, 1, 3, 1])
        >>> always = RandomFlip(p=1.0)
        >>> always(images, [[0, 0], [0, 1]])[:, 0, :, 0].numpy().tolist()
        [[2, 1, 0], [5, 4, 3]]
    """

    def __init__(
        self,
        horizontal: bool = True,
        vertical: bool = False,
        p: float = 0.5,
        *,
        image_key: str = "image",
    ) -> None:
        super().__init__(image_key=image_key)
        if not (horizontal or vertical):
            raise ConfigError("RandomFlip needs horizontal=True or vertical=True")
        self.horizontal = bool(horizontal)
        self.vertical = bool(vertical)
        self.p = _probability(p, "p")

    def draw_count(self) -> int:
        """Two uniforms per sample: the horizontal and the vertical flip's draws."""
        return 2

    def apply(self, images: tf.Tensor, params: tf.Tensor) -> tf.Tensor:
        """Return the batch with the drawn flips applied (same shape and dtype)."""
        for column, axis, enabled in ((0, 2, self.horizontal), (1, 1, self.vertical)):
            if enabled and images.shape[0] == 1:
                # One image (a loader's per-image stage): reverse only when drawn -- the
                # reverse costs about a resize, the cond much less.
                flip = params[0, column] < self.p
                images = tf.cond(flip, lambda x=images, a=axis: _reverse(x, a), lambda x=images: x)
            elif enabled:
                # Select with a rank-1 condition picks whole samples; it is several times
                # faster than tf.where broadcasting a [B, 1, 1, 1] mask (SelectV2).
                images = tf.raw_ops.Select(
                    condition=params[:, column] < self.p, x=_reverse(images, axis), y=images
                )
        return images


class RandomBrightness(Augmentation):
    """Add a per-sample random brightness offset.

    Each sample gets one ``delta`` drawn uniformly from ``[-max_delta,
    max_delta)`` added to all its pixels and channels. The output is float32;
    integer images are cast *without rescaling*, so ``max_delta`` is in the
    images' own units: about ``0.1`` for float images in ``[0, 1]``, about
    ``25`` for raw uint8 values in ``[0, 255]`` (or put :class:`ToFloat` first).
    No clipping unless ``value_range`` is given.

    Args:
        max_delta: Largest absolute offset, ``>= 0``.
        value_range: Optional ``(low, high)`` to clip the result to.
        image_key: Key of the images when the example is a dict.

    Example:
        >>> import tensorflow as tf
        >>> bright = RandomBrightness(0.2, value_range=(0.0, 1.0))
        >>> out = bright(tf.fill([2, 4, 4, 3], 0.5), [[0, 0], [0, 1]])
        >>> out.dtype.name, bool(tf.reduce_all(tf.abs(out - 0.5) <= 0.2))
        ('float32', True)
    """

    def __init__(
        self,
        max_delta: float,
        value_range: tuple[float, float] | None = None,
        *,
        image_key: str = "image",
    ) -> None:
        super().__init__(image_key=image_key)
        if isinstance(max_delta, bool) or not isinstance(max_delta, (int, float)) or max_delta < 0:
            raise ConfigError(f"max_delta must be a number >= 0, got {max_delta!r}")
        if value_range is not None:
            low, high = value_range
            if not low <= high:
                raise ConfigError(
                    f"value_range must be (low, high) with low <= high, got {value_range!r}"
                )
            value_range = (float(low), float(high))
        self.max_delta = float(max_delta)
        self.value_range = value_range

    def draw_count(self) -> int:
        """One uniform per sample: the offset's draw."""
        return 1

    def apply(self, images: tf.Tensor, params: tf.Tensor) -> tf.Tensor:
        """Return ``float32(images) + delta[b]`` (clipped to ``value_range`` if set)."""
        delta = (2.0 * params[:, :1] - 1.0) * self.max_delta  # [B, 1]
        out = tf.cast(images, tf.float32) + delta[:, :, tf.newaxis, tf.newaxis]
        if self.value_range is not None:
            out = tf.clip_by_value(out, *self.value_range)
        return out


# --------------------------------------------------------------------------------------------
# Window stages: cut one window per image (planned from its shape and seed), then resize.
# --------------------------------------------------------------------------------------------

_INTERPOLATIONS = ("bilinear", "nearest", "bicubic")


class WindowAugmentation(Augmentation):
    """Base class of the stages that cut one window per image and resize it to ``size``.

    The contract a window-decoding source relies on:

    * :meth:`windows` plans every sample's window from the image's shape and
      the sample's drawn parameters alone (vectorised over samples), before
      any pixel is decoded;
    * :meth:`resize` turns one window's pixels into the output, sample by sample.

    ``apply`` on a batch is exactly that: plan, slice each window, resize
    it. So the output for a sample does not depend on whether the source
    decoded the whole image or only the window.

    The resize is ``tf.image.resize`` of the window alone (half-pixel
    centres, as torchvision and TF Model Garden; pixels outside the window
    never leak in; ``antialias`` as in ``tf.image.resize``). Output float32
    in the input's value units.

    Args:
        size: Output ``(height, width)``, or one int for a square output.
        interpolation: ``"bilinear"``, ``"nearest"`` or ``"bicubic"``.
        antialias: Low-pass filter when downsampling (``tf.image.resize``'s
            ``antialias``; like PIL's resize, slower).
        image_key: Key of the images when the example is a dict.
    """

    def __init__(
        self,
        size: int | tuple[int, int],
        interpolation: str = "bilinear",
        antialias: bool = False,
        *,
        image_key: str = "image",
    ) -> None:
        super().__init__(image_key=image_key)
        self.size = _pair(size, "size", 1)
        if interpolation not in _INTERPOLATIONS:
            raise ConfigError(
                f"interpolation must be one of {_INTERPOLATIONS}, got {interpolation!r}"
            )
        self.interpolation = interpolation
        self.antialias = bool(antialias)

    def windows(self, shapes: tf.Tensor, params: tf.Tensor) -> tf.Tensor:
        """The windows ``[N, 4]`` int32 ``(top, left, height, width)`` of images of ``shapes``.

        Args:
            shapes: int32 ``[N, 2]``, each image's ``(height, width)``.
            params: The drawn parameters of the ``N`` samples (:meth:`draw`).
        """
        return self._windows(_TensorFlowOps, shapes, params)

    def host_windows(self, shapes: np.ndarray, params: np.ndarray) -> np.ndarray:
        """:meth:`windows` computed by NumPy: for a loader that plans its windows on the host.

        The built-in stages compute both with one implementation. A stage of
        one's own that overrides :meth:`windows` alone is planned in the
        graph (:attr:`plans_on_host` is False); it may override this method
        too, returning the same int32 ``[N, 4]`` windows.

        Example:
            >>> import numpy as np
            >>> crop = CenterCrop(224)
            >>> crop.host_windows(np.array([[375, 500]]), np.zeros([1, 0], np.float32)).tolist()
            [[24, 86, 328, 328]]
        """
        out = self._windows(_NumPyOps, np.asarray(shapes), np.asarray(params))
        return np.ascontiguousarray(out, dtype=np.int32)

    @property
    def plans_on_host(self) -> bool:
        """Whether :meth:`host_windows` can plan this stage's windows.

        Example:
            >>> RandomResizedCrop(224).plans_on_host
            True
        """
        cls = type(self)
        return (
            cls._windows is not WindowAugmentation._windows
            or cls.host_windows is not WindowAugmentation.host_windows
        )

    def _windows(self, ops: _Ops, shapes: Any, params: Any) -> Any:
        """The windows of :meth:`windows`, in the array library ``ops`` (TensorFlow or NumPy)."""
        raise NotImplementedError(f"{type(self).__name__} implements neither windows nor _windows")

    def resize(self, window: tf.Tensor) -> tf.Tensor:
        """Resize one window ``[h, w, C]`` (any real dtype) to float32 ``[size_h, size_w, C]``.

        Example:
            >>> import tensorflow as tf
            >>> CenterCrop(4).resize(tf.zeros([7, 9, 3], tf.uint8)).shape
            TensorShape([4, 4, 3])
        """
        out = tf.image.resize(
            window, self.size, method=self.interpolation, antialias=self.antialias
        )
        return tf.cast(out, tf.float32)

    accepts_encoded: ClassVar[bool] = True

    def apply(self, images: tf.Tensor, params: tf.Tensor) -> tf.Tensor:
        """Plan each sample's window on the batch's image size, slice it and resize it.

        ``images`` may also be a batch ``[B]`` of encoded images (JPEG, PNG,
        ...; e.g. ``TFRecordSource(images="encoded")``): each JPEG then has
        only its window decoded (:func:`tfdp.sources.windows.encoded_windows`,
        RGB), with the same result as on the decoded images.
        """
        if images.dtype == tf.string:
            from tfdp.windows.decode import encoded_windows  # decoding lives with the windows

            return encoded_windows(images, self, params)
        shape = tf.shape(images)
        batch = shape[0]
        shapes = tf.tile(shape[tf.newaxis, 1:3], tf.stack([batch, 1]))
        boxes = self.windows(shapes, params)

        def one(b: tf.Tensor | int) -> tf.Tensor:
            top, left, height, width = tf.unstack(boxes[b])
            return self.resize(images[b, top : top + height, left : left + width])

        if images.shape[0] == 1:  # a batch of one (per-example pipelines): no loop
            return one(0)[tf.newaxis]
        spec = tf.TensorSpec([*self.size, images.shape[-1]], tf.float32)
        return tf.map_fn(one, tf.range(batch), fn_output_signature=spec)


class RandomResizedCrop(WindowAugmentation):
    """Crop a random area/aspect-ratio box per sample and resize it to ``size``.

    The box follows torchvision's ``RandomResizedCrop.get_params``, evaluated
    for all samples at once: ``attempts`` candidate boxes per sample, each with
    area fraction ~ U(``scale``) and log aspect ratio ~ U(log ``ratio``),
    width/height rounded half-to-even (Python's ``round``), offsets uniform
    over the valid positions; the first candidate that fits is used, else the
    fallback is torchvision's centre crop with the aspect ratio clamped to
    ``ratio``. The box is then resized on its own (see
    :class:`WindowAugmentation`). Differences from torchvision: the random
    numbers come from :func:`per_sample_uniform`, not torch's generator; no
    antialiasing unless ``antialias=True`` (torchvision's PIL path always
    low-pass filters when it shrinks). Output is float32 in the input's
    value units.

    Images may differ in size from sample to sample when the windows are
    planned by a source (:meth:`windows` takes one shape per sample).

    Args:
        size: Output ``(height, width)``, or one int for a square output.
        scale: ``(min, max)`` fraction of the image area of the crop.
        ratio: ``(min, max)`` aspect ratio (width / height) of the crop.
        interpolation: ``"bilinear"``, ``"nearest"`` or ``"bicubic"``.
        attempts: Candidate boxes per sample before the fallback (torchvision: 10).
        antialias: Low-pass filter when shrinking (slower).
        image_key: Key of the images when the example is a dict.

    Example:
        >>> import tensorflow as tf
        >>> rrc = RandomResizedCrop(24)
        >>> out = rrc(tf.zeros([2, 64, 48, 3], tf.uint8), [[5, 0], [5, 1]])
        >>> tuple(out.shape), out.dtype.name
        ((2, 24, 24, 3), 'float32')
    """

    def __init__(
        self,
        size: int | tuple[int, int],
        scale: tuple[float, float] = (0.08, 1.0),
        ratio: tuple[float, float] = (3 / 4, 4 / 3),
        interpolation: str = "bilinear",
        attempts: int = 10,
        antialias: bool = False,
        *,
        image_key: str = "image",
    ) -> None:
        super().__init__(size, interpolation, antialias, image_key=image_key)
        scale_lo, scale_hi = (float(v) for v in scale)
        ratio_lo, ratio_hi = (float(v) for v in ratio)
        if not 0 < scale_lo <= scale_hi:
            raise ConfigError(f"scale must be (min, max) with 0 < min <= max, got {scale!r}")
        if not 0 < ratio_lo <= ratio_hi:
            raise ConfigError(f"ratio must be (min, max) with 0 < min <= max, got {ratio!r}")
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
            raise ConfigError(f"attempts must be an int >= 1, got {attempts!r}")
        self.scale = (scale_lo, scale_hi)
        self.ratio = (ratio_lo, ratio_hi)
        self.attempts = attempts

    def draw_count(self) -> int:
        """``4 * attempts`` uniforms: area, log ratio, top, left of each attempt."""
        return 4 * self.attempts

    def windows(self, shapes: tf.Tensor, params: tf.Tensor) -> tf.Tensor:
        """Boxes as torchvision draws them, for images of ``shapes`` ``[N, 2]``, from ``params``.

        Example:
            >>> import tensorflow as tf
            >>> rrc = RandomResizedCrop(8)
            >>> seeds = tf.constant([[0, 0], [0, 1]], tf.int64)
            >>> boxes = rrc.windows(tf.constant([[20, 30], [40, 10]]), rrc.draw(seeds))
            >>> top, left, h, w = tf.unstack(boxes, axis=1)
            >>> bool(tf.reduce_all((top + h <= [20, 40]) & (left + w <= [30, 10])))
            True
        """
        return super().windows(shapes, params)

    def _windows(self, ops: _Ops, shapes: Any, params: Any) -> Any:
        n = self.attempts
        shapes = ops.cast(shapes, ops.int32)
        height_i, width_i = shapes[:, 0], shapes[:, 1]
        # Attempt k uses draws 4k..4k+3: area fraction, log ratio, top, left. Float64 keeps
        # the rounding of the box size away from 1-ulp differences between exp()
        # implementations (vectorised or scalar, TensorFlow's or NumPy's): a box changes only
        # if sqrt(area * ratio) falls within ~1e-13 of a half pixel.
        u = ops.reshape(ops.cast(params, ops.float64), [-1, n, 4])
        height_f = ops.cast(height_i, ops.float64)
        width_f = ops.cast(width_i, ops.float64)
        heights, widths = height_f[:, None], width_f[:, None]
        log_lo, log_hi = math.log(self.ratio[0]), math.log(self.ratio[1])
        area = heights * widths * (self.scale[0] + u[..., 0] * (self.scale[1] - self.scale[0]))
        aspect = ops.exp(log_lo + u[..., 1] * (log_hi - log_lo))
        crop_w = ops.round(ops.sqrt(area * aspect))
        crop_h = ops.round(ops.sqrt(area / aspect))
        fits = (crop_w > 0) & (crop_w <= widths) & (crop_h > 0) & (crop_h <= heights)
        top = ops.floor(u[..., 2] * (heights - crop_h + 1))
        left = ops.floor(u[..., 3] * (widths - crop_w + 1))
        # First attempt that fits (argmax does not promise the first of ties).
        first = ops.first_true(fits, n)
        found = first < n
        pick = ops.minimum(first, n - 1)
        crop_h, crop_w, top, left = (
            ops.cast(ops.pick(v, pick), ops.int32) for v in (crop_h, crop_w, top, left)
        )
        # torchvision's fallback: whole image, aspect ratio clamped into `ratio`, centred.
        in_ratio = width_f / height_f
        fallback_w = ops.where(
            in_ratio > self.ratio[1], ops.round(height_f * self.ratio[1]), width_f
        )
        fallback_h = ops.where(
            in_ratio < self.ratio[0], ops.round(width_f / self.ratio[0]), height_f
        )
        # At least one pixel: torchvision's fallback gives an empty box (and fails) only
        # when an extreme ratio rounds a tiny image's side to 0.
        fallback_w = ops.maximum(ops.cast(fallback_w, ops.int32), 1)
        fallback_h = ops.maximum(ops.cast(fallback_h, ops.int32), 1)
        crop_h = ops.where(found, ops.minimum(crop_h, height_i), fallback_h)
        crop_w = ops.where(found, ops.minimum(crop_w, width_i), fallback_w)
        top = ops.where(found, ops.minimum(top, height_i - crop_h), (height_i - fallback_h) // 2)
        left = ops.where(found, ops.minimum(left, width_i - crop_w), (width_i - fallback_w) // 2)
        return ops.stack([top, left, crop_h, crop_w], axis=1)

    def crop_boxes(
        self, seeds: Any, height: int | tf.Tensor, width: int | tf.Tensor
    ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
        """Sample the crop boxes for images of ``height x width``.

        Args:
            seeds: Integer tensor ``[B, 2]``.
            height: Image height: an int, a scalar tensor, or one per sample ``[B]``.
            width: Image width, likewise.

        Returns:
            ``(top, left, crop_height, crop_width)``, each int32 ``[B]``: the
            crop of sample ``b`` is ``image[top:top + crop_height, left:left + crop_width]``.

        Example:
            >>> import tensorflow as tf
            >>> top, left, h, w = RandomResizedCrop(8).crop_boxes([[0, 0], [0, 1]], 20, 30)
            >>> bool(tf.reduce_all((top >= 0) & (top + h <= 20) & (left + w <= 30)))
            True
        """
        seeds = _as_seeds(seeds)
        batch = tf.shape(seeds)[:1]
        heights = tf.broadcast_to(tf.cast(height, tf.int32), batch)
        widths = tf.broadcast_to(tf.cast(width, tf.int32), batch)
        boxes = self.windows(tf.stack([heights, widths], axis=1), self.draw(seeds))
        return tuple(tf.unstack(boxes, num=4, axis=1))  # type: ignore[return-value]


class CenterCrop(WindowAugmentation):
    """Resize-and-centre-crop for evaluation (torchvision's ``Resize`` + ``CenterCrop``).

    The window is what DeiT's / timm's evaluation transform keeps:
    ``Resize(round(min(size) / crop_fraction))`` of the shorter side followed
    by ``CenterCrop(size)``, expressed in the original image -- a centred
    window of ``size * min(H, W) * crop_fraction / min(size)`` pixels per
    side (rounded half-to-even, at most the image), offsets
    ``round((H - h) / 2)`` as torchvision's ``CenterCrop``. The window is
    then resized on its own (see :class:`WindowAugmentation`), so a
    window-decoding source decodes only it. Deterministic (ignores the seeds).

    Args:
        size: Output ``(height, width)``, or one int for a square output.
        crop_fraction: Fraction of the shorter side kept (DeiT and TF Model
            Garden: ``0.875``, i.e. 224 of 256); ``1.0`` keeps the shorter
            side whole.
        interpolation: ``"bilinear"``, ``"nearest"`` or ``"bicubic"``.
        antialias: Low-pass filter when shrinking (slower).
        image_key: Key of the images when the example is a dict.

    Example:
        >>> import tensorflow as tf
        >>> crop = CenterCrop(224)
        >>> params = crop.draw(tf.zeros([1, 2], tf.int64))
        >>> crop.windows(tf.constant([[375, 500]]), params).numpy().tolist()
        [[24, 86, 328, 328]]
    """

    random: ClassVar[bool] = False

    def __init__(
        self,
        size: int | tuple[int, int],
        crop_fraction: float = 0.875,
        interpolation: str = "bilinear",
        antialias: bool = False,
        *,
        image_key: str = "image",
    ) -> None:
        super().__init__(size, interpolation, antialias, image_key=image_key)
        if (
            isinstance(crop_fraction, bool)
            or not isinstance(crop_fraction, (int, float))
            or not 0 < crop_fraction <= 1
        ):
            raise ConfigError(f"crop_fraction must be a number in (0, 1], got {crop_fraction!r}")
        self.crop_fraction = float(crop_fraction)

    def windows(self, shapes: tf.Tensor, params: tf.Tensor) -> tf.Tensor:
        """The centred windows ``[N, 4]`` for images of ``shapes`` ``[N, 2]``."""
        return super().windows(shapes, params)

    def _windows(self, ops: _Ops, shapes: Any, params: Any) -> Any:
        shapes = ops.cast(shapes, ops.int32)
        heights, widths = shapes[:, 0], shapes[:, 1]
        shorter = ops.cast(ops.minimum(heights, widths), ops.float64)
        per_out = shorter * self.crop_fraction / min(self.size)  # image pixels per output pixel
        win_h = ops.minimum(ops.cast(ops.round(per_out * self.size[0]), ops.int32), heights)
        win_w = ops.minimum(ops.cast(ops.round(per_out * self.size[1]), ops.int32), widths)
        win_h, win_w = ops.maximum(win_h, 1), ops.maximum(win_w, 1)

        def centred(total: Any, part: Any) -> Any:
            return ops.cast(ops.round(ops.cast(total - part, ops.float64) / 2), ops.int32)

        return ops.stack([centred(heights, win_h), centred(widths, win_w), win_h, win_w], axis=1)


class ToFloat(Augmentation):
    """Cast to float32 and multiply by ``scale`` (deterministic; ignores the seeds).

    Args:
        scale: Multiplier; the default maps uint8 ``[0, 255]`` to ``[0, 1]``.
        image_key: Key of the images when the example is a dict.

    Example:
        >>> import tensorflow as tf
        >>> ToFloat()(tf.constant([[[[255]]]], tf.uint8), [[0, 0]]).numpy().ravel().tolist()
        [1.0]
    """

    random: ClassVar[bool] = False

    def __init__(self, scale: float = 1 / 255, *, image_key: str = "image") -> None:
        super().__init__(image_key=image_key)
        self.scale = float(scale)

    def apply(self, images: tf.Tensor, params: tf.Tensor) -> tf.Tensor:
        """Return ``float32(images) * scale``."""
        return tf.cast(images, tf.float32) * self.scale


class Normalize(Augmentation):
    """Standardise channels: ``(float32(images) - mean) / std`` (deterministic).

    Args:
        mean: Scalar or per-channel sequence, in the images' units.
        std: Scalar or per-channel sequence, all ``> 0``.
        image_key: Key of the images when the example is a dict.

    Example:
        >>> import tensorflow as tf
        >>> norm = Normalize(mean=[0.5, 0.5, 0.5], std=[0.25, 0.25, 0.25])
        >>> norm(tf.ones([1, 1, 1, 3]), [[0, 0]]).numpy().ravel().tolist()
        [2.0, 2.0, 2.0]
    """

    random: ClassVar[bool] = False

    def __init__(
        self,
        mean: float | Sequence[float],
        std: float | Sequence[float],
        *,
        image_key: str = "image",
    ) -> None:
        super().__init__(image_key=image_key)
        self.mean = tuple(float(m) for m in mean) if isinstance(mean, Sequence) else float(mean)
        self.std = tuple(float(s) for s in std) if isinstance(std, Sequence) else float(std)
        stds = self.std if isinstance(self.std, tuple) else (self.std,)
        if not stds or any(not s > 0 for s in stds):
            raise ConfigError(f"std must be > 0, got {std!r}")
        means = self.mean if isinstance(self.mean, tuple) else (self.mean,)
        if isinstance(self.mean, tuple) and isinstance(self.std, tuple) and len(means) != len(stds):
            raise ConfigError(f"mean and std differ in length: {mean!r}, {std!r}")

    def apply(self, images: tf.Tensor, params: tf.Tensor) -> tf.Tensor:
        """Return the standardised float32 batch."""
        centred = _per_channel(tf.cast(images, tf.float32), self.mean, tf.subtract)
        return _per_channel(centred, self.std, tf.divide)


class Compose:
    """Apply batched augmentations in order, each with its own derived seeds.

    Stage ``i`` is called as ``stage(example, fold_in(seeds, i))`` (a
    deterministic :class:`Augmentation`, ``random = False``, gets ``seeds``
    unchanged: it ignores them), so the stages draw from independent streams
    (two ``RandomFlip`` stages do not flip the same samples) while every draw
    still depends only on the sample's own seed. Stages may be any callables with ``batched = True``
    (including other :class:`Compose` objects); each handles the example
    structure itself.

    Args:
        stages: The augmentations, applied first to last.

    Raises:
        TypeError: If a stage is not callable or lacks ``batched = True``.

    Example:
        >>> import tensorflow as tf
        >>> aug = Compose([RandomShift(2), ToFloat(), Normalize(0.5, 0.25)])
        >>> images, labels = aug((tf.zeros([2, 28, 28, 1], tf.uint8), tf.constant([3, 5])),
        ...                      [[0, 0], [0, 1]])
        >>> tuple(images.shape), labels.numpy().tolist()
        ((2, 28, 28, 1), [3, 5])
    """

    batched: ClassVar[bool] = True

    def __init__(self, stages: Sequence[Callable[[Any, tf.Tensor], Any]]) -> None:
        stages = list(stages)
        for stage in stages:
            if not isinstance(stage, BatchedAugmentation) or stage.batched is not True:
                raise TypeError(
                    f"Compose stages must be batched augmentations (callable with "
                    f"batched = True), got {stage!r}"
                )
        self.stages = stages

    def __call__(self, example: Any, seeds: Any) -> Any:
        """Apply every stage to the batched ``example`` with per-sample ``seeds`` ``[B, 2]``."""
        seeds = _as_seeds(seeds)
        for index, stage in enumerate(self.stages):  # a user's stage as AutoGraph converts it
            example = user_code(stage)(example, _stage_seeds(seeds, index, stage))
        return example

    def __len__(self) -> int:
        return len(self.stages)

    def __repr__(self) -> str:
        return f"Compose({self.stages!r})"


# --------------------------------------------------------------------------------------------
# Splitting an augmentation for window-decoding sources.
# --------------------------------------------------------------------------------------------


def _shared_stages(
    stages: Sequence[tuple[int | None, Augmentation]],
) -> list[tuple[int, Any, int]]:
    """``(i, Compose index, count)`` of the stages that draw :func:`per_sample_uniform` numbers."""
    return [
        (i, index, stage.draw_count())
        for i, (index, stage) in enumerate(stages)
        if stage.random and stage.draw_count()
    ]


def _shared_draws(seeds: Any, shared: Sequence[tuple[int, Any, int]], ops: _Ops) -> list[Any]:
    """The draws of the ``shared`` stages (:func:`_shared_stages`) in two hash passes.

    One pass folds all their :class:`Compose` seeds, one draws all their
    numbers -- the values of each stage's own ``draw``, with a smaller graph.
    """
    folds = sorted({index for _, index, _ in shared if index is not None})
    folded = _fold_many(seeds, folds, ops) if folds else None
    per_stage = [
        seeds if index is None else folded[:, folds.index(index)] for _, index, _ in shared
    ]
    draws = _uniforms(ops.stack(per_stage, axis=1), max(n for _, _, n in shared), ops)
    return [draws[:, k, :n] for k, (_, _, n) in enumerate(shared)]


def _host_draws(seeds: tf.Tensor, shared: Sequence[tuple[int, Any, int]]) -> list[tf.Tensor]:
    """:func:`_shared_draws` computed by NumPy: one ``tf.numpy_function`` node in the graph.

    The same values (:class:`_NumPyOps`); the hash's ~270 graph nodes are
    what a ``tf.data`` function instantiates and optimises with every new
    iterator, the host call costs a fraction of a millisecond per call.
    """

    def draw(host_seeds: np.ndarray) -> list[np.ndarray]:
        return [np.ascontiguousarray(d) for d in _shared_draws(host_seeds, shared, _NumPyOps)]

    out = tf.numpy_function(
        draw, [seeds], [tf.float32] * len(shared), stateful=False, name="host_draws"
    )
    if isinstance(out, tf.Tensor):  # eagerly, one output comes back bare
        out = [out]
    for t, (_, _, n) in zip(out, shared, strict=True):
        t.set_shape([seeds.shape[0], n])
    return out


def _draw_together(
    seeds: tf.Tensor, stages: Sequence[tuple[int | None, Augmentation]], on_host: bool = False
) -> list[tf.Tensor]:
    """Every stage's ``draw`` of its :class:`Compose` seeds (index ``None``: the seeds as they are).

    The stages that draw :func:`per_sample_uniform` numbers share two hash
    passes (:func:`_shared_draws`; on the host with ``on_host``); the others
    draw on their own.
    """
    shared = _shared_stages(stages)
    params: list[tf.Tensor | None] = [None] * len(stages)
    if shared:
        drawn = (
            _host_draws(seeds, shared) if on_host else _shared_draws(seeds, shared, _TensorFlowOps)
        )
        for (i, _, _), p in zip(shared, drawn, strict=True):
            params[i] = p
    for i, (index, stage) in enumerate(stages):
        if params[i] is None:
            params[i] = stage.draw(_stage_seeds(seeds, index, stage))
    return params  # type: ignore[return-value]


def _stage_seeds(seeds: tf.Tensor, index: int | None, stage: Any) -> tf.Tensor:
    """The seeds :class:`Compose` gives stage ``index`` (``None``: a bare stage)."""
    if index is None or (isinstance(stage, Augmentation) and not stage.random):
        return seeds
    return fold_in(seeds, index)


class WindowRequest:
    """What a window-decoding source needs for ``N`` samples, with every random draw made.

    Built by :meth:`WindowPipeline.request` from the samples' seeds: the
    draws of the window stage and of the per-image stages after it are made
    once, vectorised over the ``N`` samples (with ``on_host``, the
    :func:`per_sample_uniform` numbers by NumPy on the host: the same values,
    one graph node instead of the hash's). The source then calls
    :meth:`windows` with the images' shapes (read from the file headers) and
    :meth:`finish` on each decoded window.

    Example:
        >>> import tensorflow as tf
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
        seeds = _as_seeds(seeds)
        self.pipeline = pipeline
        self.on_host = bool(on_host)
        stages = [(pipeline.window_index, pipeline.window), *pipeline.image_stages]
        params = _draw_together(seeds, stages, on_host)
        self._window_params, self._stage_params = params[0], params[1:]

    def windows(self, shapes: tf.Tensor) -> tf.Tensor:
        """The windows ``[N, 4]`` int32 ``(top, left, height, width)`` for ``shapes`` ``[N, 2]``.

        With ``on_host``, planned by NumPy (:meth:`WindowAugmentation.host_windows`)
        in one ``tf.numpy_function`` when the stage can.
        """
        window = self.pipeline.window
        if not (self.on_host and window.plans_on_host):
            return window.windows(shapes, self._window_params)
        boxes = tf.numpy_function(
            window.host_windows,
            [shapes, self._window_params],
            tf.int32,
            stateful=False,
            name="host_windows",
        )
        boxes.set_shape([shapes.shape[0], 4])
        return boxes

    def finish(self, window: tf.Tensor, j: Any) -> tf.Tensor:
        """Sample ``j``'s output from its window's pixels ``[h, w, C]``.

        The window is resized, then the per-image stages apply their drawn
        parameters (row ``j``).
        """
        params = [p[j : j + 1] for p in self._stage_params]
        return self._finish(window, *params)

    def _finish(self, window: tf.Tensor, *params: tf.Tensor) -> tf.Tensor:
        image = self.pipeline.window.resize(window)[tf.newaxis]
        for (_, stage), p in zip(self.pipeline.image_stages, params, strict=True):
            image = stage.apply(image, p)
        return image[0]

    def output_spec(self, window: tf.TensorSpec) -> tf.TensorSpec:
        """The spec of :meth:`finish`'s output for windows of spec ``window``.

        Traced on its own (nothing is added to the caller's graph).

        Example:
            >>> import tensorflow as tf
            >>> pipe = split_window(Compose([RandomResizedCrop(4), ToFloat()]))
            >>> req = pipe.request(tf.constant([[0, 0]], tf.int64))
            >>> req.output_spec(tf.TensorSpec([None, None, 3], tf.uint8))
            TensorSpec(shape=(4, 4, 3), dtype=tf.float32, name=None)
        """
        params = [tf.TensorSpec([1, *p.shape[1:]], p.dtype) for p in self._stage_params]
        traced = tf.function(self._finish, autograph=False).get_concrete_function(window, *params)
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

        ``on_host``: draw the :func:`per_sample_uniform` numbers with NumPy
        (``tf.numpy_function``), bit-identical, and plan the windows with
        NumPy too (:meth:`WindowRequest.windows`); for a graph instantiated
        often, such as a ``tf.data`` function, which then starts faster.
        """
        return WindowRequest(self, seeds, on_host=on_host)

    def finish_batch(self, example: Any, seeds: Any) -> Any:
        """Apply the batch stages to an assembled batch ``example`` (seeds ``[B, 2]``)."""
        seeds = _as_seeds(seeds)
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
