"""Canonical symbol names (``s0, s1, ... u0, ... zf0 ...``), assigned by first appearance.

Symbols are renamed program-wide in the order they first appear in the canonical traversal
(graph inputs in signature order, then nodes in canonical order, each node's subgraphs before its
outputs; sizes, then strides, then storage offset), keeping their prefix class: ``s`` backed ints,
``u`` unbacked ints, ``zf``/``zuf`` floats (any other name keeps its non-digit prefix). Symbols that
appear only in ``range_constraints`` come last, ordered by prefix and stored number.

Known limitation: when one expression introduces several new symbols at once, they are numbered in
the order its canonical text mentions them; the printer sorts commutative terms by name, so that
order can depend on the stored names. torch introduces symbols one per input dimension, so this
does not arise for exported programs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from serde.core import schema, wire
from serde.core.expr import expr_from_text, expr_text, free_symbol_names, rename_symbols
from serde.core.memo import Memo
from serde.core.walk import rename_sym_value, sym_value_exprs

__all__ = ["SymbolRenamer"]

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PREFIX = re.compile(r"^(.*?)(\d*)$")


# Pure functions of an expression's content, shared by every canonicalization in the process: a
# program's expressions recur with each save of it. Each result is remembered only once computed,
# so text that fails to print or parse fails every time.
_TEXTS = Memo(1 << 12, "canonical_texts")      # encoded tree -> canonical text
_SYMBOLS = Memo(1 << 12, "canonical_symbols")    # text -> its free symbols, in order of first mention
_READ = Memo(1 << 12, "canonical_read")       # renamed text -> (its tree, the tree's encoding)


def _ordered_symbols(text: str, where: str) -> tuple[str, ...]:
    names = _SYMBOLS.get(text)
    if names is None:
        free = free_symbol_names(text, where=where)
        ordered: list[str] = []
        for m in _IDENT.finditer(text):
            s = m.group(0)
            if s in free and s not in ordered:
                ordered.append(s)
        names = _SYMBOLS.remember(text, tuple(ordered))
    return names


def _read(text: str) -> tuple[schema.Expr, bytes]:
    read = _READ.get(text)
    if read is None:
        new = expr_from_text(text)
        read = _READ.remember(text, (new, wire.encode(new)))
    return read


def _split(name: str) -> tuple[str, int]:
    m = _PREFIX.match(name)
    assert m is not None
    return m.group(1), int(m.group(2)) if m.group(2) else -1


class SymbolRenamer:
    """Collects symbols in traversal order, then renames expressions consistently.

    Expressions are trees (``schema.Expr``); symbol order and renaming go through their canonical
    text, and every distinct tree is converted once (cached by its encoding, and the conversions
    themselves in the process memos above).
    """

    def __init__(self) -> None:
        self.mapping: dict[str, str] = {}
        self._next: dict[str, int] = {}
        self._renamed: dict[str, str] = {}
        self._trees: dict[bytes, tuple[schema.Expr, bool]] = {}
        self.seen_any = False  # no expression at all: metas are static and stay as they are
        # TensorMeta objects already seen / renamed, by identity (writers share one object among
        # the values of equal metas). Values hold the objects so that no id is reused.
        self._metas_seen: dict[int, schema.TensorMeta] = {}
        self._metas_out: dict[int, tuple[schema.TensorMeta, schema.TensorMeta]] = {}

    # -- collecting

    def see_text(self, text: str, where: str) -> None:
        for s in _ordered_symbols(text, where):
            if s not in self.mapping:
                self._assign(s)

    @staticmethod
    def _text(key: bytes, e: schema.Expr, where: str) -> str:
        text = _TEXTS.get(key)
        if text is None:
            text = _TEXTS.remember(key, expr_text(e, where=where))
        return text

    def expr_text(self, e: schema.Expr, where: str) -> str:
        """Canonical text of ``e`` (not renamed)."""
        return self._text(wire.encode(e), e, where)

    @staticmethod
    def tree(text: str) -> schema.Expr:
        """The tree of canonical (renamed) text."""
        return _read(text)[0]

    def see_value(self, v: schema.SymInt | schema.SymFloat | schema.SymBool, where: str) -> None:
        if v.as_expr is None:
            return
        self.seen_any = True
        for e in sym_value_exprs(v):
            self.see_text(self._text(wire.encode(e.expr), e.expr, where), where)

    def seen_meta(self, m: schema.TensorMeta) -> bool:
        """Whether this very object went through :meth:`see_meta` already (seeing it again would
        assign no symbol)."""
        return id(m) in self._metas_seen

    def see_meta(self, m: schema.TensorMeta, where: str) -> None:
        self._metas_seen[id(m)] = m
        for s in m.sizes:
            if s.as_expr is not None:
                self.see_value(s, where)
        for s in m.strides:
            if s.as_expr is not None:
                self.see_value(s, where)
        if m.storage_offset.as_expr is not None:
            self.see_value(m.storage_offset, where)

    def see_remaining(self, names: Iterable[str], where: str) -> None:
        """Symbols named only by ``names`` (range constraint texts): by prefix, number, name."""
        rest: list[str] = []
        for text in names:
            for s in _ordered_symbols(text, where):
                if s not in self.mapping and s not in rest:
                    rest.append(s)
        for s in sorted(rest, key=lambda s: (*_split(s), s)):
            self._assign(s)

    def _assign(self, s: str) -> None:
        prefix = _split(s)[0] or "s"
        k = self._next.get(prefix, 0)
        self._next[prefix] = k + 1
        self.mapping[s] = f"{prefix}{k}"

    # -- renaming

    def text(self, text: str, where: str = "expression") -> str:
        out = self._renamed.get(text)
        if out is None:
            out = self._renamed[text] = rename_symbols(text, self.mapping, where=where)
        return out

    def _expr(self, e: schema.SymExpr) -> schema.SymExpr:
        key = wire.encode(e.expr)
        hit = self._trees.get(key)
        if hit is None:
            read = _read(self.text(self._text(key, e.expr, "expression")))
            # Re-reading the text also normalizes trees built another way (e.g. by an upgrader).
            hit = self._trees[key] = (read[0], read[1] == key)
        return e if hit[1] else schema.SymExpr(expr=hit[0], hint=e.hint)

    def value(self, v: schema.SymInt | schema.SymFloat | schema.SymBool) -> schema.SymInt | schema.SymFloat | schema.SymBool:
        if v.as_expr is None:
            return v
        return rename_sym_value(v, self._expr)

    def meta(self, m: schema.TensorMeta) -> schema.TensorMeta:
        if not self.seen_any:
            return m
        hit = self._metas_out.get(id(m))
        if hit is None:
            hit = self._metas_out[id(m)] = (m, self._meta(m))
        return hit[1]

    def _meta(self, m: schema.TensorMeta) -> schema.TensorMeta:
        sizes = [self.value(s) for s in m.sizes]
        strides = [self.value(s) for s in m.strides]
        off = self.value(m.storage_offset)
        if (off is m.storage_offset and all(a is b for a, b in zip(sizes, m.sizes, strict=True))
                and all(a is b for a, b in zip(strides, m.strides, strict=True))):
            return m
        return schema.TensorMeta(dtype=m.dtype, sizes=sizes, requires_grad=m.requires_grad, device=m.device,
                                 strides=strides, storage_offset=off, layout=m.layout)
