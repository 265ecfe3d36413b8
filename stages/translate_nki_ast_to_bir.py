"""TranslateNKIASTToBIR: expand every NKI-kernel placeholder into a real BIR function (seed 000).

Upstream, an NKI kernel is one ``InstNKIKLIRKernel`` (opcode 56) carrying a
kernel file path (``klir_binary``), a format (``kernel_format``) and the
kernel's DRAM arguments.  For each placeholder this pass

1. resolves the file: the path as written, else the module's artifact
   directory + the file's basename (a basename never escapes the artifact
   directory); neither -> ``NKI Kernel file ... does not exist``;
2. stages the file into the artifact directory;
3. builds the kernel body for this logical core (``neuron_core_id``):
   *path B* (``kernel_format == "bir"``): function ``functions[core]`` of a
   BIR-JSON file; *path A* (anything else): the KLR file (version 0.0.12,
   Contents ``lnc``) lowered by :class:`~stages.klr_codegen.KlirToBirCodegen`;
   a core past the file's LNC count logs "... skip lowering" and leaves the
   placeholder in place;
4. appends the new function (kind NKI, unique name) to the module and puts an
   ``InstNKIKernel`` (55) call site where the placeholder was: operands
   cloned from the placeholder, ``func_args`` / ``func_outs`` mapping the
   kernel's DRAM memory locations to the caller's by name, the scratchpad
   sizes (``sb_buf_shape`` / ``psum_buf_shape``) when the kernel is
   allocated, ``kernel_source_val`` Beta2 (KLR) or Beta3 (BIR-JSON);
5. copies every Const tensor's file (found relative to the kernel file's
   directory) into the artifact directory and rewrites its
   ``const_file_path`` relative to it: a relative path keeps its name, an
   absolute one becomes ``abs/<digest of the path>/<basename>``, so two
   files never share a name (``stage_files=false``: nothing is copied and
   nothing rewritten).

Stat ``artifacts`` maps each artifact-relative name the result relies on
(the kernel file, relative const files) to its source, so that a build that
does not rerun the pass can stage them.  The pass reads files the module
only names (``reads_files``): a build keys it on their digests, and does
not cache its failures, which can depend on the artifact directory.

Only placeholders that were expanded are removed.  The pass materialises; it
never allocates: a KLR kernel with an unplaced SBUF/PSUM tensor is an error.

The module the backend hands this pass (a ``main`` with host DRAM tensors
and one placeholder) is built by :mod:`tusk.stages.host`.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import time
from dataclasses import dataclass, field

import numpy as np

from tusk.ir import enums
from tusk.ir.columns import Record
from tusk.ir.enums import FnKind, Mem, Op, Role, TensorKind
from tusk.ir.errors import FormatError, InputError, PassError
from tusk.ir.module import Function, Module
from tusk.stages.base import Pass, Stats, option
from tusk.stages.host import dram_arguments, kernel_file

log = logging.getLogger("tusk.translate_nki_ast_to_bir")

MSG_MISSING = ("NKI Kernel file {filename} does not exist, either in full path or in compiler artifacts "
               "directory")
MSG_CORE_UNSET = "NeuronCoreId must be set when the LNC count is greater than 1"
MSG_SKIP = "The kernel is compiled for LNC count lower than the current core_id {core} skip lowering"
KERNEL_SOURCE = {"klr": "Beta2", "bir": "Beta3"}


@dataclass
class _Lowered:
    fn: Function
    fmt: str                       # "klr" | "bir"
    ins: list[tuple[str, str]]     # (kernel DRAM memloc name, kernel-side argument name)
    outs: list[tuple[str, str]]
    operators: int = 0
    read_seconds: float = 0.0


@dataclass
class _Staging:
    """What one run stages into the artifact directory: artifact-relative name -> source file."""

    art: str
    stage: bool
    const_dir: str = ""
    by_reference: bool = False     # name const files as written, never look for them (a listing needs no data)
    artifacts: dict[str, str] = field(default_factory=dict)

    def claim(self, rel: str, src: str) -> str:
        """Claim artifact-relative name ``rel`` for file ``src``; two different files may not share it."""
        src = os.path.abspath(src)
        other = self.artifacts.setdefault(rel, src)
        if os.path.realpath(other) != os.path.realpath(src):
            raise PassError(f"two files would be staged as {rel} in the artifact directory: {other} and {src}")
        return rel

    def const(self, written: str, kernel_dir: str) -> str:
        """The const_file_path for a const file the kernel names ``written``; stages it (see the docstring)."""
        if self.by_reference:
            return written
        src = _find_const(written, kernel_dir, self.const_dir)
        if not self.art:
            return os.path.abspath(src)
        if not self.stage:  # the path stays as the kernel wrote it
            if not os.path.isabs(written):
                self.claim(_const_dest(written), src)
            return written
        rel = self.claim(_const_dest(written), src)
        stage_file(src, self.art, rel)
        return rel

    def copy_const_files(self, fn: Function, kernel_dir: str) -> None:
        """Every Const tensor's file into the artifact directory; its path rewritten relative to it."""
        ml = fn.memlocs
        if not len(ml):
            return
        kinds = fn.sets["kind"]
        for m in range(len(ml)):
            cp = ml.get("const_path", m)
            if cp < 0 or int(kinds[ml.get("set", m)]) != TensorKind.Const:
                continue
            written = fn.strings[cp]
            path = self.const(written, kernel_dir)
            if path != written:
                ml.set("const_path", m, fn.s(path))


