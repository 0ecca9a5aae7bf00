"""TFRecord shards: a writer for any source or arrays, and a streaming source for training.

This module owns :func:`write_tfrecords` (source or arrays -> balanced
``tf.train.Example`` shards plus a JSON manifest) and :class:`TFRecordSource`,
a *streaming* source: TFRecord files cannot be read by index, so an epoch is
a stream that ranks read in file-sized pieces, and a sampler says which
records of it each rank keeps.

The stream of an epoch for ``W`` replicas: the files are permuted by a key of
``(seed, epoch)`` and dealt to ``L = min(files, W)`` *lanes* (lane ``j``
reads ``files[perm[j::L]]``, interleaved record by record, then shuffled in
blocks by a key of ``(seed, epoch, j)``); stream index ``s = j + m * L`` is
lane ``j``'s ``m``-th record. Every epoch's stream has the same length,
``stream_length(W) = L * M``, ``M`` the records of the smallest lane the
permutation can make (records past ``M`` in a lane are dropped that epoch).
:class:`tfdp.DistributedInput` runs the ordinary sampler arithmetic on that
length with the identity permutation, so every sampler option -- padding,
``drop_last``, Repeated Augmentation with integer or fractional repeats,
selection -- gives a stream epoch of exactly the length and layout it gives
an array of ``stream_length`` examples: with ``W`` files or more a plain
``DistributedSampler`` rank reads one lane, a Repeated-Augmentation rank
reads the ``R`` lanes holding its copies (the ``R`` copies of a record land
on ``R`` different ranks in nearby steps, as DeiT's do).

The records :func:`write_tfrecords` writes (one ``tf.train.Example`` per
example; the manifest says which encoding each feature uses):

=========  =====================================================================
encoding   what the record holds under the feature's name ``k``
=========  =====================================================================
``png``    ``k``: one PNG (uint8 images ``[H, W]``/``[H, W, C]``, C in 1, 3, 4; sizes may vary)
``jpeg``   ``k``: one JPEG (uint8 ``[H, W]``/``[H, W, C]``, C in 1, 3): an image folder's JPEG file
           byte for byte (the default for a folder of JPEGs), arrays encoded at quality 95
``raw``    ``k``: the array's little-endian bytes; ``k/shape``: its shape (int64 list)
``int64``  ``k``: the values as an int64 list (integers and bools of a fixed shape)
``float``  ``k``: the values as a float list (float16/float32 of a fixed shape)
``bytes``  ``k``: the values as a bytes list (strings of a fixed shape)
=========  =====================================================================

Example:
    >>> import tempfile, numpy as np
    >>> out = tempfile.mkdtemp()
    >>> images = np.zeros((10, 4, 4, 3), np.uint8)
    >>> files = write_tfrecords((images, np.arange(10)), out, num_shards=2)
    >>> src = TFRecordSource(files)  # features and counts from the manifest
    >>> src.num_examples, src.stream_length(num_replicas=2)
    (10, 10)
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import sys
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

from tfdp.indices import KeyedPermutation
from tfdp.seeding import stream_block_key
from tfdp.sources.base import EncodedImageSource, PathSource, RandomAccessSource, WeightedSource
from tfdp.sources.example_records import check_example

__all__ = ["MANIFEST_SUFFIX", "TFRecordSource", "read_manifest", "write_tfrecords"]

#: The manifest of ``write_tfrecords(..., prefix=p)`` is ``<out_dir>/<p>.manifest.json``.
MANIFEST_SUFFIX = ".manifest.json"
_FORMAT = "tfdp.tfrecord"
_VERSION = 1
_ENCODINGS = ("png", "jpeg", "raw", "int64", "float", "bytes")
_JPEG_QUALITY = 95  # arrays written with encoding "jpeg" (lossy)
_IO_THREADS = 16
# tf.io.decode_raw has no unsigned 32/64-bit output: read as signed, then bitcast.
_RAW_VIA = {"uint32": tf.int32, "uint64": tf.int64}
_MAX_LISTED = 5


# ----------------------------------------------------------------------------------------
# Feature encodings
# ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Feature:
    """One component of an example and how it is stored in a record."""

    name: str
    encoding: str
    dtype: str  # NumPy dtype name, or "string"
    shape: tuple[int | None, ...]

    @property
    def tf_dtype(self) -> tf.DType:
        return tf.string if self.dtype == "string" else tf.as_dtype(self.dtype)

    def parse_spec(self) -> dict[str, Any]:
        if self.encoding in ("png", "jpeg", "raw"):
            spec = {self.name: tf.io.FixedLenFeature([], tf.string)}
            if self.encoding == "raw":
                spec[f"{self.name}/shape"] = tf.io.FixedLenFeature([len(self.shape)], tf.int64)
            return spec
        dtype = {"int64": tf.int64, "float": tf.float32, "bytes": tf.string}[self.encoding]
        return {self.name: tf.io.FixedLenFeature(list(self.shape), dtype)}

    def decode(self, parsed: Mapping[str, tf.Tensor], encoded_images: bool = False) -> tf.Tensor:
        value = parsed[self.name]
        if self.encoding == "jpeg" and encoded_images:
            return value  # kept encoded: a window stage decodes only its window
        if self.encoding in ("png", "jpeg"):
            channels = self.shape[2] if len(self.shape) == 3 else 1
            decoder = tf.io.decode_png if self.encoding == "png" else tf.io.decode_jpeg
            image = decoder(value, channels=channels)
            if len(self.shape) == 2:
                image = image[..., 0]
            image.set_shape(self.shape)
            return image
        if self.encoding == "raw":
            via = _RAW_VIA.get(self.dtype)  # decode_raw lacks uint32/uint64: bitcast
            flat = tf.io.decode_raw(value, via or self.tf_dtype, little_endian=True)
            if via is not None:
                flat = tf.bitcast(flat, self.tf_dtype)
            out = tf.reshape(flat, parsed[f"{self.name}/shape"])
            out.set_shape(self.shape)
            return out
        if value.dtype != self.tf_dtype:
            value = tf.cast(value, self.tf_dtype)
        return value

    def describe(self) -> dict[str, Any]:
        keys = {}
        for key, spec in self.parse_spec().items():
            keys[key] = {
                "kind": type(spec).__name__,
                "shape": list(spec.shape),
                "dtype": tf.as_dtype(spec.dtype).name,
            }
        return {
            "name": self.name,
            "encoding": self.encoding,
            "dtype": self.dtype,
            "shape": list(self.shape),
            "keys": keys,
        }

    @classmethod
    def from_description(cls, d: Mapping[str, Any]) -> _Feature:
        return cls(d["name"], d["encoding"], d["dtype"], tuple(d["shape"]))


def _dtype_name(dtype: Any) -> str:
    if isinstance(dtype, tf.DType):
        if dtype == tf.string:
            return "string"
        dtype = dtype.as_numpy_dtype
    np_dtype = np.dtype(dtype)
    return "string" if np_dtype.kind in "SUO" else np_dtype.name


def _infer_encoding(dtype: str, shape: tuple[int | None, ...], jpeg_files: bool = False) -> str:
    known = all(d is not None for d in shape)
    if jpeg_files and dtype == "uint8" and len(shape) == 3 and shape[2] in (1, 3):
        return "jpeg"
    if dtype == "uint8" and (len(shape) == 2 or (len(shape) == 3 and shape[2] in (1, 3, 4))):
        return "png"
    if dtype == "string":
        return "bytes"
    if known and (dtype == "bool" or dtype in ("int8", "int16", "int32", "int64", "uint8")):
        return "int64"
    if known and dtype in ("uint16", "uint32"):
        return "int64"
    if known and dtype in ("float16", "float32"):
        return "float"
    return "raw"


def _check_encoding(f: _Feature) -> None:
    if f.encoding not in _ENCODINGS:
        raise ValueError(
            f"feature {f.name!r}: unknown encoding {f.encoding!r}; use one of {_ENCODINGS}"
        )
    known = all(d is not None for d in f.shape)
    if f.encoding == "png" and not (
        f.dtype == "uint8"
        and (len(f.shape) == 2 or (len(f.shape) == 3 and f.shape[2] in (1, 3, 4)))
    ):
        raise ValueError(
            f"feature {f.name!r}: 'png' needs uint8 [H, W] or [H, W, C] with C in 1, 3, 4; "
            f"got {f.dtype} of shape {list(f.shape)}"
        )
    if f.encoding == "jpeg" and not (
        f.dtype == "uint8" and (len(f.shape) == 2 or (len(f.shape) == 3 and f.shape[2] in (1, 3)))
    ):
        raise ValueError(
            f"feature {f.name!r}: 'jpeg' needs uint8 [H, W] or [H, W, C] with C in 1, 3; "
            f"got {f.dtype} of shape {list(f.shape)}"
        )
    if f.encoding == "raw" and f.dtype == "string":
        raise ValueError(f"feature {f.name!r}: strings cannot be stored 'raw'; use 'bytes'")
    if f.encoding in ("int64", "float", "bytes") and not known:
        raise ValueError(
            f"feature {f.name!r}: {f.encoding!r} needs a fixed shape, got {list(f.shape)}; "
            "use 'raw' (or 'png') for shapes that vary"
        )
    if f.encoding == "bytes" and f.dtype != "string":
        raise ValueError(f"feature {f.name!r}: 'bytes' is for strings, got {f.dtype}")
    if f.encoding == "int64" and not (f.dtype == "bool" or np.dtype(f.dtype).kind in "iu"):
        raise ValueError(f"feature {f.name!r}: 'int64' is for integers and bools, got {f.dtype}")
    if f.encoding == "int64" and f.dtype == "uint64":
        raise ValueError(f"feature {f.name!r}: uint64 does not fit int64; use 'raw'")
    if f.encoding == "float" and f.dtype not in ("float16", "float32"):
        raise ValueError(
            f"feature {f.name!r}: 'float' stores float32, got {f.dtype}; use 'raw' to keep it exact"
        )


def _to_feature(f: _Feature, value: Any, where: str) -> dict[str, tf.train.Feature]:
    """Serialise one component (a NumPy value; images already encoded) into record features."""
    if f.encoding in ("png", "jpeg"):
        return {f.name: tf.train.Feature(bytes_list=tf.train.BytesList(value=[bytes(value)]))}
    arr = np.asarray(value)
    if f.encoding == "raw":
        if arr.ndim != len(f.shape) or any(
            d is not None and d != s for d, s in zip(f.shape, arr.shape, strict=True)
        ):
            raise ValueError(
                f"{where}: feature {f.name!r} has shape {arr.shape}, expected {f.shape}"
            )
        data = np.ascontiguousarray(arr, dtype=np.dtype(f.dtype).newbyteorder("<")).tobytes()
        return {
            f.name: tf.train.Feature(bytes_list=tf.train.BytesList(value=[data])),
            f"{f.name}/shape": tf.train.Feature(int64_list=tf.train.Int64List(value=arr.shape)),
        }
    if arr.shape != f.shape:
        raise ValueError(f"{where}: feature {f.name!r} has shape {arr.shape}, expected {f.shape}")
    flat = arr.reshape(-1)
    if f.encoding == "int64":
        feature = tf.train.Feature(int64_list=tf.train.Int64List(value=flat.astype(np.int64)))
    elif f.encoding == "float":
        feature = tf.train.Feature(float_list=tf.train.FloatList(value=flat.astype(np.float32)))
    else:
        values = [v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in flat.tolist()]
        feature = tf.train.Feature(bytes_list=tf.train.BytesList(value=values))
    return {f.name: feature}


def _encode_image(value: Any, f: _Feature) -> tf.Tensor:
    """A decoded uint8 image as the PNG or JPEG bytes of encoding ``f.encoding``."""
    image = tf.convert_to_tensor(value)
    if len(f.shape) == 2:
        image = image[..., tf.newaxis]
    if f.encoding == "jpeg":
        return tf.io.encode_jpeg(image, quality=_JPEG_QUALITY)
    return tf.io.encode_png(image)


# ----------------------------------------------------------------------------------------
# Writing
# ----------------------------------------------------------------------------------------


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
) -> list[_Feature]:
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
                    raise ValueError(f"features names keys the data does not have: {unknown}")
                encodings = [features.get(k) for k in names]
            else:
                if len(features) != n:
                    raise ValueError(
                        f"features must name all {n} components of an example, got {len(features)}"
                    )
                names = [str(k) for k in features]
                encodings = list(features.values())
        elif isinstance(features, Sequence) and not isinstance(features, str):
            if structure == "dict" or len(features) != n:
                raise ValueError(
                    f"features as a list names the {n} components of a tuple example; "
                    f"got {list(features)!r}"
                )
            names = [str(k) for k in features]
        else:
            raise ValueError(
                "features must be None, a list of names, or a dict name -> encoding; "
                f"got {features!r}"
            )
    out = []
    for name, (dtype, shape), enc in zip(names, specs, encodings, strict=True):
        f = _Feature(name, enc or _infer_encoding(dtype, shape, jpeg_files), dtype, shape)
        _check_encoding(f)
        out.append(f)
    all_keys = [k for f in out for k in f.parse_spec()]
    if len(set(all_keys)) != len(all_keys):
        raise ValueError(f"feature names collide: {all_keys}")
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
                raise ValueError(
                    "write_tfrecords handles examples whose components are plain tensors of "
                    f"known rank (a tuple or dict of them); got element_spec {spec!r}"
                )
        specs = [(_dtype_name(s.dtype), tuple(s.shape.as_list())) for s in leaves]
        return structure, keys, specs, int(data.num_examples)
    if isinstance(data, Mapping):
        structure, keys, arrays = "dict", list(data), [np.asarray(v) for v in data.values()]
    elif isinstance(data, (tuple, list)):
        structure, keys, arrays = "tuple", list(range(len(data))), [np.asarray(v) for v in data]
    elif isinstance(data, np.ndarray):
        structure, keys, arrays = "single", [0], [data]
    else:
        raise ValueError(
            "write_tfrecords takes a source (num_examples and load) or a NumPy array, "
            f"tuple or dict of arrays; got {type(data).__name__}"
        )
    if not arrays:
        raise ValueError("write_tfrecords: no arrays given")
    lengths = {str(k): (a.shape[0] if a.ndim else None) for k, a in zip(keys, arrays, strict=True)}
    if None in lengths.values() or len(set(lengths.values())) != 1:
        raise ValueError(f"arrays must share their first (example) axis; lengths: {lengths}")
    specs = [(_dtype_name(a.dtype), tuple(a.shape[1:])) for a in arrays]
    return structure, keys, specs, int(arrays[0].shape[0])


def _example_stream(
    data: Any, structure: str, keys: list[Any], feats: list[_Feature], order: np.ndarray
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
                _encode_image(p, f) if is_image else p
                for p, f, is_image in zip(parts, feats, image, strict=True)
            )
            return index, parts, tf.cast(weight, tf.float32), tf.constant("")

        ds = tf.data.Dataset.from_tensor_slices(order.astype(np.int64))
        ds = ds.map(fetch, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        for index, parts, weight, problem in ds.prefetch(tf.data.AUTOTUNE).as_numpy_iterator():
            where = data.path(int(index)) if isinstance(data, PathSource) else f"index {index}"
            if problem:
                raise ValueError(
                    f"write_tfrecords: example {int(index)} ({where}) cannot be stored with "
                    f"encoding 'jpeg': {problem.decode('utf-8', 'replace')}; fix or remove the "
                    "file, or choose encoding 'png' for the image"
                )
            if weight == 0:
                raise ValueError(
                    f"write_tfrecords: example {int(index)} ({where}) could not be read and "
                    "would be written as a placeholder; fix or remove it and retry"
                )
            yield int(index), parts
        return
    arrays = _components(structure, data, keys)
    arrays = [np.asarray(a) for a in arrays]
    for index in order.tolist():
        parts = [a[index] for a in arrays]
        parts = [
            _encode_image(p, f).numpy() if is_image else p
            for p, f, is_image in zip(parts, feats, image, strict=True)
        ]
        yield index, parts


def _atomic_write_text(path: str, text: str) -> None:
    tmp = f"{path}.tmp-{uuid.uuid4().hex}"
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


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
        raise ValueError(f"num_shards must be an integer, got {num_shards!r}")
    if n < 1:
        raise ValueError("write_tfrecords: the data holds no example")
    if not 1 <= num_shards <= n:
        raise ValueError(f"num_shards must be in [1, num_examples={n}], got {num_shards}")
    if not prefix or os.sep in prefix:
        raise ValueError(f"prefix must be a plain file name prefix, got {prefix!r}")
    if compression not in (None, "", "GZIP", "ZLIB"):
        raise ValueError(f"compression must be None, 'GZIP' or 'ZLIB', got {compression!r}")
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
    temps = [f"{path}.tmp-{token}" for path in finals]
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
                        record.update(_to_feature(f, value, f"example {index}"))
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
            "format": _FORMAT,
            "version": _VERSION,
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
        _atomic_write_text(manifest_path, json.dumps(manifest, indent=1) + "\n")
    except BaseException:
        for tmp in temps:
            if os.path.exists(tmp):
                os.remove(tmp)
        raise
    finally:
        stream.close()
    return finals


# ----------------------------------------------------------------------------------------
# Reading
# ----------------------------------------------------------------------------------------


def read_manifest(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Load a manifest written by :func:`write_tfrecords`, with ``files`` made absolute.

    Raises:
        ValueError: the file is not a tfdp TFRecord manifest (naming it).

    Example:
        >>> import os, tempfile, numpy as np
        >>> out = tempfile.mkdtemp()
        >>> _ = write_tfrecords(np.zeros((4, 2), "float32"), out, num_shards=2)
        >>> m = read_manifest(os.path.join(out, "data.manifest.json"))
        >>> m["counts"], m["features"][0]["encoding"]
        ([2, 2], 'float')
    """
    path = os.fspath(path)
    try:
        with tf.io.gfile.GFile(path, "r") as fh:
            manifest = json.loads(fh.read())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: not a JSON manifest ({err})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != _FORMAT:
        raise ValueError(f"{path}: not a {_FORMAT} manifest (written by write_tfrecords)")
    if manifest.get("version") != _VERSION:
        raise ValueError(f"{path}: manifest version {manifest.get('version')} is not supported")
    base = os.path.dirname(path)
    manifest["files"] = [os.path.join(base, f) for f in manifest["files"]]
    return manifest


