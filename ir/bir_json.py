"""BIR-JSON in and out (docs/bir-json.md; evidence in ../shared/specs/bir-json-evidence.md).

Reading.  Every shape the public evidence shows is read: instruction names
are labels (they may repeat; a dependency resolves in its own block first,
then function-wide when the name is unique there), KLR's loop record without
``name``/``engine``/``ins``/``outs``, function attributes as a list or an
object (unknown names kept), SB/PSUM ``dims`` with more than two entries,
``symbolic_ap`` with one address per dimension, non-finite immediates as
``"inf"``/``"-inf"``/``"nan"``, dtype ``bool``, KLR's extra opcodes,
allocations without ``name``, ``register_ap`` without ``regref``.  Clone
names ``<base>-it<k>`` are read as clone ``k`` of ``base`` (as
:func:`tusk.ir.serial.content_hash` does).  Every refusal is a
:class:`~tusk.ir.errors.FormatError` naming the file, the JSON path and the
problem; integers are checked against their ranges (int64 at most), nesting
is bounded, and no other exception leaves the reader.

Writing.  Objects are written in one *policy* spelling, the keys the
backend's own tools read (``docs/bir-json.md``), with keys sorted as
nlohmann's ``std::map`` does.  What a document spelled differently is kept as
a wire patch (:mod:`tusk.ir.wire`), so ``save(load(doc))`` reproduces the
document's keys and values.  The writer streams; runs of instructions that
differ only in clone iteration, operand offsets and dependency iterations
are filled from templates over the numpy columns (:mod:`tusk.ir.bir_fast`).

``flatten=True`` (or :func:`flatten_kernel`) writes each kernel function as
``functions[i]`` named ``sg0000``, ``sg0001``, ... without the host ``main``:
the per-core shape of the dumps the public checkers read.

Files ending in ``.gz`` are read and written gzip-compressed.
"""

from __future__ import annotations

import gzip
import io
import itertools
import math
import os
from typing import IO, Any, Callable, Mapping

import numpy as np
import orjson

from tusk.ir import enums, wire
from tusk.ir.arch import PSUM_BANK_BYTES, get_arch
from tusk.ir.columns import Record, freeze, thaw
from tusk.ir.enums import (
    DTYPE_BY_NAME,
    DTYPE_NAMES,
    DTYPE_SIZES,
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
    Op,
)
from tusk.ir.errors import FormatError, TuskError
from tusk.ir.expr import AffinePredicate, QuasiAffine, expr_from_json
from tusk.ir.input_checks import check_memloc_extent, check_tensor_shape
from tusk.ir.module import CARRIED_LOOP, CARRIED_UNROLL, Function, Module, clone_name, split_clone_name
from tusk.ir.values import DynamicAPInfo, ImmValue, SymAddr
from tusk.ir.wire import WIRE

MAX_AP_DIMS = 4
MAX_DEPTH = 200  # nesting of unmodelled values; deeper documents are refused
I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1
I32_MAX = (1 << 31) - 1

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
NONFINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


# ====================================================================== loading


def load(path: str | os.PathLike, *, fast: bool = True) -> Module:
    """Read a BIR-JSON file (``.gz``: gzip-compressed) into a Module."""
    path = os.fspath(path)
    if fast:
        from tusk.ir import bir_fast

        module = bir_fast.try_load(path)
        if module is not None:
            return module
    try:
        with _open_read(path) as fh:
            data = fh.read()
    except (OSError, EOFError) as e:
        raise FormatError(f"cannot read BIR-JSON file: {getattr(e, 'strerror', None) or e}", file=path) from None
    return loads(data, file=path)


def _open_read(path: str) -> IO[bytes]:
    return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")


