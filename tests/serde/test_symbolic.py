"""Safe symbolic-expression parser/printer."""

from __future__ import annotations

import pytest
import sympy

from serde.errors import UnsafeArtifactError
from serde.symbolic import parse_expr, print_expr


def _sym(name):
    return sympy.Symbol(name, integer=True, positive=True)


def test_basic_round_trip():
    from torch.utils._sympy.functions import FloorDiv

    s0 = _sym("s0")
    for e in (2 * s0 + 1, FloorDiv(s0, 2)):
        assert parse_expr(print_expr(e), _sym, where="x") == e
    assert print_expr(2 * s0 + 1) == "2*s0 + 1"


def test_code_is_rejected(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UnsafeArtifactError, match="where"):
        parse_expr("__import__('os').system('touch PWNED')", _sym, where="where")
    assert not (tmp_path / "PWNED").exists()
