"""A timing model: how long a straight-line function takes on the engines.

Engines: PE, Activation, Pool, DVE (Vector), SP, and one lane per DMA queue
(a DMA-engine instruction goes to ``attrs["queue"]``, default ``"dma0"``).
Each lane issues in order.  An instruction starts when its lane is free and
every predecessor in ``fn.deps`` has finished (run ``build_fdeps`` first to
get edges from memory overlap); it then occupies its lane for its cost.
Instructions on no lane (engine Unassigned/ALL: NoOp, barriers) cost
nothing and only wait for their predecessors.

Costs come from the instruction's shape, with every constant in
:class:`CostTable` (cycles; plausible orders of magnitude for a
Trainium-class core, not measurements):

* DMA: ``dma_fixed + bytes / dma_bytes_per_cycle`` (bytes = the largest
  operand's element count x dtype size);
* Matmult on PE: ``pe_fixed + N / pe_columns_per_cycle``, N = the moving
  operand's free size (columns streamed through the 128x128 array);
* other compute (Activation, DVE, Pool, SP, other PE ops): ``fixed +
  free / elems_per_cycle`` where free = the largest operand's elements per
  partition (the 128 lanes work in parallel);
* register instructions (RegisterMove/Alu, TensorLoad/Save): ``register_op``.

Output: a :class:`Timeline` with the makespan, the busy time per lane, the
lower bound ``max(busy)`` and per-instruction start/end arrays.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tusk.ir.enums import DTYPE_SIZE_ARRAY, LOOP_OPCODES, Engine, Kind, Op
from tusk.ir.errors import TuskError
from tusk.ir.module import Function, Module, _ranges

BRANCH_OPCODES = frozenset({Op.CompareAndBranch, Op.UnconditionalBranch})
REGISTER_OPCODES = (Op.RegisterMove, Op.RegisterAlu, Op.TensorLoad, Op.TensorSave)
COMPUTE_ENGINES = ("PE", "Activation", "Pool", "DVE", "SP")
DEFAULT_QUEUE = "dma0"


@dataclass(frozen=True)
class CostTable:
    """Every constant of the cost model, in cycles (or units per cycle)."""

    dma_fixed: float = 1400.0           # descriptor processing + DRAM round trip (~1 us)
    dma_bytes_per_cycle: float = 32.0   # per queue
    pe_fixed: float = 64.0              # array fill / drain
    pe_columns_per_cycle: float = 1.0   # one moving column per cycle
    act_fixed: float = 224.0            # ACT has the largest fixed overhead (table lookups)
    act_elems_per_cycle: float = 1.0
    dve_fixed: float = 64.0
    dve_elems_per_cycle: float = 1.0
    pool_fixed: float = 64.0
    pool_elems_per_cycle: float = 1.0
    sp_fixed: float = 64.0
    sp_elems_per_cycle: float = 1.0
    register_op: float = 8.0

    def compute(self, engine: str) -> tuple[float, float]:
        """(fixed, elements per cycle) of a compute engine."""
        return {"PE": (self.pe_fixed, self.pe_columns_per_cycle), "Activation": (self.act_fixed, self.act_elems_per_cycle),
                "DVE": (self.dve_fixed, self.dve_elems_per_cycle), "Pool": (self.pool_fixed, self.pool_elems_per_cycle),
                "SP": (self.sp_fixed, self.sp_elems_per_cycle)}[engine]


DEFAULT_COSTS = CostTable()


@dataclass
class Timeline:
    makespan: float
    busy: dict[str, float]           # lane name -> busy cycles
    lower_bound: float               # max(busy): no schedule on these lanes can be shorter
    start: np.ndarray                # per instruction (float64 cycles)
    end: np.ndarray
    lanes: tuple[str, ...] = ()      # lane names; ``lane[i]`` indexes them (-1: no lane)
    lane: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    cost: np.ndarray = field(default_factory=lambda: np.zeros(0))

    @property
    def efficiency(self) -> float:
        """lower_bound / makespan (1.0 = the busiest lane never waits)."""
        return self.lower_bound / self.makespan if self.makespan else 1.0


def _entry(x: Function | Module) -> Function:
    if isinstance(x, Function):
        return x
    for fn in x.functions:
        if fn.name == "main":
            return fn
    if not x.functions:
        raise TuskError("module has no functions")
    return x.functions[0]


def operand_shapes(fn: Function) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per instruction: largest bytes, largest free size (elements per partition) of its AP operands,
    and the free size of operand ``ops+1`` (a matmul's moving operand); plus the operand owner rows."""
    n = len(fn.insts)
    ins, ops = fn.insts, fn.operands
    nops = ins["nops"].astype(np.int64)
    rows = _ranges(ins["ops"], nops)
    owner = np.repeat(np.arange(n, dtype=np.int64), nops)
    pats = fn.patterns.items
    p_elems = np.array([int(np.prod([num for _, num in p], dtype=np.int64)) if p else 1 for p in pats] or [0],
                       dtype=np.float64)
    p_outer = np.array([max(p[0][1], 1) if p else 1 for p in pats] or [1], dtype=np.float64)
    kind = ops["kind"][rows]
    ap = np.isin(kind, (Kind.PHYSICAL, Kind.SYMBOLIC, Kind.REGISTER_AP, Kind.SYMBOLIC_DIMS))
    pat = np.where(ap, ops["pattern"][rows], 0)
    elems = np.where(ap, p_elems[pat], 0.0)
    free = np.where(ap, elems / p_outer[pat], 0.0)
    nbytes = elems * DTYPE_SIZE_ARRAY[ops["dtype"][rows]]
    max_bytes = np.zeros(n)
    max_free = np.zeros(n)
    np.maximum.at(max_bytes, owner, nbytes)
    np.maximum.at(max_free, owner, free)
    second = np.zeros(n)
    has2 = nops >= 2
    idx = np.cumsum(nops) - nops + 1  # position of each instruction's second operand in ``rows``
    second[has2] = free[idx[has2]]
    return max_bytes, max_free, second, owner


