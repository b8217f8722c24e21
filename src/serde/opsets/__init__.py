"""Operators across torch releases: a schema snapshot per supported release, the checker that
classifies what changed between two, and the operator upgraders chained from the torch that
wrote an artifact to the torch that reads it. Torch-free."""

from .changes import KINDS, Change, diff_snapshots
from .schemas import OpSchema, Snapshot, UnknownReleaseError, load_snapshot, release_of, snapshot_releases
from .upgrade import (
    STEPS,
    Conversion,
    Handling,
    convert,
    convert_for_target,
    step_handling,
    upgrade_operators,
)

__all__ = [
    "KINDS", "Change", "diff_snapshots",
    "OpSchema", "Snapshot", "UnknownReleaseError", "load_snapshot", "release_of", "snapshot_releases",
    "STEPS", "Conversion", "Handling", "convert", "convert_for_target", "step_handling", "upgrade_operators",
]
