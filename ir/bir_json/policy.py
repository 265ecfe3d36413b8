"""The policy spelling: the keys and values the writer emits, and the defaults the reader drops.

Both directions use these: the writer renders objects with them, the reader compares what a document
spells with them to decide what to keep as a wire patch (:mod:`tusk.ir.wire`).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np
import orjson

from tusk.ir import enums, wire
from tusk.ir.arch import PSUM_BANK_BYTES
from tusk.ir.columns import thaw
from tusk.ir.enums import DTYPE_NAMES, MEM_NAMES, TENSOR_CLASS_BY_NAME, TENSOR_CLASS_NAMES, TENSOR_KIND_NAMES, Mem, Op
from tusk.ir.module import Function, Module

# Function attribute flags <-> their wire spellings.  The backend's spelling of its numeric attributes is
# unknown (spec §9); KLR writes ``need_unroll`` (read as unrollable + marked to unroll) and ``need_dce``.
FLAG_KEYS = {
    enums.FnAttr.MARKED_TO_UNROLL: "marked_to_unroll",
    enums.FnAttr.UNROLLABLE: "unrollable",
    enums.FnAttr.ROTATE_PSUM_AND_SB: "rotate_psum_and_sb",
    enums.FnAttr.ROTATE_SB_ONLY: "rotate_sb_only",
    enums.FnAttr.ROTATE_DRAM: "rotate_dram",
    enums.FnAttr.KERNEL_SCOPE: "kernel_scope",
    enums.FnAttr.UNROLLED: "unrolled",
}
FLAG_BY_KEY = {v: k for k, v in FLAG_KEYS.items()}
NEED_UNROLL = frozenset({enums.FnAttr.UNROLLABLE, enums.FnAttr.MARKED_TO_UNROLL})

ROOT_KEYS = frozenset({"functions", "nki_functions", "queues", "version", "arch", "attributes", "artifact_path"})
FUNCTION_KEYS = frozenset({"name", "attributes", "allocations", "blocks"})
INST_KEYS = frozenset({"name", "opcode", "engine", "ins", "outs", "indirection_ins", "dependencies",
                       "loop_carried_dependencies", "unroll_dependencies", "predicates", "blocks"})
SET_KEYS = frozenset({"Skind", "name", "kind", "tensor_class", "dtype", "tensor_shape", "memorylocations",
                      "tensorId2MemLocSize", "is_block", "n_blocks"})
MEMLOC_KEYS = frozenset({"Skind", "name", "type", "addr", "allocated", "dims", "base", "bank", "tensor_id",
                         "const_file_path"})

# Keys the policy adds to every allocation / memory location when the record lacks them (K's derived
# defaults); the reader drops them when they hold exactly this value, so they cost nothing in memory.
SET_DEFAULTS = {"partition_dim": 0, "file": "", "no_spill": False, "volatile": False,
                "virtual": False}
MEMLOC_DEFAULTS = {"pinned": False}
#: DMACopy without a queue is written on this one (Tusk-only name); read back as "no queue".
DEFAULT_DMA_QUEUE = "qTuskDefault"
DMA_COPY_DEFAULTS = {"mode": "Copy", "queue": DEFAULT_DMA_QUEUE}


# ====================================================================== the policy spelling


def dims_to_geometry(dims: tuple[int, ...], mtype: int, dsize: int) -> tuple[int, int]:
    """(partitions, bytes per partition) of a memory location's ``dims``.

    SB/PSUM: ``[partitions, free...]``; DRAM and the rest: one row of all the bytes.  With more than one
    free entry, each is a free dimension scaled by the element size, as KLR's ``physicalShape`` writes
    them (so bytes = size x product of dims[k] / size); entries that are not multiples of the element
    size are taken as plain byte counts.
    """
    if mtype in (Mem.SB, Mem.PSUM):
        if not dims:
            return 1, 0
        return dims[0], _free_bytes(dims[1:], dsize)
    if not dims:
        return 1, 0
    if len(dims) == 1:
        return 1, dims[0]
    return 1, dims[0] * _free_bytes(dims[1:], dsize)


def _free_bytes(free: tuple[int, ...], dsize: int) -> int:
    if not free:
        return 0
    if len(free) == 1:
        return free[0]
    if all(d % dsize == 0 for d in free):
        return dsize * math.prod(d // dsize for d in free)
    return math.prod(free)


def policy_dims(mtype: int, nparts: int, pbytes: int) -> list[int]:
    return [nparts, pbytes] if mtype in (Mem.SB, Mem.PSUM) else [pbytes]


def policy_bank(bank: int, mtype: int, addr: int) -> int:
    """The bank written for a memory location (the real one of a PSUM location, else 0, as KLR writes)."""
    if bank >= 0:
        return bank
    if mtype == Mem.PSUM and addr >= 0:
        return addr // PSUM_BANK_BYTES
    return 0


def default_tensor_class(kind: int) -> int:
    """KLR's default tensor class: NeuronSBTensor for internal tensors, else Tensor."""
    return TENSOR_CLASS_BY_NAME["NeuronSBTensor" if kind == enums.TensorKind.Internal else "Tensor"]


