"""Every call of a loaded graph binds to what it calls, checked before it becomes an FX node.

* every operator call binds to the operator's schema (positional/keyword layout, argument names,
  required arguments, and argument types, through the dispatcher's own schema matcher), and stores
  one output per return of that schema, a tensor where it returns a tensor and no tensor where it
  returns a number;
* symbolic helpers (``operator.add``, ``math.floor``, ...) get the arguments they take, and store the
  kind of number (int, float, bool) they compute from them; none divides by the constant 0 or raises
  a size to a constant power beyond the exponent cap;
* every ``getitem`` index exists in the value it indexes;
* torch's vmap wrappers get tensors, ints, a known randomness and levels from 1 (functorch meets
  others with an internal assert).

Higher-order ops are checked by :mod:`serde.bridge.checks.hops`, and what a few kernels check of
their arguments that their fake kernels do not by :mod:`serde.bridge.checks.kernels`, both of which
:func:`check_call` dispatches to.
"""

from __future__ import annotations

import inspect
import operator
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx
from torch._library.fake_class_registry import FakeScriptObject
from torch._subclasses.fake_tensor import FakeTensor
from torch.export.graph_signature import CustomObjArgument

from serde.core import schema
from serde.core.limits import DEFAULT_LIMITS
from serde.core.memo import Memo

from ..custom_objects import GENERATOR_CLASS
from ..errors import FIX_EDITED, InconsistentProgramError
from ..operators import PREDISPATCH_TARGETS, SYMBOLIC_TARGETS
from .hops import BATCH_DIM_AT, HOPS
from .kernels import check_kernel, judged

__all__ = ["check_call", "check_op_outputs", "number_kind", "symbolic_result_kinds"]

# A call that does not bind by name: what another torch release's schema of the operator gives,
# when no operator upgrader (serde.opsets) covers that release, as well as what an edit gives.
_FIX_SCHEMA = (f"the artifact was written by a torch whose schema of this operator differs from this torch's "
               f"({torch.__version__}) without an operator upgrader for the change (load it under the torch "
               "that wrote it; `pt2serde check FILE` prints that version), or it was edited after saving")


def check_call(target: Any, node: schema.Node, args: Sequence[Any], kwargs: dict[str, Any], where: str,
               submodules: dict[str, Any]) -> None:
    """Check one call before it becomes an FX node.

    ``args``/``kwargs`` hold FX nodes, as read; ``submodules`` maps the names of get_attr nodes to
    the subgraph modules built so far.
    """
    if isinstance(target, torch._ops.OpOverload):
        _check_op(target, node, args, kwargs, where)
        if judged(target):  # (a dict lookup for the others)
            check_kernel(target, _values(args), _values(kwargs), where)
    elif isinstance(target, torch._ops.HigherOrderOperator):
        name = target.name()
        if name in ("auto_functionalized", "auto_functionalized_v2"):
            if len(args) != 1 or not isinstance(args[0], torch._ops.OpOverload):
                raise InconsistentProgramError(
                    f"{where}: {node.target} takes one operator and keyword arguments, got {len(args)} "
                    f"positional arguments; {FIX_EDITED}")
            return
        check = HOPS.get(name)
        if check is not None:
            if kwargs:
                raise InconsistentProgramError(
                    f"{where}: {node.target} takes no keyword arguments, got {sorted(kwargs)}; {FIX_EDITED}")
            check(args, node, where, submodules)
    elif target is operator.getitem:
        _check_getitem(args, kwargs, where)
    else:
        _check_python_call(target, node, args, kwargs, where)


# ---------------------------------------------------------------- operators


