"""Tensors <-> :class:`serde.schema.Weights` plus content-addressed payloads.

* Tensors are grouped by their underlying storage (identity of the storage object, never equal
  content). Each :class:`~serde.schema.Storage` is the raw bytes of one whole storage, named by
  their sha256; each :class:`~serde.schema.StoredTensor` is a view into it (dtype, sizes, strides,
  storage offset in elements). Tied weights and views therefore stay aliased after a load, and
  non-contiguous weights keep their strides.
* Two storages with identical bytes share one payload member but load as two separate storages.
* Bytes are little-endian (the layout of every machine torch supports today); a big-endian host is
  refused rather than silently byte-swapped.
* Storages are numbered by first appearance over state_dict (sorted names), then constants (sorted
  names), then example-input leaves, so the same weights always give the same weights.json.
* Loading: each payload becomes a torch storage *without copying* when the archive buffer is
  writable (``read_archive`` on a path or file) and the payload is not already used by an earlier
  storage; otherwise it is copied once. Zero-copy tensors keep the archive buffer alive and write
  into it (it is private to the load). Every StoredTensor is checked before torch sees it.
* Tensors on other devices are saved from a CPU copy and load on the CPU.

Importing this module does not import torch (``validate_weights`` is pure, for ``pt2serde check``).
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from . import schema
from .archive import SHA256_RE, digest_all, payload_name, sha256_hex
from .errors import MalformedArtifactError, UnsupportedConstructError

if TYPE_CHECKING:
    import torch

__all__ = [
    "ITEMSIZE", "serialize_weights", "deserialize_weights", "validate_weights",
    "InvalidTensorViewError", "TensorOutOfBoundsError", "StorageIndexError", "PayloadSizeError",
    "InvalidDtypeError", "InvalidBoolError",
]

ST = schema.ScalarType
# Bytes per element of every ScalarType a weight can have (tests check this against torch).
ITEMSIZE: dict[schema.ScalarType, int] = {
    ST.BYTE: 1, ST.CHAR: 1, ST.SHORT: 2, ST.INT: 4, ST.LONG: 8, ST.HALF: 2, ST.FLOAT: 4,
    ST.DOUBLE: 8, ST.COMPLEXHALF: 4, ST.COMPLEXFLOAT: 8, ST.COMPLEXDOUBLE: 16, ST.BOOL: 1,
    ST.BFLOAT16: 2, ST.UINT16: 2, ST.FLOAT8E4M3FN: 1, ST.FLOAT8E5M2: 1, ST.FLOAT8E4M3FNUZ: 1,
    ST.FLOAT8E5M2FNUZ: 1, ST.FLOAT8E8M0FNU: 1, ST.UINT32: 4, ST.UINT64: 8,
}
_GRAD_DTYPES = {ST.HALF, ST.FLOAT, ST.DOUBLE, ST.BFLOAT16, ST.COMPLEXHALF, ST.COMPLEXFLOAT,
                ST.COMPLEXDOUBLE}
_INT64_MAX = (1 << 63) - 1
_FIX = "the artifact is damaged or hand-edited; re-save it with pt2serde"


class InvalidTensorViewError(MalformedArtifactError):
    """Sizes/strides/offset are negative, of different lengths, or too large for int64."""


class TensorOutOfBoundsError(MalformedArtifactError):
    """A tensor view addresses bytes beyond the end of its storage."""


class StorageIndexError(MalformedArtifactError):
    """A tensor names a storage index that does not exist."""


class PayloadSizeError(MalformedArtifactError):
    """A payload's byte length differs from its Storage.nbytes (or Storage.nbytes is invalid)."""


class InvalidDtypeError(MalformedArtifactError):
    """A dtype a weight cannot have, or requires_grad on a dtype that cannot carry gradients."""


class InvalidBoolError(MalformedArtifactError):
    """A bool tensor holds a byte other than 0 or 1 (undefined behaviour in torch kernels)."""


# ---------------------------------------------------------------- public API


def serialize_weights(
    state_dict: Mapping[str, torch.Tensor],
    constants: Mapping[str, torch.Tensor],
    example_inputs: tuple[tuple, dict] | None,
) -> tuple[schema.Weights, dict[str, memoryview | bytes]]:
    """Describe tensors as views into content-addressed storages.

    Args:
        state_dict: parameters and buffers by name.
        constants: tensor constants by name.
        example_inputs: ``(args, kwargs)`` or None; flattened with torch's pytree.

    Returns:
        ``(weights, payloads)``; ``payloads`` maps member names ``data/<sha256>`` to raw bytes
        (memoryviews over the tensors' own memory, valid while those tensors live).

    Raises:
        UnsupportedConstructError: a value that is not a plain strided tensor with a known dtype,
            or an example-input leaf of an unsupported type (the message names it).
    """
    _check_byteorder()
    table = _StorageTable()
    sd = {name: table.add(state_dict[name], f"state_dict[{name!r}]") for name in _sorted_names(state_dict, "state_dict")}
    consts = {name: table.add(constants[name], f"constants[{name!r}]") for name in _sorted_names(constants, "constants")}
    examples = None if example_inputs is None else _serialize_example_inputs(example_inputs, table)
    storages, payloads = table.finish()
    weights = schema.Weights(storages=storages, state_dict=sd, constants=consts, example_inputs=examples)
    return weights, payloads


