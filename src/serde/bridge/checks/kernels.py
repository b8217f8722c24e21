"""What an operator's CPU kernel checks of its arguments that its fake and meta kernels do not.

A load checks that every call binds to its operator (:mod:`~serde.bridge.checks.calls`) and, with
``propagate=True``, runs each operator again on fake tensors. Some kernels check more than their
fake or meta kernel does, so an edited call passes both and fails only when the program runs:

* ``masked_select`` takes a boolean mask broadcastable with its input (its fake kernel only names
  the data-dependent size of the result);
* ``_assert_tensor_metadata`` asserts its operand's dtype, sizes, strides, device and layout (its
  fake kernel raises AssertionError, which propagation takes for torch's own invariant, not a
  verdict);
* a random op's range: ``random_``'s and ``randint``'s ``from < to``, ``uniform_``'s ``from <= to``,
  a non-negative ``std``, probabilities in their interval, a positive ``lambd``;
* a Scalar converted to a tensor's dtype (``full``'s ``fill_value``, ``add``'s ``alpha``,
  ``clamp``'s bounds, ...) must fit it: ``full((2,), -2**63, dtype=torch.int32)`` raises "value
  cannot be converted to type int without overflow";
* the operand dtypes a CPU kernel implements: meta kernels mostly compute a result dtype and do not
  ask whether a kernel exists for it (``relu`` of a bool tensor, ``gelu`` of an integer one,
  ``bitwise_and`` of floats, a comparison of complex numbers), nor the CPU kernels' own dtype
  contracts (``layer_norm``'s and ``batch_norm``'s parameters in the input's dtype or, for a half
  or bfloat16 input, float32; ``conv2d``'s weight in its input's; ``index_put``'s values in its
  destination's). These are decided by torch itself, not a table: :func:`_cpu_dtypes` runs the
  operator's CPU kernel on small tensors of the call's dtypes (zero-dimensional ones for a pointwise
  operator, whose kernel broadcasts; the call's own sizes, when small, for the others) and takes
  the kernel's refusal when it is about a dtype. The verdict is cached per operator and operand
  dtypes (and sizes), so that a program's many calls of one signature cost one probe;
* the sizes and arguments a CPU kernel checks and its meta kernel does not (a convolution's bias
  of another length than its output channels, a negative stride): the same probe, at the call's own
  sizes, takes a refusal worded about sizes or arguments when it is not about the data and comes
  again, in the same words, on other data.

:func:`check_kernel` takes the values as they reach the kernel (fake or meta tensors, Python numbers,
dtypes, devices), so that both the graph reader and the native loader's propagation can call it. A
value only known symbolically (a SymInt) is left alone: the rules judge constants and metadata.
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch._subclasses.fake_tensor import unset_fake_temporarily

from ..errors import FIX_EDITED, InconsistentProgramError

__all__ = ["check_kernel", "kernel_refusal", "dtype_refusal", "judged", "KERNEL_OPS", "as_dtype", "as_layout"]

_Args = dict[str, Any]
_Rule = Callable[[_Args], "tuple[str, str] | None"]  # (argument, what is wrong), or None


def check_kernel(op: torch._ops.OpOverload, args: Sequence[Any], kwargs: dict[str, Any], where: str) -> None:
    """Refuse a call that ``op``'s kernel would refuse at run time, where its fake kernel does not.

    Args:
        op: the operator called.
        args, kwargs: its arguments as they reach the kernel (fake or meta tensors, Python numbers, ...),
            already bound to ``op``'s schema.
        where: the node's field path, for the message (``graph.nodes['masked_select']``).

    Raises:
        InconsistentProgramError: naming the node, the operator, the argument and the fix.
    """
    bad = kernel_refusal(op, args, kwargs)
    if bad is not None:
        raise InconsistentProgramError(f"{where}: {bad}; {FIX_EDITED}")


def kernel_refusal(op: torch._ops.OpOverload, args: Sequence[Any], kwargs: dict[str, Any], *,
                   probe: bool = False) -> str | None:
    """What ``op``'s kernel would refuse in these arguments that its fake kernel does not check, or
    None: the verdict of :func:`check_kernel` for a caller with its own error (the native loader's).

    ``probe``: also run the CPU kernel on small tensors of the call's dtypes (:func:`_cpu_dtypes`).
    The propagation passes ask for it; the default load does not, because the first probe of each
    signature costs a kernel call (a program's first load took 1.13 to 1.22 times as long with it).
    """
    rules = _RULES.get(op)
    if rules is not None and not (op in _KEYWORD_ONLY and _KEYWORD_ONLY[op] not in kwargs):
        bound = _bind(op, args, kwargs)
        for rule in rules:
            bad = rule(bound)
            if bad is not None:
                name, why = bad
                return (f"argument {name!r} of {op}: {why}; its kernel refuses this when the program runs "
                        "(its fake kernel does not check it)")
    if not judged(op, probe=probe):
        return None
    if _SYMINTS[op]:
        bad = _symint_refusal(op, args, kwargs)
        if bad is not None:
            return bad
    return dtype_refusal(op, args, kwargs) if probe else None


def dtype_refusal(op: torch._ops.OpOverload, args: Sequence[Any], kwargs: dict[str, Any]) -> str | None:
    """The probe alone (:func:`_cpu_dtypes`): what ``op``'s CPU kernel refuses of these operands'
    dtypes, or None; for a caller whose load already applied the rest of :func:`kernel_refusal`."""
    if not _probed(op):
        return None
    bad = _cpu_dtypes(op, args, kwargs)
    if bad is None:
        return None
    return (f"{op} on {bad[0]}: its CPU kernel refuses them ({bad[1]}) when the program runs (its fake kernel "
            "does not check it)")


def judged(op: torch._ops.OpOverload, *, probe: bool = False) -> bool:
    """Whether :func:`kernel_refusal` (with that ``probe``) judges calls of ``op``: a caller tests
    this before it gathers a call's values."""
    probed = _probed(op)  # (first: it reads the operator's facts)
    return (probe and probed) or op in _RULES or bool(_SYMINTS[op])


def _bind(op: torch._ops.OpOverload, args: Sequence[Any], kwargs: dict[str, Any]) -> _Args:
    """Every argument of ``op`` by name: the given ones, defaults for the rest."""
    bound: _Args = {}
    for i, (name, default) in enumerate(_PARAMS[op]):
        bound[name] = args[i] if i < len(args) else kwargs.get(name, default)
    return bound


def _num(v: Any) -> bool:
    """A plain number (a symbolic one is judged when the program runs)."""
    return type(v) in (int, float)


def _tensor(v: Any) -> bool:
    return isinstance(v, torch.Tensor)


# ---------------------------------------------------------------- the dtypes a CPU kernel implements


# Words of torch's dtype refusals: AT_DISPATCH's "not implemented for 'Bool'", the mixed-dtype checks of
# the norms, "expected scalar type", "should be the same" of the convolutions, the bool and complex
# refusals of relu, sub, sort, topk, max, ... A refusal in other words (a size, an index, data) is no
# verdict: the probe's sizes and data are not the program's.
_DTYPE_WORDS = re.compile(
    r"not implemented for '|mixed dtype|scalar type|dtype|Boolean inputs|bool tensor|complex (?:types|tensors|input)"
    r"|can't be cast to the desired output type|type \(.*\) and weight type \(.*\) should be the same"
    r"|value cannot be converted to type")
# Words of the CPU kernels' refusals of sizes and arguments that their meta kernels skip (a
# convolution's bias of the wrong length, a non-positive stride, an embedding table that is not 2-D).
# A non-pointwise operator is probed at the call's own sizes, so such a refusal is about the
# program's call, unless it is about the data (an index past a size, a singular matrix): those words
# are excluded, and the refusal must come again, in the same words, on other data.
_SIZE_WORDS = re.compile(
    r"stride|padding|dilation|\bbias\b|must be \d-D|groups|kernel size", re.IGNORECASE)
_DATA_WORDS = re.compile(
    r"out of (?:bounds|range)|index|singular|positive.definite|invertible|probabilit|nan\b|inf\b|converge"
    r"|non-?finite|\bsum|negative values|empty|lengths|values of", re.IGNORECASE)
# Operands (elements over all tensors and results) up to which a non-pointwise call is probed at its
# own sizes; past it, no verdict.
_PROBE_ELEMENTS = 1 << 16
# Operators whose CPU kernel refuses by design on data it is given (an assertion's own message),
# or prints: never probed.
_UNPROBED_PREFIXES = ("_assert", "_functional_assert", "_print", "sym_constrain", "_make_dep_token")
_PROBE_CACHE: dict[tuple, tuple[str, str] | None] = {}
# Per operator: None (not probed), or whether it is pointwise (probed on zero-dimensional tensors).
_PROBED: dict[torch._ops.OpOverload, bool | None] = {}
# Per operator: (position, name) of its SymInt and SymInt[] parameters (aten's; a factory's too).
_SYMINTS: dict[torch._ops.OpOverload, tuple[tuple[int, str], ...]] = {}


def _probed(op: torch._ops.OpOverload) -> bool:
    if op not in _PROBED:
        name = op._schema.name
        arguments = op._schema.arguments
        _PROBED[op] = (torch.Tag.pointwise in op.tags) if (
            name.startswith("aten::") and not name[6:].startswith(_UNPROBED_PREFIXES)
            and any("Tensor" in str(a.type) for a in arguments)) else None
        _SYMINTS[op] = tuple((i, a.name) for i, a in enumerate(arguments)
                             if name.startswith("aten::") and a.real_type.str().removesuffix("?").startswith("SymInt"))
    return _PROBED[op] is not None


# c10::SymInt keeps an integer below this as a symbolic node (it packs the rest into its own word),
# so a kernel that needs concrete sizes refuses it ("SymIntArrayRef expected to contain only concrete
# integers"), while meta kernels take it through their symbolic paths.
_LEAST_CONCRETE_SYMINT = -(1 << 62)


def _symint_refusal(op: torch._ops.OpOverload, args: Sequence[Any], kwargs: dict[str, Any]) -> str | None:
    for i, name in _SYMINTS[op]:
        v = args[i] if i < len(args) else kwargs.get(name)
        for n in (v if isinstance(v, (list, tuple)) else (v,)):
            if type(n) is int and n < _LEAST_CONCRETE_SYMINT:
                return (f"argument {name!r} of {op}: {n} is below -2**62, the least integer torch passes to a kernel "
                        "as a concrete SymInt; its kernel refuses it when the program runs (its fake kernel does not "
                        "check it)")
    return None


class _NoVerdict(Exception):
    """An operand the probe cannot stand for (a symbolic number, an object)."""


def _cpu_dtypes(op: torch._ops.OpOverload, args: Sequence[Any], kwargs: dict[str, Any]) -> tuple[str, str] | None:
    """(the operands' dtypes, the CPU kernel's first line) when the CPU kernel refuses the call's
    operand dtypes and the meta kernel accepts them, else None."""
    pointwise = _PROBED[op]
    try:
        key = (op, tuple([_probe_key(a, pointwise) for a in args]),
               tuple([(k, _probe_key(v, pointwise)) for k, v in kwargs.items()]))
    except _NoVerdict:
        return None
    try:
        return _PROBE_CACHE[key]
    except KeyError:
        pass
    if len(_PROBE_CACHE) > 4096:
        _PROBE_CACHE.clear()
    verdict = _PROBE_CACHE[key] = _probe(op, key[1], dict(key[2]))
    return verdict


# A pointwise kernel's dtype verdict does not depend on its Scalars' values (whether a value fits the
# dtype is _fits_dtype's): one probe for every constant of a chain of ``x * c + d``.
_SCALAR_STANDS_FOR = {int: 1, float: 1.0, bool: True, complex: 1j}


def _probe_key(v: Any, pointwise: bool) -> Any:
    if isinstance(v, torch.Tensor):
        if v.device.type not in ("cpu", "meta") or v.layout != torch.strided or v.is_quantized:
            raise _NoVerdict  # (a program for another device runs other kernels)
        if pointwise:
            return ("tensor", v.dtype, ())
        sizes = tuple(v.shape)
        if any(type(n) is not int for n in sizes):
            raise _NoVerdict
        return ("tensor", v.dtype, sizes)
    t = type(v)
    if t in _SCALAR_STANDS_FOR:  # (tagged with its type: True, 1 and 1.0 are equal keys)
        return ("scalar", t, _SCALAR_STANDS_FOR[t] if pointwise else v)
    if v is None or t is str or isinstance(v, (torch.dtype, torch.layout, torch.memory_format)):
        return v
    if isinstance(v, (list, tuple)):
        return ("list", tuple([_probe_key(x, pointwise) for x in v]))
    if isinstance(v, torch.device):
        return torch.device("cpu")
    raise _NoVerdict  # a SymInt, a generator, a script object, ...


def _build(k: Any, device: str, other: bool = False) -> Any:
    if isinstance(k, tuple) and k and k[0] == "tensor":
        _, dtype, sizes = k
        if device == "meta":
            return torch.empty(sizes, dtype=dtype, device="meta")
        # Ones for floats (a logarithm, a division), zeros for integers (valid indices); ``other``:
        # twos and ones instead, other data of the same sizes.
        if dtype.is_floating_point or dtype.is_complex:
            return torch.full(sizes, 2.0 if other else 1.0, dtype=dtype)
        return (torch.ones if other and dtype != torch.bool else torch.zeros)(sizes, dtype=dtype)
    if isinstance(k, tuple) and k and k[0] == "list":
        return [_build(x, device, other) for x in k[1]]
    if isinstance(k, tuple) and k and k[0] == "scalar":
        return k[2]
    return k


def _elements(v: Any) -> int:
    if isinstance(v, torch.Tensor):
        return v.numel()
    if isinstance(v, (list, tuple)):
        return sum(_elements(x) for x in v)
    return 0


def _probe(op: torch._ops.OpOverload, args: tuple, kwargs: dict) -> tuple[str, str] | None:
    with unset_fake_temporarily(), torch.no_grad():
        meta_args, meta_kwargs = [_build(a, "meta") for a in args], {k: _build(v, "meta") for k, v in kwargs.items()}
        if _elements((meta_args, meta_kwargs)) > _PROBE_ELEMENTS:
            return None
        try:
            got = op(*meta_args, **meta_kwargs)
        except Exception:  # noqa: BLE001 -- the meta kernel's own refusal is the propagation's to judge
            return None
        if _elements(got) > _PROBE_ELEMENTS:
            return None
        # A random op draws from the default generator: a load must leave the caller's random
        # stream as it was. The kernel's warnings (a deprecated index dtype) are not the load's.
        seeded = torch.Tag.nondeterministic_seeded in op.tags
        state = torch.get_rng_state() if seeded else None
        try:
            first = _cpu_refusal(op, args, kwargs)
            if first is not None and _DTYPE_WORDS.search(first):
                dtypes = [str(d).removeprefix("torch.") for d, _ in _tensors((args, kwargs))]
                return "operands of dtypes " + ", ".join(dtypes), first[:200]
            if first is not None and not _PROBED[op] and _SIZE_WORDS.search(first) \
                    and not _DATA_WORDS.search(first) and _cpu_refusal(op, args, kwargs, other=True) == first:
                return "operands of sizes " + ", ".join(str(list(n)) for _, n in _tensors((args, kwargs))), first[:200]
        finally:
            if state is not None:
                torch.set_rng_state(state)
    return None


def _cpu_refusal(op: torch._ops.OpOverload, args: tuple, kwargs: dict, *, other: bool = False) -> str | None:
    """The first line of the CPU kernel's refusal of the probe's operands (``other``: their other
    data, see :func:`_build`), or None."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            op(*[_build(a, "cpu", other) for a in args], **{k: _build(v, "cpu", other) for k, v in kwargs.items()})
    except (RuntimeError, NotImplementedError, TypeError, ValueError) as e:
        lines = str(e).strip().splitlines()
        return lines[0].strip() if lines else ""
    except Exception:  # noqa: BLE001 -- anything else is no verdict
        return None
    return None


def _tensors(k: Any) -> list[tuple[torch.dtype, tuple[int, ...]]]:
    """(dtype, sizes) of every tensor of a probe key, in order."""
    if isinstance(k, tuple) and k and k[0] == "tensor":
        return [(k[1], k[2])]
    if isinstance(k, (tuple, list)):
        return [t for x in k for t in _tensors(x)]
    if isinstance(k, dict):
        return [t for x in k.values() for t in _tensors(x)]
    return []


# ---------------------------------------------------------------- masks


def _bool_mask(name: str, other: str) -> _Rule:
    def rule(a: _Args) -> tuple[str, str] | None:
        mask, t = a.get(name), a.get(other)
        if not _tensor(mask):
            return None
        if mask.dtype != torch.bool:
            return name, f"the mask is a {mask.dtype} tensor, not torch.bool"
        if _tensor(t) and not _broadcastable(t.shape, mask.shape):
            return name, f"the mask's shape {list(mask.shape)} does not broadcast with {other!r}'s {list(t.shape)}"
        return None

    return rule


def _broadcastable(a: Sequence[Any], b: Sequence[Any]) -> bool:
    for x, y in zip(reversed(a), reversed(b), strict=False):
        if type(x) is int and type(y) is int and x != y and x != 1 and y != 1:
            return False
    return True


# ---------------------------------------------------------------- _assert_tensor_metadata


# c10's numbering of layouts (c10/core/Layout.h), in which a kernel reads a Layout argument given
# as an integer: the dispatcher takes one where the schema says Layout, as it takes an integer
# ScalarType (``as_dtype``).
_LAYOUTS = (torch.strided, torch.sparse_coo, torch.sparse_csr, torch._mkldnn, torch.sparse_csc, torch.sparse_bsr,
            torch.sparse_bsc, torch.jagged)
_DTYPE_NUMBERS: dict[int, torch.dtype | None] = {}


def as_layout(v: Any) -> torch.layout | None:
    """The layout a kernel reads from the argument ``v`` (a layout, or c10's number of one), or None."""
    if isinstance(v, torch.layout):
        return v
    return _LAYOUTS[v] if type(v) is int and 0 <= v < len(_LAYOUTS) else None


def as_dtype(v: Any) -> torch.dtype | None:
    """The dtype a kernel reads from the argument ``v`` (a dtype, or c10's number of one), or None."""
    if isinstance(v, torch.dtype):
        return v
    if type(v) is not int or not 0 <= v < 256:
        return None
    if v not in _DTYPE_NUMBERS:
        # torch's own reading of the number (its table grows with its releases)
        with warnings.catch_warnings(), unset_fake_temporarily():
            warnings.simplefilter("ignore")
            try:
                _DTYPE_NUMBERS[v] = torch.ops.aten.empty.memory_format([0], dtype=v, device="meta").dtype
            except (RuntimeError, TypeError, ValueError):
                _DTYPE_NUMBERS[v] = None
    return _DTYPE_NUMBERS[v]


def _assert_metadata(a: _Args) -> tuple[str, str] | None:
    t = a.get("a")
    if not _tensor(t):
        return None
    dtype = as_dtype(a.get("dtype"))
    if dtype is not None and dtype != t.dtype:
        return "dtype", f"asserts {dtype}, the operand is {t.dtype}"
    for name, have in (("size", t.shape), ("stride", t.stride())):
        want = a.get(name)
        if isinstance(want, (list, tuple)) and all(type(n) is int for n in want) \
                and all(type(n) is int for n in have) and list(want) != list(have):
            return name, f"asserts {list(want)}, the operand's is {list(have)}"
    layout = as_layout(a.get("layout"))
    if layout is not None and layout != t.layout:
        return "layout", f"asserts {layout}, the operand is {t.layout}"
    device = a.get("device")
    if isinstance(device, torch.device) and (device.type != t.device.type or (
            device.index is not None and t.device.index is not None and device.index != t.device.index)):
        return "device", f"asserts {device}, the operand is on {t.device}"
    return None


# ---------------------------------------------------------------- random ops' ranges


def _less(lo: str, hi: str, strict: bool, lo_default: Any = None) -> _Rule:
    def rule(a: _Args) -> tuple[str, str] | None:
        x = a.get(lo, lo_default) if lo else lo_default
        y = a.get(hi)
        if _num(x) and _num(y) and (x >= y if strict else x > y):
            return hi, f"{lo or 'the lower bound'}={x} is not {'below' if strict else 'at most'} {hi}={y}"
        return None

    return rule


def _within(name: str, lo: float, hi: float, open_lo: bool = False, open_hi: bool = False) -> _Rule:
    def rule(a: _Args) -> tuple[str, str] | None:
        v = a.get(name)
        if not _num(v):
            return None
        below = v <= lo if open_lo else v < lo
        above = v >= hi if open_hi else v > hi
        if below or above or v != v:
            interval = f"{'(' if open_lo else '['}{lo}, {hi}{')' if open_hi else ']'}"
            return name, f"{v} is outside {interval}"
        return None

    return rule


# ---------------------------------------------------------------- Scalars converted to a dtype


def _fits_dtype(name: str, dtype_of: Callable[[_Args], torch.dtype | None]) -> _Rule:
    """``name`` is a Scalar the kernel converts to the dtype ``dtype_of`` gives (None: unknown)."""

    def rule(a: _Args) -> tuple[str, str] | None:
        v = a.get(name)
        if type(v) not in (int, float) or -_FITS_ALL <= v <= _FITS_ALL:
            return None
        dtype = dtype_of(a)
        if dtype is None:
            return None
        try:
            # The conversion the kernel makes (c10::checked_convert), on one CPU element.
            with unset_fake_temporarily():
                torch.scalar_tensor(v, dtype=dtype)
        except RuntimeError as e:
            if "without overflow" in str(e):
                return name, f"{v!r} does not fit the {dtype} it is converted to"
        return None

    return rule


def _bool_alpha(a: _Args) -> tuple[str, str] | None:
    """add/sub scale ``other`` by ``alpha``: a boolean alpha only for a boolean result."""
    if type(a.get("alpha")) is not bool:
        return None
    dtype = _promoted("self", "other")(a)
    if dtype is not None and dtype != torch.bool:
        return "alpha", f"a boolean alpha scales only a boolean result, and this one is {dtype}"
    return None


def _same_dtype(*names: str) -> _Rule:
    """Matrix products: the CPU kernels take operands of one dtype (their meta kernels do not ask)."""

    def rule(a: _Args) -> tuple[str, str] | None:
        tensors = [(n, a[n]) for n in names if _tensor(a.get(n))]
        for n, t in tensors[1:]:
            if t.dtype != tensors[0][1].dtype:
                return n, f"it is {t.dtype} and {tensors[0][0]!r} is {tensors[0][1].dtype}; the kernel multiplies one dtype"
        return None

    return rule


# What every dtype holds (int8's range; -1 wraps into the unsigned ones): alpha=1, fill 0, ...
_FITS_ALL = 127


def _given(a: _Args) -> torch.dtype | None:
    d = a.get("dtype")
    return d if isinstance(d, torch.dtype) else None


def _own(a: _Args) -> torch.dtype | None:
    t = a.get("self")
    return t.dtype if _tensor(t) else None


def _given_or_own(a: _Args) -> torch.dtype | None:
    return _given(a) or _own(a)


def _promoted(*names: str) -> Callable[[_Args], torch.dtype | None]:
    """The result dtype of an elementwise op over ``names`` (tensors and numbers)."""

    def dtype_of(a: _Args) -> torch.dtype | None:
        vals = [a.get(n) for n in names]
        vals = [v for v in vals if _tensor(v) or _num(v) or type(v) is bool]
        if not any(_tensor(v) for v in vals):
            return None
        t = next(v for v in vals if _tensor(v))
        try:
            return torch.result_type(t, vals[1]) if len(vals) > 1 and vals[1] is not t else t.dtype
        except (RuntimeError, TypeError):
            return None

    return dtype_of


def _ops(*names: str) -> list[torch._ops.OpOverload]:
    """The overloads (``"random_.from"``) this torch has, of aten."""
    out = []
    for n in names:
        packet, _, overload = n.partition(".")
        op = getattr(getattr(torch.ops.aten, packet, None), overload or "default", None)
        if isinstance(op, torch._ops.OpOverload):
            out.append(op)
    return out


def _table() -> dict[torch._ops.OpOverload, tuple[_Rule, ...]]:
    table: dict[torch._ops.OpOverload, list[_Rule]] = {}

    def add(names: Sequence[str], *rules: _Rule) -> None:
        for op in _ops(*names):
            table.setdefault(op, []).extend(rules)

    add(["masked_select"], _bool_mask("mask", "self"))
    add(["_assert_tensor_metadata"], _assert_metadata)
    # random_(from, to) draws from [from, to); random_(to) from [0, to); randint the same.
    add(["random_.from", "random.from"], _less("from", "to", strict=True))
    add(["random_.to", "random.to"], _less("", "to", strict=True, lo_default=0))
    add(["randint.low", "randint.low_generator"], _less("low", "high", strict=True))
    add(["randint.default", "randint.generator"], _less("", "high", strict=True, lo_default=0))
    add(["uniform_", "uniform"], _less("from", "to", strict=False))
    add(["normal_", "normal.Tensor_float", "normal.float_float", "normal.functional"], _within("std", 0, math.inf))
    add(["bernoulli_.float", "bernoulli.p"], _within("p", 0, 1))
    add(["exponential_", "exponential"], _within("lambd", 0, math.inf, open_lo=True))
    add(["geometric_", "geometric"], _within("p", 0, 1, open_lo=True, open_hi=True))
    # Attention's dropout is a probability (NaN or a negative one sends the CPU kernel to its flash
    # path, which refuses it); the CPU flash kernel itself takes none at all.
    add(["scaled_dot_product_attention"], _within("dropout_p", 0, 1))
    add(["_scaled_dot_product_flash_attention_for_cpu"], _within("dropout_p", 0, 0))
    # Scalars converted (checked) to the dtype of the tensor they fill or combine with.
    add(["full", "scalar_tensor"], _fits_dtype("fill_value", _given), _fits_dtype("s", _given))
    add(["full_like", "new_full"], _fits_dtype("fill_value", _given_or_own))
    add(["fill.Scalar", "fill_.Scalar", "masked_fill.Scalar", "masked_fill_.Scalar", "index_fill.int_Scalar",
         "index_fill_.int_Scalar"], _fits_dtype("value", _own))
    add(["add.Tensor", "add_.Tensor", "sub.Tensor", "sub_.Tensor"], _fits_dtype("alpha", _promoted("self", "other")),
        _bool_alpha)
    add(["mm", "matmul", "mv", "dot"], _same_dtype("self", "mat2", "other", "vec", "tensor"))
    add(["addmm", "addmm_", "addmv", "baddbmm", "addbmm"], _same_dtype("mat1", "mat2", "mat", "vec", "batch1", "batch2", "self"))
    add(["linear"], _same_dtype("input", "weight", "bias"))
    add(["clamp", "clamp_"], _fits_dtype("min", _promoted("self", "min")), _fits_dtype("max", _promoted("self", "max")))
    add(["where.ScalarOther"], _fits_dtype("other", _promoted("self", "other")))
    add(["where.ScalarSelf"], _fits_dtype("self", _promoted("other", "self")))
    return {op: tuple(rules) for op, rules in table.items()}


_RULES = _table()
# Ops whose only rule judges a keyword-only argument: a call without it (add and sub, almost
# always) is not bound at all.
_KEYWORD_ONLY = {op: "alpha" for op in _ops("add.Tensor", "add_.Tensor", "sub.Tensor", "sub_.Tensor")}
# Each rule op's parameters and defaults, read once (torch builds ``_schema.arguments`` anew on each read).
_PARAMS = {op: tuple((p.name, p.default_value if p.has_default_value() else None) for p in op._schema.arguments)
           for op in _RULES}
# The operators with a rule: a caller tests membership before it gathers a call's values.
KERNEL_OPS = frozenset(_RULES)
