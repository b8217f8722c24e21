"""Schema version. Keep in step with the header of ``schema.thrift``.

Version history (date, what changed, compatibility):
  1.0  2026-11-22  First release.
  2.0  2026-11-22  Symbolic expressions are structured trees (schema.Expr) instead of
                   sympy-printed strings, and range_constraints is a list. Breaking:
                   upgraders/v1_to_v2.py reads 1.x artifacts (frozen in fixtures/v1.0/).
  2.1  2026-11-22  debug.json described in the schema (DebugInfo, NodeDebug). Compatible.
  2.2  2026-11-22  Argument.as_tuple, a tuple of mixed kinds (flex_attention). Compatible.
  2.3  2026-11-23  ExportedProgram.guards (InputGuards, GuardSource, GuardKey, GuardProperty):
                   torch.export's input guards as Expr trees over input sources, never as
                   Python text. Weights: tensor subclasses (StoredTensor.subclass, TensorSubclass,
                   ContextValue), tensors saved without data (FakeTensors, meta tensors: empty
                   Storage.sha256) and every storage's device (Storage.device). Compatible; 2.2
                   readers refuse data-less and subclass tensors rather than misread them.
"""

from __future__ import annotations

__all__ = ["SCHEMA_VERSION", "MIN_SUPPORTED", "FORMAT_VERSION"]

SCHEMA_VERSION: tuple[int, int] = (2, 3)
# Oldest schema version this reader still loads (through upgraders/).
MIN_SUPPORTED: tuple[int, int] = (1, 0)
# Version of the archive layout (zip members, manifest); independent of the schema.
# 2 adds extra/<name> members (written as 1 when there are none); 3 holds several programs under
# programs/<name>/ (written only for those).
FORMAT_VERSION: int = 3
