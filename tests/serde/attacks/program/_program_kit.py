"""Tools shared by the program attacks: a real saved artifact, a rewrite of its JSON, a rename everywhere.

Not an attack itself; test_program_attacks.py skips files whose name starts with "_".
"""

from __future__ import annotations

import contextlib
import io
import json
import signal
from collections.abc import Callable
from typing import Any

import torch

import serde
from serde.archive import read_archive, write_archive
from serde.core import wire

__all__ = ["Model", "InputsModel", "base_artifact", "inputs_artifact", "example", "rename", "edit_program",
           "bounded"]


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x)


class Model(torch.nn.Module):
    """A parameter, a buffer, a lifted tensor constant, submodules (module call graph,
    nn_module_stack) and optionally a cond (subgraph attributes)."""

    def __init__(self, with_cond: bool) -> None:
        super().__init__()
        self.with_cond = with_cond
        self.blocks = torch.nn.ModuleList([_Block()])
        self.register_buffer("scale", torch.full((4,), 2.0))
        self.offset = torch.arange(4.0)  # neither parameter nor buffer: a lifted constant

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.blocks[0](x) * self.scale + self.offset
        if not self.with_cond:
            return h.relu()
        return torch.cond(h.sum() > 0, lambda t: t.relu(), lambda t: t.neg(), (h,))


def example() -> tuple[torch.Tensor]:
    torch.manual_seed(0)
    return (torch.randn(2, 4),)


def base_artifact(with_cond: bool) -> bytes:
    """A saved Model; the one with a cond is not unflattened (a loaded cond's get_attr nodes carry no
    nn_module_stack, which torch.export.unflatten requires)."""
    torch.manual_seed(0)
    buf = io.BytesIO()
    dynamic = None if with_cond else {"x": {0: torch.export.Dim("batch", min=2, max=64)}}  # size expressions
    serde.save(torch.export.export(Model(with_cond).eval(), example(), dynamic_shapes=dynamic), buf)
    return buf.getvalue()


class InputsModel(torch.nn.Module):
    """A dict input, a string constant input and keyword arguments: ep.module() pastes the dict's
    key and the string into the guard code it generates, and the keywords' names into its forward,
    each between quotes."""

    def forward(self, x: torch.Tensor, cfg: dict[str, torch.Tensor], mode: str, *, kwa: torch.Tensor,
                kwb: torch.Tensor) -> torch.Tensor:
        return x * 2 + cfg["cfgkey"] + kwa - kwb if mode == "fast" else x


def model_inputs() -> tuple[tuple, dict]:
    """InputsModel's inputs: what it was exported with, and what its user calls it with."""
    torch.manual_seed(0)
    args = (torch.randn(2, 4), {"cfgkey": torch.randn(2, 4)}, "fast")
    kwargs = {"kwa": torch.randn(2, 4), "kwb": torch.randn(2, 4)}
    return args, kwargs


def inputs_artifact() -> bytes:
    """A saved InputsModel; call it with its stored example inputs (``ep.example_inputs``) or with
    :func:`model_inputs`."""
    args, kwargs = model_inputs()
    buf = io.BytesIO()
    serde.save(torch.export.export(InputsModel(), args, kwargs, strict=False), buf)
    return buf.getvalue()


def edit_program(data: bytes, change: Callable[[dict[str, Any], dict[str, Any]], None]) -> bytes:
    """A well-formed artifact (fresh manifest and checksums) whose program/weights JSON ``change`` edited."""
    contents = read_archive(data)
    members = {n: bytes(contents.member(n)) for n in contents.names if n != "manifest.json"}
    program = wire.decode_json(contents.member("program.json"))
    weights = wire.decode_json(contents.member("weights.json"))
    change(program, weights)
    members["program.json"] = wire.encode(program)
    members["weights.json"] = json.dumps(weights, sort_keys=True).encode()
    out = io.BytesIO()
    write_archive(out, members, schema_version=contents.schema_version, torch_version="test")
    return out.getvalue()


def rename(data: bytes, old: str, new: str, *, where: Callable[[str], bool] = lambda path: True) -> bytes:
    """Rename every string value and dict key equal to ``old`` (whose JSON path passes ``where``)."""
    hits = []

    def walk(v: Any, path: str) -> Any:
        if isinstance(v, dict):
            return {(new if k == old and where(path) and not hits.append(path) else k): walk(x, f"{path}.{k}")
                    for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x, f"{path}[{i}]") for i, x in enumerate(v)]
        if v == old and where(path):
            hits.append(path)
            return new
        return v

    def change(program: dict, weights: dict) -> None:
        program.update(walk(program, "program"))
        weights.update(walk(weights, "weights"))

    out = edit_program(data, change)
    assert hits, f"{old!r} does not occur in the artifact"
    return out


class TookTooLong(Exception):
    """Raised by :func:`bounded` when the work ran past its bound (a hang is a failure, never a skip)."""


@contextlib.contextmanager
def bounded(seconds: float):
    """Interrupt the block after ``seconds`` (far above what a refusal takes, far below the old hangs)."""
    def fire(signum, frame):
        raise TookTooLong(f"still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
