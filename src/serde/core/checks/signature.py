"""Names in the graph signature and the module call graph, and the input spec keys ep.module() quotes."""

from __future__ import annotations

import json

from serde.core import schema
from serde.core.limits import Limits

from .arguments import Known, check_argument
from .names import UNQUOTABLE, check_fqn, check_local_name, check_quoted_text, check_text, name_string
from .shapes import check_list

__all__ = ["check_signature_names", "check_module_call_graph_names", "check_input_spec_keys"]


def check_input_spec_keys(spec: schema.TreeSpec, where: str, limits: Limits) -> None:
    """Every string dict key in ``spec`` passes ``check_quoted_text(kind="key")``. Iterative: specs
    from a file may nest deeper than Python recurses (the treespec reader bounds the depth later)."""
    # (spec, its parent's entry in ``seen``, its index there): the field path is built only for an error
    stack: list[tuple[schema.TreeSpec, int, int]] = [(spec, -1, 0)]
    seen: list[tuple[int, int]] = []
    while stack:
        s, parent, index = stack.pop()
        me = len(seen)
        seen.append((parent, index))
        if s.type in _KEYED_SPECS and s.context is not None:
            for j, k in enumerate(_spec_keys(s.context)):
                if type(k) is str and UNQUOTABLE["key"].search(k) is not None:
                    check_quoted_text(k, f"{where}{_spec_path(seen, me)}.context[{j}]", "key", limits)
        stack.extend((c, me, i) for i, c in enumerate(s.children))


def _spec_path(seen: list[tuple[int, int]], entry: int) -> str:
    parts = []
    while seen[entry][0] >= 0:
        parent, index = seen[entry]
        parts.append(f".children[{index}]")
        entry = parent
    return "".join(reversed(parts))


# Pytree node types whose context lists dict keys: a JSON list, or {"keys": [...]} for defaultdict.
_KEYED_SPECS = frozenset({"dict", "OrderedDict", "defaultdict"})


def _spec_keys(context: str) -> list:
    """The keys a dict spec's context lists; [] when it is not what the treespec reader accepts,
    which then refuses it naming the field."""
    try:
        ctx = json.loads(context)
    except (ValueError, RecursionError):
        return []
    if isinstance(ctx, dict):
        ctx = ctx.get("keys")
    return ctx if isinstance(ctx, list) else []


# Re-exporting ep.module() (torch.export.export(ep.module(), args), as after pt2e quantization)
# records the guard function torch installs on it as a call graph entry without a signature:
# "_guards_fn", or "inner._guards_fn" for an ep.module() held as a submodule; torch's own load keeps
# it. The name is reserved because torch takes an attribute _guards_fn of ep.module() for its guard
# function (its input pre-hook then skips the input checks, inductor deletes it), so a weight, node
# target or stack path must never create one. A call graph entry creates no attribute of
# ep.module(); without a signature, unflatten only adds an empty module at its path (as after
# torch's load), and no module unflatten builds has an attribute _guards_fn of its own to shadow.
_GUARDS_FN = "_guards_fn"


def _check_call_fqn(fqn: object, signature: object, where: str, limits: Limits) -> None:
    """A call graph entry's FQN; its last segment may be torch's guard function when the entry has
    no signature (see _GUARDS_FN)."""
    if signature is None and isinstance(fqn, str) and (fqn == _GUARDS_FN or fqn.endswith("." + _GUARDS_FN)):
        name_string(fqn, where, limits)
        if fqn != _GUARDS_FN:
            check_fqn(fqn[: -len(_GUARDS_FN) - 1], where, limits)
        return
    check_fqn(fqn, where, limits, root=True, call_index=True)


