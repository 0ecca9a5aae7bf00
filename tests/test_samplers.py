"""Tests of the samplers in :mod:`tfdp.samplers`.

Correctness is checked against REFERENCE algorithms written below as plain,
list-based transcriptions of the published samplers (torch's
``DistributedSampler``, its make_even variant with seeded random padding,
DeiT's ``RASampler`` / timm's ``RepeatAugSampler``, and exact distributed
evaluation). They share no code with :mod:`tfdp.indices`: the sampler gets the
epoch's permutation through ``permutation=`` and the reference the same list.
The one call into tfdp a reference makes is :func:`tfdp.indices.random_padding_ids`,
the seeded draw that *defines* ``padding="random"``.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tfdp import DistributedEvalSampler, DistributedSampler, RepeatAugSampler
from tfdp.indices import MAX_SEED, KeyedPermutation, random_padding_ids

_VENV_PYTHON = Path(__file__).resolve().parents[1] / ".venv" / "bin" / "python"
PYTHON = str(_VENV_PYTHON) if _VENV_PYTHON.exists() else sys.executable

PADDINGS = ["wrap", "random", None]
REPEATS = [1, 1.5, 2, 3, 4]
ROUNDS = [0, 1, 7, 256]
RATIOS = [None, 1, 2, 3, 8, 0.5, 1.5, 2.5, 7.3]

# Mostly small data sets (where padding wraps several times or is drawn at random) and some large.
sizes = st.one_of(st.integers(1, 80), st.integers(1, 5000))
replicas = st.integers(1, 64)
epochs = st.integers(0, 2**40)
seeds = st.integers(0, MAX_SEED)


# == references ===================================================================================


def ref_torch_distributed(perm, n, w, rank, drop_last):
    """torch.utils.data.DistributedSampler: __init__ sizes and __iter__, with lists."""
    num_samples = math.ceil((n - w) / w) if drop_last and n % w != 0 else math.ceil(n / w)
    total_size = num_samples * w
    indices = list(perm)
    if not drop_last:
        padding_size = total_size - len(indices)
        if padding_size <= len(indices):
            indices += indices[:padding_size]
        else:
            indices += (indices * math.ceil(padding_size / len(indices)))[:padding_size]
    else:
        indices = indices[:total_size]
    assert len(indices) == total_size
    out = indices[rank:total_size:w]
    assert len(out) == num_samples
    return out


def ref_random_padding(perm, n, w, rank, seed, epoch):
    """make_even with seeded random extras: wrap the head if short by < n, else draw extras."""
    num_samples = math.ceil(n / w)
    total_size = num_samples * w
    indices = list(perm)
    shortfall = total_size - n
    if shortfall < n:
        indices += indices[:shortfall]
    else:
        extra_ids = random_padding_ids(n, shortfall, seed, epoch).tolist()
        indices += [indices[i] for i in extra_ids]
    assert len(indices) == total_size
    return indices[rank:total_size:w]


def ref_no_padding(perm, n, w, rank):
    """make_even=False: no padding, ranks uneven by at most one."""
    return list(perm)[rank:n:w]


def ref_repeat_aug(perm, n, w, rank, repeats, selected_round, selected_ratio):
    """DeiT's RASampler / timm's RepeatAugSampler (with non-integer repeats), with lists."""
    num_samples = math.ceil(n * repeats / w)
    total_size = num_samples * w
    perm = list(perm)
    if float(repeats).is_integer():
        indices = [x for x in perm for _ in range(int(repeats))]
    else:
        indices = [perm[int(i // repeats)] for i in range(math.ceil(repeats * n))]
    padding_size = total_size - len(indices)
    if padding_size > 0:
        indices += (indices * math.ceil(padding_size / len(indices)))[:padding_size]
    assert len(indices) == total_size
    indices = indices[rank:total_size:w]
    assert len(indices) == num_samples
    ratio = selected_ratio or w
    if selected_round:
        num_selected = math.floor(n // selected_round * selected_round / ratio)
    else:
        num_selected = math.ceil(n / ratio)
    return indices[:num_selected]


def ref_eval(perm, n, w, rank, multiple_of):
    """Exact distributed evaluation: wrap-padded so every rank has the same multiple of m."""
    per_rank = math.ceil(math.ceil(n / w) / multiple_of) * multiple_of
    total_size = per_rank * w
    indices = list(perm)
    indices = (indices * math.ceil(total_size / n))[:total_size]
    is_real = [p < n for p in range(total_size)]
    return indices[rank:total_size:w], is_real[rank:total_size:w]


def make_perm(n, key, epoch):
    """The test's own per-epoch permutation (numpy's generator, unrelated to tfdp's shuffle)."""
    return np.random.default_rng([key, epoch]).permutation(n)


class RecordingPermutation:
    """An ``epoch -> permutation`` callable that remembers the epochs it was asked for."""

    def __init__(self, n, key):
        self.n, self.key, self.calls = n, key, []

    def __call__(self, epoch):
        self.calls.append(epoch)
        return make_perm(self.n, self.key, epoch)


def _check_sampler_output(s, expected, rank, w):
    assert len(s) == len(expected)  # before anything was computed
    got = s.indices()
    assert got.dtype == np.int64
    assert got.ndim == 1
    assert got.tolist() == expected
    assert list(s) == expected
    assert s.positions().tolist() == [rank + k * w for k in range(len(expected))]


# == correctness against the references ===========================================================


