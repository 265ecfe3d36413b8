"""The BIR data model: a Module of Functions, each a set of column tables.

Layout of a :class:`Function` (one numpy column per field; see DESIGN):

* ``insts`` — one row per instruction, in *program preorder*: a loop
  instruction's row is followed by the rows of its body blocks before the
  instructions after the loop.  ``name`` is the string id of the original
  instruction's name and ``iter`` the iteration index of a clone (-1 for an
  original), so the 25M clones of a big unroll carry no strings of their
  own.  ``attrs`` points at a shared :class:`~ir.columns.Record` of
  op-specific keys, ``ops``/``nops`` at the instruction's operand rows and
  ``pred`` at a tuple of :class:`~ir.expr.AffinePredicate`.
* ``operands`` — one row per operand: role (ins / indirection_ins / outs),
  kind, dtype, memory location, element offset, pattern id (the
  ``[step, num]`` pairs live once in a pool), ``aux`` (kind-specific: a
  SymAddr, an immediate, an expression, or a register row) and the ids of a
  DynamicAPInfo and of unmodelled wire keys.
* ``memlocs`` / ``sets`` — memory locations and the logical tensors
  (memory-location sets) they belong to.
* ``blocks`` — basic blocks; ``parent`` is the loop instruction owning a
  loop body (-1 for top-level blocks).
* ``regs`` — registers; ``deps`` — dependence edges ``src -> dst`` meaning
  dst waits for src; ``carried`` — loop-carried and predicated edges.

Rows refer to each other by index.  A pass that deletes or reorders rows
builds new tables (see :meth:`Function.take_insts`); passes never mutate
their input module, they work on :meth:`Module.copy`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tusk.ir import enums
from tusk.ir.columns import EMPTY, Pool, Record, Table
from tusk.ir.enums import Kind
from tusk.ir.errors import InputError
from tusk.ir.expr import expr_from_json

# the schemas are defined below this module (tusk.ir.schema) and imported from here as before
from tusk.ir.schema import AUX_VALUE_KINDS as AUX_VALUE_KINDS
from tusk.ir.schema import BLOCK_SCHEMA as BLOCK_SCHEMA
from tusk.ir.schema import CARRIED_LOOP as CARRIED_LOOP
from tusk.ir.schema import CARRIED_SCHEMA as CARRIED_SCHEMA
from tusk.ir.schema import CARRIED_UNROLL as CARRIED_UNROLL
from tusk.ir.schema import CLONE_NAME as CLONE_NAME
from tusk.ir.schema import DEP_SCHEMA as DEP_SCHEMA
from tusk.ir.schema import INST_SCHEMA as INST_SCHEMA
from tusk.ir.schema import MAX_OPERANDS as MAX_OPERANDS
from tusk.ir.schema import MEMLOC_SCHEMA as MEMLOC_SCHEMA
from tusk.ir.schema import OPERAND_SCHEMA as OPERAND_SCHEMA
from tusk.ir.schema import PATTERN_REFS as PATTERN_REFS
from tusk.ir.schema import REG_SCHEMA as REG_SCHEMA
from tusk.ir.schema import SCHEMAS as SCHEMAS
from tusk.ir.schema import SET_SCHEMA as SET_SCHEMA
from tusk.ir.schema import STRING_REFS as STRING_REFS
from tusk.ir.schema import VALUE_REFS as VALUE_REFS
from tusk.ir.schema import BlockCol, CarriedCol, DepCol, InstCol, MemlocCol, OperandCol, RegCol, SetCol
from tusk.ir.schema import clone_name as clone_name
from tusk.ir.schema import split_clone_name as split_clone_name
from tusk.ir.values import DynamicAPInfo, ImmValue, Pattern, SymAddr


class Function:
    """One BIR function: tables plus interning pools (strings, patterns, values)."""

    def __init__(self, name: str, kind: int = enums.FnKind.NORMAL, attrs: set[int] | None = None):
        self.name = name
        self.kind = kind
        self.attrs: set[int] = set(attrs or ())
        self.extras: Record = EMPTY  # unmodelled wire keys of the function
        self.strings: Pool[str] = Pool(exact=True)
        self.patterns: Pool[Pattern] = Pool(exact=True)
        self.values: Pool[Any] = Pool()
        for table, schema in SCHEMAS.items():
            setattr(self, table, Table(schema))
        self._name_index: dict[str, int] | None = None

    insts: Table[InstCol]
    operands: Table[OperandCol]
    memlocs: Table[MemlocCol]
    sets: Table[SetCol]
    regs: Table[RegCol]
    blocks: Table[BlockCol]
    deps: Table[DepCol]
    carried: Table[CarriedCol]

    # ------------------------------------------------------------ copying
    def copy(self) -> "Function":
        return self._copy_except()

    def _copy_except(self, *shared: str) -> "Function":
        """A copy whose ``shared`` tables are this function's own (the caller replaces them)."""
        out = Function.__new__(Function)
        out.name, out.kind, out.attrs, out.extras = self.name, self.kind, set(self.attrs), self.extras
        out.strings, out.patterns, out.values = self.strings.copy(), self.patterns.copy(), self.values.copy()
        for table in SCHEMAS:
            setattr(out, table, getattr(self, table) if table in shared else getattr(self, table).copy())
        out._name_index = None
        return out

    def with_tables(self, **tables: Table) -> "Function":
        """A new function with ``tables`` replaced and everything else shared with this one (tables, pools):
        for a pass's output, since passes never change their input in place."""
        out = Function.__new__(Function)
        out.__dict__.update(self.__dict__)
        out.attrs = set(self.attrs)
        out._name_index = None
        for table, value in tables.items():
            if table not in SCHEMAS:
                raise KeyError(f"a function has no table {table!r}")
            setattr(out, table, value)
        return out

    def edges_only(self, deps: Table | None = None) -> "Function":
        """A function with this one's name, kind and attributes and only edges (``deps``, else its own): what
        a split pass's part hands its merge, which has the rows already (storing and fetching a copy of a
        300k-row part cost ~0.1 s per part and 0.5 s of the merge's fetch on a 1.2M-row kernel)."""
        out = Function(self.name, self.kind, self.attrs)
        out.deps = self.deps if deps is None else deps
        return out

    def invalidate(self) -> None:
        """Forget cached lookups after rows were added or renamed."""
        self._name_index = None

    # ------------------------------------------------------------ interning
    def s(self, text: str) -> int:
        return self.strings.add(text)

    def string(self, sid: int) -> str | None:
        return None if sid < 0 else self.strings[sid]

    def value(self, vid: int) -> Any:
        return None if vid < 0 else self.values[vid]

    def record(self, vid: int) -> Record:
        return EMPTY if vid < 0 else self.values[vid]

    def intern(self, value: Any) -> int:
        return -1 if value is None else self.values.add(value)

    def intern_record(self, rec: Record | dict | None) -> int:
        if not rec:
            return -1
        return self.values.add(rec if isinstance(rec, Record) else Record.of(rec))

    def pattern_id(self, pattern: Pattern | list) -> int:
        if type(pattern) is tuple:  # already ((step, num), ...) of ints, as the loaders make them
            return self.patterns.add(pattern)
        return self.patterns.add(tuple((int(s), int(n)) for s, n in pattern))

    # ------------------------------------------------------------ row constructors
    def add_set(self, name: str, kind: int, dtype: int, shape: tuple[int, ...], *, tclass: int = -1,
                is_block: bool = False, n_blocks: int = 1, extra: Record | None = None) -> int:
        return self.sets.append((self.s(name), kind, tclass, dtype, self.intern(tuple(shape)),
                                 int(is_block), n_blocks, self.intern_record(extra)))

    def add_memloc(self, set_id: int, name: str, mtype: int, *, addr: int = -1, pbytes: int = 0,
                   nparts: int = 1, base: int = 0, bank: int = -1, tensor_id: int = -1,
                   const_path: str | None = None, extra: Record | None = None) -> int:
        self.invalidate()
        return self.memlocs.append((set_id, self.s(name), mtype, bank, base, nparts, addr, pbytes,
                                    tensor_id, -1 if const_path is None else self.s(const_path),
                                    self.intern_record(extra)))

    def add_reg(self, name: str, extra: Record | None = None) -> int:
        self.invalidate()
        return self.regs.append((self.s(name), self.intern_record(extra)))

    def add_block(self, name: str, parent: int = -1, extra: Record | None = None) -> int:
        return self.blocks.append((self.s(name), parent, self.intern_record(extra)))

    def add_inst(self, opcode: int, engine: int, block: int, name: str | int, operands: list[tuple],
                 *, attrs: Record | int | None = None, pred: int = -1, iteration: int = -1) -> int:
        """Append an instruction and its operand rows (tuples in OPERAND_SCHEMA order)."""
        if len(operands) > MAX_OPERANDS:
            raise InputError(f"instruction {name!r} has {len(operands)} operands; at most {MAX_OPERANDS} fit")
        ops = self.operands.append_rows(operands)
        name_id = name if isinstance(name, int) else self.s(name)
        attr_id = attrs if isinstance(attrs, int) else self.intern_record(attrs)
        self._name_index = None
        return self.insts.append((opcode, engine, block, name_id, iteration, attr_id, ops,
                                  len(operands), pred))

    def add_dep(self, src: int, dst: int, kind: int = enums.Edge.Flow) -> None:
        self.deps.append((src, dst, kind))

    # ------------------------------------------------------------ names
    # Instruction names are labels: they may repeat (real dumps repeat a loop body's names in every
    # block that holds it) and may be absent (name id -1: KLR's loop record has none; inst_name gives "").
    def inst_name(self, i: int) -> str:
        n = self.insts.get("name", i)
        if n < 0:
            return ""
        base = self.strings[n]
        it = self.insts.get("iter", i)
        return base if it < 0 else clone_name(base, it)

    def inst_names(self) -> list[str]:
        names = self.insts["name"]
        iters = self.insts["iter"]
        strings = self.strings.items
        return ["" if n < 0 else strings[n] if it < 0 else clone_name(strings[n], it)
                for n, it in zip(names.tolist(), iters.tolist())]

    def inst_by_name(self, name: str) -> int:
        """The row of the one instruction called ``name`` (an error when none or several are)."""
        if self._name_index is None:
            index: dict[str, int] = {}
            for i, n in enumerate(self.inst_names()):
                index[n] = -2 if n in index else i
            self._name_index = index
        row = self._name_index.get(name, -1) if name else -1
        if row == -2:
            raise InputError(f"function {self.name}: several instructions are named {name!r}")
        if row < 0:
            raise InputError(f"function {self.name}: no instruction named {name!r}")
        return row

    def memloc_by_name(self, name: str) -> int:
        sid = self.strings.find(name)
        hits = np.nonzero(self.memlocs["name"] == sid)[0] if sid >= 0 else ()
        if len(hits) == 0:
            raise InputError(f"function {self.name}: no memory location named {name!r}")
        return int(hits[0])

    def set_by_name(self, name: str) -> int:
        sid = self.strings.find(name)
        hits = np.nonzero(self.sets["name"] == sid)[0] if sid >= 0 else ()
        if len(hits) == 0:
            raise InputError(f"function {self.name}: no memory location set named {name!r}")
        return int(hits[0])

    def reg_by_name(self, name: str) -> int:
        """Row of the register called ``name``, or -1."""
        sid = self.strings.find(name)
        if sid < 0:
            return -1
        hits = np.nonzero(self.regs["name"] == sid)[0]
        return int(hits[0]) if len(hits) else -1

    # ------------------------------------------------------------ structure
    @property
    def n_insts(self) -> int:
        return len(self.insts)

    def top_blocks(self) -> list[int]:
        return np.nonzero(self.blocks["parent"] < 0)[0].tolist()

    def body_blocks(self, loop_row: int) -> list[int]:
        return np.nonzero(self.blocks["parent"] == loop_row)[0].tolist()

    def block_rows(self) -> dict[int, np.ndarray]:
        """Instruction rows of every block, in program order."""
        blocks = self.insts["block"]
        order = np.argsort(blocks, kind="stable")
        bounds = np.searchsorted(blocks[order], np.arange(len(self.blocks) + 1))
        return {b: order[bounds[b]:bounds[b + 1]] for b in range(len(self.blocks))}

    def inst(self, i: int) -> "InstView":
        return InstView(self, i)

    def operand(self, j: int) -> "OperandView":
        return OperandView(self, j)

    def memloc(self, m: int) -> "MemlocView":
        return MemlocView(self, m)

    def loop_axis(self, loop_row: int) -> "LoopAxis":
        return LoopAxis.from_record(self.record(self.insts.get("attrs", loop_row)))

    # ------------------------------------------------------------ reordering
    def take_insts(self, rows: np.ndarray, deps: Table | None = None) -> "Function":
        """A copy holding only ``rows`` (in that order), with operands and edges remapped.

        Rows must keep program preorder; loop instructions whose row is
        dropped take their body blocks' parent link with them (set to -1).
        ``deps``: the copy's edges, already in the new numbering (a scheduler that has them sorted saves
        renumbering the old ones).
        """
        rows = np.asarray(rows, dtype=np.int64)
        out = self._copy_except("insts", "operands", "deps", "carried")  # taken below: copying them is waste
        old_n = len(self.insts)
        remap = np.full(old_n + 1, -1, dtype=np.int64)
        remap[rows] = np.arange(len(rows))
        nops = self.insts["nops"][rows].astype(np.int64)
        starts = self.insts["ops"][rows]
        new_starts = np.zeros(len(rows), dtype=np.int64)
        if len(rows):
            np.cumsum(nops[:-1], out=new_starts[1:])
        op_rows = concat_ranges(starts, nops)
        out.operands = self.operands.take(op_rows)
        insts = self.insts.take(rows)
        insts["ops"][:] = new_starts
        out.insts = insts
        out.deps = remap_edges(self.deps, remap) if deps is None else deps
        out.carried = remap_edges(self.carried, remap)
        parents = out.blocks["parent"]
        has_parent = parents >= 0
        parents[has_parent] = remap[parents[has_parent]]
        out._name_index = None
        return out


