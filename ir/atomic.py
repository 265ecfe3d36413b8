"""Write a file so that readers see the old one or the whole new one, never a part."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import BinaryIO


@contextlib.contextmanager
def atomic_output(path: str) -> Iterator[BinaryIO]:
    """A binary file to write ``path``'s new content into: it replaces ``path`` when the block ends normally;
    on an exception (or an interruption) the temporary file goes and ``path`` is untouched."""
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as fh:
            yield fh
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
