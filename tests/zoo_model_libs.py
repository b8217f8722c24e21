"""The third-party libraries of the real-model corpus (``tests/zoo_models.py``), imported as that
corpus needs them and nothing of pt2serde.

A process that loads a corpus program needs these imports (transformers registers the pytree
classes of its caches), and the benchmarks' cold loads start from a process that has them and has
imported nothing of pt2serde yet; ``tests/zoo_models.py`` builds its models on them.

timm imports torchvision, whose C extension on this package index is a CUDA build that does not
load into the CPU torch; torchvision then registers fake kernels for two of its C ops
unconditionally and fails with ``operator torchvision::nms does not exist``.
:func:`_define_torchvision_ops` defines just those two schemas first when the extension cannot
load, so the import goes through; no model of the corpus calls them.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import torch

__all__ = ["TorchExportableModuleWithStaticCache", "timm", "transformers"]

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")


def _define_torchvision_ops() -> None:
    spec = importlib.util.find_spec("torchvision")
    if spec is None or spec.origin is None or "torchvision" in dir(torch.ops) and hasattr(
            torch.ops.torchvision, "nms"):
        return
    for lib in Path(spec.origin).parent.glob("_C*.so"):
        try:
            torch.ops.load_library(str(lib))
            return  # a matching build: its own registrations stand
        except OSError:
            break
    lib = torch.library.Library("torchvision", "DEF")  # noqa: TOR901 (kept alive below)
    lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _TORCHVISION_LIB.append(lib)


_TORCHVISION_LIB: list = []  # a Library deregisters its definitions when collected
_define_torchvision_ops()

import timm  # noqa: E402
import transformers  # noqa: E402
from transformers.integrations.executorch import (  # noqa: E402
    TorchExportableModuleWithStaticCache,
    register_dynamic_cache_export_support,
)

transformers.logging.set_verbosity_error()
register_dynamic_cache_export_support()
