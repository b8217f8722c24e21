"""A fuzzer for the loaders: mutated ``.pt2s`` and ``.pt2n`` files, each loaded (and run) in a worker process.

Seeds are the frozen fixtures of 2.2 and of the current schema version (real exported programs with
example inputs; the current ones also carry what later versions added: input guards, named results,
xxh3 digests), and the fuzzer's own seeds in ``seeds/`` (``make_seeds.py``: generators, and a
program with ``debug.json`` and extra files, which no fixture holds). Each case is made by one
strategy, chosen by a deterministic ``random.Random(f"{seed}:{case}")``:

* ``program`` / ``weights`` / ``manifest``: structure-aware edits of the decoded JSON (ints to
  huge, negative, 2**64 and at and past every bound; hostile, unicode, invalid UTF-8 and canary
  strings; names of the generated code's namespace (``self``, ``getattr``, module attributes);
  list items dropped, duplicated or swapped; union members swapped; argument lists shortened; deep
  nesting; wrong types; names swapped; targets swapped; expressions of the wrong arity (an ``ite``
  with two operands) and of the wrong sort (a boolean at a size); operands of operators and
  higher-order ops swapped for tensors of another meta; dtypes, layouts and memory formats at and
  past their range, Unknown (0) included; arguments of the calls whose kernels check what their
  fake kernels do not, and of torch's vmap wrappers, set to other values of their kind). The archive is then re-written with
  ``serde.archive.write_archive`` (the manifest by the attack kit's raw zip writer), so checksums
  and sizes match and the checks behind them are reached.
* ``debug``: debug.json's provenance, stack traces and module types swapped for hostile values, or
  the edits above. ``extra``: an extra file's bytes. ``rename``: one name (a parameter's FQN half
  the time) renamed everywhere, in every JSON member, to a name of the generated code's namespace.
* ``member_bytes``: blind byte edits of a JSON member or a weight payload (``data/``), checksums
  recomputed.
* ``pt2s_bytes`` / ``pt2n_bytes``: blind byte edits (flips, truncation, insertion) of a whole file;
  ``pt2n_flip``: one blind bit flip anywhere in a ``.pt2n`` file.
* ``pt2n_header``: the structure-aware edits above on a ``.pt2n`` file's decoded msgpack header, or
  one of its enum constants (dtype, layout, memory format) at or past its range.

A ``.pt2s`` case is read one of three ways (``Case.path``): loaded from bytes, loaded with
``mmap=True`` from its path (both with ``extra_files={}``, which decodes the extra files), or
emitted (``native.emit_artifact``) and its program loaded and run natively; a ``.pt2n`` case is
loaded by the Python or (when built) the C++ loader. Every mutation is labelled
``member:field:kind``; :meth:`Report.coverage_table` counts the cases per kind, member and field.

Workers (``_worker.py``) run under a time limit and an address-space limit. Outcomes:

===================  =================================================================  =======
outcome              meaning                                                            verdict
===================  =================================================================  =======
rejected             a SerializeError subclass at load                                  fine
rejected_propagate   loaded or emitted, then refused by ``load(propagate=True)``        fine
                     re-running the operators (results unlike what they compute, or
                     operands their kernels refuse)
ok                   loaded and ran                                                     fine
run_guard            loaded; the input guards refuse the seed's example inputs          fine
run_torch            loaded; a kernel refused its (bindable) arguments, as in eager     fine
run_refused          loaded; the native runtime refused the inputs or a kernel failed   fine
oom / run_oom        an allocation hit the worker's memory limit                        reported
run_inconsistent     loaded (propagation included), then failed in a way a consistent   reported
                     program cannot
foreign              a non-SerializeError exception at load                             bug
foreign_run          a non-SerializeError exception raised by pt2serde's own code       bug
                     while running (the native runtime)
crash_*              the worker died by a signal                                        bug
hang_load            no answer within the time limit while loading                      bug
hang_run             no answer within the time limit while running                      reported
canary               a file appeared in the worker's directory: code was executed       bug
undetected           a changed .pt2n file loaded (every byte is checksummed or zero)    bug
emit_unchecked       emitted, though ``serde.load`` refuses the file                    bug
===================  =================================================================  =======

The summaries of past campaigns (outcome counts, coverage, findings and what became of each) are
kept in ``campaigns/``.

Command line (from the repository root)::

    PYTHONPATH=src:. python tests/serde/fuzz/fuzzer.py --cases 50000 --jobs 2 --seed 0
    PYTHONPATH=src:. python tests/serde/fuzz/fuzzer.py --seed 0 --case 1234 --write case.pt2s
"""

from __future__ import annotations

import argparse
import copy
import io
import json
import os
import random
import re
import selectors
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
if str(ROOT) not in sys.path:  # run as a script: the tests package (for the attack kit's raw zip writer)
    sys.path.insert(0, str(ROOT))

from serde import archive  # noqa: E402
from serde.core import schema  # noqa: E402
from serde.core.expr import ARITY, FUNCTION_MEMBERS  # noqa: E402
from serde.core.version import SCHEMA_VERSION  # noqa: E402
from serde.errors import SerializeError  # noqa: E402
from tests.serde.attacks._attack_kit import raw_zip  # noqa: E402

# The newest frozen fixtures: the current version's once it is released (fixtures/freeze.py), the
# last released one while a schema change is under development.
_NEWEST = max((p for p in (ROOT / "fixtures").glob(f"v{SCHEMA_VERSION[0]}.*") if p.is_dir()
               and int(p.name.split(".")[1]) <= SCHEMA_VERSION[1]), key=lambda p: int(p.name.split(".")[1]))
SEED_DIRS = (ROOT / "fixtures" / "v2.2", _NEWEST,
             HERE / "seeds")

# Asserted to be zero. run_inconsistent is reported, not asserted: a program the loader's
# consistency checks let through that torch then fails to run; the campaign report lists each kind.
BUGS = ("foreign", "foreign_run", "crash_load", "crash_run", "hang_load", "canary", "undetected", "emit_unchecked")
REVERT_ENV = "PT2SERDE_FUZZ_REVERT"
REPORTED = ("run_inconsistent", "hang_run", "oom", "run_oom")
CANARY = "CANARY"
_BAD_UTF8 = "\u2603BADUTF8\u2603"
_BAD_UTF8_BYTES = (b"\xff\xfe\xc3(", b"\xed\xa0\x80", b"\xc0\xaf", b"a\x80b")

# Strings that would run code if a loader ever pasted them into Python source (torch.fx generates
# source from node names) or evaluated them.
HOSTILE_STRINGS = (
    f'x",open("{CANARY}","w"),"',
    f"x'),open('{CANARY}','w'),('",
    f"__import__('os').system('touch {CANARY}')",
    f"x\nopen('{CANARY}','w')\n",
    f"x; open('{CANARY}','w') #",
    f"{{open('{CANARY}','w')}}",
    f"x=open('{CANARY}','w')",
    f"x=__import__('os').system('touch {CANARY}')",
    "",
    "_",
    "self",
    "__class__",
    "torch",
    "0abc",
    "a" * 5000,
    "na\u00efve_\u202e\u0430",
    "\x00",
    "../../etc/passwd",
    "builtins.eval",
    "os.system",
    _BAD_UTF8,
)
# Text that ends the quoted literal ep.module()'s guard code pastes a string constant input or a
# dict key of an input path into, and runs what follows.
QUOTE_BREAKERS = (
    f"x' == '' or open('{CANARY}','w') or '",
    f'"+open("{CANARY}","w").name+"',
    "x\\",
    f"x\nopen('{CANARY}','w')",
)
HOSTILE_INTS = (0, 1, -1, 2, 3, 7, 2**31, 2**31 - 1, 2**32, 2**53 + 1, 2**63 - 1, -(2**63), 2**63, 2**64,
                2**64 - 1, -(2**64), 10**30, -(10**30))
