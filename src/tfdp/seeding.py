r"""Every seed tfdp derives, in one place: the tags, the derivations and the hash finalisers.

tfdp's central promise is that a run is a function of its seed: the same
``(seed, epoch)`` gives every process the same permutation, padding, stream
order and augmentations, and a run resumed mid-epoch continues exactly. This
module owns the derivations behind that promise; the modules that use them
(:mod:`tfdp.indices`, :mod:`tfdp.input`, :mod:`tfdp.sources.tfrecord`,
:mod:`tfdp.augment`) import them from here. Pure Python and NumPy: it loads no
TensorFlow. Changing any value here changes every run's data order: the
samplers are pinned against PyTorch's and timm's, and the tests pin the rest.

Domain-separation tags keep the random streams of one ``(seed, epoch)`` apart:

======================  ============  ==============================================================
name                    value         what it keys
======================  ============  ==============================================================
``TAG_SHUFFLE``         ``"SHUF"``    :func:`round_keys` (seed absorbed as ``seed ^ TAG_SHUFFLE``):
                        0x53485546    the sampler's epoch permutation
                                      (:class:`tfdp.indices.KeyedPermutation`: Feistel round keys,
                                      or the Philox key of the small-``n`` shuffle) and the
                                      TFRecord stream's file permutation (the same permutation of
                                      ``range(files)``)
``TAG_PADDING``         ``"PADD"``    :func:`padding_seed_sequence`: ``SeedSequence([seed lo, seed
                        0x50414444    hi, epoch, TAG_PADDING])`` -> Philox, the draws of
                                      ``padding="random"``
``TAG_STREAM``          ``"STRE"``    :func:`stream_block_key`: ``SeedSequence([seed, epoch, lane,
                        0x53545245    TAG_STREAM])``, 63 bits: a TFRecord lane's block shuffle
                                      (``stateless_shuffle`` seed ``[key, block]``)
``AUGMENT_KEY_XOR``     0xA5A5A5A5    :func:`epoch_seed_key`: ``round_keys(seed ^ AUGMENT_KEY_XOR,
                                      epoch, 1)[0] >> 1``, the first word of every augmentation
                                      seed ``[key, position]`` (``position``: the entry's place in
                                      the sampler's padded global list)
``MURMUR_SALT_UNIFORM`` 0x9E3779B9    MurmurHash3 seed of :func:`tfdp.augment.per_sample_uniform`
                                      (a sample's ``j``-th draw: hash of ``(seed words, j)``)
``MURMUR_SALT_FOLD``    0x7F4A7C15    MurmurHash3 seed of :func:`tfdp.augment.fold_in`
                                      (``Compose`` stage ``i`` gets ``fold_in(seeds, i)``)
``TAG_MIX``             ``"MIXB"``    ``fold_in(seeds, TAG_MIX)`` of a batch's first seed (or each
                        0x4D495842    sample's): the draws of :class:`tfdp.augment.Mixup` (lambda,
                                      Mixup or CutMix, the box) for that replica's batch
``FOLDER_SPLIT_TAG``    0x5EEDF01D    ``default_rng([seed, FOLDER_SPLIT_TAG])``: the held-out split
                                      of an image folder (the main job's ``held_out`` option)
``TAG_DROP_PATH``       ``"DROP"``    :func:`drop_path_key`: ``round_keys(seed ^ TAG_DROP_PATH,
                        0x44524F50    layer, 1)[0] >> 1``, the key of stochastic depth's ``layer``
                                      (:class:`tfdp.models.DropPath`: a row's draw is the
                                      uniform of ``[key, position]``, ``position`` packing the
                                      forward call, the replica and the row)
======================  ============  ==============================================================

Derivations: :func:`splitmix64` (SplitMix64 step), :func:`round_keys`
(seed, then epoch absorbed, keys squeezed out), :func:`fmix32` /
:func:`fmix64` (MurmurHash3's finalisers, the Feistel round function; the
TensorFlow MurmurHash3 of :mod:`tfdp.augment` uses the same
``FMIX32_C1``/``FMIX32_C2`` and ``MURMUR_C1``/``MURMUR_C2``/``MURMUR_N``).

Example:
    >>> round_keys(0, 0, 1) == round_keys(0, 0, 1) != round_keys(0, 1, 1)
    True
    >>> epoch_seed_key(0, 1) < 2**63
    True
    >>> hex(TAG_SHUFFLE), TAG_SHUFFLE.to_bytes(4, "big")
    ('0x53485546', b'SHUF')
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "AUGMENT_KEY_XOR",
    "FMIX32_C1",
    "FMIX32_C2",
    "FOLDER_SPLIT_TAG",
    "MASK64",
    "MURMUR_C1",
    "MURMUR_C2",
    "MURMUR_N",
    "MURMUR_SALT_FOLD",
    "MURMUR_SALT_UNIFORM",
    "TAG_DROP_PATH",
    "TAG_MIX",
    "TAG_PADDING",
    "TAG_SHUFFLE",
    "TAG_STREAM",
    "drop_path_key",
    "epoch_seed_key",
    "fmix32",
    "fmix64",
    "padding_seed_sequence",
    "round_keys",
    "split_seed",
    "splitmix64",
    "stream_block_key",
]

MASK64 = 2**64 - 1

#: "SHUF": the epoch permutation's round keys (samplers, TFRecord file order).
TAG_SHUFFLE = 0x5348_5546
#: "PADD": the draws of ``padding="random"``.
TAG_PADDING = 0x5041_4444
#: "STRE": a TFRecord lane's block-shuffle key.
TAG_STREAM = 0x5354_5245
#: "MIXB": folded into a replica batch's seed for Mixup / CutMix (a stream of its own).
TAG_MIX = 0x4D49_5842
#: XORed into the seed before :func:`round_keys` for the augmentation key of an epoch.
AUGMENT_KEY_XOR = 0xA5A5_A5A5
#: MurmurHash3 seeds separating the augmentation hash's two uses.
MURMUR_SALT_UNIFORM = 0x9E37_79B9
MURMUR_SALT_FOLD = 0x7F4A_7C15
#: With ``seed`` the key of ``numpy.random.default_rng`` for an image folder's held-out split.
FOLDER_SPLIT_TAG = 0x5EED_F01D
#: "DROP": XORed into the seed for stochastic depth's per-layer keys (:func:`drop_path_key`).
TAG_DROP_PATH = 0x4452_4F50

#: MurmurHash3_x86_32's block constants and its finaliser's multipliers.
MURMUR_C1 = 0xCC9E_2D51
MURMUR_C2 = 0x1B87_3593
MURMUR_N = 0xE654_6B64
FMIX32_C1 = 0x85EB_CA6B
FMIX32_C2 = 0xC2B2_AE35
#: MurmurHash3's 64-bit finaliser multipliers.
FMIX64_C1 = 0xFF51_AFD7_ED55_8CCD
FMIX64_C2 = 0xC4CE_B9FE_1A85_EC53


def split_seed(seed: int) -> list[int]:
    """A 64-bit seed as its two 32-bit words, low first (``SeedSequence`` entropy).

    Example:
        >>> split_seed(2**32 + 5)
        [5, 1]
    """
    return [seed & 0xFFFF_FFFF, seed >> 32]


def splitmix64(state: int) -> tuple[int, int]:
    """One step of SplitMix64 on Python ints: ``(new_state, output)``.

    Example:
        >>> splitmix64(0)[1] == 0xE220A8397B1DCDAF
        True
    """
    state = (state + 0x9E37_79B9_7F4A_7C15) & MASK64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58_476D_1CE4_E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D0_49BB_1331_11EB) & MASK64
    return state, z ^ (z >> 31)


def round_keys(seed: int, epoch: int, count: int, bits: int = 64) -> list[int]:
    """``count`` round keys of ``bits`` bits derived from ``(seed, epoch)`` by SplitMix64.

    Cheap (microseconds) and identical on every platform. The seed is
    absorbed (as ``seed ^ TAG_SHUFFLE``), then the epoch, then the keys are
    squeezed out.

    Example:
        >>> round_keys(0, 0, 2) == round_keys(0, 0, 2), round_keys(0, 0, 1) != round_keys(0, 1, 1)
        (True, True)
    """
    state, out = splitmix64(seed ^ TAG_SHUFFLE)
    state, out = splitmix64(state ^ out ^ (epoch & MASK64))
    keys = []
    for _ in range(count):
        state, out = splitmix64(state ^ out)
        keys.append(out & ((1 << bits) - 1))
    return keys


def fmix32(v: np.ndarray) -> np.ndarray:
    """MurmurHash3's 32-bit finaliser, in place on a uint32 array (and returned).

    Example:
        >>> hex(int(fmix32(np.array([1], np.uint32))[0]))
        '0x514e28b7'
    """
    v ^= v >> np.uint32(16)
    v *= np.uint32(FMIX32_C1)
    v ^= v >> np.uint32(13)
    v *= np.uint32(FMIX32_C2)
    v ^= v >> np.uint32(16)
    return v


def fmix64(v: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finaliser, in place on a uint64 array (and returned).

    Example:
        >>> int(fmix64(np.array([0], np.uint64))[0])
        0
    """
    v ^= v >> np.uint64(33)
    v *= np.uint64(FMIX64_C1)
    v ^= v >> np.uint64(33)
    v *= np.uint64(FMIX64_C2)
    v ^= v >> np.uint64(33)
    return v


