"""Kernel files in, host modules out: what a build starts from.

A directory's files are classified (sorted by name):

* ``.klr`` (or any file starting with the KLR/CBOR magic): a KLR kernel;
* ``.json`` whose top level has ``"functions"``: a BIR-JSON kernel (one
  function per logical core; its arguments are the unallocated DRAM memory
  locations of the first function whose set is an input or output kind), or
  -- if it already holds
  ``InstNKIKLIRKernel`` placeholders -- a host module, taken as it is;
* anything else is listed as skipped, with the reason.

A kernel that cannot be read is a failed kernel (its TuskError names the
file), not a skipped one.

Every kernel becomes one host module per logical core, exactly what the
backend hands to ``translate_nki_ast_to_bir``: a ``main`` function holding
host DRAM tensors named, shaped and typed like the kernel's DRAM inputs and
outputs, and one InstNKIKLIRKernel placeholder (opcode 56) whose
``klir_binary`` is the kernel file (``kernel_format`` "bir" for BIR-JSON,
"klr" otherwise).  Its ``neuron_core_id`` is the core and its artifact
directory the kernel's output directory.

The host module names the kernel file but does not contain it, so the
first action key also takes the SHA-256 of the kernel file (and of the
const files it names): editing a kernel rebuilds it.  A kernel's interface
(inputs, outputs, core count) is memoised in the store by the file's digest,
so an unchanged kernel is not parsed again on a no-op rebuild.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ir.errors import FormatError, TuskError

KLR_MAGIC = b"\xd9\xd9\xf7"
PLACEHOLDER_OPCODE = 56
INTERFACE_VERSION = 2

# KLR dtype names that are spelled the same in BIR (float32r included).
KLR_TO_BIR_DTYPE = {n: n for n in ("bfloat16", "float16", "float32", "float32r", "int8", "int16", "int32", "int64",
                                    "uint8", "uint16", "uint32", "uint64", "float8e3", "float8e4", "float8e5",
                                    "float8_e4m3fn", "float8_e5m2_x4", "float8_e4m3fn_x4", "float4_e2m1fn_x4")}


@dataclass
class Kernel:
    """One kernel file of the input directory."""

    path: Path
    name: str                        # output directory name (the file's stem, made unique)
    digest: str = ""                 # SHA-256 of the file
    fmt: str = ""                    # "klr" | "bir" | "host"
    ncores: int = 1
    ins: list[list] = field(default_factory=list)    # [name, bir dtype, shape]
    outs: list[list] = field(default_factory=list)
    refs: list[str] = field(default_factory=list)    # other files it reads (const files, kernel files)
    host_hash: str | None = None     # fmt "host": content hash of the module
    host: Any = None                 # fmt "host": the module, when it had to be loaded
    error: str | None = None

    def interface(self) -> dict[str, Any]:
        return {"v": INTERFACE_VERSION, "fmt": self.fmt, "ncores": self.ncores, "ins": self.ins, "outs": self.outs,
                "refs": self.refs, "host_hash": self.host_hash}


class NotAKernel(Exception):
    """The file is readable but is not a kernel (it is listed as skipped)."""


@dataclass
class Skipped:
    path: Path
    reason: str


def is_klr_bytes(head: bytes) -> bool:
    return head.startswith(KLR_MAGIC)


def discover(directory: Path, store=None) -> tuple[list[Kernel], list[Skipped]]:
    """Classify the files of ``directory``; read each kernel's interface (memoised in ``store``)."""
    from cache.keys import digest as key_digest, file_digest

    directory = Path(directory)
    if not directory.is_dir():
        raise TuskError(f"{directory} is not a directory")
    kernels: list[Kernel] = []
    skipped: list[Skipped] = []
    entries = sorted(directory.iterdir())
    stems: dict[str, int] = {}
    for p in entries:
        if p.is_file():
            stems[p.stem] = stems.get(p.stem, 0) + 1
    for p in entries:
        if p.is_dir():
            skipped.append(Skipped(p, "directory (not searched)"))
            continue
        if not p.is_file():
            skipped.append(Skipped(p, "not a regular file"))
            continue
        kind = _classify(p)
        if kind is None or kind.startswith("skip:"):
            skipped.append(Skipped(p, kind[5:] if kind else "not a kernel file (.klr or BIR-JSON .json)"))
            continue
        name = p.stem if stems[p.stem] == 1 else p.name.replace(".", "_")
        k = Kernel(path=p.resolve(), name=name)
        k.digest = file_digest(k.path)
        memo_key = key_digest({"interface": INTERFACE_VERSION, "file": k.digest, "kind": kind})
        memo = store.get_note("kernel-interface", memo_key) if store is not None else None
        if memo and memo.get("v") == INTERFACE_VERSION and memo.get("fmt") == "skip":
            skipped.append(Skipped(p, memo.get("reason", "not a kernel")))
            continue
        if memo and memo.get("v") == INTERFACE_VERSION and (memo["fmt"] != "host" or store.has(memo["host_hash"])):
            k.fmt, k.ncores, k.ins, k.outs = memo["fmt"], memo["ncores"], memo["ins"], memo["outs"]
            k.refs, k.host_hash = list(memo["refs"]), memo.get("host_hash")
        else:
            try:
                _read_interface(k, kind)
            except NotAKernel as e:
                skipped.append(Skipped(p, str(e)))
                if store is not None:
                    store.put_note("kernel-interface", memo_key, {"v": INTERFACE_VERSION, "fmt": "skip",
                                                                  "reason": str(e)})
                continue
            except TuskError as e:
                k.error = str(e)
            if k.error is None and store is not None:
                if k.fmt == "host":
                    k.host_hash = store.put(k.host)
                store.put_note("kernel-interface", memo_key, k.interface())
        kernels.append(k)
    return kernels, skipped