TARGETS = (
    "torch.ops.aten._local_scalar_dense.default", "torch.ops.aten.relu.default", "torch.ops.aten.add.Tensor",
    "torch.ops.aten.split.Tensor", "torch.ops.aten.topk.default", "torch.ops.aten.view.default",
    "torch.ops.aten.cat.default", "torch.ops.aten.index.Tensor", "torch.ops.aten.sym_size.int",
    "torch.ops.higher_order.cond", "torch.ops.higher_order.while_loop", "torch.ops.higher_order.scan",
    "torch.ops.higher_order.map_impl", "torch.ops.higher_order.associative_scan",
    "torch.ops.higher_order.invoke_subgraph", "torch.ops.higher_order.auto_functionalized",
    "torch.ops.higher_order.with_effects", "torch.ops.higher_order.flex_attention",
    "_operator.getitem", "_operator.add", "_operator.floordiv", "torch.sym_max", "math.floor",
    "torch._functorch.predispatch._add_batch_dim", "builtins.eval", "os.system",
)
ARGUMENT_MEMBERS = tuple(schema.Argument.__struct_fields__)
# Names that clash with what torch.fx generates: the forward's `self` (and FQNs fx names `self`),
# its custom builtins, the builtin its code writes raw, attributes and methods of the modules
# ep.module() and unflatten build, and builtins its namespace renames around.
FX_NAMES = ("self", "Self", "SELF", "getattr", "torch", "fx_pytree", "pytree", "device", "inf", "nan",
            "NoneType", "forward", "training", "_modules", "graph", "code", "_in_spec", "_out_spec",
            "_guards_fn", "__class__", "len", "print", "max", "input", "operator", "math", "builtins")
# Integers at and past every bound the format has: int64, uint64, int32 and zero.
BOUND_INTS = (2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64 - 1, 2**64, 10**30, -(10**30), 2**31 - 1, 2**31,
              2**32, -1, 0)
# What a hostile debug.json may hold where torch writes its provenance (JSON text).
HOSTILE_PROVENANCE = ("[" * 100_000 + "]" * 100_000, "[[1, 2]]", '[{"name": 1}]', "x", "null", "{}",
                      '[{"graph_id": 100000000000000000000000}]', '[{"from_node": "x"}]',
                      '[{"from_node": [[]]}]')
# Expressions of each sort, to plant where the other sort is expected.
_S0 = {"symbol": "s0"}
BOOL_EXPRS = ({"constant": 1}, {"constant": 2}, {"gt": [_S0, {"integer": 1}]},
              {"eq": [{"integer": 2}, {"integer": 2}]}, {"logical_not": [{"constant": 2}]})
NUM_EXPRS = (_S0, {"integer": 3}, {"integer": 0}, {"add": [_S0, {"integer": 1}]})
_EXPR_MEMBERS = frozenset(schema.Expr.__struct_fields__)
_BOOL_OPERANDS = frozenset({"logical_and", "logical_or", "logical_not"})
_FUNCTION_MEMBERS = tuple(sorted(set(FUNCTION_MEMBERS.values())))
_MEMBER_OP = {m: op for op, m in FUNCTION_MEMBERS.items()}


def _arity_fits(member: str, n: int) -> bool:
    lo, hi = ARITY[_MEMBER_OP[member]]
    return lo <= n and (hi is None or n <= hi)


_ENUM_TAGS = frozenset({"dtype", "layout", "memory_format"})
_ENUM_FIELDS = _ENUM_TAGS | {"as_scalar_type", "as_layout", "as_memory_format"}
ENUM_INTS = (0, 0, -1, 8, 64, 2**31, 2**63 - 1)  # Unknown (0) twice: the value each enum has but torch has not
PAYLOAD_PREFIX = "data/"
# Every kind of mutation the fuzzer labels (the last part of ``member:field:kind``); the tests
# check each is made, so a mutation that silently stops happening fails them. "other.kept" (a value
# of no JSON type, left as it is) is not a mutation and not listed.
KINDS = frozenset({
    # blind edits of a value by its JSON type (_mutate_value)
    "bool.wrong", "int.bound", "int.hostile", "int.nearby_or_type", "float.wrong", "str.hostile", "str.fx_name",
    "str.swap_name", "str.suffix", "str.target", "list.edit", "dict.edit", "null.wrong", "deep",
    # targeted edits (_targeted) and the .pt2n header's enum constants
    "shorten", "swap", "kind_or_keyword", "drop_or_dup", "io_count", "edit", "member_swap", "hostile_int",
    "canary", "quote_breaker", "fx_name", "int_bound", "wrong_arity", "wrong_sort", "wrong_meta", "enum_bound",
    "kernel_arg", "size_item",
    # the .pt2n header's structure (_header_structure): a symbol unbound, a size constant near int64,
    # a call's op swapped for another of the program's operators
    "unbind_symbol", "size_overflow", "op_swap",
    # debug.json, extra files, renames, bytes
    "hostile", "hostile_text", "rename_to_fx_name", "rename_to_hostile", "bytes", "flip",
})
# Kinds made in fewer than one case in a thousand: a campaign of 50,000 makes each, a slice may not.
RARE_KINDS = frozenset({"float.wrong", "null.wrong"})


# ---------------------------------------------------------------- seeds


@dataclass
class Seed:
    name: str
    path: Path
    version: tuple[int, int]
    members: dict[str, bytes]          # every member except manifest.json
    program: Any                       # program.json decoded to plain JSON
    weights: Any
    manifest: Any
    native: bytes | None = None        # the emitted .pt2n, if the emitter supports this program


def load_seeds(with_native: bool = True) -> list[Seed]:
    seeds = []
    for d in sorted(p for seed_dir in SEED_DIRS for p in seed_dir.iterdir()):
        path = d / "model.pt2s"
        if not path.is_file():
            continue
        c = archive.read_archive(path)
        members = {n: bytes(c.member(n)) for n in c.names if n != archive.MANIFEST}
        seed = Seed(f"{d.parent.name}/{d.name}", path, c.schema_version, members,
                    msgspec.json.decode(members[archive.PROGRAM]), msgspec.json.decode(members[archive.WEIGHTS]),
                    msgspec.json.decode(bytes(c.member(archive.MANIFEST))))
        if with_native:
            import native
            try:
                seed.native = native.emit_artifact(path).encode()
            except SerializeError:
                pass  # the emitter deliberately refuses some programs
        seeds.append(seed)
    return seeds


# ---------------------------------------------------------------- structure-aware mutation


def _slots(doc: Any) -> list[tuple[Any, Any]]:
    """Every (container, key) pair in a JSON document, parents before children."""
    out: list[tuple[Any, Any]] = []
    stack = [doc]
    while stack:
        c = stack.pop()
        items = c.items() if isinstance(c, dict) else enumerate(c)
        for k, v in items:
            out.append((c, k))
            if isinstance(v, (dict, list)):
                stack.append(v)
    return out


def _named_slots(doc: Any) -> list[tuple[Any, Any, str]]:
    """``_slots`` with each slot's field name (a list item is named after its list, ``sizes[]``)."""
    out: list[tuple[Any, Any, str]] = []
    stack: list[tuple[Any, str]] = [(doc, "$")]
    while stack:
        c, name = stack.pop()
        items = c.items() if isinstance(c, dict) else enumerate(c)
        for k, v in items:
            field_name = k if isinstance(k, str) else f"{name}[]"
            out.append((c, k, field_name))
            if isinstance(v, (dict, list)):
                stack.append((v, field_name))
    return out


def _strings(doc: Any) -> list[str]:
    return [c[k] for c, k in _slots(doc) if isinstance(c[k], str)] or ["x"]


def _nodes(doc: Any) -> list[dict]:
    return [c[k] for c, k in _slots(doc) if isinstance(c[k], dict) and "target" in c[k] and "inputs" in c[k]]


