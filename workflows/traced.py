"""Kernels written in Python: traced into KLR by ``tusk.frontend``, a cached step before the pipeline.

A kernel directory's ``tusk.toml`` may name NKI kernels written in Python
(``[kernels.NAME]``: file, function, inputs, grid; checked by
:mod:`tusk.workflows.project`).  Each becomes a KLR kernel of the build:

1. **Key.**  The trace key is the digest of the .py file's bytes, the
   function name as given (None: the file's only ``@nki.jit`` function),
   the input specs (canonical spelling: ``float32[128,512]``), the other
   arguments (``args``, each value's canonical spelling), the grid,
   the build's ``arch`` (the front end places on-chip tensors for its
   memories), the trace format and the front end's code -- every source file of
   ``tusk.frontend`` and of ``tusk.ir`` (whose KLR writer encodes the
   result), as :func:`tusk.cache.keys.package_digest` hashes them.
   Locations are not content: the key holds no path.
2. **Cached.**  The KLR bytes are kept as a store note (``notes/nki-trace/``,
   base64 with their SHA-256, checksummed like every note) under that key,
   with the SHA-256 of every other file of the kernel tree the trace
   imported (helpers of its directory, modules of its package: see
   :mod:`tusk.frontend.imports`), by path relative to the kernel file.  A
   hit whose imported files are unchanged is used without running any
   Python; an edited (or removed) helper is a miss.  A miss executes the file (the
   front end runs its top level, then the kernel once with symbolic tensors)
   and stores the result.  Failures are not cached: a kernel that failed to
   trace is traced again by the next build.
3. **A KLR kernel.**  The bytes are written as ``<NAME>.klr`` into the
   kernel's staging directory (its artifact directory during the build,
   which becomes ``OUT/<NAME>/``), and from there the unit is an ordinary
   KLR kernel: its interface is read (memoised by the KLR's digest), its
   host module names ``<NAME>.klr`` relative to that directory, and the
   ``files`` key part of the first step and of translate is
   ``{"<NAME>.klr": sha256 of the traced bytes}``.  So an edit of the .py
   that traces to the same KLR (a comment) re-traces and then hits every
   pass record (early cutoff), and an unchanged file runs nothing at all.
   The traced ``.klr`` stays in ``OUT/<NAME>/`` next to the outputs.

An import that the edit of a helper adds or removes is found by the
re-trace the edit causes.  Installed packages (numpy) are not part of the
key: they are the environment, like Python itself.

Tracing runs before the build graph starts, in one child process of the
build (:mod:`tusk.workflows.trace_child`), each kernel in a process forked
from it (a kernel that patches the API it imports patches only its own
trace): a kernel whose Python exits (``os._exit(0)``) or raises
``KeyboardInterrupt`` fails alone, and cannot end the build or pass for
Ctrl-C.  A
kernel that cannot be traced fails alone (its message starts with the
kernel's ``file:line``); the other kernels are built.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import sys
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tusk.ir.errors import (
    ENVIRONMENT,
    INPUT,
    INTERNAL,
    EnvError,
    InputError,
    InternalError,
    TuskError,
    UsageError,
    fault_of,
)
from tusk.workflows.kernels import Kernel, read_kernel

TRACE_FORMAT = 2                 # bump when what a trace key stands for changes
NOTE_KIND = "nki-trace"
FRONTEND_PACKAGES = ("tusk.frontend", "tusk.ir")  # the code a trace runs (ir: the KLR writer)


def frontend_digest() -> str:
    """SHA-256 over every source file of the front end and of tusk.ir (computed once per process)."""
    from tusk.cache.keys import package_digest

    return package_digest(FRONTEND_PACKAGES)


def trace_parts(py_digest: str, function: str | None, inputs: Sequence[Any], grid: Sequence[int],
                arch: str | None = None, args: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The named parts of a trace key (see the module docstring)."""
    from tusk.frontend.args import arg_text

    return {"tusk-trace": TRACE_FORMAT, "file": py_digest, "function": function,
            "inputs": [str(t) for t in inputs], "args": {k: arg_text(v) for k, v in sorted((args or {}).items())},
            "grid": [int(d) for d in grid], "arch": arch, "frontend": frontend_digest()}


def trace_key(parts: dict[str, Any]) -> str:
    from tusk.cache.keys import digest

    return digest(parts)


