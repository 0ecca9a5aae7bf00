"""How each component of an example is stored in a ``tf.train.Example`` record.

This module owns the encodings of :func:`tfdp.sources.write_tfrecords`
(:data:`ENCODINGS`: ``png``, ``jpeg``, ``raw``, ``int64``, ``float``, ``bytes``;
the table is in :mod:`tfdp.sources.tfrecord`): a :class:`Feature` says how
one component is written (:func:`to_feature`), parsed and decoded, and
:func:`manifest_decoder` rebuilds an example from a manifest's features.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

from tfdp.errors import ConfigError, DataError

ENCODINGS = ("png", "jpeg", "raw", "int64", "float", "bytes")


JPEG_QUALITY = 95  # arrays written with encoding "jpeg" (lossy)


# tf.io.decode_raw has no unsigned 32/64-bit output: read as signed, then bitcast.
RAW_VIA = {"uint32": tf.int32, "uint64": tf.int64}


@dataclass(frozen=True)
class Feature:
    """One component of an example and how it is stored in a record."""

    name: str
    encoding: str
    dtype: str  # NumPy dtype name, or "string"
    shape: tuple[int | None, ...]

    @property
    def tf_dtype(self) -> tf.DType:
        """The component's TensorFlow dtype."""
        return tf.string if self.dtype == "string" else tf.as_dtype(self.dtype)

    def parse_spec(self) -> dict[str, Any]:
        """The ``tf.io`` parsing spec of the record keys this component is stored under."""
        if self.encoding in ("png", "jpeg", "raw"):
            spec = {self.name: tf.io.FixedLenFeature([], tf.string)}
            if self.encoding == "raw":
                spec[f"{self.name}/shape"] = tf.io.FixedLenFeature([len(self.shape)], tf.int64)
            return spec
        dtype = {"int64": tf.int64, "float": tf.float32, "bytes": tf.string}[self.encoding]
        return {self.name: tf.io.FixedLenFeature(list(self.shape), dtype)}

    def decode(self, parsed: Mapping[str, tf.Tensor], encoded_images: bool = False) -> tf.Tensor:
        """The component from a parsed record (``encoded_images``: JPEGs stay bytes)."""
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
            via = RAW_VIA.get(self.dtype)  # decode_raw lacks uint32/uint64: bitcast
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
        """The component's entry in a manifest's ``features``."""
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
    def from_description(cls, d: Mapping[str, Any]) -> Feature:
        """The feature a manifest entry (:meth:`describe`) describes."""
        return cls(d["name"], d["encoding"], d["dtype"], tuple(d["shape"]))


def dtype_name(dtype: Any) -> str:
    """A NumPy or TensorFlow dtype's name as a manifest records it (``"string"`` for text)."""
    if isinstance(dtype, tf.DType):
        if dtype == tf.string:
            return "string"
        dtype = dtype.as_numpy_dtype
    np_dtype = np.dtype(dtype)
    return "string" if np_dtype.kind in "SUO" else np_dtype.name


def infer_encoding(dtype: str, shape: tuple[int | None, ...], jpeg_files: bool = False) -> str:
    """The default encoding of a component of ``dtype`` and ``shape`` (see ``ENCODINGS``)."""
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


