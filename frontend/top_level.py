"""A kernel file's top level that runs its own kernel on arrays of nl.bfloat16 / float8 (a script, not a module).

While ``tusk trace`` runs a kernel file to find its kernels, numpy holds those dtypes as raw bytes (``V2``,
``V1``): an array cast to one holds no numbers, so the file's own check (call the kernel, compare with numpy)
cannot run.  Such a call ends the file's top level there instead: the names it defined so far (the kernel
above the call) are the namespace the trace takes the kernel from, and the rest of the script does not run.
A call on arrays that hold numbers is simulated as before (``nki.simulate_kernel``).
"""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Iterator
from typing import Any

_LOADING: list[str] = []  # kernel files whose top level is running (innermost last)


class TopLevelStop(BaseException):
    """Raised from a top-level kernel call on raw-byte arrays; a BaseException, so that the script's own
    ``except Exception`` does not catch it."""

    def __init__(self, namespace: dict[str, Any], line: int):
        super().__init__(f"the top level stops at line {line}")
        self.namespace, self.line = namespace, line


@contextlib.contextmanager
def loading(path: str) -> Iterator[None]:
    _LOADING.append(path)
    try:
        yield
    finally:
        _LOADING.pop()


def holds_no_numbers(values: Any) -> bool:
    return any(getattr(getattr(v, "dtype", None), "kind", "") == "V" and hasattr(v, "shape") for v in values)


def stop_at_script_call(values: Any) -> None:
    """Inside a kernel file's top level, a kernel call on raw-byte arrays ends the top level (see above)."""
    if not _LOADING or not holds_no_numbers(values):
        return
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_code.co_filename == _LOADING[-1]:
            raise TopLevelStop(frame.f_globals, frame.f_lineno)
        frame = frame.f_back
