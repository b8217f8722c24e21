"""Weights as safetensors files next to an artifact. No torch here.

* Which storages go to a file (:func:`plan_external`): a storage with data whose whole bytes are
  one contiguous tensor of the state dict or the constants (offset 0, row-major strides, element
  count times item size equal to the storage's bytes) in a dtype safetensors names. Its key is the
  first such FQN (state dict names first, then constants, each sorted), so a tied weight is stored
  once, under the first of its names; the artifact's weights.json still lists every name as a view
  of that storage, which is how the tie comes back. Storages no FQN covers (views of a part of a
  storage, transposed or strided tensors), dtypes safetensors lacks (complex128, complex32,
  float8_e8m0fnu), tensor subclasses' inner tensors, custom objects and example inputs stay in the
  archive.
* The file format (https://github.com/huggingface/safetensors): an 8-byte little-endian header
  length, a JSON header (``{"__metadata__": {...}, key: {"dtype", "shape", "data_offsets"}}``,
  padded with spaces to a multiple of 8 bytes), then the tensors' bytes, contiguous, without gaps.
  The writer orders tensors by item size (largest first) and then key, as the safetensors library
  does, so every tensor starts aligned to its item size, and the same storages always give the same
  bytes.
* Reading never trusts a file: the header length is capped, the header is parsed as JSON data
  only, every entry's dtype, shape and offsets are checked, the byte length of each tensor must be
  its element count times its item size, and the tensors must cover the data exactly, in order,
  without overlap or gap. A file the artifact records is read whole into private memory (or mapped
  copy-on-write) and its size and XXH3-128 checked before any byte is used.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import mmap as _mmap
import os
import re
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
import xxhash

from serde.core import schema
from serde.core.wire import sha256_hex
from serde.errors import (
    MalformedArtifactError,
    SerializeError,
    UnsafeArtifactError,
    UnsupportedConstructError,
)
from serde.fileio import ArtifactNotFoundError, digest_all, os_error, write_atomic

from .members import payload_name

__all__ = [
    "DTYPE_NAMES", "ITEMSIZES", "MAX_HEADER_BYTES", "FILE_NAME_RE", "Planned", "Entry", "Header",
    "WeightsFileError", "MissingWeightsFileError", "WeightsFileSizeError", "WeightsFileDigestError",
    "InvalidWeightsFileError", "WeightsMismatchError",
    "plan_external", "custom_object_constants", "weights_path", "write_external", "parse_header",
    "header_bytes", "shard_names", "read_index", "resolve_sources", "external_payloads", "bind_payloads",
    "structure_only", "BoundWeights", "bind_plan", "payload_reader",
]

ST = schema.ScalarType
# The safetensors name of every ScalarType the format has (as the safetensors library maps torch's).
DTYPE_NAMES: dict[schema.ScalarType, str] = {
    ST.BOOL: "BOOL", ST.BYTE: "U8", ST.CHAR: "I8", ST.SHORT: "I16", ST.UINT16: "U16", ST.INT: "I32",
    ST.UINT32: "U32", ST.LONG: "I64", ST.UINT64: "U64", ST.HALF: "F16", ST.BFLOAT16: "BF16", ST.FLOAT: "F32",
    ST.DOUBLE: "F64", ST.COMPLEXFLOAT: "C64", ST.FLOAT8E4M3FN: "F8_E4M3", ST.FLOAT8E5M2: "F8_E5M2",
    ST.FLOAT8E4M3FNUZ: "F8_E4M3FNUZ", ST.FLOAT8E5M2FNUZ: "F8_E5M2FNUZ",
}
ITEMSIZES: dict[str, int] = {
    "BOOL": 1, "U8": 1, "I8": 1, "I16": 2, "U16": 2, "I32": 4, "U32": 4, "I64": 8, "U64": 8, "F16": 2, "BF16": 2,
    "F32": 4, "F64": 8, "C64": 8, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E4M3FNUZ": 1, "F8_E5M2FNUZ": 1,
}
# The safetensors library refuses headers over 100 MB; so do we, before reading one.
MAX_HEADER_BYTES = 100 << 20
_MAX_RANK = 64
_MAX_KEY = 1024
_INT64_MAX = (1 << 63) - 1
# A file name the artifact may record: no directory, nothing hidden, the safetensors suffix.
FILE_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,199}\.safetensors")
_INDEX_SUFFIX = ".safetensors.index.json"
_MAX_INDEX_BYTES = 64 << 20
_FIX = "re-save the program with serde.save(ep, path, weights=...), or fetch intact copies of the files"


# ---------------------------------------------------------------- errors


class WeightsFileError(MalformedArtifactError):
    """A safetensors file of an artifact is not what the artifact records."""


class MissingWeightsFileError(WeightsFileError):
    """A safetensors file the artifact records is not next to it (or no directory to look in)."""


class WeightsFileSizeError(WeightsFileError):
    """A safetensors file has another size than the artifact records (truncated, grown, swapped)."""


class WeightsFileDigestError(WeightsFileError):
    """A safetensors file's bytes differ from those the artifact records (edited or swapped)."""


