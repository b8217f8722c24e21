"""Real third-party models (:mod:`tests.zoo_models`: transformers and timm) behave the same after
our round trip as the exported program and as torch's own ``torch.export.save``/``load``.

Per model: the differential harness (outputs bit for bit, buffer updates, initial weights, other
input sizes and the dimension variants of a dynamic export, ``torch.export.unflatten``), the decode
steps of the cache models on one module each, tied weights, and byte determinism (two saves are
equal, and saving what we loaded gives the same bytes). ``make test`` runs ``FAST``; the rest are
``slow`` (``make test-all``).
"""

from __future__ import annotations

import copy
import importlib.util
import io
import os

import pytest
import torch

import serde

# Not importorskip: importing timm before tests.zoo_models has defined torchvision's C ops fails.
if importlib.util.find_spec("transformers") is None or importlib.util.find_spec("timm") is None:
    pytest.skip("the real-model corpus needs the models extra (part of dev): pip install -e '.[dev]'",
                allow_module_level=True)

from tests import zoo_models  # noqa: E402
from tests.serde._differential import differential, isolate, same, serde_save, torch_load, torch_save  # noqa: E402

# torch's unlifting warns about a rotary-embedding constant that requires grad, in the exported
# program as much as in both round trips.
pytestmark = pytest.mark.filterwarnings("ignore:A model attribute .* requires gradient")

# Models whose round trip through pt2serde fails today, with the bug; strict, so a fix flips them.
KNOWN_BUGS: dict[str, tuple[type[Exception], str]] = {}

# Where torch fails on a model and ours does not, by stage (see the differential harness), with why.
# Exact: a stage torch starts passing fails the test, so the list cannot go stale.
_DYNAMIC_CACHE_TORCH_FAILS = {
    "load": "torch.export.load unpickles the example inputs, a transformers DynamicCache, which its "
            "weights_only unpickler refuses; the fallback's log call then raises a TypeError",
    "unflatten": "torch.export.unflatten fails on the exported program itself (a DynamicCache input)",
}
TORCH_FAILS: dict[str, dict[str, str]] = {
    name: _DYNAMIC_CACHE_TORCH_FAILS
    for name in ("hf/llama_dynamic_cache", "hf/qwen2_dynamic_cache", "hf/gpt2_dynamic_cache")
}

# The fast slice: a decoder with tied weights, one with a static cache, a vision transformer (timm runs
# under -m slow).
FAST = ("hf/gpt2", "hf/llama_static_cache", "hf/vit")

# Fewer dimension variants in the fast slice: each run of a real model costs a module and a forward.
_VARIANTS = 24 if os.environ.get("HYPOTHESIS_PROFILE") == "thorough" else 6
_FAST_VARIANTS = 3

_NAMES = [c.name for c in zoo_models.CASES]


def _params(names, *, only_tag: str | None = None):
    out = []
    for name in names:
        case = zoo_models.get(name)
        if only_tag is not None and only_tag not in case.tags and not (only_tag == "steps" and case.steps):
            continue
        marks = [] if name in FAST else [pytest.mark.slow]
        if name in KNOWN_BUGS:
            exc, why = KNOWN_BUGS[name]
            marks.append(pytest.mark.xfail(strict=True, raises=exc, reason=why))
        out.append(pytest.param(name, marks=marks, id=name))
    return out


_EXPORTS: dict[str, torch.export.ExportedProgram] = {}


@pytest.fixture(scope="module")
def exported():
    def get(name: str) -> torch.export.ExportedProgram:
        if name not in _EXPORTS:
            _EXPORTS[name] = zoo_models.export_model(zoo_models.get(name))
        return _EXPORTS[name]
    return get


def _inputs(ep, case) -> list:
    torch.manual_seed(1)
    return [ep.example_inputs, *case.other_inputs()]


def test_fast_and_known_bugs_name_real_cases():
    assert set(FAST) <= set(_NAMES) and set(KNOWN_BUGS) <= set(_NAMES) and set(TORCH_FAILS) <= set(_NAMES)
    assert len(_NAMES) == len(set(_NAMES))


@pytest.mark.parametrize("name", _params(_NAMES))
def test_behaves_like_exported_and_torch(exported, name):
    case = zoo_models.get(name)
    ep = exported(name)
    data = serde_save(ep)
    serde.load(data)  # a refusal fails here, with its own exception (KNOWN_BUGS)
    res = differential(ep, _inputs(ep, case), name=name,
                       max_variants=_FAST_VARIANTS if name in FAST else _VARIANTS)
    assert res.runs >= 1 + len(case.other_inputs())
    assert res.diffs == {}, "\n".join(f"{k}: {v}" for k, v in res.diffs.items())
    # Torch's own pair agrees with the exported program too: the comparison is against torch.
    assert set(res.torch_fails) == set(TORCH_FAILS.get(name, {})), res.torch_fails
    assert res.torch_diffs == {}, res.torch_diffs


