"""What checking TFRecord record counts as records are read costs (TFRecordSource.file_records).

``TFRecordSource.stream`` reads each shard through ``file_records``, which counts the records
of a file as they go by and, at the end of the file, checks the count against the manifest (a
shard holding fewer records than its manifest says used to end an epoch early, silently). Two
pipelines over the same shards, identical but for the reader, measured in one run:

* ``plain`` (baseline): ``interleave(TFRecordDataset)``, as the stream read before;
* ``checked``: ``interleave(src.file_records)``.

Each is timed twice per round -- records only (the worst case: the check's share of almost no
work) and records parsed and PNG-decoded as a training stream does -- rounds interleaved, the
medians of the per-round ratios reported (checked / plain throughput; 1.0 = free).

Usage:
    python benchmarks/bench_tfrecord_counts.py            # 40,000 records, 7 rounds
    python benchmarks/bench_tfrecord_counts.py --quick    # 10,000 records, 3 rounds

The headline figures come last, one ``name: value`` per line.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

from tfdp.sources import TFRecordSource, write_tfrecords


def _pipeline(src: TFRecordSource, checked: bool, parse: bool) -> tf.data.Dataset:
    files = tf.data.Dataset.from_tensor_slices(src.files)
    read = src.file_records if checked else (lambda f: tf.data.TFRecordDataset(f))
    ds = files.interleave(
        read, cycle_length=min(16, len(src.files)), num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )  # fmt: skip
    if parse:
        ds = ds.map(src.parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return ds.batch(256).prefetch(tf.data.AUTOTUNE)


def _rate(ds: tf.data.Dataset, n: int) -> float:
    t0 = time.perf_counter()
    seen = 0
    for batch in ds:
        seen += int(tf.nest.flatten(batch)[0].shape[0])
    elapsed = time.perf_counter() - t0
    assert seen == n, (seen, n)
    return n / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer records and rounds")
    args = parser.parse_args()
    n, rounds = (10_000, 3) if args.quick else (40_000, 7)
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8)
    out = tempfile.mkdtemp(prefix="bench_counts_")
    write_tfrecords((images, np.arange(n) % 10), out, num_shards=16)
    src = TFRecordSource(os.path.join(out, "data.manifest.json"))
    pipes = {
        (checked, parse): _pipeline(src, checked, parse)
        for checked in (False, True)
        for parse in (False, True)
    }
    for ds in pipes.values():  # warm-up: traced functions, file cache
        _rate(ds, n)
    ratios: dict[bool, list[float]] = {False: [], True: []}
    rates: dict[tuple[bool, bool], list[float]] = {k: [] for k in pipes}
    for _ in range(rounds):
        for parse in (False, True):
            plain = _rate(pipes[(False, parse)], n)
            checked = _rate(pipes[(True, parse)], n)
            rates[(False, parse)].append(plain)
            rates[(True, parse)].append(checked)
            ratios[parse].append(checked / plain)
    print(f"{n} records of 32x32x3 PNG in 16 shards, {rounds} rounds, medians [min-max]")
    for parse, label in ((False, "records only"), (True, "parsed + decoded")):
        for checked in (False, True):
            r = rates[(checked, parse)]
            name = "checked" if checked else "plain"
            print(
                f"  {label:17s} {name:8s} {statistics.median(r):10.0f} records/s "
                f"[{min(r):.0f}-{max(r):.0f}]"
            )
    print(f"count_check_ratio_records_only: {statistics.median(ratios[False]):.3f}")
    print(f"count_check_ratio_parsed: {statistics.median(ratios[True]):.3f}")


if __name__ == "__main__":
    main()
