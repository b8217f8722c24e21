"""Inputs and outputs as safetensors files: the keys, the Python runtime through ``pt2serde run``
and the standalone C++ ``pt2serde-run`` (bitwise against ``ep.module()``), and the one-line
refusals of bad input files in both."""

from __future__ import annotations

import collections
import copy
import dataclasses
import re
import subprocess

import pytest
import safetensors.torch
import torch

import serde
from native.emit.emitter import emit_artifact
from native.format.keys import leaf_keys
from native.format.program import encode
from native.run.io import read_safetensors_inputs, read_safetensors_outputs
from serde.cli import main


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 4)

    def forward(self, x, pair, *, scale):
        a, b = pair
        h = torch.relu(self.lin(x)) * scale
        return {"h": h, "s": (a + b).sum(0)}, x.shape[0] * 2


def _exported() -> torch.export.ExportedProgram:
    torch.manual_seed(0)
    batch = torch.export.Dim("batch", min=2, max=64)
    args = (torch.randn(3, 8), (torch.randn(3, 5), torch.randn(3, 5)))
    return torch.export.export(Net().eval(), args, {"scale": torch.randn(4)},
                               dynamic_shapes={"x": {0: batch}, "pair": ({0: batch}, {0: batch}), "scale": None})


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    d = tmp_path_factory.mktemp("st")
    ep = _exported()
    serde.save(ep, d / "m.pt2s")
    native = emit_artifact(d / "m.pt2s")
    (d / "m.pt2n").write_bytes(encode(native))
    return ep, native, d / "m.pt2n"


def _inputs(n: int = 5) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(n)
    return {"args.0": torch.randn(n, 8, generator=g), "args.1.0": torch.randn(n, 5, generator=g),
            "args.1.1": torch.randn(n, 5, generator=g), "kwargs.scale": torch.randn(4, generator=g)}


def _eager(ep, t: dict[str, torch.Tensor]):
    return copy.deepcopy(ep).module()(t["args.0"], (t["args.1.0"], t["args.1.1"]), scale=t["kwargs.scale"])


def test_keys_are_the_leaf_paths(program):
    _, native, _ = program
    p = native.program
    assert p.input_keys == ["args.0", "args.1.0", "args.1.1", "kwargs.scale"]
    assert p.output_keys == ["output.0.h", "output.0.s", "output.1"]
    spec = torch.utils._pytree.tree_structure(((1, {"a": [2, 3]}), {"k": 4}))
    assert leaf_keys(spec, inputs=True) == ["args.0", "args.1.a.0", "args.1.a.1", "kwargs.k"]
    # dict keys with dots could give two leaves one key: no keys then, inputs go by name
    spec = torch.utils._pytree.tree_structure(({"a.b": 1, "a": {"b": 2}},))
    assert leaf_keys(spec, inputs=False) == []


def _keys_by_rebuilding(spec, inputs):
    # The plain way: rebuild the tree from placeholder leaves and read torch's own paths.
    tree = torch.utils._pytree.tree_unflatten(list(range(spec.num_leaves)), spec)
    keys = []
    for path, _ in torch.utils._pytree.tree_flatten_with_path(tree)[0]:
        parts = [str(getattr(k, "idx", getattr(k, "key", getattr(k, "name", k)))) for k in path]
        parts = (["args" if parts[0] == "0" else "kwargs"] + parts[1:]) if inputs else ["output", *parts]
        keys.append(".".join(parts))
    return keys


@dataclasses.dataclass
class _Pair:
    a: torch.Tensor
    b: torch.Tensor


class _NeedsTensors:
    # A registered class whose unflatten needs real tensors: its keys cannot be known from the spec.
    def __init__(self, t):
        self.t = t


torch.utils._pytree.register_dataclass(_Pair)
torch.utils._pytree.register_pytree_node(
    _NeedsTensors, lambda o: ([o.t], None), lambda leaves, _: _NeedsTensors(leaves[0].clone()),
    flatten_with_keys_fn=lambda o: ([(torch.utils._pytree.GetAttrKey("t"), o.t)], None))
_Point = collections.namedtuple("_Point", "x y")


