"""Bad storage index: a tensor points at a storage that does not exist."""

from __future__ import annotations

from serde.core.errors import StorageIndexError
from tests.serde.attacks._attack_kit import Base, rewrite_weights

ERROR = StorageIndexError
MATCH = r"weights\.state_dict\['scale'\]: storage index 99 is out of range \(there are \d+ storages\)"


def build(base: Base) -> bytes:
    def point(w: dict) -> None:
        w["state_dict"]["scale"]["storage"] = 99
    return rewrite_weights(base, point)
