"""Real exported programs for everything beyond the core zoo: higher-order ops, custom ops,
unbacked symbols, symbolic scalars, effects, other IRs and joint graphs.

Each case is a :class:`serde.testing.zoo.Case` (build with :func:`export_case`); ``other_inputs``
take the other branch of a ``cond`` or other data-dependent sizes, so a round trip that runs them
exercises both. Importing this module registers the custom ops of the test-local namespace
``pt2serde_zoo`` (an artifact that uses them loads only where this module was imported).
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn as nn
from torch._library.opaque_object import register_opaque_type
from torch._opaque_base import OpaqueBase
from torch.export import Dim, ExportedProgram

from serde.bridge.custom_objects import register_json_custom_object
from serde.testing import zoo
from serde.testing.zoo import Case, decompose, export_case  # re-exported: breadth users call them from here

__all__ = ["CASES", "NAMESPACE", "get", "export_case", "joint", "decompose"]

NAMESPACE = "pt2serde_zoo"


def joint(ep: ExportedProgram) -> ExportedProgram:
    """The joint forward-backward graph of ``ep`` (loss output, gradient outputs)."""
    from torch.export.experimental import _export_forward_backward

    return _export_forward_backward(ep)


def get(name: str) -> Case:
    return zoo.find_case(CASES, name, "breadth")


def _r(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


# ---------------------------------------------------------------- custom ops (test-local namespace)

_lib = torch.library.Library(NAMESPACE, "FRAGMENT")


@torch.library.custom_op(f"{NAMESPACE}::split3", mutates_args=())
def split3(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Several tensor returns."""
    return x + 1, x * 2, x - 1


@split3.register_fake
def _(x):
    return torch.empty_like(x), torch.empty_like(x), torch.empty_like(x)


@torch.library.custom_op(f"{NAMESPACE}::scaled_copies", mutates_args=())
def scaled_copies(x: torch.Tensor, n: int) -> list[torch.Tensor]:
    """A list of tensors."""
    return [x * (i + 1) for i in range(n)]


@scaled_copies.register_fake
def _(x, n):
    return [torch.empty_like(x) for _ in range(n)]


@torch.library.custom_op(f"{NAMESPACE}::blend", mutates_args=())
def blend(x: torch.Tensor, y: Optional[torch.Tensor] = None, scale: float = 1.0, *,
          alpha: float = 0.5, center: bool = False) -> torch.Tensor:
    """An optional tensor argument, defaults and kwarg-only arguments."""
    out = x * scale + (alpha * y if y is not None else 0.0)
    return out - out.mean() if center else out


@blend.register_fake
def _(x, y=None, scale=1.0, *, alpha=0.5, center=False):
    return torch.empty_like(x)


@torch.library.custom_op(f"{NAMESPACE}::accumulate", mutates_args=("acc",))
def accumulate(x: torch.Tensor, acc: torch.Tensor) -> None:
    """Mutates an argument: auto_functionalized in the core ATen IR."""
    acc.add_(x)


@accumulate.register_fake
def _(x, acc):
    return None


@torch.library.custom_op(f"{NAMESPACE}::record", mutates_args=())
def record(x: torch.Tensor) -> None:
    """An op with a side effect, registered as effectful: with_effects + tokens in the ATen IR."""


@record.register_fake
def _(x):
    return None


def _register_effect() -> None:
    from torch._higher_order_ops.effects import _EffectType, _register_effectful_op

    _register_effectful_op(torch.ops.pt2serde_zoo.record.default, _EffectType.ORDERED)


_register_effect()

# Schemas custom_op cannot infer: an optional tensor return, and one argument of every list and
# enum kind the schema has a union member for.
_lib.define("maybe_copy(Tensor x, bool give) -> Tensor?")
_lib.define(
    "kitchen_sink(Tensor x, Tensor[][] nested, int[][] int_lists, float[][] float_lists, str[] names, "
    "SymInt[] sizes, bool[] flags, float[] floats, SymBool[] conds, complex c, str mode, "
    "*, ScalarType dtype, Layout layout, MemoryFormat memory_format, Device device) -> Tensor"
)


