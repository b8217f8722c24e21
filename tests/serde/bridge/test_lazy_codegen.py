"""A loaded program's graph modules generate their Python code on first use, not during the load.

The reference for "the same as before" is the same artifact loaded with code generation at once
(the flags below switched off for one load): both loads must give the same code, the same printout,
and the same behaviour through ``ep.module()``, ``run_decompositions()``, ``copy.deepcopy`` and
torch's own ``torch.export.save``/``load``.
"""

from __future__ import annotations

import copy
import io
import sys
from pathlib import Path

import pytest
import torch
from torch.fx._lazy_graph_module import _LazyGraphModule
from torch.fx.graph_module import GraphModule

import serde
import serde.bridge.graph as bridge_graph
import serde.bridge.program as bridge_program
from serde.testing import zoo
from tests import zoo_breadth
from tests.serde._differential import _run, isolate, same

# (zoo module, case): subgraphs (cond, nested cond, map, scan), dynamic shapes, buffer mutation.
PROGRAMS = [(zoo, "cond"), (zoo, "mlp"), (zoo, "input_mutation_aten"), (zoo_breadth, "cond_nested"),
            (zoo_breadth, "map"), (zoo_breadth, "scan")]
IDS = [name for _, name in PROGRAMS]


def _export(module, name: str):
    case = module.get(name)
    ep = module.export_case(case)
    torch.manual_seed(0)
    _, args, kwargs, _ = case.build()
    return ep, (args, kwargs)


def _graph_modules(ep) -> list[GraphModule]:
    return [m for m in ep.graph_module.modules() if isinstance(m, GraphModule)]


def _code_generated(gm: GraphModule) -> bool:
    # torch's lazy module marks "code not generated yet" by the forward it installs until then.
    return not (isinstance(gm, _LazyGraphModule) and type(gm)._needs_recompile())


@pytest.fixture(scope="module", params=PROGRAMS, ids=IDS)
def loaded(request, tmp_path_factory):
    """(path, lazily loaded program, eagerly loaded program, inputs) of one zoo program."""
    module, name = request.param
    ep, inputs = _export(module, name)
    path = tmp_path_factory.mktemp(name) / "p.pt2s"
    serde.save(ep, path)
    return path, serde.load(path), _eager_load(path), inputs


def _eager_load(path: Path):
    """``serde.load`` with the code of every graph module generated during the load."""
    flags = bridge_program._LAZY_PROGRAMS, bridge_graph._GraphModuleClass
    bridge_program._LAZY_PROGRAMS, bridge_graph._GraphModuleClass = False, GraphModule
    try:
        ep = serde.load(path)
    finally:
        bridge_program._LAZY_PROGRAMS, bridge_graph._GraphModuleClass = flags
    assert all(_code_generated(m) for m in _graph_modules(ep))
    return ep


def _outputs(ep, inputs) -> dict:
    run = _run(lambda: isolate(ep.module()), inputs, seed=0)
    assert run.error is None, run.error
    return {"outputs": run.outputs, "inputs": run.inputs_after, "buffers": run.buffers_after}


def _assert_same_run(a, b, inputs) -> None:
    diff = same(_outputs(a, inputs), _outputs(b, inputs))
    assert diff is None, diff


def test_load_generates_no_code(loaded):
    _, ep, _, _ = loaded
    gms = _graph_modules(ep)
    assert not [m for m in gms if _code_generated(m)]


def test_subgraphs_are_lazy_too(tmp_path):
    ep, _ = _export(zoo, "cond")
    serde.save(ep, tmp_path / "c.pt2s")
    subs = [m for n, m in serde.load(tmp_path / "c.pt2s").graph_module.named_children()]
    assert len(subs) == 2 and not [m for m in subs if _code_generated(m)]


def test_code_and_printout_equal_eager(loaded):
    _, ep, eager, _ = loaded
    assert [m.code for m in _graph_modules(ep)] == [m.code for m in _graph_modules(eager)]
    assert str(ep) == str(eager)
    assert str(ep.graph_module) == str(eager.graph_module)
    assert all(_code_generated(m) for m in _graph_modules(ep))


def test_printing_the_program_first_works(loaded):
    path, _, eager, _ = loaded
    ep = serde.load(path)
    assert str(ep) == str(eager)  # before anything else generated code


