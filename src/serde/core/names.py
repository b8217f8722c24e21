"""The one check of every name an artifact hands to torch: node names, placeholders, FQNs, attributes.

torch.fx writes names into the Python source it generates and compiles for a GraphModule
(``x = self.lin.weight``, ``getattr(self.layers, "0")``, ``def forward(self, x)``), so a name
from a file is code unless it is proven harmless. Every name is checked here, against a strict
grammar, before any torch object is built from the program:

* **local names** (node names, placeholders, value names, keyword-argument names, forward
  argument names): ASCII identifiers, not Python keywords, and not the globals
  fx's generated code relies on (``torch``, ``self``, ``fx_pytree`` ..., and ``getattr``, the one
  builtin it writes raw). Other builtin names such as ``input`` or ``max`` stay allowed:
  torch.export itself names placeholders after the user's forward arguments.
* **FQNs** (parameters, buffers, constants, custom objects, module call graph entries,
  ``nn_module_stack`` paths): segments joined by ``.``, each an ASCII identifier, a decimal
  index (``layers.0.weight``, as ModuleList makes them), or printable ASCII text without quotes,
  backslashes and ``@`` (``foo:bar``, ``slice(2, 3, None)``), which torch allows as attribute names
  and fx writes only between double quotes (``getattr(self, "foo:bar")``, the node named
  ``foo_bar``); no segment may start with ``__``, be a
  keyword or an attribute of ``nn.Module`` / ``GraphModule`` / the modules ``ep.module()`` and
  ``unflatten`` build (``forward``, ``training``, ``graph``, ``_modules``, ``_in_spec`` ...),
  which torch would either refuse or let the file overwrite; nor may the whole FQN give its fx
  node the name ``self`` (``Self``), which would shadow the generated forward's ``self``.
* **attribute names** (subgraphs): one FQN segment that is an identifier not starting with ``_``.
* **metadata text** (stack traces, module type names, source functions): no line breaks other
  than ``\\n`` (fx splits stack traces on ``\\n`` only and prints them into comments; a ``\\r``
  would end the comment for Python's tokenizer), no control characters.
* **quoted text**: ``ep.module()`` also pastes values from the program between quotes into the
  code it generates and runs: a string constant input raw into its guard function
  (``L['mode'] == 'fast'``), the paths of the inputs, dict keys included, into each guard's
  ``"Guard failed: ..."`` message, and the keyword argument names of an ``(args, kwargs)`` input
  spec raw into the forward (``{'scale': scale}``). A quote there ends the literal, and what
  follows it runs. So string constant inputs and keyword argument names hold no quote, backslash
  or unprintable character, and the other string dict keys of input specs (the module call
  graph's ``in_spec``, the example inputs' spec) no quote. torch's own ``ep.module()`` fails with
  a SyntaxError on programs that break these rules.

Names are also bounded by :class:`serde.core.limits.Limits` (``max_name_chars``, ``max_text_chars``,
``max_list_len``, ``max_nodes``, ``max_tensor_rank``) before anything walks them further.
"""

from __future__ import annotations

import json
import keyword
import re
from collections.abc import Callable, Iterable

from serde.core.walk import argument_names, argument_subgraphs
from serde.errors import UnsafeArtifactError

from . import schema
from .limits import (
    DEFAULT_LIMITS,
    IntegerTooLargeError,
    Limits,
    ListTooLongError,
    NameTooLongError,
    TensorRankError,
    TensorSizeError,
    TooManyNodesError,
    check_limit,
)

__all__ = [
    "UnsafeNameError", "check_local_name", "check_fqn", "check_attr_name", "check_text", "check_quoted_text",
    "check_program", "check_weight_names", "RESERVED_ATTRIBUTES", "RESERVED_LOCALS",
]


class UnsafeNameError(UnsafeArtifactError):
    """A name from the artifact could inject code or shadow a module attribute once torch.fx uses it."""


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_SEGMENT = re.compile(r"(?:[A-Za-z_][A-Za-z0-9_]*|0|[1-9][0-9]*)\Z")
# A segment that is no identifier, which torch.fx writes between double quotes instead of after a
# dot (``getattr(self, "foo:bar")``, ``getattr(self.layers, "slice(2, 3, None)")``): printable
# ASCII without what would end or escape that literal (quotes, backslash), without "." (the
# separator) and "@" (unflatten's call index). Non-ASCII is refused: fx writes a non-ASCII
# identifier raw, where Python's NFKC normalization could make it another attribute.
# How dynamo spells the module root in its sources (getattr(L['self'], 'sub:mod')).
_DYNAMO_SOURCE = "L['self']"
_QUOTED_SEGMENT = re.compile(r"""[^"'\\@.\x00-\x1f\x7f-\U0010ffff]+\Z""")
_CALL_INDEX = re.compile(r"@(?:0|[1-9][0-9]*)\Z")   # unflatten's "sub@1": the second call of sub
# Everything str.splitlines() breaks on except "\n", and the other C0/C1 controls except "\t".
_BAD_TEXT = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")

