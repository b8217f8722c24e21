"""``torch.export.ExportedProgram`` <-> ``schema.ExportedProgram`` (the weights travel separately)."""

from __future__ import annotations

import threading
from typing import Any

import torch
import torch.export.exported_program as torch_exported_program
import torch.utils._pytree as pytree
from torch._export.verifier import SpecViolationError, TrainingIRVerifier, Verifier
from torch.export.exported_program import ExportedProgram

from serde.core import schema
from serde.core.checks import check_program
from serde.core.expr.guards import (
    ATTR,
    SourceKey,
    failing_guard,
    flat_input_paths,
    guards_from_code,
    guards_to_code,
    input_arguments,
    input_leaves,
    source_key,
    source_problem,
    source_resolver,
    source_text,
)
from serde.core.limits import DEFAULT_LIMITS, Limits
from serde.core.version import SCHEMA_VERSION
from serde.errors import MalformedArtifactError, UnsupportedConstructError

from .checks import (
    check_examples_fit_inputs,
    check_module_call_graph,
    check_signature,
    check_weights_fit_graph,
)
from .custom_objects import decode_constants
from .errors import InconsistentProgramError
from .graph import LAZY_CODEGEN, GraphReader, GraphWriter, lazy_graph_module
from .guard_env import guard_spelling, record_guards
from .metadata import deserialize_custom, serialize_custom
from .signature import (
    constant_input_names,
    deserialize_module_call_graph,
    deserialize_signature,
    module_call_graph_names,
    serialize_module_call_graph,
    serialize_signature,
)
from .values import SymbolicContext, serialize_range_constraints
from .weights import alias_key

__all__ = ["serialize_program", "deserialize_program", "guard_input_paths", "with_registered_paths"]

# Verifier dialects we know; loading never resolves a verifier class by name any other way.
_VERIFIERS: dict[str, type[Verifier]] = {"ATEN": Verifier, "TRAINING": TrainingIRVerifier}


def serialize_program(ep: ExportedProgram) -> schema.ExportedProgram:
    """Serialize the graph, signature, module call graph and range constraints of ``ep``."""
    gm = ep.graph_module
    custom = gm.meta.get("custom")
    dialects = []
    for v in ep.verifiers:
        if v.dialect not in _VERIFIERS:
            raise UnsupportedConstructError(
                f"verifiers: dialect {v.dialect!r} is unknown; supported dialects: {sorted(_VERIFIERS)}"
            )
        dialects.append(v.dialect)
    gm_s = schema.GraphModule(
        graph=GraphWriter(gm).write(),
        custom=None if custom is None else serialize_custom(custom, "graph_module.meta"),
        signature=serialize_signature(ep.graph_signature),
        module_call_graph=serialize_module_call_graph(ep.module_call_graph),
    )
    return schema.ExportedProgram(
        graph_module=gm_s,
        opset_version={"aten": torch._C._get_max_operator_version()},
        range_constraints=serialize_range_constraints(ep.range_constraints),
        schema_version=schema.SchemaVersion(major=SCHEMA_VERSION[0], minor=SCHEMA_VERSION[1]),
        verifiers=dialects,
        torch_version=str(torch.__version__),
        guards=serialize_guards(ep, gm_s),
    )


