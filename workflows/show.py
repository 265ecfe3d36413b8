"""`tusk show`: a readable listing of a kernel file, whatever its format."""

from __future__ import annotations

from pathlib import Path

from ir.errors import TuskError


def is_klr(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(3) == b"\xd9\xd9\xf7"


def listing(path: Path) -> str:
    if not path.exists():
        raise TuskError("no such file", file=str(path))
    if is_klr(path):
        from ir import klr

        klr.load_lnc_kernel(path)  # what the backend rejects (version, contents) is an error here too
        return klr.listing(klr.read_klr(path.read_bytes(), file=str(path))) + "\n"
    from ir import bir_json
    from ir.dump import dump

    return dump(bir_json.load(path))