@pytest.mark.parametrize("tree", [
    ((1, [2, 3]), {"k": 4}),
    ((collections.OrderedDict(b=1, a=2), _Point(3, [4, 5])), {}),
    ((collections.defaultdict(list, {"z": 1, 7: 2}),), {"p": _Pair(3, 4)}),
    ((), {"nested": {"x": (1, 2), "y": [_Pair(3, (4, 5))]}}),
])
def test_keys_walked_from_the_spec_equal_torchs_paths(tree):
    spec = torch.utils._pytree.tree_structure(tree)
    assert leaf_keys(spec, inputs=True) == _keys_by_rebuilding(spec, True)
    assert leaf_keys(spec, inputs=False) == _keys_by_rebuilding(spec, False)


class _Broken:
    def __init__(self, t):
        self.t = t


def _broken_unflatten(leaves, _):
    raise RuntimeError("a bug in a registered class's unflatten")


torch.utils._pytree.register_pytree_node(_Broken, lambda o: ([o.t], None), _broken_unflatten)


def test_a_spec_whose_context_does_not_name_its_children_gives_no_keys():
    # an edited in_spec: a dict naming two keys over three children (found by the fuzzer)
    spec = torch.utils._pytree.tree_structure(((), {"a": 1, "b": 2, "c": 3}))
    kwargs = spec.children()[1]
    object.__setattr__(kwargs, "_context", ["a", "b"])  # what a decoded, edited spec can hold
    assert leaf_keys(spec, inputs=True) == []


def test_a_class_that_needs_real_leaves_gives_no_keys_and_its_bugs_surface():
    spec = torch.utils._pytree.tree_structure(((1, _NeedsTensors(torch.ones(1))), {}))
    assert leaf_keys(spec, inputs=True) == []  # int leaves have no clone(): names only
    spec = torch.utils._pytree.tree_structure(((_Broken(torch.ones(1)),), {}))
    with pytest.raises(RuntimeError, match="a bug in a registered class"):
        leaf_keys(spec, inputs=True)


def test_pt2serde_run_reads_and_writes_safetensors(program, tmp_path, capsys):
    ep, native, prog = program
    t = _inputs(5)
    # the program's input names work as well as the paths
    named = dict(t)
    names = [i.name for i in native.program.inputs]
    named[names[0]] = named.pop("args.0")
    safetensors.torch.save_file(named, tmp_path / "in.safetensors")
    for engine in ("python", "cpp") if _cpp_built() else ("python",):
        out = tmp_path / f"out-{engine}.safetensors"
        assert main(["run", str(prog), "--inputs", str(tmp_path / "in.safetensors"), "--outputs", str(out),
                     "--engine", engine]) == 0
        capsys.readouterr()
        got = safetensors.torch.load_file(out)
        want, n2 = _eager(ep, t)
        assert sorted(got) == ["output.0.h", "output.0.s", "output.1"]
        assert torch.equal(got["output.0.h"], want["h"]) and torch.equal(got["output.0.s"], want["s"])
        assert got["output.1"].dtype == torch.int64 and got["output.1"].item() == n2 == 10
        # the keys and the program's out_spec give the tree back
        tree = read_safetensors_outputs(out, native.program)
        assert tree[1] == 10 and type(tree[1]) is int and sorted(tree[0]) == ["h", "s"]
        assert torch.equal(tree[0]["h"], want["h"])


# (name, how the good file is edited, what the one-line error must say in both runtimes)
BAD = [
    ("missing", lambda t: t.pop("kwargs.scale"), ["input kwargs.scale (scale) is missing"]),
    ("extra", lambda t: t.update(bogus=torch.zeros(1)), ["tensor 'bogus' is not an input of the program",
                                                          "args.0 (x), args.1.0 (pair_0)"]),
    ("dtype", lambda t: t.update({"args.0": t["args.0"].double()}), ["input 'x'", "expected dtype", "got"]),
    ("rank", lambda t: t.update({"args.0": t["args.0"][None]}), ["input 'x'", "expected 2 dimensions, got 3"]),
    ("range", lambda t: t.update({k: torch.randn(65, *v.shape[1:]) for k, v in t.items() if k.startswith("args")}),
     ["input 'x' dimension 0", "65"]),
]


def _bad_file(tmp_path, case) -> str:
    name, edit, _ = case
    t = _inputs(5)
    edit(t)
    path = tmp_path / f"{name}.safetensors"
    safetensors.torch.save_file(t, path)
    return str(path)