# Names the source fx generates relies on: its custom builtins (torch.fx.graph._custom_builtins:
# torch, inf, nan, NoneType, device, fx_pytree, pytree), the forward's own first parameter
# ``self``, and ``getattr``, the one builtin it writes raw rather than through its namespace
# (``getattr(self.layers, "0")`` for an attribute path segment that is no identifier): a forward
# parameter of that name shadows it. Other builtins are safe as names: fx's namespace renames a
# node that would shadow one (``max`` -> ``max_1``), and torch.export names placeholders after the
# user's forward arguments (``input``). tests/serde/test_names.py checks this against torch.fx.
RESERVED_LOCALS = frozenset({
    "self", "getattr", "torch", "inf", "nan", "NoneType", "device", "fx_pytree", "pytree",
})

# Local names fx gives the get_attr node of a state FQN without renaming it, which then shadow the
# generated forward's ``self`` (``self = self.self``: every later ``self.<attr>`` reads the tensor).
# fx derives the node name from the FQN (``_snake_case``, then '_' for every other character) and
# renames only Python keywords and builtins, so an FQN whose derived name is ``self`` ('self',
# 'Self', 'SELF') breaks ep.module(), in torch's own load too.
_FX_SHADOWING = frozenset({"self"})
_FX_CAMEL = re.compile(r"(?<=[a-z])([A-Z])")
_FX_ILLEGAL = re.compile(r"[^0-9a-zA-Z_]+")

# Attributes of nn.Module, fx.GraphModule and the modules ep.module() / torch.export.unflatten
# build (names starting with "__" excluded: those are refused by shape). tests/serde/test_names.py checks this
# list still covers what the installed torch defines.
RESERVED_ATTRIBUTES = frozenset({
    'T_destination', '_adapt_flat_args', '_apply', '_backward_hooks', '_backward_pre_hooks', '_boxed_call',
    '_buffers', '_call_impl', '_code', '_compiled_call_impl', '_create_node_hooks', '_deepcopy_hooks',
    '_deepcopy_init', '_dispatch_modules', '_erase_node_hooks', '_forward_hooks',
    '_forward_hooks_always_called', '_forward_hooks_with_kwargs', '_forward_pre_hooks',
    '_forward_pre_hooks_with_kwargs', '_get_backward_hooks', '_get_backward_pre_hooks', '_get_name',
    '_graph', '_guards_fn', '_in_spec', '_is_full_backward_hook', '_lineno_map', '_load_from_state_dict',
    '_load_state_dict_post_hooks', '_load_state_dict_pre_hooks', '_maybe_warn_non_full_backward_hook',
    '_modules', '_named_members', '_non_persistent_buffers_set', '_out_spec', '_parameters', '_print_graph',
    '_prologue_start', '_recompile_submodules', '_register_create_node_hook', '_register_deepcopy_hook',
    '_register_erase_node_hook', '_register_load_state_dict_pre_hook', '_register_replace_node_hook',
    '_register_state_dict_hook', '_replace_hooks', '_replicate_for_data_parallel', '_run_with_interpreter',
    '_save_to_state_dict', '_set_replace_hook', '_slow_forward', '_state_dict_hooks',
    '_state_dict_pre_hooks', '_tracer_cls', '_tracer_extras', '_ty', '_unregister_create_node_hook',
    '_unregister_deepcopy_hook', '_unregister_erase_node_hook', '_unregister_replace_node_hook', '_version',
    '_wrapped_call', '_wrapped_call_impl', 'adapted', 'add_module', 'add_submodule', 'apply', 'bfloat16',
    'buffers', 'call_super_init', 'check_input_constraints', 'children', 'code', 'compile', 'cpu', 'cuda',
    'delete_all_unused_submodules', 'delete_submodule', 'double', 'dump_patches', 'equality_constraints',
    'eval', 'extra_repr', 'finalize', 'flat_args_adapter', 'float', 'forward', 'get_buffer',
    'get_extra_state', 'get_parameter', 'get_submodule', 'graph', 'graph_module', 'graph_signature', 'half',
    'input_placeholders', 'ipu', 'ivals', 'load_state_dict', 'meta', 'module_call_graph', 'modules', 'mtia',
    'named_buffers', 'named_children', 'named_modules', 'named_parameters', 'parameters', 'print_readable',
    'process_forward_inputs', 'range_constraints', 'recompile', 'register_backward_hook', 'register_buffer',
    'register_forward_hook', 'register_forward_pre_hook', 'register_full_backward_hook',
    'register_full_backward_pre_hook', 'register_load_state_dict_post_hook',
    'register_load_state_dict_pre_hook', 'register_module', 'register_parameter',
    'register_state_dict_post_hook', 'register_state_dict_pre_hook', 'requires_grad_', 'set_extra_state',
    'set_submodule', 'shape_env', 'share_memory', 'state_dict', 'to', 'to_empty', 'to_folder', 'train',
    'training', 'type', 'type_name', 'validate_inputs', 'xpu', 'zero_grad',
})