def _read_first(path: str, compression: str | None) -> bytes | None:
    try:
        for record in tf.data.TFRecordDataset(path, compression_type=compression or "").take(1):
            return record.numpy()
    except tf.errors.OpError as err:
        raise ValueError(
            f"{path}: cannot read a record ({type(err).__name__}: {err.message.splitlines()[0]}); "
            f"is it a TFRecord file with compression={compression!r}?"
        ) from None
    return None


def _count_records(path: str, compression: str | None) -> int:
    ds = tf.data.TFRecordDataset(path, compression_type=compression or "")
    try:
        return int(ds.reduce(np.int64(0), lambda n, _: n + 1))
    except tf.errors.OpError as err:
        raise ValueError(
            f"{path}: cannot count its records ({type(err).__name__}: "
            f"{err.message.splitlines()[0]}); is it a TFRecord file with "
            f"compression={compression!r}?"
        ) from None


def _map_threads(fn: Callable[[str], Any], paths: Sequence[str]) -> list[Any]:
    with concurrent.futures.ThreadPoolExecutor(min(_IO_THREADS, len(paths))) as pool:
        return list(pool.map(fn, paths))


def _resolve_files(files: Any) -> tuple[list[str], dict[str, Any] | None]:
    """The file list, and the manifest when ``files`` names one."""
    if isinstance(files, (str, os.PathLike)):
        pattern = os.fspath(files)
        if pattern.endswith(MANIFEST_SUFFIX):
            manifest = read_manifest(pattern)
            return list(manifest["files"]), manifest
        paths = sorted(tf.io.gfile.glob(pattern))
        if not paths:
            raise FileNotFoundError(f"TFRecordSource: no file matches {pattern!r}")
        return paths, None
    paths = [os.fspath(f) for f in files]
    if not paths:
        raise ValueError("TFRecordSource: files is empty")
    return paths, None


