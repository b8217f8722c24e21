"""Structural comparison of two ExportedPrograms (:func:`assert_programs_equal`).

``assert_programs_equal`` matches the two graphs structurally (anchored at the inputs, in order,
and at the outputs, then by op and arguments), so it holds across consistent renaming of nodes
and symbols and across reordering of independent nodes. It checks ops, arguments, names (through
the renaming, or exactly with ``exact_names=True``), tensor metas with symbolic shapes, the
signature, range constraints, the module call graph, selected node metadata, bit-equal weights
and their aliasing, and outputs on the example inputs.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable
from typing import Any

import sympy
import torch
import torch.fx
import torch.utils._pytree as pytree
from torch.export import ExportedProgram

from canonical.canonicalize import ASSERT_MESSAGE
from serde.core.expr import as_sympy
from serde.core.expr.guards import SourceKey, guards_from_code, input_paths, source_resolver
from serde.errors import SerializeError, UnsupportedConstructError

from .errors import ProgramMismatch
from .outputs import compare_outputs

__all__ = ["assert_programs_equal", "DEFAULT_METADATA"]

DEFAULT_METADATA = ("nn_module_stack", "module_types", "source_fn_stack", "torch_fn", "custom")


def assert_programs_equal(a: ExportedProgram, b: ExportedProgram, *, exact_names: bool = False,
                          metadata: Iterable[str] = DEFAULT_METADATA, inputs: Any = None,
                          run: bool = True, rtol: float | None = None, atol: float | None = None) -> None:
    """Raise ProgramMismatch if ``a`` and ``b`` differ (see the module docstring).

    Args:
        inputs: ``(args, kwargs)`` to run both programs on; default: ``a.example_inputs``.
        run: set False to skip running the programs.
    """
    c = _Comparer(exact_names, tuple(metadata))
    c.graphs(a.graph_module, b.graph_module, "graph")
    c.signature(a, b)
    c.range_constraints(a, b)
    c.guards(a, b)
    c.module_call_graph(a, b)
    c.tensors(a.state_dict, b.state_dict, "state_dict")
    c.tensors({k: v for k, v in a.constants.items() if isinstance(v, torch.Tensor)},
              {k: v for k, v in b.constants.items() if isinstance(v, torch.Tensor)}, "constants")
    c.custom_objects({k: v for k, v in a.constants.items() if not isinstance(v, torch.Tensor)},
                     {k: v for k, v in b.constants.items() if not isinstance(v, torch.Tensor)})
    if run:
        compare_outputs(a, b, inputs, rtol, atol)


# ---------------------------------------------------------------- structure


class _Comparer:
    def __init__(self, exact_names: bool, metadata: tuple[str, ...]) -> None:
        self.exact = exact_names
        self.metadata = metadata
        # Names and labels are scoped per graph: a subgraph's ``arg0`` has nothing to do with the
        # top graph's. Symbols are program-wide (one ShapeEnv).
        self.names: dict[str, str] = {}     # a name -> b name, in the current graph
        self._rev: dict[str, str] = {}      # b name -> a name, in the current graph
        self.symbols: dict[sympy.Symbol, sympy.Symbol] = {}
        self.labels: dict[tuple[str, str], str] = {}  # (field, torch_fn / source_fn_stack label) -> label
        self.module_keys: dict[str, str] = {}  # nn_module_stack keys, program-wide

    def fail(self, where: str, msg: str) -> None:
        raise ProgramMismatch(f"{where}: {msg}")

    # -- names and symbols

    def name(self, a: str, b: str, where: str) -> None:
        if self.exact and a != b:
            self.fail(where, f"name {a!r} != {b!r}")
        prev = self.names.get(a)
        if prev is None:
            other = self._rev.get(b)
            if other is not None:
                self.fail(where, f"{a!r} maps to {b!r}, which {other!r} already maps to")
            self.names[a] = b
            self._rev[b] = a
        elif prev != b:
            self.fail(where, f"{a!r} was renamed {prev!r} before, now {b!r}")

    def expr(self, a: Any, b: Any, where: str) -> None:
        ea, eb = as_sympy(a), as_sympy(b)
        if isinstance(ea, sympy.Symbol) and isinstance(eb, sympy.Symbol) and ea not in self.symbols:
            if self.exact and ea.name != eb.name:
                self.fail(where, f"symbol {ea} != {eb}")
            self.symbols[ea] = eb
        unmapped = [s for s in ea.free_symbols if s not in self.symbols]
        fresh = [s for s in getattr(eb, "free_symbols", ()) if s not in self.symbols.values()]
        if len(unmapped) == 1 and len(fresh) == 1:
            # e.g. a derived dim 2*s40 vs 2*s0: the lone new symbol on each side must correspond.
            if self.exact and unmapped[0].name != fresh[0].name:
                self.fail(where, f"symbol {unmapped[0]} != {fresh[0]}")
            self.symbols[unmapped[0]] = fresh[0]
        for s in ea.free_symbols:
            if s not in self.symbols:
                self.fail(where, f"symbol {s} of {ea} has no counterpart yet (compared with {eb})")
        mapped = ea.xreplace(self.symbols)
        if mapped == eb:
            return
        if isinstance(mapped, sympy.Expr) and isinstance(eb, sympy.Expr) and sympy.simplify(mapped - eb) == 0:
            return
        if mapped.is_Float and eb.is_Float and mapped != mapped and eb != eb:  # both nan
            return
        self.fail(where, f"symbolic value {ea} (renamed: {mapped}) != {eb}")

    # -- values

    def val(self, a: Any, b: Any, where: str) -> None:
        if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
            if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
                self.fail(where, f"value {type(a).__name__} != {type(b).__name__}")
            for what in ("dtype", "device", "requires_grad", "layout"):
                if getattr(a, what) != getattr(b, what):
                    self.fail(where, f"{what} {getattr(a, what)} != {getattr(b, what)}")
            if a.dim() != b.dim():
                self.fail(where, f"rank {a.dim()} != {b.dim()}")
            for i, (x, y) in enumerate(zip(a.shape, b.shape, strict=True)):
                self.expr(x, y, f"{where}.sizes[{i}]")
            for i, (x, y) in enumerate(zip(a.stride(), b.stride(), strict=True)):
                self.expr(x, y, f"{where}.strides[{i}]")
            self.expr(a.storage_offset(), b.storage_offset(), f"{where}.storage_offset")
        elif isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
            if len(a) != len(b):
                self.fail(where, f"{len(a)} values != {len(b)}")
            for i, (x, y) in enumerate(zip(a, b, strict=True)):
                self.val(x, y, f"{where}[{i}]")
        elif isinstance(a, (torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool)) and not isinstance(
                a, torch.Tensor):
            self.expr(a, b, where)
        elif hasattr(a, "class_fqn"):
            if a.class_fqn != getattr(b, "class_fqn", None):
                self.fail(where, f"custom object class {a.class_fqn} != {getattr(b, 'class_fqn', None)}")
        elif a != b:
            self.fail(where, f"value {a!r} != {b!r}")

    def arg(self, a: Any, b: Any, where: str, todo: list) -> None:
        if isinstance(a, torch.fx.Node) or isinstance(b, torch.fx.Node):
            if not (isinstance(a, torch.fx.Node) and isinstance(b, torch.fx.Node)):
                self.fail(where, f"argument {a!r} != {b!r}")
            todo.append((a, b, where))
        elif isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
            if len(a) != len(b):
                self.fail(where, f"list of {len(a)} != list of {len(b)}")
            for i, (x, y) in enumerate(zip(a, b, strict=True)):
                self.arg(x, y, f"{where}[{i}]", todo)
        elif isinstance(a, dict) and isinstance(b, dict):
            # Artifacts store str-keyed maps with sorted keys, so only the key set must agree.
            if sorted(a) != sorted(b):
                self.fail(where, f"keys {sorted(a)} != {sorted(b)}")
            for k in a:
                self.arg(a[k], b[k], f"{where}[{k!r}]", todo)
        elif isinstance(a, float) and isinstance(b, float):
            if not (a == b or (a != a and b != b)) or str(a) != str(b):
                self.fail(where, f"{a!r} != {b!r}")
        elif isinstance(a, str) and isinstance(b, str) and ASSERT_MESSAGE.fullmatch(a) and ASSERT_MESSAGE.fullmatch(b):
            pass  # the names in torch's assert message are the program's own: the asserted node is compared
        elif type(a) is not type(b) or a != b:
            self.fail(where, f"argument {a!r} ({type(a).__name__}) != {b!r} ({type(b).__name__})")

    # -- graphs

    def graphs(self, ga: torch.fx.GraphModule, gb: torch.fx.GraphModule, where: str) -> None:
        if where == "graph":  # the top graph's scope stays for the signature and module call graph
            self._graph(ga, gb, where)
            return
        saved = self.names, self._rev, self.labels
        self.names, self._rev, self.labels = {}, {}, {}
        try:
            self._graph(ga, gb, where)
        finally:
            self.names, self._rev, self.labels = saved

    def _graph(self, ga: torch.fx.GraphModule, gb: torch.fx.GraphModule, where: str) -> None:
        pa = [n for n in ga.graph.nodes if n.op == "placeholder"]
        pb = [n for n in gb.graph.nodes if n.op == "placeholder"]
        if len(pa) != len(pb):
            self.fail(where, f"{len(pa)} inputs != {len(pb)}")
        pairs: dict[torch.fx.Node, torch.fx.Node] = {}
        todo: list = [(x, y, f"{where}.inputs[{i}]") for i, (x, y) in enumerate(zip(pa, pb, strict=True))]
        oa, ob = ga.graph.output_node(), gb.graph.output_node()
        self.arg(oa.args, ob.args, f"{where}.outputs", todo)
        self._drain(ga, gb, pairs, todo, where)
        # Nodes not reachable from the outputs (in-place updates, asserts, dead code) end in sinks:
        # pair the sinks by the structure of everything they depend on, then drain from each pair.
        # (Subgraph get_attr nodes pair up with the op that uses them.)
        sinks_a, sinks_b = _sinks(ga, set(pairs)), _sinks(gb, set(pairs.values()))
        ha, hb = _structure_hashes(ga), _structure_hashes(gb)
        groups: dict[int, tuple[list, list]] = {}
        for n in sinks_a:
            groups.setdefault(ha[n], ([], []))[0].append(n)
        for m in sinks_b:
            groups.setdefault(hb[m], ([], []))[1].append(m)
        for xs, ys in groups.values():
            for n in xs:
                # Same structure; among those, the one whose inputs already pair with n's inputs.
                paired_b = {v: k for k, v in pairs.items()}
                m = next((m for m in ys if m not in paired_b and _consistent(n, m, pairs, paired_b)), None)
                if m is not None and n not in pairs:
                    todo.append((n, m, f"{where}.nodes[{n.name!r}]"))
                    self._drain(ga, gb, pairs, todo, where)
        live_a = [n for n in ga.graph.nodes if n not in pairs and n.op not in ("output", "get_attr")
                  and not _dead_getitem(n)]
        rest_b = [n for n in gb.graph.nodes if n not in pairs.values() and n.op not in ("output", "get_attr")
                  and not _dead_getitem(n)]
        if live_a or rest_b:
            self.fail(where, f"unmatched nodes: only in first {[n.name for n in live_a]}, "
                             f"only in second {[n.name for n in rest_b]}")

    def _drain(self, ga, gb, pairs: dict, todo: list, where: str) -> None:
        while todo:
            x, y, w = todo.pop()
            prev = pairs.get(x)
            if prev is not None:
                if prev is not y:
                    self.fail(w, f"node {x.name!r} pairs with both {prev.name!r} and {y.name!r}")
                continue
            pairs[x] = y
            w = f"{where}.nodes[{x.name!r}]"
            if x.op != y.op or (x.op != "get_attr" and x.target != y.target and x.op != "placeholder"):
                self.fail(w, f"{x.op} {x.target} != {y.op} {y.target}")
            self.name(x.name, y.name, w)
            self.val(x.meta.get("val"), y.meta.get("val"), f"{w}.val")
            if x.op == "get_attr":
                self.graphs(getattr(ga, x.target), getattr(gb, y.target), f"{w}.subgraph")
                continue
            self.arg(x.args, y.args, f"{w}.args", todo)
            self.arg(x.kwargs, y.kwargs, f"{w}.kwargs", todo)
            ua, ub = x.meta.get("unbacked_bindings"), y.meta.get("unbacked_bindings")
            if ua or ub:
                self.unbacked_bindings(ua or {}, ub or {}, y.meta.get("val"), f"{w}.meta['unbacked_bindings']")
            if x.op == "call_function" and x.target is not operator.getitem:
                for key in self.metadata:
                    self.meta(x, y, key, f"{w}.meta[{key!r}]")

    def unbacked_bindings(self, a: dict, b: dict, val_b: Any, where: str) -> None:
        """Every binding of ``a`` is in ``b`` (same key path, corresponding symbol).

        ``b`` may bind more, where its value really holds that symbol bare at that path: torch drops
        some bindings (e.g. inside cond branches after run_decompositions) that a load rebuilds.
        """
        from torch.fx.experimental.symbolic_shapes import _free_unbacked_symbols_with_path

        pb = {pytree.keystr(path): sym for sym, path in b.items()}
        for sa, path in a.items():
            key = pytree.keystr(path)
            sb = pb.pop(key, None)
            if sb is None:
                self.fail(where, f"{sa} bound at {key} in the first program, not in the second: {a} != {b}")
            mapped = self.symbols.get(sa)
            if mapped is None:
                if sb in self.symbols.values():
                    self.fail(where, f"{sa} at {key} pairs with {sb}, which another symbol already maps to")
                if self.exact and sa.name != sb.name:
                    self.fail(where, f"symbol {sa} != {sb}")
                self.symbols[sa] = sb
            elif mapped != sb:
                self.fail(where, f"{sa} (renamed {mapped}) is bound at {key}, but {sb} is bound there")
        if pb:
            found = _free_unbacked_symbols_with_path(val_b, (), pending=set(pb.values()), simplify=True)
            for key, sb in pb.items():
                if key not in {pytree.keystr(p) for s, p in found.items() if s == sb}:
                    self.fail(where, f"second program binds {sb} at {key}, where its value does not hold it")

    def meta(self, x: torch.fx.Node, y: torch.fx.Node, key: str, where: str) -> None:
        ma, mb = _meta(x, key), _meta(y, key)
        if key in ("nn_module_stack", "module_types") and ma is not None and mb is not None:
            # Strict export keys frames by id(module), which differs per process; canonical
            # artifacts rewrite such keys, so keys compare through a consistent renaming.
            if len(ma) != len(mb) or any(p[1] != q[1] for p, q in zip(ma, mb, strict=True)):
                self.fail(where, f"{dict(ma)!r} != {dict(mb)!r}")
            for (ka, _), (kb, _) in zip(ma, mb, strict=True):
                if self.exact and ka != kb:
                    self.fail(where, f"key {ka!r} != {kb!r}")
                prev = self.module_keys.setdefault(ka, kb)
                if prev != kb:
                    self.fail(where, f"module key {ka!r} was renamed {prev!r} before, now {kb!r}")
            return
        if key in ("torch_fn", "source_fn_stack") and ma is not None and mb is not None:
            # Their first fields are trace-time labels (per-process call counters such as
            # "linear_3"); canonical artifacts relabel them consistently, so compare through a mapping.
            pairs = [(ma, mb)] if key == "torch_fn" else list(zip(ma, mb, strict=False))
            if len(ma) != len(mb) or any(p[1] != q[1] for p, q in pairs):
                self.fail(where, f"{ma!r} != {mb!r}")
            for p, q in pairs:
                if self.exact and p[0] != q[0]:
                    self.fail(where, f"label {p[0]!r} != {q[0]!r}")
                prev = self.labels.setdefault((key, p[0]), q[0])
                if prev != q[0]:
                    self.fail(where, f"label {p[0]!r} was relabelled {prev!r} before, now {q[0]!r}")
            return
        if ma != mb:
            self.fail(where, f"{ma!r} != {mb!r}")

    # -- program-level

    def _spec_arg_name(self, a: Any) -> str | None:
        return getattr(a, "name", None)

    def signature(self, a: ExportedProgram, b: ExportedProgram) -> None:
        for what in ("input_specs", "output_specs"):
            sa, sb = getattr(a.graph_signature, what), getattr(b.graph_signature, what)
            if len(sa) != len(sb):
                self.fail(f"signature.{what}", f"{len(sa)} specs != {len(sb)}")
            for i, (x, y) in enumerate(zip(sa, sb, strict=True)):
                w = f"signature.{what}[{i}]"
                if x.kind != y.kind or x.target != y.target or getattr(x, "persistent", None) != getattr(
                        y, "persistent", None):
                    self.fail(w, f"{x} != {y}")
                if type(x.arg) is not type(y.arg):
                    self.fail(w, f"argument {x.arg} != {y.arg}")
                na, nb = self._spec_arg_name(x.arg), self._spec_arg_name(y.arg)
                if hasattr(x.arg, "value"):
                    if x.arg.value != y.arg.value:
                        self.fail(w, f"constant {x.arg.value!r} != {y.arg.value!r}")
                    if na and nb:
                        self.name(na, nb, w)
                elif na is not None:
                    self.name(na, nb, w)

    def range_constraints(self, a: ExportedProgram, b: ExportedProgram) -> None:
        rb = {str(k): v for k, v in b.range_constraints.items()}
        if len(a.range_constraints) != len(b.range_constraints):
            self.fail("range_constraints", f"{dict(a.range_constraints)} != {dict(b.range_constraints)}")
        matched: set[str] = set()
        orphans_a = []
        for k, v in a.range_constraints.items():
            if any(s not in self.symbols for s in k.free_symbols):
                orphans_a.append((k, v))
                continue
            key = str(k.xreplace(self.symbols))
            if key not in rb:
                self.fail("range_constraints", f"{k} (renamed {key}) missing in second: {sorted(rb)}")
            if (v.lower, v.upper) != (rb[key].lower, rb[key].upper):
                self.fail(f"range_constraints[{k}]", f"{v} != {rb[key]}")
            matched.add(key)
        # Symbols no graph value mentions any more (e.g. left behind by run_decompositions) cannot
        # be paired through the graph: compare their ranges as a multiset, per kind of symbol.
        def orphan_key(k: Any, v: Any) -> tuple:
            name = k.name if self.exact or not isinstance(k, sympy.Symbol) else k.name.rstrip("0123456789")
            return (name, str(v.lower), str(v.upper))
        oa = sorted(orphan_key(k, v) for k, v in orphans_a)
        ob = sorted(orphan_key(k, v) for k, v in b.range_constraints.items() if str(k) not in matched)
        if oa != ob:
            self.fail("range_constraints", f"constraints on symbols not in the graph differ: {oa} != {ob}")

    def guards(self, a: ExportedProgram, b: ExportedProgram) -> None:
        # Compared as trees: a loaded program's text is printed by us, not torch, so it may differ
        # in spacing and parentheses while meaning the same checks.
        ga, gb = (list(getattr(p, "_guards_code", None) or []) for p in (a, b))
        try:
            ta, tb = (guards_from_code(g, resolve=_stored_sources(p)) for g, p in ((ga, a), (gb, b)))
        except UnsupportedConstructError:
            ta, tb = sorted(set(ga)), sorted(set(gb))
        if ta != tb:
            self.fail("guards", f"{sorted(ga)} != {sorted(gb)}")

    def module_call_graph(self, a: ExportedProgram, b: ExportedProgram) -> None:
        from serde.bridge.treespec import serialize_treespec

        ea, eb = a.module_call_graph, b.module_call_graph
        if [e.fqn for e in ea] != [e.fqn for e in eb]:
            self.fail("module_call_graph", f"{[e.fqn for e in ea]} != {[e.fqn for e in eb]}")
        for x, y in zip(ea, eb, strict=True):
            w = f"module_call_graph[{x.fqn!r}]"
            if (x.signature is None) != (y.signature is None):
                self.fail(w, "signature present in only one program")
            if x.signature is None:
                continue
            sx, sy = x.signature, y.signature
            for what in ("inputs", "outputs"):
                la, lb = getattr(sx, what), getattr(sy, what)
                if len(la) != len(lb):
                    self.fail(f"{w}.{what}", f"{len(la)} != {len(lb)}")
                for i, (p, q) in enumerate(zip(la, lb, strict=True)):
                    if type(p) is not type(q):
                        self.fail(f"{w}.{what}[{i}]", f"{p} != {q}")
                    if hasattr(p, "value"):
                        if p.value != q.value:
                            self.fail(f"{w}.{what}[{i}]", f"{p} != {q}")
                    elif p.name in self.names or self.exact:
                        self.name(p.name, q.name, f"{w}.{what}[{i}]")
            for what in ("in_spec", "out_spec"):
                if serialize_treespec(getattr(sx, what)) != serialize_treespec(getattr(sy, what)):
                    self.fail(f"{w}.{what}", f"{getattr(sx, what)} != {getattr(sy, what)}")
            if sx.forward_arg_names != sy.forward_arg_names:
                self.fail(f"{w}.forward_arg_names", f"{sx.forward_arg_names} != {sy.forward_arg_names}")

    def custom_objects(self, a: dict, b: dict) -> None:
        """Same names and classes; same state (their registered encoders' bytes) when encodable."""
        if sorted(a) != sorted(b):
            self.fail("constants", f"custom objects {sorted(a)} != {sorted(b)}")
        for k in a:
            w = f"constants[{k!r}]"
            (fa, da), (fb, db) = _custom_object_state(a[k], w), _custom_object_state(b[k], w)
            if fa != fb:
                self.fail(w, f"custom object class {fa} != {fb}")
            if da != db:
                self.fail(w, f"custom object state differs: {da!r:.200} != {db!r:.200}")

    def tensors(self, a: dict, b: dict, where: str) -> None:
        if sorted(a) != sorted(b):
            self.fail(where, f"names {sorted(a)} != {sorted(b)}")
        for k in a:
            x, y = a[k], b[k]
            w = f"{where}[{k!r}]"
            if (x.dtype, tuple(x.shape), x.stride(), x.storage_offset(), x.requires_grad) != (
                    y.dtype, tuple(y.shape), y.stride(), y.storage_offset(), y.requires_grad):
                self.fail(w, f"{x.dtype}{list(x.shape)} stride {x.stride()} offset {x.storage_offset()} "
                             f"requires_grad {x.requires_grad} != {y.dtype}{list(y.shape)} stride {y.stride()} "
                             f"offset {y.storage_offset()} requires_grad {y.requires_grad}")
            if isinstance(x, torch.nn.Parameter) != isinstance(y, torch.nn.Parameter):
                self.fail(w, "nn.Parameter in only one program")
            self.tensor_contents(x, y, w)
        # Aliasing: names that share storage in `a` must share storage in `b`, and only those
        # (a subclass shares the storages of its inner tensors).
        ka = _alias_groups(a)
        kb = _alias_groups(b)
        if ka != kb:
            self.fail(where, f"storage sharing differs: {sorted(ka)} != {sorted(kb)}")


    def tensor_contents(self, x: torch.Tensor, y: torch.Tensor, where: str) -> None:
        """Bits of tensors with data; kind and device of those without; subclasses part by part."""
        kx, ky = _tensor_kind(x), _tensor_kind(y)
        if kx != ky:
            self.fail(where, f"{kx} != {ky}")
        if kx.startswith("subclass "):
            (ax, cx), (ay, cy) = x.__tensor_flatten__(), y.__tensor_flatten__()
            if list(ax) != list(ay) or cx != cy:
                self.fail(where, f"flattened as {ax}, {cx!r} != {ay}, {cy!r}")
            for attr in ax:
                ix, iy = getattr(x, attr), getattr(y, attr)
                if (ix.dtype, tuple(ix.shape), ix.stride(), ix.storage_offset()) != (
                        iy.dtype, tuple(iy.shape), iy.stride(), iy.storage_offset()):
                    self.fail(f"{where}.{attr}", f"{ix.dtype}{list(ix.shape)} != {iy.dtype}{list(iy.shape)}")
                self.tensor_contents(ix, iy, f"{where}.{attr}")
        elif kx == "tensor":
            if not _bits_equal(x, y):
                self.fail(where, "tensor bits differ")
        elif x.device != y.device:
            self.fail(where, f"device {x.device} != {y.device}")


def _tensor_kind(t: torch.Tensor) -> str:
    from torch._subclasses.fake_tensor import is_fake

    from serde.bridge.subclasses import is_traceable_subclass

    if is_traceable_subclass(t):
        return f"subclass {_type_name(type(t))}"
    return "meta" if t.device.type == "meta" else "fake" if is_fake(t) else "tensor"


def _storage_leaves(t: torch.Tensor) -> list[torch.Tensor]:
    from serde.bridge.subclasses import is_traceable_subclass

    if not is_traceable_subclass(t):
        return [t]
    return [leaf for attr in t.__tensor_flatten__()[0] for leaf in _storage_leaves(getattr(t, attr))]


def _custom_object_state(obj: Any, where: str) -> tuple[str | None, bytes | None]:
    """(class name, encoded bytes) of a custom object; bytes only when a codec is registered."""
    from serde.bridge.custom_objects import class_fqn_of, encode_constants, registered_classes

    fqn = class_fqn_of(obj)
    if fqn is None or fqn not in registered_classes():
        return fqn, None
    t = encode_constants({where: obj})[where]
    return fqn, bytes(t.tolist())


def _sinks(gm: torch.fx.GraphModule, paired: set) -> list[torch.fx.Node]:
    """Unpaired nodes nothing (but unused getitems) consumes, in graph order."""
    return [n for n in gm.graph.nodes if n not in paired and n.op not in ("output", "get_attr", "placeholder")
            and not _dead_getitem(n) and all(_dead_getitem(u) for u in n.users)]


def _consistent(n: torch.fx.Node, m: torch.fx.Node, pairs: dict, paired_b: dict) -> bool:
    """Whether pairing n with m agrees with the pairs made so far (input by input)."""
    def nodes(v: Any) -> list:
        out: list = []
        torch.fx.node.map_arg(v, out.append)
        return out

    xs, ys = nodes((n.args, n.kwargs)), nodes((m.args, m.kwargs))
    if len(xs) != len(ys):
        return False
    for x, y in zip(xs, ys, strict=True):
        if (x in pairs and pairs[x] is not y) or (y in paired_b and paired_b[y] is not x):
            return False
    return True


def _structure_hashes(gm: torch.fx.GraphModule) -> dict[torch.fx.Node, int]:
    """A hash per node of its op, constants and (recursively) inputs; inputs count by position."""
    out: dict[torch.fx.Node, int] = {}
    index = 0

    def norm(v: Any) -> Any:
        if isinstance(v, torch.fx.Node):
            return ("node", out[v])
        if isinstance(v, (list, tuple)):
            return tuple(norm(x) for x in v)
        if isinstance(v, dict):
            return tuple(sorted((str(k), norm(x)) for k, x in v.items()))
        if isinstance(v, str) and ASSERT_MESSAGE.fullmatch(v):
            return "assert message"  # names the program's own symbols and nodes
        return repr(v)

    for n in gm.graph.nodes:
        if n.op == "placeholder":
            out[n] = hash(("placeholder", index))
            index += 1
        elif n.op == "get_attr":
            out[n] = hash("get_attr")
        else:
            out[n] = hash((n.op, str(n.target), norm(n.args), norm(n.kwargs)))
    return out


def _dead_getitem(n: torch.fx.Node) -> bool:
    return n.op == "call_function" and n.target is operator.getitem and not n.users


def _meta(n: torch.fx.Node, key: str) -> Any:
    if key == "module_types":  # the type half of nn_module_stack (keys and paths are the other)
        stack = n.meta.get("nn_module_stack")
        return None if stack is None else [(k, _type_name(t)) for k, (_, t) in stack.items()]
    v = n.meta.get(key)
    if v is None:
        return None
    if key == "nn_module_stack":
        return [(k, p) for k, (p, _) in v.items()]
    if key == "source_fn_stack":
        return [(name, _type_name(fn)) for name, fn in v]
    if key == "torch_fn":
        return tuple(v)
    return v


def _type_name(t: Any) -> str:
    if isinstance(t, str):
        return t
    return f"{getattr(t, '__module__', '')}.{getattr(t, '__qualname__', getattr(t, '__name__', str(t)))}"


def _bits_equal(x: torch.Tensor, y: torch.Tensor) -> bool:
    x, y = x.detach(), y.detach()
    if x.numel() == 0:
        return y.numel() == 0
    if x.dtype == torch.bool:
        return torch.equal(x, y)
    # Compare raw bytes element-wise so that nan payloads and -0.0 count.
    bx = x.reshape(-1).contiguous().view(torch.uint8)
    by = y.reshape(-1).contiguous().view(torch.uint8)
    return torch.equal(bx, by)


def _alias_groups(d: dict[str, torch.Tensor]) -> set[tuple[str, ...]]:
    groups: dict[int, set[str]] = {}
    for k, t in d.items():
        for leaf in _storage_leaves(t):
            groups.setdefault(leaf.untyped_storage()._cdata, set()).add(k)
    return {tuple(sorted(v)) for v in groups.values() if len(v) > 1}


def _stored_sources(ep: ExportedProgram) -> Callable[[SourceKey], SourceKey] | None:
    """How saving stores the sources of ``ep``'s guards (strict export's ``L['flat_args'][i]`` as
    the input's path, ``L['xs'][1]`` as ``L['xs_1']``...), the form ep.module() checks; None when
    ``ep`` has no root call signature to read input paths from."""
    from serde.bridge.program import with_registered_paths
    from serde.bridge.treespec import serialize_treespec

    sig = ep.module_call_graph[0].signature if ep.module_call_graph else None
    if sig is None:
        return None
    try:
        flat = input_paths(serialize_treespec(sig.in_spec), list(sig.forward_arg_names or []))
    except SerializeError:  # an input structure save refuses anyway: compare the text as it is
        return None
    return source_resolver(with_registered_paths(flat, list(sig.forward_arg_names or []), ep.example_inputs))
