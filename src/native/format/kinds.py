"""The value-kind check: every kernel argument and output fits its operator's schema, every move its destination.

A program declares each value's kind in its ``values`` table, and a ``KernelCall`` names its
operator; whether the two fit is decided here, from the table below and the operator's schema,
never left to a runtime's argument conversion. The runtimes convert differently where a file
breaks the contract: ``torch.ops`` takes an int, a tensor or even None for a ``bool`` parameter,
the C++ runtime's boxed call refuses them, so an unchecked file could run in one runtime and fail
in the other. Both runtimes run this check first when they load a program (``Method``), after
:mod:`native.format.verify`'s structural checks, which need no torch while this one needs the process's
operator schemas; ``native_cpp/kinds.cpp`` applies the same rules, in the same order, with the
same messages (``NativeFormatError``).

What a parameter takes, by the kind of its schema type (the parameter's own type; ``T?`` also
takes None; ``T[]`` takes a boxed ``List`` whose items each fit ``T``, or a constant list whose
item kind fits ``T``, or an empty constant list):

==================  ================================================================
Tensor              Tensor; a bare ``Tensor`` parameter of an operator in
                    ``NUMBERS_AS_TENSORS`` also takes Int, Float, Bool, Complex, SymInt,
                    SymFloat, SymBool (``aten::add.Tensor(x, 2)``)
int, SymInt         Int, SymInt
float, SymFloat     Float, Int, SymFloat, SymInt
bool, SymBool       Bool, SymBool
Scalar              Int, Float, Bool, Complex, SymInt, SymFloat, SymBool
complex             Complex, Float, Int, SymFloat, SymInt
str                 String
ScalarType          ScalarType, Int (schemas give some dtype defaults as ints)
Layout              Layout, Int
MemoryFormat        MemoryFormat, Int (``contiguous``'s default is an int)
Device              Device
Any, t (type var)   anything
anything else       nothing (Generator, Storage, classes, dicts, ...: the emitter has no
                    value for them; ``Generator?`` takes None)
==================  ================================================================

Numbers where a tensor is expected follow ``torch.ops``: its argument parser makes a number a
wrapped-number tensor only for the aten operators ``NUMBERS_AS_TENSORS`` names (torch's
``should_allow_numbers_as_tensors``; a test compares the two), only for a bare ``Tensor``
parameter (not ``Tensor?``, not list items), and refuses it everywhere else. The C++ runtime
would wrap a number for any operator, so a number elsewhere would run there and fail in Python.

The ``symbolic::`` operators (:mod:`native.format.prim`) take numbers (Int, Float, Bool, SymInt,
SymFloat, SymBool): two for the binary ops and ``max``/``min``, one for the unary ones, three
for ``ite``, and a list of numbers for ``sum``.

A call lists one output per return of its operator's schema (``symbolic::`` operators: one),
each -1 (discarded) or a value the return may be written to, by the kind of its schema type:

==================  ================================================================
Tensor, Tensor?     Tensor
int, SymInt         SymInt
float, SymFloat     SymFloat
bool, SymBool       SymBool
Scalar              SymInt, SymFloat, SymBool (``symbolic::`` results too)
T[]                 a boxed ``List`` whose items each may be written a ``T``
Any, t (type var)   anything
anything else       nothing: only -1 (str, ScalarType, Device, ...: the emitter has no
                    run-time value for them)
==================  ================================================================

Constants are never written: a result in an ``Int`` slot would reach the next reader as a
tensor, past the argument check above, which trusts the declared kinds. For the same reason a
``MoveCall`` writes only a value of a kind that holds its source's: a Tensor takes a Tensor (or
None: ``with_effects``' token placeholder); a SymInt, SymFloat or SymBool takes what an ``int``,
``float`` or ``bool`` parameter takes (loop counters and carried values start from constants).
No other kind is written by a move.

A call may give fewer arguments than its schema has parameters when the missing ones have
defaults (a newer torch may add such parameters), never more. A call's out= variant, when it
has one, must be a torch operator whose other parameters take the same arguments and whose
out= arguments match the call's outputs. Operators not registered in this process are left to
the runtimes, which refuse them by name when they load.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from native.format import program as P
from native.format.prim import NAMESPACE, PRIM_OPS
from native.format.verify import damaged

__all__ = ["check_kinds", "kind_name", "NUMBERS_AS_TENSORS"]

# aten operators (by name, any overload) whose bare Tensor parameters take numbers.
NUMBERS_AS_TENSORS = frozenset({
    "_conj", "_to_copy", "add", "add_", "copy", "copy_", "div", "div_", "divide", "divide_", "floor_divide",
    "floor_divide_", "mul", "mul_", "multiply", "multiply_", "sub", "sub_", "subtract", "subtract_", "to",
    "true_divide", "true_divide_"})

_NUMBERS = frozenset({P.Int, P.Float, P.Bool, P.Complex, P.SymInt, P.SymFloat, P.SymBool})
_INTS = frozenset({P.Int, P.SymInt})
_FLOATS = frozenset({P.Float, P.Int, P.SymFloat, P.SymInt})
_BOOLS = frozenset({P.Bool, P.SymBool})
# Value kinds taken by a parameter of each torch type kind (``Type.kind()``), as they are.
_SCALARS: dict[str, frozenset[type]] = {
    "TensorType": frozenset({P.Tensor}),
    "IntType": _INTS, "SymIntType": _INTS,
    "FloatType": _FLOATS, "SymFloatType": _FLOATS,
    "BoolType": _BOOLS, "SymBoolType": _BOOLS,
    "NumberType": _NUMBERS,
    "ComplexType": frozenset({P.Complex, P.Float, P.Int, P.SymFloat, P.SymInt}),
    "StringType": frozenset({P.String}),
    "ScalarTypeType": frozenset({P.ScalarType, P.Int}),
    "LayoutType": frozenset({P.Layout, P.Int}),
    "MemoryFormatType": frozenset({P.MemoryFormat, P.Int}),
    "DeviceObjType": frozenset({P.Device}),
}
_ANY_LIKE = frozenset({"AnyType", "VarType"})
# A constant list is a list of items of this kind.
_ITEM_KINDS: dict[type, type] = {P.IntList: P.Int, P.FloatList: P.Float, P.BoolList: P.Bool,
                                 P.StringList: P.String}
_KIND_NAMES: dict[type, str] = {t: "None" if t is P.NoneValue else t.__name__ for t in P.VALUE_TYPES}


def kind_name(t: type) -> str:
    """The name messages give a value kind: its class name, ``None`` for ``NoneValue``."""
    return _KIND_NAMES[t]


@dataclass(frozen=True)
class _Takes:
    """The value kinds one parameter (or list item) takes."""

    kinds: frozenset[type]
    items: _Takes | None = None  # a list type: what each item takes
    any: bool = False


@dataclass(frozen=True)
class _Param:
    name: str  # as messages show it: 'keepdim'
    type: str  # the schema's spelling: bool, Tensor?[], SymInt[]
    takes: _Takes
    has_default: bool = False


@dataclass(frozen=True)
class _Return:
    type: str  # the schema's spelling: Tensor, Tensor[], SymInt
    gives: _Takes  # the value kinds it may be written to


@dataclass(frozen=True)
class _Signature:
    params: tuple[_Param, ...]
    n_out: int = 0  # out= arguments (not in params)
    returns: tuple[_Return, ...] = ()


_SYMBOLIC = frozenset({P.SymInt, P.SymFloat, P.SymBool})
# Value kinds a result of each torch type kind may be written to.
_GIVES: dict[str, frozenset[type]] = {
    "TensorType": frozenset({P.Tensor}),
    "IntType": frozenset({P.SymInt}), "SymIntType": frozenset({P.SymInt}),
    "FloatType": frozenset({P.SymFloat}), "SymFloatType": frozenset({P.SymFloat}),
    "BoolType": frozenset({P.SymBool}), "SymBoolType": frozenset({P.SymBool}),
    "NumberType": _SYMBOLIC,
}
# What a move may write into a value of each kind (a kind not here is never written by a move).
_MOVES: dict[type, frozenset[type]] = {
    P.Tensor: frozenset({P.Tensor, P.NoneValue}),
    P.SymInt: _INTS, P.SymFloat: _FLOATS, P.SymBool: _BOOLS,
}

_NUMBER = _Takes(_NUMBERS - {P.Complex})
_PRIM_BINARY = (_Param("'a'", "number", _NUMBER), _Param("'b'", "number", _NUMBER))
_PRIM_UNARY = (_Param("'x'", "number", _NUMBER),)
_PRIM_RETURNS = (_Return("number", _Takes(_SYMBOLIC)),)
_PRIM_SIGNATURES: dict[str, _Signature] = {
    **{n: _Signature(_PRIM_BINARY, 0, _PRIM_RETURNS)
       for n in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "eq", "ne", "lt", "le", "gt", "ge", "and",
                 "or", "lshift", "rshift", "max", "min")},
    **{n: _Signature(_PRIM_UNARY, 0, _PRIM_RETURNS)
       for n in ("neg", "pos", "abs", "floor", "ceil", "trunc", "round", "not", "float", "int", "sqrt")},
    "ite": _Signature((_Param("'c'", "number", _NUMBER), *_PRIM_BINARY), 0, _PRIM_RETURNS),
    "sum": _Signature((_Param("'xs'", "number[]", _Takes(frozenset(), _NUMBER)),), 0, _PRIM_RETURNS),
}

assert set(_PRIM_SIGNATURES) == set(PRIM_OPS), "symbolic operator signatures are incomplete"

_torch_signatures: dict[tuple[str, str], _Signature] = {}


def check_kinds(p: P.Program, what: str) -> None:
    """Refuse the first kernel call whose arguments or outputs do not fit its operator, or move
    whose destination cannot hold its source (see the module docstring), with a NativeFormatError
    that names ``what`` (the file); ``p``'s indices are already known to be in range.
    """
    sigs = [_signature(op) for op in p.operators]
    for pc, ins in enumerate(p.instructions):
        check = _INSTRUCTION_CHECKS[type(ins)]
        if check is not None:
            check(p, sigs, pc, ins, what)


def _check_kernel(p: P.Program, sigs: list, pc: int, ins: P.KernelCall, what: str) -> None:
    values = p.values
    sig = sigs[ins.op]
    if sig is not None:
        _check_functional(pc, p.operators[ins.op], sig, what)
        _check_call(pc, ins, p.operators[ins.op], sig, values, what)
        _check_outputs(pc, ins, p.operators[ins.op], sig, values, what)
    if ins.out_op == -1:
        return
    out = p.operators[ins.out_op]
    if out.name.startswith(NAMESPACE + "::"):
        raise damaged(what, f"instructions[{pc}]", f"the out= variant {out.name}.{out.overload} is not a torch operator")
    sig = sigs[ins.out_op]
    if sig is None:
        return
    _check_call(pc, ins, out, sig, values, what)
    if sig.n_out != len(ins.outs):
        raise damaged(what, f"instructions[{pc}]", f"the out= variant {out.name}.{out.overload} has "
                                                   f"{sig.n_out} out= arguments for {len(ins.outs)} outputs")


def _check_functional(pc: int, op: P.Operator, sig: _Signature, what: str) -> None:
    # A call's op runs functionally, and nothing fills an out= argument there: torch.ops would
    # refuse the call ("missing value for argument 'out'") at its first run.
    if sig.n_out:
        raise damaged(what, f"instructions[{pc}]", f"operator {op.name}.{op.overload} has {sig.n_out} out= "
                                                   "arguments, which a call's op (run functionally) never fills; "
                                                   "name the functional overload as op and this one as out_op")


def _check_move(p: P.Program, sigs: list, pc: int, ins: P.MoveCall, what: str) -> None:
    src, dst = type(p.values[ins.src]), type(p.values[ins.dst])
    holds = _MOVES.get(dst)
    if holds is None:
        raise damaged(what, f"instructions[{pc}]", f"moves value {ins.src} into value {ins.dst} (kind "
                                                   f"{kind_name(dst)}), which a move never writes (only "
                                                   f"{_names(_MOVES)} values)")
    if src not in holds:
        raise damaged(what, f"instructions[{pc}]", f"moves value {ins.src} (kind {kind_name(src)}) into value "
                                                   f"{ins.dst} (kind {kind_name(dst)}), which holds only {_names(holds)}")


_INSTRUCTION_CHECKS: dict[type, Any] = {
    P.KernelCall: _check_kernel, P.MoveCall: _check_move, P.JumpFalseCall: None, P.FreeCall: None,
    P.AllocCall: None,
}
assert set(_INSTRUCTION_CHECKS) == set(P.INSTRUCTION_TYPES), "instruction dispatch is incomplete"


def _names(kinds: Any) -> str:
    """Kind names in the value table's order, as messages list them: 'Int, SymInt'."""
    return ", ".join(kind_name(t) for t in P.VALUE_TYPES if t in kinds)