@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_bad_inputs_get_one_line_naming_the_input(program, tmp_path, capsys, case):
    _, native, prog = program
    path = _bad_file(tmp_path, case)
    assert main(["run", str(prog), "--inputs", path]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and all(w in err for w in case[2]), err


def test_a_given_twice_input_and_a_number_input_are_refused(program, tmp_path):
    from native.errors import InputMismatchError

    _, native, _ = program
    t = _inputs(5)
    t[native.program.inputs[0].name] = t["args.0"].clone()
    safetensors.torch.save_file(t, tmp_path / "twice.safetensors")
    with pytest.raises(InputMismatchError, match="is given twice"):
        read_safetensors_inputs(tmp_path / "twice.safetensors", native.program)


# ---------------------------------------------------------------- the standalone runtime


def _cpp_built() -> bool:
    from native.run import cpp_engine

    return cpp_engine.available()


def _cli():
    from native.run import cpp_engine

    if not cpp_engine.available():
        pytest.skip(cpp_engine.unavailable_reason())
    return str(cpp_engine.cli_path())


@pytest.mark.parametrize("arena", [False, True], ids=["heap", "arena"])
def test_standalone_runtime_from_safetensors_to_safetensors_equals_eager(program, tmp_path, arena):
    ep, _, prog = program
    cli = _cli()
    for n in (2, 5, 64):  # the range's ends and a size the export never saw
        t = _inputs(n)
        safetensors.torch.save_file(t, tmp_path / "in.safetensors")
        out = tmp_path / "out.safetensors"
        r = subprocess.run([cli, "run", str(prog), "--inputs", str(tmp_path / "in.safetensors"), "--outputs", str(out)]
                           + (["--arena"] if arena else []), capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "output.0.h: Float[" in r.stdout
        got = safetensors.torch.load_file(out)
        want, n2 = _eager(ep, t)
        assert sorted(got) == ["output.0.h", "output.0.s", "output.1"]
        assert torch.equal(got["output.0.h"], want["h"]) and torch.equal(got["output.0.s"], want["s"])
        assert got["output.1"].dtype == torch.int64 and got["output.1"].item() == n2 == 2 * n


@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_standalone_runtime_refuses_bad_inputs_in_one_line(program, tmp_path, case):
    _, _, prog = program
    cli = _cli()
    path = _bad_file(tmp_path, case)
    out = tmp_path / "out.safetensors"
    r = subprocess.run([cli, "run", str(prog), "--inputs", path, "--outputs", str(out)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 1
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: InputMismatchError: "), r.stdout
    assert all(w in lines[0] for w in case[2]), lines[0]
    assert not out.exists()


def test_standalone_runtime_refuses_a_damaged_safetensors_file(program, tmp_path):
    _, _, prog = program
    cli = _cli()
    safetensors.torch.save_file(_inputs(3), tmp_path / "in.safetensors")
    data = (tmp_path / "in.safetensors").read_bytes()
    cases = {"truncated": data[:-4], "huge header": (1 << 40).to_bytes(8, "little") + data[8:],
             "deep": len(b"[" * 5000).to_bytes(8, "little") + b"[" * 5000}
    for name, blob in cases.items():
        (tmp_path / "bad.safetensors").write_bytes(blob)
        r = subprocess.run([cli, "run", str(prog), "--inputs", str(tmp_path / "bad.safetensors")], capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 1, name
        assert r.stdout.startswith("error: InvalidWeightsFileError: ") and "not a valid safetensors file" in r.stdout, \
            (name, r.stdout)


class Scaled(torch.nn.Module):
    def forward(self, x, n: int):
        return x * n


def _outcome(engine: str, prog, path, out, capsys) -> tuple[int, str]:
    """(0 or 1, the error line or "") of a run by `pt2serde run` (python) or `pt2serde-run` (cpp)."""
    if engine == "python":
        rc = main(["run", str(prog), "--inputs", str(path), "--outputs", str(out)])
        err = capsys.readouterr().err.strip()
        return (0, "") if rc == 0 else (1, err)
    r = subprocess.run([_cli(), "run", str(prog), "--inputs", str(path), "--outputs", str(out)], capture_output=True,
                       text=True, timeout=120)
    return (0, "") if r.returncode == 0 else (1, r.stdout.strip())


@pytest.mark.parametrize("engine", ["python", "cpp"])
def test_a_specialized_int_input_may_be_left_out_or_given_as_a_0d_tensor(tmp_path, capsys, engine):
    ep = torch.export.export(Scaled(), (torch.randn(2, 3), 3))
    serde.save(ep, tmp_path / "m.pt2s")
    prog = tmp_path / "m.pt2n"
    prog.write_bytes(encode(emit_artifact(tmp_path / "m.pt2s")))
    x = torch.randn(2, 3)
    files = {"left out": {"args.0": x}, "given": {"args.0": x, "args.1": torch.tensor(3)},
             "other value": {"args.0": x, "args.1": torch.tensor(4)},
             "float": {"args.0": x, "args.1": torch.tensor(3.0, dtype=torch.float64)}}
    got = {}
    for name, t in files.items():
        path, out = tmp_path / f"{name}.safetensors", tmp_path / f"out-{name}.safetensors"
        safetensors.torch.save_file(t, path)
        got[name] = _outcome(engine, prog, path, out, capsys)
        if got[name][0] == 0:
            assert torch.equal(safetensors.torch.load_file(out)["output"], x * 3)
    assert got["left out"] == got["given"] == (0, "")
    assert got["other value"][0] == 1 and "exported for the constant 3" in got["other value"][1]
    assert got["float"][0] == 1 and "input args.1 (n): expected an int as a 0-dimensional I64 tensor" in got["float"][1]


@pytest.mark.parametrize("field,value,says", [
    ("input_keys", ["args.0"], "input_keys: 1 keys for 4 inputs"),
    ("input_keys", ["args.0", "args.0", "a", "b"], "input_keys: the keys are not distinct"),
    ("output_keys", ["output.0", "output.1"], "output_keys: 2 keys for 3 outputs"),
])
def test_both_loaders_refuse_keys_that_do_not_fit(program, field, value, says):
    from native.errors import NativeFormatError
    from native.run import cpp_engine
    from native.run.runtime import load
    from tests.native._native_util import edited

    _, native, _ = program
    data = edited(native, **{field: value})
    engines = ["python", "cpp"] if cpp_engine.available() else ["python"]
    for engine in engines:
        with pytest.raises(NativeFormatError, match=re.escape(says)):
            load(data, engine=engine)


def test_pt2serde_run_refuses_a_damaged_safetensors_file_in_one_line(program, tmp_path, capsys):
    _, _, prog = program
    safetensors.torch.save_file(_inputs(3), tmp_path / "in.safetensors")
    data = (tmp_path / "in.safetensors").read_bytes()
    for blob in (data[:-4], data[:8] + data[8:].replace(b'"F32"', b'"X32"', 1)):
        (tmp_path / "bad.safetensors").write_bytes(blob)
        assert main(["run", str(prog), "--inputs", str(tmp_path / "bad.safetensors")]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "it is not a valid safetensors file" in err, err


@pytest.mark.slow  # 120 subprocesses of the standalone runtime
def test_fuzz_the_standalone_safetensors_reader(program, tmp_path):
    import random
    import signal

    _, _, prog = program
    cli = _cli()
    safetensors.torch.save_file(_inputs(3), tmp_path / "in.safetensors")
    data = (tmp_path / "in.safetensors").read_bytes()
    (n,) = __import__("struct").unpack("<Q", data[:8])
    rng = random.Random(0)
    outcomes = {}
    for k in range(120):
        b = bytearray(data)
        kind = k % 4
        if kind == 0:  # flips in the header, where the structure is
            for _ in range(rng.randint(1, 4)):
                b[rng.randrange(8 + n)] ^= 1 << rng.randrange(8)
        elif kind == 1:
            b = b[:rng.randrange(len(b))]
        elif kind == 2:  # a header length pointing anywhere
            b[:8] = rng.choice([0, 1, n - 1, n + 1, len(b), (1 << 63) - 1, (1 << 64) - 1]).to_bytes(8, "little")
        else:  # a digit of an offset or a shape changed
            digits = [i for i in range(8, 8 + n) if chr(b[i]).isdigit()]
            b[rng.choice(digits)] = ord(rng.choice("0123456789"))
        path = tmp_path / "m.safetensors"
        path.write_bytes(bytes(b))
        r = subprocess.run([cli, "run", str(prog), "--inputs", str(path)], capture_output=True, timeout=120)
        r.stdout = r.stdout.decode("utf-8")  # strict: the parser's quotes of hostile bytes are escaped
        assert r.returncode in (0, 1), (k, r.returncode, r.stdout, r.stderr)
        assert r.returncode == 0 or r.stdout.startswith("error: "), (k, r.stdout)
        assert -r.returncode not in (signal.SIGSEGV, signal.SIGABRT)
        key = r.stdout.split(":")[1].strip() if r.returncode else "ran"
        outcomes[key] = outcomes.get(key, 0) + 1
    assert "InvalidWeightsFileError" in outcomes and "InputMismatchError" in outcomes, outcomes


def test_fuzz_the_python_safetensors_reader(program, tmp_path):
    import random

    from serde.errors import SerializeError

    _, native, _ = program
    safetensors.torch.save_file(_inputs(3), tmp_path / "in.safetensors")
    data = (tmp_path / "in.safetensors").read_bytes()
    rng = random.Random(1)
    path = tmp_path / "m.safetensors"
    kinds = {}
    for k in range(300):
        b = bytearray(data)
        if k % 3 == 0:
            b = b[:rng.randrange(len(b))]
        else:
            for _ in range(rng.randint(1, 3)):
                i = rng.randrange(min(len(b), 8 + int.from_bytes(data[:8], "little")))
                b[i] = rng.randrange(256) if k % 3 == 1 else b[i] ^ (1 << rng.randrange(8))
        path.write_bytes(bytes(b))
        try:
            read_safetensors_inputs(path, native.program)
            kinds["read"] = kinds.get("read", 0) + 1
        except SerializeError as e:
            assert "\n" not in str(e)
            kinds[type(e).__name__] = kinds.get(type(e).__name__, 0) + 1
    assert "InvalidWeightsFileError" in kinds, kinds


def test_unreadable_and_unwritable_files_are_one_line_in_both_runtimes(program, tmp_path, capsys):
    _, _, prog = program
    safetensors.torch.save_file(_inputs(3), tmp_path / "in.safetensors")
    nodir = tmp_path / "nodir" / "out.safetensors"
    assert main(["run", str(prog), "--inputs", str(tmp_path / "in.safetensors"), "--outputs", str(nodir)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "No such file or directory" in err, err
    if not _cpp_built():
        return
    for args, says in ((["--inputs", str(tmp_path / "none.safetensors")],
                        "error: MalformedArtifactError: {tmp}/none.safetensors: cannot read the inputs file: "
                        "No such file or directory"),
                       (["--inputs", str(tmp_path / "in.safetensors"), "--outputs", str(nodir)],
                        "error: OSError: {tmp}/nodir/out.safetensors: cannot write the outputs file: "
                        "No such file or directory")):
        r = subprocess.run([_cli(), "run", str(prog), *args], capture_output=True, text=True, timeout=120)
        assert r.returncode == 1 and r.stdout.strip().splitlines()[-1] == says.format(tmp=tmp_path), r.stdout
    assert not nodir.parent.exists()


def test_an_artifacts_example_inputs_become_a_safetensors_file_for_the_standalone_runtime(program, tmp_path):
    from native.run.io import read_inputs, write_safetensors_inputs

    ep, native, prog = program
    art = prog.parent / "m.pt2s"
    args, kwargs = read_inputs(art)
    write_safetensors_inputs(tmp_path / "in.safetensors", native.program, args, kwargs)
    t = safetensors.torch.load_file(tmp_path / "in.safetensors")
    assert sorted(t) == ["args.0", "args.1.0", "args.1.1", "kwargs.scale"]
    back_args, back_kwargs = read_safetensors_inputs(tmp_path / "in.safetensors", native.program)
    assert torch.equal(back_args[1][1], args[1][1]) and torch.equal(back_kwargs["scale"], kwargs["scale"])
    if not _cpp_built():
        return
    out = tmp_path / "out.safetensors"
    r = subprocess.run([_cli(), "run", str(prog), "--inputs", str(tmp_path / "in.safetensors"), "--outputs", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout
    want, _ = _eager(ep, t)
    assert torch.equal(safetensors.torch.load_file(out)["output.0.h"], want["h"])