def _maybe_copy(x, give):
    return x.clone() if give else None


def _kitchen_sink(x, nested, int_lists, float_lists, names, sizes, flags, floats, conds, c, mode, *,
                  dtype, layout, memory_format, device):
    total = sum(t.sum() for ts in nested for t in ts)
    scalar = sum(map(sum, int_lists)) + sum(map(sum, float_lists)) + sum(sizes) + sum(floats)
    scalar += sum(flags) + sum(conds) + len("".join(names)) + c.real + len(mode)
    return (x * scalar + total).to(dtype).to(device).contiguous(memory_format=memory_format)


_lib.impl("maybe_copy", _maybe_copy, "CompositeExplicitAutograd")
_lib.impl("kitchen_sink", _kitchen_sink, "CompositeExplicitAutograd")
torch.library.register_fake(f"{NAMESPACE}::maybe_copy", lambda x, give: torch.empty_like(x) if give else None,
                            lib=_lib)
torch.library.register_fake(
    f"{NAMESPACE}::kitchen_sink",
    lambda x, *a, dtype, layout, memory_format, device, **k: torch.empty_like(x, dtype=dtype, device=device),
    lib=_lib,
)


# ---------------------------------------------------------------- custom objects


class Scaler(OpaqueBase):
    """An opaque (reference) object a custom op consumes; saved through a JSON codec."""

    def __init__(self, factor: float, bias: float) -> None:
        self.factor = factor
        self.bias = bias


# torch names an opaque type by its class's module and qualname, and artifacts record that name; the
# class keeps the module name it had when the zoo was serde.zoo_breadth so saves stay byte-identical.
Scaler.__module__ = "serde.zoo_breadth"
register_opaque_type(Scaler, typ="reference")
register_json_custom_object(Scaler, to_json=lambda s: {"factor": s.factor, "bias": s.bias},
                            from_json=lambda d: Scaler(d["factor"], d["bias"]))


@torch.library.custom_op(f"{NAMESPACE}::apply_scaler", mutates_args=())
def apply_scaler(s: Scaler, x: torch.Tensor) -> torch.Tensor:
    return x * s.factor + s.bias


@apply_scaler.register_fake
def _(s, x):
    return torch.empty_like(x)


class UnavailableOnThisTorch(RuntimeError):
    """A case this torch build cannot make (e.g. the 2.14.1 wheel ships no torchbind test library).
    The suite's conftest reports a test that meets one as skipped, with this reason; anything else
    a case raises stays a failure."""


TORCHBIND_FOO = "__torch__.torch.classes._TorchScriptTesting._Foo"


def load_torchbind_test_classes() -> bool:
    """Load torch's torchbind test library (shipped in the wheel as lib/libtorchbind_test.so) and
    its fake classes, and register a codec for ``_Foo``. False when the library is not there."""
    import os

    if not _torchbind_loaded:
        path = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorchbind_test.so")
        if not os.path.exists(path):
            return False
        torch.ops.load_library(path)
        # register_fake_operators / register_fake_classes need no expecttest (the loader helper does)
        from torch.testing._internal import torchbind_impls

        torchbind_impls.register_fake_operators()
        torchbind_impls.register_fake_classes()
        _torchbind_loaded.append(True)
    register_json_custom_object(
        TORCHBIND_FOO, to_json=lambda foo: dict(foo.__obj_flatten__()),
        from_json=lambda d: torch.classes._TorchScriptTesting._Foo(d["x"], d["y"]),
    )
    return True


_torchbind_loaded: list[bool] = []


