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

How long a name may be is bounded by :class:`serde.core.limits.Limits` (``max_name_chars``,
``max_text_chars``); the other caps are checked by :mod:`serde.core.checks.shapes`.
"""

from __future__ import annotations

import keyword
import re

from serde.core.errors import NameTooLongError, UnsafeNameError
from serde.core.limits import DEFAULT_LIMITS, Limits, check_limit
from serde.errors import MalformedArtifactError

__all__ = [
    "check_local_name", "check_fqn", "check_attr_name", "check_text", "check_quoted_text",
    "check_keyword_name", "check_class_name", "local_ok", "text_ok", "fqn_ok", "name_string", "show",
    "RESERVED_ATTRIBUTES", "RESERVED_LOCALS", "IDENT", "KEYWORDS", "UNQUOTABLE", "HOSTILE", "CLASS_NAME_RE",
    "MAX_CLASS_NAME",
]


IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_SEGMENT = re.compile(r"(?:[A-Za-z_][A-Za-z0-9_]*|0|[1-9][0-9]*)\Z")
# A segment that is no identifier, which torch.fx writes between double quotes instead of after a
# dot (``getattr(self, "foo:bar")``, ``getattr(self.layers, "slice(2, 3, None)")``): printable
# ASCII without what would end or escape that literal (quotes, backslash), without "." (the
# separator) and "@" (unflatten's call index). Non-ASCII is refused: fx writes a non-ASCII
# identifier raw, where Python's NFKC normalization could make it another attribute.
# How dynamo spells the module root in its sources (getattr(L['self'], 'sub:mod')).
_DYNAMO_SOURCE = "L['self']"
# (Spelled as the ranges it accepts: the negated class over all of Unicode, the same set, costs the
# regex compiler about 100 times as much, in every process that imports this module.)
_QUOTED_SEGMENT = re.compile(r"""[\x20\x21\x23-\x26\x28-\x2d\x2f-\x3f\x41-\x5b\x5d-\x7e]+\Z""")
_CALL_INDEX = re.compile(r"@(?:0|[1-9][0-9]*)\Z")   # unflatten's "sub@1": the second call of sub
# Everything str.splitlines() breaks on except "\n", and the other C0/C1 controls except "\t".
_BAD_TEXT = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")

# Names the source fx generates relies on: its custom builtins (torch.fx.graph._custom_builtins:
# torch, inf, nan, NoneType, device, fx_pytree, pytree), the forward's own first parameter
# ``self``, and ``getattr``, the one builtin it writes raw rather than through its namespace
# (``getattr(self.layers, "0")`` for an attribute path segment that is no identifier): a forward
# parameter of that name shadows it. Other builtins are safe as names: fx's namespace renames a
# node that would shadow one (``max`` -> ``max_1``), and torch.export names placeholders after the
# user's forward arguments (``input``). tests/serde/core/test_names.py checks this against torch.fx.
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
# build (names starting with "__" excluded: those are refused by shape). tests/serde/core/test_names.py checks this
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

KEYWORDS = frozenset(keyword.kwlist)


def check_local_name(name: object, where: str, limits: Limits = DEFAULT_LIMITS) -> str:
    """A name fx uses as a Python local: an ASCII identifier, not a keyword or fx global.

    Dunder names stay allowed: torch.export names nodes after their targets (``__and__``), and the
    generated forward is a plain function, so no name mangling applies.
    """
    text = name_string(name, where, limits)
    if not IDENT.match(text):
        raise UnsafeNameError(f"{where}: name {show(text)} is not an ASCII Python identifier "
                              f"([A-Za-z_][A-Za-z0-9_]*); {HOSTILE}")
    if text in KEYWORDS or text in RESERVED_LOCALS:
        raise UnsafeNameError(f"{where}: name {show(text)} is reserved (a Python keyword or a global of the "
                              f"code torch.fx generates); {HOSTILE}")
    return text


def check_fqn(name: object, where: str, limits: Limits = DEFAULT_LIMITS, *, root: bool = False,
              call_index: bool = False) -> str:
    """A dotted attribute path (``layers.0.weight``); ``root`` allows ``""``, ``call_index`` a ``@N`` suffix."""
    text = name_string(name, where, limits)
    path = text
    if call_index:
        m = _CALL_INDEX.search(path)
        if m is not None:
            path = path[:m.start()]
    if path == "" and root:
        return text
    if _fx_node_name(path) in _FX_SHADOWING:
        raise UnsafeNameError(
            f"{where}: FQN {show(text)} gives the node torch.fx generates for it the name "
            f"{_fx_node_name(path)!r}, which shadows the generated forward's 'self' (ep.module() then "
            f"fails); {HOSTILE}")
    for seg in path.split("."):
        if not _SEGMENT.match(seg) and not _QUOTED_SEGMENT.match(seg):
            if _DYNAMO_SOURCE in text:
                raise UnsafeNameError(
                    f"{where}: FQN {show(text)} is the source text strict export (dynamo) records for a "
                    "submodule whose name is no identifier, not a module path (torch's own unflatten makes a "
                    "module of that name); export with strict=False, which records the submodule's name, "
                    "or give the submodule an identifier name")
            raise UnsafeNameError(
                f"{where}: FQN {show(text)} has segment {show(seg)}, which is neither an ASCII identifier, "
                f"a decimal index, nor printable ASCII text without quotes, backslashes, '.' and '@' (torch.fx "
                f"writes such a segment between double quotes: getattr(self, \"foo:bar\")); {HOSTILE}")
        _check_attr_segment(seg, text, where)
    return text


def _fx_node_name(fqn: str) -> str:
    """The name torch.fx derives from a get_attr target before making it unique (Graph._target_to_str,
    _Namespace.create_name)."""
    return _FX_ILLEGAL.sub("_", _FX_CAMEL.sub(r"_\1", fqn).lower())


def check_attr_name(name: object, where: str, limits: Limits = DEFAULT_LIMITS) -> str:
    """A submodule attribute that pt2serde itself names (subgraphs): an identifier not starting with ``_``."""
    text = name_string(name, where, limits)
    if not IDENT.match(text) or text.startswith("_"):
        raise UnsafeNameError(f"{where}: attribute name {show(text)} must be an ASCII identifier not "
                              f"starting with '_'; {HOSTILE}")
    # fx names a subgraph's get_attr node after its attribute, as it does a state FQN's
    if _fx_node_name(text) in _FX_SHADOWING:
        raise UnsafeNameError(
            f"{where}: attribute name {show(text)} gives the node torch.fx generates for it the name "
            f"{_fx_node_name(text)!r}, which shadows the generated forward's 'self' (ep.module() then "
            f"fails); {HOSTILE}")
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
            f"{HOSTILE}")
    return text


# What ends a quoted literal in the code ep.module() generates. In text pasted raw between quotes
# (a string constant input in the guard code; the keyword argument names of the forward's
# ``tree_flatten_spec(([...], {'name': name}), ...)``): a quote, a backslash (it escapes the
# closing quote) or a line break (control characters, line separators and lone surrogates are
# refused with them). In a dict key, which reaches the guard code through repr() and its message
# through ast.unparse(): a quote of either kind.
# (One class of what it refuses, not its complement over all of Unicode: ten times cheaper to compile.)
_RAW = re.compile(r"""['"\\\x00-\x1f\x7f-\x9f\ud800-\udfff\u2028\u2029]""")
UNQUOTABLE = {"constant": _RAW, "kwarg": _RAW, "key": re.compile(r"""['"]""")}
_QUOTED_WHAT = {"constant": "string constant input", "kwarg": "keyword argument name of an input",
                "key": "dict key of an input"}


def check_quoted_text(text: object, where: str, kind: str, limits: Limits = DEFAULT_LIMITS) -> str:
    """Text torch pastes between quotes into the code it generates for ``ep.module()`` (``kind``:
    "constant" for a string constant input, "kwarg" for a keyword argument name in the root of an
    input spec, "key" for any other dict key of an input spec); see the module docstring."""
    if not isinstance(text, str):
        raise UnsafeNameError(f"{where}: expected a string, got {type(text).__name__}")
    check_limit(len(text), limits, "max_text_chars", where, "the text length", NameTooLongError)
    bad = UNQUOTABLE[kind].search(text)
    if bad is not None:
        what = _QUOTED_WHAT[kind]
        raise UnsafeNameError(
            f"{where}: the {what} {show(text)} holds {bad.group()!r} at {bad.start()}; torch's ep.module() "
            "pastes it between quotes into the code it generates and runs, where that character would "
            "end the literal and what follows would run (programs torch.export makes with such text break "
            "torch's own ep.module() too). "
            + ("Use keys without quote characters." if kind == "key"
               else "Use text without quotes, backslashes and control characters."))
    return text

# ---------------------------------------------------------------- helpers

HOSTILE = "the artifact is damaged or hostile; names written by torch.export always pass this check"


def show(text: str) -> str:
    return repr(text if len(text) <= 80 else text[:80] + "...")


def name_string(name: object, where: str, limits: Limits) -> str:
    if not isinstance(name, str):
        raise UnsafeNameError(f"{where}: a name must be a string, got {type(name).__name__}")
    check_limit(len(name), limits, "max_name_chars", where, "the name length", NameTooLongError)
    return name


def _check_attr_segment(seg: str, whole: str, where: str) -> None:
    # A "__" prefix covers dunders and the markers torch sets on module classes at run time
    # (dynamo's "___needs_generation_tag_patch"); Python mangles a user's own "__x" to "_Cls__x".
    if seg in KEYWORDS or seg in RESERVED_ATTRIBUTES or seg.startswith("__"):
        raise UnsafeNameError(
            f"{where}: FQN {show(whole)} uses {show(seg)}, which is reserved (a Python keyword, a name "
            f"starting with '__' or an attribute of nn.Module/GraphModule such as 'forward', 'training' or "
            f"'_modules'); {HOSTILE}")

def check_keyword_name(name: object, where: str, limits: Limits) -> None:
    # fx writes keyword arguments as ``f(x, device = ...)``: any identifier but a Python keyword works.
    text = name_string(name, where, limits)
    if not IDENT.match(text) or text in KEYWORDS:
        raise UnsafeNameError(f"{where}: keyword argument name {show(text)} is not an ASCII Python identifier "
                              f"or is a Python keyword; {HOSTILE}")


def local_ok(name: object, limits: Limits) -> bool:
    """``check_local_name`` would accept ``name`` (a predicate: no message is built)."""
    return (type(name) is str and len(name) <= limits.max_name_chars and IDENT.match(name) is not None
            and name not in KEYWORDS and name not in RESERVED_LOCALS)


def text_ok(text: object, limits: Limits) -> bool:
    return type(text) is str and len(text) <= limits.max_text_chars and _BAD_TEXT.search(text) is None


def fqn_ok(name: object, limits: Limits) -> bool:
    """``check_fqn(name, root=True)`` would accept ``name``."""
    if type(name) is not str or len(name) > limits.max_name_chars:
        return False
    if name == "":
        return True
    if len(name) == 4 and _fx_node_name(name) in _FX_SHADOWING:
        return False
    for seg in name.split("."):
        if ((_SEGMENT.match(seg) is None and _QUOTED_SEGMENT.match(seg) is None) or seg in KEYWORDS
                or seg in RESERVED_ATTRIBUTES or seg.startswith("__")):
            return False
    return True


# A tensor subclass's or custom object's class name: dotted identifiers; "<locals>" lets a class
# defined inside a function keep its default name. It is only ever a registry key.
CLASS_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.(?:[A-Za-z_][A-Za-z0-9_]*|<locals>))*")
MAX_CLASS_NAME = 256


def check_class_name(name: str, where: str) -> None:
    """A class name from a file must be a dotted name; it is only ever a registry key."""
    if not (len(name) <= MAX_CLASS_NAME and CLASS_NAME_RE.fullmatch(name)):
        raise MalformedArtifactError(f"{where}: class name {name[:80]!r} is not a dotted Python name; "
                                     "the artifact is damaged or hand-edited")