def _deep(rng: random.Random) -> msgspec.Raw:
    """Deeply nested JSON, as raw text (a Python structure this deep could not be encoded)."""
    depth = rng.choice((200, 3000, 100_000))
    return msgspec.Raw(b"[" * depth + b"]" * depth)


def _deep_json_text(rng: random.Random) -> str:
    depth = rng.choice((500, 5000, 200_000))
    opener, closer = rng.choice((("[", "]"), ('{"a":', "}")))
    return opener * depth + "1" + closer * depth


def _deep_treespec(depth: int) -> msgspec.Raw:
    return msgspec.Raw(b'{"type":"tuple","children":[' * depth + b'{"type":"*"}' + b"]}" * depth)


def _mutate_value(v: Any, rng: random.Random, doc: Any) -> tuple[Any, str]:
    """(the mutated value, the kind of mutation)."""
    if isinstance(v, bool):
        return rng.choice((not v, 0, 2, None, "true")), "bool:wrong"
    if isinstance(v, int):
        r = rng.random()
        if r < 0.35:
            return rng.choice(BOUND_INTS), "int:bound"
        if r < 0.55:
            return rng.choice(HOSTILE_INTS), "int:hostile"
        return rng.choice((v + rng.choice((-1, 1)), -v, v * 1000, float(v), str(v))), "int:nearby_or_type"
    if isinstance(v, float):
        return rng.choice((0.0, -v, 1e308, v * 1e10, int(v) if v == v and abs(v) < 1e18 else 0, "nan")), "float:wrong"
    if isinstance(v, str):
        r = rng.random()
        if r < 0.35:
            return rng.choice(HOSTILE_STRINGS), "str:hostile"
        if r < 0.5:
            return rng.choice(FX_NAMES), "str:fx_name"
        if r < 0.8:
            return rng.choice(_strings(doc)), "str:swap_name"
        if r < 0.9:
            return v + rng.choice(("_1", "'", '"', "\\", "\n", ".default", "$")), "str:suffix"
        return rng.choice(TARGETS), "str:target"
    if isinstance(v, list):
        return _mutate_list(v, rng, doc), "list:edit"
    if isinstance(v, dict):
        return _mutate_dict(v, rng, doc), "dict:edit"
    if v is None:
        return rng.choice((0, "", [], {})), "null:wrong"
    return v, "other:kept"


def _mutate_list(v: list, rng: random.Random, doc: Any) -> Any:
    v = list(v)
    op = rng.randrange(8)
    if op == 0 and v:
        del v[rng.randrange(len(v))]
    elif op == 1 and v:
        i = rng.randrange(len(v))
        v.insert(i, copy.deepcopy(v[i]))
    elif op == 2 and len(v) > 1:
        i, j = rng.sample(range(len(v)), 2)
        v[i], v[j] = v[j], v[i]
    elif op == 3 and v:
        del v[rng.randrange(len(v)):]
    elif op == 4:
        v = []
    elif op == 5 and v:
        v.extend(copy.deepcopy(v) * rng.choice((1, 50)))
    elif op == 6:
        return rng.choice((0, "x", {}, None))
    else:
        v.append(rng.choice((0, "x", None, {}, [], {"as_none": True})))
    return v


def _mutate_dict(v: dict, rng: random.Random, doc: Any) -> Any:
    v = dict(v)
    keys = list(v)
    op = rng.randrange(6)
    if op == 0 and len(keys) == 1 and keys[0].startswith("as_"):
        # swap the union member, keeping the value
        v = {rng.choice(ARGUMENT_MEMBERS): v[keys[0]]}
    elif op == 1 and keys:
        del v[rng.choice(keys)]
    elif op == 2:
        v[rng.choice(("as_int", "extra", "as_tensor", "name"))] = rng.choice((1, "x", None, {"name": "x"}))
    elif op == 3 and keys:
        k = rng.choice(keys)
        v[k] = rng.choice((None, 0, "", [], {}, 2**64))
    elif op == 4 and len(keys) == 1:
        v = {keys[0]: v[keys[0]], rng.choice(ARGUMENT_MEMBERS): v[keys[0]]}  # two members of a union
    else:
        return rng.choice((0, "x", [], None))
    return v


TARGETED_OPS = 21
# an item of a size list a kernel needs as concrete integers, at a bound (the kernel's own check)
SIZE_ITEM_OP = 20
# an argument a kernel checks and its fake kernel does not (_kernel_arg)
KERNEL_ARG_OP = 19
# an enum at or past its range, in program.json (_targeted) or a .pt2n header (_mutate_native_header)
HEADER_ENUM_OP = ENUM_OP = 18
# the structural edits of a .pt2n header (_header_structure), each its own op outside _targeted's range
HEADER_UNBIND_OP, HEADER_OVERFLOW_OP, HEADER_OP_SWAP_OP = 30, 31, 32
HEADER_STRUCTURE_OPS = (HEADER_UNBIND_OP, HEADER_OVERFLOW_OP, HEADER_OP_SWAP_OP)


