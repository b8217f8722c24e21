"""Tensor subclasses (``__tensor_flatten__`` / ``__tensor_unflatten__``) through an explicit allow-list.

A traceable wrapper subclass (``torch.testing._internal.two_tensor.TwoTensor``, the tensor types of
quantization libraries, ...) is stored as its inner tensors plus its flatten context, which must be
plain data (:class:`serde.core.schema.ContextValue`). Saving needs no registration; loading rebuilds a
class only when this process registered it::

    import serde
    serde.register_tensor_subclass(TwoTensor)     # stored as "<module>.<qualname>" by default

The class name in a file is only ever looked up in this registry: loading never imports a module
or resolves a name, so a hostile file cannot make it run code the user did not register.
"""

from __future__ import annotations

from typing import Any

import torch

from serde.core import schema
from serde.core.checks.names import CLASS_NAME_RE, MAX_CLASS_NAME, check_class_name
from serde.errors import MalformedArtifactError, UnsupportedConstructError

from .enums import deserialize_dtype, serialize_dtype
from .errors import UnknownTensorSubclassError

__all__ = [
    "register_tensor_subclass",
    "unregister_tensor_subclass",
    "registered_tensor_subclasses",
    "subclass_name",
    "lookup_subclass",
    "is_traceable_subclass",
    "serialize_context",
    "deserialize_context",
]

_REGISTRY: dict[str, type] = {}


def register_tensor_subclass(cls: type, *, name: str | None = None) -> str:
    """Allow loading tensors of ``cls`` (replaces an earlier registration of the same name).

    Args:
        cls: a ``torch.Tensor`` subclass with ``__tensor_flatten__`` and ``__tensor_unflatten__``.
        name: the name stored in artifacts; by default ``"<module>.<qualname>"``. Give one when the
            class moves between modules but its artifacts must keep loading.

    Returns:
        The registered name.

    Raises:
        TypeError: ``cls`` is not a traceable wrapper subclass, or ``name`` is not a dotted name.
    """
    if not (isinstance(cls, type) and issubclass(cls, torch.Tensor) and _has_protocol(cls)):
        raise TypeError(f"register_tensor_subclass: {cls!r} is not a torch.Tensor subclass with "
                        "__tensor_flatten__ and __tensor_unflatten__")
    name = _default_name(cls) if name is None else name
    if not (isinstance(name, str) and len(name) <= MAX_CLASS_NAME and CLASS_NAME_RE.fullmatch(name)):
        raise TypeError(f"register_tensor_subclass: name {name!r} is not a dotted Python name")
    _REGISTRY[name] = cls
    return name


def unregister_tensor_subclass(cls_or_name: type | str) -> None:
    """Forget a registration, by class (every name it has) or by name; no error when absent."""
    if isinstance(cls_or_name, str):
        _REGISTRY.pop(cls_or_name, None)
        return
    for name in [n for n, c in _REGISTRY.items() if c is cls_or_name]:
        del _REGISTRY[name]


def registered_tensor_subclasses() -> dict[str, type]:
    """Registered name -> class, sorted by name."""
    return dict(sorted(_REGISTRY.items()))


def is_traceable_subclass(t: Any) -> bool:
    """True for a tensor whose type implements the flatten protocol (FakeTensor does not)."""
    return isinstance(t, torch.Tensor) and type(t) is not torch.Tensor and _has_protocol(type(t))


def subclass_name(cls: type) -> str:
    """The name saving stores for ``cls``: its registered name (the first, sorted), else the default."""
    names = sorted(n for n, c in _REGISTRY.items() if c is cls)
    return names[0] if names else _default_name(cls)


def lookup_subclass(name: str, where: str) -> type:
    """The class registered under ``name``; never imports anything.

    Raises:
        UnknownTensorSubclassError: nothing is registered under ``name``.
    """
    check_class_name(name, where)
    cls = _REGISTRY.get(name)
    if cls is None:
        raise UnknownTensorSubclassError(
            f"{where}: the tensor subclass {name!r} is not registered in this process, so it is not "
            f"rebuilt (loading never imports classes named by a file). If you trust this class, register "
            f"it before loading:\n{registration_lines(name)}\nRegistered: {sorted(_REGISTRY) or 'none'}")
    return cls


def registration_lines(name: str) -> str:
    """The code that registers the class stored as ``name``, for an error message.

    A stored name is ``<module>.<qualname>`` unless the writer chose another, so the import is
    what the name says; the general form with ``name=`` is given too, for the other cases.
    """
    general = f"serde.register_tensor_subclass(<the class>, name={name!r})"
    module, _, cls = name.rpartition(".")
    if "<locals>" in name or not module:
        return f"    {general}\n(the class object itself: a class defined inside a function cannot be imported)"
    lines = f"    from {module} import {cls}\n    serde.register_tensor_subclass({cls})\n" \
            f"(a class that lives elsewhere than its stored name says: import it from there and call {general})"
    if name.startswith(_TORCH_TEST_MODULES):
        lines += ("; serde.testing.register_torch_test_subclasses() registers torch's own test subclasses "
                  "(torch.testing._internal) at once")
    return lines


