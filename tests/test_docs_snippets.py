"""The manual's code blocks run, its links resolve, and the README stays a short front page.

Every fenced block of README.md, CONTRIBUTING.md, CHANGELOG.md and docs/*.md names its kind:

- ```` ```python ```` blocks run, in the order of their page, in one namespace per page, in a fresh
  working directory per page; a block that defines ``test_*`` functions has them called (so the
  examples written for the reader's own test suite are exercised too);
- ```` ```shell ```` blocks run with ``bash -euo pipefail`` in the same directory, at their place in
  that order, with the ``pt2serde`` command of this environment on the PATH;
- ```` ```text ```` (output, listings, file contents, pictures) and ```` ```console ```` (commands
  shown but not run here: they take minutes, install software, or need a path the reader
  supplies) are shown only.

A fence of any other kind, or of none, fails the test, so no block is left out silently. All pages
run in one subprocess (one torch import), outside our conftest, with only this checkout's sources
on the path, as a user's script would. The fast suite runs the python blocks (about 10 s of CPU for
the whole manual); the slow tier (``make test-all``) runs every page again with its shell blocks in
place, since each ``pt2serde`` command they start imports torch anew (about 55 s of CPU).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
RUN = {"python", "shell"}
SHOWN = {"text", "console"}
_FENCE = re.compile(r"^(\s*)```(.*)$")
# Pages another tool writes: a link to one may precede its first run (docs/benchmarks.md is written by
# `make bench`, from one run of the benchmarks).
GENERATED = {"docs/benchmarks.md"}


def pages() -> list[Path]:
    return [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md", *sorted(DOCS.glob("*.md"))]


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def blocks(text: str) -> list[tuple[int, str, str]]:
    """(line of the first code line, fence info, code) of every fenced block, in order."""
    out, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, info, body = i + 1, m.group(2).strip(), []
        i += 1
        while i < len(lines) and not re.match(r"^\s*```\s*$", lines[i]):
            body.append(lines[i])
            i += 1
        if i == len(lines):
            raise AssertionError(f"line {start}: the block opened here is never closed")
        out.append((start + 1, info, "\n".join(body) + "\n"))
        i += 1
    return out


def test_every_fence_names_a_known_kind() -> None:
    bad = [f"{_rel(p)}:{line - 1}: fence {info!r}" for p in pages() for line, info, _ in blocks(p.read_text())
           if info not in RUN | SHOWN]
    assert bad == [], f"fences must be one of {sorted(RUN | SHOWN)} (see this module's docstring): {bad}"


def test_the_fence_check_finds_an_unnamed_block() -> None:
    found = blocks("intro\n```\nx = 1\n```\n\n```python\ny = 2\n```\n")
    assert [(line, info) for line, info, _ in found] == [(3, ""), (7, "python")]
    with pytest.raises(AssertionError, match="never closed"):
        blocks("```python\nx = 1\n")


def test_readme_is_a_short_front_page() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    # the guide's rule: the README starts with two commands that work on a fresh machine
    first = blocks(text)[0][2].splitlines()
    assert [line.split("#")[0].strip() for line in first[:2]] == ["make demo", "make test"]


_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def slugs(text: str) -> set[str]:
    """GitHub's heading anchors: lowercase, punctuation dropped, spaces to hyphens."""
    out = set()
    for heading in re.findall(r"^#+ (.*)$", re.sub(r"^```.*?^```", "", text, flags=re.S | re.M), flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        out.add(slug)
    return out


def test_links_resolve() -> None:
    bad = []
    for page in pages():
        for target in _LINK.findall(page.read_text()):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists() and _rel(dest) not in GENERATED:
                bad.append(f"{_rel(page)}: {target}: no such file")
            elif anchor and dest.exists() and dest.suffix == ".md" and anchor not in slugs(dest.read_text()):
                bad.append(f"{_rel(page)}: {target}: no heading with that anchor")
    assert bad == []


def test_every_page_of_docs_is_in_the_index() -> None:
    index = (DOCS / "index.md").read_text()
    assert [p.name for p in sorted(DOCS.glob("*.md")) if p.name != "index.md" and f"({p.name}" not in index] == []


_RUNNER = r'''
import json, os, subprocess, sys, traceback

def run_page(page, todo):
    ns = {"__name__": "__main__"}
    for line, info, code in todo:
        where = f"{page}:{line}"
        if info == "shell":
            r = subprocess.run(["bash", "-euo", "pipefail", "-c", code], capture_output=True, text=True)
            if r.returncode:
                return f"{where}: the shell block exited {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
            continue
        before = {k: v for k, v in ns.items() if k.startswith("test_")}
        try:
            # padded so that tracebacks give the line numbers of the page itself
            exec(compile("\n" * (line - 1) + code, page, "exec"), ns)
            for name, fn in list(ns.items()):
                if name.startswith("test_") and callable(fn) and before.get(name) is not fn:
                    fn()
        except BaseException:
            return f"{where}:\n{traceback.format_exc()[-3000:]}"
    return None

results = {}
for page, todo in json.load(open(sys.argv[1])).items():
    os.makedirs(os.path.join(sys.argv[2], page.replace("/", "_")))
    os.chdir(os.path.join(sys.argv[2], page.replace("/", "_")))
    results[page] = run_page(page, todo)
print("RESULTS " + json.dumps(results))
'''


def runnable(kinds: frozenset[str] = frozenset(RUN)) -> dict[str, list]:
    out = {}
    for page in pages():
        todo = [b for b in blocks(page.read_text()) if b[1] in kinds]
        if todo:
            out[_rel(page)] = todo
    return out


def _run_pages(work: Path, todo: dict[str, list]) -> dict[str, str | None]:
    spec = work / "blocks.json"
    spec.write_text(json.dumps(todo))
    env = {k: v for k, v in os.environ.items() if k not in ("HYPOTHESIS_PROFILE", "VIRTUAL_ENV")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT)])
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    r = subprocess.run([sys.executable, "-c", _RUNNER, str(spec), str(work / "pages")], cwd=work, env=env,
                       capture_output=True, text=True, timeout=1200)
    lines = [line for line in r.stdout.splitlines() if line.startswith("RESULTS ")]
    assert r.returncode == 0 and lines, f"the runner failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return json.loads(lines[-1][len("RESULTS "):])


@pytest.fixture(scope="module")
def python_results(tmp_path_factory) -> dict[str, str | None]:
    return _run_pages(tmp_path_factory.mktemp("docs"), runnable(frozenset({"python"})))


@pytest.fixture(scope="module")
def all_results(tmp_path_factory) -> dict[str, str | None]:
    return _run_pages(tmp_path_factory.mktemp("docs"), runnable())


def _check(failure: str | None) -> None:
    if failure is not None and "the C++ runtime is not built" in failure:
        from native.run import cpp_engine

        # the one expected refusal: docs/native.md's C++ blocks need `make native`, which needs a
        # compiler; the C++ tests skip with the same reason
        reason = cpp_engine.unavailable_reason()
        if reason is not None:
            pytest.skip(reason)
    assert failure is None, failure


@pytest.mark.parametrize("page", sorted(runnable(frozenset({"python"}))))
def test_python_blocks_run(page: str, python_results: dict[str, str | None]) -> None:
    _check(python_results[page])


@pytest.mark.slow
@pytest.mark.parametrize("page", sorted(runnable()))
def test_all_blocks_run_with_the_shell_blocks_in_place(page: str, all_results: dict[str, str | None]) -> None:
    _check(all_results[page])
