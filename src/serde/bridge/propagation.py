"""Run a loaded program's operators again on its fake values, and compare with what the file stores.

The graph reader gives every node the output metadata the artifact stores (dtype, sizes), and the
load-time checks prove those fit each other: a call binds to its operator, operands fit subgraphs,
weights fit placeholders. They do not prove that an operator computes what the file says it does:
a hostile or damaged file can store ``aten.relu`` where tracing recorded ``aten.sum`` with the sum's
0-dim result, and the program loads, then fails (or computes other shapes) when called. Running
each operator on the fake inputs the graph holds, as tracing did, and comparing is the only check
that covers this; it costs more than the rest of a load (with symbolic sizes, each meta kernel's
size arithmetic is sympy work), so ``serde.load`` does it on request (``propagate=True``).

What is compared: the number of results, each tensor's dtype, rank and sizes (symbolic sizes by
expression, or, when the two expressions differ in form, by their example values), and numbers'
kinds and values (by expression or example value: ``sym_size`` of another tensor); the symbolic
helpers' results (``operator.pow`` on a size, ``torch.sym_max``, ...) by
expression or example value too. Sizes that hold an unbacked symbol (a data-dependent size) are
left alone: running the operator names a fresh one. A lifted ``torch.Generator`` is replaced by a
fresh one (it decides values, not metadata). A call torch's own fake kernel refuses with its
operand check (an embedding whose indices are floats) is refused too: tracing ran that kernel on
these values, so the file stores a call that tracing never made, and the program cannot run.
Skipped, not refused: calls that fail on fake tensors for other reasons (outside tracing some
operators cannot run on them: data-dependent outputs, a constant's data, custom operators' fake
kernels; see ``_refuses``), calls taking other custom objects, and subgraphs that run under
autocast (which picks the dtypes).
"""

from __future__ import annotations

import re
from typing import Any

import sympy
import torch
import torch.fx
import torch.utils._pytree as pytree
from torch._subclasses.fake_tensor import FakeTensor, unset_fake_temporarily
from torch.export import ExportedProgram
from torch.export.graph_signature import CustomObjArgument
from torch.fx.experimental import symbolic_shapes

from .checks import number_kind
from .checks.kernels import as_layout, dtype_refusal, judged
from .custom_objects import GENERATOR_CLASS
from .errors import InconsistentProgramError
from .operators import SYMBOLIC_TARGETS

__all__ = ["check_propagation", "contract_failure"]

_FIX = "the artifact is damaged or was edited after saving: re-save the program with pt2serde"


def check_propagation(ep: ExportedProgram) -> int:
    """Re-run every operator call of ``ep`` (and of its subgraphs) on the stored fake values.

    Returns the number of calls compared.

    Raises:
        InconsistentProgramError: an operator computes results other than the ones the node stores.
    """
    mode = _fake_mode(ep.graph_module)
    if mode is None:
        return 0
    compared = 0
    with mode:
        for prefix, gm in _graphs(ep.graph_module):
            for node in gm.graph.nodes:
                if node.op != "call_function":
                    continue
                if isinstance(node.target, torch._ops.OpOverload):
                    compared += _check_node(node, f"{prefix}nodes[{node.name!r}]")
                elif node.target in _SYMBOLIC_FNS:
                    compared += _check_symbolic(node, f"{prefix}nodes[{node.name!r}]")
    return compared


# The symbolic helpers (operator.add on sizes, torch.sym_max, ...), getitem aside: each computes a
# number from the stored ones, which must be the number the node stores.
_SYMBOLIC_FNS = frozenset(fn for name, fn in SYMBOLIC_TARGETS.items() if name != "_operator.getitem")


# Subgraphs these higher-order ops run under a context that changes what operators compute
# (autocast picks other dtypes): compared outside it, they would differ for no fault of the file.
_CONTEXT_HOPS = frozenset({"wrap_with_autocast"})