def _targeted(doc: Any, rng: random.Random, ops: tuple[int, ...] | None = None) -> str | None:
    """Edits aimed at the consistency of a program; False when this document has no place for it."""
    nodes = _nodes(doc)
    op = rng.choice(ops) if ops else rng.randrange(TARGETED_OPS)
    if op == 0 and nodes:  # shorten an argument list
        n = rng.choice(nodes)
        if n["inputs"]:
            del n["inputs"][rng.randrange(len(n["inputs"])):]
            return "inputs:shorten"
    elif op == 1 and nodes:  # swap the target
        rng.choice(nodes)["target"] = rng.choice(TARGETS + tuple(n["target"] for n in nodes))
        return "target:swap"
    elif op == 2 and nodes:  # keyword <-> positional, or a renamed keyword
        n = rng.choice(nodes)
        if n["inputs"]:
            na = rng.choice(n["inputs"])
            if rng.random() < 0.5:
                na["kind"] = {1: 2, 2: 1}.get(na.get("kind"), 1)
            else:
                na["name"] = rng.choice(("self", "other", "input", "dim", "", "bogus", "alpha"))
            return "inputs:kind_or_keyword"
    elif op == 3 and nodes:  # drop or duplicate an output of a node
        n = rng.choice(nodes)
        outs = n["outputs"]
        if outs:
            if rng.random() < 0.5:
                del outs[rng.randrange(len(outs))]
            else:
                outs.append(copy.deepcopy(outs[-1]))
            return "outputs:drop_or_dup"
    elif op == 4:  # graph outputs vs signature
        graphs = [c[k] for c, k in _slots(doc) if isinstance(c[k], dict) and "outputs" in c[k] and "nodes" in c[k]]
        sigs = [c[k] for c, k in _slots(doc) if isinstance(c[k], dict) and "output_specs" in c[k]]
        pool = [(g, "outputs") for g in graphs] + [(s, "output_specs") for s in sigs] + [
            (s, "input_specs") for s in sigs] + [(g, "inputs") for g in graphs]
        if pool:
            holder, key = rng.choice(pool)
            v = holder[key]
            if v:
                if rng.random() < 0.5:
                    del v[rng.randrange(len(v))]
                else:
                    v.append(copy.deepcopy(rng.choice(v)))
                return "specs:io_count"
    elif op == 5:  # treespecs
        specs = [c for c, k in _slots(doc) if isinstance(c, dict) and k == "type" and "children" in c]
        if specs:
            s = rng.choice(specs)
            r = rng.randrange(4)
            if r == 0 and s["children"]:
                del s["children"][rng.randrange(len(s["children"]))]
            elif r == 1:
                s["children"].append({"type": "*"})
            elif r == 2:
                s["children"] = [_deep_treespec(rng.choice((100, 2000, 20_000)))]
            else:
                s["context"] = rng.choice((_deep_json_text(rng), "[1,2]", '{"factory":"eval","keys":[]}', "nan",
                                           '{"name":"os.system","fields":["__class__"]}'))
            return "treespec:edit"
    elif op == 6:  # deep custom metadata
        metas = [c[k] for c, k in _slots(doc) if k == "metadata" and isinstance(c[k], dict)]
        holders = metas + [c[k] for c, k in _slots(doc) if k == "graph_module"]
        if holders:
            rng.choice(holders)["custom"] = _deep_json_text(rng)
            return "custom:deep"
    elif op == 7 and nodes:  # union member swap inside a node's inputs
        n = rng.choice(nodes)
        if n["inputs"]:
            na = rng.choice(n["inputs"])
            arg = na.get("arg")
            if isinstance(arg, dict) and len(arg) == 1:
                (k, val), = arg.items()
                na["arg"] = {rng.choice(ARGUMENT_MEMBERS): val}
                return "arg:member_swap"
    elif op == 8:  # sizes and strides
        metas = [c[k] for c, k in _slots(doc) if isinstance(c[k], dict) and "sizes" in c[k] and "strides" in c[k]]
        if metas:
            m = rng.choice(metas)
            fld = rng.choice(("sizes", "strides", "storage_offset"))
            if fld == "storage_offset":
                m[fld] = {"as_int": rng.choice(HOSTILE_INTS)}
            elif m[fld] and rng.random() < 0.7:
                m[fld][rng.randrange(len(m[fld]))] = {"as_int": rng.choice(HOSTILE_INTS)}
            else:
                m[fld] = m[fld] + [{"as_int": rng.choice((1, 2, 2**40))}]
            return "sizes_strides:hostile_int"
    elif op == 9:  # range constraints
        rcs = [c[k] for c, k in _slots(doc) if isinstance(c[k], dict) and "min_val" in c[k]]
        if rcs:
            rc = rng.choice(rcs)
            rc[rng.choice(("min_val", "max_val"))] = rng.choice(HOSTILE_INTS + (None,))
            return "range_constraints:hostile_int"
    elif op == 10:  # the canary in a name
        slots = [(c, k) for c, k in _slots(doc) if isinstance(c[k], str) and k in ("name", "target", "as_name")]
        if slots:
            c, k = rng.choice(slots)
            c[k] = rng.choice(HOSTILE_STRINGS[:8])
            return "name:canary"
    elif op == 11:  # the canary in a string constant input or a dict key, everywhere it occurs
        strings = [c[k] for c, k in _slots(doc) if k == "as_string" and isinstance(c[k], str)]
        keyed = [c for c, k in _slots(doc) if k == "context" and isinstance(c.get("context"), str)
                 and c.get("type") in ("dict", "OrderedDict")]
        if strings and (not keyed or rng.random() < 0.5):
            old, new = rng.choice(strings), rng.choice(QUOTE_BREAKERS)
            for c, k in _slots(doc):
                if k == "as_string" and c[k] == old:
                    c[k] = new
            return "as_string:quote_breaker"
        if keyed:
            spec = rng.choice(keyed)
            try:
                keys = json.loads(spec["context"])
            except (ValueError, RecursionError):  # an earlier blind edit of this case
                return None
            if isinstance(keys, list) and keys:
                old_context, new_key = spec["context"], rng.choice(QUOTE_BREAKERS)
                keys[rng.randrange(len(keys))] = new_key
                for c, k in _slots(doc):
                    if k == "context" and c[k] == old_context:
                        c[k] = json.dumps(keys)
                return "context:quote_breaker"
    elif op == 12:  # a name against the generated code's namespace, at a name field
        slots = [(c, k) for c, k in _slots(doc) if isinstance(c[k], str) and k in _NAME_FIELDS]
        if slots:
            c, k = rng.choice(slots)
            c[k] = rng.choice(FX_NAMES)
            return f"{k}:fx_name"
    elif op == 13:  # an integer at or past a bound, at an integer field
        slots = [(c, k) for c, k in _slots(doc) if type(c[k]) is int and isinstance(k, str)]
        slots += [(c, k) for c, k in _slots(doc) if type(c[k]) is int and isinstance(k, int)]
        if slots:
            c, k = rng.choice(slots)
            c[k] = rng.choice(BOUND_INTS)
            return f"{k if isinstance(k, str) else '[]'}:int_bound"
    elif op == 14:  # an expression of the wrong arity: an operand dropped or added, or another op
        exprs = [c for c, k in _slots(doc) if k in _EXPR_MEMBERS and isinstance(c[k], list) and len(c) == 1]
        if exprs:
            e = rng.choice(exprs)
            (member, operands), = e.items()
            wrong = [m for m in _FUNCTION_MEMBERS if not _arity_fits(m, len(operands))]
            if wrong and rng.random() < 0.7:  # the operands under an op of another arity (an ite with two)
                del e[member]
                e[rng.choice(wrong)] = operands
            elif operands and rng.random() < 0.6:
                del operands[rng.randrange(len(operands))]
            else:
                operands.append(copy.deepcopy(operands[0]) if operands else {"integer": 1})
            return "expr:wrong_arity"
    elif op == 15:  # an expression of the wrong sort: a boolean where a number is expected, or back
        # (holder, key, whether a boolean belongs there): whole expressions, then the operands of each op
        places = [(c, k, False) for c, k in _slots(doc) if k == "expr" and isinstance(c[k], dict)]
        for c, k in _slots(doc):
            if k in _EXPR_MEMBERS and isinstance(c[k], list) and len(c) == 1:
                places += [(c[k], i, k in _BOOL_OPERANDS or (k in ("ite", "where") and i == 0))
                           for i in range(len(c[k]))]
        if places:
            c, k, wants_bool = rng.choice(places)
            c[k] = copy.deepcopy(rng.choice(NUM_EXPRS if wants_bool else BOOL_EXPRS))
            return "expr:wrong_sort"
    elif op == 16 and nodes:  # a higher-order op's operand swapped for a tensor of another meta
        hops = [n for n in nodes if isinstance(n.get("target"), str) and ".higher_order." in n["target"]]
        graphs = [c[k] for c, k in _slots(doc) if isinstance(c[k], dict) and "tensor_values" in c[k]]
        names = sorted({name for g in graphs for name in g["tensor_values"]})
        if hops and names:
            refs = [(c, k) for c, k in _slots(rng.choice(hops)["inputs"]) if k == "name" and isinstance(c, dict)
                    and len(c) == 1]
            if refs:
                c, k = rng.choice(refs)
                c[k] = rng.choice(names)
                return "hop_operand:wrong_meta"
    elif op == 17 and nodes:  # an operator's tensor operand swapped for another tensor of the program
        calls = [n for n in nodes if isinstance(n.get("target"), str) and ".higher_order." not in n["target"]]
        graphs = [c[k] for c, k in _slots(doc) if isinstance(c[k], dict) and "tensor_values" in c[k]]
        names = sorted({name for g in graphs for name in g["tensor_values"]})
        refs = [(c, k) for n in calls for c, k in _slots(n["inputs"]) if k == "as_tensor" and isinstance(c[k], dict)
                and isinstance(c[k].get("name"), str)]
        if refs and names:
            c, k = rng.choice(refs)
            c[k] = {"name": rng.choice(names)}
            return "operand:wrong_meta"
    elif op == KERNEL_ARG_OP:
        return _kernel_arg(doc, nodes, rng)
    elif op == SIZE_ITEM_OP and nodes:  # an item of an operator's constant size list (SymInt[])
        lists = [na["arg"]["as_ints"] for n in nodes if _takes_sizes(n.get("target")) for na in n["inputs"]
                 if isinstance(na.get("arg"), dict) and isinstance(na["arg"].get("as_ints"), list) and na["arg"]["as_ints"]]
        if lists:
            items = rng.choice(lists)
            items[rng.randrange(len(items))] = rng.choice(_KERNEL_INTS)
            return "as_ints:size_item"
    elif op == ENUM_OP:  # a dtype, layout or memory format at or past its range, Unknown (0) included
        slots = [(c, k) for c, k in _slots(doc) if k in _ENUM_FIELDS and type(c[k]) is int]
        if slots:
            c, k = rng.choice(slots)
            c[k] = rng.choice(ENUM_INTS)
            return f"{k}:enum_bound"

    return None


