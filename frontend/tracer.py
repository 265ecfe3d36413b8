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
from tusk.frontend.errors import TraceError, Unsupported, current_user_line, unsupported
from tusk.frontend.specs import MAX_ELEMENTS
from tusk.frontend.tensors import PARTITIONS, Dtype, Tensor, View
from tusk.stages.limits import CEILING, TOO_MANY  # the backend's ceiling and its message

DMA_KINDS = frozenset({"dma", "dma_transpose"})  # the instructions whose access may gather on-chip rows


@dataclass
class Op:
    kind: str                      # an emit.py handler: dma, tensor_tensor, tensor_scalar, activation, ...
    params: dict[str, Any]         # views under "dst"/"src"/... plus scalar parameters
    line: int
    reads: tuple[View, ...] = ()
    writes: tuple[View, ...] = ()
    split: bool = False            # one of the two pieces of a call whose mask= cuts a row part way


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
    written_marks: dict = field(default_factory=dict)  # language.written_before: elements written, by tensor
    identity_iota: Tensor | None = None
    broken_loop: tuple[str, int] | None = None  # where a `break`/`return` left an affine/sequential loop
    peel: dict[int, int] = field(default_factory=dict)  # dynamic loop ordinal -> iterations kept a loop
    unroll_all: bool = False       # every nl.affine_range/sequential_range runs as Python's range (NKI 2.x)
    loop_ordinal: int = 0
    _names: set[str] = field(default_factory=set)
    _next: dict[str, int] = field(default_factory=dict)  # per name base: the last suffix handed out
    _hbm_by_ordinal: dict[int, Tensor] = field(default_factory=dict)   # SPMD: one shared_hbm per call site
    _hbm_ordinal: int = 0
    vregs: int = 0                 # nisa.register_alloc: virtual registers handed out
    weight: int = 1                # iterations of the enclosing dynamic loops: what one statement unrolls to
    instructions: int = 0          # instructions the statements so far unroll to (at least one each)
    row_pieces: dict[int, View] = field(default_factory=dict)  # id(masked view) -> its mask's row piece
    # a call whose mask= kept nothing wrote nothing: (program length then, the tensors it would have written),
    # so that ``dst[...] = <that call>`` and ``dst += <that call>`` write nothing either, as in NKI
    dropped: tuple[int, tuple[Tensor, ...]] = (-1, ())
    piece_writes: tuple[int, set[int]] = (0, set())  # the line and the tensors the last split call wrote
    phased: bool = False           # a grid launch runs its programs phase by phase (frontend.phases)
    phases: Any = None             # the phased launch running now
    # ``dst[...] = v`` let the op that made ``v`` write ``dst`` (:meth:`retarget`); ``v`` may still be read
    # (``z = nl.exp(a); m[...] = z; nl.store(out, z)``): id(v's tensor) -> (the tensor, the op, the view the op
    # wrote before, the view it writes now), until a later read of the tensor copies it back (:meth:`_op`)
    retargeted: dict[int, tuple[Tensor, Op, View, View]] = field(default_factory=dict)
    # id(staging tile) -> (the tile, the SBUF access moved at run time it stands for): what an instruction
    # writes to the tile is copied back by DMA right after it (frontend/scalar_offset.py staged)
    write_back: dict[int, tuple[View, View]] = field(default_factory=dict)
    write_back_ops: set[int] = field(default_factory=set)  # id() of those DMAs: not the instruction's own ops
    # id() of the PSUM banks a ``+=`` of a matmul is computed into before its DVE add (isa_ops.nc_matmul): NKI
    # accumulates in the sum's own bank, so they are not the kernel's (alloc.sums_to_sbuf)
    sum_parts: set[int] = field(default_factory=set)
    spill_staging: set[int] = field(default_factory=set)  # id() of alloc_spill's staging tiles
    # id() of the tensors the kernel placed itself (ncc.sbuf.alloc / mod_alloc, NKI 2.x address=): NKI's
    # compiler spills only what it places, so alloc_spill leaves them
    directly_allocated: set[int] = field(default_factory=set)

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
        shared = memory in ("hbm", "shared_hbm") and role == "internal" and bool(self.grid)
        if shared and memory == "hbm" and self.phases is not None:
            # nl.hbm / nl.private_hbm is each program's own: programs that meet at barriers run interleaved
            # here, so one program's private buffer must not be another's
            shared = False
        if shared:
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
        if shared:
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
        pieces, self.row_pieces = self.row_pieces, {}
        if not pieces:
            self._after_pieces(kind, (*reads, *writes))
            return self._op(kind, tuple(reads), tuple(writes), params)
        if not all(id(v) in pieces for v in (*reads, *writes)):
            raise unsupported(f"a mask= that cuts a row part way on an instruction ({kind}) that reads or writes "
                              "tiles the mask does not narrow (only whole rows can be masked there)")
        # a mask= that cuts a row part way: the call on the whole rows, then on the cut row

        def sub(x: Any) -> Any:
            if isinstance(x, (tuple, list)):
                return type(x)(sub(y) for y in x)
            return pieces.get(id(x), x) if isinstance(x, View) else x
        self._op(kind, tuple(reads), tuple(writes), params, split=True)
        self.piece_writes = (self.line(), {id(w.tensor) for w in writes})
        return self._op(kind, sub(tuple(reads)), sub(tuple(writes)), {k: sub(v) for k, v in params.items()},
                        split=True)

    def drop_writes(self, tensors: tuple[Tensor, ...]) -> None:
        """The call about to return wrote nothing to ``tensors`` (its mask= kept no element)."""
        self.dropped = (len(self.prog), tensors)

    def unwritten(self, out: View) -> View:
        """The result of a call whose mask= kept no element: ``out`` as it was, unwritten."""
        self.drop_writes((out.tensor,))
        return out

    def wrote_nothing(self, value: Any) -> bool:
        """Is ``value`` what the last call returned, a call that wrote nothing (:meth:`drop_writes`)?"""
        at, tensors = self.dropped
        tensor = getattr(value, "tensor", value)
        return at == len(self.prog) and any(t is tensor for t in tensors)

    def _after_pieces(self, kind: str, views: tuple[View, ...]) -> None:
        """A call lowered to several instructions runs only its first in pieces: a later instruction of the
        same line on what the pieces wrote would miss the cut row, so it is refused."""
        line, written = self.piece_writes
        if written and line == self.line() and any(id(v.tensor) in written for v in views):
            raise unsupported(f"a mask= that cuts a row part way, then an instruction ({kind}) of the same line "
                              "on its result (only a call of one instruction runs in two pieces; put the "
                              "rest on a line of its own)")

    def _op(self, kind: str, reads: tuple[View, ...], writes: tuple[View, ...], params: dict[str, Any],
            split: bool = False) -> Op:
        if kind not in DMA_KINDS and any(v.vector is not None and v.tensor.on_chip for v in (*reads, *writes)):
            raise unsupported(f"an instruction ({kind}) on a tile indexed by a tile (on chip only a DMA gathers: "
                              "nisa.dma_copy, nisa.dma_transpose)")
        if (kind not in DMA_KINDS and kind not in ("tensor_load", "tensor_store") or params.get("accumulate")) \
                and any(v.dtype in ("int64", "uint64") for v in (*reads, *writes)):
            raise unsupported(f"an instruction ({kind}) on a 64-bit integer tile (NKI's compute instructions take "
                              "no nl.int64 / nl.uint64: DMA copies, views and nisa.scalar_load / scalar_store do)")
        runtime = [s for s in (getattr(v, "scalar", None) for v in (*reads, *writes)) if s is not None]
        if runtime:
            if kind not in DMA_KINDS:
                raise unsupported(f"an instruction ({kind}) on an access moved by a value read at run time (only a "
                                  "DMA moves by one)")
            # the instruction reads the offset tiles too: they order it after the writes of them (a register
            # offset is read in program order, as KLR's registers are)
            reads = tuple(reads) + tuple(s for s in runtime if isinstance(s, View) and not any(s is r for r in reads))
        o = Op(kind, params, self.line(), reads, writes, split)
        if any(v.elements == 0 for v in (*reads, *writes)):
            self.drop_writes(tuple(w.tensor for w in writes))
            return o  # a mask= that keeps nothing (here, or in this peeled iteration): no operation
        if self.retargeted:
            self._restore_retargeted(reads)
        for v in (*reads, *writes):
            v.check_bounds()
            if v.vector is None and getattr(v, "scalar", None) is None:
                # every element a direct access walks lies in its tensor, whatever view it was derived from (an
                # .ap() view is checked only here: frontend/tensors.py)
                v.check_extent("an access")
            v.check_partition_first()
        self.prog.append(o)
        self.instructions += self.weight
        if self.instructions >= CEILING:
            raise too_many(self.instructions)
        if len(self.prog) >= MAX_STATEMENTS:
            raise too_long(len(self.prog))
        back = {id(w.tensor): self.write_back[id(w.tensor)] for w in writes if id(w.tensor) in self.write_back}
        for stage, moved in back.values():
            self.write_back_ops.add(id(self._op("dma", (stage,), (moved,), {"dst": moved, "src": stage})))
        return o

    @contextlib.contextmanager
    def loop(self, var: LoopVar) -> Iterator[None]:
        self.prog.append(LoopBegin(var, self.line()))
        self.loops.append(var)
        weight = self.weight
        self.weight *= var.trip
        try:
            yield
        finally:
            self.loops.pop()
            self.weight = weight
        self.prog.append(LoopEnd(var, self.line()))

    def retarget(self, value: View, dst: View) -> bool:
        """``dst[...] = <op>(...)``: let the op that just made ``value`` write ``dst`` directly."""
        if not self.prog or not isinstance(self.prog[-1], Op):
            return False
        last = self.prog[-1]
        if last.split and any(w.tensor is value.tensor for w in last.writes):
            raise unsupported("assigning the result of a call whose mask= cuts a row part way to a view "
                              "(the call writes two pieces; give the destination to the call, or nl.store it)")
        target = _retargeted(last, value, dst)
        if (target is None or "dst" not in last.params
                or value.tensor.site != len(self.prog) - 1 or value.shape != dst.shape
                or value.tensor.dtype != dst.tensor.dtype or last.kind == "matmul" and dst.memory != "psum"
                or last.kind == "dma" and dst.memory not in ("sbuf", "psum")):
            return False
        if any(r.tensor is value.tensor or r.tensor is dst.tensor and not _in_place(last, r, target)
               for r in last.reads):
            # an op that reads what it writes (nl.where's copyPredicated over its y) keeps its own destination
            return False
        self.retargeted[id(value.tensor)] = (value.tensor, last, last.writes[0], target)
        last.params["dst"] = target
        last.writes = (target,)
        return True

    def _restore_retargeted(self, views: tuple[View, ...]) -> None:
        """An op reads a tile whose making op now writes another tile (:meth:`retarget`): copy that tile's
        values back right after the making op, before anything can change them."""
        for v in views:
            entry = self.retargeted.get(id(v.tensor))  # the entry holds the tensor: its id names it alone
            if entry is None:
                continue
            _, made_by, was, now = entry
            pos = next((k for k in range(len(self.prog) - 1, -1, -1) if self.prog[k] is made_by), None)
            if pos is None:  # recorded ahead of the making op (an op inserted earlier): nothing to restore yet
                continue
            del self.retargeted[id(v.tensor)]
            with self.inserting_after(pos):
                self.prog.append(Op("copy", {"dst": was, "src": now}, made_by.line, (now,), (was,)))

    def insert_before(self, pos: int, op: Op) -> None:
        """Put ``op`` at program position ``pos``; tensors made at or after it move with it (sites)."""
        with self.inserting_after(pos - 1):
            self.prog.append(op)

    @contextlib.contextmanager
    def inserting_after(self, pos: int) -> Iterator[None]:
        """Record ops (and tensors) as if the program ended just after entry ``pos``; the entries after it,
        and the sites of the tensors made before, move past what was recorded."""
        tail = self.prog[pos + 1:]
        del self.prog[pos + 1:]
        made = len(self.tensors)
        try:
            yield
        finally:
            added = len(self.prog) - (pos + 1)
            for t in self.tensors[:made]:
                if t.site > pos:
                    t.site += added
            self.prog.extend(tail)


