"""Canonical topological order of one graph's nodes, decided by structure alone.

The order is a function of the graph's structure, never of node names or of the stored order:

1. **Demand order.** A post-order depth-first walk from the graph outputs (in output order),
   visiting each node's inputs in argument order, numbers every node that an output depends on.
   Chains stay together and each value is computed just before its first use, so the order reads
   like the program and small edits move few lines.
2. **Side nodes.** Nodes no output depends on (runtime asserts, ``sym_constrain_range``...) are
   placed as early as their inputs allow, as torch places them; ties among them are broken by a
   name-free structural hash of what they compute (upstream, including their stable metadata:
   module paths, ``custom``) and of how their values are used (downstream).
3. **Effects.** Order-only edges (:mod:`canonical.effects`) keep every observable effect where the
   stored order put it: writes against the reads and writes of the same storage, RNG draws and
   other effects in a chain, asserts between their neighbouring effects, and every node on its
   stored side of a stateful call (vmap nesting in training-IR ``associative_scan``).
4. **Module frames.** ``torch.export.unflatten`` needs the nodes of one module call to be
   contiguous. Nodes are grouped by their ``nn_module_stack`` keys and each call frame is scheduled
   as one block inside its parent frame (a topological sort of blocks, each block recursively), so a
   frame is never split. Nodes without a stack join the innermost frame common to their users.
   A level whose blocks depend on each other in a cycle (only possible if the stored order already
   split a frame) falls back to scheduling its nodes individually.

The only arbitrary choice left is between nodes whose every structural key is equal; those are
interchangeable, and the stored index is used merely to make the run deterministic.
"""

from __future__ import annotations

import hashlib
import heapq
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from serde.core import schema
from serde.core.opfacts import OpFacts
from serde.core.walk import EMPTY_STACK_KEY, argument_key, argument_names, output_leaves
from serde.errors import MalformedArtifactError

from .effects import effect_edges

__all__ = ["GraphIndex", "canonical_order", "node_key", "hidden_ref_node_keys", "meta_key", "EMPTY_STACK_KEY"]



def _digest(parts: Any) -> bytes:
    return hashlib.blake2b(repr(parts).encode(), digest_size=12).digest()


