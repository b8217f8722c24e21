"""Operator target allow-list: targets harvested from real exports round-trip, hostile names are
refused, custom ops resolve only when registered, and extensions plug in under their own prefix."""

from __future__ import annotations

import math
import operator

import pytest
import torch
from torch.export import Dim, export

from serde.bridge import operators
from serde.bridge.operators import (
    HIGHER_ORDER_OPS,
    SYMBOLIC_TARGETS,
    deserialize_target,
    register_extension,
    serialize_target,
)
from serde.errors import UnknownOperatorError, UnsafeArtifactError, UnsupportedConstructError

# In torch's own list of symbolic ops, but tracing never leaves them in a graph in torch 2.13:
# `+a` is a no-op and torch.sym_int of a SymFloat traces to math.trunc.
_NOT_SEEN_IN_EXPORTS = {"_operator.pos", "torch.sym_int"}


@torch.library.custom_op("pt2serde_test_ops::scale", mutates_args=())
def _scale(x: torch.Tensor, k: float) -> torch.Tensor:
    return x * k


@_scale.register_fake
def _scale_fake(x, k):
    return torch.empty_like(x)


class _Everything(torch.nn.Module):
    """Every kind of call_function target: aten ops, a custom op, a higher-order op, getitem of
    a multi-output op, and all symbolic size arithmetic."""

    def forward(self, x, y):
        a, b = x.shape[0], y.shape[0]
        f = torch.sym_float(a)
        sizes = [
            a // 2, a % 3 + 1, a ** 2, -operator.neg(a), abs(a - 100), torch.sym_max(a, b),
            torch.sym_min(a, b), math.floor(a / 3), math.ceil(a / 3), math.trunc(f * 1.5),
            torch.sym_int(torch.sym_sqrt(a)), (a & 6) + 1, a | 1, a << 1, a >> 2, a - 1,
            torch.sym_sum([a, b, 1]), round(f / 3), torch.sym_ite(torch.sym_not(a > b), a, b),
            torch.sym_ite(a == b, a, b), torch.sym_ite(a != b, a, b), torch.sym_ite(a < b, a, b),
            torch.sym_ite(b <= a + 1, a, b), torch.sym_ite(a >= b, a, b),
        ]
        top = torch.topk(x, 2, dim=0).values
        branch = torch.cond(a > 4, lambda t: t + 1, lambda t: t - 1, (x,))
        return [torch.ones(s) for s in sizes], top, branch, torch.ops.pt2serde_test_ops.scale(x, 2.0)


@pytest.fixture(scope="module")
def exported_targets() -> list:
    torch.manual_seed(0)
    ep = export(_Everything(), (torch.randn(8, 3), torch.randn(5, 3)),
                dynamic_shapes=({0: Dim.AUTO}, {0: Dim.AUTO}))
    found = {}
    for gm in ep.graph_module.modules():  # the cond branches are submodules
        if isinstance(gm, torch.fx.GraphModule):
            for node in gm.graph.nodes:
                if node.op == "call_function":
                    found[id(node.target)] = node.target
    return list(found.values())


def test_every_exported_target_round_trips(exported_targets):
    names = set()
    for i, target in enumerate(exported_targets):
        name = serialize_target(target, where=f"graph.nodes[{i}]")
        assert deserialize_target(name, where=f"graph.nodes[{i}]") is target
        names.add(name)
    assert "torch.ops.higher_order.cond" in names
    assert "torch.ops.pt2serde_test_ops.scale.default" in names
    assert "torch.ops.aten.topk.default" in names
    # The symbolic table is exactly what exports produce (plus the two documented exceptions).
    symbolic = {n for n in names if n in SYMBOLIC_TARGETS}
    assert set(SYMBOLIC_TARGETS) - symbolic == _NOT_SEEN_IN_EXPORTS


@pytest.mark.parametrize("name", sorted(SYMBOLIC_TARGETS))
def test_symbolic_targets_round_trip(name):
    fn = deserialize_target(name, where="t")
    assert fn is SYMBOLIC_TARGETS[name]
    assert serialize_target(fn, where="t") == name
    assert name == f"{fn.__module__}.{fn.__name__}"  # the wire name is the callable's own name


def test_read_aliases():
    assert deserialize_target("torch.sym_sqrt", where="t") is torch.sym_sqrt
    assert deserialize_target("operator.getitem", where="t") is operator.getitem


@pytest.mark.parametrize("name", sorted(HIGHER_ORDER_OPS))
def test_higher_order_ops_round_trip(name):
    op = deserialize_target(f"torch.ops.higher_order.{name}", where="t")
    assert isinstance(op, torch._ops.HigherOrderOperator)
    assert serialize_target(op, where="t") == f"torch.ops.higher_order.{name}"


@pytest.mark.parametrize(
    "op",
    [torch.ops.aten.add.Tensor, torch.ops.aten.relu.default, torch.ops.aten.sym_size.int,
     torch.ops.aten.__and__.Tensor, torch.ops.aten._assert_scalar.default],
    ids=str,
)
def test_op_overload_round_trip(op):
    name = serialize_target(op, where="t")
    assert name == f"torch.ops.{op.namespace}.{op._opname}.{op._overloadname}"
    assert deserialize_target(name, where="t") is op


