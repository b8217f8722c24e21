"""``pt2serde view`` and ``pt2serde diff --html``: what the pages hold (every node once, in the box of
its module call, with the shapes torch computes), that they are self-contained, deterministic and
keep hostile names as text, and how they behave in a real headless Chromium (driven over the
DevTools protocol: clicks, typing, screenshots kept under tmp_path)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import msgspec
import pytest
import torch

import serde
from canonical.diff import diff
from canonical.view import op_kind, program_page
from serde import cli
from serde.archive.artifact import read_artifact
from serde.core.walk import EMPTY_STACK_KEY

from ._browser import Browser, chromium


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


class Chain(torch.nn.Module):
    """``a`` and ``b`` around a linear; ``extra`` inserts one op after it (the diff's subject)."""

    def __init__(self, extra: bool):
        super().__init__()
        torch.manual_seed(0)
        self.a = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh())
        self.lin = torch.nn.Linear(8, 8)
        self.b = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.Sigmoid())
        self.extra = extra

    def forward(self, x):
        for _ in range(3):
            x = x.sin()
        y = self.lin(self.a(x))
        if self.extra:
            y = y * 1.5
        return self.b(y.cos())


NET_ARGS = (torch.randn(3, 8), torch.ones(2))


def _save(path: Path, model: torch.nn.Module, args: tuple) -> Path:
    serde.save(torch.export.export(model, args), path)
    return path


def _data(page: str) -> dict:
    (block,) = re.findall(r'<script type="application/json" id="data">(.*?)</script>', page, flags=re.S)
    return json.loads(block)


def _box_of(data: dict, row: int) -> list[str]:
    """Labels of the boxes around ``row``, outermost first (the page root left out)."""
    parent = {}
    for m, mod in enumerate(data["mods"]):
        for k in mod[3]:
            parent[("r", k) if k >= 0 else ("m", ~k)] = m
    out, m = [], parent[("r", row)]
    while m > 0:
        out.insert(0, data["mods"][m][0])
        m = parent[("m", m)]
    return out


def _check_boxes(data: dict, program) -> None:
    """Every node of the top graph sits in the boxes of its ``nn_module_stack``, in order."""
    by_name = {row[2][0]: r for r, row in enumerate(data["rows"]) if row[2][2] not in ("input", "output")}
    for node in program.graph_module.graph.nodes:
        stack = [e.path for e in node.metadata.nn_module_stack or () if e.path and e.key != EMPTY_STACK_KEY]
        assert _box_of(data, by_name[node.name]) == ["graph", *stack], node.name


@pytest.fixture(scope="module")
def net(tmp_path_factory) -> Path:
    return _save(tmp_path_factory.mktemp("net") / "net.pt2s", Net(), NET_ARGS)