@dataclass(frozen=True)
class TranslateNKIASTToBIR(Pass):
    """Expand every NKI-kernel placeholder into a BIR function (see the module docstring)."""

    name = "translate_nki_ast_to_bir"
    version = "2"
    reads_files = True  # the kernel and const files the placeholders name (see the module docstring)

    stage_files: bool = option(True, "copy the kernel file and its const files into the artifact directory")
    const_dir: str = option("", "a directory besides the kernel's own that const files may be read from "
                                "(absolute const paths elsewhere are refused)")
    const_by_reference: bool = option(False, "name const files as the kernel wrote them without reading them "
                                             "(tusk show: a listing needs no constant data)")

    def run(self, module: Module) -> tuple[Module, Stats]:
        t0 = time.perf_counter()
        out = module.copy()
        stats: Stats = {"placeholders": 0, "expanded": 0, "skipped": 0, "klir_operators": 0,
                        "kernel_instructions": 0, "read_seconds": 0.0}
        staging = _Staging(module.artifact_dir, self.stage_files and not self.const_by_reference,
                           os.path.abspath(self.const_dir) if self.const_dir else "", self.const_by_reference)
        log.info("Started running Lower KLIR Kernel into NKI kernel instruction")
        taken = {f.name for f in out.functions}
        for k, fn in enumerate(list(out.functions)):
            if not len(fn.insts):
                continue
            rows = np.nonzero(fn.insts["opcode"] == Op.NKIKLIRKernel)[0].tolist()
            if not rows:
                continue
            log.info("Start of KLIR kernel lowering pass, number of insts: %d, number of allocs: %d",
                     len(fn.insts), len(fn.memlocs))
            scan = time.perf_counter()
            calls: dict[int, tuple[str, Record]] = {}  # placeholder row -> (call name, call attrs)
            for row in rows:  # collect first, expand, then remove only the expanded ones
                stats["placeholders"] += 1
                log.info("Found InstKLIRKernel: %s", fn.inst_name(row))
                lowered = _lower(out, fn, row, staging, taken)
                if lowered is None:
                    stats["skipped"] += 1
                    continue
                taken.add(lowered.fn.name)
                out.functions.append(lowered.fn)
                calls[row] = _call_site(fn, row, lowered)
                stats["expanded"] += 1
                stats["klir_operators"] += lowered.operators
                stats["kernel_instructions"] += len(lowered.fn.insts)
                stats["read_seconds"] += lowered.read_seconds
            if calls:
                out.functions[k] = _replace_placeholders(fn, calls)
            log.info("Scan BKs time (s): %.6f", time.perf_counter() - scan)
        stats["read_seconds"] = round(stats["read_seconds"], 6)
        stats["seconds"] = round(time.perf_counter() - t0, 6)
        if staging.artifacts:
            stats["artifacts"] = dict(sorted(staging.artifacts.items()))
        return out, stats


# ====================================================================== one placeholder


