"""Public API: ``save`` and ``load``."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, BinaryIO

import torch
from torch.export import ExportedProgram

from serde.archive.artifact import Artifact, read_artifacts, write_artifacts
from serde.bridge.custom_objects import encode_constants
from serde.bridge.effects import op_facts
from serde.bridge.isolation import outside_ambient_modes
from serde.bridge.program import deserialize_program, serialize_program
from serde.bridge.weights import deserialize_weights, saved_devices, serialize_weights
from serde.core.checks import check_program, check_weight_names
from serde.core.gcpause import paused_gc
from serde.core.limits import DEFAULT_LIMITS, Limits
from serde.core.version import SUPPORTED_TORCH, torch_release

from . import archive
from .archive import payload_name
from .errors import MalformedArtifactError, SerializeError, UnsafeArtifactError, UnsupportedConstructError

if TYPE_CHECKING:
    from .archive import safetensors as st

# Imported where they are used, not here: the operator upgraders (serde.opsets: release snapshots,
# rewrite tables) serve only artifacts of another torch release and save(target_torch=...), and
# the safetensors files (serde.archive.safetensors) only artifacts that keep weights outside;
# a first save or load in a process pays for neither unless it uses them.

__all__ = ["save", "load", "attach_weights", "to_artifact_parts", "from_artifact", "check_artifact", "TESTED_TORCH",
           "StructureOnlyError"]

# The torch releases the test suite runs under (serde.core.version.SUPPORTED_TORCH): pt2serde
# reads torch internals (op schemas, fx metadata, the export verifier), so a release outside them
# may work but has not been checked.
TESTED_TORCH = SUPPORTED_TORCH
_torch_checked = False


def _warn_if_untested_torch() -> None:
    """Once per process, on the first save or load: warn when this torch is outside the tested range,
    pointing at the caller's line (save/load -> here -> warn)."""
    global _torch_checked
    if _torch_checked:
        return
    _torch_checked = True
    if torch_release(str(torch.__version__)) in SUPPORTED_TORCH:
        return
    import warnings

    tested = ", ".join(f"{a}.{b}.x" for a, b in SUPPORTED_TORCH)
    warnings.warn(
        f"pt2serde is tested with torch {tested}; this is torch {torch.__version__}: run your round-trip "
        "tests (serde.testing.assert_roundtrip) before relying on it", stacklevel=3)


PathOrFile = str | os.PathLike | BinaryIO


class _FromArtifact:
    def __repr__(self) -> str:
        return "FROM_ARTIFACT"


# load()'s default for ``weights``: the artifact's own (inside it and in the files it records).
FROM_ARTIFACT: Any = _FromArtifact()
# The attribute a structure-only program carries: the artifact it came from (for attach_weights).
_STRUCTURE_ATTR = "_pt2serde_structure_only"


