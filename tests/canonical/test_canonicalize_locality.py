"""Diff locality: inserting one node into the middle of a 1,000-node chain changes at
most 10 lines of ``pt2serde show`` output, because canonical names do not cascade."""

from __future__ import annotations

import pytest

from canonical.canonicalize import canonicalize
from canonical.render import count_changed_lines
from canonical.render import render as show
from serde.bridge.effects import op_facts
from tests.canonical._builders import chain, render

N = 1000


def _show(p) -> str:
    return show(canonicalize(render(p), facts=op_facts)[0])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_inserting_one_node_changes_few_lines(seed):
    base = _show(chain(N, seed))
    changed = {at: count_changed_lines(base, _show(chain(N, seed, insert_at=at))) for at in (250, 500, 750)}
    # one added line, plus the few nodes within names.RADIUS downstream (each a -/+ pair)
    assert max(changed.values()) <= 10, changed
    assert min(changed.values()) >= 3, changed  # the new line and its consumer's line at least


def test_the_measure_detects_cascading_names():
    # Stored names n<index> shift after the insertion point: the measure must see a cascade.
    a, b = show(render(chain(N, 0))), show(render(chain(N, 0, insert_at=500)))
    assert count_changed_lines(a, b) > 500


def test_names_stay_readable_in_a_long_chain():
    c, _ = canonicalize(render(chain(N, 0)), facts=op_facts)
    names = [n.name for n in c.graph_module.graph.nodes]
    ops = {n.target.split(".")[3] for n in c.graph_module.graph.nodes}
    assert all(name.split("_")[0] in ops or name.startswith("clamp_min") for name in names), names[:20]
    assert max(len(n) for n in names) <= len("clamp_min_bcdf_12")


@pytest.mark.slow
def test_locality_over_many_insertion_points():
    # Exact ties of whole 4-node neighbourhoods are the only way past 10 lines (their ordinals
    # shift); on random chains that is rare.
    counts = []
    for seed in range(10):
        base = _show(chain(N, seed))
        counts += [count_changed_lines(base, _show(chain(N, seed, insert_at=at))) for at in range(50, N, 50)]
    within = sum(c <= 10 for c in counts) / len(counts)
    assert within >= 0.97, sorted(counts)[-10:]
    assert max(counts) <= 20, sorted(counts)[-10:]
