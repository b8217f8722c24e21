"""Custom objects (torchbind ``ScriptObject``\\ s, opaque objects) <-> bytes, through an explicit registry.

An exported program that uses a custom object lists it among ``ep.constants`` and names its class
in the signature (a ``custom_obj`` input spec). Nothing is ever pickled: for each class the user
registers an encoder to bytes and a decoder back::

    serde.register_custom_object(
        "__torch__.torch.classes.mylib.Tokenizer",          # serde.class_fqn_of(obj) tells the name
        encode=lambda tok: tok.serialize_to_bytes(),
        decode=lambda data: torch.classes.mylib.Tokenizer.from_bytes(data),
    )
    # or, for state that is plain JSON:
    serde.register_json_custom_object(MyOpaque, to_json=lambda o: {"n": o.n}, from_json=lambda d: MyOpaque(d["n"]))

On save, the encoded bytes travel as a 1-D ``uint8`` tensor constant under the object's own name
(so they are stored, checksummed and deduplicated like any other payload); on load the signature's
``custom_obj`` spec says which constants to decode, and with which class's decoder. An object whose
class has no codec fails at save time, naming the constant and the class.

``torch.Generator`` (an opaque class to torch) has a built-in codec: export lifts a generator that
``forward`` seeds or holds into a constant, and its device and state are all it is.
"""

from __future__ import annotations

import ctypes
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec
import torch

from serde.errors import (
    MalformedArtifactError,
    SerializeError,
    UnsupportedConstructError,
)

from .errors import UnknownCustomObjectError

__all__ = [
    "register_custom_object",
    "register_json_custom_object",
    "unregister_custom_object",
    "registered_classes",
    "class_fqn_of",
    "encode_constants",
    "decode_constants",
    "GENERATOR_CLASS",
]


@dataclass(frozen=True)
class _Codec:
    encode: Callable[[Any], bytes]
    decode: Callable[[bytes], Any]


_CODECS: dict[str, _Codec] = {}


def register_custom_object(cls: str | type, *, encode: Callable[[Any], bytes],
                           decode: Callable[[bytes], Any]) -> None:
    """Register how objects of one class are saved and loaded (replaces an earlier registration).

    Args:
        cls: the class name as torch records it (``class_fqn_of(obj)``; for torchbind classes
            ``"__torch__.torch.classes.<ns>.<Name>"``), or an opaque class registered with
            ``torch._library.opaque_object.register_opaque_type``.
        encode: object -> ``bytes``; it must capture everything the object needs to be rebuilt.
        decode: ``bytes`` -> object of the same class.

    Raises:
        TypeError: ``cls`` is neither a string nor an opaque class, or a codec is not callable.
    """
    if not (callable(encode) and callable(decode)):
        raise TypeError("register_custom_object: encode and decode must be callables")
    _CODECS[_class_name(cls)] = _Codec(encode, decode)


def register_json_custom_object(cls: str | type, *, to_json: Callable[[Any], Any],
                                from_json: Callable[[Any], Any]) -> None:
    """Like :func:`register_custom_object` for state that is plain JSON (stored with sorted keys).

    Args:
        to_json: object -> JSON value (dicts with str keys, lists, str, int, finite float, bool, None).
        from_json: that JSON value -> object.
    """
    def encode(obj: Any) -> bytes:
        return json.dumps(to_json(obj), sort_keys=True, separators=(",", ":"), allow_nan=False).encode()

    def decode(data: bytes) -> Any:
        return from_json(json.loads(data.decode("utf-8")))

    register_custom_object(cls, encode=encode, decode=decode)


def unregister_custom_object(cls: str | type) -> None:
    """Forget the codec of ``cls`` (no error when there is none)."""
    _CODECS.pop(_class_name(cls), None)


def registered_classes() -> list[str]:
    """Class names that have a codec, sorted."""
    return sorted(_CODECS)


def class_fqn_of(obj: Any) -> str | None:
    """The class name torch records for a custom object, or None when ``obj`` is not one."""
    if isinstance(obj, torch.ScriptObject):
        return obj._type().qualified_name()  # type: ignore[attr-defined]
    from torch._library.opaque_object import get_opaque_type_name, is_opaque_type

    if is_opaque_type(type(obj)):
        return get_opaque_type_name(type(obj))
    return None


