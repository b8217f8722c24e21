"""Tensors <-> :class:`serde.core.schema.Weights` plus content-addressed payloads.

* Tensors are grouped by their underlying storage (identity of the storage object, never equal
  content). Each :class:`~serde.core.schema.Storage` is the raw bytes of one whole storage, named by
  their sha256; each :class:`~serde.core.schema.StoredTensor` is a view into it (dtype, sizes, strides,
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
* Tensors without data (FakeTensors, meta tensors) are saved as storages with a ``device`` and no
  payload. They load as FakeTensors of one FakeTensorMode per load (meta tensors stay meta), never
  as made-up values: ``torch.export.load`` gives fake example inputs back as FakeTensors but fills
  fake weights with zeros, which would let a program that never had weights run and print numbers.
  One mode for the whole load keeps weights and example inputs usable together, as they were when
  the program was exported under one FakeTensorMode.
* Traceable wrapper subclasses (``__tensor_flatten__``) are saved as their inner tensors (views of
  storages like any other, so aliasing with other tensors survives) plus their flatten context as
  data; loading rebuilds only classes registered with :mod:`serde.bridge.subclasses`.

The checks of weights.json that need no torch (names, shapes, storages, views) are in
:mod:`serde.core.checks.weights`; ``deserialize_weights`` runs them before torch sees a tensor.
"""

from __future__ import annotations

import contextlib
import ctypes
import sys
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode, is_fake

from serde.archive import digest_all, sha256_hex
from serde.core import schema, wire
from serde.core.checks.names import IDENT
from serde.core.checks.weights import MAX_SUBCLASS_DEPTH, validate_weights
from serde.core.errors import InvalidBoolError
from serde.core.memo import Memo
from serde.core.payloads import payload_name
from serde.errors import MalformedArtifactError, UnsupportedConstructError

from .enums import SCALAR_TO_DTYPE, serialize_dtype
from .isolation import outside_ambient_modes
from .subclasses import (
    deserialize_context,
    is_traceable_subclass,
    lookup_subclass,
    serialize_context,
    subclass_name,
)
from .treespec import deserialize_treespec, serialize_treespec
from .values import deserialize_device, serialize_device

__all__ = ["serialize_weights", "deserialize_weights", "device_text", "saved_devices", "alias_key"]

_INT64_MAX = (1 << 63) - 1
_FIX = "the artifact is damaged or hand-edited; re-save it with pt2serde"


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
    w: schema.Weights, member: Callable[[str], memoryview], *,
    place: Mapping[str, torch.device] | None = None,
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], tuple[tuple, dict] | None]:
    """Rebuild tensors from ``w`` and payload bytes, validating every view first.

    Args:
        w: decoded weights.json.
        member: returns the bytes of an archive member (``ArchiveContents.member``).
        place: saved device (``"cuda:0"``, see :func:`saved_devices`) -> the device to load those
            storages on; storages of devices not named here load on the CPU.

    Returns:
        ``(state_dict, constants, example_inputs)``; tensors are plain (not nn.Parameter) with
        ``requires_grad`` as stored; example_inputs is ``(args, kwargs)`` or None.

    Raises:
        MalformedArtifactError subclasses naming the offending entry, e.g. ``weights.state_dict["w"]``.
        UnknownTensorSubclassError: a tensor subclass whose class is not registered
            (``serde.register_tensor_subclass``).
    """
    _check_byteorder()
    validate_weights(w, lambda name: len(member(name)))
    with outside_ambient_modes():  # real tensors, even inside a caller's FakeTensorMode
        return _deserialize_weights(w, member, place or {})


def _deserialize_weights(w: schema.Weights, member: Callable[[str], memoryview],
                         place: Mapping[str, Any]) -> tuple[dict, dict, Any]:
    tensor = _TensorBuilder(w, member, place).tensor
    sd = {name: tensor(t, f"weights.state_dict[{name!r}]") for name, t in w.state_dict.items()}
    consts = {name: tensor(t, f"weights.constants[{name!r}]") for name, t in w.constants.items()}
    examples = None if w.example_inputs is None else _deserialize_example_inputs(w.example_inputs, tensor)
    return sd, consts, examples


