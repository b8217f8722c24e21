"""``pt2serde view`` and ``pt2serde diff --html``: the pages are well formed, complete, and open in a
real headless browser without script errors."""

from __future__ import annotations

import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch

import serde
from canonical.view import op_kind
from serde import cli


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.enc = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.LayerNorm(16))
        self.register_buffer("count", torch.zeros(()))

    def forward(self, x, flag):
        self.count.add_(1)
        h = self.enc(x)
        y = torch.cond(flag.sum() > 0, lambda h: h.sin(), lambda h: h.cos(), (h,))
        return y.softmax(-1).view(-1)


def _save(tmp_path, name, model, args):
    path = tmp_path / name
    serde.save(torch.export.export(model, args), path)
    return path


def _svgs(page: str) -> list[ET.Element]:
    return [ET.fromstring(m) for m in re.findall(r"<svg .*?</svg>", page, flags=re.S)]


def test_view_draws_every_node_once_with_its_kind(tmp_path, capsys):
    model = Net()
    path = _save(tmp_path, "net.pt2s", model, (torch.randn(3, 8), torch.ones(2)))
    out = tmp_path / "net.html"
    assert cli.main(["view", str(path), "-o", str(out)]) == 0
    page = out.read_text()
    svgs = _svgs(page)  # well-formed XML: names and text are escaped
    ns = "{http://www.w3.org/2000/svg}"
    ids = [g.get("id") for svg in svgs for g in svg.iter(f"{ns}g") if g.get("class") == "node"]
    from serde.archive.artifact import read_artifact

    top = [n.name for n in read_artifact(path).program.graph_module.graph.nodes]
    assert set(top) <= set(ids) and len(ids) == len(set(ids))
    assert len(svgs) == 3  # the graph and the two cond branches
    links = re.findall(r'href="#([^"]+)"', page)
    anchors = set(re.findall(r'<h3 id="([^"]+)"', page))
    assert len(links) == 2 and set(links) <= anchors
    fills = {g.get("id"): g.find(f"{ns}rect").get("fill") for svg in svgs for g in svg.iter(f"{ns}g")
             if g.get("class") == "node"}
    linear = next(i for i in ids if "linear" in i)
    inplace = next(i for i in ids if i.startswith("add_"))
    assert fills[linear] != fills[inplace]
    assert "enc.0" in page  # module boxes are labelled with their paths


@pytest.mark.parametrize("target,kind", [
    ("torch.ops.aten.linear.default", "matmul"),
    ("torch.ops.aten.add_.Tensor", "inplace"),
    ("torch.ops.aten.add.Tensor", "elementwise"),
    ("torch.ops.aten.view.default", "view"),
    ("torch.ops.aten.layer_norm.default", "norm"),
    ("torch.ops.aten.sum.dim_IntList", "reduce"),
    ("torch.ops.higher_order.cond", "control"),
    ("_operator.floordiv", "symbolic"),
    ("torch.ops.aten.sym_size.int", "symbolic"),
    ("torch.ops.aten._to_copy.default", "view"),
])
def test_op_kinds(target, kind):
    assert op_kind(target) == kind


def test_diff_html_marks_the_changed_region(tmp_path, capsys):
    class A(torch.nn.Module):
        def __init__(self, extra):
            super().__init__()
            torch.manual_seed(0)
            self.lin = torch.nn.Linear(8, 8)
            self.extra = extra

        def forward(self, x):
            for _ in range(20):
                x = x.sin()
            y = self.lin(x)
            if self.extra:
                y = y * 1.5
            for _ in range(20):
                y = y.cos()
            return y

    a = _save(tmp_path, "a.pt2s", A(False), (torch.randn(2, 8),))
    b = _save(tmp_path, "b.pt2s", A(True), (torch.randn(2, 8),))
    out = tmp_path / "d.html"
    assert cli.main(["diff", str(a), str(b), "--html", str(out)]) == 1
    page = out.read_text()
    (svg,) = _svgs(page)
    ns = "{http://www.w3.org/2000/svg}"
    nodes = [g for g in svg.iter(f"{ns}g") if g.get("class") == "node"]
    marked = [g for g in nodes if g.find(f"{ns}title").text.startswith(("added", "changed", "renamed"))]
    assert any(g.find(f"{ns}title").text.startswith("added: mul") for g in marked)
    assert len(nodes) < 20  # only the changed region and its context, not all 42 nodes
    assert "unchanged node" in page


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def _open_in_browser(page: Path, tmp_path: Path) -> tuple[str, Path]:
    browser = _chromium()
    flags = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1300,900"]
    shot = tmp_path / (page.stem + ".png")
    subprocess.run([*flags, f"--screenshot={shot}", page.as_uri()], capture_output=True, timeout=180, check=True)
    dom = subprocess.run([*flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=180,
                         check=True).stdout
    return dom, shot


@pytest.mark.slow
def test_pages_open_in_a_real_browser_without_script_errors(tmp_path):
    if _chromium() is None:
        pytest.skip("no chromium on this machine: `make test-all` installs it (apt-get install chromium)")

    class Chain(torch.nn.Module):
        def forward(self, x):
            for i in range(5000):
                x = x.sin() if i % 2 else x.cos()
            return x

    big = _save(tmp_path, "chain.pt2s", Chain(), (torch.randn(4),))
    pages = [tmp_path / "chain.html", tmp_path / "net.html"]
    assert cli.main(["view", str(big), "-o", str(pages[0])]) == 0
    net = _save(tmp_path, "net.pt2s", Net(), (torch.randn(3, 8), torch.ones(2)))
    assert cli.main(["view", str(net), "-o", str(pages[1])]) == 0
    for page in pages:
        dom, shot = _open_in_browser(page, tmp_path)
        assert 'data-ready="1"' in dom, "the page's script did not run to its end"
        assert re.search(r'<div id="errors"></div>', dom), "the page reported a script error"
        assert shot.stat().st_size > 10_000
    assert pages[0].read_text().count('class="node"') >= 5000
