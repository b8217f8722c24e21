"""The C++ runtime (``native.load(..., engine="cpp")`` and the ``pt2serde-run`` CLI).

Every program runs on both engines and on eager ``ep.module()``: the C++ outputs, mutated inputs
and state must equal the Python runtime's bit for bit (same kernels) and eager's as the Python
runtime's tests require. The fuzz tests hand the CLI mutated files in a subprocess and count
the runs a signal ended (crashes); there must be none.

Without a built runtime (``make native``) every test here skips with the reason the build gave.
"""

from __future__ import annotations

import copy
import os
import random
import re
import resource
import subprocess
from pathlib import Path

import msgspec
import pytest
import torch
import torch.utils._pytree as pytree

from native.errors import (
    ArenaTooLargeError,
    InputMismatchError,
    NativeFormatError,
    NativeRuntimeError,
    NativeVersionError,
)
from native.format import container
from native.format import program as P
from native.format.memory import plan_memory
from native.run import cpp_engine
from native.run.runtime import Method, load
from serde.core import schema
from serde.core.limits import Limits
from serde.errors import UnsupportedConstructError
from tests.native._corpus import REFUSED, Case, cases, make
from tests.native._native_util import (
    CASES,
    FAST,
    UNSUPPORTED,
    assert_same,
    edit_outcome,
    edited,
    emit_ep,
    emitted,
    exported,
    inputs_of,
    int_paths,
    with_edge_int,
)
from tests.tiers import tiered

pytestmark = pytest.mark.skipif(not cpp_engine.available(), reason=str(cpp_engine.unavailable_reason()))

SUPPORTED = [n for n in CASES if n not in UNSUPPORTED]
CLI = cpp_engine.cli_path()


def _params(names):
    return tiered(names, [n for n in FAST if n in names])


def assert_bitwise(got, want, where):
    """Same structure, and every tensor equal bit for bit (dtype, shape and values, NaN == NaN)."""
    g_leaves, g_spec = pytree.tree_flatten(got)
    w_leaves, w_spec = pytree.tree_flatten(want)
    assert g_spec == w_spec, f"{where}: structure {g_spec} != {w_spec}"
    for k, (g, w) in enumerate(zip(g_leaves, w_leaves, strict=True)):
        if isinstance(w, torch.Tensor):
            assert isinstance(g, torch.Tensor), f"{where}[{k}]: {type(g).__name__} instead of a tensor"
            assert g.dtype == w.dtype and g.shape == w.shape, f"{where}[{k}]: {g.dtype}{list(g.shape)} != " \
                                                              f"{w.dtype}{list(w.shape)}"
            torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True, msg=lambda m, k=k: f"{where}[{k}]: {m}")
        else:
            assert type(g) is type(w) and (g == w or g != g), f"{where}[{k}]: {g!r} != {w!r}"


def run_three_ways(ep, native, inputs, *, arena):
    """Eager, the Python runtime and the C++ runtime over ``inputs`` in order (state accumulates)."""
    ref = copy.deepcopy(ep).module()
    py = Method(native, arena=arena)
    cpp = load(native, engine="cpp", arena=arena)
    for i, (args, kwargs) in enumerate(inputs):
        a_ref, a_py, a_cpp = (copy.deepcopy((args, kwargs)) for _ in range(3))
        with torch.no_grad():
            want = ref(*a_ref[0], **a_ref[1])
        got_py = py.run(*a_py[0], **a_py[1])
        got = cpp.run(*a_cpp[0], **a_cpp[1])
        where = f"run {i}"
        assert_bitwise(got, got_py, f"{where} outputs (C++ vs Python runtime)")
        assert_same(got, want, f"{where} outputs (C++ vs eager)")
        assert_bitwise(a_cpp, a_py, f"{where} inputs after the run (C++ vs Python runtime)")
        assert_same(a_cpp, a_ref, f"{where} inputs after the run (C++ vs eager)")
        py_state, cpp_state = py.state_dict(), cpp.state_dict()
        assert sorted(cpp_state) == sorted(py_state)
        for name in py_state:
            assert_bitwise(cpp_state[name], py_state[name], f"{where} state {name!r}")
    return cpp


