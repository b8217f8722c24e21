"""Guards as a code-injection channel: torch compiles guard text with exec when ep.module() is built.

pt2serde stores guards as trees and prints the text itself. These attacks try to get text of their
own choosing into that exec: through a guard string at save, through a torch archive at import, and
through a hand-edited artifact at load. Each must be refused with its typed error, write no file,
and never touch the canary file the injected code would create.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
import torch
from torch.export import Dim

import serde
from serde.archive.artifact import read_artifact, write_artifact
from serde.core import schema
from serde.core.errors import IntegerTooLargeError
from serde.errors import MalformedArtifactError, UnsafeArtifactError, UnsupportedConstructError


class _Derived(torch.nn.Module):
    def forward(self, x, y):
        return x + y[1:]


def _export() -> torch.export.ExportedProgram:
    dx = Dim("dx")
    return torch.export.export(_Derived(), (torch.ones(4), torch.ones(5)),
                               dynamic_shapes={"x": {0: dx}, "y": {0: dx + 1}})


def _injections(canary: Path) -> list[str]:
    c = str(canary)
    return [
        f"__import__('os').system('touch {c}') == 0",
        f"L['x'].size()[0] == 4 or open('{c}', 'w')",
        f"L['x'].size()[0] == (lambda: open('{c}', 'w'))()",
        "L['x'].__class__.__init__.__globals__['os'] == 1",
        f"L['x'].size()[0] == [open('{c}', 'w') for _ in 'a'][0]",
        "L['x\\'] + __import__(\\'os\\') + L[\\'x'] == 1",
        "math.__loader__ == 1",
        "globals()['L'] == 1",
        "L['x'].size()[0] == 4\n__import__('os')",
    ]


@pytest.fixture(scope="module")
def guarded(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("guarded") / "ok.pt2s"
    serde.save(_export(), path)
    assert read_artifact(path).program.guards is not None  # the attacks below edit real guards
    return path


@pytest.mark.parametrize("k", range(9))
def test_injected_guard_text_is_refused_at_save(k: int, tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    ep = _export()
    code = _injections(canary)[k]
    ep._guards_code = [*ep._guards_code, code]
    with pytest.raises(UnsupportedConstructError, match=r"guards\[\d+\]: cannot store guard"):
        serde.save(ep, tmp_path / "out.pt2s")
    assert not (tmp_path / "out.pt2s").exists()
    assert not canary.exists()


def test_injected_guard_in_a_torch_archive_is_refused_at_import(tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    ep = _export()
    ep._guards_code = [*ep._guards_code, f"__import__('os').system('touch {canary}') == 0"]
    torch.export.save(ep, tmp_path / "evil.pt2")
    cli = Path(sys.executable).with_name("pt2serde")
    r = subprocess.run([str(cli), "import", str(tmp_path / "evil.pt2"), str(tmp_path / "out.pt2s")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode != 0
    assert "UnsupportedConstructError" in r.stderr or "cannot store guard" in r.stderr, r.stderr[-2000:]
    assert not (tmp_path / "out.pt2s").exists()
    assert not canary.exists()


def _edit(src: Path, dest: Path, change) -> None:
    """Rewrite program.json of a valid artifact (fresh checksums, so only the content is hostile)."""
    a = read_artifact(src)
    program = change(a.program)
    write_artifact(dest, program, a.weights, a.payloads(), torch_version=a.program.torch_version)


def _with_source(p: schema.ExportedProgram, i: int, **changes) -> schema.ExportedProgram:
    sources = list(p.guards.sources)
    sources[i] = msgspec.structs.replace(sources[i], **changes)
    return msgspec.structs.replace(p, guards=msgspec.structs.replace(p.guards, sources=sources))


_E = schema.Expr
_G0 = schema.Expr(symbol="g0")


def _with_checks(p: schema.ExportedProgram, checks: list[schema.Expr]) -> schema.ExportedProgram:
    return msgspec.structs.replace(p, guards=msgspec.structs.replace(p.guards, checks=checks))


def _hostile_keys(canary: Path) -> list[schema.GuardKey]:
    return [
        schema.GuardKey(name=f"x'] or open('{canary}', 'w') or L['x"),
        schema.GuardKey(name="__class__"),
        schema.GuardKey(name="x\n__import__('os')"),
        schema.GuardKey(name="x" * 300),
        schema.GuardKey(index=-1),
    ]


# A root index is a structure error (MalformedArtifactError), covered below.
@pytest.mark.parametrize("position, k", [("root", k) for k in range(4)] + [("nested", k) for k in range(5)])
def test_hostile_source_key_is_refused_at_load(k: int, position: str, guarded: Path, tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    key = _hostile_keys(canary)[k]

    def change(p: schema.ExportedProgram) -> schema.ExportedProgram:
        path = list(p.guards.sources[0].path)
        path = [key] if position == "root" else [*path, key]
        return _with_source(p, 0, path=path)

    hostile = tmp_path / "hostile.pt2s"
    _edit(guarded, hostile, change)
    with pytest.raises(UnsafeArtifactError, match=r"guards\.sources\[0\]\.path\[\d\]: key .* is not a plain identifier"):
        serde.load(hostile)
    assert not canary.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hostile.pt2s"]


@pytest.mark.parametrize("change, match", [
    (lambda p: _with_source(p, 0, path=[schema.GuardKey(name="z")]), r"L\['z'\]\.size\(\)\[0\] is not an input"),
    (lambda p: _with_source(p, 0, dim=3), r"names dim 3 of a rank-1 tensor"),
    (lambda p: _with_source(p, 0, dim=None), r"dim: None does not fit property SIZE"),
    (lambda p: _with_source(p, 0, path=[schema.GuardKey(index=0)]), r"must start with an input name"),
    (lambda p: _with_source(p, 0, symbol="s0"), r"'s0' is not a fresh name"),
    (lambda p: _with_checks(p, [schema.Expr(symbol="g9")]), r"symbol 'g9' is not in guards\.sources"),
    (lambda p: _with_checks(p, [schema.Expr(opaque_unary=schema.OpaqueUnary(fn="system", arg=schema.Expr(integer=1)))]),
     r"function 'system' does not occur in guards"),
    (lambda p: _with_checks(p, [schema.Expr(modular_indexing=[schema.Expr(integer=1)] * 3)]),
     r"member 'modular_indexing'"),
    (lambda p: _with_checks(p, [schema.Expr(eq=[schema.Expr(integer=1)] * 3)]), r"eq with 3 operands"),
    # Checks torch could not have recorded: false, or failing, at the example values the graph stores.
    (lambda p: _with_checks(p, [_E(lt=[_G0, _E(integer=0)])]),
     r"guards\.checks\[0\] \(\(L\['x'\]\.size\(\)\[0\] < 0\)\) is False at the example values \(L\['x'\]\.size\(\)\[0\] = \d+\)"),
    (lambda p: _with_checks(p, [_E(eq=[_E(python_mod=[_G0, _E(floor_div=[_G0, _E(integer=2 ** 63 - 1)])]), _E(integer=0)])]),
     r"guards\.checks\[0\] .* fails at the example values .*: ZeroDivisionError"),
    (lambda p: _with_checks(p, [_E(gt=[_E(pow=[_E(pow=[_E(pow=[_E(integer=3), _E(integer=64)]), _E(integer=64)]),
                                               _E(integer=64)]), _G0])]),
     r"fails at the example values .*: OverflowError: .* has more than 65536 bits"),
    # An exponent read from the inputs: the compiled guard could take any time on some call.
    (lambda p: _with_checks(p, [_E(gt=[_E(pow=[_E(integer=2), _G0]), _E(integer=0)])]),
     r"printed guard failed re-validation: .*the exponent of `2 \*\* L\['x'\]\.size\(\)\[0\]` is not a number"),
])
def test_inconsistent_guards_are_refused_at_load(change, match: str, guarded: Path, tmp_path: Path) -> None:
    hostile = tmp_path / "bad.pt2s"
    _edit(guarded, hostile, change)
    with pytest.raises(MalformedArtifactError, match=match):
        serde.load(hostile)


def test_a_check_of_a_degree_torch_would_factor_for_minutes_is_refused(guarded: Path, tmp_path: Path) -> None:
    hostile = tmp_path / "bad.pt2s"
    power = lambda e: _E(pow=[e, _E(integer=64)])  # noqa: E731
    _edit(guarded, hostile, lambda p: _with_checks(p, [_E(gt=[power(power(power(_G0))), _E(integer=0)])]))
    with pytest.raises(IntegerTooLargeError, match=r"guards\.checks\[0\]: the degree of the check .* is 262144, "
                                                   r"more than Limits\.max_degree=8; the artifact is damaged or hostile"):
        serde.load(hostile)


def test_unedited_artifact_loads(guarded: Path, tmp_path: Path) -> None:
    # The harness must start from an artifact that loads, or every attack passes for free.
    copy = tmp_path / "same.pt2s"
    _edit(guarded, copy, lambda p: p)
    assert serde.load(copy)._guards_code
