"""The operator checker: what changed between two releases' snapshots, one classified change each.

Kinds, in the order a reviewer meets them:

- ``removed-operator`` / ``new-operator``: the overload exists on one side only;
- ``renamed-argument``: same position, type, default and keyword-ness, another name;
- ``new-argument-with-default`` / ``new-argument-without-default``;
- ``removed-argument``;
- ``changed-type-or-alias``: an argument's or a return's type, including its alias and write
  annotations (``Tensor`` -> ``Tensor(a!)``), or the number of returns;
- ``changed-default``, ``changed-keyword-only``, ``reordered-arguments``, ``renamed-return``;
- ``removed-higher-order-op`` / ``new-higher-order-op``.

Every change between consecutive supported releases must be handled by that step's upgrader module
or be refused there with a reason (tests/serde/opsets/test_opsets.py holds the steps to that).
"""

from __future__ import annotations

from dataclasses import dataclass

from .schemas import Arg, OpSchema, Snapshot, release_text

__all__ = ["Change", "diff_snapshots", "KINDS"]

KINDS = (
    "removed-operator", "new-operator", "renamed-argument", "new-argument-with-default",
    "new-argument-without-default", "removed-argument", "changed-type-or-alias", "changed-default",
    "changed-keyword-only", "reordered-arguments", "renamed-return", "removed-higher-order-op",
    "new-higher-order-op",
)


@dataclass(frozen=True)
class Change:
    """One difference of one operator between an older and a newer release."""

    kind: str
    op: str              # "aten::cholesky.default", or a higher-order op's name
    detail: str          # what changed, in words (names the argument)
    old: str | None      # the schema text in the older release (None: absent)
    new: str | None

    def line(self) -> str:
        return f"{self.kind:30} {self.op}: {self.detail}"


def diff_snapshots(old: Snapshot, new: Snapshot) -> list[Change]:
    """Every change from ``old`` to ``new``, sorted by operator then kind."""
    out: list[Change] = []
    o, n = release_text(old.release), release_text(new.release)
    for key in sorted(old.ops.texts.keys() | new.ops.texts.keys()):
        a, b = old.ops.texts.get(key), new.ops.texts.get(key)
        if b is None:
            out.append(Change("removed-operator", key, f"torch {n} no longer has it", a, None))
        elif a is None:
            out.append(Change("new-operator", key, f"introduced in torch {n}", None, b))
        elif a != b:
            out += [Change(kind, key, detail, a, b) for kind, detail in _schema_changes(old.ops[key], new.ops[key])]
    for hop in sorted(old.higher_order_ops - new.higher_order_ops):
        out.append(Change("removed-higher-order-op", hop, f"torch {n} no longer has it", hop, None))
    for hop in sorted(new.higher_order_ops - old.higher_order_ops):
        out.append(Change("new-higher-order-op", hop, f"introduced in torch {n} (absent in {o})", None, hop))
    return out


# --- helpers ---------------------------------------------------------------------------------


def _schema_changes(a: OpSchema, b: OpSchema) -> list[tuple[str, str]]:
    changes: list[tuple[str, str]] = []
    old_names, new_names = [x.name for x in a.args], [x.name for x in b.args]
    renamed = _renames(a.args, b.args)
    for i, (x, y) in renamed.items():
        changes.append(("renamed-argument", f"argument {i} {x.name!r} is now {y.name!r} ({y.type})"))
    renamed_old = {x.name for x, _ in renamed.values()}
    renamed_new = {y.name for _, y in renamed.values()}
    for y in b.args:
        if y.name not in old_names and y.name not in renamed_new:
            kind = "new-argument-with-default" if y.default is not None else "new-argument-without-default"
            changes.append((kind, f"new {'keyword-only ' if y.kwarg_only else ''}argument {y.text()!r}"))
    for x in a.args:
        if x.name not in new_names and x.name not in renamed_old:
            changes.append(("removed-argument", f"argument {x.text()!r} is gone"))
    for x in a.args:
        y = b.arg(x.name)
        if y is None or x.name in renamed_old:
            continue
        if x.type != y.type:
            changes.append(("changed-type-or-alias", f"argument {x.name!r}: {x.type} -> {y.type}"))
        if x.default != y.default:
            changes.append(("changed-default", f"argument {x.name!r}: default {x.default} -> {y.default}"))
        if x.kwarg_only != y.kwarg_only:
            changes.append(("changed-keyword-only",
                            f"argument {x.name!r} is {'now' if y.kwarg_only else 'no longer'} keyword-only"))
    common_old = [x for x in old_names if x in new_names]
    common_new = [y for y in new_names if y in old_names]
    if common_old != common_new:
        changes.append(("reordered-arguments", f"arguments {common_old} are now in the order {common_new}"))
    if len(a.returns) != len(b.returns):
        changes.append(("changed-type-or-alias", f"{len(a.returns)} returns -> {len(b.returns)}"))
    else:
        for i, (x, y) in enumerate(zip(a.returns, b.returns, strict=True)):
            if x.type != y.type:
                changes.append(("changed-type-or-alias", f"return {i}: {x.type} -> {y.type}"))
            elif x.name != y.name:
                changes.append(("renamed-return", f"return {i} {x.name!r} is now {y.name!r}"))
    return changes


def _renames(old: tuple[Arg, ...], new: tuple[Arg, ...]) -> dict[int, tuple[Arg, Arg]]:
    """Positions where only the name changed, and neither name exists on the other side."""
    old_names, new_names = {x.name for x in old}, {y.name for y in new}
    out = {}
    for i, (x, y) in enumerate(zip(old, new, strict=False)):
        if (x.name != y.name and x.type == y.type and x.default == y.default and x.kwarg_only == y.kwarg_only
                and x.name not in new_names and y.name not in old_names):
            out[i] = (x, y)
    return out