class _OpFacts:
    """What the binding check needs of an operator's schema, read once per operator (torch builds
    new Python objects for ``_schema.arguments`` on every access)."""

    __slots__ = ("params", "positional", "index", "required", "class_params", "tensor_params", "may_wrap",
                 "outputs")

    def __init__(self, op: torch._ops.OpOverload) -> None:
        params = op._schema.arguments
        self.params = params
        self.positional = sum(1 for a in params if not a.kwarg_only)
        self.index = {a.name: i for i, a in enumerate(params)}
        self.required = tuple((i, a.name) for i, a in enumerate(params) if not a.has_default_value())
        self.class_params = frozenset(i for i, a in enumerate(params) if _is_class(a.type))
        self.tensor_params = tuple(_is_tensor_type(a.type) for a in params)
        # The binding wraps numbers in tensors only for some ops (add, mul, ...), and only next to a tensor.
        self.may_wrap = op.namespace in ("aten", "prims") and torch._C._should_allow_numbers_as_tensors(op._opname)
        self.outputs = tuple(_output_kinds(r.type) for r in op._schema.returns)


# Stored output kinds each return type allows. A tensor return may be None (an undefined tensor,
# as native_batch_norm_backward gives for a gradient it was not asked for); a number is stored
# symbolic or plain. Other return types are not checked.
_TENSOR_OUTPUTS = ("as_tensor", "as_none")
_LIST_OUTPUTS = ("as_tensors", "as_none")
_NUMBER_OUTPUTS: dict[type, tuple[str, ...]] = {
    torch.IntType: ("as_sym_int", "as_int"),
    torch.SymIntType: ("as_sym_int", "as_int"),
    torch.FloatType: ("as_sym_float", "as_float"),
    torch.BoolType: ("as_sym_bool", "as_bool"),
    torch.NumberType: ("as_sym_int", "as_int", "as_sym_float", "as_float", "as_sym_bool", "as_bool"),
}


def _output_kinds(t: Any) -> tuple[str, ...] | None:
    if isinstance(t, torch.OptionalType):
        t = t.getElementType()
    if isinstance(t, torch.TensorType):
        return _TENSOR_OUTPUTS
    if isinstance(t, torch.ListType) and isinstance(t.getElementType(), torch.TensorType):
        return _LIST_OUTPUTS
    return _NUMBER_OUTPUTS.get(type(t))


def check_op_outputs(op: torch._ops.OpOverload, node: schema.Node, where: str) -> None:
    """The node stores one output per return of ``op``'s schema, each of a kind that return type
    allows: a later node reads each output as what the artifact says it is, and torch would hand it
    what the operator really returns (a number where the graph expects a tensor, ...)."""
    expected = _op_facts(op).outputs
    outs = node.outputs
    if len(outs) != len(expected):
        raise InconsistentProgramError(
            f"{where}.outputs: {node.target} returns {len(expected)} values ({op._schema}), the node "
            f"stores {len(outs)}; {FIX_EDITED}")
    for i, o in enumerate(outs):
        kinds = expected[i]
        # Attribute reads, the tensor case spelled out: this runs for every node of every load,
        # and `o.kind` costs several of them.
        if kinds is _TENSOR_OUTPUTS:
            if o.as_tensor is not None or o.as_none is not None:
                continue
        elif kinds is None or any(getattr(o, k) is not None for k in kinds):
            continue
        raise InconsistentProgramError(
            f"{where}.outputs[{i}]: return {i} of {node.target} is {op._schema.returns[i].type}, the node "
            f"stores {o.kind}; {FIX_EDITED}")


_OP_FACTS: dict[torch._ops.OpOverload, _OpFacts] = {}


def _op_facts(op: torch._ops.OpOverload) -> _OpFacts:
    f = _OP_FACTS.get(op)
    if f is None:
        f = _OP_FACTS[op] = _OpFacts(op)
    return f