# ====================================================================== running the front end


def run_frontend(path: str | os.PathLike, function: str | None, inputs: Sequence[Any], grid: Sequence[int] = (),
                 name: str | None = None, arch: str | None = None, args: Mapping[str, Any] | None = None,
                 paths: Sequence[str | os.PathLike] = (), api: int | None = None):
    """``tusk.frontend.trace_kernel_file`` (a :class:`tusk.frontend.trace.Traced`: the KLR bytes and the
    kernel-tree files the trace imported), with whatever escapes it sorted by fault.

    A TuskError is passed on (a TraceError is the kernel's and names its
    ``file:line``).  Anything else raised while the kernel's own code runs
    -- an exception the front end did not wrap, ``sys.exit()`` -- is the
    kernel's too, named by the kernel file's innermost line in the
    traceback; an exception with no frame in the kernel file is an internal
    error of the front end.
    """
    from tusk.frontend.trace import trace_kernel_file

    try:
        traced = trace_kernel_file(os.fspath(path), function, list(inputs), tuple(grid), args=dict(args or {}),
                                   name=name, arch=arch, paths=tuple(os.fspath(p) for p in paths), api=api)
    except TuskError:
        raise
    except (Exception, SystemExit) as e:  # Ctrl-C (KeyboardInterrupt) still stops everything
        raise escaped_message(e, path) from (None if _kernel_line(e, path) is not None else e)
    if not isinstance(traced.klr, (bytes, bytearray)) or not traced.klr:
        raise InternalError(f"the NKI front end returned no KLR bytes for {path}")
    return traced


def escaped_message(e: BaseException, path: str | os.PathLike) -> TuskError:
    """What escaped the front end as an error: the kernel's (at its file's innermost line in the traceback),
    else an internal error of the front end."""
    line = _kernel_line(e, path)
    what = f"the kernel called sys.exit({e.code!r})" if isinstance(e, SystemExit) else \
        f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
    if line is not None:
        return InputError(f"{path}:{line}: {what}")
    return InternalError(f"the NKI front end failed on {path}: {what}")


def _kernel_line(e: BaseException, path: str | os.PathLike) -> int | None:
    """The innermost line of the kernel file ``path`` in ``e``'s traceback, or None."""
    target = os.path.realpath(os.fspath(path))
    line = None
    for frame in traceback.extract_tb(e.__traceback__):
        try:
            if os.path.realpath(frame.filename) == target:
                line = frame.lineno
        except (OSError, ValueError):
            continue
    return line


def exited_message(path: Any, code: int) -> str:
    """What a kernel whose Python ended the process tracing it (``os._exit``, a signal) is told; ``code`` is the
    process's return code (negative: the signal)."""
    how = f"killed by signal {-code}" if code < 0 else f"exit status {code}, as by os._exit({code})"
    return f"{path}: the kernel's Python exited the tracer ({how}) before its trace was done"


def kernel_name(data: bytes) -> str | None:
    """The LncKernel name of KLR file bytes, or None when they do not hold one."""
    from tusk.ir.klr.reader import read_klr

    try:
        contents = read_klr(data).contents
    except (TuskError, ValueError, TypeError):
        return None
    name = getattr(contents, "name", None)
    return name if isinstance(name, str) else None


# ====================================================================== the tracing process


