"""How weights.json names the bytes of a storage: its sha256, and the archive member that holds them.

schema.thrift states the rule (``Storage.sha256``: the member name is ``data/<sha256>``), so the schema
core owns it: the weight checks here use it without the archive, and the archive writes members by it.
"""

from __future__ import annotations

import re

__all__ = ["SHA256_RE", "payload_name"]

SHA256_RE = re.compile(r"[0-9a-f]{64}")  # a sha256 as the format writes it: 64 lowercase hex digits


def payload_name(sha256_hex: str) -> str:
    """Member name of a tensor payload whose bytes hash to ``sha256_hex``."""
    return f"data/{sha256_hex}"
