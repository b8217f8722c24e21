"""``pt2serde emit`` and ``pt2serde run`` end to end, with inputs and outputs files."""

from __future__ import annotations

import copy

import torch

import serde
from native.run.io import read_inputs, read_outputs, write_inputs
from serde.cli import main
from tests.native._native_util import assert_same, exported, inputs_of


def test_emit_then_run_matches_eager(tmp_path, capsys):
    art, prog, inp, out = (tmp_path / n for n in ("m.pt2s", "m.pt2n", "in.json", "out.json"))
    ep = exported("dynamic_arith")
    serde.save(ep, art)
    assert main(["emit", str(art), str(prog)]) == 0
    assert "wrote" in capsys.readouterr().out
    args, kwargs = inputs_of("dynamic_arith")[1]  # another size than the export's
    write_inputs(inp, args, kwargs)
    assert main(["run", str(prog), "--inputs", str(inp), "--outputs", str(out), "--arena"]) == 0
    printed = capsys.readouterr().out
    assert "[0]: float32[5, 8]" in printed and "[2]: 31" in printed
    assert_same(read_outputs(out), copy.deepcopy(ep).module()(*args, **kwargs), "outputs file")


def test_run_on_an_artifacts_example_inputs(tmp_path, capsys):
    art, prog = tmp_path / "m.pt2s", tmp_path / "m.pt2n"
    serde.save(exported("mlp"), art)
    assert main(["emit", str(art), str(prog), "--listing"]) == 0
    listing = capsys.readouterr().out
    assert "aten::linear.default" in listing and "s0 = x.shape[0]  range [1, 32]" in listing
    assert main(["run", str(prog), "--inputs", str(art)]) == 0
    assert capsys.readouterr().out.startswith("output: float32[8, 4]")
    args, kwargs = read_inputs(art)
    assert torch.equal(args[0], exported("mlp").example_inputs[0][0])


def test_errors_are_reported_not_raised(tmp_path, capsys):
    prog = tmp_path / "bad.pt2n"
    prog.write_bytes(b"not a program at all, just text")
    inp = tmp_path / "in.json"
    write_inputs(inp, (torch.randn(2, 16),))
    assert main(["run", str(prog), "--inputs", str(inp)]) == 2
    assert "pt2serde run: error:" in capsys.readouterr().err
    art = tmp_path / "autocast.pt2s"

    class M(torch.nn.Module):
        def forward(self, x, y):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                z = x @ y
            return z.float() + 1

    serde.save(torch.export.export(M(), (torch.randn(3, 3), torch.randn(3, 3))), art)
    assert main(["emit", str(art), str(tmp_path / "autocast.pt2n")]) == 2
    err = capsys.readouterr().err
    assert "pt2serde emit: error: graph.nodes[0] ('wrap_with_autocast', torch.ops.higher_order.wrap_with_autocast)" in err
    assert not (tmp_path / "autocast.pt2n").exists()


def test_wrong_inputs_file_contents(tmp_path, capsys):
    from serde.bridge.bundle import save_tree

    art, prog, inp = tmp_path / "m.pt2s", tmp_path / "m.pt2n", tmp_path / "in.json"
    serde.save(exported("mlp"), art)
    main(["emit", str(art), str(prog)])
    save_tree([1, 2], inp)
    assert main(["run", str(prog), "--inputs", str(inp)]) == 2
    assert "an inputs file holds (args, kwargs); this one holds a list" in capsys.readouterr().err
    write_inputs(inp, (torch.randn(50, 16),))
    assert main(["run", str(prog), "--inputs", str(inp)]) == 2
    assert "outside its allowed range [1, 32]" in capsys.readouterr().err


def test_run_stops_an_endless_loop_with_an_error(tmp_path, capsys):
    from torch._higher_order_ops.while_loop import while_loop

    class Endless(torch.nn.Module):
        def forward(self, i, x):
            return while_loop(lambda i, x: i >= 0, lambda i, x: (i + 1, x + 1), (i, x))

    art, prog, inp = tmp_path / "m.pt2s", tmp_path / "m.pt2n", tmp_path / "in.json"
    serde.save(torch.export.export(Endless(), (torch.tensor(0), torch.zeros(2))), art)
    assert main(["emit", str(art), str(prog)]) == 0
    write_inputs(inp, (torch.tensor(0), torch.zeros(2)))
    assert main(["run", str(prog), "--inputs", str(inp), "--max-loop-instructions", "50"]) == 2
    assert "loops ran more than 50 instructions" in capsys.readouterr().err


def test_run_profile_prints_nodes_and_modules_slowest_first(tmp_path, capsys):
    art, prog = tmp_path / "m.pt2s", tmp_path / "m.pt2n"
    serde.save(exported("mlp"), art)
    assert main(["emit", str(art), str(prog)]) == 0
    capsys.readouterr()
    assert main(["run", str(prog), "--inputs", str(art), "--profile", "--arena"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("output: float32[8, 4]")
    nodes = printed[printed.index("per node"):printed.index("per module")]
    modules = printed[printed.index("per module"):]
    assert "fc1_linear  (aten.linear.default in fc1)" in nodes
    assert "<root>" in modules and "  fc1  (" in modules

    def times(section: str) -> list[float]:
        return [float(line.split()[0]) for line in section.splitlines()[1:] if line.strip().endswith(")")]

    for section in (nodes, modules):
        t = times(section)
        assert t and t == sorted(t, reverse=True)