def remap_edges(edges: Table, remap: np.ndarray) -> Table:
    """``deps`` or ``carried`` with rows renumbered by ``remap`` (old row -> new row, -1: dropped);
    edges that lose an end are dropped."""
    src, dst = remap[edges["src"]], remap[edges["dst"]]
    keep = np.nonzero((src >= 0) & (dst >= 0))[0]
    out = edges.take(keep)
    out["src"][:] = src[keep]
    out["dst"][:] = dst[keep]
    return out


def concat_ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Concatenation of ``range(s, s + c)`` for each pair, vectorised."""
    counts = counts.astype(np.int64)
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    ends = np.cumsum(counts)
    offsets = np.repeat(starts.astype(np.int64) - (ends - counts), counts)
    return offsets + np.arange(total, dtype=np.int64)


def distinct(a: np.ndarray) -> np.ndarray:
    """The distinct values of an integer array, ascending, as ``np.unique(a)`` gives them; sort-based
    (numpy's hash-based unique is slow on millions of int64, and in numpy 2 its first plain call imports
    numpy.ma: 7 ms of a command that unrolls 1e5 instructions in 0.3 s)."""
    s = np.sort(a.reshape(-1), kind="stable")  # numpy's stable sort (radix/timsort) beats its quicksort here
    if len(s) < 2:
        return s
    keep = np.empty(len(s), dtype=bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


_ranges = concat_ranges  # the name passes outside tusk.ir still import


@dataclass(frozen=True)
class LoopAxis:
    """``for name in range(lb, ub, stride)``; ub is exclusive."""

    name: str
    lb: int
    ub: int
    stride: int = 1

    @property
    def trip_count(self) -> int:
        if self.stride > 0:
            return max(0, -(-(self.ub - self.lb) // self.stride))
        return max(0, -(-(self.lb - self.ub) // -self.stride))

    def values(self) -> range:
        return range(self.lb, self.ub, self.stride)

    @staticmethod
    def from_record(rec: Record) -> "LoopAxis":
        ax = rec.get("LoopAxis") or rec.get("DynamicForLoopAxis")
        if ax is None:
            raise InputError("loop instruction has no LoopAxis")
        return LoopAxis(ax["name"], _folded_bound(ax["lb"]), _folded_bound(ax["ub"]),
                        _folded_bound(ax.get("stride", 1)))


def _folded_bound(b: Any) -> Any:
    """A bound written as a constant expression (docs/bir-json.md allows ``{"kind": "AffExprKind", "c": 1,
    "terms": []}``) is its integer, so passes see the same axis as for the plain-integer spelling;
    register names and expressions over registers stay as written."""
    if isinstance(b, (dict, Record)):
        e = expr_from_json(dict(b))
        if e.is_const:
            return e.c
    return b


@dataclass(eq=False)
class Module:
    """A BIR module: functions plus module-level attributes and config.

    A module's identity is its content hash (:func:`tusk.ir.serial.content_hash`),
    taken over its canonical form, where pools are renumbered in a fixed
    order and unused pool entries dropped: interning order does not count.
    ``==`` and the store both use it.
    """

    functions: list[Function] = field(default_factory=list)
    arch: str = "gen3"
    version: int = 2
    attributes: Record = EMPTY
    artifact_dir: str = ""
    queues: tuple = ()
    extras: Record = EMPTY

    def copy(self) -> "Module":
        return Module([f.copy() for f in self.functions], self.arch, self.version, self.attributes,
                      self.artifact_dir, self.queues, self.extras)

    def function(self, name: str) -> Function:
        for f in self.functions:
            if f.name == name:
                return f
        raise InputError(f"module has no function named {name!r}")

    @property
    def neuron_core_id(self) -> int | None:
        v = self.attributes.get("neuron_core_id")
        return None if v is None else int(v)

    @property
    def instruction_limit(self) -> int | None:
        """The configurable post-unroll budget (the backend's M.config[112])."""
        v = self.attributes.get("max_instruction_limit")
        return None if v is None else int(v)

    @property
    def check_in_place(self) -> bool:
        return bool(self.attributes.get("check_in_place", False))

    def replaced(self, functions: list[Function] | None = None, artifact_dir: str | None = None) -> "Module":
        """This module with other functions or another artifact directory; everything else shared."""
        return Module(self.functions if functions is None else functions, self.arch, self.version, self.attributes,
                      self.artifact_dir if artifact_dir is None else artifact_dir, self.queues, self.extras)

    def with_attributes(self, **changes: Any) -> "Module":
        m = Module(self.functions, self.arch, self.version, self.attributes.with_(**changes),
                   self.artifact_dir, self.queues, self.extras)
        return m

    def n_insts(self) -> int:
        return sum(len(f.insts) for f in self.functions)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Module):
            return NotImplemented
        from tusk.ir.identity import content_hash

        return content_hash(self) == content_hash(other)

    __hash__ = None  # type: ignore[assignment]


