"""The ordinary BIR-JSON reader: one JSON object per instruction (docs/bir-json.md, "Reading").

Every shape the public evidence shows is read; every refusal is a FormatError naming the file, the
JSON path and the problem (:func:`guarded`: no other exception leaves the reader).  The columnar
loader (:mod:`.column_reader`) hands runs of instructions to :class:`Reader` through ``expand``.
"""

from __future__ import annotations

import gzip
from typing import IO, Any, Callable

import orjson

from tusk.ir import enums, wire
from tusk.ir.arch import get_arch
from tusk.ir.bir_json.fields import (
    I32_MAX,
    check_depth,
    check_loop_axis,
    expect_bool,
    expect_enum,
    expect_int,
    expect_list,
    expect_obj,
    expect_str,
    format_error,
    frozen_record,
    imm_maximum,
    read_dyn_info,
    read_expr,
    read_number,
    read_pattern,
    required,
    short,
    with_patch,
)
from tusk.ir.bir_json.policy import (
    ABSENT,
    FLAG_BY_KEY,
    FUNCTION_KEYS,
    INST_KEYS,
    MEMLOC_DEFAULTS,
    MEMLOC_KEYS,
    NEED_UNROLL,
    ROOT_KEYS,
    SET_DEFAULTS,
    SET_KEYS,
    default_tensor_class,
    derived_keys,
    dims_to_geometry,
    render_attributes,
    render_memloc,
    render_module_head,
    render_set,
    strip_derived_defaults,
)
from tusk.ir.bir_json.refs import Refs, resolve_refs
from tusk.ir.bir_json.render import InstRender
from tusk.ir.columns import freeze
from tusk.ir.enums import (
    DTYPE_BY_NAME,
    DTYPE_SIZES,
    EDGE_BY_NAME,
    EDGE_NAMES,
    ENGINE_BY_NAME,
    MEM_BY_NAME,
    OPCODE_BY_NAME,
    OPCODE_NAMES,
    OPERAND_KIND_BY_NAME,
    OPERAND_KIND_NAMES,
    ROLE_KEYS,
    TENSOR_CLASS_BY_NAME,
    TENSOR_KIND_BY_NAME,
    Kind,
    Mem,
    Op,
)
from tusk.ir.errors import FormatError, TuskError
from tusk.ir.expr import AffinePredicate
from tusk.ir.input_checks import check_memloc_extent, check_tensor_shape
from tusk.ir.module import CARRIED_LOOP, CARRIED_UNROLL, OPERAND_SCHEMA, Function, Module, split_clone_name
from tusk.ir.values import ImmValue, SymAddr


def open_read(path: str) -> IO[bytes]:
    return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")


