"""Fuzz worker: loads (and, if that works, runs) one mutated artifact per request, in its own process.

Started by ``fuzzer.Pool`` as ``python _worker.py SCRATCH_DIR MEM_MB``. Reads one JSON request per
line on stdin, ``{"id", "kind": "pt2s" | "pt2n", "path", "seed_path", "how", "must_refuse"}``
(``how``: "plain", "mmap" or "emit" for a .pt2s, "python" or "cpp" for a .pt2n; ``must_refuse``: a
changed .pt2n file, whose load is the outcome "undetected"), and answers with JSON lines:
``{"phase": "run"}`` once the load succeeded (so the parent can tell a hang at load from one at run
time), then ``{"id", "outcome", "detail"}``; and ``{"phase": "ready"}`` once, when its imports are
done. The working directory is SCRATCH_DIR, where the canary strings the mutator plants would
create their file if a loader ever executed them.
"""

from __future__ import annotations

import json
import os
import re
import resource
import sys
import traceback

# Kernels may reject the arguments a mutated program passes them, exactly as they would in eager
# mode; but a failure to *bind* arguments to the operator's schema means the loader accepted a call
# that our writer could never have written.
_BINDING = re.compile(
    r"expected at most \d+ argument|missing value for argument|argument '\w+' must be|unexpected keyword"
    r"|takes \d+ positional argument|positional arguments? but|got multiple values|Expected a value of type"
    r"|not enough values to unpack|too many values to unpack|object is not iterable|object is not subscriptable"
    r"|tuple index out of range|list index out of range|Expected \w+ for argument|must be a tuple|received an invalid combination of arguments"
)
_GUARD = re.compile(r"^(Expected input|Guard failed|Dynamic guard|Runtime assertion failed|.*to be equal to)")
_OOM = re.compile(r"can't allocate memory|DefaultCPUAllocator|std::bad_alloc|out of memory")


def _where(tb: traceback.StackSummary) -> str:
    """The innermost frame in our code or torch's, for grouping findings by source line."""
    tb = [fr for fr in tb if "/tests/" not in fr.filename]
    for fr in reversed(tb):
        if "/serde/" in fr.filename or "/native/" in fr.filename or "/canonical/" in fr.filename:
            return f"{fr.filename.rsplit('/src/', 1)[-1]}:{fr.lineno}"
    fr = tb[-1] if tb else None
    return f"{fr.filename.rsplit('site-packages/', 1)[-1]}:{fr.lineno}" if fr else "?"


def _describe(e: BaseException) -> str:
    tb = traceback.extract_tb(e.__traceback__)
    return f"{type(e).__name__} at {_where(tb)}: {str(e)[:300]}"


def _classify_load(e: BaseException, serde_error: type) -> str:
    if isinstance(e, serde_error):
        return f"rejected:{type(e).__name__}"
    if isinstance(e, MemoryError) or (isinstance(e, RuntimeError) and _OOM.search(str(e))):
        return "oom"
    return "foreign"


def _in_kernel(e: BaseException) -> bool:
    tb = traceback.extract_tb(e.__traceback__)
    return bool(tb) and tb[-1].filename.endswith(("torch/_ops.py", "torch/_tensor.py", "torch/functional.py"))


def _raised_by_us(e: BaseException) -> bool:
    """The innermost frame is pt2serde's own code (the native runtime), not torch's or a kernel's."""
    tb = traceback.extract_tb(e.__traceback__)
    return bool(tb) and "/src/" in tb[-1].filename and "/tests/" not in tb[-1].filename


def _classify_run(e: BaseException, serde_error: type) -> str:
    msg = str(e)
    if isinstance(e, serde_error):
        return f"run_refused:{type(e).__name__}"  # the native runtime's own input and kernel checks
    if isinstance(e, MemoryError) or _OOM.search(msg):
        return "run_oom"
    if _raised_by_us(e):
        return "foreign_run"  # our runtime must refuse what it cannot run with its own typed error
    if _GUARD.search(msg):
        return "run_guard"
    if _BINDING.search(msg):
        return "run_inconsistent"
    if isinstance(e, (RuntimeError, ValueError, IndexError)) and _in_kernel(e):
        return "run_torch"
    return "run_inconsistent"


# ---------------------------------------------------------------- the test of the fuzzer
# Each entry switches one fix off in this worker process (PT2SERDE_FUZZ_REVERT names it), so that
# test_fuzz.py can show the fuzzer finds what the fix prevents. Nothing in src/ knows of this.


def _revert_fx_names() -> None:
    from serde.core.checks import names

    names._FX_SHADOWING = frozenset()
    names.RESERVED_LOCALS = names.RESERVED_LOCALS - {"getattr"}


