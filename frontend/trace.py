"""Trace an NKI kernel: run it once on symbolic tensors, place its tiles, write KLR.

Tracing executes the kernel file's Python (its top level, then the kernel
function), as NKI itself does; only files a user names are traced.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import inspect
import itertools
import linecache
import math
import os
import runpy
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tusk.frontend import alloc
from tusk.frontend.affine import PeelLoop
from tusk.frontend.args import TENSOR, Binding, bind
from tusk.frontend.emit import emit
from tusk.frontend.errors import TraceError, Unsupported, in_tusk, unsupported, user_frame
from tusk.frontend.imports import KernelImports, kernel_imports, nki_modules
from tusk.frontend.nki import Kernel
from tusk.frontend.nki import language as nki_language
from tusk.frontend.nki.isa_signature import targeting
from tusk.frontend.phases import PhasedLaunch
from tusk.frontend.specs import TensorSpec, parse_tensor_spec
from tusk.frontend.tensors import INTERFACE_ROLES, Dtype, Tensor, View
from tusk.frontend.top_level import TopLevelStop, loading
from tusk.frontend.tracer import CEILING, Op, Projection, Tracer, python_range, too_many, tracing
from tusk.ir.errors import InternalError, TuskError

MAX_PEELS = 64  # loops split for masks in one kernel (each split is one re-trace)
RECURSION_LIMIT = 5000  # deep kernels (many helper calls) still trace; runaway recursion still stops


@dataclass(frozen=True)
class Traced:
    """A traced kernel: its KLR file bytes, and the files of the kernel tree the trace ran (the kernel file,
    the helpers and packages it imported from its directory or package: what the trace depends on)."""

    klr: bytes
    sources: tuple[Path, ...]


def load_kernel(path: str | Path, function: str | None,
                ki: KernelImports | None = None) -> tuple[Callable[..., Any], list[int]]:
    """Run ``path`` and return the kernel function (``function``, or the file's only @nki.jit one).

    Inside :func:`trace_kernel_file` the file runs in its import world (``ki``); alone, in one of its own
    that ends when this returns."""
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"{path}: no such kernel file")
    if ki is None:
        with kernel_imports(path) as own:
            return load_kernel(path, function, own)
    linecache.cache.pop(str(path), None)  # a relative name may be another directory's file of a former trace
    stopped = ""
    try:
        with loading(str(path.resolve())):
            namespace = _execute(path, ki)
    except TopLevelStop as stop:  # the script calls its kernel on raw-byte arrays: its kernels are defined
        namespace = stop.namespace
        stopped = (f" (the file's top level stopped at line {stop.line}, where it runs a kernel on arrays numpy "
                   "holds as raw bytes)")
    except TraceError as e:
        if isinstance(e, Unsupported):  # `from nki.isa import NAME` of a name Tusk does not have
            raise _located(e, path, "") from None
        raise
    except SyntaxError as e:
        raise TraceError(f"{e.filename or path}:{e.lineno}: syntax error: {e.msg}") from None
    except BaseException as e:  # the file's top level failed: report it at its line
        if isinstance(e, KeyboardInterrupt):
            raise
        err = _located(e, path, "importing the kernel file")
        raise err from (e if isinstance(err, InternalError) else None)
    if function:
        head, *rest = function.split(".")  # `Class.kernel`: a kernel that is a static method of a class
        obj = namespace.get(head)
        for part in rest:
            obj = getattr(obj, part, None)
        if obj is None:
            kernels = sorted(n for n, v in namespace.items() if isinstance(v, Kernel))
            raise TraceError(f"{path}: no function {function!r}"
                             + (f" (its @nki.jit kernels: {', '.join(kernels)})" if kernels else "") + stopped)
    else:
        kernels = [(n, v) for n, v in namespace.items() if isinstance(v, Kernel)]
        own = [(n, v) for n, v in kernels if getattr(v.fn, "__module__", None) == namespace.get("__name__")]
        kernels = own or kernels  # those the file defines, not those it imports; else the one it imports
        if len(kernels) != 1:
            found = ", ".join(n for n, _ in kernels) or "none"
            raise TraceError(f"{path}: name the kernel as FILE.py::FUNCTION (@nki.jit functions: {found})")
        obj = kernels[0][1]
    grid = list(obj.grid) if isinstance(obj, Kernel) else []
    fn = obj.fn if isinstance(obj, Kernel) else obj
    if not callable(fn) or not inspect.isfunction(fn):
        raise TraceError(f"{path}: {function!r} is not a function")
    return fn, grid


def _execute(path: Path, ki: KernelImports) -> dict[str, Any]:
    """The kernel file's namespace: imported as its package's module when it lives in one (relative imports
    work), else run as a script of its own directory."""
    if ki.module is None:
        return runpy.run_path(str(path), run_name=f"__nki_kernel_{path.stem}__")
    return vars(importlib.import_module(ki.module))


def trace_file(path: str | Path, function: str | None, inputs: Sequence[str | TensorSpec],
               grid: Sequence[int] = (), *, args: Mapping[str, Any] | None = None, name: str | None = None,
               arch: str | None = None, paths: Sequence[str | Path] = (), api: int | None = None) -> bytes:
    """Execute ``path``, trace ``function`` (default: the only @nki.jit function) -> KLR file bytes.
    ``paths``: directories the kernel may import from besides its own (``tusk trace --path``); ``api``: 1 makes
    ``import nki`` NKI 1.x (``--nki-api``)."""
    return trace_kernel_file(path, function, inputs, grid, args=args, name=name, arch=arch, paths=paths,
                             api=api).klr


def trace_kernel_file(path: str | Path, function: str | None, inputs: Sequence[str | TensorSpec],
                      grid: Sequence[int] = (), *, args: Mapping[str, Any] | None = None, name: str | None = None,
                      arch: str | None = None, paths: Sequence[str | Path] = (), api: int | None = None) -> Traced:
    """:func:`trace_file`, with the kernel-tree files the trace ran."""
    with targeting(arch), kernel_imports(path, paths, api) as ki:
        fn, file_grid = load_kernel(path, function, ki)
        saved = fn.__globals__.get("range", _NONE)
        fn.__globals__["range"] = python_range  # a large Python range in the kernel is watched (limits)
        try:
            data = trace_function(fn, inputs, tuple(grid) or tuple(file_grid), args=args, name=name, arch=arch,
                                  filename=Path(path).name)
        finally:
            if saved is _NONE:
                fn.__globals__.pop("range", None)
            else:
                fn.__globals__["range"] = saved
    return Traced(data, tuple(ki.sources))


_NONE = object()


def trace_function(fn: Callable[..., Any], inputs: Sequence[str | TensorSpec], grid: Sequence[int] = (), *,
                   args: Mapping[str, Any] | None = None, name: str | None = None, arch: str | None = None,
                   filename: str | None = None) -> bytes:
    """Trace an already loaded kernel function -> KLR file bytes."""
    with targeting(arch), young_collections_only():
        return _trace_function(fn, inputs, grid, args=args, name=name, arch=arch, filename=filename)


# A trace keeps every statement it records (ops, views, tiles, then the KLR objects written from them) alive
# until the bytes are written: a heap that grows with the kernel.  CPython's full collections rescan that whole
# heap each time it has grown by a quarter, so their share of the time per statement kept rising with the
# kernel's size (4,000 -> 64,000 statements: 23 -> 63 us of ~200).  The young generations still collect the
# short-lived cycles the kernel's own code may make; the full collection waits until the trace is done.
class _FullCollections:
    """Held off while any trace runs (traces in threads share the hold; the last one out restores)."""

    lock = threading.Lock()
    traces = 0
    thresholds: tuple[int, ...] = ()


@contextlib.contextmanager
def young_collections_only() -> Iterator[None]:
    """No full (oldest-generation) garbage collection while the block runs."""
    held = _FullCollections
    with held.lock:
        if held.traces == 0:
            held.thresholds = gc.get_threshold()
            gc.set_threshold(held.thresholds[0], held.thresholds[1], 1 << 30)  # never reached
        held.traces += 1
    try:
        yield
    finally:
        with held.lock:
            held.traces -= 1
            if held.traces == 0:
                gc.set_threshold(*held.thresholds)


def _trace_function(fn: Callable[..., Any], inputs: Sequence[str | TensorSpec], grid: Sequence[int], *,
                    args: Mapping[str, Any] | None, name: str | None, arch: str | None,
                    filename: str | None) -> bytes:
    if isinstance(fn, Kernel):
        grid = tuple(grid) or fn.grid
        fn = fn.fn
    specs = [parse_tensor_spec(s) for s in inputs]
    src = inspect.getsourcefile(fn) or "<kernel>"
    binding = bind(fn, len(specs), dict(args or {}), src)
    grid = tuple(int(g) for g in grid)
    if any(g <= 0 for g in grid):
        raise TraceError(f"{src}: launch grid {list(grid)}: every extent must be at least 1")
    old_limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old_limit, RECURSION_LIMIT))
    peel: dict[int, int] = {}
    first_error: BaseException | None = None  # what the kernel raised with its loops kept loops
    phased = False  # a grid launch reached nisa.core_barrier: its programs are traced phase by phase
    unrolled_for_phases = False  # ... and one did inside a loop: every loop runs as Python's range
    try:
        while True:
            tr = Tracer(name or fn.__name__, filename or os.path.basename(src), grid=(), peel=dict(peel),
                        unroll_all=first_error is not None or unrolled_for_phases, phased=phased)
            tensors = [tr.new_tensor(s.shape, Dtype(s.dtype), "hbm", p, role="input")
                       for p, s in zip(binding.tensor_params, specs)]
            for k, a in enumerate(tensors):
                a.arg_index = k
            try:
                returned = _run(tr, fn, binding, tensors, grid)
                break
            except PhasedLaunch as p:
                if p.unroll and not unrolled_for_phases:
                    unrolled_for_phases = True
                elif phased:
                    raise TraceError(f"{src}: {p.args[0]} outside the phases of its launch") from None
                phased = True
            except PeelLoop as p:
                _peel_further(peel, p, src)
            except Exception as e:  # noqa: BLE001 - the kernel's own exception, or Tusk's (re-raised below)
                # A loop traced once builds its Python state once: `tiles.append(t)` in one nl.affine_range
                # and `tiles[i]` in the next raise IndexError. NKI 2.x runs these loops as Python's range,
                # so the kernel is traced again with every loop unrolled; if that fails too, the first
                # error is the one reported -- unless the unrolled trace, the program NKI runs, was refused
                # by the front end: that refusal is what stops the kernel (nki-library's qkv_cte at grid 2
                # reported its loop-mode IndexError instead of the core_barrier it reaches unrolled).
                if first_error is not None:
                    if isinstance(e, TuskError):
                        raise
                    raise first_error from None
                if isinstance(e, TuskError) or not tr.loop_ordinal or _raised_by_front_end(e):
                    raise
                first_error = e
        where = f"{src}:{fn.__code__.co_firstlineno}"
        if tr.broken_loop:
            file, line = tr.broken_loop
            raise TraceError(f"{file or src}:{line or fn.__code__.co_firstlineno}: a `break` or `return` inside an "
                             "nl.affine_range/nl.sequential_range loop (a loop that stays a loop runs every "
                             "iteration; return after the loop)")
        _mark_outputs(tr, tensors, returned, where, _declared_mutable(fn, binding.tensor_params))
        alloc.place(tr, arch)
        return emit(tr, tr.filename)
    except TraceError as e:
        if isinstance(e, Unsupported):
            raise _located(e, Path(src), "") from None
        raise
    except TuskError:
        raise
    except RecursionError:
        raise TraceError(f"{src}: kernel {fn.__name__} recursed too deeply while tracing") from None
    except BaseException as e:
        if isinstance(e, KeyboardInterrupt):
            raise
        err = _located(e, Path(src), f"tracing {fn.__name__}")
        raise err from (e if isinstance(err, InternalError) else None)
    finally:
        sys.setrecursionlimit(old_limit)


def _peel_further(peel: dict[int, int], p: PeelLoop, src: str) -> None:
    """Record that loop ``p.ordinal`` keeps only its first ``p.keep`` iterations a loop in the next re-trace.

    A loop split once can be asked again for fewer: a mask with a lower bound cuts its first iterations where
    another mask's upper bound cut its last ones (a padded convolution's rows), or its index is later used as
    a Python int.  Each re-trace keeps strictly fewer iterations of some loop, so the re-traces end."""
    kept = peel.get(p.ordinal)
    no_progress = kept is not None and p.keep >= kept
    if no_progress or (kept is None and len(peel) >= MAX_PEELS):
        file, line = p.where or (src, None)
        at = f"{file}:{line}" if line else file
        raise TraceError(f"{at}: a mask= cuts iterations of a loop short in a way the front end "
                         "cannot split (use nl.static_range for that loop)") from None
    peel[p.ordinal] = p.keep


def _run(tr: Tracer, fn: Callable[..., Any], binding: Binding, tensors: list[Tensor],
         grid: tuple[int, ...]) -> list[Any]:
    it = iter(tensors)
    positional = [next(it) if v is TENSOR else v for v in binding.positional]
    keywords = {k: next(it) if v is TENSOR else v for k, v in binding.keywords.items()}
    with nki_modules(), tracing(tr):
        return _flatten(launch(tr, fn, positional, keywords, grid))


def launch(tr: Tracer, fn: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any],
           grid: tuple[int, ...]) -> Any:
    """``kernel[grid](...)``: run ``fn`` once per program of ``grid`` (each sees its nl.program_id; the
    n-th shared_hbm allocation is one tensor of all of them); what program 0 returns."""
    if not grid:
        return fn(*args, **kwargs)
    if tr.grid:
        raise unsupported(f"launching a kernel on a grid {list(grid)} from a kernel running on the grid "
                          f"{list(tr.grid)}")
    programs = math.prod(grid)
    if programs >= CEILING:
        raise too_many(programs, f"a launch grid {list(grid)} of {programs:,} programs")
    saved = (tr.grid, tr.program_ids, tr._hbm_by_ordinal, tr._hbm_ordinal)
    tr.grid, tr._hbm_by_ordinal = grid, {}
    if tr.phased and programs > 1:
        from tusk.frontend.phases import Phases

        tr.phases = Phases(tr, grid)
        try:
            return tr.phases.run(fn, args, kwargs)
        finally:
            tr.phases = None
            tr.grid, tr.program_ids, tr._hbm_by_ordinal, tr._hbm_ordinal = saved
    projection = Projection(programs, f"the launch grid {list(grid)}")
    result = None
    try:
        for done, ids in enumerate(itertools.product(*[range(g) for g in grid]), 1):
            tr.program_ids = ids
            tr._hbm_ordinal = 0
            r = fn(*args, **kwargs)
            if done == 1:
                result = r
            projection.step(done)
    finally:
        tr.grid, tr.program_ids, tr._hbm_by_ordinal, tr._hbm_ordinal = saved
    return result


def _flatten(result: Any) -> list[Any]:
    if result is None:
        return []
    if isinstance(result, (tuple, list)):
        return [x for r in result for x in _flatten(r)]
    return [result]


def _mark_outputs(tr: Tracer, args: list[Tensor], returned: list[Any], src: str,
                  mutable: frozenset[str] = frozenset()) -> None:
    """Returned HBM tensors and written arguments are the kernel's outputs.  A written argument the kernel
    also reads (``acc += x`` in place), or one declared ``nt.mutable`` (a KV cache written in part), is an
    input and an output at once (role "inout"): the same tensor in the KLR's inputs and outputs, as KLR lists
    an input its kernel returns -- its incoming values are read, and what the kernel leaves unwritten keeps
    them."""
    ops = [e for e in tr.prog if isinstance(e, Op)]
    written = {id(v.tensor.alias_of or v.tensor) for e in ops for v in e.writes}
    # a written argument the kernel reads anywhere is in/out: which of its elements a read reaches before they
    # are written is not tracked (a read of rows written elsewhere first, in a loop or in another program,
    # needs the incoming values as much as a read before every write)
    read = {id(v.tensor.alias_of or v.tensor) for e in ops for v in e.reads}
    for a in args:
        if id(a) in written:
            a.role = "inout" if a.name in mutable or id(a) in read else "output"
    from tusk.frontend.returned import as_returned_output
    returned = [as_returned_output(tr, r) for r in returned]
    for r in returned:
        t = r.tensor if isinstance(r, View) else r
        if not isinstance(t, Tensor) or t.on_chip:
            raise TraceError(f"{src}: the kernel returns {r!r}; a kernel returns HBM tensors "
                             "(nl.ndarray(..., buffer=nl.shared_hbm)) that it stored into")
        if t.role == "input":
            raise TraceError(f"{src}: the kernel returns its input {t.name} unchanged")
        if t.role != "inout":
            t.role = "output"
    if not any(t.role in ("output", "inout") for t in tr.tensors):
        raise TraceError(f"{src}: the kernel writes no output (store into an argument or return an "
                         "nl.ndarray in nl.shared_hbm)")
    # outputs in the order they were created; inputs in argument order (klr-format.md §4); an in/out
    # argument is both, so the outputs begin with them
    inputs = [a for a in args if a.role in ("input", "inout")]
    outputs = [t for t in tr.tensors if t.role == "output"]
    tr.tensors = inputs + outputs + [t for t in tr.tensors if t.role not in INTERFACE_ROLES]


def _declared_mutable(fn: Callable[..., Any], params: list[str]) -> frozenset[str]:
    """The tensor parameters annotated ``nt.mutable`` / ``nt.mutable_tensor`` (``nt.tensor[nt.mutable]``).  Under
    ``from __future__ import annotations`` they are strings: evaluated in the kernel's module, or, where that
    fails, read for the name (``declares_mutable``)."""
    from tusk.frontend.nki.typing import declares_mutable

    try:
        notes = inspect.get_annotations(fn, eval_str=True)
    except Exception:  # noqa: BLE001 - a kernel's annotation that does not evaluate outside its tracing
        notes = getattr(fn, "__annotations__", None) or {}
    return frozenset(p for p in params if declares_mutable(notes.get(p)))


def _located(e: BaseException, fallback: Path, doing: str) -> TuskError:
    """The error at the kernel line that caused it; an unexpected exception raised by the front
    end's own code (not the kernel's) is Tusk's fault, an InternalError."""
    where = user_frame(e.__traceback__)
    loc = f"{where[0]}:{where[1]}" if where else str(fallback)
    if isinstance(e, TraceError):
        return TraceError(f"{loc}: {e}")
    what = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
    if isinstance(e, TypeError) and str(e) == "'function' object is not subscriptable":
        # `kernel[grid](...)` on a plain function: NKI launches on a grid only what @nki.jit marks
        what += " (a kernel launched on a grid, f[grid](...), must be marked @nki.jit)"
    if _raised_by_front_end(e):
        return InternalError(f"{loc}: internal error in Tusk's NKI front end: {what}")
    return TraceError(f"{loc}: {what}" + (f" (while {doing})" if doing else ""))


def _raised_by_front_end(e: BaseException) -> bool:
    """The innermost frame is Tusk's code (the front end, or the KLR writer it calls) -- not counting the
    frames that only call the kernel's own code (a dataclass constructor the kernel called with a missing
    field raises in the NKIObject metaclass's __call__: the kernel's error)."""
    last = None
    tb = e.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code not in CALLS_KERNEL_CODE:
            last = tb.tb_frame.f_code.co_filename
        tb = tb.tb_next
    return last is not None and in_tusk(last)


CALLS_KERNEL_CODE = frozenset({nki_language.NKIObjectType.__call__.__code__})