# ---------------------------------------------------------------------- views


class InstView:
    """Read-only view of one instruction row, for pass code where speed does not matter."""

    __slots__ = ("fn", "i")

    def __init__(self, fn: Function, i: int):
        self.fn, self.i = fn, i

    def __repr__(self) -> str:
        return f"<{self.opname} {self.name}>"

    @property
    def opcode(self) -> int:
        return self.fn.insts.get("opcode", self.i)

    @property
    def opname(self) -> str:
        return enums.OPCODE_NAMES[self.opcode]

    @property
    def engine(self) -> int:
        return self.fn.insts.get("engine", self.i)

    @property
    def block(self) -> int:
        return self.fn.insts.get("block", self.i)

    @property
    def name(self) -> str:
        return self.fn.inst_name(self.i)

    @property
    def iteration(self) -> int:
        return self.fn.insts.get("iter", self.i)

    @property
    def attrs(self) -> Record:
        return self.fn.record(self.fn.insts.get("attrs", self.i))

    @property
    def predicates(self) -> tuple:
        return self.fn.value(self.fn.insts.get("pred", self.i)) or ()

    def operand_rows(self) -> range:
        start = self.fn.insts.get("ops", self.i)
        return range(start, start + self.fn.insts.get("nops", self.i))

    @property
    def operands(self) -> list["OperandView"]:
        return [OperandView(self.fn, j) for j in self.operand_rows()]

    def _role(self, role: int) -> list["OperandView"]:
        return [o for o in self.operands if o.role == role]

    @property
    def ins(self) -> list["OperandView"]:
        return self._role(enums.Role.IN)

    @property
    def outs(self) -> list["OperandView"]:
        return self._role(enums.Role.OUT)

    @property
    def indirection_ins(self) -> list["OperandView"]:
        return self._role(enums.Role.INDIRECT)

    @property
    def body_blocks(self) -> list[int]:
        return self.fn.body_blocks(self.i)

    @property
    def loop_axis(self) -> LoopAxis:
        return self.fn.loop_axis(self.i)