def _revert_debug_decoder() -> None:
    from serde.bridge import metadata

    def stdlib_json(text: str):
        from torch.fx.traceback import NodeSource

        try:
            return [NodeSource._from_dict(d) for d in json.loads(text)]
        except (ValueError, KeyError, TypeError, AttributeError):
            return None

    metadata._deserialize_from_node = stdlib_json


def _revert_int64() -> None:
    # before any decoder is built: msgspec resolves the schema's annotations on first use
    import native.emit.emitter
    import native.format.program
    from serde.core import schema

    for module in (schema, native.format.program):
        _unbound_ints(module)
    native.emit.emitter.validate_weights = lambda *a, **k: None
    # the emitter's own check: emit_artifact runs the load's checks first, which refuse it too
    _revert_emit_load_checks()


def _unbound_ints(module) -> None:
    """Every Struct of ``module`` with plain ``int`` where its annotations say ``I64``: msgspec
    reads the class annotations when it builds a decoder, and they hold the I64 object itself."""
    import functools
    import operator
    import types
    import typing

    import msgspec

    bound = module.I64
    meta = bound.__metadata__[0]  # (nested Annotated types are flattened: Annotated[int, meta, Id(...)])

    def sub(t):
        if t is bound:
            return int
        origin, args = typing.get_origin(t), typing.get_args(t)
        if origin is typing.Annotated:
            rest = tuple(m for m in t.__metadata__ if m is not meta)
            return typing.Annotated[(sub(args[0]), *rest)] if rest else sub(args[0])
        if origin in (typing.Union, types.UnionType):
            return functools.reduce(operator.or_, [sub(a) for a in args])
        if origin is not None and args:
            return origin[tuple(sub(a) for a in args)] if len(args) > 1 else origin[sub(args[0])]
        return t

    module.I64 = int
    for cls in vars(module).values():
        if isinstance(cls, type) and issubclass(cls, msgspec.Struct) and cls.__module__ == module.__name__:
            cls.__annotations__ = {k: sub(v) for k, v in cls.__annotations__.items()}


def _revert_arity() -> None:
    # the emitter's own check: emit_artifact runs the load's checks first, which refuse it too
    _revert_emit_load_checks()
    from serde.core.expr import stored

    stored.ARITY = dict.fromkeys(stored.ARITY, (0, None))


def _revert_sort() -> None:
    import native.format.exprs
    import serde.bridge.values

    native.format.exprs.check_sort = serde.bridge.values.check_sort = lambda *a, **k: None


def _revert_hop_operands() -> None:
    from serde.bridge.checks import hops

    for name in ("cond", "scan", "map_impl"):
        hops.HOPS[name] = lambda *a: None


def _revert_padding() -> None:
    from native.format import verify

    verify._Validator.padding = lambda self: None


def _revert_plan_bounds() -> None:
    from native.format import memory

    memory._plannable_nbytes = memory.upper_nbytes  # plan whatever bound the symbol ranges give


def _revert_emit_checks() -> None:
    # the emitter's own check: emit_artifact runs the load's checks first, which refuse it too
    _revert_emit_load_checks()
    import native.emit.emitter as emit
    from native.format import program as P

    class _Every(dict):
        def __contains__(self, key: object) -> bool:
            return True

    emit.ITEMSIZE = _Every(emit.ITEMSIZE)  # an unknown dtype reaches the planner
    for member, make in (("as_scalar_type", P.ScalarType), ("as_memory_format", P.MemoryFormat),
                         ("as_layout", P.Layout)):
        emit._ARGUMENTS[member] = lambda em, v, s, w, make=make: em.b.const(make(int(v)))


def _revert_subgraph_self() -> None:
    # Only the subgraph attribute's check: state FQNs named self stay refused (that is fx_names).
    # Every module that imported the check is patched, wherever the check lives.
    import serde.api  # noqa: F401 -- the load path, and so every module that imports the check
    import serde.core.checks.names  # noqa: F401
    from serde.errors import SerializeError

    holders = [m for m in list(sys.modules.values()) if getattr(m, "__name__", "").startswith("serde")
               and callable(getattr(m, "check_attr_name", None))]
    strict = holders[0].check_attr_name

    def lenient(name, where, *args, **kwargs):
        try:
            return strict(name, where, *args, **kwargs)
        except SerializeError as e:
            if "shadows the generated forward's 'self'" in str(e):
                return name
            raise

    for module in holders:
        if module.check_attr_name is strict:
            module.check_attr_name = lenient


def _revert_native_layouts() -> None:
    from native.format import verify
    from serde.core import schema

    verify._LAYOUTS = frozenset(int(x) for x in schema.Layout)
    verify._FORMATS = frozenset(int(x) for x in schema.MemoryFormat)


def _revert_native_propagation() -> None:
    from native.run import propagate

    propagate.check_propagation = lambda *args, **kwargs: 0


