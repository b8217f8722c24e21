"""Differential harness: does the program ``serde.load(serde.save(ep))`` behave like ``ep``?

:func:`differential` runs, on the same inputs (deep-copied), under the same ``torch.manual_seed`` and
from the same initial parameter and buffer values:

- ``exported``: ``ep.module()`` (the reference);
- ``torch``: ``torch.export.load(torch.export.save(ep))`` (what torch's own round trip gives);
- ``ours``: ``serde.load(serde.save(ep))`` (or whatever the ``save``/``load`` arguments make).

Per input it records the outputs, the user inputs and buffers after the call, the next draws of
the global RNG (how much randomness the call consumed), or the exception the call raised. Inputs are
the given ones plus *dimension variants* made from the placeholders' symbolic shapes: every symbol
at each bound of its range and one past it, and every input dimension on its own one larger (which
breaks each relation between dims: equal dims, ``d`` vs ``d + 1``, static sizes). Both sides must
accept or reject the same inputs (and raise the same family of exception).

Differences of ``ours`` against ``exported`` are what the tests assert on; differences of
``torch`` against ``exported``, and any stage where torch itself fails, are recorded for the summary.
"""

from __future__ import annotations

import copy
import io
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import sympy
import torch
import torch.utils._pytree as pytree
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind

import serde

# Kinds of difference, in report order. ``save``/``load``: the round trip raised. ``state``: the
# initial parameters/buffers differ. ``outputs``/``buffers``/``inputs`` (user input mutation): after
# a call both accepted. ``rng``: the RNG consumed differs, or outputs differ in a program that draws
# random numbers. ``rejection``: one side raised and the other did not (or another error family).
# ``unflatten``: torch.export.unflatten of ours fails or behaves differently.
KINDS = ("save", "load", "state", "outputs", "buffers", "inputs", "rng", "rejection", "unflatten", "fixture_io")

Inputs = tuple[tuple, dict]


@dataclass
class Result:
    """What :func:`differential` found for one program."""

    name: str
    diffs: dict[str, str] = field(default_factory=dict)        # ours vs exported: kind -> first detail
    torch_diffs: dict[str, str] = field(default_factory=dict)  # torch round trip vs exported
    torch_fails: dict[str, str] = field(default_factory=dict)  # stage -> error (save/load/unflatten/export)
    runs: int = 0                                             # inputs run through each program

    @property
    def status(self) -> str:
        if "export" in self.torch_fails:
            return "torch-fails"
        return "differ" if self.diffs else "match"

    def kinds(self) -> frozenset[str]:
        return frozenset(self.diffs)

    def note(self, kind: str, detail: str, *, torch_side: bool = False) -> None:
        (self.torch_diffs if torch_side else self.diffs).setdefault(kind, detail)


def serde_save(ep: ExportedProgram) -> bytes:
    buf = io.BytesIO()
    serde.save(ep, buf)
    return buf.getvalue()


def torch_save(ep: ExportedProgram) -> bytes:
    buf = io.BytesIO()
    torch.export.save(ep, buf)
    return buf.getvalue()


def torch_load(data: bytes) -> ExportedProgram:
    return torch.export.load(io.BytesIO(data))


