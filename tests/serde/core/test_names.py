"""serde.core.checks.names: the grammar of names from artifacts, and that its reserved list tracks torch."""

from __future__ import annotations

import msgspec
import pytest
import torch

import serde
from serde.archive.artifact import read_artifact
from serde.core import schema
from serde.core.checks import (
    RESERVED_ATTRIBUTES,
    RESERVED_LOCALS,
    check_attr_name,
    check_fqn,
    check_local_name,
    check_program,
    check_quoted_text,
    check_text,
)
from serde.core.errors import IntegerTooLargeError, ListTooLongError, NameTooLongError, UnsafeNameError
from serde.core.limits import Limits


@pytest.mark.parametrize("fqn", ["w", "layers.0.weight", "blocks.12.attn._scale", "_tensor_constant0", "a.b.c"])
def test_fqns_torch_writes_pass(fqn: str) -> None:
    assert check_fqn(fqn, "f") == fqn


# Segments that are no identifier but that fx writes between double quotes ("a b", "01", "0x1")
# pass: tests/serde/core/test_fqn_segments.py.
@pytest.mark.parametrize("fqn", ["", "a..b", ".a", "a.", "w\"", "a.forward", "training",
                                 "x.__dict__", "a.class", "é", "_modules.w", "w@1", "a.w'", "a\\b"])
def test_fqns_outside_the_grammar_are_refused(fqn: str) -> None:
    with pytest.raises(UnsafeNameError, match=r"^f: "):
        check_fqn(fqn, "f")


def test_module_call_graph_fqns_allow_the_root_and_call_indices() -> None:
    assert check_fqn("", "f", root=True, call_index=True) == ""
    assert check_fqn("blocks.0@1", "f", root=True, call_index=True) == "blocks.0@1"
    with pytest.raises(UnsafeNameError):
        check_fqn("blocks.0@01", "f", root=True, call_index=True)


@pytest.fixture(scope="module")
def reexported(tmp_path_factory) -> schema.ExportedProgram:
    """A saved program whose call graph names the _guards_fn torch installs on ep.module()."""
    x = torch.randn(4, 3)
    ep = torch.export.export(torch.export.export(torch.nn.Linear(3, 2), (x,)).module(), (x,))
    path = tmp_path_factory.mktemp("reexported") / "a.pt2s"
    serde.save(ep, path)
    p = read_artifact(path).program
    assert [e.fqn for e in p.graph_module.module_call_graph] == ["", "_guards_fn"]
    return p


def _with_call_entry(p: schema.ExportedProgram, fqn: str, signed: bool) -> schema.ExportedProgram:
    calls = p.graph_module.module_call_graph
    entry = schema.ModuleCallEntry(fqn=fqn, signature=calls[0].signature if signed else None)
    gm = msgspec.structs.replace(p.graph_module, module_call_graph=[calls[0], entry])
    return msgspec.structs.replace(p, graph_module=gm)


@pytest.mark.parametrize("fqn", ["_guards_fn", "inner._guards_fn", "blocks.0._guards_fn"])
def test_call_graph_may_name_torchs_guard_function_without_a_signature(reexported, fqn: str) -> None:
    # As torch.export.export(ep.module()) records it, for ep.module() itself or held as a submodule.
    check_program(_with_call_entry(reexported, fqn, signed=False))


@pytest.mark.parametrize("fqn, signed", [("_guards_fn", True), ("inner._guards_fn", True), ("_guards_fn.w", False),
                                         ("_guards_fn@1", False), ("._guards_fn", False), ("forward._guards_fn", False),
                                         ("a._guards_fn.b._guards_fn", False)])
def test_guard_function_name_stays_reserved_everywhere_else(reexported, fqn: str, signed: bool) -> None:
    with pytest.raises(UnsafeNameError, match=r"^module_call_graph\[1\]\.fqn: "):
        check_program(_with_call_entry(reexported, fqn, signed))


@pytest.mark.parametrize("name", ["x", "input", "max", "__and__", "sum_1", "_x"])
def test_local_names_torch_export_writes_pass(name: str) -> None:
    assert check_local_name(name, "n") == name


@pytest.mark.parametrize("name", ["self", "torch", "fx_pytree", "class", "None", "1x", "x-y", "x\n", "ü"])
def test_reserved_or_malformed_local_names_are_refused(name: str) -> None:
    with pytest.raises(UnsafeNameError, match=r"^n: "):
        check_local_name(name, "n")


