"""A kernel that returns an on-chip tile (NKI 1.x simulation returns its contents, as the range_select docs
example relies on): the tile is stored, at the return, into an HBM output of its shape and dtype."""

from __future__ import annotations

from typing import Any

from tusk.frontend.tensors import Tensor, View


def as_returned_output(tr: Any, r: Any) -> Any:
    """``r`` itself, or for an on-chip tile (outside a launch grid) a new HBM tensor holding a copy of it."""
    view = r._user_view() if isinstance(r, Tensor) else r
    if not isinstance(view, View) or not view.tensor.on_chip or tr.grid:
        return r
    out = tr.new_tensor(view.shape, view.dtype, "shared_hbm", hint=f"{view.tensor.name}_returned")
    tr.op("dma", (view,), (out.view(),), dst=out.view(), src=view)
    return out
