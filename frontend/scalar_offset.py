"""``t.ap(pattern, scalar_offset=<tile>, indirect_dim=d)``: an access whose start moves by a value read at run
time from a one-element on-chip tile, times the stride of axis ``d`` (KLR ``ScalarOffset.acc``; the
interpreter reads the tile when the instruction runs).

The access is used whole, as the kernels write it (``nisa.dma_copy(dst=..., src=t.ap(...))``): a view of it
(a subscript, a reshape, a mask) would have to move with the runtime offset too, and is refused at its line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tusk.frontend.errors import unsupported
from tusk.frontend.tensors import Tensor, View


@dataclass(frozen=True)
class RuntimeOffsetView(View):
    scalar: View | None = None     # the [1, 1] tile holding the offset (in units of axis indirect_dim)
    indirect_dim: int = 0


_DERIVING = ("__getitem__", "with_dims", "narrowed", "reshape", "ap", "permute", "broadcast", "expand_dim",
             "squeeze_dim", "reshape_dim", "flatten_dims", "slice", "select", "view", "broadcast_to")


def _refusing(name: str) -> Any:
    def refuse(self: RuntimeOffsetView, *_: Any, **__: Any) -> Any:
        raise unsupported(f"{name} of an ap(scalar_offset=<a tile>) access (it moves at run time: use the "
                          "access whole)")
    return refuse


for _name in _DERIVING:
    setattr(RuntimeOffsetView, _name, _refusing(_name))


def runtime_offset_view(v: View, scalar: Any, indirect_dim: int) -> RuntimeOffsetView:
    s = scalar._user_view() if isinstance(scalar, Tensor) else scalar
    if not isinstance(s, View) or not s.tensor.on_chip or s.elements != 1 or "int" not in s.dtype:
        raise unsupported(f"ap(scalar_offset={scalar!r}) (an integer one-element SBUF tile, or an int)")
    if isinstance(s, RuntimeOffsetView) or s.vector is not None or not s.offset.is_static:
        raise unsupported("ap(scalar_offset=) of a tile that is itself read at a runtime offset")
    if not v.offset.is_static:
        raise unsupported("ap(scalar_offset=<a tile>) together with a loop-index offset")
    if v.tensor.on_chip:  # the compute instructions rebuild their tiles' views: only DMAs keep the offset
        raise unsupported(f"ap(scalar_offset=<a tile>) of on-chip tile {v.tensor.name} (of an HBM tensor only)")
    return RuntimeOffsetView(v.tensor, v.offset, v.dims, v.axes, v.checks, None, s, indirect_dim)


def scalars(*views: View) -> tuple[View, ...]:
    """The offset tiles the accesses read (an instruction reads them too)."""
    return tuple(v.scalar for v in views if isinstance(v, RuntimeOffsetView) and v.scalar is not None)