class InvalidWeightsFileError(UnsafeArtifactError):
    """A file is not a well-formed safetensors file (header size, JSON, dtypes, shapes, offsets)."""


class WeightsMismatchError(SerializeError):
    """Safetensors files given to bind do not hold the program's tensors (keys, dtypes or shapes)."""


# ---------------------------------------------------------------- what goes where


@dataclass(frozen=True)
class Planned:
    """One storage stored as one safetensors tensor."""

    storage: int
    key: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int


def _covers(t: schema.StoredTensor, s: schema.Storage) -> bool:
    """Whether the view ``t`` is the whole storage ``s``, contiguous, in a dtype safetensors has."""
    if t.subclass is not None or t.storage_offset != 0 or t.dtype not in DTYPE_NAMES:
        return False
    numel, expect = 1, 1
    for n in t.sizes:
        numel *= n
    for n, stride in zip(reversed(t.sizes), reversed(t.strides), strict=True):
        if n != 1 and stride != expect:
            return numel == 0 and numel * ITEMSIZES[DTYPE_NAMES[t.dtype]] == s.nbytes
        expect *= n
    return numel * ITEMSIZES[DTYPE_NAMES[t.dtype]] == s.nbytes


def custom_object_constants(program: schema.ExportedProgram) -> set[str]:
    """Names of the constants that are custom objects (stored as their codec's bytes)."""
    return {s.custom_obj.custom_obj_name for s in program.graph_module.signature.input_specs
            if s.custom_obj is not None}


def plan_external(w: schema.Weights, exclude: Iterable[str] = ()) -> list[Planned]:
    """The storages that go to safetensors files, in storage order (see the module docstring);
    constants named in ``exclude`` (custom objects) never do."""
    skip = set(exclude)
    chosen: dict[int, Planned] = {}
    keys: set[str] = set()
    for table in (w.state_dict, w.constants):
        for name in sorted(table):
            t = table[name]
            if (table is w.constants and name in skip) or name in keys or not 0 <= t.storage < len(w.storages):
                continue
            s = w.storages[t.storage]
            if t.storage in chosen or not s.sha256 or not _covers(t, s):
                continue
            chosen[t.storage] = Planned(t.storage, name, DTYPE_NAMES[t.dtype], tuple(t.sizes), s.nbytes)
            keys.add(name)
    return [chosen[i] for i in sorted(chosen)]


