"""A tiny source-code builder for the schema-compiled reader and writer.

The reader and writer turn the schema table into straight-line Python
functions, one per type, with the primitive cases inlined.  That is several
times faster than interpreting the table value by value, and the generated
functions read like hand-written decoders.  The source is registered with
:mod:`linecache`, so tracebacks and debuggers show the generated lines.
"""

from __future__ import annotations

import linecache
from contextlib import contextmanager
from typing import Iterator


class Source:
    """Lines of Python with an indentation level and fresh local names."""

    def __init__(self) -> None:
        self._lines: list[str] = []
        self._level = 0
        self._counter = 0

    def line(self, text: str) -> None:
        self._lines.append("    " * self._level + text)

    @contextmanager
    def block(self, header: str) -> Iterator[None]:
        """``header`` (ending in a colon) followed by an indented body."""
        self.line(header)
        self._level += 1
        try:
            yield
        finally:
            self._level -= 1

    def fresh(self, prefix: str) -> str:
        """A local variable name not used before in this source."""
        self._counter += 1
        return f"{prefix}{self._counter}"

    @property
    def text(self) -> str:
        return "\n".join(self._lines) + "\n"

    def compile_into(self, namespace: dict, filename: str) -> dict:
        """Execute the source in `namespace` (its globals) and return it."""
        text = self.text
        linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
        exec(compile(text, filename, "exec"), namespace)
        namespace["__source__"] = text
        return namespace
