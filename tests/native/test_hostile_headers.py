"""Mutated native programs (every int field set to edge values) fail only with typed errors.

Each mutation re-encodes a valid header (so the checksum passes) and decodes it: the validator
and the memory planner must report NativeFormatError / NativeVersionError / a LimitError, never
an IndexError, KeyError, OverflowError or AssertionError from inside.
"""

from __future__ import annotations

import random

import msgspec
import pytest

from native.format import program as P
from native.format.verify import decode
from serde.errors import SerializeError
from tests.native._native_util import edited, emitted, int_paths, with_edge_int


@pytest.mark.parametrize("case", ["mlp", "multi_output", "while_loop", "dynamic_arith"])
def test_mutated_headers_fail_only_with_typed_errors(case: str) -> None:
    native = emitted(case)
    base = msgspec.to_builtins(native.program)
    paths = list(int_paths(base))
    rng = random.Random(0)
    tried = 0
    for _ in range(250):
        _, doc = with_edge_int(base, paths, rng)
        try:
            data = P.NativeProgram(msgspec.convert(doc, P.Program), native.segment).encode()
        except (msgspec.ValidationError, OverflowError):
            continue  # msgpack cannot even hold it: no file can carry it
        tried += 1
        try:
            decode(data)
        except SerializeError:
            pass
    assert tried > 150


def test_negative_alias_positions_are_refused() -> None:
    from native.errors import NativeFormatError

    native = emitted("multi_output")
    p = native.program
    ops = [P.Operator(o.name, o.overload, [[-5]]) for o in p.operators]
    with pytest.raises(NativeFormatError, match=r"operators\[0\]\.returns_alias\[0\]: argument positions \[-5\]"):
        decode(edited(native, operators=ops))


@pytest.mark.parametrize("kind", ["layout", "memory_format"])
def test_unknown_layout_or_memory_format_is_refused_by_both_loaders(kind: str) -> None:
    # Unknown (0) is a member of the schema's enums but no torch value: the Python loader let it
    # through and its runtime failed with a KeyError at run time (found by the fuzzer through emit).
    from pathlib import Path

    import native
    from native.errors import NativeFormatError
    from native.run import cpp_engine

    good = native.emit_artifact(Path(__file__).resolve().parents[2] / "fixtures" / "v2.5" / "all_dtypes" / "model.pt2s")
    i = next(i for i, v in enumerate(good.program.values) if isinstance(v, P.Layout))
    values = list(good.program.values)
    values[i] = P.Layout(0) if kind == "layout" else P.MemoryFormat(0)
    bad = edited(good, values=values)
    with pytest.raises(NativeFormatError, match=rf"values\[{i}\].*(layout|memory format)"):
        native.load(bad)
    if cpp_engine.available():
        with pytest.raises(NativeFormatError, match=r"native program: "):
            native.load(bad, engine="cpp")