_KEYWORDS = frozenset(keyword.kwlist)


def check_local_name(name: object, where: str, limits: Limits = DEFAULT_LIMITS) -> str:
    """A name fx uses as a Python local: an ASCII identifier, not a keyword or fx global.

    Dunder names stay allowed: torch.export names nodes after their targets (``__and__``), and the
    generated forward is a plain function, so no name mangling applies.
    """
    text = _string(name, where, limits)
    if not _IDENT.match(text):
        raise UnsafeNameError(f"{where}: name {_show(text)} is not an ASCII Python identifier "
                              f"([A-Za-z_][A-Za-z0-9_]*); {_HOSTILE}")
    if text in _KEYWORDS or text in RESERVED_LOCALS:
        raise UnsafeNameError(f"{where}: name {_show(text)} is reserved (a Python keyword or a global of the "
                              f"code torch.fx generates); {_HOSTILE}")
    return text


def check_fqn(name: object, where: str, limits: Limits = DEFAULT_LIMITS, *, root: bool = False,
              call_index: bool = False) -> str:
    """A dotted attribute path (``layers.0.weight``); ``root`` allows ``""``, ``call_index`` a ``@N`` suffix."""
    text = _string(name, where, limits)
    path = text
    if call_index:
        m = _CALL_INDEX.search(path)
        if m is not None:
            path = path[:m.start()]
    if path == "" and root:
        return text
    if _fx_node_name(path) in _FX_SHADOWING:
        raise UnsafeNameError(
            f"{where}: FQN {_show(text)} gives the node torch.fx generates for it the name "
            f"{_fx_node_name(path)!r}, which shadows the generated forward's 'self' (ep.module() then "
            f"fails); {_HOSTILE}")
    for seg in path.split("."):
        if not _SEGMENT.match(seg) and not _QUOTED_SEGMENT.match(seg):
            if _DYNAMO_SOURCE in text:
                raise UnsafeNameError(
                    f"{where}: FQN {_show(text)} is the source text strict export (dynamo) records for a "
                    "submodule whose name is no identifier, not a module path (torch's own unflatten makes a "
                    "module of that name); export with strict=False, which records the submodule's name, "
                    "or give the submodule an identifier name")
            raise UnsafeNameError(
                f"{where}: FQN {_show(text)} has segment {_show(seg)}, which is neither an ASCII identifier, "
                f"a decimal index, nor printable ASCII text without quotes, backslashes, '.' and '@' (torch.fx "
                f"writes such a segment between double quotes: getattr(self, \"foo:bar\")); {_HOSTILE}")
        _check_attr_segment(seg, text, where)
    return text


def _fx_node_name(fqn: str) -> str:
    """The name torch.fx derives from a get_attr target before making it unique (Graph._target_to_str,
    _Namespace.create_name)."""
    return _FX_ILLEGAL.sub("_", _FX_CAMEL.sub(r"_\1", fqn).lower())


def check_attr_name(name: object, where: str, limits: Limits = DEFAULT_LIMITS) -> str:
    """A submodule attribute that pt2serde itself names (subgraphs): an identifier not starting with ``_``."""
    text = _string(name, where, limits)
    if not _IDENT.match(text) or text.startswith("_"):
        raise UnsafeNameError(f"{where}: attribute name {_show(text)} must be an ASCII identifier not "
                              f"starting with '_'; {_HOSTILE}")
    # fx names a subgraph's get_attr node after its attribute, as it does a state FQN's
    if _fx_node_name(text) in _FX_SHADOWING:
        raise UnsafeNameError(
            f"{where}: attribute name {_show(text)} gives the node torch.fx generates for it the name "
            f"{_fx_node_name(text)!r}, which shadows the generated forward's 'self' (ep.module() then "
            f"fails); {_HOSTILE}")
    _check_attr_segment(text, text, where)
    return text


def check_text(text: object, where: str, limits: Limits = DEFAULT_LIMITS) -> str:
    """Metadata text fx may print into comments: bounded, and ``\\n`` is its only line break."""
    if not isinstance(text, str):
        raise UnsafeNameError(f"{where}: expected a string, got {type(text).__name__}")
    check_limit(len(text), limits, "max_text_chars", where, "the text length", NameTooLongError)
    bad = _BAD_TEXT.search(text)
    if bad is not None:
        raise UnsafeNameError(
            f"{where}: text holds the control character {bad.group()!r} at {bad.start()}; only '\\n' and "
            f"'\\t' are allowed (another line break would end a comment in the code torch.fx generates); "
            f"{_HOSTILE}")
    return text