def _native_propagate(native, data: bytes, engine: str) -> tuple[str, str]:
    """What a plain .pt2n load lets through, propagate=True may still refuse (its own outcome, as
    for the .pt2s paths), so that the run's failures count what neither refuses."""
    from native.errors import PropagationError

    try:
        native.load(data, engine=engine, propagate=True)
    except PropagationError as e:
        return "rejected_propagate", _describe(e)
    return "ok", ""


def _revert_generator() -> None:
    from torch.export.graph_signature import CustomObjArgument

    from serde.bridge import propagation

    compare = propagation._check_node

    def skip_custom_objects(node, where):
        vals = [a.meta.get("val") for a in node.all_input_nodes]
        if any(isinstance(v, CustomObjArgument) for v in vals):
            return 0
        return compare(node, where)

    propagation._check_node = skip_custom_objects


def _revert_fake_verdict() -> None:
    from serde.bridge import propagation

    propagation._refuses = lambda *args: False


def _revert_unbound_symbols() -> None:
    from native.format import verify

    verify._Validator.bound_symbols = lambda self: None


def _revert_size_overflow() -> None:
    from native.format import verify

    verify._Validator.overflow = lambda self: None


def _revert_out_variant_call() -> None:
    from native.format import kinds

    kinds._check_functional = lambda *args: None


def _revert_kernel_rules(*names: str) -> None:
    # One group of serde.bridge.checks.kernels' rules: the operators named (aten.full, ...).
    from serde.bridge.checks import kernels

    for op in [op for op in kernels._RULES if op.name().split("::")[1].split(".")[0] in names]:
        del kernels._RULES[op]


def _revert_kernel_masks() -> None:
    _revert_kernel_rules("masked_select")


def _revert_kernel_asserts() -> None:
    _revert_kernel_rules("_assert_tensor_metadata")


def _revert_kernel_scalars() -> None:
    _revert_kernel_rules("full", "scalar_tensor", "full_like", "new_full", "fill", "fill_", "masked_fill",
                         "masked_fill_", "index_fill", "index_fill_", "add", "add_", "sub", "sub_", "clamp",
                         "clamp_", "where")


def _revert_kernel_dtypes() -> None:
    # The probe of a CPU kernel's operand dtypes (relu of bool, a norm's float16 weight, ...).
    from serde.bridge.checks import kernels

    kernels._cpu_dtypes = lambda *args: None


def _revert_concrete_symints() -> None:
    from serde.bridge.checks import kernels

    kernels._symint_refusal = lambda *args: None


def _revert_number_results() -> None:
    # Propagation compares an operator's number results by kind only, as before.
    from serde.bridge import propagation

    differs = propagation._differs

    def kinds_only(got, stored):
        if propagation.number_kind(got) is not None and propagation._kind(got) == propagation._kind(stored):
            return None
        return differs(got, stored)

    propagation._differs = kinds_only


def _revert_vmap_levels() -> None:
    from serde.bridge.checks import hops

    hops._check_level_open = lambda *args: None


def _revert_batch_dims() -> None:
    from serde.bridge import graph

    graph.check_batch_dim_result = lambda *args: None


def _revert_example_inputs() -> None:
    from serde.bridge import program

    program.check_examples_fit_inputs = lambda ep: None


def _revert_flex_operands() -> None:
    from serde.bridge.checks import hops

    hops._attention_operands = lambda *a: None


def _revert_structure_strides() -> None:
    import torch

    from serde.bridge.checks import signature

    signature.is_traceable_wrapper_subclass = lambda t: type(t) not in (torch.Tensor, torch.nn.Parameter)


def _revert_kernel_sizes() -> None:
    import re

    from serde.bridge.checks import kernels

    kernels._SIZE_WORDS = re.compile(r"(?!)")  # matches nothing: the probe takes dtype refusals only


def _revert_vmap_batches() -> None:
    from serde.bridge.checks import hops

    hops._check_batch_size = lambda *a: None
    hops._check_batched_operands = lambda *a: None


def _revert_emit_load_checks() -> None:
    import serde.api

    serde.api.check_artifact = lambda a, **kwargs: None  # emit_artifact imports it when called


REVERTS = {"fx_names": _revert_fx_names, "debug_decoder": _revert_debug_decoder, "int64": _revert_int64,
           "arity": _revert_arity, "sort": _revert_sort, "hop_operands": _revert_hop_operands,
           "padding": _revert_padding, "plan_bounds": _revert_plan_bounds, "emit_checks": _revert_emit_checks,
           "subgraph_self": _revert_subgraph_self, "native_layouts": _revert_native_layouts,
           "generator": _revert_generator, "fake_verdict": _revert_fake_verdict,
           "unbound_symbols": _revert_unbound_symbols, "size_overflow": _revert_size_overflow,
           "out_variant_call": _revert_out_variant_call, "kernel_masks": _revert_kernel_masks,
           "kernel_asserts": _revert_kernel_asserts, "kernel_scalars": _revert_kernel_scalars,
           "vmap_levels": _revert_vmap_levels, "batch_dims": _revert_batch_dims,
           "native_propagation": _revert_native_propagation, "example_inputs": _revert_example_inputs,
           "emit_load_checks": _revert_emit_load_checks, "flex_operands": _revert_flex_operands,
           "structure_strides": _revert_structure_strides, "kernel_sizes": _revert_kernel_sizes,
           "vmap_batches": _revert_vmap_batches, "kernel_dtypes": _revert_kernel_dtypes,
           "concrete_symints": _revert_concrete_symints, "number_results": _revert_number_results}


