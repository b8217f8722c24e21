"""``extra_files``, as with torch.export.save/load: text stored beside the program, read back by
name, carried through ``pt2serde import``, ``upgrade`` and ``canonicalize``."""

from __future__ import annotations

import io

import pytest
import torch

import serde
from serde.archive import UnsafeMemberNameError, read_archive
from serde.archive.artifact import read_artifact
from serde.cli import main
from serde.errors import UnsupportedConstructError
from serde.testing import assert_programs_equal

EXTRAS = {"config.json": '{"lr": 0.1, "name": "ünïcode"}', "README.txt": "line 1\nline 2\n", "empty": ""}


class _M(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x).relu()


@pytest.fixture(scope="module")
def ep():
    torch.manual_seed(0)
    return torch.export.export(_M(), (torch.randn(2, 4),))


def test_extra_files_round_trip_like_torch(ep, tmp_path):
    path = tmp_path / "m.pt2s"
    serde.save(ep, path, extra_files=EXTRAS)
    wanted = dict.fromkeys(EXTRAS, "")
    loaded = serde.load(path, extra_files=wanted)
    assert wanted == EXTRAS
    assert_programs_equal(ep, loaded)
    # torch's own pair behaves the same way on the same dict: asking for one name fills in all
    torch.export.save(ep, tmp_path / "m.pt2", extra_files=EXTRAS)
    theirs = dict.fromkeys(EXTRAS, "")
    torch.export.load(tmp_path / "m.pt2", extra_files=theirs)
    assert theirs == wanted
    only_one, theirs_one = {"README.txt": None}, {"README.txt": None}
    serde.load(path, extra_files=only_one)
    torch.export.load(tmp_path / "m.pt2", extra_files=theirs_one)
    assert only_one == theirs_one == EXTRAS


def test_extra_files_do_not_change_the_program_and_need_format_2(ep):
    plain, extra = io.BytesIO(), io.BytesIO()
    serde.save(ep, plain)
    serde.save(ep, extra, extra_files=EXTRAS)
    a, b = read_archive(plain.getvalue()), read_archive(extra.getvalue())
    assert bytes(a.member("program.json")) == bytes(b.member("program.json"))
    assert (a.manifest.format_version, b.manifest.format_version) == (1, 2)
    assert read_artifact(extra.getvalue()).extra_files() == {k: v.encode() for k, v in EXTRAS.items()}


def test_absent_extra_file_keeps_its_value_and_stored_ones_are_filled_in_like_torch(ep, tmp_path):
    ours, theirs = io.BytesIO(), tmp_path / "t.pt2"
    serde.save(ep, ours, extra_files={"a.txt": "x"})
    torch.export.save(ep, theirs, extra_files={"a.txt": "x"})
    got_ours, got_theirs = {"b.txt": "default"}, {"b.txt": "default"}
    serde.load(ours.getvalue(), extra_files=got_ours)
    torch.export.load(theirs, extra_files=got_theirs)
    assert got_ours == got_theirs == {"a.txt": "x", "b.txt": "default"}


def test_show_and_check_list_extra_files(ep, tmp_path, capsys):
    from serde import cli

    path = tmp_path / "m.pt2s"
    serde.save(ep, path, extra_files={"config.json": "{}", "notes.txt": "hello"})
    assert cli.main(["show", str(path)]) == 0
    shown = capsys.readouterr().out
    assert "extra files:\n  config.json: 2 bytes\n  notes.txt: 5 bytes\n" in shown
    assert cli.main(["check", str(path)]) == 0
    checked = capsys.readouterr().out
    assert "extra file:      config.json (2 bytes)" in checked and "notes.txt (5 bytes)" in checked


@pytest.mark.parametrize("extras, error, words", [
    ({"../escape": "x"}, UnsafeMemberNameError, "extra file name '../escape'"),
    ({"dir/file": "x"}, UnsafeMemberNameError, "no directories"),
    ({"blob": b"bytes"}, UnsupportedConstructError, r"save\(extra_files\)\['blob'\]: the content must be a str"),
    (["not", "a", "mapping"], UnsupportedConstructError, "must be a mapping"),
])
def test_bad_extra_files_fail_before_writing(ep, tmp_path, extras, error, words):
    path = tmp_path / "m.pt2s"
    with pytest.raises(error, match=words):
        serde.save(ep, path, extra_files=extras)
    assert not path.exists()


def test_import_upgrade_and_canonicalize_keep_extra_files(ep, tmp_path, capsys):
    torch.export.save(ep, tmp_path / "t.pt2", extra_files=EXTRAS)
    assert main(["import", str(tmp_path / "t.pt2"), str(tmp_path / "i.pt2s")]) == 0
    assert "extra files: README.txt, config.json, empty" in capsys.readouterr().out
    want = {k: v.encode() for k, v in EXTRAS.items()}
    assert read_artifact(tmp_path / "i.pt2s").extra_files() == want
    assert main(["upgrade", str(tmp_path / "i.pt2s"), str(tmp_path / "u.pt2s")]) == 0
    assert read_artifact(tmp_path / "u.pt2s").extra_files() == want
    assert main(["canonicalize", str(tmp_path / "i.pt2s"), str(tmp_path / "c.pt2s")]) == 0
    assert read_artifact(tmp_path / "c.pt2s").extra_files() == want


def test_diff_reports_extra_file_changes(ep, tmp_path, capsys):
    a, b = tmp_path / "a.pt2s", tmp_path / "b.pt2s"
    serde.save(ep, a, extra_files={"config.json": '{"lr": 0.1}', "old.txt": "x"})
    serde.save(ep, b, extra_files={"config.json": '{"lr": 0.2}', "new.txt": "y"})
    assert main(["diff", str(a), str(b)]) == 1
    text = capsys.readouterr().out
    assert "extra_files:" in text and "config.json: 11 bytes, sha256" in text
    import json

    assert main(["diff", "--json", str(a), str(b)]) == 1
    changes = [(c["section"], c["kind"], c["where"]) for c in json.loads(capsys.readouterr().out)["changes"]]
    assert sorted(changes) == [("extra_files", "added", "extra_files[new.txt]"),
                               ("extra_files", "changed", "extra_files[config.json]"),
                               ("extra_files", "removed", "extra_files[old.txt]")]
    assert main(["diff", str(a), str(a)]) == 0