def _check_op(op: torch._ops.OpOverload, node: schema.Node, args: Sequence[Any], kwargs: dict[str, Any],
              where: str) -> None:
    fs = op._schema
    facts = _op_facts(op)
    params, index = facts.params, facts.index
    if len(args) > facts.positional:
        raise InconsistentProgramError(
            f"{where}.inputs[{facts.positional}]: {node.target} takes at most {facts.positional} positional "
            f"arguments ({fs}), the node passes {len(args)}; {FIX_EDITED}")
    for j, na in enumerate(node.inputs):
        if j < len(args):
            expected = params[j].name
            if na.name not in ("", expected):
                raise InconsistentProgramError(
                    f"{where}.inputs[{j}]: positional argument {j} of {node.target} is {expected!r}, the "
                    f"artifact names it {na.name!r}; {_FIX_SCHEMA}")
        else:
            i = index.get(na.name)
            if i is None:
                raise InconsistentProgramError(
                    f"{where}.inputs[{j}]: {node.target} has no argument {na.name!r} ({fs}); {_FIX_SCHEMA}")
            if i < len(args):
                raise InconsistentProgramError(
                    f"{where}.inputs[{j}]: argument {na.name!r} of {node.target} is given twice; {FIX_EDITED}")
    for i, name in facts.required:
        if i >= len(args) and name not in kwargs:
            raise InconsistentProgramError(
                f"{where}: {node.target} requires argument {name!r} ({fs}), which the node does not "
                f"pass; {_FIX_SCHEMA}")
    # Types: the dispatcher's own matcher, on the values the graph says each argument holds. Its
    # verdict depends only on what _arg_kind records of each value, so a call shaped like one it
    # accepted before is accepted without asking again (a graph repeats a few call shapes).
    key = _call_key(op, args, kwargs)
    if key is not None and key in _ACCEPTED:
        return
    arg_vals, kw_vals = _values(args), _values(kwargs)
    wrap = facts.may_wrap and any(isinstance(v, torch.Tensor) for v in (*arg_vals, *kw_vals.values()))
    if wrap:
        tensor_params = facts.tensor_params
        vals = [_wrapped(tensor_params[i], v) for i, v in enumerate(arg_vals)]
        kwvals = {k: _wrapped(tensor_params[index[k]], v) for k, v in kw_vals.items()}
    else:
        vals, kwvals = list(arg_vals), kw_vals
    class_params = facts.class_params
    if class_params and (any(v is not None for i, v in enumerate(vals) if i in class_params)
                         or any(v is not None for k, v in kwvals.items() if index[k] in class_params)):
        # Custom objects are stand-ins at load time, which the dispatcher's matcher cannot type:
        # check here that each goes where the schema takes one of its kind, then let the matcher
        # type the rest of the call with None in their place where the parameter is optional (a
        # generator always is), and with the object's fake where it is required (a torchbind
        # class's). An object without a fake (no fake class registered, or one handed to a
        # subgraph) leaves the rest of its call unchecked.
        bound = [(params[i], v) for i, v in enumerate(vals)] + [(params[index[k]], v) for k, v in kwvals.items()]
        for j, (p, v) in enumerate(bound):
            if _is_class(p.type) != _is_custom_obj(v) and not (v is None and isinstance(p.type, torch.OptionalType)):
                raise InconsistentProgramError(
                    f"{where}.inputs[{j}]: argument {p.name!r} of {node.target} has type {p.type}, got "
                    f"{type(v).__name__}; {FIX_EDITED}")
            if v is not None and _is_generator(p.type) != (getattr(v, "class_fqn", None) == GENERATOR_CLASS):
                raise InconsistentProgramError(
                    f"{where}.inputs[{j}]: argument {p.name!r} of {node.target} has type {p.type}, got an "
                    f"object of class {getattr(v, 'class_fqn', type(v).__qualname__)}; {FIX_EDITED}")
        vals = [_object_for_matcher(params[i], v) if i in class_params else v for i, v in enumerate(vals)]
        kwvals = {k: _object_for_matcher(params[index[k]], v) if index[k] in class_params else v
                  for k, v in kwvals.items()}
        if any(v is _NO_FAKE for v in (*vals, *kwvals.values())):
            return
    try:
        torch._C._check_schema_allow_fake_script_object(fs, *vals, **kwvals)
    except (RuntimeError, OverflowError, ValueError) as e:  # Overflow*: an int argument beyond int64
        msg = str(e).split("\n", 1)[0]
        bad = next((j for j, na in enumerate(node.inputs) if f"argument '{na.name}'" in str(e)), None)
        at = f"{where}.inputs[{bad}]" if bad is not None else where
        raise InconsistentProgramError(f"{at}: the arguments do not fit {node.target}: {msg}; {FIX_EDITED}") from None
    if key is not None:
        _ACCEPTED.remember(key)