class Tracer:
    """Runs :func:`run_frontend` in one child process for the build's traces (:mod:`tusk.workflows.trace_child`),
    started when the first trace is needed; a child the kernel's Python ended fails that kernel only, and the
    next trace starts a new one.  A trace that runs past ``timeout`` seconds (the setting ``trace_timeout``;
    None: no limit) fails its kernel the same way: the child is killed, and a kernel that loops forever
    cannot hold the build's other kernels back.  Use as a context manager (the child is ended on exit)."""

    def __init__(self, timeout: float | None = None) -> None:
        self._child: Any = None
        self.timeout = timeout
        self.last_seconds: float | None = None  # the last trace's own time, measured in the child

    def __enter__(self) -> Tracer:
        return self

    def __exit__(self, kind: object, *exc: object) -> None:
        self.close(at_once=kind is not None)  # Ctrl-C: the child (which ignores SIGINT) ends now

    def close(self, at_once: bool = False) -> None:
        child, self._child = self._child, None
        if child is not None:
            with contextlib.suppress(OSError):
                child.stdin.close()
            try:
                if at_once:
                    child.terminate()  # it kills and reaps the process tracing a kernel, then ends
                child.wait(timeout=2 if at_once else 5)
            except Exception:  # noqa: BLE001 -- a child that does not end is killed
                child.kill()
                child.wait()

    def _start(self):
        import subprocess

        if self._child is None or self._child.poll() is not None:
            self._child = subprocess.Popen([sys.executable, "-m", "tusk.workflows.trace_child"],
                                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None)
        return self._child

    def trace(self, **request: Any):
        """:func:`run_frontend`'s result (a Traced) for ``request``; its errors raised as TuskErrors."""
        import json
        import pickle
        import struct

        from tusk.frontend.trace import Traced

        self.last_seconds = None
        child = self._start()
        data = pickle.dumps(request)
        try:
            child.stdin.write(struct.pack(">Q", len(data)) + data)
            child.stdin.flush()
            if not self._answered_in_time(child):
                self.close(at_once=True)
                function = f"{request['function']}() in " if request.get("function") else ""
                raise InputError(f"{request['path']}: tracing {function}the kernel did not finish within "
                                 f"{self.timeout:g} s (does a loop of its Python never end?); the limit is the "
                                 f"setting trace_timeout (TUSK_TRACE_TIMEOUT, or trace_timeout in tusk.toml; "
                                 f"none: no limit)")
            line = child.stdout.readline()
        except OSError:
            line = b""
        if not line:
            code = child.wait()
            self._child = None
            raise InputError(exited_message(request["path"], code))
        try:
            answer = json.loads(line)
            if answer.get("ok"):
                seconds = answer.get("seconds")
                self.last_seconds = float(seconds) if isinstance(seconds, (int, float)) else None
                return Traced(base64.b64decode(answer["klr"], validate=True),
                              tuple(Path(s) for s in answer["sources"] if isinstance(s, str)))
            fault, message = str(answer["fault"]), str(answer["message"])
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise InputError(f"{request['path']}: the tracer's answer cannot be read ({e}); did the kernel's "
                             f"Python write to it?") from None
        error = _ERRORS.get(fault, InternalError)(message)
        error.child_traceback = str(answer.get("traceback") or "")  # type: ignore[attr-defined]
        raise error


    def _answered_in_time(self, child) -> bool:
        """Whether the child starts its answer within the time limit (always, without one, or off POSIX)."""
        if not self.timeout or os.name != "posix":
            return True
        import select

        ready, _, _ = select.select([child.stdout], [], [], self.timeout)  # PEP 475: retried on EINTR itself
        return bool(ready)


_ERRORS = {INPUT: InputError, "usage": UsageError, ENVIRONMENT: EnvError, INTERNAL: InternalError}


# ====================================================================== the build step


def _source_digests(kernel_file: Path, sources: Sequence[Path]) -> dict[str, str]:
    """SHA-256 of each imported kernel-tree file but the kernel file, by path relative to the kernel's
    directory (a moved project still hits)."""
    from tusk.cache.keys import file_digest

    here = Path(os.path.realpath(kernel_file))
    return {Path(os.path.relpath(s, here.parent)).as_posix(): file_digest(s)
            for s in sources if Path(s) != here}


def _sources_unchanged(kernel_file: Path, recorded: Any) -> bool:
    from tusk.cache.keys import file_digest

    if not isinstance(recorded, dict):
        return False
    base = Path(os.path.realpath(kernel_file)).parent
    return all(isinstance(d, str) and file_digest(base / rel) == d for rel, d in recorded.items())


