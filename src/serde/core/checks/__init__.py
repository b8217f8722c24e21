"""Schema-level checks: what a decoded artifact must satisfy before torch builds anything from it.

* :mod:`~serde.core.checks.names`: the grammar of every name torch.fx turns into code.
* :mod:`~serde.core.checks.shapes`: int64 bounds, ranks, element counts and list lengths.
* :mod:`~serde.core.checks.arguments`: the names and sizes inside one argument.
* :mod:`~serde.core.checks.signature`: the graph signature and the module call graph.
* :mod:`~serde.core.checks.program`: all of the above over a whole program (:func:`check_program`).
* :mod:`~serde.core.checks.weights`: names, shapes, storages and tensor views of weights.json.

The caps are :class:`serde.core.limits.Limits`; the errors are in :mod:`serde.core.errors`.
Program-level checks, which need torch's operator schemas, are in :mod:`serde.bridge.checks`.
"""

from .names import (
    RESERVED_ATTRIBUTES,
    RESERVED_LOCALS,
    check_attr_name,
    check_class_name,
    check_fqn,
    check_local_name,
    check_quoted_text,
    check_text,
)
from .program import check_program
from .weights import check_weight_names, validate_weights

__all__ = [
    "check_program", "check_weight_names", "validate_weights", "check_local_name", "check_fqn", "check_attr_name",
    "check_text", "check_quoted_text", "check_class_name", "RESERVED_ATTRIBUTES", "RESERVED_LOCALS",
]
