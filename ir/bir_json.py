"""BIR-JSON in and out (../shared/specs/bir-json.md; Tusk's conventions in docs/bir-json.md).

The loader is two-pass like the backend's: pass 1 builds storages,
blocks, instructions and operands (operands bind to memory locations by
name at once, since every allocation of a function precedes its blocks);
pass 2 resolves what may point forward: dependencies, loop-carried and
predicated edges.  Every failure is a :class:`~ir.errors.FormatError`
naming the file and the JSON path.

The writer streams: one instruction is turned into text at a time, so its
memory does not grow with the function (clone names are derived from origin
and iteration while writing).  Object keys are sorted, as nlohmann's
``std::map`` does on ``dump()``, and default-valued optional keys are left
out.
"""

from __future__ import annotations

import io
import json
import os
from typing import IO, Any, Callable

import numpy as np

from tusk.ir import enums
from tusk.ir.arch import get_arch
from tusk.ir.canonical import canonical_json
from tusk.ir.columns import Record, freeze, thaw
from tusk.ir.enums import (
    DTYPE_BY_NAME,
    DTYPE_NAMES,
    EDGE_BY_NAME,
    EDGE_NAMES,
    ENGINE_BY_NAME,
    ENGINE_NAMES,
    MEM_BY_NAME,
    MEM_NAMES,
    OPCODE_BY_NAME,
    OPCODE_NAMES,
    OPERAND_KIND_BY_NAME,
    OPERAND_KIND_NAMES,
    ROLE_KEYS,
    TENSOR_CLASS_BY_NAME,
    TENSOR_CLASS_NAMES,
    TENSOR_KIND_BY_NAME,
    TENSOR_KIND_NAMES,
    Kind,
    Mem,
)
from tusk.ir.errors import FormatError, TuskError
from tusk.ir.expr import AffinePredicate, expr_from_json
from tusk.ir.module import CARRIED_LOOP, CARRIED_UNROLL, Function, Module, clone_name
from tusk.ir.values import DynamicAPInfo, ImmValue, SymAddr

MAX_AP_DIMS = 4

# Function attribute flags <-> their wire spellings (a Tusk convention: the
# backend's spelling is unknown, spec §9).
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

# Header keys the writer always emits, with the value used when the record lacks them.
HEADER_DEFAULTS = {"origin": "Internal", "engine_id": 0, "scheduled_start": 0, "scheduled_end": 0,
                   "optin_passes": ()}
MODELLED_INST_KEYS = frozenset({"name", "opcode", "engine", "ins", "outs", "indirection_ins", "dependencies",
                                "loop_carried_dependencies", "unroll_dependencies", "predicates", "blocks"})
ROOT_KEYS = frozenset({"functions", "nki_functions", "queues", "version", "arch", "attributes",
                       "artifact_path"})


# ====================================================================== loading