# What ends a quoted literal in the code ep.module() generates. In text pasted raw between quotes
# (a string constant input in the guard code; the keyword argument names of the forward's
# ``tree_flatten_spec(([...], {'name': name}), ...)``): a quote, a backslash (it escapes the
# closing quote) or a line break (control characters, line separators and lone surrogates are
# refused with them). In a dict key, which reaches the guard code through repr() and its message
# through ast.unparse(): a quote of either kind.
_RAW = re.compile(r"""['"\\]|[^\x20-\x7e\xa0-\ud7ff\ue000-\U0010ffff]|[\u2028\u2029]""")
_UNQUOTABLE = {"constant": _RAW, "kwarg": _RAW, "key": re.compile(r"""['"]""")}
_QUOTED_WHAT = {"constant": "string constant input", "kwarg": "keyword argument name of an input",
                "key": "dict key of an input"}


def check_quoted_text(text: object, where: str, kind: str, limits: Limits = DEFAULT_LIMITS) -> str:
    """Text torch pastes between quotes into the code it generates for ``ep.module()`` (``kind``:
    "constant" for a string constant input, "kwarg" for a keyword argument name in the root of an
    input spec, "key" for any other dict key of an input spec); see the module docstring."""
    if not isinstance(text, str):
        raise UnsafeNameError(f"{where}: expected a string, got {type(text).__name__}")
    check_limit(len(text), limits, "max_text_chars", where, "the text length", NameTooLongError)
    bad = _UNQUOTABLE[kind].search(text)
    if bad is not None:
        what = _QUOTED_WHAT[kind]
        raise UnsafeNameError(
            f"{where}: the {what} {_show(text)} holds {bad.group()!r} at {bad.start()}; torch's ep.module() "
            "pastes it between quotes into the code it generates and runs, where that character would "
            "end the literal and what follows would run (programs torch.export makes with such text break "
            "torch's own ep.module() too). "
            + ("Use keys without quote characters." if kind == "key"
               else "Use text without quotes, backslashes and control characters."))
    return text


def _check_input_spec_keys(spec: schema.TreeSpec, where: str, limits: Limits) -> None:
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
                if type(k) is str and _UNQUOTABLE["key"].search(k) is not None:
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


def check_program(p: schema.ExportedProgram, limits: Limits = DEFAULT_LIMITS) -> None:
    """Check every name, list length, rank and node count in ``p`` (see the module docstring).

    Raises:
        UnsafeNameError: a name breaks its grammar or is reserved (the message names the field).
        LimitError subclasses: a cap of ``limits`` is exceeded.
    """
    gm = p.graph_module
    for i, rc in enumerate(p.range_constraints):
        _check_int64(rc.min_val, f"range_constraints[{i}].min_val")
        _check_int64(rc.max_val, f"range_constraints[{i}].max_val")
    counter = [0]
    _check_graph(gm.graph, "graph", limits, counter)
    if gm.custom is not None:
        check_text(gm.custom, "graph_module.custom", limits)
    _check_signature(gm.signature, limits)
    for i, a in enumerate(gm.graph.inputs):
        if a.as_string is not None:
            check_quoted_text(a.as_string, f"graph.inputs[{i}].as_string", "constant", limits)
    _check_list(gm.module_call_graph, "module_call_graph", limits)
    known = _Known()  # the module call graph's arguments repeat the graph's value names
    for i, e in enumerate(gm.module_call_graph):
        where = f"module_call_graph[{i}]"
        s = e.signature
        _check_call_fqn(e.fqn, s, f"{where}.fqn", limits)
        if s is None:
            continue
        for part, args in (("inputs", s.inputs), ("outputs", s.outputs)):
            _check_list(args, f"{where}.signature.{part}", limits)
            for j, a in enumerate(args):
                _check_argument(a, f"{where}.signature.{part}[{j}]", limits, known)
        if s.forward_arg_names is not None:
            _check_list(s.forward_arg_names, f"{where}.signature.forward_arg_names", limits)
            for j, n in enumerate(s.forward_arg_names):
                check_local_name(n, f"{where}.signature.forward_arg_names[{j}]", limits)
        _check_kwarg_keys(s.in_spec, f"{where}.signature.in_spec", limits,
                          as_names=s.forward_arg_names is None and e.fqn == "")
        _check_input_spec_keys(s.in_spec, f"{where}.signature.in_spec", limits)


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
        _string(fqn, where, limits)
        if fqn != _GUARDS_FN:
            check_fqn(fqn[: -len(_GUARDS_FN) - 1], where, limits)
        return
    check_fqn(fqn, where, limits, root=True, call_index=True)


