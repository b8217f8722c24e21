"""Several programs in one artifact: ``serde.save({"prefill": ep1, "decode": ep2}, path)``."""

from __future__ import annotations

import io
import json
import zipfile

import pytest
import torch

import serde
from serde import archive, cli
from serde.archive.artifact import SeveralProgramsError, read_artifact, read_artifacts


class Decode(torch.nn.Module):
    def __init__(self, lin: torch.nn.Linear):
        super().__init__()
        self.lin = lin
        self.register_buffer("steps", torch.zeros(4))

    def forward(self, x):
        self.steps.add_(1)
        return self.lin(x) + self.steps


@pytest.fixture(scope="module")
def programs():
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 4)
    prefill = torch.export.export(torch.nn.Sequential(lin, torch.nn.ReLU()), (torch.randn(3, 4),))
    decode = torch.export.export(Decode(lin), (torch.randn(1, 4),))
    return {"prefill": prefill, "decode": decode}


@pytest.fixture(scope="module")
def saved(programs, tmp_path_factory):
    path = tmp_path_factory.mktemp("multi") / "lm.pt2s"
    serde.save(programs, path, extra_files={"tokenizer.json": "{}"})
    return path


def test_round_trip_gives_the_dict_back_and_each_program_computes_the_same(programs, saved):
    loaded = serde.load(saved)
    assert sorted(loaded) == ["decode", "prefill"]
    x3, x1 = torch.randn(3, 4), torch.randn(1, 4)
    assert torch.equal(loaded["prefill"].module()(x3), programs["prefill"].module()(x3))
    m_ours, m_ref = loaded["decode"].module(), programs["decode"].module()
    for _ in range(3):
        assert torch.equal(m_ours(x1), m_ref(x1))
    assert torch.equal(m_ours.steps, m_ref.steps)


def test_shared_weights_are_stored_once(programs, saved, tmp_path):
    names = zipfile.ZipFile(saved).namelist()
    assert "programs/prefill/program.json" in names and "programs/decode/weights.json" in names
    assert "program.json" not in names
    lin_w = programs["prefill"].state_dict["0.weight"]
    payloads = [n for n in names if n.startswith("data/")]
    sizes = sorted(zipfile.ZipFile(saved).getinfo(n).file_size for n in payloads)
    assert sizes.count(lin_w.numel() * 4) == 1  # the shared Linear weight is one member
    singles = 0
    for name, ep in programs.items():
        p = tmp_path / f"{name}.pt2s"
        serde.save(ep, p)
        singles += sum(1 for n in zipfile.ZipFile(p).namelist() if n.startswith("data/"))
    assert len(payloads) < singles


def test_loaded_programs_never_share_memory(saved):
    loaded = serde.load(saved)
    w1 = loaded["prefill"].state_dict["0.weight"]
    w2 = loaded["decode"].state_dict["lin.weight"]
    assert torch.equal(w1, w2) and w1.untyped_storage().data_ptr() != w2.untyped_storage().data_ptr()


def test_format_version_3_and_programs_listed(saved, capsys):
    arts = read_artifacts(saved)
    assert sorted(arts) == ["decode", "prefill"]
    assert arts["decode"].manifest.format_version == 3
    assert cli.main(["check", str(saved)]) == 0
    out = capsys.readouterr().out
    assert "programs:        decode, prefill" in out and "extra file:      tokenizer.json" in out


def test_show_and_view_cover_every_program(saved, tmp_path, capsys):
    assert cli.main(["show", "--no-pager", str(saved)]) == 0
    out = capsys.readouterr().out
    assert "## program decode\n" in out and "## program prefill\n" in out and "tokenizer.json" in out
    page = tmp_path / "v.html"
    assert cli.main(["view", str(saved), "-o", str(page)]) == 0
    assert "decode: graph" in page.read_text() and "prefill: graph" in page.read_text()


def test_diff_pairs_programs_by_name(programs, tmp_path, capsys):
    # both sides saved now: running the decode program earlier updated its buffer in place
    saved, other = tmp_path / "base.pt2s", tmp_path / "other.pt2s"
    serde.save(programs, saved, extra_files={"tokenizer.json": "{}"})
    changed = torch.export.export(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh()), (torch.randn(3, 4),))
    serde.save({"prefill": changed, "decode": programs["decode"], "extra": programs["decode"]}, other,
               extra_files={"tokenizer.json": "{}"})
    assert cli.main(["diff", "--json", str(saved), str(other)]) == 1
    report = json.loads(capsys.readouterr().out)
    wheres = [c["where"] for c in report["changes"]]
    assert "programs[extra]" in wheres
    assert any(w.startswith("programs[prefill].graph.nodes[") for w in wheres)
    assert not any(w.startswith("programs[decode].") for w in wheres)
    assert cli.main(["diff", str(saved), str(saved)]) == 0


def test_single_program_tools_say_what_to_do(saved):
    with pytest.raises(SeveralProgramsError, match=r"holds 2 programs \(decode, prefill\)"):
        read_artifact(saved)


@pytest.mark.parametrize("bad", [{}, {"has space": None}, {"1st": None}, {"ok": "not a program"}])
def test_bad_dicts_are_refused(bad, programs):
    bad = {k: (programs["decode"] if v is None else v) for k, v in bad.items()}
    with pytest.raises(serde.SerializeError):
        serde.save(bad, io.BytesIO())


def test_a_format_2_manifest_with_program_dirs_is_refused(saved):
    contents = archive.read_archive(saved)
    members = {n: bytes(contents.member(n)) for n in contents.names if n != archive.MANIFEST}
    buf = io.BytesIO()
    archive.write_archive(buf, members, schema_version=contents.schema_version, torch_version="x")
    data = bytearray(buf.getvalue())
    assert archive.read_archive(bytes(data)).manifest.format_version == 3
    # a single-program artifact may not also carry program directories
    members["program.json"] = members["programs/decode/program.json"]
    with pytest.raises(archive.UnknownMemberError, match="at the top of an archive with several programs"):
        archive.write_archive(io.BytesIO(), members, schema_version=contents.schema_version, torch_version="x")
