"""Encode and decode schema Structs as JSON bytes. Codecs are built once and reused."""

from __future__ import annotations

import hashlib
import threading
from typing import Any, TypeVar

import msgspec

from serde.errors import MalformedArtifactError

__all__ = ["encode", "decode", "decode_json", "to_builtins", "convert", "sha256_hex"]

T = TypeVar("T")

# order="deterministic" sorts map keys: byte-stable output without a sort pass of our own.
_encoder = msgspec.json.Encoder(order="deterministic")
_decoders: dict[type, msgspec.json.Decoder] = {}
# msgspec fills a Struct class's cached type information the first time a decoder (or convert) meets
# it, and two threads doing that at once crash the interpreter (msgspec 0.22). Building every
# decoder under one lock, before any convert of the same type, makes the first decode thread-safe.
_decoders_lock = threading.Lock()
_raw_decoder = msgspec.json.Decoder()
_TOO_DEEP = ("{where}: JSON nested too deeply to decode; no artifact pt2serde writes comes close, "
             "so the file is damaged or hostile")


def sha256_hex(view: memoryview | bytes) -> str:
    """The sha256 of ``view`` as the format writes it (lowercase hex)."""
    return hashlib.sha256(view).hexdigest()


def encode(obj: Any) -> bytes:
    """Encode a Struct (or plain JSON data) to compact, deterministic JSON bytes."""
    return _encoder.encode(obj)


def decode(data: bytes | str, type_: type[T], *, where: str = "artifact") -> T:
    """Decode JSON bytes into ``type_``; a schema mismatch raises MalformedArtifactError."""
    try:
        return _json(_decoder(type_), data, where)
    except msgspec.ValidationError as e:
        raise MalformedArtifactError(
            f"{where}: does not match schema {type_.__name__}: {e}. "
            "The file is damaged or was written by an incompatible tool."
        ) from None


def decode_json(data: bytes | str, *, where: str = "artifact") -> Any:
    """Decode JSON bytes into plain dicts/lists (for upgraders)."""
    return _json(_raw_decoder, data, where)


def _json(dec: msgspec.json.Decoder, data: bytes | str, where: str) -> Any:
    """``dec.decode(data)``, with what makes the bytes unreadable as JSON reported as a damaged file
    (a schema mismatch, ``msgspec.ValidationError``, is the caller's to word)."""
    try:
        return dec.decode(data)
    except msgspec.ValidationError:
        raise
    except msgspec.DecodeError as e:
        # msgspec 0.23 reports bad UTF-8 as a DecodeError without its place (0.22 raised
        # UnicodeDecodeError): find the byte, so every release words it the same way.
        at = _bad_utf8_at(data) if "UTF-8" in str(e) else None
        if at is not None:
            raise MalformedArtifactError(_BAD_UTF8.format(where=where, at=at)) from None
        raise MalformedArtifactError(f"{where}: invalid JSON: {e}") from None
    except UnicodeDecodeError as e:
        raise MalformedArtifactError(_BAD_UTF8.format(where=where, at=e.start)) from None
    except RecursionError:
        raise MalformedArtifactError(_TOO_DEEP.format(where=where)) from None


_BAD_UTF8 = "{where}: invalid UTF-8 at byte {at} of a string; the file is damaged (pt2serde writes UTF-8 only)"


def _bad_utf8_at(data: bytes | str) -> int | None:
    """The offset of the first byte of ``data`` that is not UTF-8, or None when all of it is."""
    if isinstance(data, str):
        return None
    try:
        bytes(data).decode("utf-8")
    except UnicodeDecodeError as e:
        return e.start
    return None


def convert(obj: Any, type_: type[T]) -> T:
    """``msgspec.convert(obj, type_)``, safe to call from several threads (see ``_decoders_lock``)."""
    _decoder(type_)
    return msgspec.convert(obj, type_)


def _decoder(type_: type) -> msgspec.json.Decoder:
    dec = _decoders.get(type_)
    if dec is None:
        with _decoders_lock:
            dec = _decoders.get(type_)
            if dec is None:
                dec = _decoders[type_] = msgspec.json.Decoder(type_)
    return dec


def to_builtins(obj: Any) -> Any:
    """Struct -> plain dicts/lists, exactly as it would be written."""
    return msgspec.to_builtins(obj)