def padding_seed_sequence(seed: int, epoch: int) -> np.random.SeedSequence:
    """The ``SeedSequence`` behind the draws of ``padding="random"`` in ``epoch``.

    Example:
        >>> rng = np.random.Generator(np.random.Philox(padding_seed_sequence(0, 1)))
        >>> int(rng.integers(0, 10)) == int(
        ...     np.random.Generator(np.random.Philox(padding_seed_sequence(0, 1))).integers(0, 10))
        True
    """
    return np.random.SeedSequence([*split_seed(seed), epoch, TAG_PADDING])


def stream_block_key(seed: int, epoch: int, lane: int) -> int:
    """The 63-bit key of TFRecord lane ``lane``'s block shuffle in ``epoch``.

    Block ``k`` of the lane is shuffled by ``stateless_shuffle(seed=[key, k])``.

    Example:
        >>> stream_block_key(0, 0, 0) != stream_block_key(0, 0, 1) < 2**63
        True
    """
    ss = np.random.SeedSequence([seed, epoch, lane, TAG_STREAM])
    return int(ss.generate_state(1, np.uint64)[0] >> np.uint64(1))


def epoch_seed_key(seed: int, epoch: int) -> int:
    """The first half of every augmentation seed in ``epoch``: a 63-bit key of ``(seed, epoch)``.

    Example:
        >>> epoch_seed_key(0, 1) == epoch_seed_key(0, 1) != epoch_seed_key(0, 2)
        True
    """
    return round_keys(seed ^ AUGMENT_KEY_XOR, epoch, 1)[0] >> 1


def drop_path_key(seed: int, layer: int) -> int:
    """Stochastic depth's key for drop-path layer ``layer`` of a run seeded ``seed`` (63 bits).

    A model's drop-path layers are numbered in order (block ``i``'s attention
    branch ``2 i``, its MLP branch ``2 i + 1``); each draws, per training call,
    one uniform per row from ``[key, position]`` (:mod:`tfdp.models.drop_path`).

    Example:
        >>> drop_path_key(0, 3) == drop_path_key(0, 3) != drop_path_key(0, 4)
        True
        >>> drop_path_key(0, 0) != drop_path_key(1, 0) and drop_path_key(5, 1) < 2**63
        True
    """
    return round_keys(seed ^ TAG_DROP_PATH, layer, 1)[0] >> 1
