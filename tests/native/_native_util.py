"""Shared helpers of the native tests: exported zoo programs, emission, lockstep comparison with eager."""

from __future__ import annotations

import copy
import functools
import random
from typing import Any

import torch
import torch.utils._pytree as pytree

from native.emit.emitter import emit
from native.format import program as P
from native.format.verify import decode
from native.run.runtime import Method
from serde.api import to_artifact_parts
from serde.archive import payload_name
from serde.testing import zoo
from tests import zoo_breadth

CASES = {c.name: c for c in zoo.CASES + zoo_breadth.CASES}

# Cases the emitter refuses on purpose, with the words its error must contain.
UNSUPPORTED = {
    "autocast": "higher-order op 'wrap_with_autocast'",
    "hints_wrapper": "higher-order op 'hints_wrapper'",
    "flex_attention": "save ep.run_decompositions()",
    "flex_attention_aten": "higher-order op 'flex_attention'",
    "associative_scan": "save ep.run_decompositions()",
    "classifier_joint": "loss outputs",
    "regressor_joint": "loss outputs",
    "torchbind": "custom object",
    "torchbind_aten": "custom object",
    "opaque_object": "custom object",
}

# The default (fast) run covers these; the rest run under -m slow.
FAST = ("mlp", "multi_output", "dynamic_arith", "signature_kinds_aten", "input_mutation_aten", "tied_weights",
        "cond", "while_loop", "map", "scan", "unbacked_item", "cond_nested", "sym_scalars",
        "effects_and_mutation_aten", "cond_operands", "cond_size_closure")


@functools.cache
def exported(name: str) -> torch.export.ExportedProgram:
    return zoo.export_case(CASES[name])


def emit_ep(ep: torch.export.ExportedProgram, **kw: Any) -> P.NativeProgram:
    """Canonicalize (as save does), emit, and pass through the binary encoding."""
    program, weights, payloads, _ = to_artifact_parts(ep)
    native = emit(program, weights, lambda sha: payloads[payload_name(sha)], **kw)
    return decode(native.encode())


def edited(native: P.NativeProgram, **changes: Any) -> bytes:
    """The file of ``native`` with some of its program's fields replaced (hostile-file tests)."""
    import msgspec

    return P.NativeProgram(msgspec.structs.replace(native.program, **changes), native.segment).encode()


@functools.cache
def emitted(name: str) -> P.NativeProgram:
    return emit_ep(exported(name))


def inputs_of(name: str) -> list[tuple[tuple, dict]]:
    """The case's example inputs followed by its other inputs (other sizes, other branches)."""
    case = CASES[name]
    torch.manual_seed(0)
    _, args, kwargs, _ = case.build()
    return [(args, kwargs)] + list(case.other_inputs())


def assert_runs_like_eager(ep: torch.export.ExportedProgram, native: P.NativeProgram,
                           inputs: list[tuple[tuple, dict]], *, arena: bool = False, check: bool = True) -> Method:
    """Run eager (``ep.module()``) and the runtime side by side over ``inputs`` in order.

    After every run: outputs equal, mutated user inputs equal, and the state (buffers) equal, so
    mutations accumulate the same way across runs. Returns the method (for trace inspection).
    """
    ref = copy.deepcopy(ep).module()
    m = Method(native, arena=arena, check=check)
    for i, (args, kwargs) in enumerate(inputs):
        a_ref, k_ref = copy.deepcopy((args, kwargs))
        a_nat, k_nat = copy.deepcopy((args, kwargs))
        with torch.no_grad():  # the runtime runs without autograd; in-place parameter updates need this too
            want = ref(*a_ref, **k_ref)
        got = m.run(*a_nat, **k_nat)
        where = f"run {i}"
        assert_same(got, want, f"{where} outputs")
        assert_same((a_nat, k_nat), (a_ref, k_ref), f"{where} inputs after the run")
        ref_state = {**dict(ref.named_parameters()), **dict(ref.named_buffers())}
        for name, t in m.state_dict().items():
            if name in ref_state:
                assert_same(t, ref_state[name], f"{where} state {name!r}")
    return m


def assert_same(got: Any, want: Any, where: str) -> None:
    g_leaves, g_spec = pytree.tree_flatten(got)
    w_leaves, w_spec = pytree.tree_flatten(want)
    assert g_spec == w_spec, f"{where}: structure {g_spec} != {w_spec}"
    for k, (g, w) in enumerate(zip(g_leaves, w_leaves, strict=True)):
        if isinstance(w, torch.Tensor):
            assert isinstance(g, torch.Tensor), f"{where}[{k}]: {type(g).__name__} instead of a tensor"
            torch.testing.assert_close(g, w.detach(), equal_nan=True, msg=lambda m, k=k: f"{where}[{k}]: {m}")
        else:
            assert type(g) is type(w) and (g == w or g != g), f"{where}[{k}]: {g!r} != {w!r}"