def _check_call(pc: int, ins: P.KernelCall, op: P.Operator, sig: _Signature, values: list, what: str) -> None:
    params, args = sig.params, ins.args
    if len(args) > len(params):
        raise damaged(what, f"instructions[{pc}]", f"operator {op.name}.{op.overload} takes {len(params)} arguments, "
                                                   f"the call gives {len(args)}")
    for j, a in enumerate(args):
        takes = params[j].takes
        if takes.any or type(values[a]) in takes.kinds:  # the common case costs one set lookup
            continue
        bad = _misfit(takes, values, a)
        if bad is None:
            continue
        got = _described(values, a, *bad)
        raise damaged(what, f"instructions[{pc}].args[{j}]", f"operator {op.name}.{op.overload} parameter "
                                                             f"{params[j].name} ({params[j].type}) cannot take value {got}")
    for param in params[len(args):]:
        if not param.has_default:
            raise damaged(what, f"instructions[{pc}]", f"operator {op.name}.{op.overload} parameter {param.name} "
                                                       f"({param.type}) is not given and has no default")


def _check_outputs(pc: int, ins: P.KernelCall, op: P.Operator, sig: _Signature, values: list, what: str) -> None:
    returns, outs = sig.returns, ins.outs
    if len(outs) != len(returns):
        raise damaged(what, f"instructions[{pc}]", f"operator {op.name}.{op.overload} returns {len(returns)} values, "
                                                   f"the call lists {len(outs)} outputs")
    for j, o in enumerate(outs):
        if o == -1:
            continue
        gives = returns[j].gives
        if gives.any or type(values[o]) in gives.kinds:
            continue
        bad = _unwritable(gives, values, o)
        if bad is None:
            continue
        got = _described(values, o, *bad)
        raise damaged(what, f"instructions[{pc}].outs[{j}]", f"operator {op.name}.{op.overload} return {j} "
                                                             f"({returns[j].type}) cannot be written to value {got}")


