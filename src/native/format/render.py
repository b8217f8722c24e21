"""Readable listings of native programs (``pt2serde emit --listing``) and one-line summaries. No torch."""

from __future__ import annotations

from native.format import exprs as E
from native.format import program as P
from serde.core import schema

__all__ = ["render", "summary", "expr_text"]

_DTYPE = {
    schema.ScalarType.BYTE: "u8", schema.ScalarType.CHAR: "i8", schema.ScalarType.SHORT: "i16",
    schema.ScalarType.INT: "i32", schema.ScalarType.LONG: "i64", schema.ScalarType.HALF: "f16",
    schema.ScalarType.FLOAT: "f32", schema.ScalarType.DOUBLE: "f64", schema.ScalarType.BOOL: "b8",
    schema.ScalarType.BFLOAT16: "bf16", schema.ScalarType.COMPLEXFLOAT: "c64",
    schema.ScalarType.COMPLEXDOUBLE: "c128",
}
_INFIX = {E.FLOORDIV: "//", E.MOD: "%", E.POW: "**", E.EQ: "==", E.NE: "!=", E.LT: "<", E.LE: "<=",
          E.GT: ">", E.GE: ">="}


def expr_text(code: list[int], symbols: list[P.Symbol]) -> str:
    """Infix text of postfix code (fully parenthesized inner terms)."""
    stack: list[str] = []
    i = 0
    while i < len(code):
        op = code[i]
        name, has_imm, arity = E.OPS[op]
        if op == E.PUSH:
            stack.append(str(code[i + 1]))
        elif op == E.SYM:
            k = code[i + 1]
            stack.append(symbols[k].name if 0 <= k < len(symbols) else f"?{k}")
        else:
            k = code[i + 1] if has_imm else arity
            args = stack[len(stack) - k:]
            del stack[len(stack) - k:]
            if op == E.ADD:
                stack.append("(" + " + ".join(args) + ")")
            elif op == E.MUL:
                stack.append("*".join(args))
            elif op in _INFIX:
                stack.append(f"({args[0]} {_INFIX[op]} {args[1]})")
            elif op == E.WHERE:
                stack.append(f"({args[1]} if {args[0]} else {args[2]})")
            else:
                stack.append(f"{name}({', '.join(args)})")
        i += 2 if has_imm else 1
    text = stack[0] if stack else "?"
    return text[1:-1] if text.startswith("(") and text.endswith(")") and text.count("(") == 1 else text


def _dim(d: P.Dim, p: P.Program) -> str:
    return str(d) if isinstance(d, int) else f"e{d.expr}"


def _tensor(v: P.Tensor, p: P.Program) -> str:
    dt = _DTYPE.get(schema.ScalarType(v.dtype), schema.ScalarType(v.dtype).name.lower())
    text = f"{dt}[{', '.join(_dim(d, p) for d in v.sizes)}] stride [{', '.join(_dim(d, p) for d in v.strides)}]"
    if v.storage_offset != 0:
        text += f" offset {_dim(v.storage_offset, p)}"
    return text + (f" <- constants[{v.data}]" if v.data >= 0 else "")


def _plain(v: P.Value, p: P.Program) -> str:
    return repr(v.v)


_VALUES = {
    **{t: _plain for t in (P.Int, P.Float, P.Bool, P.String, P.IntList, P.FloatList, P.BoolList, P.StringList)},
    P.NoneValue: lambda v, p: "None",
    P.Complex: lambda v, p: repr(complex(v.real, v.imag)),
    P.ScalarType: lambda v, p: f"dtype {schema.ScalarType(v.v).name}",
    P.Layout: lambda v, p: f"layout {schema.Layout(v.v).name}",
    P.MemoryFormat: lambda v, p: f"memory_format {schema.MemoryFormat(v.v).name}",
    P.Device: lambda v, p: f"device {v.kind}" + (f":{v.index}" if v.index is not None else ""),
    P.Tensor: _tensor,
    P.List: lambda v, p: "[" + ", ".join(f"%{i}" for i in v.items) + "]",
    P.SymInt: lambda v, p: "SymInt" + (f" = e{v.expr}" if v.expr >= 0 else ""),
    P.SymFloat: lambda v, p: "SymFloat",
    P.SymBool: lambda v, p: "SymBool" + (f" = e{v.expr}" if v.expr >= 0 else ""),
}


def _kernel(ins: P.KernelCall, p: P.Program) -> str:
    op = p.operators[ins.op]
    outs = ", ".join("_" if o == -1 else f"%{o}" for o in ins.outs)
    call = f"{op.name}.{op.overload}({', '.join(f'%{a}' for a in ins.args)})"
    if ins.out_op >= 0:
        call += f"  [out= .{p.operators[ins.out_op].overload}]"
    return f"{outs} = {call}" if ins.outs else call


def _jump(ins: P.JumpFalseCall, p: P.Program) -> str:
    c = p.values[ins.cond]
    if isinstance(c, P.Bool) and not c.v:
        return f"jump -> {ins.target}"
    return f"jump_false %{ins.cond} -> {ins.target}"


_INSTRUCTIONS = {
    P.KernelCall: _kernel,
    P.MoveCall: lambda ins, p: f"%{ins.dst} = move %{ins.src}",
    P.JumpFalseCall: _jump,
    P.FreeCall: lambda ins, p: f"free %{ins.value}",
    P.AllocCall: lambda ins, p: f"%{ins.value} = alloc",
}
assert set(_VALUES) == set(P.VALUE_TYPES) and set(_INSTRUCTIONS) == set(P.INSTRUCTION_TYPES)


def render(p: P.Program) -> str:
    """A full listing: symbols, expressions, values, operators, state, instructions, plan."""
    lines = ["symbols:"]
    for s in p.symbols:
        src = "unbacked" if s.input < 0 else (
            f"{p.inputs[s.input].name}" + (f".shape[{s.dim}]" if s.dim >= 0 else ""))
        if s.input >= 0 and (s.scale != 1 or s.offset):
            src = f"({src} - {s.offset}) / {s.scale}"
        lines.append(f"  {s.name} = {src}  range [{s.min}, {s.max if s.max is not None else 'inf'}]")
    lines.append("exprs:")
    lines += [f"  e{i} = {expr_text(c, p.symbols)}" for i, c in enumerate(p.exprs)]
    lines.append("values:")
    names = {i.value: f"input {i.name}" for i in p.inputs}
    names.update({s.value: f"{s.kind} {s.name}" + (" (mutable)" if s.mutable else "") for s in p.state})
    for i, v in enumerate(p.values):
        note = f"  # {names[i]}" if i in names else ""
        lines.append(f"  %{i} = {_VALUES[type(v)](v, p)}{note}")
    lines.append("instructions:")
    lines += [f"  {pc}: {_INSTRUCTIONS[type(ins)](ins, p)}" for pc, ins in enumerate(p.instructions)]
    lines.append(f"outputs: {', '.join(f'%{o}' for o in p.outputs)}")
    lines.append(summary(p))
    return "\n".join(lines) + "\n"


def summary(p: P.Program) -> str:
    mp = p.memory_plan
    counts: dict[str, int] = {}
    for ins in p.instructions:
        counts[type(ins).__name__] = counts.get(type(ins).__name__, 0) + 1
    kinds = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
    return (f"{len(p.values)} values, {len(p.operators)} operators, {len(p.instructions)} instructions ({kinds}), "
            f"{len(p.constants)} constants; memory plan: arena {mp.arena_size} bytes for "
            f"{len(mp.allocations)} tensors (naive {mp.naive_size} bytes), {mp.unplanned} left to the allocator")
