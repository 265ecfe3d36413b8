"""`tusk show` and `tusk diff`: readable listings of kernels, stages and what a pass changed.

One notation for every input: a KLR kernel is brought into BIR the way the
build does it (``translate_nki_ast_to_bir`` on its host module) and listed
like a BIR-JSON file; ``--klr`` lists the KLR statements themselves.

The listing is :mod:`tusk.ir.listing` (the one the golden tests pin),
written line by line as it is produced, so the first function of a large
file appears while the rest is still being formatted and ``--limit`` stops
early.

A kernel's output directory (``OUT/<kernel>``) can be shown by stage: its
``stats.json`` names the module after every step, which the cache holds
(``--stage unroll``, ``--stage 3``; ``--diff`` shows what that step changed).
"""

from __future__ import annotations

import difflib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from tusk.ir.errors import EnvError, FormatError, PassError, UsageError
from tusk.ir.klr.magic import is_klr_bytes
from tusk.ir.listing import Filter as Filter  # the listing is tusk.ir.listing's; imported from here as before
from tusk.ir.listing import engine_codes as engine_codes
from tusk.ir.listing import inst_text as inst_text
from tusk.ir.listing import iter_listing as iter_listing
from tusk.ir.listing import predicate_text as predicate_text
from tusk.ir.listing import value_text as value_text

KLR_HINT = ("a KLR file starts with the bytes d9 d9 f7 (CBOR's self-describe tag), and the metadata string "
            "'KLR' or 'NKI' follows at byte 12")


# ====================================================================== reading any kernel file


def _head(path: Path, n: int = 64) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read(n)
    except OSError as e:
        raise EnvError(f"cannot be read ({e.strerror or e})", file=str(path)) from None


def is_klr(path: Path) -> bool:
    return is_klr_bytes(_head(path, 4))


def file_format(path: Path) -> str:
    """"klr" or "bir-json", by content (a KLR magic) and name; a TuskError naming what was expected."""
    path = Path(path)
    if not path.exists():
        raise UsageError("no such file", file=str(path))
    if path.is_dir():
        raise UsageError("a directory, not a file: tusk show lists one .klr or BIR-JSON file, or a kernel's "
                         "output directory (OUT/<kernel>, with its stats.json)", file=str(path))
    if not path.is_file():
        raise UsageError("not a regular file", file=str(path))
    head = _head(path)
    if is_klr_bytes(head[:4]):
        return "klr"
    if path.suffix == ".klr":
        raise FormatError(f"not a KLR file: expected KLR's magic bytes at the start, found {head[:8]!r} "
                          f"({KLR_HINT})", file=str(path))
    text = head.lstrip()
    if path.suffix == ".json" or text[:1] in (b"{", b"["):
        return "bir-json"
    hint = " (a Python kernel: 'tusk trace FILE.py::FUNCTION' makes its .klr)" if path.suffix == ".py" else ""
    raise FormatError(f"neither KLR (no KLR magic: {KLR_HINT}) nor BIR-JSON (a JSON object with \"functions\"); "
                      f"it starts with {head[:8]!r}{hint}", file=str(path))


def load(path: str | os.PathLike, core: int | None = 0) -> Any:
    """The BIR module of a kernel file: BIR-JSON as it is, KLR translated as the build does (logical core
    ``core``).  Nothing is written next to the file (translate stages into a temporary directory)."""
    path = Path(path)
    fmt = file_format(path)
    if fmt == "bir-json":
        from tusk.ir import bir_json

        try:
            return bir_json.load(path)
        except FormatError as e:
            if e.message.startswith("malformed JSON"):
                raise FormatError(f"not BIR-JSON (expected a JSON object with \"functions\"): {e.message}",
                                  file=e.file, where=e.where) from None
            raise
    from tusk.ir import klr
    from tusk.stages import make_pass
    from tusk.stages.host import host_module_for

    klr.load_lnc_kernel(path)  # what the backend rejects (version, contents) is an error here too
    with tempfile.TemporaryDirectory(prefix="tusk-show-") as tmp:
        host = host_module_for(str(path.resolve()), core, tmp)
        module, _ = make_pass("translate_nki_ast_to_bir", const_by_reference=True).run(host)
    return module


CODEGEN_GAP = "is not supported by the KLR -> BIR codegen"