def deserialize_program(p: schema.ExportedProgram, state_dict: dict[str, torch.Tensor],
                        constants: dict[str, Any], example_inputs: Any,
                        limits: Limits = DEFAULT_LIMITS) -> ExportedProgram:
    """Rebuild an ExportedProgram; ``state_dict``/``constants`` come from the weights member.

    Every name and size in ``p`` is checked (:func:`serde.core.checks.check_program`) before any torch
    object is built from it.
    """
    check_program(p, limits)
    gm_s = p.graph_module
    ctx = SymbolicContext(p.range_constraints)
    check_signature(gm_s.graph, gm_s.signature)
    # Custom objects are decoded before the graph is read, so that their placeholders carry the
    # fake objects export records: the consistency check of a call that requires one hands its
    # fake to the dispatcher's matcher, which then types the rest of the call.
    specs = [s.custom_obj for s in gm_s.signature.input_specs if s.custom_obj is not None]
    if specs:
        constants = decode_constants(constants, {s.custom_obj_name: s.arg.class_fqn for s in specs})
    reader = GraphReader(ctx, object_fakes={s.arg.name: _fake_object(ctx, constants[s.custom_obj_name])
                                            for s in specs})
    graph = reader.read(
        gm_s.graph,
        constant_input_names=constant_input_names(gm_s.signature),
        extra_refs=module_call_graph_names(gm_s.module_call_graph),
    )
    signature = deserialize_signature(gm_s.signature)
    verifiers = []
    for d in p.verifiers:
        v = _VERIFIERS.get(d)
        if v is None:
            raise MalformedArtifactError(f"program.verifiers: unknown dialect {d!r}; known: {sorted(_VERIFIERS)}")
        verifiers.append(v)
    params = {s.target for s in signature.input_specs if s.kind.name == "PARAMETER"}
    state_inputs = {s.target for s in signature.input_specs if s.target}
    check_weights_fit_graph(graph, signature.input_specs, state_dict, constants)
    module_call_graph = deserialize_module_call_graph(gm_s.module_call_graph)
    check_module_call_graph(module_call_graph, gm_s.signature)
    # ExportedProgram builds the GraphModule itself: hand it the plain root.
    try:
        ep = _new_exported_program(
            root=reader.root,
            graph=graph,
            graph_signature=signature,
            state_dict=_as_parameters(state_dict, params, state_inputs),
            range_constraints=ctx.range_constraints(),
            module_call_graph=module_call_graph,
            constants=constants,
            verifiers=verifiers or None,
        )
    except SpecViolationError as e:
        # torch's verifier found a contradiction the checks above do not cover (e.g. a parameter
        # the state dict lacks): the same verdict, in our terms.
        raise InconsistentProgramError(f"program: torch's verifier rejects it: {str(e).splitlines()[0]}; "
                                       "the artifact is damaged or was edited after saving") from None
    _set_example_inputs(ep, example_inputs)
    check_examples_fit_inputs(ep)
    if gm_s.custom is not None:
        ep.graph_module.meta["custom"] = deserialize_custom(gm_s.custom, "graph_module")
    paths = guard_input_paths(gm_s, example_inputs) if p.guards is not None else None
    ep._guards_code = deserialize_guards(p.guards, gm_s, paths)
    # Programs torch derives from this one compute their guards from the graph's ShapeEnv (a
    # program without guards or symbols has nothing to record there).
    if p.guards is not None or ctx.shape_env.var_to_range:
        record_guards(p.guards, ctx.shape_env, _input_values(ep.graph_module.graph, gm_s, paths))
    ctx.shape_env.done_loading()
    return ep


def _input_values(graph: torch.fx.Graph, gm: schema.GraphModule, paths: list[tuple | None] | None = None
                  ) -> dict[tuple, Any]:
    """Each nameable user input's value in the loaded graph, by guard path (see input_arguments)."""
    nodes = {n.name: n for n in graph.nodes if n.op == "placeholder"}
    out: dict[tuple, Any] = {}
    for path, arg in input_arguments(gm, paths).items():
        v = getattr(arg, arg.kind)
        name = v.name if arg.kind == "as_tensor" else getattr(v, "as_name", None)
        node = nodes.get(name) if isinstance(name, str) else None
        out[path] = node.meta.get("val") if node is not None else getattr(v, "as_int", v)
    return out


def _set_example_inputs(ep: ExportedProgram, example_inputs: Any) -> None:
    """Give ``ep`` its example inputs through the property setter, which checks them against the
    program's in_spec the way every call checks its inputs. ExportedProgram's constructor takes them
    unchecked, so a file whose example inputs have another structure would load, and only fail when
    someone runs the program on them."""
    # What ep.call_spec.in_spec is, without that property's cost (it defines a class on every call,
    # a tenth of loading a small program).
    first = ep.module_call_graph[0] if ep.module_call_graph else None
    in_spec = first.signature.in_spec if first is not None and first.signature is not None else None
    if example_inputs is None or in_spec is None or pytree.tree_structure(example_inputs) == in_spec:
        # Nothing to check them against, or the very structure torch's check compares with (its
        # setter costs ten times this comparison, a twentieth of loading a small program).
        ep._example_inputs = example_inputs
        return
    try:  # keyword arguments in another order pass; anything else is refused
        ep.example_inputs = example_inputs
    except ValueError as e:
        said = str(e).strip()
        detail = f" ({said})" if said and "\n" not in said else ""  # torch's spec dumps span many lines
        raise InconsistentProgramError(
            "weights.example_inputs: not the pytree structure the program takes (the same containers, "
            f"keyword names and number of values as module_call_graph[0].signature.in_spec){detail}; "
            "the artifact is damaged or was edited after saving"
        ) from None


