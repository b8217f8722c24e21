"""Facts about the stored dtypes (:class:`~serde.core.schema.ScalarType`) that need no torch.

The loader, ``pt2serde check`` and the native emitter and runtimes all size tensors from these tables;
the torch side (``ScalarType`` <-> ``torch.dtype``) is in :mod:`serde.bridge.enums`.
"""

from __future__ import annotations

from serde.core import schema

__all__ = ["ITEMSIZE", "GRAD_DTYPES"]

ST = schema.ScalarType
# Bytes per element of every ScalarType a weight can have (tests check this against torch).
ITEMSIZE: dict[schema.ScalarType, int] = {
    ST.BYTE: 1, ST.CHAR: 1, ST.SHORT: 2, ST.INT: 4, ST.LONG: 8, ST.HALF: 2, ST.FLOAT: 4,
    ST.DOUBLE: 8, ST.COMPLEXHALF: 4, ST.COMPLEXFLOAT: 8, ST.COMPLEXDOUBLE: 16, ST.BOOL: 1,
    ST.BFLOAT16: 2, ST.UINT16: 2, ST.FLOAT8E4M3FN: 1, ST.FLOAT8E5M2: 1, ST.FLOAT8E4M3FNUZ: 1,
    ST.FLOAT8E5M2FNUZ: 1, ST.FLOAT8E8M0FNU: 1, ST.UINT32: 4, ST.UINT64: 8,
}
# The dtypes a tensor with requires_grad can have (floating point and complex).
GRAD_DTYPES = frozenset({ST.HALF, ST.FLOAT, ST.DOUBLE, ST.BFLOAT16, ST.COMPLEXHALF, ST.COMPLEXFLOAT,
                         ST.COMPLEXDOUBLE})
