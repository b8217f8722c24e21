"""Tools shared by the attack files: a valid base artifact from a real exported program, a tiny zip
directory parser for byte patching, and a raw zip writer that (unlike serde.archive) checks nothing.

Not an attack itself; test_archive_attacks.py skips files whose name starts with "_".
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import torch

from serde.archive import read_archive, write_archive
from serde.bridge.weights import serialize_weights
from serde.core import schema, wire

__all__ = ["Base", "Entry", "make_base", "minimal_program", "rewrite_weights", "rewrite_members",
           "entries", "entry", "patch", "fix_crc", "raw_zip", "manifest_json", "rewrite_program", "nodes"]


@dataclass(frozen=True)
class Base:
    archive: bytes                 # a valid artifact
    members: dict[str, bytes]      # its members, manifest.json excluded
    weights: dict[str, Any]        # weights.json as plain JSON, to tamper with


@dataclass(frozen=True)
class Entry:
    name: str
    cd_pos: int        # offset of the central directory header
    lho: int           # offset of the local header
    data_start: int
    size: int


class _Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(6, 4)
        self.head = torch.nn.Linear(4, 6, bias=False)
        self.head.weight = self.emb.weight          # tied
        self.register_buffer("mask", torch.tensor([True, False, True, True, False, True]))
        self.register_buffer("scale", torch.linspace(0.5, 1.5, 12).reshape(3, 4).t())  # non-contiguous

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        h = self.emb(idx) * self.scale[:, 0]
        return self.head(h).masked_fill(self.mask, 0.0)


def minimal_program() -> schema.ExportedProgram:
    """An empty but schema-valid program.json (attacks here target the archive and the weights)."""
    graph = schema.Graph(inputs=[], outputs=[], nodes=[], tensor_values={}, sym_int_values={},
                         sym_bool_values={}, is_single_tensor_return=False, custom_obj_values={},
                         sym_float_values={})
    gm = schema.GraphModule(graph=graph, signature=schema.GraphSignature(input_specs=[], output_specs=[]),
                            module_call_graph=[])
    return schema.ExportedProgram(graph_module=gm, opset_version={}, range_constraints={},
                                  schema_version=schema.SchemaVersion(major=1, minor=0), verifiers=[],
                                  torch_version=str(torch.__version__))


def make_base() -> Base:
    torch.manual_seed(0)
    ep = torch.export.export(_Model().eval(), (torch.tensor([0, 3, 5]),))
    weights, payloads = serialize_weights(ep.state_dict, ep.constants, ep.example_inputs)
    members = {"program.json": wire.encode(minimal_program()), "weights.json": wire.encode(weights)}
    members.update({k: bytes(v) for k, v in payloads.items()})
    buf = io.BytesIO()
    write_archive(buf, members, schema_version=(1, 0), torch_version=str(torch.__version__))
    return Base(buf.getvalue(), members, msgspec.json.decode(members["weights.json"]))


def rewrite_members(base: Base, change: Callable[[dict[str, bytes]], None]) -> bytes:
    """A well-formed archive (fresh manifest and checksums) whose members ``change`` edited."""
    members = dict(base.members)
    change(members)
    buf = io.BytesIO()
    write_archive(buf, members, schema_version=(1, 0), torch_version=str(torch.__version__))
    return buf.getvalue()


def rewrite_weights(base: Base, change: Callable[[dict[str, Any]], None]) -> bytes:
    """A well-formed archive whose weights.json was edited by ``change`` (checksums made to match)."""
    w = copy.deepcopy(base.weights)
    change(w)

    def put(members: dict[str, bytes]) -> None:
        members["weights.json"] = json.dumps(w, sort_keys=True).encode()

    return rewrite_members(base, put)


FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "v2.2"


def rewrite_program(case: str, change: Callable[[dict[str, Any]], None],
                    encode: Callable[[dict[str, Any]], bytes] | None = None, *,
                    member: str = "program.json") -> bytes:
    """A real saved program (the frozen 2.2 fixture ``case``) whose program.json (or another JSON
    ``member``) ``change`` edited, re-written with a fresh manifest so that the checks behind the
    checksums are reached. ``encode`` replaces the JSON encoder (to plant bytes JSON cannot express)."""
    return rewrite_artifact((FIXTURES / case / "model.pt2s").read_bytes(), change, encode, member=member)


def rewrite_artifact(data: bytes, change: Callable[[dict[str, Any]], None],
                     encode: Callable[[dict[str, Any]], bytes] | None = None, *,
                     member: str = "program.json") -> bytes:
    """:func:`rewrite_program` of the artifact ``data``."""
    contents = read_archive(data)
    members = {n: bytes(contents.member(n)) for n in contents.names if n != "manifest.json"}
    doc = json.loads(members[member])
    change(doc)
    members[member] = (encode or (lambda p: json.dumps(p, sort_keys=True).encode()))(doc)
    buf = io.BytesIO()
    write_archive(buf, members, schema_version=contents.schema_version, torch_version=str(torch.__version__))
    return buf.getvalue()


def nodes(program: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The top-level graph's nodes of a program.json, by name."""
    return {n["name"]: n for n in program["graph_module"]["graph"]["nodes"]}


