"""RandomErasing with timm's semantics: boxes of noise (or zeros) in normalised images.

Example:
    >>> import tensorflow as tf
    >>> erase = RandomErasing(1.0, mode="const")
    >>> out = erase(tf.ones([2, 16, 16, 3]), [[0, 0], [0, 1]])
    >>> bool(tf.reduce_all(tf.reduce_min(out, axis=[1, 2, 3]) == 0.0))  # a zero box in each
    True
"""

from __future__ import annotations

import math

import tensorflow as tf

from tfdp.augment._each import each_sample
from tfdp.augment.base import Augmentation
from tfdp.augment.spec import ErasingSpec

_ATTEMPTS = 10  # timm's attempts per box
#: Uniforms per box: 4 per attempt (area, log aspect, top, left) and 4 for the noise's seed.
_PER_BOX = 4 * _ATTEMPTS + 4


class RandomErasing(Augmentation):
    """timm's ``RandomErasing`` (``timm.data.random_erasing``), per sample, after ``Normalize``.

    With probability ``probability`` a sample gets a count of boxes uniform in
    ``[min_count, max_count]``. Each box takes the first of 10 attempts that
    fits (``h < H`` and ``w < W``): area ``U(min_area, max_area) * H * W /
    count``, log aspect ratio uniform in ``[log min_aspect, log max_aspect]``,
    ``h = round(sqrt(area * aspect))``, ``w = round(sqrt(area / aspect))``
    (half to even, Python's ``round``), top and left uniform over the valid
    positions -- timm's arithmetic, with the sample's own draws. The box is
    filled by ``mode``: ``"const"`` zeros, ``"rand"`` one standard-normal value
    per channel, ``"pixel"`` one per pixel and channel (DeiT's); timm erases
    normalised images, so zero is the mean colour and the noise is in units
    of the channel's standard deviation. Later boxes overwrite earlier ones.

    The draws are :func:`tfdp.random.per_sample_uniform` numbers (``2 + 44 *
    max_count`` per sample; four of each box's seed its noise,
    ``tf.random.stateless_normal`` of the box's size). Written here rather
    than reusing ``keras.layers.RandomErasing``, whose boxes (a scale per side,
    no aspect ratio, no count) and fill differ from timm's.

    Args:
        probability: Probability that a sample is erased.
        min_area: Minimum fraction of the image area erased (split over the boxes).
        max_area: Maximum fraction.
        min_aspect: Minimum aspect ratio (height / width) of a box.
        max_aspect: Maximum aspect ratio (default ``1 / min_aspect``).
        mode: ``"const"``, ``"rand"`` or ``"pixel"``.
        min_count: Minimum number of boxes.
        max_count: Maximum number of boxes (default ``min_count``).
        num_splits: 0 or 1 (timm's AugMix splits; see :class:`~tfdp.augment.spec.ErasingSpec`).
        image_key: Key of the images when the example is a dict.

    Example:
        >>> RandomErasing(0.25, mode="pixel", max_count=3).draw_count()
        134
    """

    def __init__(
        self,
        probability: float = 0.5,
        min_area: float = 0.02,
        max_area: float = 1 / 3,
        min_aspect: float = 0.3,
        max_aspect: float | None = None,
        mode: str = "const",
        min_count: int = 1,
        max_count: int | None = None,
        num_splits: int = 0,
        *,
        image_key: str = "image",
    ) -> None:
        super().__init__(image_key=image_key)
        self.spec = ErasingSpec(
            probability, min_area, max_area, min_aspect, max_aspect, mode, min_count, max_count,
            num_splits,
        )  # fmt: skip

    def draw_count(self) -> int:
        """``2 + 44 * max_count`` uniforms: apply, count, and each box's attempts and noise seed."""
        return 2 + _PER_BOX * int(self.spec.max_count)

    def boxes(self, params: tf.Tensor, height: tf.Tensor, width: tf.Tensor) -> tf.Tensor:
        """Each sample's boxes, int32 ``[B, max_count, 4]`` ``(top, left, h, w)``; ``h = 0``: none.

        A box is empty when the sample is not erased, beyond its count, or
        when no attempt fits.

        Example:
            >>> import tensorflow as tf
            >>> erase = RandomErasing(1.0, min_area=0.25, max_area=0.25, min_aspect=1.0)
            >>> erase.boxes(erase.draw(tf.constant([[0, 3]], tf.int64)), 8, 8)[0, 0, 2:].numpy()
            array([4, 4], dtype=int32)
        """
        spec = self.spec
        n = int(spec.max_count)
        h_f, w_f = tf.cast(height, tf.float64), tf.cast(width, tf.float64)
        u = tf.cast(params, tf.float64)
        erased = u[:, 0] < spec.probability  # timm: skipped if random() > probability
        span = n - spec.min_count + 1
        count = spec.min_count + tf.minimum(tf.floor(u[:, 1] * span), span - 1)  # randint
        log_lo, log_hi = math.log(spec.min_aspect), math.log(spec.max_aspect)
        out = []
        for k in range(n):
            block = u[:, 2 + _PER_BOX * k : 2 + _PER_BOX * k + 4 * _ATTEMPTS]
            tries = tf.reshape(block, [-1, _ATTEMPTS, 4])
            area = spec.min_area + (spec.max_area - spec.min_area) * tries[..., 0]
            area = area * (h_f * w_f) / count[:, tf.newaxis]
            aspect = tf.exp(log_lo + (log_hi - log_lo) * tries[..., 1])
            h = tf.round(tf.sqrt(area * aspect))  # half to even, as Python's round
            w = tf.round(tf.sqrt(area / aspect))
            fits = (w < w_f) & (h < h_f)
            first = tf.argmax(tf.cast(fits, tf.int32), axis=1, output_type=tf.int32)
            pick = tf.stack([tries[..., 2], tries[..., 3], h, w], axis=-1)  # [B, attempts, 4]
            top_u, left_u, h, w = tf.unstack(tf.gather(pick, first, batch_dims=1), axis=1)
            top = tf.minimum(tf.floor(top_u * (h_f - h + 1)), h_f - h)  # randint(0, H - h)
            left = tf.minimum(tf.floor(left_u * (w_f - w + 1)), w_f - w)
            used = erased & (k < count) & tf.reduce_any(fits, axis=1)
            box = tf.cast(tf.stack([top, left, h, w], axis=1), tf.int32)
            out.append(tf.where(used[:, tf.newaxis], box, tf.zeros_like(box)))
        return tf.stack(out, axis=1)

    def apply(self, images: tf.Tensor, params: tf.Tensor) -> tf.Tensor:
        """The batch with each sample's boxes erased (float32)."""
        return each_sample(self._one, images, params)

    def _noise_seed(self, params: tf.Tensor, k: int) -> tf.Tensor:
        """Box ``k``'s ``stateless_normal`` seed: 96 bits of its four uniforms (24 bits each)."""
        start = 2 + _PER_BOX * k + 4 * _ATTEMPTS
        bits = tf.cast(params[0, start : start + 4] * 2.0**24, tf.int64)
        return tf.stack([bits[0] + bits[1] * 2**24, bits[2] + bits[3] * 2**24])

    def _one(self, image: tf.Tensor, params: tf.Tensor) -> tf.Tensor:
        shape = tf.shape(image)
        boxes = self.boxes(params, shape[1], shape[2])[0]
        for k in range(int(self.spec.max_count)):
            image = tf.cond(
                boxes[k, 2] > 0,
                lambda image=image, k=k: self._erase(image, params, k, boxes[k]),
                lambda image=image: image,
            )
        return image

    def _erase(self, image: tf.Tensor, params: tf.Tensor, k: int, box: tf.Tensor) -> tf.Tensor:
        """Box ``k`` of one sample filled as ``mode`` says.

        The box's fill is pasted between the image's own pixels (slices joined by
        ``tf.concat``: copies, the values of masking it in with ``tf.where``, whose
        broadcast of a ``[1, H, W, 1]`` mask cost 6x more).
        """
        channels = tf.shape(image)[3]
        top, left, h, w = tf.unstack(box)
        size = tf.stack([h, w, channels])
        if self.spec.mode == "const":
            fill = tf.zeros(size, image.dtype)
        elif self.spec.mode == "rand":
            noise = tf.random.stateless_normal([channels], self._noise_seed(params, k))
            fill = tf.broadcast_to(noise, size)
        else:
            fill = tf.random.stateless_normal(size, self._noise_seed(params, k))
        rows = image[:, top : top + h]
        middle = tf.concat([rows[:, :, :left], fill[tf.newaxis], rows[:, :, left + w :]], axis=2)
        out = tf.concat([image[:, :top], middle, image[:, top + h :]], axis=1)
        out.set_shape(image.shape)
        return out