def _check_kwarg_keys(spec: schema.TreeSpec, where: str, limits: Limits, *, as_names: bool) -> None:
    """The kwargs keys of an in_spec of the form ``(args, kwargs)``: fx pastes them raw between
    quotes into the forward it generates. With ``as_names`` (the root spec without
    forward_arg_names, where ep.module() names forward's parameters after them) they are local
    names too."""
    if spec.type != "tuple" or len(spec.children) != 2 or spec.children[1].type != "dict":
        return
    kw = spec.children[1]
    if kw.context is None:
        return
    check_text(kw.context, f"{where}.children[1].context", limits)
    try:
        keys = json.loads(kw.context)
    except (ValueError, RecursionError):
        return  # not a key list: deserialize_treespec reports it
    if isinstance(keys, list):
        check_list(keys, f"{where}.children[1].context", limits)
        for j, k in enumerate(keys):
            if as_names:
                check_local_name(k, f"{where}.children[1].context[{j}]", limits)
            elif type(k) is str:
                check_quoted_text(k, f"{where}.children[1].context[{j}]", "kwarg", limits)


# (union member, field holding the FQN) for specs that name module state
_INPUT_FQNS = {"parameter": "parameter_name", "buffer": "buffer_name", "tensor_constant": "tensor_constant_name",
               "custom_obj": "custom_obj_name"}
_OUTPUT_FQNS = {"buffer_mutation": "buffer_name", "parameter_mutation": "parameter_name",
                "gradient_to_parameter": "parameter_name"}
_OUTPUT_LOCALS = {"gradient_to_user_input": "user_input_name", "user_input_mutation": "user_input_name"}


def check_signature_names(sig: schema.GraphSignature, limits: Limits) -> None:
    known = Known()
    check_list(sig.input_specs, "signature.input_specs", limits)
    check_list(sig.output_specs, "signature.output_specs", limits)
    for i, s in enumerate(sig.input_specs):
        kind = s.kind  # asked once: each ask walks the union's members
        where = f"signature.input_specs[{i}].{kind}"
        v = getattr(s, kind)
        if kind in _INPUT_FQNS:
            check_fqn(getattr(v, _INPUT_FQNS[kind]), f"{where}.{_INPUT_FQNS[kind]}", limits)
        if kind == "constant_input":
            check_local_name(v.name, f"{where}.name", limits)
            if v.value.as_string is not None:
                check_quoted_text(v.value.as_string, f"{where}.value.as_string", "constant", limits)
        elif kind == "user_input":
            check_argument(v.arg, f"{where}.arg", limits, known)
        else:
            check_local_name(v.arg.name, f"{where}.arg.name", limits)
    for i, s in enumerate(sig.output_specs):
        kind = s.kind
        where = f"signature.output_specs[{i}].{kind}"
        v = getattr(s, kind)
        if kind in _OUTPUT_FQNS:
            check_fqn(getattr(v, _OUTPUT_FQNS[kind]), f"{where}.{_OUTPUT_FQNS[kind]}", limits)
        if kind in _OUTPUT_LOCALS:
            check_local_name(getattr(v, _OUTPUT_LOCALS[kind]), f"{where}.{_OUTPUT_LOCALS[kind]}", limits)
        if kind == "user_output":
            check_argument(v.arg, f"{where}.arg", limits, known)
        else:
            check_local_name(v.arg.name, f"{where}.arg.name", limits)


def check_module_call_graph_names(entries: list[schema.ModuleCallEntry], limits: Limits) -> None:
    """The FQNs, arguments, forward argument names and input spec keys of the module call graph."""
    check_list(entries, "module_call_graph", limits)
    known = Known()  # the module call graph's arguments repeat the graph's value names
    for i, e in enumerate(entries):
        where = f"module_call_graph[{i}]"
        s = e.signature
        _check_call_fqn(e.fqn, s, f"{where}.fqn", limits)
        if s is None:
            continue
        for part, args in (("inputs", s.inputs), ("outputs", s.outputs)):
            check_list(args, f"{where}.signature.{part}", limits)
            for j, a in enumerate(args):
                check_argument(a, f"{where}.signature.{part}[{j}]", limits, known)
        if s.forward_arg_names is not None:
            check_list(s.forward_arg_names, f"{where}.signature.forward_arg_names", limits)
            for j, n in enumerate(s.forward_arg_names):
                check_local_name(n, f"{where}.signature.forward_arg_names[{j}]", limits)
        _check_kwarg_keys(s.in_spec, f"{where}.signature.in_spec", limits,
                          as_names=s.forward_arg_names is None and e.fqn == "")
        check_input_spec_keys(s.in_spec, f"{where}.signature.in_spec", limits)
