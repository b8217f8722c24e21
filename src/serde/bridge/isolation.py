"""``outside_ambient_modes()``: run a block as if no torch mode were active in this thread.

torch keeps dispatch modes (FakeTensorMode, proxy and functional modes, user TorchDispatchModes),
torch-function modes and the dynamo tracing context per thread. A caller's ``with FakeTensorMode():``
around ``serde.load``, or a mode left on the stack by an eager ``torch.cond`` whose compilation
failed in that thread, would otherwise turn the weights being loaded into fake tensors: the
copy into them then writes through a pointer that is not real memory. Loading is I/O, not
computation, so it always builds real tensors; the caller's modes are back in place afterwards.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch._guards
from torch._ops import _len_torch_dispatch_stack_pre_dispatch
from torch.utils._python_dispatch import _disable_current_modes

__all__ = ["outside_ambient_modes"]


@contextlib.contextmanager
def outside_ambient_modes() -> Iterator[None]:
    # The torch-function and inference-mode guards are C objects, cheap to enter, and always
    # entered. Setting the dispatch modes and the tracing context aside goes through Python
    # context managers (with imports inside) that cost a load tens of microseconds, and does
    # nothing when both dispatch mode stacks are empty and no tracing context is set: then
    # they are skipped.
    if (torch._C._len_torch_dispatch_stack() == 0 and _len_torch_dispatch_stack_pre_dispatch() == 0
            and torch._guards.TracingContext.try_get() is None):
        with torch._C.DisableTorchFunction(), torch._C._InferenceMode(False):
            yield
        return
    with (_disable_current_modes(), torch._C.DisableTorchFunction(), torch._guards.tracing(None),
          torch._C._InferenceMode(False)):
        yield