def device_text(d: schema.Device | None) -> str:
    """``"cuda:0"``, ``"cpu"`` (also for an unset device), as torch prints devices."""
    if d is None:
        return "cpu"
    return d.type if d.index is None else f"{d.type}:{d.index}"


def saved_devices(w: schema.Weights) -> set[str]:
    """The devices the stored weights with data lived on (``"cpu"`` included when any did)."""
    return {device_text(s.device) for s in w.storages if s.sha256}


def _moved(storage: Any, device: Any) -> Any:
    return torch.empty(0, dtype=torch.uint8).set_(storage).to(device).untyped_storage()


def alias_key(t: torch.Tensor) -> tuple:
    """What a loaded tensor views: equal keys mean the same memory seen the same way.

    A subclass is keyed by identity: loading already returns one object for identical stored
    subclasses, as it returns views of one storage for plain tensors.
    """
    if is_traceable_subclass(t):
        return ("subclass", id(t))
    return (t.untyped_storage()._cdata, t.storage_offset(), tuple(t.shape), t.stride(), t.dtype)


# ---------------------------------------------------------------- save side


class _StorageTable:
    """Storages in first-seen order, keyed by storage identity; payloads keyed by content."""

    def __init__(self) -> None:
        # Per storage, in first-seen order: its bytes, or (nbytes, device) when saved without data.
        self._views: list[memoryview | bytes | tuple[int, schema.Device]] = []
        self._devices: list[schema.Device | None] = []  # per storage with data: its device unless the CPU
        self._index: dict[int, int] = {}
        self._keep: list[Any] = []  # storages whose ids key _index must outlive this table

    def finish(self) -> tuple[list[schema.Storage], dict[str, memoryview | bytes]]:
        """The storages (hashed all at once, big ones in parallel) and payloads by member name."""
        real = [v for v in self._views if not isinstance(v, tuple)]
        shas = iter(digest_all(sha256_hex, real))
        storages, payloads = [], {}
        for view, device in zip(self._views, self._devices, strict=True):
            if isinstance(view, tuple):
                storages.append(schema.Storage(sha256="", nbytes=view[0], device=view[1]))
                continue
            sha = next(shas)
            payloads.setdefault(payload_name(sha), view)
            storages.append(schema.Storage(sha256=sha, nbytes=len(view), device=device))
        return storages, payloads

    def add(self, t: Any, where: str, depth: int = 0) -> schema.StoredTensor:
        if is_traceable_subclass(t):
            return self._add_subclass(t, where, depth)
        t, has_data = _plain_tensor(t, where)
        dtype = serialize_dtype(t.dtype, where)
        st = t.untyped_storage()
        key = st._cdata  # the StorageImpl: equal for every tensor sharing this storage
        index = self._index.get(key)
        if index is None:
            index = self._index[key] = len(self._views)
            if has_data:
                self._views.append(_storage_bytes(st if st.device.type == "cpu" else st.cpu()))
                self._devices.append(None if t.device.type == "cpu" else serialize_device(t.device))
            else:
                self._views.append((int(st.nbytes()), serialize_device(t.device)))
                self._devices.append(None)
            self._keep.append(st)
        return schema.StoredTensor(
            dtype=dtype, sizes=list(t.shape), strides=list(t.stride()), storage_offset=t.storage_offset(),
            storage=index, requires_grad=bool(t.requires_grad),
        )

    def _add_subclass(self, t: Any, where: str, depth: int) -> schema.StoredTensor:
        cls = type(t)
        if depth >= MAX_SUBCLASS_DEPTH:
            raise UnsupportedConstructError(f"{where}: tensor subclasses nest deeper than {MAX_SUBCLASS_DEPTH} levels")
        attrs, ctx = t.__tensor_flatten__()
        inner = {}
        for attr in attrs:
            if not (isinstance(attr, str) and IDENT.fullmatch(attr)):
                raise UnsupportedConstructError(f"{where}: {cls.__qualname__}.__tensor_flatten__ names inner "
                                                f"tensor {attr!r}, which is not an attribute name")
            inner[attr] = self.add(getattr(t, attr), f"{where}.{attr}", depth + 1)
        context = serialize_context(ctx, f"{where}: the flatten context of {cls.__qualname__}")
        sizes, strides = _static_ints(t.shape, where), _static_ints(t.stride(), where)
        return schema.StoredTensor(
            dtype=serialize_dtype(t.dtype, where), sizes=sizes, strides=strides,
            storage_offset=_static_ints([t.storage_offset()], where)[0], storage=-1,
            requires_grad=bool(t.requires_grad),
            subclass=schema.TensorSubclass(class_name=subclass_name(cls), inner=inner, context=context),
        )


