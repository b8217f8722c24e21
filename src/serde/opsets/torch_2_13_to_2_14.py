"""torch 2.13 -> 2.14: cholesky and qr removed (linalg_cholesky / linalg_qr replace them), the
``grad`` argument of _cdist_backward / _pdist_backward renamed ``grad_output``, two defaulted
keyword arguments for _cudnn_attention_forward, and new operators (linalg_polar, linalg_matrix_sqrth,
...), which a 2.13 reader refuses (serde.opsets.upgrade names them).

Written 2026-12-01 from the changes ``python -m serde.dev.opchanges`` lists between the two snapshots.
"""

from __future__ import annotations

from .helpers import (
    Rewrite,
    bool_to_choice,
    drop_new_defaults,
    fill_new_defaults,
    rename_argument,
    rewrite_target,
)

__all__ = ["OLDER", "NEWER", "UPGRADE", "DOWNGRADE", "REFUSED_UP", "REFUSED_DOWN"]

OLDER, NEWER = (2, 13), (2, 14)

# torch documents the replacements (the deprecation warnings 2.13 prints): cholesky(A, upper) is
# linalg.cholesky(A, upper=upper), which runs the same LAPACK potrf; qr(A, some) is
# linalg.qr(A, 'reduced' if some else 'complete').
_QR_MODE = {"some": bool_to_choice("some", "reduced", "complete")}

# Keys are operators of the older release.
UPGRADE: dict[str, Rewrite] = {
    "aten::cholesky.default": rewrite_target("torch.ops.aten.linalg_cholesky.default"),
    "aten::cholesky.out": rewrite_target("torch.ops.aten.linalg_cholesky.out"),
    "aten::qr.default": rewrite_target("torch.ops.aten.linalg_qr.default", rename={"self": "A", "some": "mode"},
                                       convert=_QR_MODE),
    "aten::qr.Q": rewrite_target("torch.ops.aten.linalg_qr.out", rename={"self": "A", "some": "mode"},
                                 convert=_QR_MODE),
    "aten::_cdist_backward.default": rename_argument("grad", "grad_output"),
    "aten::_cdist_backward.out": rename_argument("grad", "grad_output"),
    "aten::_pdist_backward.default": rename_argument("grad", "grad_output"),
    "aten::_pdist_backward.out": rename_argument("grad", "grad_output"),
    "aten::_cudnn_attention_forward.default": fill_new_defaults(),
}

# Keys are operators of the newer release. Operators new in 2.14 have no entry: the step refuses
# them, naming the release that introduced them.
DOWNGRADE: dict[str, Rewrite] = {
    "aten::_cdist_backward.default": rename_argument("grad_output", "grad"),
    "aten::_cdist_backward.out": rename_argument("grad_output", "grad"),
    "aten::_pdist_backward.default": rename_argument("grad_output", "grad"),
    "aten::_pdist_backward.out": rename_argument("grad_output", "grad"),
    "aten::_cudnn_attention_forward.default": drop_new_defaults(),
}

# Changes refused on purpose, with the reason the error gives.
REFUSED_UP: dict[str, str] = {}
REFUSED_DOWN: dict[str, str] = {}