# Ops whose output element i is made from element i of each input alone: one that reads exactly the elements it
# writes may write them in place -- `t[...] = nisa.activation(op, data=t[...])` keeps one tile, as NKI does (two
# copies of a tile larger than half of SBUF do not fit)
ELEMENTWISE = frozenset({"copy", "tensor_tensor", "tensor_scalar", "activation", "reciprocal"})


def _in_place(last: Op, read: View, target: View) -> bool:
    """``last`` may write ``target`` although it reads ``read``: the same elements, one by one."""
    return (last.kind in ELEMENTWISE and read.tensor is target.tensor and read.dims == target.dims
            and read.offset.const == target.offset.const and read.offset.terms == target.offset.terms
            and read.vector is None and target.vector is None)


def _retargeted(last: Op, value: View, dst: View) -> View | None:
    """Where ``last`` writes when it writes ``dst`` instead of ``value``: ``dst`` itself, or -- for an op that
    a mask= narrowed (``buf[...] = nl.load(src, mask=...)``) -- the same narrowing of ``dst``, so the rest of
    ``dst`` keeps what it held, as the masked statement leaves it in NKI."""
    if len(last.writes) != 1:
        return None
    w = last.writes[0]
    if w is value:
        return dst
    starts = w.window or (0,) * len(w.dims)
    moved = sum(st * ws for st, (ws, _) in zip(starts, w.dims))
    same_place = w.tensor is value.tensor and w.offset.const == value.offset.const + moved and \
        w.offset.terms == value.offset.terms and w.vector is None and value.vector is None
    if not same_place or len(w.dims) != len(value.dims) or len(dst.dims) != len(value.dims):
        return None
    if any(ws != vs or st + wn > vn for st, (ws, wn), (vs, vn) in zip(starts, w.dims, value.dims)):
        return None
    return dst.windowed(dict(enumerate(starts)), {d: wn for d, (_, wn) in enumerate(w.dims)})


