"""The public API: every name in ``serde.__all__`` is importable from ``serde`` itself and is the very
object its defining module holds (re-exports, not copies); the registries work through those names."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import torch

import serde

REPO = Path(__file__).resolve().parents[3]


def test_every_public_name_resolves_to_its_defining_object():
    assert len(set(serde.__all__)) == len(serde.__all__)
    assert set(serde.__all__) <= set(dir(serde))
    for name in serde.__all__:
        value = getattr(serde, name)
        home = getattr(value, "__module__", None)
        if home is None:  # a constant (SCHEMA_VERSION)
            continue
        module = importlib.import_module(home)
        assert getattr(module, name) is value, name
        assert name in module.__all__, f"{name} is not public in {home}"


def test_star_import_gives_exactly_the_public_names():
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO}"}
    code = "from serde import *; import serde; print(all(n in globals() for n in serde.__all__))"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "True"


def test_unknown_name_is_an_attribute_error():
    try:
        serde.custom_objects  # noqa: B018 - the old module path is not an attribute of the package
    except AttributeError as e:
        assert "custom_objects" in str(e)
    else:
        raise AssertionError("serde.custom_objects resolved")


def test_custom_object_registry_through_the_public_names():
    from serde.bridge.custom_objects import registered_classes

    name = "__torch__.torch.classes.public_api_test.Tok"
    serde.register_custom_object(name, encode=lambda o: b"", decode=lambda b: None)
    try:
        assert name in registered_classes()
    finally:
        serde.unregister_custom_object(name)
    assert name not in registered_classes()
    assert serde.class_fqn_of(object()) is None  # not a custom object


def test_tree_files_round_trip_through_the_public_names(tmp_path):
    g = torch.Generator().manual_seed(0)
    tree = ((torch.randn(3, 4, generator=g), 2), {"scale": 0.5, "mask": torch.ones(2, dtype=torch.bool)})
    serde.save_tree(tree, tmp_path / "in.json")
    back = serde.load_tree(tmp_path / "in.json")
    (x, k), kw = back
    assert torch.equal(x, tree[0][0]) and k == 2 and kw["scale"] == 0.5 and torch.equal(kw["mask"], tree[1]["mask"])


_FIRST_SAVE_AND_LOAD = """
import io, sys
import torch
import serde

ep = torch.export.export(torch.nn.Linear(3, 2), (torch.randn(4, 3),))
buf = io.BytesIO()
serde.save(ep, buf)
serde.load(buf)
print(" ".join(m for m in sys.argv[1:] if m in sys.modules))
"""


def test_a_plain_save_and_load_import_none_of_the_optional_paths():
    """The operator upgraders, the safetensors weights and the propagation check serve loads and
    saves that ask for them; a first save and load in a process that does not pays for none."""
    optional = ["serde.opsets", "serde.archive.safetensors", "serde.bridge.propagation"]
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO}"}
    r = subprocess.run([sys.executable, "-c", _FIRST_SAVE_AND_LOAD, *optional], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == ""