def instruction_costs(fn: Function, costs: CostTable = DEFAULT_COSTS) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    """(cost per instruction, lane per instruction, lane names)."""
    n = len(fn.insts)
    engine = fn.insts["engine"].astype(np.int64)
    opcode = fn.insts["opcode"].astype(np.int64)
    max_bytes, max_free, second, _ = operand_shapes(fn)
    lanes = list(COMPUTE_ENGINES)
    lane = np.full(n, -1, dtype=np.int64)
    cost = np.zeros(n)
    for k, name in enumerate(COMPUTE_ENGINES):
        sel = engine == getattr(Engine, name)
        lane[sel] = k
        fixed, rate = costs.compute(name)
        cost[sel] = fixed + max_free[sel] / rate
    mm = (opcode == Op.Matmult) & (engine == Engine.PE)
    cost[mm] = costs.pe_fixed + second[mm] / costs.pe_columns_per_cycle
    dma = np.flatnonzero(engine == Engine.DMA)
    if len(dma):
        attr = fn.insts["attrs"][dma].astype(np.int64) + 1  # +1: no attributes (-1) becomes id 0
        present = np.zeros(int(attr.max()) + 1, dtype=bool)
        present[attr] = True
        qlane = np.full(len(present), -1, dtype=np.int64)
        for a in np.flatnonzero(present).tolist():
            q = (fn.record(a - 1).get("queue") if a > 0 else None) or DEFAULT_QUEUE
            q = q if isinstance(q, str) else str(q)
            if q not in lanes:
                lanes.append(q)
            qlane[a] = lanes.index(q)
        lane[dma] = qlane[attr]
        cost[dma] = costs.dma_fixed + max_bytes[dma] / costs.dma_bytes_per_cycle
    reg = np.isin(opcode, REGISTER_OPCODES)
    cost[reg] = costs.register_op
    return cost, lane, tuple(lanes)


def simulate(fn_or_module: Function | Module, cost_table: CostTable = DEFAULT_COSTS) -> Timeline:
    """Schedule a straight-line function (a module's entry function) on the engines."""
    fn = _entry(fn_or_module)
    opc = fn.insts["opcode"]
    bad = np.isin(opc, list(LOOP_OPCODES | BRANCH_OPCODES | {Op.NKIKernel}))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise TuskError(f"timing: function {fn.name} is not straight-line: instruction {fn.inst_name(i)} "
                        f"(unroll loops and inline kernel calls first)")
    n = len(fn.insts)
    cost, lane, lanes = instruction_costs(fn, cost_table)
    d = fn.deps
    src, dst = d["src"].astype(np.int64), d["dst"].astype(np.int64)
    if len(src) and ((src >= dst).any() or (dst >= n).any() or (src < 0).any()):
        raise TuskError(f"timing: function {fn.name} has dependencies against program order")
    order = np.argsort(dst, kind="stable")
    src_sorted = src[order].tolist()
    ptr = np.searchsorted(dst[order], np.arange(n + 1)).tolist()
    cost_l, lane_l = cost.tolist(), lane.tolist()
    free = [0.0] * len(lanes)
    end = [0.0] * n
    start = [0.0] * n
    for i in range(n):
        ln = lane_l[i]
        s = free[ln] if ln >= 0 else 0.0
        a, b = ptr[i], ptr[i + 1]
        if a != b:
            for p in src_sorted[a:b]:
                e = end[p]
                if e > s:
                    s = e
        f = s + cost_l[i]
        start[i] = s
        end[i] = f
        if ln >= 0:
            free[ln] = f
    start_a, end_a = np.array(start), np.array(end)
    busy = {name: float(cost[lane == k].sum()) for k, name in enumerate(lanes)}
    busy = {k: v for k, v in busy.items() if v > 0 or k in COMPUTE_ENGINES}
    makespan = float(end_a.max()) if n else 0.0
    return Timeline(makespan, busy, max(busy.values(), default=0.0), start_a, end_a, lanes, lane, cost)