# Call shapes (_call_key) the dispatcher's matcher accepted, shared by every load in the process.
_ACCEPTED = Memo(1 << 14, "accepted_calls")
_INT64 = 1 << 63
_UNKEYED = object()  # a value whose kind does not decide the matcher's verdict: always ask it
# Values the matcher types by their Python type alone.
_BY_TYPE = frozenset({float, bool, complex, type(None), torch.SymInt, torch.SymFloat, torch.SymBool})
# Values the matcher may read (a device or dtype name as text, ...): the value itself is the kind.
_BY_VALUE = frozenset({str, torch.dtype, torch.layout, torch.memory_format, torch.device})


def _arg_kind(v: Any) -> Any:
    """What the schema matcher's verdict on an argument depends on: its type, whether an int fits
    int64, a list's length and element kinds, and the value of text and enum-like arguments."""
    if type(v) is torch.fx.Node:
        v = v.meta.get("val")
    t = type(v)
    if t is FakeTensor:
        return torch.Tensor
    if t is int:
        return int if -_INT64 <= v < _INT64 else _UNKEYED
    if t in _BY_TYPE:
        return t
    if isinstance(v, torch.Tensor):
        return torch.Tensor
    if t is list or t is tuple:
        kinds = tuple(_arg_kind(x) for x in v)
        return _UNKEYED if _UNKEYED in kinds else (t, kinds)
    if t in _BY_VALUE:
        return t, v
    if t is CustomObjArgument:  # (what _check_op's object checks read of it: its class)
        return t, v.class_fqn
    return _UNKEYED


def _call_key(op: torch._ops.OpOverload, args: Sequence[Any], kwargs: dict[str, Any]) -> tuple | None:
    kinds = tuple(_arg_kind(a) for a in args)
    kw = tuple((k, _arg_kind(v)) for k, v in kwargs.items())
    if _UNKEYED in kinds or any(k is _UNKEYED for _, k in kw):
        return None
    return op, kinds, kw


_NUMBERS = (int, float, bool, complex, torch.SymInt, torch.SymFloat, torch.SymBool)
_SCALAR_TENSOR = torch.empty(())


def _is_tensor_type(t: Any) -> bool:
    if isinstance(t, torch.OptionalType):
        t = t.getElementType()
    return isinstance(t, torch.TensorType)


def _wrapped(tensor_param: bool, v: Any) -> Any:
    """A number passed for a ``Tensor`` parameter of the few ops (add, mul, ...) whose Python binding
    wraps numbers in tensors."""
    return _SCALAR_TENSOR if tensor_param and isinstance(v, _NUMBERS) else v


def _is_class(t: Any) -> bool:
    """Whether a parameter takes an object that a load holds only as a stand-in (a torchbind or
    opaque class, or a torch.Generator, which export lifts into a constant as it does those)."""
    if isinstance(t, torch.OptionalType):
        t = t.getElementType()
    return isinstance(t, (torch.ClassType, torch._C._GeneratorType))


_NO_FAKE = object()


def _object_for_matcher(p: Any, v: Any) -> Any:
    """What the matcher is given for the object (or None) ``v`` passed to parameter ``p``: None for
    an optional parameter, else the object's fake (``_NO_FAKE`` when it has none)."""
    if v is None or isinstance(p.type, torch.OptionalType):
        return None
    fake = getattr(v, "fake_val", None)
    return fake if isinstance(fake, FakeScriptObject) else _NO_FAKE


