"""Trace errors: what a kernel asked for that the front end cannot do, placed at the kernel's line."""

from __future__ import annotations

import functools
import os
import sys
import sysconfig
import traceback
from types import TracebackType

from tusk.ir import errors as _ir_errors
from tusk.ir.errors import InputError

# Tusk's code a trace runs: the front end, and tusk.ir (the KLR writer).  A frame anywhere else is the
# kernel's (its file, a module it imports, numpy ...).
TUSK_CODE = (os.path.dirname(os.path.abspath(__file__)) + os.sep,
             os.path.dirname(os.path.abspath(_ir_errors.__file__)) + os.sep)


STDLIB = os.path.join(sysconfig.get_paths()["stdlib"], "")
INSTALLED = tuple({os.path.join(sysconfig.get_paths()[k], "") for k in ("purelib", "platlib")})  # site-packages


@functools.lru_cache(maxsize=1024)  # asked for every frame of every traced statement
def in_stdlib(filename: str) -> bool:
    path = os.path.abspath(filename)
    return path.startswith(STDLIB) and not path.startswith(INSTALLED)


def in_tusk(filename: str) -> bool:
    return os.path.abspath(filename).startswith(TUSK_CODE)


class TraceError(InputError):
    """The kernel cannot be traced; the message starts with the kernel's ``file:line``."""


class Unsupported(TraceError):
    """Raised inside the front end; the trace entry adds the kernel's ``file:line`` (``trace._located``)."""


def unsupported(what: str) -> Unsupported:
    return Unsupported(f"not supported: {what}")


class MissingAttribute(Unsupported, AttributeError):
    """A method or property of NKI's tensors that the front end lacks (``t.rearrange(...)``): refused at the
    kernel's line like any unsupported form, and still an AttributeError, so ``hasattr`` and
    ``getattr(t, name, default)`` answer as they would."""


# NKI names whose work no KLR operator or access form expresses, so the pipeline cannot run them: the refusal
# says why (and what does similar work), not only that the name is missing; by the name's last part (nisa.topk,
# nki.isa.topk and neuronxcc.nki.isa.topk alike)
NO_KLR_FORM = {
    "topk": "the GpSimd engine's top-k over a 16-partition snake has no KLR operator; nisa.max8 and "
            "nisa.nc_match_replace8 find the largest values 8 at a time",
    "indirect": "NeuronCore-v4 Tensor Indirection (per-element free-axis offsets read by a compute "
                "instruction) has no KLR access form; nisa.nc_n_gather gathers within each partition",
}


def not_in_front_end(qualified: str) -> str:
    """The reason a name NKI has is refused: no KLR form for it, or simply not written yet."""
    why = NO_KLR_FORM.get(qualified.rsplit(".", 1)[-1], "not in Tusk's NKI front end; docs/frontend.md lists "
                                                        "what is")
    return f"not supported: {qualified} ({why})"


def missing_attribute(owner: str, name: str) -> MissingAttribute:
    return MissingAttribute(not_in_front_end(f"{owner}.{name}"))


def user_frame(tb: TracebackType | None) -> tuple[str, int] | None:
    """The innermost traceback frame outside Tusk's code: the kernel line that made the call."""
    best = None
    for frame in traceback.extract_tb(tb):
        if not in_tusk(frame.filename) and frame.lineno is not None and not frame.filename.startswith("<frozen"):
            best = (frame.filename, frame.lineno)
    return best


def current_user_line() -> tuple[str, int] | None:
    """The kernel line being executed now (for statement positions): not Tusk's, nor the standard library's (a
    loop entered through contextlib's ``__enter__`` was placed at that file's line, named as the kernel's)."""
    frame = sys._getframe(1)  # not traceback.walk_stack(None): it skips the caller's callers (its own callers)
    while frame is not None:
        name = frame.f_code.co_filename
        if not in_tusk(name) and not name.startswith("<frozen") and not in_stdlib(name):
            return name, frame.f_lineno
        frame = frame.f_back
    return None