def _cached(store, key: str, kernel_file: Path) -> tuple[bytes, float, dict] | None:
    """The traced bytes stored under ``key`` (the seconds the trace took, the imported files' digests) if the
    files the trace imported are unchanged, else None."""
    if store is None:
        return None
    note = store.get_note(NOTE_KIND, key)
    if not isinstance(note, dict) or note.get("v") != TRACE_FORMAT or not isinstance(note.get("klr"), str):
        return None
    if not _sources_unchanged(kernel_file, note.get("sources")):
        return None
    try:
        data = base64.b64decode(note["klr"].encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        return None
    if hashlib.sha256(data).hexdigest() != note.get("sha256"):
        return None
    seconds = note.get("seconds")
    return data, float(seconds) if isinstance(seconds, (int, float)) else 0.0, dict(note["sources"])


def trace_kernel(spec, store, directory: Path, arch: str | None = None, tracer: Tracer | None = None) -> Kernel:
    """Kernel ``spec`` (a :class:`tusk.workflows.project.PythonKernel`) traced for ``arch`` (the build's
    setting: on-chip tensors are placed for its memories) -- or taken from the store -- and written as
    ``directory/<name>.klr``; a failure is recorded on the returned kernel.  With ``tracer`` the kernel's
    Python runs in its child process, else in this one."""
    from tusk.cache.keys import file_digest

    k = Kernel(path=Path(directory) / f"{spec.name}.klr", name=spec.name, entry=f"{spec.name}.klr",
               origin=Path(spec.file))
    py_digest = file_digest(spec.file)
    args = dict(getattr(spec, "args", ()) or ())
    parts = trace_parts(py_digest, spec.function, spec.inputs, spec.grid, arch, args)
    if getattr(spec, "nki_api", None) is not None:
        parts["nki_api"] = spec.nki_api  # only when given: the keys of every other kernel stay as they were
    key = trace_key(parts)
    k.trace = {"status": "not run", "key": key, "file": str(spec.file), "py_sha256": py_digest,
               "function": spec.function, "inputs": parts["inputs"], "args": parts["args"], "grid": parts["grid"],
               "arch": arch, "seconds": 0.0}
    if py_digest == "missing":
        k.error, k.fault = f"{spec.file}: cannot be read (named by kernels.{spec.name}.file in tusk.toml)", INPUT
        return k
    hit = _cached(store, key, spec.file)
    if hit is not None:
        data, seconds, sources = hit
        k.trace.update(status="cached", seconds=seconds, sources=sources)
    else:
        t0 = time.perf_counter()
        try:
            request = dict(path=spec.file, function=spec.function, inputs=list(spec.inputs), grid=spec.grid,
                           arch=arch, args=args, paths=getattr(spec, "paths", ()), api=getattr(spec, "nki_api", None))
            if tracer is not None:
                traced = tracer.trace(**request)
            else:
                with contextlib.redirect_stdout(sys.stderr):  # what the kernel prints is not the build's output
                    traced = run_frontend(**request)
        except TuskError as e:
            k.trace.update(status="failed", seconds=round(time.perf_counter() - t0, 6))
            _fail(k, e, spec)
            return k
        seconds = time.perf_counter() - t0
        if tracer is not None and tracer.last_seconds is not None:
            seconds = tracer.last_seconds  # the trace's own time: the child's start-up is not the kernel's
        data, sources = traced.klr, _source_digests(spec.file, traced.sources)
        k.trace.update(status="executed", seconds=round(seconds, 6), sources=sources)
        if store is not None:
            try:
                store.put_note(NOTE_KIND, key, {"v": TRACE_FORMAT, "klr": base64.b64encode(data).decode("ascii"),
                                                "sha256": hashlib.sha256(data).hexdigest(),
                                                "seconds": round(seconds, 6), "sources": sources})
            except OSError:
                pass  # not cached: the next build traces again
    k.digest = hashlib.sha256(data).hexdigest()
    k.trace["klr_sha256"] = k.digest
    k.trace["kernel"] = kernel_name(data)
    try:
        k.path.write_bytes(data)
    except OSError as e:
        k.error, k.fault = f"{spec.file}: cannot write the traced kernel {k.path}: {e.strerror or e}", ENVIRONMENT
        return k
    reason = read_kernel(k, "klr", store)
    if reason is not None:
        k.error, k.fault = f"{spec.file}: the front end's output is not a kernel ({reason})", INTERNAL
    elif k.error and k.fault == INTERNAL:
        k.error = f"{spec.file}: reading the traced kernel failed: {k.error}"
    return k


def _fail(k: Kernel, e: TuskError, spec) -> None:
    """A trace failed: the message keeps the front end's ``file:line`` start (else names the file)."""
    fault = fault_of(e, kernel=True)
    text = str(e)
    if str(spec.file) not in text and os.path.basename(str(spec.file)) not in text:
        text = f"{spec.file}: {text}"
    k.error = text
    k.fault = fault
    if fault == INTERNAL:
        k.traceback = getattr(e, "child_traceback", "") or "".join(traceback.format_exception(e))
