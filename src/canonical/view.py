"""A picture of a program: ``pt2serde view FILE -o graph.html`` and ``pt2serde diff --html``.

The page is one self-contained HTML file: the program as JSON data plus a small inline script that
draws it; nothing is fetched from the network and no server is needed.

* It opens at the module hierarchy (``nn_module_stack``): each graph is a box holding its
  top-level module calls as collapsed boxes, each labelled with its module path, class and the
  shapes that flow in and out of it. A click expands a box; only expanded boxes are in the DOM
  (and a box with thousands of direct children shows them in chunks), so a 20,000-node program
  opens as fast as a small one.
* Nodes are rows with their full ``pt2serde show`` line, coloured by the kind of op (matrix
  products, elementwise, normalization, views and shape ops, reductions, control flow, symbolic
  sizes, in-place writes, other). Clicking a node shows where its inputs come from and who uses
  its outputs, as links.
* Subgraphs of higher-order ops are boxes right after their node.
* Search finds nodes by name and boxes by module path, and jumps to each match, opening the boxes
  around it.
* ``diff_page`` draws A and B side by side in one scrolling grid: nodes the diff paired (by
  canonical identity) share a row, removed nodes leave B's side blank and added ones A's;
  rows are coloured by change, and a collapsed box with changes inside is marked with their count.

Every name and text reaches the page as JSON data inside a ``<script type="application/json">``
block (with ``<``, ``>`` and ``&`` escaped) and is put into the DOM as text only, so hostile
names stay text. The same input gives the same bytes.

Nothing here imports torch.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import count, zip_longest

from serde.core import schema
from serde.core.walk import EMPTY_STACK_KEY, argument_names, output_leaves

from .diff import DiffReport
from .render import GraphView, member, subgraphs

__all__ = ["KINDS", "op_kind", "page_data", "program_page", "diff_page"]

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


SHAPES_SHOWN = 3  # a box header lists this many input and output types, then "+N"

# --------------------------------------------------------------------------- one side of a row

Stack = tuple[tuple[str, str, str], ...]  # (key, path, class name) of module calls, outermost first


@dataclass
class _Cell:
    """One side of a row: a graph input, a node or the return of one graph."""

    name: str
    text: str
    kind: str                       # a KINDS key, or "input" / "output"
    graph: int                      # which graph's value names ``uses`` and ``defines`` refer to
    view: GraphView
    stack: Stack = ()
    uses: list[str] = field(default_factory=list)
    defines: list[str] = field(default_factory=list)
    subs: list[schema.GraphArgument] = field(default_factory=list)


def _stack_of(node: schema.Node, outer: Stack) -> Stack:
    entries = node.metadata.nn_module_stack or []
    stack = tuple((e.key, e.path, e.type_name or "") for e in entries if e.key != EMPTY_STACK_KEY and e.path)
    # a subgraph's nodes repeat the module calls around their higher-order op: its box is inside them
    return stack[len(outer):] if stack[:len(outer)] == outer else stack


def _graph_cells(graph: schema.Graph, gid: int, hidden: frozenset[str], outer: Stack
                 ) -> tuple[list[_Cell], list[_Cell], _Cell]:
    """(input cells, node cells, return cell) of one graph; inputs bound to weights are left out
    (node lines name them, and a row per weight would bury the graph)."""
    view = GraphView(graph)
    inputs = []
    for a in graph.inputs:
        names = list(argument_names(a))
        if names and all(n in hidden for n in names):
            continue
        label = ", ".join(f"{n}: {view.type_of(n)}" for n in names) or view.arg(a)
        inputs.append(_Cell(names[0] if names else "input", f"input {label}", "input", gid, view, defines=names))
    nodes = [_Cell(node.name, view.node_line(node), op_kind(node.target), gid, view, _stack_of(node, outer),
                   uses=[n for na in node.inputs for n in argument_names(na.arg)],
                   defines=[name for _, _, name in output_leaves(node.outputs)], subs=subgraphs(node))
             for node in graph.nodes]
    ret = _Cell("return", view.returns(), "output", gid, view,
                uses=[n for o in graph.outputs for n in argument_names(o)])
    return inputs, nodes, ret


@dataclass
class _Row:
    cells: list[_Cell | None]
    mark: str = ""      # "", "added", "removed", "changed", "renamed"
    fields: str = ""    # what changed, for "changed"
    subs: list[tuple[str, list[_Row]]] = field(default_factory=list)  # (box label, rows), after the row

    @property
    def stack(self) -> Stack:
        return next(c.stack for c in reversed(self.cells) if c is not None)


# --------------------------------------------------------------------------- rows -> boxes


class _Builder:
    """Flattens rows into the page's data: ``rows`` in document order and ``mods`` (boxes), each
    box listing its children (a row index ``r`` as ``r``, a box ``m`` as ``~m``)."""

    def __init__(self, sides: Sequence[str]) -> None:
        self.sides = list(sides)
        self.rows: list[_Row] = []
        self.mods: list[dict] = []
        self.new_mod("", "", -1)  # the page itself

    def new_mod(self, label: str, type_name: str, parent: int) -> int:
        self.mods.append({"label": label, "type": type_name, "parent": parent, "kids": [],
                          "start": len(self.rows), "end": len(self.rows)})
        m = len(self.mods) - 1
        if parent >= 0:
            self.mods[parent]["kids"].append(~m)
        return m

    def graph_box(self, label: str, rows: list[_Row], parent: int = 0, kind: str = "") -> int:
        """A box for a graph (``kind`` ""), or for a subgraph of a higher-order op ("subgraph")."""
        box = self.new_mod(label, kind, parent)
        open_: list[tuple[tuple[str, str, str] | None, int]] = [(None, box)]
        for row in rows:
            stack = row.stack
            k = 0
            while k + 1 < len(open_) and k < len(stack) and open_[k + 1][0] == stack[k]:
                k += 1
            for _, m in open_[k + 1:]:
                self.mods[m]["end"] = len(self.rows)
            del open_[k + 1:]
            for entry in stack[k:]:
                open_.append((entry, self.new_mod(entry[1], entry[2].rsplit(".", 1)[-1], open_[-1][1])))
            here = open_[-1][1]
            self.mods[here]["kids"].append(len(self.rows))
            self.rows.append(row)
            for sub_label, sub_rows in row.subs:
                self.graph_box(sub_label, sub_rows, here, "subgraph")
        for _, m in open_:
            self.mods[m]["end"] = len(self.rows)
        self.mods[box]["io"] = [_graph_io(rows, s) for s in range(len(self.sides))]
        return box

    def data(self, title: str, extra: dict | None = None) -> dict:
        rows = self.rows
        producer: dict[tuple[int, int, str], int] = {}
        users: dict[tuple[int, int, str], list[int]] = {}
        for r, row in enumerate(rows):
            for s, c in enumerate(row.cells):
                if c is None:
                    continue
                for n in c.defines:
                    producer[(s, c.graph, n)] = r
                for n in dict.fromkeys(c.uses):
                    users.setdefault((s, c.graph, n), []).append(r)
        out_rows = []
        for row in rows:
            cells: list = []
            for s, c in enumerate(row.cells):
                if c is None:
                    cells.append(0)
                    continue
                prods = sorted({producer[k] for n in c.uses if (k := (s, c.graph, n)) in producer})
                cells.append([c.name, c.text, c.kind, prods])
            out_rows.append([row.mark, row.fields, *cells])
        mods = []
        for m in self.mods:
            start, end = m["start"], m["end"]
            mods.append([m["label"], m["type"], m["parent"], m["kids"],
                         sum(1 for r in rows[start:end] if any(c and c.kind not in ("input", "output") for c in r.cells)),
                         sum(1 for r in rows[start:end] if r.mark),
                         [io and [*io, self._count(s, start, end)] for s, io in enumerate(
                             m.get("io") or [self._io(s, start, end, producer, users) for s in range(len(self.sides))])],
                         start])
        return {"title": title, "sides": self.sides, "rows": out_rows, "mods": mods, **(extra or {})}

    def _count(self, s: int, start: int, end: int) -> int:
        return sum(1 for r in self.rows[start:end] if (c := r.cells[s]) is not None and c.kind not in ("input", "output"))

    def _io(self, s: int, start: int, end: int, producer: dict, users: dict) -> list | int:
        """[input types, output types] of the rows in [start, end) on side ``s``, 0 if it has none.
        Inputs are values used inside and made outside (weights excluded: they are not rows);
        outputs are values made inside and used outside."""
        ins: dict[tuple, str] = {}
        outs: dict[tuple, str] = {}
        present = False
        for row in self.rows[start:end]:
            c = row.cells[s]
            if c is None:
                continue
            present = True
            for n in c.uses:
                k = (s, c.graph, n)
                p = producer.get(k)
                if p is not None and not start <= p < end:
                    ins.setdefault(k, c.view.type_of(n))
            for n in c.defines:
                k = (s, c.graph, n)
                if any(not start <= u < end for u in users.get(k, ())):
                    outs.setdefault(k, c.view.type_of(n))
        if not present:
            return 0
        return [_shapes(list(ins.values())), _shapes(list(outs.values()))]


def _graph_io(rows: list[_Row], s: int) -> list | int:
    """[input types, output types] of a graph box on side ``s``: its inputs and what it returns."""
    cells = [r.cells[s] for r in rows if r.cells[s] is not None]
    if not cells:
        return 0
    ins = [c.view.type_of(n) for c in cells if c.kind == "input" for n in c.defines]
    outs = [c.view.type_of(n) for c in cells if c.kind == "output" for n in c.uses]
    return [_shapes(ins), _shapes(outs)]


def _shapes(types: list[str]) -> str:
    shown = ", ".join(types[:SHAPES_SHOWN])
    return shown + (f" +{len(types) - SHAPES_SHOWN}" if len(types) > SHAPES_SHOWN else "")


def _weight_inputs(program: schema.ExportedProgram) -> frozenset[str]:
    """Graph inputs bound to parameters, buffers, constants and tokens."""
    names = set()
    for spec in program.graph_module.signature.input_specs:
        kind, value = member(spec)
        if kind == "constant_input":
            names.add(value.name)
        elif kind != "user_input":  # every other spec binds one named argument
            names.add(value.arg.name)
    return frozenset(names)


# --------------------------------------------------------------------------- one program


def _program_rows(graph: schema.Graph, ids: Iterator[int], hidden: frozenset[str] = frozenset(),
                  outer: Stack = ()) -> list[_Row]:
    inputs, nodes, ret = _graph_cells(graph, next(ids), hidden, outer)
    rows = [_Row([c]) for c in inputs]
    for c in nodes:
        rows.append(_Row([c], subs=[(f"{c.name}.{s.name}", _program_rows(s.graph, ids, outer=outer + c.stack))
                                    for s in c.subs]))
    rows.append(_Row([ret]))
    return rows


def page_data(programs: dict[str | None, schema.ExportedProgram], title: str) -> dict:
    """The data ``program_page`` draws, as plain JSON-able lists (kept short: 20,000 rows travel in it).

    ``rows`` in document order, each ``[mark, changed fields, cell per side]``; a cell is
    ``[name, text, kind, producer rows]`` or 0 where the side has no node. ``mods`` are the boxes,
    ``mods[0]`` the page: ``[label, class or "subgraph" or "", parent, children, nodes, changed rows,
    per side [input types, output types, nodes] or 0, first row]``; a child ``c >= 0`` is row ``c``, else
    box ``~c``. Boxes are listed in the document order of their headers.
    """
    b = _Builder([title])
    ids = count(1)  # graph ids: value names of different graphs never meet
    for name, program in programs.items():
        rows = _program_rows(program.graph_module.graph, ids, _weight_inputs(program))
        b.graph_box("graph" if name is None else f"{name}: graph", rows)
    return b.data(title)


def program_page(programs: dict[str | None, schema.ExportedProgram], title: str) -> str:
    """The whole page for the program (key None) or the named programs of one artifact."""
    data = page_data(programs, title)
    nodes = sum(len(p.graph_module.graph.nodes) for p in programs.values())
    return _page(title, f"{nodes} nodes; parameters, buffers and constants appear by name in the node lines",
                 data)


# --------------------------------------------------------------------------- two programs


def _pair_rows(ga: schema.Graph | None, gb: schema.Graph | None, path: str, ids: Iterator[int],
               alignment: dict[str, list[tuple[int | None, int | None]]], marks: dict[str, tuple[str, str]],
               hidden: tuple[frozenset[str], frozenset[str]] = (frozenset(), frozenset()),
               outer: tuple[Stack, Stack] = ((), ())) -> list[_Row]:
    """Rows of A's and B's graphs side by side: inputs by position, nodes as the diff paired them."""
    ca = _graph_cells(ga, next(ids), hidden[0], outer[0]) if ga is not None else ([], [], None)
    cb = _graph_cells(gb, next(ids), hidden[1], outer[1]) if gb is not None else ([], [], None)
    rows = []
    for x, y in zip_longest(ca[0], cb[0]):
        rows.append(_Row([x, y], _side_mark(x, y, x is not None and y is not None and x.text != y.text)))
    if ga is not None and gb is not None:
        pairs = alignment.get(path, [])
    else:
        pairs = [(i, None) for i in range(len(ca[1]))] + [(None, j) for j in range(len(cb[1]))]
    for i, j in pairs:
        x = ca[1][i] if i is not None else None
        y = cb[1][j] if j is not None else None
        where = f"{path}.nodes[{y.name if y is not None else x.name}]"
        mark, fields = marks.get(where, ("", "")) if x is not None and y is not None else (_side_mark(x, y), "")
        row = _Row([x, y], mark, fields)
        subs_a, subs_b = (x.subs if x else []), (y.subs if y else [])
        for sx, sy in zip_longest(subs_a, subs_b):
            name = (sy or sx).name
            row.subs.append((f"{(y or x).name}.{name}", _pair_rows(
                sx.graph if sx else None, sy.graph if sy else None, f"{where}.{name}", ids, alignment, marks,
                outer=(outer[0] + (x.stack if x else ()), outer[1] + (y.stack if y else ())))))
        rows.append(row)
    ra, rb = ca[2], cb[2]
    changed = f"{path}.outputs" in marks or (ra is not None and rb is not None and ra.text != rb.text)
    rows.append(_Row([ra, rb], _side_mark(ra, rb, changed)))
    return rows


def _side_mark(x: _Cell | None, y: _Cell | None, changed: bool = False) -> str:
    if x is None:
        return "added"
    if y is None:
        return "removed"
    return "changed" if changed else ""


def diff_page(pairs: list[tuple[str | None, schema.ExportedProgram, schema.ExportedProgram, DiffReport]],
              text_report: str, title: str) -> str:
    """For each (program name or None, A, B, the diff of A and B): A's and B's graphs side by side,
    nodes paired as the diff paired them and coloured by change; then the text report."""
    b = _Builder(["A", "B"])
    ids = count(1)  # graph ids: value names of different graphs never meet
    total = 0
    for label, pa, pb, report in pairs:
        changes = report.changes
        total += len(changes)
        marks: dict[str, tuple[str, str]] = {}
        for c in changes:
            if c.section == "graph" and c.kind == "changed":
                marks[c.where] = ("renamed" if c.fields == ["name"] else "changed", ", ".join(c.fields))
        rows = _pair_rows(pa.graph_module.graph, pb.graph_module.graph, "graph", ids, report.alignment,
                          marks, (_weight_inputs(pa), _weight_inputs(pb)))
        b.graph_box("graph" if label is None else f"{label}: graph", rows)
    data = b.data(title, {"report": text_report})
    return _page(title, f"{total} changes; A left, B right", data)


# --------------------------------------------------------------------------- the page


def _json_for_script(data: dict) -> str:
    """JSON that cannot end its ``<script>`` block or open a comment there."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return (text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def _kind_css() -> str:
    return "".join(f".k-{k}{{background:{c}}}" for k, (c, _) in KINDS.items())


