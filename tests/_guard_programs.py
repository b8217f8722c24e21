"""Programs whose exports carry input guards, shared by the guard tests of serde (save/load keeps
them) and of native (the runtime enforces them).

Each ``export_*`` function exports one fresh program; the guards it carries are named in its docstring.
"""

from __future__ import annotations

import torch
from torch.export import Dim


def T(*shape: int) -> torch.Tensor:
    return torch.ones(*shape)


def cfg(a0: int, a1: int) -> dict:
    """The keyword inputs of :class:`Nested` with ``cfg["a"]`` of lengths ``a0`` and ``a1``."""
    return {"cfg": {"a": [T(a0), T(a1)], "b": T(2)}}


class Derived(torch.nn.Module):
    def forward(self, x, y):
        return x + y[1:]


class Doubled(torch.nn.Module):
    def forward(self, x, w):
        return x.repeat(2) + w


class Same(torch.nn.Module):
    def forward(self, x, y):
        return x * 2 + y


class Divisible(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] % 4 == 0 and x.shape[0] > 3:
            return x.reshape(-1, 4).sum(0)
        return x[:4]


class Bounded(torch.nn.Module):
    def forward(self, x):
        return x.cos()


class AutoRelations(torch.nn.Module):
    def forward(self, x, y):
        # export discovers x.size(1) == y.size(0) from the matmul and y.size(1) > x.size(0) from the branch
        z = x @ y
        if z.shape[1] > x.shape[0]:
            return z.sum(0)
        return z.sum(1)


class Nested(torch.nn.Module):
    def forward(self, x, *, cfg):
        a0, a1 = cfg["a"]
        if a1.shape[0] > x.shape[0]:
            return x + a0[: x.shape[0]] + cfg["b"].sum()
        return x * 2


class IntInput(torch.nn.Module):
    def forward(self, x, n):
        if n > x.shape[0]:
            return x * n
        return x - n


def export_derived() -> torch.export.ExportedProgram:
    """y.size(0) == x.size(0) + 1 (a derived dim)."""
    dx = Dim("dx")
    return torch.export.export(Derived(), (T(4), T(5)), dynamic_shapes={"x": {0: dx}, "y": {0: dx + 1}})


def export_doubled() -> torch.export.ExportedProgram:
    """w.size(0) == 2 * x.size(0), 2 <= x.size(0) <= 10."""
    d = Dim("d", min=2, max=10)
    return torch.export.export(Doubled(), (T(4), T(8)), dynamic_shapes={"x": {0: d}, "w": {0: 2 * d}})


def export_same() -> torch.export.ExportedProgram:
    """x and y share a dim of at most 64."""
    d = Dim("d", max=64)
    return torch.export.export(Same(), (T(3, 2), T(3, 2)), dynamic_shapes={"x": {0: d}, "y": {0: d}})


def export_divisible() -> torch.export.ExportedProgram:
    """x.size(0) % 4 == 0 and x.size(0) > 3, found by export from the branch."""
    return torch.export.export(Divisible(), (T(8),), dynamic_shapes={"x": {0: Dim.AUTO}})


def export_bounded() -> torch.export.ExportedProgram:
    """3 <= x.size(0) <= 6."""
    return torch.export.export(Bounded(), (T(4),), dynamic_shapes={"x": {0: Dim("b", min=3, max=6)}})


def export_auto_relations() -> torch.export.ExportedProgram:
    """Relations between automatic dims of two inputs."""
    return torch.export.export(AutoRelations(), (T(2, 3), T(3, 5)),
                               dynamic_shapes={"x": {0: Dim.AUTO, 1: Dim.AUTO}, "y": {0: Dim.AUTO, 1: Dim.AUTO}})


def export_nested() -> torch.export.ExportedProgram:
    """A guard between a positional input and a tensor nested in a keyword input."""
    return torch.export.export(
        Nested(), (T(4),), cfg(6, 5),
        dynamic_shapes={"x": {0: Dim.AUTO}, "cfg": {"a": [{0: Dim.AUTO}, {0: Dim.AUTO}], "b": None}})


def export_int_input() -> torch.export.ExportedProgram:
    """A guard on an int input against a tensor size."""
    return torch.export.export(IntInput(), (T(3), 5), dynamic_shapes={"x": {0: Dim.AUTO}, "n": Dim.AUTO})


class Squared(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] ** 2 > 20:
            return x * 2
        return x


class NotFive(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] != 5:
            return x * 2
        return x


class MaxMin(torch.nn.Module):
    def forward(self, x, y):
        if torch.sym_max(x.shape[0], y.shape[0]) > 5 and torch.sym_min(x.shape[0], y.shape[0]) < 4:
            return x.sum() + y.sum()
        return x.sum()


class Halved(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] / 3 > 1.5:
            return x * 2
        return x


class Summed(torch.nn.Module):
    def forward(self, x, y):
        if x.shape[0] + y.shape[0] > 7:
            return x.sum() + y.sum()
        return x.sum()


def export_squared() -> torch.export.ExportedProgram:
    """x.size(0) * x.size(0) > 20 (a power)."""
    return torch.export.export(Squared(), (T(6),), dynamic_shapes={"x": {0: Dim.AUTO}})


def export_not_five() -> torch.export.ExportedProgram:
    """x.size(0) != 5."""
    return torch.export.export(NotFive(), (T(6),), dynamic_shapes={"x": {0: Dim.AUTO}})


def export_max_min() -> torch.export.ExportedProgram:
    """max(y.size(0), x.size(0)) > 5 and min(...) < 4, with what export derives from them."""
    return torch.export.export(MaxMin(), (T(6), T(3)), dynamic_shapes={"x": {0: Dim.AUTO}, "y": {0: Dim.AUTO}})


def export_halved() -> torch.export.ExportedProgram:
    """x.size(0) / 3 > 1.5 (a true division compared with a float)."""
    return torch.export.export(Halved(), (T(6),), dynamic_shapes={"x": {0: Dim.AUTO}})


def export_summed() -> torch.export.ExportedProgram:
    """y.size(0) + x.size(0) > 7 (a sum of two inputs' sizes)."""
    return torch.export.export(Summed(), (T(4), T(5)), dynamic_shapes={"x": {0: Dim.AUTO}, "y": {0: Dim.AUTO}})
