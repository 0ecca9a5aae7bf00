"""The counter hash behind every augmentation draw, defined once for TensorFlow and NumPy.

This module owns MurmurHash3_x86_32 of five 32-bit words ``(seed[0] lo, hi,
seed[1] lo, hi, counter)`` -- vectorised, broadcasting the counters over the
seeds -- and the two things tfdp makes of it: :func:`uniforms` (24-bit
uniforms, :func:`tfdp.random.per_sample_uniform`) and :func:`fold_many`
(derived seeds, :func:`tfdp.random.fold_in`). Each function is written once
against an :class:`tfdp._arrays.ArrayOps` and runs in TensorFlow
(``xp=TENSORFLOW``: the graph) or NumPy (``xp=NUMPY``: the window path's host
draws) with the same bits; ``tests/test_random.py`` checks the two against
each other and against a plain-Python transcription of MurmurHash3.
The constants and salts are :mod:`tfdp.seeding`'s (the table of every seed
derivation).

Example:
    >>> from tfdp._arrays import NUMPY, TENSORFLOW
    >>> seeds = [[7, 0], [7, 1]]
    >>> host = uniforms(NUMPY.const(seeds, NUMPY.int64), 3, NUMPY)
    >>> graph = uniforms(TENSORFLOW.const(seeds, TENSORFLOW.int64), 3, TENSORFLOW)
    >>> bool((host == graph.numpy()).all()), host.shape
    (True, (2, 3))
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tfdp._arrays import ArrayOps
from tfdp.seeding import (
    FMIX32_C1,
    FMIX32_C2,
    MURMUR_C1,
    MURMUR_C2,
    MURMUR_N,
    MURMUR_SALT_FOLD,
    MURMUR_SALT_UNIFORM,
)

_HASH_BYTES = 20  # five 32-bit words
#: The largest stream index :func:`fold_many` takes (its counters ``2d``, ``2d + 1`` are uint32).
MAX_FOLD_DATA = 2**31 - 1


class _Murmur:
    """MurmurHash3_x86_32's steps, its constants made once per hash (a graph gets ~20 nodes)."""

    def __init__(self, xp: ArrayOps) -> None:
        def u32(value: int) -> Any:
            return xp.const(value, xp.uint32)

        self.xp = xp
        self.c1, self.c2 = u32(MURMUR_C1), u32(MURMUR_C2)
        self.five, self.n = u32(5), u32(MURMUR_N)
        self.f1, self.f2 = u32(FMIX32_C1), u32(FMIX32_C2)
        self.shift = {r: u32(r) for r in (8, 13, 15, 16, 17, 19)}

    def rotl(self, x: Any, r: int) -> Any:
        return self.xp.shl(x, self.shift[r]) | self.xp.shr(x, self.shift[32 - r])

    def xorshift(self, x: Any, r: int) -> Any:
        return x ^ self.xp.shr(x, self.shift[r])

    def mix(self, h: Any, k: Any) -> Any:
        k = self.rotl(k * self.c1, 15) * self.c2
        h = self.rotl(h ^ k, 13)
        return h * self.five + self.n

    def finalise(self, h: Any) -> Any:
        """MurmurHash3's 32-bit finaliser (:func:`tfdp.seeding.fmix32`, not in place)."""
        h = self.xorshift(h, 16) * self.f1
        h = self.xorshift(h, 13) * self.f2
        return self.xorshift(h, 16)


def hash_u32(seeds: Any, counters: Any, salt: int, xp: ArrayOps) -> Any:
    """MurmurHash3 (seed ``salt``) of ``(seeds[..., 0] lo, hi, seeds[..., 1] lo, hi, counter)``.

    ``seeds`` is int64 ``[..., 2]``; ``counters`` is uint32, broadcastable
    against ``[..., 1]``. The seed words are mixed once per seed, then the
    counters are mixed in with broadcasting. Returns uint32.

    Example:
        >>> from tfdp._arrays import NUMPY
        >>> seeds = NUMPY.const([[0, 0]], NUMPY.int64)
        >>> hash_u32(seeds, NUMPY.counters(2), 1, NUMPY).shape
        (1, 2)
    """
    m = _Murmur(xp)
    # int64 -> uint32 casts are modular, so these are the two's-complement words.
    lo = xp.cast(seeds, xp.uint32)
    hi = xp.cast(xp.shr(seeds, xp.const(32, xp.int64)), xp.uint32)
    h = xp.fill_like(seeds[..., :1], salt, xp.uint32)
    for word in (lo[..., :1], hi[..., :1], lo[..., 1:], hi[..., 1:]):
        h = m.mix(h, word)
    h = m.mix(h, counters)
    return m.finalise(h ^ xp.const(_HASH_BYTES, xp.uint32))


def uniforms(seeds: Any, n: int, xp: ArrayOps) -> Any:
    """``n`` uniforms in ``[0, 1)`` per seed of int64 ``seeds`` ``[..., 2]``: float32 ``[..., n]``.

    The top 24 bits of :func:`hash_u32` of counter ``j`` (salt
    ``MURMUR_SALT_UNIFORM``), scaled by ``2**-24``: exact in float32.

    Example:
        >>> from tfdp._arrays import NUMPY
        >>> u = uniforms(NUMPY.const([[3, 4]], NUMPY.int64), 2, NUMPY)
        >>> u.dtype.name, bool(((u >= 0) & (u < 1)).all())
        ('float32', True)
    """
    bits = hash_u32(seeds, xp.counters(n), MURMUR_SALT_UNIFORM, xp)
    bits = xp.shr(bits, xp.const(8, xp.uint32))  # 24 bits: exact in float32
    return xp.cast(bits, xp.float32) * xp.const(1.0 / (1 << 24), xp.float32)


def fold_many(seeds: Any, datas: Sequence[int], xp: ArrayOps) -> Any:
    """``fold_in(seeds, d)`` for every ``d`` of ``datas`` at once: int64 ``[B, len(datas), 2]``.

    Seed ``[k, p]`` becomes ``[k', p]``: ``k'`` is 63 bits of two hashes
    (salt ``MURMUR_SALT_FOLD``, counters ``2d`` and ``2d + 1``).

    Example:
        >>> from tfdp._arrays import NUMPY
        >>> folded = fold_many(NUMPY.const([[3, 0], [3, 1]], NUMPY.int64), [0, 5], NUMPY)
        >>> folded.shape, folded[:, :, 1].tolist()
        ((2, 2, 2), [[0, 0], [1, 1]])
    """
    counters = xp.const([c for d in datas for c in (2 * d, 2 * d + 1)], xp.uint32)
    words = hash_u32(seeds, counters, MURMUR_SALT_FOLD, xp)
    words = xp.reshape(xp.cast(words, xp.int64), [-1, len(datas), 2])  # each < 2**32
    high = xp.shl(words[..., 1] & xp.const(0x7FFFFFFF, xp.int64), xp.const(32, xp.int64))
    keys = high | words[..., 0]
    positions = xp.broadcast_like(seeds[:, 1:], keys)
    return xp.stack([keys, positions], axis=-1)