def _is_generator(t: Any) -> bool:
    if isinstance(t, torch.OptionalType):
        t = t.getElementType()
    return isinstance(t, torch._C._GeneratorType)


def _is_custom_obj(v: Any) -> bool:
    return isinstance(v, (torch.ScriptObject, CustomObjArgument)) or hasattr(v, "__obj_flatten__")


def _values(v: Any) -> Any:
    """Arguments with each FX node replaced by the (fake) value it produces."""
    if isinstance(v, torch.fx.Node):
        return v.meta.get("val")
    if isinstance(v, (list, tuple)):
        return type(v)(_values(x) for x in v)
    if isinstance(v, dict):
        return {k: _values(x) for k, x in v.items()}
    return v


# ---------------------------------------------------------------- getitem and symbolic helpers


def _check_getitem(args: Sequence[Any], kwargs: dict[str, Any], where: str) -> None:
    if len(args) != 2 or kwargs:
        raise InconsistentProgramError(
            f"{where}: getitem takes (value, index), got {len(args)} positional and {len(kwargs)} keyword "
            f"arguments; {FIX_EDITED}")
    src, index = args
    val = src.meta.get("val") if isinstance(src, torch.fx.Node) else None
    if not isinstance(val, (tuple, list)):
        raise InconsistentProgramError(
            f"{where}.inputs[0]: getitem needs a value holding several outputs, got {type(val).__name__}; {FIX_EDITED}")
    if type(index) is not int or not 0 <= index < len(val):
        raise InconsistentProgramError(
            f"{where}.inputs[1]: getitem index {index!r} does not exist: {src.name!r} holds {len(val)} "
            f"values; {FIX_EDITED}")


_NUMBER_KIND: dict[type, str] = {int: "int", torch.SymInt: "int", float: "float", torch.SymFloat: "float",
                                  bool: "bool", torch.SymBool: "bool"}


def number_kind(v: Any) -> str | None:
    """"int", "float" or "bool" for a Python or symbolic number (bools are not ints here), else None."""
    return _NUMBER_KIND.get(type(v))


_STORED_KIND = {"as_int": "int", "as_sym_int": "int", "as_float": "float", "as_sym_float": "float",
                "as_bool": "bool", "as_sym_bool": "bool"}


def _arithmetic(kinds: Sequence[str]) -> frozenset[str]:
    # Python's promotion, which SymInt/SymFloat follow: a float operand makes a float, bools count as ints.
    return _FLOAT if "float" in kinds else _INT


_INT, _FLOAT, _BOOL = frozenset({"int"}), frozenset({"float"}), frozenset({"bool"})
# What each symbolic helper returns, from the kinds of its operands. The graph reader gives the node
# the value kind the artifact stores; at run time the helper computes its own, so they must agree
# (an int // 2.0 stored as an int reaches a SymInt[] argument as a float).
_RESULT_KINDS: dict[str, Callable[[Sequence[str]], frozenset[str]]] = {
    **{f"_operator.{n}": _arithmetic for n in ("add", "sub", "mul", "floordiv", "mod", "neg", "pos", "abs")},
    # int ** int is an int for a natural exponent and a float for a negative one (SymInt guards on it).
    "_operator.pow": lambda k: _FLOAT if "float" in k else frozenset({"int", "float"}),
    "_operator.truediv": lambda k: _FLOAT,
    **{f"_operator.{n}": lambda k: _BOOL for n in ("eq", "ne", "lt", "le", "gt", "ge")},
    # True & 2 is an int, a SymBool & SymInt may stay a bool.
    **{f"_operator.{n}": lambda k: frozenset(k) | _INT if "int" in k else _BOOL for n in ("and_", "or_")},
    **{f"_operator.{n}": lambda k: _INT for n in ("lshift", "rshift")},
    **{f"math.{n}": lambda k: _INT for n in ("floor", "ceil", "trunc")},
    # round(x) is an int; round(x, n) keeps x's kind and takes an integral n.
    "builtins.round": lambda k: _INT if len(k) == 1 else frozenset() if k[1] == "float" else _arithmetic(k[:1]),
    "torch.sym_not": lambda k: _BOOL,
    "torch.sym_float": lambda k: _FLOAT,
    "torch.sym_int": lambda k: _INT,
    "torch._sym_sqrt": lambda k: _FLOAT,
    # max/min of ints and bools is one of the operands; with a float, torch makes it a float.
    "torch.sym_max": lambda k: _FLOAT if "float" in k else frozenset(k),
    "torch.sym_min": lambda k: _FLOAT if "float" in k else frozenset(k),
    "torch.sym_sum": _arithmetic,
    # sym_ite(cond, a, b) is a or b: a boolean condition and both choices of one kind.
    "torch.sym_ite": lambda k: frozenset(k[1:2]) if len(k) == 3 and k[0] == "bool" and k[1] == k[2] else frozenset(),
}


