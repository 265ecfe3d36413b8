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


def _read_request(stream: BinaryIO) -> dict[str, Any] | None:
    head = stream.read(8)
    if len(head) < 8:
        return None
    (size,) = struct.unpack(">Q", head)
    return pickle.loads(stream.read(size))  # noqa: S301 -- written by the build that started this process


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    requests = os.fdopen(os.dup(0), "rb")
    answers = os.fdopen(os.dup(1), "w", encoding="utf-8")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)   # the kernel cannot read the requests
    os.dup2(2, 1)         # what the kernel prints goes to the build's stderr, never into the answers
    sys.stdout = sys.stderr
    import tusk.frontend.trace  # noqa: F401 -- start-up, not the first kernel's trace time
    while (request := _read_request(requests)) is not None:
        answers.write(json.dumps(_answer(request)) + "\n")
        answers.flush()


if __name__ == "__main__":
    main()