# Calls whose kernels check arguments their fake kernels do not (serde.bridge.checks.kernels), and
# torch's vmap wrappers (a batch dim and a vmap level).
_BATCH_DIM_TARGETS = frozenset({"torch._functorch.predispatch._add_batch_dim",
                                "torch._functorch.predispatch._remove_batch_dim"})
_KERNEL_CONSTANTS = frozenset({"as_int", "as_float", "as_scalar_type"})
_KERNEL_INTS = (2**63 - 1, -(2**63), 2**40, 2**32, 2**31, -(2**31) - 1, 65536, 256, -129)
_DTYPES = tuple(int(t) for t in schema.ScalarType if t != schema.ScalarType.UNKNOWN)


def _kernel_targets() -> frozenset[str]:
    from serde.bridge.checks.kernels import KERNEL_OPS

    return frozenset(f"torch.ops.{op}" for op in KERNEL_OPS) | _BATCH_DIM_TARGETS


def _takes_sizes(target: Any) -> bool:
    """Whether ``target`` (``torch.ops.aten.split_with_sizes.default``) is an aten operator with a
    SymInt[] parameter: a size list, whose items the kernel needs as concrete integers."""
    import torch

    packet, _, overload = str(target).removeprefix("torch.ops.aten.").rpartition(".")
    op = getattr(getattr(torch.ops.aten, packet, None), overload, None) if str(target).startswith("torch.ops.aten.") \
        else None
    return isinstance(op, torch._ops.OpOverload) and any(a.real_type.str() == "SymInt[]" for a in op._schema.arguments)


def _kernel_arg(doc: Any, nodes: list[dict], rng: random.Random) -> str | None:
    """One argument of such a call edited to a value of its kind that the kernel may refuse: a
    tensor operand swapped for another tensor of the program, an int past a narrower dtype's range,
    a float outside an interval, a valid dtype for another."""
    targets = _kernel_targets()
    calls = [n for n in nodes if n.get("target") in targets and n["inputs"]]
    if not calls:
        return None
    # a target first, then one of its calls: add, on every path, would leave the rare ones unpicked
    target = rng.choice(sorted({n["target"] for n in calls}))
    inputs = rng.choice([n for n in calls if n["target"] == target])["inputs"]
    constants = [na for na in inputs if isinstance(na.get("arg"), dict) and not _KERNEL_CONSTANTS.isdisjoint(na["arg"])]
    # mostly a number or dtype: tensor operands are what operand:wrong_meta already swaps
    arg = rng.choice(constants if constants and rng.random() < 0.7 else inputs).get("arg")
    if not isinstance(arg, dict) or len(arg) != 1:
        return None
    (member, v), = arg.items()
    if member == "as_tensor":
        graphs = [c[k] for c, k in _slots(doc) if isinstance(c[k], dict) and "tensor_values" in c[k]]
        names = sorted({name for g in graphs for name in g["tensor_values"]})
        if not names:
            return None
        arg[member] = {"name": rng.choice(names)}
    elif member == "as_int":  # within int64 (past it, the decoder refuses): past each narrower dtype
        arg[member] = rng.choice(_KERNEL_INTS + (v + 1, -v, -1))
    elif member == "as_float":
        arg[member] = rng.choice((-1.0, 0.0, 2.0, -v, v + 10.0, 1e300))
    elif member == "as_scalar_type":
        arg[member] = rng.choice(_DTYPES)
    else:
        return None
    return f"{member}:kernel_arg"


_STATE_FIELDS = frozenset({"parameter_name", "buffer_name", "tensor_constant_name", "custom_obj_name"})
_NAME_FIELDS = frozenset({"name", "as_name", "parameter_name", "buffer_name", "tensor_constant_name",
                          "custom_obj_name", "user_input_name", "fqn", "path", "key"})


def _try_targeted(doc: Any, rng: random.Random, ops: tuple[int, ...] | None = None) -> str | None:
    """``_targeted``, or None where an earlier edit of the same case (a blind one may set any
    field to null, a number or a string) left no longer the shape that edit expects."""
    try:
        return _targeted(doc, rng, ops)
    except (TypeError, AttributeError, KeyError, IndexError):
        return None


def mutate_json(doc: Any, rng: random.Random, targeted: bool, log: list[str] | None = None,
                ops: tuple[int, ...] | None = None) -> Any:
    """A mutated copy of ``doc``; each edit's "field:kind" label is appended to ``log``. ``ops``
    limits the targeted edits to those (``_targeted``'s numbers), to focus a campaign."""
    doc = copy.deepcopy(doc)
    log = [] if log is None else log
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        if targeted and rng.random() < 0.6:
            label = _try_targeted(doc, rng, ops)
            if label is not None:
                log.append(label)
                continue
        slots = _named_slots(doc)
        if not slots:
            log.append("$:deep")
            return _deep(rng)
        c, k, name = rng.choice(slots)
        if rng.random() < 0.02:
            c[k], kind = _deep(rng), "deep"
        else:
            c[k], kind = _mutate_value(c[k], rng, doc)
        log.append(f"{name}:{kind.replace(':', '.')}")
    return doc


def encode_json(doc: Any, rng: random.Random) -> bytes:
    data = msgspec.json.encode(doc)
    marker = _BAD_UTF8.encode()
    if marker in data:
        data = data.replace(marker, rng.choice(_BAD_UTF8_BYTES))
    return data


# ---------------------------------------------------------------- byte mutation


def mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    b = bytearray(data)
    for _ in range(rng.choice((1, 1, 2, 4))):
        op = rng.randrange(7)
        pos = rng.randrange(len(b)) if b else 0
        if op == 0 and b:
            b[pos] ^= 1 << rng.randrange(8)
        elif op == 1 and b:
            for _ in range(rng.randrange(2, 16)):
                b[rng.randrange(len(b))] = rng.randrange(256)
        elif op == 2:
            del b[pos:]
        elif op == 3:
            b[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.choice((1, 4, 64))))
        elif op == 4 and b:
            n = rng.choice((1, 4, 8))
            b[pos:pos + n] = rng.choice((b"\xff", b"\x00", b"\x7f", b"\x80")) * n
        elif op == 5 and b:
            del b[pos:pos + rng.randrange(1, 64)]
        elif op == 6 and b:
            n = rng.randrange(1, 32)
            b[pos:pos] = b[pos:pos + n]
    return bytes(b)


# ---------------------------------------------------------------- cases


@dataclass
class Case:
    id: int
    strategy: str
    seed: Seed
    kind: str          # "pt2s" or "pt2n"
    data: bytes
    # how the worker reads it: "plain" (bytes), "mmap" (a mapped path) or "emit" (the native
    # emitter, then its program runs natively) for a .pt2s; "python" or "cpp" (the loader) for a .pt2n
    path: str = "plain"
    # the mutations made, "member:field:kind" each (Report.coverage counts them)
    kinds: tuple[str, ...] = ()
    # a changed .pt2n file: every byte is checksummed or must be zero, so loading it is a bug
    must_refuse: bool = False


STRATEGIES = (("program", 44), ("weights", 8), ("manifest", 4), ("member_bytes", 8), ("pt2s_bytes", 6),
              ("debug", 6), ("extra", 3), ("rename", 6), ("pt2n_bytes", 6), ("pt2n_flip", 6), ("pt2n_header", 8))
PT2S_PATHS = (("plain", 2), ("mmap", 1), ("emit", 1))