def save(ep: ExportedProgram | Mapping[str, ExportedProgram], f: PathOrFile, *, debug_info: bool = False,
         extra_files: Mapping[str, str] | None = None, target_torch: str | None = None,
         weights: str | os.PathLike | None = None, max_shard_bytes: int | None = None) -> None:
    """Save ``ep`` as a pt2serde artifact.

    Args:
        ep: the program, as returned by ``torch.export.export``, or a dict of several programs by
            name (``{"prefill": ep1, "decode": ep2}``; names are Python identifiers): they share
            one artifact, where a tensor that several of them hold is stored once, and
            :func:`load` returns the dict.
        f: a path (written atomically: a crash never leaves a partial file there) or a binary
            file object. A seekable file object is left positioned where the artifact starts,
            as ``torch.export.save`` does, so ``load(f)`` right after reads it back.
        debug_info: also keep debug-only metadata (stack traces, provenance) in a separate
            ``debug.json`` member that fingerprints and ``pt2serde diff`` ignore.
        extra_files: name -> text to store alongside the program (as ``torch.export.save``'s
            ``extra_files``); read back with ``load(..., extra_files=...)``. Names are 1 to 200
            letters, digits, ``_``, ``-`` and ``.``; the text is stored as UTF-8.
        target_torch: write the program for a reader running this torch release (``"2.13"``):
            operators that changed between this torch and that one are rewritten by the inverse
            (or forward) operator upgraders, and the program records that release as its torch.
            None (the default) writes for this torch.
        weights: a file name (``"model.safetensors"``), written next to the artifact: the state
            dict and tensor constants go there as safetensors, keyed by their FQNs, and the
            artifact records the file's name, size and digests (see docs/weights.md). Storages no
            FQN covers whole, and example inputs, stay in the artifact. ``f`` must be a path.
        max_shard_bytes: with ``weights``, write Hugging Face-style shards of at most this many
            bytes of tensor data each (``model-00001-of-00003.safetensors`` ... plus
            ``model.safetensors.index.json``); one shard is written as ``model.safetensors``.

    Raises:
        UnsupportedConstructError: ``ep`` holds something the schema cannot express; the message
            names the node and the construct.
        OperatorChangeError: with ``target_torch``, an operator has no counterpart in that release
            (names each one and why).
        SerializeError: any other failure, e.g. the file cannot be written.
    """
    _warn_if_untested_torch()
    programs = _programs_to_save(ep)
    _check_weights_args(programs, f, weights, max_shard_bytes)
    extras = _encode_extra_files(extra_files)
    start = _position(f)
    with paused_gc():
        parts, payloads = {}, {}
        for name, one in programs.items():
            program, stored, own_payloads, debug = to_artifact_parts(one, debug_info=debug_info)
            if target_torch is not None:
                from serde.opsets import convert_for_target

                program = convert_for_target(program, str(torch.__version__), target_torch)
            if weights is not None:
                from .archive import safetensors as st

                # The safetensors files first, each atomically; the artifact that records their
                # digests last, so a crash in between leaves files an older artifact refuses by
                # digest, never a new artifact without its files.
                directory, fname = st.weights_path(weights, f)  # type: ignore[arg-type]
                planned = st.plan_external(stored, st.custom_object_constants(program))
                stored, own_payloads = st.write_external(directory, fname, stored, own_payloads, planned,
                                                         max_shard_bytes)
            parts[name] = (program, stored, debug)
            payloads.update(own_payloads)  # content-addressed: a tensor several programs hold is stored once
        write_artifacts(f, parts, payloads, torch_version=str(torch.__version__), extra_files=extras)
        # Freed while the collector is paused: each freed object lowers its allocation count, so
        # re-enabling it does not start a collection that walks the whole written program.
        del parts, payloads, program, stored, own_payloads, debug
    if start is not None:
        f.seek(start)  # type: ignore[union-attr]


def _check_weights_args(programs: dict[str | None, ExportedProgram], f: object, weights: object,
                        max_shard_bytes: object) -> None:
    for name, one in programs.items():
        if getattr(one, _STRUCTURE_ATTR, None) is not None:
            raise StructureOnlyError(
                f"save(): {'the program' if name is None else repr(name)} was loaded with weights=None and holds "
                "fake weights; attach them first (serde.attach_weights(ep, source)), or save the original")
    if weights is None:
        if max_shard_bytes is not None:
            raise UnsupportedConstructError("save(max_shard_bytes=...) shards safetensors weights; pass weights= too")
        return
    if list(programs) != [None]:
        raise UnsupportedConstructError("save(weights=...): an artifact of several programs keeps its weights "
                                        "inside (their FQNs would collide in one file); save each program alone")
    if not isinstance(f, (str, os.PathLike)):
        raise UnsupportedConstructError("save(weights=...) writes files next to the artifact: give the artifact "
                                        "as a path, not a file object")