@settings(max_examples=300, deadline=None)
@given(
    n=sizes,
    w=replicas,
    data=st.data(),
    epoch=epochs,
    seed=seeds,
    drop_last=st.booleans(),
    padding=st.sampled_from(PADDINGS),
    key=st.integers(0, 2**32 - 1),
    shuffle=st.booleans(),
)
@example(
    n=3, w=64, data=None, epoch=5, seed=9, drop_last=False, padding="random", key=1, shuffle=True
).via("random extras, shortfall far above n")
@example(
    n=1, w=64, data=None, epoch=0, seed=0, drop_last=False, padding="wrap", key=1, shuffle=True
).via("one sample wrapped 63 times")
@example(
    n=5, w=10, data=None, epoch=1, seed=3, drop_last=False, padding="random", key=2, shuffle=True
).via("random padding, shortfall exactly n: extras, not the head")
@example(
    n=4, w=7, data=None, epoch=1, seed=3, drop_last=False, padding="random", key=2, shuffle=True
).via("random padding, shortfall n - 1: the head")
def test_distributed_sampler_matches_reference(
    n, w, data, epoch, seed, drop_last, padding, key, shuffle
):
    rank = data.draw(st.integers(0, w - 1)) if data is not None else w - 1
    recorder = RecordingPermutation(n, key) if shuffle else None
    kwargs = dict(
        shuffle=shuffle, seed=seed, drop_last=drop_last, padding=padding, permutation=recorder
    )
    if drop_last and n < w:  # tfdp refuses what torch silently turns into empty epochs
        with pytest.raises(ValueError, match="drop_last"):
            DistributedSampler(n, w, rank, **kwargs)
        return
    s = DistributedSampler(n, w, rank, **kwargs)
    s.set_epoch(epoch)
    perm = make_perm(n, key, epoch).tolist() if shuffle else list(range(n))
    if drop_last or padding == "wrap":
        expected = ref_torch_distributed(perm, n, w, rank, drop_last)
    elif padding == "random":
        expected = ref_random_padding(perm, n, w, rank, seed, epoch)
    else:
        expected = ref_no_padding(perm, n, w, rank)
    _check_sampler_output(s, expected, rank, w)
    if recorder is not None:
        assert recorder.calls
        assert set(recorder.calls) == {epoch}


@settings(max_examples=300, deadline=None)
@given(
    n=sizes,
    w=replicas,
    data=st.data(),
    epoch=epochs,
    seed=seeds,
    repeats=st.sampled_from(REPEATS),
    selected_round=st.sampled_from(ROUNDS),
    selected_ratio=st.sampled_from(RATIOS),
    key=st.integers(0, 2**32 - 1),
)
def test_repeat_aug_sampler_matches_reference(
    n, w, data, epoch, seed, repeats, selected_round, selected_ratio, key
):
    rank = data.draw(st.integers(0, w - 1))
    recorder = RecordingPermutation(n, key)
    perm = make_perm(n, key, epoch).tolist()
    expected = ref_repeat_aug(perm, n, w, rank, repeats, selected_round, selected_ratio)
    kwargs = dict(
        num_repeats=repeats,
        seed=seed,
        selected_round=selected_round,
        selected_ratio=selected_ratio,
        permutation=recorder,
    )
    if not expected:  # DeiT's count rounds down to nothing: tfdp refuses, naming the fix
        with pytest.raises(ValueError, match="selected_round"):
            RepeatAugSampler(n, w, rank, **kwargs)
        return
    s = RepeatAugSampler(n, w, rank, **kwargs)
    s.set_epoch(epoch)
    _check_sampler_output(s, expected, rank, w)
    assert set(recorder.calls) == {epoch}


@settings(max_examples=150, deadline=None)
@given(
    n=st.integers(1, 2000),
    w=replicas,
    data=st.data(),
    repeats=st.floats(1, 6, allow_nan=False, allow_infinity=False),
)
def test_repeat_aug_sampler_arbitrary_float_repeats(n, w, data, repeats):
    rank = data.draw(st.integers(0, w - 1))
    s = RepeatAugSampler(
        n,
        w,
        rank,
        num_repeats=repeats,
        selected_round=0,
        selected_ratio=0.01,
        permutation=lambda e: make_perm(n, 3, e),
    )
    expected = ref_repeat_aug(make_perm(n, 3, 0).tolist(), n, w, rank, repeats, 0, 0.01)
    _check_sampler_output(s, expected, rank, w)


@settings(max_examples=200, deadline=None)
@given(
    n=sizes,
    w=replicas,
    data=st.data(),
    multiple_of=st.integers(1, 32),
    epoch=st.integers(0, 100),
    key=st.integers(0, 2**32 - 1),
    shuffle=st.booleans(),
)
def test_eval_sampler_matches_reference(n, w, data, multiple_of, epoch, key, shuffle):
    rank = data.draw(st.integers(0, w - 1))
    perm_fn = (lambda e: make_perm(n, key, e)) if shuffle else None
    s = DistributedEvalSampler(n, w, rank, multiple_of=multiple_of, permutation=perm_fn)
    s.set_epoch(epoch)
    perm = make_perm(n, key, epoch).tolist() if shuffle else list(range(n))
    expected, expected_mask = ref_eval(perm, n, w, rank, multiple_of)
    _check_sampler_output(s, expected, rank, w)
    assert s.mask().tolist() == expected_mask
    idx, mask = s.indices_and_mask()
    assert idx.tolist() == expected
    assert mask.tolist() == expected_mask
    weights = s.weights()
    assert weights.dtype == np.float32
    assert weights.tolist() == [float(m) for m in expected_mask]


