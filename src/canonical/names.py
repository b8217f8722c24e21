"""Canonical names for nodes, their output values and subgraphs: readable, stable and local.

A plain per-op counter in topological order (``add``, ``add_1``, ...) cascades: inserting one
``add`` renumbers every later one, and every line that mentions them changes in a diff. Here a
node's name depends only on the node itself and its neighbourhood, never on a global position:

1. ``base``: the operator name (``torch.ops.aten.linear.default`` -> ``linear``,
   ``_operator.mul`` -> ``mul``, ``torch.ops.higher_order.cond`` -> ``cond``).
2. If no other node in the graph has the same base, the name is the base: ``linear``.
3. Otherwise, if the node runs inside a module (innermost ``nn_module_stack`` path) and no other
   node with this base runs in that module, the name is ``<module path>_<base>``:
   ``layers_0_attn_q_proj_linear``.
4. Otherwise a five-letter tag is appended, derived from a hash of the node's *local structure*:
   its target, module path and constant arguments, and the same of its producers up to
   :data:`RADIUS` steps upstream (graph inputs by their fixed names): ``add_kqztb``. Tags use
   consonants only, so they never read as ordinals or words.
5. Nodes whose names are still equal (exactly the same local structure, or a tag collision) get
   ordinal suffixes ``_1``, ``_2`` in canonical order, counted among those nodes only.
6. A final collision pass (canonical order) keeps names unique and avoids Python keywords,
   builtins and names the FX code generator reserves, by appending ``_`` or ``_<k>``.

Inserting one node into a chain therefore renames only the new node and the nodes within
``RADIUS`` steps downstream of it (plus, rarely, members of a tie group or a base that stops being
unique), so a diff of ``pt2serde show`` stays a few lines long: 1 added line + 4 changed lines
(-/+ pairs) = 9 in 99% of insertion points of random 1,000-node chains (radius 2 gives 7 lines,
but its far more frequent exact ties push ~8% of insertions over 10 through shifted ordinals).

Output values: a node's single output carries the node's name; a node with several outputs (or a
list output) names them ``<node>_<k>``.

Subgraph attributes keep torch's names (:data:`SUBGRAPH_PATTERNS`: ``true_graph_0``,
``while_loop_body_graph_1``, ...), because code reaches them as ``gm.true_graph_0``; the number
counts the ops of one pattern family in canonical order, within one graph module, as torch counts
them in tracing order. Subgraphs of other higher-order ops are ``<node>_graph<k>`` (or
``<node>_<argument name>``). All share the parent graph's namespace.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from serde.core.walk import HOP_PREFIX

__all__ = ["RADIUS", "op_base", "sanitize", "Namespace", "node_names", "ILLEGAL_NAMES", "SUBGRAPH_PATTERNS",
           "SubgraphNamer"]

RADIUS = 3

_TAG_ALPHABET = "bcdfghjklmnpqrstvwxz"
_TAG_LEN = 5

# Names a generated FX forward() cannot bind: Python keywords and builtins, FX's own imports,
# `self`. Written out (not read from this interpreter) so names never depend on the Python version;
# only lowercase ones matter, operator names are lowercase.
ILLEGAL_NAMES = frozenset("""
    abs aiter all and anext any as ascii assert async await bin bool break breakpoint bytearray bytes
    callable chr class classmethod compile complex continue copyright credits def del delattr dict dir
    divmod elif else enumerate eval except exec exit filter finally float for format from frozenset
    getattr global globals hasattr hash help hex id if import in input int is isinstance issubclass
    iter lambda len license list locals map max memoryview min next nonlocal not object oct open or
    ord pass pow print property quit raise range repr return reversed round set setattr slice sorted
    staticmethod str sum super try tuple type vars while with yield zip
    inf nan device fx_pytree pytree math torch operator self
