"""Every subcommand reports bad input as one line on stderr with exit status 2, never a traceback."""

from __future__ import annotations

import io

import pytest
import torch

import serde
from serde import cli

_ONE_LINE_ERRORS = [
    # (argv, what the line must say)
    (["emit", "{art}", "{tmp}/nodir/y.pt2n"], "No such file or directory"),
    (["import", "{tmp}/nope.pt2", "{tmp}/x.pt2s"], "No such file or directory"),
    (["import", "{art}", "{tmp}/x.pt2s"], "already a pt2serde artifact"),
    (["import", "{tmp}/text.pt2", "{tmp}/x.pt2s"], "not a zip archive"),
    (["demo", "--model", "nosuch"], "no such built-in model"),
    (["show", "{tmp}/missing.pt2s"], "No such file or directory"),
    (["diff", "{art}", "{tmp}/missing.pt2s"], "No such file or directory"),
    (["check", "{tmp}"], "Is a directory"),
    (["run", "{tmp}/missing.pt2n", "--inputs", "{art}"], "No such file or directory"),
    (["show", "--import", "no_such_module_xyz", "{art}"], "--import no_such_module_xyz"),
    (["show", "--load-library", "{tmp}/nolib.so", "{art}"], "--load-library"),
]


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    class M(torch.nn.Module):
        def forward(self, x):
            return x.relu()

    path = tmp_path_factory.mktemp("cli") / "m.pt2s"
    serde.save(torch.export.export(M(), (torch.randn(3),)), path)
    return path


@pytest.mark.parametrize("argv,says", _ONE_LINE_ERRORS, ids=lambda v: v[0] if isinstance(v, list) else None)
def test_bad_input_is_one_line_and_exit_2(argv, says, artifact, tmp_path, capsys):
    (tmp_path / "text.pt2").write_text("not an archive")
    argv = [a.format(art=artifact, tmp=tmp_path) for a in argv]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"pt2serde {argv[0]}: error: ") and says in lines[0], lines[0]
    assert "Traceback" not in err


def test_version_names_package_schema_and_torch(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--version"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    major, minor = serde.SCHEMA_VERSION
    assert out.startswith("pt2serde ") and f"schema {major}.{minor}" in out and "torch 2." in out


@pytest.mark.parametrize("command", list(cli.COMMANDS))
def test_every_help_lists_exit_codes_and_plugin_options(command, capsys):
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "exit status: 0" in text and "2 an error" in text
    assert "--import MODULE" in text and "--load-library PATH" in text


def test_import_option_runs_before_loading(tmp_path, artifact, capsys, monkeypatch):
    (tmp_path / "my_plugin_mod.py").write_text("LOADED = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert cli.main(["show", "--import", "my_plugin_mod", str(artifact)]) == 0
    import sys

    assert sys.modules["my_plugin_mod"].LOADED


def test_load_of_a_missing_file_is_a_file_not_found_error(tmp_path):
    with pytest.raises(FileNotFoundError) as e:
        serde.load(tmp_path / "missing.pt2s")
    assert isinstance(e.value, serde.SerializeError)
    assert e.value.errno is not None and "missing.pt2s" in str(e.value)


def test_load_of_a_directory_is_an_is_a_directory_error(tmp_path):
    with pytest.raises(IsADirectoryError):
        serde.load(tmp_path)


def test_save_to_a_stream_then_load_it_back_like_torch():
    class M(torch.nn.Module):
        def forward(self, x):
            return x * 2

    ep = torch.export.export(M(), (torch.ones(2),))
    x = torch.arange(2.0)
    buf = io.BytesIO()
    serde.save(ep, buf)
    assert buf.tell() == 0
    assert torch.equal(serde.load(buf).module()(x), x * 2)
    # an artifact that does not start at offset 0 comes back from where it starts
    buf = io.BytesIO()
    buf.write(b"HEADER")
    serde.save(ep, buf)
    assert buf.tell() == 6
    assert torch.equal(serde.load(buf).module()(x), x * 2)


def test_load_of_a_stream_at_its_end_says_so():
    class M(torch.nn.Module):
        def forward(self, x):
            return x * 2

    buf = io.BytesIO()
    serde.save(torch.export.export(M(), (torch.ones(2),)), buf)
    buf.seek(0, io.SEEK_END)
    with pytest.raises(serde.SerializeError, match="at its end"):
        serde.load(buf)


def test_export_writes_an_archive_torch_loads(tmp_path):
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 3)
            self.register_buffer("steps", torch.zeros(()))

        def forward(self, x):
            self.steps.add_(1)
            return self.lin(x).relu()

    torch.manual_seed(0)
    ep = torch.export.export(M(), (torch.randn(2, 4),),
                             dynamic_shapes=({0: torch.export.Dim("b", min=1, max=16)},))
    ours, theirs = tmp_path / "m.pt2s", tmp_path / "m.pt2"
    serde.save(ep, ours, extra_files={"cfg.json": "{}"})
    assert cli.main(["export", str(ours), str(theirs)]) == 0
    extra = {"cfg.json": ""}
    back = torch.export.load(theirs, extra_files=extra)
    assert extra == {"cfg.json": "{}"}
    x = torch.randn(5, 4)
    m1, m2 = ep.module(), back.module()
    assert torch.equal(m1(x), m2(x)) and torch.equal(m1.steps, m2.steps)
    # and back again: import gives the same canonical program as the original save
    again = tmp_path / "again.pt2s"
    assert cli.main(["import", str(theirs), str(again)]) == 0
    from serde.archive.artifact import read_artifact

    assert read_artifact(again).program == read_artifact(ours).program