def derived_keys(opcode: int, rec: Mapping[str, Any]) -> dict[str, Any]:
    """Keys the policy adds to an instruction whose record lacks them."""
    if opcode == Op.DMACopy:
        return {k: v for k, v in DMA_COPY_DEFAULTS.items() if k not in rec}
    if opcode == Op.Matmult:
        flag = rec.get("accumulation_flag", 0)
        if type(flag) is bool or type(flag) is not int:
            return {}
        out = {}
        if "start_tensor_calc" not in rec:
            out["start_tensor_calc"] = flag == 0
        if "stop_tensor_calc" not in rec:
            out["stop_tensor_calc"] = False
        return out
    return {}


def strip_derived_defaults(opcode: int, attrs: dict) -> None:
    """Drop the keys the policy would derive with the same value (the reader's half of :func:`derived_keys`)."""
    if opcode == Op.DMACopy:
        for k, v in DMA_COPY_DEFAULTS.items():
            if k in attrs and type(attrs[k]) is str and attrs[k] == v:
                del attrs[k]
    elif opcode == Op.Matmult:
        rest = {k: v for k, v in attrs.items() if k not in ("start_tensor_calc", "stop_tensor_calc")}
        want = derived_keys(opcode, rest)
        for k in ("start_tensor_calc", "stop_tensor_calc"):
            if k in attrs and k in want and type(attrs[k]) is bool and attrs[k] == want[k]:
                del attrs[k]


def render_attributes(flags: set[int], kind: int, raw: Any) -> Any:
    """A function's ``attributes``: a list of names (KLR's form); ``raw`` (as read) keeps its form."""
    names: list[str] = []
    left = set(flags)
    if type(raw) is list:
        out = []
        for a in raw:
            covered = _flags_of(a)
            if covered is None:
                out.append(a)  # unknown: kept
            elif covered <= left:
                out.append(a)
                left -= covered
        names = out
    elif type(raw) is dict:
        out_d: dict[str, Any] = {}
        for a, v in raw.items():
            covered = _flags_of(a)
            if a == "kind" or covered is None or type(v) is not bool:
                out_d[a] = v
            elif v and covered <= left:
                out_d[a] = True
                left -= covered
            elif not v and not (covered & flags):
                out_d[a] = False
        for f in sorted(left):
            out_d[FLAG_KEYS.get(f, f"attr_{f}")] = True
        return out_d
    if NEED_UNROLL <= left:
        names.append("need_unroll")
        left -= NEED_UNROLL
    names += [FLAG_KEYS.get(f, f"attr_{f}") for f in sorted(left)]
    if kind not in (enums.FnKind.NORMAL, enums.FnKind.NKI):
        return {**{n: True for n in names}, "kind": kind}
    if raw is None:
        names.sort()
    return names