@settings(max_examples=100, deadline=None)
@given(
    n=sizes,
    w=replicas,
    data=st.data(),
    epoch=epochs,
    seed=seeds,
    padding=st.sampled_from(PADDINGS),
    drop_last=st.booleans(),
    repeats=st.sampled_from(REPEATS),
)
def test_builtin_shuffle_is_the_keyed_permutation(
    n, w, data, epoch, seed, padding, drop_last, repeats
):
    """Without permutation=, the samplers lay out KeyedPermutation(n, seed, epoch)."""
    rank = data.draw(st.integers(0, w - 1))
    perm = KeyedPermutation(n, seed, epoch)(np.arange(n)).tolist()
    drop_last = drop_last and n >= w
    s = DistributedSampler(n, w, rank, seed=seed, drop_last=drop_last, padding=padding)
    s.set_epoch(epoch)
    if drop_last or padding == "wrap":
        expected = ref_torch_distributed(perm, n, w, rank, drop_last)
    elif padding == "random":
        expected = ref_random_padding(perm, n, w, rank, seed, epoch)
    else:
        expected = ref_no_padding(perm, n, w, rank)
    assert s.indices().tolist() == expected

    ra = RepeatAugSampler(n, w, rank, num_repeats=repeats, seed=seed, selected_round=0)
    ra.set_epoch(epoch)
    assert ra.indices().tolist() == ref_repeat_aug(perm, n, w, rank, repeats, 0, None)


def test_unshuffled_samplers_follow_range_order():
    s = DistributedSampler(10, 4, 3, shuffle=False)
    assert s.indices().tolist() == [3, 7, 1]
    s.set_epoch(9)  # epochs do not matter without shuffling
    assert s.indices().tolist() == [3, 7, 1]
    ra = RepeatAugSampler(
        4, 2, 1, num_repeats=3, shuffle=False, selected_round=0, selected_ratio=0.5
    )
    assert ra.indices().tolist() == [0, 1, 1, 2, 3, 3]
    ra = RepeatAugSampler(4, 2, 1, num_repeats=3, shuffle=False, selected_round=0)
    assert ra.indices().tolist() == [0, 1]


# == properties over all ranks of one epoch (built-in shuffle) ==================================


@settings(max_examples=100, deadline=None)
@given(
    n=sizes,
    w=replicas,
    epoch=epochs,
    seed=seeds,
    drop_last=st.booleans(),
    padding=st.sampled_from(PADDINGS),
)
def test_distributed_sampler_ranks_partition_the_padded_list(n, w, epoch, seed, drop_last, padding):
    drop_last = drop_last and n >= w
    samplers = [
        DistributedSampler(n, w, r, seed=seed, drop_last=drop_last, padding=padding)
        for r in range(w)
    ]
    total = samplers[0].total_size
    glob = {}
    for s in samplers:
        s.set_epoch(epoch)
        for p, v in zip(s.positions().tolist(), s.indices().tolist(), strict=True):
            assert p not in glob  # disjoint
            glob[p] = v
    assert sorted(glob) == list(range(total))  # cover the padded list exactly
    listed = [glob[p] for p in range(total)]
    if drop_last:
        assert total == n - n % w
        assert len(set(listed)) == total
    else:
        assert total == (n if padding is None else math.ceil(n / w) * w)
        assert sorted(listed[:n]) == list(range(n))  # the epoch's permutation first
        assert all(0 <= v < n for v in listed)
        if padding == "wrap" or (padding == "random" and total - n < n):
            assert listed[n:] == [listed[p % n] for p in range(n, total)]
    lengths = {len(s) for s in samplers}
    assert max(lengths) - min(lengths) <= (1 if padding is None and not drop_last else 0)


@settings(max_examples=100, deadline=None)
@given(
    n=st.integers(1, 3000),
    repeats=st.sampled_from([1, 2, 3, 4]),
    data=st.data(),
    epoch=epochs,
    seed=seeds,
    emit_all=st.booleans(),
)
def test_repeat_aug_copies_go_to_different_ranks(n, repeats, data, epoch, seed, emit_all):
    w = data.draw(st.integers(repeats, 64))
    samplers = [
        RepeatAugSampler(
            n,
            w,
            r,
            num_repeats=repeats,
            seed=seed,
            selected_round=0,
            selected_ratio=w / repeats if emit_all else None,
        )
        for r in range(w)
    ]
    per_rank = len(samplers[0])
    if emit_all:
        assert per_rank == samplers[0].num_samples
    glob, rank_of = {}, {}
    for r, s in enumerate(samplers):
        s.set_epoch(epoch)
        assert len(s) == per_rank
        for p, v in zip(s.positions().tolist(), s.indices().tolist(), strict=True):
            assert p not in glob
            glob[p], rank_of[p] = v, r
    assert sorted(glob) == list(range(per_rank * w))
    unpadded = min(n * repeats, per_rank * w)
    ranks_of_sample = {}
    for p in range(unpadded):
        ranks_of_sample.setdefault(glob[p], []).append(rank_of[p])
    for ranks in ranks_of_sample.values():
        assert len(ranks) <= repeats
        assert len(set(ranks)) == len(ranks)  # copies of one sample never share a rank
    complete = [v for v, ranks in ranks_of_sample.items() if len(ranks) == repeats]
    assert len(complete) == unpadded // repeats
    if emit_all:
        assert sorted(ranks_of_sample) == list(range(n))
        assert len(complete) == n
        assert all(glob[p] == glob[p % (n * repeats)] for p in range(n * repeats, per_rank * w))