def deserialize_weights(
    w: schema.Weights, member: Callable[[str], memoryview]
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], tuple[tuple, dict] | None]:
    """Rebuild tensors from ``w`` and payload bytes, validating every view first.

    Args:
        w: decoded weights.json.
        member: returns the bytes of an archive member (``ArchiveContents.member``).

    Returns:
        ``(state_dict, constants, example_inputs)``; tensors are plain (not nn.Parameter) with
        ``requires_grad`` as stored; example_inputs is ``(args, kwargs)`` or None.

    Raises:
        MalformedArtifactError subclasses naming the offending entry, e.g. ``weights.state_dict["w"]``.
    """
    from .isolation import outside_ambient_modes

    _check_byteorder()
    validate_weights(w, lambda name: len(member(name)))
    with outside_ambient_modes():  # real tensors, even inside a caller's FakeTensorMode
        return _deserialize_weights(w, member)


def _deserialize_weights(w: schema.Weights, member: Callable[[str], memoryview]) -> tuple[dict, dict, Any]:
    import torch

    from .enums import SCALAR_TO_DTYPE

    storages = _load_storages(w, member)

    def tensor(t: schema.StoredTensor, where: str) -> torch.Tensor:
        out = torch.empty(0, dtype=SCALAR_TO_DTYPE[t.dtype]).set_(
            storages[t.storage], t.storage_offset, t.sizes, t.strides)
        if t.dtype == ST.BOOL and out.numel() and int(out.view(torch.uint8).max()) > 1:
            raise InvalidBoolError(f"{where}: a bool tensor holds bytes other than 0 and 1; {_FIX}")
        return out.requires_grad_(t.requires_grad)

    sd = {name: tensor(t, f"weights.state_dict[{name!r}]") for name, t in w.state_dict.items()}
    consts = {name: tensor(t, f"weights.constants[{name!r}]") for name, t in w.constants.items()}
    examples = None if w.example_inputs is None else _deserialize_example_inputs(w.example_inputs, tensor)
    return sd, consts, examples


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
        if not SHA256_RE.fullmatch(s.sha256):
            raise MalformedArtifactError(f"{where}: sha256 {s.sha256!r} is not 64 lowercase hex digits; {_FIX}")
        if not 0 <= s.nbytes <= _INT64_MAX:
            raise PayloadSizeError(f"{where}: nbytes {s.nbytes} is out of range; {_FIX}")
        if payload_size is not None and (n := payload_size(payload_name(s.sha256))) != s.nbytes:
            raise PayloadSizeError(f"{where}: payload {payload_name(s.sha256)} has {n} bytes but the "
                                   f"storage declares nbytes={s.nbytes}; {_FIX}")
    for name, t in w.state_dict.items():
        _check_view(t, w.storages, f"weights.state_dict[{name!r}]")
    for name, t in w.constants.items():
        _check_view(t, w.storages, f"weights.constants[{name!r}]")
    if w.example_inputs is not None:
        for i, leaf in enumerate(w.example_inputs.leaves):
            if leaf.as_tensor is not None:
                _check_view(leaf.as_tensor, w.storages, f"weights.example_inputs.leaves[{i}]")


# ---------------------------------------------------------------- save side


class _StorageTable:
    """Storages in first-seen order, keyed by storage identity; payloads keyed by content."""

    def __init__(self) -> None:
        self._views: list[memoryview | bytes] = []  # per storage, in first-seen order
        self._index: dict[int, int] = {}
        self._keep: list[Any] = []  # storages whose ids key _index must outlive this table

    def finish(self) -> tuple[list[schema.Storage], dict[str, memoryview | bytes]]:
        """The storages (hashed all at once, big ones in parallel) and payloads by member name."""
        shas = digest_all(sha256_hex, self._views)
        payloads: dict[str, memoryview | bytes] = {}
        for sha, view in zip(shas, self._views, strict=True):
            payloads.setdefault(payload_name(sha), view)
        return [schema.Storage(sha256=sha, nbytes=len(v)) for sha, v in zip(shas, self._views, strict=True)], payloads

    def add(self, t: Any, where: str) -> schema.StoredTensor:
        from .enums import serialize_dtype

        t = _plain_tensor(t, where)
        dtype = serialize_dtype(t.dtype, where)
        st = t.untyped_storage()
        key = st._cdata  # the StorageImpl: equal for every tensor sharing this storage
        index = self._index.get(key)
        if index is None:
            data = st if st.device.type == "cpu" else st.cpu()
            index = self._index[key] = len(self._views)
            self._views.append(_storage_bytes(data))
            self._keep.append(st)
        return schema.StoredTensor(
            dtype=dtype, sizes=list(t.shape), strides=list(t.stride()), storage_offset=t.storage_offset(),
            storage=index, requires_grad=bool(t.requires_grad),
        )