""".split())

_NOT_IDENT = re.compile(r"[^0-9A-Za-z_]+")


@functools.lru_cache(maxsize=4096)  # a program repeats a few module paths and targets on every node
def sanitize(text: str) -> str:
    """``text`` as a Python identifier: other characters become ``_``; never starts with a digit."""
    s = _NOT_IDENT.sub("_", text)
    if not s:
        return "_"
    return "_" + s if s[0].isdigit() else s


@functools.lru_cache(maxsize=4096)
def op_base(target: str) -> str:
    """Readable operator name of a node target (overload dropped)."""
    parts = target.split(".")
    if len(parts) >= 4 and parts[0] == "torch" and parts[1] == "ops":
        return sanitize(parts[3])
    return sanitize(parts[-1])


# byte -> letter (256 is not a multiple of 20: the first 16 letters are a little likelier; harmless)
_TAG_TABLE = bytes(ord(_TAG_ALPHABET[b % len(_TAG_ALPHABET)]) for b in range(256))


_blake12 = functools.partial(hashlib.blake2b, digest_size=12)  # (the keyword costs more than the hash)


_blake12_empty = hashlib.blake2b(digest_size=12)
_OUTPUT_TOKENS = tuple(b"%d;" % j for j in range(8))


def _digest(parts: Any) -> bytes:
    return _blake12(repr(parts).encode()).digest()


class Namespace:
    """Unique names within one graph; a taken or illegal candidate gets a suffix."""

    def __init__(self, reserved: set[str] | None = None) -> None:
        self.used: set[str] = set(reserved or ())

    def claim(self, candidate: str) -> str:
        if candidate in ILLEGAL_NAMES:
            candidate += "_"
        name, k = candidate, 0
        while name in self.used:
            k += 1
            name = f"{candidate}_{k}"
        self.used.add(name)
        return name


def node_names(order: Sequence[int], targets: Sequence[str], scopes: Sequence[str],
               local_keys: Sequence[Any], producers: Sequence[Sequence[Any]],
               namespace: Namespace) -> list[str]:
    """Canonical name of every node (indexed like the stored node list), claimed in ``namespace``.

    Args:
        order: canonical order (stored node indices).
        targets: per node, its target string.
        scopes: per node, its sanitized innermost module path ("" at the root).
        local_keys: per node, a name-free key of its target and constant arguments (tuples of
            str, bytes, int and None).
        producers: per node, per reference in argument order: ``(node index, output index)`` for
            a node's value, or ``(input name, 0)`` for a graph input (its canonical name).
        namespace: receives the names (graph inputs already reserved in it).
    """
    n = len(targets)
    base_of = {t: op_base(t) for t in set(targets)}  # a graph has few targets
    bases = [base_of[t] for t in targets]
    # Keys hold only str, bytes, int and tuples, so equal keys have equal reprs: nodes that look
    # alike (most of a long graph) share one digest.
    first: dict[tuple, bytes] = {}
    sig: list[bytes] = []
    for part in zip(targets, scopes, local_keys, strict=True):
        d = first.get(part)
        if d is None:
            d = first[part] = _digest(part)
        sig.append(d)
    # Producer tokens: a node's value is (its signature, output index); an input is its name.
    # A node reading one node's value (most of them) is (producer, token), hashing the same bytes
    # without the join; any other node has the list of its tokens.
    tokens: list[Any] = []
    for refs in producers:
        if len(refs) == 1 and type(p := refs[0][0]) is int:
            tokens.append((p, _OUTPUT_TOKENS[j] if (j := refs[0][1]) < len(_OUTPUT_TOKENS) else b"%d;" % j))
        else:
            tokens.append([(p, b"%d;" % j) if isinstance(p, int) else (None, b"in:%d:%s;" % (len(p), p.encode()))
                           for p, j in refs])
    new = _blake12_empty.copy  # a copy of a fresh hasher is cheaper than a new one
    for _ in range(RADIUS):
        prev, sig = sig, []
        add = sig.append
        for own, row in zip(prev, tokens, strict=True):
            h = new()
            if type(row) is tuple:
                h.update(own + prev[row[0]] + row[1])
            else:
                h.update(own + b"".join([(prev[p] + t) if p is not None else t for p, t in row]))
            add(h.digest())
    by_base = Counter(bases)
    by_scope = Counter(zip(scopes, bases, strict=True))
    candidates: list[str] = [""] * n
    # Every node's tag (the first bytes of its digest as letters), translated in one call.
    tags = b"".join([d[:_TAG_LEN] for d in sig]).translate(_TAG_TABLE).decode("ascii")
    for i in range(n):
        b, s = bases[i], scopes[i]
        if by_base[b] == 1:
            candidates[i] = b
        elif s and by_scope[(s, b)] == 1:
            candidates[i] = f"{s}_{b}"
        else:
            k = _TAG_LEN * i
            candidates[i] = f"{s}_{b}_{tags[k:k + _TAG_LEN]}" if s else f"{b}_{tags[k:k + _TAG_LEN]}"
    seen: dict[str, int] = {}
    names: list[str] = [""] * n
    claim = namespace.claim
    for i in order:
        c = candidates[i]
        k = seen.get(c, 0)
        seen[c] = k + 1
        names[i] = claim(c if k == 0 else f"{c}_{k}")
    return names


# Higher-order op -> the attribute name torch gives each of its subgraph arguments, in argument
# order ("{}" is the number). Ops sharing a first pattern share one count (torch's split of
# set_grad / autocast regions names both ``submod_<k>``, from 1).
SUBGRAPH_PATTERNS: dict[str, tuple[str, ...]] = {
    "cond": ("true_graph_{}", "false_graph_{}"),
    "while_loop": ("while_loop_cond_graph_{}", "while_loop_body_graph_{}"),
    "while_loop_stack_output": ("while_loop_cond_graph_{}", "while_loop_body_graph_{}"),
    "map_impl": ("body_graph_{}",),
    "scan": ("scan_combine_graph_{}",),
    "associative_scan": ("associative_scan_combine_graph_{}",),
    "hints_wrapper": ("hints_wrapper_body_graph_{}",),
    "invoke_subgraph": ("repeated_subgraph{}",),
    "wrap_with_set_grad_enabled": ("submod_{}",),
    "wrap_with_autocast": ("submod_{}",),
    "tag_activation_checkpoint": ("wrap_body{}",),
    "flex_attention": ("sdpa_score{}", "sdpa_mask{}"),
    "flex_attention_backward": ("fw_graph{}", "joint_graph{}", "mask_graph{}"),
    "auto_functionalized": ("auto_functionalized_subgraph_{}",),
    "auto_functionalized_v2": ("auto_functionalized_subgraph_{}",),
}
_FIRST_NUMBER = {"submod_{}": 1}


class SubgraphNamer:
    """Attribute names of one graph's subgraphs, given node by node in canonical order."""

    def __init__(self, namespace: Namespace) -> None:
        self.ns = namespace
        self.next: dict[str, int] = {}

    def claim(self, target: str, node_name: str, new: Sequence[tuple[int, str]]) -> list[str]:
        """Names for the not yet named subgraphs of one node.

        Args:
            target: the node's target.
            node_name: the node's canonical name (stem of the fallback names).
            new: per subgraph to name, ``(its position among the node's subgraphs, the name of
                the argument holding it, "" when positional)``.
        """
        hop = target[len(HOP_PREFIX):] if target.startswith(HOP_PREFIX) else ""
        patterns = SUBGRAPH_PATTERNS.get(hop, ())
        mine = [patterns[k] for k, _ in new if k < len(patterns)]
        number = 0
        if mine:
            family = patterns[0]
            number = self.next.get(family, _FIRST_NUMBER.get(family, 0))
            while any(p.format(number) in self.ns.used for p in mine):
                number += 1
            self.next[family] = number + 1
        out = []
        for k, arg_name in new:
            if k < len(patterns):
                out.append(self.ns.claim(patterns[k].format(number)))
            else:
                stem = node_name.lstrip("_") or "graph"
                out.append(self.ns.claim(f"{stem}_{sanitize(arg_name) if arg_name else f'graph{k}'}"))
        return out