def _lower(module: Module, fn: Function, row: int, staging: _Staging, taken: set[str]) -> _Lowered | None:
    attrs = fn.record(fn.insts.get("attrs", row))
    written = kernel_file(attrs)
    if written is None:
        raise PassError(f"InstNKIKLIRKernel {fn.inst_name(row)} names no kernel file (klir_binary)")
    art = module.artifact_dir
    path = resolve_kernel_file(written, art)
    if art:
        staging.claim(os.path.basename(path), path)
        if staging.stage:
            stage_file(path, art)
    fmt = attrs.get("kernel_format", "")
    core = module.neuron_core_id
    if fmt == "bir":
        lowered = _from_bir_json(path, core, taken)
    else:
        lowered = _from_klr(path, core, taken, staging)
    if lowered is None:
        log.info(MSG_SKIP.format(core=core))
        return None
    if lowered.fmt == "bir":
        staging.copy_const_files(lowered.fn, os.path.dirname(path))
    return lowered


def _from_bir_json(path: str, core: int | None, taken: set[str]) -> _Lowered | None:
    from tusk.ir.bir_json import load_function_obj, parse_json

    t0 = time.perf_counter()
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as e:
        raise InputError(f"cannot open BIR JSON kernel file {path} ({e.strerror or e})") from None
    obj = parse_json(data, file=path)  # a FormatError for anything it cannot read (deep nesting included)
    read = time.perf_counter() - t0
    if not isinstance(obj, dict):
        raise FormatError("a BIR-JSON kernel must be a JSON object", file=path)
    log.info("BIR JSON file has been loaded from disk: %s", path)
    fns = obj.get("functions")
    if not isinstance(fns, list):
        raise FormatError("a BIR-JSON kernel needs a \"functions\" array", file=path)
    core = _core_for(core, len(fns))
    if core >= len(fns):
        return None
    fobj = fns[core]
    name = fobj.get("name") if isinstance(fobj, dict) else None
    log.info("Creating NKI function from BIR JSON: %s and core id: %d", name, core)
    kfn = load_function_obj(fobj, file=path, where=f"functions[{core}]")
    kfn.kind = FnKind.NKI
    kfn.name = _unique_name(kfn.name, taken)
    ins, outs = dram_arguments(kfn)
    return _Lowered(kfn, "bir", [(n, n) for n, _, _ in ins], [(n, n) for n, _, _ in outs], operators=len(kfn.insts), read_seconds=read)


def _from_klr(path: str, core: int | None, taken: set[str], staging: _Staging) -> _Lowered | None:
    from tusk.ir.klr import load_lnc_kernel
    from tusk.stages.klr_codegen import KlirToBirCodegen

    t0 = time.perf_counter()
    kernel = load_lnc_kernel(path)  # "fail to locate KLIR artifact" / "Wrong KLR version" / content type
    read = time.perf_counter() - t0
    core = _core_for(core, len(kernel.bodies))
    if core >= len(kernel.bodies):
        return None
    const_files = {sc.name: staging.const(sc.fileName, os.path.dirname(path))
                   for sc in kernel.sharedConstants}
    base = kernel.name if len(kernel.bodies) == 1 else f"{kernel.name}.core{core}"
    fn = Function(_unique_name(base, taken), FnKind.NKI)
    cg = KlirToBirCodegen(fn, kernel, core, const_files=const_files)
    cg.codegen_lnc_kernel()
    if not cg.is_allocated:
        shown = ", ".join(cg.unallocated[:8]) + (" ..." if len(cg.unallocated) > 8 else "")
        raise PassError(f"NKI kernel {kernel.name} is not allocated: SBUF/PSUM tensor(s) {shown} have no "
                        f"placement (parOffset/freeOffset); TranslateNKIASTToBIR does not allocate")
    ins = [(cg.memloc_name(t), t.name) for t in kernel.inputs]
    outs = [(cg.memloc_name(t), t.name) for t in kernel.outputs]
    return _Lowered(fn, "klr", ins, outs, operators=cg.n_operators, read_seconds=read)


