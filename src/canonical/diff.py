"""Semantic diff of two programs: what ``pt2serde diff A B`` reports. No torch imports.

Nodes are aligned by structure, not by position, in passes over the still unmatched nodes:

1. structure, both ways, until nothing new matches: forward from the inputs (same name, same
   target and the same arguments, read through the matches so far) and backward from the
   outputs (the producers of a matched pair's arguments, position by position, when their
   targets agree);
2. the same, with the forward pass ignoring names (a candidate with the same name still wins);
3. same name and same target (canonical names are local and stable), then 2 again;
4. same name, different target (an op was swapped), then 2 again;
5. the same arguments, different target, then 2 again.

What is left is removed (only in A) or added (only in B). Subgraphs of matched nodes are
diffed the same way. Inputs are paired by what they bind (parameter name, buffer name, ...;
user inputs and tokens by position), outputs by what they write (mutations, gradients) or by
position, weights by name; changed weights are found by sha256 and reported with their
dtype/shape change or, when both payloads can be decoded, the max abs difference.

Compared per node: name, target, arguments, output types (incl. strides and requires_grad),
``nn_module_stack`` keys and paths, and ``custom``. Not compared: debug metadata (stack traces,
``from_node``, module type names, ``source_fn_stack``, ``torch_fn``), the order of
independent nodes, and the torch version that wrote the artifact (reported as a note).

JSON report (``DiffReport.to_json()``; ``pt2serde diff --json`` adds ``"a"`` and ``"b"``, the paths)::

    {
      "identical": bool,                 # true when "changes" is empty
      "changes": [                       # in section order, then program order
        {
          "section": "program" | "signature" | "graph" | "range_constraints" | "guards"
                     | "module_call_graph" | "weights" | "example_inputs" | "extra_files",
          "kind": "added" | "removed" | "changed",
          "where": str,                  # e.g. "graph.nodes[relu]", "inputs[parameter fc.weight]",
                                         #      "graph.nodes[cond].true_graph_0.nodes[sin]"
          "a": str | null,               # the item as `pt2serde show` prints it in A (null if added)
          "b": str | null,               # ... in B (null if removed)
          "fields": [str],               # for "changed": what differs, e.g. ["target", "args"],
                                         # for weights: "dtype", "shape", "layout", "values", ...
          "max_abs_diff": float | "nan" | "inf" | null,   # weights whose values changed
          "num_different": int | null    # elements that differ (same condition)
        }
      ],
      "notes": [str]                     # informational, never make the programs differ
    }
"""

from __future__ import annotations

import math
import struct
from collections import deque
from collections.abc import Callable, Iterable

import msgspec

from serde.core import schema
from serde.core.expr import ranges_by_text
from serde.core.wire import sha256_hex
from serde.errors import MalformedArtifactError

from . import render as R

__all__ = ["Change", "DiffReport", "Payload", "diff", "diff_programs", "max_abs_diff", "node_alignment"]

# sha256 -> the storage's raw little-endian bytes; raises KeyError when unavailable.
Payload = Callable[[str], bytes]

_SECTIONS = (
    "program", "signature", "graph", "range_constraints", "guards", "module_call_graph", "weights",
    "example_inputs", "extra_files",
)


class Change(msgspec.Struct, kw_only=True, omit_defaults=False):
    """One difference between A and B (see the module docstring for the fields)."""

    section: str
    kind: str
    where: str
    a: str | None = None
    b: str | None = None
    fields: list[str] = []
    max_abs_diff: float | str | None = None
    num_different: int | None = None