def _classify(p: Path) -> str | None:
    try:
        with open(p, "rb") as fh:
            head = fh.read(64)
    except OSError as e:
        return f"skip:cannot be read ({e.strerror})"
    if p.suffix == ".klr" or is_klr_bytes(head):
        return "klr"
    if p.suffix == ".json":
        return "json"
    return None


def _read_interface(k: Kernel, kind: str) -> None:
    if kind == "klr":
        _read_klr(k)
    else:
        _read_bir_json(k)


def _read_klr(k: Kernel) -> None:
    from ir import klr

    kernel = klr.load_lnc_kernel(k.path)
    k.fmt = "klr"
    k.ncores = max(1, len(kernel.bodies))
    k.ins = [_klr_tensor(t, k.path) for t in kernel.inputs]
    k.outs = [_klr_tensor(t, k.path) for t in kernel.outputs]
    k.refs = sorted({_beside(sc.fileName, k.path) for sc in getattr(kernel, "sharedConstants", ()) or ()
                     if isinstance(getattr(sc, "fileName", None), str) and sc.fileName})


def _beside(name: str, kernel_path: Path) -> str:
    """A file a kernel names: absolute as is, relative to the kernel file's directory otherwise."""
    return name if os.path.isabs(name) else str(kernel_path.parent / name)


def _klr_tensor(t: Any, path: Path) -> list:
    dname = t.dtype.name
    if dname not in KLR_TO_BIR_DTYPE:
        raise FormatError(f"tensor {t.name}: KLR dtype {dname} has no BIR equivalent", file=str(path))
    shape = [int(t.shape.parDim), *(int(d) for d in t.shape.freeDims)]
    return [t.name, KLR_TO_BIR_DTYPE[dname], shape]


