"""TFRecord shard damage for the tests (one copy: test_dataspec and test_reliability use it)."""

from __future__ import annotations

from pathlib import Path


def rewrite_shard(path: Path, keep: int) -> int:
    """Rewrite a shard with its first ``keep`` records (valid records, fewer than listed).

    Returns how many records the shard held before.
    """
    import tensorflow as tf

    records = [r.numpy() for r in tf.data.TFRecordDataset(str(path))]
    with tf.io.TFRecordWriter(str(path)) as w:
        for r in records[:keep]:
            w.write(r)
    assert sum(1 for _ in tf.data.TFRecordDataset(str(path))) == keep
    return len(records)