# The module-level functions ExportedProgram.__init__ builds its graph module and computes its
# guard code with (torch 2.13). Checked once, at import: with a torch that calls them otherwise,
# programs are built as torch does.
_GM_FACTORY = "_create_graph_module_for_export"
_GUARDS_FN = "_convert_guards_to_code"
_INIT_NAMES = getattr(getattr(ExportedProgram.__init__, "__code__", None), "co_names", ())
_LAZY_PROGRAMS = (LAZY_CODEGEN and callable(getattr(torch_exported_program, _GM_FACTORY, None))
                  and _GM_FACTORY in _INIT_NAMES)
_SKIP_INIT_GUARDS = (_LAZY_PROGRAMS and callable(getattr(torch_exported_program, _GUARDS_FN, None))
                     and _GUARDS_FN in _INIT_NAMES)
_LAZY_LOCK = threading.RLock()  # re-entrant: a program built while building one must not deadlock


def _new_exported_program(**kwargs: Any) -> ExportedProgram:
    """``ExportedProgram(**kwargs)`` whose graph module generates its Python code on first use; its
    ``_guards_code`` may be left empty: the caller sets it (as deserialize_program does at once).

    Why the swap: ExportedProgram.__init__ builds its graph module by calling
    ``torch.fx.GraphModule(root, graph)``, which generates and compiles the forward's source at
    once (a quarter of loading a 5,000-node program), and has no parameter to defer it; the usual
    next step, ``ep.module()``, builds a module of its own and generates code for that anyway.
    For the length of this call, and for this thread only, the function __init__ builds the module
    with is swapped for one that builds torch's lazy graph module; everything else __init__ does
    (getitem elimination, verifiers) runs unchanged, and other threads get torch's own.
    What the lazy module gives up: torch's fallback for code that does not compile (custom objects
    inlined in the graph) cannot happen here, since our graphs take custom objects as inputs and
    every name in them is checked.

    The guard code __init__ computes last (it finds the fake mode among every node's value and
    prints the guards its ShapeEnv recorded) is swapped out the same way: a loaded program's
    ShapeEnv is fresh, and its guards are the artifact's, printed and checked by
    :func:`deserialize_guards` and assigned over whatever __init__ computed.
    """
    if not _LAZY_PROGRAMS:
        return ExportedProgram(**kwargs)
    owner = threading.get_ident()
    with _LAZY_LOCK:
        eager = getattr(torch_exported_program, _GM_FACTORY)
        guards = getattr(torch_exported_program, _GUARDS_FN, None)

        def build(root: Any, graph: torch.fx.Graph) -> torch.fx.GraphModule:
            return lazy_graph_module(root, graph) if threading.get_ident() == owner else eager(root, graph)

        def no_guards(gm: torch.fx.GraphModule) -> list[str]:
            return [] if threading.get_ident() == owner else guards(gm)

        setattr(torch_exported_program, _GM_FACTORY, build)
        if _SKIP_INIT_GUARDS:
            setattr(torch_exported_program, _GUARDS_FN, no_guards)
        try:
            return ExportedProgram(**kwargs)
        finally:
            setattr(torch_exported_program, _GM_FACTORY, eager)
            if _SKIP_INIT_GUARDS:
                setattr(torch_exported_program, _GUARDS_FN, guards)


