"""Kernel files as the backend receives them: their interface, and the host module around them.

The backend hands ``translate_nki_ast_to_bir`` a *host module*: a ``main``
function holding host DRAM tensors named, shaped and typed like the
kernel's DRAM inputs and outputs, and one ``InstNKIKLIRKernel`` placeholder
whose ``klir_binary`` names the kernel file (``kernel_format`` "bir" for
BIR-JSON, "klr" otherwise).  This module is the one place that reads a
kernel file's interface and builds that host module; the build
(``tusk.workflows.kernels``) memoises the interface, tests and tools call
:func:`host_module_for`.

An interface is a JSON-able dict (the build stores it as a note)::

    {"fmt": "klr" | "bir" | "host", "ncores": int,
     "ins": [[name, bir dtype, shape], ...], "outs": [...],
     "refs": [file names the kernel reads, as written], "art": artifact dir (fmt "host"),
     "size": instructions one core's kernel has once its static loops are unrolled (an estimate
             for KLR: its operator count; the build sizes its executor by it)}

A BIR-JSON file that already holds placeholders is a host module itself
(fmt "host"); its ``refs`` are the placeholders' kernel files.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from tusk.ir.columns import Record
from tusk.ir.enums import DTYPE_BY_NAME, DTYPE_NAMES, DTYPE_SIZES, INPUT_KINDS, OUTPUT_KINDS, FnKind, Mem, Op
from tusk.ir.errors import FormatError
from tusk.ir.input_checks import MAX_BYTES
from tusk.ir.module import Function, Module


class NotAKernel(Exception):
    """The file is readable but is not a kernel (a build lists it as skipped)."""


def kernel_kind(path: str | Path) -> str:
    """"klr" for a KLR binary (by its magic bytes or a .klr suffix), else "json"."""
    from tusk.ir.klr import is_klr_bytes

    with open(path, "rb") as fh:
        head = fh.read(4)
    return "klr" if is_klr_bytes(head) or str(path).endswith(".klr") else "json"


def read_interface(path: str | Path, kind: str | None = None) -> dict[str, Any]:
    """The interface of kernel file ``path`` (see the module docstring); FormatError if unreadable."""
    kind = kind or kernel_kind(path)
    return _klr_interface(Path(path)) if kind == "klr" else _bir_json_interface(Path(path))


def _klr_interface(path: Path) -> dict[str, Any]:
    from tusk.ir import klr

    kernel = klr.load_lnc_kernel(path)
    size = sum(1 for _ in klr.iter_operators(kernel, 0)) if kernel.bodies else 0
    return {"fmt": "klr", "ncores": max(1, len(kernel.bodies)), "size": size,
            "ins": [_klr_tensor(t, path) for t in kernel.inputs],
            "outs": [_klr_tensor(t, path) for t in kernel.outputs],
            "refs": sorted({sc.fileName for sc in getattr(kernel, "sharedConstants", ()) or ()
                            if isinstance(getattr(sc, "fileName", None), str) and sc.fileName})}


def _klr_tensor(t: Any, path: Path) -> list:
    from tusk.stages.klr_codegen import KLR_TO_BIR_DTYPE  # the one KLR -> BIR dtype table

    dname = t.dtype.name
    if dname not in KLR_TO_BIR_DTYPE:
        raise FormatError(f"tensor {t.name}: KLR dtype {dname} has no BIR equivalent", file=str(path))
    shape = [int(t.shape.parDim), *(int(d) for d in t.shape.freeDims)]
    # the host module's DRAM argument holds this shape's bytes: past int64 that crashed the whole build
    if math.prod(shape) * DTYPE_SIZES[DTYPE_BY_NAME[KLR_TO_BIR_DTYPE[dname]]] > MAX_BYTES:
        raise FormatError(f"tensor {t.name}: shape {shape} holds more than 2^62 bytes", file=str(path))
    return [t.name, KLR_TO_BIR_DTYPE[dname], shape]


def _bir_json_interface(path: Path) -> dict[str, Any]:
    from tusk.ir import bir_json

    obj = bir_json.parse_json(path.read_bytes(), file=str(path))  # FormatError for anything it cannot read
    if not isinstance(obj, dict) or "functions" not in obj:
        raise NotAKernel("JSON without top-level \"functions\" (not a BIR-JSON kernel)")
    module = bir_json.from_obj(obj, file=str(path))
    if any(True for _ in placeholders(module)):
        return {"fmt": "host", "ncores": 1, "ins": [], "outs": [], "refs": placeholder_files(module),
                "art": module.artifact_dir or "", "size": module.n_insts()}
    fns = [f for f in module.functions if f.kind != FnKind.NKI]
    if not fns:
        raise FormatError("BIR-JSON kernel has no functions", file=str(path))
    ins, outs = dram_arguments(fns[0])
    refs = sorted({f.strings[c] for f in fns for c in f.memlocs["const_path"].tolist() if c >= 0})
    return {"fmt": "bir", "ncores": len(fns), "ins": ins, "outs": outs, "refs": refs, "size": _unrolled_size(fns[0])}


def _unrolled_size(fn: Function) -> int:
    """Instructions ``fn`` has once unrolled (0 when that cannot be told: the passes will say why)."""
    from tusk.stages.unroll import clone_count_bound

    try:
        return min(clone_count_bound(fn), 1 << 62)
    except Exception:  # noqa: BLE001 - an estimate only; translate and unroll report a broken kernel
        return 0


def dram_arguments(fn: Function) -> tuple[list[list], list[list]]:
    """``[name, bir dtype, shape]`` of the kernel's arguments: its unallocated DRAM input and output
    memory locations, as translate_nki_ast_to_bir binds them to the placeholder's operands."""
    ins: list[list] = []
    outs: list[list] = []
    ml = fn.memlocs
    for m in range(len(ml)):
        if ml.get("mtype", m) != Mem.DRAM or ml.get("addr", m) >= 0:
            continue
        s = ml.get("set", m)
        kind = int(fn.sets.get("kind", s))
        if kind not in INPUT_KINDS and kind not in OUTPUT_KINDS:
            continue
        shape = [int(x) for x in (fn.value(fn.sets.get("shape", s)) or ())]
        entry = [fn.strings[ml.get("name", m)], DTYPE_NAMES[int(fn.sets.get("dtype", s))], shape]
        (ins if kind in INPUT_KINDS else outs).append(entry)
    return ins, outs


