"""The machine state and one function's frame: operands -> memory accesses and values.

A :class:`Machine` owns the memories of one run (SBUF, PSUM, the shared DRAM
space) and the register file.  A :class:`Frame` is one activation of a
function: it binds the function's memory locations to storages (unallocated
DRAM locations get a private buffer, or the caller's buffer when the function
is called through an InstNKIKernel), holds the current loop indices, and
turns operand rows into :class:`~sim.memory.Access` objects and values.

Frames read the columns as Python lists once, so the hot loop never builds
InstView objects; accesses of physical operands are cached by operand row
(and of symbolic ones by row and evaluated offset).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from tusk.ir.arch import PARTITIONS, get_arch
from tusk.ir.columns import thaw
from tusk.ir.enums import DTYPE_NAMES, DTYPE_SIZES, OPCODE_NAMES, Kind, Mem, Role
from tusk.ir.errors import InputError, PassError
from tusk.ir.expr import Env, IndirectArgExpr, QuasiAffine, expr_from_json
from tusk.ir.module import Function, Module
from tusk.ir.values import DynamicAPInfo, ImmValue, SymAddr
from tusk.sim.memory import NP_DTYPES, Access, Loc, Storage, from_compute, make_access, range_of, to_compute

CACHE_LIMIT = 1 << 17  # cached accesses per frame before the cache is reset


class InterpError(InputError):
    """An error already located at an instruction (so callers do not prefix it twice)."""


class Machine:
    """Memories and registers of one run."""

    def __init__(self, module: Module, *, strict: bool = False, seed: int | None = None,
                 max_steps: int = 20_000_000):
        self.module = module
        self.arch = get_arch(module.arch)
        self.strict = strict
        self.rng = None if seed is None else np.random.default_rng(seed)
        self.sb = Storage("SBUF", PARTITIONS * self.arch.sb_bytes_per_partition, strict=strict, rng=self.rng)
        self.psum = Storage("PSUM", PARTITIONS * self.arch.psum_bytes_per_partition, strict=strict, rng=self.rng)
        dram_end = 0
        for fn in module.functions:
            ml = fn.memlocs
            placed = (ml["mtype"] == Mem.DRAM) & (ml["addr"] >= 0)
            if placed.any():
                dram_end = max(dram_end, int((ml["addr"][placed] + ml["pbytes"][placed]).max()))
        self.dram = Storage("DRAM", dram_end, strict=strict, rng=self.rng)
        self.regs: defaultdict[str, int] = defaultdict(int)  # 64-bit registers by name, initially 0
        self.steps = 0
        self.max_steps = max_steps
        self.depth = 0

    def private(self, name: str, nbytes: int) -> Storage:
        return Storage(f"DRAM tensor {name}", nbytes, strict=self.strict, rng=self.rng)

    def count(self, n: int, fn: Function) -> None:
        self.steps += n
        if self.steps > self.max_steps:
            raise InputError(f"function {fn.name}: step limit of {self.max_steps} executed instructions exceeded "
                            f"(an infinite loop?)")


def memloc_elems(fn: Function, m: int) -> tuple[tuple[int, ...], int]:
    """(array shape, dtype) of a DRAM memory location's contents as inputs/outputs see them."""
    s = fn.memlocs.get("set", m)
    dt = fn.sets.get("dtype", s)
    shape = tuple(fn.value(fn.sets.get("shape", s)) or ())
    size = DTYPE_SIZES[dt]
    pbytes = fn.memlocs.get("pbytes", m)
    n = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if fn.sets.get("is_block", s) or (pbytes and n * size > pbytes):
        shape = (pbytes // size,)
    return shape, dt


class Frame:
    """One activation of a function."""

    def __init__(self, machine: Machine, fn: Function, bindings: dict[int, Loc] | None = None):
        self.m = machine
        self.fn = fn
        #: gather indices put in place of an operand's own while an out-of-bounds-skipping DMA runs
        self.gather_override: dict[int, np.ndarray] = {}
        #: the runtime offset and gather of an operand, as :meth:`runtime_rows` read them for the instruction
        #: running now (its copy then addresses what was checked, without reading the registers and index
        #: tiles again); cleared when that instruction ends
        self.resolved: dict[int, tuple[int, tuple[int, np.ndarray] | None]] = {}
        ins, ops = fn.insts, fn.operands
        self.opcode = ins["opcode"].tolist()
        self.pred = ins["pred"].tolist()
        self.attr = ins["attrs"].tolist()
        self.ops = ins["ops"].tolist()
        self.nops = ins["nops"].tolist()
        self.role = ops["role"].tolist()
        self.kind = ops["kind"].tolist()
        self.dtype = ops["dtype"].tolist()
        self.memloc = ops["memloc"].tolist()
        self.offset = ops["offset"].tolist()
        self.pattern = ops["pattern"].tolist()
        self.aux = ops["aux"].tolist()
        self.dyn = ops["dyn"].tolist()
        self.values = fn.values.items
        self.patterns = fn.patterns.items
        self.reg_names = [fn.strings[n] for n in fn.regs["name"].tolist()]
        self.axes: dict[str, int] = {}
        # live mappings: loop indices and registers set later are seen by every evaluation
        self.env = Env(self.axes, machine.regs)
        self.cache: dict[Any, Access] = {}
        self.cur = -1
        self._exprs: dict[int, QuasiAffine] = {}
        self._split: dict[int, tuple[list[int], list[int], list[int]]] = {}
        self.locs = self._bind(bindings or {})
        # set -> {tensor_id: memloc} for block tensors
        self.blocks: dict[int, dict[int, int]] = {}
        for m, (s, tid) in enumerate(zip(fn.memlocs["set"].tolist(), fn.memlocs["tensor_id"].tolist())):
            self.blocks.setdefault(s, {})[tid] = m

    # ------------------------------------------------------------ binding
    def _bind(self, bindings: dict[int, Loc]) -> list[Loc | None]:
        fn, m = self.fn, self.m
        ml = fn.memlocs
        locs: list[Loc | None] = []
        names = [fn.strings[n] for n in ml["name"].tolist()]
        for r, (mtype, addr, pbytes, base) in enumerate(zip(ml["mtype"].tolist(), ml["addr"].tolist(),
                                                            ml["pbytes"].tolist(), ml["base"].tolist())):
            name = names[r]
            if r in bindings:
                locs.append(bindings[r])
            elif mtype == Mem.SB or mtype == Mem.PSUM:
                if addr < 0:
                    locs.append(None)  # an error only if an instruction touches it
                    continue
                st = m.sb if mtype == Mem.SB else m.psum
                per = m.arch.sb_bytes_per_partition if mtype == Mem.SB else m.arch.psum_bytes_per_partition
                locs.append(Loc(name, st, True, addr, pbytes, per, base))
            elif addr >= 0:
                locs.append(Loc(name, m.dram, False, addr, pbytes))
            else:
                shape, dt = memloc_elems(fn, r)
                nbytes = max(pbytes, int(np.prod(shape, dtype=np.int64)) * DTYPE_SIZES[dt])
                locs.append(Loc(name, m.private(name, nbytes), False, 0, nbytes))
        return locs

    def loc(self, m: int) -> Loc:
        loc = self.locs[m]
        if loc is None:
            raise InputError(f"memory location {self.fn.strings[self.fn.memlocs.get('name', m)]} is not allocated "
                            f"(SB/PSUM tensors need an address to run)")
        return loc

    # ------------------------------------------------------------ instructions
    def name(self, i: int) -> str:
        return self.fn.inst_name(i)

    def opname(self, i: int) -> str:
        return OPCODE_NAMES[self.opcode[i]]

    def attrs(self, i: int):
        a = self.attr[i]
        return self.values[a] if a >= 0 else {}

    def split(self, i: int) -> tuple[list[int], list[int], list[int]]:
        """Operand rows of instruction ``i`` by role: (ins, indirection_ins, outs)."""
        got = self._split.get(i)
        if got is None:
            ins: list[int] = []
            ind: list[int] = []
            outs: list[int] = []
            s = self.ops[i]
            role = self.role
            for j in range(s, s + self.nops[i]):
                r = role[j]
                (ins if r == Role.IN else outs if r == Role.OUT else ind).append(j)
            got = (ins, ind, outs)
            if len(self._split) < CACHE_LIMIT:
                self._split[i] = got
        return got

    def preds_hold(self, pid: int) -> bool:
        env = self.env
        return all(p.eval(env) for p in self.values[pid])

    def maybe_affine(self, value: Any) -> int | float:
        """A MaybeAffine attribute: a plain number or a pelican expression (JSON) of loop indices."""
        if isinstance(value, bool):
            return int(value)
        if isinstance(value, (int, float)):
            return value
        if isinstance(value, str):
            return self.m.regs[value]
        e = self._exprs.get(id(value))
        if e is None:
            e = self._exprs[id(value)] = expr_from_json(thaw(value))
        return e.eval(self.env)

    # ------------------------------------------------------------ operands
    def scalar(self, j: int) -> Any:
        """Value of an immediate / symbolic immediate / register operand."""
        k = self.kind[j]
        if k == Kind.IMM or k == Kind.IMM_ARRAY:
            v = self.values[self.aux[j]]
            return v.value if isinstance(v, ImmValue) else v
        if k == Kind.SYMBOLIC_IMM:
            return self.values[self.aux[j]].eval(self.env)
        if k == Kind.REGISTER:
            return self.m.regs[self.reg_names[self.aux[j]]]
        # a one-element access pattern read as a scalar
        return self.value(j).reshape(-1)[0].item()

    def reg_name(self, j: int) -> str:
        if self.kind[j] not in (Kind.REGISTER, Kind.REGISTER_AP):
            raise InputError("expected a register operand")
        return self.reg_names[self.aux[j]]

    def access(self, j: int) -> Access:
        k = self.kind[j]
        if k == Kind.PHYSICAL:
            if self.dyn[j] < 0:
                key = (self.memloc[j], self.dtype[j], self.offset[j], self.pattern[j])
                acc = self.cache.get(key)
                if acc is None:
                    acc = self._remember(key, make_access(self.loc(key[0]), key[1], key[2], self.patterns[key[3]]))
                return acc
            return self._dynamic(j)
        if k == Kind.SYMBOLIC:
            sa: SymAddr = self.values[self.aux[j]]
            off = sa.offset.eval(self.env)
            m = self.memloc[j]
            blk = None
            if sa.block is not None:
                blk = sa.block.eval(self.env)
                s = self.fn.memlocs.get("set", m)
                locs = self.blocks.get(s, {})
                nb = self.fn.sets.get("n_blocks", s)
                if len(locs) == 1 and 0 <= blk < nb:  # one memory location for the set: every block shares it
                    m = next(iter(locs.values()))
                else:
                    m = locs.get(blk, -1)
                if m < 0:
                    raise InputError(f"block index {blk} selects no memory location of tensor "
                                    f"{self.fn.strings[self.fn.sets.get('name', s)]}")
            key = (m, self.dtype[j], off, self.pattern[j])
            acc = self.cache.get(key)
            if acc is None:
                acc = self._remember(key, make_access(self.loc(m), key[1], off, self.patterns[key[3]]))
            return acc
        if k == Kind.REGISTER_AP:
            if self.aux[j] < 0:
                raise PassError("a register_ap without regref (its address register is not named) is not "
                                "supported by the interpreter")
            # Tusk's reading: the register holds a runtime element offset added to the static one.
            off = self.offset[j] + self.m.regs[self.reg_names[self.aux[j]]]
            key = (self.memloc[j], self.dtype[j], off, self.pattern[j])
            acc = self.cache.get(key)
            if acc is None:
                acc = self._remember(key, make_access(self.loc(key[0]), key[1], off, self.patterns[key[3]]))
            return acc
        if k == Kind.SYMBOLIC_DIMS:
            raise PassError("a symbolic_ap with one address per dimension (KLR's form) is not supported by the "
                            "interpreter")
        raise InputError(f"operand {j} is not an access pattern")

    def _remember(self, key, acc: Access) -> Access:
        if len(self.cache) >= CACHE_LIMIT:
            self.cache.clear()
        self.cache[key] = acc
        return acc

    def _dynamic(self, j: int) -> Access:
        """A physical AP with DynamicAPInfo: register offsets, memory scalar offsets, gathers."""
        off, gather = self.resolved.get(j) or self._dynamic_parts(j)
        if gather is not None and j in self.gather_override:
            gather = (gather[0], self.gather_override[j])
        return make_access(self.loc(self.memloc[j]), self.dtype[j], off, self.patterns[self.pattern[j]], gather)

    def runtime_rows(self, j: int) -> tuple[int | None, np.ndarray, np.ndarray | None] | None:
        """For an operand whose address is read at run time (``oob_is_err`` false: out-of-bounds parts are
        skipped): ``(None, ok, None)`` for a runtime offset of the whole access (``ok`` one bool: the access
        lies in its memory location), ``(dim, ok, indices)`` for a gather (one bool per index of that pattern
        dimension: its part lies in the location).  None for a static operand or one in a partitioned
        location."""
        if self.kind[j] == Kind.REGISTER_AP and self.aux[j] >= 0:
            off, gather = self.offset[j] + self.m.regs[self.reg_names[self.aux[j]]], None
        elif self.kind[j] == Kind.PHYSICAL and self.dyn[j] >= 0:
            off, gather = self.resolved[j] = self._dynamic_parts(j)
        else:
            return None
        loc = self.loc(self.memloc[j])
        if loc.partitioned:
            return None
        size = DTYPE_SIZES[self.dtype[j]]
        # the location's own bytes (DRAM locations with an address share one storage)
        elems = (loc.pbytes if loc.pbytes > 0 else len(loc.storage.data) - loc.addr) // size
        pat = self.patterns[self.pattern[j]]
        # the pattern's reach, the gather's dimension left out (its rows are the indices)
        lo, hi = range_of([int(s) for s, _ in pat],
                           [1 if gather is not None and k == gather[0] else int(n) for k, (_, n) in enumerate(pat)])
        if gather is None:
            return None, np.array(off + lo >= 0 and off + hi < elems), None
        dim, idx = gather
        base = off + np.asarray(idx, dtype=np.int64) * int(pat[dim][0])
        return dim, (base + lo >= 0) & (base + hi < elems), idx

    def _dynamic_parts(self, j: int) -> tuple[int, tuple[int, np.ndarray] | None]:
        """The element offset of a dynamic AP (static plus runtime scalars) and its gather, if any."""
        d: DynamicAPInfo = self.values[self.dyn[j]]
        off = self.offset[j]  # ``c`` repeats the static offset for the wire
        gather = None
        for expr, coef in d.aff_expr:
            ind = [a for a in expr.atoms() if isinstance(a, IndirectArgExpr)]
            if not ind:
                off += coef * expr.eval(self.env)
                continue
            if len(expr.terms) != 1 or expr.terms[0][1] != 1 or expr.c != 0:
                raise InputError(f"dynamic offset term {expr!r} mixes a gather index with other terms")
            idx = self._indirect_values(ind[0].arg_id)
            if idx.size == 1:
                off += coef * int(idx[0])
            elif gather is not None:
                raise InputError("an access pattern with two gather indices")
            else:
                gather = (d.indirect_dim, idx)
        return off, gather

    def _indirect_values(self, arg_id: int) -> np.ndarray:
        """The index tensor of IndirectArgExpr(arg_id): the arg_id-th indirection_ins operand (1-based)."""
        _, ind, _ = self.split(self.cur)
        k = arg_id - 1 if arg_id >= 1 else 0
        if k >= len(ind):
            raise InputError(f"IndirectArgExpr({arg_id}) but the instruction has {len(ind)} indirection_ins operand(s)")
        v = self.value(ind[k]).reshape(-1)
        if v.dtype.kind == "f":
            v = np.rint(v)
        return v.astype(np.int64)

    # ------------------------------------------------------------ values
    def read_raw(self, j: int) -> np.ndarray:
        acc = self.access(j)
        if self.m.strict and not acc.all_written():
            raise InputError(f"strict mode: reads uninitialised memory of memory location {acc.loc.name}")
        return acc.read()

    def value(self, j: int) -> np.ndarray:
        """An operand's elements in the compute domain (float32 or int64), shaped like its pattern."""
        k = self.kind[j]
        if k in (Kind.IMM, Kind.IMM_ARRAY, Kind.SYMBOLIC_IMM, Kind.REGISTER):
            v = self.scalar(j)
            floats = any(isinstance(x, float) for x in v) if isinstance(v, tuple) else isinstance(v, float)
            if floats:
                return np.asarray(v, dtype=np.float32)
            # a uint64 immediate of 2**63 or more keeps its bits in the int64 compute domain, as uint64 data does
            return np.asarray(tuple(map(_int64_bits, v)) if isinstance(v, tuple) else _int64_bits(v), dtype=np.int64)
        return to_compute(self.read_raw(j), self.dtype[j])

    def store(self, j: int, vals: np.ndarray) -> None:
        """Convert computed values to the operand's dtype and write them (element counts must match)."""
        acc = self.access(j)
        vals = np.asarray(vals)
        if vals.size != acc.count:
            raise InputError(f"result has {vals.size} elements but the output access pattern has {acc.count}")
        acc.write(from_compute(vals.reshape(-1), self.dtype[j]))
        if self.m.strict:
            acc.mark_written()

    def store_raw(self, j: int, raw: np.ndarray) -> None:
        acc = self.access(j)
        if raw.size != acc.count:
            raise InputError(f"copies {raw.size} elements into an access pattern of {acc.count}")
        acc.write(raw.reshape(-1))
        if self.m.strict:
            acc.mark_written()

    def dtype_name(self, j: int) -> str:
        return DTYPE_NAMES[self.dtype[j]]

    def same_storage_dtype(self, a: int, b: int) -> bool:
        return self.dtype[a] == self.dtype[b] or (NP_DTYPES[self.dtype[a]] == NP_DTYPES[self.dtype[b]]
                                                  and self.dtype[a] in (16, 17) and self.dtype[b] in (16, 17))


def _int64_bits(x: int) -> int:
    return x - (1 << 64) if x >= 1 << 63 else x
