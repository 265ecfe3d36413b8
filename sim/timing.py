"""A timing model: how long a straight-line function takes on one NeuronCore.

The model, its constants and their sources are described in docs/timing.md.
In short:

* **Compute engines** (PE, Activation, Pool, DVE, SP) issue in order, one
  instruction at a time; an instruction costs ``fixed + free / rate``
  (a matmul: ``fixed + moving columns``).
* **DMA**.  A DMA instruction is *triggered* by an engine (its own engine
  when that is SP, Activation or Pool, else ``CostTable.dma_trigger_engine``,
  SP by default), which spends ``dma_trigger`` cycles in its in-order
  stream.  The transfer then goes to a hardware queue: the one named by
  ``attrs["queue"]``, else the queue of the triggering engine that frees a
  slot first (``dma_queues_per_engine`` queues per engine).  A queue issues
  its transfers in order and keeps up to ``dma_inflight`` of them in
  flight.  A transfer waits ``dma_fixed`` cycles (descriptor setup and
  semaphore-to-start latency), then moves its data: its work is
  ``descriptors * dma_descriptor_cycles + bytes / dma_engine_bytes_per_cycle``
  engine-cycles, spread over up to 16 DMA engines (the split factor
  :func:`tusk.ir.arch.get_largest_factor_with_threshold` of its descriptor
  count).  All transfers share the DMA engines, and those touching DRAM
  share one DRAM bandwidth: both are capacities per time bucket that
  transfers book in program order (a fluid approximation of bandwidth
  sharing).
* **Dependences**: an instruction starts when every predecessor in
  ``fn.deps`` has finished, plus ``sync_latency`` when the predecessor ran
  on another engine or queue (semaphore hand-off).
* **Kernel calls** (NKIKernel) run the callee's timeline as a barrier.

Output: a :class:`Timeline` with the makespan, busy time per lane, the
terms of the lower bound and per-instruction start/end arrays.  ``lower_bound``
(:mod:`tusk.sim.bound`) is a property of the program, not of this order: no
order of the instructions that respects ``fn.deps`` is shorter on this machine
model.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np

from tusk.ir.arch import HWDGE_DESCRIPTORS, MAX_SPLIT_FACTOR, SWDGE_DESCRIPTORS, get_largest_factor_with_threshold
from tusk.ir.columns import one_of
from tusk.ir.enums import DTYPE_SIZE_ARRAY, LOOP_OPCODES, Engine, Kind, Mem, Op
from tusk.ir.errors import InputError, PassError, TuskError, UsageError
from tusk.ir.module import Function, Module, _ranges
from tusk.ir.verify_isa import TRANSPOSE_AXES
from tusk.sim.bound import CHAIN, lower_bound_terms

BRANCH_OPCODES = frozenset({Op.CompareAndBranch, Op.UnconditionalBranch})
REGISTER_OPCODES = (Op.RegisterMove, Op.RegisterAlu, Op.TensorLoad, Op.TensorSave)
COMPUTE_ENGINES = ("PE", "Activation", "Pool", "DVE", "SP")
# data movement instructions; on the DMA "engine" or on an engine that triggers DMAs they are transfers
DMA_OPCODES = (Op.DMACopy, Op.Load, Op.Save, 18, Op.DMABlock, 43, 45)  # + DMA, IndirectLoad, IndirectSave
TRIGGER_ENGINES = ("SP", "Activation", "Pool")
GHZ = 1.4  # cycles per ns (assumption: docs/timing.md)


@dataclass(frozen=True)
class CostTable:
    """Every constant of the model, in cycles (or units per cycle); sources in docs/timing.md."""

    # compute engines (assumptions)
    pe_fixed: float = 64.0
    pe_columns_per_cycle: float = 1.0
    act_fixed: float = 224.0
    act_elems_per_cycle: float = 1.0
    dve_fixed: float = 64.0
    dve_elems_per_cycle: float = 1.0
    pool_fixed: float = 64.0
    pool_elems_per_cycle: float = 1.0
    sp_fixed: float = 64.0
    sp_elems_per_cycle: float = 1.0
    register_op: float = 8.0
    sync_latency: float = 64.0                 # semaphore hand-off between engines
    # DMA
    dma_fixed: float = 1300 * GHZ              # ~1300 ns descriptor setup + semaphore-to-start
    dma_engines: int = 16                      # DMA engines per NeuronCore
    dma_engine_bytes_per_cycle: float = 27.2 / GHZ     # 27.2 GB/s per DMA engine (NeuronCore-v2/v3)
    dram_bytes_per_cycle: float = 2900 / 8 / GHZ       # Trainium2: 2.9 TB/s HBM shared by 8 NeuronCores
    dma_descriptor_cycles: float = 32.0        # per descriptor, on a DMA engine
    dma_trigger: float = 64.0                  # the trigger instruction on the triggering engine
    dma_trigger_engine: str = "SP"             # who triggers DMAs placed on the DMA "engine"
    dma_queues_per_engine: int = 2
    dma_inflight: int = 4                      # transfers in flight per queue
    bucket: float = 128.0                      # granularity of the bandwidth calendar

    def compute(self, engine: str) -> tuple[float, float]:
        """(fixed, elements per cycle) of a compute engine."""
        return {"PE": (self.pe_fixed, self.pe_columns_per_cycle), "Activation": (self.act_fixed, self.act_elems_per_cycle),
                "DVE": (self.dve_fixed, self.dve_elems_per_cycle), "Pool": (self.pool_fixed, self.pool_elems_per_cycle),
                "SP": (self.sp_fixed, self.sp_elems_per_cycle)}[engine]


DEFAULT_COSTS = CostTable()


@dataclass
class Timeline:
    makespan: float
    busy: dict[str, float]           # lane name -> busy cycles (a queue: summed transfer time / in-flight slots)
    lower_bound: float               # max of ``bounds``: no legal order of the program is shorter
    start: np.ndarray                # per instruction (float64 cycles); a DMA: its trigger
    end: np.ndarray                  # a DMA: the end of its transfer
    lanes: tuple[str, ...] = ()      # lane names; ``lane[i]`` indexes them (-1: no lane)
    lane: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    cost: np.ndarray = field(default_factory=lambda: np.zeros(0))
    bounds: dict[str, float] = field(default_factory=dict)  # the lower bound's terms (sim/bound.py), cycles
    # the number ``lower_bound`` used to be: max of this order's busy times (queues: contention included)
    # and the bandwidth totals; it depends on the order, so it is no bound, only a measure of this run
    busy_bound: float = 0.0
    # cycles each shared DMA resource needs at full capacity ("DMA engines": work / engines, "DRAM": bytes /
    # bandwidth): over the makespan, their utilisation
    demand: dict[str, float] = field(default_factory=dict)
    calls: dict[int, Timeline] = field(default_factory=dict)  # kernel-call row -> the callee's timeline
    plan: Plan | None = None         # the per-instruction inputs it ran on (drawing DMAs needs them again)

    @property
    def efficiency(self) -> float:
        """lower_bound / makespan (1.0 = the bottleneck never waits)."""
        return self.lower_bound / self.makespan if self.makespan else 1.0

    @property
    def binding(self) -> str:
        """The term of the lower bound that is largest: the resource that limits this program."""
        return max(self.bounds, key=self.bounds.get) if self.bounds else CHAIN


def entry(x: Function | Module) -> Function:
    """A function, or a module's entry function ("main", else the first)."""
    if isinstance(x, Function):
        return x
    for fn in x.functions:
        if fn.name == "main":
            return fn
    if not x.functions:
        raise InputError("module has no functions")
    return x.functions[0]


