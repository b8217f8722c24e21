"""``pt2serde-run --load-library``: a kernel library built here (tests/native/data/myops.cpp, with
the compiler and torch headers of the C++ runtime's build) registers ``pt2n_test::twice_plus``
with TORCH_LIBRARY; the same operator, registered in Python with a fake implementation, is
exported, emitted and run by the standalone runtime with the library, equal to eager."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import safetensors.torch
import torch

import serde
from native.emit.emitter import emit_artifact
from native.format.program import encode

DATA = Path(__file__).resolve().parent / "data"


@torch.library.custom_op("pt2n_test::twice_plus", mutates_args=())
def twice_plus(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a * 2 + b


@twice_plus.register_fake
def _(a, b):
    return torch.empty_like(a)


class UsesTwicePlus(torch.nn.Module):
    def forward(self, x, y):
        return torch.ops.pt2n_test.twice_plus(torch.relu(x), y) - 1


def _cli() -> str:
    from native.run import cpp_engine

    if not cpp_engine.available():
        pytest.skip(cpp_engine.unavailable_reason())
    return str(cpp_engine.cli_path())


def _cache(build: Path, key: str) -> str:
    got = re.search(rf"^{key}:[A-Z]+=(.*)$", (build / "CMakeCache.txt").read_text(), re.M)
    assert got, f"{key} is not in {build}/CMakeCache.txt"
    return got.group(1)


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("oplib")
    batch = torch.export.Dim("batch", min=1, max=16)
    ep = torch.export.export(UsesTwicePlus(), (torch.randn(3, 4), torch.randn(3, 4)),
                             dynamic_shapes=({0: batch}, {0: batch}))
    serde.save(ep, d / "m.pt2s")
    native = emit_artifact(d / "m.pt2s")
    assert any(op.name == "pt2n_test::twice_plus" for op in native.program.operators)
    (d / "m.pt2n").write_bytes(encode(native))
    return d / "m.pt2n"


def _inputs(path: Path, n: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(n)
    t = {"args.0": torch.randn(n, 4, generator=g), "args.1": torch.randn(n, 4, generator=g)}
    safetensors.torch.save_file(t, path)
    return t


def test_without_its_library_the_custom_operator_is_named(program, tmp_path):
    cli = _cli()
    r = subprocess.run([cli, "check", str(program)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "pt2n_test::twice_plus" in r.stdout, r.stdout
    r = subprocess.run([cli, "check", str(program), "--load-library", str(tmp_path / "nope.so")], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 1
    assert r.stdout.startswith("error: NativeRuntimeError: cannot load the operator library ") and "nope.so" in r.stdout


@pytest.mark.slow  # compiles a TORCH_LIBRARY source: 7 s of CPU, more on a busy machine
def test_a_custom_kernel_library_runs_standalone(program, tmp_path):
    from native.run import cpp_engine

    cli = _cli()
    build = cpp_engine.build_dir()
    torch_dir = Path(_cache(build, "TORCH_DIR"))
    lib = tmp_path / "libmyops.so"
    cmd = [_cache(build, "CMAKE_CXX_COMPILER"), "-std=c++20", "-O1", "-shared", "-fPIC",
           f"-D_GLIBCXX_USE_CXX11_ABI={_cache(build, 'TORCH_CXX11_ABI')}", "-isystem", str(torch_dir / "include"),
           "-isystem", str(torch_dir / "include/torch/csrc/api/include"), str(DATA / "myops.cpp"),
           f"-L{torch_dir / 'lib'}", "-lc10", "-ltorch_cpu", f"-Wl,-rpath,{torch_dir / 'lib'}", "-o", str(lib)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    for n in (1, 5, 16):
        t = _inputs(tmp_path / "in.safetensors", n)
        out = tmp_path / "out.safetensors"
        r = subprocess.run([cli, "run", str(program), "--load-library", str(lib), "--inputs",
                            str(tmp_path / "in.safetensors"), "--outputs", str(out)],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        want = UsesTwicePlus()(t["args.0"], t["args.1"])
        assert torch.equal(safetensors.torch.load_file(out)["output"], want)