def run_outcome(engine: str, data: bytes, args: tuple, kwargs: dict, **options: Any) -> tuple:
    """How one runtime fares with a (maybe edited) file: ``("refused", message)`` when loading
    raises NativeFormatError, ``("error", class name)`` for any other typed error, at load or while
    running, else ``("ok", outputs, state)``. Anything else (a foreign exception) propagates."""
    from native.errors import NativeFormatError
    from native.run.runtime import load
    from serde.errors import SerializeError

    try:
        m = load(data, engine=engine, **options)
    except NativeFormatError as e:
        return ("refused", str(e))
    except SerializeError as e:
        return ("error", type(e).__name__)
    try:
        out = m.run(*args, **kwargs)
    except SerializeError as e:
        return ("error", type(e).__name__)
    return ("ok", out, m.state_dict())


def same_outcome(a: tuple, b: tuple) -> bool:
    """Equal kinds of outcome: the same refusal message, the same error class, or outputs and state
    equal bit for bit (dtype, shape, values; NaN equals NaN)."""
    if a[0] != b[0] or len(a) != len(b):
        return False
    if a[0] != "ok":
        return a == b
    la, sa = pytree.tree_flatten((a[1], a[2]))
    lb, sb = pytree.tree_flatten((b[1], b[2]))
    if sa != sb:
        return False
    for x, y in zip(la, lb, strict=True):
        if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
            if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and _same_tensor(x, y)):
                return False
        elif type(x) is not type(y) or not (x == y or (x != x and y != y)):
            return False
    return True


def _same_tensor(x: torch.Tensor, y: torch.Tensor) -> bool:
    if x.dtype != y.dtype or x.shape != y.shape:
        return False
    if x.is_floating_point() or x.is_complex():
        return torch.equal(x.isnan(), y.isnan()) and torch.equal(torch.nan_to_num(x), torch.nan_to_num(y))
    return torch.equal(x, y)


def edit_outcome(data: bytes, args: tuple, kwargs: dict, **options: Any) -> tuple:
    """Both runtimes' outcome on ``data`` (:func:`both_outcomes`), which must be the same."""
    outs = both_outcomes(data, args, kwargs, **options)
    assert same_outcome(*outs), f"the runtimes differ: Python {outs[0][:2]}, C++ {outs[1][:2]}"
    return outs[0]


def both_outcomes(data: bytes, args: tuple, kwargs: dict, **options: Any) -> list[tuple]:
    """The Python and the C++ runtime's :func:`run_outcome` on ``data`` (heap mode unless ``options``
    say otherwise, loops bounded); each run gets its own copy of the inputs.

    Memory a program allocates and never writes (a map's stacked output whose loop an edit shortened)
    is filled with NaN (or the largest integer) in both runtimes, as torch does under deterministic
    algorithms: otherwise two runs could differ by whatever the allocator handed out.
    """
    import torch.utils.deterministic

    was, warn = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        outs = []
        for engine in ("python", "cpp"):
            fresh = pytree.tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, (args, kwargs))
            outs.append(run_outcome(engine, data, *fresh, max_loop_instructions=10_000, **options))
    finally:
        torch.use_deterministic_algorithms(was, warn_only=warn)
        torch.utils.deterministic.fill_uninitialized_memory = fill
    return outs


# Integers at the edges of the widths a header decoder may use (u8..u64, i64), for hostile headers.
EDGE_INTS = [0, -1, 1, 2, 7, 99, 1 << 31, (1 << 63) - 1, 1 << 63, (1 << 64) - 1, -(1 << 63), 10_000]


def int_paths(x, path=()):
    """Paths to every int (not bool) inside decoded msgpack lists and maps."""
    if isinstance(x, bool):
        return
    if isinstance(x, int):
        yield path
    elif isinstance(x, list):
        for i, y in enumerate(x):
            yield from int_paths(y, (*path, i))
    elif isinstance(x, dict):
        for k, y in x.items():
            yield from int_paths(y, (*path, k))


def with_edge_int(base: Any, paths: list[tuple], rng: random.Random) -> tuple[tuple, Any]:
    """A copy of ``base`` (decoded msgpack) with the int at one of ``paths`` (its ``int_paths``),
    chosen by ``rng``, set to an edge value; returns (that path, the copy)."""
    doc = copy.deepcopy(base)
    path = rng.choice(paths)
    cur = doc
    for k in path[:-1]:
        cur = cur[k]
    cur[path[-1]] = rng.choice(EDGE_INTS)
    return path, doc
