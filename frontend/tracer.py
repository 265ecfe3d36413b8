"""The trace being recorded: a flat program of operations and loop markers over symbolic tensors.

``nl``/``nisa`` calls append :class:`Op`\\ s; a dynamic loop appends
:class:`LoopBegin` ... :class:`LoopEnd` around its body (traced once).  After
the kernel returns, :mod:`tusk.frontend.alloc` places the on-chip tensors and
:mod:`tusk.frontend.emit` writes the KLR kernel.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tusk.frontend.affine import LoopVar
from tusk.frontend.errors import TraceError, current_user_line, unsupported
from tusk.frontend.specs import MAX_ELEMENTS
from tusk.frontend.tensors import PARTITIONS, Dtype, Tensor, View


@dataclass
class Op:
    kind: str                      # an emit.py handler: dma, tensor_tensor, tensor_scalar, activation, ...
    params: dict[str, Any]         # views under "dst"/"src"/... plus scalar parameters
    line: int
    reads: tuple[View, ...] = ()
    writes: tuple[View, ...] = ()


@dataclass
class LoopBegin:
    var: LoopVar
    line: int


@dataclass
class LoopEnd:
    var: LoopVar
    line: int


@dataclass
class Tracer:
    name: str
    filename: str                  # the kernel file (statement positions name it)
    prog: list[Any] = field(default_factory=list)
    tensors: list[Tensor] = field(default_factory=list)
    loops: list[LoopVar] = field(default_factory=list)
    program_ids: tuple[int, ...] = ()
    grid: tuple[int, ...] = ()
    identity: Tensor | None = None
    identity_iota: Tensor | None = None
    broken_loop: bool = False
    peel: dict[int, int] = field(default_factory=dict)  # dynamic loop ordinal -> iterations kept a loop
    loop_ordinal: int = 0
    _names: set[str] = field(default_factory=set)
    _next: dict[str, int] = field(default_factory=dict)  # per name base: the last suffix handed out
    _hbm_by_ordinal: dict[int, Tensor] = field(default_factory=dict)   # SPMD: one shared_hbm per call site
    _hbm_ordinal: int = 0

    # ------------------------------------------------------------------ tensors
    def unique(self, hint: str) -> str:
        base = hint or "t"
        name, k = base, self._next.get(base, 1)
        while name in self._names:
            k += 1
            name = f"{base}.{k}"
        self._next[base] = k
        self._names.add(name)
        return name

    def new_tensor(self, shape: tuple[int, ...], dtype: Dtype, memory: str, hint: str = "", *,
                   par_axis: int = 0, role: str = "internal") -> Tensor:
        shape = as_shape(shape)
        if memory in ("sbuf", "psum") and shape[par_axis] > PARTITIONS:
            raise unsupported(f"a {memory} tile with {shape[par_axis]} partitions (at most {PARTITIONS}; "
                              "tile the partition dimension)")
        if memory in ("hbm", "shared_hbm") and role == "internal" and self.grid:
            # every SPMD program instance runs the kernel; the n-th shared_hbm allocation is one buffer
            ordinal = self._hbm_ordinal
            self._hbm_ordinal += 1
            hit = self._hbm_by_ordinal.get(ordinal)
            if hit is not None:
                if hit.shape != shape or hit.dtype != dtype:
                    raise unsupported("an SPMD program allocating a different HBM tensor than program 0")
                return hit
        t = Tensor(self.unique(hint or ("hbm" if memory.endswith("hbm") else memory)), shape, dtype, memory,
                   par_axis=par_axis, role=role, site=len(self.prog))
        self.tensors.append(t)
        if memory in ("hbm", "shared_hbm") and role == "internal" and self.grid:
            self._hbm_by_ordinal[self._hbm_ordinal - 1] = t
        return t

    def tile(self, shape: tuple[int, ...], dtype: Dtype, memory: str = "sbuf", hint: str = "") -> View:
        return self.new_tensor(shape, dtype, memory, hint).view()

    def identity_tile(self) -> Tensor:
        """A 128x128 float32 identity in SBUF (PE transposes multiply by it); built once, first."""
        if self.identity is None:
            t = Tensor(self.unique("identity"), (PARTITIONS, PARTITIONS), Dtype("float32"), "sbuf", site=-1)
            iota = Tensor(self.unique("identity_iota"), (PARTITIONS, PARTITIONS), Dtype("int32"), "sbuf", site=-1)
            self.tensors += [t, iota]
            self.identity, self.identity_iota = t, iota
        return self.identity

    # ------------------------------------------------------------------ program
    def line(self) -> int:
        where = current_user_line()
        return where[1] if where else 0

    def op(self, kind: str, reads: tuple[View, ...], writes: tuple[View, ...], **params: Any) -> Op:
        o = Op(kind, params, self.line(), tuple(reads), tuple(writes))
        if any(v.elements == 0 for v in (*reads, *writes)):
            return o  # a mask= that keeps nothing in this (peeled) iteration: no operation
        for v in (*reads, *writes):
            v.check_bounds()
        self.prog.append(o)
        return o

    @contextlib.contextmanager
    def loop(self, var: LoopVar) -> Iterator[None]:
        self.prog.append(LoopBegin(var, self.line()))
        self.loops.append(var)
        try:
            yield
        finally:
            self.loops.pop()
        self.prog.append(LoopEnd(var, self.line()))

    def retarget(self, value: View, dst: View) -> bool:
        """``dst[...] = <op>(...)``: let the op that just made ``value`` write ``dst`` directly."""
        if not self.prog or not isinstance(self.prog[-1], Op):
            return False
        last = self.prog[-1]
        if (len(last.writes) != 1 or last.writes[0] is not value or "dst" not in last.params
                or value.tensor.site != len(self.prog) - 1 or value.shape != dst.shape
                or value.tensor.dtype != dst.tensor.dtype or last.kind == "matmul" and dst.memory != "psum"
                or last.kind == "dma" and dst.memory not in ("sbuf", "psum")):
            return False
        if any(r.tensor is dst.tensor for r in last.reads):
            return False
        last.params["dst"] = dst
        last.writes = (dst,)
        return True


def as_shape(shape: Any) -> tuple[int, ...]:
    """A tensor shape from the kernel: a tuple/list of positive ints (nl.par_dim, numpy ints allowed)."""
    if not isinstance(shape, (tuple, list)) or not shape:
        raise unsupported(f"a tensor shape {shape!r} (a non-empty tuple of ints)")
    dims = []
    for d in shape:
        if isinstance(d, bool) or not hasattr(d, "__index__"):
            raise unsupported(f"a tensor shape {tuple(shape)!r} (dimension {d!r} is not an int)")
        dims.append(int(d.__index__()))
    total = 1
    for d in dims:
        if d <= 0:
            raise unsupported(f"a tensor shape {tuple(dims)} (every dimension must be at least 1)")
        total *= d
    if total > MAX_ELEMENTS:
        raise unsupported(f"a tensor shape {tuple(dims)} of {total} elements")
    return tuple(dims)


_CURRENT: list[Tracer] = []


def current() -> Tracer:
    if not _CURRENT:
        raise TraceError("an NKI language call outside a kernel being traced (run it with `tusk trace`)")
    return _CURRENT[-1]


@contextlib.contextmanager
def tracing(tr: Tracer) -> Iterator[Tracer]:
    _CURRENT.append(tr)
    try:
        yield tr
    finally:
        _CURRENT.pop()