class OperandView:
    __slots__ = ("fn", "j")

    def __init__(self, fn: Function, j: int):
        self.fn, self.j = fn, j

    def __repr__(self) -> str:
        return f"<operand {enums.OPERAND_KIND_NAMES.get(self.kind)} {self.memloc_name or self.value}>"

    def _get(self, col: str) -> int:
        return self.fn.operands.get(col, self.j)

    role = property(lambda self: self._get("role"))
    kind = property(lambda self: self._get("kind"))
    dtype = property(lambda self: self._get("dtype"))
    offset = property(lambda self: self._get("offset"))

    @property
    def memloc(self) -> "MemlocView | None":
        m = self._get("memloc")
        return None if m < 0 else MemlocView(self.fn, m)

    @property
    def memloc_name(self) -> str | None:
        m = self._get("memloc")
        return None if m < 0 else self.fn.strings[self.fn.memlocs.get("name", m)]

    @property
    def pattern(self) -> Pattern:
        p = self._get("pattern")
        return () if p < 0 else self.fn.patterns[p]

    @property
    def sym(self) -> SymAddr | None:
        return self.fn.value(self._get("aux")) if self.kind == Kind.SYMBOLIC else None

    @property
    def value(self) -> Any:
        """The immediate value (int/float/tuple) or expression of an immediate operand."""
        if self.kind in (Kind.IMM, Kind.IMM_ARRAY):
            v = self.fn.value(self._get("aux"))
            return v.value if isinstance(v, ImmValue) else v
        if self.kind == Kind.SYMBOLIC_IMM:
            return self.fn.value(self._get("aux"))
        return None

    @property
    def reg(self) -> int:
        """Register row of a register operand (or register AP), else -1."""
        return self._get("aux") if self.kind in (Kind.REGISTER, Kind.REGISTER_AP) else -1

    @property
    def reg_name(self) -> str | None:
        r = self.reg
        return None if r < 0 else self.fn.strings[self.fn.regs.get("name", r)]

    @property
    def dyn(self) -> DynamicAPInfo | None:
        return self.fn.value(self._get("dyn"))

    @property
    def extra(self) -> Record:
        return self.fn.record(self._get("extra"))