def _plain_tensor(t: Any, where: str) -> torch.Tensor:
    import torch

    if not isinstance(t, torch.Tensor):
        raise UnsupportedConstructError(
            f"{where}: a {type(t).__module__}.{type(t).__qualname__} is not a tensor; only tensors can be "
            "stored as weights (custom objects are not supported)")
    if type(t) not in (torch.Tensor, torch.nn.Parameter):
        raise UnsupportedConstructError(
            f"{where}: tensor subclass {type(t).__qualname__} cannot be stored; convert it to a plain "
            "torch.Tensor before exporting")
    kind = ("quantized" if t.is_quantized else "nested" if t.is_nested
            else None if t.layout == torch.strided else str(t.layout).removeprefix("torch."))
    if kind is not None:
        raise UnsupportedConstructError(
            f"{where}: {kind} tensors cannot be stored; only dense (strided) tensors with a plain dtype "
            "are supported (convert with .to_dense() / .dequantize() before exporting)")
    if t.device.type == "meta":
        raise UnsupportedConstructError(f"{where}: a meta tensor has no data to store; materialize it first")
    if t.is_conj() or t.is_neg():
        # A lazy conj/neg bit is not part of the storage bytes; store the resolved values instead.
        t = t.resolve_conj().resolve_neg()
    return t


def _storage_bytes(st: Any) -> memoryview | bytes:
    """Zero-copy view of a CPU storage's bytes; it keeps the storage alive."""
    n = st.nbytes()
    if n == 0:
        return b""
    arr = (ctypes.c_char * n).from_address(st.data_ptr())
    arr._owner = st  # type: ignore[attr-defined]
    return memoryview(arr).cast("B")


def _serialize_example_inputs(example_inputs: Any, table: _StorageTable) -> schema.ExampleInputs:
    import torch.utils._pytree as pytree

    from .treespec import serialize_treespec

    if not (isinstance(example_inputs, tuple) and len(example_inputs) == 2
            and isinstance(example_inputs[0], tuple) and isinstance(example_inputs[1], dict)):
        raise UnsupportedConstructError(
            f"example_inputs: expected (args: tuple, kwargs: dict), got {type(example_inputs).__name__}")
    flat, spec = pytree.tree_flatten_with_path(example_inputs)
    leaves = []
    for path, value in flat:
        where = f"example_inputs{pytree.keystr(path)}"
        kind = _leaf_kind(value, where)
        leaves.append(schema.ExampleLeaf(**{kind: _SERIALIZE_LEAF[kind](value, table, where)}))
    return schema.ExampleInputs(spec=serialize_treespec(spec, "example_inputs.spec"), leaves=leaves)


def _leaf_kind(value: Any, where: str) -> str:
    import torch

    if isinstance(value, torch.Tensor):
        return "as_tensor"
    kind = _LEAF_KINDS.get(type(value))
    if kind is None:
        raise UnsupportedConstructError(
            f"{where}: an example input of type {type(value).__module__}.{type(value).__qualname__} "
            "cannot be stored; supported leaves are tensors, None, bool, int, float and str")
    return kind


def _int64(value: int, where: str) -> int:
    if not -_INT64_MAX - 1 <= value <= _INT64_MAX:
        raise UnsupportedConstructError(f"{where}: integer {value} does not fit in 64 bits")
    return value


# Exact types only: a bool is not stored as an int, and int/str subclasses (enums) are refused.
_LEAF_KINDS: dict[type, str] = {type(None): "as_none", bool: "as_bool", int: "as_int", float: "as_float",
                                str: "as_string"}
_SERIALIZE_LEAF: dict[str, Callable[[Any, _StorageTable, str], Any]] = {
    "as_none": lambda v, table, where: True,
    "as_tensor": lambda v, table, where: table.add(v, where),
    "as_int": lambda v, table, where: _int64(v, where),
    "as_float": lambda v, table, where: schema.to_f64(v),
    "as_bool": lambda v, table, where: v,
    "as_string": lambda v, table, where: v,
}


# ---------------------------------------------------------------- load side


