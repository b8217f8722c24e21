"""Huge subclass: a subclass's outer sizes claim 2**80 elements, so a reader that allocates the outer tensor dies."""

from __future__ import annotations

from serde.core.errors import InvalidTensorViewError
from tests.serde.attacks._attack_kit import Base, rewrite_weights

ERROR = InvalidTensorViewError
MATCH = r"weights\.state_dict\['scale'\]: \d+ elements do not fit in int64"


def build(base: Base) -> bytes:
    def wrap(w: dict) -> None:
        inner = w["state_dict"]["scale"]
        w["state_dict"]["scale"] = {**inner, "sizes": [2**40, 2**40], "strides": [2**40, 1], "storage": -1,
                                    "subclass": {"class_name": "this.Zen", "inner": {"a": inner},
                                                 "context": {"as_none": True}}}
    return rewrite_weights(base, wrap)