def _legend() -> str:
    items = " ".join(f'<span class="key k-{k}" title="{_esc(d)}">{k}</span>' for k, (_, d) in KINDS.items())
    return f'<div class="legend">ops: {items}</div>'


def _esc(s: str) -> str:
    return html.escape(s, quote=True)


_STYLE = """
body{font-family:sans-serif;font-size:12px;margin:0;color:#222}
header{position:sticky;top:0;background:#fff;padding:6px 10px;border-bottom:1px solid #ccc;z-index:2}
header input{width:22em}.legend{font-size:11px;margin-top:4px}#count{margin:0 8px;color:#555}
.key{display:inline-block;padding:0 4px;font-family:monospace;border:1px solid #aaa}
#errors{color:#c00;white-space:pre-wrap}#tree{padding:4px 10px 40vh 10px}
.sides{display:grid;grid-template-columns:repeat(var(--sides),minmax(0,1fr));font-weight:bold;padding:2px 10px}
.row{display:grid;grid-template-columns:repeat(var(--sides),minmax(0,1fr));min-height:19px;cursor:default}
.cell{white-space:nowrap;overflow:hidden;text-overflow:ellipsis;font:11px/19px monospace;padding:0 4px;
border-left:1px solid #e4e4e4}
.cell.blank{background:repeating-linear-gradient(45deg,#f2f2f2 0 4px,#fff 4px 8px)}
.sw{display:inline-block;width:9px;height:9px;margin-right:5px;border:1px solid #888;vertical-align:-1px}
.k-input,.k-output{background:#fff}
.mod{border:1px solid #99a;border-radius:4px;margin:2px 0 2px 14px;background:rgba(205,205,255,.14)}
.mod.root{border:0;margin:0;background:none}.mod.root>.head{display:none}
.mod.subgraph{border-style:dashed}
.head{cursor:pointer;background:rgba(205,205,255,.35)}.head .cell{font-weight:bold}
.head .meta{font-weight:normal;color:#557;margin-left:8px}
.mod>.body{display:none}.mod.open>.body{display:block}
.changes{display:none;margin-left:8px;padding:0 4px;border-radius:3px;background:#e69138;color:#fff}
.mod.has-changes:not(.open)>.head .changes{display:inline}
.mod.has-changes:not(.open)>.head{outline:2px solid #e69138}
.node:hover{background:#f3f3ff}.node.sel{outline:2px solid #3c78d8}
.node.hit .cell:not(.blank),.head.hit .cell:not(.blank){background:#fff2a8}
.added .cell:not(.blank){background:#d9ead3}.removed .cell:not(.blank){background:#f4cccc}
.changed .cell:not(.blank){background:#fce5cd}.renamed .cell:not(.blank){background:#fdf3e7}
.more{color:#00e;cursor:pointer;padding:2px 18px;font-size:11px}
#details{position:fixed;bottom:0;left:0;right:0;max-height:30vh;overflow:auto;background:#fafafa;
border-top:1px solid #bbb;padding:4px 10px;font:11px monospace;display:none}#details.on{display:block}
#details a{color:#00e;cursor:pointer;margin-right:6px}#details .full{white-space:pre-wrap}
details pre{font-size:11px;background:#f6f6f6;padding:6px;overflow:auto;max-height:40vh}
"""