def file_listing(path: Path, core: int | None = 0, flt: Filter | None = None) -> Iterator[str]:
    """The listing of a kernel file.  A KLR file that KLR wrote is always showable: when it holds a
    construct the KLR -> BIR codegen does not translate, its KLR statements are listed, after a note."""
    try:
        module = load(path, core)
    except PassError as e:
        if CODEGEN_GAP not in e.message or file_format(path) != "klr":
            raise
        yield f"# note: {e.message}; listing the KLR statements instead (tusk show --klr)"
        yield from klr_lines(path)
        return
    yield from iter_listing(module, flt)


def klr_lines(path: Path) -> Iterator[str]:
    """The KLR statements of a .klr file, as the reader sees them (``tusk show --klr``)."""
    from tusk.ir import klr

    if file_format(path) != "klr":
        raise FormatError(f"--klr lists KLR files; this is BIR-JSON ({KLR_HINT})", file=str(path))
    klr.load_lnc_kernel(path)
    yield from klr.listing(klr.read_klr(Path(path).read_bytes(), file=str(path))).splitlines()


# ====================================================================== the listing


def listing(path: Path) -> str:
    """The whole listing of a kernel file as one string (tests, small files)."""
    return "\n".join(iter_listing(load(path))) + "\n"


# ====================================================================== kernel output directories


@dataclass
class Stage:
    unit: str
    index: int           # 1-based step number
    label: str
    name: str
    input: str
    output: str
    status: str
    insts_in: int | None
    insts_out: int | None
    seconds: float


def is_kernel_output(path: Path) -> bool:
    return Path(path).is_dir() and (Path(path) / "stats.json").is_file()


def stages(kernel_dir: Path, unit: str | None = None) -> list[Stage]:
    """The steps of a kernel's last build (from OUT/<kernel>/stats.json)."""
    path = Path(kernel_dir) / "stats.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise EnvError(f"cannot read the build record ({e})", file=str(path)) from None
    except ValueError as e:
        raise FormatError(f"cannot read the build record ({e})", file=str(path)) from None
    units = data.get("units") or []
    if not units:
        raise FormatError("the build record names no unit", file=str(path))
    if unit is None:
        chosen = units[0]
    else:
        chosen = next((u for u in units if u.get("unit") == unit or str(u.get("core")) == unit), None)
        if chosen is None:
            raise UsageError(f"no unit {unit!r} (units: {', '.join(str(u.get('unit')) for u in units)})",
                             file=str(path))
    out = []
    for n, s in enumerate(chosen.get("steps") or [], 1):
        out.append(Stage(str(chosen.get("unit")), n, s.get("label", "?"), s.get("name", "?"), s.get("input", ""),
                         s.get("output", ""), s.get("status", "?"), s.get("insts_in"), s.get("insts_out"),
                         float(s.get("seconds") or 0.0)))
    return out


def find_stage(all_stages: list[Stage], which: str) -> Stage:
    if which.isdigit():
        n = int(which)
        if 1 <= n <= len(all_stages):
            return all_stages[n - 1]
    for s in all_stages:
        if which in (s.label, s.name):
            return s
    names = ", ".join(f"{s.index}:{s.label}" for s in all_stages)
    raise UsageError(f"no stage {which!r} (stages: {names})")


def stage_module(kernel_dir: Path, stage: Stage, store, side: str = "output") -> Any:
    """The module after (``side="output"``) or before (``"input"``) a stage: from the cache, else the
    stage file ``--stages`` wrote."""
    h = getattr(stage, side)
    if h:
        try:
            return store.load(h)
        except Exception:  # noqa: BLE001 - evicted or damaged: try the stage file
            pass
    if side == "output":
        unit_dir = stage.unit.replace("[", "_").replace("]", "")
        f = Path(kernel_dir) / "stages" / unit_dir / f"{stage.index:02d}-{stage.label.replace('#', '_')}.bir.json"
        if f.is_file():
            from tusk.ir import bir_json

            return bir_json.load(f)
    raise EnvError(f"the module {side == 'input' and 'before' or 'after'} stage {stage.label} ({h[:12] or '?'}) "
                   f"is not in the cache {store.url} any more; rebuild the kernel, or compile with "
                   f"--stage {stage.label} to keep it as a file", file=str(kernel_dir))


def stage_table(all_stages: list[Stage]) -> list[str]:
    lines = [f"{'#':>3}  {'stage':<28} {'status':<9} {'instructions':>25} {'seconds':>9}  module"]
    for s in all_stages:
        counts = f"{_n(s.insts_in)} -> {_n(s.insts_out)}"
        lines.append(f"{s.index:>3}  {s.label:<28} {s.status:<9} {counts:>25} {s.seconds:>9.3f}  {s.output[:16]}")
    return lines