def _programs_to_save(ep: object) -> dict[str | None, ExportedProgram]:
    """``{None: ep}`` for one program, ``{name: ep}`` for a dict of them (names checked)."""
    if isinstance(ep, ExportedProgram):
        return {None: ep}
    if isinstance(ep, Mapping):
        if not ep:
            raise SerializeError("save() was given an empty dict of programs; give at least one")
        out = {}
        for name, one in ep.items():
            archive.check_program_name(name, "save()")
            if not isinstance(one, ExportedProgram):
                raise SerializeError(f"save()[{name!r}] is a {type(one).__name__}, not a torch.export.ExportedProgram")
            out[name] = one
        return dict(sorted(out.items()))
    raise SerializeError(f"save() expects a torch.export.ExportedProgram or a dict of them, got {type(ep).__name__}")


def _position(f: object) -> int | None:
    """The current offset of a seekable file object; None for paths, bytes and unseekable streams."""
    if isinstance(f, (str, os.PathLike, bytes, bytearray, memoryview)):
        return None
    try:
        return f.tell() if f.seekable() else None  # type: ignore[attr-defined]
    except (AttributeError, OSError, ValueError):
        return None


def _check_not_at_end(f: object) -> None:
    start = _position(f)
    if start is None:
        return
    end = f.seek(0, os.SEEK_END)  # type: ignore[attr-defined]
    f.seek(start)  # type: ignore[attr-defined]
    if start >= end:
        raise archive.ArtifactIOError(
            f"load(): the file object is at its end (offset {start} of {end}), so there is nothing to read; "
            "seek to where the artifact starts (f.seek(0)) or reopen the file")


def _encode_extra_files(extra_files: Mapping[str, str] | None) -> dict[str, bytes]:
    if extra_files is None:
        return {}
    if not isinstance(extra_files, Mapping):
        raise UnsupportedConstructError(f"extra_files must be a mapping of name -> str, got {type(extra_files).__name__}")
    out = {}
    for name, text in extra_files.items():
        archive.extra_member(name, "save(extra_files)")  # checks the name
        if not isinstance(text, str):
            raise UnsupportedConstructError(
                f"save(extra_files)[{name!r}]: the content must be a str (as torch.export.save takes), "
                f"got {type(text).__name__}; decode bytes or serialize the object to text first")
        out[name] = text.encode("utf-8")
    return out


def to_artifact_parts(ep: ExportedProgram, *, debug_info: bool = False):
    """``ep`` -> (program Struct, weights Struct, payload members, debug info or None)."""
    # The canonicalizer is imported on first use: a process that only loads (most load a program
    # once) does not pay for importing it.
    from canonical.canonicalize import canonicalize

    program = serialize_program(ep)
    # Custom objects become uint8 tensors through their registered codec (never pickle).
    weights, payloads = serialize_weights(ep.state_dict, encode_constants(ep.constants), ep.example_inputs)
    program, debug = canonicalize(program, facts=op_facts, keep_debug=debug_info)
    # What load would refuse is never written (this also guards `pt2serde import` of torch archives).
    try:
        check_program(program)
        check_weight_names(weights)
    except UnsafeArtifactError as e:
        raise UnsupportedConstructError(f"this program could not be loaded back, so it is not saved: {e}") from None
    return program, weights, payloads, debug


MapLocation = str | torch.device | Mapping[str, str] | Callable[[torch.UntypedStorage, str], Any] | None


