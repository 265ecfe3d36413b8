"""Trace errors: what a kernel asked for that the front end cannot do, placed at the kernel's line."""

from __future__ import annotations

import os
import traceback
from types import TracebackType

from tusk.ir.errors import InputError

FRONTEND_DIR = os.path.dirname(os.path.abspath(__file__))


class TraceError(InputError):
    """The kernel cannot be traced; the message starts with the kernel's ``file:line``."""


class Unsupported(TraceError):
    """Raised inside the front end; :func:`locate` adds the kernel's ``file:line``."""


def unsupported(what: str) -> Unsupported:
    return Unsupported(f"not supported: {what}")


def user_frame(tb: TracebackType | None) -> tuple[str, int] | None:
    """The innermost traceback frame outside Tusk's front end: the kernel line that made the call."""
    best = None
    for frame in traceback.extract_tb(tb):
        path = os.path.abspath(frame.filename)
        if not path.startswith(FRONTEND_DIR + os.sep) and frame.lineno is not None:
            best = (frame.filename, frame.lineno)
    return best


def current_user_line() -> tuple[str, int] | None:
    """The kernel line being executed now (for statement positions)."""
    for frame, lineno in traceback.walk_stack(None):
        path = os.path.abspath(frame.f_code.co_filename)
        if not path.startswith(FRONTEND_DIR + os.sep):
            return frame.f_code.co_filename, lineno
    return None