class GraphIndex:
    """Def-use tables of one graph: who produces each value, who consumes it.

    ``preds`` also holds the order-only edges of :func:`canonical.effects.effect_edges`, computed
    from ``facts`` (one per node), so every order derived from it keeps effects where they were.

    Raises:
        MalformedArtifactError: a value defined twice, or a reference to a value never defined.
    """

    def __init__(self, g: schema.Graph, where: str, facts: Sequence[OpFacts]) -> None:
        self.graph = g
        self.where = where
        # value name -> producing node index, or -(input position + 1) for a graph input.
        self.producer: dict[str, int] = {}
        self.leaf_index: dict[str, int] = {}
        input_names: list[str] = []
        for pos, a in enumerate(g.inputs):
            for name in argument_names(a):
                self._define(name, -(pos + 1), 0, f"{where}.inputs[{pos}]")
                input_names.append(name)
        self.leaves: list[list[tuple[int, str, str]]] = []
        producer, leaf_index = self.producer, self.leaf_index
        # (the location strings of the errors are only built when one is raised)
        all_leaves = self.leaves
        for i, node in enumerate(g.nodes):
            outs = node.outputs
            t = outs[0].as_tensor if len(outs) == 1 else None  # the common case, without the walk
            if t is not None:
                name = t.name
                all_leaves.append([(0, "as_tensor", name)])
                if name in producer:
                    self._define(name, i, 0, f"{where}.nodes[{i}].outputs")
                producer[name] = i
                leaf_index[name] = 0
                continue
            leaves = output_leaves(outs)
            all_leaves.append(leaves)
            for j, (_, _, name) in enumerate(leaves):
                if name in producer:
                    self._define(name, i, j, f"{where}.nodes[{i}].outputs")
                producer[name] = i
                leaf_index[name] = j
        self.refs: list[list[str]] = []
        self.preds: list[list[int]] = []
        other_names: dict[int, tuple[str, ...]] = {}  # id(argument) -> its names (writers share constants)
        for i, node in enumerate(g.nodes):
            refs: list[str] = []
            preds: list[int] = []
            for j, na in enumerate(node.inputs):
                a = na.arg
                t = a.as_tensor  # the common case, without the walk
                if t is not None:
                    names: Any = (t.name,)
                else:
                    names = other_names.get(id(a))
                    if names is None:
                        names = other_names[id(a)] = tuple(argument_names(a))
                for name in names:
                    p = producer.get(name)
                    if p is None:
                        self._check_ref(name, f"{where}.nodes[{i}].inputs[{j}]")
                    refs.append(name)
                    if p >= 0:  # type: ignore[operator]  # (_check_ref raised for None)
                        preds.append(p)
            self.refs.append(refs)
            self.preds.append(preds)
        # Order-only edges constrain the schedule but take no part in the demand walk: they are
        # listed by stored index, and the walk's visiting order must not depend on it.
        # (a node with order-only edges gets a new list; the others share theirs)
        self.data_preds = list(self.preds)
        for i, extra in enumerate(effect_edges(g.nodes, facts, input_names)):
            if extra:
                self.preds[i] = self.preds[i] + [p for p in extra if p not in self.preds[i]]
        self.output_refs: list[str] = []
        for j, o in enumerate(g.outputs):
            for name in argument_names(o):
                self._check_ref(name, f"{where}.outputs[{j}]")
                self.output_refs.append(name)
        # ``succs`` and ``topo`` are built when first asked for (the canonical order of most graphs
        # needs neither), but a cycle is refused now: a stored order with every node after its
        # predecessors has none, any other is sorted at once.
        self._succs: list[list[int]] | None = None
        self._topo: list[int] | None = None
        if not all(p < i for i, preds in enumerate(self.preds) for p in preds):
            self._topo = self._topological()

    @property
    def succs(self) -> list[list[int]]:
        """Per node, the nodes that follow it (data and order-only edges)."""
        if self._succs is None:
            succs: list[list[int]] = [[] for _ in range(len(self.preds))]
            for i, preds in enumerate(self.preds):
                for p in preds:
                    succs[p].append(i)
            self._succs = succs
        return self._succs

    @property
    def topo(self) -> list[int]:
        """Some topological order (stored order among ready nodes)."""
        if self._topo is None:
            self._topo = self._topological()
        return self._topo

    def _define(self, name: str, producer: int, leaf: int, where: str) -> None:
        if name in self.producer:
            raise MalformedArtifactError(
                f"{where}: value {name!r} is defined twice in {self.where}; every node output and graph "
                "input needs its own name. The artifact is damaged or was written by a faulty tool."
            )
        self.producer[name] = producer
        self.leaf_index[name] = leaf

    def _check_ref(self, name: str, where: str) -> None:
        if name not in self.producer:
            raise MalformedArtifactError(
                f"{where}: refers to {name!r}, which no node or graph input of {self.where} defines. "
                "The artifact is damaged or was written by a faulty tool."
            )

    def _topological(self) -> list[int]:
        """Some topological order (stored order among ready nodes); raises on a cycle."""
        n = len(self.preds)
        indeg = [len(p) for p in self.preds]
        ready = [i for i in range(n) if indeg[i] == 0]
        heapq.heapify(ready)
        out: list[int] = []
        succs = self.succs
        while ready:
            i = heapq.heappop(ready)
            out.append(i)
            for s in succs[i]:
                indeg[s] -= 1
                if indeg[s] == 0:
                    heapq.heappush(ready, s)
        if len(out) != n:
            stuck = min(i for i in range(n) if indeg[i] > 0)
            raise MalformedArtifactError(
                f"{self.where}.nodes[{stuck}]: the graph has a dependency cycle through node "
                f"{self.graph.nodes[stuck].name!r}; a graph must be acyclic."
            )
        return out


class _HashCtx:
    """Visitor for structural keys: a reference becomes its producer's hash (or input position)."""

    def __init__(self, idx: GraphIndex, node_hash: list[bytes | None], subgraph_key: Callable) -> None:
        self.idx, self.node_hash, self.subgraph_key = idx, node_hash, subgraph_key

    def value(self, name: str) -> Any:
        p = self.idx.producer[name]
        if p < 0:
            return ("in", -p - 1)
        return (self.node_hash[p], self.idx.leaf_index[name])

    def subgraph(self, ga: schema.GraphArgument) -> Any:
        return self.subgraph_key(ga)