def _find_manifests(paths: Sequence[str]) -> dict[str, dict[str, Any]]:
    """``{file: manifest}`` for the files some manifest in their directory lists."""
    found: dict[str, dict[str, Any]] = {}
    for directory in sorted({os.path.dirname(p) for p in paths}):
        pattern = os.path.join(directory or ".", "*" + MANIFEST_SUFFIX)
        for mpath in sorted(tf.io.gfile.glob(pattern)):
            try:
                manifest = read_manifest(mpath)
            except ValueError:
                continue  # someone else's JSON: ignore
            for f in manifest["files"]:
                found.setdefault(os.path.normpath(f), manifest)
    return found


def _check_int(name: str, value: Any, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"{name} must be {bound}, got {value}")
    return int(value)


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
            raise ValueError(f"images must be 'decoded' or 'encoded', got {images!r}")
        paths, manifest = _resolve_files(files)
        if len(set(paths)) != len(paths):
            raise ValueError("TFRecordSource: a file is listed twice")
        missing = [p for p in paths if not tf.io.gfile.exists(p)]
        if missing:
            raise FileNotFoundError(
                f"TFRecordSource: {len(missing)} file(s) not found: {missing[:_MAX_LISTED]}"
            )
        self.files = paths
        self.shuffle_buffer = _check_int("shuffle_buffer", shuffle_buffer, 0)
        self.cycle_length = _check_int("cycle_length", cycle_length, 1)
        self.num_parallel_calls = num_parallel_calls
        if compression not in (None, "", "GZIP", "ZLIB"):
            raise ValueError(f"compression must be None, 'GZIP' or 'ZLIB', got {compression!r}")

        by_file = {}
        if manifest is not None:
            by_file = {os.path.normpath(f): manifest for f in manifest["files"]}
        else:
            by_file = _find_manifests(paths)
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
                    raise ValueError(f"compression={compression!r} but the manifest says {mc!r}")
                compression = compression or mc
        self.compression = compression or None

        # -- features and decoding --
        if features is None:
            if self.manifest is None:
                raise ValueError(
                    "TFRecordSource: features=None needs a manifest (written by "
                    "write_tfrecords) covering every file; pass features= otherwise"
                )
            descs = [tuple(map(json.dumps, m["features"])) for m in manifests]
            if len(set(descs)) != 1:
                raise ValueError(
                    "TFRecordSource: the files come from manifests with different features"
                )
            feats = [_Feature.from_description(d) for d in self.manifest["features"]]
            spec: dict[str, Any] = {}
            for f in feats:
                spec.update(f.parse_spec())
            self.features: dict[str, Any] = spec
            if decode is None:
                decode = _manifest_decoder(
                    feats, self.manifest["structure"], encoded_images=images == "encoded"
                )
        else:
            if not isinstance(features, Mapping) or not features:
                raise ValueError(
                    f"features must be a non-empty dict of tf.io feature specs, got {features!r}"
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
            tf.data.Dataset.from_tensors(tf.constant(b"")).map(self.parse).element_spec
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
                    raise ValueError(f"counts has no entry for {lost[:_MAX_LISTED]}")
                given = [norm[os.path.normpath(p)] for p in paths]
            else:
                given = list(counts)
                if len(given) != len(paths):
                    raise ValueError(f"counts has {len(given)} entries for {len(paths)} files")
            given = [_check_int("counts[...]", c, 0) for c in given]
        if from_manifest is not None:
            if given is not None and given != from_manifest:
                raise ValueError("counts= disagrees with the manifest's record counts")
            return np.asarray(from_manifest, np.int64)
        if given is not None:
            return np.asarray(given, np.int64)
        return np.asarray(
            _map_threads(lambda p: _count_records(p, self.compression), paths), np.int64
        )

    def _check_first_records(self) -> None:
        todo = [p for p, c in zip(self.files, self.counts, strict=True) if c > 0]
        if not todo:
            return
        firsts = _map_threads(lambda p: _read_first(p, self.compression), todo)
        for path, record in zip(todo, firsts, strict=True):
            if record is None:
                raise ValueError(f"{path}: expected records, found none")
            check_example(record, self.features, path)
            try:
                tf.io.parse_single_example(record, self.features)
            except (tf.errors.OpError, ValueError, TypeError) as err:
                msg = err.message if isinstance(err, tf.errors.OpError) else str(err)
                raise ValueError(
                    f"{path}: the first record does not match features: {msg.splitlines()[0]}"
                ) from None
        try:
            self.parse(firsts[0])
        except (tf.errors.OpError, ValueError, TypeError) as err:
            msg = err.message if isinstance(err, tf.errors.OpError) else str(err)
            raise ValueError(
                f"{todo[0]}: decoding its first record failed: {msg.splitlines()[0]}"
            ) from None

    # -- public API ------------------------------------------------------------------------
    def parse(self, record: Any) -> Any:
        """Parse and decode one serialized record into an example (graph-compatible).

        Example:
            >>> import tempfile, numpy as np
            >>> out = tempfile.mkdtemp()
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
            >>> files = write_tfrecords(np.zeros((8, 1), "float32"), tempfile.mkdtemp(),
            ...                         num_shards=4)
            >>> TFRecordSource(files).num_lanes(2), TFRecordSource(files).num_lanes(8)
            (2, 4)
        """
        return min(len(self.files), _check_int("num_replicas", num_replicas, 1))

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
        _check_int("lane", lane, 0, lanes - 1)
        _check_int("seed", seed, 0, 2**64 - 1)
        _check_int("epoch", epoch, 0)
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
            self.file_records,  # counts checked against the manifest as records are read
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
                lambda block, records: tf.random.experimental.stateless_shuffle(
                    records, seed=tf.stack([key, block])
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
            raise ValueError(
                f"stream indices must lie in [0, {lanes * per_lane}) (stream_length for "
                f"num_replicas={num_replicas}), got values in [{idx.min()}, {idx.max()}]"
            )
        seed = _check_int("seed", seed, 0, 2**64 - 1)
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
        ds = ds.map(self.parse, num_parallel_calls=self.num_parallel_calls, deterministic=True)
        options = tf.data.Options()
        options.deterministic = True
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
        return ds.with_options(options)

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
            return ds.enumerate().filter(lambda i, _: keep[i]).map(lambda _, record: record)
        times = tf.constant(counts, tf.int64)
        return ds.enumerate().flat_map(
            lambda i, record: tf.data.Dataset.from_tensors(record).repeat(times[i])
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
            >>> files = write_tfrecords(np.zeros((4, 2), "float32"), tempfile.mkdtemp(),
            ...                         num_shards=2)
            >>> TFRecordSource(files).count_problems()
            []
        """

        def readable(path: str) -> int:
            ds = tf.data.TFRecordDataset(path, compression_type=self.compression or "")
            return int(ds.ignore_errors(log_warning=False).reduce(np.int64(0), lambda n, _: n + 1))

        found = _map_threads(readable, self.files)
        return [
            f"{path} holds {got} readable records, not the {int(want)} listed for it (the file "
            f"is truncated or corrupt after record {got}, or was rewritten after its manifest)"
            if got < want
            else f"{path} holds {got} readable records, not the {int(want)} listed for it (it "
            "was rewritten after its manifest)"
            for path, got, want in zip(self.files, found, self.counts, strict=True)
            if got != want
        ]


def _manifest_decoder(
    feats: list[_Feature], structure: str, encoded_images: bool = False
) -> Callable[[dict[str, Any]], Any]:
    def decode(parsed: dict[str, Any]) -> Any:
        values = [f.decode(parsed, encoded_images) for f in feats]
        if structure == "dict":
            return {f.name: v for f, v in zip(feats, values, strict=True)}
        if structure == "single":
            return values[0]
        return tuple(values)

    return decode