def differential(ep: ExportedProgram, inputs: list[Inputs] | None = None, *, name: str = "",
                 seed: int = 0, variants: bool = True, unflatten: bool = True, with_torch: bool = True,
                 save: Callable[[ExportedProgram], bytes] = serde_save,
                 load: Callable[[bytes], ExportedProgram] = serde.load, max_variants: int = 24) -> Result:
    """Compare ``ep`` with its round trips (see the module docstring); never raises on a difference.

    Args:
        inputs: ``(args, kwargs)`` pairs; default ``[ep.example_inputs]``.
        variants: also run the dimension variants of the first input.
        unflatten: also compare ``torch.export.unflatten`` of ``ep`` and of ours.
        with_torch: also run torch's own save/load round trip.
        save, load: how "ours" is made from ``ep`` (tests pass deliberately wrong ones).
    """
    res = Result(name)
    inputs = list(inputs) if inputs else ([ep.example_inputs] if ep.example_inputs is not None else [])
    # Runs mutate module state; keep ``ep`` itself pristine for the round trips.
    data = _stage(res, "save", lambda: save(ep))
    ours = None if data is None else _stage(res, "load", lambda: load(data))
    if ours is None:
        return res
    theirs = None
    if with_torch:
        tdata = _stage(res, "save", lambda: torch_save(ep), torch_side=True)
        theirs = None if tdata is None else _stage(res, "load", lambda: torch_load(tdata), torch_side=True)
    all_inputs = [(f"input{i}", x) for i, x in enumerate(inputs)]
    if variants and inputs:
        all_inputs += dim_variants(ep, inputs[0])[:max_variants]
    res.runs = len(all_inputs)

    ref_f, our_f = _factory(ep), _factory(ours)
    _compare_state(res, ref_f(), our_f(), torch_side=False)
    their_f = _factory(theirs) if theirs is not None else None
    random = _draws_random(ep)
    for label, x in all_inputs:
        ref = _run(ref_f, x, seed)
        _compare_runs(res, ref, _run(our_f, x, seed), label, random, torch_side=False)
        if their_f is not None:
            _compare_runs(res, ref, _run(their_f, x, seed), label, random, torch_side=True)
    if unflatten and inputs and not _is_joint(ep):
        _compare_unflatten(res, ep, ours, inputs[0], seed)
    return res


# ---------------------------------------------------------------- running


@dataclass
class Run:
    error: BaseException | None = None
    outputs: Any = None
    inputs_after: Any = None
    buffers_after: dict[str, torch.Tensor] | None = None
    draws: torch.Tensor | None = None


def _stage(res: Result, stage: str, fn: Callable[[], Any], *, torch_side: bool = False) -> Any:
    try:
        return fn()
    except Exception as e:  # recorded, and asserted on by the caller through the result
        if torch_side:
            res.torch_fails[stage] = _describe(e)
        else:
            res.note(stage, _describe(e))
        return None


def _describe(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]


def _factory(ep: ExportedProgram) -> Callable[[], Any]:
    """Builds a fresh callable module for ``ep`` whose state is a private copy (aliasing kept)."""
    if _is_joint(ep):
        def joint():
            return _Joint(ep)
        return joint

    def fresh():
        return isolate(ep.module())
    return fresh


class _Joint:
    """A joint forward-backward graph returns gradients too, which ``.module()`` cannot unflatten."""

    def __init__(self, ep: ExportedProgram) -> None:
        self.ep = ep

    def __call__(self, *args, **kwargs):
        return self.ep.graph_module(*self.ep._graph_module_flat_inputs(args, kwargs))

    def named_buffers(self):
        return iter(())

    def named_parameters(self):
        return iter(())


def isolate(module: torch.nn.Module) -> torch.nn.Module:
    """``module`` with private copies of its parameters, buffers and tensor attributes (lifted
    constants), which keep sharing memory where the originals do: a buffer that views another stays
    a view of the other's copy, so a write through one is seen through the other, as in the
    original (a program that reorders such a read and write computes something else)."""
    storages: dict[tuple, torch.UntypedStorage] = {}
    memo: dict[int, torch.Tensor] = {}

    def copy_of(t: torch.Tensor) -> torch.Tensor:
        t = t.detach()
        if type(t) is not torch.Tensor or t.device.type == "meta":
            return t.clone()  # a subclass or a storage-less tensor: nothing to share
        s = t.untyped_storage()
        key = (s.data_ptr(), s.nbytes(), t.device)
        new = storages.get(key)
        if new is None:
            new = storages[key] = s.clone()
        return torch.empty(0, dtype=t.dtype, device=t.device).set_(new, t.storage_offset(), t.size(), t.stride())

    for mod in module.modules():
        for k, t in list(mod._buffers.items()):
            if t is not None:
                mod._buffers[k] = memo.setdefault(id(t), copy_of(t))
        for k, p in list(mod._parameters.items()):
            if p is not None:
                mod._parameters[k] = memo.setdefault(
                    id(p), torch.nn.Parameter(copy_of(p), requires_grad=p.requires_grad))
        for k, t in list(vars(mod).items()):
            if isinstance(t, torch.Tensor):
                setattr(mod, k, memo.setdefault(id(t), copy_of(t)))
    return module


