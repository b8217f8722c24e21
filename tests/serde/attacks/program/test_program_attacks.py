"""Every program attack in this folder, against the real loader: load, build ep.module(), unflatten, call.

Each attack module defines ``ERROR`` (the exact error class), ``MATCH`` (a regex the message must
contain), ``build(base, canary) -> bytes``, optionally ``BASE = "cond"`` (start from the program
with a cond) or ``BASE = "inputs"`` (from one with a dict input and a string constant input, called
with its stored example inputs) and ``LIMITS`` (load with these ``serde.Limits``), and
``RUNS_CODE``: whether, with the name check switched off, the file really creates ``canary``
(proving the attack, and this harness, are real).
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import serde
from serde import api
from serde.bridge import program
from serde.errors import UnsafeArtifactError
from tests.serde.attacks.program._program_kit import (
    base_artifact,
    bounded,
    example,
    inputs_artifact,
    model_inputs,
)

HERE = Path(__file__).parent
ATTACKS = sorted(p.stem for p in HERE.glob("*.py") if not p.name.startswith(("_", "test_")))


def _module(name: str):
    spec = importlib.util.spec_from_file_location(f"program_attack_{name}", HERE / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def bases() -> dict[str, bytes]:
    return {"plain": base_artifact(with_cond=False), "cond": base_artifact(with_cond=True),
            "inputs": inputs_artifact()}


def _base(attack, bases: dict[str, bytes]) -> bytes:
    return bases[getattr(attack, "BASE", "plain")]


def _load_build_and_call(path: Path, kind: str, limits: serde.Limits | None = None, *,
                         each: Callable[[Callable[[], Any]], None] = lambda step: step()) -> None:
    """Everything a user does with a loaded file; any of it may run code fx generated from names.
    ``each`` runs each call after the load (the unchecked test runs them all, whatever fails)."""
    ep = serde.load(path) if limits is None else serde.load(path, limits=limits)
    if kind == "inputs":
        m = ep.module()
        # The stored example inputs, and the inputs the model's user has (a file can change the first).
        for args, kwargs in [i for i in (ep.example_inputs, model_inputs()) if i is not None]:
            each(lambda a=args, k=kwargs: m.forward(*a, **k))  # as users may: skips the structure check
            each(lambda a=args, k=kwargs: m(*a, **k))
            each(lambda a=args, k=kwargs: torch.export.unflatten(ep)(*a, **k))
        return
    (x,) = example()
    ep.module()(x)
    if kind == "plain":
        torch.export.unflatten(ep)(x)


@pytest.mark.parametrize("kind", ["plain", "cond", "inputs"])
def test_base_artifact_loads_builds_and_runs(kind: str, bases: dict[str, bytes], tmp_path: Path) -> None:
    path = tmp_path / "base.pt2s"
    path.write_bytes(bases[kind])
    _load_build_and_call(path, kind)


@pytest.mark.parametrize("name", ATTACKS)
def test_program_attack_is_refused_and_runs_nothing(name: str, bases: dict[str, bytes], tmp_path: Path) -> None:
    attack = _module(name)
    canary = tmp_path / "pwned"
    path = tmp_path / f"{name}.pt2s"
    path.write_bytes(attack.build(_base(attack, bases), str(canary)))
    with bounded(20), pytest.raises(UnsafeArtifactError) as info:  # the old hangs took 22 s to minutes
        _load_build_and_call(path, getattr(attack, "BASE", "plain"), getattr(attack, "LIMITS", None))
    assert not canary.exists()
    assert type(info.value) is attack.ERROR, f"{name}: got {type(info.value).__name__}: {info.value}"
    assert re.search(attack.MATCH, str(info.value)), str(info.value)


@pytest.mark.parametrize("name", [n for n in ATTACKS if _module(n).RUNS_CODE])
def test_without_the_name_check_the_attack_runs_code(name: str, bases: dict[str, bytes], tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # Proves the attack is real on this torch: with serde.core.checks switched off, the canary appears.
    monkeypatch.setattr(program, "check_program", lambda p, limits=None: None)
    monkeypatch.setattr(api, "check_weight_names", lambda w, limits=None: None)
    canary = tmp_path / "pwned"
    path = tmp_path / f"{name}.pt2s"
    attack = _module(name)
    # Checks beyond the names that also stop this attack (defence in depth), switched off too.
    for module, attr in getattr(attack, "ALSO_STOPPED_BY", ()):
        monkeypatch.setattr(importlib.import_module(module), attr, lambda *a, **k: None)
    path.write_bytes(attack.build(_base(attack, bases), str(canary)))
    def tolerant(step: Callable[[], Any]) -> None:
        try:
            step()
        except Exception:  # the code ran first, or runs in another call; a failure matters not here
            pass

    tolerant(lambda: _load_build_and_call(path, getattr(attack, "BASE", "plain"), each=tolerant))
    assert canary.exists(), f"{name}: the unchecked load did not run the payload; the attack is stale"


def test_every_program_attack_is_documented() -> None:
    readme = (HERE / "README.md").read_text()
    assert set(re.findall(r"^\| `(\w+)\.py` \|", readme, flags=re.M)) == set(ATTACKS)
    for name in ATTACKS:
        assert _module(name).__doc__.strip(), name