def check_weight_names(w: schema.Weights, limits: Limits = DEFAULT_LIMITS) -> None:
    """State-dict and constant names become module attributes: each must be a safe FQN.

    Every stored tensor's rank and element count is bounded too (example inputs included).
    """
    # Each entry is first checked by the fast predicates (no field path built); only one they do
    # not accept goes through the detailed checks, which raise naming the field.
    for table, entries in (("state_dict", w.state_dict), ("constants", w.constants)):
        for name, t in entries.items():
            if name != "" and _fqn_ok(name, limits) and _shape_ok(t.sizes, t.strides, limits):
                continue
            where = f"weights.{table}[{_show(name)}]"
            check_fqn(name, where, limits)
            _check_shape(t.sizes, t.strides, f"{where}", limits)
    if w.example_inputs is not None:
        # ep.module() takes the paths of the inputs in its guard code from the example inputs
        _check_input_spec_keys(w.example_inputs.spec, "weights.example_inputs.spec", limits)
        _check_list(w.example_inputs.leaves, "weights.example_inputs.leaves", limits)
        for i, leaf in enumerate(w.example_inputs.leaves):
            t = leaf.as_tensor
            if t is not None and not _shape_ok(t.sizes, t.strides, limits):
                _check_shape(t.sizes, t.strides, f"weights.example_inputs.leaves[{i}]", limits)


# ---------------------------------------------------------------- helpers

_HOSTILE = "the artifact is damaged or hostile; names written by torch.export always pass this check"


def _show(text: str) -> str:
    return repr(text if len(text) <= 80 else text[:80] + "...")


def _string(name: object, where: str, limits: Limits) -> str:
    if not isinstance(name, str):
        raise UnsafeNameError(f"{where}: a name must be a string, got {type(name).__name__}")
    check_limit(len(name), limits, "max_name_chars", where, "the name length", NameTooLongError)
    return name


def _check_attr_segment(seg: str, whole: str, where: str) -> None:
    # A "__" prefix covers dunders and the markers torch sets on module classes at run time
    # (dynamo's "___needs_generation_tag_patch"); Python mangles a user's own "__x" to "_Cls__x".
    if seg in _KEYWORDS or seg in RESERVED_ATTRIBUTES or seg.startswith("__"):
        raise UnsafeNameError(
            f"{where}: FQN {_show(whole)} uses {_show(seg)}, which is reserved (a Python keyword, a name "
            f"starting with '__' or an attribute of nn.Module/GraphModule such as 'forward', 'training' or "
            f"'_modules'); {_HOSTILE}")


def _check_shape(sizes: list, strides: list, where: str, limits: Limits) -> None:
    """Rank first (the product below is only computed over a bounded list), then the element count."""
    check_limit(len(sizes), limits, "max_tensor_rank", f"{where}.sizes", "the rank", TensorRankError)
    check_limit(len(strides), limits, "max_tensor_rank", f"{where}.strides", "the rank", TensorRankError)
    numel = 1
    for k, s in enumerate(sizes):
        v = s if isinstance(s, int) else s.as_int  # a SymInt: only literal sizes count
        _check_int64(v, f"{where}.sizes[{k}]")
        if v is not None and v >= 0:
            numel *= v
    for k, s in enumerate(strides):
        _check_int64(s if isinstance(s, int) else s.as_int, f"{where}.strides[{k}]")
    check_limit(numel, limits, "max_tensor_elements", f"{where}.sizes", "the number of elements", TensorSizeError)


_INT64 = 1 << 63


def _check_int64(v: object, where: str) -> None:
    # Sizes and integer arguments are int64 in torch and in native programs; a bigger one is an
    # OverflowError deep inside torch or msgpack otherwise.
    if isinstance(v, int) and not -_INT64 <= v < _INT64:
        raise IntegerTooLargeError(f"{where}: the integer {_show(str(v))} ({v.bit_length()} bits) does not fit in "
                                   f"int64; {_HOSTILE}")


def _check_keyword_name(name: object, where: str, limits: Limits) -> None:
    # fx writes keyword arguments as ``f(x, device = ...)``: any identifier but a Python keyword works.
    text = _string(name, where, limits)
    if not _IDENT.match(text) or text in _KEYWORDS:
        raise UnsafeNameError(f"{where}: keyword argument name {_show(text)} is not an ASCII Python identifier "
                              f"or is a Python keyword; {_HOSTILE}")


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
        _check_list(keys, f"{where}.children[1].context", limits)
        for j, k in enumerate(keys):
            if as_names:
                check_local_name(k, f"{where}.children[1].context[{j}]", limits)
            elif type(k) is str:
                check_quoted_text(k, f"{where}.children[1].context[{j}]", "kwarg", limits)