@settings(max_examples=100, deadline=None)
@given(n=sizes, w=replicas, multiple_of=st.integers(1, 32))
def test_eval_sampler_counts_every_sample_once(n, w, multiple_of):
    samplers = [DistributedEvalSampler(n, w, r, multiple_of=multiple_of) for r in range(w)]
    per_rank = len(samplers[0])
    real, positions = [], []
    for s in samplers:
        assert len(s) == per_rank
        idx, mask = s.indices_and_mask()
        assert np.array_equal(mask, s.mask())
        real.extend(idx[mask].tolist())
        positions.extend(s.positions().tolist())
    assert per_rank % multiple_of == 0
    assert sorted(real) == list(range(n))
    assert sorted(positions) == list(range(per_rank * w))
    assert per_rank - multiple_of < math.ceil(n / w) <= per_rank


# == determinism of the default permutation ======================================================

_DETERMINISM_SCRIPT = textwrap.dedent(
    """
    import json
    import numpy as np
    from tfdp import DistributedEvalSampler, DistributedSampler, RepeatAugSampler
    from tfdp.indices import KeyedPermutation, random_padding_ids

    out = {}
    for n in (7, 4096, 4097, 100_003, 2**40 + 7):
        out[f"perm{n}"] = KeyedPermutation(n, 12345, 3)(np.arange(min(n, 3000))).tolist()
    s = DistributedSampler(10_007, 8, 5, seed=2**64 - 1, padding="random")
    s.set_epoch(7)
    out["ds"] = s.indices().tolist()
    s = DistributedSampler(3, 16, 11, seed=99, padding="random")
    s.set_epoch(2)
    out["ds_extra"] = s.indices().tolist()
    out["pad"] = random_padding_ids(1000, 50, 2**63, 2**40).tolist()
    ra = RepeatAugSampler(5000, 8, 3, num_repeats=1.5, seed=4, selected_round=0)
    ra.set_epoch(11)
    out["ra"] = ra.indices().tolist()
    out["eval"] = DistributedEvalSampler(101, 4, 2, multiple_of=8).indices().tolist()
    print(json.dumps(out))
    """
)


