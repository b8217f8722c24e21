"""``pt2serde weights``: write the weights of an artifact as safetensors files (Hugging Face layout)."""

from __future__ import annotations

import argparse
import os
import sys

HELP = "write an artifact's state dict and constants as safetensors files (plus an index when sharded)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("input", help="artifact (*.pt2s)")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="directory to write the files into "
                   "(created if missing)")
    p.add_argument("--name", default="model.safetensors",
                   help="file name (default model.safetensors; shards are named <stem>-00001-of-0000N.safetensors "
                        "with <stem>.safetensors.index.json)")
    p.add_argument("--max-shard-bytes", type=int, default=None, metavar="N",
                   help="at most N bytes of tensor data per file (a bigger tensor gets a file of its own)")


def run(args: argparse.Namespace) -> int:
    # Torch-free: the bytes are the artifact's payloads (or the files it records), verified on reading.
    from serde.archive import payload_name
    from serde.archive import safetensors as st
    from serde.archive.artifact import read_artifact
    from serde.errors import UnsupportedConstructError

    a = read_artifact(args.input, payload_crc=False, sha256=False)
    if not st.FILE_NAME_RE.fullmatch(args.name):
        raise UnsupportedConstructError(f"--name {args.name!r}: give '<name>.safetensors' of letters, digits, "
                                        "'_', '-' and '.'")
    payloads = a.payloads()
    w = a.weights
    if w.files:
        bound = st.external_payloads(w, os.path.dirname(os.path.abspath(args.input)))
        # verified against the recorded digests: the bytes are those the storages' sha256 name
        for i, s in enumerate(w.storages):
            if s.external is not None:
                payloads[payload_name(s.sha256)] = bound.payloads[payload_name(bound.weights.storages[i].sha256)]
    plan = st.plan_external(w, st.custom_object_constants(a.program))
    os.makedirs(args.output, exist_ok=True)
    out, _ = st.write_external(args.output, args.name, w, payloads, plan, args.max_shard_bytes)
    for f in out.files or []:
        print(f"{os.path.join(args.output, f.name)}: {f.size} bytes, sha256 {f.sha256}")
    inside = [i for i, s in enumerate(w.storages) if s.sha256 and i not in {p.storage for p in plan}]
    if inside:
        print(f"note: {len(inside)} storages are not written (no state-dict or constant tensor covers one whole, "
              "a dtype safetensors lacks, a custom object, or example inputs only)", file=sys.stderr)
    return 0
