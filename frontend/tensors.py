"""Symbolic tensors and their views while tracing.

A :class:`Tensor` is a buffer: a kernel argument or ``nl.ndarray`` in HBM, or
a tile in SBUF/PSUM (one axis, ``nl.par_dim`` or the first, is the partition
axis; the others are laid out row-major along each partition).  Subscripts
give a :class:`View`: an element offset (possibly depending on dynamic loop
indices) plus ``[stride, count]`` pairs, in the buffer's physical layout —
exactly what a KLR ``BirAccessPattern`` holds.  Arithmetic operators on views
call the ``nl`` functions, as NKI's tile operators do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tusk.frontend.affine import Affine, IndexGrid, IndexVector, Mask
from tusk.frontend.errors import TraceError, Unsupported, missing_attribute, unsupported
from tusk.frontend.klr_writer import DTYPE_BYTES  # Dtype names are KLR Dtype names

PARTITIONS = 128
# the roles of a kernel's interface tensors (an in/out argument is read and written in place)
INTERFACE_ROLES = ("input", "inout", "output")


def _subscript_kind(k: Any) -> str:
    """What a subscript that is no index is, for the refusal."""
    kind = getattr(k, "kind", None)
    if type(k).__name__ == "_Range" and isinstance(kind, str):
        return (f"an nl.{kind}(...) object as a subscript (it is a loop's range: iterate over it, or index with "
                f"nl.arange)")
    return f"a subscript of type {type(k).__name__}"


def _vector_offset_view(tensor: Tensor, base: Affine, dims: tuple, index: Any, indirect_dim: Any,
                        row: int | None = None) -> View:
    """``t.ap(pattern, vector_offset=idx, indirect_dim=0)``: partition ``p`` of the access starts at row
    ``idx[p]`` of ``t`` (a gather or scatter by a DMA; KLR's vector offset, as ``t[idx, ...]`` in 1.x).  The
    pattern's first pair walks the rows: its step must be the row stride (the hardware multiplies the index
    by the tensor's own stride) and its count the index tile's partitions.  ``row``: the row stride of the
    view ``ap`` was called on when that view is a row-major reshape of the whole tensor (NKI's reshape is a
    tensor of that shape, whose rows the index counts), else the tensor's own."""
    if _int(indirect_dim, "ap(indirect_dim=)") != 0:
        raise unsupported(f"ap(vector_offset=..., indirect_dim={indirect_dim}) (a vector offset indexes axis 0)")
    idx = index.view() if isinstance(index, Tensor) else index
    if not isinstance(idx, View) or not idx.tensor.on_chip or "int" not in idx.dtype \
            or idx.elements != idx.shape[0] or idx.vector is not None or not idx.offset.is_static:
        what = f"{idx.dtype}{list(idx.shape)}" if isinstance(idx, View) else type(index).__name__
        raise unsupported(f"ap(vector_offset={what}) (an integer [P, 1] SBUF column of row indices)")
    row = math.prod(tensor.shape[1:]) if row is None else row
    if dims[0][0] != row or dims[0][1] != idx.shape[0]:
        raise unsupported(f"ap(pattern={[list(d) for d in dims]}, vector_offset=<{idx.shape[0]} rows>): the first "
                          f"pair must walk the {idx.shape[0]} gathered rows with the row stride, [{row}, "
                          f"{idx.shape[0]}]")
    # which rows are read is known only at run time: the extent checked is one row's
    View(tensor, base, ((row, 1),) + tuple(dims[1:]), ()).check_extent("ap")
    col = idx.with_dims((idx.dims[0], (1, 1))) if idx.ndim == 1 else idx
    return View(tensor, base, tuple(dims), (), (), col)


def axis_of_stride(shape: tuple[int, ...], stride: int, fallback: int, what: str = "") -> int:
    """The tensor axis whose row-major stride is ``stride`` (KLR's indirectDim scales by the tensor's own
    strides); refused when none is (``what``: the access, for the message)."""
    acc = 1
    for d in range(len(shape) - 1, -1, -1):
        if acc == stride:
            return d
        acc *= shape[d]
    what = what or f"ap(scalar_offset=<a tile>, indirect_dim={fallback})"
    raise unsupported(f"{what}: stride {stride} is no axis stride of the {list(shape)} tensor (the runtime "
                      f"value is scaled by one of the tensor's own axis strides)")


@dataclass(frozen=True)
class DynSlice:
    """``nl.ds(start, size)``: ``size`` indices from ``start`` (an int or a loop-index expression)."""

    start: Any
    size: int

    def as_slice(self) -> slice:
        return slice(self.start, Affine.of(self.start) + self.size)


class Dtype(str):
    """An NKI dtype (``nl.float32`` ...): a str subclass, so ``dtype == "float32"`` and hashing work."""

    @property
    def itemsize(self) -> int:
        return DTYPE_BYTES[self]

    def __repr__(self) -> str:
        return f"nl.{self!s}"

    def __call__(self, value: Any = 0) -> Any:
        """``nl.float32(1.0)``, ``nl.int32(n)``: NKI 1.x's numpy-native dtypes are numpy's scalar types, so a
        call makes that numpy scalar; bfloat16 and the float8 kinds are numpy dtype objects there, not types."""
        import numpy as np
        make = getattr(np, str(self), None) if str(self) in _NUMPY_SCALAR_TYPES else None
        if make is None:
            raise unsupported(f"calling nl.{self} (NKI 1.x's nl.{self} is a numpy dtype object, not a scalar type: "
                              "only numpy's own types, nl.float32, nl.int32, ..., make a number)")
        return make(value)


_NUMPY_SCALAR_TYPES = frozenset({"float32", "float16", "int32", "int16", "int8", "uint32", "uint16", "uint8"})


def as_dtype(x: Any) -> Dtype:
    """An NKI, numpy or string dtype as a :class:`Dtype`."""
    from tusk.frontend.specs import DTYPES
    if isinstance(x, Dtype):
        if x not in DTYPE_BYTES:
            raise unsupported(f"dtype {x!r} (no KLR tensor of it here)")
        return x
    name = getattr(x, "__name__", None) or getattr(x, "name", None) or str(x)
    name = str(name)
    for prefix in ("np.", "numpy.", "nl.", "nki.language."):  # a dtype spelt as its Python name
        name = name.removeprefix(prefix)
    name = {"float": "float32", "int": "int32", "bool": "uint8", "bool_": "uint8"}.get(name, name)
    key = DTYPES.get(str(name).lower())
    if key is None and getattr(x, "kind", None) == "V":
        raise unsupported(f"dtype {x!r}: raw bytes, as numpy holds nl.bfloat16 and the float8 kinds while "
                          "tracing (numpy has no such type: an array cast to one holds no numbers)")
    if key is None or key not in DTYPE_BYTES:
        raise unsupported(f"dtype {x!r}")
    return Dtype(key)


class ParDim(int):
    """``nl.par_dim(n)``: marks the partition axis of an on-chip buffer's shape."""


@dataclass(eq=False)
class Tensor:
    name: str
    shape: tuple[int, ...]
    dtype: Dtype
    memory: str                    # "hbm" | "shared_hbm" | "sbuf" | "psum"
    par_axis: int = 0
    role: str = "internal"         # "input" | "output" | "internal"
    site: int = 0                  # the program position that created it (liveness)
    arg_index: int = -1
    klr: Any = field(default=None, repr=False)  # set by the emitter
    addr: int | None = None        # byte offset in the partition (SBUF/PSUM), set by the placer
    alias_of: Tensor | None = field(default=None, repr=False)  # the same storage read as another dtype

    def reinterpreted(self, dtype: Dtype, what: str) -> Tensor:
        """This tensor's bytes as ``dtype`` (``t.view(dtype)``, ``t.ap(dtype=)``): the same storage (an HBM
        tensor's name, an on-chip tile's address) whose last axis holds as many ``dtype`` elements as its
        bytes make; an on-chip tile's partition axis never changes."""
        if dtype == self.dtype:
            return self
        shape = self.shape
        if dtype.itemsize != self.dtype.itemsize:
            row = shape[-1] * self.dtype.itemsize if shape else 0
            if not shape or (self.on_chip and self.par_axis == len(shape) - 1):
                raise unsupported(f"{what} of {self.name} {self.dtype}{list(shape)}: its last axis is the "
                                  f"partition axis, which a reinterpretation to another element width cannot change")
            if row % dtype.itemsize:
                raise unsupported(f"{what} of {self.name} {self.dtype}{list(shape)}: its last axis has {row} bytes, "
                                  f"not a whole number of {dtype} elements")
            shape = (*shape[:-1], row // dtype.itemsize)
        base = self.alias_of or self
        return Tensor(base.name, shape, dtype, base.memory, base.par_axis, base.role, base.site,
                      base.arg_index, alias_of=base, addr=base.addr)

    @property
    def on_chip(self) -> bool:
        return self.memory in ("sbuf", "psum")

    @property
    def layout(self) -> tuple[int, ...]:
        """Axes in physical order: the partition axis first on chip, user order in HBM."""
        if not self.on_chip:
            return tuple(range(len(self.shape)))
        return (self.par_axis, *[k for k in range(len(self.shape)) if k != self.par_axis])

    @property
    def physical_shape(self) -> tuple[int, ...]:
        return tuple(self.shape[k] for k in self.layout)

    @property
    def strides(self) -> tuple[int, ...]:
        """Element stride of each *user* axis in the physical row-major layout."""
        phys = self.physical_shape
        pstride = [math.prod(phys[k + 1:]) for k in range(len(phys))]
        out = [0] * len(self.shape)
        for pos, axis in enumerate(self.layout):
            out[axis] = pstride[pos]
        return tuple(out)

    @property
    def partition_bytes(self) -> int:
        """Bytes each partition holds (on chip)."""
        return math.prod(self.physical_shape[1:]) * self.dtype.itemsize

    def view(self, dtype: Any = None) -> View:
        if dtype is not None:  # NKI 2.x ``t.view(dtype)``: a reinterpretation
            return self._user_view().view(dtype)
        dims = [(s, n) for s, n in zip(self.strides, self.shape)]
        order = list(self.layout)
        return View(self, Affine(0), tuple(dims[k] for k in order), tuple(order))

    # the tile protocol: subscripts, shape, operators
    def __getitem__(self, key: Any) -> View:
        return self._user_view()[key]

    @property
    def data(self) -> View:
        """NKI 0.7.0's ``t.data``: the tensor as an instruction operand (as a tile grid's ``.data`` is)."""
        return self._user_view()

    def _user_view(self) -> View:
        """The axes in the user's order (subscripts index these)."""
        return View(self, Affine(0), tuple(zip(self.strides, self.shape)), tuple(range(len(self.shape))))

    def __setitem__(self, key: Any, value: Any) -> None:
        self[key].assign(value)

    def reshape(self, shape: Any) -> View:
        """The tensor seen with another shape (same elements, row-major): ``a.reshape((1, n))``."""
        return self._user_view().reshape(shape)

    def __getattr__(self, name: str) -> Any:
        # NKI 2.x view methods (ap, permute, slice, ...) and properties act on the whole tensor
        if name in _VIEW_METHODS:
            return getattr(self._user_view(), name)
        if name.startswith("_"):
            raise AttributeError(name)
        raise missing_attribute("tensor", name)

    def broadcast_to(self, shape: Any) -> View:
        return self.view().broadcast_to(shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        return f"<{self.memory} tensor {self.name} {self.dtype}{list(self.shape)}>"

    def __iter__(self):
        raise unsupported("iterating over a tensor (index it with nl.arange or slices)")

    def __len__(self) -> int:
        return self.shape[0]


def _is_index(o: Any) -> bool:
    """nl.arange / nl.mgrid indices, or such indices plus a runtime coordinate."""
    return isinstance(o, (IndexVector, IndexGrid)) or type(o).__name__ == "RuntimeIndex"


def is_register(x: Any) -> bool:
    """A register of ``nisa.register_alloc`` or a loop's index register (frontend/nki/isa_ops.py, which imports
    this module: known by its class name)."""
    return any(c.__name__ == "VirtualRegister" for c in type(x).__mro__)


def is_coordinate_tile(k: Any) -> bool:
    """A one-element integer on-chip tile: a coordinate read at run time where it indexes an HBM tensor."""
    v = k._user_view() if isinstance(k, Tensor) else k
    return isinstance(v, View) and v.tensor.on_chip and v.elements == 1 and "int" in v.dtype


def is_coordinate(k: Any) -> bool:
    """A subscript read at run time: a coordinate tile, or indices plus one (frontend/scalar_offset.py)."""
    return type(k).__name__ == "RuntimeIndex" or is_coordinate_tile(k)


def _unit_index(k: Any) -> bool:
    """An index of a unit axis: 0, or a slice that keeps its one element."""
    if isinstance(k, slice):
        return k.step in (None, 1) and k.start in (None, 0) and (k.stop is None or k.stop == 1)
    return isinstance(k, int) and not isinstance(k, bool) and k == 0


@dataclass(frozen=True, eq=False)
class View:
    """``tensor`` at element ``offset`` with ``dims`` = ((stride, count), ...) in output order.

    ``axes`` names the user axis each output dim walks (-1: a broadcast axis
    made by a mask or an integer index kept as a unit dim).
    """

    tensor: Tensor
    offset: Affine
    dims: tuple[tuple[int, int], ...]
    axes: tuple[int, ...] = ()
    checks: tuple = ()  # (output dim, first index, step, axis size, axis): arange runs to bound-check
    vector: View | None = None  # an indirect (gather/scatter) view: these rows of axis 0, one per partition
    # per output dim, the axis of the nl.arange index grid it walks, where a subscript of several aranges
    # made more dims than the grid has (``x[i_b, i_m, i_n]`` with [1, 1] and [1, 512] grids: dims 0 and 1 walk
    # grid axis 0): a mask= on the grid's axes narrows these dims (Mask.window_for)
    grid_axes: tuple[int, ...] | None = field(default=None, kw_only=True)
    # per output dim, the first index a mask with a lower bound kept (View.windowed): where an assignment
    # redirects the masked write into another view, the same window of it
    window: tuple[int, ...] | None = field(default=None, kw_only=True, compare=False)

    def check_bounds(self) -> None:
        """Every arange run stays inside its axis, over all values of the enclosing loop indices."""
        for runs, first, size, axis in self.checks:
            lo, hi = first.bounds()
            for dim, step in runs:
                n = self.dims[dim][1] if dim < len(self.dims) else 1
                lo, hi = lo + min(0, step * (n - 1)), hi + max(0, step * (n - 1))
            if lo < 0 or hi >= size:
                raise unsupported(f"index {lo}..{hi} is outside axis {axis} (size {size}) of "
                                  f"{self.tensor.name} (a mask= can cut the run short)")

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(n for _, n in self.dims)

    @property
    def dtype(self) -> Dtype:
        return self.tensor.dtype

    @property
    def ndim(self) -> int:
        return len(self.dims)

    @property
    def memory(self) -> str:
        return self.tensor.memory

    @property
    def data(self) -> View:
        """NKI 0.7.0's ``t.data``: the view itself as an instruction operand."""
        return self

    @property
    def elements(self) -> int:
        return math.prod(self.shape)

    def __len__(self) -> int:
        return self.shape[0]

    def __iter__(self):
        raise unsupported("iterating over a tile (index it with nl.arange or slices)")

    def __getattr__(self, name: str) -> Any:
        """Only for names the view does not have: a tensor method of NKI's that Tusk lacks is refused by name."""
        if name.startswith("_"):
            raise AttributeError(name)
        raise missing_attribute("tensor", name)

    def __getitem__(self, key: Any) -> View:
        if isinstance(key, (bool, np.bool_)):
            # `tile[w < W]` with w a static index (a loop unrolled while tracing): the predicate is decided --
            # true keeps every element, false none, as mask= with that value would
            key = Mask({}) if key else Mask.NOTHING
        if isinstance(key, Mask):  # `tile[i_p, i_f][mask]`: the access narrowed as mask= would narrow it
            if key.row is not None:
                raise unsupported("subscripting with a mask that cuts a row part way (no one view holds it; "
                                  "give it as an instruction's mask=)")
            return self.windowed(*key.window(self.ndim))
        key = key if isinstance(key, tuple) else (key,)
        key = tuple(k.as_slice() if isinstance(k, DynSlice) else k for k in key)
        # on chip, a free axis only (NKI 1.x tensor_copy_dynamic_src / _dst): a tile on the partition axis is an
        # index tile (a DMA's partition gather)
        if any(is_coordinate(k) for k in key[1 if self.tensor.on_chip else 0:]):
            from tusk.frontend.scalar_offset import runtime_subscript
            return runtime_subscript(self, key)
        if any(type(k).__name__ == "RuntimeIndex" for k in key):
            raise unsupported(f"indices plus a tile's value on the partition axis of on-chip tile {self.tensor.name} "
                              "(a free axis of a tile, or any axis of an HBM tensor, moves by a value read at run "
                              "time)")
        tiles = [j for j, k in enumerate(key) if isinstance(k, (View, Tensor))]
        if tiles:
            return self._gather(key) if tiles[0] == 0 else self._gather_inner(key, tiles[0])
        if any(k is Ellipsis for k in key):
            at = key.index(Ellipsis)
            key = key[:at] + (slice(None),) * (self.ndim - len(key) + 1) + key[at + 1:]
        if any(k is None for k in key) and all(k is None or k == slice(None) for k in key):
            return self._new_unit_axes(key)
        while len(key) > self.ndim and _unit_index(key[-1]):
            key = key[:-1]  # `col[:, 0]` of a (P,) column (NKI's `buf[:, i]` then `[:, 0]`): its unit axis
        if len(key) > self.ndim:
            raise unsupported(f"{len(key)} subscripts for a {self.ndim}-axis {self._what()}")
        key = key + (slice(None),) * (self.ndim - len(key))
        key = tuple(IndexGrid.of(k) if isinstance(k, IndexVector) else k for k in key)
        grids = [k for k in key if isinstance(k, IndexGrid)]
        if any(k is None for k in key):
            raise unsupported("None (newaxis) in a tensor subscript")
        # arange indices place their runs by broadcast axis ([:, None] before [None, :]); slices by position
        by_axis = len(grids) > 1 or any(len(g.axes) > 1 for g in grids)
        if by_axis and any(isinstance(k, slice) for k in key):
            raise unsupported("mixing slices with several nl.arange indices in one subscript")
        offset = self.offset
        checks: list[tuple[tuple[tuple[int, int], ...], Affine, int, int]] = []
        placed: list[tuple[int, tuple[int, int], int]] = []  # (order, (stride, n), axis)
        moved: list[tuple[Any, list[tuple[int, int]]]] = []  # per old dim: (first index, [(placed, step)])
        for pos, (k, (stride, n), axis) in enumerate(zip(key, self.dims, self.axes or range(self.ndim))):
            if isinstance(k, slice):
                start, stop, step = _slice_bounds(k, n)
                moved.append((start, [(len(placed), step)]))
                offset = offset + start * stride
                if not start.is_static:  # nl.ds(i * 128, 128): checked over every value of the loop indices
                    checks.append((((len(placed), step),), start, n, pos))
                placed.append((pos, (stride * step, _count(start, stop, step)), axis))
            elif isinstance(k, IndexGrid):
                # checked when an operation uses the view: a mask= may cut the runs short
                runs = []
                grid_steps = [step for _, (_, step) in sorted(k.axes.items())]
                moved.append((k.const, [(len(placed) + j, step) for j, step in enumerate(grid_steps)]))
                for d, (cnt, step) in sorted(k.axes.items()):
                    runs.append((len(placed), step))
                    placed.append((d if by_axis else pos, (stride * step, cnt), axis))
                checks.append((tuple(runs), k.const, n, pos))
                offset = offset + k.const * stride
            else:
                try:
                    a = Affine.of(k)
                except TraceError:
                    raise unsupported(_subscript_kind(k)) from None
                if a.is_static and not 0 <= a.const < n:
                    raise unsupported(f"index {a.const} is outside axis {pos} of size {n}")
                offset = offset + a * stride
                moved.append((a, []))
                if self.tensor.on_chip and axis == self.tensor.par_axis:
                    placed.append((pos, (stride, 1), axis))  # a single partition: keep the partition dim
        if by_axis and grids:
            # numpy's advanced indexing: the index arrays broadcast to one shape, so a broadcast axis no grid
            # walks is a unit axis of the view (x[i_p, i_f] with i_p, i_b, i_f = nl.mgrid[0:P, 0:B, 0:F] is
            # [P, 1, F], which an elementwise op then broadcasts along B)
            walked = {d for g in grids for d in g.axes}
            lead = 1 if self.tensor.on_chip else 0
            for d in range(lead, max(g.ndim for g in grids)):
                if d not in walked and all(p[0] != d for p in placed):
                    placed.append((d, (1, 1), -1))
        order = sorted(range(len(placed)), key=lambda j: placed[j][0])
        where = {j: rank for rank, j in enumerate(order)}
        dims = tuple(placed[j][1] for j in order)
        axes = tuple(placed[j][2] for j in order)
        if not dims:
            dims, axes = ((1, 1),), (-1,)
        if self.tensor.on_chip and len(dims) == 1 < self.ndim:
            # NKI: an on-chip tile indexed by ints "is always at least 2D" (t[:, 3] is a [P, 1] column)
            dims, axes = dims + ((1, 1),), axes + (-1,)
        checks = [(tuple((where[d], st) for d, st in runs), first, n, pos) for runs, first, n, pos in checks]
        grid_axes = tuple(placed[j][0] for j in order) if by_axis and grids and len(dims) > max(
            len(g.shape) for g in grids) else None
        v = View(self.tensor, offset, dims, axes, _moved_checks(self.checks, moved, where) + tuple(checks),
                 grid_axes=grid_axes)
        v.check_partition_first(blocks_first=True)
        return v

    def _gather_inner(self, key: tuple, axis: int) -> View:
        """``data[b, idx_tile, ...]``: a gather along ``axis`` > 0 under single indices of the axes before it.

        Those indices pick one block of rows, so this is the axis-0 gather of that block: the static base
        offset plus the index tile's values times the axis's stride (the pattern's first step).  KLR's
        access carries a vector offset with a static base only (a scalar and a vector offset exclude each
        other), so a loop index among the leading indices unrolls its loop (a re-trace, as a Python int
        use does): the iterations of an nl.affine_range are independent, so the kernel is the same.
        """
        if self.tensor.on_chip:
            raise unsupported(f"indexing axis {axis} of an on-chip tile with a tile (an SBUF tile gathers its "
                              "partitions only, by an index tile on its first axis)")
        self._check_gather_base()
        lead = []
        for pos, k in enumerate(key[:axis]):
            k = _unit_slice_start(k)  # t[b:b + 1, idx[i_p, 0]] picks the same row as t[b, idx[i_p, 0]]
            if isinstance(k, (slice, IndexVector, IndexGrid)) or k is None or k is Ellipsis:
                raise unsupported(f"an index tile on axis {axis} after a slice or nl.arange on axis {pos} (only "
                                  "single indices may come before the index tile's axis)")
            lead.append(_static_for_gather(k, pos, axis))
        return self[tuple(lead)]._gather(key[axis:], whole=False)

    def _check_gather_base(self) -> None:
        """A gather indexes the whole tensor, or a row-major reshape of it (``t.reshape((b, h * w, c))``)."""
        whole = self.dims == self.tensor._user_view().dims or (
            self.offset.is_static and self.offset.const == 0
            and merge_contiguous(self.dims) == (1, math.prod(self.tensor.shape)))
        if self.vector is not None or not self.offset.is_static or not whole:
            raise unsupported("indexing a view of an HBM tensor with a tile (index the whole tensor)")

    def _gather(self, key: tuple, whole: bool = True) -> View:
        """``data[idx_tile, ...]``: the rows of axis 0 that a [P, 1] index tile names (KLR's vector offset).
        ``whole=False``: ``self`` is a block of a whole tensor that :meth:`_gather_inner` checked."""
        index = key[0].view() if isinstance(key[0], Tensor) else key[0]
        if not index.tensor.on_chip:  # an SBUF tile's partitions gather too, for a DMA (tracer.Tracer.op)
            raise unsupported("indexing with a tile (only a tensor's first axis, by an SBUF index tile)")
        if whole:
            self._check_gather_base()
        column = "int" in index.dtype and index.elements == index.shape[0] and index.vector is None
        if column and not index.offset.is_static:
            index = _staged_index(index)
        if not column or not index.offset.is_static:
            raise unsupported(f"an index tile {index.dtype}{list(index.shape)} (an integer [P, 1] column)")
        if any(isinstance(k, (View, Tensor)) for k in key[1:]):
            raise unsupported("more than one index tile in a subscript (one axis gathers)")
        vectors = [k for k in key[1:] if isinstance(k, IndexVector)]
        # the rows axis as a one-row index of the same kind as the others: nl.arange indices do not mix with
        # slices (``t[idx[i_p, 0], iy, iz]`` with 3-D aranges)
        first: Any = IndexVector(1, ndim=vectors[0].ndim, dim=0) if vectors else slice(0, 1)
        rest = self[(first,) + tuple(key[1:])]
        if not rest.offset.is_static:
            raise unsupported("an index tile together with a loop-index offset in one subscript")
        rows = index.shape[0]
        col = index.with_dims((index.dims[0], (1, 1))) if index.ndim == 1 else index
        # the one-row stand-in's bound check would count the index tile's partitions as rows of the axis:
        # which rows the gather reads is known only at run time
        checks = tuple(c for c in rest.checks if all(dim != 0 for dim, _ in c[0]))
        return View(self.tensor, rest.offset, ((rest.dims[0][0], rows),) + rest.dims[1:], rest.axes, checks, col)

    def check_partition_first(self, blocks_first: bool = False) -> None:
        """An on-chip view walks the partition axis first.  ``blocks_first``: leading block axes are fine too
        (``buf[i]`` of a ``(n, m, par_dim(128), f)`` tile, indexed further before an instruction uses it; the
        instruction checks again)."""
        t = self.tensor
        if t.on_chip and self.axes and self.axes[0] != t.par_axis and t.par_axis in self.axes:
            if blocks_first and all(a < t.par_axis for a in self.axes[:self.axes.index(t.par_axis)]):
                return
            raise unsupported(f"a view of {t.name} whose first axis is not the partition axis")

    def _what(self) -> str:
        return "tile" if self.tensor.on_chip else "tensor"

    def _new_unit_axes(self, key: tuple) -> View:
        """``t[:, None]``: whole axes and new unit axes (NKI's ``nl.sum(t, axis=1)[:, None]`` makes a reduced
        [P] column a [P, 1] tile again): the same elements reshaped, so the partition axis stays first."""
        whole = sum(k is not None for k in key)
        if whole != self.ndim:
            raise unsupported(f"{len(key)} subscripts with None (newaxis) for a {self.ndim}-axis {self._what()} "
                              f"(one ':' per axis)")
        if key[0] is None or self.checks:  # a new partition axis, or runs whose checks name output dims
            sizes = iter(self.shape)
            return self.reshape(tuple(1 if k is None else next(sizes) for k in key))
        old = iter(zip(self.dims, self.axes or range(self.ndim)))
        placed = [((1, 1), -1) if k is None else next(old) for k in key]
        return View(self.tensor, self.offset, tuple(d for d, _ in placed), tuple(a for _, a in placed),
                    vector=self.vector)

    def reshape(self, shape: Any) -> View:
        """The same elements with another shape, row-major; on chip the partition axis stays."""
        from tusk.frontend.tracer import as_shape
        shape = as_shape(_with_inferred(tuple(shape) if isinstance(shape, (tuple, list)) else (shape,), self.elements))
        if math.prod(shape) != self.elements:
            raise unsupported(f"reshaping a {list(self.shape)} view to {list(shape)} (same element count)")
        keep = 1 if self.tensor.on_chip else 0
        if keep and shape[0] != self.shape[0]:
            raise unsupported(f"reshaping a {list(self.shape)} tile to {list(shape)} (the partition axis, "
                              f"{self.shape[0]}, stays first)")
        inner = merge_contiguous(self.dims[keep:])
        if inner is None:
            raise unsupported(f"reshaping a {list(self.shape)} view whose elements are not contiguous")
        step = inner[0] if inner else 1
        new = [(step * math.prod(shape[k + 1:]), n) for k, n in enumerate(shape) if k >= keep]
        axes = tuple(range(len(shape)))
        if keep and self.tensor.par_axis:
            # the partition dim keeps its tensor axis; the new free dims walk none of the tensor's own axes
            # (numbered from 0 they would name a block axis before the partition axis: buf[b].reshape(...) of
            # a (n, par_dim(128), h, w) tile read as a view whose first axis is not the partition axis)
            axes = (self.tensor.par_axis,) + (-1,) * (len(shape) - 1)
        return View(self.tensor, self.offset, self.dims[:keep] + tuple(new), axes)

    # ------------------------------------------------------------------ NKI 2.x view methods
    @property
    def strides(self) -> tuple[int, ...]:
        return tuple(st for st, _ in self.dims)

    @property
    def name(self) -> str:
        return self.tensor.name

    @property
    def buffer(self) -> str:
        return self.tensor.memory

    @property
    def size(self) -> int:
        return self.elements

    def get_pattern(self) -> list[list[int]]:
        """The view's ``[[stride, count], ...]``."""
        return [[st, n] for st, n in self.dims]

    def is_contiguous(self) -> bool:
        """Whether the free axes (all axes in HBM) are row-major contiguous."""
        return merge_contiguous(self.dims[1 if self.tensor.on_chip else 0:]) is not None

    def is_indirect(self) -> bool:
        return False

    def ap(self, pattern: Any, offset: Any = None, scalar_offset: Any = None, vector_offset: Any = None,
           indirect_dim: int = 0, dtype: Any = None) -> View:
        """``t.ap([[stride, count], ...], offset=)``: an explicit access pattern over the storage of ``t``."""
        tensor = self.tensor if dtype is None else self.tensor.reinterpreted(as_dtype(dtype), f"ap(dtype={dtype!r})")
        if tensor.dtype.itemsize != self.dtype.itemsize and not (self.offset.is_static and self.offset.const == 0):
            raise unsupported(f"ap(dtype={dtype!r}) of a view at an offset of {self.tensor.name} (another element "
                              f"width: the pattern and offset count elements of the whole reinterpreted tensor)")
        if vector_offset is not None and scalar_offset is not None:
            raise unsupported("ap(scalar_offset=..., vector_offset=...): one runtime offset per access (KLR's)")
        try:
            dims = tuple((int(st), int(n)) for st, n in pattern)
        except (TypeError, ValueError):
            raise unsupported(f"ap(pattern={pattern!r}) (a list of [stride, count] pairs of ints)") from None
        if not dims or any(n <= 0 for _, n in dims):
            raise unsupported(f"ap(pattern={pattern!r}) (non-empty, every count at least 1)")
        base = self.offset + Affine.of(0 if offset is None else offset)
        if vector_offset is not None:
            return _vector_offset_view(tensor, base, dims, vector_offset, indirect_dim,
                                       self._vector_row() if tensor is self.tensor else None)
        runtime = None
        if scalar_offset is not None:
            if not 0 <= _int(indirect_dim, "ap(indirect_dim=)") < self.ndim:
                raise unsupported(f"ap(indirect_dim={indirect_dim}) of a {self.ndim}-axis view")
            if isinstance(scalar_offset, (View, Tensor)) or is_register(scalar_offset):
                runtime = scalar_offset  # read at run time (a tile, or a register): frontend/scalar_offset.py
            else:
                base = base + Affine.of(scalar_offset) * self.dims[int(indirect_dim)][0]
        v = View(tensor, base, dims, ())
        if runtime is not None:
            v.check_extent("ap")
            from tusk.frontend.scalar_offset import runtime_offset_by_stride

            return runtime_offset_by_stride(v, runtime, self.dims[int(indirect_dim)][0], int(indirect_dim))
        # not bound-checked here: the tracer checks every direct access where an instruction uses it, and
        # kernels build views they use only under a later guard (nki-library's output_projection_tkg)
        return View(tensor, base, dims, ())

    def _vector_row(self) -> int:
        """The row stride a vector offset on this view scales by: the axis-0 step of a view whose axis 0 walks
        the whole HBM tensor in rows of that step (a row-major reshape of it, ``t.reshape((b * s, d))``, or a
        view of such a reshape), else the tensor's own row."""
        row = math.prod(self.tensor.shape[1:])
        if self.tensor.on_chip or not self.dims or not self.offset.is_static:
            return row
        step, count = self.dims[0]
        whole = math.prod(self.tensor.shape)
        if step > 0 and step * count == whole and 0 <= self.offset.const < step:
            return step
        return row

    def vector_select(self, dim: int, vector_offset: Any) -> View:
        """``t.vector_select(0, idx)``: partition ``p`` reads row ``idx[p]`` of the HBM tensor ``t`` (a gather or
        scatter by a DMA), as ``t.ap([[row stride, P], ...the other axes], vector_offset=idx)``."""
        if _int(dim, "vector_select") != 0:
            raise unsupported(f"vector_select({dim}, ...) (NKI's vector offset indexes axis 0)")
        if self.tensor.on_chip:
            raise unsupported("vector_select of an on-chip tile (NKI's vector_select reads rows of an HBM tensor)")
        if self.vector is not None:
            raise unsupported("vector_select of a view already indexed by a tile (one runtime offset per access)")
        idx = vector_offset.view() if isinstance(vector_offset, Tensor) else vector_offset
        if not isinstance(idx, View):
            raise unsupported(f"vector_select(0, {type(vector_offset).__name__}) (an integer [P, 1] SBUF column "
                              f"of row indices)")
        row = self._vector_row()
        if self.dims[0][0] != row:
            raise unsupported(f"vector_select of a view whose axis 0 steps {self.dims[0][0]} elements, not the "
                              f"{row} of a row of {self.tensor.name} (the index is scaled by the tensor's row)")
        pattern = [[row, idx.shape[0]]] + [[st, n] for st, n in self.dims[1:]]
        return self.ap(pattern, vector_offset=idx, indirect_dim=0)

    def check_extent(self, what: str) -> None:
        """Every element the view walks lies inside its tensor (for every value of the loop indices)."""
        lo, hi = self.offset.bounds()
        for st, n in self.dims:
            lo, hi = lo + min(0, st * (n - 1)), hi + max(0, st * (n - 1))
        total = math.prod(self.tensor.shape)
        if lo < 0 or hi >= total:
            raise unsupported(f"{what}: elements {lo}..{hi} are outside {self.tensor.name} ({total} elements)")

    def _dim(self, dim: Any, what: str, *, extra: int = 0) -> int:
        if isinstance(dim, bool) or not isinstance(dim, int) or not -(self.ndim + extra) <= dim < self.ndim + extra:
            raise unsupported(f"{what}({dim!r}) of a {self.ndim}-axis view")
        dim %= self.ndim + extra
        if dim == 0 and self.tensor.on_chip:
            raise unsupported(f"{what}(0) of an on-chip tile (the partition axis stays first)")
        return dim

    def _axes(self) -> tuple[int, ...]:
        return self.axes if len(self.axes) == self.ndim else tuple(range(self.ndim))

    def permute(self, dims: Any) -> View:
        """The axes reordered (on chip the partition axis stays first): no data moves."""
        order = tuple(_int(d, f"permute({dims!r})") for d in (dims if isinstance(dims, (tuple, list)) else ()))
        if sorted(order) != list(range(self.ndim)):
            raise unsupported(f"permute({dims!r}) of a {self.ndim}-axis view")
        if self.tensor.on_chip and order[0] != 0:
            raise unsupported(f"permute({dims!r}) of an on-chip tile (the partition axis stays first)")
        axes = self._axes()
        return View(self.tensor, self.offset, tuple(self.dims[d] for d in order), tuple(axes[d] for d in order))

    def broadcast(self, dim: int, size: int) -> View:
        """A size-1 free axis read ``size`` times (stride 0)."""
        dim = self._dim(dim, "broadcast")
        if self.shape[dim] != 1:
            raise unsupported(f"broadcast({dim}, {size}) of an axis of size {self.shape[dim]} (size 1 only)")
        dims = list(self.dims)
        size = _int(size, "broadcast")
        if size <= 0:
            raise unsupported(f"broadcast({dim}, {size}) (a positive size)")
        dims[dim] = (0, size)
        return View(self.tensor, self.offset, tuple(dims), self._axes())

    def expand_dim(self, dim: int) -> View:
        """A unit axis inserted at ``dim``."""
        dim = self._dim(dim, "expand_dim", extra=1)
        axes = self._axes()
        return View(self.tensor, self.offset, self.dims[:dim] + ((1, 1),) + self.dims[dim:],
                    axes[:dim] + (-1,) + axes[dim:])

    def squeeze_dim(self, dim: int) -> View:
        """A unit axis removed."""
        dim = self._dim(dim, "squeeze_dim")
        if self.shape[dim] != 1:
            raise unsupported(f"squeeze_dim({dim}) of an axis of size {self.shape[dim]}")
        axes = self._axes()
        return View(self.tensor, self.offset, self.dims[:dim] + self.dims[dim + 1:], axes[:dim] + axes[dim + 1:])

    def reshape_dim(self, dim: int, shape: Any) -> View:
        """One axis split into ``shape`` (one -1 inferred)."""
        dim = self._dim(dim, "reshape_dim")
        st, n = self.dims[dim]
        shape = _with_inferred(tuple(_int(d, "reshape_dim") for d in shape), n)
        if math.prod(shape) != n:
            raise unsupported(f"reshape_dim({dim}, {tuple(shape)}) of an axis of size {n}")
        new = tuple((st * math.prod(shape[k + 1:]), c) for k, c in enumerate(shape))
        axes = self._axes()
        return View(self.tensor, self.offset, self.dims[:dim] + new + self.dims[dim + 1:],
                    axes[:dim] + (axes[dim],) * len(new) + axes[dim + 1:])

    def flatten_dims(self, start_dim: int, end_dim: int) -> View:
        """Contiguous axes ``start_dim..end_dim`` merged into one."""
        a = self._dim(start_dim, "flatten_dims")
        b = _int(end_dim, "flatten_dims") % self.ndim
        merged = merge_contiguous(self.dims[a:b + 1]) if a <= b else None
        if merged is None:
            raise unsupported(f"flatten_dims({start_dim}, {end_dim}) of dims that are not contiguous")
        axes = self._axes()
        return View(self.tensor, self.offset, self.dims[:a] + (merged,) + self.dims[b + 1:],
                    axes[:a] + (axes[a],) + axes[b + 1:])

    def rearrange(self, src_pattern: Any, dst_pattern: Any, fixed_sizes: Any = None) -> View:
        """einops-style axes split, reordered and merged by name: a view (reshape_dim, permute, flatten_dims).

        ``t.rearrange(('b', ('h', 'w')), ('b', 'w', 'h'), {'h': 4})``: the axes split into the source
        pattern's groups (one size per group inferred), reordered and merged as the destination pattern names
        them; no data moves."""
        what = f"rearrange({src_pattern!r}, {dst_pattern!r})"
        sizes = dict(fixed_sizes or {})

        def groups(pattern: Any) -> list[tuple[str, ...]]:
            if not isinstance(pattern, (tuple, list)):
                raise unsupported(f"{what}: a pattern is a tuple of names and tuples of names")
            out = []
            for g in pattern:
                names = (g,) if isinstance(g, str) else tuple(g) if isinstance(g, (tuple, list)) else None
                if not names or not all(isinstance(n, str) for n in names):
                    raise unsupported(f"{what}: {g!r} is neither a name nor a tuple of names")
                out.append(names)
            return out

        src, dst = groups(src_pattern), groups(dst_pattern)
        atoms = [n for g in src for n in g]
        if len(src) != self.ndim:
            raise unsupported(f"{what}: {len(src)} source groups for a {self.ndim}-axis view")
        if len(set(atoms)) != len(atoms) or sorted(atoms) != sorted(n for g in dst for n in g):
            raise unsupported(f"{what}: the destination names each source name once")
        if any(not isinstance(v, int) or v < 1 for v in sizes.values()):
            raise unsupported(f"{what}: fixed_sizes {sizes!r} (positive ints)")
        out = self
        for dim in reversed(range(len(src))):  # splitting from the last axis keeps the earlier axes' numbers
            names, n = src[dim], self.shape[dim]
            if len(names) == 1:
                if names[0] in sizes and sizes[names[0]] != n:
                    raise unsupported(f"{what}: {names[0]}={sizes[names[0]]} on an axis of size {n}")
                sizes[names[0]] = n
                continue
            unknown = [k for k in names if k not in sizes]
            if len(unknown) > 1:
                raise unsupported(f"{what}: the sizes of {', '.join(unknown)} (fixed_sizes names all but one)")
            known = math.prod(sizes[k] for k in names if k in sizes)
            if unknown:
                if n % known:
                    raise unsupported(f"{what}: {names!r} of known size {known} does not divide {n}")
                sizes[unknown[0]] = n // known
            if math.prod(sizes[k] for k in names) != n:
                raise unsupported(f"{what}: {names!r} of {math.prod(sizes[k] for k in names)} elements on an axis "
                                  f"of size {n}")
            out = out.reshape_dim(dim, tuple(sizes[k] for k in names))
        out = out.permute(tuple(atoms.index(n) for g in dst for n in g))
        at = 0
        for g in dst:
            if len(g) > 1:
                out = out.flatten_dims(at, at + len(g) - 1)
            at += 1
        return out

    def slice(self, dim: int, start: Any, end: Any, step: int = 1) -> View:
        """``t[..., start:end:step, ...]`` on axis ``dim``."""
        if not 0 <= _int(dim, "slice") < self.ndim:
            raise unsupported(f"slice({dim}, ...) of a {self.ndim}-axis view")
        return self[(slice(None),) * int(dim) + (slice(start, end, step),)]

    def select(self, dim: int, index: Any) -> View:
        """``t[..., index, ...]`` on axis ``dim``: an int, a loop index, or (HBM) a one-element int SBUF tile.

        The tile is a coordinate read at run time (frontend/scalar_offset.py)."""
        if isinstance(index, (View, Tensor)) and (self.tensor.on_chip or not is_coordinate_tile(index)):
            raise unsupported("select(dim, <a tile>) (an index read at run time: a one-element integer SBUF tile, "
                              "on an HBM tensor)")
        if not 0 <= _int(dim, "select") < self.ndim:
            raise unsupported(f"select({dim}, ...) of a {self.ndim}-axis view")
        return self[(slice(None),) * int(dim) + (index,)]

    def view(self, dtype: Any) -> View:
        """The same bytes read as ``dtype``; another element width rescales the whole tensor's last axis.

        A view of the same width keeps its pattern; one of another width must be the whole tensor, and is
        the whole reinterpreted tensor (Tensor.reinterpreted), to subscript."""
        d = as_dtype(dtype)
        if d == self.dtype:
            return self
        what = f"view({dtype!r})"
        t = self.tensor
        if d.itemsize == self.dtype.itemsize:
            return View(t.reinterpreted(d, what), self.offset, self.dims, self.axes, self.checks, self.vector)
        new = t.reinterpreted(d, what)
        for whole, of_new in ((t.view(), new.view), (t._user_view(), new._user_view)):
            if self.offset.is_static and self.offset.const == 0 and self.vector is None \
                    and (self.dims, self.axes) == (whole.dims, whole.axes):
                return of_new()
        part = self._rescaled_part(new)
        if part is not None:
            return part
        raise unsupported(f"{what} of part of {t.name} {t.dtype}{list(t.shape)} (another element width "
                          f"reinterprets a whole tensor; subscript the result)")

    reinterpret_cast = view

    def _rescaled_part(self, new: Tensor) -> View | None:
        """Part of an HBM tensor read as another element width (``x[rows, -2:].view(nl.int32)``: two bfloat16
        columns as one int32): the same bytes of ``new`` (the whole tensor reinterpreted), when the view's
        innermost dim is contiguous and its offset, its other strides and that dim's bytes are whole elements
        of the new width; else None."""
        t = self.tensor
        a, b = t.dtype.itemsize, new.dtype.itemsize
        if t.on_chip or self.vector is not None or not self.dims or self.dims[-1][0] != 1:
            return None
        if self.axes and tuple(self.axes) != tuple(sorted(self.axes)):
            return None  # a permuted view: its last dim is not the tensor's innermost axis
        offset = self.offset.const * a
        terms_ok = all(c * a % b == 0 for _, c in self.offset.terms)
        strides = [st * a for st, _ in self.dims[:-1]]
        last = self.dims[-1][1] * a
        if offset % b or not terms_ok or any(st % b for st in strides) or last % b:
            return None
        dims = tuple((st // b, n) for st, (_, n) in zip(strides, self.dims[:-1])) + ((1, last // b),)
        off = Affine(offset // b, tuple((v, c * a // b) for v, c in self.offset.terms))
        return View(new, off, dims, self.axes)

    def broadcast_to(self, shape: Any) -> View:
        """Numpy broadcasting: a one-partition tile on the PE (a ones matmul), size-1 free axes by a stride-0 copy."""
        from tusk.frontend.nki import language as nl
        from tusk.frontend.tracer import as_shape
        return nl._broadcast_to(self, as_shape(shape))

    def narrowed(self, counts: dict[int, int]) -> View:
        """Keep only the first ``counts[d]`` indices of output dim ``d`` (a mask)."""
        dims = tuple((s, min(n, counts.get(d, n))) for d, (s, n) in enumerate(self.dims))
        vector = self.vector
        if vector is not None and dims[0][1] != vector.shape[0]:
            vector = vector.narrowed({0: dims[0][1]})
        return View(self.tensor, self.offset, dims, self.axes, self.checks, vector)

    def windowed(self, starts: dict[int, int], counts: dict[int, int]) -> View:
        """Keep ``counts[d]`` indices of output dim ``d`` from index ``starts[d]`` on (a mask with a lower
        bound); the arange runs' bound checks start there too."""
        starts = {d: st for d, st in starts.items() if st}
        if not starts:
            return self.narrowed(counts)
        dims = tuple((s, max(0, min(n - starts.get(d, 0), counts.get(d, n)))) for d, (s, n) in enumerate(self.dims))
        vector = self.vector
        if vector is not None:
            if set(starts) != {0}:
                raise unsupported("a mask with a lower bound on the free axes of an indirect (index-tile) access")
            vector = vector.windowed({0: starts[0]}, {0: dims[0][1]})
        offset = self.offset + sum(st * self.dims[d][0] for d, st in starts.items() if vector is None or d)
        checks = tuple((runs, first + sum(starts.get(d, 0) * step for d, step in runs), size, axis)
                       for runs, first, size, axis in self.checks)
        return View(self.tensor, offset, dims, self.axes, checks, vector, window=tuple(starts.get(d, 0)
                                                                                         for d in range(len(dims))))

    def row_window(self, dim: int, row: int) -> View:
        """Index ``row`` of output dim ``dim`` alone, the dim kept with one index (a mask's row piece)."""
        if self.vector is not None:
            raise unsupported("a mask that cuts a row part way on an indirect (index-tile) access")
        stride, _ = self.dims[dim]
        dims = tuple((s, 1) if d == dim else (s, n) for d, (s, n) in enumerate(self.dims))
        checks = tuple((runs, first + sum(row * step for d, step in runs if d == dim), size, axis)
                       for runs, first, size, axis in self.checks)
        return View(self.tensor, self.offset + row * stride, dims, self.axes, checks)

    def with_dims(self, dims: tuple[tuple[int, int], ...]) -> View:
        return View(self.tensor, self.offset, dims, self.axes[:len(dims)] if self.axes else (),
                    tuple(c for c in self.checks if all(d < len(dims) for d, _ in c[0])), self.vector)

    # ------------------------------------------------------------------ the 1.x nki.tensor methods
    def astype(self, dtype: Any) -> View:
        """A copy cast to ``dtype`` (``nl.copy(x, dtype=)``: a copy always happens, as nki.tensor documents)."""
        from tusk.frontend.nki import language as nl
        return nl.copy(self, dtype=dtype)

    def expand_dims(self, axis: Any) -> View:
        """A unit axis inserted at ``axis`` (each of a tuple's, in order): ``nl.expand_dims``."""
        from tusk.frontend.nki.nl_memory import expand_dims
        out = self
        for a in axis if isinstance(axis, (tuple, list)) else (axis,):
            out = expand_dims(out, a)
        return out

    def assert_shape(self, shape: Any) -> View:
        """This view, once its shape is ``shape`` (else the trace stops at the caller's line)."""
        want = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
        if want != self.shape:
            from tusk.frontend.errors import TraceError
            raise TraceError(f"assert_shape: the {self._what()} is {list(self.shape)}, not {list(want)}")
        return self

    # ------------------------------------------------------------------ operators as nl calls
    def assign(self, value: Any) -> None:
        from tusk.frontend.nki import language as nl
        nl._assign(self, value)

    def __setitem__(self, key: Any, value: Any) -> None:
        self[key].assign(value)

    def _bin(self, name: str, other: Any, reverse: bool = False) -> Any:
        from tusk.frontend.nki import language as nl
        fn = getattr(nl, name)
        return fn(other, self) if reverse else fn(self, other)

    def __add__(self, o):
        if _is_index(o):  # `nl.arange(n)[:, None] + s`: a coordinate read at run time
            from tusk.frontend.scalar_offset import runtime_index
            return runtime_index(self, o)
        return self._bin("add", o)

    def __radd__(self, o):
        if _is_index(o):
            from tusk.frontend.scalar_offset import runtime_index
            return runtime_index(self, o)
        return self._bin("add", o, True)

    def __sub__(self, o):
        if _is_index(o):
            raise unsupported("a tile minus nl.arange indices (a runtime coordinate is added to indices)")
        return self._bin("subtract", o)

    def __rsub__(self, o):
        if _is_index(o):
            raise unsupported("nl.arange indices minus a tile (a runtime coordinate is added to indices: negate "
                              "the tile with nl.multiply first)")
        return self._bin("subtract", o, True)

    def __mul__(self, o):
        return self._bin("multiply", o)

    def __rmul__(self, o):
        return self._bin("multiply", o, True)

    def __truediv__(self, o):
        return self._bin("divide", o)

    def __rtruediv__(self, o):
        return self._bin("divide", o, True)

    def __neg__(self):
        from tusk.frontend.nki import language as nl
        return nl.negative(self)

    # ``mask_tile > 0``: a tile of 1.0 and 0.0, as nl.greater (== and != stay Python's: views are compared
    # by identity inside the front end)
    def __gt__(self, o):
        return self._bin("greater", o)

    def __ge__(self, o):
        return self._bin("greater_equal", o)

    def __lt__(self, o):
        return self._bin("less", o)

    def __le__(self, o):
        return self._bin("less_equal", o)

    def __iadd__(self, o):
        from tusk.frontend.nki import language as nl
        nl._accumulate(self, o)
        return self

    def __isub__(self, o):
        from tusk.frontend.nki import language as nl
        nl._assign(self, nl.subtract(self, o))
        return self

    def __imul__(self, o):
        from tusk.frontend.nki import language as nl
        nl._assign(self, nl.multiply(self, o))
        return self

    def __bool__(self) -> bool:
        raise unsupported("the truth value of a tile (there is no runtime if)")

    def __repr__(self) -> str:
        return f"<view of {self.tensor.name} {list(self.shape)} @ {self.offset}>"



def _moved_checks(checks: tuple, moved: list[tuple[Any, list[tuple[int, int]]]], where: dict[int, int]) -> tuple:
    """A view's arange run checks carried through a subscript of it: each run on an old output dim becomes
    the first index the subscript picks plus runs on the new dims it walks (a dropped dim: none), so
    ``tile[i_k, 2 * 128 * b + i_t * 128 + i_m][:, row, :]`` checks row ``row``'s run, not a stale dim's."""
    out = []
    for runs, first, size, axis in checks:
        new_runs = []
        for dim, step in runs:
            if dim >= len(moved):
                continue  # a unit dim the view no longer has: its run walks nothing
            start, walks = moved[dim]
            first = first + start * step
            new_runs += [(where[j], step * mult) for j, mult in walks]
        out.append((tuple(new_runs), first, size, axis))
    return tuple(out)


def _slice_bounds(k: slice, n: int) -> tuple[Affine, Any, int]:
    step = 1 if k.step is None else int(k.step)
    if step <= 0:
        raise unsupported("a slice with a step that is not positive")
    start = Affine.of(0 if k.start is None else k.start)
    stop = n if k.stop is None else k.stop
    stop = Affine.of(stop)
    if start.is_static and stop.is_static:
        s, e = start.const, stop.const
        if s < 0:
            s += n
        if e < 0:
            e += n
        if not 0 <= s <= n or not 0 <= e <= n:
            raise unsupported(f"slice {s}:{e} is outside an axis of size {n}")
        return Affine(s), Affine(e), step
    return start, stop, step


def _int(v: Any, what: str) -> int:
    """A Python int argument of a view method (a kernel's mistake otherwise, named)."""
    if isinstance(v, bool) or not hasattr(v, "__index__"):
        raise unsupported(f"{what} argument {v!r} (an int)")
    return int(v.__index__())


def _staged_index(index: View) -> View:
    """An index tile at an offset that moves with a loop (``table[j, i_p, k]`` in an nl.sequential_range over
    ``k``, vLLM's paged-attention block table): KLR's vector offset names a tile at a static place, so the
    column is copied by DMA, bit for bit, into a fresh [P, 1] tile right where the subscript is, which the
    gather then reads."""
    from tusk.frontend.tracer import current

    tr = current()
    stage = tr.tile((index.shape[0], 1), index.dtype, "sbuf", "index")
    tr.op("dma", (index,), (stage,), dst=stage, src=index)
    return stage


def _unit_slice_start(k: Any) -> Any:
    """A one-index slice (``b:b + 1``, ``nl.ds(b, 1)``) as its start index; anything else as it is."""
    if isinstance(k, DynSlice):
        return k.start if k.size == 1 else k
    if not isinstance(k, slice) or k.start is None or k.stop is None or k.step not in (None, 1):
        return k
    try:
        n = Affine.of(k.stop) - Affine.of(k.start)
    except TraceError:
        return k
    return k.start if isinstance(n, Affine) and n.is_static and n.const == 1 else k


def _static_for_gather(k: Any, pos: int, axis: int) -> int:
    """A single index before a gather's axis as an int: a loop index unrolls its loop (Affine._unrolled)."""
    try:
        a = Affine.of(k)
    except TraceError:
        raise unsupported(f"a subscript of type {type(k).__name__} on axis {pos} before an index tile") from None
    if not a.is_static:
        try:
            a = Affine(a._unrolled())
        except Unsupported:
            raise unsupported(f"an index tile on axis {axis} under a loop index on axis {pos} that cannot unroll: "
                              "KLR's vector-offset access (a gather) has a static base offset only, a scalar "
                              "(loop register) offset and a vector offset exclude each other") from None
    return a.const


def merge_contiguous(dims: tuple[tuple[int, int], ...]) -> tuple[int, int] | None:
    """Row-major dims as one (stride, count) pair, or None when they are not contiguous."""
    if not dims:
        return None
    st, n = dims[-1]
    for s_outer, n_outer in reversed(dims[:-1]):
        if n_outer != 1 and s_outer != st * n:
            return None
        n *= n_outer
    return st, n


def _with_inferred(shape: tuple, total: int) -> tuple:
    """A shape with one -1 resolved so that it holds ``total`` elements."""
    shape = tuple(int(d) if hasattr(d, "__index__") else d for d in shape)
    if shape.count(-1) == 1:
        known = math.prod(d for d in shape if d != -1)
        return tuple(total // known if d == -1 else d for d in shape)
    return shape


def _count(start: Affine, stop: Affine, step: int) -> int:
    span = stop - start
    if not span.is_static:
        raise unsupported(f"a slice whose length depends on a loop index ({start}:{stop})")
    return max(0, len(range(0, span.const, step)))


_VIEW_METHODS = frozenset({"ap", "permute", "rearrange", "broadcast", "expand_dim", "squeeze_dim", "reshape_dim", "flatten_dims",
                           "slice", "select", "vector_select", "get_pattern", "is_contiguous", "is_indirect", "size", "buffer",
                           "offset", "reinterpret_cast", "astype", "expand_dims", "assert_shape"})

# the operators make Tensor behave as its whole view
for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
              "__rtruediv__", "__neg__", "__iadd__", "__isub__", "__imul__", "__gt__", "__ge__", "__lt__", "__le__"):
    def _fwd(self, *a, _n=_name):
        v = self.view()
        r = getattr(v, _n)(*a)
        return self if r is v else r
    setattr(Tensor, _name, _fwd)
