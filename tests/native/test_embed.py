"""The embedding API (native_cpp/include/pt2n/runtime.h): ``cmake --install`` of the C++ runtime's
build into a prefix, the example consumer (native_cpp/examples/embed) configured with
find_package(pt2n) against that installed copy, built, and run: on a safetensors file it equals
eager bitwise, and a kernel failing at run time is reported with its instruction's debug handle."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import safetensors.torch
import torch

import serde
from native.emit.emitter import emit_artifact
from native.format.program import encode

EXAMPLE = Path(__file__).resolve().parents[2] / "native_cpp" / "examples" / "embed"


class Pick(torch.nn.Module):
    def forward(self, h, idx):
        return h[idx]


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 4)
        self.pick = Pick()

    def forward(self, x, idx):
        h = torch.relu(self.lin(x))
        return self.pick(h, idx), h.sum()


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Path, torch.nn.Module]:
    from native.run import cpp_engine

    if not cpp_engine.available():
        pytest.skip(cpp_engine.unavailable_reason())
    if shutil.which("cmake") is None or shutil.which("ninja") is None:
        pytest.skip("cmake and ninja are needed to build the example (make native needs them too)")
    d = tmp_path_factory.mktemp("embed")
    prefix = d / "prefix"
    r = subprocess.run(["cmake", "--install", str(cpp_engine.build_dir()), "--prefix", str(prefix)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (prefix / "include/pt2n/runtime.h").exists() and (prefix / "lib/cmake/pt2n/pt2nConfig.cmake").exists()
    assert "-lpt2n" in (prefix / "lib/pkgconfig/pt2n.pc").read_text()
    build = d / "build"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LD_LIBRARY_PATH")}
    for cmd in (["cmake", "-S", str(EXAMPLE), "-B", str(build), "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                 f"-DCMAKE_PREFIX_PATH={prefix}"], ["cmake", "--build", str(build)]):
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
        assert r.returncode == 0, r.stdout + r.stderr
    torch.manual_seed(0)
    model = Net().eval()
    batch = torch.export.Dim("batch", min=2, max=32)
    ep = torch.export.export(model, (torch.randn(4, 8), torch.tensor([0, 2])), dynamic_shapes=({0: batch}, None))
    serde.save(ep, d / "m.pt2s")
    (d / "m.pt2n").write_bytes(encode(emit_artifact(d / "m.pt2s")))
    return build / "embed", d / "m.pt2n", model


def _run(exe: Path, prog: Path, tmp_path: Path, x: torch.Tensor, idx: torch.Tensor):
    safetensors.torch.save_file({"args.0": x, "idx": idx}, tmp_path / "in.safetensors")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LD_LIBRARY_PATH")}
    return subprocess.run([str(exe), str(prog), str(tmp_path / "in.safetensors"), str(tmp_path / "out.safetensors")],
                          capture_output=True, text=True, timeout=120, env=env)


def test_the_installed_example_runs_a_program_like_eager(built, tmp_path):
    exe, prog, model = built
    x, idx = torch.randn(7, 8, generator=torch.Generator().manual_seed(1)), torch.tensor([6, 3])
    r = _run(exe, prog, tmp_path, x, idx)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "input args.0 (x): tensor Float, rank 2" in r.stdout and "input args.1 (idx): tensor Long, rank 1" in r.stdout
    assert "output output.0: [2, 4]" in r.stdout and "output output.1: []" in r.stdout
    got = safetensors.torch.load_file(tmp_path / "out.safetensors")
    with torch.no_grad():
        picked, total = model(x, idx)
    assert torch.equal(got["output.0"], picked) and torch.equal(got["output.1"], total)


def test_the_example_reads_the_failing_instructions_debug_handle(built, tmp_path):
    exe, prog, _ = built
    r = _run(exe, prog, tmp_path, torch.randn(5, 8), torch.tensor([99, 0]))
    assert r.returncode == 1
    lines = r.stdout.strip().splitlines()
    assert lines[-2].startswith("error: NativeRuntimeError: instruction ") and "index 99 is out of bounds" in lines[-2]
    assert lines[-1].startswith("at instruction ") and lines[-1].endswith(
        ": node 'index', op torch.ops.aten.index.Tensor, module 'pick'"), lines[-1]
    assert not (tmp_path / "out.safetensors").exists()


@pytest.mark.slow  # a second compile against the torch headers (about 5 s of CPU)
def test_the_pkg_config_file_builds_the_example_too(built, tmp_path):
    if shutil.which("pkg-config") is None:
        pytest.skip("pkg-config is not installed")
    exe, prog, model = built
    prefix = exe.parents[1] / "prefix"
    env = {**os.environ, "PKG_CONFIG_PATH": str(prefix / "lib/pkgconfig")}
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "pt2n"], capture_output=True, text=True, env=env,
                           check=True).stdout.split()
    app = tmp_path / "app"
    r = subprocess.run(["c++", str(EXAMPLE / "main.cpp"), *flags, "-o", str(app)], capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stderr
    x, idx = torch.randn(3, 8), torch.tensor([2, 1])
    r = _run(app, prog, tmp_path, x, idx)
    assert r.returncode == 0, r.stdout + r.stderr
    with torch.no_grad():
        assert torch.equal(safetensors.torch.load_file(tmp_path / "out.safetensors")["output.0"], model(x, idx)[0])