def _plain_tensor(t: Any, where: str) -> tuple[torch.Tensor, bool]:
    """``t`` as the plain tensor to store (lazy conj/neg bits resolved), and whether it has data
    (torch's is_fake, asked once: it costs more than the rest of these checks together)."""
    if not isinstance(t, torch.Tensor):
        raise UnsupportedConstructError(
            f"{where}: a {type(t).__module__}.{type(t).__qualname__} is not a tensor; only tensors can be "
            "stored as weights (custom objects are not supported)")
    if type(t) not in (torch.Tensor, torch.nn.Parameter, FakeTensor):
        raise UnsupportedConstructError(
            f"{where}: tensor subclass {type(t).__qualname__} cannot be stored: it does not implement "
            "__tensor_flatten__ / __tensor_unflatten__; convert it to a plain torch.Tensor before exporting")
    kind = ("quantized" if t.is_quantized else "nested" if t.is_nested
            else None if t.layout == torch.strided else str(t.layout).removeprefix("torch."))
    if kind is not None:
        raise UnsupportedConstructError(
            f"{where}: {kind} tensors cannot be stored; only dense (strided) tensors with a plain dtype "
            "are supported (convert with .to_dense() / .dequantize() before exporting)")
    has_data = _has_data(t)
    if not has_data:
        _static_ints([*t.shape, *t.stride(), t.storage_offset()], where)
    if t.is_conj() or t.is_neg():
        # A lazy conj/neg bit is not part of the storage bytes; store the resolved values instead.
        t = t.resolve_conj().resolve_neg()
    return t, has_data


def _has_data(t: Any) -> bool:
    return not (t.device.type == "meta" or is_fake(t))


def _static_ints(values: Any, where: str) -> list[int]:
    """Sizes of a tensor saved without data must be plain ints (weights have no symbolic shapes)."""
    out = []
    for v in values:
        if type(v) is not int:
            raise UnsupportedConstructError(
                f"{where}: size, stride or offset {v} is symbolic; only tensors with static shapes can be "
                "stored as weights or example inputs (export with concrete example inputs)")
        out.append(v)
    return out


def _storage_bytes(st: Any) -> memoryview | bytes:
    """Zero-copy view of a CPU storage's bytes; it keeps the storage alive."""
    n = st.nbytes()
    if n == 0:
        return b""
    arr = (ctypes.c_char * n).from_address(st.data_ptr())
    arr._owner = st  # type: ignore[attr-defined]
    return memoryview(arr).cast("B")