def _recorded(w: schema.Weights) -> list[tuple[Planned, int]]:
    """The external storages an artifact records, each with its file index, checked against the
    views that name them (their dtype and shape are what the file must hold)."""
    out = []
    files = w.files or []
    for i, s in enumerate(w.storages):
        ref = s.external
        if ref is None:
            continue
        where = f"weights.storages[{i}].external"
        if not 0 <= ref.file < len(files):
            raise MalformedArtifactError(f"{where}: file index {ref.file} is out of range (the artifact records "
                                         f"{len(files)} files); the artifact is damaged: {_FIX}")
        t = w.state_dict.get(ref.key) or w.constants.get(ref.key)
        if t is None or t.storage != i or not s.sha256 or not _covers(t, s):
            raise MalformedArtifactError(f"{where}: key {ref.key[:80]!r} does not name a tensor that is the whole of "
                                         f"this storage; the artifact is damaged: {_FIX}")
        out.append((Planned(i, ref.key, DTYPE_NAMES[t.dtype], tuple(t.sizes), s.nbytes), ref.file))
    for k, f in enumerate(files):
        if not FILE_NAME_RE.fullmatch(f.name):
            raise UnsafeArtifactError(f"weights.files[{k}]: file name {f.name[:80]!r} is not a plain "
                                      "'<name>.safetensors' (no directory); the artifact is damaged or hostile")
        if not 0 <= f.size <= _INT64_MAX:
            raise MalformedArtifactError(f"weights.files[{k}] ({f.name!r}): size {f.size} is out of range; {_FIX}")
    return out


# ---------------------------------------------------------------- writing


def header_bytes(tensors: Sequence[Planned], metadata: Mapping[str, str] | None = None
                 ) -> tuple[bytes, list[tuple[Planned, int]]]:
    """The header of a file holding ``tensors`` (8-byte length included), and the tensors in data
    order with their offsets in the data."""
    order = sorted(tensors, key=lambda p: (-ITEMSIZES[p.dtype], p.key))
    head: dict[str, Any] = {"__metadata__": dict(metadata or {"format": "pt"})}
    placed, pos = [], 0
    for p in order:
        head[p.key] = {"dtype": p.dtype, "shape": list(p.shape), "data_offsets": [pos, pos + p.nbytes]}
        placed.append((p, pos))
        pos += p.nbytes
    text = json.dumps(head, separators=(",", ":"), ensure_ascii=True).encode("ascii")
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text, placed


def shard_names(base: str, n: int) -> list[str]:
    """File names of ``n`` shards for ``base`` (``model.safetensors``), as Hugging Face names them:
    the base itself for one, ``model-00001-of-00003.safetensors`` ... for several."""
    if n == 1:
        return [base]
    stem = base.removesuffix(".safetensors")
    return [f"{stem}-{i:05d}-of-{n:05d}.safetensors" for i in range(1, n + 1)]


def _shards(planned: list[Planned], max_bytes: int | None) -> list[list[Planned]]:
    """Tensors by key, greedily packed into shards of at most ``max_bytes`` of data each (a
    bigger tensor gets a shard of its own), as Hugging Face's sharding does."""
    ordered = sorted(planned, key=lambda p: p.key)
    if max_bytes is None:
        return [ordered]
    shards: list[list[Planned]] = [[]]
    size = 0
    for p in ordered:
        if shards[-1] and size + p.nbytes > max_bytes:
            shards.append([])
            size = 0
        shards[-1].append(p)
        size += p.nbytes
    return shards


def weights_path(weights: str | os.PathLike, artifact: str | os.PathLike) -> tuple[str, str]:
    """(directory, file name) for ``save(..., weights=...)``: a bare name goes next to the
    artifact; a path must be in the artifact's directory, where ``load`` looks for it."""
    text = os.fspath(weights)
    directory = os.path.dirname(os.path.abspath(os.fspath(artifact)))
    head, name = os.path.split(text)
    if head and os.path.abspath(head) != directory:
        raise UnsupportedConstructError(
            f"save(weights={text!r}): the weights must go next to the artifact ({directory}), where load "
            "finds them; pass a file name only")
    if not FILE_NAME_RE.fullmatch(name):
        raise UnsupportedConstructError(
            f"save(weights={text!r}): the name must be '<name>.safetensors' of letters, digits, '_', '-' "
            "and '.' (not starting with '.'); rename it")
    if name.endswith(_INDEX_SUFFIX) or _SHARD_RE.search(name):
        raise UnsupportedConstructError(f"save(weights={text!r}): name the weights as one file "
                                        "('model.safetensors'); shard names are made from it")
    stem = name.removesuffix(".safetensors")
    artifact_name = os.path.basename(os.fspath(artifact))
    if artifact_name == name or re.fullmatch(re.escape(stem) + r"-\d{5}-of-\d{5}\.safetensors", artifact_name):
        raise UnsupportedConstructError(f"save(weights={text!r}): the artifact {artifact_name!r} would overwrite the "
                                        "weights; give them different names")
    return directory, name


