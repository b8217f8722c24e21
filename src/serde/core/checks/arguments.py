"""The names, list lengths and integers of one :class:`~serde.core.schema.Argument`, and what passed.

Each argument is first checked by a fast predicate that builds no field path (:func:`argument_ok`), which
remembers in a :class:`Known` the names that passed; only an argument it does not accept goes through the
detailed checks, which raise naming the field.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from serde.core import schema
from serde.core.limits import Limits
from serde.core.walk import argument_names

from .names import check_local_name, fqn_ok, local_ok, text_ok
from .shapes import INT64, check_int64, check_list

__all__ = ["check_argument", "check_argument_names", "argument_ok", "Known"]


def check_argument(a: schema.Argument, where: str, limits: Limits, known: Known) -> None:
    """The fast predicate first (names that passed already are not checked again); the detailed
    checks, which raise naming the field, only for an argument it does not accept."""
    if not argument_ok(a, limits, known):
        check_argument_names(a, where, limits)


def check_argument_names(a: schema.Argument, where: str, limits: Limits) -> None:
    k = a.kind
    if k in _FLAT_LISTS or k in _NESTED_LISTS:
        v = getattr(a, k)
        check_list(v, where, limits)
        if k in ("as_int_lists", "as_float_lists", "as_nested_tensors"):
            for j, inner in enumerate(v):
                check_list(inner, f"{where}[{j}]", limits)
        if k == "as_ints":
            for j, x in enumerate(v):
                check_int64(x, f"{where}[{j}]")
        if k == "as_int_lists":
            for j, inner in enumerate(v):
                for m, x in enumerate(inner):
                    check_int64(x, f"{where}[{j}][{m}]")
    check_int64(a.as_int, where)
    for n in argument_names(a):
        check_local_name(n, where, limits)


# Argument members holding one flat list, whose length the checks bound (and as_ints's integers).
_FLAT_LISTS = frozenset({"as_ints", "as_floats", "as_bools", "as_strings", "as_tensors", "as_sym_ints",
                         "as_sym_bools", "as_sym_floats", "as_optional_tensors"})
# Argument members holding lists that hold lists or arguments: only the detailed checks take them.
_NESTED_LISTS = frozenset({"as_nested_tensors", "as_int_lists", "as_float_lists", "as_tuple", "as_string_to_argument"})

# Argument members that hold no name, no list and no integer: the checks have nothing to look at.
_PLAIN_ARGUMENTS = frozenset({"as_none", "as_float", "as_string", "as_scalar_type", "as_memory_format", "as_layout",
                              "as_device", "as_bool", "as_operator", "as_complex"})


def argument_ok(a: schema.Argument, limits: Limits, known: Known) -> bool:
    """``check_argument_names`` would accept ``a``; False for the members that nest (lists of
    lists, tuples and dicts of arguments, subgraphs): those take the detailed path."""
    t = a.as_tensor
    if t is not None:
        return known.local_ok(t.name, limits)
    kind = a.kind
    if kind in _PLAIN_ARGUMENTS:
        return True
    if kind == "as_int":
        return -INT64 <= a.as_int < INT64
    if kind in _FLAT_LISTS:
        items = getattr(a, kind)
        if len(items) > limits.max_list_len:
            return False
        if kind == "as_ints":
            return all(-INT64 <= v < INT64 for v in items)
    elif kind not in _FLAT_REFS:
        return False
    return all(known.local_ok(name, limits) for name in argument_names(a))


# Argument members naming at most one value, with no list and no subgraph.
_FLAT_REFS = frozenset({"as_sym_int", "as_sym_bool", "as_sym_float", "as_optional_tensor", "as_custom_obj"})
# Every Argument member is in one group (as_graph, as_tensor and as_int are handled by name).
assert (_FLAT_LISTS | _NESTED_LISTS | _FLAT_REFS | _PLAIN_ARGUMENTS | {"as_graph", "as_tensor", "as_int"}
        == set(schema.Argument.__struct_fields__)), "Argument groups of the name checks are incomplete"


class Known:
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
        return _passes_once(self.locals, name, local_ok, limits)

    def all_local_ok(self, names: Iterable[object], limits: Limits) -> bool:
        """``local_ok`` of every name (one call for a whole table)."""
        passed = self.locals
        for name in names:
            if not (type(name) is str and name in passed):
                if not local_ok(name, limits):
                    return False
                passed.add(name)  # type: ignore[arg-type]  # a str: local_ok accepts nothing else
        return True

    def text_ok(self, text: object, limits: Limits) -> bool:
        return _passes_once(self.texts, text, text_ok, limits)

    def fqn_ok(self, name: object, limits: Limits) -> bool:
        return _passes_once(self.fqns, name, fqn_ok, limits)


def _passes_once(passed: set[str], value: object, check: Callable[[object, Limits], bool], limits: Limits) -> bool:
    """``check(value, limits)``, remembering the strings that passed so each is checked once."""
    if type(value) is str and value in passed:
        return True
    ok = check(value, limits)
    if ok:
        passed.add(value)  # type: ignore[arg-type]  # a str: the checks accept nothing else
    return ok
