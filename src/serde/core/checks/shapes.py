"""Integers, ranks, element counts and list lengths from a file, bounded before anything walks them.

Sizes and integer arguments are int64 in torch and in native programs; ranks, element counts and list
lengths are capped by :class:`serde.core.limits.Limits` (``max_tensor_rank``, ``max_tensor_elements``,
``max_list_len``).
"""

from __future__ import annotations

from collections.abc import Iterable

from serde.core.errors import IntegerTooLargeError, ListTooLongError, TensorRankError, TensorSizeError
from serde.core.limits import Limits, check_limit

from .names import HOSTILE, show

__all__ = ["check_shape", "check_int64", "check_list", "shape_ok", "INT64"]


def check_shape(sizes: list, strides: list, where: str, limits: Limits) -> None:
    """Rank first (the product below is only computed over a bounded list), then the element count."""
    check_limit(len(sizes), limits, "max_tensor_rank", f"{where}.sizes", "the rank", TensorRankError)
    check_limit(len(strides), limits, "max_tensor_rank", f"{where}.strides", "the rank", TensorRankError)
    numel = 1
    for k, s in enumerate(sizes):
        v = s if isinstance(s, int) else s.as_int  # a SymInt: only literal sizes count
        check_int64(v, f"{where}.sizes[{k}]")
        if v is not None and v >= 0:
            numel *= v
    for k, s in enumerate(strides):
        check_int64(s if isinstance(s, int) else s.as_int, f"{where}.strides[{k}]")
    check_limit(numel, limits, "max_tensor_elements", f"{where}.sizes", "the number of elements", TensorSizeError)


INT64 = 1 << 63


def check_int64(v: object, where: str) -> None:
    # Sizes and integer arguments are int64 in torch and in native programs; a bigger one is an
    # OverflowError deep inside torch or msgpack otherwise.
    if isinstance(v, int) and not -INT64 <= v < INT64:
        raise IntegerTooLargeError(f"{where}: the integer {show(str(v))} ({v.bit_length()} bits) does not fit in "
                                   f"int64; {HOSTILE}")


def check_list(items: Iterable, where: str, limits: Limits) -> None:
    check_limit(len(items), limits, "max_list_len", where, "the list length", ListTooLongError)  # type: ignore[arg-type]


def shape_ok(sizes: list, strides: list, limits: Limits) -> bool:
    """``check_shape`` would accept these sizes and strides."""
    if len(sizes) > limits.max_tensor_rank or len(strides) > limits.max_tensor_rank:
        return False
    numel = 1
    for s in sizes:
        v = s if isinstance(s, int) else s.as_int
        if v is not None:
            if not -INT64 <= v < INT64:
                return False
            if v >= 0:
                numel *= v
    for s in strides:
        v = s if isinstance(s, int) else s.as_int
        if v is not None and not -INT64 <= v < INT64:
            return False
    return numel <= limits.max_tensor_elements
