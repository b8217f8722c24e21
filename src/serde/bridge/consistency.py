"""Load-time consistency checks: a loaded program must be one our writer could have written.

Decoding proves an artifact has the schema's shape; these checks prove the pieces fit each other
before torch builds anything from them, so that a damaged or hostile file fails at load with a
message naming the field, never later at run time inside torch:

* every operator call binds to the operator's schema (positional/keyword layout, argument names,
  required arguments, and argument types, through the dispatcher's own schema matcher), and stores
  one output per return of that schema, a tensor where it returns a tensor and no tensor where it
  returns a number;
* symbolic helpers (``operator.add``, ``math.floor``, ...) get the arguments they take, and store the
  kind of number (int, float, bool) they compute from them; none divides by the constant 0 or raises
  a size to a constant power beyond the exponent cap;
* every ``getitem`` index exists in the value it indexes;
* higher-order ops get as many operands as their subgraphs take, each the tensor (dtype, rank,
  sizes) the subgraph was traced with, and return what they return (a loop body what it carries);
  cond's predicate has one element and while_loop's condition is a 0-dim boolean; the inputs map
  and scan iterate over are tensors of one length whose slices are what the subgraph takes, and
  scan's carry is what its combine function takes and returns;
* torch's vmap wrappers get tensors, ints, a known randomness and levels from 1 (functorch meets
  others with an internal assert);
* the graph's inputs and outputs match the signature's specs, one for one, and every parameter,
  buffer and tensor constant has the dtype, sizes and strides its placeholder says, and is stored
  where its kind (and a buffer's persistence) says;
* the module call graph's pytree specs hold as many leaves as the signatures they describe.
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
from serde.errors import MalformedArtifactError

from .custom_objects import GENERATOR_CLASS
from .operators import PREDISPATCH_TARGETS, SYMBOLIC_TARGETS

__all__ = ["InconsistentProgramError", "check_call", "check_op_outputs", "check_vmap_nesting", "number_kind",
           "symbolic_result_kinds",
           "check_signature", "check_weights_fit_graph", "check_module_call_graph"]


class InconsistentProgramError(MalformedArtifactError):
    """The artifact decodes, but its parts contradict each other (a call that does not bind to its
    operator, a graph output the signature does not describe, ...)."""


_FIX = "the artifact is damaged or was edited after saving: re-save the program with pt2serde"
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
    elif isinstance(target, torch._ops.HigherOrderOperator):
        name = target.name()
        if name in ("auto_functionalized", "auto_functionalized_v2"):
            if len(args) != 1 or not isinstance(args[0], torch._ops.OpOverload):
                raise InconsistentProgramError(
                    f"{where}: {node.target} takes one operator and keyword arguments, got {len(args)} "
                    f"positional arguments; {_FIX}")
            return
        check = _HOPS.get(name)
        if check is not None:
            if kwargs:
                raise InconsistentProgramError(
                    f"{where}: {node.target} takes no keyword arguments, got {sorted(kwargs)}; {_FIX}")
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
            f"stores {len(outs)}; {_FIX}")
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
            f"stores {o.kind}; {_FIX}")


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
            f"arguments ({fs}), the node passes {len(args)}; {_FIX}")
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
                    f"{where}.inputs[{j}]: argument {na.name!r} of {node.target} is given twice; {_FIX}")
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
                    f"{type(v).__name__}; {_FIX}")
            if v is not None and _is_generator(p.type) != (getattr(v, "class_fqn", None) == GENERATOR_CLASS):
                raise InconsistentProgramError(
                    f"{where}.inputs[{j}]: argument {p.name!r} of {node.target} has type {p.type}, got an "
                    f"object of class {getattr(v, 'class_fqn', type(v).__qualname__)}; {_FIX}")
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
        raise InconsistentProgramError(f"{at}: the arguments do not fit {node.target}: {msg}; {_FIX}") from None
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
            f"arguments; {_FIX}")
    src, index = args
    val = src.meta.get("val") if isinstance(src, torch.fx.Node) else None
    if not isinstance(val, (tuple, list)):
        raise InconsistentProgramError(
            f"{where}.inputs[0]: getitem needs a value holding several outputs, got {type(val).__name__}; {_FIX}")
    if type(index) is not int or not 0 <= index < len(val):
        raise InconsistentProgramError(
            f"{where}.inputs[1]: getitem index {index!r} does not exist: {src.name!r} holds {len(val)} "
            f"values; {_FIX}")


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
            f"{where}.outputs: {node.target} of ({', '.join(kinds)}) computes {what}, the node stores {got}; {_FIX}")


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
        raise InconsistentProgramError(f"{where}: the arguments do not fit {node.target}{sig}: {e}; {_FIX}") from None
    if node.target in SYMBOLIC_TARGETS:
        operand_kinds = []
        for j, a in enumerate(args[0] if node.target == "torch.sym_sum" and args else args):
            v = a.meta.get("val") if isinstance(a, torch.fx.Node) else a
            kind = number_kind(v)
            if kind is None:
                raise InconsistentProgramError(
                    f"{where}.inputs[{j}]: {node.target} computes on scalars, got {type(v).__name__}; {_FIX}")
            operand_kinds.append(kind)
        _check_symbolic_result(node, operand_kinds, where)
        if node.target in _DIVISIONS and len(args) == 2 and not isinstance(args[1], torch.fx.Node) \
                and args[1] == 0:
            # Tracing could not have recorded it (sympy refuses to divide by zero); it raises on every call.
            raise InconsistentProgramError(f"{where}.inputs[1]: {node.target} divides by the constant 0; {_FIX}")
        if node.target == "_operator.pow" and len(args) == 2 and isinstance(args[0], torch.fx.Node) \
                and not isinstance(args[1], torch.fx.Node) and abs(args[1]) > DEFAULT_LIMITS.max_exponent:
            # The size expression it stands for would be refused (the same cap), and a call computes
            # size ** exponent exactly: with 2**63 that never ends.
            raise InconsistentProgramError(
                f"{where}.inputs[1]: {node.target} raises a size to {args[1]!r}, beyond the exponent cap of "
                f"{DEFAULT_LIMITS.max_exponent}; {_FIX}")
    kinds = _PREDISPATCH_ARGS.get(node.target)
    if kinds is not None:
        values = _values(list(args))
        for j, (v, (what, ok)) in enumerate(zip(values, kinds, strict=False)):
            if not ok(v):
                raise InconsistentProgramError(
                    f"{where}.inputs[{j}]: {node.target} takes {what} here, got {v!r:.80}; {_FIX}")
        # The dim a batch dimension is taken from, or put back at (one more than the tensor has).
        at, extra = _BATCH_DIM_AT.get(node.target, (None, 0))
        if at is not None and len(values) > at and isinstance(values[at], int):
            rank = values[0].dim() + extra
            if not -rank <= values[at] < rank:
                raise InconsistentProgramError(
                    f"{where}.inputs[{at}]: {node.target.rsplit('.', 1)[1]} names dim {values[at]} of a "
                    f"rank-{rank} tensor; {_FIX}")


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


# ---------------------------------------------------------------- higher-order ops


def _subgraph(a: Any, what: str, where: str, subs: dict[str, Any]) -> torch.fx.Graph:
    if isinstance(a, torch.fx.Node) and a.op == "get_attr":
        gm = subs.get(a.target)
        if isinstance(gm, torch.fx.GraphModule):
            return gm.graph
    raise InconsistentProgramError(f"{where}: {what} must be a subgraph, got {_kind(a)}; {_FIX}")


def _kind(a: Any) -> str:
    return f"value {a.name!r}" if isinstance(a, torch.fx.Node) else type(a).__name__


def _operands(a: Any, what: str, where: str) -> tuple:
    if not isinstance(a, (tuple, list)):
        raise InconsistentProgramError(f"{where}: {what} must be a tuple of operands, got {_kind(a)}; {_FIX}")
    return tuple(a)


def _placeholders(g: torch.fx.Graph) -> list[torch.fx.Node]:
    return [n for n in g.nodes if n.op == "placeholder"]


def _returned(g: torch.fx.Graph) -> list[Any]:
    out = g.output_node().args[0]
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _inputs(g: torch.fx.Graph) -> int:
    return len(_placeholders(g))


def _outputs(g: torch.fx.Graph) -> int:
    return len(_returned(g))


def _arity(args: Sequence[Any], n: int, name: str, where: str, at_least: bool = False) -> None:
    if len(args) < n or (len(args) != n and not at_least):
        raise InconsistentProgramError(
            f"{where}: {name} takes {'at least ' if at_least else ''}{n} arguments, the node passes "
            f"{len(args)}; {_FIX}")


def _takes(g: torch.fx.Graph, n: int, what: str, where: str) -> None:
    if _inputs(g) != n:
        raise InconsistentProgramError(
            f"{where}: {what} takes {_inputs(g)} inputs but the call passes {n} operands; {_FIX}")


def _returns(n_out: int, n: int, what: str, where: str) -> None:
    if n_out != n:
        raise InconsistentProgramError(f"{where}: {what} returns {n_out} values, expected {n}; {_FIX}")


def _node_outputs(node: schema.Node) -> int:
    return len(node.outputs)


def _tensor_val(v: Any) -> torch.Tensor | None:
    v = v.meta.get("val") if isinstance(v, torch.fx.Node) else v
    return v if isinstance(v, (torch.Tensor, _SliceMeta)) else None


def _same_size(x: Any, y: Any) -> bool:
    if type(x) is int or type(y) is int:
        return x == y if type(x) is type(y) else False
    # The reader shares one SymInt per stored expression, so one node: the usual case, and cheap.
    return x.node is y.node or x.node.expr == y.node.expr


def _fits(outer: Sequence[Any], inner: Sequence[Any], what: str, where: str, same_sizes: bool = True) -> None:
    """Each value a subgraph receives (or returns) is the tensor the other side has: the same dtype,
    rank and sizes. The subgraph was traced with those (the operands' very sizes, symbols included);
    handing it others (the operands in another order, say) fails inside a kernel at run time or
    computes something else. With ``same_sizes`` False only fixed sizes are compared: a loop body's
    results may carry sizes tracing named anew."""
    for i, (a, b) in enumerate(zip(outer, inner, strict=False)):
        ta, tb = _tensor_val(a), _tensor_val(b)
        if ta is None or tb is None:
            continue
        sa, sb = ta.shape, tb.shape  # each read builds the size tuple anew
        if same_sizes:
            sizes_differ = not all(_same_size(x, y) for x, y in zip(sa, sb, strict=False))
        else:
            sizes_differ = any(type(x) is int and type(y) is int and x != y for x, y in zip(sa, sb, strict=False))
        if ta.dtype != tb.dtype or len(sa) != len(sb) or sizes_differ:
            raise InconsistentProgramError(
                f"{where}: {what} {i} is {ta.dtype} {list(sa)} on one side and {tb.dtype} {list(sb)} "
                f"on the other; {_FIX}")


def _cond(args: Sequence[Any], node: schema.Node, where: str, subs: dict[str, Any]) -> None:
    _arity(args, 4, "cond", where)
    pred = args[0].meta.get("val") if isinstance(args[0], torch.fx.Node) else args[0]
    if isinstance(pred, torch.Tensor):
        # cond runs `if pred:`, which only a one-element tensor answers; a symbolic size could be
        # any size (export specializes a predicate's sizes, so one it wrote has none).
        if any(type(n) is not int or n != 1 for n in pred.shape):
            raise InconsistentProgramError(
                f"{where}.inputs[0]: cond's predicate must be a boolean or a one-element tensor, it has the "
                f"shape {list(pred.shape)}; {_FIX}")
    elif not isinstance(pred, (bool, torch.SymBool)):
        raise InconsistentProgramError(
            f"{where}.inputs[0]: cond's predicate must be a boolean or a one-element tensor, got "
            f"{_kind(args[0])} ({type(pred).__name__}); {_FIX}")
    ops = _operands(args[3], "cond's operands (inputs[3])", f"{where}.inputs[3]")
    branches = [_subgraph(args[i], f"cond's branch (inputs[{i}])", f"{where}.inputs[{i}]", subs) for i in (1, 2)]
    for i, g in zip((1, 2), branches, strict=True):
        _takes(g, len(ops), f"the branch in inputs[{i}]", f"{where}.inputs[{i}]")
    _returns(_outputs(branches[1]), _outputs(branches[0]), "the false branch (inputs[2])", f"{where}.inputs[2]")
    for i, g in zip((1, 2), branches, strict=True):
        _fits(ops, _placeholders(g), "operand", f"{where}.inputs[{i}]")
    _fits(_returned(branches[0]), _returned(branches[1]), "result", f"{where}.inputs[2]", same_sizes=False)
    if not node.is_hop_single_tensor_return:
        _returns(_node_outputs(node), _outputs(branches[0]), "cond's branch", f"{where}.outputs")


def _while_loop(args: Sequence[Any], node: schema.Node, where: str, subs: dict[str, Any]) -> None:
    _arity(args, 4, "while_loop", where)
    carried = _operands(args[2], "the carried inputs (inputs[2])", f"{where}.inputs[2]")
    extra = _operands(args[3], "the additional inputs (inputs[3])", f"{where}.inputs[3]")
    cond = _subgraph(args[0], "the loop condition (inputs[0])", f"{where}.inputs[0]", subs)
    body = _subgraph(args[1], "the loop body (inputs[1])", f"{where}.inputs[1]", subs)
    for i, g in ((0, cond), (1, body)):
        _takes(g, len(carried) + len(extra), f"the subgraph in inputs[{i}]", f"{where}.inputs[{i}]")
    _returns(_outputs(cond), 1, "the loop condition", f"{where}.inputs[0]")
    out = cond.output_node().args[0]
    if isinstance(out, (tuple, list)):
        # while_loop tests the value cond_fn returns: a one-element tuple is neither bool nor tensor.
        raise InconsistentProgramError(
            f"{where}.inputs[0]: the loop condition must return its value bare, not in a tuple (its "
            f"graph's is_single_tensor_return); {_FIX}")
    val = out.meta.get("val") if isinstance(out, torch.fx.Node) else None
    if not (isinstance(val, (torch.SymBool, bool))
            or (isinstance(val, torch.Tensor) and val.dtype == torch.bool and val.dim() == 0)):
        # What while_loop checks of the condition on every iteration.
        raise InconsistentProgramError(
            f"{where}.inputs[0]: the loop condition must compute a boolean or a 0-dim boolean tensor, it "
            f"returns {out!r}; {_FIX}")
    _returns(_outputs(body), len(carried), "the loop body", f"{where}.inputs[1]")
    for i, g in ((0, cond), (1, body)):
        _fits([*carried, *extra], _placeholders(g), "operand", f"{where}.inputs[{i}]")
    # The body's results are the next iteration's carried values.
    _fits(list(carried), _returned(body), "carried value", f"{where}.inputs[1]", same_sizes=False)
    if not node.is_hop_single_tensor_return:
        _returns(_node_outputs(node), len(carried), node.target, f"{where}.outputs")


def _map_impl(args: Sequence[Any], node: schema.Node, where: str, subs: dict[str, Any]) -> None:
    _arity(args, 3, "map_impl", where)
    xs = _operands(args[1], "the mapped inputs (inputs[1])", f"{where}.inputs[1]")
    rest = _operands(args[2], "the extra inputs (inputs[2])", f"{where}.inputs[2]")
    g = _subgraph(args[0], "the mapped function (inputs[0])", f"{where}.inputs[0]", subs)
    _takes(g, len(xs) + len(rest), "the subgraph in inputs[0]", f"{where}.inputs[0]")
    ph = _placeholders(g)
    _slices_fit(xs, ph[:len(xs)], "mapped input", f"{where}.inputs[1]")
    _fits(rest, ph[len(xs):], "extra input", f"{where}.inputs[2]", same_sizes=False)


def _slices_fit(xs: Sequence[Any], inner: Sequence[Any], what: str, where: str) -> None:
    """Each of ``xs`` is a tensor of rank >= 1, all of one length, whose slice along dim 0 is the
    tensor the subgraph takes (dtype, rank and fixed sizes): map and scan iterate over dim 0, and a
    scalar, a length mismatch or another slice fails inside the loop at run time."""
    length = None
    for i, x in enumerate(xs):
        t = _tensor_val(x)
        if t is None or t.dim() == 0:
            raise InconsistentProgramError(
                f"{where}: {what} {i} must be a tensor of rank 1 or more (it is iterated over dim 0), got "
                f"{_kind(x)}{'' if t is None else ' of rank 0'}; {_FIX}")
        n = t.shape[0]
        if type(n) is int:
            if length is not None and n != length:
                raise InconsistentProgramError(
                    f"{where}: {what} {i} has {n} rows, another has {length}: all are iterated together; {_FIX}")
            length = n
    outer = [_SliceMeta(_tensor_val(x)) for x in xs]
    _fits(outer, inner, what + " slice", where, same_sizes=False)


class _SliceMeta:
    """A tensor's slice along dim 0, as far as ``_fits`` looks: its dtype and shape."""

    __slots__ = ("dtype", "shape")

    def __init__(self, t: torch.Tensor) -> None:
        self.dtype, self.shape = t.dtype, t.shape[1:]


def _scan(args: Sequence[Any], node: schema.Node, where: str, subs: dict[str, Any]) -> None:
    _arity(args, 4, "scan", where)
    init = _operands(args[1], "the initial carry (inputs[1])", f"{where}.inputs[1]")
    xs = _operands(args[2], "the scanned inputs (inputs[2])", f"{where}.inputs[2]")
    extra = _operands(args[3], "the additional inputs (inputs[3])", f"{where}.inputs[3]")
    g = _subgraph(args[0], "the combine function (inputs[0])", f"{where}.inputs[0]", subs)
    _takes(g, len(init) + len(xs) + len(extra), "the subgraph in inputs[0]", f"{where}.inputs[0]")
    if _outputs(g) < len(init):
        raise InconsistentProgramError(
            f"{where}.inputs[0]: the combine function returns {_outputs(g)} values, fewer than the "
            f"{len(init)} carried ones; {_FIX}")
    ph = _placeholders(g)
    _fits(init, ph[:len(init)], "carried value", f"{where}.inputs[1]", same_sizes=False)
    # The combine function's first results are the next step's carry.
    _fits(init, _returned(g)[:len(init)], "carried value", f"{where}.inputs[0]", same_sizes=False)
    _slices_fit(xs, ph[len(init):len(init) + len(xs)], "scanned input", f"{where}.inputs[2]")
    _fits(extra, ph[len(init) + len(xs):], "additional input", f"{where}.inputs[3]", same_sizes=False)
    if not node.is_hop_single_tensor_return:
        _returns(_node_outputs(node), _outputs(g), "scan", f"{where}.outputs")


def _associative_scan(args: Sequence[Any], node: schema.Node, where: str, subs: dict[str, Any]) -> None:
    _arity(args, 3, "associative_scan", where)
    xs = _operands(args[1], "the scanned inputs (inputs[1])", f"{where}.inputs[1]")
    extra = _operands(args[2], "the additional inputs (inputs[2])", f"{where}.inputs[2]")
    g = _subgraph(args[0], "the combine function (inputs[0])", f"{where}.inputs[0]", subs)
    _takes(g, 2 * len(xs) + len(extra), "the subgraph in inputs[0]", f"{where}.inputs[0]")
    _returns(_outputs(g), len(xs), "the combine function", f"{where}.inputs[0]")


def _invoke_subgraph(args: Sequence[Any], node: schema.Node, where: str, subs: dict[str, Any]) -> None:
    _arity(args, 2, "invoke_subgraph", where, at_least=True)
    if not (args[1] is None or isinstance(args[1], str)):
        raise InconsistentProgramError(
            f"{where}.inputs[1]: invoke_subgraph's identifier is a string or None, got {_kind(args[1])}; {_FIX}")
    _subgraph_then_operands(0, 2)(args, node, where, subs)


def _subgraph_then_operands(graph_at: int, operands_at: int
                             ) -> Callable[[Sequence[Any], schema.Node, str, dict[str, Any]], None]:
    """HOPs called as ``hop(..., subgraph, ..., *operands)``, the subgraph taking the operands."""

    def check(args: Sequence[Any], node: schema.Node, where: str, subs: dict[str, Any]) -> None:
        _arity(args, operands_at, node.target, where, at_least=True)
        g = _subgraph(args[graph_at], f"inputs[{graph_at}]", f"{where}.inputs[{graph_at}]", subs)
        _takes(g, len(args) - operands_at, f"the subgraph in inputs[{graph_at}]", f"{where}.inputs[{graph_at}]")
        _fits(args[operands_at:], _placeholders(g), "operand", f"{where}.inputs[{graph_at}]")

    return check


def _flex_attention(args: Sequence[Any], node: schema.Node, where: str, subs: dict[str, Any]) -> None:
    # (query, key, value, score_mod, block_mask, scale, kernel_options, score_mod_other_buffers,
    #  mask_mod_other_buffers): score_mod takes (score, batch, head, q_idx, kv_idx, *its buffers)
    _arity(args, 9, "flex_attention", where)
    buffers = _operands(args[7], "score_mod's buffers (inputs[7])", f"{where}.inputs[7]")
    g = _subgraph(args[3], "score_mod (inputs[3])", f"{where}.inputs[3]", subs)
    _takes(g, 5 + len(buffers), "score_mod (inputs[3])", f"{where}.inputs[3]")
    mask_buffers = _operands(args[8], "mask_mod's buffers (inputs[8])", f"{where}.inputs[8]")
    block_mask = _operands(args[4], "the block mask (inputs[4])", f"{where}.inputs[4]")
    if block_mask:  # its last element is mask_mod, taking (batch, head, q_idx, kv_idx, *its buffers)
        g = _subgraph(block_mask[-1], "mask_mod (the block mask's last element)", f"{where}.inputs[4]", subs)
        _takes(g, 4 + len(mask_buffers), "mask_mod (the block mask's last element)", f"{where}.inputs[4]")


def _with_effects(args: Sequence[Any], node: schema.Node, where: str, subs: dict[str, Any]) -> None:
    _arity(args, 2, "with_effects", where, at_least=True)
    if not isinstance(args[1], (torch._ops.OpOverload, torch._ops.HigherOrderOperator)):
        raise InconsistentProgramError(
            f"{where}.inputs[1]: with_effects runs an operator, got {_kind(args[1])}; {_FIX}")


_HOPS: dict[str, Callable[[Sequence[Any], schema.Node, str, dict[str, Any]], None]] = {
    "cond": _cond,
    "while_loop": _while_loop,
    "while_loop_stack_output": _while_loop,
    "map_impl": _map_impl,
    "scan": _scan,
    "associative_scan": _associative_scan,
    "invoke_subgraph": _invoke_subgraph,                          # (subgraph, identifier, *operands)
    "wrap_with_set_grad_enabled": _subgraph_then_operands(1, 2),  # (enabled, subgraph, *operands)
    "wrap_with_autocast": _subgraph_then_operands(4, 5),
    "with_effects": _with_effects,
    "flex_attention": _flex_attention,                                # (token, op, *args)          # (device, dtype, enabled, cache, subgraph, *operands)
}


_BATCH_DIM_AT = {"torch._functorch.predispatch._add_batch_dim": (1, 0),
                 "torch._functorch.predispatch._remove_batch_dim": (3, 1)}
_VMAP_IN = "torch._functorch.predispatch._vmap_increment_nesting"
_VMAP_OUT = "torch._functorch.predispatch._vmap_decrement_nesting"
# Which input of a batch-dim call is its vmap level.
_LEVEL_AT = {"torch._functorch.predispatch._add_batch_dim": 2, "torch._functorch.predispatch._remove_batch_dim": 1}


def check_vmap_nesting(g: schema.Graph, where: str, top_level: bool = False) -> None:
    """vmap levels open and close in pairs within a graph, as tracing through torch.func leaves them;
    an unbalanced graph would leave the interpreter inside a vmap level after it returns. In the
    program's own graph, batch dims are added and removed only inside a level it opened."""
    depth = 0
    for sn in g.nodes:
        depth += (sn.target == _VMAP_IN) - (sn.target == _VMAP_OUT)
        if depth < 0:
            raise InconsistentProgramError(
                f"{where}.nodes[{sn.name!r}]: leaves a vmap level that was never entered; {_FIX}")
        at = _LEVEL_AT.get(sn.target)
        if at is not None and top_level and depth == 0:
            raise InconsistentProgramError(
                f"{where}.nodes[{sn.name!r}]: {sn.target.rsplit('.', 1)[1]} outside any vmap level; {_FIX}")
        if at is not None and at < len(sn.inputs):
            # Levels count from 1; functorch meets any other with a C++ internal assert, not an
            # error. (A subgraph may use levels its caller opened, so no upper bound here.)
            level = sn.inputs[at].arg.as_int
            if level is not None and level < 1:
                raise InconsistentProgramError(
                    f"{where}.nodes[{sn.name!r}].inputs[{at}]: vmap level {level}; levels count from 1; {_FIX}")
    if depth:
        raise InconsistentProgramError(f"{where}: enters {depth} vmap level(s) it never leaves; {_FIX}")


# ---------------------------------------------------------------- signature and module call graph

_NAMED = ("as_tensor", "as_sym_int", "as_sym_bool", "as_sym_float", "as_custom_obj")


def _arg_name(a: schema.Argument) -> str | None:
    if a.as_tensor is not None:  # the common case, without the union dispatch
        return a.as_tensor.name
    kind = a.kind  # asked once: each ask walks the union's members
    if kind not in _NAMED:
        return None
    v = getattr(a, kind)
    return getattr(v, "name", None) if kind in ("as_tensor", "as_custom_obj") else getattr(v, "as_name", None)


def _spec_name(s: Any, kind: str) -> str | None:
    """The graph value a signature spec (whose union member is ``kind``) refers to (None for constants)."""
    v = getattr(s, kind)
    if kind == "constant_input":
        return v.name
    arg = v.arg
    if isinstance(arg, schema.Argument):
        return _arg_name(arg)
    return getattr(arg, "name", None)


def check_signature(g: schema.Graph, sig: schema.GraphSignature) -> None:
    """The graph's inputs and outputs are exactly what the signature's specs describe, in order."""
    if g.is_single_tensor_return:
        raise InconsistentProgramError(
            f"graph.is_single_tensor_return: the top-level graph of an exported program returns a tuple; {_FIX}")
    if len(g.inputs) != len(sig.input_specs):
        raise InconsistentProgramError(
            f"signature.input_specs: {len(sig.input_specs)} specs for {len(g.inputs)} graph inputs; {_FIX}")
    for i, (a, s) in enumerate(zip(g.inputs, sig.input_specs, strict=True)):
        kind = s.kind
        name, spec = _arg_name(a), _spec_name(s, kind)
        if (kind == "constant_input") != (name is None):
            # The writer stores a constant input as its value in the graph, and only it.
            raise InconsistentProgramError(
                f"signature.input_specs[{i}]: a {kind} spec for graph.inputs[{i}] ({a.kind}); constant "
                f"inputs, and only they, are stored as values; {_FIX}")
        if kind == "constant_input":
            continue
        if name != spec:
            raise InconsistentProgramError(
                f"signature.input_specs[{i}]: describes {spec!r} but graph.inputs[{i}] is "
                f"{name if name is not None else a.kind!r}; {_FIX}")
    if len(g.outputs) != len(sig.output_specs):
        raise InconsistentProgramError(
            f"signature.output_specs: {len(sig.output_specs)} specs for {len(g.outputs)} graph outputs; {_FIX}")
    for i, (a, s) in enumerate(zip(g.outputs, sig.output_specs, strict=True)):
        name, spec = _arg_name(a), _spec_name(s, s.kind)
        if name != spec:
            raise InconsistentProgramError(
                f"signature.output_specs[{i}]: describes {spec!r} but graph.outputs[{i}] is "
                f"{name if name is not None else a.kind!r}; {_FIX}")


_WEIGHT_KINDS = frozenset({"PARAMETER", "BUFFER", "CONSTANT_TENSOR"})


def check_weights_fit_graph(graph: torch.fx.Graph, input_specs: Sequence[Any], state_dict: dict[str, Any],
                            constants: dict[str, Any]) -> None:
    """Every parameter, buffer and tensor constant is what the graph's placeholder for it says (dtype,
    sizes, strides): the graph was traced, and its size arithmetic worked out, for those. A weight of
    another shape fails inside a kernel at run time, or worse, broadcasts and computes something else.
    Each is also in the table ``ep.module()`` takes it from: parameters and persistent buffers in the
    state dict, non-persistent buffers and tensor constants among the constants."""
    placeholders = {}
    for n in graph.nodes:
        if n.op != "placeholder":
            break
        placeholders[n.name] = n
    for i, spec in enumerate(input_specs):
        if spec.kind.name not in _WEIGHT_KINDS:
            continue
        # Where ep.module() looks for it: a non-persistent buffer is not in the state dict.
        in_state_dict = spec.kind.name == "PARAMETER" or (spec.kind.name == "BUFFER" and spec.persistent)
        table, other = (state_dict, constants) if in_state_dict else (constants, state_dict)
        if spec.target not in table:
            what = "persistent buffer" if spec.kind.name == "BUFFER" and spec.persistent else \
                "non-persistent buffer" if spec.kind.name == "BUFFER" else spec.kind.name.lower().replace("_", " ")
            own, others = ("state_dict", "constants") if in_state_dict else ("constants", "state_dict")
            found = f"this one is in weights.{others}" if spec.target in other else "this one is in neither"
            raise InconsistentProgramError(
                f"graph_module.signature.input_specs[{i}] ({spec.target!r}): a {what} is stored in "
                f"weights.{own}, {found}; {_FIX}")
        node = placeholders.get(spec.arg.name)
        want = node.meta.get("val") if node is not None else None
        have = table.get(spec.target)
        if not (isinstance(want, torch.Tensor) and isinstance(have, torch.Tensor)):
            continue
        plain = type(have) in (torch.Tensor, torch.nn.Parameter)  # a subclass's outer strides are its own
        if have.dtype != want.dtype or have.shape != want.shape or (plain and have.stride() != want.stride()):
            raise InconsistentProgramError(
                f"graph_module.signature.input_specs[{i}] ({spec.target!r}): the weight is {have.dtype} "
                f"{list(have.shape)} with strides {list(have.stride())}, the graph's placeholder "
                f"{spec.arg.name!r} takes {want.dtype} {list(want.shape)} with strides {list(want.stride())}; {_FIX}")


def check_module_call_graph(entries: list[Any], sig: schema.GraphSignature) -> None:
    """Each entry's pytree specs hold one leaf per flat input/output of its signature.

    ``entries`` are torch ``ModuleCallEntry`` objects (their specs already deserialized).
    """
    user_in = sum(1 for s in sig.input_specs if s.kind in ("user_input", "constant_input"))
    if not entries or entries[0].fqn != "" or entries[0].signature is None:
        raise InconsistentProgramError(
            "module_call_graph[0]: an exported program's module call graph starts with the root module "
            f"(fqn '') and its signature; {_FIX}")
    for i, e in enumerate(entries):
        s = e.signature
        if s is None:
            continue
        where = f"module_call_graph[{i}] ({e.fqn!r})"
        names = s.forward_arg_names
        if names is not None and len(set(names)) != len(names):
            raise InconsistentProgramError(f"{where}.forward_arg_names: {names} names an argument twice; {_FIX}")
        ins, outs = len(s.inputs), len(s.outputs)
        if e.fqn == "":
            ins, outs = user_in, sum(1 for o in sig.output_specs if o.kind in ("user_output", "loss_output"))
            spec = s.in_spec
            # torch.export calls the root module as forward(*args, **kwargs): its spec is (args, kwargs).
            if spec is not None and not (spec.type is tuple and spec.num_children == 2
                                         and spec.child(0).type is tuple
                                         and spec.child(1).type is dict):
                raise InconsistentProgramError(
                    f"{where}.in_spec: the root module's inputs must be a tuple (args, kwargs), got {spec}; {_FIX}")
        for what, spec, n in (("in_spec", s.in_spec, ins), ("out_spec", s.out_spec, outs)):
            if spec is not None and spec.num_leaves != n:
                raise InconsistentProgramError(
                    f"{where}.{what}: the pytree spec holds {spec.num_leaves} leaves but the signature has "
                    f"{n}; {_FIX}")
        if e.fqn == "" and names and s.in_spec is not None:
            # ep.module() generates forward(self, <names>) and passes the keyword arguments on by
            # name: one name per positional argument, then the keyword names of the in_spec.
            n_args, keys = s.in_spec.child(0).num_children, list(s.in_spec.child(1).context)
            if len(names) != n_args + len(keys) or set(names[n_args:]) != set(keys):
                raise InconsistentProgramError(
                    f"{where}.forward_arg_names: {names} does not name the {n_args} positional arguments "
                    f"and then the keyword arguments {keys} of the in_spec; {_FIX}")