def check_encoding(f: Feature) -> None:
    """Refuse (``features``) a feature whose encoding cannot store its dtype and shape."""
    if f.encoding not in ENCODINGS:
        raise ConfigError(
            f"feature {f.name!r}: unknown encoding {f.encoding!r}; use one of {ENCODINGS}",
            argument="features",
        )
    known = all(d is not None for d in f.shape)
    if f.encoding == "png" and not (
        f.dtype == "uint8"
        and (len(f.shape) == 2 or (len(f.shape) == 3 and f.shape[2] in (1, 3, 4)))
    ):
        raise ConfigError(
            f"feature {f.name!r}: 'png' needs uint8 [H, W] or [H, W, C] with C in 1, 3, 4; "
            f"got {f.dtype} of shape {list(f.shape)}",
            argument="features",
        )
    if f.encoding == "jpeg" and not (
        f.dtype == "uint8" and (len(f.shape) == 2 or (len(f.shape) == 3 and f.shape[2] in (1, 3)))
    ):
        raise ConfigError(
            f"feature {f.name!r}: 'jpeg' needs uint8 [H, W] or [H, W, C] with C in 1, 3; "
            f"got {f.dtype} of shape {list(f.shape)}",
            argument="features",
        )
    if f.encoding == "raw" and f.dtype == "string":
        raise ConfigError(
            f"feature {f.name!r}: strings cannot be stored 'raw'; use 'bytes'", argument="features"
        )
    if f.encoding in ("int64", "float", "bytes") and not known:
        raise ConfigError(
            f"feature {f.name!r}: {f.encoding!r} needs a fixed shape, got {list(f.shape)}; "
            "use 'raw' (or 'png') for shapes that vary",
            argument="features",
        )
    if f.encoding == "bytes" and f.dtype != "string":
        raise ConfigError(
            f"feature {f.name!r}: 'bytes' is for strings, got {f.dtype}", argument="features"
        )
    if f.encoding == "int64" and not (f.dtype == "bool" or np.dtype(f.dtype).kind in "iu"):
        raise ConfigError(
            f"feature {f.name!r}: 'int64' is for integers and bools, got {f.dtype}",
            argument="features",
        )
    if f.encoding == "int64" and f.dtype == "uint64":
        raise ConfigError(
            f"feature {f.name!r}: uint64 does not fit int64; use 'raw'", argument="features"
        )
    if f.encoding == "float" and f.dtype not in ("float16", "float32"):
        raise ConfigError(
            f"feature {f.name!r}: 'float' stores float32, got {f.dtype}; use 'raw' to keep it "
            "exact",
            argument="features",
        )


def to_feature(f: Feature, value: Any, where: str) -> dict[str, tf.train.Feature]:
    """Serialise one component (a NumPy value; images already encoded) into record features."""
    if f.encoding in ("png", "jpeg"):
        return {f.name: tf.train.Feature(bytes_list=tf.train.BytesList(value=[bytes(value)]))}
    arr = np.asarray(value)
    if f.encoding == "raw":
        if arr.ndim != len(f.shape) or any(
            d is not None and d != s for d, s in zip(f.shape, arr.shape, strict=True)
        ):
            raise DataError(
                f"{where}: feature {f.name!r} has shape {arr.shape}, expected {f.shape}"
            )
        data = np.ascontiguousarray(arr, dtype=np.dtype(f.dtype).newbyteorder("<")).tobytes()
        return {
            f.name: tf.train.Feature(bytes_list=tf.train.BytesList(value=[data])),
            f"{f.name}/shape": tf.train.Feature(int64_list=tf.train.Int64List(value=arr.shape)),
        }
    if arr.shape != f.shape:
        raise DataError(f"{where}: feature {f.name!r} has shape {arr.shape}, expected {f.shape}")
    flat = arr.reshape(-1)
    if f.encoding == "int64":
        feature = tf.train.Feature(int64_list=tf.train.Int64List(value=flat.astype(np.int64)))
    elif f.encoding == "float":
        feature = tf.train.Feature(float_list=tf.train.FloatList(value=flat.astype(np.float32)))
    else:
        values = [v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in flat.tolist()]
        feature = tf.train.Feature(bytes_list=tf.train.BytesList(value=values))
    return {f.name: feature}


def encode_image(value: Any, f: Feature) -> tf.Tensor:
    """A decoded uint8 image as the PNG or JPEG bytes of encoding ``f.encoding``."""
    image = tf.convert_to_tensor(value)
    if len(f.shape) == 2:
        image = image[..., tf.newaxis]
    if f.encoding == "jpeg":
        return tf.io.encode_jpeg(image, quality=JPEG_QUALITY)
    return tf.io.encode_png(image)


def manifest_decoder(
    feats: list[Feature], structure: str, encoded_images: bool = False
) -> Callable[[dict[str, Any]], Any]:
    """``parsed record -> example`` in the structure written (``"single"``, tuple or dict)."""

    def decode(parsed: dict[str, Any]) -> Any:
        values = [f.decode(parsed, encoded_images) for f in feats]
        if structure == "dict":
            return {f.name: v for f, v in zip(feats, values, strict=True)}
        if structure == "single":
            return values[0]
        return tuple(values)

    return decode
