"""Input and output files for ``pt2serde run``, without pickle.

An inputs file is a :mod:`serde.bridge.bundle` (a small JSON file holding tensors and scalars the way
an artifact stores its example inputs) whose tree is ``(args, kwargs)``; write one with
:func:`write_inputs`. A pt2serde artifact (``.pt2s``) also works as an inputs file: its example
inputs are used. Outputs are written as a bundle of the output pytree.

Inputs and outputs can also be safetensors files, the format other tools write (the C++
``pt2serde-run`` reads and writes the same keys). An input is keyed by its path in ``(args,
kwargs)`` (``args.0``, ``args.1.0``, ``kwargs.x``, ``kwargs.d.key``: tuple and list items by index,
dict items and namedtuple fields by name) or by the program's name for it (``x``); an output by
its path in the output tree under ``output`` (``output`` for a single tensor, ``output.0``,
``output.1.logits``). The emitter stores these keys in the program (``input_keys``,
``output_keys``). An int, float or bool input or output is a 0-dimensional I64, F64 or BOOL
tensor; inputs the program was specialized to may be left out; None outputs are left out.
"""

from __future__ import annotations

import os
from typing import Any

from serde.errors import MalformedArtifactError

__all__ = ["write_inputs", "read_inputs", "write_outputs", "read_outputs", "is_safetensors",
           "read_safetensors_inputs", "write_safetensors_inputs", "write_safetensors_outputs",
           "read_safetensors_outputs"]

_ZIP_MAGIC = b"PK\x03\x04"


def write_inputs(path: str | os.PathLike, args: tuple | list, kwargs: dict | None = None) -> None:
    """Write ``(args, kwargs)`` for ``pt2serde run --inputs`` (tensors, None, bool, int, float, str,
    nested in tuples, lists, dicts and namedtuples)."""
    from serde.bridge.bundle import save_tree

    save_tree((tuple(args), dict(kwargs or {})), path)


def read_inputs(path: str | os.PathLike) -> tuple[tuple, dict]:
    """``(args, kwargs)`` from an inputs file or from an artifact's example inputs.

    Raises:
        MalformedArtifactError: the file is neither, or an artifact without example inputs.
    """
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError as e:
        raise MalformedArtifactError(f"{os.fspath(path)}: cannot read the inputs file: {e}") from None
    if head == _ZIP_MAGIC:
        from serde.archive.artifact import read_artifact
        from serde.bridge.weights import deserialize_weights

        a = read_artifact(path)
        _, _, example = deserialize_weights(a.weights, a.contents.member)
        if example is None:
            raise MalformedArtifactError(f"{os.fspath(path)}: the artifact has no example inputs; write an "
                                         "inputs file with native.run.io.write_inputs")
        return example
    from serde.bridge.bundle import load_tree

    tree = load_tree(path)
    if isinstance(tree, tuple) and len(tree) == 2 and isinstance(tree[0], tuple) and isinstance(tree[1], dict):
        return tree
    raise MalformedArtifactError(f"{os.fspath(path)}: an inputs file holds (args, kwargs); this one holds a "
                                 f"{type(tree).__name__}. Write it with native.run.io.write_inputs")


def write_outputs(path: str | os.PathLike, outputs: Any) -> None:
    from serde.bridge.bundle import save_tree

    save_tree(outputs, path)


def read_outputs(path: str | os.PathLike) -> Any:
    from serde.bridge.bundle import load_tree

    return load_tree(path)


# ---------------------------------------------------------------- safetensors


def is_safetensors(path: str | os.PathLike) -> bool:
    """Whether the file starts like a safetensors file (a little-endian length, then ``{``)."""
    try:
        with open(path, "rb") as f:
            head = f.read(9)
    except OSError:
        return False
    return len(head) == 9 and head[8:9] == b"{" and head[:1] != b"{"


def _input_table(program: Any) -> tuple[list[str], dict[str, int]]:
    """Each input's display label and the index of every accepted key (path key and name)."""
    keys = list(program.input_keys) or [""] * len(program.inputs)
    labels, index = [], {}
    for i, (inp, key) in enumerate(zip(program.inputs, keys, strict=True)):
        labels.append(f"{key} ({inp.name})" if key and key != inp.name else inp.name)
        if key:
            index[key] = i
        index.setdefault(inp.name, i)
    return labels, index


