"""Writing a source or arrays as balanced TFRecord shards plus a manifest (:func:`write_tfrecords`).

This module owns the writer: what structure and features an input has, the
order examples are written in, and the crash-safe write (shards under
temporary names, renamed, then the manifest written atomically).
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from tfdp._util import temp_name, write_text_atomic
from tfdp.errors import ConfigError, DataError
from tfdp.indices import KeyedPermutation
from tfdp.sources.base import EncodedImageSource, PathSource, RandomAccessSource, WeightedSource
from tfdp.sources.tfrecord.manifest import FORMAT, MANIFEST_SUFFIX, VERSION
from tfdp.sources.tfrecord.schema import (
    Feature,
    check_encoding,
    dtype_name,
    encode_image,
    infer_encoding,
    to_feature,
)


def _components(structure: str, example: Any, keys: Sequence[Any]) -> list[Any]:
    if structure == "single":
        return [example]
    if structure == "dict":
        return [example[k] for k in keys]
    return list(example)


def _plan_features(
    structure: str,
    keys: Sequence[Any],
    specs: Sequence[tuple[str, tuple[int | None, ...]]],
    features: Any,
    jpeg_files: bool = False,
) -> list[Feature]:
    """Names and encodings of the components, from the defaults and ``features``."""
    n = len(specs)
    if structure == "dict":
        names = [str(k) for k in keys]
    elif n == 2:
        names = ["image", "label"]
    else:
        names = [f"f{i}" for i in range(n)]
    encodings: list[str | None] = [None] * n
    if features is not None:
        if isinstance(features, Mapping):
            if structure == "dict":
                unknown = sorted(set(features) - set(names))
                if unknown:
                    raise ConfigError(
                        f"names keys the data does not have: {unknown}", argument="features"
                    )
                encodings = [features.get(k) for k in names]
            elif set(map(str, features)) <= set(names):  # encodings of default-named parts
                encodings = [features.get(k) for k in names]
            else:
                if len(features) != n:
                    raise ConfigError(
                        f"must name all {n} components of an example (or a subset of "
                        f"their default names {names}), got {list(features)}",
                        argument="features",
                    )
                names = [str(k) for k in features]
                encodings = list(features.values())
        elif isinstance(features, Sequence) and not isinstance(features, str):
            if structure == "dict" or len(features) != n:
                raise ConfigError(
                    f"a list of names names the {n} components of a tuple example; "
                    f"got {list(features)!r}",
                    argument="features",
                )
            names = [str(k) for k in features]
        else:
            raise ConfigError(
                f"must be None, a list of names, or a dict name -> encoding; got {features!r}",
                argument="features",
            )
    out = []
    for name, (dtype, shape), enc in zip(names, specs, encodings, strict=True):
        f = Feature(name, enc or infer_encoding(dtype, shape, jpeg_files), dtype, shape)
        check_encoding(f)
        out.append(f)
    all_keys = [k for f in out for k in f.parse_spec()]
    if len(set(all_keys)) != len(all_keys):
        raise ConfigError(f"feature names collide: {all_keys}", argument="features")
    return out


def _describe_input(data: Any) -> tuple[str, list[Any], list[tuple[str, tuple]], int]:
    """``(structure, keys, [(dtype, shape)], num_examples)`` of a source or arrays."""
    if isinstance(data, RandomAccessSource):
        spec = data.element_spec
        if isinstance(spec, Mapping):
            structure, keys, leaves = "dict", list(spec), list(spec.values())
        elif isinstance(spec, (tuple, list)):
            structure, keys, leaves = "tuple", list(range(len(spec))), list(spec)
        else:
            structure, keys, leaves = "single", [0], [spec]
        for leaf in leaves:
            if not isinstance(leaf, tf.TensorSpec) or leaf.shape.rank is None:
                raise ConfigError(
                    "write_tfrecords handles examples whose components are plain tensors of "
                    f"known rank (a tuple or dict of them); got element_spec {spec!r}",
                    argument="source_or_arrays",
                )
        specs = [(dtype_name(s.dtype), tuple(s.shape.as_list())) for s in leaves]
        return structure, keys, specs, int(data.num_examples)
    if isinstance(data, Mapping):
        structure, keys, arrays = "dict", list(data), [np.asarray(v) for v in data.values()]
    elif isinstance(data, (tuple, list)):
        structure, keys, arrays = "tuple", list(range(len(data))), [np.asarray(v) for v in data]
    elif isinstance(data, np.ndarray):
        structure, keys, arrays = "single", [0], [data]
    else:
        raise ConfigError(
            "write_tfrecords takes a source (num_examples and load) or a NumPy array, "
            f"tuple or dict of arrays; got {type(data).__name__}",
            argument="source_or_arrays",
        )
    if not arrays:
        raise ConfigError("no arrays given", argument="source_or_arrays")
    lengths = {str(k): (a.shape[0] if a.ndim else None) for k, a in zip(keys, arrays, strict=True)}
    if None in lengths.values() or len(set(lengths.values())) != 1:
        raise ConfigError(
            f"the arrays must share their first (example) axis; lengths: {lengths}",
            argument="source_or_arrays",
        )
    specs = [(dtype_name(a.dtype), tuple(a.shape[1:])) for a in arrays]
    return structure, keys, specs, int(arrays[0].shape[0])


def _example_stream(
    data: Any, structure: str, keys: list[Any], feats: list[Feature], order: np.ndarray
) -> Any:
    """Yield ``(source index, [component values])`` in ``order``, images already encoded."""
    image = [f.encoding in ("png", "jpeg") for f in feats]
    if isinstance(data, RandomAccessSource):
        weighted = isinstance(data, WeightedSource)
        as_is = isinstance(data, EncodedImageSource) and any(f.encoding == "jpeg" for f in feats)

        def fetch(index: tf.Tensor) -> tuple[tf.Tensor, tuple[tf.Tensor, ...], tf.Tensor, Any]:
            if as_is:  # the JPEG files byte for byte; the other components as loaded
                example, problem = data.load_encoded(index)
                parts = tuple(_components(structure, example, keys))
                return index, parts, tf.constant(1.0), problem
            if weighted:
                example, weight = data.load_with_weight(index)
            else:
                example, weight = data.load(index), tf.constant(1.0)
            parts = _components(structure, example, keys)
            parts = tuple(
                encode_image(p, f) if is_image else p
                for p, f, is_image in zip(parts, feats, image, strict=True)
            )
            return index, parts, tf.cast(weight, tf.float32), tf.constant("")

        ds = tf.data.Dataset.from_tensor_slices(order.astype(np.int64))
        ds = ds.map(fetch, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        has_paths = isinstance(data, PathSource)  # a runtime Protocol check: once, not per example

        def named(index: Any) -> str:
            index = int(index)
            where = data.path(index) if has_paths else f"index {index}"
            return f"example {index} ({where})"

        for index, parts, weight, problem in ds.prefetch(tf.data.AUTOTUNE).as_numpy_iterator():
            if problem:
                raise DataError(
                    f"write_tfrecords: {named(index)} cannot be stored with "
                    f"encoding 'jpeg': {problem.decode('utf-8', 'replace')}; fix or remove the "
                    "file, or choose encoding 'png' for the image"
                )
            if weight == 0:
                raise DataError(
                    f"write_tfrecords: {named(index)} could not be read and "
                    "would be written as a placeholder; fix or remove it and retry"
                )
            yield int(index), parts
        return
    arrays = _components(structure, data, keys)
    arrays = [np.asarray(a) for a in arrays]
    for index in order.tolist():
        parts = [a[index] for a in arrays]
        parts = [
            encode_image(p, f).numpy() if is_image else p
            for p, f, is_image in zip(parts, feats, image, strict=True)
        ]
        yield index, parts


def write_tfrecords(
    source_or_arrays: Any,
    out_dir: str | os.PathLike[str],
    *,
    num_shards: int,
    prefix: str = "data",
    features: Sequence[str] | Mapping[str, str | None] | None = None,
    progress: bool = False,
    shuffle_seed: int | None = 0,
    compression: str | None = None,
) -> list[str]:
    """Write a random-access source or arrays as balanced TFRecord shards plus a manifest.

    Shard ``i`` is ``<out_dir>/<prefix>-<i:05d>-of-<num_shards:05d>.tfrecord``;
    shard sizes differ by at most one record. Each record is a
    ``tf.train.Example`` with one entry per component of the example (see the
    module docstring for the encodings). The manifest
    ``<out_dir>/<prefix>.manifest.json`` lists the files (relative to
    ``out_dir``), their record counts, the features (name, encoding, dtype,
    shape and the ``tf.io`` parsing spec of each key), the example structure
    and the compression; :class:`TFRecordSource` reads it.

    Nothing is left half-written: shards are written under temporary names
    and renamed only once all succeeded, the manifest last (temp file, then
    ``os.replace``); on error the temporary files are removed and an existing
    dataset under the same names is untouched. ``out_dir`` must be a local
    directory. Files of an earlier write with a different ``num_shards`` are
    not removed (the new manifest does not list them).

    Args:
        source_or_arrays: A random-access source (``num_examples``,
            ``element_spec`` and ``load``; read through ``tf.data``, PNG
            encoding in parallel) or a NumPy array / tuple / dict of arrays
            sharing axis 0. A source with ``load_with_weight`` (e.g.
            ``ImageFolderSource(on_error="skip")``) makes the write fail on an
            example of weight 0 rather than store a placeholder.
        out_dir: Output directory (created if missing).
        num_shards: Number of files, ``1 <= num_shards <= num_examples``.
        prefix: File name prefix.
        features: Names and encodings. ``None``: dict keys, or for tuples
            ``("image", "label")`` when there are two components, else
            ``f0, f1, ...``; encodings inferred (uint8 images -> ``png``;
            the images of a source whose files are all JPEGs (an
            :class:`EncodedImageSource` such as an image folder of JPEGs) ->
            ``jpeg``, the files stored byte for byte; integers/bools ->
            ``int64``, float16/32 -> ``float``, strings -> ``bytes``, anything
            else or of varying shape -> ``raw``). A list
            of names renames tuple components; a dict ``name -> encoding``
            (``None`` = inferred) chooses encodings (for dict data, a subset
            of its keys).
        progress: Print one line per finished shard to stderr.
        shuffle_seed: Records are written in the order of
            ``KeyedPermutation(num_examples, shuffle_seed, 0)`` -- so that a
            class-sorted source (an image folder) does not give class-sorted
            shards, which a stream's local shuffle could not mix. ``None``
            keeps the source order.
        compression: ``None``, ``"GZIP"`` or ``"ZLIB"``.

    Returns:
        The shard paths, in shard order.

    Raises:
        ValueError: bad arguments, an unsupported dtype/encoding pair, an
            example whose shape differs from the spec (naming its index).

    Example:
        >>> import json, os, tempfile, numpy as np
        >>> out = tempfile.mkdtemp()
        >>> data = {"x": np.random.rand(7, 3).astype("float32"), "y": np.arange(7)}
        >>> files = write_tfrecords(data, out, num_shards=3, prefix="toy")
        >>> [os.path.basename(f) for f in files][:1]
        ['toy-00000-of-00003.tfrecord']
        >>> json.load(open(os.path.join(out, "toy.manifest.json")))["counts"]
        [3, 2, 2]
    """
    structure, keys, specs, n = _describe_input(source_or_arrays)
    if isinstance(num_shards, bool) or not isinstance(num_shards, (int, np.integer)):
        raise ConfigError(f"must be an integer, got {num_shards!r}", argument="num_shards")
    if n < 1:
        raise ConfigError("holds no example", argument="source_or_arrays")
    if not 1 <= num_shards <= n:
        raise ConfigError(
            f"must be in [1, num_examples={n}], got {num_shards}", argument="num_shards"
        )
    if not prefix or os.sep in prefix:
        raise ConfigError(f"must be a plain file name prefix, got {prefix!r}", argument="prefix")
    if compression not in (None, "", "GZIP", "ZLIB"):
        raise ConfigError(
            f"must be None, 'GZIP' or 'ZLIB', got {compression!r}", argument="compression"
        )
    compression = compression or None
    jpeg_files = isinstance(source_or_arrays, EncodedImageSource) and bool(
        source_or_arrays.jpeg_files
    )
    feats = _plan_features(structure, keys, specs, features, jpeg_files)
    out = os.fspath(out_dir)
    os.makedirs(out, exist_ok=True)
    num_shards = int(num_shards)
    sizes = [n // num_shards + (i < n % num_shards) for i in range(num_shards)]
    names = [f"{prefix}-{i:05d}-of-{num_shards:05d}.tfrecord" for i in range(num_shards)]
    finals = [os.path.join(out, name) for name in names]
    token = uuid.uuid4().hex
    temps = [temp_name(path, token) for path in finals]
    if shuffle_seed is None:
        order = np.arange(n, dtype=np.int64)
    else:
        order = KeyedPermutation(n, int(shuffle_seed), 0)(np.arange(n))
    options = tf.io.TFRecordOptions(compression_type=compression or "")
    stream = _example_stream(source_or_arrays, structure, keys, feats, order)
    try:
        for shard, (tmp, size) in enumerate(zip(temps, sizes, strict=True)):
            with tf.io.TFRecordWriter(tmp, options) as writer:
                for _ in range(size):
                    index, parts = next(stream)
                    record: dict[str, tf.train.Feature] = {}
                    for f, value in zip(feats, parts, strict=True):
                        record.update(to_feature(f, value, f"example {index}"))
                    example = tf.train.Example(features=tf.train.Features(feature=record))
                    writer.write(example.SerializeToString())
            if progress:
                print(
                    f"write_tfrecords: shard {shard + 1}/{num_shards} ({size} records) -> "
                    f"{finals[shard]}",
                    file=sys.stderr,
                    flush=True,
                )
        manifest = {
            "format": FORMAT,
            "version": VERSION,
            "num_examples": n,
            "files": names,
            "counts": sizes,
            "compression": compression,
            "structure": structure,
            "features": [f.describe() for f in feats],
            "shuffle_seed": shuffle_seed,
        }
        manifest_path = os.path.join(out, prefix + MANIFEST_SUFFIX)
        if os.path.exists(manifest_path):  # never leave an old manifest over new shards
            os.remove(manifest_path)
        for tmp, final in zip(temps, finals, strict=True):
            os.replace(tmp, final)
        write_text_atomic(manifest_path, json.dumps(manifest, indent=1) + "\n")
    except BaseException:
        for tmp in temps:
            if os.path.exists(tmp):
                os.remove(tmp)
        raise
    finally:
        stream.close()
    return finals
