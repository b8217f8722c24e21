"""The program's stored example inputs pass the input checks its module runs on every call.

``ep.module()`` checks each call's inputs before running the graph: each static size and each
constant input must be what the graph was traced with, each symbolic size must lie in its range
constraint, and two inputs sharing a symbol must agree (torch's ``_get_input_guards_for_graph``).
``torch.export`` derived all of these from the example inputs, so they hold for the examples of
every program it wrote. A file whose own examples fail them has had its sizes, constants or ranges
edited: its module would refuse the very inputs it was exported with. The same rules are evaluated
here on the example values, without generating or running any code.
"""

from __future__ import annotations

import math
from typing import Any

import sympy
import torch
import torch.utils._pytree as pytree
from torch.export.graph_signature import InputKind
from torch.utils._sympy.numbers import int_oo

from ..errors import FIX_EDITED, InconsistentProgramError

__all__ = ["check_examples_fit_inputs"]


def _bound(v: Any) -> int | float:
    """A range end as torch's input checks compare with it (unbounded ends are infinite)."""
    if v in (sympy.oo, int_oo):
        return math.inf
    if v in (-sympy.oo, -int_oo):
        return -math.inf
    return int(v)


def check_examples_fit_inputs(ep: torch.export.ExportedProgram) -> None:
    """Refuse ``ep`` when its stored example inputs fail the checks ``ep.module()`` runs on its
    inputs (the rules of torch's ``_get_input_guards_for_graph``, evaluated directly).

    Programs without example inputs, or whose examples do not flatten to one value per user input
    (refused elsewhere), are left alone.
    """
    examples = ep.example_inputs
    if examples is None:
        return
    leaves = pytree.tree_leaves_with_path(examples)
    user = [s.arg.name for s in ep.graph_signature.input_specs if s.kind == InputKind.USER_INPUT]
    if len(leaves) != len(user):
        return
    nodes = {n.name: n for n in ep.graph.find_nodes(op="placeholder")}
    ranges = ep.range_constraints
    seen: dict[Any, tuple[int, str]] = {}  # symbol -> (its value, where it was first read)

    def fail(where: str, requirement: str, value: Any) -> None:
        raise InconsistentProgramError(
            f"weights.example_inputs{where}: is {value!r}, but the program requires {requirement}, so its "
            f"module would refuse the inputs it was exported with; {FIX_EDITED}")

    def symbol(expr: Any, value: int, where: str, shown: str) -> None:
        if expr in seen:
            first, at = seen[expr]
            if value != first:
                fail(where, f"{shown} == {at} ({first}): both are the size {expr}", value)
            return
        seen[expr] = (value, shown)
        r = ranges[expr]
        lo, hi = _bound(r.lower), _bound(r.upper)
        # torch checks a lower bound only above 2: sizes 0 and 1 are specialized at export
        if lo > 2 and value < lo:
            fail(where, f"{shown} >= {lo} (range_constraints[{str(expr)!r}] = [{lo}, {hi}])", value)
        if hi < math.inf and value > hi:
            fail(where, f"{shown} <= {hi} (range_constraints[{str(expr)!r}] = [{lo}, {hi}])", value)

    for (path, value), name in zip(leaves, user, strict=True):
        node = nodes.get(name)
        meta = node.meta.get("val") if node is not None else None
        key = pytree.keystr(path)
        if isinstance(meta, torch.SymInt):
            if meta.node.expr in ranges and isinstance(value, int):
                symbol(meta.node.expr, value, f"{key} (input {name!r})", name)
        elif isinstance(meta, torch.Tensor):
            if not isinstance(value, torch.Tensor) or value.dim() != meta.dim():
                continue  # what the call itself refuses; the checks below read sizes
            for d, (size, got) in enumerate(zip(meta.shape, value.shape, strict=True)):
                where, shown = f"{key}.size()[{d}] (input {name!r}, dimension {d})", f"{name}.size()[{d}]"
                if isinstance(size, torch.SymInt):
                    if size.node.expr in ranges:
                        symbol(size.node.expr, int(got), where, shown)
                elif got != size:
                    fail(where, f"{shown} == {size}, its size in the graph", int(got))
        elif isinstance(meta, (bool, int, float, str)) and isinstance(value, (bool, int, float, str)):
            nan = isinstance(meta, float) and math.isnan(meta)
            if not (isinstance(value, float) and math.isnan(value) if nan else value == meta):
                fail(f"{key} (input {name!r})", f"{name} == {meta!r}, the constant it was exported with", value)
