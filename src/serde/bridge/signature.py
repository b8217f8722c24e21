"""Graph signature and module call graph <-> schema.

Input and output spec kinds map to union members through one table each, inverted for reading.
"""

from __future__ import annotations

from typing import Any

import torch.export.exported_program as epm
import torch.export.graph_signature as gs

from serde.core import schema
from serde.errors import MalformedArtifactError, UnsupportedConstructError

from .treespec import (
    check_input_classes,
    deserialize_treespec,
    serialize_treespec,
)

__all__ = [
    "serialize_signature", "deserialize_signature", "serialize_argument_spec", "deserialize_argument_spec",
    "serialize_module_call_graph", "deserialize_module_call_graph", "constant_input_names",
    "module_call_graph_names",
]

A = schema.Argument

# ---------------------------------------------------------------- argument specs


def _constant(value: Any, where: str) -> schema.ConstantValue:
    if value is None:
        return schema.ConstantValue(as_none=True)
    if isinstance(value, bool):
        return schema.ConstantValue(as_bool=value)
    if isinstance(value, int):
        return schema.ConstantValue(as_int=value)
    if isinstance(value, float):
        return schema.ConstantValue(as_float=schema.to_f64(value))
    if isinstance(value, str):
        return schema.ConstantValue(as_string=value)
    raise UnsupportedConstructError(
        f"{where}: constant input of type {type(value).__name__} cannot be stored; "
        "use None, bool, int, float or str"
    )


def _constant_value(c: schema.ConstantValue) -> Any:
    if c.as_float is not None:
        return schema.from_f64(c.as_float)
    return None if c.as_none is not None else c.value


def serialize_argument_spec(a: Any, where: str) -> schema.Argument:
    if isinstance(a, gs.TensorArgument):
        return A(as_tensor=schema.TensorArgument(name=a.name))
    if isinstance(a, gs.SymIntArgument):
        return A(as_sym_int=schema.SymIntArgument(as_name=a.name))
    if isinstance(a, gs.SymFloatArgument):
        return A(as_sym_float=schema.SymFloatArgument(as_name=a.name))
    if isinstance(a, gs.SymBoolArgument):
        return A(as_sym_bool=schema.SymBoolArgument(as_name=a.name))
    if isinstance(a, gs.CustomObjArgument):
        return A(as_custom_obj=schema.CustomObjArgument(name=a.name, class_fqn=a.class_fqn))
    if isinstance(a, gs.ConstantArgument):
        c = _constant(a.value, where)
        return A(**{c.kind: c.value})
    raise UnsupportedConstructError(f"{where}: argument spec {a!r} cannot be stored")


def deserialize_argument_spec(a: schema.Argument, where: str) -> Any:
    k = a.kind
    v = getattr(a, k)
    if k == "as_tensor":
        return gs.TensorArgument(name=v.name)
    if k in ("as_sym_int", "as_sym_float", "as_sym_bool"):
        cls = {"as_sym_int": gs.SymIntArgument, "as_sym_float": gs.SymFloatArgument,
               "as_sym_bool": gs.SymBoolArgument}[k]
        if v.as_name is not None:
            return cls(name=v.as_name)
        return gs.ConstantArgument(name="", value=schema.from_f64(v.value) if k == "as_sym_float" else v.value)
    if k == "as_custom_obj":
        return gs.CustomObjArgument(name=v.name, class_fqn=v.class_fqn)
    if k in ("as_none", "as_int", "as_bool", "as_string"):
        return gs.ConstantArgument(name="", value=None if k == "as_none" else v)
    if k == "as_float":
        return gs.ConstantArgument(name="", value=schema.from_f64(v))
    raise MalformedArtifactError(f"{where}: {k} is not a valid argument spec")


# ---------------------------------------------------------------- signature

_TA = schema.TensorArgument