def _described(values: list, v: int, path: str, w: int) -> str:
    """Value ``v`` and its kind, and where ``path`` names an item of it, that item ``w`` and its kind."""
    inner = f": its {path} is value {w}, kind {kind_name(type(values[w]))}" if path else ""
    return f"{v} (kind {kind_name(type(values[v]))}{inner})"


def _unwritable(gives: _Takes, values: list, v: int) -> tuple[str, int] | None:
    """None when a result may be written to value ``v``; else (the path of the item that may not,
    "" for ``v`` itself, that item). Unlike an argument, never a constant list."""
    val = values[v]
    if gives.any or type(val) in gives.kinds:
        return None
    if gives.items is not None and type(val) is P.List:
        for i, item in enumerate(val.items):
            bad = _unwritable(gives.items, values, item)
            if bad is not None:
                path, w = bad
                return f"items[{i}]" + (f".{path}" if path else ""), w
        return None
    return "", v


def _misfit(takes: _Takes, values: list, v: int) -> tuple[str, int] | None:
    """None when value ``v`` fits; else (the path of the item that does not, "" for ``v`` itself, that item)."""
    val = values[v]
    t = type(val)
    if takes.any or t in takes.kinds:
        return None
    items = takes.items
    if items is not None:
        if t is P.List:
            for i, item in enumerate(val.items):
                bad = _misfit(items, values, item)
                if bad is not None:
                    path, w = bad
                    return f"items[{i}]" + (f".{path}" if path else ""), w
            return None
        item_kind = _ITEM_KINDS.get(t)
        if item_kind is not None and (not val.v or items.any or item_kind in items.kinds):
            return None
    return "", v