class DiffReport(msgspec.Struct, kw_only=True):
    """Every change between two programs, plus informational notes."""

    changes: list[Change]
    notes: list[str] = []
    alignment: dict[str, list[tuple[int | None, int | None]]] = {}
    """How the diff paired each graph's nodes (see :func:`node_alignment`), for drawing A and B side
    by side; not part of the JSON report."""

    @property
    def identical(self) -> bool:
        return not self.changes

    def to_json(self) -> dict:
        """The machine-readable report documented in the module docstring."""
        out = msgspec.to_builtins(self)
        del out["alignment"]
        return {"identical": self.identical, **out}

    def format_text(self, a_label: str = "a", b_label: str = "b") -> str:
        """Terminal text: one header line per change, then its ``-`` / ``+`` lines.

        Canonical names come from a node's neighbourhood, so a change renames nodes near it whose
        own structure did not change. Such renames fold into one line per section when other
        changes in it explain them; ``to_json()`` keeps every one.
        """
        folded = _induced_renames(self.changes)
        shown = [c for c in self.changes if id(c) not in folded]
        out = [f"--- {a_label}", f"+++ {b_label}"] if self.changes else []
        section = None
        for c in shown:
            if c.section != section:
                out += _fold_line(folded, section)
                section = c.section
                out.append(f"{section}:")
            head = f"  {c.kind} {c.where}"
            if c.fields:
                head += f" ({', '.join(c.fields)})"
            if c.num_different is not None:
                head += (
                    f": {c.num_different} elements differ, max abs diff {c.max_abs_diff}"
                    if c.num_different else ": bits differ, values compare equal"
                )
            out.append(head)
            if c.a is not None:
                out.append(f"    - {c.a}")
            if c.b is not None:
                out.append(f"    + {c.b}")
        out += _fold_line(folded, section)
        if shown:
            n = {k: sum(c.kind == k for c in shown) for k in ("changed", "added", "removed")}
            plural = "s" if len(shown) != 1 else ""
            line = (f"{len(shown)} difference{plural}: {n['changed']} changed, "
                    f"{n['added']} added, {n['removed']} removed")
            if folded:
                line += f", plus {len(folded)} node{'s' if len(folded) != 1 else ''} renamed"
            out.append(line)
        out += [f"note: {n}" for n in self.notes]
        return "\n".join(out) + ("\n" if out else "")


def _induced_renames(changes: list[Change]) -> dict[int, str]:
    """id(change) -> section, for name-only changes in sections that also hold other changes."""
    by_section: dict[str, list[Change]] = {}
    for c in changes:
        by_section.setdefault(c.section, []).append(c)
    folded: dict[int, str] = {}
    for section, items in by_section.items():
        renames = [c for c in items if c.kind == "changed" and c.fields == ["name"]]
        if renames and len(renames) < len(items):
            folded.update((id(c), section) for c in renames)
    return folded


def _fold_line(folded: dict[int, str], section: str | None) -> list[str]:
    n = sum(s == section for s in folded.values())
    if not n:
        return []
    return [f"  renamed {n} node{'s' if n != 1 else ''} whose structure is unchanged: canonical names "
            "derive from their neighbourhood, which the changes above touched (--json lists them)"]


def diff(
    a: schema.ExportedProgram,
    b: schema.ExportedProgram,
    *,
    a_weights: schema.Weights | None = None,
    b_weights: schema.Weights | None = None,
    a_payload: Payload | None = None,
    b_payload: Payload | None = None,
    a_extra: dict[str, bytes] | None = None,
    b_extra: dict[str, bytes] | None = None,
) -> DiffReport:
    """Compare two programs (and their weights when both are given).

    Args:
        a, b: decoded programs; A is the "old" side.
        a_weights, b_weights: their weights; weights are compared only when both are given.
        a_payload, b_payload: storage bytes by sha256, used for the max abs difference of
            weights whose values changed; without them such weights are reported by sha.
        a_extra, b_extra: the artifacts' extra files (name -> bytes); compared when both are given.

    Returns:
        A :class:`DiffReport`; ``report.identical`` is true when nothing differs.

    Raises:
        MalformedArtifactError: a weight's storage index or extent is out of range.
    """
    d = _Differ()
    d.program(a, b)
    if a_weights is not None and b_weights is not None:
        d.weights(a_weights, b_weights, a_payload, b_payload)
    if a_extra is not None and b_extra is not None:
        d.extra_files(a_extra, b_extra)
    order = {s: i for i, s in enumerate(_SECTIONS)}
    changes = sorted(d.changes, key=lambda c: order[c.section])  # stable: keeps program order
    return DiffReport(changes=changes, notes=d.notes, alignment=d.alignment)


