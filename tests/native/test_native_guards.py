"""The native runtime enforces export's input guards: it rejects exactly the input sets ep.module() rejects."""

from __future__ import annotations

import io

import pytest
import torch

import serde
from native import emit_artifact, load
from native.errors import InputMismatchError
from native.format.program import write_program
from native.format.verify import read_program
from serde.errors import UnsupportedConstructError
from tests import _guard_programs as gp
from tests._guard_programs import T, cfg

CASES = {
    "derived_dim": (gp.export_derived,
                    [((T(4), T(5)), {}), ((T(4), T(7)), {}), ((T(9), T(10)), {})]),
    "divisible": (gp.export_divisible,
                  [((T(8),), {}), ((T(12),), {}), ((T(6),), {}), ((T(4),), {}), ((T(2),), {})]),
    "relations": (gp.export_auto_relations,
                  [((T(2, 3), T(3, 5)), {}), ((T(4, 7), T(7, 4)), {}), ((T(4, 7), T(7, 3)), {})]),
    "kwargs_nested": (gp.export_nested,
                      [((T(4),), cfg(6, 5)), ((T(4),), cfg(6, 4)), ((T(4),), cfg(3, 5)), ((T(3),), cfg(7, 4))]),
    "int_input": (gp.export_int_input,
                  [((T(3), 5), {}), ((T(3), 3), {}), ((T(6), 5), {}), ((T(3), 4), {})]),
}


def _rejected(f, args, kwargs) -> bool:
    try:
        f(*args, **kwargs)
    except (AssertionError, RuntimeError, InputMismatchError):
        return True
    return False


@pytest.mark.parametrize("strict", [False, True], ids=["non_strict", "strict"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_native_rejects_what_the_exported_program_rejects(name: str, strict: bool, tmp_path) -> None:
    # A strict export's guards read L['flat_args'][i]; saved, they name the inputs as without strict.
    make, inputs = CASES[name]
    torch.manual_seed(0)
    ep = make(strict=strict)
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
