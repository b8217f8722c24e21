"""The errors of the schema core: a name that is unsafe, a cap of :class:`~serde.core.limits.Limits`
exceeded, and stored tensors that do not fit their storages.

Every class derives from one of the public families in :mod:`serde.errors`: an unsafe name or a value
over a cap is :class:`~serde.errors.UnsafeArtifactError` (a hostile file must not make the loader do
it), a tensor view that contradicts its storage is :class:`~serde.errors.MalformedArtifactError`.
"""

from __future__ import annotations

from serde.errors import MalformedArtifactError, UnsafeArtifactError

__all__ = [
    "UnsafeNameError",
    "LimitError", "ListTooLongError", "NameTooLongError", "TooManyNodesError", "TensorRankError",
    "TensorSizeError", "IntegerTooLargeError",
    "InvalidTensorViewError", "TensorOutOfBoundsError", "StorageIndexError", "PayloadSizeError",
    "InvalidDtypeError", "InvalidBoolError",
]


class UnsafeNameError(UnsafeArtifactError):
    """A name from the artifact could inject code or shadow a module attribute once torch.fx uses it."""


# ---------------------------------------------------------------- caps (serde.core.limits.Limits)


class LimitError(UnsafeArtifactError):
    """A value in the artifact exceeds a :class:`~serde.core.limits.Limits` cap."""


class ListTooLongError(LimitError):
    """A list (argument, sizes, names) is longer than ``Limits.max_list_len``."""


class NameTooLongError(LimitError):
    """A name or metadata text is longer than ``Limits.max_name_chars`` / ``max_text_chars``."""


class TooManyNodesError(LimitError):
    """The program has more nodes than ``Limits.max_nodes``."""


class TensorRankError(LimitError):
    """A tensor has more dimensions than ``Limits.max_tensor_rank``."""


class TensorSizeError(LimitError):
    """A tensor has more elements than ``Limits.max_tensor_elements``."""


class IntegerTooLargeError(LimitError):
    """An integer, an exponent or a degree exceeds ``Limits.max_int_bits`` / ``max_exponent`` /
    ``max_power_bits`` / ``max_degree``."""


# ---------------------------------------------------------------- stored tensors (weights.json)


class InvalidTensorViewError(MalformedArtifactError):
    """Sizes/strides/offset are negative, of different lengths, or too large for int64."""


class TensorOutOfBoundsError(MalformedArtifactError):
    """A tensor view addresses bytes beyond the end of its storage."""


class StorageIndexError(MalformedArtifactError):
    """A tensor names a storage index that does not exist."""


class PayloadSizeError(MalformedArtifactError):
    """A payload's byte length differs from its Storage.nbytes (or Storage.nbytes is invalid)."""


class InvalidDtypeError(MalformedArtifactError):
    """A dtype a weight cannot have, or requires_grad on a dtype that cannot carry gradients."""


class InvalidBoolError(MalformedArtifactError):
    """A bool tensor holds a byte other than 0 or 1 (undefined behaviour in torch kernels)."""