def load(f: PathOrFile | bytes, *, limits: archive.Limits = archive.DEFAULT_LIMITS,
         mmap: bool = False, extra_files: dict[str, Any] | None = None,
         map_location: MapLocation = None, propagate: bool = False,
         verify: bool = True, weights: Any = FROM_ARTIFACT) -> ExportedProgram | dict[str, ExportedProgram]:
    """Load an artifact written by :func:`save` (any supported schema version): the program, or the
    dict of programs it was saved from (each with its own tensors; none shares memory with another).

    ``extra_files``, as with ``torch.export.load``: every extra file the artifact holds is written
    into the dict (name -> text); names the artifact does not hold keep their value.

    With ``mmap=True`` a path is mapped copy-on-write instead of read: the weights share the page
    cache (no copy, less memory; loading large weights takes about the time of hashing them), and
    writing to a tensor copies just that page, never touching the file. Every byte is still
    verified. The file must then stay as it is while the program lives: truncating or rewriting it
    in place (``cp`` over it, ``torch.save`` to it) makes reading the weights fail with SIGBUS or see
    the new bytes. Replacing it by rename, as :func:`save` does, is safe.

    ``verify=False`` is for files you trust (you wrote them, on storage you control): the weights'
    bytes are not hashed, so with ``mmap=True`` nothing of them is read until a tensor is used.
    Every structural check still runs (the zip framing, the manifest, names, sizes, offsets, the
    digests of ``program.json`` and ``weights.json``, the schema, and every check of the program
    and of its tensors against their storages), so a truncated or malformed file is still refused;
    but a changed weight byte loads as a different weight. The default verifies every byte.

    From ``bytes``, a ``BytesIO`` or any other file object the file is copied once into private
    memory (as a path is read), so the source may be reused or changed afterwards.

    Devices: every weight comes back on the device it was saved from when that device exists
    here, else on the CPU with a warning (the graph's device metadata follows). ``map_location``
    moves the program afterwards, as with ``torch.load``: a device or string (everything there),
    a dict from saved device to device (``{"cuda:0": "cpu"}``; others stay), or a callable
    ``(storage, location) -> storage or device`` called once per device with a CPU storage. The
    move is torch's ``move_to_device_pass``, so weights, constants and the graph's device
    metadata and device arguments agree.

    ``propagate=True`` also runs every operator of the graph again on fake tensors, as tracing did,
    and refuses a file whose stored results (dtypes, shapes, number of outputs) differ from what the
    operators compute. The checks every load runs prove that the program's parts fit each other,
    not that each node stores what its operator computes: use this for files from sources you do
    not trust. It is slow: about 2.5x the load of a large static graph, and 7x to 8x that of a
    small program with symbolic sizes, whose meta kernels do their size arithmetic in sympy.

    Torch modes active in the calling thread (``FakeTensorMode``, a ``TorchDispatchMode`` or
    ``TorchFunctionMode``, inference mode, a dynamo tracing context) are set aside while loading:
    the program always holds real tensors, and is safe to load from several threads at once.

    ``weights`` (see docs/weights.md): by default the weights come from the artifact, and from the
    safetensors files it records next to it (``save(..., weights=...)``), every byte verified
    against the recorded size and digest first. ``weights=None`` loads the structure only: every
    weight, constant and example input is a FakeTensor (custom objects stay real), no payload is
    read or hashed; :func:`attach_weights` fills them in later. A path or a list of paths of
    safetensors files (or of a ``*.safetensors.index.json``) binds those instead: every tensor the
    artifact keeps in files (or, for an artifact that keeps them inside, every storage a whole
    state-dict or constant tensor covers) must be there once, with the same FQN, dtype and shape,
    and the files must hold nothing else.

    Raises:
        ForeignArtifactError: the file is not a pt2serde artifact (e.g. a torch.export.save archive;
            convert it once with ``pt2serde import``).
        MalformedArtifactError, UnsafeArtifactError: the file is damaged or hostile.
        SchemaVersionError, UpgradeError: the schema version is outside what this reader supports.
        UnknownOperatorError: an operator is not registered in this process;
            OperatorChangeError (a subclass): an operator differs between the torch that wrote the
            artifact and this one, and no operator upgrader covers it.
    """
    _warn_if_untested_torch()
    _check_not_at_end(f)
    with paused_gc():  # reading is torch-free; from_artifact sets the caller's torch modes aside
        # A member's xxh3 (its sha256 before schema 2.4) covers its bytes; the sha256 of members
        # that have an xxh3 and the payloads' zip CRC-32 are left to `pt2serde check`.
        structure = weights is None
        # weights=None: the payloads are neither read nor hashed (the file is mapped; the custom
        # objects' payloads are verified when first read).
        artifacts = read_artifacts(f, limits=limits, mmap=mmap, lazy=structure, payload_crc=False, sha256=False,
                                   verify=verify)
        if extra_files is not None:
            _fill_extra_files(next(iter(artifacts.values())), extra_files)
        if weights is not FROM_ARTIFACT and not structure and list(artifacts) != [None]:
            raise UnsupportedConstructError("load(weights=[files]): the artifact holds several programs; bind files "
                                            "to an artifact of one program")
        if structure:
            out = {name: _structure_only(a, map_location, limits) for name, a in artifacts.items()}
            out = out[None] if list(out) == [None] else out
        elif list(artifacts) == [None]:
            a = artifacts[None]
            bound = _bound_weights(a, f, weights, mmap=mmap, verify=verify)
            out = from_artifact(a, map_location, limits=limits, propagate=propagate, bound=bound)
        else:
            out, used = {}, set()
            for name, artifact in artifacts.items():
                # A payload an earlier program already wraps is copied: programs never share memory,
                # so one program's in-place buffer update is never seen by another.
                out[name] = from_artifact(artifact, map_location, limits=limits, copy_payloads=frozenset(used),
                                          propagate=propagate)
                used.update(payload_name(s.sha256) for s in artifact.weights.storages if s.sha256)
        # The decoded schema objects go while the collector still sleeps: its first collection
        # after the pause scans every object allocated during it, so it then sees only the program.
        del artifacts
    return out


