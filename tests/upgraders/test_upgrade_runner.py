"""The upgrader runner (serde.archive.upgrade) on fake step modules in a temporary ``upgraders`` package."""

from __future__ import annotations

import copy
import importlib
import sys
import textwrap
from pathlib import Path

import pytest

import upgraders
from serde.archive import upgrade
from serde.archive.upgrade import available_steps, check_readable, document_version, upgrade_documents
from serde.core import version
from serde.errors import MalformedArtifactError, SchemaVersionError, UpgradeError

pytestmark = pytest.mark.unit

# A step that records itself in program["trail"], renames a field with the shared helpers and
# builds new dicts throughout (pure).
STEP = """
from upgraders._helpers import rename_field

FROM = ({n}, {last_minor})
TO = ({m}, 0)
DATE = "2027-01-0{n}"
SUMMARY = "test step {n} -> {m}"


def upgrade(docs):
    program = dict(docs["program"])
    program["trail"] = [*program.get("trail", []), "{n}->{m}"]
    program = rename_field(program, "field_v{n}", "field_v{m}")
    return {{**docs, "program": program}}
"""


@pytest.fixture
def steps(tmp_path, monkeypatch):
    """Point the ``upgraders`` package at an empty temporary directory; return a step writer."""
    pkg = tmp_path / "fake_upgraders"
    pkg.mkdir()
    monkeypatch.setattr(upgraders, "__path__", [str(pkg)])
    before = {k for k in sys.modules if k.startswith("upgraders.v")}
    for k in before:
        monkeypatch.delitem(sys.modules, k)
    importlib.invalidate_caches()

    def write(n: int, text: str | None = None, last_minor: int = 0) -> None:
        body = text if text is not None else STEP.format(n=n, m=n + 1, last_minor=last_minor)
        (pkg / f"v{n}_to_v{n + 1}.py").write_text(textwrap.dedent(body))
        importlib.invalidate_caches()

    yield write
    for k in [k for k in sys.modules if k.startswith("upgraders.v")]:
        del sys.modules[k]
    importlib.invalidate_caches()


def _docs(major: int, minor: int = 0) -> dict:
    sv = {"major": major, "minor": minor}
    return {
        "program": {"schema_version": sv, "field_v1": {"nested": [1, 2.5, "x"]}, "graph": {"nodes": []}},
        "weights": {"storages": [], "state_dict": {}},
        "manifest": {"format": "pt2serde", "schema_version": dict(sv)},
    }


def test_steps_chain_in_order_and_set_the_target_version(steps):
    steps(1)
    steps(2)
    out = upgrade_documents(_docs(1), (1, 0), (3, 0))
    assert out["program"]["trail"] == ["1->2", "2->3"]
    assert "field_v3" in out["program"] and "field_v1" not in out["program"]
    assert out["program"]["schema_version"] == {"major": 3, "minor": 0}
    assert out["manifest"]["schema_version"] == {"major": 3, "minor": 0}
    assert out["weights"] == {"storages": [], "state_dict": {}}  # no schema_version: left alone


def test_chain_starts_at_the_artifacts_major(steps):
    steps(2)  # no v1_to_v2 needed for a 2.x artifact
    out = upgrade_documents(_docs(2), (2, 0), (3, 0))
    assert out["program"]["trail"] == ["2->3"]


def test_runner_does_not_mutate_its_input(steps):
    steps(1)
    steps(2)
    docs = _docs(1)
    before = copy.deepcopy(docs)
    out = upgrade_documents(docs, (1, 0), (3, 0))
    assert docs == before
    assert out is not docs and out["program"] is not docs["program"]


def _assert_pure(step, docs):
    before = copy.deepcopy(docs)
    out = step.upgrade(docs)
    assert docs == before, f"{step.__name__}.upgrade mutated its input"
    return out


def test_purity_check_catches_a_mutating_step(steps):
    steps(1, """
        FROM = (1, 0)
        TO = (2, 0)
        DATE = "2027-01-01"
        SUMMARY = "mutates its input"

        def upgrade(docs):
            docs["program"]["field_v2"] = docs["program"].pop("field_v1")
            return docs
        """)
    with pytest.raises(AssertionError, match="mutated its input"):
        _assert_pure(upgrade.load_step(1), _docs(1))
    steps(2)
    _assert_pure(upgrade.load_step(2), _docs(2))


