"""DistributedInput on real strategies: every replica gets exactly its rank's indices."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import tfdp
from reference import lanes_by_hand
from tfdp.input import DistributedInput
from tfdp.sources import ArraySource

N = 203  # prime: no batch layout divides it


def _source(n: int = N, image: bool = False) -> ArraySource:
    if image:
        rng = np.random.default_rng(0)
        x = rng.integers(0, 255, size=(n, 8, 8, 3), dtype=np.uint8)
        return ArraySource((x, np.arange(n)))
    return ArraySource((np.arange(n, dtype=np.float32)[:, None], np.arange(n)))


@tf.function
def _replica_step(batch):
    """One function for every test here: traced once per replica, strategy and batch spec (a
    per-call function was traced again on every call)."""
    element, ids = batch
    ctx = tf.distribute.get_replica_context()
    return ctx.replica_id_in_sync_group, element[1], ids["index"]


def _received(strategy, dds) -> dict[int, list[int]]:
    """Run every batch through strategy.run and collect the labels (= ids) per replica."""
    got: dict[int, list[int]] = {}
    for batch in dds:
        rid, y, idx = strategy.run(_replica_step, args=(batch,))
        for r, yy, ii in zip(
            strategy.experimental_local_results(rid),
            strategy.experimental_local_results(y),
            strategy.experimental_local_results(idx),
            strict=True,
        ):
            assert yy.numpy().tolist() == ii.numpy().tolist()
            got.setdefault(int(r), []).extend(yy.numpy().tolist())
    return got


def _expected(inp: DistributedInput, rank: int, epoch: int) -> list[int]:
    s = inp.sampler.with_rank(rank)
    s.set_epoch(epoch)
    k = inp.steps_per_epoch * inp.batch_size
    return s.indices()[:k].tolist()


@pytest.mark.parametrize(
    ("sampler", "options"),
    [
        ("repeat_aug", {"selected_round": 0}),
        ("distributed", {}),
        ("distributed", {"padding": "random"}),
    ],
)
def test_mirrored_each_replica_gets_its_rank(mirrored4, sampler, options):
    inp = DistributedInput(
        mirrored4,
        _source(),
        sampler=sampler,
        sampler_options=options,
        batch_size=4,
        return_ids=True,
    )
    seen_epochs = []
    for epoch in range(2):
        got = _received(mirrored4, inp.epoch(epoch))
        assert sorted(got) == [0, 1, 2, 3]
        for r in range(4):
            assert got[r] == _expected(inp, r, epoch), (sampler, r, epoch)
        seen_epochs.append(got)
    assert seen_epochs[0] != seen_epochs[1]  # reshuffled per epoch


def test_default_strategy_is_rank0_of_1():
    inp = DistributedInput(
        None,
        _source(),
        sampler="repeat_aug",
        sampler_options={"selected_round": 0},
        batch_size=5,
        return_ids=True,
    )
    strategy = tf.distribute.get_strategy()
    for epoch in range(2):
        got = _received(strategy, inp.epoch(epoch))
        assert got[0] == _expected(inp, 0, epoch)


def test_one_device_strategy():
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    inp = DistributedInput(strategy, _source(), batch_size=7, return_ids=True)
    assert _received(strategy, inp.epoch(1))[0] == _expected(inp, 0, 1)


def test_second_dataset_on_same_strategy_still_exact(mirrored4):
    """A training set then an evaluation set on one strategy: both stay exact."""
    train = DistributedInput(
        mirrored4,
        _source(),
        sampler="repeat_aug",
        sampler_options={"selected_round": 0},
        batch_size=4,
        return_ids=True,
    )
    _received(mirrored4, train.epoch(0))
    ev = DistributedInput(mirrored4, _source(), sampler="eval", batch_size=4, return_ids=True)

    @tf.function
    def step(batch):
        (_, y, w), _ = batch
        return y, w

    real = []
    for batch in ev.epoch(0):
        y, w = mirrored4.run(step, args=(batch,))
        for yy, ww in zip(
            mirrored4.experimental_local_results(y),
            mirrored4.experimental_local_results(w),
            strict=True,
        ):
            real += yy.numpy()[ww.numpy() > 0].tolist()
    assert sorted(real) == list(range(N))  # every real sample exactly once
    assert _received(mirrored4, train.epoch(1))[2] == _expected(train, 2, 1)


def test_multiworker_two_processes(tmp_path):
    from mw import run_workers

    script = Path(__file__).parent / "workers" / "input_worker.py"
    run_workers(script, 2, [str(tmp_path / "w{task}.json"), "repeat_aug", "2"])
    records = [json.loads((tmp_path / f"w{i}.json").read_text()) for i in range(2)]
    assert {r["task"] for r in records} == {0, 1}
    for rec in records:
        rank = rec["task"]  # one replica per worker on CPU: global rank = worker index
        assert rec["replicas"] == 2
        for epoch in range(2):
            s = tfdp.RepeatAugSampler(N, 2, rank, selected_round=0)
            s.set_epoch(epoch)
            k = rec["steps"] * 4
            assert rec["record"][str(epoch)]["ids"] == s.indices()[:k].tolist()
            assert rec["record"][str(epoch)]["positions"] == s.positions()[:k].tolist()


def test_start_step_resumes_without_reading_skipped(mirrored4):
    inp = DistributedInput(
        mirrored4,
        _source(),
        sampler="repeat_aug",
        sampler_options={"selected_round": 0},
        batch_size=4,
        return_ids=True,
    )
    full = _received(mirrored4, inp.epoch(1))
    tail = _received(mirrored4, inp.epoch(1, start_step=5))
    for r in range(4):
        assert tail[r] == full[r][5 * 4 :]
    with pytest.raises(ValueError, match="start_step"):
        inp.epoch(1, start_step=inp.steps_per_epoch + 1)


def test_epochs_stream_matches_epoch_by_epoch():
    inp = DistributedInput(None, _source(), batch_size=8, return_ids=True)
    stream = [b[1]["index"].numpy().tolist() for b in inp.rank_dataset(0, 2, 2)]
    by_epoch = [b[1]["index"].numpy().tolist() for e in (2, 3) for b in inp.rank_dataset(0, e, 1)]
    assert stream == by_epoch
    assert len(stream) == 2 * inp.steps_per_epoch


def _crop_flip():
    def augment(example, seed):
        image, label = example
        image = tf.image.stateless_random_flip_left_right(image, seed)
        image = tf.image.stateless_random_crop(
            tf.pad(image, [[2, 2], [2, 2], [0, 0]]), [8, 8, 3], seed + 1
        )
        return image, label

    return augment


def test_ra_copies_augmented_differently_and_reruns_identical(mirrored4):
    src = _source(image=True)
    inp = DistributedInput(
        mirrored4,
        src,
        sampler="repeat_aug",
        sampler_options={"selected_round": 0},
        batch_size=6,
        augment=_crop_flip(),
        return_ids=True,
        seed=3,
    )

    def collect():
        out = {}
        for r in range(4):
            for (x, _), ids in inp.rank_dataset(r, 0, 1):
                for img, i, p in zip(
                    x.numpy(), ids["index"].numpy(), ids["position"].numpy(), strict=True
                ):
                    out[(int(i), int(p))] = img
        return out

    a, b = collect(), collect()
    assert a.keys() == b.keys()
    assert all(np.array_equal(a[k], b[k]) for k in a)  # rerun: identical
    by_index: dict[int, list[np.ndarray]] = {}
    for (i, _), img in a.items():
        by_index.setdefault(i, []).append(img)
    triples = [v for v in by_index.values() if len(v) == 3]
    assert len(triples) > 10
    differing = sum(
        not (np.array_equal(v[0], v[1]) and np.array_equal(v[1], v[2])) for v in triples
    )
    assert differing >= 0.9 * len(triples)
    # Unaugmented, the three copies are the same image: the differences come from the seeds.
    raw = src.gather(tf.constant([0]))[0][0].numpy()
    assert raw.shape == (8, 8, 3)


def test_fit_accepts_epochs_stream(mirrored4):
    import keras

    src = ArraySource(
        (np.random.default_rng(0).normal(size=(256, 4)).astype("float32"), np.arange(256) % 2)
    )
    inp = DistributedInput(
        mirrored4, src, sampler="repeat_aug", sampler_options={"selected_round": 0}, batch_size=8
    )
    with mirrored4.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
        model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    hist = model.fit(inp.epochs(0, 2), epochs=2, steps_per_epoch=inp.steps_per_epoch, verbose=0)
    assert len(hist.history["loss"]) == 2 and np.isfinite(hist.history["loss"]).all()


# -- streaming sources: the same sampler spec, the same epoch --------------------------------------

STREAM_N = 103  # prime


@pytest.fixture(scope="module")
def stream_sources(tmp_path_factory):
    """TFRecord shards of ids 0..102: 8 files (4 lanes for 4 replicas) and 3 files (3 lanes)."""
    from tfdp.sources import TFRecordSource, write_tfrecords

    out = {}
    for shards in (8, 3):
        d = tmp_path_factory.mktemp(f"shards{shards}")
        arrays = (np.arange(STREAM_N, dtype=np.float32)[:, None], np.arange(STREAM_N))
        out[shards] = TFRecordSource(
            write_tfrecords(arrays, d, num_shards=shards), shuffle_buffer=0
        )
    return out


@pytest.fixture(scope="module")
def stream_lanes(stream_sources):
    """``(shards, w, epoch, shuffle) -> lanes``: the labels of each lane, read by hand
    (tests/reference.py) once per layout for the module."""
    cache: dict[tuple, list[list[int]]] = {}

    def get(shards: int, w: int, epoch: int, shuffle: bool) -> list[list[int]]:
        key = (shards, w, epoch, shuffle)
        if key not in cache:
            lanes = lanes_by_hand(stream_sources[shards], w, 0, epoch, shuffle)
            cache[key] = [[int(y) for _, y in lane] for lane in lanes]
        return cache[key]

    return get


def _received_stream(strategy, dds) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
    """Per replica: the stream indices and the record ids (labels) it received."""
    idx: dict[int, list[int]] = {}
    labels: dict[int, list[int]] = {}
    for batch in dds:
        rid, y, i = strategy.run(_replica_step, args=(batch,))
        for r, yy, ii in zip(
            *(strategy.experimental_local_results(t) for t in (rid, y, i)), strict=True
        ):
            idx.setdefault(int(r), []).extend(ii.numpy().tolist())
            labels.setdefault(int(r), []).extend(yy.numpy().tolist())
    return idx, labels


@pytest.mark.parametrize(
    ("shards", "sampler", "options", "drop_remainder", "rerun"),
    [
        (8, "distributed", {}, True, True),
        (8, "distributed", {"shuffle": False}, True, False),
        (3, "distributed", {}, True, False),  # 33 records: wrap padding
        (3, "distributed", {"drop_last": True}, False, False),  # and partial batches
        (8, "repeat_aug", {"selected_round": 0}, True, False),
        (8, "repeat_aug", {"num_repeats": 2, "selected_round": 8}, True, False),
        (
            3,
            "repeat_aug",
            {"num_repeats": 2.5, "selected_round": 0, "selected_ratio": 1.5},
            True,
            True,
        ),
    ],
)
def test_stream_epoch_is_the_sampler_epoch(
    mirrored4, stream_sources, stream_lanes, shards, sampler, options, drop_remainder, rerun
):
    """A streaming epoch: per rank the sampler's stream indices and records, nothing else.

    The cases: lanes fewer than, or as many as, the replicas; the files in order or permuted;
    no padding, wrap padding (random padding of one short entry pads as wrap does), drop_last
    with partial batches; Repeated Augmentation with integer and fractional repeats and
    selections. What each sampler option does to the list is the samplers' own tests'.

    The references are read without TensorFlow's input path: the indices from the sampler
    itself (``_expected``; that random access delivers exactly these is
    ``test_mirrored_each_replica_gets_its_rank``), the records from the files read by hand. Both
    are fixed by the seed, so a rerun that passes is the same epoch: the rerun from a fresh
    source object runs in two cases (one per sampler), as a guard against a nondeterministic read.
    """
    src = stream_sources[shards]
    w, b, epoch = 4, 3, 1
    n_eff = src.stream_length(w)
    inp = DistributedInput(
        mirrored4,
        src,
        sampler=sampler,
        sampler_options=options,
        batch_size=b,
        drop_remainder=drop_remainder,
        return_ids=True,
    )
    assert inp.sampler.num_examples == n_eff
    # The same spec on n_eff in-memory examples: the same length (and, unshuffled, the same
    # layout) as random access.
    ref = DistributedInput(
        mirrored4,
        _source(n_eff),
        sampler=sampler,
        sampler_options={**options, "shuffle": False},
        batch_size=b,
        drop_remainder=drop_remainder,
        return_ids=True,
    )
    assert inp.steps_per_epoch == ref.steps_per_epoch
    idx, labels = _received_stream(mirrored4, inp.epoch(epoch))
    ref_idx = {r: _expected(ref, r, epoch) for r in range(w)}
    lanes = stream_lanes(shards, w, epoch, options.get("shuffle", True))
    record = {s: lanes[s % len(lanes)][s // len(lanes)] for s in range(n_eff)}
    copies: dict[int, list[int]] = {}
    for r in range(w):
        assert idx[r] == ref_idx[r], r  # the sampler's stream indices, in order
        assert labels[r] == [record[s] for s in idx[r]], r  # ... and the records at them
        for k, label in enumerate(labels[r]):
            copies.setdefault(label, []).append((r, k // b))
    if sampler == "repeat_aug" and float(options.get("num_repeats", 3)).is_integer():
        reps = int(options.get("num_repeats", 3))
        assert max(len(c) for c in copies.values()) == reps
        for places in copies.values():  # the copies of a record: distinct ranks, nearby steps
            assert len({r for r, _ in places}) == len(places)
            assert max(s for _, s in places) - min(s for _, s in places) <= 1
    if not rerun:
        return
    again = DistributedInput(
        mirrored4,
        type(src)(src.files, shuffle_buffer=0),
        sampler=sampler,
        sampler_options=options,
        batch_size=b,
        drop_remainder=drop_remainder,
        return_ids=True,
    )
    assert _received_stream(mirrored4, again.epoch(epoch))[1] == labels  # rerun: identical


def test_stream_shuffle_on_and_off_differ_and_epochs_reshuffle(mirrored4, stream_sources):
    src = stream_sources[8]
    shuffled = tfdp.sources.TFRecordSource(src.files)  # file permutation and block shuffle
    got = {}
    for name, source, options in [
        ("off", src, {"shuffle": False}),
        ("on", shuffled, {}),
    ]:
        inp = DistributedInput(
            mirrored4, source, sampler_options=options, batch_size=4, return_ids=True
        )
        got[name] = [_received_stream(mirrored4, inp.epoch(e))[1] for e in (0, 1)]
    assert got["off"][0] == got["off"][1]  # no shuffle: the same order every epoch
    assert got["on"][0] != got["on"][1] and got["on"][0] != got["off"][0]
    for r in range(4):
        assert sorted(got["on"][0][r]) != sorted(got["on"][1][r])  # other files, other ranks


def test_stream_epochs_resume_and_endless(stream_sources):
    src = stream_sources[8]
    inp = DistributedInput(
        tf.distribute.get_strategy(),
        src,
        sampler="repeat_aug",
        sampler_options={"num_repeats": 2, "selected_round": 0},
        batch_size=5,
        return_ids=True,
    )

    def ids(ds):
        return [b[1]["index"].numpy().tolist() + b[0][1].numpy().tolist() for b in ds]

    by_epoch = [ids(inp.rank_dataset(0, e, 1)) for e in (2, 3, 4)]
    assert ids(inp.rank_dataset(0, 2, 3)) == by_epoch[0] + by_epoch[1] + by_epoch[2]
    assert ids(inp.rank_dataset(0, 2, 3, start_step=2)) == (
        by_epoch[0][2:] + by_epoch[1] + by_epoch[2]
    )
    endless = ids(inp.rank_dataset(0, 2, None).take(3 * inp.steps_per_epoch))
    assert endless == by_epoch[0] + by_epoch[1] + by_epoch[2]


def test_stream_of_fixed_shapes_is_augmented_batch_by_batch_as_one_by_one(stream_sources):
    """A batched augmentation of fixed-shape stream examples runs once per batch, each row with
    its own seed: the values of running it on each example alone (weights, ids, a last
    partial batch alike)."""

    class Shift:  # batched: every row shifted by its own seed
        batched = True

        def __call__(self, example, seeds):
            x, y = example
            by = tf.cast(seeds[:, 1] * 1000 + seeds[:, 0] % 1000, tf.float32)
            return x + by[:, None], y

    def one_by_one(example, seed):  # the same, on one example
        x, y = Shift()((example[0][None], example[1][None]), seed[None])
        return x[0], y[0]

    outputs = []
    for aug in (Shift(), one_by_one):
        inp = DistributedInput(
            None,
            stream_sources[3],
            sampler="repeat_aug",
            sampler_options={"num_repeats": 2, "selected_round": 0},
            batch_size=4,
            augment=aug,
            with_weights=True,
            return_ids=True,
            drop_remainder=False,
            seed=5,
        )
        assert inp.examples.augments_stream_batches() == (aug is not one_by_one)
        batches = list(inp.rank_dataset(0, 1, 1))
        outputs.append(tf.nest.map_structure(lambda t: t.numpy(), batches))
    assert len(outputs[0]) == len(outputs[1]) > 2
    assert outputs[0][-1][1]["index"].shape[0] < 4  # a partial last batch
    for a, b in zip(outputs[0], outputs[1], strict=True):
        tf.nest.map_structure(np.testing.assert_array_equal, a, b)


@pytest.mark.parametrize("batched", [True, False])
def test_stream_augmentation_is_traced_once_per_input(stream_sources, batched):
    """New datasets of a stream (every epoch of an endless one, each rank, a resume) call the
    augmentation traced once per input, not traced again with each dataset (seconds each for
    an image augmentation); their values are those of one dataset per epoch."""
    traces = []

    def shift(example, seeds):  # batched: every row shifted by its position
        traces.append(1)
        x, y = example
        return x + tf.cast(seeds[:, 1:], tf.float32), y

    def shift_one(example, seed):
        traces.append(1)
        return example[0] + tf.cast(seed[1], tf.float32), example[1]

    if batched:
        aug = shift
        aug.batched = True
    else:
        aug = shift_one
    inp = DistributedInput(
        tf.distribute.OneDeviceStrategy("/cpu:0"),
        stream_sources[8],
        batch_size=8,
        augment=aug,
        seed=3,
    )
    assert inp.examples.augments_stream_batches() == batched
    steps = inp.steps_per_epoch

    def values(ds):
        return [x.numpy().tolist() for x, _ in ds]

    endless = values(inp.rank_dataset(0, 4, None).take(2 * steps + 1))
    resumed = values(inp.rank_dataset(0, 4, 2, start_step=1))
    assert len(traces) == 1
    by_epoch = [values(inp.rank_dataset(0, e, 1)) for e in (4, 5, 6)]
    assert len(traces) == 1
    assert endless == by_epoch[0] + by_epoch[1] + by_epoch[2][:1]
    assert resumed == by_epoch[0][1:] + by_epoch[1]
    assert by_epoch[0] != by_epoch[1]


def test_stream_refuses_what_needs_random_access(stream_sources):
    src = stream_sources[8]
    with pytest.raises(ValueError, match="sampler: 'eval' needs a random-access source"):
        DistributedInput(None, src, sampler="eval", batch_size=2)
    n = src.stream_length(1)
    with pytest.raises(ValueError, match="permutation= orders examples by index"):
        DistributedInput(
            None, src, sampler=tfdp.DistributedSampler(n, 1, 0, permutation=np.arange), batch_size=2
        )
    assert n == STREAM_N  # one replica: one lane, every record
    with pytest.raises(ValueError, match="num_examples=96 but the stream holds 103 records"):
        DistributedInput(None, src, sampler=tfdp.DistributedSampler(96, 1, 0), batch_size=2)


# -- bad input -------------------------------------------------------------------------------


def test_one_factory_picks_the_loader_and_every_loader_loads_the_plans_entries(
    mirrored_of, stream_sources, tmp_path
):
    """make_loader: a stream -> StreamBatches, a window source under a window stage ->
    WindowedBatches, any other random-access source -> IndexedBatches (a window stage on arrays
    too); each meets the Loader Protocol, and each rank receives its planned entries in order."""
    from tfdp import augment
    from tfdp.input.loader import Loader
    from tfdp.sources import ImageFolderSource

    for c in "ab":
        (tmp_path / c).mkdir()
        for i in range(5):
            jpeg = tf.io.encode_jpeg(tf.fill([6 + i, 7, 3], tf.constant(40 * i, tf.uint8)))
            tf.io.write_file(str(tmp_path / c / f"{i}.jpg"), jpeg)
    crop = augment.RandomResizedCrop(4)
    cases = {
        "StreamBatches": (stream_sources[8], None),
        "WindowedBatches": (ImageFolderSource(tmp_path), crop),
        "IndexedBatches": (_source(10, image=True), crop),
    }
    strategy = mirrored_of(2)
    for kind, (source, aug) in cases.items():
        inp = DistributedInput(
            strategy,
            source,
            sampler="repeat_aug",
            sampler_options={"selected_round": 0},
            batch_size=2,
            augment=aug,
            return_ids=True,
        )
        assert type(inp.loader).__name__ == kind and isinstance(inp.loader, Loader)
        rows = inp.steps_per_epoch * inp.batch_size
        for rank in (0, 1):
            entries = inp.plan.rank_entries(rank, 1, 0)
            got = [ids for _, ids in inp.rank_dataset(rank, first_epoch=1)]
            for key, want in (("index", entries.indices), ("position", entries.positions)):
                assert np.concatenate([i[key] for i in got]).tolist() == want[:rows].tolist()
        worker = [ids["index"].numpy().tolist() for _, ids in inp.worker_dataset(None, 1)]
        by_rank = [[b["index"].numpy().tolist() for _, b in inp.rank_dataset(r, 1)] for r in (0, 1)]
        assert worker == [batch for step in zip(*by_rank, strict=True) for batch in step]


def test_fewer_examples_than_replicas(mirrored4):
    with pytest.raises(ValueError, match="fewer than the 4 replicas"):
        DistributedInput(mirrored4, _source(3), batch_size=1)


@pytest.mark.parametrize("bs", [0, -2])
def test_bad_batch_size(bs):
    with pytest.raises(ValueError, match="batch_size"):
        DistributedInput(None, _source(), batch_size=bs)


def test_global_batch_size_must_divide(mirrored4):
    with pytest.raises(ValueError, match="global_batch_size: 10 must be a positive multiple"):
        DistributedInput(mirrored4, _source(), global_batch_size=10)
    inp = DistributedInput(mirrored4, _source(), global_batch_size=12)
    assert inp.batch_size == 3


def test_sampler_with_other_world_size(mirrored4):
    with pytest.raises(ValueError, match="num_replicas=2 but the strategy has 4"):
        DistributedInput(
            mirrored4, _source(), sampler=tfdp.DistributedSampler(N, 2, 0), batch_size=2
        )


def test_batch_too_large_for_epoch(mirrored4):
    with pytest.raises(ValueError, match="no full step"):
        DistributedInput(mirrored4, _source(), batch_size=100)


def test_uneven_sampler_refused(mirrored4):
    with pytest.raises(ValueError, match="uneven"):
        DistributedInput(
            mirrored4,
            _source(),
            sampler="distributed",
            sampler_options={"padding": None},
            batch_size=2,
        )


def test_unknown_sampler_name():
    with pytest.raises(ValueError, match="sampler: must be one of"):
        DistributedInput(None, _source(), sampler="ra", batch_size=2)
