"""torch 2.14 -> 2.15: the ``reduce_op`` argument of the ``_c10d_functional`` all-reduce operators
widened from ``str`` to ``Any``, and new operators (``_scaled_addmm``, ``_philox_randint``,
``wait_tensors``, ...), which a 2.14 reader refuses (serde.opsets.upgrade names them).

Written 2026-12-01 from the changes ``python -m serde.dev.opchanges`` lists between the two snapshots
(2.14.1 cu130 and 2.15.0 cu132 builds). torch 2.15 is outside SUPPORTED_TORCH: the step lets 2.13 and
2.14 readers load what 2.15 wrote, and 2.15 load theirs, as far as the operators go.
"""

from __future__ import annotations

from .helpers import Rewrite, retyped_argument

__all__ = ["OLDER", "NEWER", "UPGRADE", "DOWNGRADE", "REFUSED_UP", "REFUSED_DOWN"]

OLDER, NEWER = (2, 14), (2, 15)

_ALL_REDUCE = ("all_reduce.default", "all_reduce_.default", "all_reduce_coalesced.default",
               "all_reduce_coalesced_.default")

# Keys are operators of the older release: a str is an Any, so the call stays as it is.
UPGRADE: dict[str, Rewrite] = {f"_c10d_functional::{op}": retyped_argument("reduce_op") for op in _ALL_REDUCE}

# Keys are operators of the newer release: kept when the call passes a string, as 2.14 requires.
DOWNGRADE: dict[str, Rewrite] = {f"_c10d_functional::{op}": retyped_argument("reduce_op") for op in _ALL_REDUCE}

REFUSED_UP: dict[str, str] = {}
REFUSED_DOWN: dict[str, str] = {}