def parse_json(text: str | bytes, file: str | None = None) -> Any:
    """Parse JSON text; every failure is a FormatError naming ``file``."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as e:
        msg = str(e)
        if "recursion" in msg.lower() or "depth" in msg.lower():  # the wording differs by orjson version
            msg = f"nested too deeply ({msg})"
        raise FormatError(f"malformed JSON: {msg}", file=file) from None
    except (ValueError, TypeError, RecursionError, MemoryError) as e:
        raise FormatError(f"malformed JSON: {type(e).__name__}: {e}", file=file) from None


def loads(text: str | bytes, file: str | None = None, *, fast: bool = True) -> Module:
    """Read BIR-JSON text (large texts column-wise, as :func:`load` does)."""
    if fast:
        from tusk.ir import bir_fast

        data = text.encode() if isinstance(text, str) else text
        module = bir_fast.try_loads(data, file)
        if module is not None:
            return module
    return from_obj(parse_json(text, file), file=file)


def from_obj(obj: Any, file: str | None = None) -> Module:
    """Build a Module from parsed BIR-JSON (a dict)."""
    reader = _Reader(file)
    return _guarded(reader, lambda: reader.module(obj))


def load_function_obj(obj: Any, *, file: str | None = None, where: str = "function") -> Function:
    """Build one Function from its JSON object (used by TranslateNKIASTToBIR's path B)."""
    reader = _Reader(file)
    return _guarded(reader, lambda: reader.function(obj, where))


def _guarded(reader: "_Reader", build: Callable[[], Any]) -> Any:
    """Run ``build``; every failure becomes one FormatError naming the file and the JSON path."""
    file = reader.file
    try:
        return build()
    except FormatError as e:
        raise e.located(file=file) from None
    except TuskError as e:
        raise FormatError(e.message, file=file, where=e.where or reader.where) from None
    except RecursionError:
        raise FormatError("nested too deeply", file=file, where=reader.where) from None
    except Exception as e:  # noqa: BLE001 - the reader's contract: nothing but a FormatError leaves it
        raise FormatError(f"invalid value ({type(e).__name__}: {e})", file=file, where=reader.where) from None


def _err(msg: str, where: str) -> FormatError:
    return FormatError(msg, where=where)


def _typename(x: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null",
            int: "an integer", float: "a number"}.get(type(x), type(x).__name__)


def _obj(x: Any, where: str, what: str = "an object") -> dict:
    if type(x) is not dict:
        raise _err(f"expected {what}, got {_typename(x)}", where)
    return x


def _list(x: Any, where: str) -> list:
    if type(x) is not list:
        raise _err(f"expected a list, got {_typename(x)}", where)
    return x


def _req(obj: dict, key: str, where: str) -> Any:
    if key not in obj:
        raise _err(f"missing required key '{key}'", where)
    return obj[key]


def _str(x: Any, where: str) -> str:
    if type(x) is not str:
        raise _err(f"expected a string, got {_typename(x)}", where)
    return x


def _bool(x: Any, where: str) -> bool:
    if type(x) is not bool:
        raise _err(f"expected true or false, got {_typename(x)}", where)
    return x


def _int(x: Any, where: str, *, minimum: int | None = I64_MIN, maximum: int = I64_MAX) -> int:
    """An integer in [minimum, maximum] (an integral number like 4.0 counts)."""
    if type(x) is not int:
        if type(x) is float and math.isfinite(x) and x.is_integer() and abs(x) < 2.0 ** 62:
            x = int(x)
        else:
            raise _err(f"expected an integer, got {_typename(x)} {_short(x)}", where)
    if minimum is not None and x < minimum:
        raise _err(f"expected an integer >= {minimum}, got {_short(x)}", where)
    if x > maximum:
        raise _err(f"integer {_short(x)} is out of range (at most {maximum})", where)
    return x


def _short(x: Any) -> str:
    text = repr(x)
    return text if len(text) <= 40 else text[:37] + "..."


def _enum(x: Any, table: Mapping[str, int], what: str, where: str) -> int:
    if type(x) is str and x in table:
        return table[x]
    raise _err(f"unknown {what} {_short(x)}", where)


def _pattern(x: Any, where: str) -> tuple[tuple[int, int], ...]:
    if type(x) is list and len(x) <= MAX_AP_DIMS:  # the fast path: every AP operand has one
        ok = True
        for p in x:
            if type(p) is not list or len(p) != 2 or type(p[0]) is not int or type(p[1]) is not int \
                    or not (I64_MIN <= p[0] <= I64_MAX and 0 <= p[1] <= I64_MAX):
                ok = False
                break
        if ok:
            return tuple((p[0], p[1]) for p in x)
    pairs = _list(x, where)
    if len(pairs) > MAX_AP_DIMS:
        raise _err(f"access pattern has {len(pairs)} dimensions, at most {MAX_AP_DIMS} are allowed", where)
    out = []
    for k, pair in enumerate(pairs):
        w = f"{where}[{k}]"
        if type(pair) is not list or len(pair) != 2:
            raise _err("an access-pattern pair must be [step, num]", w)
        out.append((_int(pair[0], w + "[0]"), _int(pair[1], w + "[1]", minimum=0)))
    return tuple(out)


def _number(x: Any, where: str) -> int | float:
    if type(x) is str and x in NONFINITE:
        return NONFINITE[x]
    if type(x) is int:
        return _int(x, where)
    if type(x) is float:
        return x
    raise _err(f"expected a number (or \"inf\", \"-inf\", \"nan\"), got {_typename(x)}", where)


def _expr(x: Any, where: str) -> QuasiAffine:
    _check_depth(x, where)
    return expr_from_json(x, where)


def _check_depth(x: Any, where: str, depth: int = 0) -> None:
    """Refuse unmodelled values nested deeper than MAX_DEPTH (checked without recursing past it) or holding
    integers outside [-2**63, 2**64) (what JSON writers, ours included, can spell exactly)."""
    t = type(x)
    if t is dict:
        vals = x.values()
    elif t is list:
        vals = x
    else:
        if t is int and not I64_MIN <= x < (1 << 64):
            raise _err(f"integer {_short(x)} is out of range", where)
        return
    if depth >= MAX_DEPTH:
        raise _err(f"value nested deeper than {MAX_DEPTH} levels", where)
    for v in vals:
        tv = type(v)
        if tv is dict or tv is list:
            _check_depth(v, where, depth + 1)
        elif tv is int and not I64_MIN <= v < (1 << 64):
            raise _err(f"integer {_short(v)} is out of range", where)


def _frozen_record(d: dict, where: str) -> Record:
    for k, v in d.items():
        if k == WIRE:
            raise _err(f"the key {WIRE!r} is reserved", where)
        _check_depth(v, f"{where}.{k}")
    return Record.of(d)


def _with_patch(rec: Mapping[str, Any] | None, patch: Mapping[str, tuple]) -> Record:
    for k, (raw, _) in patch.items():
        for v in raw:
            _check_depth(v, k)
    return wire.with_patch(rec, patch)


class _Reader:
    def __init__(self, file: str | None):
        self.file = file
        self.where = "$"
        self.expand: Any = None  # bir_fast's run expander: instructions read column-wise

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
        attributes = _frozen_record(_obj(root.get("attributes", {}), "attributes"), "attributes")
        artifact = _str(root.get("artifact_path", ""), "artifact_path")
        queues = _list(root.get("queues", []), "queues")
        _check_depth(queues, "queues")
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
        extras = _frozen_record({k: v for k, v in root.items() if k not in ROOT_KEYS}, "$")
        module = Module(functions, arch=arch, version=version, attributes=attributes, artifact_dir=artifact,
                        queues=freeze(queues), extras=extras)
        patch = wire.diff(root, render_module_head(module),
                          ROOT_KEYS - {"functions", "nki_functions"})
        if patch:
            module.extras = _with_patch(module.extras, patch)
        return module

    # ------------------------------------------------------------------ function
    def function(self, obj: Any, where: str, kind: int = enums.FnKind.NORMAL) -> Function:
        fobj = _obj(obj, where)
        name = _str(_req(fobj, "name", where), where + ".name")
        fn = Function(name, kind)
        self.fn_where = where
        raw_attrs = self._attributes(fn, fobj.get("attributes", _ABSENT), where + ".attributes")
        self.regs: dict[str, int] = {}
        self.memlocs: dict[str, int] = {}
        self.sets: dict[str, int] = {}
        self.first_memloc: dict[int, int] = {}  # set -> its first memloc (block 0 of a block tensor)
        allocs = _list(fobj.get("allocations", []), where + ".allocations")
        # names a nameless allocation must not take (it is named after its first memory location)
        self.taken = {a["name"] for a in allocs if type(a) is dict and type(a.get("name")) is str}
        for i, a in enumerate(allocs):
            self._allocation(fn, a, f"{where}.allocations[{i}]")
        self.refs = _Refs()
        self.block_names: set[str] = set()
        self.deps_to_check: list[tuple[int, list, str]] = []
        self.carried_to_check: list[tuple[int, dict, str]] = []
        for i, b in enumerate(_list(fobj.get("blocks", []), where + ".blocks")):
            self._block(fn, b, f"{where}.blocks[{i}]", -1)
        self.where = where
        self._resolve(fn)
        extras = {k: v for k, v in fobj.items() if k not in FUNCTION_KEYS}
        fn.extras = _frozen_record(extras, where)
        policy = {"attributes": render_attributes(fn.attrs, fn.kind, None)}
        raw = {} if raw_attrs is _ABSENT else {"attributes": raw_attrs}
        patch = wire.diff(raw, policy, ("attributes",))
        for key in ("allocations", "blocks"):
            if key not in fobj:
                patch[key] = ((), ([],))
        if patch:
            fn.extras = _with_patch(fn.extras, patch)
        fn.invalidate()
        return fn

    def _attributes(self, fn: Function, attrs: Any, where: str) -> Any:
        if attrs is _ABSENT:
            return _ABSENT
        if type(attrs) is list:  # current KLR: a list of names
            for i, a in enumerate(attrs):
                self._flag(fn, _str(a, f"{where}[{i}]"), True)
            return attrs
        for key, value in _obj(attrs, where).items():
            if key == "kind":
                fn.kind = _int(value, where + ".kind", minimum=0, maximum=255)
            elif type(value) is bool:
                self._flag(fn, key, value)
        _check_depth(attrs, where)
        return attrs

    def _flag(self, fn: Function, key: str, value: bool) -> None:
        if key == "need_unroll":
            flags = NEED_UNROLL
        elif key in FLAG_BY_KEY:
            flags = (FLAG_BY_KEY[key],)
        elif key.startswith("attr_") and key[5:].isdigit() and len(key) < 12:
            flags = (int(key[5:]),)
        else:
            return  # an attribute Tusk does not model: kept as written (wire patch)
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
            extra = {k: v for k, v in a.items() if k not in ("Skind", "name")}
            rec = _frozen_record(extra, where)
            if "Skind" not in a:
                rec = _with_patch(rec, {"Skind": ((), ("register",))})
            self.regs[name] = fn.add_reg(name, rec)
            return
        if skind != "memory_location_set":
            raise _err(f"unknown storage kind (Skind) {_short(skind)}", where + ".Skind")
        locs = _list(a.get("memorylocations", []), where + ".memorylocations")
        if "name" in a:
            name = _str(a["name"], where + ".name")
        else:  # the DS fixtures' shape: a set named after its memory location, as K names them
            first = _obj(locs[0], where + ".memorylocations[0]") if locs else {}
            base = first.get("name") if type(first.get("name")) is str else "tensor"
            name = f"{base}_set"
            while name in self.sets or name in self.taken:
                name += "_"
        if name in self.sets:
            raise _err(f"duplicate memory location set name {name!r}", where + ".name")
        kind = _enum(a.get("kind", "Internal"), TENSOR_KIND_BY_NAME, "tensor kind", where + ".kind")
        dtype = _enum(_req(a, "dtype", where), DTYPE_BY_NAME, "dtype", where + ".dtype")
        shape = tuple(_int(d, f"{where}.tensor_shape[{k}]", minimum=0)
                      for k, d in enumerate(_list(a.get("tensor_shape", []), where + ".tensor_shape")))
        check_tensor_shape(name, shape, DTYPE_SIZES[dtype], where)
        is_block = _bool(a.get("is_block", False), where + ".is_block")
        n_blocks = _int(a.get("n_blocks", max(len(locs), 1) if is_block else 1), where + ".n_blocks", minimum=1,
                        maximum=I32_MAX)
        tclass = -1
        if "tensor_class" in a:
            tclass = _enum(a["tensor_class"], TENSOR_CLASS_BY_NAME, "tensor class", where + ".tensor_class")
            if tclass == default_tensor_class(kind):
                tclass = -1
        if "tensorId2MemLocSize" in a:
            _int(a["tensorId2MemLocSize"], where + ".tensorId2MemLocSize", minimum=0)
        extra = {k: v for k, v in a.items() if k not in SET_KEYS and not (k in SET_DEFAULTS
                                                                            and wire.same(v, SET_DEFAULTS[k]))}
        set_id = fn.add_set(name, kind, dtype, shape, tclass=tclass, is_block=is_block, n_blocks=n_blocks,
                            extra=_frozen_record(extra, where))
        self.sets[name] = set_id
        for k, loc in enumerate(locs):
            self._memloc(fn, set_id, loc, f"{where}.memorylocations[{k}]")
        policy = render_set(fn, set_id, [None] * len(locs))
        patch = wire.diff(a, policy, (SET_KEYS | set(SET_DEFAULTS)) - {"memorylocations"})
        if "memorylocations" not in a:
            patch["memorylocations"] = ((), ([],))
        if patch:
            fn.sets.set("extra", set_id, fn.intern_record(_with_patch(fn.record(fn.sets.get("extra", set_id)),
                                                                          patch)))

    def _memloc(self, fn: Function, set_id: int, obj: Any, where: str) -> None:
        m = _obj(obj, where)
        if m.get("Skind", "memory_location") != "memory_location":
            raise _err(f"a memory location's Skind must be 'memory_location', got {_short(m['Skind'])}",
                       where + ".Skind")
        name = _str(_req(m, "name", where), where + ".name")
        if name in self.memlocs:
            raise _err(f"duplicate memory location name {name!r}", where + ".name")
        mtype = _enum(_req(m, "type", where), MEM_BY_NAME, "memory type", where + ".type")
        allocated = _bool(m["allocated"], where + ".allocated") if "allocated" in m else None
        addr = _int(m["addr"], where + ".addr", minimum=0, maximum=1 << 62) if "addr" in m else None
        if allocated is False or (allocated is None and addr is None):
            addr = -1
        elif addr is None:
            addr = 0
        dims = tuple(_int(d, f"{where}.dims[{k}]", minimum=0, maximum=1 << 62)
                     for k, d in enumerate(_list(m.get("dims", []), where + ".dims")))
        dsize = DTYPE_SIZES[fn.sets.get("dtype", set_id)]
        nparts, pbytes = dims_to_geometry(dims, mtype, dsize)
        base = _int(m.get("base", 0), where + ".base", minimum=0, maximum=I32_MAX)
        check_memloc_extent(name, dims, nparts, pbytes, addr, base, where)
        bank = _int(m.get("bank", -1), where + ".bank", minimum=-1, maximum=I32_MAX)
        if bank == 0 and not (mtype == Mem.PSUM and addr >= 0):
            bank = -1  # KLR writes bank 0 everywhere; Tusk keeps -1 for "no bank" (the policy writes 0 again)
        tensor_id = _int(m.get("tensor_id", -1), where + ".tensor_id", minimum=-1, maximum=I32_MAX)
        if tensor_id == 0 and not fn.sets.get("is_block", set_id):
            tensor_id = -1
        const_path = m.get("const_file_path")
        if const_path is not None:
            _str(const_path, where + ".const_file_path")
        extra = {k: v for k, v in m.items() if k not in MEMLOC_KEYS and not (k in MEMLOC_DEFAULTS
                                                                               and wire.same(v, MEMLOC_DEFAULTS[k]))}
        self.first_memloc.setdefault(set_id, len(fn.memlocs))
        row = fn.add_memloc(set_id, name, mtype, addr=addr, pbytes=pbytes, nparts=nparts, base=base, bank=bank,
                            tensor_id=tensor_id, const_path=const_path, extra=_frozen_record(extra, where))
        self.memlocs[name] = row
        patch = wire.diff(m, render_memloc(fn, row), MEMLOC_KEYS | set(MEMLOC_DEFAULTS))
        if patch:
            fn.memlocs.set("extra", row, fn.intern_record(_with_patch(fn.record(fn.memlocs.get("extra", row)),
                                                                          patch)))

    # ------------------------------------------------------------------ blocks and instructions
    def _block(self, fn: Function, obj: Any, where: str, parent: int) -> None:
        b = _obj(obj, where)
        name = _str(_req(b, "name", where), where + ".name")
        if name in self.block_names:
            raise _err(f"duplicate block name {name!r}", where + ".name")
        self.block_names.add(name)
        extra = {k: v for k, v in b.items() if k not in ("name", "instructions")}
        rec = _frozen_record(extra, where)
        if "instructions" not in b:
            rec = _with_patch(rec, {"instructions": ((), ([],))})
        bid = fn.add_block(name, parent, rec)
        expand = self.expand
        for i, inst in enumerate(_list(b.get("instructions", []), where + ".instructions")):
            if expand is not None and type(inst) is str and inst.startswith(expand.marker):
                expand.run(self, fn, inst, f"{where}.instructions[{i}]", bid)
            else:
                self.inst(fn, inst, f"{where}.instructions[{i}]", bid)

    def inst(self, fn: Function, obj: Any, where: str, block: int) -> int:
        """Append one instruction (and its body blocks); returns its row."""
        self.where = where
        d = _obj(obj, where)
        patch: dict[str, tuple] = {}
        if "name" in d:
            raw_name = _str(d["name"], where + ".name")
            split = split_clone_name(raw_name)
            name, iteration = (fn.s(split[0]), split[1]) if split else (fn.s(raw_name), -1)
        else:
            name, iteration = -1, -1
        opcode = _enum(_req(d, "opcode", where), OPCODE_BY_NAME, "opcode", where + ".opcode")
        if "engine" in d:
            engine = _enum(d["engine"], ENGINE_BY_NAME, "engine", where + ".engine")
        else:
            engine = 0
            patch["engine"] = ((), ("Unassigned",))
        rows = []
        for role, key in enumerate(ROLE_KEYS):
            if key in d:
                ops = _list(d[key], f"{where}.{key}")
                for k, op in enumerate(ops):
                    rows.append(self._operand(fn, op, f"{where}.{key}[{k}]", role))
                if not ops and key == "indirection_ins":
                    patch[key] = (([],), ())
            elif key != "indirection_ins":
                patch[key] = ((), ([],))
        pred = -1
        if "predicates" in d:
            raw = _list(d["predicates"], where + ".predicates")
            _check_depth(raw, where + ".predicates")
            preds = tuple(AffinePredicate.from_json(p, f"{where}.predicates[{k}]") for k, p in enumerate(raw))
            pred = fn.intern(preds) if preds else -1
            rendered = [p.to_json() for p in preds]
            if not wire.same(raw, rendered):
                patch["predicates"] = ((raw,), (rendered,) if rendered else ())
        attrs = {k: v for k, v in d.items() if k not in INST_KEYS}
        strip_derived_defaults(opcode, attrs)
        if opcode in enums.LOOP_OPCODES and opcode != Op.DoWhile:
            _validate_axis(attrs, where)
        rec = _frozen_record(attrs, where)
        if "blocks" in d and opcode not in enums.LOOP_OPCODES:
            raise _err(f"only loop instructions have body blocks, not {OPCODE_NAMES[opcode]}", where + ".blocks")
        derived = derived_keys(opcode, rec)
        for k, v in derived.items():
            if k not in d:
                patch[k] = ((), (v,))
        if patch:
            rec = _with_patch(rec, patch)
        row = fn.add_inst(opcode, engine, block, name, rows, attrs=rec, pred=pred, iteration=iteration)
        if "dependencies" in d:
            self._deps(fn, row, block, d["dependencies"], where)
        if "loop_carried_dependencies" in d or "unroll_dependencies" in d:
            self._carried(fn, row, block, d, where)
        if "blocks" in d:
            for k, b in enumerate(_list(d["blocks"], where + ".blocks")):
                self._block(fn, b, f"{where}.blocks[{k}]", row)
        return row

    def _operand(self, fn: Function, obj: Any, where: str, role: int) -> tuple:
        o = _obj(obj, where)
        kname = _req(o, "kind", where)
        if type(kname) is not str or kname not in OPERAND_KIND_BY_NAME:
            raise _err(f"Unsupported argument kind {_short(kname)}", where + ".kind")
        kind = OPERAND_KIND_BY_NAME[kname]
        dtype = _enum(_req(o, "dtype", where), DTYPE_BY_NAME, "dtype", where + ".dtype")
        memloc, offset, pattern, aux, dyn = -1, 0, -1, -1, -1
        handled = {"kind", "dtype"}
        patch: dict[str, tuple] = {}
        if kname != "symbolic_ap" and kname != OPERAND_KIND_NAMES[kind]:
            patch["kind"] = ((kname,), (OPERAND_KIND_NAMES[kind],))
        if kind in (Kind.PHYSICAL, Kind.SYMBOLIC, Kind.REGISTER_AP):
            pattern = fn.pattern_id(_pattern(_req(o, "ap", where), where + ".ap"))
            memloc = self._bind(fn, o, where, patch)
            handled |= {"ap", "memref", "memsetref"}
        if kind == Kind.PHYSICAL:
            if "offset" in o:
                offset = _int(o["offset"], where + ".offset")
            else:
                patch["offset"] = ((), (0,))
            handled.add("offset")
            if "dynamic_ap_info" in o:
                raw = o["dynamic_ap_info"]
                _check_depth(raw, where + ".dynamic_ap_info")
                info = _dyn_info(raw, where + ".dynamic_ap_info")
                dyn = fn.intern(info)
                handled.add("dynamic_ap_info")
                if not wire.same(raw, info.to_json()):
                    patch["dynamic_ap_info"] = ((raw,), (info.to_json(),))
        elif kind == Kind.SYMBOLIC:
            addrs = _list(_req(o, "addrs", where), where + ".addrs")
            exprs = tuple(_expr(e, f"{where}.addrs[{k}]") for k, e in enumerate(addrs))
            rendered = [e.to_json() for e in exprs]
            if len(exprs) == 1 and "access_shape" not in o:
                block_e = _expr(o["block_index"], where + ".block_index") if "block_index" in o else None
                aux = fn.intern(SymAddr(exprs[0], block_e))
                if block_e is not None and not wire.same(o["block_index"], block_e.to_json()):
                    patch["block_index"] = ((o["block_index"],), (block_e.to_json(),))
                handled |= {"addrs", "block_index"}
            else:  # K's form: one address per access-pattern dimension; kept as read
                kind = Kind.SYMBOLIC_DIMS
                aux = fn.intern(exprs)
                handled.add("addrs")
            if not wire.same(addrs, rendered):
                patch["addrs"] = ((addrs,), (rendered,))
        elif kind in (Kind.REGISTER_AP, Kind.REGISTER):
            if "regref" in o or kind == Kind.REGISTER:
                reg = _str(_req(o, "regref", where), where + ".regref")
                if reg not in self.regs:
                    raise _err(f"register {reg!r} does not exist", where + ".regref")
                aux = self.regs[reg]
            handled.add("regref")
        elif kind == Kind.IMM:
            raw = _req(o, "value", where)
            value = _number(raw, where + ".value")
            aux = fn.intern(ImmValue(value))
            handled.add("value")
        elif kind == Kind.IMM_ARRAY:
            vals = _list(_req(o, "value_array", where), where + ".value_array")
            aux = fn.intern(ImmValue(tuple(_number(v, f"{where}.value_array[{k}]") for k, v in enumerate(vals))))
            handled.add("value_array")
        elif kind == Kind.SYMBOLIC_IMM:
            raw = _req(o, "expr", where)
            e = _expr(raw, where + ".expr")
            aux = fn.intern(e)
            handled.add("expr")
            if not wire.same(raw, e.to_json()):
                patch["expr"] = ((raw,), (e.to_json(),))
        extra = {k: v for k, v in o.items() if k not in handled}
        rec = _frozen_record(extra, where) if extra else None
        if patch:
            rec = _with_patch(rec, patch)
        return (role, kind, dtype, memloc, offset, pattern, aux, dyn, fn.intern_record(rec))

    def _bind(self, fn: Function, o: dict, where: str, patch: dict) -> int:
        """The memory location an access pattern reads or writes (by name)."""
        if "memref" in o:
            ref = _str(o["memref"], where + ".memref")
            if ref not in self.memlocs:
                raise _err(f"memory location {ref!r} does not exist", where + ".memref")
            m = self.memlocs[ref]
            set_name = fn.strings[fn.sets.get("name", fn.memlocs.get("set", m))]
            if "memsetref" in o:
                setref = _str(o["memsetref"], where + ".memsetref")
                if setref != set_name:
                    patch["memsetref"] = ((setref,), (set_name,))
            else:
                patch["memsetref"] = ((), (set_name,))
            return m
        setref = _str(_req(o, "memsetref", where), where + ".memsetref")
        if setref not in self.sets:
            raise _err(f"memory location set {setref!r} does not exist", where + ".memsetref")
        first = self.first_memloc.get(self.sets[setref])
        if first is None:
            raise _err(f"memory location set {setref!r} has no memory locations", where + ".memsetref")
        patch["memref"] = ((), (fn.strings[fn.memlocs.get("name", first)],))
        return first

    # ------------------------------------------------------------------ dependencies (resolved per function)
    def _deps(self, fn: Function, row: int, block: int, raw: Any, where: str) -> None:
        deps = _list(raw, where + ".dependencies")
        canonical = True
        names = set()
        for k, dep in enumerate(deps):
            w = f"{where}.dependencies[{k}]"
            if type(dep) is str:
                name, kind = dep, enums.Edge.Flow
                canonical = False
            elif type(dep) is list and len(dep) == 2 and type(dep[0]) is str:
                name = dep[0]
                if type(dep[1]) is str:
                    kind = _enum(dep[1], EDGE_BY_NAME, "edge kind", w + "[1]")
                else:
                    kind = _int(dep[1], w + "[1]", minimum=0, maximum=len(EDGE_NAMES) - 1)
                    canonical = False
            else:
                raise _err("a dependency must be a name or [name, kind]", w)
            if name in names:
                canonical = False
            names.add(name)
            self.refs.add(fn, row, block, name, kind, 0, -1, w)
        if not canonical or not deps:
            self.deps_to_check.append((row, deps, where))

    def _carried(self, fn: Function, row: int, block: int, d: dict, where: str) -> None:
        for flavour, key in ((CARRIED_LOOP, "loop_carried_dependencies"), (CARRIED_UNROLL, "unroll_dependencies")):
            if key not in d:
                continue
            items = _list(d[key], f"{where}.{key}")
            _check_depth(items, f"{where}.{key}")
            for k, dep in enumerate(items):
                w = f"{where}.{key}[{k}]"
                if type(dep) is not list or not dep:
                    raise _err("a carried dependency must be [name, kind, ...]", w)
                name = _str(dep[0], w + "[0]")
                kind = enums.Edge.Flow
                if len(dep) > 1:
                    if type(dep[1]) is str:
                        kind = _enum(dep[1], EDGE_BY_NAME, "edge kind", w + "[1]")
                    else:
                        kind = _int(dep[1], w + "[1]", minimum=0, maximum=len(EDGE_NAMES) - 1)
                payload = self._carried_payload(flavour, dep[2:], w)
                self.refs.add(fn, row, block, name, kind, flavour, fn.intern(payload), w)
        self.carried_to_check.append((row, {k: d[k] for k in ("loop_carried_dependencies", "unroll_dependencies")
                                            if k in d}, where))

    def _carried_payload(self, flavour: int, rest: list, where: str) -> Any:
        if flavour == CARRIED_LOOP:
            dist = rest[0] if rest else []
            return tuple(_int(x, f"{where}[2][{k}]") for k, x in enumerate(_list(dist, where + "[2]")))
        exprs = tuple(_expr(e, f"{where}[2][{k}]") for k, e in enumerate(_list(rest[0] if rest else [], where + "[2]")))
        preds = tuple(AffinePredicate.from_json(p, f"{where}[3][{k}]")
                      for k, p in enumerate(_list(rest[1] if len(rest) > 1 else [], where + "[3]")))
        return (exprs, preds)

    def _resolve(self, fn: Function) -> None:
        resolve_refs(fn, self.refs, self.fn_where, may_repeat=bool(self.deps_to_check))
        if not self.deps_to_check and not self.carried_to_check:
            return
        render = _Render(fn)
        for row, raw, where in self.deps_to_check:
            rendered = render.deps(row)
            if not rendered or not wire.same(raw, rendered):  # the policy leaves an empty list out
                self._patch_inst(fn, row, {"dependencies": ((raw,), (rendered,) if rendered else ())})
        for row, raw, where in self.carried_to_check:
            rendered = render.carried(row)
            patch = wire.diff(raw, rendered, ("loop_carried_dependencies", "unroll_dependencies"))
            if patch:
                self._patch_inst(fn, row, patch)

    @staticmethod
    def _patch_inst(fn: Function, row: int, patch: dict) -> None:
        rec = fn.record(fn.insts.get("attrs", row))
        fn.insts.set("attrs", row, fn.intern_record(_with_patch(rec, patch)))


_ABSENT = object()


class _Refs:
    """Name references of one function (dependencies, carried edges), resolved together.

    Single references are appended to lists; the columnar loader adds whole arrays (``add_arrays``)."""

    FIELDS = ("dst", "block", "name", "iter", "kind", "flavour", "payload")

    def __init__(self) -> None:
        for f in self.FIELDS:
            setattr(self, "_" + f, [])
        self.chunks: list[dict[str, np.ndarray]] = []
        self.where: list[str | None] = []
        self._n = 0

    def add(self, fn: Function, dst: int, block: int, name: str, kind: int, flavour: int, payload: int,
            where: str) -> None:
        split = split_clone_name(name)
        if split:
            self._name.append(fn.s(split[0]))
            self._iter.append(split[1])
        else:
            self._name.append(fn.s(name))
            self._iter.append(-1)
        self._dst.append(dst)
        self._block.append(block)
        self._kind.append(kind)
        self._flavour.append(flavour)
        self._payload.append(payload)
        self.where.append(where)

    def mark(self) -> int:
        """How many single references there are (see :meth:`rollback`)."""
        return len(self._dst)

    def rollback(self, n: int) -> dict[str, list]:
        """Remove the single references added since :meth:`mark` returned ``n``; returns them."""
        out = {f: getattr(self, "_" + f)[n:] for f in self.FIELDS}
        for f in self.FIELDS:
            del getattr(self, "_" + f)[n:]
        del self.where[n:]
        return out

    def add_arrays(self, **cols: np.ndarray) -> None:
        self._flush()
        self.chunks.append(cols)

    TYPES = {"dst": np.int32, "block": np.int32, "name": np.int32, "iter": np.int32, "kind": np.int8,
             "flavour": np.int8, "payload": np.int32}

    def _flush(self) -> None:
        if self._dst:
            self.chunks.append({f: np.asarray(getattr(self, "_" + f), dtype=self.TYPES[f]) for f in self.FIELDS})
            self.chunks[-1]["where"] = self.where  # type: ignore[assignment]
            for f in self.FIELDS:
                setattr(self, "_" + f, [])
            self.where = []

    def all_chunks(self) -> list[dict]:
        self._flush()
        return self.chunks


RESOLVE_SLICE = 1 << 20  # references resolved at once


def resolve_refs(fn: Function, refs: "_Refs", fn_where: str, may_repeat: bool = True) -> None:
    """Turn name references into edges: the instruction of that name in the referring block when there is
    exactly one, else the only one in the function; none or several is an error naming the places.

    Dependencies become one edge per (src, dst), the strongest kind, in the order first written
    (``may_repeat=False``: the caller knows no instruction names a source twice).
    """
    chunks = refs.all_chunks()
    if not chunks:
        return
    ins = fn.insts
    ikey = (ins["name"].astype(np.int64) << 32) | (ins["iter"].astype(np.int64) + 1)
    order = np.argsort(ikey, kind="stable")
    skey = ikey[order]
    del ikey
    dep_parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for chunk in chunks:
        where_list = chunk.get("where")
        for s0 in range(0, len(chunk["dst"]), RESOLVE_SLICE):
            sl = slice(s0, s0 + RESOLVE_SLICE)
            dst = chunk["dst"][sl].astype(np.int64)
            key = (chunk["name"][sl].astype(np.int64) << 32) | (chunk["iter"][sl].astype(np.int64) + 1)

            def where_of(r: int) -> str:
                w = where_list[s0 + r] if where_list is not None else None
                return w or _row_path(fn, int(dst[r]), fn_where)

            src = _lookup(fn, skey, order, key, chunk["block"][sl], dst, fn_where, where_of)
            flavour, kind = chunk["flavour"][sl], chunk["kind"][sl]
            deps = flavour == 0
            dep_parts.append((src[deps].astype(np.int32), dst[deps].astype(np.int32), kind[deps].astype(np.uint8)))
            if not deps.all():
                payload = chunk["payload"][sl]
                car = ~deps
                for a, d, k, f, p in zip(src[car].tolist(), dst[car].tolist(), kind[car].tolist(),
                                         flavour[car].tolist(), payload[car].tolist()):
                    fn.carried.append((a, d, k, f, p))
    del order, skey
    s = np.concatenate([p[0] for p in dep_parts])
    if not len(s):
        return
    d = np.concatenate([p[1] for p in dep_parts])
    k = np.concatenate([p[2] for p in dep_parts])
    del dep_parts
    if may_repeat:
        pair = (d.astype(np.int64) << 32) | s.astype(np.int64)
        sp = np.sort(pair)
        if len(sp) > 1 and (sp[1:] == sp[:-1]).any():  # a pair written twice: one edge, the strongest kind
            uniq, first, inv = np.unique(pair, return_index=True, return_inverse=True)
            best = np.zeros(len(uniq), dtype=np.uint8)
            np.maximum.at(best, inv, k)
            by_first = np.argsort(first, kind="stable")
            s, d, k = s[first[by_first]], d[first[by_first]], best[by_first]
        del pair, sp
    from tusk.ir.columns import Table
    from tusk.ir.module import DEP_SCHEMA

    if len(fn.deps):
        s = np.concatenate([fn.deps["src"], s])
        d = np.concatenate([fn.deps["dst"], d])
        k = np.concatenate([fn.deps["kind"], k])
    # rows in destination order, each destination's edges in the order they were written
    if len(d) > 1 and not (d[1:] >= d[:-1]).all():
        o = np.argsort(d, kind="stable")
        s, d, k = s[o], d[o], k[o]
    fn.deps = Table.from_arrays(DEP_SCHEMA, {"src": s, "dst": d, "kind": k})


def _lookup(fn: Function, skey: np.ndarray, order: np.ndarray, key: np.ndarray, blk: np.ndarray, dst: np.ndarray,
            fn_where: str, where_of: Callable[[int], str]) -> np.ndarray:
    """The instruction row each reference names (see :func:`resolve_refs`)."""
    lo = np.searchsorted(skey, key, "left")
    hi = np.searchsorted(skey, key, "right")
    src = np.where(hi - lo == 1, order[np.minimum(lo, len(order) - 1)] if len(order) else -1, -1)
    several = np.flatnonzero(hi - lo > 1)
    if len(several):
        iblock = fn.insts["block"]
        for r in several.tolist():
            matches = order[lo[r]:hi[r]]
            same = matches[iblock[matches] == blk[r]]
            if len(same) == 1:
                src[r] = int(same[0])
                continue
            places = same if len(same) > 1 else matches
            a, b = (_row_path(fn, int(p), fn_where) for p in places[:2])
            scope = "in its block" if len(same) > 1 else "in the function"
            raise _err(f"ambiguous dependency {_ref_name(fn, int(key[r]))!r}: {scope} it names both {a} and {b}",
                       where_of(r))
    missing = np.flatnonzero(src < 0)
    if len(missing):
        r = int(missing[0])
        raise _err(f"Unknown dependency {_ref_name(fn, int(key[r]))!r}", where_of(r))
    return src


def _ref_name(fn: Function, key: int) -> str:
    base, it = fn.strings[key >> 32], (key & 0xFFFFFFFF) - 1
    return base if it < 0 else clone_name(base, it)


def _row_path(fn: Function, row: int, fn_where: str) -> str:
    """The JSON path of instruction ``row`` (for messages)."""
    blocks = fn.insts["block"]
    b = int(blocks[row])
    pos = int(np.count_nonzero(blocks[:row] == b))
    path = f".instructions[{pos}]"
    parents = fn.blocks["parent"]
    while True:
        p = int(parents[b])
        siblings = np.flatnonzero(parents == p).tolist()
        path = f".blocks[{siblings.index(b)}]" + path
        if p < 0:
            return fn_where + path
        b = int(blocks[p])
        pos = int(np.count_nonzero(blocks[:p] == b))
        path = f".instructions[{pos}]" + path


def _validate_axis(attrs: dict, where: str) -> None:
    key = "LoopAxis" if "LoopAxis" in attrs else "DynamicForLoopAxis"
    ax = _obj(_req(attrs, key, where), f"{where}.{key}")
    _str(_req(ax, "name", f"{where}.{key}"), f"{where}.{key}.name")
    for b in ("lb", "ub"):
        _req(ax, b, f"{where}.{key}")
    for b in ("lb", "ub", "stride"):
        v = ax.get(b, 1)
        w = f"{where}.{key}.{b}"
        if type(v) is int or type(v) is float:
            _int(v, w, minimum=-(1 << 62), maximum=1 << 62)
        elif type(v) is dict:
            _expr(v, w)
        elif type(v) is not str:
            raise _err(f"loop bound '{b}' must be an integer, a register name or an expression", w)
        elif key == "LoopAxis":
            raise _err(f"loop bound '{b}' of a static Loop must be an integer, got {_short(v)}", w)
    if ax.get("stride", 1) == 0:
        raise _err("loop stride must not be 0", f"{where}.{key}.stride")


def _dyn_info(obj: Any, where: str) -> DynamicAPInfo:
    d = _obj(obj, where)
    terms = []
    for k, t in enumerate(_list(d.get("aff_expr", []), where + ".aff_expr")):
        w = f"{where}.aff_expr[{k}]"
        t = _obj(t, w)
        terms.append((_expr(_req(t, "offset_expr", w), w + ".offset_expr"), _int(_req(t, "coef", w), w + ".coef")))
    return DynamicAPInfo(
        actual_ap=_pattern(d.get("actual_ap", []), where + ".actual_ap"),
        aff_expr=tuple(terms),
        c=_int(d.get("c", 0), where + ".c"),
        indirect_dim=_int(d.get("indirect_dim", 0), where + ".indirect_dim", minimum=0, maximum=I32_MAX),
        indirect_dim_max_index=_int(d.get("indirect_dim_max_index", 0), where + ".indirect_dim_max_index",
                                    minimum=0),
        num_tensor_indirect_indices=_int(d.get("num_tensor_indirect_indices", -1),
                                         where + ".num_tensor_indirect_indices", minimum=-1),
        tensor_indirect_arg_id=_int(d.get("tensor_indirect_arg_id", -1), where + ".tensor_indirect_arg_id",
                                    minimum=-1),
    )


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


class _Render:
    """The policy spelling of one function's instructions and operands (the writer's generic path)."""

    def __init__(self, fn: Function):
        self.fn = fn
        self.strings = fn.strings.items
        ins = fn.insts
        self.name_col, self.iter_col = ins["name"], ins["iter"]
        self.opcode, self.engine, self.attrs = ins["opcode"], ins["engine"], ins["attrs"]
        self.ops_start, self.nops, self.pred = ins["ops"], ins["nops"], ins["pred"]
        deps = fn.deps
        dst = deps["dst"]
        if len(dst) > 1 and not (dst[1:] >= dst[:-1]).all():
            order = np.argsort(dst, kind="stable")
            self.dep_src, self.dep_kind, dst = deps["src"][order], deps["kind"][order], dst[order]
        else:
            self.dep_src, self.dep_kind = deps["src"], deps["kind"]
        self.dep_dst = dst
        carried = fn.carried
        corder = np.argsort(carried["dst"], kind="stable")
        self.carried_cols = {c: carried[c][corder] for c in carried.names}
        self.op = {c: fn.operands[c] for c in fn.operands.names}
        self.ml_name, self.ml_set = fn.memlocs["name"], fn.memlocs["set"]
        self.set_names = fn.sets["name"]
        self._set_first = _first_memloc_of_sets(fn)
        self._records: dict[int, tuple[dict, Any]] = {}
        self._operands: dict[tuple, dict] = {}

    def name(self, i: int) -> str | None:
        n = int(self.name_col[i])
        if n < 0:
            return None
        it = int(self.iter_col[i])
        return self.strings[n] if it < 0 else clone_name(self.strings[n], it)

    def record(self, rid: int) -> tuple[dict, Any]:
        """(plain JSON of a record without its patch, the patch)"""
        hit = self._records.get(rid)
        if hit is None:
            d, patch = wire.split(self.fn.record(rid))
            hit = self._records[rid] = (jsonable(d), patch)
        return hit

    def deps(self, i: int) -> list:
        key = self.dep_dst.dtype.type(i)  # a key of the column's own type: no copy of the column
        lo = int(np.searchsorted(self.dep_dst, key, "left"))
        hi = int(np.searchsorted(self.dep_dst, key, "right"))
        return [[self.name(int(s)), EDGE_NAMES[int(k)]] for s, k in zip(self.dep_src[lo:hi], self.dep_kind[lo:hi])]

    def carried(self, i: int) -> dict:
        c = self.carried_cols
        key = c["dst"].dtype.type(i)
        lo = int(np.searchsorted(c["dst"], key, "left"))
        hi = int(np.searchsorted(c["dst"], key, "right"))
        out: dict[str, list] = {}
        for k in range(lo, hi):
            src, kind, flavour = int(c["src"][k]), int(c["kind"][k]), int(c["flavour"][k])
            payload = self.fn.value(int(c["payload"][k]))
            if flavour == CARRIED_LOOP:
                entry = [self.name(src), EDGE_NAMES[kind], list(payload or ())]
                out.setdefault("loop_carried_dependencies", []).append(entry)
            else:
                exprs, preds = payload
                entry = [self.name(src), EDGE_NAMES[kind], [e.to_json() for e in exprs], [p.to_json() for p in preds]]
                out.setdefault("unroll_dependencies", []).append(entry)
        return out

    def inst(self, i: int, *, name: str | None = None, deps: list | None = None,
             offsets: dict[int, Any] | None = None, attrs: dict | None = None) -> dict:
        """The policy dict of instruction ``i``; ``name``/``deps``/``offsets``/``attrs`` (the record's keys)
        override (template slots)."""
        fn = self.fn
        opcode = int(self.opcode[i])
        real, patch = self.record(int(self.attrs[i]))
        d = dict(real if attrs is None else attrs)
        d.update(derived_keys(opcode, real))
        nm = name if name is not None else self.name(i)
        if nm is not None:
            d["name"] = nm
        d["opcode"] = OPCODE_NAMES[opcode]
        d["engine"] = ENGINE_NAMES[int(self.engine[i])]
        lists: tuple[list, list, list] = ([], [], [])
        start = int(self.ops_start[i])
        role = self.op["role"]
        for j in range(start, start + int(self.nops[i])):
            off = None if offsets is None else offsets.get(j - start)
            lists[int(role[j])].append(self.operand(j, off))
        d["ins"], d["outs"] = lists[0], lists[2]
        if lists[1]:
            d["indirection_ins"] = lists[1]
        dl = deps if deps is not None else self.deps(i)
        if dl:
            d["dependencies"] = dl
        if len(self.carried_cols["dst"]):
            d.update(self.carried(i))
        pred = int(self.pred[i])
        if pred >= 0:
            d["predicates"] = [p.to_json() for p in fn.values[pred]]
        return wire.apply(d, patch)

    def operand(self, j: int, offset_override: Any = None) -> dict:
        op = self.op
        key = (int(op["kind"][j]), int(op["dtype"][j]), int(op["memloc"][j]), int(op["offset"][j]),
               int(op["pattern"][j]), int(op["aux"][j]), int(op["dyn"][j]), int(op["extra"][j]))
        if offset_override is None:
            hit = self._operands.get(key)
            if hit is not None:
                return hit
        fn = self.fn
        kind, dtype, memloc, offset, pattern, aux, dyn, extra = key
        base, patch = self.record(extra)
        d: dict[str, Any] = dict(base)
        d["kind"] = OPERAND_KIND_NAMES[kind]
        d["dtype"] = DTYPE_NAMES[dtype]
        if kind in (Kind.PHYSICAL, Kind.SYMBOLIC, Kind.REGISTER_AP, Kind.SYMBOLIC_DIMS):
            d["ap"] = [list(p) for p in fn.patterns[pattern]]
            d["memref"] = self.strings[int(self.ml_name[memloc])]
            d["memsetref"] = self.strings[int(self.set_names[int(self.ml_set[memloc])])]
        if kind == Kind.PHYSICAL:
            d["offset"] = offset if offset_override is None else offset_override
            if dyn >= 0:
                d["dynamic_ap_info"] = fn.values[dyn].to_json()
        elif kind == Kind.SYMBOLIC:
            sym: SymAddr = fn.values[aux]
            d["addrs"] = [sym.offset.to_json()]
            if sym.block is not None:
                d["block_index"] = sym.block.to_json()
        elif kind == Kind.SYMBOLIC_DIMS:
            d["addrs"] = [e.to_json() for e in fn.values[aux]]
        elif kind in (Kind.REGISTER_AP, Kind.REGISTER):
            if aux >= 0:
                d["regref"] = fn.strings[fn.regs.get("name", aux)]
        elif kind == Kind.IMM:
            d["value"] = jsonable(fn.values[aux].value)
        elif kind == Kind.IMM_ARRAY:
            d["value_array"] = jsonable(list(fn.values[aux].value))
        elif kind == Kind.SYMBOLIC_IMM:
            d["expr"] = fn.values[aux].to_json()
        wire.apply(d, patch)
        if offset_override is None and len(self._operands) < 65536:
            self._operands[key] = d
        return d


def _first_memloc_of_sets(fn: Function) -> np.ndarray:
    sets = fn.memlocs["set"]
    out = np.full(len(fn.sets) + 1, -1, dtype=np.int64)
    if len(sets):
        idx = np.arange(len(sets))[::-1]
        out[sets[::-1]] = idx
    return out


# ====================================================================== saving


def save(module: Module, path: str | os.PathLike, *, flatten: bool = False) -> None:
    """Write ``module`` to ``path`` atomically (write aside, then rename); ``.gz``: gzip-compressed.

    ``flatten``: write :func:`flatten_kernel` of the module (each kernel function as ``functions[i]``
    named ``sg0000``, ``sg0001``, ...), the per-core shape real-dump tools read.
    """
    path = os.fspath(path)
    if flatten:
        module = flatten_kernel(module)
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        if path.endswith(".gz"):
            with open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=3, mtime=0) as fh:
                write(module, fh)
        else:
            with open(tmp, "wb") as fh:
                write(module, fh)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def dumps(module: Module, *, flatten: bool = False) -> str:
    buf = io.BytesIO()
    write(flatten_kernel(module) if flatten else module, buf)
    return buf.getvalue().decode()


