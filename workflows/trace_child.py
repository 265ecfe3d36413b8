"""The process that runs traced kernels' Python, apart from the build (``python -m tusk.workflows.trace_child``).

A kernel's Python runs arbitrary code: ``os._exit(0)`` would end the build
with exit 0 and nothing written, and a ``KeyboardInterrupt`` it raises would
look like Ctrl-C.  So the build traces in this child.  Requests come from the
build (trusted: a pickle of the spec's own values, length-prefixed on stdin);
each answer goes back as one JSON line (the KLR bytes in base64, the imported
files, or the error's fault and text) on a descriptor the kernel's prints do
not reach -- the parent never unpickles anything this process writes.

SIGINT is ignored here: a real Ctrl-C stops the build, which ends this child;
any KeyboardInterrupt seen here was raised by kernel code.

Each kernel traces in a process of its own, forked from this one once the
front end is imported (where ``os.fork`` exists): a kernel's Python can patch
what it imports (``nl.add = nl.subtract``, ``np.float32 = np.float64``), and in
one shared process the next kernel's trace -- and the cache note stored under
that kernel's own key -- would have used the patched API.  The build ends this
process with SIGTERM (its time limit, Ctrl-C): the kernel's process is killed
and reaped first, so nothing is left behind, not even a zombie; should this
process die any other way, the kernel's dies with it (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import base64
import json
import os
import pickle
import signal
import struct
import sys
import time
import traceback
from typing import Any, BinaryIO


def _answer(request: dict[str, Any]) -> dict[str, Any]:
    from tusk.ir.errors import InputError, TuskError, fault_of
    from tusk.workflows.traced import escaped_message, run_frontend

    t0 = time.perf_counter()
    try:
        traced = run_frontend(**request)
    except TuskError as e:
        return {"ok": False, "fault": fault_of(e), "message": str(e),
                "traceback": "".join(traceback.format_exception(e))}
    except KeyboardInterrupt as e:  # raised by the kernel: SIGINT is ignored in this process
        err = escaped_message(e, request["path"])
        return {"ok": False, "fault": fault_of(err) if isinstance(err, InputError) else "internal",
                "message": str(err), "traceback": "".join(traceback.format_exception(e))}
    return {"ok": True, "klr": base64.b64encode(bytes(traced.klr)).decode("ascii"),
            "sources": [os.fspath(s) for s in traced.sources], "seconds": round(time.perf_counter() - t0, 6)}


def _die_with_parent(parent: int) -> None:
    """Linux: this process is killed when the one that forked it ends (the build's time limit kills that one)."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent ended before prctl took effect
        os._exit(1)


_KERNEL: list[int] = []  # the process tracing a kernel now


def _end_on_sigterm(signum: int, frame: Any) -> None:
    """SIGTERM from the build: kill and reap the kernel's process, then end."""
    for pid in _KERNEL:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except OSError:
            pass
    os._exit(128 + signum)


def _isolated_answer(request: dict[str, Any]) -> str:
    """:func:`_answer` as its JSON line, made in a process forked for this one kernel (see the module
    docstring); the build reads the line and reports one it cannot."""
    if not hasattr(os, "fork"):
        return json.dumps(_answer(request))
    read_end, write_end = os.pipe()
    parent = os.getpid()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # not between the fork and _KERNEL knowing it
    pid = os.fork()
    if pid == 0:  # the kernel's own process: answer through the pipe, then end without cleanup of the parent's
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        os.close(read_end)
        try:
            _die_with_parent(parent)
            data = json.dumps(_answer(request)).encode()
        except BaseException as e:  # noqa: BLE001 -- whatever escapes is reported, never raised in the fork
            data = json.dumps({"ok": False, "fault": "internal", "message": f"the tracer failed: {e!r}",
                               "traceback": traceback.format_exc()}).encode()
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(write_end, view):]
            for stream in (sys.stdout, sys.stderr):  # what the kernel printed without a newline
                stream.flush()
        finally:
            os._exit(0)
    _KERNEL.append(pid)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    os.close(write_end)
    chunks = []
    with os.fdopen(read_end, "rb") as pipe:
        while chunk := pipe.read(1 << 20):
            chunks.append(chunk)
    _, status = os.waitpid(pid, 0)
    _KERNEL.clear()
    if not chunks:
        from tusk.workflows.traced import exited_message

        return json.dumps({"ok": False, "fault": "input",
                           "message": exited_message(request.get("path"), os.waitstatus_to_exitcode(status))})
    return b"".join(chunks).decode("utf-8", "replace").replace("\n", " ")  # one line, whatever was written


def _read_request(stream: BinaryIO) -> dict[str, Any] | None:
    head = stream.read(8)
    if len(head) < 8:
        return None
    (size,) = struct.unpack(">Q", head)
    return pickle.loads(stream.read(size))  # noqa: S301 -- written by the build that started this process


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _end_on_sigterm)
    requests = os.fdopen(os.dup(0), "rb")
    answers = os.fdopen(os.dup(1), "w", encoding="utf-8")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)   # the kernel cannot read the requests
    os.dup2(2, 1)         # what the kernel prints goes to the build's stderr, never into the answers
    sys.stdout = sys.stderr
    import tusk.frontend.trace  # noqa: F401 -- start-up, not the first kernel's trace time
    while (request := _read_request(requests)) is not None:
        answers.write(_isolated_answer(request) + "\n")
        answers.flush()


if __name__ == "__main__":
    main()