def serialize_guards(ep: ExportedProgram, gm: schema.GraphModule) -> schema.InputGuards | None:
    """``ep._guards_code`` as trees; every source must name one of the program's inputs.

    ``gm`` is ``ep``'s graph module already serialized: sources are checked against the stored
    signature, exactly as loading will check them.

    Raises:
        UnsupportedConstructError: a guard outside the allow-list of serde.core.expr.guards, or one that
            reads something that is not a user input of ``ep``.
    """
    codes = list(getattr(ep, "_guards_code", None) or [])
    if not codes:
        return None
    paths = guard_input_paths(gm, ep.example_inputs)
    _check_guard_paths_compile(paths)
    leaves = input_leaves(gm, input_arguments(gm, paths))
    stored = source_resolver(paths or [])

    def resolve(k: SourceKey) -> SourceKey:
        out = stored(k)
        why = source_problem(*out, leaves)
        if why:
            raise UnsupportedConstructError(
                f"guards: a guard reads {source_text(k)}, which {why}; pt2serde cannot tie it to an input")
        return out

    return guards_from_code(codes, where="guards", resolve=resolve)


def guard_input_paths(gm: schema.GraphModule, example_inputs: Any) -> list[tuple | None] | None:
    """The guard path of every flat user input of ``gm``: what the stored spec names
    (:func:`serde.core.expr.guards.flat_input_paths`), with the leaves inside registered pytree classes
    (a transformers ``DynamicCache``, a dataclass) filled in from ``example_inputs`` as this
    process's pytree registry flattens them with keys. torch's ``ep.module()`` finds a guard's
    input the same way (``"L" + keystr(path)`` of the flattened example inputs), so a path named
    here is one its guard function reads. None without a root call signature.
    """
    flat = flat_input_paths(gm)
    if flat is None:
        return None
    root = next((e.signature for e in gm.module_call_graph if e.fqn == "" and e.signature), None)
    return with_registered_paths(flat, list(root.forward_arg_names or []) if root is not None else [],
                                 example_inputs)


def with_registered_paths(flat: list[tuple | None], names: list[str], example_inputs: Any) -> list[tuple | None]:
    """``flat`` (:func:`serde.core.expr.guards.input_paths`) with its unnamed leaves named from
    ``example_inputs`` as this process's pytree registry flattens them with keys; ``names`` are
    the forward's argument names."""
    if example_inputs is None or all(p is not None for p in flat):
        return flat
    try:
        keyed, _ = pytree.tree_flatten_with_path(example_inputs)
    except (TypeError, ValueError, RuntimeError):  # a class registered without flatten_with_keys
        return flat
    if len(keyed) != len(flat):
        return flat
    return [p if p is not None else _guard_path(kp, names) for p, (kp, _) in zip(flat, keyed, strict=True)]


def _guard_path(kp: tuple, names: list[str]) -> tuple | None:
    """A pytree key path of the (args, kwargs) example inputs as a guard path, or None where a
    guard cannot name it: the forward's parameter name, then dict keys, indices and attributes."""
    if len(kp) < 2 or not isinstance(kp[0], pytree.SequenceKey):
        return None
    top, first = kp[0].idx, kp[1]
    if top == 0 and isinstance(first, pytree.SequenceKey) and first.idx < len(names):
        root = names[first.idx]
    elif top == 1 and isinstance(first, pytree.MappingKey) and type(first.key) is str:
        root = first.key
    else:
        return None
    out: list[str | int] = [root]
    for k in kp[2:]:
        if isinstance(k, pytree.SequenceKey) and type(k.idx) is int:
            out.append(k.idx)
        elif isinstance(k, pytree.MappingKey) and type(k.key) in (str, int):
            out.append(k.key)
        elif isinstance(k, pytree.GetAttrKey) and isinstance(k.name, str) and ATTR not in k.name:
            out.append(ATTR + k.name)
        else:
            return None
    return tuple(out)


def _check_guard_paths_compile(paths: list[tuple | None] | None) -> None:
    """torch's ep.module() compiles the guards after replacing each input's text (``L['x'].a``)
    by its argument (``args[0]``), one input after the other; where one input's text begins
    another's and an identifier goes on (fields ``a`` and ``ab``), it leaves ``args[0]b``, which
    does not compile (torch's own ep.module() of such a program fails with a SyntaxError).

    Raises:
        UnsupportedConstructError: names both inputs and what to rename.
    """
    texts = sorted(source_text((p, int(schema.GuardProperty.VALUE), -1)) for p in paths or [] if p is not None)
    for i, short in enumerate(texts):
        j = i + 1
        while j < len(texts) and texts[j].startswith(short):  # what a text begins sorts right after it
            long = texts[j]
            j += 1
            if not (long[len(short)].isalnum() or long[len(short)] == "_"):
                continue
            raise UnsupportedConstructError(
                f"guards: input {long} begins with the text of input {short}, and torch's ep.module() finds "
                "a guard's input by replacing that text, so the guard code it builds does not compile "
                "(torch's own ep.module() of this program fails too); rename one of the two fields")


