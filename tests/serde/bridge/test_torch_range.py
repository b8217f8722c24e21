"""The supported torch range: no warning inside it; outside, one warning on the first save or load
that points at the caller's line."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings

import torch

import serde
from serde.core.version import SUPPORTED_TORCH, torch_release


def test_torch_release_reads_every_spelling_torch_uses():
    assert torch_release("2.13.0+cpu") == (2, 13)
    assert torch_release("2.14.1+cu130") == (2, 14)
    assert torch_release("2.15.0a0+git1234") == (2, 15)
    assert torch_release("2.15") == (2, 15)
    assert torch_release("nightly") is None
    assert torch_release("") is None


def test_the_running_torch_is_supported_and_save_and_load_do_not_warn(tmp_path):
    assert torch_release(str(torch.__version__)) in SUPPORTED_TORCH
    ep = torch.export.export(torch.nn.Linear(2, 2), (torch.randn(1, 2),))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        serde.save(ep, tmp_path / "m.pt2s")
        serde.load(tmp_path / "m.pt2s")


def test_outside_the_range_the_first_save_warns_once_at_the_callers_line(tmp_path):
    # The only way to be outside the range without another torch build: the version string torch
    # reports, set before pt2serde reads it. Nothing else of torch changes.
    script = tmp_path / "caller.py"
    script.write_text(textwrap.dedent(f"""
        import warnings
        import torch
        from torch.torch_version import TorchVersion
        torch.__version__ = TorchVersion("2.99.0")
        import serde
        ep = torch.export.export(torch.nn.Linear(2, 2), (torch.randn(1, 2),))
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            serde.save(ep, {str(tmp_path / "m.pt2s")!r})
            serde.load({str(tmp_path / "m.pt2s")!r})
        mine = [w for w in got if "pt2serde is tested with torch" in str(w.message)]
        assert len(mine) == 1, [str(w.message) for w in got]
        print(mine[0].filename, mine[0].lineno, mine[0].message)
    """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    filename, lineno, message = out.stdout.strip().split(" ", 2)
    save_line = next(i for i, line in enumerate(script.read_text().splitlines(), 1) if "serde.save(" in line)
    assert (filename, int(lineno)) == (str(script), save_line)
    assert ", ".join(f"{a}.{b}.x" for a, b in SUPPORTED_TORCH) in message and "2.99.0" in message
