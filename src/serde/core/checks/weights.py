"""The checks of weights.json that need no torch: names, ranks and sizes, storages and tensor views.

:func:`check_weight_names` bounds the names and shapes the way :func:`~serde.core.checks.check_program`
bounds the program's. :func:`validate_weights` proves every storage and tensor view fits: a known dtype,
non-negative int64 sizes, strides and offsets, a storage index that exists and a view that ends inside
its storage's bytes. ``serde.load`` runs both before torch sees a tensor; ``pt2serde check`` and the
native emitter run them without loading the program.
"""

from __future__ import annotations

from collections.abc import Callable

from serde.core import schema
from serde.core.dtypes import GRAD_DTYPES, ITEMSIZE
from serde.core.errors import (
    InvalidDtypeError,
    InvalidTensorViewError,
    PayloadSizeError,
    StorageIndexError,
    TensorOutOfBoundsError,
)
from serde.core.limits import DEFAULT_LIMITS, Limits
from serde.core.payloads import SHA256_RE, payload_name
from serde.errors import MalformedArtifactError

from .names import IDENT, check_class_name, check_fqn, fqn_ok, show
from .shapes import check_list, check_shape, shape_ok
from .signature import check_input_spec_keys

__all__ = ["check_weight_names", "validate_weights", "MAX_SUBCLASS_DEPTH"]

_INT64_MAX = (1 << 63) - 1
# Subclasses nest (a subclass's inner tensor can be a subclass); deeper than this is refused.
MAX_SUBCLASS_DEPTH = 16
_FIX = "the artifact is damaged or hand-edited; re-save it with pt2serde"


def check_weight_names(w: schema.Weights, limits: Limits = DEFAULT_LIMITS) -> None:
    """State-dict and constant names become module attributes: each must be a safe FQN.

    Every stored tensor's rank and element count is bounded too (example inputs included).
    """
    # Each entry is first checked by the fast predicates (no field path built); only one they do
    # not accept goes through the detailed checks, which raise naming the field.
    for table, entries in (("state_dict", w.state_dict), ("constants", w.constants)):
        for name, t in entries.items():
            if name != "" and fqn_ok(name, limits) and shape_ok(t.sizes, t.strides, limits):
                continue
            where = f"weights.{table}[{show(name)}]"
            check_fqn(name, where, limits)
            check_shape(t.sizes, t.strides, f"{where}", limits)
    if w.example_inputs is not None:
        # ep.module() takes the paths of the inputs in its guard code from the example inputs
        check_input_spec_keys(w.example_inputs.spec, "weights.example_inputs.spec", limits)
        check_list(w.example_inputs.leaves, "weights.example_inputs.leaves", limits)
        for i, leaf in enumerate(w.example_inputs.leaves):
            t = leaf.as_tensor
            if t is not None and not shape_ok(t.sizes, t.strides, limits):
                check_shape(t.sizes, t.strides, f"weights.example_inputs.leaves[{i}]", limits)


def validate_weights(w: schema.Weights, payload_size: Callable[[str], int] | None = None) -> None:
    """Check every storage and tensor view of ``w`` without torch.

    Args:
        w: decoded weights.json.
        payload_size: byte length of an archive member; when given, each payload must exist and
            have exactly ``Storage.nbytes`` bytes.

    Raises:
        MalformedArtifactError subclasses naming the entry (``weights.state_dict['w']``).
    """
    for i, s in enumerate(w.storages):
        where = f"weights.storages[{i}]"
        if s.sha256 == "":  # saved without data: no payload member
            if s.device is None:
                raise MalformedArtifactError(f"{where}: a storage saved without data has no device; {_FIX}")
            if not 0 <= s.nbytes <= _INT64_MAX:
                raise PayloadSizeError(f"{where}: nbytes {s.nbytes} is out of range; {_FIX}")
            continue
        if not SHA256_RE.fullmatch(s.sha256):
            raise MalformedArtifactError(f"{where}: sha256 {s.sha256!r} is not 64 lowercase hex digits; {_FIX}")
        if not 0 <= s.nbytes <= _INT64_MAX:
            raise PayloadSizeError(f"{where}: nbytes {s.nbytes} is out of range; {_FIX}")
        if s.external is not None:  # the bytes are in a safetensors file, checked by serde.archive.safetensors
            continue
        if payload_size is not None and (n := payload_size(payload_name(s.sha256))) != s.nbytes:
            raise PayloadSizeError(f"{where}: payload {payload_name(s.sha256)} has {n} bytes but the "
                                   f"storage declares nbytes={s.nbytes}; {_FIX}")
    for name, t in w.state_dict.items():
        _check_tensor(t, w.storages, f"weights.state_dict[{name!r}]")
    for name, t in w.constants.items():
        _check_tensor(t, w.storages, f"weights.constants[{name!r}]")
    if w.example_inputs is not None:
        for i, leaf in enumerate(w.example_inputs.leaves):
            if leaf.as_tensor is not None:
                _check_tensor(leaf.as_tensor, w.storages, f"weights.example_inputs.leaves[{i}]")


