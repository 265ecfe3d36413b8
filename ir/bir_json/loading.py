"""``load`` and ``loads``: the columnar loader first, the ordinary reader where it does not apply."""

from __future__ import annotations

import os

from tusk.ir.bir_json import column_reader
from tusk.ir.bir_json.reader import from_obj, open_read, parse_json
from tusk.ir.errors import FormatError
from tusk.ir.module import Module


def load(path: str | os.PathLike, *, fast: bool = True) -> Module:
    """Read a BIR-JSON file (``.gz``: gzip-compressed) into a Module."""
    path = os.fspath(path)
    if fast:
        module = column_reader.try_load(path)
        if module is not None:
            return module
    try:
        with open_read(path) as fh:
            data = fh.read()
    except (OSError, EOFError) as e:
        raise FormatError(f"cannot read BIR-JSON file: {getattr(e, 'strerror', None) or e}", file=path) from None
    return loads(data, file=path)



def loads(text: str | bytes, file: str | None = None, *, fast: bool = True) -> Module:
    """Read BIR-JSON text (large texts column-wise, as :func:`load` does)."""
    if fast:
        data = text.encode() if isinstance(text, str) else text
        module = column_reader.try_loads(data, file)
        if module is not None:
            return module
    return from_obj(parse_json(text, file), file=file)