def test_subgraph_attributes_must_be_public_identifiers() -> None:
    assert check_attr_name("cond_graph0", "a") == "cond_graph0"
    for bad in ("_private", "graph", "code", "a.b"):
        with pytest.raises(UnsafeNameError):
            check_attr_name(bad, "a")


@pytest.mark.parametrize("ch", ["\r", "\x0b", "\x0c", "\x1c", "\x85", "\u2028", "\x00"])
def test_metadata_text_allows_only_newline_as_a_line_break(ch: str) -> None:
    assert check_text('File "a.py", line 1, in f\n\tx = 1', "t")
    with pytest.raises(UnsafeNameError, match="control character"):
        check_text(f"a{ch}b", "t")


def test_name_length_is_capped_before_matching() -> None:
    with pytest.raises(NameTooLongError, match=r"Limits\.max_name_chars=8"):
        check_fqn("a" * 9, "f", Limits(max_name_chars=8))


def test_reserved_attributes_cover_what_torch_defines() -> None:
    class M(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(2, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(x)

    ep = torch.export.export(M(), (torch.randn(1, 2),))
    mods = [ep.module(), torch.export.unflatten(ep), ep.graph_module, torch.nn.Module()]
    defined = set(dir(torch.fx.GraphModule))
    for m in mods:
        defined |= set(dir(type(m))) | set(vars(m))
    defined = {n for n in defined if not n.startswith("__")}  # refused by prefix
    defined -= {"lin"}  # the model's own submodule
    assert defined <= RESERVED_ATTRIBUTES, sorted(defined - RESERVED_ATTRIBUTES)


def test_reserved_locals_cover_what_fx_generated_code_relies_on() -> None:
    # fx's custom builtins (imported into every generated forward), the forward's `self`, and the
    # builtin fx's code generator writes raw for attribute paths (`getattr(self.layers, "0")`).
    from torch.fx.graph import _custom_builtins, _format_target

    assert set(_custom_builtins) | {"self", "getattr"} <= RESERVED_LOCALS
    assert _format_target("self", "layers.0") == 'getattr(self.layers, "0")'


@pytest.mark.parametrize("fqn", ["self", "Self", "SELF", "SElf"])
def test_fqns_fx_would_name_self_are_refused(fqn: str) -> None:
    # torch.fx names a get_attr node after its target (snake case) without renaming "self"
    from torch.fx import Graph

    assert Graph()._target_to_str(fqn) == "self"
    with pytest.raises(UnsafeNameError, match="shadows the generated forward's 'self'"):
        check_fqn(fqn, "weights.state_dict")


@pytest.mark.parametrize("fqn", ["self.weight", "myself", "self_1", "selfie", "blocks.self", "sElf"])
def test_fqns_naming_self_otherwise_pass(fqn: str) -> None:
    from torch.fx import Graph

    assert Graph()._target_to_str(fqn).replace(".", "_") != "self"
    assert check_fqn(fqn, "weights.state_dict") == fqn


def test_save_refuses_what_load_would_refuse(tmp_path) -> None:
    class M(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            # torch allows it; fx would write self.wé raw, where NFKC normalization applies
            self.register_buffer("wé", torch.ones(2))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.wé

    ep = torch.export.export(M(), (torch.randn(2),))
    with pytest.raises(serde.UnsupportedConstructError, match=r"could not be loaded back.*'wé'"):
        serde.save(ep, tmp_path / "m.pt2s")
    assert not (tmp_path / "m.pt2s").exists()


@pytest.mark.parametrize("text, kind", [("fast", "constant"), ("héllo ☃ 1.5 [x]", "constant"),
                                        ("a\\b", "key"), ("a\nb", "key"), ("héllo ☃", "key")])
def test_quoted_text_torch_can_paste_passes(text: str, kind: str) -> None:
    assert check_quoted_text(text, "where", kind) == text


@pytest.mark.parametrize("text, kind", [("it's", "constant"), ('a"b', "constant"), ("a\\", "constant"),
                                        ("a\nb", "constant"), ("a\rb", "constant"), ("a\x00b", "constant"),
                                        ("a\u2028b", "constant"), ("\ud800", "constant"),
                                        ("it's", "key"), ('a"b', "key")])
def test_quoted_text_that_ends_its_literal_is_refused(text: str, kind: str) -> None:
    with pytest.raises(UnsafeNameError, match=r"where: .* holds .* pastes it between quotes"):
        check_quoted_text(text, "where", kind)


class _Inputs(torch.nn.Module):
    def forward(self, x: torch.Tensor, cfg: dict, mode: str) -> torch.Tensor:
        return x * 2 + cfg[next(iter(cfg))] if mode.startswith("f") else x


@pytest.mark.parametrize("key, mode, field", [
    ("k", "fast'", r"signature\.input_specs\[2\]\.constant_input\.value\.as_string"),
    ("it's", "fast", r"module_call_graph\[0\]\.signature\.in_spec\.children\[0\]\.children\[1\]\.context\[0\]"),
])
def test_save_refuses_quotes_that_would_break_the_guard_code(key: str, mode: str, field: str, tmp_path) -> None:
    ep = torch.export.export(_Inputs(), (torch.randn(2), {key: torch.randn(2)}, mode), strict=False)
    with pytest.raises(serde.UnsupportedConstructError, match=rf"could not be loaded back.*{field}: the"):
        serde.save(ep, tmp_path / "m.pt2s")
    assert not (tmp_path / "m.pt2s").exists()
    with pytest.raises(SyntaxError):  # what torch's own ep.module() does with it
        ep.module()


def test_backslashes_in_keys_and_unicode_in_strings_round_trip(tmp_path) -> None:
    # Keys reach the guard code through repr(), which escapes a backslash: torch runs these.
    args = (torch.randn(2), {"a\\b": torch.randn(2)}, "fé ☃")
    ep = torch.export.export(_Inputs(), args, strict=False)
    serde.save(ep, tmp_path / "m.pt2s")
    loaded = serde.load(tmp_path / "m.pt2s")
    torch.testing.assert_close(loaded.module()(*args), ep.module()(*args), rtol=0, atol=0)
    with pytest.raises(AssertionError, match="Guard failed"):  # the string is still guarded
        loaded.module()(args[0], args[1], "fé")


def _one_op_program(tmp_path):
    class M(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + 1

    serde.save(torch.export.export(M(), (torch.randn(2),)), tmp_path / "m.pt2s")
    return read_artifact(tmp_path / "m.pt2s").program


def _with_first_input(p, arg):
    g = p.graph_module.graph
    node = g.nodes[0]
    inputs = [msgspec.structs.replace(node.inputs[0], arg=arg), *node.inputs[1:]]
    graph = msgspec.structs.replace(g, nodes=[msgspec.structs.replace(node, inputs=inputs), *g.nodes[1:]])
    return msgspec.structs.replace(p, graph_module=msgspec.structs.replace(p.graph_module, graph=graph))


def _argument_cases():
    s = schema
    t, si, sb, sf = s.TensorArgument, s.SymIntArgument, s.SymBoolArgument, s.SymFloatArgument
    opt = s.OptionalTensorArgument
    long = 5  # over the max_list_len of 4 the cases are checked with
    # (member, a value that passes, values refused with the error they raise)
    return [
        ("as_tensors", [t(name="x")], [([t(name="self")], UnsafeNameError), ([t(name="x")] * long, ListTooLongError)]),
        ("as_ints", [1, -(1 << 63)], [([1 << 63], IntegerTooLargeError), ([0] * long, ListTooLongError)]),
        ("as_floats", [1.0], [([1.0] * long, ListTooLongError)]),
        ("as_bools", [True], [([True] * long, ListTooLongError)]),
        ("as_strings", ["a"], [(["a"] * long, ListTooLongError)]),
        ("as_sym_int", si(as_name="x"), [(si(as_name="class"), UnsafeNameError)]),
        ("as_sym_ints", [si(as_int=2), si(as_name="x")],
         [([si(as_name="x y")], UnsafeNameError), ([si(as_int=1)] * long, ListTooLongError)]),
        ("as_sym_bool", sb(as_name="x"), [(sb(as_name="None"), UnsafeNameError)]),
        ("as_sym_bools", [sb(as_bool=True)], [([sb(as_name="torch")], UnsafeNameError),
                                              ([sb(as_bool=True)] * long, ListTooLongError)]),
        ("as_sym_float", sf(as_name="x"), [(sf(as_name="1x"), UnsafeNameError)]),
        ("as_sym_floats", [sf(as_float=1.0)], [([sf(as_name="fx_pytree")], UnsafeNameError),
                                               ([sf(as_float=1.0)] * long, ListTooLongError)]),
        ("as_optional_tensor", opt(as_tensor=t(name="x")), [(opt(as_tensor=t(name="self")), UnsafeNameError)]),
        ("as_optional_tensors", [opt(as_none=True), opt(as_tensor=t(name="x"))],
         [([opt(as_tensor=t(name="x-y"))], UnsafeNameError), ([opt(as_none=True)] * long, ListTooLongError)]),
        ("as_custom_obj", s.CustomObjArgument(name="x", class_fqn="__torch__.C"),
         [(s.CustomObjArgument(name="self", class_fqn="__torch__.C"), UnsafeNameError)]),
    ]


@pytest.mark.parametrize("member", [c[0] for c in _argument_cases()])
def test_node_arguments_are_checked_whole_in_every_flat_member(member: str, tmp_path) -> None:
    """check_program accepts a node argument at once when a quick look finds nothing wrong and
    checks it in detail otherwise: every refused value of each member must still be refused,
    naming the node's input, and the good one accepted."""
    good, refused = next((g, r) for m, g, r in _argument_cases() if m == member)
    p = _one_op_program(tmp_path)
    limits = Limits(max_list_len=4)
    check_program(_with_first_input(p, schema.Argument(**{member: good})), limits)
    for value, error in refused:
        with pytest.raises(error, match=r"graph\.nodes\[0\]\.inputs\[0\]"):
            check_program(_with_first_input(p, schema.Argument(**{member: value})), limits)


@pytest.mark.parametrize("attr", ["self", "Self", "SELF"])
@pytest.mark.parametrize("fixture", ["scan", "while_loop", "cond"])
def test_subgraph_attributes_fx_would_name_self_are_refused_at_load(fixture: str, attr: str) -> None:
    # A higher-order op's subgraph is a get_attr node, named after its attribute as a state FQN
    # is; 'self' used to load and then fail in ep.module()'s forward (found by the fuzzer).
    import io
    import json
    from pathlib import Path

    from torch.fx import Graph

    from serde.archive import read_archive, write_archive

    assert Graph()._target_to_str(attr) == "self"
    c = read_archive(Path(__file__).resolve().parents[3] / "fixtures" / "v2.5" / fixture / "model.pt2s")
    members = {n: bytes(c.member(n)) for n in c.names if n != "manifest.json"}
    program = json.loads(members["program.json"])
    node = next(n for n in program["graph_module"]["graph"]["nodes"] if ".higher_order." in n["target"])
    old = next(a["arg"]["as_graph"]["name"] for a in node["inputs"] if "as_graph" in a["arg"])
    members["program.json"] = members["program.json"].replace(json.dumps(old).encode(), json.dumps(attr).encode())
    out = io.BytesIO()
    write_archive(out, members, schema_version=c.schema_version, torch_version="test")
    with pytest.raises(UnsafeNameError, match=r"subgraph\[0\]\.name: attribute name .* shadows the generated "
                                              r"forward's 'self'"):
        serde.load(out.getvalue())


def test_every_kind_of_code_point_is_judged_as_the_grammar_says() -> None:
    # The character classes are spelled as ranges for a cheap compile; they accept what the
    # grammar says (a segment fx quotes is printable ASCII without quotes, backslash, "." and "@";
    # text pasted between quotes has no quote, backslash, control character, lone surrogate or
    # line separator): every code point up to U+3000, each range's edges, and a stride of the rest.
    edges = {0xd7ff, 0xd800, 0xdbff, 0xdc00, 0xdfff, 0xe000, 0xfffd, 0xffff, 0x10000, 0x10ffff}
    codes = sorted({*range(0x3000), *edges, *range(0x3000, 0x110000, 997)})
    quoted_ok, pasted_ok = [], []
    for code in codes:
        c = chr(code)
        if c != ".":
            try:
                check_fqn(f"m.a{c}b", "f")
                quoted_ok.append(code)
            except UnsafeNameError:
                pass
        try:
            check_quoted_text(f"a{c}b", "t", "constant")
            pasted_ok.append(code)
        except UnsafeNameError:
            pass
    assert quoted_ok == [k for k in range(0x20, 0x7f) if chr(k) not in "\"'\\.@"]
    refused = {*range(0x20), *range(0x7f, 0xa0), *range(0xd800, 0xe000), 0x2028, 0x2029, *map(ord, "'\"\\")}
    assert pasted_ok == [k for k in codes if k not in refused]
