"""More nodes than Limits.max_nodes (loaded with a small cap: a file over the default would be 1M nodes)."""

from __future__ import annotations

import serde
from serde.core.errors import TooManyNodesError

ERROR = TooManyNodesError
MATCH = r"graph\.nodes: the number of nodes \(so far\) is \d+, more than Limits\.max_nodes=2"
RUNS_CODE = False
LIMITS = serde.Limits(max_nodes=2)


def build(base: bytes, canary: str) -> bytes:
    return base