# kind -> (union member, schema struct, field holding the target)
_INPUT_KINDS = {
    gs.InputKind.PARAMETER: ("parameter", schema.InputToParameterSpec, "parameter_name"),
    gs.InputKind.BUFFER: ("buffer", schema.InputToBufferSpec, "buffer_name"),
    gs.InputKind.CONSTANT_TENSOR: ("tensor_constant", schema.InputToTensorConstantSpec, "tensor_constant_name"),
    gs.InputKind.CUSTOM_OBJ: ("custom_obj", schema.InputToCustomObjSpec, "custom_obj_name"),
}
_INPUT_MEMBERS = {m: (k, cls, f) for k, (m, cls, f) in _INPUT_KINDS.items()}
_OUTPUT_KINDS = {
    gs.OutputKind.LOSS_OUTPUT: ("loss_output", schema.LossOutputSpec, None),
    gs.OutputKind.BUFFER_MUTATION: ("buffer_mutation", schema.BufferMutationSpec, "buffer_name"),
    gs.OutputKind.PARAMETER_MUTATION: ("parameter_mutation", schema.ParameterMutationSpec, "parameter_name"),
    gs.OutputKind.GRADIENT_TO_PARAMETER: ("gradient_to_parameter", schema.GradientToParameterSpec, "parameter_name"),
    gs.OutputKind.GRADIENT_TO_USER_INPUT: ("gradient_to_user_input", schema.GradientToUserInputSpec,
                                           "user_input_name"),
    gs.OutputKind.USER_INPUT_MUTATION: ("user_input_mutation", schema.UserInputMutationSpec, "user_input_name"),
}
_OUTPUT_MEMBERS = {m: (k, cls, f) for k, (m, cls, f) in _OUTPUT_KINDS.items()}

# Every union member is handled: the table members plus the ones with special shapes below.
assert set(_INPUT_MEMBERS) | {"user_input", "constant_input", "token"} == set(schema.InputSpec.__struct_fields__)
assert set(_OUTPUT_MEMBERS) | {"user_output", "token"} == set(schema.OutputSpec.__struct_fields__)


def _spec_arg(a: Any, member: str, where: str) -> Any:
    if member == "custom_obj":
        return schema.CustomObjArgument(name=a.name, class_fqn=a.class_fqn)
    if not isinstance(a, gs.TensorArgument):
        raise UnsupportedConstructError(f"{where}: {member} spec must refer to a tensor, got {a!r}")
    return _TA(name=a.name)


def serialize_input_spec(s: gs.InputSpec, where: str) -> schema.InputSpec:
    if s.kind == gs.InputKind.USER_INPUT:
        if isinstance(s.arg, gs.ConstantArgument):
            return schema.InputSpec(constant_input=schema.InputToConstantInputSpec(
                name=s.arg.name, value=_constant(s.arg.value, where)))
        return schema.InputSpec(user_input=schema.UserInputSpec(arg=serialize_argument_spec(s.arg, where)))
    if s.kind == gs.InputKind.TOKEN:
        return schema.InputSpec(token=schema.InputTokenSpec(arg=schema.TokenArgument(name=s.arg.name)))
    member, cls, field = _INPUT_KINDS[s.kind]
    extra = {"persistent": bool(s.persistent)} if member == "buffer" else {}
    return schema.InputSpec(**{member: cls(arg=_spec_arg(s.arg, member, where), **{field: s.target}, **extra)})


def deserialize_input_spec(s: schema.InputSpec, where: str) -> gs.InputSpec:
    member = s.kind
    v = getattr(s, member)
    if member == "user_input":
        return gs.InputSpec(gs.InputKind.USER_INPUT, deserialize_argument_spec(v.arg, where), None)
    if member == "constant_input":
        return gs.InputSpec(gs.InputKind.USER_INPUT, gs.ConstantArgument(name=v.name, value=_constant_value(v.value)),
                            None)
    if member == "token":
        return gs.InputSpec(gs.InputKind.TOKEN, gs.TokenArgument(name=v.arg.name), None)
    kind, _, field = _INPUT_MEMBERS[member]
    arg = (gs.CustomObjArgument(name=v.arg.name, class_fqn=v.arg.class_fqn) if member == "custom_obj"
           else gs.TensorArgument(name=v.arg.name))
    persistent = v.persistent if member == "buffer" else None
    return gs.InputSpec(kind, arg, getattr(v, field), persistent)


def serialize_output_spec(s: gs.OutputSpec, where: str) -> schema.OutputSpec:
    if s.kind == gs.OutputKind.USER_OUTPUT:
        return schema.OutputSpec(user_output=schema.UserOutputSpec(arg=serialize_argument_spec(s.arg, where)))
    if s.kind == gs.OutputKind.TOKEN:
        return schema.OutputSpec(token=schema.OutputTokenSpec(arg=schema.TokenArgument(name=s.arg.name)))
    member, cls, field = _OUTPUT_KINDS[s.kind]
    kw = {field: s.target} if field else {}
    return schema.OutputSpec(**{member: cls(arg=_spec_arg(s.arg, member, where), **kw)})


