"""A picture of a program: ``pt2serde view FILE -o graph.html`` and ``pt2serde diff --html``.

The page is one self-contained HTML file (inline SVG, a little inline script for search; nothing
fetched from the network). The layout is computed here, not in the browser, so a 5,000-node
program opens at once:

* one row per node in canonical order (a topological order that keeps every module call
  contiguous), graph inputs first and the return last;
* nested boxes for module calls (``nn_module_stack``), labelled with the module path;
* edges drawn as arcs in a gutter on the left, from the node that defines a value to each node
  that uses it, labelled once with the value's shape (hover an edge for its full type);
* nodes coloured by the kind of op (matrix products, elementwise, normalization, views and
  shape ops, reductions, control flow, symbolic sizes, in-place writes, other), with a legend;
* subgraphs of higher-order ops drawn the same way below the main graph.

Nothing here imports torch.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from serde.core import schema
from serde.core.walk import EMPTY_STACK_KEY, argument_names, output_leaves

from .render import GraphView, member, subgraphs

__all__ = ["KINDS", "op_kind", "graph_svg", "program_page", "diff_page"]

ROW_H = 24
BOX_H = 18
GUTTER = 240
INDENT = 12
WIDTH = 1180
RIGHT = 230  # column right of the nodes: module paths where a module call starts, subgraph links
CHAR_W = 6.7  # width of one 11px monospace character; node text is cut to fit, the tooltip has it all
LABEL_MIN_SPAN = 4  # edges spanning fewer rows stay unlabelled: their ends are in view together

# kind -> (fill colour, what it covers); checked in this order against the op name.
KINDS: dict[str, tuple[str, str]] = {
    "control": ("#f4cccc", "higher-order ops: cond, while_loop, map, scan, ..."),
    "inplace": ("#ea9999", "ops that write an argument in place (name ends in _)"),
    "matmul": ("#9fc5e8", "matrix products and convolutions"),
    "norm": ("#b4a7d6", "normalization"),
    "reduce": ("#ffe599", "reductions and softmax"),
    "view": ("#d9d9d9", "views, reshapes, indexing, concatenation"),
    "symbolic": ("#d9ead3", "symbolic size arithmetic"),
    "elementwise": ("#b6d7a8", "elementwise math and activations"),
    "other": ("#fce5cd", "everything else"),
}

_KIND_PATTERNS = [
    ("control", re.compile(r"^torch\.ops\.higher_order\.")),
    ("symbolic", re.compile(r"^(_operator\.|operator\.|math\.|torch\.sym_|torch\.ops\.aten\.sym_(size|stride|numel|storage_offset))")),
    ("matmul", re.compile(r"\.(linear|mm|bmm|addmm|baddbmm|matmul|conv\w*|_convolution|einsum|"
                          r"scaled_dot_product_attention|_scaled_dot_product\w*|addmv|mv|dot)\.")),
    ("norm", re.compile(r"\.(\w*_norm|native_\w*_norm\w*|_native_batch_norm\w*|batch_norm\w*|rms_norm)\.")),
    ("reduce", re.compile(r"\.(sum|mean|amax|amin|max|min|argmax|argmin|prod|var|std|var_mean|"
                          r"softmax|_softmax|log_softmax|_log_softmax|logsumexp|cumsum|cumprod|any|all|norm)\.")),
    ("view", re.compile(r"\.(view|_unsafe_view|reshape|transpose|permute|expand|slice|select|split\w*|"
                        r"unsqueeze|squeeze|cat|stack|chunk|unbind|flatten|unflatten|t|contiguous|clone|"
                        r"alias|as_strided|narrow|index_select|gather|index|getitem|repeat|"
                        r"_to_copy|to|type_as|detach|lift_fresh_copy)\.")),
]


def op_kind(target: str) -> str:
    """The colour class of an operator (a key of :data:`KINDS`)."""
    if target.startswith("torch.ops.") and target.split(".")[-2].endswith("_") and \
            not target.split(".")[-2].startswith("_"):
        return "inplace"
    for kind, pattern in _KIND_PATTERNS:
        if pattern.search(target):
            return kind
    if target.startswith("torch.ops."):
        return "elementwise"
    return "other"


@dataclass
class _Row:
    """One drawn row: a graph input, a node or the return."""

    name: str               # the anchor id and search key
    text: str               # what the row says
    kind: str               # colour class, or "input" / "output"
    stack: tuple[tuple[str, str], ...] = ()   # (key, path) of module calls, outermost first
    defines: list[str] = field(default_factory=list)
    uses: list[str] = field(default_factory=list)
    mark: str = ""          # "", "added", "changed", "renamed", "removed"
    subgraph_links: list[str] = field(default_factory=list)


def _stack_of(node: schema.Node) -> tuple[tuple[str, str], ...]:
    stack = node.metadata.nn_module_stack or []
    return tuple((e.key, e.path) for e in stack if e.key != EMPTY_STACK_KEY and e.path)


def _rows(graph: schema.Graph, prefix: str, hidden_inputs: frozenset[str] = frozenset()) -> list[_Row]:
    view = GraphView(graph)
    rows = []
    for a in graph.inputs:
        names = list(argument_names(a))
        if names and all(n in hidden_inputs for n in names):
            continue
        label = ", ".join(f"{n}: {view.type_of(n)}" for n in names) or view.arg(a)
        rows.append(_Row(name=f"{prefix}{names[0] if names else 'input'}", text=f"input {label}",
                         kind="input", defines=names))
    for node in graph.nodes:
        subs = [f"{prefix}{node.name}.{s.name}" for s in subgraphs(node)]
        rows.append(_Row(
            name=f"{prefix}{node.name}", text=view.node_line(node), kind=op_kind(node.target),
            stack=_stack_of(node), defines=[name for _, _, name in output_leaves(node.outputs)],
            uses=[n for na in node.inputs for n in argument_names(na.arg)], subgraph_links=subs))
    rows.append(_Row(name=f"{prefix}return", text=view.returns(), kind="output",
                     uses=[n for o in graph.outputs for n in argument_names(o)]))
    return rows


def _esc(s: str) -> str:
    return html.escape(s, quote=True)


def _short(s: str, width: float) -> str:
    """``s`` cut to what fits ``width`` pixels of 11px monospace (the full text is in the tooltip)."""
    chars = max(8, int((width - 8) / CHAR_W))
    return s if len(s) <= chars else s[:chars - 1] + "…"


def graph_svg(rows: list[_Row], types: dict[str, str], gaps: dict[int, int] | None = None) -> str:
    """The SVG of ``rows``; ``gaps[i]`` = number of hidden rows drawn as a gap before row ``i``."""
    gaps = gaps or {}
    y_of: list[float] = []
    y = 8.0
    for i in range(len(rows)):
        if gaps.get(i):
            y += ROW_H
        y_of.append(y)
        y += ROW_H
    height = y + 8
    out: list[str] = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height:.0f}" '
                      f'viewBox="0 0 {WIDTH} {height:.0f}" font-family="monospace" font-size="11">']
    out += _module_boxes(rows, y_of)
    out += _edges(rows, y_of, types)
    for i, row in enumerate(rows):
        if gaps.get(i):
            out.append(f'<text x="{GUTTER + 8}" y="{y_of[i] - ROW_H / 2 + 4:.0f}" fill="#666">'
                       f'⋯ {gaps[i]} unchanged node{"s" if gaps[i] != 1 else ""} ⋯</text>')
        starts = row.stack and (i == 0 or rows[i - 1].stack[:len(row.stack)] != row.stack)
        out.append(_node(row, y_of[i], row.stack[-1][1] if starts else ""))
    out.append("</svg>")
    return "\n".join(out)


def _x_of(row: _Row) -> float:
    return GUTTER + INDENT * len(row.stack)


def _node(row: _Row, y: float, module_label: str) -> str:
    x = _x_of(row)
    fill = {"input": "#ffffff", "output": "#ffffff"}.get(row.kind) or KINDS[row.kind][0]
    stroke = {"added": "#38761d", "changed": "#e69138", "removed": "#cc0000",
              "renamed": "#f9cb9c"}.get(row.mark, "#888")
    width = 3 if row.mark else 1
    right = WIDTH - RIGHT + 6
    links = "".join(f'<a href="#{_esc(s)}"><text x="{right}" y="{y + 13 + 12 * k:.0f}" fill="#00e">'
                    f'→ {_esc(s.rsplit(".", 1)[-1])}</text></a>' for k, s in enumerate(row.subgraph_links))
    label = (f'<text x="{right}" y="{y + 13:.0f}" fill="#557" font-size="10">{_esc(module_label)}</text>'
             if module_label and not links else "")
    mark = f"{row.mark}: " if row.mark else ""
    return (f'<g class="node" id="{_esc(row.name)}" data-name="{_esc(row.name.lower())}">'
            f'<title>{_esc(mark + row.text)}</title>'
            f'<rect x="{x:.0f}" y="{y:.0f}" width="{WIDTH - RIGHT - x:.0f}" height="{BOX_H}" rx="3" '
            f'fill="{fill}" stroke="{stroke}" stroke-width="{width}"/>'
            f'<text x="{x + 4:.0f}" y="{y + 13:.0f}">{_esc(_short(mark + row.text, WIDTH - RIGHT - x))}</text>'
            f'{label}{links}</g>')


def _module_boxes(rows: list[_Row], y_of: list[float]) -> list[str]:
    """Nested boxes around the rows of each module call (rows of one call are contiguous)."""
    out = []
    depth = max((len(r.stack) for r in rows), default=0)
    for d in range(depth):
        start = None
        for i in range(len(rows) + 1):
            cur = rows[i].stack[d] if i < len(rows) and len(rows[i].stack) > d else None
            prev = rows[start].stack[d] if start is not None else None
            if cur != prev:
                if prev is not None:
                    x = GUTTER + INDENT * d - 3
                    y0, y1 = y_of[start] - 3, y_of[i - 1] + BOX_H + 3
                    shade = 250 - 8 * (d % 4)
                    out.append(f'<g class="module"><title>{_esc(prev[1])}</title>'
                               f'<rect x="{x}" y="{y0:.0f}" width="{WIDTH - RIGHT - x + 3}" '
                               f'height="{y1 - y0:.0f}" fill="rgb({shade},{shade},255)" stroke="#99a" '
                               f'stroke-dasharray="3,2"/></g>')
                start = i if cur is not None else None
    return out


def _edges(rows: list[_Row], y_of: list[float], types: dict[str, str]) -> list[str]:
    producer: dict[str, int] = {}
    for i, row in enumerate(rows):
        for n in row.defines:
            producer[n] = i
    out = []
    labelled: set[str] = set()
    label_ys: list[float] = []
    for j, row in enumerate(rows):
        for n in dict.fromkeys(row.uses):
            i = producer.get(n)
            if i is None or i >= j:
                continue
            x1, x2 = _x_of(rows[i]), _x_of(rows[j])
            y1, y2 = y_of[i] + BOX_H / 2, y_of[j] + BOX_H / 2
            reach = min(GUTTER - 12, 10 + 18 * math.log2(1 + (j - i)))
            xb = min(x1, x2) - reach
            typ = types.get(n, "?")
            out.append(f'<path class="edge" d="M{x1:.0f},{y1:.0f} C{xb:.0f},{y1:.0f} {xb:.0f},{y2:.0f} '
                       f'{x2:.0f},{y2:.0f}" fill="none" stroke="#6a7" stroke-width="1">'
                       f'<title>{_esc(n)}: {_esc(typ)}</title></path>')
            ym = (y1 + y2) / 2 + 3
            if n not in labelled and j - i >= LABEL_MIN_SPAN and all(abs(ym - o) > 11 for o in label_ys[-40:]):
                labelled.add(n)
                label_ys.append(ym)
                out.append(f'<text x="{xb + 0.75 * (min(x1, x2) - xb) - 2:.0f}" y="{ym:.0f}" '
                           f'text-anchor="end" font-size="9" fill="#374">{_esc(_short_type(typ))}</text>')
    return out


def _short_type(t: str) -> str:
    return t if len(t) <= 28 else t[:27] + "…"


def _types(graph: schema.Graph) -> dict[str, str]:
    view = GraphView(graph)
    names = set(graph.tensor_values) | set(graph.sym_int_values) | set(graph.sym_float_values) | \
        set(graph.sym_bool_values)
    return {n: view.type_of(n) for n in names}


def _legend() -> str:
    items = " ".join(f'<span class="key" style="background:{c}" title="{_esc(d)}">{k}</span>'
                     for k, (c, d) in KINDS.items())
    return f'<div class="legend">ops: {items} (hover a kind, node or edge for details)</div>'


_STYLE = """
body{font-family:sans-serif;margin:0}header{position:sticky;top:0;background:#fff;padding:6px 10px;
border-bottom:1px solid #ccc;z-index:2}.legend{font-size:11px;margin-top:4px}
.key{display:inline-block;padding:0 4px;font-family:monospace;border:1px solid #aaa}section{padding:4px 10px}.hit rect{stroke:#c00;stroke-width:3}
pre{font-size:11px;background:#f6f6f6;padding:6px;overflow:auto;max-height:300px}#errors{color:#c00}
"""

_SCRIPT = """
window.onerror = function(msg){document.getElementById('errors').textContent += 'script error: ' + msg + '\\n';};
(function(){
  var box = document.getElementById('search');
  var count = document.getElementById('count');
  box.addEventListener('input', function(){
    var q = box.value.toLowerCase(), first = null, n = 0;
    document.querySelectorAll('g.node').forEach(function(g){
      var hit = q.length > 0 && g.dataset.name.indexOf(q) >= 0;
      g.classList.toggle('hit', hit);
      if (hit) { n++; if (!first) first = g; }
    });
    count.textContent = q ? n + ' matching nodes' : '';
    if (first) first.scrollIntoView({block: 'center'});
  });
  document.body.dataset.ready = '1';
})();
"""


def _page(title: str, header: str, sections: Iterable[str]) -> str:
    return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
            f"<title>{_esc(title)}</title><style>{_STYLE}</style></head><body>"
            f"<header><b>{_esc(title)}</b> {header} <input id=\"search\" placeholder=\"find a node by name\">"
            "<span id=\"count\"></span>" + _legend() + "<div id=\"errors\"></div></header>"
            + "".join(sections) + f"<script>{_SCRIPT}</script></body></html>\n")


def _graph_sections(graph: schema.Graph, prefix: str, title: str,
                    marks: dict[str, str] | None = None, context: int | None = None,
                    anchor: str = "graph", hidden_inputs: frozenset[str] = frozenset()) -> list[str]:
    rows = _rows(graph, prefix, hidden_inputs)
    if marks:
        for r in rows:
            r.mark = marks.get(r.name, "")
    shown, gaps = _window(rows, context) if context is not None else (rows, {})
    out = [f'<section><h3 id="{_esc(anchor)}">{_esc(title)}</h3>'
           f'{graph_svg(shown, _types(graph), gaps)}</section>']
    for node in graph.nodes:
        for sub in subgraphs(node):
            sub_prefix = f"{prefix}{node.name}.{sub.name}"
            if context is not None and not any(k.startswith(sub_prefix + ".") for k in marks or {}):
                continue
            out += _graph_sections(sub.graph, sub_prefix + ".", f"{sub.name}: subgraph of {node.name}",
                                   marks, context, anchor=sub_prefix)
    return out


def _window(rows: list[_Row], radius: int) -> tuple[list[_Row], dict[int, int]]:
    """The marked rows with ``radius`` rows of context each; the rest become counted gaps."""
    keep = set()
    for i, r in enumerate(rows):
        if r.mark:
            keep.update(range(max(0, i - radius), min(len(rows), i + radius + 1)))
    shown, gaps, hidden = [], {}, 0
    for i, r in enumerate(rows):
        if i in keep:
            if hidden:
                gaps[len(shown)] = hidden
                hidden = 0
            shown.append(r)
        else:
            hidden += 1
    if hidden and shown:
        shown.append(_Row(name=rows[-1].name + ".more", text=f"⋯ {hidden} more unchanged rows", kind="output"))
    return shown, gaps


def _weight_inputs(program: schema.ExportedProgram) -> frozenset[str]:
    """Graph inputs bound to parameters, buffers, constants and tokens: the node lines name them,
    and drawing an arc from each to every use would fill the gutter."""
    names = set()
    for spec in program.graph_module.signature.input_specs:
        kind, value = member(spec)
        if kind == "constant_input":
            names.add(value.name)
        elif kind != "user_input":  # every other spec binds one named argument
            names.add(value.arg.name)
    return frozenset(names)


def program_page(programs: dict[str | None, schema.ExportedProgram], title: str) -> str:
    """The whole page for the program (key None) or the named programs of one artifact."""
    sections, nodes = [], 0
    for name, program in programs.items():
        g = program.graph_module.graph
        nodes += len(g.nodes)
        prefix = "" if name is None else f"{name}: "
        sections += _graph_sections(g, prefix, f"{prefix}graph", anchor=f"{prefix}graph",
                                    hidden_inputs=_weight_inputs(program))
    header = f"{nodes} nodes (parameters, buffers and constants appear by name in the node lines)"
    return _page(title, _esc(header), sections)


_WHERE = re.compile(r"^graph\.nodes\[([^\]]+)\](.*)$")


def diff_page(pairs: list[tuple[str | None, schema.ExportedProgram, schema.ExportedProgram, list]],
              text_report: str, title: str, radius: int = 2) -> str:
    """For each (program name or None, A, B, changes): the changed region of B's graph (changed and
    added nodes marked, ``radius`` rows of context) and the nodes removed from A; then the text report."""
    sections = [f"<section><h3>report</h3><pre>{_esc(text_report)}</pre></section>"]
    total = 0
    for label, a, b, changes in pairs:
        total += len(changes)
        sections += _diff_sections(a, b, changes, radius, "" if label is None else f"{label}: ")
    return _page(title, _esc(f"{total} changes"), sections)


def _diff_sections(a: schema.ExportedProgram, b: schema.ExportedProgram, changes: list, radius: int,
                   label: str) -> list[str]:
    marks_b: dict[str, str] = {}
    marks_a: dict[str, str] = {}
    for c in changes:
        m = _WHERE.match(c.where) if c.section == "graph" else None
        if m is None:
            continue
        name, rest = m.group(1), m.group(2)
        nested = _nested_name(name, rest)
        if c.kind == "removed":
            marks_a[nested] = "removed"
        else:
            marks_b[nested] = "renamed" if c.fields == ["name"] else c.kind
            if nested != name:
                marks_b.setdefault(name, "changed")
    b_prefix, a_prefix = f"{label}", f"{label}A:"
    sections = []
    if marks_b:
        sections += _graph_sections(b.graph_module.graph, b_prefix, f"{label}changed region of B's graph",
                                    {b_prefix + k: v for k, v in marks_b.items()}, radius,
                                    anchor=f"{label}graph", hidden_inputs=_weight_inputs(b))
    if marks_a:
        sections += _graph_sections(a.graph_module.graph, a_prefix, f"{label}removed from A's graph",
                                    {a_prefix + k: v for k, v in marks_a.items()}, radius,
                                    anchor=f"{a_prefix}graph", hidden_inputs=_weight_inputs(a))
    return sections


def _nested_name(name: str, rest: str) -> str:
    """``cond`` + ``.true_graph_0.nodes[sin]`` -> ``cond.true_graph_0.sin`` (the row ids of subgraphs)."""
    parts = [name]
    for sub, node in re.findall(r"\.([^.\[]+)\.nodes\[([^\]]+)\]", rest):
        parts += [sub, node]
    return ".".join(parts)