def _call_site(fn: Function, row: int, lowered: _Lowered) -> tuple[str, Record]:
    attrs = fn.record(fn.insts.get("attrs", row))
    view = fn.inst(row)
    caller_ins = [o.memloc_name for o in view.ins]
    caller_outs = [o.memloc_name for o in view.outs]
    given_args = dict(attrs.get("func_args") or {})
    given_outs = dict(attrs.get("func_outs") or {})
    func_args = _map_arguments(lowered.ins, caller_ins, given_args, "input", lowered.fn.name)
    func_outs = _map_arguments(lowered.outs, caller_outs, given_outs, "output", lowered.fn.name)
    call = {"func": lowered.fn.name, "func_args": func_args, "func_outs": func_outs,
            "address_rotation_scope_val": attrs.get("address_rotation_scope_val", 0),
            "kernel_source_val": KERNEL_SOURCE[lowered.fmt]}
    shapes = scratchpad_shapes(lowered.fn)
    if shapes is not None:
        call["sb_buf_shape"], call["psum_buf_shape"] = shapes
    return lowered.fn.name, Record.of(call)


# ====================================================================== helpers


def _core_for(core: int | None, count: int) -> int:
    if core is None:
        if count > 1:
            raise PassError(MSG_CORE_UNSET)
        return 0
    return core


def _unique_name(name: str, taken: set[str]) -> str:
    out, k = name or "nki_kernel", 1
    while out in taken:
        out = f"{name}_{k}"
        k += 1
    return out


def _inside(path: str, directory: str) -> bool:
    real, base = os.path.realpath(path), os.path.realpath(directory)
    return real == base or real.startswith(base.rstrip(os.sep) + os.sep)


def safe_join(directory: str, rel: str, what: str, where: str = "the artifact directory") -> str:
    """``directory/rel`` for a relative path that stays inside ``directory`` (no '..', no symlink out)."""
    if not rel or os.path.isabs(rel):
        raise PassError(f"refusing {what} {rel!r}: not a relative path inside {directory}")
    if "\x00" in rel:  # no file system takes it (os.path.realpath raises ValueError on it)
        raise PassError(f"refusing {what} {rel!r}: a file name cannot hold a NUL character")
    parts = rel.replace("\\", "/").split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise PassError(f"refusing {what} {rel!r}: it would escape {where} {directory}")
    joined = os.path.join(directory, *parts)
    if os.path.isabs(os.path.relpath(joined, directory)) or not _inside(joined, directory):
        raise PassError(f"refusing {what} {rel!r}: {joined} resolves outside {where} {directory}")
    return joined


def resolve_kernel_file(written: str, artifact_dir: str) -> str:
    """The kernel file: the path as written, else the artifact directory + its basename."""
    if os.path.exists(written):
        return written
    if artifact_dir:
        base = os.path.basename(written.rstrip("/\\")) if written not in ("..", ".") else written
        candidate = safe_join(artifact_dir, base, "kernel file name")
        if os.path.exists(candidate):
            return candidate
    raise PassError(MSG_MISSING.format(filename=written))


def stage_file(path: str, artifact_dir: str, rel: str | None = None) -> str:
    """Copy ``path`` to ``artifact_dir/rel`` (default: its basename); returns the destination."""
    dest = safe_join(artifact_dir, rel or os.path.basename(path), "staged file name")
    if os.path.exists(dest) and os.path.samefile(path, dest):
        return dest
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    if os.path.islink(dest):
        raise PassError(f"refusing to overwrite symbolic link {dest} in the artifact directory")
    shutil.copyfile(path, dest)
    return dest


def _find_const(rel: str, kernel_dir: str, const_dir: str = "") -> str:
    """A const file named relative to the kernel file's directory, or absolute inside it or ``const_dir``.

    Not in the artifact directory: there it could be a stale copy standing
    in for a missing input.  A kernel found in the artifact directory has
    its const files looked up there, being its directory.  An absolute path
    anywhere else is refused: a kernel must not be able to copy any file
    the user can read (``/etc/passwd``) into an output they may publish.
    """
    if os.path.isabs(rel):
        if not (_inside(rel, kernel_dir) or (const_dir and _inside(rel, const_dir))):
            where = f"the kernel's directory {kernel_dir}" + (f" or {const_dir}" if const_dir else "")
            raise PassError(f"refusing const file {rel}: const files must be inside {where} (name another "
                            f"directory with --set translate_nki_ast_to_bir.const_dir=DIR)")
        if os.path.isfile(rel):
            return rel
        raise PassError(f"const file {rel} does not exist")
    p = safe_join(kernel_dir, rel, "const file name", "the kernel file's directory")
    if os.path.isfile(p):
        return p
    if os.path.exists(p):  # a device or FIFO would be read forever
        raise PassError(f"refusing const file {rel}: {p} is not a regular file")
    raise PassError(f"const file {rel} does not exist (looked for {p})")