def _run(factory: Callable[[], Any], x: Inputs, seed: int) -> Run:
    module = factory()
    args, kwargs = copy.deepcopy(x)
    torch.manual_seed(seed)
    try:
        with torch.no_grad():
            out = module(*args, **kwargs)
    except Exception as e:  # a rejection is a result to compare, not a failure of the harness
        return Run(error=e)
    draws = torch.rand(4)
    return Run(outputs=out, inputs_after=(args, kwargs), draws=draws,
               buffers_after={k: v.detach().clone() for k, v in module.named_buffers()})


# ---------------------------------------------------------------- comparing

_FAMILIES = (AssertionError, IndexError, KeyError, ValueError, TypeError, NotImplementedError, RuntimeError)


def error_family(e: BaseException) -> str:
    for cls in type(e).__mro__:
        if cls in _FAMILIES:
            return cls.__name__
    return "Exception"


def _compare_runs(res: Result, ref: Run, other: Run, label: str, random: bool, *, torch_side: bool) -> None:
    def note(kind: str, detail: str) -> None:
        res.note(kind, f"{label}: {detail}", torch_side=torch_side)

    if (ref.error is None) != (other.error is None):
        if ref.error is None:
            note("rejection", f"exported accepts, round trip raises {_describe(other.error)}")
        else:
            note("rejection", f"exported raises {_describe(ref.error)}, round trip accepts")
        return
    if ref.error is not None:
        fa, fb = error_family(ref.error), error_family(other.error)
        if fa != fb:
            note("rejection", f"exported raises {fa} ({_describe(ref.error)}), round trip {fb} "
                              f"({_describe(other.error)})")
        return
    d = same(ref.outputs, other.outputs)
    if d:
        note("rng" if random else "outputs", f"outputs {d}")
    d = same(ref.buffers_after, other.buffers_after)
    if d:
        note("buffers", f"buffers after the call {d}")
    d = same(ref.inputs_after, other.inputs_after)
    if d:
        note("inputs", f"inputs after the call {d}")
    d = same(ref.draws, other.draws)
    if d:
        note("rng", f"RNG draws after the call {d}")


def _compare_state(res: Result, a: Any, b: Any, *, torch_side: bool) -> None:
    for what in ("named_parameters", "named_buffers"):
        d = same(dict(getattr(a, what)()), dict(getattr(b, what)()))
        if d:
            res.note("state", f"initial {what[6:]} {d}", torch_side=torch_side)


def same(a: Any, b: Any) -> str | None:
    """None when ``a`` and ``b`` are the same pytree of bit-equal values (nan-aware), else why not."""
    la, sa = pytree.tree_flatten(a)
    lb, sb = pytree.tree_flatten(b)
    if str(sa) != str(sb):
        return f"structure {sa} != {sb}"
    for i, (x, y) in enumerate(zip(la, lb, strict=True)):
        d = _same_leaf(x, y)
        if d:
            return f"[{i}]: {d}"
    return None


def _same_leaf(x: Any, y: Any) -> str | None:
    if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
        if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)):
            return f"{type(x).__name__} != {type(y).__name__}"
        if (x.dtype, x.shape) != (y.dtype, y.shape):
            return f"{x.dtype}{list(x.shape)} != {y.dtype}{list(y.shape)}"
        x, y = x.detach(), y.detach()
        if x.is_floating_point() or x.is_complex():
            try:
                nx, ny = x.isnan(), y.isnan()
                if not torch.equal(nx, ny):
                    return "nan at different places"
                x, y = x.masked_fill(nx, 0), y.masked_fill(ny, 0)
            except (RuntimeError, NotImplementedError):
                pass  # dtypes without these kernels (float8): their raw bits must agree
        if x.numel() and not torch.equal(_bits(x), _bits(y)):
            return f"values differ (max abs diff {_max_diff(x, y)})"
        return None
    if type(x) is not type(y):
        return f"{x!r} ({type(x).__name__}) != {y!r} ({type(y).__name__})"
    if x != y and not (isinstance(x, float) and math.isnan(x) and math.isnan(y)):
        return f"{x!r} != {y!r}"
    return None


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1).contiguous().view(torch.uint8) if t.dtype != torch.bool else t.reshape(-1)


