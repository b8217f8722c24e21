"""serde.core.names: the grammar of names from artifacts, and that its reserved list tracks torch."""

from __future__ import annotations

import pytest
import torch

from serde.core.limits import Limits, NameTooLongError
from serde.core.names import (
    RESERVED_ATTRIBUTES,
    UnsafeNameError,
    check_attr_name,
    check_fqn,
    check_local_name,
    check_text,
)


@pytest.mark.parametrize("fqn", ["w", "layers.0.weight", "blocks.12.attn._scale", "_tensor_constant0", "a.b.c"])
def test_fqns_torch_writes_pass(fqn: str) -> None:
    assert check_fqn(fqn, "f") == fqn


@pytest.mark.parametrize("fqn", ["", "a..b", ".a", "a.", "a b", "layers.01", "w\"", "a.forward", "training",
                                 "x.__dict__", "a.class", "é", "a.0x1", "_modules.w", "w@1"])
def test_fqns_outside_the_grammar_are_refused(fqn: str) -> None:
    with pytest.raises(UnsafeNameError, match=r"^f: "):
        check_fqn(fqn, "f")


def test_module_call_graph_fqns_allow_the_root_and_call_indices() -> None:
    assert check_fqn("", "f", root=True, call_index=True) == ""
    assert check_fqn("blocks.0@1", "f", root=True, call_index=True) == "blocks.0@1"
    with pytest.raises(UnsafeNameError):
        check_fqn("blocks.0@01", "f", root=True, call_index=True)


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


def test_save_refuses_what_load_would_refuse(tmp_path) -> None:
    import serde

    class M(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("a-b", torch.ones(2))  # torch allows it; fx would write getattr(self, "a-b")

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + getattr(self, "a-b")

    ep = torch.export.export(M(), (torch.randn(2),))
    with pytest.raises(serde.UnsupportedConstructError, match=r"could not be loaded back.*'a-b'"):
        serde.save(ep, tmp_path / "m.pt2s")
    assert not (tmp_path / "m.pt2s").exists()