def _check_list(items: Iterable, where: str, limits: Limits) -> None:
    check_limit(len(items), limits, "max_list_len", where, "the list length", ListTooLongError)  # type: ignore[arg-type]


def _check_argument(a: schema.Argument, where: str, limits: Limits, known: _Known) -> None:
    """The fast predicate first (names that passed already are not checked again); the detailed
    checks, which raise naming the field, only for an argument it does not accept."""
    if not _argument_ok(a, limits, known):
        _check_argument_names(a, where, limits)


def _check_argument_names(a: schema.Argument, where: str, limits: Limits) -> None:
    k = a.kind
    if k in _FLAT_LISTS or k in _NESTED_LISTS:
        v = getattr(a, k)
        _check_list(v, where, limits)
        if k in ("as_int_lists", "as_float_lists", "as_nested_tensors"):
            for j, inner in enumerate(v):
                _check_list(inner, f"{where}[{j}]", limits)
        if k == "as_ints":
            for j, x in enumerate(v):
                _check_int64(x, f"{where}[{j}]")
        if k == "as_int_lists":
            for j, inner in enumerate(v):
                for m, x in enumerate(inner):
                    _check_int64(x, f"{where}[{j}][{m}]")
    _check_int64(a.as_int, where)
    for n in argument_names(a):
        check_local_name(n, where, limits)


def _check_graph(g: schema.Graph, where: str, limits: Limits, counter: list[int]) -> None:
    # Each entry is first checked by a fast predicate that builds no field path; only an entry it
    # does not accept goes through the detailed checks, which raise naming the field.
    counter[0] += len(g.nodes)
    check_limit(counter[0], limits, "max_nodes", f"{where}.nodes", "the number of nodes (so far)",
                TooManyNodesError)
    known = _Known()
    for table in ("tensor_values", "sym_int_values", "sym_bool_values", "sym_float_values", "custom_obj_values"):
        values = getattr(g, table)
        if known.all_local_ok(values, limits):
            continue
        for name in values:
            if not known.local_ok(name, limits):
                check_local_name(name, f"{where}.{table}[{_show(name)}]", limits)
    shapes_ok: dict[int, schema.TensorMeta] = {}  # metas that passed, by identity (writers share them)
    for name, meta in g.tensor_values.items():
        if id(meta) in shapes_ok:
            continue
        if not _shape_ok(meta.sizes, meta.strides, limits):
            _check_shape(meta.sizes, meta.strides, f"{where}.tensor_values[{_show(name)}]", limits)
        shapes_ok[id(meta)] = meta
    for i, a in enumerate(g.inputs):
        _check_argument(a, f"{where}.inputs[{i}]", limits, known)
    for i, a in enumerate(g.outputs):
        _check_argument(a, f"{where}.outputs[{i}]", limits, known)
    for i, n in enumerate(g.nodes):
        if _node_ok(n, limits, known):
            continue
        at = f"{where}.nodes[{i}]"
        check_local_name(n.name, f"{at}.name", limits)
        _check_list(n.inputs, f"{at}.inputs", limits)
        for j, na in enumerate(n.inputs):
            if na.kind == schema.ArgumentKind.KEYWORD:
                _check_keyword_name(na.name, f"{at}.inputs[{j}].name", limits)
            _check_argument_names(na.arg, f"{at}.inputs[{j}]", limits)
            for k, ga in enumerate(argument_subgraphs(na.arg)):
                check_attr_name(ga.name, f"{at}.inputs[{j}].subgraph[{k}].name", limits)
                _check_graph(ga.graph, f"{at}.inputs[{j}].graph", limits, counter)
        _check_list(n.outputs, f"{at}.outputs", limits)
        for j, o in enumerate(n.outputs):
            _check_argument_names(o, f"{at}.outputs[{j}]", limits)
        _check_metadata(n.metadata, f"{at}.metadata", limits)


# Argument members holding one flat list, whose length the checks bound (and as_ints's integers).
_FLAT_LISTS = frozenset({"as_ints", "as_floats", "as_bools", "as_strings", "as_tensors", "as_sym_ints",
                         "as_sym_bools", "as_sym_floats", "as_optional_tensors"})
# Argument members holding lists that hold lists or arguments: only the detailed checks take them.
_NESTED_LISTS = frozenset({"as_nested_tensors", "as_int_lists", "as_float_lists", "as_tuple", "as_string_to_argument"})

# Argument members that hold no name, no list and no integer: the checks have nothing to look at.
_PLAIN_ARGUMENTS = frozenset({"as_none", "as_float", "as_string", "as_scalar_type", "as_memory_format", "as_layout",
                              "as_device", "as_bool", "as_operator", "as_complex"})


def _local_ok(name: object, limits: Limits) -> bool:
    """``check_local_name`` would accept ``name`` (a predicate: no message is built)."""
    return (type(name) is str and len(name) <= limits.max_name_chars and _IDENT.match(name) is not None
            and name not in _KEYWORDS and name not in RESERVED_LOCALS)