def parse_json(text: str | bytes, file: str | None = None) -> Any:
    """Parse JSON text; every failure is a FormatError naming ``file``."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as e:
        msg = str(e)
        if "recursion" in msg.lower() or "depth" in msg.lower():  # the wording differs by orjson version
            msg = f"nested too deeply ({msg})"
        elif text[:3] == b"\xd9\xd9\xf7":  # CBOR's self-describe tag: a KLR file
            msg = f"{msg}; this is a KLR file (binary CBOR), not BIR-JSON ('tusk compile' reads KLR files)"
        raise FormatError(f"malformed JSON: {msg}", file=file) from None
    except (ValueError, TypeError, RecursionError, MemoryError) as e:
        raise FormatError(f"malformed JSON: {type(e).__name__}: {e}", file=file) from None



def from_obj(obj: Any, file: str | None = None) -> Module:
    """Build a Module from parsed BIR-JSON (a dict)."""
    reader = Reader(file)
    return guarded(reader, lambda: reader.module(obj))


def load_function_obj(obj: Any, *, file: str | None = None, where: str = "function") -> Function:
    """Build one Function from its JSON object (used by TranslateNKIASTToBIR's path B)."""
    reader = Reader(file)
    return guarded(reader, lambda: reader.function(obj, where))


def guarded(reader: "Reader", build: Callable[[], Any]) -> Any:
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



_OFFSET = [name for name, _ in OPERAND_SCHEMA].index("offset")  # an operand row's offset (OPERAND_SCHEMA order)


class Reader:
    def __init__(self, file: str | None):
        self.file = file
        self.where = "$"
        self.expand: Any = None  # the columnar loader's run expander: instructions read column-wise
        self.operand_cache: dict[tuple, tuple] | None = None  # per function, while ``expand`` is set

    # ------------------------------------------------------------------ module
    def module(self, obj: Any) -> Module:
        root = expect_obj(obj, "$", "a JSON object at the top level")
        version = expect_int(root.get("version", 2), "version")
        if version not in (1, 2):
            raise format_error(f"unsupported BIR-JSON version {version} (expected 1 or 2)", "version")
        arch = expect_str(root.get("arch", "gen3"), "arch")
        try:
            get_arch(arch)
        except TuskError as e:
            raise format_error(e.message, "arch") from None
        attributes = frozen_record(expect_obj(root.get("attributes", {}), "attributes"), "attributes")
        artifact = expect_str(root.get("artifact_path", ""), "artifact_path")
        queues = expect_list(root.get("queues", []), "queues")
        check_depth(queues, "queues")
        fns = expect_list(required(root, "functions", "$"), "functions")
        nki = expect_list(root.get("nki_functions", []), "nki_functions")
        functions = []
        seen: set[str] = set()
        for key, items, kind in (("functions", fns, enums.FnKind.NORMAL), ("nki_functions", nki, enums.FnKind.NKI)):
            for i, fobj in enumerate(items):
                fn = self.function(fobj, f"{key}[{i}]", kind)
                if fn.name in seen:
                    raise format_error(f"duplicate function name {fn.name!r}", f"{key}[{i}].name")
                seen.add(fn.name)
                functions.append(fn)
        extras = frozen_record({k: v for k, v in root.items() if k not in ROOT_KEYS}, "$")
        module = Module(functions, arch=arch, version=version, attributes=attributes, artifact_dir=artifact,
                        queues=freeze(queues), extras=extras)
        patch = wire.diff(root, render_module_head(module),
                          ROOT_KEYS - {"functions", "nki_functions"})
        if patch:
            module.extras = with_patch(module.extras, patch)
        return module

    # ------------------------------------------------------------------ function
    def function(self, obj: Any, where: str, kind: int = enums.FnKind.NORMAL) -> Function:
        fobj = expect_obj(obj, where)
        name = expect_str(required(fobj, "name", where), where + ".name")
        fn = Function(name, kind)
        self.fn_where = where
        self.operand_cache = None if self.expand is None else {}
        raw_attrs = self._attributes(fn, fobj.get("attributes", ABSENT), where + ".attributes")
        self.regs: dict[str, int] = {}
        self.memlocs: dict[str, int] = {}
        self.sets: dict[str, int] = {}
        self.first_memloc: dict[int, int] = {}  # set -> its first memloc (block 0 of a block tensor)
        allocs = expect_list(fobj.get("allocations", []), where + ".allocations")
        # names a nameless allocation must not take (it is named after its first memory location)
        self.taken = {a["name"] for a in allocs if type(a) is dict and type(a.get("name")) is str}
        for i, a in enumerate(allocs):
            self._allocation(fn, a, f"{where}.allocations[{i}]")
        self.refs = Refs()
        self.block_names: set[str] = set()
        self.deps_to_check: list[tuple[int, list, str]] = []
        self.carried_to_check: list[tuple[int, dict, str]] = []
        for i, b in enumerate(expect_list(fobj.get("blocks", []), where + ".blocks")):
            self._block(fn, b, f"{where}.blocks[{i}]", -1)
        self.where = where
        self._resolve(fn)
        extras = {k: v for k, v in fobj.items() if k not in FUNCTION_KEYS}
        fn.extras = frozen_record(extras, where)
        policy = {"attributes": render_attributes(fn.attrs, fn.kind, None)}
        raw = {} if raw_attrs is ABSENT else {"attributes": raw_attrs}
        patch = wire.diff(raw, policy, ("attributes",))
        for key in ("allocations", "blocks"):
            if key not in fobj:
                patch[key] = ((), ([],))
        if patch:
            fn.extras = with_patch(fn.extras, patch)
        fn.invalidate()
        return fn

    def _attributes(self, fn: Function, attrs: Any, where: str) -> Any:
        if attrs is ABSENT:
            return ABSENT
        if type(attrs) is list:  # current KLR: a list of names
            for i, a in enumerate(attrs):
                self._flag(fn, expect_str(a, f"{where}[{i}]"), True)
            return attrs
        for key, value in expect_obj(attrs, where).items():
            if key == "kind":
                fn.kind = expect_int(value, where + ".kind", minimum=0, maximum=255)
            elif type(value) is bool:
                self._flag(fn, key, value)
        check_depth(attrs, where)
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
        a = expect_obj(obj, where)
        skind = a.get("Skind", "memory_location_set")
        if skind == "register":
            name = expect_str(required(a, "name", where), where + ".name")
            if name in self.regs:
                raise format_error(f"duplicate register name {name!r}", where + ".name")
            extra = {k: v for k, v in a.items() if k not in ("Skind", "name")}
            rec = frozen_record(extra, where)
            if "Skind" not in a:
                rec = with_patch(rec, {"Skind": ((), ("register",))})
            self.regs[name] = fn.add_reg(name, rec)
            return
        if skind != "memory_location_set":
            raise format_error(f"unknown storage kind (Skind) {short(skind)}", where + ".Skind")
        locs = expect_list(a.get("memorylocations", []), where + ".memorylocations")
        if "name" in a:
            name = expect_str(a["name"], where + ".name")
        else:  # the DS fixtures' shape: a set named after its memory location, as K names them
            first = expect_obj(locs[0], where + ".memorylocations[0]") if locs else {}
            base = first.get("name") if type(first.get("name")) is str else "tensor"
            name = f"{base}_set"
            while name in self.sets or name in self.taken:
                name += "_"
        if name in self.sets:
            raise format_error(f"duplicate memory location set name {name!r}", where + ".name")
        kind = expect_enum(a.get("kind", "Internal"), TENSOR_KIND_BY_NAME, "tensor kind", where + ".kind")
        dtype = expect_enum(required(a, "dtype", where), DTYPE_BY_NAME, "dtype", where + ".dtype")
        shape = tuple(expect_int(d, f"{where}.tensor_shape[{k}]", minimum=0)
                      for k, d in enumerate(expect_list(a.get("tensor_shape", []), where + ".tensor_shape")))
        check_tensor_shape(name, shape, DTYPE_SIZES[dtype], where)
        is_block = expect_bool(a.get("is_block", False), where + ".is_block")
        n_blocks = expect_int(a.get("n_blocks", max(len(locs), 1) if is_block else 1), where + ".n_blocks", minimum=1,
                        maximum=I32_MAX)
        tclass = -1
        if "tensor_class" in a:
            tclass = expect_enum(a["tensor_class"], TENSOR_CLASS_BY_NAME, "tensor class", where + ".tensor_class")
            if tclass == default_tensor_class(kind):
                tclass = -1
        if "tensorId2MemLocSize" in a:
            expect_int(a["tensorId2MemLocSize"], where + ".tensorId2MemLocSize", minimum=0)
        extra = {k: v for k, v in a.items() if k not in SET_KEYS and not (k in SET_DEFAULTS
                                                                            and wire.same(v, SET_DEFAULTS[k]))}
        set_id = fn.add_set(name, kind, dtype, shape, tclass=tclass, is_block=is_block, n_blocks=n_blocks,
                            extra=frozen_record(extra, where))
        self.sets[name] = set_id
        for k, loc in enumerate(locs):
            self._memloc(fn, set_id, loc, f"{where}.memorylocations[{k}]")
        policy = render_set(fn, set_id, [None] * len(locs))
        patch = wire.diff(a, policy, (SET_KEYS | set(SET_DEFAULTS)) - {"memorylocations"})
        if "memorylocations" not in a:
            patch["memorylocations"] = ((), ([],))
        if patch:
            fn.sets.set("extra", set_id, fn.intern_record(with_patch(fn.record(fn.sets.get("extra", set_id)),
                                                                          patch)))

    def _memloc(self, fn: Function, set_id: int, obj: Any, where: str) -> None:
        m = expect_obj(obj, where)
        if m.get("Skind", "memory_location") != "memory_location":
            raise format_error(f"a memory location's Skind must be 'memory_location', got {short(m['Skind'])}",
                       where + ".Skind")
        name = expect_str(required(m, "name", where), where + ".name")
        if name in self.memlocs:
            raise format_error(f"duplicate memory location name {name!r}", where + ".name")
        mtype = expect_enum(required(m, "type", where), MEM_BY_NAME, "memory type", where + ".type")
        allocated = expect_bool(m["allocated"], where + ".allocated") if "allocated" in m else None
        addr = expect_int(m["addr"], where + ".addr", minimum=0, maximum=1 << 62) if "addr" in m else None
        if allocated is False or (allocated is None and addr is None):
            addr = -1
        elif addr is None:
            addr = 0
        dims = tuple(expect_int(d, f"{where}.dims[{k}]", minimum=0, maximum=1 << 62)
                     for k, d in enumerate(expect_list(m.get("dims", []), where + ".dims")))
        dsize = DTYPE_SIZES[fn.sets.get("dtype", set_id)]
        nparts, pbytes = dims_to_geometry(dims, mtype, dsize)
        base = expect_int(m.get("base", 0), where + ".base", minimum=0, maximum=I32_MAX)
        check_memloc_extent(name, dims, nparts, pbytes, addr, base, where)
        bank = expect_int(m.get("bank", -1), where + ".bank", minimum=-1, maximum=I32_MAX)
        if bank == 0 and not (mtype == Mem.PSUM and addr >= 0):
            bank = -1  # KLR writes bank 0 everywhere; Tusk keeps -1 for "no bank" (the policy writes 0 again)
        tensor_id = expect_int(m.get("tensor_id", -1), where + ".tensor_id", minimum=-1, maximum=I32_MAX)
        if tensor_id == 0 and not fn.sets.get("is_block", set_id):
            tensor_id = -1
        const_path = m.get("const_file_path")
        if const_path is not None:
            expect_str(const_path, where + ".const_file_path")
        extra = {k: v for k, v in m.items() if k not in MEMLOC_KEYS and not (k in MEMLOC_DEFAULTS
                                                                               and wire.same(v, MEMLOC_DEFAULTS[k]))}
        self.first_memloc.setdefault(set_id, len(fn.memlocs))
        row = fn.add_memloc(set_id, name, mtype, addr=addr, pbytes=pbytes, nparts=nparts, base=base, bank=bank,
                            tensor_id=tensor_id, const_path=const_path, extra=frozen_record(extra, where))
        self.memlocs[name] = row
        patch = wire.diff(m, render_memloc(fn, row), MEMLOC_KEYS | set(MEMLOC_DEFAULTS))
        if patch:
            fn.memlocs.set("extra", row, fn.intern_record(with_patch(fn.record(fn.memlocs.get("extra", row)),
                                                                          patch)))

    # ------------------------------------------------------------------ blocks and instructions
    def _block(self, fn: Function, obj: Any, where: str, parent: int) -> None:
        b = expect_obj(obj, where)
        name = expect_str(required(b, "name", where), where + ".name")
        if name in self.block_names:
            raise format_error(f"duplicate block name {name!r}", where + ".name")
        self.block_names.add(name)
        extra = {k: v for k, v in b.items() if k not in ("name", "instructions")}
        rec = frozen_record(extra, where)
        if "instructions" not in b:
            rec = with_patch(rec, {"instructions": ((), ([],))})
        bid = fn.add_block(name, parent, rec)
        expand = self.expand
        for i, inst in enumerate(expect_list(b.get("instructions", []), where + ".instructions")):
            if expand is not None and type(inst) is str and inst.startswith(expand.marker):
                expand.run(self, fn, inst, f"{where}.instructions[{i}]", bid)
            else:
                self.inst(fn, inst, f"{where}.instructions[{i}]", bid)

    def inst(self, fn: Function, obj: Any, where: str, block: int) -> int:
        """Append one instruction (and its body blocks); returns its row."""
        self.where = where
        d = expect_obj(obj, where)
        patch: dict[str, tuple] = {}
        if "name" in d:
            raw_name = expect_str(d["name"], where + ".name")
            split = split_clone_name(raw_name)
            name, iteration = (fn.s(split[0]), split[1]) if split else (fn.s(raw_name), -1)
        else:
            name, iteration = -1, -1
        opcode = expect_enum(required(d, "opcode", where), OPCODE_BY_NAME, "opcode", where + ".opcode")
        if "engine" in d:
            engine = expect_enum(d["engine"], ENGINE_BY_NAME, "engine", where + ".engine")
        else:
            engine = 0
            patch["engine"] = ((), ("Unassigned",))
        rows = []
        for role, key in enumerate(ROLE_KEYS):
            if key in d:
                ops = expect_list(d[key], f"{where}.{key}")
                for k, op in enumerate(ops):
                    rows.append(self._operand(fn, op, f"{where}.{key}[{k}]", role))
                if not ops and key == "indirection_ins":
                    patch[key] = (([],), ())
            elif key != "indirection_ins":
                patch[key] = ((), ([],))
        pred = -1
        if "predicates" in d:
            raw = expect_list(d["predicates"], where + ".predicates")
            check_depth(raw, where + ".predicates")
            preds = tuple(AffinePredicate.from_json(p, f"{where}.predicates[{k}]") for k, p in enumerate(raw))
            pred = fn.intern(preds) if preds else -1
            rendered = [p.to_json() for p in preds]
            if not wire.same(raw, rendered):
                patch["predicates"] = ((raw,), (rendered,) if rendered else ())
        attrs = {k: v for k, v in d.items() if k not in INST_KEYS}
        strip_derived_defaults(opcode, attrs)
        if opcode in enums.LOOP_OPCODES and opcode != Op.DoWhile:
            check_loop_axis(attrs, where)
        rec = frozen_record(attrs, where)
        if "blocks" in d and opcode not in enums.LOOP_OPCODES:
            raise format_error(f"only loop instructions have body blocks, not {OPCODE_NAMES[opcode]}", where + ".blocks")
        derived = derived_keys(opcode, rec)
        for k, v in derived.items():
            if k not in d:
                patch[k] = ((), (v,))
        if patch:
            rec = with_patch(rec, patch)
        row = fn.add_inst(opcode, engine, block, name, rows, attrs=rec, pred=pred, iteration=iteration)
        if "dependencies" in d:
            self._deps(fn, row, block, d["dependencies"], where)
        if "loop_carried_dependencies" in d or "unroll_dependencies" in d:
            self._carried(fn, row, block, d, where)
        if "blocks" in d:
            for k, b in enumerate(expect_list(d["blocks"], where + ".blocks")):
                self._block(fn, b, f"{where}.blocks[{k}]", row)
        return row

    def _operand(self, fn: Function, obj: Any, where: str, role: int) -> tuple:
        """One operand row; with ``operand_cache`` (the columnar loader's), a physical access pattern read
        before in this function but for its offset is not read again."""
        cache = self.operand_cache
        if (cache is None or type(obj) is not dict or obj.get("kind") != "physical_ap"
                or type(obj.get("offset")) is not int):
            return self._read_operand(fn, obj, where, role)
        key = (role, orjson.dumps({k: v for k, v in obj.items() if k != "offset"}))
        row = cache.get(key)
        if row is None:
            row = cache[key] = self._read_operand(fn, obj, where, role)
            return row
        return row[:_OFFSET] + (expect_int(obj["offset"], where + ".offset"),) + row[_OFFSET + 1:]

    def _read_operand(self, fn: Function, obj: Any, where: str, role: int) -> tuple:
        o = expect_obj(obj, where)
        kname = required(o, "kind", where)
        if type(kname) is not str or kname not in OPERAND_KIND_BY_NAME:
            raise format_error(f"Unsupported argument kind {short(kname)}", where + ".kind")
        kind = OPERAND_KIND_BY_NAME[kname]
        dtype = expect_enum(required(o, "dtype", where), DTYPE_BY_NAME, "dtype", where + ".dtype")
        memloc, offset, pattern, aux, dyn = -1, 0, -1, -1, -1
        handled = {"kind", "dtype"}
        patch: dict[str, tuple] = {}
        if kname != "symbolic_ap" and kname != OPERAND_KIND_NAMES[kind]:
            patch["kind"] = ((kname,), (OPERAND_KIND_NAMES[kind],))
        if kind in (Kind.PHYSICAL, Kind.SYMBOLIC, Kind.REGISTER_AP):
            pattern = fn.pattern_id(read_pattern(required(o, "ap", where), where + ".ap"))
            memloc = self._bind(fn, o, where, patch)
            handled |= {"ap", "memref", "memsetref"}
        if kind == Kind.PHYSICAL:
            if "offset" in o:
                offset = expect_int(o["offset"], where + ".offset")
            else:
                patch["offset"] = ((), (0,))
            handled.add("offset")
            if "dynamic_ap_info" in o:
                raw = o["dynamic_ap_info"]
                check_depth(raw, where + ".dynamic_ap_info")
                info = read_dyn_info(raw, where + ".dynamic_ap_info")
                dyn = fn.intern(info)
                handled.add("dynamic_ap_info")
                if not wire.same(raw, info.to_json()):
                    patch["dynamic_ap_info"] = ((raw,), (info.to_json(),))
        elif kind == Kind.SYMBOLIC:
            addrs = expect_list(required(o, "addrs", where), where + ".addrs")
            exprs = tuple(read_expr(e, f"{where}.addrs[{k}]") for k, e in enumerate(addrs))
            rendered = [e.to_json() for e in exprs]
            if len(exprs) == 1 and "access_shape" not in o:
                block_e = read_expr(o["block_index"], where + ".block_index") if "block_index" in o else None
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
                reg = expect_str(required(o, "regref", where), where + ".regref")
                if reg not in self.regs:
                    raise format_error(f"register {reg!r} does not exist", where + ".regref")
                aux = self.regs[reg]
            handled.add("regref")
        elif kind == Kind.IMM:
            raw = required(o, "value", where)
            value = read_number(raw, where + ".value", maximum=imm_maximum(dtype))
            aux = fn.intern(ImmValue(value))
            handled.add("value")
        elif kind == Kind.IMM_ARRAY:
            vals = expect_list(required(o, "value_array", where), where + ".value_array")
            aux = fn.intern(ImmValue(tuple(read_number(v, f"{where}.value_array[{k}]", maximum=imm_maximum(dtype)) for k, v in enumerate(vals))))
            handled.add("value_array")
        elif kind == Kind.SYMBOLIC_IMM:
            raw = required(o, "expr", where)
            e = read_expr(raw, where + ".expr")
            aux = fn.intern(e)
            handled.add("expr")
            if not wire.same(raw, e.to_json()):
                patch["expr"] = ((raw,), (e.to_json(),))
        extra = {k: v for k, v in o.items() if k not in handled}
        rec = frozen_record(extra, where) if extra else None
        if patch:
            rec = with_patch(rec, patch)
        return (role, kind, dtype, memloc, offset, pattern, aux, dyn, fn.intern_record(rec))

    def _bind(self, fn: Function, o: dict, where: str, patch: dict) -> int:
        """The memory location an access pattern reads or writes (by name)."""
        if "memref" in o:
            ref = expect_str(o["memref"], where + ".memref")
            if ref not in self.memlocs:
                raise format_error(f"memory location {ref!r} does not exist", where + ".memref")
            m = self.memlocs[ref]
            set_name = fn.strings[fn.sets.get("name", fn.memlocs.get("set", m))]
            if "memsetref" in o:
                setref = expect_str(o["memsetref"], where + ".memsetref")
                if setref != set_name:
                    patch["memsetref"] = ((setref,), (set_name,))
            else:
                patch["memsetref"] = ((), (set_name,))
            return m
        setref = expect_str(required(o, "memsetref", where), where + ".memsetref")
        if setref not in self.sets:
            raise format_error(f"memory location set {setref!r} does not exist", where + ".memsetref")
        first = self.first_memloc.get(self.sets[setref])
        if first is None:
            raise format_error(f"memory location set {setref!r} has no memory locations", where + ".memsetref")
        patch["memref"] = ((), (fn.strings[fn.memlocs.get("name", first)],))
        return first

    # ------------------------------------------------------------------ dependencies (resolved per function)
    def _deps(self, fn: Function, row: int, block: int, raw: Any, where: str) -> None:
        deps = expect_list(raw, where + ".dependencies")
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
                    kind = expect_enum(dep[1], EDGE_BY_NAME, "edge kind", w + "[1]")
                else:
                    kind = expect_int(dep[1], w + "[1]", minimum=0, maximum=len(EDGE_NAMES) - 1)
                    canonical = False
            else:
                raise format_error("a dependency must be a name or [name, kind]", w)
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
            items = expect_list(d[key], f"{where}.{key}")
            check_depth(items, f"{where}.{key}")
            for k, dep in enumerate(items):
                w = f"{where}.{key}[{k}]"
                if type(dep) is not list or not dep:
                    raise format_error("a carried dependency must be [name, kind, ...]", w)
                name = expect_str(dep[0], w + "[0]")
                kind = enums.Edge.Flow
                if len(dep) > 1:
                    if type(dep[1]) is str:
                        kind = expect_enum(dep[1], EDGE_BY_NAME, "edge kind", w + "[1]")
                    else:
                        kind = expect_int(dep[1], w + "[1]", minimum=0, maximum=len(EDGE_NAMES) - 1)
                payload = self._carried_payload(flavour, dep[2:], w)
                self.refs.add(fn, row, block, name, kind, flavour, fn.intern(payload), w)
        self.carried_to_check.append((row, {k: d[k] for k in ("loop_carried_dependencies", "unroll_dependencies")
                                            if k in d}, where))

    def _carried_payload(self, flavour: int, rest: list, where: str) -> Any:
        if flavour == CARRIED_LOOP:
            dist = rest[0] if rest else []
            return tuple(expect_int(x, f"{where}[2][{k}]") for k, x in enumerate(expect_list(dist, where + "[2]")))
        exprs = tuple(read_expr(e, f"{where}[2][{k}]") for k, e in enumerate(expect_list(rest[0] if rest else [], where + "[2]")))
        preds = tuple(AffinePredicate.from_json(p, f"{where}[3][{k}]")
                      for k, p in enumerate(expect_list(rest[1] if len(rest) > 1 else [], where + "[3]")))
        return (exprs, preds)

    def _resolve(self, fn: Function) -> None:
        resolve_refs(fn, self.refs, self.fn_where, may_repeat=bool(self.deps_to_check))
        if not self.deps_to_check and not self.carried_to_check:
            return
        render = InstRender(fn)
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
        fn.insts.set("attrs", row, fn.intern_record(with_patch(rec, patch)))