def _serialize_example_inputs(example_inputs: Any, table: _StorageTable) -> schema.ExampleInputs:
    if not (isinstance(example_inputs, tuple) and len(example_inputs) == 2
            and isinstance(example_inputs[0], tuple) and isinstance(example_inputs[1], dict)):
        raise UnsupportedConstructError(
            f"example_inputs: expected (args: tuple, kwargs: dict), got {type(example_inputs).__name__}")
    # Leaves are flattened without their key paths (half the cost); a leaf that cannot be stored
    # is found again with its path, so that the error names it.
    flat, spec = pytree.tree_flatten(example_inputs)
    try:
        leaves = [_example_leaf(value, table, "example_inputs") for value in flat]
    except UnsupportedConstructError:
        for path, value in pytree.tree_flatten_with_path(example_inputs)[0]:
            _example_leaf(value, _StorageTable(), f"example_inputs{pytree.keystr(path)}")
        raise
    return schema.ExampleInputs(spec=serialize_treespec(spec, "example_inputs.spec"), leaves=leaves)


def _example_leaf(value: Any, table: _StorageTable, where: str) -> schema.ExampleLeaf:
    kind = _leaf_kind(value, where)
    return schema.ExampleLeaf(**{kind: _SERIALIZE_LEAF[kind](value, table, where)})


def _leaf_kind(value: Any, where: str) -> str:
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


class _TensorBuilder:
    """Builds the tensors of one load: storages once, FakeTensors in one mode, subclasses once each."""

    def __init__(self, w: schema.Weights, member: Callable[[str], memoryview],
                 place: Mapping[str, Any]) -> None:
        self._fake_mode: Any = None
        self._devices: list[Any] = []  # per storage: None (real bytes) or the device of one saved without data
        self._storages = _load_storages(w, member, self._abstract_storage, self._devices)
        self._placed: dict[int, Any] = {}  # storage index -> device, for real bytes not on the CPU
        for i, s in enumerate(w.storages):
            target = place.get(device_text(s.device)) if s.sha256 and s.device is not None else None
            if target is not None and target.type != "cpu":
                self._storages[i] = _moved(self._storages[i], target)
                self._placed[i] = target
        self._subclasses: dict[bytes, Any] = {}

    def tensor(self, t: schema.StoredTensor, where: str) -> torch.Tensor:
        if t.subclass is not None:
            return self._subclass(t, where)
        dtype, device = SCALAR_TO_DTYPE[t.dtype], self._devices[t.storage]
        placed = self._placed.get(t.storage)
        if placed is not None:
            out = torch.empty(0, dtype=dtype, device=placed).set_(
                self._storages[t.storage], t.storage_offset, t.sizes, t.strides)
            return out.requires_grad_(t.requires_grad)
        if device is None:
            out = torch.empty(0, dtype=dtype).set_(self._storages[t.storage], t.storage_offset, t.sizes, t.strides)
            if t.dtype == schema.ScalarType.BOOL and out.numel() and int(out.view(torch.uint8).max()) > 1:
                raise InvalidBoolError(f"{where}: a bool tensor holds bytes other than 0 and 1; {_FIX}")
            return out.requires_grad_(t.requires_grad)
        with self._mode_for(device):
            out = torch.empty(0, dtype=dtype, device=device).set_(
                self._storages[t.storage], t.storage_offset, t.sizes, t.strides)
            return out.requires_grad_(t.requires_grad)

    def _mode_for(self, device: Any) -> Any:
        return contextlib.nullcontext() if device.type == "meta" else self._fake_mode

    def _abstract_storage(self, s: schema.Storage, where: str) -> Any:
        try:
            device = deserialize_device(s.device)
        except MalformedArtifactError as e:
            raise MalformedArtifactError(f"{where}: {e}; {_FIX}") from None
        self._devices.append(device)
        if device.type == "meta":
            return torch.empty(s.nbytes, dtype=torch.uint8, device=device).untyped_storage()
        if self._fake_mode is None:
            self._fake_mode = FakeTensorMode()
        with self._fake_mode:
            return torch.empty(s.nbytes, dtype=torch.uint8, device=device).untyped_storage()

    def _subclass(self, t: schema.StoredTensor, where: str) -> torch.Tensor:
        key = wire.encode(t)
        done = self._subclasses.get(key)
        if done is not None:  # the same stored subclass again (a tied weight): the same object
            return done
        sc = t.subclass
        cls = lookup_subclass(sc.class_name, where)
        inner = {name: self.tensor(it, f"{where}.subclass.inner[{name!r}]") for name, it in sc.inner.items()}
        ctx = deserialize_context(sc.context, f"{where}.subclass.context")
        try:
            out = cls.__tensor_unflatten__(inner, ctx, torch.Size(t.sizes), tuple(t.strides))
        except Exception as e:  # the registered class's own code rejected the stored data
            raise MalformedArtifactError(
                f"{where}: {sc.class_name}.__tensor_unflatten__ failed on the stored inner tensors and context "
                f"({type(e).__name__}: {e}); {_FIX}") from None
        if not (isinstance(out, cls) and out.dtype == SCALAR_TO_DTYPE[t.dtype] and list(out.shape) == t.sizes
                and list(out.stride()) == t.strides):
            raise MalformedArtifactError(
                f"{where}: {sc.class_name}.__tensor_unflatten__ gave a {type(out).__qualname__} "
                f"{getattr(out, 'dtype', '?')}{list(getattr(out, 'shape', []))}, not the stored "
                f"{t.dtype.name}{t.sizes} with strides {t.strides}; {_FIX}")
        if out.requires_grad != t.requires_grad:
            out.requires_grad_(t.requires_grad)
        self._subclasses[key] = out
        return out