# Where torch keeps the tensor subclasses its own tests use (serde.testing can register them).
_TORCH_TEST_MODULES = "torch.testing._internal."


# ---------------------------------------------------------------- flatten context <-> ContextValue


def serialize_context(value: Any, where: str) -> schema.ContextValue:
    """A flatten context as data.

    Raises:
        UnsupportedConstructError: the context holds something other than None, bool, int, float,
            str, list, tuple, dict, torch.dtype, torch.Size or torch.device (names the path).
    """
    t = type(value)
    if value is None:
        return schema.ContextValue(as_none=True)
    if t is bool:
        return schema.ContextValue(as_bool=value)
    if t is int:
        if not -(1 << 63) <= value < (1 << 63):
            raise UnsupportedConstructError(f"{where}: integer {value} does not fit in 64 bits")
        return schema.ContextValue(as_int=value)
    if t is float:
        return schema.ContextValue(as_float=schema.to_f64(value))
    if t is str:
        return schema.ContextValue(as_string=value)
    if t is torch.Size:
        return schema.ContextValue(as_size=[int(s) for s in value])
    if t is torch.dtype:
        return schema.ContextValue(as_dtype=serialize_dtype(value, where))
    if t is torch.device:
        return schema.ContextValue(as_device=schema.Device(type=value.type, index=value.index))
    if t is list:
        return schema.ContextValue(as_list=[serialize_context(v, f"{where}[{i}]") for i, v in enumerate(value)])
    if t is tuple:
        return schema.ContextValue(as_tuple=[serialize_context(v, f"{where}[{i}]") for i, v in enumerate(value)])
    if t is dict:
        return schema.ContextValue(as_dict=[
            schema.ContextItem(key=serialize_context(k, f"{where} key {k!r}"),
                               value=serialize_context(v, f"{where}[{k!r}]"))
            for k, v in value.items()])
    raise UnsupportedConstructError(
        f"{where}: a {t.__module__}.{t.__qualname__} is not representable as data; a flatten context "
        "may hold only None, bool, int, float, str, list, tuple, dict, torch.dtype, torch.Size and "
        "torch.device. Make __tensor_flatten__ return such data (and rebuild the object in "
        "__tensor_unflatten__)")


def deserialize_context(v: schema.ContextValue, where: str) -> Any:
    """Inverse of :func:`serialize_context`; dict keys must be hashable values."""
    return _DESERIALIZE[v.kind](v.value, where)


def _dict(items: list[schema.ContextItem], where: str) -> dict:
    out = {}
    for i, item in enumerate(items):
        key = deserialize_context(item.key, f"{where}[{i}].key")
        if not _hashable(key):
            raise MalformedArtifactError(f"{where}[{i}].key: a {item.key.kind} cannot be a dict key; "
                                         "the artifact is damaged or hand-edited")
        out[key] = deserialize_context(item.value, f"{where}[{i}].value")
    return out


def _dtype(v: schema.ScalarType, where: str) -> Any:
    return deserialize_dtype(v, where)


def _device(d: schema.Device, where: str) -> Any:
    try:
        return torch.device(d.type, d.index) if d.index is not None else torch.device(d.type)
    except (RuntimeError, TypeError) as e:
        raise MalformedArtifactError(f"{where}: invalid device {d.type!r}:{d.index!r} ({e})") from None


def _size(v: list[int], where: str) -> Any:
    return torch.Size(v)


_DESERIALIZE: dict[str, Any] = {
    "as_none": lambda v, where: None,
    "as_int": lambda v, where: v,
    "as_float": lambda v, where: schema.from_f64(v),
    "as_string": lambda v, where: v,
    "as_bool": lambda v, where: v,
    "as_list": lambda v, where: [deserialize_context(x, f"{where}[{i}]") for i, x in enumerate(v)],
    "as_tuple": lambda v, where: tuple(deserialize_context(x, f"{where}[{i}]") for i, x in enumerate(v)),
    "as_dict": _dict,
    "as_dtype": _dtype,
    "as_size": _size,
    "as_device": _device,
}
assert set(_DESERIALIZE) == set(schema.ContextValue.__struct_fields__), "ContextValue dispatch is incomplete"


# ---------------------------------------------------------------- helpers


def _has_protocol(cls: type) -> bool:
    return callable(getattr(cls, "__tensor_flatten__", None)) and callable(getattr(cls, "__tensor_unflatten__", None))


def _default_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _hashable(x: Any) -> bool:
    if isinstance(x, (list, dict)):
        return False
    if isinstance(x, tuple):
        return all(_hashable(v) for v in x)
    return True
