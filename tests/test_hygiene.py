"""The test suite itself: no tracker references, no ``.example()``, no skipping on an error.

A test that skips when something raises hides the regression it should report: expected refusals
are listed explicitly (case -> error class) and anything else fails. ``.example()`` draws outside
the hypothesis profiles, so a failure would not reproduce. Tests say what they cover, not which
ticket asked for them.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

TESTS = Path(__file__).resolve().parent
SOURCES = sorted(TESTS.rglob("*.py"))
_TRACKER = re.compile(r"\b(issues?|tickets?)\b|#\d+\b", re.IGNORECASE)


def _tracker_hits(path: Path) -> list[str]:
    return [f"line {i}: {line.strip()}" for i, line in enumerate(path.read_text().splitlines(), 1)
            if _TRACKER.search(line)]


def _is_call(node: ast.AST, owner: str, name: str) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == name
            and isinstance(node.func.value, ast.Name) and node.func.value.id == owner)


def _bad_calls(path: Path) -> list[str]:
    bad = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "example" \
                and not node.args and not node.keywords:
            bad.append(f"line {node.lineno}: .example() (use @given under the profiles)")
        if _is_call(node, "pytest", "importorskip"):
            bad.append(f"line {node.lineno}: pytest.importorskip (a missing module of ours must fail)")
        if isinstance(node, ast.ExceptHandler):
            bad += [f"line {inner.lineno}: pytest.{inner.func.attr} in an except clause (list the expected "
                    "refusals instead)" for inner in ast.walk(node)
                    if _is_call(inner, "pytest", "skip") or _is_call(inner, "pytest", "xfail")]
    return sorted(bad, key=lambda b: int(b.split()[1].rstrip(':')))


def _report(check) -> str:
    return "\n".join(f"{p.relative_to(TESTS.parent)} {hit}" for p in SOURCES for hit in check(p))


def test_there_are_sources_to_check():
    assert len(SOURCES) > 50 and Path(__file__).resolve() in SOURCES


def test_no_tracker_reference():
    # This file names the words it looks for; every other one must not.
    hits = "\n".join(f"{p.relative_to(TESTS.parent)} {h}" for p in SOURCES if p != Path(__file__).resolve()
                     for h in _tracker_hits(p))
    assert not hits, "say what the test covers instead:\n" + hits


def test_no_example_and_no_skip_on_error():
    report = _report(_bad_calls)
    assert not report, report


def test_the_checks_catch_what_they_look_for(tmp_path: Path):
    sample = tmp_path / "sample.py"
    sample.write_text("import pytest\ntry:\n    x = s.example()\nexcept Exception:\n    pytest.skip('no')\n"
                      "pytest.importorskip('serde')\n# see ticket 12\n")
    assert _bad_calls(sample) == [
        "line 3: .example() (use @given under the profiles)",
        "line 5: pytest.skip in an except clause (list the expected refusals instead)",
        "line 6: pytest.importorskip (a missing module of ours must fail)",
    ]
    assert _tracker_hits(sample) == ["line 7: # see ticket 12"]


def test_the_unit_tier_refuses_torch_and_leaves_unmarked_files_alone(tmp_path: Path):
    # `make test-unit` as CI runs it, on a unit test that reaches torch and a file that marks nothing
    # `unit` (importing it would import torch): the first must fail naming the import, the second must
    # not even be collected.
    (tmp_path / "test_marked.py").write_text(
        "import pytest\n\npytestmark = pytest.mark.unit\n\n\n"
        "def test_reaches_torch():\n    import torch  # noqa: F401\n\n\ndef test_plain():\n    pass\n")
    (tmp_path / "test_unmarked.py").write_text("import torch\n\n\ndef test_x():\n    pass\n")
    root = TESTS.parent
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-c", str(root / "pyproject.toml"),
         "--rootdir", str(root), "-p", "tests.conftest", "-m", "unit and not torch", str(tmp_path)],
        cwd=root, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PT2SERDE_UNIT_TIER": "1", "PYTHONPATH": os.pathsep.join([str(root / "src"), str(root)])})
    assert "1 failed, 1 passed" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "test_marked.py::test_reaches_torch" in proc.stdout
    assert "the unit tier runs without torch, but `torch` was imported" in proc.stdout
    assert "test_unmarked" not in proc.stdout