def _decode(ep, steps) -> list:
    """Each step's outputs and buffers, all steps on one module (the cache carries over)."""
    module = isolate(ep.module())
    out = []
    torch.manual_seed(0)
    with torch.no_grad():
        for args, kwargs in copy.deepcopy(steps):
            y = module(*args, **kwargs)
            out.append((y, {k: v.clone() for k, v in module.named_buffers()}))
    return out


@pytest.mark.parametrize("name", _params(_NAMES, only_tag="steps"))
def test_static_cache_decode_steps(exported, name):
    ep = exported(name)
    steps = zoo_models.get(name).steps()
    ref = _decode(ep, steps)
    # The cache is written at each step's position, so a step that ignored it would not match.
    assert same(ref[-1][1], ref[0][1]) is not None
    for label, other in (("torch", torch_load(torch_save(ep))), ("ours", serde.load(serde_save(ep)))):
        got = _decode(other, steps)
        for i, (a, b) in enumerate(zip(ref, got, strict=True)):
            assert same(a, b) is None, f"{label} step {i}: {same(a, b)}"


@pytest.mark.parametrize("name", _params(_NAMES, only_tag="list_cache"))
def test_list_cache_decode_steps(exported, name):
    ep = exported(name)
    first = ep.example_inputs
    with torch.no_grad():
        ref = zoo_models.list_cache_decode(isolate(ep.module()), copy.deepcopy(first), 4)
        # The cache grows by the new tokens at each step: the steps really run at other sizes.
        assert [k[0].shape[2] for _, k, _ in ref] == [7, 8, 9, 10]
        for label, other in (("torch", torch_load(torch_save(ep))), ("ours", serde.load(serde_save(ep)))):
            got = zoo_models.list_cache_decode(isolate(other.module()), copy.deepcopy(first), 4)
            assert same(ref, got) is None, f"{label}: {same(ref, got)}"


def _ties(named: dict[str, torch.Tensor]) -> list[list[str]]:
    """Groups of names whose tensors are the same view of one storage."""
    groups: dict[tuple, list[str]] = {}
    for k, v in named.items():
        if isinstance(v, torch.Tensor) and v.numel():
            key = (v.untyped_storage().data_ptr(), v.storage_offset(), tuple(v.shape), tuple(v.stride()))
            groups.setdefault(key, []).append(k)
    return sorted(sorted(g) for g in groups.values() if len(g) > 1)


def _module_ties(ep) -> list[list[str]]:
    m = ep.module()
    return _ties({**dict(m.named_parameters(remove_duplicate=False)), **dict(m.named_buffers(remove_duplicate=False))})


@pytest.mark.parametrize("name", _params(_NAMES))
def test_weights_and_ties(exported, name):
    ep = exported(name)
    ours = serde.load(serde_save(ep))
    if "load" in TORCH_FAILS.get(name, {}):
        with pytest.raises(TypeError):
            torch_load(torch_save(ep))
        theirs = None
    else:
        theirs = torch_load(torch_save(ep))
    # ep.state_dict's order is not kept by torch's pair either (ours is sorted); the module's is.
    for what in ("state_dict", "constants"):
        want, got = getattr(ep, what), getattr(ours, what)
        assert sorted(got) == sorted(want)
        assert same({k: want[k] for k in sorted(want)}, {k: got[k] for k in sorted(want)}) is None, what
    assert list(ours.module().state_dict()) == list(ep.module().state_dict())
    want = _module_ties(ep)
    if "tied" in zoo_models.get(name).tags:
        assert want, f"{name} is tagged tied but shares no weights"
    if theirs is not None:
        assert _module_ties(theirs) == want
    assert _module_ties(ours) == want


@pytest.mark.parametrize("name", _params(_NAMES))
def test_bytes_are_deterministic(exported, name, tmp_path):
    ep = exported(name)
    data = serde_save(ep)
    again = serde.load(data)
    assert serde_save(ep) == data
    assert serde_save(again) == data
    # A path save (durable write) holds the same bytes, and a mapped load saves them again.
    path = tmp_path / "model.pt2"
    serde.save(ep, path)
    assert path.read_bytes() == data
    buf = io.BytesIO()
    serde.save(serde.load(path, mmap=True), buf)
    assert buf.getvalue() == data