# ---------------------------------------------------------------- corpus


@pytest.mark.parametrize("arena", [False, True], ids=["heap", "arena"])
@pytest.mark.parametrize("name", _params(SUPPORTED))
def test_zoo_case_runs_like_the_python_runtime(name, arena):
    ep = exported(name)  # every corpus case exports
    run_three_ways(ep, emitted(name), inputs_of(name), arena=arena)


_EXPORTDB = [c for c in cases() if c.source == "exportdb" and not c.decompose]
_EXPORTDB_FAST = ("cond_closed_over_variable", "dynamic_shape_view", "list_contains")


@pytest.mark.parametrize("aten", [False, True], ids=["training", "decomposed"])
@pytest.mark.parametrize("name", tiered([c.key for c in _EXPORTDB], [k for k in _EXPORTDB_FAST if k in {c.key for c in _EXPORTDB}]))
def test_exportdb_case_runs_like_the_python_runtime(name, aten):
    case = Case(f"exportdb/{name}" + ("@aten" if aten else ""), "exportdb", name, aten)
    ep, inputs = make(case)  # every supported ExportDB case exports; a failure fails
    if case.name in REFUSED:  # the emitter's deliberate refusals (tests/native/test_corpus.py)
        with pytest.raises(UnsupportedConstructError, match=re.escape(REFUSED[case.name])):
            emit_ep(ep)
        return
    native = emit_ep(ep)
    for arena in (False, True):
        run_three_ways(ep, native, copy.deepcopy(inputs), arena=arena)


# ---------------------------------------------------------------- behaviour shared with the Python runtime


def test_buffer_mutations_persist_across_runs():
    name = "effects_and_mutation_aten" if "effects_and_mutation_aten" in CASES else "input_mutation_aten"
    run_three_ways(exported(name), emitted(name), inputs_of(name) * 3, arena=False)


def test_input_checks_raise_the_python_runtimes_errors():
    m = load(emitted("mlp"), engine="cpp")
    (args, kwargs), *_ = inputs_of("mlp")
    with pytest.raises(InputMismatchError, match="expected dtype torch.float32|expected dtype Float"):
        m.run(*(a.double() for a in args), **kwargs)
    with pytest.raises(InputMismatchError, match="dimensions"):
        m.run(*(a[0] for a in args), **kwargs)
    with pytest.raises(InputMismatchError, match="structure"):
        m.run(*args, *args, **kwargs)


def test_dynamic_sizes_are_checked_against_symbol_ranges():
    from torch.export import Dim

    class M(torch.nn.Module):
        def forward(self, x):
            return x * 2

    ep = torch.export.export(M(), (torch.randn(4, 3),), dynamic_shapes=({0: Dim("n", min=2, max=8)},))
    m = load(emit_ep(ep), engine="cpp")
    assert torch.equal(m.run(torch.ones(5, 3)), torch.full((5, 3), 2.0))
    with pytest.raises(InputMismatchError, match="outside its allowed range"):
        m.run(torch.ones(9, 3))


def test_a_loop_that_never_ends_fails_instead_of_hanging():
    from torch._higher_order_ops.while_loop import while_loop

    class Endless(torch.nn.Module):
        def forward(self, i, x):
            return while_loop(lambda i, x: i >= 0, lambda i, x: (i + 1, x + 1), (i, x))

    args = (torch.tensor(0), torch.zeros(2))
    m = load(emit_ep(torch.export.export(Endless(), args)), engine="cpp", max_loop_instructions=1000)
    with pytest.raises(NativeRuntimeError, match="loops ran more than 1000 instructions in this run"):
        m.run(*args)