def _text_ok(text: object, limits: Limits) -> bool:
    return type(text) is str and len(text) <= limits.max_text_chars and _BAD_TEXT.search(text) is None


def _fqn_ok(name: object, limits: Limits) -> bool:
    """``check_fqn(name, root=True)`` would accept ``name``."""
    if type(name) is not str or len(name) > limits.max_name_chars:
        return False
    if name == "":
        return True
    if len(name) == 4 and _fx_node_name(name) in _FX_SHADOWING:
        return False
    for seg in name.split("."):
        if ((_SEGMENT.match(seg) is None and _QUOTED_SEGMENT.match(seg) is None) or seg in _KEYWORDS
                or seg in RESERVED_ATTRIBUTES or seg.startswith("__")):
            return False
    return True


def _shape_ok(sizes: list, strides: list, limits: Limits) -> bool:
    """``_check_shape`` would accept these sizes and strides."""
    if len(sizes) > limits.max_tensor_rank or len(strides) > limits.max_tensor_rank:
        return False
    numel = 1
    for s in sizes:
        v = s if isinstance(s, int) else s.as_int
        if v is not None:
            if not -_INT64 <= v < _INT64:
                return False
            if v >= 0:
                numel *= v
    for s in strides:
        v = s if isinstance(s, int) else s.as_int
        if v is not None and not -_INT64 <= v < _INT64:
            return False
    return numel <= limits.max_tensor_elements


def _argument_ok(a: schema.Argument, limits: Limits, known: _Known) -> bool:
    """``_check_argument_names`` would accept ``a``; False for the members that nest (lists of
    lists, tuples and dicts of arguments, subgraphs): those take the detailed path."""
    t = a.as_tensor
    if t is not None:
        return known.local_ok(t.name, limits)
    kind = a.kind
    if kind in _PLAIN_ARGUMENTS:
        return True
    if kind == "as_int":
        return -_INT64 <= a.as_int < _INT64
    if kind in _FLAT_LISTS:
        items = getattr(a, kind)
        if len(items) > limits.max_list_len:
            return False
        if kind == "as_ints":
            return all(-_INT64 <= v < _INT64 for v in items)
    elif kind not in _FLAT_REFS:
        return False
    return all(known.local_ok(name, limits) for name in argument_names(a))


# Argument members naming at most one value, with no list and no subgraph.
_FLAT_REFS = frozenset({"as_sym_int", "as_sym_bool", "as_sym_float", "as_optional_tensor", "as_custom_obj"})
# Every Argument member is in one group (as_graph, as_tensor and as_int are handled by name).
assert (_FLAT_LISTS | _NESTED_LISTS | _FLAT_REFS | _PLAIN_ARGUMENTS | {"as_graph", "as_tensor", "as_int"}
        == set(schema.Argument.__struct_fields__)), "Argument groups of the name checks are incomplete"


class _Known:
    """Names, texts, FQNs, module stacks and arguments of one graph that passed already: a value's name is
    checked where it is defined and where it is used, and nodes repeat a few metadata texts (module
    keys and paths, source targets)."""

    __slots__ = ("locals", "texts", "fqns", "stacks", "args")

    def __init__(self) -> None:
        self.locals: set[str] = set()
        self.texts: set[str] = set()
        self.fqns: set[str] = set()
        # nn_module_stack lists that passed, by identity (writers share one per module), each kept
        # alive here so its id is not reused
        self.stacks: dict[int, list] = {}
        # node arguments that passed, by identity (a value's definition and its uses share one;
        # writers share constants)
        self.args: dict[int, schema.Argument] = {}

    def local_ok(self, name: object, limits: Limits) -> bool:
        return _passes_once(self.locals, name, _local_ok, limits)

    def all_local_ok(self, names: Iterable[object], limits: Limits) -> bool:
        """``local_ok`` of every name (one call for a whole table)."""
        passed = self.locals
        for name in names:
            if not (type(name) is str and name in passed):
                if not _local_ok(name, limits):
                    return False
                passed.add(name)  # type: ignore[arg-type]  # a str: _local_ok accepts nothing else
        return True

    def text_ok(self, text: object, limits: Limits) -> bool:
        return _passes_once(self.texts, text, _text_ok, limits)

    def fqn_ok(self, name: object, limits: Limits) -> bool:
        return _passes_once(self.fqns, name, _fqn_ok, limits)


def _passes_once(passed: set[str], value: object, check: Callable[[object, Limits], bool], limits: Limits) -> bool:
    """``check(value, limits)``, remembering the strings that passed so each is checked once."""
    if type(value) is str and value in passed:
        return True
    ok = check(value, limits)
    if ok:
        passed.add(value)  # type: ignore[arg-type]  # a str: the checks accept nothing else
    return ok