def _dump(x: Any) -> bytes:
    return orjson.dumps(x, option=orjson.OPT_SORT_KEYS)


_SPLICE = "\u0000splice\u0000"
_SPLICE_JSON = _dump(_SPLICE)


def write(module: Module, fh: IO[bytes] | IO[str]) -> None:
    """Stream ``module`` as BIR-JSON (UTF-8) into a binary (or text) file handle."""
    _write_module(module, _Sink(fh))


# ---------------------------------------------------------------------- parts and join
#
# A part is the bytes the writer emits while its position (the module-wide row of the next instruction
# it writes: functions' rows counted one after another) lies in the part's range of rows.  The position
# only grows while the writer streams, so the parts, joined in order, are the whole document; a part is
# rendered from the module alone (each worker skips the instructions of the other parts), and the writer
# spells every chunk of instructions the same way whichever part renders it (chunks do not straddle parts:
# a chunk belongs to the part of its first row).


def part_bounds(module: Module, n: int) -> list[tuple[int, int]]:
    """The module-wide row ranges of ``n`` parts of about equal instruction counts (the last one open)."""
    if n < 1:
        raise ValueError(f"a module is written in at least one part, not {n}")
    total = module.n_insts()
    cuts = [k * total // n for k in range(n)] + [_END]
    cuts[0] = -1
    return list(itertools.pairwise(cuts))


_END = 1 << 62  # beyond every row: the last part takes the closing bytes


def render_part(module: Module, k: int, n: int) -> bytes:
    """Part ``k`` of ``n`` of ``module``'s BIR-JSON: ``join([render_part(m, k, n) for k in range(n)])``
    is ``dumps(m)`` encoded, byte for byte; each part can be rendered in another process."""
    if not 0 <= k < n:
        raise ValueError(f"part {k} of {n} does not exist")
    buf = io.BytesIO()
    lo, hi = part_bounds(module, n)[k]
    _write_module(module, _Sink(buf, lo, hi))
    return buf.getvalue()


def render_parts(module: Module, n: int) -> list[bytes]:
    """All ``n`` parts of ``module``'s BIR-JSON, in order (:func:`render_part` of each, in this process)."""
    return [render_part(module, k, n) for k in range(n)]


def join(parts: list[bytes]) -> bytes:
    """The BIR-JSON document of its parts (in the order :func:`render_part` numbers them)."""
    return b"".join(parts)


def _write_module(module: Module, out: _Sink) -> None:
    root = jsonable(render_module_head(module))
    root["functions"] = _SPLICE
    normal = [f for f in module.functions if f.kind != enums.FnKind.NKI]
    nki = [f for f in module.functions if f.kind == enums.FnKind.NKI]
    groups = {"functions": normal}
    if nki:
        root["nki_functions"] = _SPLICE
        groups["nki_functions"] = nki
    _, patch = wire.split(module.extras)
    wire.apply(root, patch)
    parts = _dump(root).split(_SPLICE_JSON)
    # sorted keys put "functions" before "nki_functions": the splices come in that order
    order = [k for k in ("functions", "nki_functions") if root.get(k) == _SPLICE]
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


class _Sink:
    """Buffered bytes output over a binary or text handle; with a row range [lo, hi), only the bytes
    written while the position (:meth:`at`) lies in it (one part of the document)."""

    def __init__(self, fh: Any, lo: int = -1, hi: int = _END):
        self.fh = fh
        self.text = isinstance(fh, io.TextIOBase)
        self.buf: list[bytes] = []
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
    if not isinstance(out, _Sink):
        out = _Sink(out)
    from tusk.ir import bir_fast

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
            attributes = _ABSENT
    head.update({"name": fn.name, "allocations": allocations, "blocks": _SPLICE})
    if attributes is not _ABSENT:
        head["attributes"] = attributes
    if patch:
        wire.apply(head, {k: v for k, v in patch.items() if k not in ("attributes", "blocks")})
        if "blocks" in patch and not patch["blocks"][0] and len(fn.blocks) == 0:
            head.pop("blocks", None)
    text = _dump(head)
    if _SPLICE_JSON not in text:
        out.write(text)
        return
    before, after = text.split(_SPLICE_JSON)
    out.write(before)
    bir_fast.write_blocks(fn, _Render(fn), out)
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


__all__ = ["load", "loads", "from_obj", "load_function_obj", "save", "dumps", "write", "write_function",
           "flatten_kernel", "parse_json", "FLAG_KEYS", "part_bounds", "render_part", "render_parts", "join"]
