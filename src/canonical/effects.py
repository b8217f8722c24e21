"""Order-only edges: the canonical order may only permute nodes whose relative order nobody can observe.

Data edges alone let a topological sort move a read of a buffer past an in-place write to it, or
swap two RNG draws. Given each node's :class:`~serde.core.opfacts.OpFacts`, these edges pin what the
stored order says about effects, and nothing else:

- **Storage.** Fresh node outputs are storage roots, and the graph's inputs together are one more:
  inputs may alias each other at run time (a buffer that views another buffer, a constant that
  views a buffer, one tensor passed for two user inputs), which the graph cannot show, so a read
  of any input stays on its side of a write to any input. An output that aliases an argument (a
  view, an in-place result) joins that argument's roots. A node that reads a root follows the
  last write to it; a write follows every read of that root since the previous write.
- **Effect chain.** Nodes with an effect (writes, RNG draws, effect tokens, custom objects,
  stateful calls, higher-order ops whose subgraphs have effects) keep their stored order. One chain
  rather than per-root chains: graph inputs may alias each other at run time (tied buffers), which
  the graph cannot show, so writes to different roots are not assumed to commute.
- **Checks.** Asserts follow the effect stored before them and precede the one stored after them;
  between two effects they are free, so their order among themselves stays structural.
- **Fences.** Stateful calls (vmap nesting) keep every node on its stored side of them.

The edges depend on the stored order only through what it means: every stored order that is a
valid schedule of the same program (same effect order, same reads between the same writes) gives
the same edges, so the canonical order is still a function of the program. A graph without effects
gets no edges at all.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from serde.core import schema
from serde.core.opfacts import OpFacts
from serde.core.walk import argument_names

__all__ = ["effect_edges"]

# The one root of every graph input; not an identifier, so no value of a stored graph has this name
# (and should a damaged one have it, that value only gains edges).
_INPUTS = "(graph inputs)"
_ONE_INPUT_ROOT = (_INPUTS,)


def effect_edges(nodes: Sequence[schema.Node], facts: Sequence[OpFacts], inputs: Collection[str]
                 ) -> list[list[int]]:
    """Per node (stored index), the nodes it must follow although it uses none of their values
    (``inputs``: the names of the graph's inputs)."""
    n = len(nodes)
    extra: list[list[int]] = [[] for _ in range(n)]
    if not any(f.has_effect for f in facts):
        return extra
    reads, writes = _storage_access(nodes, facts, inputs)
    written = set().union(*writes)
    last_write: dict[str, int] = {}
    reads_since: dict[str, list[int]] = {}
    last_effect = -1
    checks: list[int] = []
    fence, segment = -1, []
    for i, f in enumerate(facts):
        e = extra[i]
        w = writes[i]
        r = reads[i] & written  # roots nothing writes need no edges
        for root in r:
            if root in last_write:
                e.append(last_write[root])
        for root in w:
            e.extend(reads_since.pop(root, ()))
        if f.has_effect or w:
            if last_effect >= 0:
                e.append(last_effect)
            e.extend(checks)
            last_effect, checks = i, []
        elif f.check:
            if last_effect >= 0:
                e.append(last_effect)
            checks.append(i)
        for root in w:
            last_write[root] = i
        for root in r - w:
            reads_since.setdefault(root, []).append(i)
        if f.fence:
            e.extend(segment)
            if fence >= 0 and not segment:
                e.append(fence)
            fence, segment = i, []
        else:
            if fence >= 0:
                e.append(fence)
            segment.append(i)
    return [sorted(set(e)) for e in extra]


def _storage_access(nodes: Sequence[schema.Node], facts: Sequence[OpFacts], inputs: Collection[str]
                    ) -> tuple[list[set[str]], list[set[str]]]:
    """Per node, the storage roots it reads and those it writes (roots are value names, and
    ``_INPUTS`` for every graph input)."""
    roots: dict[str, tuple[str, ...]] = dict.fromkeys(inputs, _ONE_INPUT_ROOT)

    def roots_of(a: schema.Argument) -> set[str]:
        return {r for name in argument_names(a) for r in roots.get(name, (name,))}

    reads: list[set[str]] = []
    writes: list[set[str]] = []
    for node, f in zip(nodes, facts, strict=True):
        r: set[str] = set()
        w: set[str] = set()
        by_name: dict[str, set[str]] = {}
        for na in node.inputs:
            rs = roots_of(na.arg)
            r |= rs
            by_name[na.name] = rs
            if f.writes_all or na.name in f.writes:
                w |= rs
        for k, arg_name in f.views:
            base = by_name.get(arg_name)
            if base and k < len(node.outputs):
                for name in argument_names(node.outputs[k]):
                    roots[name] = tuple(sorted(base))
        reads.append(r)
        writes.append(w)
    return reads, writes
