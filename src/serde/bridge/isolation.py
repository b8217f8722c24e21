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

__all__ = ["outside_ambient_modes"]


@contextlib.contextmanager
def outside_ambient_modes() -> Iterator[None]:
    import torch
    import torch._guards
    from torch.utils._python_dispatch import _disable_current_modes

    with (_disable_current_modes(), torch._C.DisableTorchFunction(), torch._guards.tracing(None),
          torch.inference_mode(False)):
        yield