def diff_programs(a: dict[str, tuple], b: dict[str, tuple], *, a_extra: dict[str, bytes] | None = None,
                  b_extra: dict[str, bytes] | None = None) -> tuple[DiffReport, dict[str, DiffReport]]:
    """Compare artifacts holding several named programs: ``name -> (program, weights, payload)``.

    Returns the combined report (each change's ``where`` starts with ``programs[<name>].``;
    programs only in A or only in B are one removed/added change each) and the report per program
    present in both.
    """
    d = _Differ()
    per: dict[str, DiffReport] = {}
    for name in sorted(set(a) | set(b)):
        if name not in b or name not in a:
            d.changes.append(Change(section="program", kind="removed" if name not in b else "added",
                                    where=f"programs[{name}]", a=name if name in a else None,
                                    b=name if name in b else None))
            continue
        (pa, wa, la), (pb, wb, lb) = a[name], b[name]
        per[name] = report = diff(pa, pb, a_weights=wa, b_weights=wb, a_payload=la, b_payload=lb)
        d.changes += [msgspec.structs.replace(c, where=f"programs[{name}].{c.where}") for c in report.changes]
        d.notes += [n for n in report.notes if n not in d.notes]
    if a_extra is not None and b_extra is not None:
        d.extra_files(a_extra, b_extra)
    return DiffReport(changes=d.changes, notes=d.notes), per


def node_alignment(a: schema.ExportedProgram, b: schema.ExportedProgram) -> dict[str, list[tuple[int | None, int | None]]]:
    """How the diff paired the nodes of each graph, for drawing A and B side by side.

    Keys are graph paths as in a change's ``where`` (``graph``, ``graph.nodes[cond].true_graph_0``,
    named by B's node); values are (A node index, B node index) pairs in report order, None where a
    node exists on one side only.
    """
    d = _Differ()
    d.program(a, b)
    return d.alignment


def max_abs_diff(
    ta: schema.StoredTensor, da: bytes, tb: schema.StoredTensor, db: bytes
) -> tuple[float, int] | None:
    """(max |a - b|, number of differing elements) of two same-dtype, same-shape tensors.

    ``da`` / ``db`` are the raw bytes of each tensor's whole storage. NaN in both at the same
    place counts as equal; NaN against a number makes the max NaN. Returns None for dtypes
    this module cannot decode (complex, float8).
    """
    va, vb = _values(ta, da), _values(tb, db)
    if va is None or vb is None:
        return None
    worst, n = 0.0, 0
    for x, y in zip(va, vb, strict=True):
        if x == y or (x != x and y != y):
            continue
        n += 1
        d = abs(x - y)
        if d != d:
            worst = math.nan
        elif d > worst:  # False once worst is nan, so nan sticks
            worst = d
    return float(worst), n


# ---------------------------------------------------------------- the differ