# ---------------------------------------------------------------- reading a zip directory


def entries(data: bytes) -> list[Entry]:
    """Central directory entries of a (non-zip64) zip, in directory order."""
    eocd = len(data) - 22
    assert data[eocd:eocd + 4] == b"PK\x05\x06"
    n, cd_size, cd_off = struct.unpack_from("<HII", data, eocd + 10)
    out, pos = [], cd_off
    for _ in range(n):
        assert data[pos:pos + 4] == b"PK\x01\x02"
        size = struct.unpack_from("<I", data, pos + 24)[0]
        nlen, elen, clen = struct.unpack_from("<HHH", data, pos + 28)
        lho = struct.unpack_from("<I", data, pos + 42)[0]
        name = data[pos + 46:pos + 46 + nlen].decode()
        lnlen, lelen = struct.unpack_from("<HH", data, lho + 26)
        out.append(Entry(name, pos, lho, lho + 30 + lnlen + lelen, size))
        pos += 46 + nlen + elen + clen
    return out


def entry(data: bytes, name: str) -> Entry:
    return next(e for e in entries(data) if e.name == name)


def patch(data: bytes, pos: int, new: bytes) -> bytes:
    return data[:pos] + new + data[pos + len(new):]


def fix_crc(data: bytes, name: str) -> bytes:
    """``data`` with member ``name``'s CRC-32 fields (local header and central directory) made to
    match its bytes again, as a careful tamperer would."""
    e = entry(data, name)
    crc = struct.pack("<I", zlib.crc32(data[e.data_start:e.data_start + e.size]))
    return patch(patch(data, e.lho + 14, crc), e.cd_pos + 16, crc)


# ---------------------------------------------------------------- writing raw zips


def manifest_json(members: dict[str, bytes], **override: Any) -> bytes:
    """manifest.json as pt2serde writes it, for ``members`` (fields can be overridden)."""
    doc = {"format": "pt2serde", "format_version": 1, "schema_version": {"major": 1, "minor": 0},
           "torch_version": str(torch.__version__),
           "members": {k: {"sha256": hashlib.sha256(v).hexdigest(), "size": len(v)} for k, v in members.items()}}
    doc.update(override)
    return json.dumps(doc, sort_keys=True).encode()


def raw_zip(files: list[tuple[str | bytes, bytes]], *, deflate: frozenset[str] = frozenset(),
            align: int = 64, zip64_count: int | None = None) -> bytes:
    """A zip of ``files`` in the given order, names and contents taken as is (duplicates, '..').
    Members named in ``deflate`` are compressed; data is ``align``-aligned like pt2serde's.
    ``zip64_count`` adds zip64 end records declaring that many entries."""
    out, central = bytearray(), bytearray()
    for name, data in files:
        raw_name = name.encode() if isinstance(name, str) else name
        usize, crc, method = len(data), zlib.crc32(data), 0
        if name in deflate:
            c = zlib.compressobj(9, zlib.DEFLATED, -15)
            data, method = c.compress(data) + c.flush(), 8
        base = len(out) + 30 + len(raw_name)
        pad = (-base - 6) % align + 6 if align > 1 else 0
        extra = struct.pack("<HHH", 0xD935, pad - 4, align) + bytes(pad - 6) if pad else b""
        central += struct.pack("<4sHHHHHHIIIHHHHHII", b"PK\x01\x02", 0x314, 20, 0, method, 0, 0x21, crc,
                               len(data), usize, len(raw_name), 0, 0, 0, 0, 0o100644 << 16, len(out)) + raw_name
        out += struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 20, 0, method, 0, 0x21, crc, len(data), usize,
                           len(raw_name), len(extra)) + raw_name + extra + data
    n, cd_off = len(files), len(out)
    out += central
    if zip64_count is not None:
        e64 = len(out)
        out += struct.pack("<4sQHHIIQQQQ", b"PK\x06\x06", 44, 0x314, 45, 0, 0, zip64_count, zip64_count,
                           len(central), cd_off)
        out += struct.pack("<4sIQI", b"PK\x06\x07", 0, e64, 1)
        n = 0xFFFF
    eocd = struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, n, n, len(central), cd_off, 0)
    return bytes(out + eocd)
