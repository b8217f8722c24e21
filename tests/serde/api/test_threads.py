"""serde.load does not depend on torch modes active in the calling thread or in other threads."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import pytest
import torch
from torch._higher_order_ops import while_loop
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

import serde


class _Cond(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cond(x.sum() > 0, lambda x: self.lin(x).relu(), lambda x: self.lin(x) - 1.0, (x,))


class _Loop(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("step", torch.tensor([1.5, -0.5, 2.0, 0.25]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, y = while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y * self.step + 1.0), (torch.tensor(0), x))
        return y


_INPUTS = [torch.tensor([[1.0, 2.0, -0.5, 0.25]]), torch.tensor([[-3.0, 0.5, -1.0, 0.0]])]


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[bytes, Path, torch.nn.Module, list]]:
    torch.manual_seed(0)
    out = {}
    for name, model in (("cond", _Cond()), ("loop", _Loop())):
        ep = torch.export.export(model, (_INPUTS[0],))
        path = tmp_path_factory.mktemp("saved") / f"{name}.pt2s"
        serde.save(ep, path)
        # expected outputs computed here, once: eager control flow must not run in loader threads
        out[name] = (path.read_bytes(), path, model, [model(x) for x in _INPUTS])
    return out


_RUN_LOCK = threading.Lock()


def _check(ep: torch.export.ExportedProgram, expected: list[torch.Tensor]) -> None:
    for t in [*ep.state_dict.values(), *ep.constants.values()]:
        assert not isinstance(t, FakeTensor) and t.device.type == "cpu"
    # Running control flow (eager or a loaded program's cond/while_loop) traces with dynamo or
    # make_fx, whose state is global and not thread-safe in torch 2.13: runs never overlap here,
    # loads overlap them freely.
    with _RUN_LOCK:
        for x, want in zip(_INPUTS, expected, strict=True):
            torch.testing.assert_close(ep.module()(x), want, rtol=0, atol=0)


class _CountDispatch(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls += 1
        return func(*args, **(kwargs or {}))


class _CountFunction(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.calls += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("source", ["bytes", "path"])
@pytest.mark.parametrize("ambient", ["fake", "dispatch", "function", "inference", "fake+dispatch"])
def test_load_inside_an_ambient_mode_gives_a_real_program(saved, source: str, ambient: str) -> None:
    # Decision: loading is I/O, so it sets the caller's modes aside (they see none of its work)
    # and returns real tensors; the modes are active again afterwards.
    data, path, _, expected = saved["cond"]
    counters = [_CountDispatch()] if "dispatch" in ambient else [_CountFunction()] if ambient == "function" else []
    modes = ([FakeTensorMode()] if "fake" in ambient else []) + counters
    if ambient == "inference":
        modes = [torch.inference_mode()]
    with ExitStack() as stack:
        for m in modes:
            stack.enter_context(m)
        ep = serde.load(data if source == "bytes" else path)
        after = torch.ones(2)
        if "fake" in ambient:
            assert isinstance(after, FakeTensor)  # the caller's mode is back in place
    assert [c.calls for c in counters] == [1] * len(counters)  # only torch.ones(2), nothing of the load
    _check(ep, expected)


def _run_eager(model: torch.nn.Module, expected: list[torch.Tensor]) -> None:
    # Eager torch.cond / while_loop compile their bodies with dynamo, tracing under a
    # FakeTensorMode in this thread.
    for x, want in zip(_INPUTS, expected, strict=True):
        with _RUN_LOCK:
            got = model(x)
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def _loads_alongside_control_flow(saved, loads_per_worker: int) -> None:
    stop = threading.Event()
    errors: list[BaseException] = []

    def runner(name: str) -> None:
        data, _, model, expected = saved[name]
        try:
            while not stop.is_set():
                _run_eager(model, expected)
                with FakeTensorMode():  # a mode set by this thread, around a load
                    ep = serde.load(data)
                _check(ep, expected)
        except BaseException as e:  # reported below; a runner must not die silently
            errors.append(e)
            raise

    def load(k: int) -> None:
        data, path, _, expected = saved["cond" if k % 2 else "loop"]
        _check(serde.load(data if k % 3 else path), expected)

    runners = [threading.Thread(target=runner, args=(n,)) for n in ("cond", "loop")]
    for t in runners:
        t.start()
    try:
        with ThreadPoolExecutor(max_workers=3) as pool:
            list(pool.map(load, range(3 * loads_per_worker)))
    finally:
        stop.set()
        for t in runners:
            t.join()
    assert errors == []


def test_loads_in_threads_alongside_control_flow(saved) -> None:
    _loads_alongside_control_flow(saved, loads_per_worker=8)


@pytest.mark.slow
def test_many_loads_in_threads_alongside_control_flow(saved) -> None:
    _loads_alongside_control_flow(saved, loads_per_worker=200)


_FIRST_DECODES = """
import sys, threading
from serde import archive
from serde.core import schema, wire
c = archive.read_archive(sys.argv[1])
jobs = [(c.member("program.json"), schema.ExportedProgram), (c.member("weights.json"), schema.Weights),
        (c.member("manifest.json"), schema.Manifest), (b"{}", schema.DebugInfo)] * 2
start = threading.Barrier(len(jobs))
def run(data, type_):
    start.wait()
    for _ in range(3):
        wire.decode(data, type_)
threads = [threading.Thread(target=run, args=job) for job in jobs]
for t in threads: t.start()
for t in threads: t.join()
"""


def test_first_decodes_in_several_threads_at_once(saved) -> None:
    # The first decoder of a schema type fills msgspec's per-class caches; two threads doing that
    # at once crashed the interpreter (about 4 runs in 5 before decoders were built under a lock).
    # Each run is a fresh process, since the caches are filled once per process.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for _ in range(10):
        done = subprocess.run([sys.executable, "-c", _FIRST_DECODES, str(saved["cond"][1])], env=env,
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
