"""serde.core.memo.Memo: bounded, forgets everything when full, reads like a dict."""

from __future__ import annotations

from serde.core.memo import Memo


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