def _run_determinism_script(hash_seed):
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    proc = subprocess.run(
        [PYTHON, "-c", _DETERMINISM_SCRIPT],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.slow
def test_default_permutation_is_identical_across_processes():
    first = _run_determinism_script("0")
    second = _run_determinism_script("4242")
    assert first == second
    namespace = {}
    exec(  # the same computation in this process
        _DETERMINISM_SCRIPT.replace("print(json.dumps(out))", ""), namespace
    )
    assert json.loads(json.dumps(namespace["out"])) == first


@pytest.mark.parametrize("n", [50, 1000, 4097, 100_000])
def test_default_permutation_differs_across_epochs_and_seeds(n):
    def run(seed, epoch, cls=DistributedSampler, **kw):
        s = cls(n, 4, 1, seed=seed, **kw)
        s.set_epoch(epoch)
        return tuple(s.indices().tolist())

    for cls, kw in ((DistributedSampler, {}), (RepeatAugSampler, {"selected_round": 0})):
        keys = [(0, 0), (0, 1), (0, 2), (1, 0), (MAX_SEED, 0), (1, 1)]
        outs = [run(seed, epoch, cls, **kw) for seed, epoch in keys]
        assert len(set(outs)) == len(outs)
        assert run(0, 1, cls, **kw) == outs[1]  # and reproducible


# == slicing ===================================================================================


@settings(max_examples=200, deadline=None)
@given(n=sizes, w=replicas, data=st.data(), kind=st.sampled_from(["ds", "ra", "eval"]))
def test_indices_slice_equals_slice_of_indices(n, w, data, kind):
    rank = data.draw(st.integers(0, w - 1))
    if kind == "ds":
        s = DistributedSampler(n, w, rank, seed=5, padding=data.draw(st.sampled_from(PADDINGS)))
    elif kind == "ra":
        s = RepeatAugSampler(
            n, w, rank, num_repeats=data.draw(st.sampled_from(REPEATS)), seed=5, selected_round=0
        )
    else:
        s = DistributedEvalSampler(n, w, rank, multiple_of=data.draw(st.integers(1, 8)))
    s.set_epoch(data.draw(st.integers(0, 50)))
    full = s.indices()
    positions = s.positions()
    start = data.draw(st.integers(0, len(s) + 3))
    stop = data.draw(st.integers(0, len(s) + 3))
    assert s.indices(start, stop).tolist() == full[start:stop].tolist()
    assert s.indices(start).tolist() == full[start:].tolist()
    assert s.positions(start, stop).tolist() == positions[start:stop].tolist()
    if kind == "eval":
        assert s.mask(start, stop).tolist() == s.mask()[start:stop].tolist()


# == API =========================================================================================

N_API = 1003


def make(kind, rank=0, **kw):
    if kind == "ds":
        return DistributedSampler(N_API, 4, rank, **{"seed": 5, **kw})
    if kind == "ra":
        return RepeatAugSampler(N_API, 4, rank, **{"seed": 5, "selected_round": 0, **kw})
    return DistributedEvalSampler(N_API, 4, rank, **{"multiple_of": 8, **kw})


KINDS = ["ds", "ra", "eval"]


def _perm_n_api(epoch):
    return make_perm(N_API, 0, epoch)


@pytest.mark.parametrize("kind", KINDS)
def test_iter_len_and_set_epoch(kind):
    s = make(kind, rank=2, permutation=lambda e: make_perm(N_API, 0, e))
    assert s.epoch == 0
    epoch0 = s.indices().tolist()
    items = list(s)
    assert items == epoch0
    assert all(type(v) is int for v in items)
    assert len(s) == len(items)
    s.set_epoch(1)
    assert s.epoch == 1
    assert list(s) == s.indices().tolist() != epoch0
    assert list(s) == list(s)  # iterating twice gives the same epoch twice
    s.set_epoch(0)
    assert list(s) == epoch0
    for bad in (-1, 1.0, True, "1"):
        with pytest.raises(ValueError, match=r"^epoch"):
            s.set_epoch(bad)


def test_permutation_may_return_a_list():
    s = DistributedSampler(5, 2, 1, permutation=lambda e: [4, 2, 0, 3, 1])
    assert s.indices().tolist() == [2, 3, 4]


@pytest.mark.parametrize(
    ("sampler", "parts"),
    [
        (
            DistributedSampler(10, 4, 3, seed=7),
            [
                "DistributedSampler(",
                "num_examples=10",
                "rank=3",
                "num_replicas=4",
                "seed=7",
                "padding='wrap'",
                "len=3",
            ],
        ),
        (
            DistributedSampler(10, 4, 3, padding=None),
            ["DistributedSampler(", "num_examples=10", "rank=3", "len=2"],
        ),
        (
            RepeatAugSampler(1000, 8, 1, num_repeats=1.5),
            [
                "RepeatAugSampler(",
                "num_examples=1000",
                "rank=1",
                "num_replicas=8",
                "num_repeats=1.5",
                "selected_round=256",
                "len=96",
            ],
        ),
        (
            DistributedEvalSampler(5, 2, 1, multiple_of=4),
            ["DistributedEvalSampler(", "num_examples=5", "rank=1", "multiple_of=4", "len=4"],
        ),
    ],
)
def test_repr_is_readable(sampler, parts):
    sampler.set_epoch(12)
    text = repr(sampler)
    for part in [*parts, "epoch=12"]:
        assert part in text, (part, text)
    assert "\n" not in text
    assert " object at 0x" not in text
    assert text.endswith(")")


@pytest.mark.parametrize("kind", KINDS)
def test_with_rank_gives_another_rank_of_the_same_epoch(kind):
    s = make(kind, rank=0, permutation=_perm_n_api)
    s.set_epoch(7)
    for r in range(4):
        other = s.with_rank(r)
        assert (type(other), other.rank, other.epoch) == (type(s), r, 7)
        direct = make(kind, rank=r, permutation=_perm_n_api)
        direct.set_epoch(7)
        assert other.indices().tolist() == direct.indices().tolist()
        assert other.state_dict() == {**direct.state_dict(), "rank": r}
    with pytest.raises(ValueError, match=r"^rank"):
        s.with_rank(4)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("consumed", [0, 1, 57, 250])
def test_state_dict_resumes_mid_epoch(kind, consumed):
    a = make(kind)
    a.set_epoch(3)
    whole = a.indices().tolist()
    it = iter(a)
    head = [next(it) for _ in range(consumed)]
    state = a.state_dict()
    text = json.dumps(state)
    assert json.loads(text) == state  # JSON round trip
    assert state["epoch"] == 3
    assert state["position"] == consumed
    b = make(kind)
    b.load_state_dict(json.loads(text))
    assert b.epoch == 3
    assert b.state_dict()["position"] == consumed  # a loaded, not yet iterated, position
    rest = list(b)
    assert head + rest == whole
    assert rest == whole[consumed:]
    assert list(b) == whole  # the next pass over the epoch starts from its beginning


@pytest.mark.parametrize("kind", KINDS)
def test_set_epoch_after_load_keeps_or_drops_the_position(kind):
    a = make(kind)
    a.set_epoch(3)
    state = a.state_dict(position=10)
    b = make(kind)
    b.load_state_dict(state)
    b.set_epoch(3)  # a training loop re-announcing the loaded epoch keeps the position
    assert list(b) == a.indices()[10:].tolist()
    c = make(kind)
    c.load_state_dict(state)
    c.set_epoch(4)  # moving to another epoch starts it from the beginning
    assert list(c) == c.indices().tolist()
    assert len(list(c)) == len(c)


@pytest.mark.parametrize("kind", KINDS)
def test_state_dict_at_end_of_epoch_resumes_nothing(kind):
    a = make(kind)
    a.set_epoch(2)
    assert list(a)
    state = a.state_dict()
    assert state["position"] == len(a)
    b = make(kind)
    b.load_state_dict(state)
    assert list(b) == []


@pytest.mark.parametrize("kind", KINDS)
def test_state_from_another_rank_loads(kind):
    a = make(kind, rank=0)
    a.set_epoch(6)
    it = iter(a)
    for _ in range(40):
        next(it)
    b = make(kind, rank=3)
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    assert b.epoch == 6
    assert list(b) == b.indices()[40:].tolist()


@pytest.mark.parametrize("kind", KINDS)
def test_state_dict_explicit_position(kind):
    s = make(kind)
    s.set_epoch(4)
    assert s.state_dict(position=5)["position"] == 5
    for bad in (-1, len(s) + 1, 2.5):
        with pytest.raises(ValueError, match="position"):
            s.state_dict(position=bad)


ALL_FIELDS = [
    "num_examples",
    "num_replicas",
    "seed",
    "permutation",
    "shuffle",
    "drop_last",
    "padding",
    "num_repeats",
    "selected_round",
    "selected_ratio",
    "multiple_of",
]


@pytest.mark.parametrize(
    ("saver", "loader", "field"),
    [
        (
            lambda: DistributedSampler(1000, 4, 0),
            lambda: DistributedSampler(1001, 4, 0),
            "num_examples",
        ),
        (
            lambda: DistributedSampler(1000, 4, 0),
            lambda: DistributedSampler(1000, 8, 0),
            "num_replicas",
        ),
        (
            lambda: DistributedSampler(1000, 4, 0),
            lambda: DistributedSampler(1000, 4, 0, seed=1),
            "seed",
        ),
        (
            lambda: DistributedSampler(1000, 4, 0),
            lambda: DistributedSampler(1000, 4, 0, shuffle=False),
            "shuffle",
        ),
        (
            lambda: DistributedSampler(1000, 4, 0),
            lambda: DistributedSampler(1000, 4, 0, drop_last=True),
            "drop_last",
        ),
        (
            lambda: DistributedSampler(1000, 4, 0),
            lambda: DistributedSampler(1000, 4, 0, padding="random"),
            "padding",
        ),
        (
            lambda: DistributedSampler(N_API, 4, 0),
            lambda: DistributedSampler(N_API, 4, 0, permutation=_perm_n_api),
            "permutation",
        ),
        (
            lambda: RepeatAugSampler(1000, 4, 0, num_repeats=3),
            lambda: RepeatAugSampler(1000, 4, 0, num_repeats=2),
            "num_repeats",
        ),
        (
            lambda: RepeatAugSampler(1000, 4, 0, num_repeats=1.5),
            lambda: RepeatAugSampler(1000, 4, 0, num_repeats=2.5),
            "num_repeats",
        ),
        (
            lambda: RepeatAugSampler(1000, 4, 0),
            lambda: RepeatAugSampler(1000, 4, 0, seed=9),
            "seed",
        ),
        (
            lambda: RepeatAugSampler(1000, 4, 0),
            lambda: RepeatAugSampler(1000, 4, 0, selected_round=0),
            "selected_round",
        ),
        (
            lambda: RepeatAugSampler(1000, 4, 0),
            lambda: RepeatAugSampler(1000, 4, 0, selected_ratio=2),
            "selected_ratio",
        ),
        (
            lambda: RepeatAugSampler(1000, 4, 0),
            lambda: RepeatAugSampler(1024, 4, 0),
            "num_examples",
        ),
        (
            lambda: DistributedEvalSampler(1000, 4, 0),
            lambda: DistributedEvalSampler(1000, 4, 0, multiple_of=8),
            "multiple_of",
        ),
        (
            lambda: DistributedEvalSampler(1000, 4, 0),
            lambda: DistributedEvalSampler(999, 4, 0),
            "num_examples",
        ),
    ],
)
def test_state_from_another_configuration_is_refused(saver, loader, field):
    a = saver()
    a.set_epoch(5)
    b = loader()
    b.set_epoch(1)
    with pytest.raises(ValueError, match=rf"differing field\(s\):.*\b{field}: saved") as info:
        b.load_state_dict(json.loads(json.dumps(a.state_dict(position=3))))
    message = str(info.value)
    for other in ALL_FIELDS:
        if other != field:
            assert f"{other}: saved" not in message
    assert b.epoch == 1  # nothing was loaded
    assert list(b) == b.indices().tolist()


@pytest.mark.parametrize(
    ("saver", "loader", "saved_kind"),
    [
        (
            lambda: DistributedSampler(1000, 4, 0),
            lambda: RepeatAugSampler(1000, 4, 0),
            "DistributedSampler",
        ),
        (
            lambda: RepeatAugSampler(1000, 4, 0),
            lambda: DistributedEvalSampler(1000, 4, 0),
            "RepeatAugSampler",
        ),
        (
            lambda: DistributedEvalSampler(1000, 4, 0),
            lambda: DistributedSampler(1000, 4, 0),
            "DistributedEvalSampler",
        ),
    ],
)
def test_state_from_another_kind_of_sampler_is_refused(saver, loader, saved_kind):
    with pytest.raises(ValueError, match=f"saved by a {saved_kind}"):
        loader().load_state_dict(saver().state_dict())


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda st_: "not a dict", "must be a dict"),
        (lambda st_: {k: v for k, v in st_.items() if k != "epoch"}, "missing"),
        (lambda st_: {k: v for k, v in st_.items() if k != "config"}, "missing"),
        (lambda st_: {**st_, "version": 999}, "version"),
        (lambda st_: {**st_, "position": 10**9}, "position"),
        (lambda st_: {**st_, "position": -1}, "position"),
        (lambda st_: {**st_, "epoch": -3}, "epoch"),
    ],
)
def test_malformed_state_is_refused(mutate, match):
    s = DistributedSampler(1000, 4, 0)
    with pytest.raises(ValueError, match=match):
        s.load_state_dict(mutate(s.state_dict(position=2)))