def _read_bir_json(k: Kernel) -> None:
    from ir import bir_json
    from ir.enums import DTYPE_NAMES, FnKind, Mem, TENSOR_KIND_BY_NAME

    data = k.path.read_bytes()
    try:
        obj = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise FormatError(f"malformed JSON: {e}", file=str(k.path)) from None
    if not isinstance(obj, dict) or "functions" not in obj:
        raise NotAKernel("JSON without top-level \"functions\" (not a BIR-JSON kernel)")
    module = bir_json.from_obj(obj, file=str(k.path))
    if any(bool((f.insts["opcode"] == PLACEHOLDER_OPCODE).any()) for f in module.functions if len(f.insts)):
        k.fmt = "host"
        k.host = module
        k.refs = _placeholder_files(module, k.path)
        return
    fns = [f for f in module.functions if f.kind != FnKind.NKI]
    if not fns:
        raise FormatError("BIR-JSON kernel has no functions", file=str(k.path))
    k.fmt = "bir"
    k.ncores = len(fns)
    fn = fns[0]
    # ExternalInput/Input and ExternalOutput/Output, and their *Parameter forms, which
    # translate_nki_ast_to_bir also binds to the placeholder's arguments
    ins_kinds = {TENSOR_KIND_BY_NAME[n] for n in ("ExternalInput", "ExternalInputParameter", "Input")}
    out_kinds = {TENSOR_KIND_BY_NAME[n] for n in ("ExternalOutput", "ExternalOutputParameter", "Output")}
    # one argument per unallocated DRAM memory location, as translate_nki_ast_to_bir binds them
    ml = fn.memlocs
    for m in range(len(ml)):
        if ml.get("mtype", m) != Mem.DRAM or ml.get("addr", m) >= 0:
            continue
        s = ml.get("set", m)
        kind = int(fn.sets.get("kind", s))
        if kind not in ins_kinds and kind not in out_kinds:
            continue
        shape = [int(x) for x in (fn.value(fn.sets.get("shape", s)) or ())]
        entry = [fn.strings[ml.get("name", m)], DTYPE_NAMES[int(fn.sets.get("dtype", s))], shape]
        (k.ins if kind in ins_kinds else k.outs).append(entry)
    k.refs = sorted({_beside(f.strings[c], k.path) for f in fns for c in f.memlocs["const_path"].tolist()
                     if c >= 0})


def _placeholder_files(module, path: Path) -> list[str]:
    """The kernel files a host module's placeholders name (resolved next to the module if relative)."""
    out = set()
    for fn in module.functions:
        if not len(fn.insts):
            continue
        for i in np.nonzero(fn.insts["opcode"] == PLACEHOLDER_OPCODE)[0].tolist():
            p = fn.record(fn.insts.get("attrs", i)).get("klir_binary")
            if isinstance(p, str) and p:
                q = Path(p)
                if not q.is_absolute() and not q.exists():
                    q = path.parent / q
                out.add(str(q))
    return sorted(out)


def file_digests(k: Kernel) -> dict[str, str]:
    """Digests of every file kernel ``k``'s build reads: the first action key's ``files`` part."""
    from cache.keys import file_digest

    files = {str(k.path): k.digest}
    for r in k.refs:
        files[r] = file_digest(r)
    return files


def host_module(k: Kernel, core: int, artifact_dir: str, *, arch: str = "gen3",
                instruction_limit: int | None = None):
    """The host module for kernel ``k`` on logical core ``core`` (see the module docstring)."""
    from ir.builder import Builder

    b = Builder("main")
    ins = [b.dram(name, shape or [1], dtype, kind="ExternalInput") for name, dtype, shape in k.ins]
    outs = [b.dram(name, shape or [1], dtype, kind="ExternalOutput") for name, dtype, shape in k.outs]
    fmt = "bir" if k.fmt == "bir" else "klr"
    b.klir_kernel(str(k.path), fmt, [t.ap() for t in ins], [t.ap() for t in outs], name=f"{k.name}_kernel",
                  func_args={n: n for n, _, _ in k.ins}, func_outs={n: n for n, _, _ in k.outs})
    attrs: dict[str, Any] = {"neuron_core_id": core}
    if instruction_limit is not None:
        attrs["max_instruction_limit"] = instruction_limit
    module = b.module(**attrs)
    module.arch = arch
    module.artifact_dir = artifact_dir
    return module


def output_name(k: Kernel, core: int | None) -> str:
    """File name of the final BIR-JSON of kernel ``k`` on ``core``."""
    if core is None or k.ncores <= 1:
        return f"{k.name}.bir.json"
    return f"{k.name}.core{core}.bir.json"


def artifact_dir(out: Path, k: Kernel) -> str:
    return os.path.abspath(os.fspath(Path(out) / k.name))