def test_missing_step_names_the_module(steps):
    steps(1)
    with pytest.raises(UpgradeError) as ei:
        upgrade_documents(_docs(1), (1, 0), (3, 0))
    assert str(ei.value) == (
        "no upgrader step upgraders/v2_to_v3.py: cannot upgrade schema 2.x to 3.0. "
        "Write the step (FROM, TO, DATE, SUMMARY, upgrade) or use a pt2serde release that has it"
    )


def test_newer_major_names_both_versions(steps):
    with pytest.raises(SchemaVersionError) as ei:
        upgrade_documents(_docs(4), (4, 0), (3, 2))
    assert str(ei.value) == (
        "the artifact uses schema 4.0, newer than this pt2serde reads (3.2); upgrade pt2serde to read it"
    )


def test_older_than_min_supported_names_both_versions(steps, monkeypatch):
    monkeypatch.setattr(version, "MIN_SUPPORTED", (2, 0))
    steps(1)
    with pytest.raises(SchemaVersionError) as ei:
        upgrade_documents(_docs(1), (1, 5), (3, 0))
    assert str(ei.value) == (
        "the artifact uses schema 1.5, older than the oldest this pt2serde reads (2.0); "
        "upgrade it with an older pt2serde (`pt2serde upgrade IN OUT`) first"
    )


def test_newer_minor_of_same_major_is_returned_unchanged(steps):
    docs = _docs(3, 4)
    out = upgrade_documents(docs, (3, 4), (3, 1))  # no steps exist at all: none are needed
    assert out == docs and out is not docs


def test_older_minor_of_same_major_only_gets_its_version_raised(steps):
    out = upgrade_documents(_docs(3, 0), (3, 0), (3, 2))
    assert out["program"]["schema_version"] == {"major": 3, "minor": 2}
    assert "trail" not in out["program"]


def test_default_target_is_the_current_version(steps, monkeypatch):
    monkeypatch.setattr(version, "SCHEMA_VERSION", (2, 0))
    steps(1)
    out = upgrade_documents(_docs(1), (1, 0))
    assert out["program"]["schema_version"] == {"major": 2, "minor": 0}


def test_step_reads_only_up_to_its_from_minor(steps):
    steps(1, last_minor=2)
    upgrade_documents(_docs(1, 2), (1, 2), (2, 0))
    with pytest.raises(UpgradeError, match=r"upgraders/v1_to_v2\.py reads up to 1\.2, but the artifact is 1\.3"):
        upgrade_documents(_docs(1, 3), (1, 3), (2, 0))


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('FROM = (1, 0)\nTO = (2, 0)\nDATE = "d"\ndef upgrade(d):\n    return d\n',
         "upgraders/v1_to_v2.py does not define SUMMARY"),
        ('FROM = (1, 0)\nTO = (3, 0)\nDATE = "d"\nSUMMARY = "s"\ndef upgrade(d):\n    return d\n',
         "upgraders/v1_to_v2.py: TO must be (2, 0), got (3, 0)"),
        ('FROM = (0, 4)\nTO = (2, 0)\nDATE = "d"\nSUMMARY = "s"\ndef upgrade(d):\n    return d\n',
         "upgraders/v1_to_v2.py: FROM must be (1, <last minor>), got (0, 4)"),
        ('FROM = (1, 0)\nTO = (2, 0)\nDATE = "d"\nSUMMARY = "s"\nupgrade = 3\n',
         "upgraders/v1_to_v2.py: upgrade must be a function dict -> dict"),
        ('FROM = (1, 0)\nTO = (2, 0)\nDATE = "d"\nSUMMARY = "s"\ndef upgrade(d):\n    return [d]\n',
         "upgraders/v1_to_v2.py: upgrade() returned list, expected a dict of documents"),
        ('FROM = (1, 0)\nTO = (2, 0)\nDATE = "d"\nSUMMARY = "s"\ndef upgrade(d):\n    return d["nope"]\n',
         "upgraders/v1_to_v2.py failed (KeyError: 'nope'); the artifact is damaged or the step has a bug"),
        ("import no_such_module_for_pt2serde_tests\n",
         "upgraders/v1_to_v2.py failed to import: No module named 'no_such_module_for_pt2serde_tests'"),
        ("1 +\n", "upgraders/v1_to_v2.py failed to import: SyntaxError: invalid syntax"),
    ],
)
def test_broken_steps_raise_upgrade_error(steps, body, message):
    steps(1, body)
    with pytest.raises(UpgradeError) as ei:
        upgrade_documents(_docs(1), (1, 0), (2, 0))
    assert str(ei.value).startswith(message)


