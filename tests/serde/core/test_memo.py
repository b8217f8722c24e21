"""serde.core.memo.Memo: bounded, forgets everything when full, reads like a dict."""

from __future__ import annotations

import pytest

from serde.core.memo import Memo

pytestmark = pytest.mark.unit


def test_remember_returns_the_value_and_reads_like_a_dict() -> None:
    m = Memo(4)
    assert m.remember("a", 1) == 1
    assert m.remember("k") is True  # a key-only memo
    assert m.get("a") == 1 and "k" in m and m.get("missing") is None


def test_a_full_memo_is_cleared_before_the_next_entry() -> None:
    m = Memo(3)
    for k in range(3):
        m.remember(k, k * 10)
    assert len(m) == 3
    m.remember("new", 1)
    assert dict(m) == {"new": 1}  # never more than cap entries, and nothing stale kept


def test_overwriting_a_key_of_a_full_memo_also_clears_it() -> None:
    m = Memo(2)
    m.remember("a", 1)
    m.remember("b", 2)
    m.remember("a", 3)
    assert dict(m) == {"a": 3}


@pytest.mark.torch
def test_forget_all_empties_every_memo_and_a_save_then_writes_the_same_bytes(tmp_path) -> None:
    # The memos only ever skip work: a save that does all of it again, as the first save of a
    # program in a process does, writes the very bytes a save served from the memos writes.
    import serde
    from serde.core.expr.guards import code as guards
    from serde.core.memo import forget_all
    from serde.testing import zoo

    ep = zoo.export_case(zoo.get("dynamic_arith"))  # guards and symbolic sizes: most memos take part
    serde.save(ep, tmp_path / "warm0.pt2")
    serde.save(ep, tmp_path / "warm1.pt2")
    assert len(guards._PARSED) > 0  # the second save was served from them
    mine = Memo(4)
    mine.remember("x", 1)
    forget_all()
    assert len(mine) == 0 and len(guards._PARSED) == 0 and len(guards._FROM_CODE) == 0
    serde.save(ep, tmp_path / "cold.pt2")
    warm = (tmp_path / "warm1.pt2").read_bytes()
    assert warm == (tmp_path / "warm0.pt2").read_bytes() == (tmp_path / "cold.pt2").read_bytes()
    assert serde.load(tmp_path / "cold.pt2") is not None


def _doc_table() -> dict[str, int]:
    """name -> entries, from the memo table of docs/guide.md."""
    import re
    from pathlib import Path

    text = Path(__file__).resolve().parents[3].joinpath("docs", "guide.md").read_text()
    section = text[text.index("## What is remembered per process"):]
    section = section[:section.index("\n## ", 1)]
    rows = re.findall(r"^\| `([a-z_]+)` \|.*\| ([\d,]+) \|$", section, flags=re.M)
    return {name: int(n.replace(",", "")) for name, n in rows}


@pytest.mark.torch
def test_the_guide_lists_exactly_the_registered_memos_with_their_bounds() -> None:
    import importlib
    import pkgutil

    import canonical
    import serde
    from serde.core.memo import registered

    # Every module of the two packages that may hold a memo, imported (the registry sees live ones).
    for pkg in (serde, canonical):
        for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
            if info.name.startswith(("serde.cli", "serde.dev", "serde.testing")):
                continue
            importlib.import_module(info.name)
    live = registered()
    assert {name: m.cap for name, m in live.items()} == _doc_table()
    # No memo of the packages goes unnamed (an unnamed one would be missing from the registry).
    import sys

    for mod_name, mod in list(sys.modules.items()):
        if mod is not None and mod_name.split(".")[0] in ("serde", "canonical"):
            for attr, value in vars(mod).items():
                if isinstance(value, Memo):
                    assert value.name in live and live[value.name] is value, f"{mod_name}.{attr} is not registered"


def test_registered_lists_named_memos_by_name_only() -> None:
    from serde.core.memo import registered

    named, unnamed = Memo(2, "test_only_memo"), Memo(2)
    assert registered()["test_only_memo"] is named
    assert all(m is not unnamed for m in registered().values())
    del named
    import gc

    gc.collect()
    assert "test_only_memo" not in registered()