def symbolic_result_kinds(target: str, operand_kinds: Sequence[str]) -> frozenset[str] | None:
    """The kinds ("int", "float", "bool") the symbolic helper named ``target`` may return for operands
    of these kinds: empty where Python refuses the operands, None for a target this table leaves to
    another check (getitem)."""
    rule = _RESULT_KINDS.get(target)
    if rule is None:
        return None
    if "float" in operand_kinds and target in _INTEGRAL_ONLY:
        return frozenset()
    return rule(operand_kinds)


_DIVISIONS = frozenset({"_operator.truediv", "_operator.floordiv", "_operator.mod"})
# Bitwise operators take no floats (1.0 << 2 is a TypeError).
_INTEGRAL_ONLY = frozenset({"_operator.and_", "_operator.or_", "_operator.lshift", "_operator.rshift"})


def _check_symbolic_result(node: schema.Node, kinds: Sequence[str], where: str) -> None:
    allowed = symbolic_result_kinds(node.target, kinds)
    if allowed is None:
        return
    outs = node.outputs
    stored = _STORED_KIND.get(outs[0].kind) if len(outs) == 1 else None
    if stored not in allowed:
        what = " or ".join(sorted(allowed)) or "nothing (Python refuses operands of these kinds)"
        got = f"{len(outs)} outputs" if len(outs) != 1 else outs[0].kind
        raise InconsistentProgramError(
            f"{where}.outputs: {node.target} of ({', '.join(kinds)}) computes {what}, the node stores {got}; {FIX_EDITED}")


# Signatures of the fixed symbolic and predispatch callables, by identity: inspect.signature of a
# builtin parses its text signature (ast.parse and a class built per call, 0.1 ms each), and these
# module-level functions never change. Registered extension callables are asked every time.
_FIXED_CALLABLES = {id(fn): fn for fn in (*SYMBOLIC_TARGETS.values(), *PREDISPATCH_TARGETS.values())}
_SIGNATURES: dict[int, inspect.Signature] = {}


def _signature(fn: Callable) -> inspect.Signature:
    fixed = _FIXED_CALLABLES.get(id(fn)) is fn
    sig = _SIGNATURES.get(id(fn)) if fixed else None
    if sig is not None:
        return sig
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without a text signature (round): takes 1 or 2
        sig = inspect.Signature([inspect.Parameter("number", inspect.Parameter.POSITIONAL_ONLY),
                                 inspect.Parameter("ndigits", inspect.Parameter.POSITIONAL_ONLY, default=None)])
    if fixed:
        _SIGNATURES[id(fn)] = sig
    return sig