class _Differ:
    def __init__(self) -> None:
        self.changes: list[Change] = []
        self.notes: list[str] = []
        self.alignment: dict[str, list[tuple[int | None, int | None]]] = {}

    def extra_files(self, a_extra: dict[str, bytes], b_extra: dict[str, bytes]) -> None:
        for name, x, y in _pair(_sorted_items(a_extra), _sorted_items(b_extra)):
            self._pair_change("extra_files", f"extra_files[{name}]", _blob_line(name, x), _blob_line(name, y))

    def add(self, section: str, kind: str, where: str, a: str | None = None, b: str | None = None,
            **extra) -> None:
        self.changes.append(Change(section=section, kind=kind, where=where, a=a, b=b, **extra))

    # -- whole program

    def program(self, a: schema.ExportedProgram, b: schema.ExportedProgram) -> None:
        va, vb = a.schema_version, b.schema_version
        self._field("schema_version", f"{va.major}.{va.minor}", f"{vb.major}.{vb.minor}")
        self._field("opset_version", _kv(a.opset_version), _kv(b.opset_version))
        self._field("verifiers", ", ".join(a.verifiers), ", ".join(b.verifiers))
        self._field("graph_module.custom", str(a.graph_module.custom), str(b.graph_module.custom))
        if a.torch_version != b.torch_version:
            self.notes.append(f"written by torch {a.torch_version} (a) and {b.torch_version} (b)")

        ga, gb = a.graph_module.graph, b.graph_module.graph
        in_map = self.inputs(a.graph_module.signature, b.graph_module.signature, ga, gb)
        vmap = self.graph(ga, gb, in_map, "graph")
        self.outputs(a.graph_module.signature, b.graph_module.signature, ga, gb, vmap)
        self.ranges(ranges_by_text(a.range_constraints), ranges_by_text(b.range_constraints))
        self.guards(a.guards, b.guards)
        self.call_graph(a.graph_module.module_call_graph, b.graph_module.module_call_graph, vmap)

    def _field(self, where: str, a: str, b: str) -> None:
        if a != b:
            self.add("program", "changed", where, a, b)

    # -- signature

    def inputs(self, sa: schema.GraphSignature, sb: schema.GraphSignature,
               ga: schema.Graph, gb: schema.Graph) -> dict[str, str]:
        """Report input spec changes; return A name -> B name of the paired inputs."""
        view_a, view_b = R.GraphView(ga), R.GraphView(gb)
        in_map: dict[str, str] = {}
        pairs = _pair(_keyed(sa.input_specs, _input_key), _keyed(sb.input_specs, _input_key))
        for key, x, y in pairs:
            where = f"inputs[{key}]"
            la = None if x is None else R.input_spec_line(x, view_a)
            lb = None if y is None else R.input_spec_line(y, view_b)
            if x is not None and y is not None:
                for n_a, n_b in zip(_spec_names(x), _spec_names(y), strict=False):
                    in_map[n_a] = n_b
            self._pair_change("signature", where, la, lb)
        return in_map

    def outputs(self, sa: schema.GraphSignature, sb: schema.GraphSignature,
                ga: schema.Graph, gb: schema.Graph, vmap: dict[str, str]) -> None:
        # A's names are printed in B's terms: a renamed output node is a graph change, not this.
        view_a, view_b = R.GraphView(ga, _renamer(vmap)), R.GraphView(gb)
        pairs = _pair(_keyed(sa.output_specs, _output_key), _keyed(sb.output_specs, _output_key))
        for key, x, y in pairs:
            la = None if x is None else R.output_spec_line(x, view_a)
            lb = None if y is None else R.output_spec_line(y, view_b)
            self._pair_change("signature", f"outputs[{key}]", la, lb)

    def _pair_change(self, section: str, where: str, la: str | None, lb: str | None) -> None:
        if la is None:
            self.add(section, "added", where, None, lb)
        elif lb is None:
            self.add(section, "removed", where, la, None)
        elif la != lb:
            self.add(section, "changed", where, la, lb)

    # -- graphs

    def graph(self, ga: schema.Graph, gb: schema.Graph, in_map: dict[str, str], path: str) -> dict[str, str]:
        """Align and compare the nodes of two graphs; return the A -> B value name map."""
        vmap = dict(in_map)
        na, nb = ga.nodes, gb.nodes
        match = _align(ga, gb, vmap)
        rev = {j: i for i, j in match.items()}
        view_a, view_am, view_b = R.GraphView(ga), R.GraphView(ga, _renamer(vmap)), R.GraphView(gb)

        # Removed nodes are reported just before the B node that follows their A predecessor.
        entries: list[tuple[float, Change | tuple[int, int]]] = []
        slots: list[tuple[float, tuple[int | None, int | None]]] = []
        anchor = -1.0
        for i, node in enumerate(na):
            if i in match:
                anchor = match[i]
            else:
                entries.append((anchor + 0.5, Change(
                    section="graph", kind="removed", where=f"{path}.nodes[{node.name}]",
                    a=view_a.node_line(node))))
                slots.append((anchor + 0.5, (i, None)))
        for j, node in enumerate(nb):
            slots.append((j, (rev.get(j), j)))
            if j in rev:
                entries.append((j, (rev[j], j)))
            else:
                entries.append((j, Change(section="graph", kind="added", where=f"{path}.nodes[{node.name}]",
                                          b=view_b.node_line(node))))
        entries.sort(key=lambda e: e[0])
        self.alignment[path] = [pair for _, pair in sorted(slots, key=lambda e: e[0])]
        for _, e in entries:
            if isinstance(e, Change):
                self.changes.append(e)
                continue
            x, y = na[e[0]], nb[e[1]]
            fields = _node_fields(x, y, view_am, view_b)
            where = f"{path}.nodes[{y.name}]"
            if fields:
                self.add("graph", "changed", where, view_a.node_line(x), view_b.node_line(y), fields=fields)
            for sx, sy in zip(R.subgraphs(x), R.subgraphs(y), strict=False):
                sub_in = {}
                for ia, ib in zip(sx.graph.inputs, sy.graph.inputs, strict=False):
                    sub_in.update(zip(R.defined_names(ia), R.defined_names(ib), strict=False))
                self.graph(sx.graph, sy.graph, sub_in, f"{where}.{sy.name}")

        ra, rb = view_am.returns(), view_b.returns()
        if ra != rb:
            self.add("graph", "changed", f"{path}.outputs", view_a.returns(), rb)
        return vmap

    # -- tables

    def ranges(self, a: dict[str, schema.RangeConstraint], b: dict[str, schema.RangeConstraint]) -> None:
        for key, x, y in _pair(_sorted_items(a), _sorted_items(b)):
            self._pair_change(
                "range_constraints", f"range_constraints[{key}]",
                None if x is None else R.range_line(key, x), None if y is None else R.range_line(key, y))

    def guards(self, a: schema.InputGuards | None, b: schema.InputGuards | None) -> None:
        # A guard is its own key: a changed guard shows as one removed and one added.
        ta = [(t, t) for t in R.guard_lines(a, "a.guards")]
        tb = [(t, t) for t in R.guard_lines(b, "b.guards")]
        for key, x, y in _pair(ta, tb):
            self._pair_change("guards", f"guards[{key}]", x, y)

    def call_graph(self, a: list[schema.ModuleCallEntry], b: list[schema.ModuleCallEntry],
                   vmap: dict[str, str]) -> None:
        ren = _renamer(vmap)
        for key, x, y in _pair([(e.fqn, e) for e in a], [(e.fqn, e) for e in b]):
            self._pair_change(
                "module_call_graph", f"module_call_graph[{key or '<root>'}]",
                None if x is None else R.module_call_line(x, ren),
                None if y is None else R.module_call_line(y))

    def weights(self, wa: schema.Weights, wb: schema.Weights, pa: Payload | None, pb: Payload | None) -> None:
        for title in ("state_dict", "constants"):
            ta, tb = getattr(wa, title), getattr(wb, title)
            for name, x, y in _pair(_sorted_items(ta), _sorted_items(tb)):
                self._tensor(
                    "weights", f"{title}[{name}]", x, y, wa, wb, pa, pb)
        ea, eb = wa.example_inputs, wb.example_inputs
        if ea is None and eb is None:
            return
        sa = None if ea is None else R.render_treespec(ea.spec)
        sb = None if eb is None else R.render_treespec(eb.spec)
        self._pair_change("example_inputs", "example_inputs.spec", sa, sb)
        la = [] if ea is None else list(enumerate(ea.leaves))
        lb = [] if eb is None else list(enumerate(eb.leaves))
        for i, x, y in _pair(la, lb):
            where = f"example_inputs.leaves[{i}]"
            if x is not None and y is not None and x.kind == y.kind == "as_tensor":
                self._tensor("example_inputs", where, x.as_tensor, y.as_tensor, wa, wb, pa, pb)
            else:
                self._pair_change("example_inputs", where,
                                  None if x is None else R.render_leaf(x, wa, i), None if y is None else R.render_leaf(y, wb, i))

    def _tensor(self, section: str, where: str, x: schema.StoredTensor | None, y: schema.StoredTensor | None,
                wa: schema.Weights, wb: schema.Weights, pa: Payload | None, pb: Payload | None) -> None:
        la = None if x is None else R.render_stored_tensor(x, wa, where)
        lb = None if y is None else R.render_stored_tensor(y, wb, where)
        if x is None or y is None:
            self._pair_change(section, where, la, lb)
            return
        # Tensors with a payload compare by sha; a subclass (inner shas, context) or a tensor saved
        # without data (its device) compares by its rendering.
        plain = _has_payload(x, wa) and _has_payload(y, wb)
        sha_a, sha_b = (wa.storages[x.storage].sha256, wb.storages[y.storage].sha256) if plain else (la, lb)
        fields = [f for f, differs in (
            ("dtype", x.dtype != y.dtype),
            ("shape", list(x.sizes) != list(y.sizes)),
            ("layout", list(x.strides) != list(y.strides) or x.storage_offset != y.storage_offset),
            ("requires_grad", x.requires_grad != y.requires_grad),
        ) if differs]
        if sha_a != sha_b and not {"dtype", "shape"} & set(fields):
            fields.append("values")
        if not fields:
            return
        extra: dict = {}
        if fields[-1] == "values" and plain and pa is not None and pb is not None:
            try:
                da, db = pa(sha_a), pb(sha_b)
            except KeyError:
                da = db = None
            if da is not None and db is not None:
                res = max_abs_diff(x, da, y, db)
                if res is not None:
                    extra = {"max_abs_diff": schema.to_f64(res[0]), "num_different": res[1]}
        self.add(section, "changed", where, la, lb, fields=fields, **extra)


