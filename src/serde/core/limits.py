"""Caps on everything an artifact can make the loader do, checked before the work they bound.

One :class:`Limits` object travels from :func:`serde.load` (and ``read_archive``) to every check.
The defaults are far above what real exported programs use; raise one for a trusted file with
``serde.load(path, limits=Limits(max_list_len=...))``. Every violation is a :class:`LimitError`
subclass (:mod:`serde.core.errors`) naming the field, the value, the limit and the ``Limits`` field to raise.
"""

from __future__ import annotations

from dataclasses import dataclass

from serde.core.errors import LimitError

__all__ = ["Limits", "DEFAULT_LIMITS", "check_limit", "too_large"]


@dataclass(frozen=True)
class Limits:
    """Caps applied while reading an artifact, before anything is allocated, built or evaluated.

    Raise them (``Limits(max_file_bytes=...)``) for very large models from trusted sources.
    """

    # the archive (read_archive)
    max_file_bytes: int = 1 << 40
    max_members: int = 1 << 20
    max_member_bytes: int = 1 << 40
    max_json_bytes: int = 1 << 30
    # the program (deserialize_program)
    max_name_chars: int = 1024          # a node name, placeholder, FQN, forward argument name
    max_text_chars: int = 1 << 20       # one metadata string (stack trace, custom JSON)
    max_list_len: int = 1 << 16         # one list argument or list of sizes/names
    max_nodes: int = 1 << 20            # nodes over the graph and all its subgraphs
    max_tensor_rank: int = 64           # torch's own kernels index dims with int8-sized tables
    max_tensor_elements: int = (1 << 63) - 1   # the product of concrete sizes, as int64
    # symbolic expressions (serde.core.expr and native.format.exprs). These bound every expression parse and
    # evaluation in the process and are read from DEFAULT_LIMITS, not per load; length and depth
    # violations stay MalformedArtifactError (as before), magnitudes are IntegerTooLargeError.
    max_expr_chars: int = 64 * 1024
    max_expr_depth: int = 200
    max_int_bits: int = 128             # an integer literal in an expression or a size
    max_exponent: int = 64              # an exponent applied to a symbolic (unknown) base
    max_power_bits: int = 1 << 16       # bits of a power of two literals, computed exactly
    # The degree of one expression as factoring sees it (serde.core.expr.tree.degree: (s0 + 1)**3
    # is 3, a product of distinct symbols 1). torch solves size relations by factoring
    # polynomials, whose time grows steeply with the degree: a product of 16 distinct linear
    # factors of one symbol took 19 s there, of 12 sums s0 + s1 + i 21 s, of 8 under half a second.
    # The sizes torch writes are monomials and their sums and quotients, of degree 1 or 2.
    max_degree: int = 8
    # native programs (native.format.verify.decode)
    max_arena_bytes: int = 1 << 36      # one memory-plan arena, allocated when a Method is built
    max_flow_cells: int = 1 << 28       # values x (jumps + jump targets) x passes of the data-flow check


DEFAULT_LIMITS = Limits()


def check_limit(value: int, limits: Limits, field: str, where: str, what: str,
                error: type[LimitError]) -> None:
    """Raise ``error`` when ``value`` exceeds ``limits.<field>``, saying how to raise the limit."""
    cap = getattr(limits, field)
    if value > cap:
        raise error(too_large(where, what, value, field, cap))


def too_large(where: str, what: str, value: object, field: str, cap: int, *, per_load: bool = True) -> str:
    """The message of every limit violation (``per_load=False``: a cap that ``load(limits=)`` cannot raise)."""
    how = (f"If it is trusted, load it with limits=serde.Limits({field}=...)" if per_load else
           f"This cap (serde.core.limits.DEFAULT_LIMITS.{field}) bounds expression evaluation everywhere and is "
           "not raised per load; no program torch.export writes comes near it")
    return f"{where}: {what} is {value}, more than Limits.{field}={cap}; the artifact is damaged or hostile. {how}"