def _check_python_call(fn: Callable, node: schema.Node, args: Sequence[Any], kwargs: dict[str, Any],
                       where: str) -> None:
    sig = _signature(fn)
    try:
        sig.bind(*args, **kwargs)
    except TypeError as e:
        raise InconsistentProgramError(f"{where}: the arguments do not fit {node.target}{sig}: {e}; {FIX_EDITED}") from None
    if node.target in SYMBOLIC_TARGETS:
        operand_kinds = []
        operands = args[0] if node.target == "torch.sym_sum" and args else args
        if node.target == "builtins.round" and len(operands) == 2 and operands[1] is None:
            # Tracing records round(x) as round(x, None): ndigits left out, so an int like round(x).
            operands = operands[:1]
        for j, a in enumerate(operands):
            v = a.meta.get("val") if isinstance(a, torch.fx.Node) else a
            kind = number_kind(v)
            if kind is None:
                raise InconsistentProgramError(
                    f"{where}.inputs[{j}]: {node.target} computes on scalars, got {type(v).__name__}; {FIX_EDITED}")
            operand_kinds.append(kind)
        _check_symbolic_result(node, operand_kinds, where)
        if node.target in _DIVISIONS and len(args) == 2 and not isinstance(args[1], torch.fx.Node) \
                and args[1] == 0:
            # Tracing could not have recorded it (sympy refuses to divide by zero); it raises on every call.
            raise InconsistentProgramError(f"{where}.inputs[1]: {node.target} divides by the constant 0; {FIX_EDITED}")
        if node.target == "_operator.pow" and len(args) == 2 and isinstance(args[0], torch.fx.Node) \
                and not isinstance(args[1], torch.fx.Node) and abs(args[1]) > DEFAULT_LIMITS.max_exponent:
            # The size expression it stands for would be refused (the same cap), and a call computes
            # size ** exponent exactly: with 2**63 that never ends.
            raise InconsistentProgramError(
                f"{where}.inputs[1]: {node.target} raises a size to {args[1]!r}, beyond the exponent cap of "
                f"{DEFAULT_LIMITS.max_exponent}; {FIX_EDITED}")
    kinds = _PREDISPATCH_ARGS.get(node.target)
    if kinds is not None:
        values = _values(list(args))
        for j, (v, (what, ok)) in enumerate(zip(values, kinds, strict=False)):
            if not ok(v):
                raise InconsistentProgramError(
                    f"{where}.inputs[{j}]: {node.target} takes {what} here, got {v!r:.80}; {FIX_EDITED}")
        # The dim a batch dimension is taken from, or put back at (one more than the tensor has).
        at, extra = BATCH_DIM_AT.get(node.target, (None, 0))
        if at is not None and len(values) > at and isinstance(values[at], int):
            rank = values[0].dim() + extra
            if not -rank <= values[at] < rank:
                raise InconsistentProgramError(
                    f"{where}.inputs[{at}]: {node.target.rsplit('.', 1)[1]} names dim {values[at]} of a "
                    f"rank-{rank} tensor; {FIX_EDITED}")


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, torch.SymInt)) and not isinstance(v, bool)


# What torch's vmap wrappers take, position by position (their Python signatures carry no types, and a
# wrong value fails inside functorch at run time, some as an internal assert).
_RANDOMNESS = frozenset({"error", "same", "different"})
_TENSOR_ARG = ("a tensor", lambda v: isinstance(v, torch.Tensor))
_INT_ARG = ("an int", _is_int)
_PREDISPATCH_ARGS: dict[str, tuple[tuple[str, Callable[[Any], bool]], ...]] = {
    "torch._functorch.predispatch._add_batch_dim": (_TENSOR_ARG, _INT_ARG, _INT_ARG),
    "torch._functorch.predispatch._remove_batch_dim": (_TENSOR_ARG, _INT_ARG, _INT_ARG, _INT_ARG),
    "torch._functorch.predispatch._vmap_increment_nesting": (
        ("a batch size", lambda v: _is_int(v) and not (isinstance(v, int) and v < 0)),
        (f"one of {sorted(_RANDOMNESS)}", lambda v: isinstance(v, str) and v in _RANDOMNESS)),
}