def read_safetensors_inputs(path: str | os.PathLike, program: Any) -> tuple[tuple, dict]:
    """``(args, kwargs)`` for ``program`` (a :class:`native.format.program.Program`) from a safetensors file.

    Raises:
        InvalidWeightsFileError: the file is not a valid safetensors file.
        InputMismatchError: a tensor that is no input, an input given twice or missing, a number
            input that is not a 0-dimensional tensor of its kind (dtype, rank and sizes of tensor
            inputs are checked by the runtime, with the same messages).
    """
    import safetensors.torch
    import torch
    import torch.utils._pytree as pytree

    from native.errors import InputMismatchError
    from native.format import program as P
    from serde.archive.safetensors import parse_header

    where = os.fspath(path)
    try:
        with open(path, "rb") as f:
            buf = f.read()
    except OSError as e:
        raise MalformedArtifactError(f"{where}: cannot read the inputs file: {e}") from None
    parse_header(buf, where)
    tensors = safetensors.torch.load(buf)
    labels, index = _input_table(program)
    leaves: list[Any] = [None] * len(program.inputs)
    given: list[str | None] = [None] * len(program.inputs)
    for key in sorted(tensors):
        i = index.get(key)
        if i is None:
            raise InputMismatchError(f"{where}: tensor {key!r} is not an input of the program; it takes "
                                     f"{', '.join(labels) or 'no inputs'}")
        if given[i] is not None:
            raise InputMismatchError(f"{where}: input {labels[i]} is given twice, as {given[i]!r} and {key!r}")
        given[i] = key
        v, t = program.values[program.inputs[i].value], tensors[key]
        kind = _scalar_kind(v, P)
        if kind is None:
            leaves[i] = t
            continue
        dtype, name = {int: (torch.int64, "I64"), float: (torch.float64, "F64"), bool: (torch.bool, "BOOL")}[kind]
        if t.dim() != 0 or t.dtype != dtype:
            article = "an" if kind is int else "a"
            raise InputMismatchError(f"{where}: input {labels[i]}: expected {article} {kind.__name__} as a 0-dimensional "
                                     f"{name} tensor, got {str(t.dtype).removeprefix('torch.')}{list(t.shape)}")
        leaves[i] = kind(t.item())
    for i, inp in enumerate(program.inputs):
        if given[i] is None:
            v = program.values[inp.value]
            if not inp.constant:
                raise InputMismatchError(f"{where}: input {labels[i]} is missing")
            leaves[i] = None if isinstance(v, P.NoneValue) else v.v
    if program.in_spec is None:
        return tuple(leaves), {}
    from serde.bridge.treespec import deserialize_treespec
    from serde.core import schema, wire

    spec = deserialize_treespec(wire.decode(program.in_spec, schema.TreeSpec), "program.in_spec")
    return pytree.tree_unflatten(leaves, spec)


def write_safetensors_inputs(path: str | os.PathLike, program: Any, args: tuple | list,
                             kwargs: dict | None = None) -> None:
    """Write ``(args, kwargs)`` as a safetensors inputs file for ``program`` (keys as the module
    docstring says), e.g. an artifact's example inputs (:func:`read_inputs`) for ``pt2serde-run``.
    Inputs the program was specialized to are left out unless they are numbers.

    Raises:
        InputMismatchError: the inputs have another number of leaves than the program takes, or a
            leaf that is neither a tensor, a number nor an input the program was specialized to.
    """
    import torch.utils._pytree as pytree

    from native.errors import InputMismatchError

    leaves = pytree.tree_leaves((tuple(args), dict(kwargs or {})))
    if len(leaves) != len(program.inputs):
        raise InputMismatchError(f"the inputs have {len(leaves)} leaves but the program takes "
                                 f"{len(program.inputs)}")
    keys = list(program.input_keys) or [inp.name for inp in program.inputs]
    table = {}
    for key, inp, leaf in zip(keys, program.inputs, leaves, strict=True):
        t = _as_tensor(leaf)
        if t is not None:
            table[key] = t
        elif not inp.constant:
            raise InputMismatchError(f"input {key} ({inp.name}) is a {type(leaf).__name__}; a safetensors file "
                                     "holds tensors and numbers")
    _write_atomic(path, table)