def encode_constants(constants: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """``ep.constants`` as tensors: each custom object becomes a uint8 tensor of its encoded bytes.

    Raises:
        UnsupportedConstructError: a constant is neither a tensor nor a custom object, or its class
            has no registered codec, or the encoder did not return bytes (names the constant).
    """
    out: dict[str, torch.Tensor] = {}
    for name, value in constants.items():
        if isinstance(value, torch.Tensor):
            out[name] = value
            continue
        where = f"constants[{name!r}]"
        fqn = class_fqn_of(value)
        if fqn is None:
            raise UnsupportedConstructError(
                f"{where}: a {type(value).__qualname__} constant cannot be stored; constants must be "
                "tensors or custom objects (torchbind ScriptObjects or registered opaque objects)"
            )
        codec = _CODECS.get(fqn)
        if codec is None:
            raise UnsupportedConstructError(
                f"{where}: custom object of class {fqn!r} has no registered codec, and pt2serde never "
                "pickles. Register one before saving: serde.register_custom_object("
                f"{fqn!r}, encode=<obj -> bytes>, decode=<bytes -> obj>) (or register_json_custom_object)."
            )
        try:
            data = codec.encode(value)
        except SerializeError:
            raise
        except Exception as e:
            raise UnsupportedConstructError(f"{where}: the encoder registered for {fqn!r} failed: "
                                            f"{type(e).__name__}: {e}") from e
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise UnsupportedConstructError(
                f"{where}: the encoder registered for {fqn!r} returned {type(data).__name__}; it must "
                "return bytes"
            )
        out[name] = _uint8_tensor(bytes(data))
    return out


def decode_constants(constants: Mapping[str, Any], custom_objs: Mapping[str, str]) -> dict[str, Any]:
    """Inverse of :func:`encode_constants`.

    Args:
        constants: the constants as loaded (tensors).
        custom_objs: constant name -> class name, from the signature's custom_obj specs.

    Raises:
        UnknownCustomObjectError: a class has no codec in this process (names it and how to register).
        MalformedArtifactError: a custom object's bytes are missing or not a 1-D uint8 tensor.
        SerializeError: the decoder failed or returned an object of another class.
    """
    out = dict(constants)
    for name, fqn in custom_objs.items():
        where = f"constants[{name!r}]"
        t = constants.get(name)
        if not isinstance(t, torch.Tensor) or t.dtype != torch.uint8 or t.dim() != 1:
            raise MalformedArtifactError(
                f"{where}: the signature declares a custom object of class {fqn!r}, but the weights hold "
                f"{'nothing' if t is None else _describe(t)} under that name instead of its encoded bytes"
            )
        codec = _CODECS.get(fqn)
        if codec is None:
            raise UnknownCustomObjectError(
                f"{where}: custom object class {fqn!r} has no decoder registered in this process. Import "
                "the library that defines the class (torch.ops.load_library for torchbind classes) and "
                f"register its codec with serde.register_custom_object({fqn!r}, ...) before "
                "loading."
            )
        try:
            obj = codec.decode(_tensor_bytes(t))
        except SerializeError as e:
            raise type(e)(f"{where}: {e}") from None
        except Exception as e:
            raise SerializeError(f"{where}: the decoder registered for {fqn!r} failed: "
                                 f"{type(e).__name__}: {e}") from e
        got = class_fqn_of(obj)
        if got != fqn:
            raise SerializeError(
                f"{where}: the decoder registered for {fqn!r} returned {got or type(obj).__qualname__!r}; "
                "it must return an object of that class"
            )
        out[name] = obj
    return out


class _GeneratorState(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """What a ``torch.Generator`` is: its device and its state (which holds the seed, and on
    devices with a counter-based generator, the offset)."""

    device: str
    state: bytes


#: the class name export records for a lifted torch.Generator (an opaque class to torch)
GENERATOR_CLASS = "torch._C.Generator"
_generator_state_decoder = msgspec.json.Decoder(_GeneratorState)


def _encode_generator(g: torch.Generator) -> bytes:
    return msgspec.json.encode(_GeneratorState(device=str(g.device), state=_tensor_bytes(g.get_state())))


def _decode_generator(data: bytes) -> torch.Generator:
    try:
        saved = _generator_state_decoder.decode(data)
    except msgspec.DecodeError as e:
        raise MalformedArtifactError(f"the stored torch.Generator is not valid: {e}") from None
    try:
        device = torch.device(saved.device)
    except RuntimeError:
        raise MalformedArtifactError(f"the stored torch.Generator's device {saved.device!r} is not a device") from None
    try:
        g = torch.Generator(device)
    except RuntimeError as e:
        raise SerializeError(
            f"the program holds a torch.Generator on {device}, which this process cannot make "
            f"({str(e).splitlines()[0]}); load it where that device is available") from None
    try:
        g.set_state(_uint8_tensor(saved.state))
    except RuntimeError as e:
        raise MalformedArtifactError(
            f"the stored torch.Generator's state does not fit a {device} generator: {str(e).splitlines()[0]}") from None
    return g


_CODECS[GENERATOR_CLASS] = _Codec(_encode_generator, _decode_generator)


def _class_name(cls: str | type) -> str:
    if isinstance(cls, str):
        if not cls:
            raise TypeError("custom object class name must not be empty")
        return cls
    from torch._library.opaque_object import get_opaque_type_name, is_opaque_type

    if isinstance(cls, type) and is_opaque_type(cls):
        return get_opaque_type_name(cls)
    raise TypeError(
        f"expected a class name (str) or an opaque class registered with register_opaque_type, got {cls!r}; "
        "for torchbind classes pass the name class_fqn_of(obj) returns"
    )


def _uint8_tensor(data: bytes) -> torch.Tensor:
    """A 1-D uint8 tensor of its own copy of ``data`` (inverse of :func:`_tensor_bytes`)."""
    return torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)


def _tensor_bytes(t: torch.Tensor) -> bytes:
    t = t.detach().contiguous()
    if t.numel() == 0:
        return b""
    return ctypes.string_at(t.data_ptr(), t.numel())


def _describe(t: Any) -> str:
    if isinstance(t, torch.Tensor):
        return f"a {t.dtype} tensor of shape {list(t.shape)}"
    return f"a {type(t).__qualname__}"