def main() -> None:
    scratch, mem_mb = sys.argv[1], int(sys.argv[2])
    revert = os.environ.get("PT2SERDE_FUZZ_REVERT")
    if revert:
        REVERTS[revert]()
    os.chdir(scratch)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 1000))
    import torch  # imported before the memory limit: its own mappings are large
    import torch.utils._pytree as pytree

    import native
    import serde
    from serde.bridge import propagation
    from serde.bridge.errors import InconsistentProgramError
    from serde.errors import SerializeError

    with open("/proc/self/statm") as f:
        vm = int(f.read().split()[0]) * resource.getpagesize()
    limit = vm + mem_mb * (1 << 20)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    inputs: dict[str, tuple] = {}
    out = sys.stdout
    out.write('{"phase": "ready"}\n')  # the parent's time limit starts now, not at the start-up
    out.flush()
    for line in sys.stdin:
        req = json.loads(line)
        seed = req["seed_path"]
        if seed not in inputs:
            inputs[seed] = serde.load(seed).example_inputs
        # A mutated program may write to its inputs: every case gets fresh copies.
        args, kwargs = pytree.tree_map(lambda v: v.clone() if isinstance(v, torch.Tensor) else v, inputs[seed])
        outcome, detail = "ok", ""
        how = req.get("how", "plain")
        native_run = req["kind"] == "pt2n" or how == "emit"
        try:
            if req["kind"] == "pt2s" and how == "emit":
                loaded = native.load(native.emit_artifact(req["path"]).encode())
                # emit runs every check of a default load (which leaves the extra files undecoded):
                # a file that load refuses must not emit
                try:
                    serde.load(req["path"])
                except SerializeError as e:
                    outcome, detail = "emit_unchecked", f"emitted, but serde.load refuses it: {_describe(e)}"
                # As for a plain load: what emit lets through, load(propagate=True) of the same file
                # may refuse (emit does not re-run the operators), its own outcome.
                if outcome == "ok":
                    try:
                        serde.load(req["path"], propagate=True, extra_files={})
                    except InconsistentProgramError as e:
                        outcome, detail = "rejected_propagate", _describe(e)
            elif req["kind"] == "pt2s":
                if how == "mmap":
                    loaded = serde.load(req["path"], mmap=True, extra_files={})
                else:
                    with open(req["path"], "rb") as f:
                        loaded = serde.load(f.read(), extra_files={})
                # What a default load lets through, propagate=True may still refuse: its own outcome,
                # so that run_inconsistent counts what neither refuses.
                try:
                    propagation.check_propagation(loaded)
                except InconsistentProgramError as e:
                    outcome, detail = "rejected_propagate", _describe(e)
            else:
                with open(req["path"], "rb") as f:
                    data = f.read()
                loaded = native.load(data, engine=how)
                if req.get("must_refuse"):
                    outcome, detail = "undetected", "a changed .pt2n file loaded (every byte is checksummed or zero)"
                else:
                    outcome, detail = _native_propagate(native, data, how)
        except BaseException as e:  # noqa: BLE001 -- the point is to see every exception
            if isinstance(e, KeyboardInterrupt):
                raise
            outcome, detail = _classify_load(e, SerializeError), _describe(e)
        if outcome == "ok":
            out.write('{"phase": "run"}\n')
            out.flush()
            try:
                if native_run:
                    loaded.run(*args, **kwargs)
                else:
                    loaded.module()(*args, **kwargs)
            except BaseException as e:  # noqa: BLE001
                if isinstance(e, KeyboardInterrupt):
                    raise
                outcome, detail = _classify_run(e, SerializeError), _describe(e)
        if torch._C._functorch.maybe_current_level() is not None:
            # A run that leaves a vmap level open would fail every later case in this process.
            # An exception inside a vmap level skips the graph's own decrement, as in torch.
            if outcome == "ok":
                outcome = "run_inconsistent"
            detail = f"left a functorch vmap level open; {detail}"
            while torch._C._functorch.maybe_current_level() is not None:
                torch._C._functorch._vmap_decrement_nesting()
        out.write(json.dumps({"id": req["id"], "outcome": outcome, "detail": detail}) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
