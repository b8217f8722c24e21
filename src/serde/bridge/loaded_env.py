"""The ShapeEnv of a loaded program: torch's own, minus two costs a first load in a process pays
for nothing.

A fresh process that loads a program imports whatever torch imports on the way, and two of
torch's imports are most of a small program's first load while the load itself never needs them:

* **Where a range or guard came from.** Every range the loader gives a symbol goes through the
  ShapeEnv's own update, which records the user's frame that set it: torch walks the stack for the
  first frame outside its "uninteresting files", a set it builds once per process by importing
  torch.export's tracer, AOTAutograd, Inductor's code cache and the rest of its compile stack (about
  400 modules). While a program is being loaded the answer is known without the walk: the file set
  it. ``loading`` names that location; once the load is done (``done_loading``) the env records
  user frames again, as torch's does, for the guards a later derivation records.
* **The sources of input symbols.** Recording the stored guards gives every input symbol the source
  tracing gave it (``L['x'].size()[0]``), an object of ``torch._dynamo.source``, whose import runs
  dynamo's package (about 340 modules, half a first load of a dynamic program). Nothing in a load
  reads them: they are what torch prints a derived program's guards over. So they are recorded as
  keys (``defer_source``) and made into torch's objects the first time anything reads
  ``var_to_sources``, with the same entries in the same order a direct recording gives, and torch's
  code that reads them is the code that imports dynamo anyway.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch._guards import SLoc
from torch.fx.experimental.symbolic_shapes import ShapeEnv

__all__ = ["LoadedShapeEnv", "LOADING_LOC"]

# Where whatever the loader records says it came from while the program is being loaded.
LOADING_LOC = "pt2serde: loaded from the artifact"


class LoadedShapeEnv(ShapeEnv):
    """A ShapeEnv that names the artifact as the origin of what a load records, and builds the
    input symbols' torch sources on first read (see the module docstring)."""

    def __init__(self, **kwargs: Any) -> None:
        self._pt2serde_loading = True
        self._pt2serde_pending: dict[Any, Callable[[], Any]] = {}
        super().__init__(**kwargs)

    # ShapeEnv.__init__ assigns var_to_sources; the property keeps the dict in _pt2serde_sources.
    @property
    def var_to_sources(self) -> dict:  # type: ignore[override]
        pending = self.__dict__.get("_pt2serde_pending")
        sources = self.__dict__["_pt2serde_sources"]
        if pending:
            self.__dict__["_pt2serde_pending"] = {}
            for sym, make in pending.items():
                sources.setdefault(sym, [make()])
        return sources

    @var_to_sources.setter
    def var_to_sources(self, value: dict) -> None:
        self.__dict__["_pt2serde_sources"] = value

    def has_source(self, sym: Any) -> bool:
        """Whether ``sym`` has a source, recorded or deferred, without building any."""
        return sym in self._pt2serde_pending or sym in self.__dict__["_pt2serde_sources"]

    def defer_source(self, sym: Any, make: Callable[[], Any]) -> None:
        """Give ``sym`` the one source ``make()`` builds, when ``var_to_sources`` is first read."""
        self._pt2serde_pending[sym] = make

    def done_loading(self) -> None:
        """From now on, record the user's frame as the origin of ranges and guards, as torch does."""
        self._pt2serde_loading = False

    def _get_stack_summary(self, is_debug: bool = False, framework_loc: str | None = None) -> tuple[SLoc, str]:
        if framework_loc is None and self._pt2serde_loading:
            framework_loc = LOADING_LOC
        return super()._get_stack_summary(is_debug, framework_loc)