def _max_diff(x: torch.Tensor, y: torch.Tensor) -> float:
    try:
        return float((x.double() - y.double()).abs().max())
    except (RuntimeError, TypeError):
        return float("nan")


def _draws_random(ep: ExportedProgram) -> bool:
    def walk(gm: torch.fx.GraphModule) -> bool:
        for n in gm.graph.nodes:
            if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload) and (
                    torch.Tag.nondeterministic_seeded in n.target.tags):
                return True
            if n.op == "get_attr" and isinstance(getattr(gm, n.target, None), torch.fx.GraphModule):
                if walk(getattr(gm, n.target)):
                    return True
        return False
    return walk(ep.graph_module)


def _is_joint(ep: ExportedProgram) -> bool:
    joint = (OutputKind.LOSS_OUTPUT, OutputKind.GRADIENT_TO_PARAMETER, OutputKind.GRADIENT_TO_USER_INPUT)
    return any(s.kind in joint for s in ep.graph_signature.output_specs)


def _compare_unflatten(res: Result, ep: ExportedProgram, ours: ExportedProgram, x: Inputs, seed: int) -> None:
    # unflatten may change the program it is given (for the training IR's vmap calls it leaves
    # ep.module() raising "tensor may have escaped from inside a function being vmapped"): copies.
    ep, ours = _copy(ep), _copy(ours)
    try:
        ref_mod = torch.export.unflatten(ep)
    except Exception as e:  # torch cannot unflatten its own program: nothing to compare against
        res.torch_fails["unflatten"] = _describe(e)
        return
    try:
        our_mod = torch.export.unflatten(ours)
    except Exception as e:  # ours cannot be unflattened although the exported program can
        res.note("unflatten", f"unflatten raises {_describe(e)}")
        return
    ref = _run(lambda: isolate(ref_mod), x, seed)
    other = _run(lambda: isolate(our_mod), x, seed)
    if ref.error is not None and other.error is None:
        res.torch_fails["unflatten"] = f"running the unflattened exported program: {_describe(ref.error)}"
        return
    if ref.error is not None:
        return
    if other.error is not None:
        res.note("unflatten", f"running unflattened: {_describe(other.error)}")
        return
    for what in ("outputs", "buffers_after", "inputs_after", "draws"):
        d = same(getattr(ref, what), getattr(other, what))
        if d:
            res.note("unflatten", f"unflattened {what} {d}")
            return


def _copy(ep: ExportedProgram) -> ExportedProgram:
    try:
        return copy.deepcopy(ep)
    except Exception:  # e.g. custom objects that cannot be copied: unflatten the program itself
        return ep


# ---------------------------------------------------------------- dimension variants


