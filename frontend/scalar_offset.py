"""``t.ap(pattern, scalar_offset=<tile>, indirect_dim=d)``: an access whose start moves by a value read at run
time from a one-element on-chip tile, times the stride of axis ``d`` (KLR ``ScalarOffset.acc``; the
interpreter reads the tile when the instruction runs).

The access is used whole, as the kernels write it (``nisa.dma_copy(dst=..., src=t.ap(...))``): a view of it
(a subscript, a reshape, a mask) would have to move with the runtime offset too, and is refused at its line.

The same access, as NKI 1.x and 2.x kernels write it in a subscript (a *runtime coordinate*):

- ``cache[tab[0, k], :, :]``: a one-element integer SBUF tile as the index of an HBM axis is one coordinate
  read at run time (NKI: a (1, 1) tile is one coordinate, a (K, 1) tile K gathered rows); the axis goes, as
  an int index's does;
- ``x[nl.arange(4)[:, None] + s, i_f]`` with ``s = nl.load(start)[0, 0]``: index expressions plus such a
  tile (:class:`RuntimeIndex`) keep their runs, moved by the value.

KLR's access has one scalar offset, which a loop-index offset also uses (a loop register): a loop index in
the subscript, or in the tile's own subscript (``tab[0, k]``), unrolls its loop (a re-trace, as a Python int
use of the index does; iterations of an nl.affine_range are independent).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tusk.frontend.affine import Affine, IndexGrid, IndexVector
from tusk.frontend.errors import Unsupported, unsupported
from tusk.frontend.tensors import Tensor, View, axis_of_stride, is_coordinate, is_coordinate_tile, is_register


@dataclass(frozen=True)
class RuntimeOffsetView(View):
    # the offset (in units of axis indirect_dim): a [1, 1] tile read when the DMA runs (KLR ScalarOffset.acc), or
    # a register of nisa.register_alloc (ScalarOffset.reg)
    scalar: Any = None
    indirect_dim: int = 0


_DERIVING = ("__getitem__", "reshape", "ap", "permute", "broadcast", "expand_dim",
             "squeeze_dim", "reshape_dim", "flatten_dims", "slice", "select", "view", "broadcast_to")


def _refusing(name: str) -> Any:
    def refuse(self: RuntimeOffsetView, *_: Any, **__: Any) -> Any:
        raise unsupported(f"{name} of an ap(scalar_offset=<a tile>) access (it moves at run time: use the "
                          "access whole)")
    return refuse


for _name in _DERIVING:
    setattr(RuntimeOffsetView, _name, _refusing(_name))


def _keeping_start(name: str) -> Any:
    """A view method that leaves the start where it is (new dims of the same first element, or a prefix of
    each dim: ``mask=``), so the runtime offset moves the result as it moves the access."""
    plain = getattr(View, name)

    def method(self: RuntimeOffsetView, *args: Any, **kw: Any) -> Any:
        out = plain(View(self.tensor, self.offset, self.dims, self.axes, self.checks), *args, **kw)
        if out.offset != self.offset or out.vector is not None:
            return _refusing(name)(self)
        return RuntimeOffsetView(out.tensor, out.offset, out.dims, out.axes, out.checks, None, self.scalar,
                                 self.indirect_dim)
    return method


for _name in ("with_dims", "narrowed", "windowed"):
    setattr(RuntimeOffsetView, _name, _keeping_start(_name))


def _checked_scalar(v: View, scalar: Any) -> Any:
    """The runtime value ``v`` moves by -- a register, or a one-element integer SBUF tile -- checked."""
    s = scalar._user_view() if isinstance(scalar, Tensor) else scalar
    if is_register(s):
        v.offset._unrolled()  # a loop index beside the register unrolls its loop (KLR: one offset per access)
        _on_chip_checked(v)
        if v.tensor.on_chip and getattr(s, "dtype", "int32") != "int32":
            raise unsupported(f"ap(scalar_offset=<an nl.{s.dtype} NkiScalar>) of on-chip tile {v.tensor.name} "
                              "(NKI: on SBUF or PSUM the offset must be nl.int32)")
        return s
    if not isinstance(s, View) or not s.tensor.on_chip or s.elements != 1 or "int" not in s.dtype:
        raise unsupported(f"ap(scalar_offset={scalar!r}) (an integer one-element SBUF tile, or an int)")
    if isinstance(s, RuntimeOffsetView) or s.vector is not None or not s.offset.is_static:
        raise unsupported("ap(scalar_offset=) of a tile that is itself read at a runtime offset")
    v.offset._unrolled()  # a loop index beside the tile unrolls its loop (KLR: one scalar offset per access)
    _on_chip_checked(v)
    return s


def _on_chip_checked(v: View) -> None:
    """An SBUF access may move at run time (NKI: an int32 NkiScalar, or a tile, as the scalar_offset of an
    SBUF/PSUM access); a compute instruction reads or writes it through a staging tile (:func:`staged`)."""
    if v.tensor.on_chip and v.tensor.memory != "sbuf":
        raise unsupported(f"ap(scalar_offset=...) of {v.tensor.memory} tile {v.tensor.name} (Tusk moves an "
                          "on-chip access at run time with a DMA, and a DMA does not reach PSUM: of SBUF or HBM "
                          "tensors only)")


def staged(v: RuntimeOffsetView) -> View:
    """An SBUF access moved at run time, as a compute instruction's operand: the instructions rebuild their
    tiles' views, and only a DMA keeps the runtime offset.  So the access is copied by DMA into a fresh tile
    of its shape, which the instruction reads; if it writes the tile, the tracer copies the tile back by DMA
    right after (``Tracer.write_back``).  Bit-exact copies, in program order: the same values as the
    instruction on the moved access itself."""
    from tusk.frontend.tracer import current

    tr = current()
    stage = tr.tile(v.shape, v.dtype, "sbuf", "moved")
    tr.op("dma", (v,), (stage,), dst=stage, src=v)
    tr.write_back[id(stage.tensor)] = (stage, v)
    return stage


def runtime_offset_view(v: View, scalar: Any, indirect_dim: int) -> RuntimeOffsetView:
    s = _checked_scalar(v, scalar)
    return RuntimeOffsetView(v.tensor, v.offset, v.dims, v.axes, v.checks, None, s, indirect_dim)


def runtime_offset_by_stride(v: View, scalar: Any, stride: int, indirect_dim: int, what: str = "") -> RuntimeOffsetView:
    """``v`` moved at run time by the value times ``stride`` (``t.ap(..., scalar_offset=s, indirect_dim=d)``,
    the stride of the view's axis d).  KLR scales the value by one of the tensor's own axis strides; a stride
    that is none of them -- an ``.ap()`` of a reshaped view, ``t.reshape((4, 256)).ap(..., indirect_dim=0)``
    over a ``[1024]`` tensor -- moves along the innermost axis (stride 1) by the value times ``stride``,
    computed right here (a register ALU multiply, or a multiply into a fresh tile): the value the access
    reads is the one it has now."""
    s = _checked_scalar(v, scalar)
    try:
        axis = axis_of_stride(v.tensor.shape, stride, indirect_dim, what)
    except Unsupported:
        if stride <= 0:
            raise
        axis, s = len(v.tensor.shape) - 1, _times(s, stride)
    return RuntimeOffsetView(v.tensor, v.offset, v.dims, v.axes, v.checks, None, s, axis)


def _times(s: Any, factor: int) -> Any:
    """A fresh register or tile holding the runtime value ``s`` times ``factor``."""
    from tusk.frontend.nki import isa_ops
    from tusk.frontend.tensors import as_dtype
    from tusk.frontend.tracer import current

    tr = current()
    if is_register(s):
        reg = isa_ops.register_alloc("ap(scalar_offset=)", None)
        tr.op("register_alu_op", (), (), dst=reg.name, src=s.name, imm=int(factor), op="mult")
        return reg
    out = tr.tile((1, 1), as_dtype("int32"))
    tr.op("tensor_scalar", (s,), (out,), dst=out, src=s.with_dims(((1, 1), (1, 1))) if s.ndim != 2 else s,
          op0="mult", imm0=int(factor), reverse0=False)
    return out


def scalars(*views: View) -> tuple[View, ...]:
    """The offset tiles the accesses read (an instruction reads them too; a register is no tile)."""
    return tuple(v.scalar for v in views if isinstance(v, RuntimeOffsetView) and isinstance(v.scalar, View))


# ---------------------------------------------------------------------------- runtime coordinates in subscripts
@dataclass(frozen=True)
class RuntimeIndex:
    """``static + scalar``: an index expression (an int, a loop index, nl.arange / nl.mgrid indices) plus
    the value of a one-element integer tile, read when the instruction runs."""

    static: Any
    scalar: View

    def _moved(self, other: Any, sign: int) -> Any:
        if is_coordinate(other):
            raise unsupported("an index with two runtime coordinates (KLR's access has one runtime offset: add "
                              "the tiles with nl.add first)")
        if not isinstance(other, (int, Affine, IndexVector, IndexGrid)) or isinstance(other, bool):
            return NotImplemented
        return RuntimeIndex(self.static + other if sign > 0 else self.static - other, self.scalar)

    def __add__(self, other: Any) -> Any:
        return self._moved(other, 1)

    __radd__ = __add__

    def __sub__(self, other: Any) -> Any:
        return self._moved(other, -1)

    def __rsub__(self, other: Any) -> Any:
        raise unsupported("subtracting a runtime coordinate (a tile's value is added to an index: negate the "
                          "tile with nl.multiply first)")

    def _scaled(self, *_: Any) -> Any:
        raise unsupported("scaling or dividing an index with a runtime coordinate (the tile's value is added to "
                          "the index once: scale the tile with nl.multiply first)")

    __mul__ = __rmul__ = __floordiv__ = __mod__ = __neg__ = _scaled

    def _compared(self, *_: Any) -> Any:
        raise unsupported("a mask on an index with a runtime coordinate (masks are known when the kernel is "
                          "traced: mask the index expression without the tile)")

    __lt__ = __le__ = __gt__ = __ge__ = _compared

    def __bool__(self) -> bool:
        raise unsupported("an index with a runtime coordinate as a Python truth value")


def runtime_index(tile: View, index: Any) -> RuntimeIndex:
    """``index + tile`` (either order) for nl.arange / nl.mgrid ``index``: a runtime coordinate, or a refusal
    naming what a tile added to indices must be."""
    if isinstance(index, RuntimeIndex):
        return index + tile  # refused: two runtime coordinates
    if not is_coordinate_tile(tile):
        raise unsupported(f"nl.arange indices plus a {tile.dtype}{list(tile.shape)} tile (only a one-element "
                          "integer SBUF tile is a coordinate read at run time)")
    return RuntimeIndex(index, tile)


def runtime_subscript(v: View, key: tuple) -> RuntimeOffsetView:
    """``v[key]`` where one subscript holds a runtime coordinate: the access of the subscript with the
    coordinate's static part, whose start moves by the tile's value times that axis's stride."""
    at = [j for j, k in enumerate(key) if is_coordinate(k)]
    if len(at) > 1:
        raise unsupported("runtime coordinates in two subscripts (KLR's access has one runtime offset)")
    j = at[0]
    k = key[j]
    scalar, static = (k.scalar, k.static) if isinstance(k, RuntimeIndex) else (k, 0)
    scalar = scalar._user_view() if isinstance(scalar, Tensor) else scalar
    # the subscript's axis in v: an Ellipsis before it stands for the axes the key leaves out
    pos = j + v.ndim - len(key) if any(x is Ellipsis for x in key[:j]) else j
    if pos >= v.ndim:
        raise unsupported(f"{len(key)} subscripts for a {v.ndim}-axis tensor")
    base = v[key[:j] + (static,) + key[j + 1:]]
    if isinstance(base, RuntimeOffsetView) or base.vector is not None:
        raise unsupported("a runtime coordinate together with an index tile in one subscript (one runtime "
                          "offset per access)")
    if not base.offset.is_static:
        base.offset._unrolled()  # a loop index here unrolls its loop (the loop register is the one offset)
    if not scalar.offset.is_static:
        scalar.offset._unrolled()  # the tile is read at a fixed place: each iteration its own
    what = f"a runtime coordinate on axis {pos} of a {list(v.shape)} view of {v.tensor.name}"
    # a reshaped view's axis (x.reshape((4, 2, 256))[r, :, :] over an [8, 256] tensor) may step by no axis
    # stride of the tensor: moved along its innermost axis by the value times that step, as .ap() does
    return runtime_offset_by_stride(base, scalar, v.dims[pos][0], pos, what)
