"""Case: a Llama-architecture model of about 1B parameters in bf16 (2.2 GB of weights), at real size.

    python benchmarks/bench_large.py --case llama_1b                 # full size, median of 3
    python benchmarks/bench_large.py --case llama_1b --layers 4      # fewer decoder layers
    python benchmarks/bench_large.py --case llama_1b --smoke         # a tiny Llama, 1 repeat

The model is transformers' ``LlamaForCausalLM`` from a ``LlamaConfig`` (vocab 32,000, hidden
2048, MLP 8192, 16 layers, 32 heads, 8 KV heads, untied head: 1.10B parameters), built under
``torch.device("meta")``, materialized with ``to_empty`` and filled by copying slices of one random
buffer (each tensor then gets a distinct first element, so that no two tensors have the same bytes:
the artifact stores equal payloads once, and a constant fill would flatter it). Nothing is
downloaded. It is exported with 16 token ids and returns the logits.

Every operation runs in a fresh process (``--child``), one process per side and repeat, and is
timed twice there: the first call of the process (**cold**: ``import torch`` is paid before the
clock starts; pt2serde's import, which its first ``serde.save``/``serde.load`` does, and every lazy
import of either side are inside it; pt2serde's modules are compiled to bytecode beforehand, as an
installed package's are) and then the same call again (**warm**). Reported, as ratios of
medians over the repeats:

* saves: ``serde.save`` to a path (durable: temporary file, fsync, rename, directory fsync), to an
  open file object (no fsync), ``torch.export.save`` to a path, safetensors ``save_file`` of the
  same state dict (neither fsyncs). Each save child gets the program from ``torch.export.load``
  first (untimed; weights in private memory): exporting 1B parameters in every child would take
  most of the run. That imports torch's serialization code before torch's timed save, never ours.
* loads, all files in the page cache: ``serde.load``, ``serde.load(mmap=True)``,
  ``serde.load(mmap=True, verify=False)``, ``torch.export.load``, safetensors ``load_file``. Each
  load child also reports the peak resident memory of its first load (VmHWM reset just before it)
  minus the resident memory before it, as a multiple of the weights' bytes.
* the **floor** of a verified load: reading every byte of the artifact once into fresh memory and
  computing the digest a load verifies (XXH3-128) on every core (``bench_weights.read_and_digest``), plus
  building the graph: ``bench_save_load.build_floor`` of the program (torch building the same
  ExportedProgram from its own graph, no file), measured in a fresh process the same way.
* the **graph's save**: ``serde.save`` into a file object of the same architecture at tiny widths
  (the same layers, heads and nodes; kilobytes of weights), so that "save_file plus the graph's
  save" has both terms measured.

Prints one JSON line. Besides the ratios it carries the median seconds of each side
(``seconds``), for the reader only: no bar or assertion uses them.
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _harness import graph_nodes, main_guard, proc_status, run_child

HERE = Path(__file__).resolve().parent

FULL = dict(vocab_size=32000, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
            num_attention_heads=32, num_key_value_heads=8)
SMOKE = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2)
TOKENS = 16

SAVE_SIDES = ("serde_path", "serde_file", "torch", "safetensors")
LOAD_SIDES = ("serde", "serde_mmap", "serde_trusted", "torch", "safetensors")


def _config(smoke: bool, layers: int | None) -> dict:
    cfg = dict(SMOKE if smoke else FULL)
    if layers:
        cfg["num_hidden_layers"] = layers
    return cfg


def _twin(cfg: dict) -> dict:
    """The same graph at tiny widths: same layers and heads, so the same nodes; kilobytes of weights."""
    heads = cfg["num_attention_heads"]
    return {**cfg, "vocab_size": 128, "hidden_size": 2 * heads, "intermediate_size": 64}


def _transformers():
    # transformers imports torchvision for its image utilities; the torchvision wheel of this
    # index does not load into the CPU torch, and the corpus module knows how to get around that.
    import tests.zoo_models  # noqa: F401
    import transformers

    return transformers


def export_llama(cfg: dict):
    """(ExportedProgram returning the logits, example args) of a bf16 Llama built from ``cfg``."""
    import torch

    transformers = _transformers()
    config = transformers.LlamaConfig(**cfg, max_position_embeddings=2048, tie_word_embeddings=False,
                                      use_cache=False)

    class Logits(torch.nn.Module):
        # the logits alone: no transformers output class in the program's signature, so loading
        # it needs no transformers import
        def __init__(self) -> None:
            super().__init__()
            self.m = transformers.LlamaForCausalLM(config)

        def forward(self, ids):
            return self.m(input_ids=ids).logits

    with torch.device("meta"):
        model = Logits().to(torch.bfloat16)
    model = model.to_empty(device="cpu")
    # the rotary frequencies are a computed buffer: computed again for real, as from_pretrained does
    model.m.model.rotary_emb = type(model.m.model.rotary_emb)(config=config).to(torch.bfloat16)
    _fill(model)
    model.eval()
    torch.manual_seed(0)
    args = (torch.randint(0, cfg["vocab_size"], (1, TOKENS)),)
    with torch.no_grad():
        ep = torch.export.export(model, args, strict=False)
    return ep, args


def _fill(model) -> None:
    import torch

    params = list(model.parameters())
    biggest = max(p.numel() for p in params)
    g = torch.Generator().manual_seed(0)
    # one random buffer, sliced per tensor: far cheaper than a random fill of every element
    source = (torch.rand(biggest, generator=g, dtype=torch.float32) * 0.04 - 0.02).to(torch.bfloat16)
    with torch.no_grad():
        for i, p in enumerate(params):
            flat = p.view(-1)
            flat.copy_(source[: flat.numel()])
            flat[0] = (i + 1) * 1e-3  # distinct bytes per tensor
        for i, (name, p) in enumerate(model.named_parameters()):
            if name.endswith("norm.weight"):  # RMSNorm scales near 1, as trained ones are
                p.fill_(1.0)
                p.view(-1)[0] = 1.0 + (i + 1) * 1e-3


def _weights(state_dict) -> dict:
    """The weights as safetensors takes them: contiguous tensors that share no memory."""
    return {k: v.contiguous() for k, v in state_dict.items()}


# ---------------------------------------------------------------- children




def _reset_peak() -> int:
    with open("/proc/self/clear_refs", "w") as f:  # VmHWM back to the current RSS
        f.write("5")
    return proc_status("VmRSS")


def _timed(fn) -> float:
    gc.collect()
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def child_save(side: str, cfg: dict, d: str, program: str) -> dict:
    import torch

    import serde

    if side == "graph":
        ep, _ = export_llama(_twin(cfg))
    else:
        # The program as torch.export.load gives it back (weights in private memory), for every
        # side: building and exporting 1B parameters again in each child would take most of the
        # run. It leaves torch's own serialization code imported before torch's timed save, so
        # torch's cold save is, if anything, flattered.
        ep = torch.export.load(program)
    weights = _weights(ep.state_dict) if side == "safetensors" else None
    if side == "safetensors":
        from safetensors.torch import save_file
    target = os.path.join(d, f"save-{side}-{os.getpid()}")

    def save() -> None:
        if side == "serde_path":
            serde.save(ep, target)
        elif side in ("serde_file", "graph"):
            with open(target, "wb") as f:
                serde.save(ep, f)
        elif side == "torch":
            torch.export.save(ep, target)
        else:
            save_file(weights, target)

    cold = _timed(save)
    os.unlink(target)
    warm = _timed(save)
    os.unlink(target)
    return {"cold": cold, "warm": warm, **graph_nodes(ep)}


def child_load(side: str, paths: dict[str, str], tokens_file: str | None) -> dict:
    import torch

    import serde

    if side == "safetensors":
        from safetensors.torch import load_file

    def load():
        if side == "serde":
            return serde.load(paths["serde"])
        if side == "serde_mmap":
            return serde.load(paths["serde"], mmap=True)
        if side == "serde_trusted":
            return serde.load(paths["serde"], mmap=True, verify=False)
        if side == "torch":
            return torch.export.load(paths["torch"])
        return load_file(paths["safetensors"])

    gc.collect()
    before = _reset_peak()
    t0 = time.perf_counter()
    got = load()
    cold = time.perf_counter() - t0
    peak = proc_status("VmHWM") - before
    out: dict = {"cold": cold, "peak_bytes": peak}
    if tokens_file and side != "safetensors":
        # the loaded program must compute what the exported one did (checked by the parent)
        ids = torch.load(tokens_file, weights_only=True)
        with torch.no_grad():
            out["logits_sha256"] = _digest(got.module()(ids))
    del got
    out["warm"] = _timed(load)
    return out


def child_floor(paths: dict[str, str]) -> dict:
    import serde
    from bench_save_load import build_floor
    from bench_weights import read_and_digest

    digest_cold = read_and_digest(paths["serde"], "xxh3")
    digest_warm = read_and_digest(paths["serde"], "xxh3")
    ep = serde.load(paths["serde"], mmap=True, verify=False)  # the program to build again (untimed)
    build_cold = _timed(lambda: build_floor(ep))
    build_warm = _timed(lambda: build_floor(ep))
    return {"digest_cold": digest_cold, "digest_warm": digest_warm, "build_cold": build_cold,
            "build_warm": build_warm}


def _digest(t) -> str:
    import hashlib

    return hashlib.sha256(t.contiguous().view(-1).view(__import__("torch").uint8).numpy().tobytes()).hexdigest()




# ---------------------------------------------------------------- parent


def _med(xs: list[float]) -> float:
    return statistics.median(xs)


def _r(a: float, b: float) -> float:
    return round(a / b, 3)


def run(smoke: bool, layers: int | None, repeats: int, workdir: str | None) -> dict:
    import torch
    from safetensors.torch import save_file

    import serde

    cfg = _config(smoke, layers)
    base = workdir or tempfile.gettempdir()
    d = tempfile.mkdtemp(prefix="pt2serde-bench-large-", dir=base)
    try:
        ep, args = export_llama(cfg)
        nodes = graph_nodes(ep)
        weights = sum(t.untyped_storage().nbytes() for t in ep.state_dict.values())
        params = sum(t.numel() for t in ep.state_dict.values())
        paths = {"serde": os.path.join(d, "model.pt2s"), "torch": os.path.join(d, "model.pt2"),
                 "safetensors": os.path.join(d, "model.safetensors")}
        serde.save(ep, paths["serde"])
        torch.export.save(ep, paths["torch"])
        save_file(_weights(ep.state_dict), paths["safetensors"])
        tokens = os.path.join(d, "tokens.pt")
        torch.save(args[0], tokens)
        with torch.no_grad():
            expected = _digest(ep.module()(*args))
        sizes = {k: os.path.getsize(p) for k, p in paths.items()}
        del ep, args
        gc.collect()
        cfg_arg = json.dumps(cfg)
        path_arg = json.dumps(paths)

        saves: dict[str, dict[str, list[float]]] = {s: {"cold": [], "warm": []} for s in (*SAVE_SIDES, "graph")}
        loads: dict[str, dict[str, list[float]]] = {s: {"cold": [], "warm": []} for s in LOAD_SIDES}
        peaks: dict[str, list[int]] = {s: [] for s in LOAD_SIDES}
        floors: dict[str, list[float]] = {k: [] for k in ("digest_cold", "digest_warm", "build_cold", "build_warm")}
        graph_nodes_twin = None
        for rep in range(repeats):
            # sides alternate within a repeat, so drift in the machine's load reaches all of them
            for side in (*SAVE_SIDES, "graph"):
                rec = run_child(__file__, ["--child", "save", "--side", side, "--config", cfg_arg, "--dir", d, "--paths", path_arg])
                saves[side]["cold"].append(rec["cold"])
                saves[side]["warm"].append(rec["warm"])
                if side == "graph":
                    graph_nodes_twin = rec["nodes"]
            for side in LOAD_SIDES:
                argv = ["--child", "load", "--side", side, "--paths", path_arg]
                rec = run_child(__file__, [*argv, "--tokens", tokens] if rep == 0 else argv)
                if "logits_sha256" in rec and rec["logits_sha256"] != expected:
                    raise RuntimeError(f"{side}: the loaded program computes other logits than the exported one")
                loads[side]["cold"].append(rec["cold"])
                loads[side]["warm"].append(rec["warm"])
                peaks[side].append(rec["peak_bytes"])
            rec = run_child(__file__, ["--child", "floor", "--paths", path_arg])
            for k in floors:
                floors[k].append(rec[k])
    finally:
        shutil.rmtree(d, ignore_errors=True)

    out: dict = {"bench": "large", **nodes, "graph_twin_nodes": graph_nodes_twin, "params": params,
                 "weights_bytes": weights, "sizes": sizes, "repeats": repeats,
                 "config": cfg, "outputs_match": True}
    for when in ("cold", "warm"):
        sv = {s: _med(v[when]) for s, v in saves.items()}
        ld = {s: _med(v[when]) for s, v in loads.items()}
        digest, build = _med(floors[f"digest_{when}"]), _med(floors[f"build_{when}"])
        floor = digest + build
        out[when] = {
            # speedups: the other side's time / ours (> 1: pt2serde faster)
            "save_path_vs_torch": _r(sv["torch"], sv["serde_path"]),
            "save_file_vs_torch": _r(sv["torch"], sv["serde_file"]),
            # fractions: ours / the bar (<= 1: within it)
            "save_file_vs_safetensors": _r(sv["serde_file"], sv["safetensors"]),
            "save_file_vs_safetensors_plus_graph": _r(sv["serde_file"], sv["safetensors"] + sv["graph"]),
            "save_path_vs_safetensors": _r(sv["serde_path"], sv["safetensors"]),
            "load_vs_torch": _r(ld["torch"], ld["serde"]),
            "load_mmap_vs_torch": _r(ld["torch"], ld["serde_mmap"]),
            "load_trusted_vs_torch": _r(ld["torch"], ld["serde_trusted"]),
            "load_vs_floor": _r(ld["serde"], floor),
            "load_mmap_vs_floor": _r(ld["serde_mmap"], floor),
            "load_trusted_vs_load_file_plus_graph": _r(ld["serde_trusted"], ld["safetensors"] + build),
            "load_vs_safetensors": _r(ld["serde"], ld["safetensors"]),
            "floor_digest_share": _r(digest, floor),
            "seconds": {**{f"save_{s}": round(v, 3) for s, v in sv.items()},
                        **{f"load_{s}": round(v, 3) for s, v in ld.items()},
                        "floor_read_digest": round(digest, 3), "floor_build_graph": round(build, 3)},
        }
    out["peak_vs_weights"] = {s: round(max(v) / weights, 3) for s, v in peaks.items()}
    return out


def main() -> int:
    import argparse

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", required=True)
    p.add_argument("--repeats", type=int, default=3, help="fresh processes per side (default 3)")
    p.add_argument("--smoke", action="store_true", help="a tiny Llama (seconds, not minutes)")
    p.add_argument("--layers", type=int, help="decoder layers (default 16)")
    p.add_argument("--dir", help="where the artifacts go (default: the temp dir); about 7 GB at full size")
    p.add_argument("--child", choices=("save", "load", "floor"), help=argparse.SUPPRESS)
    p.add_argument("--side", help=argparse.SUPPRESS)
    p.add_argument("--config", help=argparse.SUPPRESS)
    p.add_argument("--paths", help=argparse.SUPPRESS)
    p.add_argument("--tokens", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child == "save":
        print(json.dumps(child_save(a.side, json.loads(a.config), a.dir, json.loads(a.paths)["torch"])))
        return 0
    if a.child == "load":
        print(json.dumps(child_load(a.side, json.loads(a.paths), a.tokens)))
        return 0
    if a.child == "floor":
        print(json.dumps(child_floor(json.loads(a.paths))))
        return 0
    return main_guard(a.case, lambda: run(a.smoke, a.layers, a.repeats, a.dir))


if __name__ == "__main__":
    sys.exit(main())