def _flags_of(name: Any) -> set[int] | None:
    if type(name) is not str:
        return None
    if name == "need_unroll":
        return set(NEED_UNROLL)
    if name in FLAG_BY_KEY:
        return {FLAG_BY_KEY[name]}
    if name.startswith("attr_") and name[5:].isdigit() and len(name) < 12:
        return {int(name[5:])}
    return None


def render_module_head(module: Module) -> dict:
    """The module's root keys in the policy spelling (``functions`` left to the caller)."""
    root, _ = wire.split(module.extras)
    root.update({"version": module.version, "arch": module.arch, "attributes": thaw(module.attributes),
                 "queues": thaw(module.queues)})
    if module.artifact_dir:
        root["artifact_path"] = module.artifact_dir
    if any(f.kind == enums.FnKind.NKI for f in module.functions):
        root["nki_functions"] = []
    return root


def render_memloc(fn: Function, m: int) -> dict:
    ml = fn.memlocs
    mtype, addr = int(ml["mtype"][m]), int(ml["addr"][m])
    d, patch = wire.split(fn.record(int(ml["extra"][m])))
    for k, v in MEMLOC_DEFAULTS.items():
        d.setdefault(k, v)
    d = thaw(d)
    d.update({"Skind": "memory_location", "name": fn.strings[int(ml["name"][m])], "type": MEM_NAMES[mtype],
              "dims": policy_dims(mtype, int(ml["nparts"][m]), int(ml["pbytes"][m])),
              "addr": max(addr, 0), "allocated": addr >= 0,
              "bank": policy_bank(int(ml["bank"][m]), mtype, addr), "base": int(ml["base"][m]),
              "tensor_id": max(int(ml["tensor_id"][m]), 0)})
    cp = int(ml["const_path"][m])
    if cp >= 0:
        d["const_file_path"] = fn.strings[cp]
    return wire.apply(d, patch)


def render_set(fn: Function, s: int, locs: list[dict]) -> dict:
    sets = fn.sets
    d, patch = wire.split(fn.record(int(sets["extra"][s])))
    for k, v in SET_DEFAULTS.items():
        d.setdefault(k, v)
    d = thaw(d)
    kind = int(sets["kind"][s])
    tclass = int(sets["tclass"][s])
    d.update({"Skind": "memory_location_set", "name": fn.strings[int(sets["name"][s])],
              "kind": TENSOR_KIND_NAMES[kind], "dtype": DTYPE_NAMES[int(sets["dtype"][s])],
              "tensor_shape": list(fn.value(int(sets["shape"][s])) or ()), "memorylocations": locs,
              "tensorId2MemLocSize": len(locs),
              "tensor_class": TENSOR_CLASS_NAMES[tclass if tclass >= 0 else default_tensor_class(kind)]})
    if sets["is_block"][s]:
        d["is_block"] = True
        d["n_blocks"] = int(sets["n_blocks"][s])
    return wire.apply(d, patch)


def jsonable(value: Any) -> Any:
    """Plain JSON data with non-finite floats spelled as KLR writes them ("inf", "-inf", "nan")."""
    t = type(value)
    if t is float:
        if math.isfinite(value):
            return value
        return "nan" if value != value else ("inf" if value > 0 else "-inf")
    if t is str or t is int or t is bool or value is None:
        return value
    if isinstance(value, Mapping):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return [jsonable(v) for v in value]
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return jsonable(float(value))
    to_json = getattr(value, "to_json", None)
    if to_json is not None:
        return jsonable(to_json())
    raise TypeError(f"not JSON-serialisable: {value!r}")



def json_bytes(x: Any) -> bytes:
    return orjson.dumps(x, option=orjson.OPT_SORT_KEYS)


SPLICE = "\u0000splice\u0000"
SPLICE_JSON = json_bytes(SPLICE)


ABSENT = object()