# == bad input =================================================================================


def _ds(**kw):
    return DistributedSampler(**{"num_examples": 100, "num_replicas": 4, "rank": 0, **kw})


def _ra(**kw):
    return RepeatAugSampler(
        **{"num_examples": 100, "num_replicas": 4, "rank": 0, "selected_round": 0, **kw}
    )


def _ev(**kw):
    return DistributedEvalSampler(**{"num_examples": 100, "num_replicas": 4, "rank": 0, **kw})


COMMON_BAD = [
    ("num_examples", 0),
    ("num_examples", -5),
    ("num_examples", 2.5),
    ("num_examples", True),
    ("num_examples", "100"),
    ("num_replicas", 0),
    ("num_replicas", -1),
    ("num_replicas", 4.0),
    ("rank", -1),
    ("rank", 4),
    ("rank", 1.0),
    ("rank", None),
    ("permutation", [0, 1, 2]),
]
SEED_BAD = [("seed", -1), ("seed", 2**64), ("seed", 1.5), ("seed", None)]
BAD_INPUTS = [
    *[(ctor, name, value) for ctor in (_ds, _ra, _ev) for name, value in COMMON_BAD],
    *[(ctor, name, value) for ctor in (_ds, _ra) for name, value in SEED_BAD],
    (_ds, "padding", "reflect"),
    (_ds, "padding", "WRAP"),
    (_ds, "padding", 0),
    (_ra, "num_repeats", 0),
    (_ra, "num_repeats", 0.99),
    (_ra, "num_repeats", -2),
    (_ra, "num_repeats", float("nan")),
    (_ra, "num_repeats", float("inf")),
    (_ra, "num_repeats", "3"),
    (_ra, "num_repeats", None),
    (_ra, "selected_round", -1),
    (_ra, "selected_round", 2.5),
    (_ra, "selected_ratio", 0),
    (_ra, "selected_ratio", -2),
    (_ra, "selected_ratio", 0.0),
    (_ra, "selected_ratio", float("nan")),
    (_ra, "selected_ratio", float("inf")),
    (_ra, "selected_ratio", "2"),
    (_ev, "multiple_of", 0),
    (_ev, "multiple_of", -8),
]


