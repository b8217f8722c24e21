"""Symbol renaming shares its conversions across canonicalizations (process memos keyed by
content); what it gives must not depend on what was canonicalized before."""

from __future__ import annotations

import pytest

from canonical import symbols
from canonical.canonicalize import canonicalize
from serde.bridge.effects import op_facts
from serde.bridge.program import serialize_program
from serde.core import schema, wire
from serde.core.expr import expr_from_text, expr_text
from serde.core.memo import Memo
from serde.testing import zoo

_MEMOS = ("_TEXTS", "_SYMBOLS", "_READ")


def _forget(monkeypatch) -> None:
    for name in _MEMOS:
        monkeypatch.setattr(symbols, name, Memo(getattr(symbols, name).cap))


def _sym(text: str) -> schema.SymInt:
    return schema.SymInt(as_expr=schema.SymExpr(expr=expr_from_text(text)))


def _renamed(order: list[str], text: str) -> str:
    r = symbols.SymbolRenamer()
    for t in order:
        r.see_value(_sym(t), "test")
    return expr_text(r.value(_sym(text)).as_expr.expr)


def test_one_text_renamed_under_two_mappings(monkeypatch) -> None:
    # The same text is renamed by whatever mapping its program gives its symbols.
    assert _renamed(["s7", "s3"], "s3 + 2*s7") == "2*s0 + s1"
    assert _renamed(["s3", "s7"], "s3 + 2*s7") == "s0 + 2*s1"
    assert _renamed(["s7", "s3"], "s3 + 2*s7") == "2*s0 + s1"
    _forget(monkeypatch)
    assert _renamed(["s3", "s7"], "s3 + 2*s7") == "s0 + 2*s1"


SYMBOLIC = [c.name for c in zoo.CASES if "dynamic" in c.tags][:8]


def test_a_canonical_program_does_not_depend_on_the_ones_before_it(monkeypatch) -> None:
    assert len(SYMBOLIC) >= 4
    programs = [serialize_program(zoo.export_case(zoo.get(n))) for n in SYMBOLIC]

    def encoded(p):
        return wire.encode(canonicalize(p, facts=op_facts)[0])

    warm = [encoded(p) for p in programs + programs[::-1]]
    for i, p in enumerate(programs):
        _forget(monkeypatch)
        cold = encoded(p)
        assert warm[i] == cold and warm[-1 - i] == cold, SYMBOLIC[i]


@pytest.mark.parametrize("bad", ["s0 +", "__import__('os')"])
def test_text_that_fails_fails_every_time(bad: str) -> None:
    r = symbols.SymbolRenamer()
    for _ in range(2):
        with pytest.raises(Exception, match="expression|symbol|token|character"):
            r.see_text(bad, "test")
