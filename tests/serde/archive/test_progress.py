"""Progress bars: on a terminal for big work, never in pipes, logs or files."""

from __future__ import annotations

import io

import torch

import serde
from serde.fileio import pool


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _artifact() -> bytes:
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(64, 64)

        def forward(self, x):
            return self.lin(x)

    buf = io.BytesIO()
    serde.save(torch.export.export(M(), (torch.randn(2, 64),)), buf)
    return buf.getvalue()


def test_a_terminal_sees_progress_while_verifying(monkeypatch, tmp_path):
    data = _artifact()
    path = tmp_path / "m.pt2s"
    path.write_bytes(data)
    monkeypatch.setattr(pool, "PROGRESS_MIN_BYTES", 0)
    tty = _Terminal()
    monkeypatch.setattr("sys.stderr", tty)
    serde.load(path)
    assert "pt2serde: verifying" in tty.getvalue()


def test_pipes_and_files_see_nothing(monkeypatch, tmp_path):
    data = _artifact()
    monkeypatch.setattr(pool, "PROGRESS_MIN_BYTES", 0)
    pipe = io.StringIO()  # isatty() is False
    monkeypatch.setattr("sys.stderr", pipe)
    serde.load(data)
    serde.save(serde.load(data), tmp_path / "again.pt2s")
    assert pipe.getvalue() == ""


def test_small_work_shows_no_bar_even_on_a_terminal(monkeypatch):
    tty = _Terminal()
    monkeypatch.setattr("sys.stderr", tty)
    serde.load(_artifact())
    assert tty.getvalue() == ""