@pytest.mark.parametrize(("ctor", "name", "value"), BAD_INPUTS)
def test_bad_arguments_are_refused_by_name(ctor, name, value):
    with pytest.raises(ValueError, match=rf"^{name}\b"):
        ctor(**{name: value})


@pytest.mark.parametrize("ctor", [_ds, _ra, _ev])
def test_boundary_arguments_are_accepted(ctor):
    assert len(ctor(num_examples=1, num_replicas=1, rank=0).indices()) == 1
    assert len(ctor(rank=3)) > 0
    if ctor is not _ev:
        a, b = ctor(seed=0), ctor(seed=MAX_SEED)
        assert a.indices().tolist() != b.indices().tolist()
        assert len(ctor(seed=np.uint64(MAX_SEED)).indices()) == len(b)


def test_drop_last_with_fewer_examples_than_replicas_is_refused():
    with pytest.raises(ValueError, match="drop_last"):
        DistributedSampler(3, 4, 0, drop_last=True)
    assert [DistributedSampler(4, 4, r, drop_last=True).indices().size for r in range(4)] == [1] * 4


def test_repeat_aug_selecting_nothing_is_refused():
    with pytest.raises(ValueError, match="selected_round"):
        RepeatAugSampler(255, 4, 0)  # DeiT: 255 // 256 * 256 / 4 == 0
    with pytest.raises(ValueError, match="selected_round"):
        RepeatAugSampler(1000, 4, 0, selected_round=7, selected_ratio=10_000)
    assert len(RepeatAugSampler(256, 4, 0)) == 64


BAD_PERMUTATIONS = {
    "short": lambda n: np.arange(n - 1),
    "long": lambda n: np.arange(n + 1),
    "duplicate": lambda n: np.r_[0, np.arange(n - 1)],
    "out of range": lambda n: np.arange(1, n + 1),
    "negative": lambda n: np.arange(n) - 1,
    "2-D": lambda n: np.arange(n).reshape(1, n),
    "fractional": lambda n: np.arange(n) + 0.5,
}


@pytest.mark.parametrize("ctor", [_ds, _ra, _ev])
@pytest.mark.parametrize("bad", sorted(BAD_PERMUTATIONS))
def test_bad_permutation_is_refused_when_used(ctor, bad):
    s = ctor(permutation=lambda epoch: BAD_PERMUTATIONS[bad](100))  # accepted until used
    with pytest.raises(ValueError, match=r"^permutation"):
        s.indices()
    with pytest.raises(ValueError, match=r"^permutation"):
        list(s)


# == import hygiene =============================================================================