def load(path: str | os.PathLike) -> Module:
    """Read a BIR-JSON file into a Module."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as e:
        raise FormatError(f"cannot read BIR-JSON file: {e.strerror}", file=path) from None
    return loads(data, file=path)


def loads(text: str | bytes, file: str | None = None) -> Module:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise FormatError(f"malformed JSON: {e.msg} (line {e.lineno}, column {e.colno})", file=file) from None
    except (UnicodeDecodeError, RecursionError) as e:
        raise FormatError(f"malformed JSON: {e}", file=file) from None
    return from_obj(obj, file=file)


def from_obj(obj: Any, file: str | None = None) -> Module:
    """Build a Module from parsed BIR-JSON (a dict)."""
    loader = _Loader(file)
    return _guarded(loader, lambda: loader.module(obj))


def load_function_obj(obj: Any, *, file: str | None = None, where: str = "function") -> Function:
    """Build one Function from its JSON object (used by TranslateNKIASTToBIR's path B)."""
    loader = _Loader(file)
    return _guarded(loader, lambda: loader.function(obj, where))


def _guarded(loader: "_Loader", build: Callable[[], Any]) -> Any:
    """Run ``build``; every failure becomes one FormatError naming the file and the JSON path."""
    file = loader.file
    try:
        return build()
    except FormatError as e:
        raise e.located(file=file) from None
    except TuskError as e:
        raise FormatError(e.message, file=file, where=e.where or loader.where) from None
    except (KeyError, IndexError, TypeError, ValueError, AttributeError, OverflowError, RecursionError) as e:
        raise FormatError(f"invalid value ({type(e).__name__}: {e})", file=file, where=loader.where) from None


def _err(msg: str, where: str) -> FormatError:
    return FormatError(msg, where=where)


def _obj(x: Any, where: str, what: str = "an object") -> dict:
    if not isinstance(x, dict):
        raise _err(f"expected {what}, got {_typename(x)}", where)
    return x


def _list(x: Any, where: str) -> list:
    if not isinstance(x, list):
        raise _err(f"expected a list, got {_typename(x)}", where)
    return x


def _typename(x: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null",
            int: "an integer", float: "a number"}.get(type(x), type(x).__name__)


def _req(obj: dict, key: str, where: str) -> Any:
    if key not in obj:
        raise _err(f"missing required key '{key}'", where)
    return obj[key]


def _str(x: Any, where: str) -> str:
    if not isinstance(x, str):
        raise _err(f"expected a string, got {_typename(x)}", where)
    return x


def _int(x: Any, where: str, *, minimum: int | None = None) -> int:
    if isinstance(x, bool) or not isinstance(x, int):
        if isinstance(x, float) and x.is_integer():
            x = int(x)
        else:
            raise _err(f"expected an integer, got {_typename(x)} {x!r}", where)
    if minimum is not None and x < minimum:
        raise _err(f"expected an integer >= {minimum}, got {x}", where)
    return x


def _enum(x: Any, table: dict[str, int], what: str, where: str) -> int:
    if isinstance(x, str) and x in table:
        return table[x]
    raise _err(f"unknown {what} {x!r}", where)


def _pattern(x: Any, where: str) -> tuple[tuple[int, int], ...]:
    if type(x) is list and len(x) <= MAX_AP_DIMS:  # the fast path: every operand has one
        try:
            out = tuple((s, n) for s, n in x)
        except (TypeError, ValueError):
            out = None
        if out is not None and all(type(s) is int and type(n) is int and n >= 0 for s, n in out):
            return out
    pairs = _list(x, where)
    if len(pairs) > MAX_AP_DIMS:
        raise _err(f"access pattern has {len(pairs)} dimensions, at most {MAX_AP_DIMS} are allowed", where)
    out = []
    for k, pair in enumerate(pairs):
        w = f"{where}[{k}]"
        if not isinstance(pair, list) or len(pair) != 2:
            raise _err("an access-pattern pair must be [step, num]", w)
        out.append((_int(pair[0], w + "[0]"), _int(pair[1], w + "[1]", minimum=0)))
    return tuple(out)


class _Loader:
    def __init__(self, file: str | None):
        self.file = file
        self.where = "$"

    # ------------------------------------------------------------------ module
    def module(self, obj: Any) -> Module:
        root = _obj(obj, "$", "a JSON object at the top level")
        version = _int(root.get("version", 2), "version")
        if version not in (1, 2):
            raise _err(f"unsupported BIR-JSON version {version} (expected 1 or 2)", "version")
        arch = _str(root.get("arch", "gen3"), "arch")
        try:
            get_arch(arch)
        except TuskError as e:
            raise _err(e.message, "arch") from None
        attributes = _obj(root.get("attributes", {}), "attributes")
        artifact = _str(root.get("artifact_path", ""), "artifact_path")
        queues = _list(root.get("queues", []), "queues")
        fns = _list(_req(root, "functions", "$"), "functions")
        nki = _list(root.get("nki_functions", []), "nki_functions")
        functions = []
        seen: set[str] = set()
        for key, items, kind in (("functions", fns, enums.FnKind.NORMAL), ("nki_functions", nki, enums.FnKind.NKI)):
            for i, fobj in enumerate(items):
                fn = self.function(fobj, f"{key}[{i}]", kind)
                if fn.name in seen:
                    raise _err(f"duplicate function name {fn.name!r}", f"{key}[{i}].name")
                seen.add(fn.name)
                functions.append(fn)
        extras = {k: v for k, v in root.items() if k not in ROOT_KEYS}
        return Module(functions, arch=arch, version=version, attributes=Record.of(attributes),
                      artifact_dir=artifact, queues=freeze(queues), extras=Record.of(extras))

    # ------------------------------------------------------------------ function
    def function(self, obj: Any, where: str, kind: int = enums.FnKind.NORMAL) -> Function:
        fobj = _obj(obj, where)
        name = _str(_req(fobj, "name", where), where + ".name")
        fn = Function(name, kind)
        self._attributes(fn, fobj.get("attributes"), where + ".attributes")
        self.regs: dict[str, int] = {}
        self.memlocs: dict[str, int] = {}
        self.sets: dict[str, int] = {}
        self.first_memloc: dict[int, int] = {}  # set -> its first memloc (block 0 of a block tensor)
        for i, a in enumerate(_list(fobj.get("allocations", []), where + ".allocations")):
            self._allocation(fn, a, f"{where}.allocations[{i}]")
        self.pending: list[tuple[int, dict, str]] = []  # pass-2 work: (inst row, json, path)
        self.block_names: set[str] = set()
        self.inst_names: dict[str, int] = {}
        for i, b in enumerate(_list(fobj.get("blocks", []), where + ".blocks")):
            self._block(fn, b, f"{where}.blocks[{i}]", -1)
        self._pass2(fn)
        fn.extras = Record.of({k: v for k, v in fobj.items() if k not in ("name", "attributes", "allocations", "blocks")})
        fn.invalidate()
        return fn

    def _attributes(self, fn: Function, attrs: Any, where: str) -> None:
        if attrs is None:
            return
        if isinstance(attrs, list):  # older KLR: a list of flag names
            for i, a in enumerate(attrs):
                self._flag(fn, _str(a, f"{where}[{i}]"), True, f"{where}[{i}]")
            return
        for key, value in _obj(attrs, where).items():
            if key == "kind":
                fn.kind = _int(value, where + ".kind", minimum=0)
            else:
                self._flag(fn, key, value, f"{where}.{key}")

    def _flag(self, fn: Function, key: str, value: Any, where: str) -> None:
        if not isinstance(value, bool):
            raise _err(f"function attribute must be true/false, got {_typename(value)}", where)
        if key == "need_unroll":  # KLR's spelling: unrollable and marked to unroll
            flags = [enums.FnAttr.UNROLLABLE, enums.FnAttr.MARKED_TO_UNROLL]
        elif key in FLAG_BY_KEY:
            flags = [FLAG_BY_KEY[key]]
        elif key.startswith("attr_") and key[5:].isdigit():
            flags = [int(key[5:])]
        else:
            raise _err(f"unknown function attribute {key!r}", where)
        for f in flags:
            (fn.attrs.add if value else fn.attrs.discard)(f)

    # ------------------------------------------------------------------ storages
    def _allocation(self, fn: Function, obj: Any, where: str) -> None:
        a = _obj(obj, where)
        skind = a.get("Skind", "memory_location_set")
        if skind == "register":
            name = _str(_req(a, "name", where), where + ".name")
            if name in self.regs:
                raise _err(f"duplicate register name {name!r}", where + ".name")
            self.regs[name] = fn.add_reg(name, Record.of({k: v for k, v in a.items() if k not in ("Skind", "name")}))
            return
        if skind != "memory_location_set":
            raise _err(f"unknown storage kind (Skind) {skind!r}", where + ".Skind")
        name = _str(_req(a, "name", where), where + ".name")
        if name in self.sets:
            raise _err(f"duplicate memory location set name {name!r}", where + ".name")
        kind = _enum(a.get("kind", "Internal"), TENSOR_KIND_BY_NAME, "tensor kind", where + ".kind")
        tclass = -1
        if "tensor_class" in a:
            tclass = _enum(a["tensor_class"], TENSOR_CLASS_BY_NAME, "tensor class", where + ".tensor_class")
        dtype = _enum(_req(a, "dtype", where), DTYPE_BY_NAME, "dtype", where + ".dtype")
        shape = tuple(_int(d, f"{where}.tensor_shape[{k}]", minimum=0)
                      for k, d in enumerate(_list(a.get("tensor_shape", []), where + ".tensor_shape")))
        locs = _list(a.get("memorylocations", []), where + ".memorylocations")
        is_block = bool(a.get("is_block", False))
        n_blocks = _int(a.get("n_blocks", max(len(locs), 1) if is_block else 1), where + ".n_blocks", minimum=1)
        handled = {"Skind", "name", "kind", "tensor_class", "dtype", "tensor_shape", "memorylocations",
                   "tensorId2MemLocSize", "is_block", "n_blocks"}
        set_id = fn.add_set(name, kind, dtype, shape, tclass=tclass, is_block=is_block, n_blocks=n_blocks,
                            extra=Record.of({k: v for k, v in a.items() if k not in handled}))
        self.sets[name] = set_id
        for k, loc in enumerate(locs):
            self._memloc(fn, set_id, loc, f"{where}.memorylocations[{k}]")

    def _memloc(self, fn: Function, set_id: int, obj: Any, where: str) -> None:
        m = _obj(obj, where)
        name = _str(_req(m, "name", where), where + ".name")
        if name in self.memlocs:
            raise _err(f"duplicate memory location name {name!r}", where + ".name")
        mtype = _enum(_req(m, "type", where), MEM_BY_NAME, "memory type", where + ".type")
        addr = _int(m.get("addr", -1), where + ".addr")
        if m.get("allocated") is False:
            addr = -1
        dims = [_int(d, f"{where}.dims[{k}]", minimum=0) for k, d in enumerate(_list(m.get("dims", []), where + ".dims"))]
        if mtype in (Mem.SB, Mem.PSUM):
            if len(dims) != 2:
                raise _err("an SB/PSUM memory location needs dims [partitions, bytes per partition]", where + ".dims")
            nparts, pbytes = dims
        else:
            nparts, pbytes = 1, (dims[0] if len(dims) == 1 else int(np.prod(dims)) if dims else 0)
        base = _int(m.get("base", 0), where + ".base", minimum=0)
        bank = _int(m.get("bank", -1), where + ".bank")
        tensor_id = _int(m.get("tensor_id", -1), where + ".tensor_id")
        const_path = m.get("const_file_path")
        if const_path is not None:
            _str(const_path, where + ".const_file_path")
        handled = {"Skind", "name", "type", "addr", "allocated", "dims", "base", "bank", "tensor_id", "const_file_path"}
        self.first_memloc.setdefault(set_id, len(fn.memlocs))
        self.memlocs[name] = fn.add_memloc(set_id, name, mtype, addr=addr, pbytes=pbytes, nparts=nparts, base=base,
                                           bank=bank, tensor_id=tensor_id, const_path=const_path,
                                           extra=Record.of({k: v for k, v in m.items() if k not in handled}))

    # ------------------------------------------------------------------ blocks and instructions
    def _block(self, fn: Function, obj: Any, where: str, parent: int) -> None:
        b = _obj(obj, where)
        name = _str(_req(b, "name", where), where + ".name")
        if name in self.block_names:
            raise _err(f"duplicate block name {name!r}", where + ".name")
        self.block_names.add(name)
        bid = fn.add_block(name, parent, Record.of({k: v for k, v in b.items() if k not in ("name", "instructions")}))
        for i, inst in enumerate(_list(b.get("instructions", []), where + ".instructions")):
            self._inst(fn, inst, f"{where}.instructions[{i}]", bid)

    def _inst(self, fn: Function, obj: Any, where: str, block: int) -> None:
        self.where = where
        d = _obj(obj, where)
        name = _str(_req(d, "name", where), where + ".name")
        if name in self.inst_names:
            raise _err(f"duplicate instruction name {name!r}", where + ".name")
        opcode = _enum(_req(d, "opcode", where), OPCODE_BY_NAME, "opcode", where + ".opcode")
        engine = _enum(d.get("engine", "Unassigned"), ENGINE_BY_NAME, "engine", where + ".engine")
        rows = []
        for role, key in enumerate(ROLE_KEYS):
            for k, op in enumerate(_list(d.get(key, []), f"{where}.{key}")):
                rows.append(self._operand(fn, op, f"{where}.{key}[{k}]", role))
        pred = -1
        if "predicates" in d:
            preds = tuple(AffinePredicate.from_json(p, f"{where}.predicates[{k}]")
                          for k, p in enumerate(_list(d["predicates"], where + ".predicates")))
            pred = fn.intern(preds) if preds else -1
        attrs = {k: v for k, v in d.items() if k not in MODELLED_INST_KEYS}
        for k, default in HEADER_DEFAULTS.items():
            if k in attrs and freeze(attrs[k]) == default:
                del attrs[k]
        if opcode in enums.LOOP_OPCODES and opcode != enums.Op.DoWhile:
            _validate_axis(attrs, where)
        row = fn.add_inst(opcode, engine, block, name, rows, attrs=Record.of(attrs), pred=pred)
        self.inst_names[name] = row
        if any(k in d for k in ("dependencies", "loop_carried_dependencies", "unroll_dependencies")):
            self.pending.append((row, d, where))
        if "blocks" in d:
            if opcode not in enums.LOOP_OPCODES:
                raise _err(f"only loop instructions have body blocks, not {OPCODE_NAMES[opcode]}", where + ".blocks")
            for k, b in enumerate(_list(d["blocks"], where + ".blocks")):
                self._block(fn, b, f"{where}.blocks[{k}]", row)

    def _operand(self, fn: Function, obj: Any, where: str, role: int) -> tuple:
        o = _obj(obj, where)
        kname = _req(o, "kind", where)
        if not isinstance(kname, str) or kname not in OPERAND_KIND_BY_NAME:
            raise _err(f"Unsupported argument kind {kname!r}", where + ".kind")
        kind = OPERAND_KIND_BY_NAME[kname]
        dtype = _enum(_req(o, "dtype", where), DTYPE_BY_NAME, "dtype", where + ".dtype")
        memloc, offset, pattern, aux, dyn = -1, 0, -1, -1, -1
        handled = {"kind", "dtype"}
        if kind in (Kind.PHYSICAL, Kind.SYMBOLIC, Kind.REGISTER_AP):
            pattern = fn.pattern_id(_pattern(_req(o, "ap", where), where + ".ap"))
            memloc = self._bind(o, where)
            handled |= {"ap", "memref", "memsetref"}
        if kind == Kind.PHYSICAL:
            offset = _int(o.get("offset", 0), where + ".offset")
            handled.add("offset")
            if "dynamic_ap_info" in o:
                dyn = fn.intern(_dyn_info(o["dynamic_ap_info"], where + ".dynamic_ap_info"))
                handled.add("dynamic_ap_info")
        elif kind == Kind.SYMBOLIC:
            addrs = _list(_req(o, "addrs", where), where + ".addrs")
            if len(addrs) != 1:
                raise _err("a symbolic_ap carries exactly one address expression (its element offset)", where + ".addrs")
            offset_e = expr_from_json(addrs[0], where + ".addrs[0]")
            block_e = expr_from_json(o["block_index"], where + ".block_index") if "block_index" in o else None
            aux = fn.intern(SymAddr(offset_e, block_e))
            handled |= {"addrs", "block_index"}
        elif kind in (Kind.REGISTER_AP, Kind.REGISTER):
            reg = _str(_req(o, "regref", where), where + ".regref")
            if reg not in self.regs:
                raise _err(f"register {reg!r} does not exist", where + ".regref")
            aux = self.regs[reg]
            handled.add("regref")
        elif kind == Kind.IMM:
            aux = fn.intern(ImmValue(_number(_req(o, "value", where), where + ".value")))
            handled.add("value")
        elif kind == Kind.IMM_ARRAY:
            vals = _list(_req(o, "value_array", where), where + ".value_array")
            aux = fn.intern(ImmValue(tuple(_number(v, f"{where}.value_array[{k}]") for k, v in enumerate(vals))))
            handled.add("value_array")
        elif kind == Kind.SYMBOLIC_IMM:
            aux = fn.intern(expr_from_json(_req(o, "expr", where), where + ".expr"))
            handled.add("expr")
        extra = fn.intern_record({k: v for k, v in o.items() if k not in handled})
        return (role, kind, dtype, memloc, offset, pattern, aux, dyn, extra)

    def _bind(self, o: dict, where: str) -> int:
        """The memory location an access pattern reads or writes (by name)."""
        if "memref" in o:
            ref = _str(o["memref"], where + ".memref")
            if ref not in self.memlocs:
                raise _err(f"memory location {ref!r} does not exist", where + ".memref")
            return self.memlocs[ref]
        setref = _str(_req(o, "memsetref", where), where + ".memsetref")
        if setref not in self.sets:
            raise _err(f"memory location set {setref!r} does not exist", where + ".memsetref")
        first = self.first_memloc.get(self.sets[setref])
        if first is None:
            raise _err(f"memory location set {setref!r} has no memory locations", where + ".memsetref")
        return first

    # ------------------------------------------------------------------ pass 2
    def _pass2(self, fn: Function) -> None:
        names = self.inst_names
        best: dict[tuple[int, int], int] = {}
        for row, d, where in self.pending:
            self.where = where
            for k, dep in enumerate(_list(d.get("dependencies", []), where + ".dependencies")):
                w = f"{where}.dependencies[{k}]"
                src, kind = self._edge(dep, w, names)
                key = (src, row)
                best[key] = max(best.get(key, 0), kind)  # one edge per pair; the strongest kind wins
            for flavour, key in ((CARRIED_LOOP, "loop_carried_dependencies"), (CARRIED_UNROLL, "unroll_dependencies")):
                for k, dep in enumerate(_list(d.get(key, []), f"{where}.{key}")):
                    w = f"{where}.{key}[{k}]"
                    if not isinstance(dep, list) or not dep:
                        raise _err("a carried dependency must be [name, kind, ...]", w)
                    src, kind = self._edge(dep[:2] if len(dep) > 1 else dep[0], w, names)
                    payload = self._carried_payload(flavour, dep[2:], w)
                    fn.carried.append((src, row, kind, flavour, fn.intern(payload)))
        for (src, dst), kind in best.items():
            fn.deps.append((src, dst, kind))

    def _edge(self, dep: Any, where: str, names: dict[str, int]) -> tuple[int, int]:
        if isinstance(dep, str):
            name, kind = dep, enums.Edge.Flow
        elif isinstance(dep, list) and len(dep) == 2 and isinstance(dep[0], str):
            name = dep[0]
            if isinstance(dep[1], str):
                kind = _enum(dep[1], EDGE_BY_NAME, "edge kind", where + "[1]")
            else:
                kind = _int(dep[1], where + "[1]", minimum=0)
                if kind >= len(EDGE_NAMES):
                    raise _err(f"unknown edge kind {kind}", where + "[1]")
        else:
            raise _err("a dependency must be a name or [name, kind]", where)
        if name not in names:
            raise _err(f"Unknown dependency {name!r}", where)
        return names[name], kind

    def _carried_payload(self, flavour: int, rest: list, where: str) -> Any:
        if flavour == CARRIED_LOOP:
            dist = rest[0] if rest else []
            return tuple(_int(x, f"{where}[2][{k}]") for k, x in enumerate(_list(dist, where + "[2]")))
        exprs = tuple(expr_from_json(e, f"{where}[2][{k}]") for k, e in enumerate(_list(rest[0] if rest else [], where + "[2]")))
        preds = tuple(AffinePredicate.from_json(p, f"{where}[3][{k}]")
                      for k, p in enumerate(_list(rest[1] if len(rest) > 1 else [], where + "[3]")))
        return (exprs, preds)


def _number(x: Any, where: str) -> int | float:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise _err(f"expected a number, got {_typename(x)}", where)
    return x


def _validate_axis(attrs: dict, where: str) -> None:
    key = "LoopAxis" if "LoopAxis" in attrs else "DynamicForLoopAxis"
    ax = _obj(_req(attrs, key, where), f"{where}.{key}")
    _str(_req(ax, "name", f"{where}.{key}"), f"{where}.{key}.name")
    for b in ("lb", "ub"):
        _req(ax, b, f"{where}.{key}")
    for b in ("lb", "ub", "stride"):
        v = ax.get(b, 1)
        if isinstance(v, bool) or not isinstance(v, (int, str, dict)):
            raise _err(f"loop bound '{b}' must be an integer, a register name or an expression", f"{where}.{key}.{b}")
    if ax.get("stride", 1) == 0:
        raise _err("loop stride must not be 0", f"{where}.{key}.stride")


def _dyn_info(obj: Any, where: str) -> DynamicAPInfo:
    d = _obj(obj, where)
    terms = []
    for k, t in enumerate(_list(d.get("aff_expr", []), where + ".aff_expr")):
        w = f"{where}.aff_expr[{k}]"
        t = _obj(t, w)
        terms.append((expr_from_json(_req(t, "offset_expr", w), w + ".offset_expr"), _int(_req(t, "coef", w), w + ".coef")))
    return DynamicAPInfo(
        actual_ap=_pattern(d.get("actual_ap", []), where + ".actual_ap"),
        aff_expr=tuple(terms),
        c=_int(d.get("c", 0), where + ".c"),
        indirect_dim=_int(d.get("indirect_dim", 0), where + ".indirect_dim", minimum=0),
        indirect_dim_max_index=_int(d.get("indirect_dim_max_index", 0), where + ".indirect_dim_max_index", minimum=0),
        num_tensor_indirect_indices=_int(d.get("num_tensor_indirect_indices", -1), where + ".num_tensor_indirect_indices"),
        tensor_indirect_arg_id=_int(d.get("tensor_indirect_arg_id", -1), where + ".tensor_indirect_arg_id"),
    )


# ====================================================================== saving


def save(module: Module, path: str | os.PathLike) -> None:
    """Write ``module`` to ``path`` atomically (write aside, then rename)."""
    path = os.fspath(path)
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            write(module, fh)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def dumps(module: Module) -> str:
    buf = io.StringIO()
    write(module, buf)
    return buf.getvalue()


def _dump(x: Any) -> str:
    return canonical_json(x, _default)


def _default(obj: Any) -> Any:
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    to_json = getattr(obj, "to_json", None)
    if to_json is not None:
        return to_json()
    raise TypeError(f"not JSON-serialisable: {obj!r}")


_SPLICE = "\u0000splice\u0000"
_SPLICE_JSON = json.dumps(_SPLICE)


def write(module: Module, fh: IO[str]) -> None:
    """Stream ``module`` as BIR-JSON into a text file handle."""
    root: dict[str, Any] = dict(thaw(module.extras))
    root.update({"version": module.version, "arch": module.arch, "attributes": thaw(module.attributes),
                 "queues": thaw(module.queues), "functions": _SPLICE})
    if module.artifact_dir:
        root["artifact_path"] = module.artifact_dir
    normal = [f for f in module.functions if f.kind != enums.FnKind.NKI]
    nki = [f for f in module.functions if f.kind == enums.FnKind.NKI]
    if nki:
        root["nki_functions"] = _SPLICE
    text = _dump(root)
    parts = text.split(_SPLICE_JSON)
    groups = [normal] + ([nki] if nki else [])
    # sorted keys put "functions" before "nki_functions", so the splices come in that order
    for k, part in enumerate(parts):
        fh.write(part)
        if k < len(groups):
            fh.write("[\n")
            for i, fn in enumerate(groups[k]):
                if i:
                    fh.write(",\n")
                write_function(fn, fh)
            fh.write("\n]")
    fh.write("\n")


def write_function(fn: Function, fh: IO[str]) -> None:
    w = _FunctionWriter(fn)
    head = dict(thaw(fn.extras))
    attrs: dict[str, Any] = {FLAG_KEYS.get(a, f"attr_{a}"): True for a in sorted(fn.attrs)}
    if fn.kind not in (enums.FnKind.NORMAL, enums.FnKind.NKI):
        attrs["kind"] = fn.kind
    head.update({"name": fn.name, "attributes": attrs, "allocations": w.allocations(), "blocks": _SPLICE})
    before, after = _dump(head).split(_SPLICE_JSON)
    fh.write(before)
    w.write_blocks(fh, fn.top_blocks())
    fh.write(after)


class _FunctionWriter:
    def __init__(self, fn: Function):
        self.fn = fn
        self.rows = fn.block_rows()
        self.strings = fn.strings.items
        ins = fn.insts
        self.name_col, self.iter_col = ins["name"], ins["iter"]
        deps = fn.deps
        order = np.argsort(deps["dst"], kind="stable")
        self.dep_src, self.dep_kind = deps["src"][order], deps["kind"][order]
        self.dep_bounds = np.searchsorted(deps["dst"][order], np.arange(len(ins) + 1))
        carried = fn.carried
        corder = np.argsort(carried["dst"], kind="stable")
        self.carried = {c: carried[c][corder] for c in carried.names}
        self.carried_bounds = np.searchsorted(carried["dst"][corder], np.arange(len(ins) + 1))
        self.children: dict[int, list[int]] = {}
        for b, parent in enumerate(fn.blocks["parent"].tolist()):
            if parent >= 0:
                self.children.setdefault(parent, []).append(b)
        self.op = {c: fn.operands[c] for c in fn.operands.names}
        self.ml = {c: fn.memlocs[c] for c in fn.memlocs.names}
        self.set_names = fn.sets["name"]
        self._operand_cache: dict[tuple, Any] = {}

    def name(self, i: int) -> str:
        base = self.strings[self.name_col[i]]
        it = int(self.iter_col[i])
        return base if it < 0 else clone_name(base, it)

    # ---------------------------------------------------------------- storages
    def allocations(self) -> list:
        fn = self.fn
        out: list[dict] = []
        for r in range(len(fn.regs)):
            out.append({**thaw(fn.record(fn.regs.get("extra", r))), "Skind": "register",
                        "name": fn.strings[fn.regs.get("name", r)]})
        sets = fn.sets
        mset = fn.memlocs["set"]
        for s in range(len(sets)):
            row = sets.row(s)
            locs = [self.memloc(m) for m in np.nonzero(mset == s)[0].tolist()]
            d = {**thaw(fn.record(row["extra"])), "Skind": "memory_location_set", "name": fn.strings[row["name"]],
                 "kind": TENSOR_KIND_NAMES[row["kind"]], "dtype": DTYPE_NAMES[row["dtype"]],
                 "tensor_shape": list(fn.value(row["shape"]) or ()), "memorylocations": locs,
                 "tensorId2MemLocSize": len(locs)}
            if row["tclass"] >= 0:
                d["tensor_class"] = TENSOR_CLASS_NAMES[row["tclass"]]
            if row["is_block"]:
                d["is_block"] = True
                d["n_blocks"] = row["n_blocks"]
            out.append(d)
        return out

    def memloc(self, m: int) -> dict:
        fn = self.fn
        row = fn.memlocs.row(m)
        d = {**thaw(fn.record(row["extra"])), "Skind": "memory_location", "name": fn.strings[row["name"]],
             "type": MEM_NAMES[row["mtype"]]}
        if row["mtype"] in (Mem.SB, Mem.PSUM):
            d["dims"] = [row["nparts"], row["pbytes"]]
            d["base"] = row["base"]
        else:
            d["dims"] = [row["pbytes"]]
        if row["addr"] >= 0:
            d["addr"] = row["addr"]
            d["allocated"] = True
        if row["bank"] >= 0:
            d["bank"] = row["bank"]
        if row["tensor_id"] >= 0:
            d["tensor_id"] = row["tensor_id"]
        if row["const_path"] >= 0:
            d["const_file_path"] = fn.strings[row["const_path"]]
        return d

    # ---------------------------------------------------------------- blocks
    def write_blocks(self, fh: IO[str], blocks: list[int]) -> None:
        fh.write("[")
        for k, b in enumerate(blocks):
            fh.write(",\n" if k else "\n")
            fn = self.fn
            head = {**thaw(fn.record(fn.blocks.get("extra", b))), "name": fn.strings[fn.blocks.get("name", b)],
                    "instructions": _SPLICE}
            before, after = _dump(head).split(_SPLICE_JSON)
            fh.write(before)
            fh.write("[")
            for j, i in enumerate(self.rows[b].tolist()):
                fh.write(",\n" if j else "\n")
                self.write_inst(fh, i)
            fh.write("]")
            fh.write(after)
        fh.write("]")

    def write_inst(self, fh: IO[str], i: int) -> None:
        fn = self.fn
        ins = fn.insts
        opcode = int(ins["opcode"][i])
        d: dict[str, Any] = dict(HEADER_DEFAULTS)
        d.update(fn.record(int(ins["attrs"][i])))
        d["name"] = self.name(i)
        d["opcode"] = OPCODE_NAMES[opcode]
        d["engine"] = ENGINE_NAMES[int(ins["engine"][i])]
        lists: tuple[list, list, list] = ([], [], [])
        start, n = int(ins["ops"][i]), int(ins["nops"][i])
        for j in range(start, start + n):
            lists[int(self.op["role"][j])].append(self.operand(j))
        d["ins"], d["outs"] = lists[0], lists[2]
        if lists[1]:
            d["indirection_ins"] = lists[1]
        lo, hi = self.dep_bounds[i], self.dep_bounds[i + 1]
        if hi > lo:
            d["dependencies"] = [[self.name(int(s)), EDGE_NAMES[int(k)]]
                                 for s, k in zip(self.dep_src[lo:hi], self.dep_kind[lo:hi])]
        lo, hi = self.carried_bounds[i], self.carried_bounds[i + 1]
        if hi > lo:
            self._carried(d, lo, hi)
        pred = int(ins["pred"][i])
        if pred >= 0:
            d["predicates"] = [p.to_json() for p in fn.values[pred]]
        if i in self.children:
            d["blocks"] = _SPLICE
            before, after = _dump(d).split(_SPLICE_JSON)
            fh.write(before)
            self.write_blocks(fh, self.children[i])
            fh.write(after)
        else:
            fh.write(_dump(d))

    def _carried(self, d: dict, lo: int, hi: int) -> None:
        c = self.carried
        for k in range(lo, hi):
            src, kind, flavour = int(c["src"][k]), int(c["kind"][k]), int(c["flavour"][k])
            payload = self.fn.value(int(c["payload"][k]))
            if flavour == CARRIED_LOOP:
                entry = [self.name(src), EDGE_NAMES[kind], list(payload or ())]
                d.setdefault("loop_carried_dependencies", []).append(entry)
            else:
                exprs, preds = payload
                entry = [self.name(src), EDGE_NAMES[kind], [e.to_json() for e in exprs], [p.to_json() for p in preds]]
                d.setdefault("unroll_dependencies", []).append(entry)

    def operand(self, j: int) -> dict:
        op = self.op
        kind = int(op["kind"][j])
        key = (kind, int(op["dtype"][j]), int(op["memloc"][j]), int(op["offset"][j]), int(op["pattern"][j]),
               int(op["aux"][j]), int(op["dyn"][j]), int(op["extra"][j]))
        hit = self._operand_cache.get(key)
        if hit is not None:
            return hit
        fn = self.fn
        _, dtype, memloc, offset, pattern, aux, dyn, extra = key
        d: dict[str, Any] = dict(fn.record(extra))
        d["kind"] = OPERAND_KIND_NAMES[kind]
        d["dtype"] = DTYPE_NAMES[dtype]
        if kind in (Kind.PHYSICAL, Kind.SYMBOLIC, Kind.REGISTER_AP):
            d["ap"] = [list(p) for p in fn.patterns[pattern]]
            d["memref"] = self.strings[self.ml["name"][memloc]]
            d["memsetref"] = self.strings[self.set_names[self.ml["set"][memloc]]]
        if kind == Kind.PHYSICAL:
            d["offset"] = offset
            if dyn >= 0:
                d["dynamic_ap_info"] = fn.values[dyn].to_json()
        elif kind == Kind.SYMBOLIC:
            sym: SymAddr = fn.values[aux]
            d["addrs"] = [sym.offset.to_json()]
            if sym.block is not None:
                d["block_index"] = sym.block.to_json()
        elif kind in (Kind.REGISTER_AP, Kind.REGISTER):
            d["regref"] = fn.strings[fn.regs.get("name", aux)]
        elif kind == Kind.IMM:
            d["value"] = fn.values[aux].value
        elif kind == Kind.IMM_ARRAY:
            d["value_array"] = list(fn.values[aux].value)
        elif kind == Kind.SYMBOLIC_IMM:
            d["expr"] = fn.values[aux].to_json()
        if len(self._operand_cache) < 65536:
            self._operand_cache[key] = d
        return d
