"""Operator upgraders, chained: a program written for one torch release, rewritten for another.

``convert(program, frm, to)`` runs the release steps between the two (each a module
``torch_<a>_to_<b>.py``, listed in :data:`STEPS`), forward when ``to`` is newer and inverse when
it is older, on every node of every graph. For each node whose operator differs between the two
sides of a step, the step's rewrite applies; without one the node is refused: an operator the other
side lacks, or whose schema changed, is reported with where it is used, both releases and what
changed (from the snapshots' checker). Nodes of operators no snapshot knows (custom ops) and
releases without a snapshot are left to the normal operator resolution.

Pure and torch-free: the program Structs in, new Structs out (untouched subtrees shared).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import ModuleType

import msgspec

from serde.core import schema
from serde.errors import OperatorChangeError

from . import torch_2_13_to_2_14, torch_2_14_to_2_15
from .changes import Change, diff_snapshots
from .helpers import Refusal, Rewrite, StepContext
from .schemas import (
    OpSchema,
    Release,
    Snapshot,
    UnknownReleaseError,
    load_snapshot,
    release_of,
    release_text,
    snapshot_releases,
    target_key,
)

__all__ = ["STEPS", "Conversion", "convert", "upgrade_operators", "convert_for_target", "NO_OLDER_EQUIVALENT",
           "Handling", "step_handling"]

# One module per pair of consecutive supported releases, oldest first.
STEPS: tuple[ModuleType, ...] = (torch_2_13_to_2_14, torch_2_14_to_2_15)

# Why an operator new in a release is refused by an older one (every step's default).
NO_OLDER_EQUIVALENT = "no operator of the older release computes the same"

_HOP_PREFIX = "torch.ops.higher_order."


@dataclass
class Conversion:
    """What :func:`convert` did: the program (the one given when nothing changed), the rewrites
    applied and the nodes refused; ``frm``/``to`` are None when no step ran."""

    program: schema.ExportedProgram
    frm: Release | None
    to: Release | None
    applied: list[str] = field(default_factory=list)    # "graph.nodes['qr']: aten::qr.default -> ..."
    refused: list[str] = field(default_factory=list)    # one sentence each, naming the operator


def convert(program: schema.ExportedProgram, frm: str, to: str) -> Conversion:
    """``program`` (written for torch ``frm``) rewritten for torch ``to``; never raises for a
    refused node (see :attr:`Conversion.refused`)."""
    a, b = release_of(frm), release_of(to)
    known = snapshot_releases()
    if a is None or b is None or a == b or a not in known or b not in known:
        return Conversion(program, None, None)
    out = Conversion(program, a, b)
    for step, forward in _chain(a, b):
        older, newer = load_snapshot(step.OLDER), load_snapshot(step.NEWER)
        source, target = (older, newer) if forward else (newer, older)
        rewrites = step.UPGRADE if forward else step.DOWNGRADE
        refused = step.REFUSED_UP if forward else step.REFUSED_DOWN
        gm = out.program.graph_module
        graph = _Step(source, target, rewrites, refused, forward, out).graph(gm.graph, "graph")
        if graph is not gm.graph:
            out.program = msgspec.structs.replace(out.program, graph_module=msgspec.structs.replace(gm, graph=graph))
        if out.refused:
            break
    return out


def upgrade_operators(program: schema.ExportedProgram, running: str) -> schema.ExportedProgram:
    """The program as the running torch (version text ``running``) can load it.

    Raises:
        OperatorChangeError: some operator has no upgrader (names each, both releases, the change).
    """
    if release_of(program.torch_version) == release_of(running):
        return program
    done = convert(program, program.torch_version, running)
    if done.refused:
        raise OperatorChangeError(
            f"the artifact was written by torch {program.torch_version} and this is torch {running}; "
            f"{_count(done.refused)} cannot be loaded here: " + "; ".join(done.refused))
    return done.program


def convert_for_target(program: schema.ExportedProgram, running: str, target: str) -> schema.ExportedProgram:
    """``program`` (just written by torch ``running``) rewritten for a reader running torch
    ``target`` (``"2.13"``), recording the target's release as the program's torch.

    Raises:
        UnknownReleaseError: ``target`` has no operator snapshot.
        OperatorChangeError: some operator has no counterpart in ``target``.
    """
    t = release_of(target) if isinstance(target, str) else None
    if t is None or t not in snapshot_releases():
        raise UnknownReleaseError(
            f"save(target_torch={target!r}): pt2serde can write for torch "
            f"{', '.join(release_text(r) for r in snapshot_releases())} (the releases with an operator snapshot)")
    r = release_of(running)
    if r == t:
        return program
    if r not in snapshot_releases():
        raise UnknownReleaseError(
            f"save(target_torch={target!r}): this torch ({running}) has no operator snapshot, so what "
            "changes between it and the target is unknown; save without target_torch")
    done = convert(program, running, release_text(t))
    if done.refused:
        raise OperatorChangeError(
            f"save(target_torch={target!r}): {_count(done.refused)} of this torch ({running}) cannot be "
            f"written for torch {release_text(t)}: " + "; ".join(done.refused))
    return msgspec.structs.replace(done.program, torch_version=load_snapshot(t).torch_version)


@dataclass(frozen=True)
class Handling:
    """How one step handles one change, in each direction (None: not handled, a gap)."""

    change: Change
    up: str | None
    down: str | None


def step_handling(step: ModuleType) -> list[Handling]:
    """Every change the checker finds between ``step``'s two releases, with what the step does about
    it going up (an artifact of the older release read by the newer) and going down."""
    out = []
    for c in diff_snapshots(load_snapshot(step.OLDER), load_snapshot(step.NEWER)):
        new = c.kind in ("new-operator", "new-higher-order-op")
        removed = c.kind in ("removed-operator", "removed-higher-order-op")
        if c.op in step.UPGRADE:
            up = "rewritten" + _rewrites_to(step.UPGRADE[c.op])
        elif c.op in step.REFUSED_UP:
            up = f"refused: {step.REFUSED_UP[c.op]}"
        else:
            up = "nothing to do: an older artifact cannot use it" if new else None
        if c.op in step.DOWNGRADE:
            down = "rewritten" + _rewrites_to(step.DOWNGRADE[c.op])
        elif c.op in step.REFUSED_DOWN:
            down = f"refused: {step.REFUSED_DOWN[c.op]}"
        elif new:
            down = f"refused: {NO_OLDER_EQUIVALENT}"
        else:
            down = "nothing to do: a newer artifact cannot use it" if removed else None
        out.append(Handling(c, up, down))
    return out


# --- helpers ---------------------------------------------------------------------------------


def _rewrites_to(rewrite: Rewrite) -> str:
    return "" if rewrite.new_target is None else f" to {target_key(rewrite.new_target)}"


def _chain(a: Release, b: Release) -> list[tuple[ModuleType, bool]]:
    """The steps from release ``a`` to ``b``, each with its direction (True: forward)."""
    by_pair = {(s.OLDER, s.NEWER): s for s in STEPS}
    releases = snapshot_releases()
    i, j = releases.index(a), releases.index(b)
    out = []
    if i < j:
        pairs = [(releases[k], releases[k + 1], True) for k in range(i, j)]
    else:
        pairs = [(releases[k - 1], releases[k], False) for k in range(i, j, -1)]
    for older, newer, forward in pairs:
        step = by_pair.get((older, newer))
        if step is None:
            raise UnknownReleaseError(
                f"no operator upgrader step from torch {release_text(older)} to {release_text(newer)} "
                f"(serde/opsets/torch_{older[0]}_{older[1]}_to_{newer[0]}_{newer[1]}.py)")
        out.append((step, forward))
    return out


def _count(refused: list[str]) -> str:
    return "1 operator use" if len(refused) == 1 else f"{len(refused)} operator uses"


class _Step:
    """One release step over a program's graphs."""

    def __init__(self, source: Snapshot, target: Snapshot, rewrites: dict[str, Rewrite], refused: dict[str, str],
                 forward: bool, out: Conversion) -> None:
        self.source, self.target, self.rewrites, self.refused_ops = source, target, rewrites, refused
        self.forward, self.out = forward, out
        self.s, self.t = release_text(source.release), release_text(target.release)
        self._changes: dict[str, list[str]] | None = None

    def graph(self, g: schema.Graph, where: str) -> schema.Graph:
        nodes = [self.node(n, f"{where}.nodes[{n.name!r}]") for n in g.nodes]
        if all(a is b for a, b in zip(nodes, g.nodes, strict=True)):
            return g
        return msgspec.structs.replace(g, nodes=nodes)

    def node(self, n: schema.Node, where: str) -> schema.Node:
        inputs = [self._subgraphs(na, f"{where}.inputs[{j}]") for j, na in enumerate(n.inputs)]
        if any(a is not b for a, b in zip(inputs, n.inputs, strict=True)):
            n = msgspec.structs.replace(n, inputs=inputs)
        for j, na in enumerate(n.inputs):
            if na.arg.as_operator is not None:
                self._operand(na.arg.as_operator, f"{where}.inputs[{j}]")
        if n.target.startswith(_HOP_PREFIX):
            hop = n.target[len(_HOP_PREFIX):]
            if hop in self.source.higher_order_ops and hop not in self.target.higher_order_ops:
                self._refuse(where, f"higher-order op {hop}", self._absent_reason(hop))
            return n
        key = target_key(n.target)
        if key is None or key not in self.source.ops:
            return n
        rewrite = self.rewrites.get(key)
        if rewrite is not None:
            try:
                new = rewrite(n, StepContext(self.source.ops[key], self._target_schema(n, rewrite, key), where))
            except Refusal as e:
                self._refuse(where, key, e.reason)
                return n
            self.out.applied.append(f"{where}: {key} -> {target_key(new.target)} "
                                    f"(torch {self.s} -> {self.t}: {self._what(key)})")
            return new
        if key in self.refused_ops:
            self._refuse(where, key, self.refused_ops[key])
        elif key not in self.target.ops:
            self._refuse(where, key, self._absent_reason(key))
        elif self.target.ops.texts[key] != self.source.ops.texts[key]:
            self._refuse(where, key, f"its schema changed ({'; '.join(self._change_details(key))}) and no "
                                     "upgrader covers that")
        return n

    def _target_schema(self, n: schema.Node, rewrite: Rewrite, key: str) -> OpSchema | None:
        if rewrite.new_target is None:
            return self.target.ops.get(key)
        return self.target.ops.get(target_key(rewrite.new_target) or "")

    def _subgraphs(self, na: schema.NamedArgument, where: str) -> schema.NamedArgument:
        ga = na.arg.as_graph
        if ga is None:
            return na
        g = self.graph(ga.graph, f"{where}.graph")
        if g is ga.graph:
            return na
        arg = schema.Argument(as_graph=msgspec.structs.replace(ga, graph=g))
        return msgspec.structs.replace(na, arg=arg)

    def _operand(self, op: str, where: str) -> None:
        key = target_key(op)
        if key is None or key not in self.source.ops:
            return
        if key not in self.target.ops:
            self._refuse(where, key, self._absent_reason(key) + " (it is an operand here, not a call)")
        elif self.target.ops.texts[key] != self.source.ops.texts[key]:
            self._refuse(where, key, f"its schema changed ({'; '.join(self._change_details(key))}), and an "
                                     "operator passed as an operand is not rewritten")

    def _absent_reason(self, key: str) -> str:
        if self.forward:
            return (f"torch {self.t} removed it and pt2serde has no upgrader that rewrites it to a replacement; "
                    f"load the artifact under torch {self.s}")
        return (f"it was introduced in torch {self.s}, and torch {self.t} does not have it ({NO_OLDER_EQUIVALENT}); "
                f"load the artifact under torch {self.s} or newer")

    def _what(self, key: str) -> str:
        return "; ".join(self._change_details(key)) or "same meaning"

    def _change_details(self, key: str) -> list[str]:
        if self._changes is None:
            older, newer = (self.source, self.target) if self.forward else (self.target, self.source)
            self._changes = {}
            for c in diff_snapshots(older, newer):
                self._changes.setdefault(c.op, []).append(f"{c.kind}: {c.detail}")
        return self._changes.get(key, [])

    def _refuse(self, where: str, op: str, reason: str) -> None:
        self.out.refused.append(f"{where}: {op}: {reason}")