def node_key(node: schema.Node, ctx: Any) -> tuple:
    """Name-free structural key of one node: target and every argument."""
    # kind as a plain int: keys are hashed through repr(), which must not depend on enum reprs
    return (node.target, tuple((na.name, None if na.kind is None else int(na.kind), argument_key(na.arg, ctx))
                               for na in node.inputs))


def hidden_ref_node_keys(nodes: Sequence[schema.Node], ctx: Any) -> list[tuple]:
    """``node_key`` of every node, for a ``ctx`` whose ``value`` gives one key for every name (the
    key of an argument object is then fixed: each object shared by several nodes is keyed once)."""
    hidden = ("as_tensor", ("t", ctx.value("")))
    by_arg: dict[int, tuple] = {}  # id(NamedArgument) -> its part of the key (the nodes keep it alive)
    by_ref: dict[tuple, tuple] = {}  # (argument name, kind) -> the part of a tensor reference
    out = []
    for node in nodes:
        parts = []
        for na in node.inputs:
            if na.arg.as_tensor is not None:
                part = by_ref.get((na.name, na.kind))
                if part is None:
                    part = by_ref[(na.name, na.kind)] = (na.name, None if na.kind is None else int(na.kind), hidden)
            else:
                part = by_arg.get(id(na))
                if part is None:
                    part = by_arg[id(na)] = (na.name, None if na.kind is None else int(na.kind),
                                             argument_key(na.arg, ctx))
            parts.append(part)
        out.append((node.target, tuple(parts)))
    return out


def meta_key(m: schema.NodeMetadata) -> tuple:
    """The stable part of a node's metadata (module paths and call indices, custom, source targets).

    Stored stack keys may be per-process ids and source-function names are tracing counters, so
    only what survives canonicalization unchanged takes part.
    """
    stack = tuple((e.path, e.key.partition("@")[2]) for e in m.nn_module_stack or ())
    sfs = tuple(s.target for s in m.source_fn_stack or ())
    return (stack, m.custom, sfs, m.torch_fn.target if m.torch_fn is not None else None)


def _structural_hashes(idx: GraphIndex, subgraph_key: Callable) -> list[bytes]:
    """Per node: hash of what it computes (upstream) combined with how it is used (downstream)."""
    nodes = idx.graph.nodes
    n = len(nodes)
    up: list[bytes | None] = [None] * n
    ctx = _HashCtx(idx, up, subgraph_key)
    for i in idx.topo:
        up[i] = _digest((node_key(nodes[i], ctx), meta_key(nodes[i].metadata)))
    uses: list[list[tuple]] = [[] for _ in range(n)]
    for pos, name in enumerate(idx.output_refs):
        p = idx.producer[name]
        if p >= 0:
            uses[p].append((b"out", pos, idx.leaf_index[name]))
    down: list[bytes] = [b""] * n
    for i in reversed(idx.topo):
        down[i] = _digest((up[i], sorted(uses[i])))
        for pos, name in enumerate(idx.refs[i]):
            p = idx.producer[name]
            if p >= 0:
                uses[p].append((down[i], pos, idx.leaf_index[name]))
    return down


def _demand_order(idx: GraphIndex) -> list[int]:
    """Post-order DFS from the outputs over data edges, inputs in argument order (iterative: graphs
    can be deep). Nodes reached only through order-only edges are side nodes."""
    state = bytearray(len(idx.preds))  # 0 new, 1 on stack, 2 done
    data_preds = idx.data_preds
    out: list[int] = []
    for name in idx.output_refs:
        root = idx.producer[name]
        if root < 0 or state[root]:
            continue
        state[root] = 1
        stack = [(root, iter(data_preds[root]))]  # (node, its inputs not yet looked at)
        while stack:
            i, preds = stack[-1]
            for p in preds:
                if not state[p]:
                    state[p] = 1
                    stack.append((p, iter(data_preds[p])))
                    break
            else:
                stack.pop()
                state[i] = 2
                out.append(i)
    return out