@pytest.fixture(scope="module")
def chains(tmp_path_factory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("chains")
    x = (torch.randn(2, 8),)
    return _save(d / "a.pt2s", Chain(False), x), _save(d / "b.pt2s", Chain(True), x)


def test_view_puts_every_node_once_in_the_box_of_its_module_call(net, tmp_path, capsys):
    out = tmp_path / "net.html"
    assert cli.main(["view", str(net), "-o", str(out)]) == 0
    data = _data(out.read_text())
    program = read_artifact(net).program
    names = [c[0] for row in data["rows"] for c in row[2:] if c and c[2] not in ("input", "output")]
    top = [n.name for n in program.graph_module.graph.nodes]
    assert set(top) <= set(names)
    assert len(names) == len(top) + 2  # and one node in each cond branch
    _check_boxes(data, program)
    kinds = {row[2][0]: row[2][2] for row in data["rows"]}
    assert kinds[next(n for n in top if "linear" in n)] == "matmul"
    assert kinds[next(n for n in top if n.startswith("add_"))] == "inplace"
    # the box of `enc` says what flows in and out of it, as torch computes it
    enc = next(m for m in data["mods"] if m[0] == "enc")
    x = NET_ARGS[0]
    h = Net().enc(x)
    assert enc[6][0] == [f"f32{list(x.shape)}", f"f32{list(h.shape)}", 3]
    assert enc[4] == 3  # linear, relu, layer_norm
    branches = [m for m in data["mods"] if m[1] == "subgraph"]
    assert len(branches) == 2 and all(m[6][0] == [f"f32{list(h.shape)}"] * 2 + [1] for m in branches)


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


def test_pages_are_self_contained_and_deterministic(net, chains, tmp_path, capsys):
    pages = []
    for k in range(2):
        assert cli.main(["view", str(net), "-o", str(tmp_path / f"v{k}.html")]) == 0
        assert cli.main(["diff", str(chains[0]), str(chains[1]), "--html", str(tmp_path / f"d{k}.html")]) == 1
        pages.append(((tmp_path / f"v{k}.html").read_bytes(), (tmp_path / f"d{k}.html").read_bytes()))
    assert pages[0] == pages[1]
    for page in pages[0]:
        text = page.decode()
        assert not re.search(r"<(script|link|img|iframe)[^>]*\b(src|href)=", text)
        assert "http://" not in text.replace("http://www.w3.org/", "") and "https://" not in text
        assert len(re.findall(r"<script\b", text)) == 2  # the data block and the inline script


def _hostile_program(net: Path):
    """The Net program with a node and a module path renamed to markup that would run if parsed."""
    program = read_artifact(net).program
    graph = program.graph_module.graph
    bad_node = "</script><script>document.title='pwned'</script>"
    bad_path = "<img src=x onerror=\"document.title='pwned'\">"

    def hostile(n):
        stack = [msgspec.structs.replace(e, path=bad_path) if e.path == "enc" else e
                 for e in n.metadata.nn_module_stack or ()]
        n = msgspec.structs.replace(n, metadata=msgspec.structs.replace(n.metadata, nn_module_stack=stack))
        return msgspec.structs.replace(n, name=bad_node) if n.name.startswith("relu") else n

    graph = msgspec.structs.replace(graph, nodes=[hostile(n) for n in graph.nodes])
    return msgspec.structs.replace(program, graph_module=msgspec.structs.replace(program.graph_module, graph=graph))


def test_diff_html_pairs_the_nodes_of_a_and_b(chains, tmp_path, capsys):
    out = tmp_path / "d.html"
    assert cli.main(["diff", str(chains[0]), str(chains[1]), "--html", str(out)]) == 1
    data = _data(out.read_text())
    a, b = read_artifact(chains[0]).program, read_artifact(chains[1]).program
    rows = data["rows"]
    assert data["sides"] == ["A", "B"]
    for side, program in ((2, a), (3, b)):  # every node of each program once, on its side
        names = [r[side][0] for r in rows if r[side] and r[side][2] not in ("input", "output")]
        assert sorted(names) == sorted(n.name for n in program.graph_module.graph.nodes)
    report = diff(a, b)
    added = {c.where for c in report.changes if c.kind == "added"}
    assert added and {f"graph.nodes[{r[3][0]}]" for r in rows if r[0] == "added"} == added
    assert all(r[2] == 0 for r in rows if r[0] == "added")
    changed = {c.where for c in report.changes if c.kind == "changed" and c.section == "graph"}
    assert {f"graph.nodes[{r[3][0]}]" for r in rows if r[0] in ("changed", "renamed")} == changed
    # unmarked rows pair nodes that print the same on both sides
    assert all(r[2][1] == r[3][1] for r in rows if not r[0] and r[2] and r[3])
    # the box holding a change counts it; a box without changes has none
    marked = {m[0]: m[5] for m in data["mods"]}
    mul_row = next(i for i, r in enumerate(rows) if r[0] == "added")
    assert all(marked[label] >= 1 for label in _box_of(data, mul_row))
    assert marked["a"] == 0
    # the other way round the node is removed: on A's side only
    back = tmp_path / "back.html"
    assert cli.main(["diff", str(chains[1]), str(chains[0]), "--html", str(back)]) == 1
    removed = [r for r in _data(back.read_text())["rows"] if r[0] == "removed"]
    assert [r[2][0] for r in removed] == [r[3][0] for r in rows if r[0] == "added"]
    assert all(r[3] == 0 for r in removed)


# ------------------------------------------------------------------------------------ in a browser

needs_chromium = pytest.mark.skipif(
    chromium() is None, reason="no chromium on this machine: `make browser` installs it (apt-get install chromium)")


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if chromium() is None:
        yield None
        return
    with Browser(tmp_path_factory.mktemp("profile")) as b:
        yield b


def _load(browser: Browser, page: Path) -> float:
    browser.errors.clear()
    browser.requests.clear()
    seconds = browser.open(page.as_uri())
    assert browser.js("document.body.dataset.ready") == "1", "the page's script did not run to its end"
    return seconds


def _clean(browser: Browser, page: Path) -> None:
    assert browser.errors == []
    assert browser.js("document.getElementById('errors').textContent") == ""
    assert browser.requests == [page.as_uri()], "the page asked for something besides itself"


def _in_view(browser: Browser, selector: str) -> bool:
    return browser.js(f"(function(){{var e=document.querySelector({json.dumps(selector)});if(!e)return false;"
                      "var b=e.getBoundingClientRect();return b.height>0&&b.top>=0&&b.bottom<=innerHeight;})()")


def _box(browser: Browser, label: str) -> str:
    """The data-mod of the box labelled ``label`` that is in the DOM."""
    return browser.js(f"Array.from(document.querySelectorAll('.mod')).find(function(m){{"
                      f"return m.dataset.label==={json.dumps(label)};}}).dataset.mod")


def _row_selector(browser: Browser, name: str) -> str | None:
    r = browser.js(f"(function(){{var D=JSON.parse(document.getElementById('data').textContent);"
                   f"return D.rows.findIndex(function(R){{return R.slice(2).some(function(c){{return c&&c[0]==={json.dumps(name)};}});}});}})()")
    return f'.node[data-row="{r}"]'


@needs_chromium
def test_view_expands_on_click_and_search_reveals_a_node(net, browser, tmp_path, capsys):
    page = tmp_path / "net.html"
    cli.main(["view", str(net), "-o", str(page)])
    _load(browser, page)
    relu = next(n.name for n in read_artifact(net).program.graph_module.graph.nodes if n.name.startswith("relu"))
    row = _row_selector(browser, relu)
    # opens at the module hierarchy: `enc` is a closed box, its nodes are not in the DOM
    heads = browser.js("Array.from(document.querySelectorAll('.mod:not(.root)>.head')).map(function(h){"
                       "return h.textContent;})")
    assert any(h.startswith("▸ enc") for h in heads) and browser.js(f"!document.querySelector('{row}')")
    browser.screenshot(tmp_path / "net-closed.png")
    enc = _box(browser, "enc")
    browser.click(f'.mod[data-mod="{enc}"]>.head')
    assert browser.js(f"document.querySelector('.mod[data-mod=\"{enc}\"]').classList.contains('open')")
    inner = browser.js(f"Array.from(document.querySelectorAll('.mod[data-mod=\"{enc}\"]>.body>.mod'))"
                       ".map(function(m){return m.dataset.label;})")
    assert inner == ["enc.0", "enc.1", "enc.2"]
    browser.click(f'.mod[data-mod="{enc}"]>.head')
    assert browser.js(f"document.querySelector('.mod[data-mod=\"{enc}\"]>.body').childElementCount") == 0
    # typing a name jumps to the node: every box around it opens and it is on screen, selected
    browser.type("#search", relu[:6])
    assert _in_view(browser, row)
    assert browser.js(f"document.querySelector('{row}').classList.contains('hit')")
    assert "matching node" in browser.js("document.getElementById('count').textContent")
    assert relu in browser.js("document.getElementById('details').textContent")
    browser.screenshot(tmp_path / "net-search.png")
    # a module path finds its box; a nested one opens the boxes around it
    browser.js(f"document.querySelector('.mod[data-mod=\"{enc}\"]>.head').click()")
    browser.js("document.getElementById('search').value=''")
    browser.type("#search", "enc.2")
    assert browser.js("document.querySelector('.head.hit').parentNode.dataset.label") == "enc.2"
    assert _in_view(browser, ".head.hit")
    _clean(browser, page)


@needs_chromium
def test_hostile_names_stay_text_in_the_browser(net, browser, tmp_path):
    page = tmp_path / "hostile.html"
    page.write_text(program_page({None: _hostile_program(net)}, "<b>title</b>"))
    _load(browser, page)
    browser.type("#search", "</script>")
    text = browser.js("document.querySelector('.node.hit').textContent")
    assert "</script><script>document.title='pwned'</script>" in text
    browser.click(".node.hit")
    assert browser.js("document.title") == "<b>title</b>"
    assert browser.js("document.querySelectorAll('script').length") == 2
    assert browser.js("document.querySelectorAll('img,b').length") == 1  # only the header's own <b>
    assert any("onerror" in h for h in browser.js(
        "Array.from(document.querySelectorAll('.head')).map(function(h){return h.textContent;})"))
    _clean(browser, page)


@needs_chromium
def test_diff_page_shows_both_sides_in_step(chains, browser, tmp_path, capsys):
    page = tmp_path / "d.html"
    cli.main(["diff", str(chains[0]), str(chains[1]), "--html", str(page)])
    _load(browser, page)
    browser.click("#next-change")
    hit = browser.js("document.querySelector('.node.sel').className")
    assert "added" in hit or "changed" in hit or "renamed" in hit
    assert browser.js("document.querySelector('.node.sel>.cell').classList.contains('blank')") == ("added" in hit)
    browser.screenshot(tmp_path / "diff.png")
    # A's and B's cells of every row share one line, wherever the page is scrolled to
    for y in (0, 200):
        browser.js(f"window.scrollTo(0,{y})")
        tops = browser.js("Array.from(document.querySelectorAll('.row')).map(function(r){"
                          "return [r.children[0].getBoundingClientRect().top,r.children[1].getBoundingClientRect().top];})")
        assert tops and all(a == b for a, b in tops)
    _clean(browser, page)


@pytest.mark.slow  # importing transformers and timm and exporting take tens of seconds
@pytest.mark.parametrize("name", ["hf/gpt2", "timm/resnet18"])
def test_real_models_open_at_their_module_calls(name, browser, tmp_path, capsys):
    from tests import zoo_models

    path = tmp_path / "model.pt2s"
    serde.save(zoo_models.export_model(zoo_models.get(name)), path)
    page = tmp_path / "model.html"
    assert cli.main(["view", str(path), "-o", str(page)]) == 0
    data = _data(page.read_text())
    program = read_artifact(path).program
    _check_boxes(data, program)
    last = program.graph_module.graph.nodes[-1].name
    if chromium() is None:
        return  # the page data is checked; the browser half needs chromium (`make browser`)
    _load(browser, page)
    in_dom = browser.js("document.querySelectorAll('.node').length")
    assert in_dom < len(program.graph_module.graph.nodes) / 2  # the module calls are closed boxes
    browser.type("#search", last)
    assert _in_view(browser, ".node.hit")
    browser.screenshot(tmp_path / (name.replace("/", "-") + ".png"))
    _clean(browser, page)


@pytest.mark.slow  # a 700-node export
@needs_chromium
def test_a_long_flat_graph_shows_in_chunks_and_search_loads_the_chunk(browser, tmp_path, capsys):
    class Flat(torch.nn.Module):
        def forward(self, x):
            for i in range(700):
                x = x.sin() if i % 2 else x.cos()
            return x

    path = _save(tmp_path / "flat.pt2s", Flat(), (torch.randn(4),))
    page = tmp_path / "flat.html"
    assert cli.main(["view", str(path), "-o", str(page)]) == 0
    _load(browser, page)
    first = browser.js("document.querySelectorAll('.node').length")
    assert first < 400  # the first chunk only
    browser.click(".more")
    assert browser.js("document.querySelectorAll('.node').length") > first
    last = read_artifact(path).program.graph_module.graph.nodes[-1].name
    browser.type("#search", last)
    assert _in_view(browser, ".node.hit") and last in browser.js("document.querySelector('.node.hit').textContent")
    _clean(browser, page)


# ------------------------------------------------------------------------------------ 20,000 nodes


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)

    def forward(self, x):
        h = self.fc1(x)
        for _ in range(20):
            h = torch.nn.functional.gelu(h) * 0.5 + h.sin()
        return self.fc2(h)