def test_a_failing_kernel_names_the_instruction():
    native = emitted("mlp")
    p = native.program
    k = next(j for j, i in enumerate(p.instructions) if isinstance(i, P.KernelCall))
    ins = list(p.instructions)
    # The first kernel (a linear) now multiplies a bias, a vector, by its weight matrix: a tensor, so
    # the loader takes it, and a shape the kernel refuses.
    bias = next(i for i, v in enumerate(p.values) if isinstance(v, P.Tensor) and v.data >= 0 and len(v.sizes) == 1)
    ins[k] = msgspec.structs.replace(ins[k], args=[bias, *ins[k].args[1:]])
    bad = P.NativeProgram(msgspec.structs.replace(p, instructions=ins), native.segment)
    (args, kwargs), *_ = inputs_of("mlp")
    with pytest.raises(NativeRuntimeError, match=rf"instruction {k} \(aten::"):
        load(bad, engine="cpp").run(*args, **kwargs)


class _Named(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.fc(x)).relu()


def _named() -> tuple[torch.export.ExportedProgram, P.NativeProgram]:
    torch.manual_seed(0)
    ep = torch.export.export(_Named().eval(), (torch.randn(4, 8),))
    return ep, emit_ep(ep)


def test_runtime_errors_name_the_node_and_module_as_the_python_runtime_does():
    _, native = _named()
    p = native.program
    k = next(j for j, i in enumerate(p.instructions)
             if isinstance(i, P.KernelCall) and p.operators[i.op].name == "aten::linear")
    ins = list(p.instructions)
    bias = ins[k].args[2]
    ins[k] = msgspec.structs.replace(ins[k], args=[ins[k].args[0], bias, bias])  # a vector for the weight matrix
    bad = msgspec.structs.replace(p, instructions=ins)
    bad = P.NativeProgram(msgspec.structs.replace(bad, memory_plan=plan_memory(bad)), native.segment)
    x = torch.randn(4, 8)
    prefixes = []
    for engine in ("python", "cpp"):
        with pytest.raises(NativeRuntimeError) as e:
            load(bad, engine=engine).run(x)
        prefixes.append(str(e.value).split(" failed:")[0])
    assert prefixes[0] == prefixes[1] == f"instruction {k} (aten::linear.default, node 'linear' in module 'fc')"


def test_cpp_profile_names_every_executed_instruction():
    from native.run.profile import summarize

    ep, native = _named()
    m = load(native, engine="cpp", arena=True)
    x = torch.randn(4, 8)
    out, timings = m.run_profiled(x)
    assert_bitwise(out, Method(native).run(x), "profiled outputs")
    assert [pc for pc, _ in timings] == list(range(len(native.program.instructions)))  # straight-line program
    assert all(ns >= 0 for _, ns in timings)
    prof = summarize(m.program, timings)
    assert {r.name for r in prof.nodes} >= {"linear", "dropout", "relu"}
    assert {r.name for r in prof.modules} >= {"", "fc", "drop"}


