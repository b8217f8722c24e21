"""Runs every attack file in this folder against the real loader and against `pt2serde check`.

Each attack module defines ``ERROR`` (the exact error class expected), ``MATCH`` (a regex the message
must contain), ``build(base) -> bytes`` and optionally ``LOAD_ONLY = True`` (``pt2serde check`` does not
see it) and ``FULL_LOAD = True`` (the attack targets the program: it goes through ``serde.load``).
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

import serde
from serde.archive import read_archive
from serde.bridge.weights import deserialize_weights
from serde.cli.check import verify
from serde.core import schema, wire
from serde.errors import SerializeError
from tests.serde.attacks._attack_kit import Base, make_base

HERE = Path(__file__).parent
ATTACKS = sorted(p.stem for p in HERE.glob("*.py") if not p.name.startswith(("_", "test_")))


def _module(name: str):
    spec = importlib.util.spec_from_file_location(f"attack_{name}", HERE / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _load(path: Path, full: bool = False) -> None:
    """What serde.load does with the archive and weights (all of serde.load for program attacks)."""
    if full:
        serde.load(path)
        return
    contents = read_archive(path)
    weights = wire.decode(contents.member("weights.json"), schema.Weights, where="weights.json")
    deserialize_weights(weights, contents.member)


@pytest.fixture(scope="module")
def base() -> Base:
    return make_base()


def test_base_artifact_is_valid(base: Base, tmp_path: Path) -> None:
    # The harness must start from a file that loads; otherwise every attack "passes" for free.
    path = tmp_path / "base.pt2s"
    path.write_bytes(base.archive)
    _load(path)
    assert verify(path).storages == len(base.weights["storages"])


@pytest.mark.parametrize("name", ATTACKS)
def test_attack_is_rejected(name: str, base: Base, tmp_path: Path) -> None:
    attack = _module(name)
    data = attack.build(base)
    assert data != base.archive
    path = tmp_path / f"{name}.pt2s"
    path.write_bytes(data)
    with pytest.raises(SerializeError) as info:
        _load(path, getattr(attack, "FULL_LOAD", False))
    assert type(info.value) is attack.ERROR, f"{name}: got {type(info.value).__name__}: {info.value}"
    assert re.search(attack.MATCH, str(info.value)), str(info.value)
    assert re.search(r"weights\.|program\.json|graph\.|signature\.|module_call_graph\[|range_constraints\[",
                     str(info.value)) or repr(str(path)) in str(info.value), "message must say where"
    if not getattr(attack, "LOAD_ONLY", False):
        with pytest.raises(attack.ERROR, match=attack.MATCH):
            verify(path)


def test_every_attack_is_documented() -> None:
    readme = (HERE / "README.md").read_text()
    listed = set(re.findall(r"^\| `(\w+)\.py` \|", readme, flags=re.M))
    assert listed == set(ATTACKS)


def test_every_attack_states_its_error_and_purpose() -> None:
    for name in ATTACKS:
        mod = _module(name)
        assert issubclass(mod.ERROR, SerializeError) and mod.ERROR is not SerializeError, name
        assert mod.__doc__ and mod.__doc__.strip(), name


def test_unregistered_subclass_name_imports_nothing(base: Base, tmp_path: Path) -> None:
    """The class name in the file is never imported or resolved: `this` (which prints on import) stays out."""
    import subprocess
    import sys

    path = tmp_path / "zen.pt2s"
    path.write_bytes(_module("unregistered_subclass_name").build(base))
    code = (
        "import sys, serde\n"
        "from serde.core import schema, wire\n"
        "from serde.archive import read_archive\n"
        "from serde.bridge.weights import deserialize_weights\n"
        "c = read_archive(sys.argv[1])\n"
        "w = wire.decode(c.member('weights.json'), schema.Weights, where='weights.json')\n"
        "try:\n"
        "    deserialize_weights(w, c.member)\n"
        "except serde.UnknownTensorSubclassError as e:\n"
        "    print('refused:', type(e).__name__)\n"
        "print('imported' if 'this' in sys.modules else 'not imported')\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["refused: UnknownTensorSubclassError", "not imported"], out.stdout