HOSTILE = [
    "builtins.eval", "builtins.exec", "builtins.__import__", "os.system", "torch.load", "torch.save",
    "subprocess.run", "pickle.loads", "torch.ops.aten.__class__", "torch.ops.aten.__class__.default",
    "torch.ops.aten.add.__class__", "torch.ops.aten.add.Tensor.__call__", "torch.ops.aten.add",
    "torch.ops.load_library", "torch.ops.import_module.x", "torch.ops.higher_order.print",
    "torch.ops.higher_order.inline_asm_elementwise", "torch.ops.higher_order.__class__",
    "torch.ops.higher_order.cond.__call__", "_operator.attrgetter", "_operator.methodcaller",
    "math.__loader__", "torch.sym_max.__globals__", "torch.ops.__init__.x.y", "", "torch.ops.",
    "torch.ops.aten.add.Tensor ", "torch.ops.aten.add.Ten-sor",
]


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_names_rejected(name):
    with pytest.raises(UnsafeArtifactError) as info:
        deserialize_target(name, where="graph.nodes[7]")
    assert str(info.value).startswith("graph.nodes[7]: node target ")
    assert repr(name) in str(info.value)


def test_non_string_target_rejected():
    with pytest.raises(UnsafeArtifactError, match="must be a string"):
        deserialize_target(["os", "system"], where="graph.nodes[1]")  # type: ignore[arg-type]


def test_unregistered_op_is_unknown_and_says_how_to_fix():
    with pytest.raises(UnknownOperatorError) as info:
        deserialize_target("torch.ops.pt2serde_test_absent.nope.default", where="graph.nodes[4]")
    msg = str(info.value)
    assert msg.startswith("graph.nodes[4]: operator pt2serde_test_absent::nope.default is not registered")
    assert "torch.library.custom_op" in msg and "torch.ops.load_library" in msg


def test_unknown_overload_of_known_op():
    with pytest.raises(UnknownOperatorError, match="aten::add.NoSuchOverload"):
        deserialize_target("torch.ops.aten.add.NoSuchOverload", where="n")


def test_custom_op_round_trips():
    op = torch.ops.pt2serde_test_ops.scale.default
    assert serialize_target(op, where="t") == "torch.ops.pt2serde_test_ops.scale.default"
    assert deserialize_target("torch.ops.pt2serde_test_ops.scale.default", where="t") is op


def test_custom_op_becomes_known_once_defined():
    name = "torch.ops.pt2serde_test_late::twice".replace("::", ".") + ".default"
    with pytest.raises(UnknownOperatorError):
        deserialize_target(name, where="n")

    @torch.library.custom_op("pt2serde_test_late::twice", mutates_args=())
    def twice(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    assert deserialize_target(name, where="n") is torch.ops.pt2serde_test_late.twice.default


@pytest.mark.parametrize(
    "target",
    [print, eval, lambda x: x, torch.load, operator.attrgetter("x"), torch.nn.functional.relu,
     torch.ops.higher_order.print, torch.ops.aten.add, "torch.ops.aten.add.Tensor"],
    ids=["print", "eval", "lambda", "torch.load", "attrgetter", "F.relu", "hop-print", "packet", "str"],
)
def test_unsupported_callables_named_on_save(target):
    with pytest.raises(UnsupportedConstructError) as info:
        serialize_target(target, where="graph.nodes[0]")
    assert str(info.value).startswith("graph.nodes[0]: ")


class _Kernel:
    """A stand-in for a third-party callable that is neither a torch op nor symbolic."""

    def __init__(self, name):
        self.name = name

    def __call__(self, x):
        return x


def test_extension_round_trip(monkeypatch):
    monkeypatch.setattr(operators, "_EXTENSIONS", {})
    kernels = {"pt2serde_test_ext.k1": _Kernel("k1")}

    def resolve(name):
        if name not in kernels:
            raise UnknownOperatorError(f"no kernel {name}")
        return kernels[name]

    def name_of(target):
        return f"pt2serde_test_ext.{target.name}" if isinstance(target, _Kernel) else None

    register_extension("pt2serde_test_ext.", resolve, name_of)
    k1 = kernels["pt2serde_test_ext.k1"]
    assert serialize_target(k1, where="t") == "pt2serde_test_ext.k1"
    assert deserialize_target("pt2serde_test_ext.k1", where="t") is k1
    with pytest.raises(UnknownOperatorError, match="no kernel"):
        deserialize_target("pt2serde_test_ext.k2", where="t")
    # Extensions do not widen anything else.
    with pytest.raises(UnsafeArtifactError):
        deserialize_target("builtins.eval", where="t")


def test_extension_errors_are_wrapped(monkeypatch):
    monkeypatch.setattr(operators, "_EXTENSIONS", {})

    def resolve(name):
        raise KeyError(name)

    register_extension("pt2serde_test_ext.", resolve, lambda t: None)
    with pytest.raises(UnknownOperatorError, match="KeyError"):
        deserialize_target("pt2serde_test_ext.zz", where="graph.nodes[2]")


def test_extension_name_outside_prefix_is_refused(monkeypatch):
    monkeypatch.setattr(operators, "_EXTENSIONS", {})
    register_extension("pt2serde_test_ext.", lambda n: None, lambda t: "os.system")
    with pytest.raises(UnsupportedConstructError, match="outside its prefix"):
        serialize_target(_Kernel("k"), where="t")


@pytest.mark.parametrize("prefix", ["", "torch.", "torch.ops.mylib.", "_operator.", "math.", "builtins.", "tor"])
def test_extension_prefix_may_not_shadow_builtins(monkeypatch, prefix):
    monkeypatch.setattr(operators, "_EXTENSIONS", {})
    with pytest.raises(ValueError, match="prefix"):
        register_extension(prefix, lambda n: None, lambda t: None)


def test_extension_prefixes_may_not_overlap(monkeypatch):
    monkeypatch.setattr(operators, "_EXTENSIONS", {})
    register_extension("pt2serde_test_ext.", lambda n: None, lambda t: None)
    with pytest.raises(ValueError, match="overlaps"):
        register_extension("pt2serde_test_ext.sub.", lambda n: None, lambda t: None)