def test_module_call_equals_eager(loaded):
    path, _, eager, inputs = loaded
    _assert_same_run(serde.load(path), eager, inputs)


def _lifted_inputs(ep, inputs) -> list:
    """The flat inputs of ``ep.graph_module`` itself: weights, constants and user inputs in signature order."""
    user = iter(torch.utils._pytree.tree_leaves(copy.deepcopy(inputs)))
    out = []
    for spec in ep.graph_signature.input_specs:
        if spec.kind.name == "USER_INPUT":
            out.append(next(user))
        elif spec.target in ep.state_dict:
            out.append(ep.state_dict[spec.target].detach().clone())
        else:
            c = ep.constants[spec.target]
            out.append(c.clone() if isinstance(c, torch.Tensor) else c)
    return out


def test_graph_module_call_generates_code_on_first_use(loaded):
    path, _, eager, inputs = loaded
    ep = serde.load(path)
    with torch.no_grad():
        ours = ep.graph_module(*_lifted_inputs(ep, inputs))
        ref = eager.graph_module(*_lifted_inputs(eager, inputs))
    assert _code_generated(ep.graph_module)
    diff = same(ours, ref)
    assert diff is None, diff
    assert ep.graph_module.code == eager.graph_module.code


def test_input_rejection_equals_eager(loaded):
    path, _, eager, inputs = loaded
    args, kwargs = inputs
    bad = ((*args, torch.ones(1)), kwargs)  # one input too many
    ours = _run(lambda: serde.load(path).module(), bad, seed=0)
    ref = _run(lambda: eager.module(), bad, seed=0)
    assert ours.error is not None and ref.error is not None
    assert type(ours.error) is type(ref.error)


def test_run_decompositions_equals_eager(loaded):
    path, _, eager, inputs = loaded
    dec, dec_eager = serde.load(path).run_decompositions(), eager.run_decompositions()
    assert str(dec.graph) == str(dec_eager.graph)
    _assert_same_run(dec, dec_eager, inputs)


def test_deepcopy_equals_eager(loaded):
    path, _, eager, inputs = loaded
    ep = serde.load(path)
    dup = copy.deepcopy(ep)
    assert not [m for m in _graph_modules(dup) if _code_generated(m)]  # still lazy, still whole
    assert dup.graph_module.code == eager.graph_module.code
    _assert_same_run(dup, eager, inputs)
    _assert_same_run(ep, eager, inputs)


def test_torch_export_save_of_loaded_equals_eager(loaded):
    path, _, eager, inputs = loaded
    bufs = []
    for ep in (serde.load(path), eager):
        buf = io.BytesIO()
        torch.export.save(ep, buf)
        buf.seek(0)
        bufs.append(torch.export.load(buf))
    assert str(bufs[0].graph) == str(bufs[1].graph)
    _assert_same_run(bufs[0], bufs[1], inputs)


def test_guard_code_equals_eager(loaded):
    """The guard code torch's __init__ computes is skipped during a lazy load (ours replaces it):
    the program ends with the same guards, and torch's function is back in place afterwards."""
    import torch.export.exported_program as torch_exported_program

    _, lazy, eager, _ = loaded
    assert lazy._guards_code == eager._guards_code
    assert torch_exported_program._convert_guards_to_code.__module__ == "torch.export.exported_program"


def test_other_threads_build_programs_as_torch_does(tmp_path):
    """While one thread loads, programs another thread builds keep torch's eager graph module."""
    import threading

    ep, _ = _export(zoo, "chain_200")
    serde.save(ep, tmp_path / "c.pt2s")
    small, _ = _export(zoo, "mlp")
    stop, loads = threading.Event(), []

    def load_loop():
        while not stop.is_set():
            loads.append(serde.load(tmp_path / "c.pt2s"))

    built = []
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often, so builds overlap the loads' construction
    t = threading.Thread(target=load_loop)
    t.start()
    try:
        while len(loads) < 6:
            built.append(small._update(small.graph_module, small.graph_signature))
    finally:
        stop.set()
        t.join()
        sys.setswitchinterval(interval)
    assert loads and all(not _code_generated(x.graph_module) for x in loads)
    assert all(type(b.graph_module).__mro__[1] is GraphModule for b in built)