def _through_registered(gm: schema.GraphModule) -> bool:
    """Whether some flat input sits where only the loading process's pytree registry can name it."""
    return any(p is None for p in flat_input_paths(gm) or [])


def deserialize_guards(g: schema.InputGuards | None, gm: schema.GraphModule,
                       paths: list[tuple | None] | None = None) -> list[str]:
    """Validated guard text for ``ep._guards_code`` (printed by us, never taken from the file).

    ``paths`` are :func:`guard_input_paths` of the loaded program (default: what the stored spec
    names alone).

    Raises:
        UnsafeArtifactError: a source key that is not a plain identifier or index.
        MalformedArtifactError: a source that is not an input of the program, a dim outside the
            input's rank, or a check that is not a guard expression.
        InconsistentProgramError: a check that is false, or fails, at the example values the graph
            stores (torch.export records only guards its example inputs pass).
    """
    if g is None:
        return []
    # validates keys before anything else reads them; max/min as the running torch prints them
    codes = guards_to_code(g, where="guards", spelling=guard_spelling())
    _check_guard_paths_compile(paths)
    arguments = input_arguments(gm, paths)
    leaves = input_leaves(gm, arguments)
    for i, s in enumerate(g.sources):
        path, prop, dim = source_key(s)
        why = source_problem(path, prop, dim, leaves)
        if why and path not in leaves and _through_registered(gm):
            # The path may name a field of a registered class that this process flattens under
            # other keys (or does not register with keys at all): not the file's fault.
            raise UnsupportedConstructError(
                f"guards.sources[{i}]: {source_text(s)} {why}, as this process flattens the inputs; a "
                "pytree class among the inputs is registered here with other keys than where the "
                "program was saved (or without flatten_with_keys): register it as the saving process "
                "did, then load")
        if why:
            raise MalformedArtifactError(f"guards.sources[{i}]: {source_text(s)} {why}; the artifact is damaged")
    why = failing_guard(g, gm, arguments=arguments)
    if why:
        raise InconsistentProgramError(f"{why}; the artifact is damaged or was edited after saving")
    return codes


def _fake_object(ctx: SymbolicContext, obj: Any) -> Any:
    """The fake of a custom object, as export records it (retracing, e.g. run_decompositions, uses
    it), or None when its class has no fake registered: the program still runs then."""
    from torch._library.fake_class_registry import maybe_to_fake_obj

    try:
        return maybe_to_fake_obj(ctx.fake_mode, obj)
    except Exception:
        return None


def _as_parameters(state_dict: dict[str, torch.Tensor], params: set[str], inputs: set[str]
                   ) -> dict[str, torch.Tensor]:
    """Parameters become nn.Parameter; names that view the same memory share one object (tied weights).

    ``inputs`` are the state names the signature lists. A name it does not list is the second name of
    a tied parameter when it views exactly a parameter's memory (a strict export lists only the
    first name of tied weights), and so becomes that same Parameter: ``unflatten`` registers it as
    a parameter, as it does the exported program's.
    """
    out: dict[str, torch.Tensor] = {}
    seen: dict[tuple, torch.Tensor] = {}
    for name, t in sorted(state_dict.items(), key=lambda item: item[0] not in params):
        key = alias_key(t)
        shared = seen.get(key)
        if shared is not None and ((name in params) == isinstance(shared, torch.nn.Parameter)
                                   or (name not in inputs and isinstance(shared, torch.nn.Parameter))):
            out[name] = shared
            continue
        if name in params and not isinstance(t, torch.nn.Parameter):
            t = torch.nn.Parameter(t, requires_grad=t.requires_grad)
        seen.setdefault(key, t)
        out[name] = t
    return {name: out[name] for name in state_dict}  # (parameters were taken first)