@pytest.mark.slow
def test_importing_tfdp_does_not_import_tensorflow(tmp_path):
    # A poisoned "tensorflow" first on the path: importing it at all fails loudly,
    # whether or not the real one is installed.
    for name in ("tensorflow", "keras"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(f"raise RuntimeError('{name} was imported')\n")
    code = textwrap.dedent(
        """
        import sys
        import tfdp, tfdp.samplers, tfdp.indices
        s = tfdp.RepeatAugSampler(1024, 4, 1)
        s.set_epoch(1)
        list(s)
        s.state_dict()
        tfdp.DistributedEvalSampler(10, 2, 1).mask()
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow", "keras"))
        print(loaded)
        """
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])]
        ),
    }
    proc = subprocess.run(
        [PYTHON, "-c", code], capture_output=True, text=True, env=env, check=False, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


# ==========


@pytest.mark.parametrize("kind", KINDS)
def test_state_after_set_epoch_starts_at_the_new_epoch_beginning(kind):
    a = make(kind)
    list(a)  # finish epoch 0
    a.set_epoch(1)
    state = a.state_dict()
    b = make(kind)
    b.load_state_dict(state)
    assert state["position"] == 0
    assert list(b) == a.indices().tolist()


def test_state_from_a_longer_rank_loads_with_uneven_padding():
    a = DistributedSampler(10, 4, 0, padding=None)  # 3 entries
    b = DistributedSampler(10, 4, 3, padding=None)  # 2 entries
    assert list(a)
    b.load_state_dict(a.state_dict())
    assert list(b) == []


def test_refused_state_leaves_the_sampler_unchanged():
    s = DistributedSampler(1000, 4, 0)
    s.set_epoch(2)
    bad = {**s.state_dict(), "epoch": 9, "position": 10**9}
    with pytest.raises(ValueError, match="position"):
        s.load_state_dict(bad)
    assert s.epoch == 2


def test_numpy_selected_ratio_state_is_json_serialisable():
    s = RepeatAugSampler(1000, 4, 0, selected_round=0, selected_ratio=np.int64(2))
    state = json.loads(json.dumps(s.state_dict()))
    s.load_state_dict(state)


def test_tiny_selected_ratio_is_capped_or_refused_by_name():
    try:
        s = RepeatAugSampler(5000, 4, 0, selected_round=0, selected_ratio=1e-320)
    except ValueError as err:
        assert str(err).startswith("selected_ratio")
    else:
        assert len(s) == s.num_samples


def test_huge_num_repeats_is_refused_by_name():
    with pytest.raises(ValueError, match=r"^num_repeats"):
        RepeatAugSampler(1000, 4, 0, num_repeats=10**400)


# == a user permutation: one call per epoch per process ==========================================


class SharedGenerator:
    """The trap of the old porting recipe: one generator for every call, so every call of
    ``permutation(epoch)`` returns another order (as ``torch.randperm(n, generator=g)``)."""

    def __init__(self, n):
        self.n, self.rng, self.calls = n, np.random.default_rng(0), []

    def __call__(self, epoch):
        self.calls.append(epoch)
        return self.rng.permutation(self.n)


@pytest.mark.parametrize("kind", ["distributed", "repeat_aug", "eval"])
def test_a_process_calls_permutation_once_per_epoch_and_its_ranks_deal_one_list(kind):
    n, w = 48, 4
    perm = SharedGenerator(n)
    make = {
        "distributed": lambda: DistributedSampler(n, w, 0, permutation=perm),
        "repeat_aug": lambda: RepeatAugSampler(n, w, 0, selected_round=0, permutation=perm),
        "eval": lambda: DistributedEvalSampler(n, w, 0, permutation=perm),
    }[kind]
    template = make()
    ranks = [template.with_rank(r) for r in range(w)]
    for epoch in (0, 1, 2, 1):
        for s in ranks:
            s.set_epoch(epoch)
        # every way of reading an epoch: whole, in slices, iterated, by global position
        lists = [s.indices() for s in ranks]
        for s, lst in zip(ranks, lists, strict=True):
            assert s.indices(2, 5).tolist() == lst[2:5].tolist() and list(s) == lst.tolist()
        global_list = ranks[0].global_indices(np.arange(ranks[0].global_length))
        dealt = np.stack(lists, axis=1).reshape(-1)  # rank r's k-th entry is position r + k * w
        assert dealt.tolist() == global_list.tolist()
        half = ranks[1].replace(num_replicas=2, rank=0)  # another world size: the same order
        assert half.global_indices(np.arange(half.global_length)).tolist() == global_list.tolist()
    assert perm.calls == [0, 1, 2]  # once per epoch; epoch 1 again: kept, not asked again


def test_ranks_built_on_threads_ask_for_the_permutation_once():
    import threading

    n, w = 1000, 8
    perm = SharedGenerator(n)
    template = DistributedSampler(n, w, 0, permutation=perm)
    out: dict[int, list[int]] = {}

    def rank(r):  # as tf.data builds each rank's epoch in its own numpy_function call
        s = template.with_rank(r)
        s.set_epoch(3)
        out[r] = s.indices().tolist()

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(w)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert perm.calls == [3]
    assert sorted(i for r in range(w) for i in out[r]) == list(range(n))  # one list, dealt


def test_permutation_fingerprint_names_the_list_a_process_deals():
    perm = SharedGenerator(30)
    s = RepeatAugSampler(30, 3, 0, selected_round=0, permutation=perm)
    first = s.permutation_fingerprint(0)
    assert first == s.with_rank(2).permutation_fingerprint(0) == s.permutation_fingerprint()
    assert s.permutation_fingerprint(1) != first  # another epoch, another order
    twin = RepeatAugSampler(30, 3, 0, selected_round=0, permutation=SharedGenerator(30))
    assert twin.permutation_fingerprint(0) == first  # the same order: the same fingerprint
    assert RepeatAugSampler(30, 3, 0, selected_round=0).permutation_fingerprint() is None