# ---------------------------------------------------------------------------- limits
# The backend's ceiling (seed 000, stages/limits.py): a kernel that unrolls to 25,000,000 instructions or more
# is refused; the trace refuses it as soon as the statements it has recorded, times the iterations of the
# loops around them, reach the ceiling -- or when a loop, a launch grid or a Python range, projected from the
# iterations traced so far, will.  Each statement is at least one instruction.
# Statements one trace records.  Each is Python objects the tracer keeps and then places and writes: measured,
# 720,000 statements took 554 s and 2.3 GB (0.77 ms and 3.2 kB each) and made 198 MB of KLR.  Past this many a
# trace is minutes long; a loop unrolled in Python that far should stay a loop (nl.affine_range /
# nl.sequential_range), which is traced once.
MAX_STATEMENTS = 200_000
PROJECT_FROM = 1024  # a Python range shorter than this stays a plain range (nested ones reach MAX_STATEMENTS)


def _count(n: int) -> str:
    return f"{n:,}" if n < 10**18 else f"more than 10**{len(str(n)) - 1}"


def too_many(count: int, what: str = "") -> Unsupported:
    return Unsupported(f"{TOO_MANY} (total_count={_count(count)}{', ' + what if what else ''}, must be < {CEILING:,}: "
                       "the kernel unrolls to too many instructions)")