class Block(torch.nn.Module):
    def __init__(self, extra: bool = False):
        super().__init__()
        self.norm, self.mlp, self.mlp2 = torch.nn.LayerNorm(8), Mlp(), Mlp()
        self.extra = extra

    def forward(self, x):
        h = self.mlp(self.norm(x))
        if self.extra:
            h = h.tanh()
        return x + self.mlp2(h)


class Big(torch.nn.Module):
    """121 blocks of 166 nodes: 20,000 and some nodes; ``changed`` blocks get one more op."""

    def __init__(self, changed: tuple[int, ...] = ()):
        super().__init__()
        torch.manual_seed(0)
        self.layers = torch.nn.ModuleList(Block(i in changed) for i in range(121))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def _timed(browser: Browser, action: str) -> float:
    """Milliseconds ``action`` takes in the page, layout included."""
    return browser.js(f"(function(){{var t=performance.now();{action};document.body.offsetHeight;"
                      "return performance.now()-t;})()")


@pytest.mark.slow
@needs_chromium
def test_20000_node_program_in_the_browser(browser, tmp_path, capsys):
    x = (torch.randn(2, 8),)
    a = _save(tmp_path / "big.pt2s", Big(), x)
    b = _save(tmp_path / "big-changed.pt2s", Big(changed=(7, 90)), x)
    nodes = len(read_artifact(a).program.graph_module.graph.nodes)
    assert nodes >= 20_000
    view, dpage = tmp_path / "big.html", tmp_path / "big-diff.html"
    t = time.perf_counter()
    assert cli.main(["view", str(a), "-o", str(view)]) == 0
    write_view = time.perf_counter() - t
    t = time.perf_counter()
    assert cli.main(["diff", str(a), str(b), "--html", str(dpage)]) == 1
    write_diff = time.perf_counter() - t
    timings = [f"{nodes} nodes; view page {view.stat().st_size >> 10} KiB written in {write_view:.2f} s, "
               f"diff page {dpage.stat().st_size >> 10} KiB in {write_diff:.2f} s"]

    load = _load(browser, view)
    in_dom = browser.js("document.querySelectorAll('.row').length")
    assert in_dom < 1000  # drawn lazily: the top-level boxes, not 20,000 rows
    box = _box(browser, "layers.60")
    expand = _timed(browser, f"document.querySelector('.mod[data-mod=\"{box}\"]>.head').click()")
    deep = _timed(browser, "Array.from(document.querySelectorAll('.mod:not(.open)>.head')).slice(0,50)"
                           ".forEach(function(h){h.click();})")
    search = _timed(browser, "var s=document.getElementById('search');s.value='layers_119_mlp2_fc2';"
                             "s.dispatchEvent(new Event('input'))")
    assert _in_view(browser, ".node.hit")
    assert "layers_119_mlp2_fc2" in browser.js("document.querySelector('.node.hit').textContent")
    browser.screenshot(tmp_path / "big-search.png")
    _clean(browser, view)
    timings.append(f"view: load {load * 1000:.0f} ms ({in_dom} rows in the DOM), expand one block {expand:.1f} ms, "
                   f"expand 50 more boxes {deep:.1f} ms, search + reveal {search:.1f} ms")

    load = _load(browser, dpage)
    marked = browser.js("Array.from(document.querySelectorAll('.mod.has-changes:not(.open)'))"
                        ".map(function(m){return m.dataset.label;})")
    assert {"layers.7", "layers.90"} <= set(marked)
    jump = _timed(browser, "document.getElementById('next-change').click()")
    assert _in_view(browser, ".node.sel")
    browser.screenshot(tmp_path / "big-diff.png")
    _clean(browser, dpage)
    timings.append(f"diff: load {load * 1000:.0f} ms, jump to the first change {jump:.1f} ms")
    (tmp_path / "timings.txt").write_text("\n".join(timings) + "\n")
    with capsys.disabled():
        print("\n" + "\n".join(timings))