def _check_view(t: schema.StoredTensor, storages: list[schema.Storage], where: str) -> None:
    itemsize = ITEMSIZE.get(t.dtype)
    if itemsize is None:
        raise InvalidDtypeError(f"{where}: dtype {t.dtype.name} cannot be a stored tensor; {_FIX}")
    if t.requires_grad and t.dtype not in _GRAD_DTYPES:
        raise InvalidDtypeError(f"{where}: requires_grad is set on a {t.dtype.name} tensor, which cannot "
                                f"have gradients; {_FIX}")
    if len(t.sizes) != len(t.strides):
        raise InvalidTensorViewError(f"{where}: {len(t.sizes)} sizes but {len(t.strides)} strides; {_FIX}")
    for what, values in (("size", t.sizes), ("stride", t.strides), ("storage_offset", [t.storage_offset])):
        for v in values:
            if not 0 <= v <= _INT64_MAX:
                raise InvalidTensorViewError(f"{where}: {what} {v} is {'negative' if v < 0 else 'too large'}; "
                                             f"stored tensors have non-negative sizes, strides and offsets; {_FIX}")
    if not 0 <= t.storage < len(storages):
        raise StorageIndexError(f"{where}: storage index {t.storage} is out of range (there are "
                                f"{len(storages)} storages); {_FIX}")
    nbytes = storages[t.storage].nbytes
    numel = 1
    for s in t.sizes:
        numel *= s
    if numel > _INT64_MAX:
        raise InvalidTensorViewError(f"{where}: {numel} elements do not fit in int64; {_FIX}")
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


def _load_storages(w: schema.Weights, member: Callable[[str], memoryview]) -> list[Any]:
    import torch

    out = []
    used: set[str] = set()
    for s in w.storages:
        view = member(payload_name(s.sha256))
        if s.nbytes == 0:
            out.append(torch.UntypedStorage(0))
        elif view.readonly or s.sha256 in used:
            # Read-only buffer, or a payload an earlier storage already wraps: copy, so that equal
            # bytes never become accidental aliases.
            out.append(_copy_storage(view))
        else:
            out.append(torch.frombuffer(view, dtype=torch.uint8).untyped_storage())
        used.add(s.sha256)
    return out


def _copy_storage(view: memoryview) -> Any:
    import torch

    dst = torch.empty(len(view), dtype=torch.uint8)
    memoryview((ctypes.c_char * len(view)).from_address(dst.data_ptr())).cast("B")[:] = view
    return dst.untyped_storage()


def _deserialize_example_inputs(ex: schema.ExampleInputs, tensor: Callable[[schema.StoredTensor, str], Any]
                                ) -> tuple[tuple, dict]:
    import torch.utils._pytree as pytree

    from .treespec import deserialize_treespec

    spec = deserialize_treespec(ex.spec, "weights.example_inputs.spec")
    leaves = [_DESERIALIZE_LEAF[leaf.kind](leaf.value, tensor, f"weights.example_inputs.leaves[{i}]")
              for i, leaf in enumerate(ex.leaves)]
    if spec.num_leaves != len(leaves):
        raise MalformedArtifactError(f"weights.example_inputs: the spec has {spec.num_leaves} leaves but "
                                     f"{len(leaves)} are stored; {_FIX}")
    out = pytree.tree_unflatten(leaves, spec)
    if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[0], tuple) and isinstance(out[1], dict)):
        raise MalformedArtifactError(f"weights.example_inputs: the spec does not describe (args, kwargs); {_FIX}")
    return out


_DESERIALIZE_LEAF: dict[str, Callable[[Any, Callable, str], Any]] = {
    "as_none": lambda v, tensor, where: None,
    "as_tensor": lambda v, tensor, where: tensor(v, where),
    "as_int": lambda v, tensor, where: v,
    "as_float": lambda v, tensor, where: schema.from_f64(v),
    "as_bool": lambda v, tensor, where: v,
    "as_string": lambda v, tensor, where: v,
}

# Each direction dispatches every ExampleLeaf member exactly once.
for _table in (_SERIALIZE_LEAF, _DESERIALIZE_LEAF):
    assert set(_table) == set(schema.ExampleLeaf.__struct_fields__), "ExampleLeaf dispatch is incomplete"
assert set(_LEAF_KINDS.values()) | {"as_tensor"} == set(schema.ExampleLeaf.__struct_fields__)


# ---------------------------------------------------------------- helpers


def _sorted_names(d: Mapping[str, Any], what: str) -> list[str]:
    for k in d:
        if not isinstance(k, str):
            raise UnsupportedConstructError(f"{what}: key {k!r} is not a string")
    return sorted(d)


def _check_byteorder() -> None:
    if sys.byteorder != "little":
        raise UnsupportedConstructError(
            "pt2serde stores tensor bytes little-endian and does not byte-swap; this big-endian host "
            "cannot save or load weights")
