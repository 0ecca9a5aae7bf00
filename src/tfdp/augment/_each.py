"""One sample at a time: how the stages whose samples take different ops run on a batch.

RandAugment gives each sample 2 of 15 ops, ColorJitter its own order of
adjustments, RandomErasing its own box: computing every branch for every
sample and selecting would cost up to 15 times the work. These stages write
their work for a batch of one, where only the drawn branch runs
(``tf.switch_case`` / ``tf.cond``); :func:`each_sample` calls it directly for
a batch of one -- what the window path's per-image stages and the per-example
path hand them -- and through ``tf.map_fn`` over the samples otherwise, so
every path computes a sample with the same ops: bit-identical results.

Example:
    >>> import tensorflow as tf
    >>> double = lambda images, params: images * params[:, :1, tf.newaxis, tf.newaxis]
    >>> each_sample(double, tf.ones([2, 1, 1, 1]), tf.constant([[2.0], [3.0]]))[:, 0, 0, 0].numpy()
    array([2., 3.], dtype=float32)
"""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf

__all__ = ["each_sample"]


def each_sample(
    fn: Callable[[tf.Tensor, tf.Tensor], tf.Tensor], images: tf.Tensor, params: tf.Tensor
) -> tf.Tensor:
    """``fn(images[b:b+1], params[b:b+1])`` for every sample ``b``, stacked (float32, same shape).

    ``fn`` takes a batch of one and returns float32 of the image's shape.
    """
    images = tf.cast(images, tf.float32)
    if images.shape[0] == 1:
        return fn(images, params)

    def one(args: tuple[tf.Tensor, tf.Tensor]) -> tf.Tensor:
        image, p = args
        return fn(image[tf.newaxis], p[tf.newaxis])[0]

    spec = tf.TensorSpec(images.shape[1:], tf.float32)
    return tf.map_fn(one, (images, params), fn_output_signature=spec)
