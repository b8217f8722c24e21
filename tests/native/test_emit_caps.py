"""`pt2serde emit` refuses hostile sizes before computing anything with them (typed errors, no hang)."""

from __future__ import annotations

import io

import pytest
import torch

import serde
from native.emit.emitter import emit, emit_artifact
from serde.archive import read_archive, write_archive
from serde.archive.artifact import read_artifact
from serde.core import wire
from serde.core.errors import IntegerTooLargeError
from serde.errors import MalformedArtifactError


class _M(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * 2).relu()


@pytest.fixture(scope="module")
def artifact() -> bytes:
    ep = torch.export.export(_M(), (torch.randn(3, 4),), dynamic_shapes={"x": {0: torch.export.Dim("n", max=64)}})
    buf = io.BytesIO()
    serde.save(ep, buf)
    return buf.getvalue()


def _with_size(data: bytes, size: dict) -> bytes:
    contents = read_archive(data)
    program = wire.decode_json(contents.member("program.json"))
    metas = program["graph_module"]["graph"]["tensor_values"]
    name = next(n for n, m in metas.items() if "as_expr" in m["sizes"][0])
    metas[name]["sizes"][0] = size
    members = {n: bytes(contents.member(n)) for n in contents.names if n != "manifest.json"}
    members["program.json"] = wire.encode(program)
    out = io.BytesIO()
    write_archive(out, members, schema_version=contents.schema_version, torch_version="test")
    return out.getvalue()


def test_the_unmodified_artifact_emits(artifact: bytes) -> None:
    assert emit_artifact(artifact).program.instructions


def test_a_size_of_ten_to_the_billion_is_refused_before_evaluation(artifact: bytes) -> None:
    # 10**1000000000 used to keep `pt2serde emit` busy computing bounds.
    size = {"as_expr": {"expr": {"pow": [{"integer": 10}, {"integer": 10 ** 9}]}}}
    # emit_artifact runs the load's checks first, which refuse it; the emitter's own bound stays
    # behind them for programs handed to emit() directly
    with pytest.raises(IntegerTooLargeError, match=r"Pow of '10' to the '1000000000' would have more than 65536 bits"):
        emit_artifact(_with_size(artifact, size))
    a = read_artifact(_with_size(artifact, size))
    with pytest.raises(IntegerTooLargeError, match=r"the exponent of Pow is 1000000000, more than Limits\.max_exponent=64"):
        emit(a.program, a.weights, a.payload)


def test_a_size_beyond_int64_is_refused(artifact: bytes) -> None:
    # The decoder's int64 bound refuses it first, naming the field (the name checks' own int64
    # check stays behind it).
    with pytest.raises(MalformedArtifactError, match=r"Expected `int` <= 9223372036854775807 - at "
                                                     r"`\$\.graph_module\.graph\.tensor_values\[\.\.\.\]\.sizes\[0\]\.as_int`"):
        emit_artifact(_with_size(artifact, {"as_int": 1 << 64}))


def test_a_literal_beyond_int64_inside_an_expression_is_refused(artifact: bytes) -> None:
    size = {"as_expr": {"expr": {"add": [{"symbol": "s0"}, {"integer": 1 << 70}]}}}
    with pytest.raises(IntegerTooLargeError, match=r"an integer literal is 71 bits"):
        emit_artifact(_with_size(artifact, size))
