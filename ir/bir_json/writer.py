"""The BIR-JSON writer: streams a module in the policy spelling (docs/bir-json.md, "Writing").

Module, function and allocation heads are rendered as JSON objects with a splice where their large
lists go; blocks and instructions stream through :func:`.column_writer.write_blocks`.  A :class:`Sink`
with a row range keeps only the bytes of one part of the document (:mod:`.parts`).
"""

from __future__ import annotations

import gzip
import io
import os
from typing import Any

from tusk.ir import enums, wire
from tusk.ir.atomic import atomic_output
from tusk.ir.bir_json.column_writer import write_blocks
from tusk.ir.bir_json.policy import (
    ABSENT,
    SPLICE,
    SPLICE_JSON,
    json_bytes,
    jsonable,
    render_attributes,
    render_memloc,
    render_module_head,
    render_set,
)
from tusk.ir.bir_json.render import InstRender
from tusk.ir.columns import thaw
from tusk.ir.direct_write import DirectWriter
from tusk.ir.module import Function, Module

END = 1 << 62  # beyond every row: the last part takes the closing bytes


# ====================================================================== saving


def save(module: Module, path: str | os.PathLike, *, flatten: bool = False) -> None:
    """Write ``module`` to ``path`` atomically (write aside, then rename); ``.gz``: gzip-compressed.

    Uncompressed, whole 4 MiB chunks go to the file with ``O_DIRECT`` while the next is rendered
    (:mod:`tusk.ir.direct_write`: copying them into fresh page cache cost ~1 ms of CPU per MB here).

    ``flatten``: write :func:`flatten_kernel` of the module (each kernel function as ``functions[i]``
    named ``sg0000``, ``sg0001``, ...), the per-core shape real-dump tools read.
    """
    path = os.fspath(path)
    if flatten:
        module = flatten_kernel(module)
    with atomic_output(path) as raw:
        if path.endswith(".gz"):
            with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=3, mtime=0) as fh:
                write(module, fh)
        else:  # whole chunks past the page cache (tusk.ir.direct_write), the rest as before
            with DirectWriter(raw) as fh:
                write(module, fh)


def dumps(module: Module, *, flatten: bool = False) -> str:
    buf = io.BytesIO()
    write(flatten_kernel(module) if flatten else module, buf)
    return buf.getvalue().decode()




def write(module: Module, fh: Any) -> None:
    """Stream ``module`` as BIR-JSON (UTF-8) into a binary (or text) file handle."""
    write_module(module, Sink(fh))


def write_module(module: Module, out: Sink) -> None:
    root = jsonable(render_module_head(module))
    root["functions"] = SPLICE
    normal = [f for f in module.functions if f.kind != enums.FnKind.NKI]
    nki = [f for f in module.functions if f.kind == enums.FnKind.NKI]
    groups = {"functions": normal}
    if nki:
        root["nki_functions"] = SPLICE
        groups["nki_functions"] = nki
    _, patch = wire.split(module.extras)
    wire.apply(root, patch)
    parts = json_bytes(root).split(SPLICE_JSON)
    # sorted keys put "functions" before "nki_functions": the splices come in that order
    order = [k for k in ("functions", "nki_functions") if root.get(k) == SPLICE]
    for k, part in enumerate(parts):
        out.write(part)
        if k < len(order):
            fns = groups[order[k]]
            out.write(b"[\n")
            for i, fn in enumerate(fns):
                out.start_function(len(fn.insts))
                if i:
                    out.write(b",\n")
                if out.overlaps_function():
                    write_function(fn, out)
            out.write(b"\n]")
    out.write(b"\n")
    out.flush()


SINK_BYTES = 1 << 22  # output is buffered up to this many bytes


