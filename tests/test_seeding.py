"""tfdp.seeding: every derivation pinned to the values tfdp produced before it was gathered here.

The pinned numbers were computed with the code as it stood before issue 11 (tags in
indices.py, the XOR in input.py, "STRE" in sources/tfrecord.py, salts in augment.py): a
change of any of them changes every run's data order, which must never happen by accident.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import pytest

from tfdp import indices, seeding

SRC = Path(__file__).resolve().parents[1] / "src" / "tfdp"


def test_tags_spell_their_names():
    assert seeding.TAG_SHUFFLE.to_bytes(4, "big") == b"SHUF"
    assert seeding.TAG_PADDING.to_bytes(4, "big") == b"PADD"
    assert seeding.TAG_STREAM.to_bytes(4, "big") == b"STRE"


def test_round_keys_and_keyed_permutations_are_unchanged():
    assert seeding.round_keys(123, 4, 3) == [
        18267852896464481267,
        2460714581915287155,
        12277219163210178660,
    ]
    assert seeding.round_keys(2**64 - 1, 2**63 - 1, 2, 32) == [1400889100, 3721830488]
    assert indices.KeyedPermutation(10, 3, 1)(np.arange(10)).tolist() == [
        3, 6, 4, 9, 5, 2, 0, 1, 7, 8,
    ]  # fmt: skip
    assert indices.KeyedPermutation(10**6, 3, 1)(np.arange(5)).tolist() == [
        366351, 250540, 652561, 557441, 743402,
    ]  # fmt: skip
    assert indices.KeyedPermutation(2**40, 3, 1)(np.arange(3)).tolist() == [
        586960404443, 65625887657, 228561384333,
    ]  # fmt: skip


def test_padding_stream_and_augmentation_keys_are_unchanged():
    assert indices.random_padding_ids(1000, 5, 2**40 + 3, 7).tolist() == [194, 38, 919, 783, 414]
    assert [
        seeding.stream_block_key(s, e, lane)
        for s, e, lane in [(0, 0, 0), (5, 2, 1), (2**64 - 1, 9, 3)]
    ] == [4434617411922125597, 6773522850122451152, 7753762527236427559]
    assert [seeding.epoch_seed_key(s, e) for s, e in [(0, 0), (0, 1), (7, 3), (2**64 - 1, 5)]] == [
        6384687961713405294,
        5859938726433500798,
        3572505409317239105,
        8997039992899521417,
    ]


def _fmix32_reference(h: int) -> int:
    """MurmurHash3's fmix32, transcribed from the reference C (smhasher) on Python ints."""
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & 0xFFFFFFFF
    h ^= h >> 16
    return h


def _fmix64_reference(k: int) -> int:
    mask = 2**64 - 1
    k ^= k >> 33
    k = (k * 0xFF51AFD7ED558CCD) & mask
    k ^= k >> 33
    k = (k * 0xC4CEB9FE1A85EC53) & mask
    k ^= k >> 33
    return k


def test_finalisers_match_the_reference_transcription():
    values = np.random.default_rng(0).integers(0, 2**32, 200, dtype=np.uint64)
    got32 = seeding.fmix32(values.astype(np.uint32)).tolist()
    assert got32 == [_fmix32_reference(int(v)) for v in values]
    wide = np.random.default_rng(1).integers(0, 2**63, 200, dtype=np.uint64) * np.uint64(2)
    assert seeding.fmix64(wide.copy()).tolist() == [_fmix64_reference(int(v)) for v in wide]
    assert seeding.fmix32(np.array([0, 1, 2**32 - 1], np.uint32)).tolist() == [
        0, 1364076727, 2180083513,
    ]  # fmt: skip


def test_augmentation_hash_is_unchanged():
    tf = pytest.importorskip("tensorflow")
    from tfdp import augment

    seeds = tf.constant([[0, 0], [7, 3], [-1, 2**40]], tf.int64)
    u = augment.per_sample_uniform(seeds, 2).numpy() * 2**24
    assert u.astype(np.int64).tolist() == UNIFORM_PINNED
    assert augment.fold_in(seeds, 3).numpy()[:, 0].tolist() == FOLD_PINNED


# Computed with augment.py as it stood before issue 11.
UNIFORM_PINNED = [[5818233, 15855419], [6863618, 15917180], [12433071, 12933157]]
FOLD_PINNED = [5421654109727578825, 5290302363569761220, 3373183268183792345]


def _int_literals(path: Path) -> list[int]:
    return [
        node.value
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and node.value > 2**24
    ]


def test_every_tag_is_defined_in_seeding_only():
    tags = {
        seeding.TAG_SHUFFLE,
        seeding.TAG_PADDING,
        seeding.TAG_STREAM,
        seeding.AUGMENT_KEY_XOR,
        seeding.MURMUR_SALT_UNIFORM,
        seeding.MURMUR_SALT_FOLD,
        seeding.FMIX32_C1,
        seeding.FMIX32_C2,
        seeding.MURMUR_C1,
        seeding.MURMUR_C2,
    }
    owners = [
        SRC / "indices.py",
        SRC / "input.py",
        *(SRC / "augment").rglob("*.py"),
        *(SRC / "random").rglob("*.py"),
        *(SRC / "windows").rglob("*.py"),
        *(SRC / "sources").rglob("*.py"),
    ]
    found = {str(p.relative_to(SRC)): sorted(tags & set(_int_literals(p))) for p in owners}
    assert {k: v for k, v in found.items() if v} == {}
    fmix = [p for p in SRC.rglob("*.py") if re.search(r"def _?fmix32\b", p.read_text())]
    assert [p.name for p in fmix] == ["seeding.py"]