def _fill_extra_files(artifact: Artifact, wanted: dict[str, Any]) -> None:
    """As ``torch.export.load``: every stored extra file is put into ``wanted`` (names asked for
    that the artifact does not have keep their value), so passing ``{}`` discovers them all."""
    for name, data in artifact.extra_files().items():
        try:
            wanted[name] = data.decode("utf-8")
        except UnicodeDecodeError:
            raise MalformedArtifactError(f"extra file {name!r} is not valid UTF-8 text; the file is damaged") from None


def from_artifact(a: Artifact, map_location: MapLocation = None, *, limits: Limits = DEFAULT_LIMITS,
                  copy_payloads: frozenset[str] = frozenset(), propagate: bool = False,
                  bound: st.BoundWeights | None = None) -> ExportedProgram:
    """Build the ExportedProgram described by a decoded artifact (outside any ambient torch mode;
    names and sizes checked against ``limits``; see :func:`load` for devices and ``propagate``).
    Payload members in ``copy_payloads`` are copied instead of wrapped. ``bound``: the weights to
    build instead of the artifact's, with the payloads they name that are not members (safetensors
    files, see :mod:`serde.archive.safetensors`)."""
    with outside_ambient_modes():
        return _build(a, map_location, limits, copy_payloads, propagate, bound)


def _build(a: Artifact, map_location: MapLocation, limits: Limits, copy_payloads: frozenset[str],
           propagate: bool, bound: st.BoundWeights | None = None) -> ExportedProgram:
    if a.weights.files and bound is None:
        from .archive import safetensors as st

        raise st.MissingWeightsFileError(
            "the artifact keeps weights in safetensors files; load it with serde.load(path), which reads them")
    weights = a.weights if bound is None else bound.weights
    outside = {} if bound is None else bound.payloads
    check_weight_names(weights, limits)
    place, missing = _placement(saved_devices(weights))

    def member(name: str) -> memoryview:
        view = outside[name] if name in outside else a.contents.member(name)
        return view.toreadonly() if name in copy_payloads else view  # read-only views are copied

    # Operators that changed between the writer's torch and this one, before anything resolves them.
    program = a.program
    release = torch_release(str(torch.__version__))
    if release is None or torch_release(program.torch_version) != release:  # else upgrade_operators has nothing to do
        from serde.opsets import upgrade_operators

        program = upgrade_operators(program, str(torch.__version__))
    state_dict, constants, example_inputs = deserialize_weights(weights, member, place=place)
    if a.debug is not None:
        from canonical.canonicalize import attach_debug

        program = attach_debug(program, a.debug)
    ep = deserialize_program(program, state_dict, constants, example_inputs, limits)
    if propagate:
        from serde.bridge.propagation import check_propagation  # imported on request: most loads never run it

        check_propagation(ep)
    if missing:
        ep = _move(ep, dict.fromkeys(missing, "cpu"))
    if map_location is None:
        return ep
    mapping = _resolve_map_location(map_location, _devices_of(ep))
    return _move(ep, mapping) if mapping else ep


