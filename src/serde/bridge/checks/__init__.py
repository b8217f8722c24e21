"""Program-level checks: a loaded program must be one our writer could have written.

Decoding proves an artifact has the schema's shape, and :mod:`serde.core.checks` that its names and
sizes are safe; these checks prove the pieces fit each other before torch builds anything from them,
so that a damaged or hostile file fails at load with a message naming the field, never later at run
time inside torch. They need torch's operator schemas, so they live in the bridge:

* :mod:`~serde.bridge.checks.calls`: operator calls, symbolic helpers, ``getitem`` and vmap wrappers;
* :mod:`~serde.bridge.checks.hops`: higher-order ops and vmap nesting;
* :mod:`~serde.bridge.checks.kernels`: what a few kernels check of their arguments that their fake
  kernels do not (a mask's dtype, a random op's range, a Scalar that must fit a dtype, ...);
* :mod:`~serde.bridge.checks.signature`: the graph signature, the weights and the module call graph;
* :mod:`~serde.bridge.checks.examples`: the stored example inputs against the input checks the
  program's module runs (static sizes, constants, range constraints).

Every failure is :class:`serde.bridge.errors.InconsistentProgramError`.
"""

from .calls import check_call, check_op_outputs, number_kind, symbolic_result_kinds
from .examples import check_examples_fit_inputs
from .hops import BATCH_DIM_AT, check_batch_dim_result, check_vmap_nesting
from .kernels import check_kernel
from .signature import check_module_call_graph, check_signature, check_weights_fit_graph

__all__ = ["BATCH_DIM_AT", "check_batch_dim_result", "check_call", "check_kernel", "check_op_outputs", "check_vmap_nesting", "number_kind", "symbolic_result_kinds",
           "check_signature", "check_weights_fit_graph", "check_module_call_graph", "check_examples_fit_inputs"]