# ---------------------------------------------------------------- node alignment


def _align(ga: schema.Graph, gb: schema.Graph, vmap: dict[str, str]) -> dict[int, int]:
    """Match A node indices to B node indices; ``vmap`` (A -> B value names) grows as they match."""
    return _Aligner(ga, gb, vmap).run()


class _Aligner:
    """The passes of the module docstring. Structure goes first and both ways, so one inserted or
    swapped node leaves its neighbours matched even when the names around it changed."""

    def __init__(self, ga: schema.Graph, gb: schema.Graph, vmap: dict[str, str]) -> None:
        self.ga, self.gb, self.vmap = ga, gb, vmap
        self.na, self.nb = ga.nodes, gb.nodes
        self.match: dict[int, int] = {}
        self.taken: set[int] = set()
        self.view_am, self.view_b = R.GraphView(ga, _renamer(vmap)), R.GraphView(gb)
        self.by_name = {n.name: j for j, n in enumerate(self.nb)}
        self.prod_a = _producers(self.na)
        self.prod_b = _producers(self.nb)
        self.key_b = {j: (n.target, self.view_b.args(n)) for j, n in enumerate(self.nb)}
        self.index: dict[object, deque[int]] = {}
        for j, k in self.key_b.items():
            self.index.setdefault(k, deque()).append(j)
        # (A value, B value) pairs that should correspond; the backward pass matches their producers.
        self.pending: deque[tuple[str, str]] = deque(_pairs(ga.outputs, gb.outputs))

    def run(self) -> dict[int, int]:
        # Same-name structural matches first: with identical ops in a row a name-blind forward
        # pass would happily pair each node with its neighbour after an insertion.
        self.structural(strict=True)
        self.structural(strict=False)
        for phase in (self.same_name_same_target, self.same_name, self.same_args):
            phase()
            self.structural(strict=False)
        return self.match

    def link(self, i: int, j: int) -> None:
        self.match[i] = j
        self.taken.add(j)
        x, y = self.na[i], self.nb[j]
        self.vmap.update(_pairs(x.outputs, y.outputs))
        self.pending.extend(_pairs([a.arg for a in x.inputs], [b.arg for b in y.inputs]))

    def structural(self, strict: bool) -> None:
        while self.forward(strict) | self.backward():
            pass

    def forward(self, strict: bool) -> bool:
        """Match by (target, matched arguments): only to the same name if ``strict``, else
        preferring the same name, then the first candidate."""
        progress = False
        for i, node in enumerate(self.na):
            if i in self.match:
                continue
            k = (node.target, self.view_am.args(node))
            j = self.by_name.get(node.name)
            if j is None or j in self.taken or self.key_b[j] != k:
                if strict:
                    continue
                cands = self.index.get(k)
                while cands and cands[0] in self.taken:
                    cands.popleft()
                j = cands[0] if cands else None
            if j is not None:
                self.link(i, j)
                progress = True
        return progress

    def backward(self) -> bool:
        progress = False
        while self.pending:
            a, b = self.pending.popleft()
            i, j = self.prod_a.get(a), self.prod_b.get(b)
            if (i is not None and j is not None and i not in self.match and j not in self.taken
                    and self.na[i].target == self.nb[j].target):
                self.link(i, j)
                progress = True
        return progress

    def same_name_same_target(self) -> None:
        self._by_name(same_target=True)

    def same_name(self) -> None:
        self._by_name(same_target=False)

    def _by_name(self, same_target: bool) -> None:
        for i, node in enumerate(self.na):
            j = self.by_name.get(node.name)
            if (i not in self.match and j is not None and j not in self.taken
                    and (not same_target or self.nb[j].target == node.target)):
                self.link(i, j)

    def same_args(self) -> None:
        index: dict[str, deque[int]] = {}
        for j in range(len(self.nb)):
            if j not in self.taken:
                index.setdefault(self.key_b[j][1], deque()).append(j)
        for i, node in enumerate(self.na):
            if i in self.match:
                continue
            cands = index.get(self.view_am.args(node))
            while cands and cands[0] in self.taken:
                cands.popleft()
            if cands:
                self.link(i, cands[0])


