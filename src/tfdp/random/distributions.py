"""Distributions from uniforms: what a stage makes of its counter-hash draws.

This module owns the transforms of uniform draws (:func:`tfdp.random.per_sample_uniform`
numbers, or any in ``[0, 1)``) into other distributions, each a pure function of
its uniforms, vectorised, in float64: :func:`normal` (Box-Muller: RandAugment's
magnitude noise) and :func:`beta` (through :func:`gamma`, Marsaglia and Tsang's
method with a fixed number of candidates: Mixup's and CutMix's lambda). A fixed
count of uniforms per draw keeps every draw a function of the sample's seed
alone, with the same bits in every process and on every run.

Example:
    >>> import tensorflow as tf
    >>> u = tf.random.stateless_uniform([4000, BETA_UNIFORMS], [1, 2], dtype=tf.float64)
    >>> lam = beta(u, 0.8)
    >>> round(float(tf.reduce_mean(lam)), 1), bool(tf.reduce_all((lam >= 0) & (lam <= 1)))
    (0.5, True)
"""

from __future__ import annotations

import math

import tensorflow as tf

from tfdp.errors import ConfigError

#: Candidates of :func:`gamma`: each is accepted with probability > 0.95, so all 16 fail
#: with probability < 1e-20 (then the last candidate is used: the draw stays finite).
GAMMA_CANDIDATES = 16
#: Uniforms one :func:`gamma` draw takes: 3 per candidate (a normal, the test) and one boost.
GAMMA_UNIFORMS = 3 * GAMMA_CANDIDATES + 1
#: Uniforms one :func:`beta` draw takes (two gamma draws).
BETA_UNIFORMS = 2 * GAMMA_UNIFORMS


def normal(u1: tf.Tensor, u2: tf.Tensor) -> tf.Tensor:
    """A standard normal from two uniforms in ``[0, 1)`` (Box-Muller), float64.

    Example:
        >>> import tensorflow as tf
        >>> float(normal(tf.constant(0.5), tf.constant(0.0)))  # sqrt(2 ln 2)
        1.1774100225154747
    """
    u1, u2 = tf.cast(u1, tf.float64), tf.cast(u2, tf.float64)
    return tf.sqrt(-2.0 * tf.math.log(1.0 - u1)) * tf.cos(2.0 * math.pi * u2)


def gamma(u: tf.Tensor, alpha: float) -> tf.Tensor:
    """Gamma(``alpha``, 1) draws from uniforms ``u`` ``[..., GAMMA_UNIFORMS]``: float64 ``[...]``.

    Marsaglia and Tsang's method (2000) on ``alpha + 1`` when ``alpha < 1``
    (then times ``U ** (1 / alpha)``): the first of :data:`GAMMA_CANDIDATES`
    candidates that passes the test.

    Example:
        >>> import tensorflow as tf
        >>> u = tf.random.stateless_uniform([20000, GAMMA_UNIFORMS], [3, 4], dtype=tf.float64)
        >>> round(float(tf.reduce_mean(gamma(u, 2.0))), 1)  # the mean is alpha
        2.0
    """
    if not alpha > 0:
        raise ConfigError(f"must be > 0, got {alpha!r}", argument="alpha")
    u = tf.cast(u, tf.float64)
    shape = float(alpha) + 1.0 if alpha < 1 else float(alpha)
    d = shape - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * d)
    n = GAMMA_CANDIDATES
    x = normal(u[..., 0:n], u[..., n : 2 * n])
    v = (1.0 + c * x) ** 3
    test = tf.math.log(1.0 - u[..., 2 * n : 3 * n])  # log of a uniform in (0, 1]
    safe_v = tf.where(v > 0, v, 1.0)
    accept = (v > 0) & (test < 0.5 * x * x + d - d * safe_v + d * tf.math.log(safe_v))
    first = tf.argmax(tf.cast(accept, tf.int32), axis=-1, output_type=tf.int32)
    first = tf.where(tf.reduce_any(accept, axis=-1), first, n - 1)
    value = d * tf.gather(safe_v, first[..., tf.newaxis], batch_dims=first.shape.rank)[..., 0]
    if alpha < 1:
        value = value * (1.0 - u[..., 3 * n]) ** (1.0 / alpha)
    return value


def beta(u: tf.Tensor, alpha: float) -> tf.Tensor:
    """Beta(``alpha``, ``alpha``) draws from uniforms ``u`` ``[..., BETA_UNIFORMS]``: float64.

    ``X / (X + Y)`` of two :func:`gamma` draws (numpy's ``beta`` draws the
    same distribution).

    Example:
        >>> import tensorflow as tf
        >>> u = tf.random.stateless_uniform([2, BETA_UNIFORMS], [5, 6], dtype=tf.float64)
        >>> beta(u, 1.0).shape
        TensorShape([2])
    """
    x = gamma(u[..., :GAMMA_UNIFORMS], alpha)
    y = gamma(u[..., GAMMA_UNIFORMS:BETA_UNIFORMS], alpha)
    total = x + y
    return tf.where(total > 0, x / tf.where(total > 0, total, 1.0), 0.5)