def _node_ok(n: schema.Node, limits: Limits, known: _Known) -> bool:
    """Every check ``_check_graph`` makes on node ``n`` passes, and ``n`` has no subgraph."""
    cap = limits.max_list_len
    # (inline: names that passed already, the node's own among them when a value table listed it)
    passed_names = known.locals
    name = n.name
    if not (type(name) is str and name in passed_names) and not known.local_ok(name, limits):
        return False
    if len(n.inputs) > cap or len(n.outputs) > cap:
        return False
    passed = known.args
    for na in n.inputs:
        if na.kind == _KEYWORD and not (
                type(na.name) is str and len(na.name) <= limits.max_name_chars
                and _IDENT.match(na.name) is not None and na.name not in _KEYWORDS):
            return False
        a = na.arg
        if id(a) not in passed:
            if not _argument_ok(a, limits, known):
                return False
            passed[id(a)] = a
    for o in n.outputs:
        if id(o) not in passed:
            t = o.as_tensor  # (inline: _argument_ok of a reference to a value whose name passed)
            if not (t is not None and type(t.name) is str and t.name in passed_names) and (
                    not _argument_ok(o, limits, known)):
                return False
            passed[id(o)] = o
    return _metadata_ok(n.metadata, limits, known)


_KEYWORD = schema.ArgumentKind.KEYWORD


def _metadata_ok(m: schema.NodeMetadata, limits: Limits, known: _Known) -> bool:
    """``_check_metadata`` would accept ``m``."""
    if m.stack_trace is not None and not _text_ok(m.stack_trace, limits):
        return False
    if m.custom is not None and not known.text_ok(m.custom, limits):
        return False
    stack = m.nn_module_stack
    if stack is not None and id(stack) not in known.stacks:
        if len(stack) > limits.max_list_len:
            return False
        for e in stack:
            if not (known.text_ok(e.key, limits) and known.fqn_ok(e.path, limits)
                    and (e.type_name is None or known.text_ok(e.type_name, limits))):
                return False
        known.stacks[id(stack)] = stack
    if m.source_fn_stack is not None:
        if len(m.source_fn_stack) > limits.max_list_len:
            return False
        for sf in m.source_fn_stack:
            if not (_text_ok(sf.name, limits) and known.text_ok(sf.target, limits)):
                return False
    return m.torch_fn is None or (_text_ok(m.torch_fn.name, limits) and known.text_ok(m.torch_fn.target, limits))


def _check_metadata(m: schema.NodeMetadata, where: str, limits: Limits) -> None:
    if m.stack_trace is not None:
        check_text(m.stack_trace, f"{where}.stack_trace", limits)
    if m.custom is not None:
        check_text(m.custom, f"{where}.custom", limits)
    if m.nn_module_stack is not None:
        _check_list(m.nn_module_stack, f"{where}.nn_module_stack", limits)
        for j, e in enumerate(m.nn_module_stack):
            at = f"{where}.nn_module_stack[{j}]"
            check_text(e.key, f"{at}.key", limits)
            check_fqn(e.path, f"{at}.path", limits, root=True)
            if e.type_name is not None:
                check_text(e.type_name, f"{at}.type_name", limits)
    if m.source_fn_stack is not None:
        _check_list(m.source_fn_stack, f"{where}.source_fn_stack", limits)
        for j, sf in enumerate(m.source_fn_stack):
            check_text(sf.name, f"{where}.source_fn_stack[{j}].name", limits)
            check_text(sf.target, f"{where}.source_fn_stack[{j}].target", limits)
    if m.torch_fn is not None:
        check_text(m.torch_fn.name, f"{where}.torch_fn.name", limits)
        check_text(m.torch_fn.target, f"{where}.torch_fn.target", limits)


# (union member, field holding the FQN) for specs that name module state
_INPUT_FQNS = {"parameter": "parameter_name", "buffer": "buffer_name", "tensor_constant": "tensor_constant_name",
               "custom_obj": "custom_obj_name"}
_OUTPUT_FQNS = {"buffer_mutation": "buffer_name", "parameter_mutation": "parameter_name",
                "gradient_to_parameter": "parameter_name"}
_OUTPUT_LOCALS = {"gradient_to_user_input": "user_input_name", "user_input_mutation": "user_input_name"}


def _check_signature(sig: schema.GraphSignature, limits: Limits) -> None:
    known = _Known()
    _check_list(sig.input_specs, "signature.input_specs", limits)
    _check_list(sig.output_specs, "signature.output_specs", limits)
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
            _check_argument(v.arg, f"{where}.arg", limits, known)
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
            _check_argument(v.arg, f"{where}.arg", limits, known)
        else:
            check_local_name(v.arg.name, f"{where}.arg.name", limits)
