"""Nothing is pickled: not in artifacts, and src/ never calls pickle, torch.load or torch.save."""

from __future__ import annotations

import ast
import io
import json
import pathlib

import pytest

import serde
from serde.archive.artifact import read_artifact
from serde.testing import zoo

SRC = pathlib.Path(__file__).resolve().parents[1] / "src"
FORBIDDEN_MODULES = {"pickle", "cPickle", "_pickle", "dill", "cloudpickle", "marshal", "shelve", "joblib"}
FORBIDDEN_CALLS = {("torch", "load"), ("torch", "save"), (None, "eval"), (None, "exec"),
                   ("sympy", "sympify"), (None, "sympify"), (None, "__import__"), ("torch", "jit")}


def _calls(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name):
                yield (None, f.id), node.lineno
            elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
                yield (f.value.id, f.attr), node.lineno


def test_src_never_pickles_or_evals():
    problems = []
    files = sorted(SRC.rglob("*.py"))
    assert len(files) > 10
    for path in files:
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                problems += [f"{path}:{node.lineno} import {a.name}" for a in node.names
                             if a.name.split(".")[0] in FORBIDDEN_MODULES]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in FORBIDDEN_MODULES:
                problems.append(f"{path}:{node.lineno} from {node.module} import ...")
        for call, line in _calls(tree):
            if call in FORBIDDEN_CALLS:
                problems.append(f"{path}:{line} calls {'.'.join(x for x in call if x)}")
    assert problems == []


def test_the_checker_itself_finds_a_pickle_call(tmp_path):
    tree = ast.parse("import pickle\nimport torch\nx = torch.load('f')\ny = eval('1')\n")
    found = {c for c, _ in _calls(tree)}
    assert ("torch", "load") in found and (None, "eval") in found


@pytest.mark.parametrize("name", ["all_dtypes", "pytrees", "signature_kinds", "tied_weights"])
def test_artifact_holds_no_pickle_stream(name):
    buf = io.BytesIO()
    serde.save(zoo.export_case(zoo.get(name)), buf, debug_info=True)
    a = read_artifact(buf.getvalue())
    shas = {s.sha256 for s in a.weights.storages}
    for member in a.contents.names:
        data = bytes(a.contents.member(member))
        if member.endswith(".json"):
            json.loads(data)  # every structured member is plain JSON
            assert data[:1] == b"{"
        else:
            # every other member is the raw bytes of a storage listed in weights.json
            assert member.startswith("data/") and member[5:] in shas
            assert not member.endswith(".pkl")
        assert not (len(data) > 1 and data[0] == 0x80 and 2 <= data[1] <= 5 and data[-1:] == b"."), member
    assert all(not n.endswith((".pkl", ".pt", ".pth")) for n in a.contents.names)
    # example inputs come back without pickle too
    assert serde.load(buf.getvalue()).example_inputs is not None
