"""Overviews of a big program for people: ``pt2serde show --summary`` and ``--module PATH``.

Nothing here imports torch: both read the decoded schema Structs only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping

from serde.core import schema
from serde.core.expr import ranges_by_text
from serde.core.walk import EMPTY_STACK_KEY

from .render import (
    INDENT,
    GraphView,
    member,
    range_line,
    render_tensor_meta,
    subgraph_lines,
    subgraphs,
)

__all__ = ["summary_lines", "module_lines", "module_paths"]

TOP_OPS = 25


def _all_nodes(g: schema.Graph) -> Iterator[schema.Node]:
    for node in g.nodes:
        yield node
        for sub in subgraphs(node):
            yield from _all_nodes(sub.graph)


def _numel(sizes: list[int]) -> int:
    n = 1
    for s in sizes:
        n *= s
    return n


def summary_lines(program: schema.ExportedProgram, weights: schema.Weights | None,
                  extra_files: Mapping[str, bytes] | None = None) -> list[str]:
    """Counts, op histogram, weights by kind, dynamic dimensions and extra files."""
    gm = program.graph_module
    g = gm.graph
    nodes = list(_all_nodes(g))
    v = program.schema_version
    out = [f"# pt2serde program summary: schema {v.major}.{v.minor}, torch {program.torch_version}",
           f"nodes: {len(nodes)} ({len(g.nodes)} in the top graph, "
           f"{len(nodes) - len(g.nodes)} in subgraphs)"]
    ops = Counter(n.target for n in nodes)
    out.append(f"ops: {len(ops)} distinct")
    for target, count in sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_OPS]:
        out.append(f"{INDENT}{count:>6}  {target}")
    if len(ops) > TOP_OPS:
        out.append(f"{INDENT}   ...  {len(ops) - TOP_OPS} more ops")
    if weights is not None:
        out += _weight_lines(gm.signature, weights)
    out += _dynamic_lines(program)
    if extra_files:
        out.append("extra files: " + ", ".join(f"{k} ({len(b)} bytes)" for k, b in sorted(extra_files.items())))
    return out


def _weight_lines(sig: schema.GraphSignature, weights: schema.Weights) -> list[str]:
    kinds: dict[str, list[str]] = {"parameters": [], "buffers": [], "constants": []}
    for spec in sig.input_specs:
        kind, value = member(spec)
        if kind == "parameter":
            kinds["parameters"].append(value.parameter_name)
        elif kind == "buffer" and value.buffer_name in weights.state_dict:
            kinds["buffers"].append(value.buffer_name)
    kinds["constants"] = sorted(weights.constants)
    out = []
    for kind, names in kinds.items():
        table = weights.constants if kind == "constants" else weights.state_dict
        tensors = [table[n] for n in names if n in table]
        if not tensors:
            continue
        storages = {t.storage for t in tensors}
        nbytes = sum(weights.storages[s].nbytes for s in storages if 0 <= s < len(weights.storages))
        out.append(f"{kind}: {len(tensors)} tensors, {sum(_numel(t.sizes) for t in tensors):,} elements, "
                   f"{nbytes:,} bytes in {len(storages)} storages")
    return out


def _dynamic_lines(program: schema.ExportedProgram) -> list[str]:
    g = program.graph_module.graph
    out = []
    for spec in program.graph_module.signature.input_specs:
        kind, value = member(spec)
        if kind != "user_input":
            continue
        arg_kind, arg = member(value.arg)
        if arg_kind != "as_tensor" or arg.name not in g.tensor_values:
            continue
        meta = g.tensor_values[arg.name]
        if any(member(s)[0] == "as_expr" for s in meta.sizes):
            out.append(f"{INDENT}{arg.name}: {render_tensor_meta(meta)}")
    if not out:
        return ["dynamic dims: none (every input shape is static)"]
    ranges = ranges_by_text(program.range_constraints)
    return (["dynamic dims:", *out]
            + [INDENT + "range " + range_line(k, r) for k, r in sorted(ranges.items())])


def _path(node: schema.Node) -> str:
    stack = node.metadata.nn_module_stack
    if not stack or stack[-1].key == EMPTY_STACK_KEY:
        return ""
    return stack[-1].path


def module_paths(program: schema.ExportedProgram) -> list[str]:
    """Every module path some node of the top graph runs in, sorted."""
    return sorted({p for n in program.graph_module.graph.nodes if (p := _path(n))})


def module_lines(program: schema.ExportedProgram, path: str) -> list[str] | None:
    """The node lines of the top graph that run in module ``path`` or below it; None if none do."""
    g = program.graph_module.graph
    view = GraphView(g)
    prefix = path + "."
    out = []
    for node in g.nodes:
        p = _path(node)
        if p == path or p.startswith(prefix):
            out.append(INDENT + view.node_line(node))
            for sub in subgraphs(node):
                out += subgraph_lines(sub, INDENT * 2)
    if not out:
        return None
    return [f"# module {path}: {len(out)} lines", *out]