class Sink:
    """Buffered bytes output over a binary or text handle; with a row range [lo, hi), only the bytes
    written while the position (:meth:`at`) lies in it (one part of the document)."""

    def __init__(self, fh: Any, lo: int = -1, hi: int = END):
        self.fh = fh
        self.text = isinstance(fh, io.TextIOBase)
        self.buf: list[bytes | memoryview] = []
        self.size = 0
        self.lo, self.hi = lo, hi
        self.base = self.pos = self.next_base = 0  # the current function's first row; the position

    def start_function(self, n_rows: int) -> None:
        """The next function's rows follow the previous function's."""
        self.base = self.pos = self.next_base
        self.next_base += n_rows

    def overlaps_function(self) -> bool:
        """Whether any byte of the current function belongs to this sink's part."""
        last = max(self.base, self.next_base - 1)
        return self.base < self.hi and last >= self.lo

    def at(self, row: int) -> bool:
        """Move the position to the current function's ``row``; whether bytes written there are kept."""
        self.pos = self.base + row
        return self.lo <= self.pos < self.hi

    def write(self, b: bytes | memoryview) -> None:
        if not self.lo <= self.pos < self.hi:
            return
        if len(b) > SINK_BYTES // 4 and not self.text:  # large pieces go through without a copy
            self.flush()
            self.fh.write(b)
            return
        self.buf.append(b)
        self.size += len(b)
        if self.size > SINK_BYTES:
            self.flush()

    def flush(self) -> None:
        if self.buf:
            data = b"".join(bytes(b) if isinstance(b, memoryview) else b for b in self.buf)
            self.fh.write(data.decode() if self.text else data)
            self.buf, self.size = [], 0


def write_function(fn: Function, out: Any) -> None:
    if not isinstance(out, Sink):
        out = Sink(out)
    extras, patch = wire.split(fn.extras)
    head = jsonable(extras)
    sets_locs: dict[int, list] = {}
    mset = fn.memlocs["set"]
    for m in range(len(fn.memlocs)):
        sets_locs.setdefault(int(mset[m]), []).append(jsonable(render_memloc(fn, m)))
    allocations = []
    for r in range(len(fn.regs)):
        d, rpatch = wire.split(fn.record(fn.regs.get("extra", r)))
        d = jsonable(d)
        d.update({"Skind": "register", "name": fn.strings[fn.regs.get("name", r)]})
        allocations.append(wire.apply(d, rpatch))
    for s in range(len(fn.sets)):
        allocations.append(jsonable(render_set(fn, s, sets_locs.get(s, []))))
    attributes: Any = render_attributes(fn.attrs, fn.kind, None)
    if patch and "attributes" in patch:
        raw, pol = patch["attributes"]
        unchanged = bool(pol) and wire.same(attributes, pol[0])
        if raw:
            attributes = thaw(raw[0]) if unchanged else render_attributes(fn.attrs, fn.kind, thaw(raw[0]))
        elif unchanged:
            attributes = ABSENT
    head.update({"name": fn.name, "allocations": allocations, "blocks": SPLICE})
    if attributes is not ABSENT:
        head["attributes"] = attributes
    if patch:
        wire.apply(head, {k: v for k, v in patch.items() if k not in ("attributes", "blocks")})
        if "blocks" in patch and not patch["blocks"][0] and len(fn.blocks) == 0:
            head.pop("blocks", None)
    text = json_bytes(head)
    if SPLICE_JSON not in text:
        out.write(text)
        return
    before, after = text.split(SPLICE_JSON)
    out.write(before)
    write_blocks(fn, InstRender(fn), out)
    out.write(after)


# ====================================================================== flattening


def flatten_kernel(module: Module) -> Module:
    """The per-core dump shape: the module's kernel functions as ``functions[0..]`` named ``sg0000``, ...

    The kernel functions are the NKI functions a translate pass produced (``nki_functions``); a module
    without any (a kernel read from BIR-JSON directly) keeps its functions.  The host ``main`` with its
    call site is dropped: real per-core dumps hold the kernel body alone.  Module attributes, queues and
    arch are kept.
    """
    kernels = [f for f in module.functions if f.kind == enums.FnKind.NKI] or list(module.functions)
    out = []
    for k, fn in enumerate(kernels):
        f = fn.copy()
        f.name = f"sg{k:04d}"
        f.kind = enums.FnKind.NORMAL
        out.append(f)
    return Module(out, module.arch, module.version, module.attributes, module.artifact_dir, module.queues,
                  module.extras)

