"""Compat suite: every frozen fixture loads with the current code, runs, and matches (DESIGN §3).

Also: the upgraded canonical form of each fixture equals the canonical form of a fresh save of the
same zoo model, every upgrader step is exercised by some fixture, and the harness notices a wrong
output.
"""

from __future__ import annotations

import copy
import functools
import importlib
import importlib.util
import json
import pkgutil
import re
from pathlib import Path

import pytest
import torch
import torch.utils._pytree as pytree

import serde
import upgraders
from serde.archive.artifact import read_artifact
from serde.bridge.bundle import load_tree
from serde.bridge.program import serialize_program
from serde.core import wire
from serde.core.version import SCHEMA_VERSION, torch_release

ROOT = Path(__file__).resolve().parents[2] / "fixtures"
FIXTURES = sorted(p.parent for p in ROOT.glob("v*/*/model.pt2s"))


def _freeze_module():
    """fixtures/freeze.py (not a package): its ``export`` is how every fixture case is exported."""
    spec = importlib.util.spec_from_file_location("_fixtures_freeze", ROOT / "freeze.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


freeze = _freeze_module()


def _id(p: Path) -> str:
    return f"{p.parent.name}/{p.name}"


def test_fixtures_exist():
    assert len(FIXTURES) >= 12
    for version_dir in ROOT.glob("v*"):
        assert (version_dir / "NOTE.md").is_file(), f"{version_dir} has no NOTE.md saying what wrote it"


def check_run(ep: torch.export.ExportedProgram, run: dict, where: str) -> None:
    """Run ``ep`` on a stored run and compare with the stored results (raises AssertionError)."""
    args, kwargs = copy.deepcopy(run["inputs"])
    module = ep.module()
    with torch.no_grad():
        out = module(*args, **kwargs)
    _close(out, run["outputs"], f"{where}: outputs")
    _close([list(args), kwargs], run["inputs_after"], f"{where}: inputs after the call")
    _close(dict(module.named_buffers()), run["buffers_after"], f"{where}: buffers after the call")


def _close(actual, expected, where: str) -> None:
    la, sa = pytree.tree_flatten(actual)
    le, se = pytree.tree_flatten(expected)
    assert len(la) == len(le), f"{where}: {sa} != {se}"
    for i, (a, e) in enumerate(zip(la, le, strict=True)):
        if isinstance(e, torch.Tensor):
            exact = not (e.is_floating_point() or e.is_complex())
            torch.testing.assert_close(a, e, rtol=0 if exact else None, atol=0 if exact else None,
                                       equal_nan=True, msg=lambda m, i=i: f"{where}[{i}]: {m}")
        else:
            assert a == e or (a != a and e != e), f"{where}[{i}]: {a!r} != {e!r}"


@pytest.mark.parametrize("fixture", FIXTURES, ids=_id)
def test_fixture_loads_runs_and_matches(fixture: Path):
    ep = serde.load(fixture / "model.pt2s")
    runs = load_tree(fixture / "io.json")
    assert runs
    for i, run in enumerate(runs):
        check_run(ep, run, f"{_id(fixture)} run {i}")


@functools.cache
def _fresh_canonical(name: str) -> bytes:
    from canonical.canonicalize import canonicalize
    from serde.bridge.effects import op_facts

    program, _ = canonicalize(serialize_program(freeze.export(name)), facts=op_facts)
    return wire.encode(program)


def _written_by_this_release(fixture: Path) -> list:
    """A fresh export may differ legitimately between torch releases (torch 2.14 exports flex_attention
    with two more nodes than 2.13), so a fixture is compared with a fresh save only under the release
    that wrote it; fixtures/torch/<release>/ holds artifacts of every supported release, compared
    under their own (tests/compat/test_torch_corpus.py) and run under every other."""
    writer = torch_release(read_artifact(fixture / "model.pt2s").manifest.torch_version)
    if writer == torch_release(str(torch.__version__)):
        return []
    return [pytest.mark.skip(reason=f"written by torch {writer[0]}.{writer[1]}: a fresh export under "
                                    f"{torch.__version__} may differ legitimately")]


@pytest.mark.parametrize("fixture", [pytest.param(f, id=_id(f), marks=_written_by_this_release(f)) for f in FIXTURES])
def test_upgraded_canonical_form_equals_fresh_save(fixture: Path):
    from canonical.canonicalize import canonicalize
    from serde.bridge.effects import op_facts

    upgraded, _ = canonicalize(read_artifact(fixture / "model.pt2s").program, facts=op_facts)
    fresh = _fresh_canonical(fixture.name)
    old = wire.encode(upgraded)
    assert upgraded.schema_version.major == SCHEMA_VERSION[0]
    # torch_version and the minor version stamp are the writer's facts (a same-major artifact is
    # read as written), not the program's: compare everything else.
    assert _strip_writer(old) == _strip_writer(fresh, _version_of(fixture))


# Program fields added by a minor version: a writer before it could not record them.
_ADDED_IN: dict[str, tuple[int, int]] = {"guards": (2, 3)}


def _strip_writer(data: bytes, written_by: tuple[int, int] | None = None):
    doc = wire.decode_json(data)
    doc.pop("torch_version", None)
    doc.pop("schema_version", None)
    for field, since in _ADDED_IN.items():
        if written_by is not None and written_by < since:
            doc.pop(field, None)
    return as_frozen(_same_torch_fn_spelling(doc))


def as_frozen(doc):
    """``doc`` as the frozen artifacts were written, which every one of them predates:

    - module types of ``nn_module_stack`` entries went to debug.json only; a fresh save keeps
      them in the program (same schema field), checked by tests/serde/archive/test_module_types.py;
    - guard checks were sorted; a fresh save keeps torch's order (a module reports the first
      check that fails), checked by tests/serde/core/test_guards.py.
    """
    guards = doc.get("guards") if isinstance(doc, dict) else None
    if isinstance(guards, dict) and isinstance(guards.get("checks"), list):
        guards["checks"] = sorted(guards["checks"], key=lambda c: json.dumps(c, sort_keys=True))
    return _without_module_types(doc)


def _every_dict(doc, edit):
    """Call ``edit`` on every dict of the JSON tree ``doc`` (in place); return ``doc``."""
    todo = [doc]
    while todo:
        d = todo.pop()
        if isinstance(d, dict):
            edit(d)
            todo.extend(d.values())
        elif isinstance(d, list):
            todo.extend(d)
    return doc


def _without_module_types(doc):
    def drop(d):
        stack = d.get("nn_module_stack")
        if isinstance(stack, list):
            for e in stack:
                if isinstance(e, dict):
                    e.pop("type_name", None)

    return _every_dict(doc, drop)


def _same_torch_fn_spelling(doc):
    """torch names the method behind ``t == u`` ``method_descriptor.eq`` when numpy is absent and
    ``method_descriptor.__eq__`` when it is importable (torch wraps the dunder then); the fixtures
    were frozen without numpy. Both spellings name the same method, so compare them as one."""
    def respell(d):
        fn = d.get("torch_fn")
        if isinstance(fn, dict) and isinstance(fn.get("target"), str):
            fn["target"] = re.sub(r"^method_descriptor\.__(\w+)__$", r"method_descriptor.\1", fn["target"])

    return _every_dict(doc, respell)


def _version_of(fixture: Path) -> tuple[int, int]:
    major, minor = fixture.parent.name[1:].split(".")
    return int(major), int(minor)


def test_fixture_directories_match_the_artifacts_inside():
    for fixture in FIXTURES:
        version = read_artifact(fixture / "model.pt2s").manifest.schema_version
        assert (version.major, version.minor) == _version_of(fixture), _id(fixture)


def test_every_upgrader_step_is_exercised_by_a_fixture():
    steps = sorted(m.name for m in pkgutil.iter_modules(upgraders.__path__) if m.name.startswith("v"))
    majors = {_version_of(p)[0] for p in FIXTURES}
    for step in steps:
        src = int(step.split("_to_")[0][1:])
        assert src in majors, f"upgrader {step} is exercised by no fixture: add fixtures/v{src}.<minor>/"
        importlib.import_module(f"upgraders.{step}")


def test_every_released_version_has_fixtures():
    """Each version in the schema.thrift history, up to the released snapshot, was frozen."""
    from serde.dev.schema_check import read_snapshot

    released = read_snapshot(ROOT.parent / "src/serde/schema_snapshot.json")[0].version
    history = re.findall(r"^//\s+(\d+)\.(\d+)\s+\d{4}-\d{2}-\d{2}", (ROOT.parent / "schema.thrift").read_text(),
                         re.MULTILINE)
    versions = {(int(a), int(b)) for a, b in history}
    assert (1, 0) in versions and released in versions and released <= SCHEMA_VERSION
    frozen = {_version_of(p) for p in FIXTURES}
    missing = sorted(v for v in versions if v <= released and v not in frozen)
    assert not missing, f"released versions without frozen fixtures: {missing}"


def test_harness_notices_a_wrong_output():
    fixture = ROOT / "v1.0" / "mlp"
    ep = serde.load(fixture / "model.pt2s")
    run = load_tree(fixture / "io.json")[0]
    bad = dict(run, outputs=run["outputs"] + 1e-3)
    check_run(ep, run, "control")
    with pytest.raises(AssertionError, match="outputs"):
        check_run(ep, bad, "mlp")


def test_harness_notices_a_wrong_buffer_update():
    fixture = ROOT / "v1.0" / "signature_kinds"
    ep = serde.load(fixture / "model.pt2s")
    run = load_tree(fixture / "io.json")[0]
    buffers = {k: v.clone() for k, v in run["buffers_after"].items()}
    buffers["running"] += 1
    with pytest.raises(AssertionError, match="buffers"):
        check_run(ep, dict(run, buffers_after=buffers), "signature_kinds")