class MemlocView:
    __slots__ = ("fn", "m")

    def __init__(self, fn: Function, m: int):
        self.fn, self.m = fn, m

    def __repr__(self) -> str:
        return f"<memloc {self.name} {enums.MEM_NAMES.get(self.mtype)} addr={self.addr}>"

    def _get(self, col: str) -> int:
        return self.fn.memlocs.get(col, self.m)

    set = property(lambda self: self._get("set"))
    mtype = property(lambda self: self._get("mtype"))
    bank = property(lambda self: self._get("bank"))
    base = property(lambda self: self._get("base"))
    nparts = property(lambda self: self._get("nparts"))
    addr = property(lambda self: self._get("addr"))
    pbytes = property(lambda self: self._get("pbytes"))
    tensor_id = property(lambda self: self._get("tensor_id"))

    @property
    def name(self) -> str:
        return self.fn.strings[self._get("name")]

    @property
    def set_name(self) -> str:
        return self.fn.strings[self.fn.sets.get("name", self.set)]

    @property
    def dtype(self) -> int:
        return self.fn.sets.get("dtype", self.set)

    @property
    def tensor_kind(self) -> int:
        return self.fn.sets.get("kind", self.set)

    @property
    def const_path(self) -> str | None:
        return self.fn.string(self._get("const_path"))

    @property
    def allocated(self) -> bool:
        return self.addr >= 0
