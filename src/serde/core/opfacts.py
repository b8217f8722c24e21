"""What an operator does besides computing its outputs, as plain data (no torch).

The canonical order (``canonical.order``) may only permute nodes whose relative order nobody can
observe. Whether an order can be observed is a property of each node's target: which arguments it
writes, which outputs alias which arguments, whether it draws from the RNG, whether it changes
interpreter state. :mod:`serde.bridge.effects` reads these facts from the operators' schemas and tags;
this module only defines their shape, so that ``canonical`` can use them without importing torch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["OpFacts", "FactsFn", "PURE", "OPAQUE", "STATEFUL", "STATEFUL_TARGETS"]


@dataclass(frozen=True)
class OpFacts:
    """Order-relevant facts about one call target.

    Attributes:
        writes: names of the schema arguments whose tensors the call writes (``Tensor(a!)``,
            ``Tensor(a!)[]``, ``out=``).
        views: ``(output position, argument name)``: that output shares the argument's storage
            (views, and in-place ops returning ``self``).
        seeded: consumes the global RNG (``nondeterministic_seeded``).
        effectful: observable by itself (effect tokens, custom objects, unknown semantics).
        writes_all: may write any value it is given (a call whose semantics are opaque).
        fence: changes interpreter state that gives other nodes their meaning (vmap nesting):
            every node keeps its side of it.
        check: has no outputs and writes nothing, so it can only be observed by failing (asserts).
        has_effect: whether the call's position relative to other effects can be observed
            (derived from the others when the facts are built: it is asked of every node).
    """

    writes: tuple[str, ...] = ()
    views: tuple[tuple[int, str], ...] = ()
    seeded: bool = False
    effectful: bool = False
    writes_all: bool = False
    fence: bool = False
    check: bool = False
    has_effect: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "has_effect", bool(self.writes) or self.seeded or self.effectful
                           or self.writes_all or self.fence)


# Target name -> facts; where names a node for error messages. Raises a SerializeError for a target
# whose facts cannot be known (e.g. an operator not registered in this process).
FactsFn = Callable[[str, str], OpFacts]

PURE = OpFacts()
OPAQUE = OpFacts(effectful=True, writes_all=True)
STATEFUL = OpFacts(effectful=True, fence=True)

# Training-IR graphs of vmap-based ops (associative_scan) keep these torch._functorch.predispatch
# calls. They change the interpreter's vmap level, and the batch-dim calls between them only mean
# something inside that level, so they are fences (STATEFUL).
STATEFUL_TARGETS: frozenset[str] = frozenset(
    f"torch._functorch.predispatch.{n}"
    for n in ("_vmap_increment_nesting", "_vmap_decrement_nesting", "lazy_load_decompositions")
)