def dim_variants(ep: ExportedProgram, base: Inputs) -> list[tuple[str, Inputs]]:
    """Inputs that probe the input guards of ``ep``, made from the placeholders' symbolic shapes.

    For each symbol of an input shape: its range's lower and upper bound (when finite) and one past
    each; for each dimension of each tensor input: that dimension alone one larger (static dims,
    equal dims and derived dims like ``d + 1`` then disagree). Tensors are refilled with their own
    values, repeated, so index-like inputs stay in range.
    """
    leaves, spec = pytree.tree_flatten(base)
    shapes = _user_input_shapes(ep)
    if shapes is None or len(shapes) != len(leaves):
        return []
    env = _bind_symbols(shapes, leaves)
    out: list[tuple[str, Inputs]] = []
    seen: set[tuple] = set()

    def add(label: str, env2: dict, bump: tuple[int, int] | None = None) -> None:
        sizes = []
        for i, shape in enumerate(shapes):
            if shape is None:
                sizes.append(None)
                continue
            s = [_evaluate(e, env2) for e in shape]
            if any(v is None or v < 0 for v in s):
                return
            if bump is not None and bump[0] == i:
                s[bump[1]] += 1
            sizes.append(tuple(s))
        key = tuple(sizes)
        if key in seen or key == tuple(tuple(leaf.shape) if sh is not None else None
                                      for sh, leaf in zip(shapes, leaves, strict=True)):
            return
        seen.add(key)
        new = [_resize(leaf, s) if s is not None else leaf for leaf, s in zip(leaves, sizes, strict=True)]
        out.append((label, pytree.tree_unflatten(new, spec)))

    for sym in sorted(env, key=str):
        vr = ep.range_constraints.get(sym)
        if vr is None:
            continue
        lo, hi = _finite(vr.lower), _finite(vr.upper)
        for tag, v in (("lower", lo), ("lower-1", None if lo is None else lo - 1),
                       ("upper", hi), ("upper+1", None if hi is None else hi + 1)):
            if v is not None and 0 <= v <= 4096:
                add(f"{sym}={v} ({tag})", {**env, sym: v})
    for i, shape in enumerate(shapes):
        for j in range(len(shape or ())):
            add(f"input{i}.shape[{j}]+1", env, (i, j))
    return out


def _user_input_shapes(ep: ExportedProgram) -> list[tuple | None] | None:
    """Per user input (flat, in order): its symbolic shape, or None for a non-tensor input."""
    vals = {n.name: n.meta.get("val") for n in ep.graph.nodes if n.op == "placeholder"}
    shapes: list[tuple | None] = []
    for s in ep.graph_signature.input_specs:
        if s.kind != InputKind.USER_INPUT:
            continue
        v = vals.get(getattr(s.arg, "name", None))
        if isinstance(v, torch.Tensor):
            shapes.append(tuple(_expr(d) for d in v.shape))
        elif hasattr(s.arg, "value") and s.arg.value is None:
            continue  # a None input is no pytree leaf
        else:
            shapes.append(None)
    return shapes


def _expr(d: Any) -> sympy.Expr:
    if isinstance(d, torch.SymInt):
        return d.node.expr
    return sympy.Integer(int(d))


def _bind_symbols(shapes: list, leaves: list) -> dict[sympy.Symbol, int]:
    env: dict[sympy.Symbol, int] = {}
    pending = []
    for shape, leaf in zip(shapes, leaves, strict=True):
        if shape is None or not isinstance(leaf, torch.Tensor):
            continue
        for e, n in zip(shape, leaf.shape, strict=False):
            if isinstance(e, sympy.Symbol):
                env.setdefault(e, int(n))
            elif e.free_symbols:
                pending.append((e, int(n)))
    for e, n in pending:  # derived dims (2*d, d + 1): solve for the one symbol not yet bound
        free = [s for s in e.free_symbols if s not in env]
        if len(free) == 1:
            known = {k: sympy.Integer(v) for k, v in env.items()}
            sol = [v for v in sympy.solve(sympy.Eq(e.xreplace(known), n), free[0]) if v.is_integer]
            if sol:
                env[free[0]] = int(sol[0])
    return env


def _evaluate(e: sympy.Expr, env: dict) -> int | None:
    v = e.xreplace({k: sympy.Integer(n) for k, n in env.items()})
    if v.free_symbols:
        return None
    try:
        return int(v)
    except TypeError:
        return None


def _finite(v: Any) -> int | None:
    if isinstance(v, bool) or not isinstance(v, (int, sympy.Integer)):
        return None  # int_oo, -int_oo: an open end
    f = int(v)
    return f if abs(f) < 2**31 else None


def _resize(t: Any, shape: tuple[int, ...]) -> Any:
    if not isinstance(t, torch.Tensor):
        return t
    n = math.prod(shape)
    flat = t.detach().reshape(-1)
    if flat.numel() == 0:
        new = torch.zeros(n, dtype=t.dtype)
    else:
        new = flat.repeat(-(-n // flat.numel()))[:n].clone()
    new = new.reshape(shape)
    return new.requires_grad_() if t.requires_grad else new