def _frames(idx: GraphIndex, stacks: Sequence[tuple[str, ...] | None]) -> list[tuple[str, ...]]:
    """Module-call frame of every node; nodes without a stack join their users' common frame."""
    n = len(stacks)
    frame: list[tuple[str, ...] | None] = list(stacks)
    for i in reversed(idx.topo):
        if frame[i] is not None:
            continue
        users = [frame[s] for s in idx.succs[i] if frame[s] is not None]
        if users:
            frame[i] = _common_prefix(users)
    for i in idx.topo:  # side nodes without users follow their producers' common frame
        if frame[i] is None:
            prods = [frame[p] for p in idx.preds[i] if frame[p] is not None]
            frame[i] = _common_prefix(prods) if prods else ()
    return [f if f is not None else () for f in frame][:n]


def _common_prefix(paths: list) -> tuple[str, ...]:
    common = paths[0]
    for u in paths[1:]:
        k = 0
        while k < len(common) and k < len(u) and common[k] == u[k]:
            k += 1
        common = common[:k]
    return common


def canonical_order(idx: GraphIndex, stacks: Sequence[tuple[str, ...] | None],
                    subgraph_key: Callable[[schema.GraphArgument], Any]) -> list[int]:
    """Canonical order of ``idx``'s nodes (indices into the stored node list).

    Args:
        idx: def-use tables of the graph.
        stacks: per node, its module-call frame (``nn_module_stack`` keys, outermost first), or
            None when unknown.
        subgraph_key: name-free key of a subgraph argument (for tie-breaking side nodes).
    """
    n = len(idx.preds)
    demand = _demand_order(idx)
    if len(demand) == n and _one_frame(stacks) and _respects(idx.preds, demand):
        # Every node is demand-ordered, all in one module frame, and the demand order is a
        # schedule (no order-only edge points backwards in it): the scheduler would emit it as it
        # is, since the unit of least rank left is then always ready.
        return demand
    prio: list[tuple] = [()] * n
    for rank, i in enumerate(demand):
        prio[i] = (1, rank)
    if len(demand) < n:
        hashes = _structural_hashes(idx, subgraph_key)
        for i in range(n):
            if not prio[i]:
                prio[i] = (0, hashes[i])
    s = _Scheduler(idx, _frames(idx, stacks), prio)
    s.schedule(list(range(n)), 0)
    return s.out


def _one_frame(stacks: Sequence[tuple[str, ...] | None]) -> bool:
    """Every node runs in one known module frame (nodes of one module share one tuple)."""
    if not stacks or stacks[0] is None:
        return False
    first = stacks[0]
    return all(s is first or s == first for s in stacks)


def _respects(preds: list[list[int]], order: list[int]) -> bool:
    """``order`` puts every node after all of its predecessors."""
    rank = [0] * len(preds)
    for r, i in enumerate(order):
        rank[i] = r
    return all(rank[p] < r for r, i in enumerate(order) for p in preds[i])