def deserialize_output_spec(s: schema.OutputSpec, where: str) -> gs.OutputSpec:
    member = s.kind
    v = getattr(s, member)
    if member == "user_output":
        return gs.OutputSpec(gs.OutputKind.USER_OUTPUT, deserialize_argument_spec(v.arg, where), None)
    if member == "token":
        return gs.OutputSpec(gs.OutputKind.TOKEN, gs.TokenArgument(name=v.arg.name), None)
    kind, _, field = _OUTPUT_MEMBERS[member]
    return gs.OutputSpec(kind, gs.TensorArgument(name=v.arg.name), getattr(v, field) if field else None)


def serialize_signature(sig: gs.ExportGraphSignature) -> schema.GraphSignature:
    return schema.GraphSignature(
        input_specs=[serialize_input_spec(s, f"signature.input_specs[{i}]") for i, s in enumerate(sig.input_specs)],
        output_specs=[serialize_output_spec(s, f"signature.output_specs[{i}]")
                      for i, s in enumerate(sig.output_specs)],
    )


def deserialize_signature(sig: schema.GraphSignature) -> gs.ExportGraphSignature:
    return gs.ExportGraphSignature(
        input_specs=[deserialize_input_spec(s, f"signature.input_specs[{i}]") for i, s in enumerate(sig.input_specs)],
        output_specs=[deserialize_output_spec(s, f"signature.output_specs[{i}]")
                      for i, s in enumerate(sig.output_specs)],
    )


def constant_input_names(sig: schema.GraphSignature) -> dict[int, str]:
    """Placeholder index -> name for constant user inputs (their graph input holds only the value)."""
    return {i: s.constant_input.name for i, s in enumerate(sig.input_specs) if s.constant_input is not None}


# ---------------------------------------------------------------- module call graph


def serialize_module_call_graph(entries: list[epm.ModuleCallEntry]) -> list[schema.ModuleCallEntry]:
    out = []
    for i, e in enumerate(entries):
        where = f"module_call_graph[{i}] ({e.fqn!r})"
        sig = e.signature
        if sig is not None and e.fqn == "":
            # The root call's spec is matched against the caller's inputs, class by class.
            check_input_classes(sig.in_spec, sig.forward_arg_names, f"{where}.in_spec")
        out.append(schema.ModuleCallEntry(fqn=e.fqn, signature=None if sig is None else schema.ModuleCallSignature(
            inputs=[serialize_argument_spec(a, f"{where}.inputs[{j}]") for j, a in enumerate(sig.inputs)],
            outputs=[serialize_argument_spec(a, f"{where}.outputs[{j}]") for j, a in enumerate(sig.outputs)],
            in_spec=serialize_treespec(sig.in_spec, f"{where}.in_spec"),
            out_spec=serialize_treespec(sig.out_spec, f"{where}.out_spec"),
            forward_arg_names=None if sig.forward_arg_names is None else list(sig.forward_arg_names),
        )))
    return out


def deserialize_module_call_graph(entries: list[schema.ModuleCallEntry]) -> list[epm.ModuleCallEntry]:
    out = []
    for i, e in enumerate(entries):
        where = f"module_call_graph[{i}] ({e.fqn!r})"
        s = e.signature
        out.append(epm.ModuleCallEntry(fqn=e.fqn, signature=None if s is None else epm.ModuleCallSignature(
            inputs=[deserialize_argument_spec(a, f"{where}.inputs[{j}]") for j, a in enumerate(s.inputs)],
            outputs=[deserialize_argument_spec(a, f"{where}.outputs[{j}]") for j, a in enumerate(s.outputs)],
            in_spec=deserialize_treespec(s.in_spec, f"{where}.in_spec"),
            out_spec=deserialize_treespec(s.out_spec, f"{where}.out_spec"),
            forward_arg_names=None if s.forward_arg_names is None else list(s.forward_arg_names),
        )))
    return out


def module_call_graph_names(entries: list[schema.ModuleCallEntry]) -> set[str]:
    """Graph value names the module call graph refers to (these must exist after load)."""
    names: set[str] = set()
    for e in entries:
        if e.signature is None:
            continue
        for a in (*e.signature.inputs, *e.signature.outputs):
            v = a.value
            name = getattr(v, "name", None) or getattr(v, "as_name", None)
            if isinstance(name, str):
                names.add(name)
    return names