def _available(device: str) -> bool:
    d = torch.device(device)
    if d.type in ("cpu", "meta"):
        return True
    if d.type == "cuda":
        return torch.cuda.is_available() and (d.index or 0) < torch.cuda.device_count()
    try:
        torch.empty(0, device=d)
    except (RuntimeError, AssertionError):
        return False
    return True


def _placement(saved: set[str]) -> tuple[dict[str, torch.device], list[str]]:
    """Where each saved device's storages load: there when it exists here, else the CPU (warned)."""
    import warnings

    place, missing = {}, []
    for device in sorted(saved):
        if _available(device):
            place[device] = torch.device(device)
        else:
            missing.append(device)
    if missing:
        warnings.warn(f"serde.load: weights were saved on {', '.join(missing)}, which this process does not "
                      "have; they are loaded on the CPU (pass map_location to choose)", stacklevel=4)
    return place, missing


def _devices_of(ep: ExportedProgram) -> set[str]:
    tensors = [*ep.state_dict.values(), *(v for v in ep.constants.values() if isinstance(v, torch.Tensor))]
    found = {str(t.device) for t in tensors}
    for node in ep.graph.nodes:
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            found.add(str(val.device))
    return found or {"cpu"}


def _resolve_map_location(map_location: MapLocation, devices: set[str]) -> dict[str, str]:
    """``map_location`` as {current device: new device}, leaving out devices that stay."""
    if map_location is None:
        return {}
    if isinstance(map_location, (str, torch.device)):
        target = str(torch.device(map_location))
        return {d: target for d in devices if d != target}
    if isinstance(map_location, Mapping):
        return {d: str(torch.device(t)) for d, t in map_location.items() if d in devices and str(torch.device(t)) != d}
    if callable(map_location):
        out = {}
        for d in sorted(devices):
            got = map_location(torch.UntypedStorage(0), d)
            target = str(got.device if isinstance(got, torch.UntypedStorage) else torch.device(got or d))
            if target != d:
                out[d] = target
        return out
    raise UnsupportedMapLocationError(
        f"map_location must be a device, a string, a dict or a callable (as torch.load takes), "
        f"got {type(map_location).__name__}")


class UnsupportedMapLocationError(SerializeError):
    """``map_location`` is not a device, a string, a dict or a callable."""


def _move(ep: ExportedProgram, mapping: dict[str, str]) -> ExportedProgram:
    from torch.export.passes import move_to_device_pass

    return move_to_device_pass(ep, mapping)


# ---------------------------------------------------------------- safetensors weights, structure only


class StructureOnlyError(SerializeError):
    """A structure-only program (``load(path, weights=None)``) was used where weights are needed."""


def _directory_of(f: object) -> str | None:
    return os.path.dirname(os.path.abspath(os.fspath(f))) if isinstance(f, (str, os.PathLike)) else None


def _bound_weights(a: Artifact, f: object, weights: Any, *, mmap: bool, verify: bool) -> st.BoundWeights | None:
    """The weights a load builds: the artifact's own (None when it keeps every storage inside),
    or the safetensors files ``weights`` names bound in their place."""
    if weights is FROM_ARTIFACT and not a.weights.files:
        return None
    from .archive import safetensors as st

    if weights is FROM_ARTIFACT:
        return st.external_payloads(a.weights, _directory_of(f), mmap=mmap, verify=verify)
    plan = st.bind_plan(a.weights, st.custom_object_constants(a.program))
    return st.bind_payloads(a.weights, st.resolve_sources(weights), plan, mmap=mmap)


