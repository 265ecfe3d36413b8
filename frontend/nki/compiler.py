"""``nki.compiler`` / ``neuronxcc.nki.compiler`` (``import neuronxcc.nki.compiler as ncc``): the allocation
and scheduling hints a kernel may give the Neuron compiler.

Tusk places every tile itself (as it ignores ``nl.ndarray(address=)``): ``buffer=ncc.sbuf.mod_alloc(...)``,
``ncc.sbuf.alloc(func)`` and ``ncc.psum.alloc(...)`` are the plain buffers, the same numbers either way.
``skip_middle_end_transformations`` and ``no_reorder`` change no numbers either.  Any other name (the
collectives, ``rank_id``) is refused at the line that uses it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from tusk.frontend.nki import language as _nl
from tusk.frontend.nki.isa_signature import unknown_name


class _Buffer:
    """A memory the compiler would allocate in: every allocation request is that memory."""

    def __init__(self, memory: str):
        self.memory = memory

    def alloc(self, *_: Any, **__: Any) -> str:
        return self.memory

    def mod_alloc(self, *_: Any, **__: Any) -> str:
        return self.memory

    def auto_alloc(self, *_: Any, **__: Any) -> str:
        return self.memory

    def __repr__(self) -> str:
        return f"nki.compiler.{self.memory}"


sbuf = _Buffer(_nl.sbuf)
psum = _Buffer(_nl.psum)
hbm = _Buffer(_nl.hbm)


def skip_middle_end_transformations(fn: Any) -> Any:
    return fn


@contextlib.contextmanager
def no_reorder() -> Iterator[None]:
    yield


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    raise unknown_name("nki.compiler", name)