def _blob_line(name: str, data: bytes | None) -> str | None:
    if data is None:
        return None
    return f"{name}: {len(data)} bytes, sha256 {sha256_hex(data)[:16]}"


def _producers(nodes: list[schema.Node]) -> dict[str, int]:
    return {name: i for i, n in enumerate(nodes) for o in n.outputs for name in R.defined_names(o)}


def _pairs(xs: list[schema.Argument], ys: list[schema.Argument]) -> list[tuple[str, str]]:
    """Value names at the same positions of two argument lists."""
    out: list[tuple[str, str]] = []
    for x, y in zip(xs, ys, strict=False):
        out += zip(R.defined_names(x), R.defined_names(y), strict=False)
    return out


def _node_fields(x: schema.Node, y: schema.Node, view_am: R.GraphView, view_b: R.GraphView) -> list[str]:
    fields = []
    if x.name != y.name:
        fields.append("name")
    if x.target != y.target:
        fields.append("target")
    if view_am.args(x) != view_b.args(y):
        fields.append("args")
    outs_a = [view_am.defn(o, full=True) for o in x.outputs]
    if outs_a != [view_b.defn(o, full=True) for o in y.outputs]:
        fields.append("outputs")
    if _module_stack(x) != _module_stack(y):
        fields.append("nn_module_stack")
    if x.metadata.custom != y.metadata.custom:
        fields.append("custom")
    return fields


