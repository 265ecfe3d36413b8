"""Values nested without bound, handled on an explicit stack.

KLIR's recursive types (Access inside a BirAccessPattern's scalarOffset or
vectorOffset, spec §2.8) can nest to any depth: the format does not bound
it, and KLR's own reader and writer follow thousands of levels.  Python
recursion cannot (its limit, then the C stack), so everything in
:mod:`ir.klr` that walks such values does it with generators: a function
that needs the result of a nested part yields a generator for that part,
and :func:`run` drives the generators from a list, sending each one's
result back to the generator that asked for it.  Suspended generators live
on the heap, so only memory bounds the depth.

The reader and writer, which must be fast on ordinary files, follow the
first :data:`FAST_DEPTH` levels by plain calls and switch to generators
only below that (see :mod:`ir.klr.reader`).
"""

from __future__ import annotations

from typing import Any, Generator

from tusk.ir.errors import FormatError

#: Levels of recursive-type nesting that the reader and writer follow by
#: direct calls before continuing on an explicit stack.  Real files use 1.
FAST_DEPTH = 32

Nested = Generator[Any, Any, Any]


def run(gen: Nested) -> Any:
    """The return value of `gen`, which may yield generators for nested parts.

    Each yielded generator is run the same way (to any depth) and its
    return value is sent back as the value of the ``yield``.  Exceptions
    propagate unchanged.
    """
    stack = [gen]
    sent = None
    while True:
        try:
            child = stack[-1].send(sent)
        except StopIteration as done:
            stack.pop()
            if not stack:
                return done.value
            sent = done.value
            continue
        stack.append(child)
        sent = None


def write_deep(body: Any, value: Any, out: bytearray) -> None:
    """Run the writer generator ``body(value, out)``; it yields ``(child_body, child)``
    for nested values, which are written the same way, in order, into `out`.

    A value that contains itself (possible only by bypassing the frozen
    classes) would never end: it is refused with a FormatError.
    """
    stack = [body(value, out)]
    path = [id(value)]
    on_path = {id(value)}
    while stack:
        try:
            child_body, child = next(stack[-1])
        except StopIteration:
            stack.pop()
            on_path.discard(path.pop())
            continue
        if id(child) in on_path:
            raise FormatError(f"cannot write a {type(child).__qualname__} that contains itself")
        stack.append(child_body(child, out))
        path.append(id(child))
        on_path.add(id(child))
