"""The base class of tfdp's augmentations: a draw of per-sample parameters, then their application.

This module owns :class:`Augmentation` and what every stage shares through
it: the example structure (a tuple or list with the images first, a dict
holding them under ``image_key``, or a bare image tensor), the seeds
``[B, 2]`` handed in (checked by :func:`tfdp.random.as_seeds`), and the split
of a stage into :meth:`~Augmentation.draw` (seeds -> per-sample parameters,
vectorised) and :meth:`~Augmentation.apply` (images, parameters -> images):
``augment(images, seeds) == apply(images, draw(seeds))``.

Example:
    >>> import tensorflow as tf
    >>> class Invert(Augmentation):
    ...     random = False
    ...     def apply(self, images, params):
    ...         return 1.0 - tf.cast(images, tf.float32)
    >>> images, labels = Invert()((tf.zeros([2, 1, 1, 1]), tf.constant([4, 5])), [[0, 0], [0, 1]])
    >>> images[:, 0, 0, 0].numpy().tolist(), labels.numpy().tolist()
    ([1.0, 1.0], [4, 5])
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import tensorflow as tf

from tfdp.errors import ConfigError, ConfigTypeError, DataError
from tfdp.random import as_seeds, per_sample_uniform


def get_image(example: Any, image_key: str) -> Any:
    """The images of ``example`` (see the module docstring for the structures)."""
    if isinstance(example, Mapping):
        if image_key not in example:
            raise DataError(
                f"{image_key!r} is not a key of the example; its keys: {sorted(example)}",
                argument="image_key",
            )
        return example[image_key]
    if isinstance(example, (tuple, list)):
        if not example:
            raise ConfigError(
                "an empty tuple/list; its first element must be the images", argument="example"
            )
        return example[0]
    return example


def put_image(example: Any, image: tf.Tensor, image_key: str) -> Any:
    """``example`` with its images replaced by ``image`` (the same structure)."""
    if isinstance(example, (tuple, list, Mapping)):
        return replace_item(example, 0, image_key, image)
    return image


def replace_item(example: Any, position: int, key: str, value: Any) -> Any:
    """``example`` (a mapping, tuple, namedtuple or list) with one item replaced by ``value``.

    The item is ``example[key]`` for a mapping, else the one at ``position``.

    Example:
        >>> import collections
        >>> Pair = collections.namedtuple("Pair", "x y")
        >>> replace_item(Pair(1, 2), 1, "y", 5), replace_item([1, 2], 0, "x", 7)
        (Pair(x=1, y=5), [7, 2])
        >>> replace_item({"image": 1, "label": 2}, 1, "label", 3)
        {'image': 1, 'label': 3}
    """
    if isinstance(example, Mapping):
        return {**example, key: value}
    items = list(example)
    items[position] = value
    if isinstance(example, list):
        return items
    return tuple(items) if type(example) is tuple else type(example)(*items)  # a namedtuple


def as_images(images: Any, encoded: bool = False) -> tf.Tensor:
    """``images`` as a batch ``[B, H, W, C]`` (or ``[B]`` encoded, with ``encoded``), checked."""
    images = tf.convert_to_tensor(images)
    if encoded and images.dtype == tf.string:
        if images.shape.rank is not None and images.shape.rank != 1:
            raise ConfigError(
                f"must be a batch [B] of strings when encoded, got {images.shape}",
                argument="images",
            )
        return images
    if images.shape.rank is not None and images.shape.rank != 4:
        raise ConfigError(
            f"must be a batch [B, H, W, C], got shape {images.shape}", argument="images"
        )
    return images


def no_params(seeds: tf.Tensor) -> tf.Tensor:
    """A ``[B, 0]`` float32 tensor: the draws of a deterministic stage."""
    return tf.zeros(tf.stack([tf.shape(seeds)[0], 0]), tf.float32)


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
            raise ConfigTypeError(f"must be a str, got {image_key!r}", argument="image_key")
        self.image_key = image_key

    def __call__(self, example: Any, seeds: Any) -> Any:
        """Augment the images of a batched ``example`` with per-sample ``seeds`` ``[B, 2]``."""
        seeds = as_seeds(seeds)
        images = as_images(get_image(example, self.image_key), self.accepts_encoded)
        batch, seed_batch = images.shape[0], seeds.shape[0]
        if batch is not None and seed_batch is not None and batch != seed_batch:
            raise ConfigError(
                f"has {seed_batch} rows but the image batch has {batch}", argument="seeds"
            )
        return put_image(example, self.augment(images, seeds), self.image_key)

    def augment(self, images: tf.Tensor, seeds: tf.Tensor) -> tf.Tensor:
        """Return the augmented batch (``images`` ``[B, H, W, C]``, ``seeds`` int64 ``[B, 2]``)."""
        if type(self).apply is Augmentation.apply:
            raise NotImplementedError(f"{type(self).__name__} implements neither augment nor apply")
        return self.apply(images, self.draw(seeds))

    def draw_count(self) -> int | None:
        """How many :func:`tfdp.random.per_sample_uniform` numbers :meth:`draw` takes per sample.

        ``None`` (the default) for a stage whose draws are its own (then
        :meth:`draw` returns the seeds themselves). A loader can make the
        draws of several such stages in one pass.

        Example:
            >>> from tfdp.augment import RandomFlip, RandomResizedCrop, ToFloat
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
            >>> from tfdp.augment import RandomFlip
            >>> RandomFlip().draw(tf.constant([[0, 0], [0, 1]], tf.int64)).shape
            TensorShape([2, 2])
        """
        count = self.draw_count()
        if count is None:
            return seeds
        if count == 0:
            return no_params(seeds)
        return per_sample_uniform(seeds, int(count))

    def apply(self, images: tf.Tensor, params: tf.Tensor) -> tf.Tensor:
        """Apply the drawn ``params`` (row ``b`` for sample ``b``) to the image batch.

        Example:
            >>> import tensorflow as tf
            >>> from tfdp.augment import RandomFlip
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
        args = ", ".join(
            f"{k}={v!r}" for k, v in vars(self).items() if k != "image_key" and k[0] != "_"
        )
        return f"{type(self).__name__}({args})"
