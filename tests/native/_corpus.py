"""The held-out style corpus for the native runtime: every zoo and breadth case and every supported
ExportDB example torch ships, each as exported and after ``run_decompositions()``."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch

from tests.native._native_util import CASES, assert_runs_like_eager, exported, inputs_of

_HOP = "is not supported by the native emitter"
# Emit-time refusals, on purpose. Any other failure (export, save, emit or a run) fails the test.
REFUSED = {
    "zoo/associative_scan": "lazy_load_decompositions",
    "zoo/flex_attention": "lazy_load_decompositions",
    "zoo/flex_attention@aten": f"higher-order op 'flex_attention' {_HOP}",
    "zoo/flex_attention_aten": f"higher-order op 'flex_attention' {_HOP}",
    "zoo/flex_attention_aten@aten": f"higher-order op 'flex_attention' {_HOP}",
    "zoo/autocast": f"higher-order op 'wrap_with_autocast' {_HOP}",
    "zoo/hints_wrapper": f"higher-order op 'hints_wrapper' {_HOP}",
    "zoo/hints_wrapper@aten": f"higher-order op 'hints_wrapper' {_HOP}",
    **{f"zoo/{n}{ir}": "custom object inputs are not supported"
       for n in ("opaque_object", "torchbind", "torchbind_aten") for ir in ("", "@aten")},
    **{f"zoo/{n}{ir}": "loss outputs (joint or effectful graphs) are not supported"
       for n in ("classifier_joint", "regressor_joint") for ir in ("", "@aten")},
}


@dataclass(frozen=True)
class Case:
    name: str  # "zoo/mlp", "zoo/mlp@aten", "exportdb/cond_closed_over_variable@aten"
    source: str  # "zoo" or "exportdb"
    key: str
    decompose: bool


def cases() -> list[Case]:
    from torch._export.db.case import SupportLevel
    from torch._export.db.examples import all_examples

    out = [Case(f"zoo/{n}" + ("@aten" if d else ""), "zoo", n, d) for n in CASES for d in (False, True)]
    for name, ex in sorted(all_examples().items()):
        if ex.support_level == SupportLevel.SUPPORTED:
            out += [Case(f"exportdb/{name}" + ("@aten" if d else ""), "exportdb", name, d) for d in (False, True)]
    return out


def make(c: Case) -> tuple[torch.export.ExportedProgram, list[tuple[tuple, dict]]]:
    """The program and its inputs (raises what torch raises when it cannot export the case)."""
    if c.source == "zoo":
        ep, inputs = exported(c.key), inputs_of(c.key)
    else:
        from torch._export.db.examples import all_examples

        ex = all_examples()[c.key]
        torch._dynamo.reset()
        torch.manual_seed(0)
        model, args, kwargs = copy.deepcopy((ex.model, ex.example_args, ex.example_kwargs))
        ep = torch.export.export(model, args, kwargs, dynamic_shapes=ex.dynamic_shapes, strict=False)
        inputs = [copy.deepcopy((args, kwargs or {}))]
    if c.decompose:
        ep = copy.deepcopy(ep).run_decompositions()
    return ep, inputs


def outcome(c: Case) -> tuple[str, Any]:
    """("ok", None) or (stage, error): the first of export, save, emit, heap or arena run that failed."""
    from native.emit.emitter import emit
    from native.format.verify import decode
    from serde.api import to_artifact_parts
    from serde.archive import payload_name

    try:
        ep, inputs = make(c)
    except Exception as e:
        return "export", e
    try:
        program, weights, payloads, _ = to_artifact_parts(ep)
    except Exception as e:
        return "save", e
    try:
        native = emit(program, weights, lambda sha: payloads[payload_name(sha)])
    except Exception as e:
        return "emit", e
    native = decode(native.encode())
    for arena in (False, True):
        try:
            assert_runs_like_eager(ep, native, inputs, arena=arena, check=True)
        except Exception as e:
            return ("arena" if arena else "heap"), e
    return "ok", None
