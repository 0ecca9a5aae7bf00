"""A worker's local ranks read a JPEG TFRecord stream as one: the same elements as rank by rank.

The reference is the ranks' own streams (:meth:`DistributedInput.rank_dataset`,
each rank's batches read and augmented alone), interleaved as PER_WORKER
input mode deals them; :func:`step_rows` is checked against its definition.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from photos import encode, photo, write_folder
from tfdp import augment
from tfdp.input import DistributedInput
from tfdp.input.examples import ExamplePipeline
from tfdp.input.streams import step_rows
from tfdp.random import sample_seeds
from tfdp.sources import ImageFolderSource, TFRecordSource, write_tfrecords

SIZES = ((45, 60), (60, 45), (33, 50), (50, 33))


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    root = write_folder(tmp_path_factory.mktemp("photos"), 12, classes=4, sizes=SIZES, seed=9)
    return write_tfrecords(ImageFolderSource(root), tmp_path_factory.mktemp("shards"), num_shards=4)


def _augment(mix: bool):
    stages = [augment.RandomResizedCrop(12, scale=(0.05, 1.0)), augment.RandomFlip()]
    stages.append(augment.Normalize((120.0, 115.0, 100.0), (60.0, 57.0, 58.0)))
    if mix:
        stages.append(augment.Mixup(num_classes=4))
    return augment.Compose(stages)


def _numpy(ds) -> list:
    return [tf.nest.map_structure(lambda t: t.numpy(), x) for x in ds]


@pytest.mark.parametrize(
    ("replicas", "workers", "sampler", "options", "mix", "start", "epochs"),
    [
        (2, 1, "repeat_aug", {"num_repeats": 3, "selected_round": 0}, False, 0, 2),
        (2, 1, "repeat_aug", {"num_repeats": 2, "selected_round": 0}, True, 1, 1),
        (4, 2, "distributed", {}, False, 1, 2),
    ],
)
def test_shared_stream_equals_the_ranks_own_streams(
    shards, mirrored_of, replicas, workers, sampler, options, mix, start, epochs
):
    inp = DistributedInput(
        mirrored_of(replicas),
        TFRecordSource(shards, images="encoded", shuffle_buffer=4),
        sampler=sampler,
        sampler_options=options,
        batch_size=3,
        augment=_augment(mix),
        seed=5,
        with_weights=True,
        return_ids=True,
    )
    local = replicas // workers
    worker = workers - 1
    ranks = [worker * local + j for j in range(local)]
    assert inp.loader.shared(ranks, 1, epochs, start) is not None  # the path taken
    ctx = tf.distribute.InputContext(workers, worker, replicas)
    got = _numpy(inp.worker_dataset(ctx, first_epoch=1, num_epochs=epochs, start_step=start))
    own = [_numpy(inp.rank_dataset(r, 1, epochs, start)) for r in ranks]
    want = [batch for step in zip(*own, strict=True) for batch in step]
    assert len(got) == len(want) == local * (epochs * inp.steps_per_epoch - start)
    tf.nest.map_structure(np.testing.assert_array_equal, got, want)


def test_one_rank_or_unequal_ranks_read_rank_by_rank(shards, mirrored_of):
    inp = DistributedInput(
        mirrored_of(2),
        TFRecordSource(shards, images="encoded"),
        sampler="repeat_aug",
        sampler_options={"selected_round": 0},
        batch_size=2,
        augment=_augment(False),
    )
    assert inp.loader.shared([0], 0, 1, 0) is None
    decoded = DistributedInput(
        mirrored_of(2),
        TFRecordSource(shards),
        sampler="repeat_aug",
        sampler_options={"selected_round": 0},
        batch_size=2,
        augment=_augment(False),
    )  # records decoded one by one: nothing shared
    assert decoded.loader.shared([0, 1], 0, 1, 0) is None
    assert step_rows([(np.arange(4), np.arange(4)), (np.arange(3), np.arange(3))], 2) is None


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 4),
    st.integers(1, 3),
    st.integers(0, 3),
    st.randoms(use_true_random=False),
)
def test_step_rows_deal_back_to_the_ranks_batches(ranks, batch, steps, rnd):
    per_rank = []
    for _ in range(ranks):
        n = steps * batch + rnd.randrange(batch)  # a partial batch is dropped
        per_rank.append(
            (
                np.array([rnd.randrange(6) for _ in range(n)]),
                np.array([rnd.randrange(99) for _ in range(n)]),
            )
        )
    idx, pos, slot = step_rows(per_rank, batch)
    width = ranks * batch
    assert idx.shape == pos.shape == slot.shape == (steps * width,)
    for t in range(steps):
        rows = slice(t * width, (t + 1) * width)
        assert np.all(np.diff(idx[rows]) >= 0)  # stream order within the step
        assert sorted(slot[rows].tolist()) == list(range(width))
        for k in range(width):  # the row at k is rank j's entry b of step t
            j, b = divmod(int(slot[rows][k]), batch)
            assert idx[rows][k] == per_rank[j][0][t * batch + b]
            assert pos[rows][k] == per_rank[j][1][t * batch + b]


def test_encoded_records_through_the_window_plan_equal_the_augmentation():
    rng = np.random.default_rng(3)
    images = [encode(photo(h, w, rng)) for h, w in SIZES] + [encode(photo(30, 41, rng), "PNG")]
    rows = [0, 1, 0, 2, 3, 4, 0, 4]  # copies of an image among them, and a PNG
    data = tf.constant([images[i] for i in rows])
    seeds = sample_seeds(
        tf.fill([len(rows)], tf.constant(11, tf.int64)), tf.range(8, dtype=tf.int64)
    )
    aug = _augment(False)
    for example in ((data, tf.range(8)), {"image": data, "label": tf.range(8)}):
        ex = ExamplePipeline(
            None, aug, batch_size=8, drop_remainder=True, with_weights=False, return_ids=False
        )
        assert ex._records_plan is not None  # the window plan is the path taken
        got, want = ex.augment_records(example, seeds), aug(example, seeds)
        tf.nest.map_structure(np.testing.assert_array_equal, got, want)
    mixing = ExamplePipeline(
        None,
        _augment(True),
        batch_size=8,
        drop_remainder=True,
        with_weights=False,
        return_ids=False,
    )
    assert mixing._records_plan is None  # a stage that mixes samples: the augmentation itself