def _const_dest(written: str) -> str:
    """Artifact-relative name of a const file: a relative path as written; an absolute one under abs/<digest>/."""
    if os.path.isabs(written):
        tag = hashlib.sha256(os.path.normpath(written).encode()).hexdigest()[:16]
        return f"abs/{tag}/{os.path.basename(written)}"
    return os.path.normpath(written).replace(os.sep, "/")


def _map_arguments(kernel_args: list[tuple[str, str]], caller: list[str | None], given: dict,
                   what: str, fname: str) -> dict[str, str]:
    """Kernel memloc name -> caller memloc name: the placeholder's map, then equal names, then position."""
    out: dict[str, str] = {}
    caller_names = [c for c in caller if c]
    for k, (memloc, arg) in enumerate(kernel_args):
        target = given.get(arg, given.get(memloc))
        if target is None:
            if arg in caller_names:
                target = arg
            elif memloc in caller_names:
                target = memloc
            elif len(kernel_args) == len(caller) and caller[k]:
                target = caller[k]
        if target is None:
            raise PassError(f"kernel {fname}: {what} {arg} matches no argument of the InstNKIKLIRKernel "
                            f"(its {what}s are {', '.join(caller_names) or 'none'})")
        out[memloc] = target
    return out


def scratchpad_shapes(fn: Function) -> tuple[list[int], list[int]] | None:
    """(sb_buf_shape, psum_buf_shape) = [partitions, bytes] the kernel's SBUF/PSUM tensors span.

    None when some SBUF/PSUM memory location is unallocated (the kernel is
    not allocated, so there is nothing to size).
    """
    ml = fn.memlocs
    out = []
    for mtype in (Mem.SB, Mem.PSUM):
        sel = ml["mtype"] == mtype if len(ml) else np.zeros(0, dtype=bool)
        if not sel.any():
            out.append([0, 0])
            continue
        if (ml["addr"][sel] < 0).any():
            return None
        parts = int((ml["base"][sel] + ml["nparts"][sel]).max())
        end = int((ml["addr"][sel] + ml["pbytes"][sel]).max())
        out.append([parts, end])
    return out[0], out[1]


def _replace_placeholders(fn: Function, calls: dict[int, tuple[str, Record]]) -> Function:
    """``fn`` with each expanded placeholder row replaced by its NKIKernel call site (same position).

    The call site is a new row whose operands are clones of the placeholder's
    ins and outs; the placeholder's dependence edges move to it; then the
    placeholder rows are removed.
    """
    fn = fn.copy()
    ins = fn.insts
    names = set(fn.inst_names())
    order = np.arange(len(ins), dtype=np.int64)
    new_rows: dict[int, int] = {}
    for row, (fname, attrs) in calls.items():
        view = fn.inst(row)
        operands = [tuple(fn.operands.row(j)[c] for c in fn.operands.names)
                    for j in view.operand_rows() if fn.operands.get("role", j) in (Role.IN, Role.OUT)]
        call_name = _unique_name(fname, names)
        names.add(call_name)
        c = fn.add_inst(Op.NKIKernel, enums.Engine.Unassigned, view.block, call_name, operands, attrs=attrs)
        new_rows[row] = c
    deps = fn.deps
    extra = []
    for src, dst, kind in zip(deps["src"].tolist(), deps["dst"].tolist(), deps["kind"].tolist()):
        if src in new_rows or dst in new_rows:
            extra.append((new_rows.get(src, src), new_rows.get(dst, dst), kind))
    for e in extra:
        fn.deps.append(e)
    for row, c in new_rows.items():
        order[row] = c
    out = fn.take_insts(order)
    out.invalidate()
    return out