def _n(v: Any) -> str:
    return f"{v:,}" if isinstance(v, int) else "-"


# ====================================================================== diff


def diff_lines(a, b, name_a: str, name_b: str, flt: Filter | None = None, context: int = 3,
               max_lines: int = 20_000) -> Iterator[str]:
    """What changed from module ``a`` to ``b``: per function, counts; then a unified diff of the listings.

    The listings' common beginning and end are skipped before comparing, so
    a pass that changes a few instructions of a large module is quick; when
    what remains is still longer than ``max_lines`` on a side, only the
    counts and the first differing lines are shown.
    """
    flt = flt or Filter()
    yield from _summary(a, b, flt)
    la = list(iter_listing(a, flt))
    lb = list(iter_listing(b, flt))
    if la == lb:
        yield "(the listings are identical)"
        return
    pre = 0
    n = min(len(la), len(lb))
    while pre < n and la[pre] == lb[pre]:
        pre += 1
    suf = 0
    while suf < n - pre and la[len(la) - 1 - suf] == lb[len(lb) - 1 - suf]:
        suf += 1
    ma, mb = la[pre:len(la) - suf], lb[pre:len(lb) - suf]
    keep = max(0, pre - context)
    if len(ma) > max_lines or len(mb) > max_lines:
        yield (f"@@ listings differ from line {pre + 1} on ({len(ma):,} lines against {len(mb):,}); "
               f"too long to align, showing the first {context * 10} of each @@")
        for line in ma[:context * 10]:
            yield "-" + line
        for line in mb[:context * 10]:
            yield "+" + line
        return
    window_a = la[keep:len(la) - max(0, suf - context)]
    window_b = lb[keep:len(lb) - max(0, suf - context)]
    out = difflib.unified_diff(window_a, window_b, name_a, name_b, n=context, lineterm="")
    for line in out:
        if line.startswith("@@"):
            yield _shift_hunk(line, keep)
        else:
            yield line


def _shift_hunk(line: str, offset: int) -> str:
    """Hunk header line numbers relative to the whole listings (the diff saw a window from ``offset``)."""
    import re

    def fix(m):
        sign, start, rest = m.group(1), int(m.group(2)), m.group(3) or ""
        return f"{sign}{start + offset}{rest}"

    return re.sub(r"([-+])(\d+)(,\d+)?", fix, line, count=2)


def _summary(a, b, flt: Filter) -> Iterator[str]:
    import numpy as np

    from tusk.ir.enums import OPCODE_NAMES

    fa = {fn.name: fn for fn in a.functions if flt.wants_function(fn.name)}
    fb = {fn.name: fn for fn in b.functions if flt.wants_function(fn.name)}
    for name in list(fa) + [n for n in fb if n not in fa]:
        x, y = fa.get(name), fb.get(name)
        if x is None:
            assert y is not None  # a name of fa or of fb
            yield f"# function {name}: added ({len(y.insts):,} instructions)"
            continue
        if y is None:
            yield f"# function {name}: removed ({len(x.insts):,} instructions)"
            continue
        parts = [f"instructions {len(x.insts):,} -> {len(y.insts):,}"]
        if len(x.deps) != len(y.deps):
            parts.append(f"edges {len(x.deps):,} -> {len(y.deps):,}")
        if len(x.memlocs) != len(y.memlocs):
            parts.append(f"memory locations {len(x.memlocs):,} -> {len(y.memlocs):,}")
        ca = np.bincount(x.insts["opcode"].astype(np.int64), minlength=len(OPCODE_NAMES))
        cb = np.bincount(y.insts["opcode"].astype(np.int64), minlength=len(OPCODE_NAMES))
        m = max(len(ca), len(cb))
        ca, cb = np.pad(ca, (0, m - len(ca))), np.pad(cb, (0, m - len(cb)))
        changed = [f"{OPCODE_NAMES[k] if k < len(OPCODE_NAMES) else k} {ca[k]}->{cb[k]}"
                   for k in np.flatnonzero(ca != cb).tolist()]
        if changed:
            parts.append("by opcode: " + ", ".join(changed[:8]) + (" ..." if len(changed) > 8 else ""))
        yield f"# function {name}: " + "; ".join(parts)