def test_serialize_errors_from_a_step_pass_through(steps):
    steps(1, """
        from serde.errors import MalformedArtifactError
        FROM = (1, 0)
        TO = (2, 0)
        DATE = "d"
        SUMMARY = "s"

        def upgrade(docs):
            raise MalformedArtifactError("program.json: graph.nodes[0]: bad expression")
        """)
    with pytest.raises(MalformedArtifactError, match=r"graph\.nodes\[0\]: bad expression"):
        upgrade_documents(_docs(1), (1, 0), (2, 0))


@pytest.mark.parametrize("bad", [("1", 0), (1,), (1, -1), (True, 0), "1.0", None])
def test_versions_must_be_int_pairs(bad):
    with pytest.raises(SchemaVersionError, match="from_version must be a"):
        upgrade_documents({}, bad, (1, 0))


def test_available_steps_in_chain_order(steps):
    for n in (10, 2, 1):
        steps(n)
    (Path(upgraders.__path__[0]) / "_helpers.py").write_text("")  # not a step
    assert available_steps() == ["v1_to_v2", "v2_to_v3", "v10_to_v11"]


def test_check_readable_window(monkeypatch):
    monkeypatch.setattr(version, "SCHEMA_VERSION", (3, 1))
    monkeypatch.setattr(version, "MIN_SUPPORTED", (2, 0))
    for ok in [(2, 0), (2, 9), (3, 0), (3, 1), (3, 7)]:
        check_readable(ok)
    with pytest.raises(SchemaVersionError, match=r"schema 4\.0, newer than this pt2serde reads \(3\.1\)"):
        check_readable((4, 0))
    with pytest.raises(SchemaVersionError, match=r"schema 1\.9, older than the oldest this pt2serde reads \(2\.0\)"):
        check_readable((1, 9))


def test_check_readable_accepts_the_current_version():
    check_readable(version.SCHEMA_VERSION)
    check_readable(version.MIN_SUPPORTED)


def test_real_steps_follow_the_contract():
    # Every real step module is named v{N}_to_v{N+1} and passes the runner's validation.
    for name in available_steps():
        n = int(name[1:].split("_", 1)[0])
        mod = upgrade.load_step(n)
        assert mod.TO == (n + 1, 0) and mod.FROM[0] == n
        assert isinstance(mod.SUMMARY, str) and "\n" not in mod.SUMMARY and mod.SUMMARY
        assert isinstance(mod.DATE, str) and len(mod.DATE) == 10


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({}, "program.json: no schema_version object; the file is not a pt2serde document"),
        ([], "program.json: no schema_version object; the file is not a pt2serde document"),
        ({"schema_version": {"major": "1", "minor": 0}},
         "program.json: schema_version.major must be a non-negative integer, got '1'"),
        ({"schema_version": {"major": 1, "minor": True}},
         "program.json: schema_version.minor must be a non-negative integer, got True"),
        ({"schema_version": {"major": 1}}, "program.json: schema_version.minor must be a non-negative integer, got None"),
    ],
)
def test_document_version_rejects_malformed(doc, message):
    with pytest.raises(MalformedArtifactError) as ei:
        document_version(doc)
    assert str(ei.value) == message


def test_document_version_reads_the_pair():
    assert document_version({"schema_version": {"major": 2, "minor": 3}}) == (2, 3)