class _Scheduler:
    """Kahn's algorithm over blocks (module-call frames) and nodes, recursively.

    A ready block or node is keyed by its static priority, then by the canonical positions of the
    values it consumes from outside itself (known once it is ready): two side nodes with equal
    hashes but different inputs are told apart by which value came first.
    """

    def __init__(self, idx: GraphIndex, frames: list[tuple[str, ...]], prio: list[tuple]) -> None:
        self.idx, self.frames, self.prio = idx, frames, prio
        self.rank = [-1] * len(prio)
        self.out: list[int] = []

    def _emit(self, i: int) -> None:
        self.rank[i] = len(self.out)
        self.out.append(i)

    def _input_ranks(self, members: list[int], inside: set[int] | None) -> tuple:
        idx, rank = self.idx, self.rank
        ranks = []
        for i in members:
            for r in idx.refs[i]:
                p = idx.producer[r]
                if p < 0:
                    ranks.append((-1, -p - 1, 0))
                elif inside is None or p not in inside:
                    ranks.append((0, rank[p], idx.leaf_index[r]))
        return tuple(ranks) if inside is None else tuple(sorted(ranks))

    def schedule(self, items: list[int], depth: int) -> None:
        """Emit ``items`` (all inside one frame at ``depth``), child frames as contiguous blocks."""
        frames = self.frames
        if len(items) > 1 and all(len(frames[i]) > depth for i in items) and \
                len({frames[i][depth] for i in items}) == 1:
            self.schedule(items, depth + 1)  # everything is in one child frame
            return
        if all(len(frames[i]) <= depth for i in items):
            self._schedule_nodes(items)  # no child frame here: every unit is one node
            return
        units, unit_of, succ, indeg = self._units(items, depth, flat=False)
        # Units of one node each link as their nodes do, and the graph is acyclic (GraphIndex checked).
        if len(units) != len(items) and not _acyclic(succ, indeg):
            # Blocks that need each other's values: only possible when the stored order already
            # interleaved these frames. Schedule node by node instead.
            units, unit_of, succ, indeg = self._units(items, depth, flat=True)
            frames = self.frames
        m = len(units)
        prio = self.prio
        uprio = [prio[members[0]] if len(members) == 1 else min(prio[i] for i in members) for members in units]
        is_block = [len(members) > 1 or len(frames[members[0]]) > depth for members in units]
        # A unit whose priority no other unit has is ordered by it alone: the ranks of its inputs,
        # which break ties, need not be computed (demand-ordered nodes all have their own).
        tied = {p for p, c in Counter(uprio).items() if c > 1}

        def key(u: int) -> tuple:
            if uprio[u] not in tied:
                return (uprio[u], (), u)
            inside = set(units[u]) if is_block[u] else None
            return (uprio[u], self._input_ranks(units[u], inside), u)

        heap = [key(u) for u in range(m) if indeg[u] == 0]
        heapq.heapify(heap)
        while heap:
            u = heapq.heappop(heap)[-1]
            if is_block[u]:
                self.schedule(units[u], depth + 1)
            else:
                self._emit(units[u][0])
            for v in succ[u]:
                indeg[v] -= 1
                if indeg[v] == 0:
                    heapq.heappush(heap, key(v))

    def _schedule_nodes(self, items: list[int]) -> None:
        """``schedule`` of plain nodes (no child frames): Kahn's algorithm over the nodes, each keyed
        as its one-node unit would be (unit number = position in ``items``)."""
        pos = {i: u for u, i in enumerate(items)}
        prio, preds = self.prio, self.idx.preds
        m = len(items)
        indeg = [0] * m
        succ: list[list[int]] = [[] for _ in range(m)]
        for u, i in enumerate(items):
            ps = preds[i]
            for p in (set(ps) if len(ps) > 1 else ps):  # a value read twice is one edge
                up = pos.get(p)
                if up is not None and up != u:
                    succ[up].append(u)
                    indeg[u] += 1
        # (as in schedule: a priority no other node has decides alone, without the input ranks)
        tied = {p for p, c in Counter(prio[i] for i in items).items() if c > 1}

        def key(u: int) -> tuple:
            i = items[u]
            pr = prio[i]
            return (pr, self._input_ranks([i], None) if pr in tied else (), u)

        heap = [key(u) for u in range(m) if indeg[u] == 0]
        heapq.heapify(heap)
        while heap:
            u = heapq.heappop(heap)[-1]
            self._emit(items[u])
            for v in succ[u]:
                indeg[v] -= 1
                if indeg[v] == 0:
                    heapq.heappush(heap, key(v))

    def _units(self, items: list[int], depth: int, flat: bool):
        """Group ``items`` into units (a node, or a child frame's nodes) and link them."""
        frames = self.frames
        unit_of: dict[int, int] = {}
        units: list[list[int]] = []
        child_unit: dict[str, int] = {}
        for i in items:
            f = frames[i]
            if not flat and len(f) > depth:
                u = child_unit.get(f[depth])
                if u is None:
                    u = child_unit[f[depth]] = len(units)
                    units.append([])
            else:
                u = len(units)
                units.append([])
            units[u].append(i)
            unit_of[i] = u
        m = len(units)
        indeg = [0] * m
        succ: list[set[int]] = [set() for _ in range(m)]
        for i in items:
            ui = unit_of[i]
            for p in self.idx.preds[i]:
                up = unit_of.get(p)
                if up is not None and up != ui and ui not in succ[up]:
                    succ[up].add(ui)
                    indeg[ui] += 1
        if flat:
            self.frames = [f[:depth] if j in unit_of else f for j, f in enumerate(frames)]
        return units, unit_of, succ, indeg


def _acyclic(succ: list[set[int]], indeg: list[int]) -> bool:
    deg = list(indeg)
    stack = [u for u in range(len(deg)) if deg[u] == 0]
    seen = 0
    while stack:
        u = stack.pop()
        seen += 1
        for v in succ[u]:
            deg[v] -= 1
            if deg[v] == 0:
                stack.append(v)
    return seen == len(deg)