def _kept_storages(a: Artifact) -> set[int]:
    """Storages a structure-only load still reads: the custom objects' (their codecs need bytes)."""
    from .archive import safetensors as st

    names = st.custom_object_constants(a.program)
    return {a.weights.constants[n].storage for n in names if n in a.weights.constants}


def _structure_only(a: Artifact, map_location: MapLocation, limits: Limits) -> ExportedProgram:
    from .archive import safetensors as st

    w = st.structure_only(a.weights, _kept_storages(a))
    ep = from_artifact(a, map_location, limits=limits, bound=st.BoundWeights(w, {}))
    setattr(ep, _STRUCTURE_ATTR, a)
    return ep


def check_artifact(a: Artifact, *, limits: Limits = DEFAULT_LIMITS) -> None:
    """Run on a decoded artifact every check :func:`load` runs on its program, reading no weight
    payload (a structure-only load, ``load(f, weights=None)``, whose program is dropped).

    For readers of artifacts that build something other than an ExportedProgram (the native
    emitter): a file that :func:`load` refuses must be refused by them too, for the same reason.
    """
    _structure_only(a, None, limits)


def attach_weights(ep: ExportedProgram, source: Any, *, mmap: bool = False,
                   limits: Limits = DEFAULT_LIMITS) -> ExportedProgram:
    """Give a structure-only program (``load(path, weights=None)``) its weights, in place, and
    return it: afterwards it is what a full load gives.

    ``source`` is an artifact holding the same program (its path; its own weights, and the
    safetensors files it records, are verified as ``load`` verifies them), or safetensors files
    (a path, a list of paths, or a ``*.safetensors.index.json``) bound as ``load(path,
    weights=files)`` binds them, the rest of the weights coming from the artifact the program
    was loaded from.

    Raises:
        StructureOnlyError: ``ep`` was not loaded with ``weights=None`` (or has its weights).
        WeightsMismatchError: the source holds another program, or files without its tensors.
        SerializeError subclasses as :func:`load` raises them for damaged sources.
    """
    origin = getattr(ep, _STRUCTURE_ATTR, None) if isinstance(ep, ExportedProgram) else None
    if origin is None:
        raise StructureOnlyError("attach_weights(): the program was not loaded with serde.load(path, weights=None), "
                                 "or already has its weights")
    from .archive import safetensors as st

    with paused_gc():
        if _is_weights_files(source):
            a = origin
            bound = st.bind_payloads(a.weights, st.resolve_sources(source),
                                     st.bind_plan(a.weights, st.custom_object_constants(a.program)), mmap=mmap)
        else:
            found = read_artifacts(source, limits=limits, mmap=mmap, payload_crc=False, sha256=False)
            a = found.get(origin.name) if origin.name in found else None
            if a is None or a.program != origin.program:
                raise st.WeightsMismatchError(
                    f"attach_weights(): {source!r} holds another program than the one loaded from "
                    "the structure-only artifact; attach the weights of the same program")
            bound = _bound_weights(a, source, FROM_ARTIFACT, mmap=mmap, verify=True)
        full = from_artifact(a, None, limits=limits, bound=bound)
    # The full program's tables, with ties and Parameters exactly as a load makes them.
    ep._state_dict = full._state_dict  # type: ignore[attr-defined]
    ep._constants = full._constants  # type: ignore[attr-defined]
    ep._example_inputs = full._example_inputs  # type: ignore[attr-defined]
    delattr(ep, _STRUCTURE_ATTR)
    return ep


def _is_weights_files(source: Any) -> bool:
    if isinstance(source, (str, os.PathLike)):
        return os.fspath(source).endswith((".safetensors", ".json"))
    return isinstance(source, (list, tuple))
