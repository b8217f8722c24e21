"""torch's guard code <-> ``schema.InputGuards``: saving parses, loading prints and re-validates.

torch keeps the guards it recorded while tracing as Python source (``ep._guards_code``, e.g.
``"L['x'].size()[0] == ((-1) + L['y'].size()[0])"``) and ``ep.module()`` compiles that text.
An artifact is untrusted, so we never store text that will be compiled: saving parses each guard
(:mod:`.parse`) into an ``Expr`` tree over a table of input sources (:mod:`.sources`), and loading
prints the text back from the validated tree (:mod:`.printer`). Whatever we print is checked once
more by the same allow-list before torch sees it.

Saving refuses a guard it cannot express instead of dropping it: a dropped guard would make the
loaded program accept inputs the exported one rejects, silently.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from serde.errors import MalformedArtifactError, UnsupportedConstructError

from ... import schema, wire
from ...memo import Memo
from ..stored import expr_renamed, expr_symbols
from .grammar import MAX_GUARDS
from .parse import Parser
from .printer import Printer, printed_checks
from .sources import SourceKey, make_source, sort_key, source_text

__all__ = ["guards_from_code", "guards_to_code", "canonical_guards", "guard_texts"]


def guards_from_code(codes: list[str], *, where: str = "guards",
                     resolve: Callable[[SourceKey], SourceKey] | None = None) -> schema.InputGuards | None:
    """Parse torch guard text into numbered ``InputGuards`` (``None`` when empty), checks in
    torch's order.

    ``resolve`` maps each source to the form to store (and raises when it names no input).

    Raises:
        UnsupportedConstructError: a guard uses something outside the allow-list (names the guard
            and the reason); the program cannot be saved without losing that input check.
    """
    if len(codes) > MAX_GUARDS:
        raise UnsupportedConstructError(f"{where}: {len(codes)} guards, more than the {MAX_GUARDS} we store")
    if not codes:
        return None
    for i, c in enumerate(codes):
        if type(c) is not str:  # cannot key the memo below: the parser refuses it, naming the guard
            Parser(where).guard(c, f"{where}[{i}]")
    texts = (where, tuple(codes))
    parsed = _PARSED.get(texts)
    if parsed is None:
        parser = Parser(where)
        trees = [parser.guard(c, f"{where}[{i}]") for i, c in enumerate(codes)]
        parsed = _PARSED.remember(texts, (tuple(parser.sources), tuple(trees)))
    raw, trees = parsed
    stored = raw if resolve is None else tuple(resolve(k) for k in raw)
    key = (texts, stored)
    out = _FROM_CODE.get(key)
    if out is None:
        # Raw source i is symbol g<i>; sources that resolve to one key share its first symbol.
        sources: dict[SourceKey, str] = {}
        rename = {f"g{i}": sources.setdefault(k, f"g{len(sources)}") for i, k in enumerate(stored)}
        if any(old != new for old, new in rename.items()):
            trees = tuple(expr_renamed(t, rename.__getitem__, where="guards") for t in trees)
        out = _FROM_CODE.remember(key, _number(sources, list(trees)))
    _NUMBERED.remember(id(out), out)
    return out


def guards_to_code(g: schema.InputGuards, *, where: str = "guards", spelling: str = "builtin") -> list[str]:
    """Validated Python text of every check, in stored order, the way torch writes guards.

    ``spelling`` (one of SPELLINGS) says how max and min are written: the loader passes the one
    the running torch prints (``serde.bridge``), torch-free readers keep the default.

    Raises:
        UnsafeArtifactError: a source key is not a plain identifier or index.
        MalformedArtifactError: any other inconsistency (unknown symbol, bad dim, an Expr member
            guards never use, too deep, ...).
    """
    key = (spelling, wire.encode(g))
    done = _PRINTED.get(key)
    if done is not None:
        return list(done)
    out = []
    for w, text in printed_checks(g, where, spelling):
        # Defence in depth: what torch will compile must pass the same allow-list as saving.
        _revalidate(Parser(w, stored=True), text, w)
        out.append(text)
    _PRINTED.remember(key, tuple(out))
    return out


# Printed and re-validated guard sets, shared by every load in the process, keyed by the exact
# encoding of the stored guards (equal bytes: equal sources and checks, so the same text and the
# same verdict; a set that fails is never remembered). A program's guards recur with each load of it.
_PRINTED = Memo(1 << 10, "printed_guards")


def _revalidate(parser: Parser, text: str, where: str) -> schema.Expr:
    """The tree of a printed check, parsed again under the allow-list."""
    try:
        return parser.guard(text, where)
    except UnsupportedConstructError as err:
        raise MalformedArtifactError(f"{where}: printed guard failed re-validation: {err}") from None


def canonical_guards(g: schema.InputGuards | None, *, where: str = "guards") -> schema.InputGuards | None:
    """``g`` with sources renumbered and checks deduplicated, in their order (idempotent)."""
    if g is None:
        return None
    if _is_numbered(g):
        # Built by _number in this process from parsed checks: numbering and deduplicating are what this
        # would redo, and a parsed tree prints to text that parses back to it (the print/parse
        # round trip), so the result would equal ``g``. Its printed checks must still pass the
        # allow-list that loading applies to them (text can outgrow a limit when printed).
        guards_to_code(g, where=where)
        return g
    # guards_from_code(guards_to_code(g)), with one parse of each printed check instead of two:
    # the parse that re-validates the printed text is the one whose tree gets numbered.
    parser = Parser(where, stored=True)
    trees = [_revalidate(parser, text, w) for w, text in printed_checks(g, where)]
    return _number(parser.sources, trees) if trees else None


def guard_texts(g: schema.InputGuards | None, *, where: str = "guards") -> list[str]:
    """Readable lines for ``show``/``diff``: the checks as torch would print them."""
    return [] if g is None else guards_to_code(g, where=where)


def _number(sources: Mapping[SourceKey, str], trees: list[schema.Expr]) -> schema.InputGuards:
    """Rename the symbols to g0.. in sorted-source order; dedupe the checks, keeping the first of
    each in place.

    The checks keep torch's order: a module runs its guards in order and reports the first that
    fails, so the order is what ``ep.module()`` says about an input that fails several. torch
    records them in tracing order, which the program's code fixes (the same program gives the
    same order on every export).
    """
    order = sorted(sources, key=sort_key)
    rename = {sources[k]: f"g{i}" for i, k in enumerate(order)}
    table = [make_source(f"g{i}", k) for i, k in enumerate(order)]
    names = {s.symbol: source_text(s) for s in table}
    same = all(old == new for old, new in rename.items())
    checks: dict[str, schema.Expr] = {}
    for t in trees:
        if not same:
            t = expr_renamed(t, rename.__getitem__, where="guards")
        checks.setdefault(Printer(names, "guards").expr(t, 0), t)
    used = set()
    for t in checks.values():
        used |= expr_symbols(t)
    if used != set(rename.values()):  # unreachable: every source came from a check
        raise AssertionError("guard sources and checks disagree")
    out = schema.InputGuards(sources=table, checks=list(checks.values()))
    _NUMBERED.remember(id(out), out)
    return out


# The InputGuards that _number built lately, by identity. Holding each one keeps its id from being
# reused by another object while it is listed, so `is` on the entry proves it is that very object.
# A save parses torch's guard text into them and then canonicalizes the program: this saves the
# second parse. Anything else (a decoded file, an edited copy) takes the full path.
_NUMBERED = Memo(64, "numbered_guards")

# Saving parses torch's guard text; a program's guards recur with each save of it (checkpoints).
# By the exact texts: each text's tree, sources in order of first appearance (source i is g<i>).
_PARSED = Memo(1 << 10, "parsed_guards")
# By those texts and the keys their sources resolve to: the numbered InputGuards. Only results are
# remembered, so a refused guard is parsed (and refused) again on every save.
_FROM_CODE = Memo(1 << 10, "guards_from_code")


def _is_numbered(g: schema.InputGuards) -> bool:
    return _NUMBERED.get(id(g)) is g
