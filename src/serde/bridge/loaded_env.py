"""The ShapeEnv of a loaded program: torch's own, minus a cost a first load in a process pays for
nothing.

Every range the loader gives a symbol goes through the ShapeEnv's own update, which records where
it came from: the user's frame that set it. torch finds that frame by walking the stack for the
first frame outside its "uninteresting files", a set it builds once per process by importing
torch.export's tracer, AOTAutograd, Inductor's code cache and the rest of its compile stack (about
400 modules, a fifth of a small program's first load). While a program is being loaded the answer
is known without the walk: the file set it. Once the load is done (``done_loading``) the env is
torch's ShapeEnv again, and records user frames for whatever a later derivation records.
"""

from __future__ import annotations

from typing import Any

from torch._guards import SLoc
from torch.fx.experimental.symbolic_shapes import ShapeEnv

__all__ = ["LoadedShapeEnv", "LOADING_LOC"]

# Where whatever the loader records says it came from while the program is being loaded.
LOADING_LOC = "pt2serde: loaded from the artifact"


class LoadedShapeEnv(ShapeEnv):
    """A ShapeEnv that names the artifact as the origin of what a load records (see the module
    docstring); torch's ShapeEnv in every other respect."""

    def __init__(self, **kwargs: Any) -> None:
        self._pt2serde_loading = True
        super().__init__(**kwargs)

    def done_loading(self) -> None:
        """Become torch's own ShapeEnv: from now on the user's frame is the origin of ranges and
        guards, found as torch finds it (an override left in place would be a frame of its own,
        outside torch's, that the search stops at), and the loaded program holds no class of ours."""
        del self._pt2serde_loading
        self.__class__ = ShapeEnv

    def _get_stack_summary(self, is_debug: bool = False, framework_loc: str | None = None) -> tuple[SLoc, str]:
        if framework_loc is None and self._pt2serde_loading:
            framework_loc = LOADING_LOC
        return super()._get_stack_summary(is_debug, framework_loc)
