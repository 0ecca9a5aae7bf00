"""One sample at a time: how the stages whose samples take different ops run on a batch.

RandAugment gives each sample 2 of 15 ops, ColorJitter its own order of
adjustments, RandomErasing its own box: computing every branch for every
sample and selecting would cost up to 15 times the work. These stages write
their work for a batch of one, where only the drawn branch runs
(``tf.switch_case`` / ``tf.cond``); :func:`each_sample` calls it directly for
a batch of one -- what the window path's per-image stages and the per-example
path hand them -- and through ``tf.map_fn`` over the samples otherwise, so
every path computes a sample with the same ops: bit-identical results.

:func:`compiled` compiles such a unit with XLA: a chain of elementwise ops
and gathers over an image runs as one loop instead of a kernel (and a pass
over memory) per op -- RandAugment's bicubic rotation took 20 ms per 224x224
image op by op and 5 ms compiled, its shears 6 ms and 1 ms (one thread). XLA
compiles once per image shape (at its first use in a process) and the same
compiled code serves every path, so the paths still agree bit for bit.

Example:
    >>> import tensorflow as tf
    >>> double = lambda images, params: images * params[:, :1, tf.newaxis, tf.newaxis]
    >>> each_sample(double, tf.ones([2, 1, 1, 1]), tf.constant([[2.0], [3.0]]))[:, 0, 0, 0].numpy()
    array([2., 3.], dtype=float32)
"""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf


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


def compiled(fn: Callable[..., tf.Tensor], jit_compile: bool = True) -> Callable[..., tf.Tensor]:
    """``fn`` as a ``tf.function`` compiled with XLA (``jit_compile``), or ``fn`` itself.

    Traced without AutoGraph (tfdp's own graph code), generalising the image
    shape after a few (``reduce_retracing``).

    Example:
        >>> import tensorflow as tf
        >>> double = compiled(lambda x: x * 2.0)
        >>> float(double(tf.constant(1.5)))
        3.0
    """
    if not jit_compile:
        return fn
    return traced_per_image_kind(fn, jit_compile=True)


def traced_per_image_kind(
    fn: Callable[..., tf.Tensor], **options: bool
) -> Callable[..., tf.Tensor]:
    """``fn`` as one ``tf.function`` per kind (rank, channels, dtype) of its first argument.

    Traced without AutoGraph, generalising the sizes that change between calls
    (``reduce_retracing``); the channel count stays known when the graph is
    built (colour ops need it), however many kinds one process sees.

    Example:
        >>> import tensorflow as tf
        >>> channels = traced_per_image_kind(lambda x: tf.constant(x.shape[-1]))
        >>> [int(channels(tf.zeros([h, h, c]))) for h, c in ((2, 1), (3, 3), (4, 1), (5, 3))]
        [1, 3, 1, 3]
    """
    traced: dict[tuple, Callable[..., tf.Tensor]] = {}

    def call(image: tf.Tensor, *args: object) -> tf.Tensor:
        image = tf.convert_to_tensor(image)
        rank = image.shape.rank
        kind = (rank, image.shape[-1] if rank else None, image.dtype)
        if kind not in traced:
            traced[kind] = tf.function(fn, reduce_retracing=True, autograph=False, **options)
        return traced[kind](image, *args)

    return call
