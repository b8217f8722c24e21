"""The graph's inputs and outputs match the signature, and the weights and the module call graph fit it.

The graph's inputs and outputs match the signature's specs, one for one, and every parameter, buffer
and tensor constant has the dtype, sizes and strides its placeholder says, and is stored where its
kind (and a buffer's persistence) says; the module call graph's pytree specs hold as many leaves as
the signatures they describe.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.fx
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

from serde.core import schema

from ..errors import FIX_EDITED, InconsistentProgramError

__all__ = ["check_signature", "check_weights_fit_graph", "check_module_call_graph"]


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
            f"graph.is_single_tensor_return: the top-level graph of an exported program returns a tuple; {FIX_EDITED}")
    if len(g.inputs) != len(sig.input_specs):
        raise InconsistentProgramError(
            f"signature.input_specs: {len(sig.input_specs)} specs for {len(g.inputs)} graph inputs; {FIX_EDITED}")
    for i, (a, s) in enumerate(zip(g.inputs, sig.input_specs, strict=True)):
        kind = s.kind
        name, spec = _arg_name(a), _spec_name(s, kind)
        if (kind == "constant_input") != (name is None):
            # The writer stores a constant input as its value in the graph, and only it.
            raise InconsistentProgramError(
                f"signature.input_specs[{i}]: a {kind} spec for graph.inputs[{i}] ({a.kind}); constant "
                f"inputs, and only they, are stored as values; {FIX_EDITED}")
        if kind == "constant_input":
            continue
        if name != spec:
            raise InconsistentProgramError(
                f"signature.input_specs[{i}]: describes {spec!r} but graph.inputs[{i}] is "
                f"{name if name is not None else a.kind!r}; {FIX_EDITED}")
    if len(g.outputs) != len(sig.output_specs):
        raise InconsistentProgramError(
            f"signature.output_specs: {len(sig.output_specs)} specs for {len(g.outputs)} graph outputs; {FIX_EDITED}")
    for i, (a, s) in enumerate(zip(g.outputs, sig.output_specs, strict=True)):
        name, spec = _arg_name(a), _spec_name(s, s.kind)
        if name != spec:
            raise InconsistentProgramError(
                f"signature.output_specs[{i}]: describes {spec!r} but graph.outputs[{i}] is "
                f"{name if name is not None else a.kind!r}; {FIX_EDITED}")


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
                f"weights.{own}, {found}; {FIX_EDITED}")
        node = placeholders.get(spec.arg.name)
        want = node.meta.get("val") if node is not None else None
        have = table.get(spec.target)
        if not (isinstance(want, torch.Tensor) and isinstance(have, torch.Tensor)):
            continue
        # A wrapper subclass's outer strides are its own; a structure-only load's FakeTensors
        # carry the stored strides and are compared like the real tensors.
        plain = not is_traceable_wrapper_subclass(have)
        if have.dtype != want.dtype or have.shape != want.shape or (plain and have.stride() != want.stride()):
            raise InconsistentProgramError(
                f"graph_module.signature.input_specs[{i}] ({spec.target!r}): the weight is {have.dtype} "
                f"{list(have.shape)} with strides {list(have.stride())}, the graph's placeholder "
                f"{spec.arg.name!r} takes {want.dtype} {list(want.shape)} with strides {list(want.stride())}; {FIX_EDITED}")


def check_module_call_graph(entries: list[Any], sig: schema.GraphSignature) -> None:
    """Each entry's pytree specs hold one leaf per flat input/output of its signature.

    ``entries`` are torch ``ModuleCallEntry`` objects (their specs already deserialized).
    """
    user_in = sum(1 for s in sig.input_specs if s.kind in ("user_input", "constant_input"))
    if not entries or entries[0].fqn != "" or entries[0].signature is None:
        raise InconsistentProgramError(
            "module_call_graph[0]: an exported program's module call graph starts with the root module "
            f"(fqn '') and its signature; {FIX_EDITED}")
    for i, e in enumerate(entries):
        s = e.signature
        if s is None:
            continue
        where = f"module_call_graph[{i}] ({e.fqn!r})"
        names = s.forward_arg_names
        if names is not None and len(set(names)) != len(names):
            raise InconsistentProgramError(f"{where}.forward_arg_names: {names} names an argument twice; {FIX_EDITED}")
        ins, outs = len(s.inputs), len(s.outputs)
        if e.fqn == "":
            ins, outs = user_in, sum(1 for o in sig.output_specs if o.kind in ("user_output", "loss_output"))
            spec = s.in_spec
            # torch.export calls the root module as forward(*args, **kwargs): its spec is (args, kwargs).
            if spec is not None and not (spec.type is tuple and spec.num_children == 2
                                         and spec.child(0).type is tuple
                                         and spec.child(1).type is dict):
                raise InconsistentProgramError(
                    f"{where}.in_spec: the root module's inputs must be a tuple (args, kwargs), got {spec}; {FIX_EDITED}")
        for what, spec, n in (("in_spec", s.in_spec, ins), ("out_spec", s.out_spec, outs)):
            if spec is not None and spec.num_leaves != n:
                raise InconsistentProgramError(
                    f"{where}.{what}: the pytree spec holds {spec.num_leaves} leaves but the signature has "
                    f"{n}; {FIX_EDITED}")
        if e.fqn == "" and names and s.in_spec is not None:
            # ep.module() generates forward(self, <names>) and passes the keyword arguments on by
            # name: one name per positional argument, then the keyword names of the in_spec.
            n_args, keys = s.in_spec.child(0).num_children, list(s.in_spec.child(1).context)
            if len(names) != n_args + len(keys) or set(names[n_args:]) != set(keys):
                raise InconsistentProgramError(
                    f"{where}.forward_arg_names: {names} does not name the {n_args} positional arguments "
                    f"and then the keyword arguments {keys} of the in_spec; {FIX_EDITED}")
