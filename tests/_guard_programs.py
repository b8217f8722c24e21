"""Programs whose exports carry input guards, shared by the guard tests of serde (save/load keeps
them) and of native (the runtime enforces them).

Each ``export_*`` function exports one fresh program; the guards it carries are named in its docstring.
With ``strict=True`` torch writes the same guards against ``L['flat_args'][i]``, the i-th flattened input.
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


class KwargsOrder(torch.nn.Module):
    def forward(self, x, a=None, b=None):
        if a.shape[0] > 2:
            return x.sum() + a.sum() * 2 + b.sum()
        return x.sum()


class IntInput(torch.nn.Module):
    def forward(self, x, n):
        if n > x.shape[0]:
            return x * n
        return x - n


def export_derived(strict: bool = False) -> torch.export.ExportedProgram:
    """y.size(0) == x.size(0) + 1 (a derived dim)."""
    dx = Dim("dx")
    return torch.export.export(Derived(), (T(4), T(5)), dynamic_shapes={"x": {0: dx}, "y": {0: dx + 1}},
                               strict=strict)


def export_doubled(strict: bool = False) -> torch.export.ExportedProgram:
    """w.size(0) == 2 * x.size(0), 2 <= x.size(0) <= 10."""
    d = Dim("d", min=2, max=10)
    return torch.export.export(Doubled(), (T(4), T(8)), dynamic_shapes={"x": {0: d}, "w": {0: 2 * d}},
                               strict=strict)


def export_same(strict: bool = False) -> torch.export.ExportedProgram:
    """x and y share a dim of at most 64."""
    d = Dim("d", max=64)
    return torch.export.export(Same(), (T(3, 2), T(3, 2)), dynamic_shapes={"x": {0: d}, "y": {0: d}},
                               strict=strict)


def export_divisible(strict: bool = False) -> torch.export.ExportedProgram:
    """x.size(0) % 4 == 0 and x.size(0) > 3, found by export from the branch."""
    return torch.export.export(Divisible(), (T(8),), dynamic_shapes={"x": {0: Dim.AUTO}}, strict=strict)


def export_bounded(strict: bool = False) -> torch.export.ExportedProgram:
    """3 <= x.size(0) <= 6."""
    return torch.export.export(Bounded(), (T(4),), dynamic_shapes={"x": {0: Dim("b", min=3, max=6)}},
                               strict=strict)


def export_auto_relations(strict: bool = False) -> torch.export.ExportedProgram:
    """Relations between automatic dims of two inputs."""
    return torch.export.export(AutoRelations(), (T(2, 3), T(3, 5)),
                               dynamic_shapes={"x": {0: Dim.AUTO, 1: Dim.AUTO}, "y": {0: Dim.AUTO, 1: Dim.AUTO}},
                               strict=strict)


def export_nested(strict: bool = False) -> torch.export.ExportedProgram:
    """A guard between a positional input and a tensor nested in a keyword input."""
    return torch.export.export(
        Nested(), (T(4),), cfg(6, 5),
        dynamic_shapes={"x": {0: Dim.AUTO}, "cfg": {"a": [{0: Dim.AUTO}, {0: Dim.AUTO}], "b": None}},
        strict=strict)


def export_int_input(strict: bool = False) -> torch.export.ExportedProgram:
    """A guard on an int input against a tensor size."""
    return torch.export.export(IntInput(), (T(3), 5), dynamic_shapes={"x": {0: Dim.AUTO}, "n": Dim.AUTO},
                               strict=strict)


def export_kwargs_order(strict: bool = False) -> torch.export.ExportedProgram:
    """a.size(0) > 2, with the keyword inputs passed in another order than forward declares them
    (b before a: strict export's L['flat_args'][2] is a)."""
    return torch.export.export(KwargsOrder(), (T(3),), {"b": T(4), "a": T(5)},
                               dynamic_shapes={"x": None, "a": {0: Dim.AUTO}, "b": {0: Dim.AUTO}},
                               strict=strict)


def export_reexported(strict: bool = False) -> torch.export.ExportedProgram:
    """x and y share a dim (as export_same), exported again from the first export's ep.module(), the
    pattern after pt2e quantization: the call graph names the '_guards_fn' torch installs there."""
    d = Dim("d", max=64)
    return torch.export.export(export_same().module(), (T(3, 2), T(3, 2)),
                               dynamic_shapes={"x": {0: d}, "y": {0: d}}, strict=strict)


class Wraps(torch.nn.Module):
    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(x) + 1


def export_wrapped(strict: bool = False) -> torch.export.ExportedProgram:
    """x.size(0) % 4 == 0 and x.size(0) > 3 (export_divisible), its ep.module() held as a submodule
    and exported again: the call graph names 'inner._guards_fn'."""
    return torch.export.export(Wraps(export_divisible().module()), (T(8),), dynamic_shapes={"x": {0: Dim.AUTO}},
                               strict=strict)


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


def export_squared(strict: bool = False) -> torch.export.ExportedProgram:
    """x.size(0) * x.size(0) > 20 (a power)."""
    return torch.export.export(Squared(), (T(6),), dynamic_shapes={"x": {0: Dim.AUTO}},
                               strict=strict)


def export_not_five(strict: bool = False) -> torch.export.ExportedProgram:
    """x.size(0) != 5."""
    return torch.export.export(NotFive(), (T(6),), dynamic_shapes={"x": {0: Dim.AUTO}},
                               strict=strict)


def export_max_min(strict: bool = False) -> torch.export.ExportedProgram:
    """max(y.size(0), x.size(0)) > 5 and min(...) < 4, with what export derives from them."""
    return torch.export.export(MaxMin(), (T(6), T(3)), dynamic_shapes={"x": {0: Dim.AUTO}, "y": {0: Dim.AUTO}},
                               strict=strict)


def export_halved(strict: bool = False) -> torch.export.ExportedProgram:
    """x.size(0) / 3 > 1.5 (a true division compared with a float)."""
    return torch.export.export(Halved(), (T(6),), dynamic_shapes={"x": {0: Dim.AUTO}},
                               strict=strict)


def export_summed(strict: bool = False) -> torch.export.ExportedProgram:
    """y.size(0) + x.size(0) > 7 (a sum of two inputs' sizes)."""
    return torch.export.export(Summed(), (T(4), T(5)), dynamic_shapes={"x": {0: Dim.AUTO}, "y": {0: Dim.AUTO}},
                               strict=strict)


class MaxMinOfThree(torch.nn.Module):
    def forward(self, x, y, z):
        sizes = x.shape[0], y.shape[0], z.shape[0]
        if torch.sym_max(sizes[0], torch.sym_max(sizes[1], sizes[2])) > 5 and min(*sizes) < 3:
            return x.sum() + y.sum() + z.sum()
        return x.sum()


class MaxOfConstant(torch.nn.Module):
    def forward(self, x, n):
        if torch.sym_max(4, x.shape[0]) > 5 and torch.sym_min(n, x.shape[0]) < 7:
            return x * n
        return x


def export_max_min_of_three(strict: bool = False) -> torch.export.ExportedProgram:
    """max(x, y, z sizes) > 5 and min(...) < 3: torch 2.13 writes max(a, b, c), 2.14 the nested
    torch.sym_max(a, torch.sym_max(b, c))."""
    auto = {0: Dim.AUTO}
    return torch.export.export(MaxMinOfThree(), (T(6), T(3), T(2)),
                               dynamic_shapes={"x": auto, "y": auto, "z": auto}, strict=strict)


class MaxIsFirst(torch.nn.Module):
    def forward(self, x, y):
        m = torch.sym_max(x.shape[1], y.shape[1])
        if m == x.shape[1] and m != y.shape[1]:
            return x.sum(1)
        return y.sum(1)


def export_max_is_first(strict: bool = False) -> torch.export.ExportedProgram:
    """max(x.size(1), y.size(1)) == x.size(1), then != y.size(1): an input with a wider y fails
    both, and a module reports the first (torch records them in this order; sorted, != comes first)."""
    auto = {0: Dim.AUTO, 1: Dim.AUTO}
    return torch.export.export(MaxIsFirst(), (T(2, 5), T(2, 3)), dynamic_shapes={"x": auto, "y": auto},
                               strict=strict)


def export_max_of_constant(strict: bool = False) -> torch.export.ExportedProgram:
    """max(4, x.size(0)) > 5 and min(n, x.size(0)) < 7, with an int input n."""
    return torch.export.export(MaxOfConstant(), (T(6), 5), dynamic_shapes={"x": {0: Dim.AUTO}, "n": Dim.AUTO},
                               strict=strict)


# ---------------------------------------------------------------- conv nets: strides make floor divisions
#
# A stride-s conv or pool maps a size H to (H + 2p - k) // s + 1; the strides of the contiguous
# results are products of such sizes, clamped by max(1, ...). Export writes guards over those,
# and an input whose dims share a derived dim (H = W = 32*h) gives each dim a symbol of its own.


class ChannelsLastNorm(torch.nn.LayerNorm):
    """LayerNorm over the channels of an NCHW map, through a channels-last permute (as ConvNeXt's)."""

    def forward(self, x):
        x = torch.nn.functional.layer_norm(x.permute(0, 2, 3, 1), self.normalized_shape, self.weight, self.bias)
        return x.permute(0, 3, 1, 2)


class ConvNeXtBlock(torch.nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.dw = torch.nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.norm = torch.nn.LayerNorm(c)
        self.fc = torch.nn.Linear(c, c)

    def forward(self, x):
        y = self.fc(self.norm(self.dw(x).permute(0, 2, 3, 1)))
        return x + y.permute(0, 3, 1, 2)


class TinyConvNeXt(torch.nn.Module):
    """ConvNeXt's shape: a stride-4 stem, then three stages that downsample by stride-2 convs."""

    def __init__(self, c: int = 8) -> None:
        super().__init__()
        self.stem = torch.nn.Sequential(torch.nn.Conv2d(3, c, 4, stride=4), ChannelsLastNorm(c))
        stages = [ConvNeXtBlock(c)]
        for _ in range(3):
            stages.append(torch.nn.Sequential(ChannelsLastNorm(c), torch.nn.Conv2d(c, c, 2, stride=2),
                                              ConvNeXtBlock(c)))
        self.stages = torch.nn.Sequential(*stages)

    def forward(self, x):
        return self.stages(self.stem(x)).mean((2, 3))


class PooledSkip(torch.nn.Module):
    """A stride-2 conv and a padded stride-2 max pool downsample x by 4, added to a second input y of
    a quarter of x's size, as a skip connection does, then normalized over the channels."""

    def __init__(self, c: int = 4) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, c, 3, stride=2, padding=1)
        self.pool = torch.nn.MaxPool2d(3, stride=2, padding=1)
        self.norm = ChannelsLastNorm(c)

    def forward(self, x, y):
        return self.norm(self.pool(self.conv(x)) + y).mean((2, 3))


def export_convnext(strict: bool = False) -> torch.export.ExportedProgram:
    """H = W = 32*h, 1 <= h <= 4: one input's two dims share a derived dim, and the guards hold
    floor divisions of each and max(1, ...) of them (the strides of the downsampled maps)."""
    torch.manual_seed(0)
    h = Dim("h32", min=1, max=4)
    return torch.export.export(TinyConvNeXt().eval(), (torch.randn(1, 3, 64, 64),),
                               dynamic_shapes={"x": {2: 32 * h, 3: 32 * h}}, strict=strict)


def export_convnext_hw(strict: bool = False) -> torch.export.ExportedProgram:
    """H = 32*h and W = 32*w, each a derived dim of its own."""
    torch.manual_seed(0)
    h, w = Dim("h32", min=1, max=4), Dim("w32", min=1, max=4)
    return torch.export.export(TinyConvNeXt().eval(), (torch.randn(1, 3, 64, 96),),
                               dynamic_shapes={"x": {2: 32 * h, 3: 32 * w}}, strict=strict)


def export_pooled_skip(strict: bool = False) -> torch.export.ExportedProgram:
    """x of H = W = 8*h and y of 2*h: derived dims over two inputs, through a conv and a pool."""
    torch.manual_seed(0)
    h = Dim("h", min=1, max=8)
    return torch.export.export(PooledSkip().eval(), (torch.randn(2, 3, 16, 16), torch.randn(2, 4, 4, 4)),
                               dynamic_shapes={"x": {2: 8 * h, 3: 8 * h}, "y": {2: 2 * h, 3: 2 * h}},
                               strict=strict)
