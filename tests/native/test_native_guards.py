"""The native runtime enforces export's input guards: it rejects exactly the input sets ep.module() rejects."""

from __future__ import annotations

import io

import pytest
import torch
from torch.export import Dim

import serde
from native import emit_artifact, load
from native.errors import InputMismatchError
from native.program import write_program
from native.verify import read_program
from serde.errors import UnsupportedConstructError


def T(*shape: int) -> torch.Tensor:
    return torch.ones(*shape)


class Derived(torch.nn.Module):
    def forward(self, x, y):
        return x + y[1:]


class Divisible(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] % 4 == 0 and x.shape[0] > 3:
            return x.reshape(-1, 4).sum(0)
        return x[:4]


class Relations(torch.nn.Module):
    def forward(self, x, y):
        z = x @ y
        if z.shape[1] > x.shape[0]:
            return z.sum(0)
        return z.sum(1)


class Nested(torch.nn.Module):
    def forward(self, x, *, cfg):
        a0, a1 = cfg["a"]
        if a1.shape[0] > x.shape[0]:
            return x + a0[: x.shape[0]] + cfg["b"].sum()
        return x * 2


class IntInput(torch.nn.Module):
    def forward(self, x, n):
        if n > x.shape[0]:
            return x * n
        return x - n


def _cfg(a0: int, a1: int) -> dict:
    return {"cfg": {"a": [T(a0), T(a1)], "b": T(2)}}


CASES = {
    "derived_dim": (lambda: torch.export.export(
        Derived(), (T(4), T(5)), dynamic_shapes={"x": {0: Dim("dx")}, "y": {0: Dim("dx") + 1}}),
        [((T(4), T(5)), {}), ((T(4), T(7)), {}), ((T(9), T(10)), {})]),
    "divisible": (lambda: torch.export.export(Divisible(), (T(8),), dynamic_shapes={"x": {0: Dim.AUTO}}),
                  [((T(8),), {}), ((T(12),), {}), ((T(6),), {}), ((T(4),), {}), ((T(2),), {})]),
    "relations": (lambda: torch.export.export(
        Relations(), (T(2, 3), T(3, 5)), dynamic_shapes={"x": {0: Dim.AUTO, 1: Dim.AUTO}, "y": {0: Dim.AUTO, 1: Dim.AUTO}}),
        [((T(2, 3), T(3, 5)), {}), ((T(4, 7), T(7, 4)), {}), ((T(4, 7), T(7, 3)), {})]),
    "kwargs_nested": (lambda: torch.export.export(
        Nested(), (T(4),), {"cfg": {"a": [T(6), T(5)], "b": T(2)}},
        dynamic_shapes={"x": {0: Dim.AUTO}, "cfg": {"a": [{0: Dim.AUTO}, {0: Dim.AUTO}], "b": None}}),
        [((T(4),), _cfg(6, 5)), ((T(4),), _cfg(6, 4)), ((T(4),), _cfg(3, 5)), ((T(3),), _cfg(7, 4))]),
    "int_input": (lambda: torch.export.export(IntInput(), (T(3), 5), dynamic_shapes={"x": {0: Dim.AUTO}, "n": Dim.AUTO}),
                  [((T(3), 5), {}), ((T(3), 3), {}), ((T(6), 5), {}), ((T(3), 4), {})]),
}


def _rejected(f, args, kwargs) -> bool:
    try:
        f(*args, **kwargs)
    except (AssertionError, RuntimeError, InputMismatchError):
        return True
    return False


@pytest.mark.parametrize("name", sorted(CASES))
def test_native_rejects_what_the_exported_program_rejects(name: str, tmp_path) -> None:
    make, inputs = CASES[name]
    torch.manual_seed(0)
    ep = make()
    buf = io.BytesIO()
    serde.save(ep, buf)
    prog = emit_artifact(buf.getvalue())
    assert prog.program.guards, "the case must carry guards"
    write_program(tmp_path / "p.pt2n", prog)  # through the file format, which must keep the guards
    method = load(read_program(tmp_path / "p.pt2n"))
    want = [_rejected(ep.module(), a, k) for a, k in inputs]
    got = [_rejected(method.run, a, k) for a, k in inputs]
    assert got == want
    assert any(want) and not all(want)
    for (a, k), rejected in zip(inputs, want, strict=True):
        if not rejected:
            torch.testing.assert_close(method.run(*a, **k), ep.module()(*a, **k))


def test_native_names_the_failed_guard() -> None:
    ep = CASES["divisible"][0]()
    buf = io.BytesIO()
    serde.save(ep, buf)
    method = load(emit_artifact(buf.getvalue()))
    with pytest.raises(InputMismatchError, match=r"fail the export guard \(\(L\['x'\]\.size\(\)\[0\] % 4\) == 0\)"):
        method.run(T(6))


def test_native_refuses_a_guard_it_cannot_check() -> None:
    ep = CASES["divisible"][0]()
    ep._guards_code = [*ep._guards_code, "L['x'].stride()[0] == 1"]
    buf = io.BytesIO()
    serde.save(ep, buf)
    with pytest.raises(UnsupportedConstructError, match=r"guards\.sources\[\d\]: a guard reads stride of input"):
        emit_artifact(buf.getvalue())
