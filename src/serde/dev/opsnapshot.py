"""``python -m serde.dev.opsnapshot [OUT]``: write the operator schema snapshot of the running torch.

The snapshot is what :mod:`serde.opsets` reads to upgrade an artifact's operators from the torch
that wrote it to the torch that loads it. Run it in a fresh process (only torch imported, so no
custom op library adds its operators) and commit the file as
``src/serde/opsets/torch-<major>.<minor>.json``. Writing it twice gives the same bytes.

Left out: the ``_native`` namespace, whose operator names carry a registration counter
(``_foreach_mm_native_0``) that differs between processes; pt2serde never writes them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

__all__ = ["snapshot_text", "main"]

# Namespaces whose names are not stable between processes of the same torch.
_SKIPPED_NAMESPACES = ("_native::",)


def snapshot_text() -> str:
    """The snapshot of the running torch, as the committed file holds it."""
    import torch

    # Taken before anything else is imported: the operators `import torch` registers.
    schemas = sorted({str(s) for s in torch._C._jit_get_all_schemas()
                      if not str(s).startswith(_SKIPPED_NAMESPACES)})

    import torch._higher_order_ops  # noqa: F401  (registers the higher-order ops)

    from serde.bridge.operators import HIGHER_ORDER_OPS

    hops = sorted(n for n in HIGHER_ORDER_OPS if isinstance(torch._ops._higher_order_ops.get(n),
                                                             torch._ops.HigherOrderOperator))
    cuda = torch.version.cuda
    doc = {
        "torch": str(torch.__version__).split("+")[0],
        "build": f"cu{cuda.replace('.', '')}" if cuda else "cpu",
        "written_by": "python -m serde.dev.opsnapshot",
        "higher_order_ops": hops,
        "schemas": schemas,
    }
    # One schema a line, so a review of a new snapshot (or a diff of two) reads operator by operator.
    return json.dumps(doc, indent=1, ensure_ascii=False, sort_keys=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m serde.dev.opsnapshot", description=__doc__.split("\n\n")[0])
    p.add_argument("out", nargs="?", help="the file to write (default: stdout)")
    args = p.parse_args(argv)
    text = snapshot_text()
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