class WithOpaque(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scaler = Scaler(2.5, -1.0)

    def forward(self, x):
        return torch.ops.pt2serde_zoo.apply_scaler(self.scaler, x) + 1


class WithTorchbind(nn.Module):
    """A torchbind object passed to an op and called through a method (call_torchbind)."""

    def __init__(self) -> None:
        super().__init__()
        if not load_torchbind_test_classes():
            raise UnavailableOnThisTorch(f"torch {torch.__version__} ships no lib/libtorchbind_test.so, whose "
                                         "_TorchScriptTesting._Foo this program holds")
        self.foo = torch.classes._TorchScriptTesting._Foo(10, 20)

    def forward(self, x):
        return x + torch.ops._TorchScriptTesting.takes_foo(self.foo, x) + self.foo.add_tensor(x)


# ---------------------------------------------------------------- higher-order ops


class CondOperands(nn.Module):
    def forward(self, x, y):
        return torch.cond(x.sum() > 0, lambda x, y: x.sin() + y, lambda x, y: x.cos() - y, (x, y))


class CondNested(nn.Module):
    """Nested cond; branches close over a parameter and a graph input; predicate on a dynamic size."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4))

    def forward(self, x, p):
        w = self.w

        def outer_true(x):
            return torch.cond(x.mean() > 0, lambda x: x * w, lambda x: x + w, (x,))

        def outer_false(x):
            return x - p.sum()

        return torch.cond(x.shape[0] > 2, outer_true, outer_false, (x,))


class CondSizeClosure(nn.Module):
    """Branches close over a dynamic size: the operands mix a tensor and a SymInt."""

    def forward(self, x):
        n = x.shape[0]
        return torch.cond(x.sum() > 0, lambda x: x * n + 1, lambda x: x - n, (x,))


class Map(nn.Module):
    def forward(self, xs, y):
        from torch._higher_order_ops.map import map as control_flow_map

        return control_flow_map(lambda x, y: x * y + 1, xs, y)


class WhileLoop(nn.Module):
    def forward(self, i, x):
        from torch._higher_order_ops.while_loop import while_loop

        return while_loop(lambda i, x: i < 5, lambda i, x: (i + 1, x * 2 + i), (i, x))


class Scan(nn.Module):
    def forward(self, init, xs):
        from torch._higher_order_ops.scan import scan

        def step(carry, x):
            nxt = carry * 0.5 + x
            return nxt, nxt.sum()

        return scan(step, init, xs)


class AssociativeScan(nn.Module):
    def forward(self, xs):
        from torch._higher_order_ops.associative_scan import associative_scan

        return associative_scan(lambda a, b: a + b, xs, dim=0, combine_mode="generic")


class AssociativeScanPair(nn.Module):
    """A pytree of two tensors scanned along dim 1: running product and running maximum."""

    def forward(self, xs, ys):
        from torch._higher_order_ops.associative_scan import associative_scan

        def combine(a, b):
            return a[0] * b[0], torch.maximum(a[1], b[1])

        return associative_scan(combine, (xs, ys), dim=1, combine_mode="generic")


class FlexAttention(nn.Module):
    """flex_attention with a score_mod and a causal block mask (a tuple mixing ints, tensors, None
    and the mask graph: Argument.as_tuple)."""

    def forward(self, q, k, v):
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        def score_mod(score, b, h, q_idx, kv_idx):
            return score + (q_idx - kv_idx) * 0.1

        def causal(b, h, q_idx, kv_idx):
            return q_idx >= kv_idx

        mask = create_block_mask(causal, None, None, q.shape[2], k.shape[2], device="cpu")
        return flex_attention(q, k, v, score_mod=score_mod, block_mask=mask)


@torch.compiler.nested_compile_region
def _region(x, y):
    return torch.mm(x, y).relu()


class InvokeSubgraph(nn.Module):
    def forward(self, x, y):
        return _region(x, y) + _region(y, x)


class SetGrad(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        with torch.no_grad():
            y = self.lin(x)
        return y + self.lin(x)


class Autocast(nn.Module):
    def forward(self, x, y):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            z = x @ y
        return z.float() + 1


class HintsWrapper(nn.Module):
    """hints_wrapper: a subgraph plus a str-keyed dict of hints (as_string_to_argument)."""

    def forward(self, x):
        from torch._higher_order_ops.hints_wrap import hints_wrapper

        return hints_wrapper(lambda x: x.relu() + 1, (x,), {}, hints={"tag": "block", "depth": 3, "fused": True})


class Indexing(nn.Module):
    """Advanced indexing with a None in the index list (index.Tensor takes Tensor?[])."""

    def forward(self, x, idx):
        return x[:, idx] * 2, x[idx]


class NamedResults(nn.Module):
    """torch's named results (torch.return_types) as outputs, nested in a dict, and as an input."""

    def forward(self, x, prev):
        return torch.max(x, 0), {"top": torch.topk(x, 2, dim=1)}, prev.values + prev.indices


class Mutating(nn.Module):
    """A custom op that mutates a buffer and a user input, and an effectful op."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("acc", torch.zeros(3))

    def forward(self, x, out):
        torch.ops.pt2serde_zoo.record(x)
        torch.ops.pt2serde_zoo.accumulate(x, self.acc)
        torch.ops.pt2serde_zoo.accumulate(x * 2, out)
        y = x + self.acc
        torch.ops.pt2serde_zoo.record(y)
        return y


# ---------------------------------------------------------------- custom ops


class CustomOps(nn.Module):
    def forward(self, x, y):
        a, b, c = torch.ops.pt2serde_zoo.split3(x)
        parts = torch.ops.pt2serde_zoo.scaled_copies(a, 3)
        m1 = torch.ops.pt2serde_zoo.blend(b, y, alpha=2.0)
        m2 = torch.ops.pt2serde_zoo.blend(c, None, 3.0, center=True)
        kept = torch.ops.pt2serde_zoo.maybe_copy(m1, True)
        dropped = torch.ops.pt2serde_zoo.maybe_copy(m1, False)
        return parts[0] + parts[2] + m2 + kept, dropped


class KitchenSink(nn.Module):
    """Passes a value of every list and enum kind to one custom op."""

    def forward(self, x, y):
        n = x.shape[0]
        return torch.ops.pt2serde_zoo.kitchen_sink(
            x, [[x, y], [y]], [[1, 2], [3]], [[0.5], [1.5, -2.0]], ["a", "bc"], [n, 2], [True, False],
            [0.5, 0.25], [n > 2, n < 2], 1.5 - 2j, "fast",
            dtype=torch.float64, layout=torch.strided, memory_format=torch.contiguous_format,
            device=torch.device("cpu"),
        )


# ---------------------------------------------------------------- unbacked and symbolic values


class Unbacked(nn.Module):
    """.item() with _check/_check_is_size, nonzero, a data-dependent output size."""

    def forward(self, x, n):
        k = n.item()
        torch._check_is_size(k)
        torch._check(k <= 8)
        nz = x.nonzero()
        return torch.zeros(k, 2), nz, nz.shape[0] + 1, torch.masked_select(x, x > 0)


class UnbackedInCond(nn.Module):
    """Unbacked symbols born inside a cond branch, and one the branch shares with its caller."""

    def forward(self, x, n):
        def true_fn(x, n):
            k = n.item()
            torch._check(k >= 0)
            torch._check(k <= 4)
            return x[:k].sum(0, keepdim=True) + x.nonzero().shape[0]

        y = torch.cond(x.sum() > 0, true_fn, lambda x, n: x[:1] * 2, (x, n))
        return y, x.nonzero()


class SymScalars(nn.Module):
    """SymBool and SymFloat values, sym_not/max/min/ite, //, % and ** inside sizes."""

    def forward(self, x, y):
        a, b = x.shape[0], y.shape[0]
        big = torch.sym_max(a, b)
        small = torch.sym_min(a, b)
        pick = torch.sym_ite(a > b, a, b)
        differ = torch.sym_not(a == b)
        ratio = torch.sym_float(a) / 3.0
        z = torch.zeros(big, small + a // 2 + a % 3 + a ** 2)
        return z, pick, differ, ratio, x * ratio


_a = Dim("a", min=2, max=20)
_b = Dim("b", min=2, max=20)
_n = Dim("n", min=1, max=10)


# ---------------------------------------------------------------- IRs


class Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 3)
        self.register_buffer("scale", torch.full((3,), 0.5))

    def forward(self, x, target):
        logits = self.lin(x) * self.scale
        return nn.functional.cross_entropy(logits, target), logits.detach()


class ParameterUpdate(nn.Module):
    """Updates a parameter in place under no_grad: a parameter mutation in the ATen IR."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(3))

    def forward(self, x):
        with torch.no_grad():
            self.w.mul_(0.5)
        return x * self.w


class Regressor(nn.Module):
    """A scalar loss of an input that requires grad: the joint graph has a gradient for it too."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x):
        return ((self.lin(x) - 1.0) ** 2).mean(), x.detach().sum(1)


CASES: list[Case] = [
    # higher-order ops (training IR unless the name says aten)
    Case("cond_operands", lambda: (CondOperands(), (_r(3, 4).abs(), _r(3, 4)), {}, None),
         other_inputs=lambda: [((-_r(3, 4).abs(), _r(3, 4)), {})], tags=("hop", "cond")),
    Case("cond_nested", lambda: (CondNested(), (_r(3, 4).abs(), _r(2)), {}, ({0: _n}, None)),
         other_inputs=lambda: [((-_r(5, 4).abs(), _r(2)), {}), ((_r(1, 4), _r(2)), {})], tags=("hop", "cond")),
    Case("cond_nested_aten", lambda: (CondNested(), (_r(3, 4).abs(), _r(2)), {}, ({0: _n}, None)),
         post=decompose, other_inputs=lambda: [((-_r(5, 4).abs(), _r(2)), {}), ((_r(1, 4), _r(2)), {})],
         tags=("hop", "cond", "aten")),
    Case("cond_size_closure", lambda: (CondSizeClosure(), (_r(3, 2).abs(),), {}, ({0: _n},)),
         other_inputs=lambda: [((-_r(6, 2).abs(),), {}), ((_r(2, 2).abs(),), {})], tags=("hop", "cond", "dynamic")),
    Case("map", lambda: (Map(), (_r(5, 3), _r(3)), {}, None), tags=("hop",)),
    Case("while_loop", lambda: (WhileLoop(), (torch.tensor(0), _r(3)), {}, None),
         other_inputs=lambda: [((torch.tensor(3), _r(3)), {})], tags=("hop",)),
    Case("scan", lambda: (Scan(), (torch.zeros(3), _r(4, 3)), {}, None), tags=("hop",)),
    # the training IR traces associative_scan through torch.func.vmap (predispatch calls)
    Case("associative_scan", lambda: (AssociativeScanPair(), (_r(3, 5), _r(3, 5)), {}, None),
         tags=("hop", "training_ir")),
    Case("associative_scan_aten", lambda: (AssociativeScan(), (_r(4, 3),), {}, None), post=decompose,
         tags=("hop", "aten")),
    Case("flex_attention", lambda: (FlexAttention(), (_r(1, 2, 128, 8), _r(1, 2, 128, 8), _r(1, 2, 128, 8)), {}, None),
         other_inputs=lambda: [((_r(1, 2, 128, 8), _r(1, 2, 128, 8), _r(1, 2, 128, 8)), {})],
         tags=("hop", "training_ir")),
    Case("flex_attention_aten", lambda: (FlexAttention(), (_r(1, 2, 128, 8), _r(1, 2, 128, 8), _r(1, 2, 128, 8)), {},
                                         None), post=decompose, tags=("hop", "aten")),
    # non-strict export inlines nested_compile_region; strict export keeps invoke_subgraph
    Case("invoke_subgraph", lambda: (InvokeSubgraph(), (_r(3, 3), _r(3, 3)), {}, None), tags=("hop", "strict")),
    Case("set_grad_enabled", lambda: (SetGrad(), (_r(2, 3),), {}, None), tags=("hop", "training_ir")),
    Case("autocast", lambda: (Autocast(), (_r(3, 3), _r(3, 3)), {}, None), tags=("hop", "training_ir")),
    Case("hints_wrapper", lambda: (HintsWrapper(), (_r(3, 2),), {}, None), tags=("hop",)),
    Case("indexing", lambda: (Indexing(), (_r(4, 5), torch.tensor([3, 0, 1])), {}, None), tags=("ops",)),
    Case("named_results", lambda: (NamedResults(), (_r(5, 4), torch.min(_r(3, 4), 0)), {}, ({0: _n}, [None, None])),
         other_inputs=lambda: [((_r(7, 4), torch.min(_r(2, 4), 0)), {})], tags=("ops", "pytree", "dynamic")),
    Case("effects_and_mutation", lambda: (Mutating(), (_r(3), torch.zeros(3)), {}, None),
         tags=("custom_op", "effects")),
    Case("effects_and_mutation_aten", lambda: (Mutating(), (_r(3), torch.zeros(3)), {}, None), post=decompose,
         tags=("custom_op", "effects", "aten", "hop")),
    # custom ops
    Case("custom_ops", lambda: (CustomOps(), (_r(3), _r(3)), {}, None), tags=("custom_op",)),
    Case("custom_ops_aten", lambda: (CustomOps(), (_r(3), _r(3)), {}, None), post=decompose,
         tags=("custom_op", "aten")),
    Case("kitchen_sink", lambda: (KitchenSink(), (_r(3, 2), _r(3, 2)), {}, ({0: _n}, {0: _n})),
         other_inputs=lambda: [((_r(6, 2), _r(6, 2)), {})], tags=("custom_op", "dynamic")),
    # custom objects
    Case("opaque_object", lambda: (WithOpaque(), (_r(3),), {}, None), tags=("custom_obj",)),
    Case("torchbind", lambda: (WithTorchbind(), (_r(2),), {}, None), tags=("custom_obj",)),
    Case("torchbind_aten", lambda: (WithTorchbind(), (_r(2),), {}, None), post=decompose,
         tags=("custom_obj", "aten", "effects")),
    # unbacked and symbolic values
    Case("unbacked", lambda: (Unbacked(), (torch.tensor([1.0, 0, 2, 0]), torch.tensor(3)), {}, None),
         other_inputs=lambda: [((torch.tensor([1.0, 5, 2, -1]), torch.tensor(7)), {})], tags=("unbacked",)),
    Case("unbacked_aten", lambda: (Unbacked(), (torch.tensor([1.0, 0, 2, 0]), torch.tensor(3)), {}, None),
         post=decompose, other_inputs=lambda: [((torch.tensor([0.0, 0, 2, 0]), torch.tensor(0)), {})],
         tags=("unbacked", "aten")),
    Case("unbacked_in_cond", lambda: (UnbackedInCond(), (torch.tensor([1.0, 0, 2, 3]), torch.tensor(3)), {}, None),
         other_inputs=lambda: [((torch.tensor([-1.0, 0, -2, -3]), torch.tensor(1)), {})],
         tags=("unbacked", "hop", "cond")),
    Case("sym_scalars", lambda: (SymScalars(), (_r(5), _r(7)), {}, ({0: _a}, {0: _b})),
         other_inputs=lambda: [((_r(9), _r(3)), {}), ((_r(4), _r(4)), {})], tags=("symbolic", "dynamic")),
    Case("sym_scalars_aten", lambda: (SymScalars(), (_r(5), _r(7)), {}, ({0: _a}, {0: _b})), post=decompose,
         other_inputs=lambda: [((_r(9), _r(3)), {})], tags=("symbolic", "dynamic", "aten")),
    # IRs
    Case("classifier", lambda: (Classifier(), (_r(5, 4), torch.randint(0, 3, (5,))), {}, None), tags=("ir",)),
    Case("classifier_aten", lambda: (Classifier(), (_r(5, 4), torch.randint(0, 3, (5,))), {}, None),
         post=decompose, tags=("ir", "aten")),
    Case("classifier_joint", lambda: (Classifier(), (_r(5, 4), torch.randint(0, 3, (5,))), {}, None),
         post=joint, tags=("ir", "joint")),
    Case("parameter_mutation_aten", lambda: (ParameterUpdate(), (_r(3),), {}, None), post=decompose,
         tags=("ir", "aten", "signature")),
    Case("regressor_joint", lambda: (Regressor(), (_r(5, 4).requires_grad_(),), {}, None), post=joint,
         tags=("ir", "joint")),
]