def _as_tensor(leaf: Any) -> Any:
    """A leaf as safetensors holds it: a tensor as a private contiguous copy (outputs may alias each
    other or the state), a bool, int or float as a 0-dimensional BOOL, I64 or F64 tensor; else None."""
    import torch

    if isinstance(leaf, torch.Tensor):
        return leaf.detach().contiguous().clone()
    for kind, dtype in ((bool, torch.bool), (int, torch.int64), (float, torch.float64)):
        if isinstance(leaf, kind):
            return torch.tensor(leaf, dtype=dtype)
    return None


def _write_atomic(path: str | os.PathLike, table: dict) -> None:
    """``table`` as a safetensors file, through a temporary file: no partial file is left."""
    import safetensors.torch

    data = safetensors.torch.save(table, metadata={"format": "pt"})
    path = os.fspath(path)
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _scalar_kind(v: Any, P: Any) -> type | None:
    """int, float or bool for an input held as a number; None for a tensor."""
    if isinstance(v, (P.SymInt, P.Int)):
        return int
    if isinstance(v, (P.SymFloat, P.Float)):
        return float
    if isinstance(v, (P.SymBool, P.Bool)):
        return bool
    return None


def write_safetensors_outputs(path: str | os.PathLike, program: Any, outputs: Any) -> None:
    """Write the output tree of a run of ``program`` as a safetensors file (keys as the module
    docstring says). Written to a temporary file and renamed, so no partial file is left.

    Raises:
        UnsupportedConstructError: an output that is neither a tensor, a number nor None.
        OSError: the file cannot be written.
    """
    import torch.utils._pytree as pytree

    from serde.errors import UnsupportedConstructError

    leaves = pytree.tree_leaves(outputs)
    keys = list(program.output_keys) or [f"output.{i}" for i in range(len(leaves))]
    if len(keys) != len(leaves):
        keys = [f"output.{i}" for i in range(len(leaves))]
    table = {}
    for key, leaf in zip(keys, leaves, strict=True):
        if leaf is None:
            continue
        t = _as_tensor(leaf)
        if t is not None:
            table[key] = t
        else:
            raise UnsupportedConstructError(f"output {key!r} is a {type(leaf).__name__}; a safetensors file holds "
                                            "tensors and numbers: write the outputs as a bundle (.json) instead")
    _write_atomic(path, table)


def read_safetensors_outputs(path: str | os.PathLike, program: Any) -> Any:
    """The output tree of ``program`` rebuilt from a safetensors outputs file (either runtime's):
    each leaf from its key, 0-dimensional number tensors back to Python numbers where the program
    returns a symbolic int, float or bool, and None where a key is absent.

    Raises:
        InvalidWeightsFileError: the file is not a valid safetensors file.
        NativeFormatError: a key the program has no output for.
    """
    import safetensors.torch
    import torch.utils._pytree as pytree

    from native.errors import NativeFormatError
    from native.format import program as P
    from serde.archive.safetensors import parse_header

    where = os.fspath(path)
    with open(path, "rb") as f:
        buf = f.read()
    parse_header(buf, where)
    tensors = safetensors.torch.load(buf)
    keys = list(program.output_keys) or [f"output.{i}" for i in range(len(program.outputs))]
    extra = sorted(set(tensors) - set(keys))
    if extra:
        raise NativeFormatError(f"{where}: {extra[0]!r} is not an output of the program; it returns "
                                f"{', '.join(keys)}")
    leaves = []
    for key, o in zip(keys, program.outputs, strict=True):
        t = tensors.get(key)
        kind = _scalar_kind(program.values[o], P)
        leaves.append(t if t is None or kind is None else kind(t.item()))
    if program.out_spec is None:
        return leaves
    from serde.bridge.treespec import deserialize_treespec
    from serde.core import schema, wire

    return pytree.tree_unflatten(leaves, deserialize_treespec(wire.decode(program.out_spec, schema.TreeSpec),
                                                              "program.out_spec"))
