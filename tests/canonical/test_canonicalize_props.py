"""Property: any valid topological reordering plus any consistent renaming of nodes
and symbols gives identical canonical bytes; canonicalizing is idempotent."""

from __future__ import annotations

import dataclasses
import os
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from canonical.canonicalize import canonicalize
from canonical.order import GraphIndex, canonical_order
from serde.bridge.effects import op_facts
from serde.core import wire
from tests.canonical._builders import InputSpecDesc, NodeSpec, Prog, effect_deps, render

EXAMPLES = 400 if os.environ.get("HYPOTHESIS_PROFILE") == "thorough" else 60
SETTINGS = settings(max_examples=EXAMPLES, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

UNARY = ["torch.ops.aten.relu.default", "torch.ops.aten.sigmoid.default", "torch.ops.aten.neg.default"]
BINARY = ["torch.ops.aten.add.Tensor", "torch.ops.aten.mul.Tensor", "torch.ops.aten.sub.Tensor"]
FRAMES = [None, [("L__self__", "")], [("L__self__", ""), ("L__self__a", "a")],
          [("L__self__", ""), ("L__self__b", "b")], [("L__self__", ""), ("L__self__a", "a"), ("L__self__a.c", "a.c")]]


@st.composite
def _branches(draw, shape: list) -> Prog:
    """A cond branch: a short chain of unary ops on its one input."""
    nodes = []
    for k in range(draw(st.integers(1, 3))):
        src = ("in", 0) if k == 0 else ("n", k - 1)
        nodes.append(NodeSpec(draw(st.sampled_from(UNARY)), [src], shape=shape))
    if draw(st.booleans()):  # an independent second chain joined at the end
        nodes.append(NodeSpec(draw(st.sampled_from(UNARY)), [("in", 0)], shape=shape))
        nodes.append(NodeSpec(BINARY[0], [("n", len(nodes) - 2), ("n", len(nodes) - 1)], shape=shape))
    return Prog([InputSpecDesc("user", "a", shape)], nodes, [("n", len(nodes) - 1)])


@st.composite
def programs(draw) -> Prog:
    n_in = draw(st.integers(1, 3))
    inputs = [InputSpecDesc("user", f"x{k}", [f"{{s{k}}}", 4]) for k in range(n_in)]
    if draw(st.booleans()):
        inputs.append(InputSpecDesc("param", "lin.weight", [4]))
    if draw(st.booleans()):
        inputs.append(InputSpecDesc("buffer", "cache", [4]))
    ranges = {f"{{s{k}}}": (draw(st.integers(0, 3)), draw(st.sampled_from([None, 64, 128]))) for k in range(n_in)}
    nodes: list[NodeSpec] = []
    tensors: list[tuple] = [("in", k) for k in range(len(inputs))]
    shapes: dict[tuple, list] = {("in", k): d.shape for k, d in enumerate(inputs)}
    syms: list[tuple] = []
    sym_exprs: dict[tuple, str] = {}
    n_unbacked = 0
    # Storage: every tensor's root (a fresh node, or ("in",) for every input: inputs may alias each
    # other at run time); views and in-place results share it.
    root: dict[tuple, tuple] = {t: ("in",) for t in tensors}
    written: set[tuple] = set()
    effects: list[int] = []
    for _ in range(draw(st.integers(1, 24))):
        kind = draw(st.sampled_from(["unary", "binary", "binary", "const", "split", "symsize", "symmul",
                                     "assert", "nonzero", "full", "cond", "write", "write", "view_write",
                                     "foreach", "rand", "bernoulli"]))
        frame = draw(st.sampled_from(FRAMES))
        i = len(nodes)
        # Output metas follow from the arguments, as they do for every deterministic op.
        if kind == "unary":
            a = draw(st.sampled_from(tensors))
            nodes.append(NodeSpec(draw(st.sampled_from(UNARY)), [a], module=frame, shape=shapes[a]))
        elif kind == "binary":
            a, b = draw(st.sampled_from(tensors)), draw(st.sampled_from(tensors))
            nodes.append(NodeSpec(draw(st.sampled_from(BINARY)), [a, b], module=frame, shape=shapes[a]))
        elif kind == "const":
            a = draw(st.sampled_from(tensors))
            nodes.append(NodeSpec(draw(st.sampled_from(BINARY)),
                                  [a, ("f", draw(st.sampled_from([1.0, 2.0, 0.5])))], module=frame, shape=shapes[a]))
        elif kind == "full":
            nodes.append(NodeSpec("torch.ops.aten.full.default",
                                  [("ints", [4]), ("f", draw(st.sampled_from([0.0, 1.0])))], module=frame))
        elif kind == "split":
            a = draw(st.sampled_from(tensors))
            nodes.append(NodeSpec("torch.ops.aten.split.Tensor", [a, ("i", 2)],
                                  out="list:2", shape=[2, 4], module=frame, names=["self", "split_size"]))
            tensors += [("n", i, 0), ("n", i, 1)]
            root[("n", i, 0)] = root[("n", i, 1)] = root[a]  # split returns views
            shapes[("n", i, 0)] = shapes[("n", i, 1)] = [2, 4]
            continue
        elif kind == "symsize":
            k = draw(st.integers(0, n_in - 1))
            # the value is a function of the arguments, as for every deterministic op
            nodes.append(NodeSpec("torch.ops.aten.sym_size.int", [("in", k), ("i", 0)], out="symint",
                                  sym_expr=f"{{s{k}}}", module=frame))
            syms.append(("n", i))
            sym_exprs[("n", i)] = f"{{s{k}}}"
            continue
        elif kind == "symmul":
            if not syms:
                continue
            src = draw(st.sampled_from(syms))
            c = draw(st.integers(2, 3))
            nodes.append(NodeSpec("_operator.mul", [("sym", src), ("i", c)], out="symint",
                                  sym_expr=f"{c}*{sym_exprs[src]}", module=frame))
            syms.append(("n", i))
            sym_exprs[("n", i)] = f"({c}*{sym_exprs[src]})"
            continue
        elif kind == "assert":
            if not syms:
                continue
            nodes.append(NodeSpec("torch.ops.aten._assert_scalar.default",
                                  [("sym", draw(st.sampled_from(syms))), ("str", "check")], out="none", module=frame))
            continue
        elif kind == "cond":
            a = draw(st.sampled_from(tensors))
            branches = [draw(_branches(shapes[a])) for _ in range(2)]
            nodes.append(NodeSpec("torch.ops.higher_order.cond",
                                  [("b", draw(st.booleans())), ("g", branches[0]), ("g", branches[1]), ("ts", [a])],
                                  module=frame, shape=shapes[a]))
        elif kind in ("write", "view_write"):
            a, b = draw(st.sampled_from(tensors)), draw(st.sampled_from(tensors))
            if kind == "view_write":
                nodes.append(NodeSpec("torch.ops.aten.slice.Tensor", [a, ("i", 0), ("i", 0), ("i", 2)],
                                      names=["self", "dim", "start", "end"], module=frame, shape=[2, 4]))
                root[("n", i)] = root[a]
                a, i = ("n", i), i + 1
            if draw(st.booleans()):
                nodes.append(NodeSpec("torch.ops.aten.add_.Tensor", [a, b], names=["self", "other"],
                                      module=frame, shape=shapes.get(a, [2, 4])))
            else:
                nodes.append(NodeSpec("torch.ops.aten.mul_.Tensor", [a, ("f", 2.0)], names=["self", "other"],
                                      module=frame, shape=shapes.get(a, [2, 4])))
            root[("n", i)] = root[a]
            written.add(root[a])
            nodes[-1].writes = (root[a],)
            effects.append(i)
        elif kind == "foreach":
            ts = draw(st.lists(st.sampled_from(tensors), min_size=1, max_size=3))
            nodes.append(NodeSpec("torch.ops.aten._foreach_add_.Scalar", [("ts", ts), ("f", 1.0)],
                                  names=["self", "scalar"], out="none", module=frame))
            written.update(root[t] for t in ts)
            nodes[-1].writes = tuple(sorted({root[t] for t in ts}))
            effects.append(i)
            continue
        elif kind == "rand":
            nodes.append(NodeSpec("torch.ops.aten.rand.default", [("ints", [4])], names=["size"], module=frame))
            effects.append(i)
        elif kind == "bernoulli":
            nodes.append(NodeSpec("torch.ops.aten.bernoulli.default", [draw(st.sampled_from(tensors))],
                                  names=["self"], module=frame))
            effects.append(i)
        else:  # nonzero: introduces a fresh unbacked symbol
            nodes.append(NodeSpec("torch.ops.aten.nonzero.default", [draw(st.sampled_from(tensors))],
                                  shape=[f"{{u{n_unbacked}}}", 2], module=frame))
            ranges[f"{{u{n_unbacked}}}"] = (0, None)
            n_unbacked += 1
        tensors.append(("n", i))
        shapes[("n", i)] = nodes[-1].shape
        root.setdefault(("n", i), ("n", i))
    _mark_effects(nodes, root, written, effects)
    produced = [t for t in tensors if t[0] == "n"] or tensors
    outputs = draw(st.lists(st.sampled_from(produced), min_size=1, max_size=3))
    if syms and draw(st.booleans()):
        outputs.append(("sym", syms[0]))
    return Prog(inputs, nodes, outputs, ranges)


def _mark_effects(nodes: list[NodeSpec], root: dict, written: set, effects: list[int]) -> None:
    """Record what the generated order says about effects (see _builders.effect_deps)."""
    for i, n in enumerate(nodes):
        touched = {root[r] for a in n.args for r in _arg_refs(a)}
        n.reads = tuple(sorted(touched & written))
        n.effect = i in effects
        n.check = n.target == "torch.ops.aten._assert_scalar.default"


def _arg_refs(a: tuple) -> list[tuple]:
    return [a] if a[0] in ("in", "n") else list(a[1]) if a[0] == "ts" else []


def _perturb(p: Prog, rng: random.Random) -> bytes:
    names: dict[str, str] = {}
    taken: set[str] = {d.name for d in p.inputs if d.kind == "user"}

    def namer(s: str) -> str:
        if s in taken and s not in names and s.startswith("x"):
            return s  # user input names are API: they stay
        if s not in names:
            while True:
                cand = rng.choice(["t", "v", "add", "relu", "mul_", "n"]) + str(rng.randrange(10**5))
                if cand not in taken:
                    break
            taken.add(cand)
            names[s] = cand
        return names[s]
    news = rng.sample(range(100, 999), 8)
    syms = {f"s{k}": f"s{news[k]}" for k in range(4)} | {f"u{k}": f"u{news[4 + k]}" for k in range(4)}
    return wire.encode(canonicalize(render(p, rng=rng, namer=namer, syms=syms), facts=op_facts)[0])


@SETTINGS
@given(programs(), st.randoms(use_true_random=False), st.randoms(use_true_random=False))
def test_reordering_and_renaming_never_change_the_bytes(p, rng1, rng2):
    assert _perturb(p, rng1) == _perturb(p, rng2)


@SETTINGS
@given(programs(), st.randoms(use_true_random=False))
def test_idempotent_on_random_programs(p, rng):
    once, _ = canonicalize(render(p, rng=rng), facts=op_facts)
    assert wire.encode(canonicalize(once, facts=op_facts)[0]) == wire.encode(once)


@SETTINGS
@given(programs(), st.randoms(use_true_random=False))
def test_canonical_order_keeps_every_effect_where_the_program_has_it(p, rng):
    """Byte stability alone would also hold for an order that ignores effects: check the order too."""
    marked = Prog(p.inputs, [dataclasses.replace(n, stack_trace=f"#{i}") for i, n in enumerate(p.nodes)],
                  p.outputs, p.ranges)
    c, debug = canonicalize(render(marked, rng=rng), facts=op_facts, keep_debug=True)
    position = {int(debug.nodes[n.name].stack_trace[1:]): k for k, n in enumerate(c.graph_module.graph.nodes)}
    for i, deps in enumerate(effect_deps(p.nodes)):
        for j in deps:
            assert position[j] < position[i], (p.nodes[j].target, p.nodes[i].target)


@SETTINGS
@given(programs(), st.randoms(use_true_random=False))
def test_order_of_one_frame_is_the_schedulers(p, rng):
    """A graph in one module frame is ordered without the scheduler when its demand order is a
    schedule: the result must be the scheduler's, which a graph without frames always runs
    (its nodes then all join the root frame)."""
    g = render(p, rng=rng).graph_module.graph
    idx = GraphIndex(g, "graph", [op_facts(n.target, "") for n in g.nodes])
    one_frame = canonical_order(idx, [("L__self__",)] * len(g.nodes), lambda ga: ga.name)
    assert one_frame == canonical_order(idx, [None] * len(g.nodes), lambda ga: ga.name)


def test_order_of_one_frame_keeps_a_read_before_the_write_the_outputs_list_first():
    """The outputs reach the write before the read, so the demand order puts the read after the
    write it must precede: not a schedule, and the scheduler orders the nodes."""
    x = [InputSpecDesc("user", "x")]
    nodes = [NodeSpec(UNARY[0], [("in", 0)], module=FRAMES[1]),
             NodeSpec("torch.ops.aten.mul_.Tensor", [("in", 0), ("f", 2.0)], names=["self", "other"],
                      module=FRAMES[1])]
    g = render(Prog(x, nodes, [("n", 1), ("n", 0)])).graph_module.graph
    idx = GraphIndex(g, "graph", [op_facts(n.target, "") for n in g.nodes])
    assert canonical_order(idx, [("L__self__",)] * 2, lambda ga: ga.name) == [0, 1]


@SETTINGS
@given(programs(), st.randoms(use_true_random=False))
def test_graph_index_successors_and_topological_order(p, rng):
    """``succs`` and ``topo`` are built on first use, whatever the stored order."""
    g = render(p, rng=rng).graph_module.graph
    idx = GraphIndex(g, "graph", [op_facts(n.target, "") for n in g.nodes])
    assert sorted((p_, i) for i, ps in enumerate(idx.preds) for p_ in ps) == sorted(
        (p_, i) for p_, ss in enumerate(idx.succs) for i in ss)
    assert sorted(idx.topo) == list(range(len(g.nodes)))
    rank = {i: r for r, i in enumerate(idx.topo)}
    assert all(rank[p_] < rank[i] for i, ps in enumerate(idx.preds) for p_ in ps)
