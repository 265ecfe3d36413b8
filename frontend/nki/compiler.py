"""``nki.compiler`` (``neuronxcc.nki.compiler``, ``ncc``): NKI's direct allocation and kernel directives.

Tusk places every on-chip tile itself (:mod:`tusk.frontend.alloc`, by live
ranges), as it does for NKI 2.x's ``address=``; so a direct allocation is a
placement *hint*: ``buffer=ncc.sbuf.mod_alloc(base_addr=...)`` makes an SBUF
tensor, ``ncc.psum.mod_alloc(base_bank=...)`` a PSUM tensor, and the address,
bank and modulo counts are checked for their documented types and then not
used.  Every logical tile of such a tensor is its own tile, as the program
reads: a kernel whose result depends on two logical tiles sharing bytes
(reading one after writing the other) is outside what the hints mean here.

The kernel decorators (``skip_middle_end_transformations``,
``enable_stack_allocator``, ``force_auto_alloc``) and the loop directive
``no_reorder()`` concern the Neuron compiler's own passes: they leave the
kernel as it is.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

from tusk.frontend.errors import unsupported


class Allocated(str):
    """A direct allocation given as ``buffer=``: the memory it names (``str``: "sbuf" or "psum"), the call
    that made it, for messages, and whether the kernel chose the place (``alloc``, ``mod_alloc``; not
    ``auto_alloc``)."""

    call: str
    placed: bool

    def __new__(cls, memory: str, call: str, placed: bool = True) -> Allocated:
        out = super().__new__(cls, memory)
        out.call = call
        out.placed = placed
        return out

    def __repr__(self) -> str:
        return self.call


def _ints(call: str, name: str, value: Any, tuple_: bool = False) -> None:
    ok = (isinstance(value, tuple) and all(isinstance(v, int) and v > 0 for v in value)) if tuple_ else \
        (isinstance(value, int) and not isinstance(value, bool) and value >= 0)
    if not ok:
        want = "a tuple of positive ints" if tuple_ else "a non-negative int"
        raise unsupported(f"{call}({name}={value!r}): {name} must be {want}")


def _memory(memory: str) -> types.SimpleNamespace:
    ns = f"ncc.{memory}"

    def alloc(func: Callable[..., Any]) -> Allocated:
        if not callable(func):
            raise unsupported(f"{ns}.alloc({func!r}): expects a function of (idx, pdim_size, fdim_size)")
        return Allocated(memory, f"{ns}.alloc(...)")

    def auto_alloc() -> Allocated:
        return Allocated(memory, f"{ns}.auto_alloc()", placed=False)

    def mod_alloc(*, base_addr: int = 0, base_bank: int = 0, base_partition: int = 0, num_bank_tiles: tuple = (),
                  num_par_tiles: tuple = (), num_free_tiles: tuple = ()) -> Allocated:
        call = f"{ns}.mod_alloc"
        for name, base in (("base_addr", base_addr), ("base_bank", base_bank), ("base_partition", base_partition)):
            _ints(call, name, base)
        for name, counts in (("num_bank_tiles", num_bank_tiles), ("num_par_tiles", num_par_tiles),
                             ("num_free_tiles", num_free_tiles)):
            _ints(call, name, counts, tuple_=True)
        if memory == "sbuf" and (base_bank or num_bank_tiles):
            raise unsupported(f"{call}(base_bank=/num_bank_tiles=): SBUF has no banks (ncc.psum.mod_alloc has)")
        return Allocated(memory, f"{call}(...)")

    return types.SimpleNamespace(alloc=alloc, auto_alloc=auto_alloc, mod_alloc=mod_alloc)


sbuf = _memory("sbuf")
psum = _memory("psum")


def _decorator(fn: Any = None, **_options: Any) -> Any:
    """A kernel decorator of the Neuron compiler's passes, bare (``@skip_middle_end_transformations``) or
    called (``@enable_stack_allocator(log_level=...)``): the kernel unchanged."""
    if fn is None or not callable(fn):
        return lambda f: f
    return fn


skip_middle_end_transformations = enable_stack_allocator = force_auto_alloc = _decorator


class Directive:
    """A loop directive (``nl.sequential_range(n, directives=ncc.no_reorder())``): the order is the program's."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"ncc.{self.name}()"

    def __enter__(self) -> Directive:  # `with ncc.no_reorder():` around the statements it orders
        return self

    def __exit__(self, *_: object) -> None:
        return None


def no_reorder() -> Directive:
    return Directive("no_reorder")


def multi_buffer(n: int) -> Directive:
    """``directives=ncc.multi_buffer(8)``: how many buffers the compiler may rotate; the program is the same."""
    _ints("ncc.multi_buffer", "n", n)
    return Directive("multi_buffer")


NAMES = ("sbuf.alloc", "sbuf.mod_alloc", "sbuf.auto_alloc", "psum.alloc", "psum.mod_alloc", "psum.auto_alloc",
         "skip_middle_end_transformations", "enable_stack_allocator", "force_auto_alloc", "no_reorder",
         "multi_buffer")


def __getattr__(name: str) -> Any:
    """Any other name of ``nki.compiler`` (the collectives, ``rank_id``) is refused where the kernel uses it."""
    if name.startswith("__"):
        raise AttributeError(name)
    from tusk.frontend.nki.isa_signature import missing_name

    return missing_name("nki.compiler", "nki.compiler", name)