def _load_storages(w: schema.Weights, member: Callable[[str], memoryview],
                   abstract: Callable[[schema.Storage, str], Any], devices: list[Any]) -> list[Any]:
    out = []
    used: set[str] = set()
    for i, s in enumerate(w.storages):
        if s.sha256 == "":
            out.append(abstract(s, f"weights.storages[{i}]"))
            continue
        devices.append(None)
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
    dst = torch.empty(len(view), dtype=torch.uint8)
    memoryview((ctypes.c_char * len(view)).from_address(dst.data_ptr())).cast("B")[:] = view
    return dst.untyped_storage()


def _deserialize_example_inputs(ex: schema.ExampleInputs, tensor: Callable[[schema.StoredTensor, str], Any]
                                ) -> tuple[tuple, dict]:
    spec = _example_spec(ex.spec)
    leaves = [_DESERIALIZE_LEAF[k](getattr(leaf, k), tensor, f"weights.example_inputs.leaves[{i}]")
              for i, leaf in enumerate(ex.leaves) for k in (leaf.kind,)]
    if spec.num_leaves != len(leaves):
        raise MalformedArtifactError(f"weights.example_inputs: the spec has {spec.num_leaves} leaves but "
                                     f"{len(leaves)} are stored; {_FIX}")
    out = pytree.tree_unflatten(leaves, spec)
    if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[0], tuple) and isinstance(out[1], dict)):
        raise MalformedArtifactError(f"weights.example_inputs: the spec does not describe (args, kwargs); {_FIX}")
    return out


def _example_spec(s: schema.TreeSpec) -> Any:
    """``deserialize_treespec`` of the example inputs' spec, remembered per process (bounded) by
    the exact encoding of the stored spec when it holds only tuples, lists, dicts, None and
    leaves: building those depends on nothing but the stored content (no registered pytree
    type, which a process may register or drop), and the spec only unflattens this load's leaves
    (no program keeps it). Other specs are built on every load."""
    key = wire.encode(s)
    spec = _EXAMPLE_SPECS.get(key)
    if spec is None:
        spec = deserialize_treespec(s, "weights.example_inputs.spec")
        if _builtin_only(spec):
            _EXAMPLE_SPECS.remember(key, spec)
    return spec


def _builtin_only(spec: Any) -> bool:
    return (spec.is_leaf() or spec.type in _BUILTIN_CONTAINERS) and all(_builtin_only(c) for c in spec.children())


_BUILTIN_CONTAINERS = (tuple, list, dict, type(None))
_EXAMPLE_SPECS = Memo(1 << 8, "example_specs")


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