def _fake_mode(gm: torch.fx.GraphModule) -> Any:
    for node in gm.graph.nodes:
        v = node.meta.get("val")
        if isinstance(v, FakeTensor):
            return v.fake_mode
    return None


def _graphs(root: torch.fx.GraphModule) -> list[tuple[str, torch.fx.GraphModule]]:
    """Every graph of the program with the field path of its nodes, but those run under a context."""
    out = []
    todo = [("", root)]
    while todo:
        name, gm = todo.pop()
        out.append((f"graph.{name}." if name else "graph.", gm))
        in_context = set()
        for node in gm.graph.nodes:
            if node.op == "call_function" and isinstance(node.target, torch._ops.HigherOrderOperator) \
                    and node.target.name() in _CONTEXT_HOPS:
                in_context.update(a.target for a in node.args if isinstance(a, torch.fx.Node) and a.op == "get_attr")
        for sub, m in gm.named_children():
            if isinstance(m, torch.fx.GraphModule) and sub not in in_context:
                todo.append((f"{name}.{sub}" if name else sub, m))
    return out


def _stored(a: Any) -> Any:
    return a.meta.get("val") if isinstance(a, torch.fx.Node) else a


def _check_node(node: torch.fx.Node, where: str) -> int:
    op = node.target
    args = torch.fx.node.map_arg(node.args, _stored)
    kwargs = torch.fx.node.map_arg(node.kwargs, _stored)
    objects = [v for v in pytree.tree_leaves((args, kwargs)) if isinstance(v, CustomObjArgument)]
    if any(v.class_fqn != GENERATOR_CLASS for v in objects):
        return 0  # a custom object's placeholder holds its description, not an object to call with
    if objects:
        # A generator decides only the values an operator draws, never their sizes or dtype: a
        # fresh one serves to compute the metadata (a random op's size argument must still give
        # the result the node stores).
        args, kwargs = pytree.tree_map_only(CustomObjArgument, lambda _: torch.Generator(), (args, kwargs))
    if op._schema.is_mutable:
        # Run on copies: an in-place operator would change the stored values' metadata.
        args, kwargs = pytree.tree_map_only(torch.Tensor, lambda t: t.clone(), (args, kwargs))
    # What the CPU kernel refuses of the operands' dtypes, which the fake kernel below takes: the
    # default load, which applied the other kernel rules, leaves this probe to the propagation (it
    # costs a kernel call per signature).
    declared = _declared_layout(op, args, kwargs)
    stored = node.meta.get("val")
    if declared is not None and isinstance(stored, torch.Tensor) and stored.layout != declared:
        # (no fake kernel makes an mkldnn tensor: the call below could not say so)
        raise InconsistentProgramError(
            f"{where}: {op} makes a tensor of layout {declared} (its argument 'layout'), the node stores a "
            f"{stored.layout} tensor; {_FIX}")
    concrete = _on_meta((args, kwargs)) if judged(op, probe=True) else None
    bad = dtype_refusal(op, *concrete) if concrete is not None else None
    if bad is not None:
        raise InconsistentProgramError(f"{where}: {bad}; {_FIX}")
    try:
        got = op(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 -- see _refuses
        if _refuses(e, op, args, kwargs):
            raise InconsistentProgramError(
                f"{where}: {op} refuses the operands the program stores ({_operands(args, kwargs)}): "
                f"{_first_line(e)}; {_FIX}") from None
        return 0
    why = _differs(got, node.meta.get("val"))
    if why:
        raise InconsistentProgramError(f"{where}: {op} computes {why}; {_FIX}")
    return 1


def _declared_layout(op: Any, args: Any, kwargs: Any) -> Any:
    """The ``layout`` argument of a call, when it names one: the layout of the tensor it makes."""
    at = _LAYOUT_AT.get(op)
    if at is None:
        at = _LAYOUT_AT[op] = next((i for i, a in enumerate(op._schema.arguments) if a.name == "layout"), -1)
    if at < 0:
        return None
    return as_layout(kwargs.get("layout", args[at] if at < len(args) else None))


_LAYOUT_AT: dict[Any, int] = {}


def _check_symbolic(node: torch.fx.Node, where: str) -> int:
    args = torch.fx.node.map_arg(node.args, _stored)
    kwargs = torch.fx.node.map_arg(node.kwargs, _stored)
    try:
        got = node.target(*args, **kwargs)
    except Exception:  # noqa: BLE001 -- as for operators: a failure here is not a verdict
        return 0
    stored = node.meta.get("val")
    if not _same_number(got, stored):
        raise InconsistentProgramError(
            f"{where}: {node.name} computes {_number_text(got)}, the node stores {_number_text(stored)}; {_FIX}")
    return 1


def _same_number(a: Any, b: Any) -> bool:
    """Whether two numbers are the same, as far as the stored example values can tell."""
    if number_kind(a) != number_kind(b):
        return False
    ea = a.node.expr if isinstance(a, (torch.SymInt, torch.SymFloat, torch.SymBool)) else a
    eb = b.node.expr if isinstance(b, (torch.SymInt, torch.SymFloat, torch.SymBool)) else b
    if ea == eb or (isinstance(ea, float) and isinstance(eb, float) and ea != ea and eb != eb):
        return True
    if any(isinstance(e, sympy.Basic) and symbolic_shapes.free_unbacked_symbols(e) for e in (ea, eb)):
        return True  # a data-dependent value: nothing stored to compare with
    ha, hb = _number_hint(a), _number_hint(b)
    return ha is None or hb is None or ha == hb


def _number_hint(v: Any) -> Any:
    if not isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return v
    if v.node.has_hint():
        return v.node.hint
    if isinstance(v, torch.SymInt):  # a size a meta kernel computed: its value at the example sizes
        try:
            return v.node.shape_env.size_hint(v.node.expr, allow_none=True)
        except Exception:  # noqa: BLE001 -- no example value to compare
            return None
    if isinstance(v, torch.SymBool):  # a condition torch kept no example value of: its value at the example sizes
        decided = v.node.expr.xreplace(v.node.shape_env.backed_var_to_val)
        return bool(decided) if decided in (sympy.true, sympy.false) else None
    return None


def _number_text(v: Any) -> str:
    hint = _number_hint(v)
    shown = f"{v.node.expr} (example value {hint})" if hint is not v and hint is not None else str(v)
    return f"the {number_kind(v) or type(v).__name__} {shown}"


def _differs(got: Any, stored: Any) -> str | None:
    """How the computed result differs from the stored one, or None."""
    if isinstance(got, (tuple, list)):
        if not isinstance(stored, (tuple, list)):
            return f"{len(got)} results, the node stores {_show(stored)}"
        if len(got) != len(stored):
            return f"{len(got)} results, the node stores {len(stored)}"
        for i, (g, s) in enumerate(zip(got, stored, strict=True)):
            why = _differs(g, s)
            if why:
                return f"{why} (result {i})"
        return None
    if isinstance(got, torch.Tensor):
        if stored is None:  # an undefined result (a gradient that is not needed) is stored as None
            return None
        if not isinstance(stored, torch.Tensor):
            return f"a tensor, the node stores {_show(stored)}"
        if got.dtype != stored.dtype or got.dim() != stored.dim() or not all(
                _same_number(a, b) for a, b in zip(got.shape, stored.shape, strict=True)):
            return f"{got.dtype} {list(got.shape)}, the node stores {stored.dtype} {list(stored.shape)}"
        return None
    if got is None or stored is None:
        return None if got is stored else f"{_show(got)}, the node stores {_show(stored)}"
    if _kind(got) != _kind(stored):
        return f"{_show(got)}, the node stores {_show(stored)}"
    if number_kind(got) is not None and not _same_number(got, stored):
        # A size read from another tensor (sym_size of an edited operand): the sizes computed from it
        # fit the stored symbolic ones, and the kernels refuse them at the example values.
        return f"{_number_text(got)}, the node stores {_number_text(stored)}"
    return None


def _kind(v: Any) -> str:
    return number_kind(v) or type(v).__name__


def _show(v: Any) -> str:
    if isinstance(v, torch.Tensor):
        return f"a {v.dtype} {list(v.shape)} tensor"
    if isinstance(v, (tuple, list)):
        return f"{len(v)} values"
    return f"a {_kind(v)}" if v is not None else "nothing"


# The exception types torch's operand checks raise (torch._check and its _type, _value and _index
# forms in Python meta kernels, TORCH_CHECK and its forms in C++ ones). Subclasses are excluded on
# purpose: fake tensors and symbolic shapes say "cannot compute this here" with their own
# subclasses of RuntimeError (data-dependent outputs, operators without a fake kernel, guards on
# unbacked sizes), and NotImplementedError says an operator has no meta kernel at all.
_CONTRACT_ERRORS = (RuntimeError, TypeError, ValueError, IndexError)
# The errors of a Python meta kernel's own asserts and arithmetic on the operands; on fake tensors
# they may also be the fake machinery's, so there they count only when a meta run repeats them.
_PYTHON_CHECKS = (AssertionError, ZeroDivisionError)
# Operators whose fake kernels are torch's own: a custom operator's fake kernel is its author's,
# and may be missing or partial.
_TORCH_NAMESPACES = frozenset({"aten", "prims"})
# Plain RuntimeErrors that say a kernel cannot run on fake or meta tensors, not that its operands
# break its contract: reading a tensor's data or storage, torch's own internal asserts. (A storage
# size that overflows is a contract violation.)
_CANNOT_RUN_HERE = re.compile(
    r"data pointer|data_ptr|access\w* (the )?storage|no storage|without storage|not allocated|meta tensor|fake"
    r"|Could not run|not implemented|INTERNAL ASSERT|customized tensor|item\(\)|local_scalar_dense", re.IGNORECASE)
# And those that say sizes are only known symbolically: no verdict on symbolic operands, but words a
# kernel's message may hold whatever its operands ("invalid shape dimension -5. If this was
# symbolic, ..."), so they say nothing when the operands are concrete.
_SYMBOLIC_HERE = re.compile(r"symbolic|SymInt|SymFloat|SymBool|unbacked|data.dependent", re.IGNORECASE)


def _refuses(e: Exception, op: Any, args: Any, kwargs: Any) -> bool:
    """Whether an operator's failure on the stored fake values is a verdict on the program.

    When export traced the program, each of torch's own fake kernels ran on these very values and
    accepted them. One that now refuses them with its operand check (an embedding whose indices are
    floats, a matmul of mismatched sizes) refuses a call the file stores but tracing never made:
    the program cannot run, and says so only when called. A fake kernel also fails for what fake
    tensors cannot do (symbolic sizes some kernels cannot take, data they cannot read): so the
    verdict is the meta kernel's, on meta tensors of the example sizes, which must refuse them with
    an operand check too. Everything else is no verdict: a valid program must never be refused for
    what fake tensors cannot do.
    """
    # torch's Python meta kernels also check operands with a bare assert ("'weight' must be 2-D"), or
    # fail on them in their arithmetic (a zero stride they divide by), and fake tensors assert their
    # own invariants the same way: such an error counts only when the meta run raises it again in
    # the very same words.
    asserted = type(e) in _PYTHON_CHECKS and bool(str(e)) and getattr(op, "namespace", None) in _TORCH_NAMESPACES
    if not asserted and not contract_failure(e, op, concrete=True):  # symbolic words: the meta run judges
        return False
    concrete, guessed = _on_meta((args, kwargs)), False
    if concrete is None:
        # A data-dependent size has no example value: the meta run takes a value from its range, and
        # then only a refusal in the very words of the fake kernel's counts, one that does not
        # depend on the sizes (an argument naming a dimension the operand does not have).
        concrete, guessed = _on_meta((args, kwargs), unbacked=True), True
        if concrete is None:
            return False
    try:
        with unset_fake_temporarily(), torch.device("meta"):
            op(*concrete[0], **concrete[1])
    except Exception as again:  # noqa: BLE001 -- judged as the first failure was
        # not necessarily the same exception: the two kernels check in their own order and words
        if asserted:
            return type(again) is type(e) and str(again) == str(e)
        return contract_failure(again, op, concrete=True) and (not guessed or str(again) == str(e))
    return False


def contract_failure(e: Exception, op: Any, *, concrete: bool = False) -> bool:
    """Whether ``e``, raised by ``op`` on fake or meta tensors, is its operand check refusing the
    operands (torch's own operators only), not a kernel that cannot run on such tensors.
    ``concrete``: the operands had fixed sizes and numbers (meta tensors of example sizes), so a
    message that speaks of symbolic sizes cannot mean that they were symbolic."""
    text = str(e)
    if concrete and type(e) in _PYTHON_CHECKS and text and getattr(op, "namespace", None) in _TORCH_NAMESPACES:
        return True  # (meta tensors of fixed sizes: no fake machinery to have asserted)
    return (type(e) in _CONTRACT_ERRORS and getattr(op, "namespace", None) in _TORCH_NAMESPACES
            and not _CANNOT_RUN_HERE.search(text) and (concrete or not _SYMBOLIC_HERE.search(text)))


class _NoExample(Exception):
    pass


def _on_meta(tree: Any, *, unbacked: bool = False) -> Any:
    """``tree`` with fake tensors as meta tensors of their example sizes and strides, numbers as
    their example values and devices as meta; None when something has no example value. With
    ``unbacked``, a data-dependent size takes a value torch picks from its range instead."""

    def example(n: Any) -> Any:
        return _example(n) if not unbacked else _example_or_guess(n)

    def concrete(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            sizes, strides = [example(n) for n in v.shape], [example(n) for n in v.stride()]
            return torch.empty_strided(sizes, strides, dtype=v.dtype, device="meta")
        if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return example(v)
        if isinstance(v, torch.device):
            return torch.device("meta")
        return v

    try:
        with unset_fake_temporarily():
            return pytree.tree_map(concrete, tree)
    except Exception:  # noqa: BLE001 -- no example value, or sizes no tensor can have: no second opinion
        return None


def _example(n: Any) -> Any:
    hint = _number_hint(n)
    if hint is None:
        raise _NoExample
    return hint


def _example_or_guess(n: Any) -> Any:
    hint = _number_hint(n)
    if hint is not None:
        return hint
    if isinstance(n, torch.SymInt):
        guess = getattr(n.node.shape_env, "optimization_hint", None)  # (torch 2.13 and later)
        if guess is not None:
            try:
                return int(guess(n.node.expr, fallback=2))
            except Exception:  # noqa: BLE001 -- no value to try
                pass
    raise _NoExample


def _operands(args: Any, kwargs: Any) -> str:
    """Every argument, tensors by their meta: the refusal may be of a number (a zero stride)."""
    shown = [_argument(v) for v in args] + [f"{k}={_argument(v)}" for k, v in kwargs.items()]
    return ", ".join(shown) if shown else "no arguments"


def _argument(v: Any) -> str:
    if isinstance(v, torch.Tensor):
        return _show(v)
    if isinstance(v, (list, tuple)) and any(isinstance(x, torch.Tensor) for x in v):
        return "[" + ", ".join(_argument(x) for x in v) + "]"
    text = repr(v)
    return text if len(text) <= 80 else text[:77] + "..."


def _first_line(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return text[0][:300] if text else type(e).__name__
