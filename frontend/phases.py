"""The programs of a launch grid that meet at ``nisa.core_barrier``, traced phase by phase.

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
refused, naming both.  A barrier inside a dynamic loop unrolls that loop (a
re-trace, as a loop index used as a Python int does): a loop that stays a
loop is one statement of the stream, not a place to switch programs.  What is a
program's own in the tracer -- its ids, its shared_hbm ordinal, the engines'
accumulator tracking -- is swapped at every hand-over; only one thread runs,
so nothing else needs a lock.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tusk.frontend.affine import PeelLoop
from tusk.frontend.errors import TraceError, current_user_line, unsupported
from tusk.frontend.tracer import Tracer, current

# the tracer's per-program state (the isa_accum register attributes are set on the tracer by name)
OWN = ("program_ids", "_hbm_ordinal", "dropped", "piece_writes", "_tusk_dve_register", "_tusk_act_register")
STACK_BYTES = 64 << 20  # a program's thread: deep kernels recurse as far as on the main thread


class PhasedLaunch(BaseException):
    """A program of a grid launch reached ``nisa.core_barrier``: trace the launch again phase by phase.
    (A BaseException: a kernel's own ``except Exception`` must not take it.)"""


class _Cancelled(BaseException):
    """Another program failed: a waiting program's thread unwinds."""


class _Program:
    def __init__(self, ids: tuple[int, ...]):
        self.ids = ids
        self.state: dict[str, Any] = {"program_ids": ids, "_hbm_ordinal": 0, "dropped": (-1, ()),
                                      "piece_writes": (0, set()), "_tusk_dve_register": None,
                                      "_tusk_act_register": None}
        self.go = threading.Event()
        self.thread: threading.Thread | None = None
        self.result: Any = None
        self.error: BaseException | None = None
        self.done = False
        self.waiting_at: tuple[str, int] = ("", 0)  # the file and line of the barrier it waits at


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
                    raise TraceError(f"{file}:{line}: not supported: nisa.core_barrier: program {list(left[0].ids)} "
                                     f"waits here, but program {list(ended.ids)} ended without reaching this "
                                     "barrier (the cores would wait for each other forever)")
        finally:
            self._cancel()

    def barrier(self) -> None:
        """The running program reached a barrier: let the next one run until this phase is over."""
        p = self.running
        if p is None:
            raise unsupported("nisa.core_barrier outside the programs of the launch")
        if self.tr.loops:
            # the programs meet between whole statements, and a loop that stays a loop is one: its iterations
            # are independent (NKI 2.x runs it as Python's range), so the re-trace unrolls it, innermost first
            var = self.tr.loops[-1]
            if var.ordinal < 0:
                raise unsupported("nisa.core_barrier inside a loop the front end cannot unroll")
            raise PeelLoop(var.ordinal, 0)
        p.waiting_at = current_user_line() or (self.tr.filename, 0)
        self._save(p)
        self._wait(p)

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


def barrier(call: str) -> None:
    """``call`` (nisa.core_barrier) in a launch of more than one program."""
    tr = current()
    phases = getattr(tr, "phases", None)
    if phases is None:
        raise PhasedLaunch(call)
    phases.barrier()