def too_long(count: int, what: str = "") -> Unsupported:
    return Unsupported(f"the trace would record {count:,} statements{', ' + what if what else ''} (at most "
                       f"{MAX_STATEMENTS:,}: a Python loop or nl.static_range unrolls its body into the trace; "
                       "use nl.affine_range or nl.sequential_range, which trace the body once)")


def trips(r: range) -> int:
    """``len(r)`` without its overflow past sys.maxsize (``nl.affine_range(256**128)``)."""
    if r.step > 0:
        return max(0, (r.stop - r.start + r.step - 1) // r.step)
    return max(0, (r.start - r.stop - r.step - 1) // -r.step)


class Projection:
    """Watches a static loop of ``total`` iterations (``nl.static_range``, a Python ``range``, a launch grid):
    after each iteration, what the whole loop will cost at the rate so far; refuses before running it."""

    def __init__(self, total: int, what: str):
        tr = current()
        self.tr, self.total, self.what = tr, total, what
        self.start = (tr.instructions, len(tr.prog))

    def step(self, done: int) -> None:
        tr, total = self.tr, self.total
        instructions = self.start[0] + (tr.instructions - self.start[0]) * total // done
        statements = self.start[1] + (len(tr.prog) - self.start[1]) * total // done
        if instructions >= CEILING:
            raise too_many(instructions, f"projected from {done:,} of the {total:,} iterations of {self.what}")
        if statements >= MAX_STATEMENTS:
            raise too_long(statements, f"projected from {done:,} of the {total:,} iterations of {self.what}")


def watched(r: range, what: str):
    """Iterate ``r`` (unrolled into the trace), refusing early when it would pass a limit."""
    n = trips(r)
    if n >= CEILING:
        raise too_many(n, f"{what} of {_count(n)} iterations, each unrolled")
    if not _CURRENT:
        yield from r
        return
    p = Projection(n, what)
    for done, i in enumerate(r, 1):
        yield i
        p.step(done)


class WatchedRange:
    """A range that is unrolled into the trace and :func:`watched` when iterated; otherwise it behaves as the
    range (``nl.static_range``, and a large Python ``range`` in the kernel's code: :func:`python_range`)."""

    def __init__(self, r: range, what: str):
        self.r, self.what = r, what

    def __iter__(self):
        return watched(self.r, self.what)

    def __reversed__(self):
        return watched(self.r[::-1], self.what)

    def __len__(self) -> int:
        return len(self.r)

    def __getitem__(self, k: Any) -> Any:
        return self.r[k]

    def __contains__(self, x: Any) -> bool:
        return x in self.r

    def __getattr__(self, name: str) -> Any:
        return getattr(self.r, name)  # start, stop, step, index, count

    def __eq__(self, other: object) -> bool:
        return self.r == (other.r if isinstance(other, WatchedRange) else other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(self.r)


def python_range(*args: Any) -> Any:
    """``range`` as the kernel's own code sees it while traced: a plain range unless it is large."""
    r = range(*args)
    return r if trips(r) < PROJECT_FROM else WatchedRange(r, f"range({', '.join(map(str, args))})")


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