_SHARD_RE = re.compile(r"-\d{5}-of-\d{5}\.safetensors$")


def _remove_stale(directory: str, name: str, written: set[str]) -> None:
    """Remove what an earlier save with these weights' name left that the new one does not write
    (shards of another count, an index when there is no longer one), as Hugging Face's
    save_pretrained does, so that tools reading the directory do not find the old files."""
    stem = name.removesuffix(".safetensors")
    pattern = re.compile(re.escape(stem) + r"-\d{5}-of-\d{5}\.safetensors")
    index = stem + _INDEX_SUFFIX
    try:
        present = os.listdir(directory)
    except OSError:
        return
    for other in present:
        if other not in written and (pattern.fullmatch(other) or (other == index and len(written) == 1)):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(directory, other))


def write_external(directory: str, name: str, w: schema.Weights, payloads: Mapping[str, Any],
                   planned: list[Planned], max_shard_bytes: int | None = None
                   ) -> tuple[schema.Weights, dict[str, Any]]:
    """Write the ``planned`` storages as safetensors files in ``directory`` (each atomically, plus
    ``<stem>.safetensors.index.json`` when sharded); return the weights recording them and the
    payload members that stay in the archive."""
    if max_shard_bytes is not None and (type(max_shard_bytes) is not int or max_shard_bytes < 1):
        raise UnsupportedConstructError(f"save(max_shard_bytes={max_shard_bytes!r}): give a positive int")
    shards = _shards(planned, max_shard_bytes)
    names = shard_names(name, len(shards))
    files, refs = [], {}
    for k, (shard, fname) in enumerate(zip(shards, names, strict=True)):
        head, placed = header_bytes(shard)
        chunks = [head] + [payloads[payload_name(w.storages[p.storage].sha256)] for p, _ in placed]
        sha, xxh, size = hashlib.sha256(), xxhash.xxh3_128(), 0
        for c in chunks:
            sha.update(c)
            xxh.update(c)
            size += len(c)
        write_atomic(os.path.join(directory, fname), chunks)
        files.append(schema.WeightsFile(name=fname, size=size, sha256=sha.hexdigest(), xxh3=xxh.hexdigest()))
        refs.update({p.storage: schema.ExternalTensor(file=k, key=p.key) for p in shard})
    _remove_stale(directory, name, set(names))
    if len(shards) > 1:
        index = {"metadata": {"total_size": sum(p.nbytes for p in planned)},
                 "weight_map": {p.key: names[k] for k, shard in enumerate(shards) for p in shard}}
        text = json.dumps(index, indent=2, sort_keys=True).encode("ascii") + b"\n"
        write_atomic(os.path.join(directory, name.removesuffix(".safetensors") + _INDEX_SUFFIX), [text])
    storages = [s if i not in refs else msgspec.structs.replace(s, external=refs[i]) for i, s in enumerate(w.storages)]
    kept = {payload_name(s.sha256) for s in storages if s.sha256 and s.external is None}
    rest = {n: v for n, v in payloads.items() if not n.startswith("data/") or n in kept}
    return msgspec.structs.replace(w, storages=storages, files=files or None), rest


# ---------------------------------------------------------------- reading


@dataclass(frozen=True)
class Entry:
    key: str
    dtype: str
    shape: tuple[int, ...]
    begin: int  # offsets in the file
    end: int


@dataclass(frozen=True)
class Header:
    entries: dict[str, Entry]
    metadata: dict[str, str]
    data_start: int


