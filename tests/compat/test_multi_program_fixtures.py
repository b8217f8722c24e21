"""Compat for artifacts holding several programs (archive format 3): every frozen one in
fixtures/multi_program/v<N>/ loads as a dict, each program runs and matches its stored runs, and its
canonical form equals a fresh save's."""

from __future__ import annotations

from pathlib import Path

import pytest

import serde
from serde.archive.artifact import read_artifacts
from serde.bridge.bundle import load_tree
from serde.core import wire
from tests.compat.test_fixtures import _strip_writer, check_run, freeze

ROOT = Path(__file__).resolve().parents[2] / "fixtures" / "multi_program"
FIXTURES = sorted(p.parent for p in ROOT.glob("v*/model.pt2s"))


def test_there_is_a_multi_program_fixture():
    assert FIXTURES, "no fixtures/multi_program/v*/model.pt2s: run `python fixtures/freeze.py --multi`"
    for f in FIXTURES:
        assert (f / "NOTE.md").is_file()


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: p.name)
def test_multi_program_fixture_loads_runs_and_matches(fixture: Path):
    programs = serde.load(fixture / "model.pt2s")
    runs = load_tree(fixture / "io.json")
    assert isinstance(programs, dict) and sorted(programs) == sorted(runs) == sorted(freeze.MULTI_PROGRAMS)
    for name, ep in programs.items():
        for i, run in enumerate(runs[name]):
            check_run(ep, run, f"{fixture.name}/{name} run {i}")


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: p.name)
def test_multi_program_fixture_equals_a_fresh_save(fixture: Path, tmp_path: Path):
    fresh = tmp_path / "fresh.pt2s"
    serde.save(freeze.export_multi(), fresh)
    old, new = read_artifacts(fixture / "model.pt2s"), read_artifacts(fresh)
    assert sorted(old) == sorted(new)
    version = tuple(int(x) for x in fixture.name[1:].split("."))
    for name in old:
        assert _strip_writer(wire.encode(old[name].program), version) == \
            _strip_writer(wire.encode(new[name].program)), name