def _check_tensor(t: schema.StoredTensor, storages: list[schema.Storage], where: str, depth: int = 0) -> None:
    if t.subclass is None:
        _check_view(t, storages, where)
        return
    if depth >= MAX_SUBCLASS_DEPTH:
        raise InvalidTensorViewError(f"{where}: tensor subclasses nest deeper than {MAX_SUBCLASS_DEPTH} levels; {_FIX}")
    if t.storage != -1:
        raise StorageIndexError(f"{where}: a tensor subclass has no storage of its own, but names storage "
                                f"{t.storage} (expected -1); {_FIX}")
    _check_meta(t, where)
    check_class_name(t.subclass.class_name, f"{where}.subclass.class_name")
    for name, inner in t.subclass.inner.items():
        if not IDENT.fullmatch(name):
            raise MalformedArtifactError(f"{where}.subclass.inner: {name[:80]!r} is not an attribute name; {_FIX}")
        _check_tensor(inner, storages, f"{where}.subclass.inner[{name!r}]", depth + 1)


def _check_meta(t: schema.StoredTensor, where: str) -> tuple[int, int]:
    """Dtype, sizes, strides and offset are sane; returns (itemsize, numel)."""
    itemsize = ITEMSIZE.get(t.dtype)
    if itemsize is None:
        raise InvalidDtypeError(f"{where}: dtype {t.dtype.name} cannot be a stored tensor; {_FIX}")
    if t.requires_grad and t.dtype not in GRAD_DTYPES:
        raise InvalidDtypeError(f"{where}: requires_grad is set on a {t.dtype.name} tensor, which cannot "
                                f"have gradients; {_FIX}")
    if len(t.sizes) != len(t.strides):
        raise InvalidTensorViewError(f"{where}: {len(t.sizes)} sizes but {len(t.strides)} strides; {_FIX}")
    for what, values in (("size", t.sizes), ("stride", t.strides), ("storage_offset", [t.storage_offset])):
        for v in values:
            if not 0 <= v <= _INT64_MAX:
                raise InvalidTensorViewError(f"{where}: {what} {v} is {'negative' if v < 0 else 'too large'}; "
                                             f"stored tensors have non-negative sizes, strides and offsets; {_FIX}")
    numel = 1
    for s in t.sizes:
        numel *= s
    if numel > _INT64_MAX:
        raise InvalidTensorViewError(f"{where}: {numel} elements do not fit in int64; {_FIX}")
    return itemsize, numel


def _check_view(t: schema.StoredTensor, storages: list[schema.Storage], where: str) -> None:
    itemsize, numel = _check_meta(t, where)
    if not 0 <= t.storage < len(storages):
        raise StorageIndexError(f"{where}: storage index {t.storage} is out of range (there are "
                                f"{len(storages)} storages); {_FIX}")
    nbytes = storages[t.storage].nbytes
    # Python ints do not overflow, so this bound is exact.
    if numel == 0:
        end = t.storage_offset * itemsize
    else:
        end = (t.storage_offset + sum((n - 1) * s for n, s in zip(t.sizes, t.strides, strict=True)) + 1) * itemsize
    if end > nbytes:
        raise TensorOutOfBoundsError(
            f"{where}: the view (sizes {t.sizes}, strides {t.strides}, offset {t.storage_offset}, "
            f"{itemsize}-byte {t.dtype.name}) reaches byte {end} of storage {t.storage}, which has only "
            f"{nbytes} bytes; {_FIX}")