def _signature(op: P.Operator) -> _Signature | None:
    """The operator's parameters; None when it is not known here (the runtimes name it at load)."""
    ns, name = op.name.split("::", 1)
    if ns == NAMESPACE:
        return _PRIM_SIGNATURES.get(name) if op.overload == "default" else None
    key = (op.name, op.overload)
    sig = _torch_signatures.get(key)
    if sig is None:
        try:  # the dispatcher's operators, as the C++ runtime finds them (not TorchScript-only ones)
            schema = torch._C._dispatch_find_schema_or_throw(
                op.name, "" if op.overload == "default" else op.overload).schema()
        except RuntimeError:
            return None  # not registered (yet): not cached, a library may register it later
        wrap = ns == "aten" and name in NUMBERS_AS_TENSORS
        sig = _torch_signatures[key] = _Signature(
            tuple(_Param(f"'{a.name}'", a.real_type.str(), _takes(a.real_type, wrap), a.has_default_value())
                  for a in schema.arguments if not a.is_out),
            sum(a.is_out for a in schema.arguments),
            tuple(_Return(r.real_type.str(), _gives(r.real_type)) for r in schema.returns))
    return sig


def _takes(t: Any, wrap: bool) -> _Takes:
    """What a parameter of torch type ``t`` takes; ``wrap``: a number is taken for a bare Tensor."""
    k = t.kind()
    if k == "OptionalType":
        inner = _takes(t.getElementType(), False)
        return _Takes(inner.kinds | {P.NoneValue}, inner.items, inner.any)
    if k == "ListType":
        return _Takes(frozenset(), _takes(t.getElementType(), False))
    if k in _ANY_LIKE:
        return _Takes(frozenset(), any=True)
    kinds = _SCALARS.get(k, frozenset())
    if k == "TensorType" and wrap:
        kinds |= _NUMBERS
    return _Takes(kinds)


def _gives(t: Any) -> _Takes:
    """The value kinds a result of torch type ``t`` may be written to (a None result is discarded)."""
    k = t.kind()
    if k == "OptionalType":
        return _gives(t.getElementType())
    if k == "ListType":
        return _Takes(frozenset(), _gives(t.getElementType()))
    if k in _ANY_LIKE:
        return _Takes(frozenset(), any=True)
    return _Takes(_GIVES.get(k, frozenset()))
