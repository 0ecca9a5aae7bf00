"""The streaming TFRecord source: an epoch is a stream of lanes (:class:`TFRecordSource`).

This module owns how an epoch's stream is laid out (files permuted and dealt
to lanes, block-shuffled lanes, stream index ``s = lane + m * L``), how a
rank reads only the records its sampler positions need, and the checked
reading of each file against its record count. See :mod:`tfdp.sources.tfrecord`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from tfdp._autograph import plain
from tfdp._util import check_int, deterministic_unsharded
from tfdp.errors import ConfigError, DataError
from tfdp.indices import KeyedPermutation
from tfdp.seeding import stream_block_key
from tfdp.sources.example_records import check_example
from tfdp.sources.tfrecord.manifest import (
    MAX_LISTED,
    count_records,
    find_manifests,
    map_threads,
    read_first_record,
    resolve_files,
)
from tfdp.sources.tfrecord.schema import Feature, manifest_decoder


class TFRecordSource:
    """A streaming source over TFRecord files: an epoch is a stream of lanes (see the module).

    Args:
        files: A glob pattern, a list of paths, or the path of a manifest
            written by :func:`write_tfrecords`. A pattern is expanded and
            sorted; a list keeps its order.
        features: ``tf.io`` parsing spec (``{key: tf.io.FixedLenFeature(...)}``
            etc.). ``None``: taken from the manifest (which must cover every
            file), decoding included.
        decode: ``parsed dict -> example``, graph-compatible. Default: with
            ``features=None``, the manifest's decoding (PNG -> uint8 image,
            raw -> array of its dtype and shape, ...) returning the written
            structure -- ``(image, label)`` for a two-component tuple; with
            explicit ``features``, the parsed values as a tuple in the key
            order of ``features`` (the bare value for a single key).
        images: ``"decoded"`` (default): ``jpeg`` features decode to uint8
            images. ``"encoded"``: they stay the JPEG bytes (a scalar string),
            for an augmentation that starts with a window stage
            (:class:`tfdp.augment.RandomResizedCrop`, ...): it decodes only
            each image's window (the same values as decoding it whole).
        shuffle_buffer: Each lane's records are shuffled in consecutive
            blocks of this many (``0`` or ``1``: not shuffled) by a stateless
            permutation keyed by ``(seed, epoch, lane)``; the buffer holds
            serialized records.
        counts: Records per file (a list aligned with the files, or a dict
            ``path -> count``), used when no manifest covers the files.
            Without a manifest or counts every file is read once at
            construction to count its records -- a full pass over the data in
            every process that builds the source.
        compression: ``None``, ``"GZIP"`` or ``"ZLIB"`` (default: the
            manifest's, else none).
        check_files: Read the first record of every file at construction and
            check it against ``features``, raising a ValueError that names the
            file and the feature on a mismatch (cheap: one record per file,
            read in parallel). Later records are not checked; a record that
            does not parse raises TensorFlow's error, which names the feature
            but not the file.
        cycle_length: Files of a lane read concurrently (interleaved).
        num_parallel_calls: Parallelism of reading and parsing.

    Attributes:
        files: The resolved file list (the order the per-epoch permutation acts on).
        counts: int64 array of records per file.
        num_examples: Total records.
        element_spec: Spec of one decoded example.
        manifest: The manifest used, or ``None``.

    Example:
        >>> import tempfile, numpy as np
        >>> out = tempfile.mkdtemp()
        >>> from tfdp.sources import write_tfrecords
        >>> files = write_tfrecords((np.zeros((12, 2, 2), "uint8"), np.arange(12)), out,
        ...                         num_shards=4)
        >>> src = TFRecordSource(files)
        >>> ds = src.stream([1, 3], num_replicas=2, seed=0, epoch=0)
        >>> [image.shape for image, label in ds]
        [TensorShape([2, 2]), TensorShape([2, 2])]
    """

    streaming = True

    def __init__(
        self,
        files: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        features: Mapping[str, Any] | None = None,
        *,
        decode: Callable[[dict[str, Any]], Any] | None = None,
        images: str = "decoded",
        shuffle_buffer: int = 1024,
        counts: Sequence[int] | Mapping[str, int] | None = None,
        compression: str | None = None,
        check_files: bool = True,
        cycle_length: int = 16,
        num_parallel_calls: int = tf.data.AUTOTUNE,
    ) -> None:
        if images not in ("decoded", "encoded"):
            raise ConfigError(f"must be 'decoded' or 'encoded', got {images!r}", argument="images")
        paths, manifest = resolve_files(files)
        if len(set(paths)) != len(paths):
            raise ConfigError("TFRecordSource: a file is listed twice", argument="files")
        missing = [p for p in paths if not tf.io.gfile.exists(p)]
        if missing:
            raise FileNotFoundError(
                f"TFRecordSource: {len(missing)} file(s) not found: {missing[:MAX_LISTED]}"
            )
        self.files = paths
        self.shuffle_buffer = check_int("shuffle_buffer", shuffle_buffer, 0)
        self.cycle_length = check_int("cycle_length", cycle_length, 1)
        self.num_parallel_calls = num_parallel_calls
        if compression not in (None, "", "GZIP", "ZLIB"):
            raise ConfigError(
                f"must be None, 'GZIP' or 'ZLIB', got {compression!r}", argument="compression"
            )

        by_file = {}
        if manifest is not None:
            by_file = {os.path.normpath(f): manifest for f in manifest["files"]}
        else:
            by_file = find_manifests(paths)
        covered = [by_file.get(os.path.normpath(p)) for p in paths]
        manifests = [m for m in covered if m is not None]
        if len(manifests) == len(paths):
            self.manifest: dict[str, Any] | None = manifests[0]
        else:
            self.manifest = None
        if manifests:
            mcomp = {m.get("compression") for m in manifests}
            if len(mcomp) == 1:
                (mc,) = mcomp
                if compression and mc and compression != mc:
                    raise ConfigError(
                        f"{compression!r}, but the manifest says {mc!r}", argument="compression"
                    )
                compression = compression or mc
        self.compression = compression or None

        # -- features and decoding --
        if features is None:
            if self.manifest is None:
                raise ConfigError(
                    "TFRecordSource: features=None needs a manifest (written by "
                    "write_tfrecords) covering every file; pass features= otherwise"
                )
            descs = [tuple(map(json.dumps, m["features"])) for m in manifests]
            if len(set(descs)) != 1:
                raise DataError(
                    "TFRecordSource: the files come from manifests with different features"
                )
            feats = [Feature.from_description(d) for d in self.manifest["features"]]
            spec: dict[str, Any] = {}
            for f in feats:
                spec.update(f.parse_spec())
            self.features: dict[str, Any] = spec
            if decode is None:
                decode = manifest_decoder(
                    feats, self.manifest["structure"], encoded_images=images == "encoded"
                )
        else:
            if not isinstance(features, Mapping) or not features:
                raise ConfigError(
                    f"must be a non-empty dict of tf.io feature specs, got {features!r}",
                    argument="features",
                )
            self.features = dict(features)
            if decode is None:
                keys = list(self.features)
                if len(keys) == 1:
                    (only,) = keys

                    def decode(parsed: dict[str, Any]) -> Any:
                        return parsed[only]
                else:

                    def decode(parsed: dict[str, Any]) -> Any:
                        return tuple(parsed[k] for k in keys)

        self._decode = decode

        # -- record counts --
        self.counts = self._resolve_counts(paths, covered, counts)
        self.num_examples = int(self.counts.sum())

        if check_files:
            self._check_first_records()
        self.element_spec = (
            tf.data.Dataset.from_tensors(tf.constant(b"")).map(plain(self.parse)).element_spec
        )

    # -- construction helpers --------------------------------------------------------------
    def _resolve_counts(self, paths: list[str], covered: list[Any], counts: Any) -> np.ndarray:
        from_manifest = None
        if all(m is not None for m in covered):
            from_manifest = []
            for p, m in zip(paths, covered, strict=True):
                names = [os.path.normpath(f) for f in m["files"]]
                from_manifest.append(int(m["counts"][names.index(os.path.normpath(p))]))
        given = None
        if counts is not None:
            if isinstance(counts, Mapping):
                norm = {os.path.normpath(os.fspath(k)): v for k, v in counts.items()}
                lost = [p for p in paths if os.path.normpath(p) not in norm]
                if lost:
                    raise ConfigError(f"has no entry for {lost[:MAX_LISTED]}", argument="counts")
                given = [norm[os.path.normpath(p)] for p in paths]
            else:
                given = list(counts)
                if len(given) != len(paths):
                    raise ConfigError(
                        f"has {len(given)} entries for {len(paths)} files", argument="counts"
                    )
            given = [check_int("counts[...]", c, 0) for c in given]
        if from_manifest is not None:
            if given is not None and given != from_manifest:
                raise DataError("counts= disagrees with the manifest's record counts")
            return np.asarray(from_manifest, np.int64)
        if given is not None:
            return np.asarray(given, np.int64)
        return np.asarray(
            map_threads(lambda p: count_records(p, self.compression), paths), np.int64
        )

    def _check_first_records(self) -> None:
        todo = [p for p, c in zip(self.files, self.counts, strict=True) if c > 0]
        if not todo:
            return
        firsts = map_threads(lambda p: read_first_record(p, self.compression), todo)
        for path, record in zip(todo, firsts, strict=True):
            if record is None:
                raise DataError(f"{path}: expected records, found none")
            check_example(record, self.features, path)
            try:
                tf.io.parse_single_example(record, self.features)
            except (tf.errors.OpError, ValueError, TypeError) as err:
                msg = err.message if isinstance(err, tf.errors.OpError) else str(err)
                raise DataError(
                    f"{path}: the first record does not match features: {msg.splitlines()[0]}"
                ) from None
        try:
            self.parse(firsts[0])
        except (tf.errors.OpError, ValueError, TypeError) as err:
            msg = err.message if isinstance(err, tf.errors.OpError) else str(err)
            raise DataError(
                f"{todo[0]}: decoding its first record failed: {msg.splitlines()[0]}"
            ) from None

    # -- public API ------------------------------------------------------------------------
    def parse(self, record: Any) -> Any:
        """Parse and decode one serialized record into an example (graph-compatible).

        Example:
            >>> import tempfile, numpy as np
            >>> out = tempfile.mkdtemp()
            >>> from tfdp.sources import write_tfrecords
            >>> files = write_tfrecords((np.ones((2, 3), "float32"), np.arange(2)), out,
            ...                         num_shards=1, shuffle_seed=None)
            >>> src = TFRecordSource(files)
            >>> record = next(iter(tf.data.TFRecordDataset(files)))
            >>> x, y = src.parse(record)
            >>> x.numpy().tolist(), int(y)
            ([1.0, 1.0, 1.0], 0)
        """
        return self._decode(tf.io.parse_single_example(record, self.features))

    # -- the stream ----------------------------------------------------------------------
    def num_lanes(self, num_replicas: int) -> int:
        """Lanes of an epoch's stream: ``min(files, num_replicas)``.

        Example:
            >>> import tempfile, numpy as np
            >>> from tfdp.sources import write_tfrecords
            >>> files = write_tfrecords(np.zeros((8, 1), "float32"), tempfile.mkdtemp(),
            ...                         num_shards=4)
            >>> TFRecordSource(files).num_lanes(2), TFRecordSource(files).num_lanes(8)
            (2, 4)
        """
        return min(len(self.files), check_int("num_replicas", num_replicas, 1))

    def stream_length(self, num_replicas: int) -> int:
        """Records of every epoch's stream for ``num_replicas`` replicas (``N_eff``).

        ``L = num_lanes`` lanes of ``M`` records each, ``M`` the records of the
        smallest lane the file permutation can make (the ``F // L`` smallest
        files), so the length is the same in every epoch. A lane's records
        past ``M`` are dropped that epoch: less than one record per file when
        the shards are balanced (as :func:`write_tfrecords` makes them) and
        the number of files is a multiple of ``L``.

        Example:
            >>> import tempfile, numpy as np
            >>> from tfdp.sources import write_tfrecords
            >>> files = write_tfrecords(np.zeros((100, 1), "float32"), tempfile.mkdtemp(),
            ...                         num_shards=8)  # 4 files of 13, 4 of 12
            >>> TFRecordSource(files).stream_length(num_replicas=4)  # 4 lanes of 12 + 12
            96
        """
        lanes = self.num_lanes(num_replicas)
        smallest = np.sort(self.counts)[: len(self.files) // lanes]
        return lanes * int(smallest.sum())

    def lane_files(
        self, lane: int, *, num_replicas: int, seed: int, epoch: int, shuffle: bool = True
    ) -> list[str]:
        """The files of ``lane`` in ``epoch``, in reading order.

        Lane ``j`` reads ``files[perm[j::L]]``, ``perm`` the epoch's permutation
        of the files (keyed by ``(seed, epoch)``; the identity when
        ``shuffle=False``), its files interleaved record by record.

        Example:
            >>> import tempfile, numpy as np
            >>> from tfdp.sources import write_tfrecords
            >>> files = write_tfrecords(np.zeros((8, 1), "float32"), tempfile.mkdtemp(),
            ...                         num_shards=4)
            >>> src = TFRecordSource(files)
            >>> lanes = [src.lane_files(j, num_replicas=2, seed=0, epoch=0) for j in (0, 1)]
            >>> [len(f) for f in lanes], sorted(lanes[0] + lanes[1]) == sorted(files)
            ([2, 2], True)
            >>> src.lane_files(1, num_replicas=2, seed=0, epoch=0, shuffle=False) == files[1::2]
            True
        """
        lanes = self.num_lanes(num_replicas)
        check_int("lane", lane, 0, lanes - 1)
        check_int("seed", seed, 0, 2**64 - 1)
        check_int("epoch", epoch, 0)
        order = np.arange(len(self.files))
        if shuffle:
            order = KeyedPermutation(len(self.files), seed, epoch)(order)
        return [self.files[i] for i in order[lane::lanes]]

    def _lane_records(
        self, lane: int, lanes: int, seed: int, epoch: tf.Tensor, shuffle: bool
    ) -> tf.data.Dataset:
        """Lane ``lane``'s serialized records in ``epoch`` (a scalar int64 tensor)."""

        def files_of(e: Any) -> np.ndarray:
            names = self.lane_files(
                lane, num_replicas=lanes, seed=seed, epoch=int(e), shuffle=shuffle
            )
            return np.array(names, dtype=object)

        files = tf.numpy_function(files_of, [epoch], tf.string, stateful=False)
        files.set_shape([None])
        most = -(-len(self.files) // lanes)  # files in the largest lane
        ds = tf.data.Dataset.from_tensor_slices(files).interleave(
            plain(self.file_records),  # counts checked against the manifest as they are read
            cycle_length=min(self.cycle_length, most),
            block_length=1,
            num_parallel_calls=self.num_parallel_calls,
            deterministic=True,
        )
        if shuffle and self.shuffle_buffer > 1:
            key = tf.numpy_function(
                lambda e: np.int64(stream_block_key(seed, int(e), lane)),
                [epoch],
                tf.int64,
                stateful=False,
            )
            key.set_shape([])
            ds = ds.batch(self.shuffle_buffer).enumerate()
            ds = ds.map(
                plain(
                    lambda block, records: tf.random.experimental.stateless_shuffle(
                        records, seed=tf.stack([key, block])
                    )
                ),
                num_parallel_calls=self.num_parallel_calls,
                deterministic=True,
            )
            ds = ds.unbatch()
        return ds

    def stream(
        self,
        indices: Any,
        *,
        num_replicas: int,
        seed: int = 0,
        epoch: int | tf.Tensor = 0,
        shuffle: bool = True,
    ) -> tf.data.Dataset:
        """The examples at ``indices`` of an epoch's stream, in that order (repeats allowed).

        An epoch's stream is ``L = num_lanes(num_replicas)`` lanes (see
        :meth:`lane_files`), each block-shuffled by a key of ``(seed, epoch,
        lane)`` when ``shuffle`` is on, and indexed ``s = j + m * L`` for
        lane ``j``'s ``m``-th record, ``s < stream_length(num_replicas)``. A
        sampler over ``stream_length`` records, with the identity permutation,
        says which ``s`` a rank takes -- :class:`tfdp.DistributedInput` does
        exactly that, so every sampler option (padding, ``drop_last``,
        integer and fractional repeats, selection) means on a stream what it
        means on an array. The rank opens only the lanes its indices fall in,
        reads each no further than the last record it needs, keeps the
        records it needs (a repeated or wrapped index re-reads the lane in a
        further pass) and merges the lanes in the order of ``indices``; only
        the kept records are parsed. The same arguments give the same stream
        in every run.

        Args:
            indices: 1-D stream indices (int64), in the order to yield them.
            num_replicas: The world size, which fixes the lanes.
            seed: Keys the file permutation and the block shuffle.
            epoch: The epoch: a Python int, or a scalar int64 tensor (inside
                ``tf.data.Dataset.flat_map``) when ``indices`` do not depend on it.
            shuffle: Permute the files and shuffle blocks; False reads the
                files in order, each lane interleaving its files.

        Raises:
            ValueError: for an index outside ``[0, stream_length)``.

        Example:
            >>> import tempfile, numpy as np
            >>> from tfdp.sources import write_tfrecords
            >>> files = write_tfrecords((np.zeros((8, 1), "float32"), np.arange(8)),
            ...                         tempfile.mkdtemp(), num_shards=2, shuffle_seed=None)
            >>> src = TFRecordSource(files)  # files hold ids 0-3 and 4-7
            >>> ds = src.stream([0, 1, 2, 3, 0], num_replicas=2, shuffle=False)
            >>> [int(label) for _, label in ds]  # s = lane + 2 * m
            [0, 4, 1, 5, 0]
        """
        lanes = self.num_lanes(num_replicas)
        per_lane = self.stream_length(num_replicas) // lanes
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        if idx.size and (idx.min() < 0 or idx.max() >= lanes * per_lane):
            raise ConfigError(
                f"stream indices must lie in [0, {lanes * per_lane}) (stream_length for "
                f"num_replicas={num_replicas}), got values in [{idx.min()}, {idx.max()}]"
            )
        seed = check_int("seed", seed, 0, 2**64 - 1)
        epoch_t = tf.cast(epoch, tf.int64)
        lane, pos = idx % lanes, idx // lanes
        choice = np.zeros(idx.shape, np.int64)
        parts = []
        for j in np.unique(lane):
            where = np.flatnonzero(lane == j)
            ms = pos[where]
            # A lane read once yields its records in order: split the lane's wanted
            # records into non-decreasing runs, one pass over the lane each.
            for run in np.split(np.arange(ms.size), np.flatnonzero(np.diff(ms) < 0) + 1):
                choice[where[run]] = len(parts)
                parts.append(self._lane_pass(int(j), lanes, seed, epoch_t, shuffle, ms[run]))
        if not parts:
            ds = tf.data.Dataset.from_tensor_slices(tf.constant([], tf.string))
        elif len(parts) == 1:
            ds = parts[0]
        else:
            ds = tf.data.Dataset.choose_from_datasets(
                parts, tf.data.Dataset.from_tensor_slices(choice)
            )
        ds = ds.map(
            plain(self.parse), num_parallel_calls=self.num_parallel_calls, deterministic=True
        )
        return deterministic_unsharded(ds)

    def _lane_pass(
        self,
        lane: int,
        lanes: int,
        seed: int,
        epoch: tf.Tensor,
        shuffle: bool,
        wanted: np.ndarray,
    ) -> tf.data.Dataset:
        """One read of a lane yielding its records ``wanted`` (non-decreasing, repeats kept)."""
        lo, hi = int(wanted[0]), int(wanted[-1]) + 1
        ds = self._lane_records(lane, lanes, seed, epoch, shuffle).skip(lo).take(hi - lo)
        if wanted.size == hi - lo and np.array_equal(wanted, np.arange(lo, hi)):
            return ds  # every record of a range, once: no filter
        counts = np.bincount(wanted - lo, minlength=hi - lo)
        if counts.max() == 1:
            keep = tf.constant(counts > 0)
            kept = ds.enumerate().filter(plain(lambda i, _: keep[i]))
            return kept.map(plain(lambda _, record: record))
        times = tf.constant(counts, tf.int64)
        return ds.enumerate().flat_map(
            plain(lambda i, record: tf.data.Dataset.from_tensors(record).repeat(times[i]))
        )

    def __len__(self) -> int:
        return self.num_examples

    def __repr__(self) -> str:
        return (
            f"TFRecordSource(files={len(self.files)}, num_examples={self.num_examples}, "
            f"features={sorted(self.features)}, manifest={self.manifest is not None})"
        )

    # -- checked reading (added for issue 10; keep at the end of the class) ---------------
    def file_records(self, path: Any) -> tf.data.Dataset:
        """The serialized records of ``path`` (one of ``files``), checked against ``counts``.

        Graph-compatible (``path`` may be a string tensor, as in ``interleave``)
        and free (TensorFlow's ``assert_cardinality``, no per-record Python
        function): a file holding more or fewer records than its count (from
        the manifest, ``counts=`` or the count at construction) -- or a
        truncated or corrupt record, which ends what can be read of the file --
        raises ``FailedPreconditionError`` ("Input dataset was expected to
        contain N elements but contained only M elements") when the file is
        read to its end, instead of an epoch that silently yields fewer
        batches than ``steps_per_epoch`` promised. TensorFlow's message cannot
        name the file: :meth:`count_problems` does.

        Example:
            >>> import tempfile, numpy as np
            >>> from tfdp.sources import write_tfrecords
            >>> files = write_tfrecords(np.zeros((6, 2), "float32"), tempfile.mkdtemp(),
            ...                         num_shards=2)
            >>> src = TFRecordSource(files)
            >>> sum(1 for _ in src.file_records(files[0]))
            3
            >>> with open(files[0], "ab") as fh:  # records appended after the manifest
            ...     _ = fh.write(open(files[1], "rb").read())
            >>> sum(1 for _ in src.file_records(files[0]))
            Traceback (most recent call last):
            ...
            tensorflow.python.framework.errors_impl.FailedPreconditionError: ...
            >>> src.count_problems()  # doctest: +ELLIPSIS
            ['.../data-00000-of-00002.tfrecord holds 6 readable records, not the 3 listed...']
        """
        path = tf.convert_to_tensor(path, tf.string)
        expected = tf.reduce_sum(
            tf.where(
                tf.equal(tf.constant(self.files), path),
                tf.constant(self.counts, tf.int64),
                tf.constant(0, tf.int64),
            )
        )
        records = tf.data.TFRecordDataset(path, compression_type=self.compression or "")
        records = records.ignore_errors(log_warning=False)  # a torn record ends the file
        return records.apply(tf.data.experimental.assert_cardinality(expected))

    def count_problems(self) -> list[str]:
        """Files whose readable records differ from their counts, one line each (a full read).

        The diagnosis behind a ``FailedPreconditionError`` of :meth:`file_records`.

        Example:
            >>> import tempfile, numpy as np
            >>> from tfdp.sources import write_tfrecords
            >>> files = write_tfrecords(np.zeros((4, 2), "float32"), tempfile.mkdtemp(),
            ...                         num_shards=2)
            >>> TFRecordSource(files).count_problems()
            []
        """

        def readable(path: str) -> int:
            ds = tf.data.TFRecordDataset(path, compression_type=self.compression or "")
            return int(ds.ignore_errors(log_warning=False).reduce(np.int64(0), lambda n, _: n + 1))

        found = map_threads(readable, self.files)
        return [
            f"{path} holds {got} readable records, not the {int(want)} listed for it (the file "
            f"is truncated or corrupt after record {got}, or was rewritten after its manifest)"
            if got < want
            else f"{path} holds {got} readable records, not the {int(want)} listed for it (it "
            "was rewritten after its manifest)"
            for path, got, want in zip(self.files, found, self.counts, strict=True)
            if got != want
        ]