def _archive(seed: Seed, members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    archive.write_archive(buf, members, schema_version=seed.version, torch_version=seed.manifest["torch_version"])
    return buf.getvalue()


def _mutate_native_header(data: bytes, rng: random.Random, log: list[str],
                          ops: tuple[int, ...] | None = None) -> bytes:
    """Structure-aware edit of a .pt2n file's msgpack header, re-packed with the native container writer."""
    from native.format import container
    from native.format.program import FORMAT_VERSION, MAGIC

    _, header, segment = container.unpack(data, MAGIC, range(FORMAT_VERSION, FORMAT_VERSION + 1), "seed")
    doc = msgspec.msgpack.decode(header)
    enums = [v for v in doc.get("values", ()) if isinstance(v, list) and len(v) == 2 and v[0] in _ENUM_TAGS]
    structural = [op for op in ops or () if op in HEADER_STRUCTURE_OPS]
    if enums and (HEADER_ENUM_OP in ops if ops else rng.random() < 0.2):
        # an enum constant (dtype, layout, memory format) at or past its range: Unknown (0) included
        rng.choice(enums)[1] = rng.choice(ENUM_INTS)
        log.append("values[][]:enum_bound")
    elif structural or (not ops and rng.random() < 0.3):
        doc = _header_structure(doc, rng, rng.choice(structural or HEADER_STRUCTURE_OPS), log)
    else:
        doc = mutate_json(doc, rng, targeted=False, log=log, ops=ops)
    try:
        encoded = msgspec.msgpack.encode(doc)
    except (TypeError, OverflowError):  # an int beyond msgpack's 64 bits: a blind edit instead
        encoded = mutate_bytes(bytes(header), rng)
        log.append("$:bytes")
    marker = _BAD_UTF8.encode()
    if marker in encoded:  # same length as msgpack's length prefix says: keep the prefix intact
        encoded = encoded.replace(marker, b"\xff" * len(marker))
    return container.pack(MAGIC, FORMAT_VERSION, encoded, bytes(segment))


def _header_structure(doc: dict, rng: random.Random, op: int, log: list[str]) -> Any:
    """Edits of what a header's tables mean together, which blind int edits rarely hit: a symbol an
    input binds made unbacked (input -1), a constant of a size expression or a symbol's maximum
    near int64, a kernel call's op swapped for another operator of the program (its out= variant
    half the time)."""
    symbols, exprs = doc.get("symbols") or [], doc.get("exprs") or []
    calls = [ins for ins in doc.get("instructions") or () if isinstance(ins, list) and ins[:1] == ["kernel"]]
    if op == HEADER_UNBIND_OP and symbols:
        sym = rng.choice(symbols)
        sym[1:3] = [-1, -1]
        log.append("symbols[][]:unbind_symbol")
    elif op == HEADER_OVERFLOW_OP and (symbols or exprs):
        pushes = [(code, i) for code in exprs for i in _pushes(code)]
        if pushes and rng.random() < 0.7:
            code, i = rng.choice(pushes)
            code[i + 1] = rng.choice((2**62, 2**63 - 1, -(2**63), 2**40))
            log.append("exprs[][]:size_overflow")
        elif symbols:
            rng.choice(symbols)[6] = rng.choice((2**62, 2**63 - 1, 2**40))
            log.append("symbols[][]:size_overflow")
        else:
            log.append("exprs[][]:size_overflow")
    elif op == HEADER_OP_SWAP_OP and calls:
        call = rng.choice(calls)
        call[1] = _swapped_op(doc, calls, call, rng)
        log.append("instructions[][]:op_swap")
    else:
        return mutate_json(doc, rng, targeted=False, log=log)
    return doc


def _swapped_op(doc: dict, calls: list[list], call: list, rng: random.Random) -> int:
    """Another op for ``call``: its out= variant, an op another call passes as many arguments (so
    that it may bind them, and only its kernel can refuse them), or any op of the program."""
    n_ops = len(doc.get("operators") or ())
    if call[4] >= 0 and rng.random() < 0.5:
        return call[4]
    same = sorted({c[1] for c in calls if len(c[2]) == len(call[2]) and c[1] != call[1] and isinstance(c[1], int)})
    if same and rng.random() < 0.6:
        return rng.choice(same)
    return rng.randrange(max(n_ops, 1))


def _pushes(code: list[int]) -> list[int]:
    """The positions of the push opcodes of a (seed's, so valid) size expression."""
    from native.format.exprs import OPS, PUSH

    found, i = [], 0
    while i < len(code):
        if code[i] == PUSH:
            found.append(i)
        i += 2 if OPS[code[i]][1] else 1
    return found


def _mutate_debug(doc: Any, rng: random.Random, log: list[str]) -> Any:
    """debug.json: torch's provenance text swapped for hostile text, or the structure-aware edits."""
    entries = [v for v in doc.get("nodes", {}).values() if isinstance(v, dict)] if isinstance(doc, dict) else []
    if entries and rng.random() < 0.5:
        doc = copy.deepcopy(doc)
        entries = list(doc["nodes"].values())
        field_name = rng.choice(("from_node", "from_node", "stack_trace", "module_types"))
        entry = rng.choice(entries)
        if field_name == "from_node":
            entry[field_name] = rng.choice(HOSTILE_PROVENANCE)
        elif field_name == "stack_trace":
            entry[field_name] = rng.choice(("a\rb", "x" * 5_000_000, "\x00", None, 7))
        else:
            entry[field_name] = rng.choice(({"L__self__": "a\rb"}, [], {"k": 1}, {"x" * 300: "t"}))
        log.append(f"{field_name}:hostile")
        return doc
    return mutate_json(doc, rng, targeted=False, log=log)


def _rename_everywhere(members: dict[str, bytes], rng: random.Random, log: list[str]) -> dict[str, bytes]:
    """A name of the program (a parameter, buffer, input or node) renamed to a name that clashes
    with the generated code, consistently in every JSON member (dict keys included), so that the
    name checks are what stands between the file and torch.fx."""
    program = msgspec.json.decode(members[archive.PROGRAM])
    names = sorted({c[k] for c, k in _slots(program) if k in _NAME_FIELDS and isinstance(c[k], str) and c[k]})
    state = sorted({c[k] for c, k in _slots(program) if k in _STATE_FIELDS and isinstance(c[k], str) and c[k]})
    if not names:
        return members
    # Half the time a parameter's, buffer's or constant's FQN, which fx turns into a node name and
    # an attribute; half the time a name that shadows what fx's code uses (self, getattr).
    old = rng.choice(state if state and rng.random() < 0.5 else names)
    new = rng.choice(FX_NAMES[:4] if rng.random() < 0.5 else FX_NAMES + HOSTILE_STRINGS[:3])
    field_name = next(k for c, k in _slots(program) if isinstance(c[k], str) and c[k] == old)
    log.append(f"{field_name}:rename_to_{'fx_name' if new in FX_NAMES else 'hostile'}")

    def walk(v: Any) -> Any:
        if isinstance(v, dict):
            return {(new if k == old else k): walk(x) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v]
        return new if v == old else v

    out = dict(members)
    for name in (archive.PROGRAM, archive.WEIGHTS, archive.DEBUG):
        if name in out:
            out[name] = msgspec.json.encode(walk(msgspec.json.decode(out[name])))
    return out


def _flip(data: bytes, rng: random.Random) -> bytes:
    """One blind bit flip anywhere in the file."""
    b = bytearray(data)
    b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
    return bytes(b)


def _extra_names(seed: Seed) -> list[str]:
    return sorted(n for n in seed.members if n.startswith(archive.EXTRA_PREFIX))


def make_case(seeds: list[Seed], run_seed: int, i: int, *, strategies: tuple[tuple[str, int], ...] = STRATEGIES,
              cpp: bool = False, paths: tuple[tuple[str, int], ...] = PT2S_PATHS,
              ops: tuple[int, ...] | None = None) -> Case:
    """Case ``i`` of run ``run_seed``; ``strategies`` weighs the strategies and ``paths`` the ways a
    .pt2s is read (a subset of either focuses a campaign, as ``ops`` does the targeted edits),
    ``cpp`` lets .pt2n cases use the C++ loader as well."""
    rng = random.Random(f"{run_seed}:{i}")
    names, weights = zip(*strategies, strict=True)
    strategy = rng.choices(names, weights)[0]
    pool = {"debug": [s for s in seeds if archive.DEBUG in s.members],
            "extra": [s for s in seeds if _extra_names(s)]}.get(strategy, seeds)
    if strategy.startswith("pt2n"):
        pool = [s for s in seeds if s.native is not None]
    seed = rng.choice(pool or seeds)
    log: list[str] = []
    if strategy.startswith("pt2n"):
        engine = rng.choice(("python", "cpp")) if cpp else "python"
        if strategy == "pt2n_bytes":
            data = mutate_bytes(seed.native, rng)
            log.append("pt2n:$:bytes")
        elif strategy == "pt2n_flip":
            data = _flip(seed.native, rng)
            log.append("pt2n:$:flip")
        else:
            data = _mutate_native_header(seed.native, rng, log, ops)
            log[:] = [f"pt2n.header:{k}" for k in log]
        return Case(i, strategy, seed, "pt2n", data, engine, tuple(log),
                    must_refuse=strategy != "pt2n_header" and data != seed.native)
    path_names, path_weights = zip(*paths, strict=True)
    path = rng.choices(path_names, path_weights)[0]
    if strategy == "pt2s_bytes":
        return Case(i, strategy, seed, "pt2s", mutate_bytes(_archive(seed, seed.members), rng), path,
                    ("pt2s:$:bytes",))
    members = dict(seed.members)
    member = None
    if strategy == "program":
        member = archive.PROGRAM
        members[member] = encode_json(mutate_json(seed.program, rng, targeted=True, log=log, ops=ops), rng)
    elif strategy == "weights":
        member = archive.WEIGHTS
        members[member] = encode_json(mutate_json(seed.weights, rng, targeted=True, log=log, ops=ops), rng)
    elif strategy == "debug":
        member = archive.DEBUG
        doc = msgspec.json.decode(members[member]) if member in members else {"nodes": {}}
        members[member] = encode_json(_mutate_debug(doc, rng, log), rng)
    elif strategy == "extra":
        names = _extra_names(seed) or [archive.EXTRA_PREFIX + "notes.txt"]
        member = rng.choice(names)
        if rng.random() < 0.5 and member in members:
            members[member] = mutate_bytes(members[member], rng)
            log.append("$:bytes")
        else:
            members[member] = rng.choice(_BAD_UTF8_BYTES + (b"", b"\x00" * 64, "\u2603".encode() * 1000))
            log.append("$:hostile_text")
    elif strategy == "rename":
        members = _rename_everywhere(members, rng, log)
        log[:] = [f"all:{k}" for k in log]
    elif strategy == "member_bytes":
        payloads = sorted(n for n in members if n.startswith(PAYLOAD_PREFIX))
        member = rng.choice((archive.PROGRAM, archive.PROGRAM, archive.WEIGHTS)
                            + ((archive.DEBUG,) if archive.DEBUG in members else ())
                            + ((rng.choice(payloads),) if payloads else ()))
        members[member] = mutate_bytes(members[member], rng)
        log.append("$:bytes")
        if member.startswith(PAYLOAD_PREFIX):  # a weight payload: its name is its digest, which stays
            log[:] = [f"{PAYLOAD_PREFIX}*:{k}" for k in log]
            member = None
    elif strategy == "manifest":
        manifest = encode_json(mutate_json(seed.manifest, rng, targeted=False, log=log), rng)
        files = sorted([*members.items(), (archive.MANIFEST, manifest)])
        return Case(i, strategy, seed, "pt2s", raw_zip(files), path, tuple(f"{archive.MANIFEST}:{k}" for k in log))
    if member is not None:
        log[:] = [f"{member}:{k}" for k in log]
    return Case(i, strategy, seed, "pt2s", _archive(seed, members), path, tuple(log))


# ---------------------------------------------------------------- worker pool


@dataclass
class Result:
    case_id: int
    strategy: str
    seed: str
    outcome: str
    detail: str = ""
    path: str = ""
    kinds: tuple[str, ...] = ()

    @property
    def category(self) -> str:
        return self.outcome.split(":", 1)[0]


class _Worker:
    def __init__(self, index: int, scratch: Path, mem_mb: int, revert: str | None = None) -> None:
        self.dir = scratch / f"w{index}"
        self.dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
                   PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
        env.pop(REVERT_ENV, None)
        if revert is not None:  # the test of the fuzzer: one fix switched off in the worker (_worker.REVERTS)
            env[REVERT_ENV] = revert
        self.proc = subprocess.Popen([sys.executable, "-u", str(HERE / "_worker.py"), str(self.dir), str(mem_mb)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     cwd=self.dir, env=env)
        os.set_blocking(self.proc.stdout.fileno(), False)
        self.buf = b""
        self.case: Case | None = None
        self.phase = "load"
        self.deadline = 0.0
        self.file: Path | None = None

    def send(self, case: Case, timeout: float, cases_dir: Path) -> None:
        self.case, self.phase = case, "load"
        self.file = cases_dir / f"{case.id}.{case.kind}"
        self.file.write_bytes(case.data)
        req = {"id": case.id, "kind": case.kind, "path": str(self.file), "seed_path": str(case.seed.path),
               "how": case.path, "must_refuse": case.must_refuse}
        self.proc.stdin.write((json.dumps(req) + "\n").encode())
        self.proc.stdin.flush()
        # A fresh worker's first case waits for its start-up (importing torch, minutes on a loaded
        # machine): the time limit starts again when it says it is ready.
        self.deadline = time.monotonic() + timeout + (600 if self.fresh else 0)
        self.fresh = False

    fresh = True

    def lines(self) -> Iterator[dict]:
        chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
        if not chunk:
            raise EOFError
        self.buf += chunk
        while b"\n" in self.buf:
            line, self.buf = self.buf.split(b"\n", 1)
            yield json.loads(line)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


@dataclass
class Report:
    results: list[Result] = field(default_factory=list)

    @property
    def counts(self) -> Counter:
        return Counter(r.category for r in self.results)

    @property
    def bugs(self) -> list[Result]:
        return [r for r in self.results if r.category in BUGS]

    @property
    def findings(self) -> list[Result]:
        """Bugs, and the outcomes worth a look that are not asserted."""
        return [r for r in self.results if r.category in BUGS + REPORTED]

    @property
    def coverage(self) -> Counter:
        """Mutations made, by (member, field, kind): each case counts each of its kinds once."""
        out: Counter = Counter()
        for r in self.results:
            for k in set(r.kinds):
                member, field_name, kind = k.rsplit(":", 2) if k.count(":") >= 2 else (k, "$", "?")
                out[(member, field_name, kind)] += 1
        return out

    def table(self) -> str:
        c = self.counts
        rows = [f"{k:<18} {v:>7}" for k, v in sorted(c.items(), key=lambda kv: -kv[1])]
        rej = Counter(r.outcome.split(":", 1)[1] for r in self.results if r.category == "rejected")
        rows += ["  rejected as:"] + [f"    {k:<32} {v:>6}" for k, v in rej.most_common()]
        paths = Counter(r.path for r in self.results)
        rows += ["  read by:"] + [f"    {k:<32} {v:>6}" for k, v in sorted(paths.items())]
        return "\n".join([f"{'outcome':<18} {'cases':>7}", *rows, f"{'total':<18} {len(self.results):>7}"])

    def coverage_table(self) -> str:
        """The mutation kinds per member and field, with the number of cases that made each."""
        cov = self.coverage
        kinds = Counter(kind for (_, _, kind) in cov.elements())
        by_field: dict[tuple[str, str], list[str]] = {}
        for (member, field_name, kind), n in sorted(cov.items()):
            by_field.setdefault((member, field_name), []).append(f"{kind}={n}")
        lines = [f"mutation coverage: {len(kinds)} kinds over {len(by_field)} (member, field) pairs "
                 f"in {len({m for m, _ in by_field})} members"]
        lines += [f"  {'kind':<28} {'cases':>7}"] + [f"  {k:<28} {n:>7}" for k, n in kinds.most_common()]
        lines += [f"  {member} {field_name}: {', '.join(ks)}" for (member, field_name), ks in sorted(by_field.items())]
        return "\n".join(lines)


def run_cases(cases: Iterable[Case], *, jobs: int = 2, timeout: float = 20.0, mem_mb: int = 2048,
              progress: bool = False, revert: str | None = None) -> Report:
    """Run every case in a pool of ``jobs`` worker processes; returns the outcomes. ``revert`` names
    a fix the workers switch off (``_worker.REVERTS``), for the test that the fuzzer finds it."""
    report = Report()
    scratch = Path(tempfile.mkdtemp(prefix="pt2serde-fuzz-"))
    cases_dir = scratch / "cases"
    cases_dir.mkdir()
    it = iter(cases)
    workers = [_Worker(i, scratch, mem_mb, revert) for i in range(jobs)]
    sel = selectors.DefaultSelector()
    for w in workers:
        sel.register(w.proc.stdout, selectors.EVENT_READ, w)
    pending = True
    t0 = time.monotonic()

    def feed(w: _Worker) -> None:
        nonlocal pending
        case = next(it, None) if pending else None
        if case is None:
            pending = False
            w.case = None
            return
        w.send(case, timeout, cases_dir)

    def finish(w: _Worker, outcome: str, detail: str = "") -> None:
        assert w.case is not None
        c = w.case
        strange = [p.name for p in w.dir.iterdir()]
        if strange:
            outcome, detail = "canary", f"files appeared: {strange}; {outcome} {detail}"
            for p in w.dir.iterdir():
                shutil.rmtree(p) if p.is_dir() else p.unlink()
        report.results.append(Result(c.id, c.strategy, c.seed.name, outcome, detail, c.path, c.kinds))
        w.file.unlink(missing_ok=True)
        if progress and len(report.results) % 500 == 0:
            rate = len(report.results) / (time.monotonic() - t0)
            print(f"  {len(report.results)} cases ({rate:.0f}/s) {dict(report.counts)}", flush=True)

    def replace(w: _Worker) -> _Worker:
        sel.unregister(w.proc.stdout)
        w.kill()
        nw = _Worker(workers.index(w), scratch, mem_mb, revert)
        workers[workers.index(w)] = nw
        sel.register(nw.proc.stdout, selectors.EVENT_READ, nw)
        return nw

    try:
        for w in workers:
            feed(w)
        while any(w.case is not None for w in workers):
            now = time.monotonic()
            busy = [w for w in workers if w.case is not None]
            wait = max(0.0, min(w.deadline for w in busy) - now)
            for key, _ in sel.select(timeout=wait):
                w = key.data
                if w.case is None:
                    continue
                try:
                    for msg in w.lines():
                        if msg.get("phase") == "ready":  # started: the first case's time limit starts now
                            w.deadline = time.monotonic() + timeout
                            continue
                        if "phase" in msg:
                            w.phase = msg["phase"]
                            continue
                        finish(w, msg["outcome"], msg["detail"])
                        feed(w)
                except EOFError:
                    code = w.proc.wait()
                    how = f"signal {-code}" if code < 0 else f"exit status {code}"
                    finish(w, f"crash_{w.phase}", how)
                    nw = replace(w)
                    feed(nw)
            now = time.monotonic()
            for w in list(workers):
                if w.case is not None and now > w.deadline:
                    finish(w, f"hang_{w.phase}", f"no answer within {timeout} s")
                    nw = replace(w)
                    feed(nw)
    finally:
        for w in workers:
            if w.proc.stdin:
                w.proc.stdin.close()
            w.kill()
        shutil.rmtree(scratch, ignore_errors=True)
    report.results.sort(key=lambda r: r.case_id)
    return report


def campaign(n: int, *, run_seed: int = 0, start: int = 0, jobs: int = 2, timeout: float = 20.0,
             progress: bool = False, seeds: list[Seed] | None = None,
             strategies: tuple[tuple[str, int], ...] = STRATEGIES, paths: tuple[tuple[str, int], ...] = PT2S_PATHS,
             ops: tuple[int, ...] | None = None, cpp: bool | None = None, revert: str | None = None) -> Report:
    """Cases ``start .. start+n-1`` of run ``run_seed`` (``strategies``, ``paths``, ``ops``, ``cpp``
    (default: when the C++ runtime is built) and ``revert``: see :func:`make_case` and :func:`run_cases`)."""
    seeds = seeds if seeds is not None else load_seeds()
    cpp = _cpp_available() if cpp is None else cpp
    cases = (make_case(seeds, run_seed, i, strategies=strategies, cpp=cpp, paths=paths, ops=ops)
             for i in range(start, start + n))
    return run_cases(cases, jobs=jobs, timeout=timeout, progress=progress, revert=revert)


def _cpp_available() -> bool:
    from native.run import cpp_engine

    return cpp_engine.available()


def summarize_bugs(report: Report, limit: int = 40) -> str:
    groups: dict[str, list[Result]] = {}
    for r in report.findings:
        key = f"{r.category}: {r.detail.split(': ', 1)[0]}"
        groups.setdefault(key, []).append(r)
    lines = []
    for key, rs in sorted(groups.items(), key=lambda kv: -len(kv[1]))[:limit]:
        r = rs[0]
        lines.append(f"{len(rs):>5}  {key}\n       e.g. case {r.case_id} ({r.strategy}, {r.seed}): {r.detail[:400]}")
        if len(rs) > 1:  # every case of the group, to replay them with --case
            ids = ", ".join(str(x.case_id) for x in rs[:50])
            lines.append(f"       cases: {ids}{', ...' if len(rs) > 50 else ''}")
    return "\n".join(lines)


RUN_TIME = ("run_guard", "run_torch", "run_refused")


def summarize_run_time(report: Report, limit: int = 60) -> str:
    """The programs that loaded and then failed when run, in a way that is not a bug (a guard, a
    kernel or the native runtime refused), grouped by message: the list to read for run-time
    failures a load-time check could have refused."""
    groups: dict[str, list[Result]] = {}
    for r in report.results:
        if r.category in RUN_TIME:
            message = r.detail.split(": ", 1)[-1]
            key = f"{r.category}: {re.sub(r'[0-9]+', 'N', message)[:90]}"
            groups.setdefault(key, []).append(r)
    lines = []
    for key, rs in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))[:limit]:
        r = rs[0]
        lines.append(f"{len(rs):>5}  {key}\n       e.g. case {r.case_id} ({r.strategy}, {r.seed}, {r.path}, "
                     f"{', '.join(r.kinds)}): {r.detail[:300]}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", type=int, default=1000)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=20.0)
    ap.add_argument("--case", type=int, help="with --write: write this one case to a file")
    ap.add_argument("--write", help="path for --case")
    ap.add_argument("--all", action="store_true", help="print every result, not only the bugs")
    a = ap.parse_args(argv)
    if a.case is not None:
        c = make_case(load_seeds(), a.seed, a.case, cpp=_cpp_available())
        Path(a.write or f"case{a.case}.{c.kind}").write_bytes(c.data)
        print(f"case {a.case}: {c.strategy} of {c.seed.name} -> {a.write or f'case{a.case}.{c.kind}'}")
        return 0
    report = campaign(a.cases, run_seed=a.seed, start=a.start, jobs=a.jobs, timeout=a.timeout, progress=True)
    print(report.table())
    print(report.coverage_table())
    if a.all:
        for r in report.results:
            print(r)
    print(summarize_bugs(report) or "no findings")
    print("loaded, then refused when run (not bugs):")
    print(summarize_run_time(report) or "none")
    return 1 if report.bugs else 0


if __name__ == "__main__":
    raise SystemExit(main())