# Draws the data lazily: a box's children enter the DOM when it is opened (CHUNK at a time) and
# leave it when it is closed. Every text is set with textContent, never parsed as HTML.
_SCRIPT = r"""
window.onerror = function(msg){document.getElementById('errors').textContent += 'script error: ' + msg + '\n';};
(function(){
'use strict';
var D = JSON.parse(document.getElementById('data').textContent);
var rows = D.rows, mods = D.mods, S = D.sides.length, CHUNK = 300;
var rowParent = new Int32Array(rows.length), rowIndex = new Int32Array(rows.length);
var modParent = new Int32Array(mods.length), modIndex = new Int32Array(mods.length);
var shown = new Int32Array(mods.length), isOpen = new Uint8Array(mods.length);
var modEl = new Array(mods.length), rowEl = new Array(rows.length);
modParent[0] = -1;
mods.forEach(function(m, id){
  m[3].forEach(function(c, i){
    if (c >= 0) { rowParent[c] = id; rowIndex[c] = i; } else { modParent[~c] = id; modIndex[~c] = i; }
  });
});
document.documentElement.style.setProperty('--sides', S);
function el(tag, cls, text){
  var e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}
function nodeRow(r){
  var R = rows[r], d = el('div', 'row node' + (R[0] ? ' ' + R[0] : ''));
  d.dataset.row = r;
  for (var s = 0; s < S; s++) {
    var c = R[2 + s], cell = el('div', 'cell');
    if (!c) { cell.className += ' blank'; }
    else {
      cell.appendChild(el('span', 'sw k-' + c[2]));
      cell.appendChild(document.createTextNode(c[1]));
      cell.title = (R[0] ? R[0] + (R[1] ? ' (' + R[1] + ')' : '') + ': ' : '') + c[1];
    }
    d.appendChild(cell);
  }
  rowEl[r] = d;
  return d;
}
function modBox(m){
  var M = mods[m], box = el('div', 'mod' + (M[1] === 'subgraph' ? ' subgraph' : ''));
  var head = el('div', 'row head'), body = el('div', 'body');
  box.dataset.mod = m;
  box.dataset.label = M[0];
  if (M[5]) box.classList.add('has-changes');
  for (var s = 0; s < S; s++) {
    var io = M[6][s], cell = el('div', 'cell');
    if (!io) { cell.className += ' blank'; head.appendChild(cell); continue; }
    cell.appendChild(el('span', 'tw', '\u25b8 '));
    cell.appendChild(document.createTextNode(M[0]));
    var meta = (M[1] ? M[1] + '  ' : '') + 'in ' + (io[0] || '-') + ' \u2192 out ' + (io[1] || '-') +
      '  \u00b7 ' + io[2] + ' node' + (io[2] === 1 ? '' : 's');
    cell.appendChild(el('span', 'meta', meta));
    if (M[5]) cell.appendChild(el('span', 'changes', M[5] + ' changed row' + (M[5] === 1 ? '' : 's')));
    cell.title = M[0] + '  ' + meta;
    head.appendChild(cell);
  }
  box.appendChild(head); box.appendChild(body);
  modEl[m] = box; isOpen[m] = 0; shown[m] = 0;
  return box;
}
function fill(m, upto){
  var kids = mods[m][3], body = modEl[m].lastChild, end = Math.min(upto, kids.length);
  if (body.lastChild && body.lastChild.className === 'more') body.removeChild(body.lastChild);
  var frag = document.createDocumentFragment();
  for (var i = shown[m]; i < end; i++) frag.appendChild(kids[i] >= 0 ? nodeRow(kids[i]) : modBox(~kids[i]));
  shown[m] = Math.max(shown[m], end);
  if (shown[m] < kids.length) {
    var more = el('div', 'more', 'show ' + Math.min(CHUNK, kids.length - shown[m]) + ' more of ' +
                  (kids.length - shown[m]) + ' hidden rows');
    more.dataset.more = m;
    frag.appendChild(more);
  }
  body.appendChild(frag);
}
function ensure(m){  // makes box m's element exist, opening the boxes around it
  if (m === 0 || (modEl[m] && modEl[m].isConnected)) return;
  var p = modParent[m];
  open(p);
  if (modIndex[m] >= shown[p]) fill(p, (Math.floor(modIndex[m] / CHUNK) + 1) * CHUNK);
}
function open(m){
  ensure(m);
  if (isOpen[m]) return;
  isOpen[m] = 1;
  modEl[m].classList.add('open');
  modEl[m].firstChild.querySelectorAll('.tw').forEach(function(t){ t.textContent = '\u25be '; });
  fill(m, CHUNK);
}
function close(m){
  if (!isOpen[m] || m === 0 || !modEl[m].isConnected) return;
  isOpen[m] = 0; shown[m] = 0;
  modEl[m].classList.remove('open');
  modEl[m].firstChild.querySelectorAll('.tw').forEach(function(t){ t.textContent = '\u25b8 '; });
  modEl[m].lastChild.textContent = '';
}
function reveal(r){
  var m = rowParent[r], i = rowIndex[r];
  open(m);
  if (i >= shown[m]) fill(m, (Math.floor(i / CHUNK) + 1) * CHUNK);
  return rowEl[r];
}
var selected = -1;
function jump(r){
  var e = reveal(r);
  e.scrollIntoView({block: 'center'});
  select(r);
}
function path(r){
  var parts = [], m = rowParent[r];
  while (m > 0) { parts.unshift(mods[m][0]); m = modParent[m]; }
  return parts.join(' / ');
}
function link(r, s){
  var a = el('a', '', rows[r][2 + s] ? rows[r][2 + s][0] : '?');
  a.dataset.jump = r;
  return a;
}
function select(r){
  if (selected >= 0 && rowEl[selected]) rowEl[selected].classList.remove('sel');
  selected = r;
  if (rowEl[r]) rowEl[r].classList.add('sel');
  var det = document.getElementById('details'), R = rows[r];
  det.textContent = '';
  det.classList.add('on');
  det.appendChild(el('div', '', 'in ' + (path(r) || 'the graph') + (R[0] ? '   [' + R[0] + (R[1] ? ': ' + R[1] : '') + ']' : '')));
  for (var s = 0; s < S; s++) {
    var c = R[2 + s];
    if (!c) continue;
    var side = S > 1 ? D.sides[s] + ': ' : '';
    det.appendChild(el('div', 'full', side + c[1]));
    var from = el('div', '', 'inputs from: ');
    c[3].forEach(function(p){ from.appendChild(link(p, s)); });
    det.appendChild(from);
    var to = el('div', '', 'used by: ');
    for (var u = 0; u < rows.length; u++) {
      var cu = rows[u][2 + s];
      if (cu && cu[3].indexOf(r) >= 0) to.appendChild(link(u, s));
    }
    det.appendChild(to);
  }
}
document.getElementById('tree').addEventListener('click', function(ev){
  var t = ev.target;
  var more = t.closest('.more');
  if (more) { var m = +more.dataset.more; fill(m, shown[m] + CHUNK); return; }
  var head = t.closest('.head');
  if (head) { var mm = +head.parentNode.dataset.mod; if (isOpen[mm]) close(mm); else open(mm); return; }
  var node = t.closest('.node');
  if (node) select(+node.dataset.row);
});
document.getElementById('details').addEventListener('click', function(ev){
  var a = ev.target.closest('a');
  if (a) jump(+a.dataset.jump);
});
var names = rows.map(function(R){
  var n = [];
  for (var s = 0; s < S; s++) if (R[2 + s]) n.push(R[2 + s][0].toLowerCase());
  return n.join('\n');
});
var modNames = mods.map(function(M){ return M[0].toLowerCase(); });
var hits = [], hitAt = -1, hitEls = [];
function go(k){
  hitEls.forEach(function(e){ e.classList.remove('hit'); });
  hitEls = [];
  var count = document.getElementById('count');
  if (!hits.length) { count.textContent = box.value ? 'no matching node or module' : ''; return; }
  hitAt = (k + hits.length) % hits.length;
  var h = hits[hitAt], e;
  if (h >= 0) { jump(h); e = rowEl[h]; }
  else { ensure(~h); e = modEl[~h].firstChild; e.scrollIntoView({block: 'center'}); }
  e.classList.add('hit');
  hitEls.push(e);
  count.textContent = (hitAt + 1) + ' of ' + hits.length + ' matching nodes and modules (Enter: next)';
}
var box = document.getElementById('search');
box.addEventListener('input', function(){
  var q = box.value.toLowerCase(), mi = 1;
  hits = [];
  if (q) for (var r = 0; r <= rows.length; r++) {  // boxes before the rows they start with
    for (; mi < mods.length && mods[mi][7] <= r; mi++) if (modNames[mi].indexOf(q) >= 0) hits.push(~mi);
    if (r < rows.length && names[r].indexOf(q) >= 0) hits.push(r);
  }
  go(0);
});
box.addEventListener('keydown', function(ev){
  if (ev.key === 'Enter') { ev.preventDefault(); go(hitAt + (ev.shiftKey ? -1 : 1)); }
});
var changed = [];
rows.forEach(function(R, r){ if (R[0]) changed.push(r); });
var next = document.getElementById('next-change'), at = -1;
if (next) {
  next.textContent = changed.length + ' changed rows: next';
  next.addEventListener('click', function(){
    if (!changed.length) return;
    at = (at + 1) % changed.length;
    jump(changed[at]);
  });
}
modEl[0] = document.getElementById('tree').appendChild(modBox(0));
modEl[0].classList.add('root');
open(0);
// Open at the graphs' top-level module calls, and through a box that is all its parent holds
// besides inputs and the return.
function rowOnly(k){ return k >= 0 && rows[k][2 + (rows[k][2] ? 0 : S - 1)][2].match(/^(input|output)$/); }
mods[0][3].forEach(function(c){
  var m = ~c;
  while (m >= 0) {
    open(m);
    var kids = mods[m][3], inner = kids.filter(function(k){ return k < 0; });
    m = (inner.length === 1 && kids.every(function(k){ return k < 0 || rowOnly(k); })) ? ~inner[0] : -1;
  }
});
window.pt2serdeView = {open: open, close: close, jump: jump, reveal: reveal, rows: rows.length, mods: mods.length};
document.body.dataset.ready = '1';
})();
"""


def _page(title: str, header: str, data: dict) -> str:
    report = data.get("report")
    diff_bits = '<button id="next-change"></button>' if report is not None else ""
    sides = "".join(f"<div>{_esc(s)}</div>" for s in data["sides"]) if len(data["sides"]) > 1 else ""
    report_html = (f"<details><summary>text report</summary><pre>{_esc(report)}</pre></details>"
                   if report is not None else "")
    return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
            f"<title>{_esc(title)}</title><style>{_STYLE}{_kind_css()}</style></head><body>"
            f"<header><b>{_esc(title)}</b> {_esc(header)} "
            "<input id=\"search\" placeholder=\"find a node or module by name\"><span id=\"count\"></span>"
            f"{diff_bits}{_legend()}{report_html}<div id=\"errors\"></div>"
            f"<div class=\"sides\">{sides}</div></header>"
            "<div id=\"tree\"></div><div id=\"details\"></div>"
            f"<script type=\"application/json\" id=\"data\">{_json_for_script(data)}</script>"
            f"<script>{_SCRIPT}</script></body></html>\n")