def _module_stack(n: schema.Node) -> list[tuple[str, str]]:
    return [(e.key, e.path) for e in n.metadata.nn_module_stack or ()]


# ---------------------------------------------------------------- pairing helpers


# What a spec binds, by union member; None pairs the spec by position within its kind.
_INPUT_KEY: dict[str, Callable[[object], str | None]] = {
    "user_input": lambda v: None,
    "parameter": lambda v: v.parameter_name,
    "buffer": lambda v: v.buffer_name,
    "tensor_constant": lambda v: v.tensor_constant_name,
    "custom_obj": lambda v: v.custom_obj_name,
    "constant_input": lambda v: v.name,
    "token": lambda v: None,
}
assert set(_INPUT_KEY) == set(schema.InputSpec.__struct_fields__), "diff: InputSpec members not covered"

_OUTPUT_KEY: dict[str, Callable[[object], str | None]] = {
    "user_output": lambda v: None,
    "loss_output": lambda v: None,
    "buffer_mutation": lambda v: v.buffer_name,
    "gradient_to_parameter": lambda v: v.parameter_name,
    "gradient_to_user_input": lambda v: v.user_input_name,
    "user_input_mutation": lambda v: v.user_input_name,
    "token": lambda v: None,
    "parameter_mutation": lambda v: v.parameter_name,
}
assert set(_OUTPUT_KEY) == set(schema.OutputSpec.__struct_fields__), "diff: OutputSpec members not covered"


def _input_key(spec: schema.InputSpec) -> str | None:
    return _INPUT_KEY[spec.kind](spec.value)


