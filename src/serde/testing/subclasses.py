"""Registration of the tensor subclasses torch's own tests use (:func:`register_torch_test_subclasses`)."""

from __future__ import annotations

__all__ = ["register_torch_test_subclasses"]


def register_torch_test_subclasses() -> list[str]:
    """Register the tensor subclasses torch's own tests use, so programs holding them round-trip.

    ``torch.export.load`` unpickles such a class by its name; ``serde.load`` never imports a class a
    file names, so a test that exports a model with, say, a ``TwoTensor`` parameter registers the
    class first (``serde.register_tensor_subclass``). This does it for ``TwoTensor``,
    ``ConstantExtraMetadataTensor``, ``CustomTensorPlainOut`` and ``WrapperSubclass`` (all from
    ``torch.testing._internal``) and returns their registered names. Registering is idempotent.
    """
    from torch.testing._internal.custom_tensor import ConstantExtraMetadataTensor, CustomTensorPlainOut
    from torch.testing._internal.subclasses import WrapperSubclass
    from torch.testing._internal.two_tensor import TwoTensor

    from serde.bridge.subclasses import register_tensor_subclass

    return [register_tensor_subclass(c)
            for c in (TwoTensor, ConstantExtraMetadataTensor, CustomTensorPlainOut, WrapperSubclass)]