# =========================================================================== shapes


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
    ap = one_of(kind, (Kind.PHYSICAL, Kind.SYMBOLIC, Kind.REGISTER_AP, Kind.SYMBOLIC_DIMS))
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


def descriptor_count(pattern, onchip: bool, pitch: int) -> int:
    """DMA descriptors for one side of a transfer: one per contiguous run of elements.

    Runs grow from the innermost dimension while the next dimension continues
    them (its step equals the run length); on chip a run never crosses a
    partition (a dimension whose step is a multiple of the partition pitch).
    """
    dims = [(int(s), int(n)) for s, n in pattern if n > 1]
    total = 1
    for _, n in dims:
        total *= n
    run = 1
    for s, n in reversed(dims):
        if s != run or (onchip and pitch > 0 and s >= pitch and s % pitch == 0):
            break
        run *= n
    return max(total // run, 1)


def _descriptors(fn: Function, owner: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Per instruction: the larger descriptor count of its AP operands (DMA source or destination)."""
    ops, ml = fn.operands, fn.memlocs
    n = len(fn.insts)
    kind = ops["kind"][rows]
    ap = np.flatnonzero(one_of(kind, (Kind.PHYSICAL, Kind.SYMBOLIC, Kind.REGISTER_AP)))
    out = np.ones(n, dtype=np.int64)
    if not len(ap):
        return out
    pat = ops["pattern"][rows[ap]].astype(np.int64)
    m = ops["memloc"][rows[ap]].astype(np.int64)
    mtype = np.where(m >= 0, ml["mtype"][np.maximum(m, 0)], Mem.DRAM) if len(ml) else np.full(len(m), Mem.DRAM)
    onchip = one_of(mtype, (Mem.SB, Mem.PSUM))
    size = DTYPE_SIZE_ARRAY[ops["dtype"][rows[ap]]]
    pbytes = ml["pbytes"][np.maximum(m, 0)] if len(ml) else np.zeros(len(m), np.int64)
    pitch = np.where(onchip, pbytes // np.maximum(size, 1), 0)
    # one count per distinct (pattern, on chip, pitch): a function has few of them
    span = int(pitch.max()) + 1
    keys = ((pat + 1) * 2 + onchip) * span + pitch
    distinct, inv = np.unique(keys, return_inverse=True)
    counts = np.array([descriptor_count(fn.patterns[p] if p >= 0 else (), bool(oc), pt)
                       for p, oc, pt in zip((distinct // span // 2 - 1).tolist(), (distinct // span % 2).tolist(),
                                            (distinct % span).tolist())], dtype=np.int64)
    vals = counts[inv.reshape(-1)]
    who = owner[ap]  # operands are stored instruction by instruction: one max per run of equal owners
    first = np.flatnonzero(np.concatenate([[True], who[1:] != who[:-1]]))
    out[who[first]] = np.maximum(out[who[first]], np.maximum.reduceat(vals, first))
    return out


def _transpose_descriptors(fn: Function, dma: np.ndarray) -> np.ndarray:
    """A DMA transpose (DMACopy ``mode`` Transpose) that moves the innermost axis writes one element per
    descriptor (no run survives it); one that keeps the innermost axis moves runs of it."""
    out = np.ones(len(dma), dtype=np.int64)
    attrs = fn.insts["attrs"]
    for k, i in enumerate(dma.tolist()):
        a = int(attrs[i])
        rec = fn.record(a) if a >= 0 else {}
        if rec.get("mode") != "Transpose":
            continue
        src = fn.inst(i).ins
        pat = src[0].pattern if src else ()
        elems = int(np.prod([n for _, n in pat], dtype=np.int64)) if pat else 1
        keeps_inner = TRANSPOSE_AXES.get(rec.get("transpose_op", "None"), (0, 1, 2, 3))[-1] == 3
        out[k] = elems // max(pat[-1][1], 1) if keeps_inner and pat else elems
    return out


@dataclass
class Plan:
    """Per-instruction inputs of the simulation (see :func:`plan`)."""

    cost: np.ndarray          # compute lane cost; a DMA: its trigger cost
    lane: np.ndarray          # compute / trigger lane (-1: none)
    lanes: list[str]
    is_dma: np.ndarray
    queue: np.ndarray         # named queue lane (-1: the trigger engine's queues)
    latency: np.ndarray       # DMA: fixed latency (more for descriptor-limit splits)
    work: np.ndarray          # DMA: engine-cycles of data movement
    dram: np.ndarray          # DMA: bytes through DRAM (0: on-chip only)
    rate: np.ndarray          # DMA: engines it is spread over
    engine_queues: dict[int, list[int]]  # trigger lane -> its hardware queue lanes


def plan(fn: Function, costs: CostTable = DEFAULT_COSTS) -> Plan:
    """Costs, lanes and DMA parameters of every instruction of ``fn``."""
    n = len(fn.insts)
    engine = fn.insts["engine"].astype(np.int64)
    opcode = fn.insts["opcode"].astype(np.int64)
    max_bytes, max_free, second, owner = operand_shapes(fn)
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
    reg = np.isin(opcode, REGISTER_OPCODES)
    cost[reg] = costs.register_op
    trig = np.isin(engine, [getattr(Engine, e) for e in TRIGGER_ENGINES])
    is_dma = (engine == Engine.DMA) | (np.isin(opcode, DMA_OPCODES) & trig)
    queue = np.full(n, -1, dtype=np.int64)
    latency = np.zeros(n)
    work = np.zeros(n)
    dram = np.zeros(n)
    rate = np.ones(n)
    dma = np.flatnonzero(is_dma)
    if costs.dma_trigger_engine not in TRIGGER_ENGINES:
        raise UsageError(f"timing: DMAs are triggered by SP, Activation or Pool, not {costs.dma_trigger_engine!r}")
    engine_queues: dict[int, list[int]] = {}
    for name in TRIGGER_ENGINES:
        k = COMPUTE_ENGINES.index(name)
        qs = []
        for q in range(max(costs.dma_queues_per_engine, 1)):
            qs.append(len(lanes))
            lanes.append(f"{name}.q{q}")
        engine_queues[k] = qs
    if len(dma):
        default = COMPUTE_ENGINES.index(costs.dma_trigger_engine)
        lane[dma] = np.where(engine[dma] == Engine.DMA, default, lane[dma])
        cost[dma] = costs.dma_trigger
        names: dict[object, int] = {}
        attr = fn.insts["attrs"][dma].astype(np.int64)
        for a in np.unique(attr).tolist():
            q = fn.record(a).get("queue") if a >= 0 else None
            if isinstance(q, str) and q:
                if q not in names:
                    names[q] = len(lanes)
                    lanes.append(q)
                queue[dma[attr == a]] = names[q]
        rows = _ranges(fn.insts["ops"], fn.insts["nops"].astype(np.int64))
        desc = np.maximum(_descriptors(fn, owner, rows)[dma], _transpose_descriptors(fn, dma))
        ops = fn.operands
        kind = ops["kind"][rows]
        m = ops["memloc"][rows].astype(np.int64)
        touches = np.zeros(n, dtype=bool)
        ap = np.isin(kind, (Kind.PHYSICAL, Kind.SYMBOLIC, Kind.REGISTER_AP)) & (m >= 0)
        if ap.any():
            touches[owner[ap][fn.memlocs["mtype"][m[ap]] == Mem.DRAM]] = True
        nbytes = max_bytes[dma]
        swdge = lane[dma] == COMPUTE_ENGINES.index("Pool")  # software DGE: the GpSimd engine makes descriptors
        limit = np.where(swdge, SWDGE_DESCRIPTORS, HWDGE_DESCRIPTORS)
        chunks = np.maximum(np.ceil(desc / limit), 1)
        latency[dma] = costs.dma_fixed * chunks
        work[dma] = desc * costs.dma_descriptor_cycles + nbytes / costs.dma_engine_bytes_per_cycle
        dram[dma] = np.where(touches[dma], nbytes, 0.0)
        distinct, inv = np.unique(desc, return_inverse=True)  # few distinct descriptor counts
        fan = np.array([get_largest_factor_with_threshold(int(d), min(MAX_SPLIT_FACTOR, costs.dma_engines))
                        for d in distinct.tolist()], dtype=np.float64)
        rate[dma] = fan[inv.reshape(-1)]
    return Plan(cost, lane, lanes, is_dma, queue, latency, work, dram, rate, engine_queues)


def instruction_costs(fn: Function, costs: CostTable = DEFAULT_COSTS) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    """(cost per instruction, lane per instruction, lane names): a DMA's cost is its transfer
    in isolation (fixed latency + data at its own rate), its lane the triggering engine."""
    p = plan(fn, costs)
    cost = p.cost.copy()
    d = p.is_dma
    cost[d] = p.latency[d] + p.work[d] / p.rate[d]
    return cost, p.lane, tuple(p.lanes)


# =========================================================================== bandwidth calendar


# buckets one DMA may span (512M cycles, a transfer of many GB): past it the calendar's walk would take hours
MAX_DMA_BUCKETS = 1 << 22


class Calendar:
    """Capacities per time bucket of the shared DMA resources: engine-cycles of the DMA engines
    and DRAM bytes.  A transfer books them bucket by bucket at up to its own rate.

    Most buckets a transfer walks through are already full (the engines are the bottleneck of a
    DMA-bound kernel): a bucket whose engine capacity is exactly 0 and whose DRAM capacity is not
    negative can never give anything again (booking it changes nothing), so ``skip`` jumps over runs
    of them (union-find with path compression, absolute bucket numbers).  The arithmetic on every
    bucket that is visited is unchanged: the timeline is the same to the last bit.
    """

    def __init__(self, costs: CostTable):
        self.B = float(costs.bucket)
        self.pool_cap = costs.dma_engines * self.B
        self.dram_cap = costs.dram_bytes_per_cycle * self.B
        self.base = 0          # bucket index of pool[0]
        self.pool: list[float] = []
        self.dram: list[float] = []
        self.skip: list[int] = []  # absolute number of the first bucket at or after this one that may give

    def _grow(self, k: int) -> None:
        extra = k + 1 - len(self.pool)
        if extra > 0:
            extra = max(extra, 4096)
            first = self.base + len(self.pool)
            self.pool.extend([self.pool_cap] * extra)
            self.dram.extend([self.dram_cap] * extra)
            self.skip.extend(range(first, first + extra))

    def forget_before(self, t: float) -> None:
        """No booking will start before ``t``: drop older buckets (bounded memory)."""
        cut = int(t // self.B) - self.base
        if cut > 4096:
            del self.pool[:cut]
            del self.dram[:cut]
            del self.skip[:cut]
            self.base += cut

    def _live(self, k: int) -> int:
        """The first bucket at or after ``k`` (relative) that is not exhausted for good."""
        skip, base, n = self.skip, self.base, len(self.skip)
        r = k
        while r < n:
            j = skip[r] - base
            if j == r:
                break
            r = j
        while k < n and k != r:  # path compression
            j = skip[k] - base
            skip[k] = r + base
            k = j
        return r

    def book(self, t: float, work: float, nbytes: float, rate: float) -> float:
        """Book ``work`` engine-cycles (``nbytes`` of them through DRAM) from time ``t``; return the end."""
        if work <= 0:
            return t
        B = self.B
        base = self.base
        b = max(int(t // B), base)
        ratio = nbytes / work
        remaining = work
        pool, dram, skip = self.pool, self.dram, self.skip
        n = len(pool)
        k = b - base
        lo = t if t > b * B else b * B
        while True:
            if k >= n:
                self._grow(k)
                n = len(pool)
            pk = pool[k]
            if pk == 0.0 and skip[k] != k + base:  # exhausted buckets give nothing and are left as they are
                r = skip[k] - base
                k = r if r >= n or skip[r] == r + base else self._live(k)  # compressed: mostly one hop
                lo = (k + base) * B
                continue
            can = rate * ((k + base + 1) * B - lo)
            if pk < can:
                can = pk
            if ratio > 0.0:
                dk = dram[k]
                if dk < can * ratio:
                    can = dk / ratio
                if can >= remaining:
                    pool[k] = pk - remaining
                    dram[k] = dk - remaining * ratio
                    return lo + remaining / rate
                left = pool[k] = pk - can
                dk = dram[k] = dk - can * ratio
                if left == 0.0 and dk >= 0.0:
                    skip[k] = k + base + 1
            else:
                if can >= remaining:
                    pool[k] = pk - remaining
                    return lo + remaining / rate
                left = pool[k] = pk - can
                if left == 0.0 and dram[k] >= 0.0:
                    skip[k] = k + base + 1
            remaining -= can
            k += 1
            lo = (k + base) * B


# =========================================================================== simulation


def simulate(fn_or_module: Function | Module, cost_table: CostTable = DEFAULT_COSTS, *,
             module: Module | None = None) -> Timeline:
    """Run a straight-line function (a module's entry function) on the machine model."""
    if isinstance(fn_or_module, Module):
        module = fn_or_module
    fn = entry(fn_or_module)
    src, dst = _straight_line_edges(fn)
    n = len(fn.insts)
    p = plan(fn, cost_table)
    span = p.work / (p.rate * cost_table.bucket)
    if n and span.max() > MAX_DMA_BUCKETS:  # the calendar books bucket by bucket: a hostile size takes hours
        i = int(np.argmax(span))
        raise PassError(f"timing: instruction {fn.inst_name(i)} of {fn.name} moves {int(p.dram[i] or 0):,} bytes "
                        f"of DRAM in {p.work[i]:,.0f} engine cycles, longer than the timing model books "
                        f"({MAX_DMA_BUCKETS:,} calendar buckets of {cost_table.bucket:g} cycles)")
    call_tl = _callee_timelines(fn, module, cost_table)
    call_cost = {i: tl.makespan for i, tl in call_tl.items()}
    order = np.argsort(dst, kind="stable")
    src_sorted = src[order].tolist()
    ptr = np.searchsorted(dst[order], np.arange(n + 1)).tolist()

    lanes = p.lanes
    nl = len(lanes)
    cost_l, lane_l = p.cost.tolist(), p.lane.tolist()
    dma_l, queue_l = p.is_dma.tolist(), p.queue.tolist()
    lat_l, work_l, dram_l, rate_l = p.latency.tolist(), p.work.tolist(), p.dram.tolist(), p.rate.tolist()
    K = max(int(cost_table.dma_inflight), 1)
    sync = float(cost_table.sync_latency)
    free = [0.0] * nl
    inflight: list[list[float]] = [[] for _ in range(nl)]   # per queue: heap of in-flight transfer ends
    last_issue = [0.0] * nl
    qbusy = [0.0] * nl
    where = [-1] * n          # engine/queue lane an instruction finished on (for sync latency)
    start = [0.0] * n
    end = [0.0] * n
    cal = Calendar(cost_table)
    barrier = 0.0
    horizon = 0.0
    trig_lanes = sorted({lane_l[i] for i in range(n) if dma_l[i]})
    engine_queues, book, has_calls = p.engine_queues, cal.book, bool(call_cost)
    # ``x if x > y else y`` is max(y, x) for these floats (no NaN), without a builtin call per instruction;
    # the loop is one function on purpose: a call per DMA for its queue choice cost 1-3 % of the model
    for i in range(n):
        a, b = ptr[i], ptr[i + 1]
        ready = barrier
        me = lane_l[i]
        for q in src_sorted[a:b]:
            e = end[q]
            w = where[q]
            if w >= 0 and me >= 0 and w != me:  # a semaphore hand-off between engines / queues
                e += sync
            if e > ready:
                ready = e
        if has_calls and i in call_cost:
            s = horizon if horizon > ready else ready
            f = s + call_cost[i]
            start[i], end[i] = s, f
            barrier = horizon = f
            continue
        if not dma_l[i]:
            if me < 0:
                s = ready
            else:
                fm = free[me]
                s = fm if fm > ready else ready
            f = s + cost_l[i]
            start[i], end[i], where[i] = s, f, me
            if me >= 0:
                free[me] = f
            if f > horizon:
                horizon = f
            continue
        # ---- DMA: trigger, queue, latency, data
        fm = free[me]
        ts = fm if fm > ready else ready
        te = ts + cost_l[i]
        free[me] = te
        qi = queue_l[i]
        qs = (qi,) if qi >= 0 else engine_queues[me]
        best, best_t = -1, 0.0
        for q in qs:
            h = inflight[q]
            while h and h[0] <= te:
                heapq.heappop(h)
            li = last_issue[q]
            t = li if li > te else te
            if len(h) >= K and h[0] > t:
                t = h[0]
            if best < 0 or t < best_t:
                best, best_t = q, t
        q = best
        h = inflight[q]
        while h and h[0] <= best_t:
            heapq.heappop(h)
        last_issue[q] = best_t
        f = book(best_t + lat_l[i], work_l[i], dram_l[i], rate_l[i])
        heapq.heappush(h, f)
        qbusy[q] += f - best_t
        start[i], end[i], where[i] = ts, f, q
        if f > horizon:
            horizon = f
        if trig_lanes and (i & 1023) == 0:
            cal.forget_before(min(free[t] for t in trig_lanes))
    return _timeline(p, start, end, qbusy, K, cost_table, call_tl, src, dst)


def _straight_line_edges(fn: Function) -> tuple[np.ndarray, np.ndarray]:
    """``fn``'s dependence edges (src, dst as int64); an error for a loop or branch, or an edge against
    program order (the model runs the rows in order)."""
    bad = np.isin(fn.insts["opcode"], list(LOOP_OPCODES | BRANCH_OPCODES))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise PassError(f"timing: function {fn.name} is not straight-line: instruction {fn.inst_name(i)} "
                        f"(unroll loops first)")
    n = len(fn.insts)
    src, dst = fn.deps["src"].astype(np.int64), fn.deps["dst"].astype(np.int64)
    if len(src) and ((src >= dst).any() or (dst >= n).any() or (src < 0).any()):
        raise InputError(f"timing: function {fn.name} has dependencies against program order")
    return src, dst


def _callee_timelines(fn: Function, module: Module | None, cost_table: CostTable) -> dict[int, Timeline]:
    """Kernel-call row of ``fn`` -> the callee's timeline (a kernel called again is simulated once)."""
    out: dict[int, Timeline] = {}
    by_callee: dict[str, Timeline] = {}
    for i in np.flatnonzero(fn.insts["opcode"] == Op.NKIKernel).tolist():
        callee = fn.inst(i).attrs.get("func")
        if module is None or not isinstance(callee, str):
            raise PassError(f"timing: function {fn.name} calls a kernel ({fn.inst_name(i)}); simulate the module")
        inner = by_callee.get(callee)
        if inner is None:
            inner = by_callee[callee] = simulate(module.function(callee), cost_table, module=module)
        out[i] = inner
    return out


def _timeline(p: Plan, start: list[float], end: list[float], qbusy: list[float], K: int, cost_table: CostTable,
              call_tl: dict[int, Timeline], src: np.ndarray, dst: np.ndarray) -> Timeline:
    """The :class:`Timeline` of a run: per-instruction times, busy time per lane, the demand on the shared
    DMA resources and the lower bound's terms."""
    n, lanes = len(start), p.lanes
    start_a, end_a = np.array(start), np.array(end)
    busy = {}
    for k, name in enumerate(lanes):
        if k < len(COMPUTE_ENGINES):
            sel = (p.lane == k)
            v = float(p.cost[sel].sum())
            if v > 0 or name in COMPUTE_ENGINES:
                busy[name] = v
        elif qbusy[k] > 0:
            busy[name] = qbusy[k] / K
    demand = {"DMA engines": float(p.work.sum() / cost_table.dma_engines),
              "DRAM": float(p.dram.sum() / cost_table.dram_bytes_per_cycle)}
    totals = dict(demand)
    totals["longest DMA"] = float(np.where(p.is_dma, p.latency + p.work / p.rate, 0.0).max()) if n else 0.0
    if call_tl:
        totals["calls"] = float(sum(tl.makespan for tl in call_tl.values()))
    makespan = float(end_a.max()) if n else 0.0
    busy_bound = max(list(busy.values()) + list(totals.values()) + [0.0])
    bounds = lower_bound_terms(p, src, dst, cost_table, {i: tl.lower_bound for i, tl in call_tl.items()})
    lower = max(bounds.values())
    return Timeline(makespan, busy, lower, start_a, end_a, tuple(lanes), p.lane, p.cost, bounds, busy_bound,
                    demand, call_tl, p)


def makespan(module: Module, costs: CostTable = DEFAULT_COSTS) -> float | None:
    """The module's makespan on the model, or None when it cannot be timed (loops kept, no functions)."""
    try:
        return simulate(module, costs).makespan
    except TuskError:
        return None

