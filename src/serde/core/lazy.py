"""Names a package hands on but imports on first use (PEP 562 module ``__getattr__``).

``import serde`` and ``import native`` must not import torch, yet ``serde.save`` and
``native.emit_artifact`` are attributes of the package: their faces list each such name with the submodule
that defines it, and this module turns that list into the package's ``__getattr__`` and ``__dir__``.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, homes: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``, whose names in ``homes`` come from the submodule
    (relative to ``package``) named beside each. A name's module is imported the first time the name
    is read; the value then becomes a plain attribute of the package, so later reads cost nothing."""

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{home}", package), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(homes))

    return __getattr__, __dir__
