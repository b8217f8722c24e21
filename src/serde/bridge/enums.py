"""torch <-> schema enum maps, each defined once and inverted."""

from __future__ import annotations

import torch

from serde.core.schema import Layout, MemoryFormat, ScalarType
from serde.errors import MalformedArtifactError, UnsupportedConstructError

__all__ = [
    "DTYPE_TO_SCALAR", "SCALAR_TO_DTYPE", "LAYOUT_TO_SCHEMA", "SCHEMA_TO_LAYOUT",
    "MEMORY_FORMAT_TO_SCHEMA", "SCHEMA_TO_MEMORY_FORMAT",
    "serialize_dtype", "deserialize_dtype", "serialize_layout", "deserialize_layout",
    "serialize_memory_format", "deserialize_memory_format",
]


def _invert(d: dict) -> dict:
    inv = {v: k for k, v in d.items()}
    assert len(inv) == len(d), "enum map is not one-to-one"
    return inv


DTYPE_TO_SCALAR: dict[torch.dtype, ScalarType] = {
    torch.uint8: ScalarType.BYTE,
    torch.int8: ScalarType.CHAR,
    torch.int16: ScalarType.SHORT,
    torch.int32: ScalarType.INT,
    torch.int64: ScalarType.LONG,
    torch.float16: ScalarType.HALF,
    torch.float32: ScalarType.FLOAT,
    torch.float64: ScalarType.DOUBLE,
    torch.complex32: ScalarType.COMPLEXHALF,
    torch.complex64: ScalarType.COMPLEXFLOAT,
    torch.complex128: ScalarType.COMPLEXDOUBLE,
    torch.bool: ScalarType.BOOL,
    torch.bfloat16: ScalarType.BFLOAT16,
    torch.uint16: ScalarType.UINT16,
    torch.uint32: ScalarType.UINT32,
    torch.uint64: ScalarType.UINT64,
    torch.float8_e4m3fn: ScalarType.FLOAT8E4M3FN,
    torch.float8_e5m2: ScalarType.FLOAT8E5M2,
    torch.float8_e4m3fnuz: ScalarType.FLOAT8E4M3FNUZ,
    torch.float8_e5m2fnuz: ScalarType.FLOAT8E5M2FNUZ,
    torch.float8_e8m0fnu: ScalarType.FLOAT8E8M0FNU,
}
SCALAR_TO_DTYPE = _invert(DTYPE_TO_SCALAR)

LAYOUT_TO_SCHEMA: dict[torch.layout, Layout] = {
    torch.strided: Layout.Strided,
    torch.sparse_coo: Layout.SparseCoo,
    torch.sparse_csr: Layout.SparseCsr,
    torch.sparse_csc: Layout.SparseCsc,
    torch.sparse_bsr: Layout.SparseBsr,
    torch.sparse_bsc: Layout.SparseBsc,
    torch._mkldnn: Layout._mkldnn,  # type: ignore[attr-defined]
}
SCHEMA_TO_LAYOUT = _invert(LAYOUT_TO_SCHEMA)

MEMORY_FORMAT_TO_SCHEMA: dict[torch.memory_format, MemoryFormat] = {
    torch.contiguous_format: MemoryFormat.ContiguousFormat,
    torch.channels_last: MemoryFormat.ChannelsLast,
    torch.channels_last_3d: MemoryFormat.ChannelsLast3d,
    torch.preserve_format: MemoryFormat.PreserveFormat,
}
SCHEMA_TO_MEMORY_FORMAT = _invert(MEMORY_FORMAT_TO_SCHEMA)


def _lookup(table: dict, key, what: str, where: str, exc: type[Exception]):
    try:
        return table[key]
    except KeyError:
        raise exc(f"{where}: unsupported {what} {key!r}; supported: {sorted(map(str, table))}") from None


def serialize_dtype(d: torch.dtype, where: str = "tensor") -> ScalarType:
    return _lookup(DTYPE_TO_SCALAR, d, "dtype", where, UnsupportedConstructError)


def deserialize_dtype(s: ScalarType, where: str = "tensor") -> torch.dtype:
    return _lookup(SCALAR_TO_DTYPE, s, "scalar type", where, MalformedArtifactError)


def serialize_layout(v: torch.layout, where: str = "tensor") -> Layout:
    return _lookup(LAYOUT_TO_SCHEMA, v, "layout", where, UnsupportedConstructError)


def deserialize_layout(s: Layout, where: str = "tensor") -> torch.layout:
    return _lookup(SCHEMA_TO_LAYOUT, s, "layout", where, MalformedArtifactError)


def serialize_memory_format(v: torch.memory_format, where: str = "argument") -> MemoryFormat:
    return _lookup(MEMORY_FORMAT_TO_SCHEMA, v, "memory format", where, UnsupportedConstructError)


def deserialize_memory_format(s: MemoryFormat, where: str = "argument") -> torch.memory_format:
    return _lookup(SCHEMA_TO_MEMORY_FORMAT, s, "memory format", where, MalformedArtifactError)