def placeholder_rows(fn: Function) -> list[int]:
    """Rows of the InstNKIKLIRKernel placeholders of ``fn``."""
    return np.nonzero(fn.insts["opcode"] == Op.NKIKLIRKernel)[0].tolist() if len(fn.insts) else []


def placeholders(module: Module) -> Iterator[tuple[Function, int]]:
    """(function, row) of every InstNKIKLIRKernel placeholder of ``module``."""
    for fn in module.functions:
        for i in placeholder_rows(fn):
            yield fn, i


def kernel_file(attrs: Mapping[str, Any]) -> str | None:
    """The kernel file a placeholder's attributes name: ``klir_binary`` as a path, or as the object the
    compiler's custom-call configuration writes (``{"binary": path, "input_names": ...}``); None if neither."""
    written = attrs.get("klir_binary")
    if isinstance(written, Mapping):
        written = written.get("binary")
    return written if isinstance(written, str) and written else None


def naming_kernel_file(attrs: Record, path: str) -> Record:
    """``attrs`` naming ``path`` as its kernel file, in the form it was written (a path, or the object's
    ``binary``)."""
    written = attrs.get("klir_binary")
    if isinstance(written, Mapping):
        return attrs.with_(klir_binary={**dict(written), "binary": path})
    return attrs.with_(klir_binary=path)


def placeholder_files(module: Module) -> list[str]:
    """The kernel files a host module's placeholders name, as written."""
    out = set()
    for fn, i in placeholders(module):
        p = kernel_file(fn.record(fn.insts.get("attrs", i)))
        if p is not None:
            out.add(p)
    return sorted(out)


def host_module(kernel_path: str, interface: dict[str, Any], core: int | None, artifact_dir: str, *,
                name: str = "nki", arch: str = "gen3", instruction_limit: int | None = None) -> Module:
    """The host module for one kernel file on logical core ``core`` (see the module docstring).

    ``neuron_core_id`` is ``core`` (left out when None), ``max_instruction_limit``
    the post-unroll budget when given; the placeholder is ``<name>_kernel``.
    """
    from tusk.ir.builder import Builder

    ins, outs = interface["ins"], interface["outs"]
    b = Builder("main")
    # a kernel argument among both the inputs and the outputs (read and written in place) is one tensor: an
    # output that the caller's values start it as (sim.interp.run fills any DRAM tensor its inputs name)
    both = {n for n, _, _ in ins} & {n for n, _, _ in outs}
    out_of = {n: b.dram(n, shape or [1], dt, kind="ExternalOutput") for n, dt, shape in outs}
    tin = [out_of[n] if n in both else b.dram(n, shape or [1], dt, kind="ExternalInput") for n, dt, shape in ins]
    tout = list(out_of.values())
    fmt = "bir" if interface["fmt"] == "bir" else "klr"
    b.klir_kernel(str(kernel_path), fmt, [t.ap() for t in tin], [t.ap() for t in tout], name=f"{name}_kernel",
                  func_args={n: n for n, _, _ in ins}, func_outs={n: n for n, _, _ in outs})
    attrs: dict[str, Any] = {} if core is None else {"neuron_core_id": core}
    if instruction_limit is not None:
        attrs["max_instruction_limit"] = instruction_limit
    module = b.module()
    module.attributes = Record.of(attrs)
    module.arch = arch
    module.artifact_dir = str(artifact_dir or "")
    return module


def host_module_for(kernel_path: str, core_id: int | None = 0, artifact_dir: str = "", *,
                    arch: str = "gen3") -> Module:
    """The host module for ``kernel_path`` read from disk (tests and tools)."""
    return host_module(kernel_path, read_interface(kernel_path), core_id, artifact_dir,
                       name=Path(kernel_path).stem, arch=arch)
