"""`tusk show`: a readable listing of a kernel file, whatever its format."""

from __future__ import annotations

from pathlib import Path

from tusk.ir.errors import TuskError
from tusk.ir.klr.wire import is_klr_bytes


def is_klr(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return is_klr_bytes(fh.read(4))
    except OSError as e:
        raise TuskError(f"cannot be read ({e.strerror or e})", file=str(path)) from None


def listing(path: Path) -> str:
    if not path.exists():
        raise TuskError("no such file", file=str(path))
    if not path.is_file():
        raise TuskError("not a file (tusk show lists one .klr or BIR-JSON file)", file=str(path))
    if is_klr(path):
        from tusk.ir import klr

        klr.load_lnc_kernel(path)  # what the backend rejects (version, contents) is an error here too
        return klr.listing(klr.read_klr(path.read_bytes(), file=str(path))) + "\n"
    from tusk.ir import bir_json
    from tusk.ir.dump import dump

    return dump(bir_json.load(path))
