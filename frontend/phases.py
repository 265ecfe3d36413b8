"""The programs of a launch grid that meet at ``nisa.core_barrier`` (or ``nisa.sendrecv``), traced phase by
phase.

Tusk traces a grid's programs into one instruction stream, one program after
another (:func:`tusk.frontend.trace.launch`).  A barrier orders what every
program does before it ahead of what any program does after it -- the cores
of an LNC-2 launch write their halves of a shared HBM tensor, meet, then read
the other's half -- which one program after another does not.  So a launch
whose programs call ``core_barrier`` is traced again (:class:`PhasedLaunch`),
each program on a thread of its own and one thread running at a time: every
program runs to its next barrier (or its end), then the next program runs;
once all have arrived, the next phase starts from program 0.  The stream then
holds phase 0 of every program, then phase 1, ...: the order the barrier
guarantees, and the tiles a program keeps across a barrier are live while the
other programs run, so the placer gives them bytes of their own.

A program that ends while another waits at a barrier would hang the device:
refused, naming both.  A barrier inside an ``nl.affine_range`` /
``nl.sequential_range`` loop traces the launch again with every loop run as
Python's range, as NKI 2.x runs them: a loop that stays a loop is one
statement of the stream, not a place to switch programs.  What is a
program's own in the tracer -- its ids, its shared_hbm ordinal, the engines'
accumulator tracking -- is swapped at every hand-over; only one thread runs,
so nothing else needs a lock.

``nisa.sendrecv`` is such a meeting too: once every program is there, each
program's ``src`` is copied into its receiver's ``dst`` (staged through
fresh tiles when some ``dst`` is some ``src``), between the two phases.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tusk.frontend.errors import TraceError, Unsupported, current_user_line, unsupported
from tusk.frontend.tensors import View
from tusk.frontend.tracer import Tracer, current

# the tracer's per-program state (the isa_accum register attributes are set on the tracer by name)
OWN = ("program_ids", "_hbm_ordinal", "dropped", "piece_writes", "_tusk_dve_register", "_tusk_act_register",
       "_tusk_lnc_sendrecvs")
STACK_BYTES = 64 << 20  # a program's thread: deep kernels recurse as far as on the main thread


class PhasedLaunch(BaseException):
    """A program of a grid launch reached ``nisa.core_barrier``: trace the launch again phase by phase --
    ``unroll``: with every loop run as Python's range, as NKI 2.x runs them (the barrier was inside one).
    (A BaseException: a kernel's own ``except Exception`` must not take it.)"""

    def __init__(self, call: str, unroll: bool = False):
        super().__init__(call)
        self.unroll = unroll


class _Cancelled(BaseException):
    """Another program failed: a waiting program's thread unwinds."""


@dataclass
class Exchange:
    """One program's ``nisa.sendrecv``: its ``src`` goes to program ``to``'s ``dst``, ``frm``'s ``src`` to its."""

    dst: View
    src: View
    to: int
    frm: int
    pipe: int


@dataclass
class Gathered:
    """One program's part of an ``nl.all_reduce``: ``into[j]`` gets the ``src`` of program ``group[j]`` (the
    programs it reduces over, indices into the launch's programs in grid order, itself among them)."""

    src: View
    into: list[View]
    group: tuple[int, ...]


class _Program:
    def __init__(self, ids: tuple[int, ...]):
        self.ids = ids
        self.state: dict[str, Any] = {"program_ids": ids, "_hbm_ordinal": 0, "dropped": (-1, ()),
                                      "piece_writes": (0, set()), "_tusk_dve_register": None,
                                      "_tusk_act_register": None, "_tusk_lnc_sendrecvs": 0}
        self.go = threading.Event()
        self.thread: threading.Thread | None = None
        self.result: Any = None
        self.error: BaseException | None = None
        self.done = False
        self.waiting_at: tuple[str, int] = ("", 0)  # the file and line of the barrier it waits at
        # what it sends and receives there (nisa.sendrecv, nl.all_reduce), else None
        self.exchange: Exchange | Gathered | None = None


class Phases:
    """One phased launch (see the module docstring); ``tr.phases`` while it runs."""

    def __init__(self, tr: Tracer, grid: tuple[int, ...]):
        self.tr = tr
        self.programs = [_Program(ids) for ids in itertools.product(*[range(g) for g in grid])]
        self.running: _Program | None = None
        self.yielded = threading.Event()
        self.cancelled = False

    def run(self, fn: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        """Trace every program, phase by phase; what program 0 returns."""
        try:
            while True:
                for p in self.programs:
                    if not p.done:
                        self._resume(p, fn, args, kwargs)
                    if p.error is not None:
                        raise p.error
                left = [p for p in self.programs if not p.done]
                if not left:
                    return self.programs[0].result
                ended = next((p for p in self.programs if p.done), None)
                if ended is not None:
                    file, line = left[0].waiting_at
                    what = _meeting(left[0].exchange)
                    raise TraceError(f"{file}:{line}: not supported: {what}: program {list(left[0].ids)} waits here, "
                                     f"but program {list(ended.ids)} ended without reaching it (the cores would "
                                     "wait for each other forever)")
                self._exchange()
        finally:
            self._cancel()

    def barrier(self, exchange: Exchange | Gathered | None = None) -> None:
        """The running program reached a barrier (or a sendrecv or an all_reduce, ``exchange``): let the next one
        run until this phase is over."""
        p = self.running
        if p is None:
            raise unsupported("nisa.core_barrier outside the programs of the launch")
        p.exchange = exchange
        if self.tr.loops:
            # the programs meet between whole statements, and a loop that stays a loop is one: NKI 2.x runs
            # nl.affine_range / nl.sequential_range as Python's range, so the launch is traced again with every
            # loop unrolled (one loop at a time would re-trace once per instance of a nested loop)
            call = _meeting(exchange)
            if any(getattr(v, "bound_reg", None) is not None or getattr(v, "while_init", None) is not None
                   for v in self.tr.loops):
                raise unsupported(f"{call} inside a loop bounded by a register, in a launch of several programs "
                                  "(its iterations are known only at run time, so the programs cannot take turns "
                                  "in each)")
            raise PhasedLaunch(call, unroll=True)
        p.waiting_at = current_user_line() or (self.tr.filename, 0)
        self._save(p)
        self._wait(p)

    def _exchange(self) -> None:
        """Every program waits at a barrier, or every one at a sendrecv: then each ``src`` goes to its
        receiver's ``dst`` here, between the phases, through a copy of its own when a ``dst`` is some
        program's ``src`` (an exchange in place)."""
        from tusk.frontend.nki import isa_ops

        waiting = [p.exchange for p in self.programs]
        if all(x is None for x in waiting):
            return
        if any(isinstance(x, Gathered) for x in waiting):
            self._gather(waiting)
            return
        call = "nisa.sendrecv"
        file, line = next(p.waiting_at for p, x in zip(self.programs, waiting) if x is not None)
        got = [x for x in waiting if isinstance(x, Exchange)]  # no Gathered here: _gather took those
        if len(got) < len(waiting):
            raise TraceError(f"{file}:{line}: not supported: {call}: program "
                             f"{list(self.programs[waiting.index(None)].ids)} waits at a nisa.core_barrier meanwhile")
        n = len(got)
        for k, x in enumerate(got):
            if not (0 <= x.to < n and 0 <= x.frm < n) or got[x.to].frm != k or x.pipe != got[0].pipe:
                raise TraceError(f"{file}:{line}: not supported: {call}: program {k} sends to {x.to} and receives "
                                 f"from {x.frm} on pipe {x.pipe}; the others: "
                                 f"{[(j, y.to, y.frm, y.pipe) for j, y in enumerate(got) if j != k]} "
                                 "(every send must meet the receive of the same pipe)")
        tr = self.tr
        start = len(tr.prog)
        sources = {id(x.src.tensor) for x in got}
        staged = [x.src for x in got]
        try:
            if any(id(x.dst.tensor) in sources for x in got):
                staged = []
                for x in got:
                    stage = tr.tile(x.src.shape, x.src.dtype)
                    isa_ops.dma_copy(call, stage, x.src)
                    staged.append(stage)
            for k, x in enumerate(got):
                dst = got[x.to].dst
                if dst.shape != staged[k].shape or dst.dtype != staged[k].dtype:
                    raise unsupported(f"{call}: program {k} sends a {staged[k].dtype}{list(staged[k].shape)} tile "
                                      f"into program {x.to}'s {dst.dtype}{list(dst.shape)} dst (the same shape and "
                                      "dtype)")
                isa_ops.dma_copy(call, dst, staged[k])
        except Unsupported as e:  # made here, between the programs: no kernel line is running
            raise TraceError(f"{file}:{line}: {e}") from None
        for op in tr.prog[start:]:  # made here, between the programs: placed at the receiving call's line
            op.line = line
        for p in self.programs:
            p.exchange = None

    def _gather(self, waiting: list[Any]) -> None:
        """Every program waits at an ``nl.all_reduce``: each gets the ``src`` of every program of its group,
        in group order, between the phases (fresh tiles: no ``into`` is any ``src``)."""
        from tusk.frontend.nki import isa_ops

        call = "nl.all_reduce"
        file, line = next(p.waiting_at for p, x in zip(self.programs, waiting) if isinstance(x, Gathered))
        for p, x in zip(self.programs, waiting):
            if not isinstance(x, Gathered):
                what = "nisa.core_barrier" if x is None else "nisa.sendrecv"
                raise TraceError(f"{file}:{line}: not supported: {call}: program {list(p.ids)} waits at a {what} "
                                 "meanwhile")
        start = len(self.tr.prog)
        try:
            for x in waiting:
                for slot, k in zip(x.into, x.group):
                    if waiting[k].group != x.group:
                        raise unsupported(f"{call}: programs {list(x.group)} reduce together, but program {k} "
                                          f"reduces over {list(waiting[k].group)} (the same program_axes)")
                    isa_ops.dma_copy(call, slot, waiting[k].src)
        except Unsupported as e:  # made here, between the programs: no kernel line is running
            raise TraceError(f"{file}:{line}: {e}") from None
        for op in self.tr.prog[start:]:
            op.line = line
        for p in self.programs:
            p.exchange = None

    # ------------------------------------------------------------------ hand-over
    def _resume(self, p: _Program, fn: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        self.running = p
        self._restore(p)
        self.yielded.clear()
        if p.thread is None:
            old = threading.stack_size()
            threading.stack_size(max(old, STACK_BYTES))
            try:
                p.thread = threading.Thread(target=self._body, args=(p, fn, args, kwargs), daemon=True,
                                            name=f"tusk-program-{'-'.join(map(str, p.ids))}")
                p.thread.start()
            finally:
                threading.stack_size(old)
        p.go.set()
        self.yielded.wait()

    def _body(self, p: _Program, fn: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        try:
            p.go.wait()
            p.go.clear()
            if not self.cancelled:
                p.result = fn(*args, **kwargs)
        except _Cancelled:
            pass
        except BaseException as e:  # handed to the launching thread, which raises it
            p.error = e
        finally:
            p.done = True
            self.yielded.set()

    def _wait(self, p: _Program) -> None:
        self.yielded.set()
        p.go.wait()
        p.go.clear()
        if self.cancelled:
            raise _Cancelled

    def _save(self, p: _Program) -> None:
        p.state = {k: getattr(self.tr, k, None) for k in OWN}

    def _restore(self, p: _Program) -> None:
        for k in OWN:
            setattr(self.tr, k, p.state[k])

    def _cancel(self) -> None:
        """Unwind the threads of programs still waiting (a program failed, or the launch was refused)."""
        self.cancelled = True
        for p in self.programs:
            if p.thread is not None and not p.done:
                self.yielded.clear()
                p.go.set()
                self.yielded.wait()


def _meeting(exchange: Exchange | Gathered | None) -> str:
    """The call a program waits at, by what it brought there."""
    return "nl.all_reduce" if isinstance(exchange, Gathered) else "nisa.sendrecv" if exchange else \
        "nisa.core_barrier"


def barrier(call: str) -> None:
    """``call`` (nisa.core_barrier) in a launch of more than one program."""
    tr = current()
    if tr.phases is None:
        raise PhasedLaunch(call)
    tr.phases.barrier()


def sendrecv(call: str, dst: View, src: View, send_to_rank: Any, recv_from_rank: Any, pipe_id: Any) -> None:
    """``nisa.sendrecv``: this program's ``src`` goes to program ``send_to_rank``'s ``dst``, and program
    ``recv_from_rank``'s ``src`` to this one's ``dst``, once every program of the launch is there."""
    from tusk.frontend.nki import isa_ops
    from tusk.frontend.nki import language as nl

    tr = current()
    ranks = []
    for what, v in (("send_to_rank", send_to_rank), ("recv_from_rank", recv_from_rank), ("pipe_id", pipe_id)):
        if isinstance(v, bool) or not isinstance(v, int) and not hasattr(v, "__index__"):
            raise unsupported(f"{call} {what}={v!r} (an int known while tracing)")
        ranks.append(int(v.__index__()))
    to, frm, pipe = ranks
    for what, v in (("src", src), ("dst", dst)):
        if v.tensor.memory != "sbuf":
            raise unsupported(f"{call} {what} in {v.tensor.memory.upper()} (both tiles are in SBUF)")
    if src.dtype != dst.dtype or src.shape != dst.shape:
        raise unsupported(f"{call} of a {src.dtype}{list(src.shape)} src into a {dst.dtype}{list(dst.shape)} dst "
                          "(the same shape and dtype)")
    programs = nl.num_programs(None)
    if len(tr.grid) > 1:
        raise unsupported(f"{call} in a launch grid of {len(tr.grid)} axes {list(tr.grid)} (ranks name the "
                          "programs of a one-axis launch)")
    if programs == 1:
        if to != 0 or frm != 0:
            raise unsupported(f"{call} send_to_rank={to}, recv_from_rank={frm} in a launch of one program "
                              "(rank 0 only)")
        isa_ops.dma_copy(call, dst, src)  # to itself
        return
    if tr.phases is None:
        raise PhasedLaunch(call)
    tr.phases.barrier(Exchange(dst, src, to, frm, pipe))


def all_gather(call: str, src: View, into: list[View], group: tuple[int, ...]) -> None:
    """``into[j] = src of program group[j]`` once every program of the launch is at its ``nl.all_reduce``."""
    tr = current()
    if tr.phases is None:
        raise PhasedLaunch(call)
    tr.phases.barrier(Gathered(src, into, group))