def _bad(where: str, what: str) -> InvalidWeightsFileError:
    return InvalidWeightsFileError(f"{where}: {what}; it is not a valid safetensors file (damaged or hostile)")


def _int(v: Any) -> bool:
    return type(v) is int and 0 <= v <= _INT64_MAX


def parse_header(buf: memoryview | bytes, where: str) -> Header:
    """The tensor table of the safetensors file in ``buf``, after checking every size and offset."""
    size = len(buf)
    if size < 8:
        raise _bad(where, f"{size} bytes, shorter than the 8-byte header length")
    (n,) = struct.unpack_from("<Q", buf, 0)
    if n > MAX_HEADER_BYTES:
        raise _bad(where, f"the header declares {n} bytes, more than the {MAX_HEADER_BYTES} allowed")
    if 8 + n > size:
        raise _bad(where, f"the header declares {n} bytes but the file has {size} (truncated?)")
    try:
        head = msgspec.json.decode(bytes(buf[8:8 + n]))
    except msgspec.DecodeError as e:
        raise _bad(where, f"the header is not JSON ({e})") from None
    if not isinstance(head, dict):
        raise _bad(where, "the header is not a JSON object")
    meta = head.pop("__metadata__", None) or {}
    if not isinstance(meta, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
        raise _bad(where, "__metadata__ is not an object of strings")
    data_start, data = 8 + n, size - 8 - n
    entries = {}
    for key, info in head.items():
        at = f"tensor {key[:80]!r}"
        if len(key) > _MAX_KEY:
            raise _bad(where, f"{at}: a key of {len(key)} characters")
        if not (isinstance(info, dict) and set(info) == {"dtype", "shape", "data_offsets"}):
            raise _bad(where, f"{at}: expected exactly dtype, shape and data_offsets")
        dtype, shape, offs = info["dtype"], info["shape"], info["data_offsets"]
        if dtype not in ITEMSIZES:
            raise _bad(where, f"{at}: dtype {str(dtype)[:20]!r} is not one pt2serde reads ({', '.join(ITEMSIZES)})")
        if not (isinstance(shape, list) and len(shape) <= _MAX_RANK and all(map(_int, shape))):
            raise _bad(where, f"{at}: shape must be at most {_MAX_RANK} non-negative integers")
        if not (isinstance(offs, list) and len(offs) == 2 and all(map(_int, offs)) and offs[0] <= offs[1] <= data):
            raise _bad(where, f"{at}: data_offsets {str(offs)[:60]} are not [begin, end] within the {data} data bytes")
        numel = 1
        for d in shape:
            numel *= d
        if numel * ITEMSIZES[dtype] != offs[1] - offs[0]:
            raise _bad(where, f"{at}: {offs[1] - offs[0]} bytes for {numel} elements of {dtype}")
        entries[key] = Entry(key, dtype, tuple(shape), data_start + offs[0], data_start + offs[1])
    pos = data_start
    for e in sorted(entries.values(), key=lambda e: (e.begin, e.end)):
        if e.begin != pos:
            what = "overlaps the tensor before it" if e.begin < pos else f"leaves a gap of {e.begin - pos} bytes"
            raise _bad(where, f"tensor {e.key[:80]!r} {what}")
        pos = e.end
    if pos != size:
        raise _bad(where, f"{size - pos} bytes after the last tensor")
    return Header(entries, meta, data_start)


_PIECE = 8 << 20


def _read(path: str, use_mmap: bool, where: str, digest: bool = False) -> tuple[memoryview, str | None]:
    """The whole file in private, writable memory: read into an anonymous mapping (page-aligned,
    so every tensor keeps its alignment), or mapped copy-on-write with ``use_mmap``; and, with
    ``digest``, its XXH3-128, computed piece by piece as it is read (while the piece is in cache)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise os_error(e, f"cannot read {where}: {e.strerror}") from None
    h = xxhash.xxh3_128() if digest else None
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return memoryview(b""), h and h.hexdigest()
        if use_mmap:
            buf = memoryview(_mmap.mmap(fd, 0, access=_mmap.ACCESS_COPY))
            if h is not None:
                for lo in range(0, size, _PIECE):
                    h.update(buf[lo:lo + _PIECE])
            return buf, h and h.hexdigest()
        buf = memoryview(_mmap.mmap(-1, size))
        got = 0
        while got < size:
            n = os.preadv(fd, [buf[got:min(size, got + _PIECE)]], got)
            if n <= 0:
                break
            if h is not None:
                h.update(buf[got:got + n])
            got += n
        if got != size or os.fstat(fd).st_size != size:
            raise WeightsFileSizeError(f"{where} changed size while being read; retry once nothing writes to it")
        return buf, h and h.hexdigest()
    except OSError as e:
        raise os_error(e, f"cannot read {where}: {e.strerror}") from None
    finally:
        os.close(fd)


class _FileJob:
    """A file to read (and hash) on the archive's I/O threads (:func:`digest_all` takes its length)."""

    __slots__ = ("path", "size")

    def __init__(self, path: str, size: int) -> None:
        self.path, self.size = path, size

    def __len__(self) -> int:
        return self.size


def read_index(path: str) -> list[str]:
    """The shard paths a Hugging Face ``*.safetensors.index.json`` names, next to it."""
    where = repr(path)
    try:
        with open(path, "rb") as f:
            data = f.read(_MAX_INDEX_BYTES + 1)
    except OSError as e:
        raise os_error(e, f"cannot read {where}: {e.strerror}") from None
    if len(data) > _MAX_INDEX_BYTES:
        raise InvalidWeightsFileError(f"{where}: an index over {_MAX_INDEX_BYTES} bytes")
    try:
        index = msgspec.json.decode(data)
    except msgspec.DecodeError as e:
        raise InvalidWeightsFileError(f"{where}: not JSON ({e})") from None
    wmap = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(wmap, dict) or not all(isinstance(v, str) and FILE_NAME_RE.fullmatch(v) for v in wmap.values()):
        raise InvalidWeightsFileError(f"{where}: expected {{'weight_map': {{key: '<file>.safetensors'}}}} "
                                      "with plain file names")
    directory = os.path.dirname(path)
    return [os.path.join(directory, n) for n in sorted(set(wmap.values()))]


def resolve_sources(sources: str | os.PathLike | Iterable[str | os.PathLike]) -> list[str]:
    """Paths of safetensors files from a path, an index file, or a list of them."""
    items = [sources] if isinstance(sources, (str, os.PathLike)) else list(sources)
    out: list[str] = []
    for s in items:
        if not isinstance(s, (str, os.PathLike)):
            raise WeightsMismatchError(f"weights: {s!r} is not a path; give safetensors files or their index")
        p = os.fspath(s)
        out += read_index(p) if p.endswith(".json") else [p]
    if not out:
        raise WeightsMismatchError("weights: no safetensors file given")
    return out


@dataclass
class BoundWeights:
    """What a load builds tensors from: the weights with each external storage given a payload
    name of its own (two storages with equal bytes may be bound to different bytes), and the bytes
    of those payloads (views of the files' private buffers)."""

    weights: schema.Weights
    payloads: dict[str, memoryview]


def _own_name(i: int) -> str:
    # A 64-hex name no content hash is known to take: the storage index, zero-padded.
    return f"{i:064x}"


def _bind(w: schema.Weights, plan: list[Planned], views: dict[int, memoryview]) -> BoundWeights:
    storages = list(w.storages)
    payloads = {}
    for p in plan:
        name = _own_name(p.storage)
        storages[p.storage] = schema.Storage(sha256=name, nbytes=p.nbytes, device=storages[p.storage].device)
        payloads[payload_name(name)] = views[p.storage]
    return BoundWeights(msgspec.structs.replace(w, storages=storages, files=None), payloads)


def external_payloads(w: schema.Weights, directory: str | None, *, mmap: bool = False,
                      verify: bool = True, sha256: bool = False) -> BoundWeights:
    """The storages an artifact keeps in safetensors files, read from ``directory`` and verified:
    each file's size, then its XXH3-128 (every byte; with ``sha256`` its sha256 too, as
    ``pt2serde check`` verifies) before any tensor is built from it."""
    recorded = _recorded(w)
    files = w.files or []
    if directory is None:
        raise MissingWeightsFileError(
            f"the artifact keeps weights in {', '.join(f.name for f in files)}, and was not loaded from a path, "
            "so there is no directory to find them in; load it from its path, or pass weights=[files]")
    by_file: dict[int, list[Planned]] = {}
    for p, k in recorded:
        by_file.setdefault(k, []).append(p)
    jobs = []
    for k, f in enumerate(files):
        path = os.path.join(directory, f.name)
        tensors = _names(by_file.get(k, []))
        try:
            st = os.stat(path)
        except FileNotFoundError:
            raise MissingWeightsFileError(
                f"{f.name!r} is missing from {directory}: the artifact keeps {tensors} there; put the file "
                f"next to the artifact, or pass weights=[files] with the same tensors") from None
        except OSError as e:
            raise os_error(e, f"cannot read {path!r}: {e.strerror}") from None
        if st.st_size != f.size:
            raise WeightsFileSizeError(
                f"{path!r} has {st.st_size} bytes, but the artifact records {f.size} "
                f"({'truncated' if st.st_size < f.size else 'grown or replaced'}); it holds {tensors}: {_FIX}")
        jobs.append(_FileJob(path, f.size))
    # Every file read and hashed at once, on the I/O threads (several shards: several cores).
    read = digest_all(lambda j: _read(j.path, mmap, repr(j.path), digest=verify), jobs, "reading")
    bufs = [buf for buf, _ in read]
    for k, (f, buf) in enumerate(zip(files, bufs, strict=True)):
        if len(buf) != f.size:
            raise WeightsFileSizeError(f"{jobs[k].path!r} changed size while being read; retry once nothing writes to it")
    if verify:
        shas = digest_all(sha256_hex, bufs, "verifying") if sha256 else [f.sha256 for f in files]
        for k, (f, (_, digest), sha) in enumerate(zip(files, read, shas, strict=True)):
            if digest != f.xxh3 or sha != f.sha256:
                raise _digest_error(w, f, by_file.get(k, []), bufs[k], os.path.join(directory, f.name))
    views = {}
    for k, f in enumerate(files):
        head = parse_header(bufs[k], repr(os.path.join(directory, f.name)))
        for p in by_file.get(k, []):
            e = head.entries.get(p.key)
            if e is None or (e.dtype, e.shape) != (p.dtype, p.shape):
                raise WeightsFileDigestError(f"{f.name!r} does not hold {p.key!r} as {p.dtype}{list(p.shape)}; {_FIX}")
            views[p.storage] = bufs[k][e.begin:e.end]
    return _bind(w, [p for p, _ in recorded], views)


def _names(held: list[Planned], most: int = 4) -> str:
    keys = sorted(p.key for p in held)
    text = ", ".join(repr(k) for k in keys[:most])
    return f"{text} and {len(keys) - most} more" if len(keys) > most else (text or "no tensor")


def _digest_error(w: schema.Weights, f: schema.WeightsFile, held: list[Planned], buf: memoryview,
                  path: str) -> WeightsFileDigestError:
    """Say what differs in a file whose digest is wrong: its header (the tensor table), or which
    tensors' bytes (each storage's sha256 is recorded), or else that it is another file."""
    head, placed = header_bytes(held)
    if bytes(buf[:len(head)]) != head:
        return WeightsFileDigestError(
            f"{path!r} is not the file the artifact records: its header (the table of {_names(held)}) differs; "
            f"it was edited, or another file was put in its place: {_FIX}")
    edited = [p for p, off in placed
              if hashlib.sha256(buf[len(head) + off:len(head) + off + p.nbytes]).hexdigest() != w.storages[p.storage].sha256]
    if edited:
        return WeightsFileDigestError(
            f"{path!r} is not the file the artifact records: the bytes of {_names(edited)} were changed "
            f"(their sha256 differs from the artifact's): {_FIX}")
    return WeightsFileDigestError(f"{path!r}: its XXH3-128 differs from the artifact's record; {_FIX}")


def bind_payloads(w: schema.Weights, sources: list[str], plan: list[Planned], *, mmap: bool = False) -> BoundWeights:
    """Bind other safetensors files (a fine-tuned checkpoint) to the storages of ``plan``: every
    planned key must be in exactly one file with the same dtype and shape, and every tensor of the
    files must be one of them. No digest applies (the artifact's describe other bytes): each file's
    structure is checked in full, and its bytes are read into private memory before any tensor is
    built, so a file changed afterwards cannot change the program."""
    found: dict[str, tuple[Entry, int, str]] = {}
    bufs = []
    for k, path in enumerate(sources):
        if not os.path.exists(path):
            raise ArtifactNotFoundError(f"weights: {path!r} does not exist")
        bufs.append(_read(path, mmap, repr(path))[0])
        for key, e in parse_header(bufs[-1], repr(path)).entries.items():
            if key in found:
                raise WeightsMismatchError(f"weights: tensor {key[:80]!r} is in both {found[key][2]!r} and {path!r}; "
                                           "give each tensor once")
            found[key] = (e, k, path)
    views = {}
    for p in plan:
        hit = found.pop(p.key, None)
        if hit is None:
            raise WeightsMismatchError(f"weights: no file given holds {p.key!r} ({p.dtype}{list(p.shape)}), which the "
                                       "program needs; give every file of the checkpoint (or its index.json)")
        e, k, path = hit
        if (e.dtype, e.shape) != (p.dtype, p.shape):
            raise WeightsMismatchError(f"weights: {path!r} holds {p.key!r} as {e.dtype}{list(e.shape)}, but the "
                                       f"program needs {p.dtype}{list(p.shape)}")
        views[p.storage] = bufs[k][e.begin:e.end]
    if found:
        extra = sorted(found)
        raise WeightsMismatchError(
            f"weights: the files hold {len(extra)} tensors the program has no storage for: "
            f"{', '.join(repr(k[:80]) for k in extra[:4])}{' ...' if len(extra) > 4 else ''} (a tied name the "
            "program stores once, or another model's checkpoint); remove them from the files")
    return _bind(w, plan, views)


def bind_plan(w: schema.Weights, exclude: Iterable[str] = ()) -> list[Planned]:
    """The storages a bind replaces: those the artifact keeps in files, else those it would."""
    return [p for p, _ in _recorded(w)] if w.files else plan_external(w, exclude)


def structure_only(w: schema.Weights, keep: Iterable[int] = ()) -> schema.Weights:
    """``w`` with every storage that has data described as one without (its tensors load as
    FakeTensors on their device), except the storages ``keep`` (custom objects' bytes)."""
    kept = set(keep)
    storages = [s if i in kept or not s.sha256 else
                schema.Storage(sha256="", nbytes=s.nbytes, device=s.device or schema.Device(type="cpu"))
                for i, s in enumerate(w.storages)]
    return msgspec.structs.replace(w, storages=storages, files=None)



def payload_reader(w: schema.Weights, directory: str | None, payload: Any) -> Any:
    """``payload`` (storage sha256 -> bytes, as :meth:`Artifact.payload`) extended to the storages
    kept in safetensors files: the files are read and verified once, on the first such request
    (``pt2serde diff`` reads payloads only for the tensors that changed)."""
    if not w.files:
        return payload
    external = {s.sha256: i for i, s in enumerate(w.storages) if s.external is not None}
    bound: list[BoundWeights] = []

    def read(sha: str) -> memoryview:
        if sha not in external:
            return payload(sha)
        if not bound:
            bound.append(external_payloads(w, directory))
        b = bound[0]
        return b.payloads[payload_name(b.weights.storages[external[sha]].sha256)]

    return read