def test_cli_run_profile_with_the_cpp_engine(tmp_path, capsys):
    import serde
    from serde.cli import main

    ep, _ = _named()
    art, prog = tmp_path / "m.pt2s", tmp_path / "m.pt2n"
    serde.save(ep, art)
    assert main(["emit", str(art), str(prog)]) == 0
    capsys.readouterr()
    assert main(["run", str(prog), "--inputs", str(art), "--profile", "--arena", "--engine", "cpp"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("output: float32[4, 8]")
    assert "dropout  (aten.dropout.default in drop)" in printed[printed.index("per node"):printed.index("per module")]


def _plan_doc(native: P.NativeProgram) -> dict:
    doc = msgspec.to_builtins(native.program)
    if len(doc["memory_plan"][2]) < 1:
        pytest.skip("no planned tensors")
    return doc


def test_a_slot_lifetime_other_than_the_derived_one_is_refused_by_both_engines():
    native = emitted("mlp")
    doc = _plan_doc(native)
    doc["memory_plan"][2][0][4] += 1  # end
    data = _repack(native, doc)
    for engine in ("python", "cpp"):
        with pytest.raises(NativeFormatError, match=r"memory_plan: allocation for value \d+: lifetime \d+\.\.\d+ "
                                                    r"differs from the derived \d+\.\.\d+"):
            load(data, engine=engine)


def test_slots_on_a_call_that_cannot_run_out_are_refused_by_both_engines():
    native = emitted("mlp")
    doc = _plan_doc(native)
    value = doc["memory_plan"][2][0][0]
    pc = next(j for j, i in enumerate(native.program.instructions)
              if isinstance(i, P.KernelCall) and value in i.outs)
    doc["instructions"][pc][4] = -1  # out_op: the slot would never be written
    data = _repack(native, doc)
    for engine in ("python", "cpp"):
        with pytest.raises(NativeFormatError, match=rf"instructions\[{pc}\]: values \[{value}\] have arena slots"):
            load(data, engine=engine)


@pytest.mark.parametrize("damage", ["short", "out_of_range"])
def test_bad_instruction_handles_are_refused_by_both_engines(damage):
    native = emitted("mlp")
    doc = msgspec.to_builtins(native.program)
    if damage == "short":
        doc["instruction_handles"] = doc["instruction_handles"][:-1]
        match = r"instruction_handles: \d+ handles for \d+ instructions"
    else:
        doc["instruction_handles"][0] = len(doc["debug_handles"])
        match = r"instruction_handles\[0\]: handle \d+ is out of range"
    data = _repack(native, doc)
    for engine in ("python", "cpp"):
        with pytest.raises(NativeFormatError, match=match):
            load(data, engine=engine)


def test_concurrent_runs_on_one_method_take_turns():
    import threading

    m = load(emitted("mlp"), engine="cpp")
    (args, kwargs), *_ = inputs_of("mlp")
    want = Method(emitted("mlp")).run(*args, **kwargs)
    results, errors = [], []

    def work():
        try:
            for _ in range(50):
                results.append(m.run(*args, **kwargs))
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(results) == 200
    for r in results:
        assert_bitwise(r, want, "concurrent run")


# ---------------------------------------------------------------- the loader refuses what the Python loader refuses


def _repack(native: P.NativeProgram, doc, version: int = P.FORMAT_VERSION) -> bytes:
    return container.pack(P.MAGIC, version, msgspec.msgpack.encode(doc), native.segment)


@pytest.mark.parametrize("version", [1, P.FORMAT_VERSION - 1, P.FORMAT_VERSION + 1])
def test_other_format_versions_are_refused_by_both_engines(version):
    native = emitted("mlp")
    data = _repack(native, msgspec.to_builtins(native.program), version)
    for engine in ("python", "cpp"):
        with pytest.raises(NativeVersionError, match=f"format version {version} is not supported"):
            load(data, engine=engine)


def test_an_operator_only_torchscript_knows_is_refused_by_both_engines():
    # aten::add.complex is in TorchScript's operator registry, not the dispatcher's: the C++
    # runtime cannot call it, and the Python runtime, which found it through TorchScript, ran it.
    native = emitted("mlp")
    p = native.program
    c = len(p.values)
    call = P.KernelCall(len(p.operators), [c, c], [])
    data = edited(native, values=[*p.values, P.Complex(1.0, 2.0)], operators=[*p.operators, P.Operator("aten::add",
                                                                                                    "complex")],
                  instructions=[*p.instructions, call], instruction_handles=[*p.instruction_handles, -1])
    for engine in ("python", "cpp"):
        with pytest.raises(NativeRuntimeError, match=rf"operators\[{len(p.operators)}\]: operator aten::add.complex "
                                                     "is not registered in this process"):
            load(data, engine=engine)


def test_a_damaged_file_is_refused_with_the_same_error_class():
    data = bytearray(emitted("mlp").encode())
    data[60] ^= 0xFF  # inside the header: the checksum catches it
    for engine in ("python", "cpp"):
        with pytest.raises(NativeFormatError, match="does not match its sha256"):
            load(bytes(data), engine=engine)


def test_out_of_range_indices_name_the_field():
    native = emitted("mlp")
    doc = msgspec.to_builtins(native.program)
    doc["outputs"][0] = 10_000
    with pytest.raises(NativeFormatError, match=r"outputs\[0\]: value 10000 is out of range"):
        load(_repack(native, doc), engine="cpp")


def test_an_arena_over_the_limit_is_refused_before_allocation():
    native = emitted("mlp")
    if native.program.memory_plan.arena_size == 0:
        pytest.skip("mlp has no planned tensors")
    with pytest.raises(ArenaTooLargeError):
        load(native, engine="cpp", arena=True, limits=Limits(max_arena_bytes=1))


def test_unknown_header_fields_are_ignored():
    native = emitted("mlp")
    doc = msgspec.to_builtins(native.program)
    doc["a_field_of_a_newer_minor_format"] = [1, 2, 3]
    m = load(_repack(native, doc), engine="cpp")
    (args, kwargs), *_ = inputs_of("mlp")
    assert_bitwise(m.run(*args, **kwargs), Method(native).run(*args, **kwargs), "outputs")


def _int_edge_mutants(seed: int, per_case: int):
    rng = random.Random(seed)
    for case in ("mlp", "multi_output", "while_loop", "dynamic_arith", "cond", "map"):
        native = emitted(case)
        base = msgspec.to_builtins(native.program)
        paths = list(int_paths(base))
        for _ in range(per_case):
            path, doc = with_edge_int(base, paths, rng)
            cur = doc
            for k in path:
                cur = cur[k]
            yield f"{case} {path}={cur}", _repack(native, doc)


# What only the C++ loader refuses: integers beyond int64 anywhere (Python keeps them until a
# kernel or the verifier trips). Calls whose arguments do not fit their operator's schema are
# refused by both runtimes' kind check (native.format.kinds), with the same message.
_CPP_ONLY_REFUSALS = ("an integer larger than int64",)


@pytest.mark.parametrize("per_case", [pytest.param(40, id="fast"), pytest.param(400, id="thorough",
                                                                                   marks=pytest.mark.slow)])
def test_the_cpp_loader_accepts_no_file_the_python_loader_refuses(per_case):
    from serde.errors import SerializeError

    compared = 0
    for label, data in _int_edge_mutants(0, per_case):
        try:
            load(data)
            py_error = None
        except SerializeError as e:
            py_error = e
        try:
            load(data, engine="cpp")
            cpp_error = None
        except SerializeError as e:
            cpp_error = e
        compared += 1
        if py_error is not None:
            assert cpp_error is not None, f"{label}: the C++ loader accepts what Python refuses: {py_error}"
        elif cpp_error is not None:
            assert any(m in str(cpp_error) for m in _CPP_ONLY_REFUSALS), f"{label}: {cpp_error}"
    assert compared == 6 * per_case


def test_an_overlapping_memory_plan_is_refused_by_both_engines():
    native = next((emitted(n) for n in ("mlp", "transformer_block", "multi_output") if n in CASES
                   and len(emitted(n).program.memory_plan.allocations) >= 2), None)
    if native is None:
        pytest.skip("no case with two planned tensors")
    doc = msgspec.to_builtins(native.program)
    allocs = doc["memory_plan"][2]
    # Every slot at offset 0: tensors live at the same time now share bytes.
    for a in allocs:
        a[1] = 0
    doc["memory_plan"][0] = max(-(-a[2] // 64) * 64 for a in allocs)
    data = _repack(native, doc)
    for engine in ("python", "cpp"):
        with pytest.raises(NativeFormatError, match="live together"):
            load(data, engine=engine)


# ---------------------------------------------------------------- the CLI


def test_cli_runs_and_checks_without_python(tmp_path):
    path = tmp_path / "mlp.pt2n"
    P.write_program(path, emitted("mlp"))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LD_LIBRARY_PATH")}
    out = subprocess.run([str(CLI), "check", str(path)], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "ok:" in out.stdout
    out = subprocess.run([str(CLI), "run", str(path), "--arena"], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "output[0]: Float[" in out.stdout
    # No Python in the process: the binary links libtorch, never libpython.
    libs = subprocess.run(["ldd", str(CLI)], capture_output=True, text=True).stdout
    assert "libtorch_cpu" in libs and "libpython" not in libs and "torch_python" not in libs


def test_cli_reports_a_refusal_with_its_kind(tmp_path):
    path = tmp_path / "cut.pt2n"
    path.write_bytes(emitted("mlp").encode()[:100])
    out = subprocess.run([str(CLI), "check", str(path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1
    assert out.stdout.startswith("error: NativeFormatError:"), out.stdout


# ---------------------------------------------------------------- fuzz: hostile files never crash the C++ loader

_FUZZ_CASES = ("mlp", "cond", "while_loop", "dynamic_arith", "map", "unbacked_item")



def _mutants(rng: random.Random, n: int):
    """``n`` hostile variants: truncations, byte flips, and re-encoded headers (valid checksum)
    with edge integers, self jumps, dropped or duplicated list items and swapped tags."""
    natives = {c: emitted(c) for c in _FUZZ_CASES if c in CASES}
    for _ in range(n):
        native = natives[rng.choice(sorted(natives))]
        data = native.encode()
        kind = rng.randrange(6)
        if kind == 0:
            yield "truncate", data[:rng.randrange(len(data))]
            continue
        if kind == 1:
            buf = bytearray(data)
            for _ in range(rng.randint(1, 8)):
                buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
            yield "flip", bytes(buf)
            continue
        doc = msgspec.to_builtins(native.program)
        if kind == 2:  # an integer anywhere set to an edge value
            _, doc = with_edge_int(doc, list(int_paths(doc)), rng)
        elif kind == 3:  # a jump to itself, or a jump anywhere
            ins = doc["instructions"]
            k = rng.randrange(len(ins))
            ins[k] = ["jump_false", rng.randrange(len(doc["values"])), rng.choice([k, 0, len(ins)])]
        elif kind == 4:  # a list item dropped or duplicated somewhere
            lists = [p for p in _list_paths(doc) if p]
            cur = doc
            path = rng.choice(lists)
            for k in path[:-1]:
                cur = cur[k]
            lst = cur[path[-1]]
            if lst and rng.random() < 0.5:
                del lst[rng.randrange(len(lst))]
            else:
                lst.append(copy.deepcopy(lst[0]) if lst else 0)
        else:  # a tag swapped for another of its union, or a value replaced by a huge tensor
            vals = doc["values"]
            k = rng.randrange(len(vals))
            vals[k] = rng.choice([["tensor", 7, [1 << 40, 1 << 40], [1 << 40, 1], 0, -1], ["symint", 0],
                                  ["list", [k]], ["str", "x"], ["tensor", 7, [], [], 0, 0], ["device", "nonsense"]])
        yield f"header{kind}", _repack(native, doc)


def _list_paths(x, path=()):
    if isinstance(x, list):
        yield path
        for i, y in enumerate(x):
            yield from _list_paths(y, (*path, i))
    elif isinstance(x, dict):
        for k, y in x.items():
            yield from _list_paths(y, (*path, k))


def _limit_memory():
    # A hostile size must fail as an allocation error, not by exhausting the machine.
    resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))


def _fuzz(tmp_path: Path, n: int, seed: int) -> None:
    rng = random.Random(seed)
    files = []
    for i, (kind, data) in enumerate(_mutants(rng, n)):
        f = tmp_path / f"m{i:05d}_{kind}.pt2n"
        f.write_bytes(data)
        files.append(f)
    crashes, refused, accepted = [], 0, 0
    batch = 50
    for cmd in ("check", "run"):
        for b in range(0, len(files), batch):
            chunk = files[b:b + batch]
            out = subprocess.run([str(CLI), cmd, *map(str, chunk), "--max-loop-instructions", "1000"],
                                 capture_output=True, text=True, timeout=600, preexec_fn=_limit_memory)
            if out.returncode < 0 or out.returncode > 1:
                last = out.stdout.strip().splitlines()[-1:] if out.stdout.strip() else []
                crashes.append((cmd, chunk[0].name, out.returncode, last, out.stderr[-500:]))
                continue
            for line in out.stdout.splitlines():
                if ": error: " in line:
                    assert any(f": error: {k}:" in line for k in ("NativeFormatError", "NativeVersionError",
                                                                  "ArenaTooLargeError", "InputMismatchError",
                                                                  "NativeRuntimeError")), line
                    refused += cmd == "check"
                elif ": ok:" in line:
                    accepted += 1
    assert not crashes, f"{len(crashes)} crashed batches: {crashes[:3]}"
    assert refused > n // 2  # the mutations really are hostile
    assert accepted + refused == n


def test_fuzz_the_cli_with_hostile_files(tmp_path):
    _fuzz(tmp_path, 150, seed=0)


@pytest.mark.slow
def test_fuzz_the_cli_with_hostile_files_thoroughly(tmp_path):
    _fuzz(tmp_path, 2000, seed=1)


def _random_argument_edit(rng: random.Random) -> tuple[str, bytes]:
    """A zoo program with one kernel argument pointed at another value (any kind); returns its
    case name and the edited file."""
    name = rng.choice([c for c in _FUZZ_CASES if c in CASES])
    native = emitted(name)
    p = native.program
    kernels = [pc for pc, i in enumerate(p.instructions) if isinstance(i, P.KernelCall) and i.args]
    k = rng.choice(kernels)
    ins = list(p.instructions)
    args = list(ins[k].args)
    # Half the time a constant: the C++ loader converts those to their parameter's type at load.
    constants = [i for i, v in enumerate(p.values)
                 if not isinstance(v, (P.Tensor, P.List, P.SymInt, P.SymFloat, P.SymBool))]
    pool = constants if rng.random() < 0.5 else range(len(p.values))
    args[rng.randrange(len(args))] = rng.choice(pool)
    ins[k] = msgspec.structs.replace(ins[k], args=args)
    return name, edited(native, instructions=ins)


def _random_output_or_move_edit(rng: random.Random) -> tuple[str, bytes]:
    """A zoo program with a kernel output or a move's destination declared of another kind, or a
    move's source pointed at a constant or an input (the edits keep every value written, so they
    reach the kind check); returns its case name and the edited file."""
    name = rng.choice([c for c in _FUZZ_CASES if c in CASES])
    native = emitted(name)
    p = native.program
    moves = [pc for pc, i in enumerate(p.instructions) if isinstance(i, P.MoveCall)]
    ins, values = list(p.instructions), list(p.values)
    if moves and rng.random() < 1 / 3:
        pc = rng.choice(moves)
        ready = [i for i, v in enumerate(values) if not isinstance(v, (P.List, P.SymInt, P.SymFloat, P.SymBool))
                 and not (isinstance(v, P.Tensor) and v.data < 0)] + [i.value for i in p.inputs]
        ins[pc] = msgspec.structs.replace(ins[pc], src=rng.choice(ready))
    else:
        written = [o for i in ins if isinstance(i, P.KernelCall) for o in i.outs if o >= 0]
        written += [ins[pc].dst for pc in moves]
        f32, i64 = int(schema.ScalarType.FLOAT), int(schema.ScalarType.LONG)
        values[rng.choice(written)] = rng.choice([
            P.NoneValue(), P.Int(1), P.Float(0.5), P.Bool(True), P.IntList([1]), P.SymInt(), P.SymFloat(), P.SymBool(),
            P.Tensor(f32, [2], [1]), P.Tensor(i64, [], [])])
    return name, edited(native, instructions=ins, values=values)


def _verdict_key(outcome: tuple) -> str:
    return outcome[0] if outcome[0] != "refused" else re.sub(r"\d+", "#", outcome[1].split(": ", 2)[2])


@pytest.mark.parametrize("n", [pytest.param(150, id="fast"), pytest.param(1500, id="thorough",
                                                                            marks=pytest.mark.slow)])
def test_random_argument_edits_reach_the_same_outcome_in_both_runtimes(n):
    # Both runtimes must agree, edit by edit: both refuse the file at load with the same message,
    # or both raise a typed error of the same class, or both run to equal outputs and state.
    # Before the kind check at load they did not: torch.ops took an int, a tensor or None for a
    # bool parameter and ran, the C++ runtime refused; its conversion of constants raised a
    # foreign RuntimeError. In heap mode no divergence is left.
    rng = random.Random(0)
    outcomes: dict[str, int] = {}
    for _ in range(n):
        name, data = _random_argument_edit(rng)
        (a, kw), *_ = inputs_of(name)
        key = _verdict_key(edit_outcome(data, a, kw))
        outcomes[key] = outcomes.get(key, 0) + 1
    # The edits reach the runs, and every kind of verdict: the kind check, the data-flow check,
    # typed run-time errors.
    assert outcomes.get("ok", 0) > n // 10, outcomes
    assert outcomes.get("error", 0) > n // 50, outcomes
    assert any("cannot take value" in key for key in outcomes), outcomes
    assert any("may be read before it is written" in key for key in outcomes), outcomes


@pytest.mark.parametrize("arena", [False, True], ids=["heap", "arena"])
@pytest.mark.parametrize("n", [pytest.param(100, id="fast"), pytest.param(1000, id="thorough",
                                                                            marks=pytest.mark.slow)])
def test_random_output_and_move_edits_reach_the_same_outcome_in_both_runtimes(n, arena):
    # A kernel's output or a move's destination declared of another kind, or a move reading a
    # constant or an input of any kind: both runtimes refuse the file alike (the kind check's
    # output and move rules, the memory plan's proof, ...) or run it alike. Without the output
    # and move rules such a value reached its next reader past the argument check, which trusts
    # the declared kinds.
    rng = random.Random(2)
    outcomes: dict[str, int] = {}
    for _ in range(n):
        name, data = _random_output_or_move_edit(rng)
        (a, kw), *_ = inputs_of(name)
        key = _verdict_key(edit_outcome(data, a, kw, arena=arena))
        outcomes[key] = outcomes.get(key, 0) + 1
    assert outcomes.get("ok", 0) > n // 20, outcomes
    assert any("cannot be written to value" in key for key in outcomes), outcomes
    assert any(key.startswith("moves value") for key in outcomes), outcomes


def _results_differ_from_their_declarations(data: bytes, args: tuple, kwargs: dict) -> bool:
    """Whether a kernel of this run returns another dtype or other sizes than the program declares
    (the Python runtime's check=True mode compares every result with its declaration)."""
    from serde.errors import SerializeError

    fresh = pytree.tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, (args, kwargs))
    try:
        load(data, check=True, max_loop_instructions=10_000).run(*fresh[0], **fresh[1])
    except NativeRuntimeError as e:
        return ", declared " in str(e)
    except SerializeError:
        return False
    return False


@pytest.mark.parametrize("n", [pytest.param(150, id="fast"), pytest.param(1500, id="thorough",
                                                                            marks=pytest.mark.slow)])
def test_random_argument_edits_in_arena_mode_reach_the_same_outcome_in_both_runtimes(n):
    # The same edits, run in arena mode. Some make a kernel return another dtype or other sizes
    # than its output's declaration (an int for sum's dtype, a weight matrix for a batch). The
    # C++ runtime writes every planned result out= into its slot, where the out= kernel casts,
    # refuses the dtype or resizes the slot's view over its neighbours'; the Python runtime
    # computes planned results under OUT_MIN_BYTES functionally. They used to end differently;
    # now both judge every planned result against its declaration, and the Python runtime runs a
    # result other than declared again out= before judging it, as the C++ runtime ran it.
    rng = random.Random(1)
    contradicting = 0
    for _ in range(n):
        name, data = _random_argument_edit(rng)
        (a, kw), *_ = inputs_of(name)
        edit_outcome(data, a, kw, arena=True)
        contradicting += _results_differ_from_their_declarations(data, a, kw)
    assert contradicting > n // 50, contradicting  # such edits are among them