def _output_key(spec: schema.OutputSpec) -> str | None:
    return _OUTPUT_KEY[spec.kind](spec.value)


def _keyed(specs: Iterable, key_of: Callable) -> list[tuple[str, object]]:
    out, ordinal = [], {}
    for spec in specs:
        k = key_of(spec)
        if k is None:
            ordinal[spec.kind] = ordinal.get(spec.kind, -1) + 1
            k = str(ordinal[spec.kind])
        out.append((f"{spec.kind} {k}", spec))
    return out


def _spec_names(spec: schema.InputSpec) -> list[str]:
    v = spec.value
    if spec.kind == "user_input":
        return R.defined_names(v.arg)
    if spec.kind == "constant_input":
        return [v.name]
    return [v.arg.name]


def _pair(a: list[tuple], b: list[tuple]) -> list[tuple]:
    """(key, a_item | None, b_item | None) for the union of keys: B's order, removed ones
    placed after the key that preceded them in A."""
    da = dict(a)
    out = []
    for k, y in b:
        out.append((k, da.get(k), y))
    placed = {k for k, _ in b}
    for idx, (k, x) in enumerate(a):
        if k in placed:
            continue
        # Every earlier key of A is already placed: insert right after the previous one.
        pos = 0 if idx == 0 else 1 + next(n for n, e in enumerate(out) if e[0] == a[idx - 1][0])
        out.insert(pos, (k, x, None))
        placed.add(k)
    return out


def _sorted_items(d: dict) -> list[tuple]:
    return R.sorted_items(d)


def _renamer(vmap: dict[str, str]) -> Callable[[str], str]:
    # An unmatched name gets a marker no real name can equal, so it never matches by accident.
    return lambda n: vmap.get(n, "\x00unmatched " + n)


def _kv(d: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in R.sorted_items(d))


# ---------------------------------------------------------------- decoding payloads

ST = schema.ScalarType
_FORMATS: dict[schema.ScalarType, str] = {
    ST.BYTE: "B", ST.CHAR: "b", ST.SHORT: "h", ST.INT: "i", ST.LONG: "q", ST.HALF: "e",
    ST.FLOAT: "f", ST.DOUBLE: "d", ST.BOOL: "?", ST.UINT16: "H", ST.UINT32: "I", ST.UINT64: "Q",
    ST.BFLOAT16: "H",  # read as uint16 bit patterns, widened to float32 below
}


def _has_payload(t: schema.StoredTensor, w: schema.Weights) -> bool:
    return t.subclass is None and w.storages[t.storage].sha256 != ""


def _values(t: schema.StoredTensor, data: bytes) -> list | None:
    """The tensor's elements in row-major order, or None when its dtype is not decodable."""
    fmt = _FORMATS.get(t.dtype)
    if fmt is None:
        return None
    size = struct.calcsize(fmt)
    n_storage = len(data) // size
    numel = math.prod(t.sizes)
    if numel == 0:
        return []
    lo = t.storage_offset + sum((s - 1) * st for s, st in zip(t.sizes, t.strides, strict=True) if st < 0)
    hi = t.storage_offset + sum((s - 1) * st for s, st in zip(t.sizes, t.strides, strict=True) if st > 0)
    if lo < 0 or hi >= n_storage:
        raise MalformedArtifactError(
            f"tensor {R.DTYPE_ABBREV[t.dtype]}{list(t.sizes)} with strides {list(t.strides)} and "
            f"offset {t.storage_offset} reaches past its storage of {n_storage} elements. "
            "The artifact is damaged; re-save it."
        )
    flat = list(struct.unpack(f"<{n_storage}{fmt}", data[: n_storage * size]))
    if t.dtype == ST.BFLOAT16:
        flat = list(struct.unpack(f"<{n_storage}f", struct.pack(f"<{n_storage}I", *(h << 16 for h in flat))))
    if list(t.strides) == R.contiguous_strides(list(t.sizes)):
        return flat[t.storage_offset: t.storage_offset + numel]
    idx = [t.storage_offset]
    for s, st in zip(t.sizes, t.strides, strict=True):
        idx = [i + k * st for i in idx for k in range(s)]
    return [flat[i] for i in idx]
