"""build_fdeps against a brute-force all-pairs reference, and clear_inst_deps' gate."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tusk.ir.builder import Builder
from tusk.ir.enums import DTYPE_SIZES, Dt, Edge, Engine, FnAttr, Kind, Mem, Op, Role
from tusk.ir.expr import idx as axis
from tusk.ir.expr import runtime
from tusk.ir.module import Function, Module
from tusk.ir.values import DynamicAPInfo
from tusk.sim.interp import random_inputs, run, same_outputs
from tusk.stages import make_pass, pass_class
from tusk.stages.build_fdeps import BuildFDeps
from tusk.stages.clear_inst_deps import ClearInstDeps, clear_inst_deps
from tusk.stages.deps import build_fdeps, edge_counts

# --------------------------------------------------------------------------- the reference


def _bytes_of(fn: Function, j: int) -> set:
    """Exact (space, partition, byte) set of a physical operand, enumerated element by element."""
    o = fn.operand(j)
    ml = o.memloc
    size = DTYPE_SIZES[o.dtype]
    out = set()
    pairs = o.pattern
    for idx in itertools.product(*[range(n) for _, n in pairs]):
        e = o.offset + sum(i * s for i, (s, _) in zip(idx, pairs))
        if ml.mtype == Mem.DRAM:
            space = ("dram",) if ml.addr >= 0 else ("private", ml.m)
            for k in range(size):
                out.add((space, 0, max(ml.addr, 0) + e * size + k))
        else:
            pitch = ml.pbytes // size
            space = ("sb",) if ml.mtype == Mem.SB else ("psum",)
            for k in range(size):
                out.add((space, ml.base + e // pitch, ml.addr + (e % pitch) * size + k))
    return out


def _reference(fn: Function) -> dict[tuple[int, int], int]:
    """All pairs A < B with their strongest conflict kind (exact byte sets)."""
    n = fn.n_insts
    reads, writes = [], []
    for i in range(n):
        r, w = set(), set()
        for o in fn.inst(i).operands:
            if o.kind != Kind.PHYSICAL:
                continue
            (w if o.role == Role.OUT else r).update(_bytes_of(fn, o.j))
        reads.append(r)
        writes.append(w)
    out = {}
    for a in range(n):
        for b in range(a + 1, n):
            k = 0
            if writes[a] & reads[b]:
                k = Edge.Flow
            elif writes[a] & writes[b]:
                k = Edge.Output
            elif reads[a] & writes[b]:
                k = Edge.Anti
            if k:
                out[(a, b)] = k
    return out


def _edges(fn: Function) -> dict[tuple[int, int], int]:
    d = fn.deps
    return {(s, t): k for s, t, k in zip(d["src"].tolist(), d["dst"].tolist(), d["kind"].tolist())}


def _reachable(n: int, edges) -> list[int]:
    """reach[a] = bitset of instructions reachable from a (edges go forward in program order)."""
    succ = [[] for _ in range(n)]
    for s, t in edges:
        succ[s].append(t)
    reach = [0] * n
    for a in range(n - 1, -1, -1):
        bits = 0
        for t in succ[a]:
            bits |= (1 << t) | reach[t]
        reach[a] = bits
    return reach


def check_against_reference(fn: Function, *, exact: bool = True) -> None:
    got = _edges(fn)
    ref = _reference(fn)
    data = {p: k for p, k in got.items() if k != Edge.Ordered}
    for (a, b), k in data.items():
        assert a < b
        if exact:  # every produced edge is a real conflict, with the strongest kind of that pair
            assert ref.get((a, b)) == k, f"edge {a}->{b} kind {k}, reference {ref.get((a, b))}"
    reach = _reachable(fn.n_insts, got)
    for a, b in ref:
        assert reach[a] >> b & 1, f"conflict {a}->{b} ({ref[(a, b)]}) is not ordered by the graph"


# --------------------------------------------------------------------------- hand cases


def _pipeline(iterations=2, queue="q0") -> Function:
    b = Builder()
    x = b.dram("x", (8 * iterations, 16), kind="ExternalInput")
    y = b.dram("y", (8 * iterations, 16), kind="ExternalOutput")
    t = b.sbuf("t", (8, 16), addr=0)
    u = b.sbuf("u", (8, 16), addr=64)
    for k in range(iterations):
        b.dma(t.ap(), x.tile(k * 8, 8, 0, 16), queue=queue)
        b.activation(u.ap(), t.ap(), "Exp")
        b.dma(y.tile(k * 8, 8, 0, 16), u.ap(), queue=queue)
    return b.function()


def test_pipeline_edges_by_hand():
    fn = build_fdeps(_pipeline())
    # 0 load t, 1 act t->u, 2 store u, 3 load t, 4 act t->u, 5 store u
    assert _edges(fn) == {
        (0, 1): Edge.Flow, (1, 2): Edge.Flow, (0, 2): Edge.Ordered,
        (0, 3): Edge.Output, (1, 3): Edge.Anti, (2, 3): Edge.Ordered,
        (3, 4): Edge.Flow, (1, 4): Edge.Output, (2, 4): Edge.Anti,
        (4, 5): Edge.Flow, (3, 5): Edge.Ordered,
    }
    check_against_reference(fn)


def test_ordered_edges_are_optional_and_need_a_queue():
    assert Edge.Ordered not in _edges(build_fdeps(_pipeline(), ordered=False)).values()
    assert Edge.Ordered not in _edges(build_fdeps(_pipeline(queue=None))).values()


def test_rotated_buffers_remove_the_anti_dependences():
    """Double buffering: tiles alternate between two SB slots, so iteration k+1 does not wait for k."""
    b = Builder()
    x = b.dram("x", (32, 16), kind="ExternalInput")
    y = b.dram("y", (32, 16), kind="ExternalOutput")
    slots = [b.sbuf(f"t{k}", (8, 16), addr=64 * k) for k in range(2)]
    for k in range(4):
        t = slots[k % 2]
        b.dma(t.ap(), x.tile(k * 8, 8, 0, 16))
        b.activation(t.ap(), t.ap(), "Exp")
        b.dma(y.tile(k * 8, 8, 0, 16), t.ap())
    fn = build_fdeps(b.function())
    e = _edges(fn)
    assert (2, 3) not in e and (1, 3) not in e       # iteration 1 uses the other slot
    assert e[(2, 6)] == Edge.Anti and e[(1, 6)] == Edge.Output  # iteration 2 reuses slot 0
    check_against_reference(fn)


def test_partial_overlaps_and_strided_tiles():
    b = Builder()
    t = b.sbuf("t", (8, 16), addr=0)
    v = b.sbuf("v", (8, 16), addr=32)   # overlaps t's columns 8..15
    w = b.sbuf("w", (8, 16), addr=512)
    b.memset(t.ap(), 1.0)                                  # 0 writes t
    b.memset(v.tile(0, 4, 0, 4), 2.0)                      # 1 writes v rows 0..3 cols 0..3 = t cols 8..11
    b.copy(w.tile(0, 8, 0, 8), t.tile(0, 8, 0, 8))         # 2 reads t cols 0..7 (disjoint from 1)
    b.copy(w.tile(0, 8, 8, 8), t.tile(0, 8, 8, 8))         # 3 reads t cols 8..15 (after 0 and 1)
    b.copy(w.tile(4, 4, 0, 16), v.ap([[16, 4], [2, 8]], offset=64))  # 4 strided read of v rows 4..7
    b.memset(t.tile(2, 2, 0, 16), 0.0)                      # 5 rewrites t rows 2..3
    fn = build_fdeps(b.function())
    e = _edges(fn)
    assert (1, 2) not in e and (0, 2) in e and e[(1, 3)] == Edge.Flow and e[(0, 3)] == Edge.Flow
    check_against_reference(fn)


def test_dram_tensors_are_viewed_as_rows():
    """A 2-D tile of a private DRAM tensor is an exact box; rows that do not hold whole elements
    of the access dtype fall back to the rows its bytes span."""
    b = Builder()
    d = b.dram("d", (4, 6), "uint8")          # rows of 6 bytes
    t = b.sbuf("t", (1, 6), "uint8", addr=0)
    w = b.sbuf("w", (1, 1), "int32", addr=64)
    b.memset(t.ap(), 1)                                                  # 0
    b.dma(d.tile(0, 4, 0, 3), b.sbuf("s", (4, 3), "uint8", addr=128).ap())  # 1: columns 0..2 of every row
    b.dma(d.tile(0, 4, 3, 3), b.sbuf("s2", (4, 3), "uint8", addr=256).ap())  # 2: columns 3..5: disjoint
    b.dma(d.tile(0, 1, 0, 6), t.ap())                                    # 3: row 0
    b.dma(w.ap(), d.ap([[1, 1]], offset=2, dtype="int32"))              # 4: bytes 8..11 = row 1 (int32 view)
    fn = build_fdeps(b.function())
    e = _edges(fn)
    assert (1, 2) not in e and e[(1, 3)] == Edge.Output and e[(2, 3)] == Edge.Output
    assert (3, 4) not in e and e[(1, 4)] == Edge.Flow and e[(2, 4)] == Edge.Flow
    check_against_reference(fn, exact=False)


def test_psum_dram_and_registers_are_spaces_of_their_own():
    b = Builder()
    x = b.dram("x", (4, 4), kind="ExternalInput")
    d = b.dram("d", (4, 4), addr=0)
    t = b.sbuf("t", (4, 4), addr=0)
    p = b.psum("p", (4, 4), addr=0)
    r = b.register("r")
    b.dma(t.ap(), x.ap())              # 0
    b.memset(p.ap(), 0.0)              # 1: PSUM bytes equal to t's SB bytes, no conflict with 0
    b.dma(d.ap(), t.ap())              # 2
    b.register_move(r, 3)              # 3 writes r
    b.register_alu(r, r, "add", 1)     # 4 reads and writes r
    fn = build_fdeps(b.function())
    e = _edges(fn)
    assert (0, 1) not in e and e[(0, 2)] == Edge.Flow and e[(3, 4)] == Edge.Flow
    assert (1, 2) not in e


def test_dynamic_operands_conflict_with_their_whole_memory():
    b = Builder()
    fn = b.fn
    table = b.dram("table", (16, 8), kind="ExternalInput")
    t = b.sbuf("t", (4, 8), addr=0)
    far = b.sbuf("far", (4, 8), addr=8192)
    r = b.register("r")
    b.register_move(r, 2)                                    # 0
    b.memset(far.ap(), 0.0)                                  # 1
    dyn = fn.intern(DynamicAPInfo(((8, 4), (1, 8)), ((runtime("r"), 8),), 0))
    pat = fn.pattern_id([[8, 4], [1, 8]])
    fn.add_inst(Op.DMACopy, Engine.DMA, b._block, "dyn_load", [   # 2: reads r and table, writes t
        (Role.IN, Kind.PHYSICAL, Dt.float32, table.memlocs[0], 0, pat, -1, dyn, -1),
        (Role.OUT, Kind.PHYSICAL, Dt.float32, t.memlocs[0], 0, pat, -1, -1, -1)])
    dst = fn.add_inst(Op.DMACopy, Engine.DMA, b._block, "dyn_store", [  # 3: writes t's SB space (dynamic)
        (Role.IN, Kind.PHYSICAL, Dt.float32, table.memlocs[0], 0, pat, -1, -1, -1),
        (Role.OUT, Kind.PHYSICAL, Dt.float32, t.memlocs[0], 0, pat, -1, dyn, -1)])
    e = _edges(build_fdeps(fn))
    assert e[(0, 2)] == Edge.Flow           # the register offset
    assert (1, 2) not in e                   # exact write to t, far away from 'far'
    assert e[(1, dst)] == Edge.Output        # the dynamic write may land anywhere in SB


def test_symbolic_operands_with_constant_address_are_exact():
    b = Builder()
    t = b.sbuf("t", (4, 8), addr=0, blocks=2)
    u = b.sbuf("u", (4, 8), addr=1024)
    b.memset(t.ap(block=0), 0.0)
    b.memset(t.ap(block=1), 0.0)
    fn = b.function()
    # make the second memset symbolic with a constant block index
    from tusk.ir.expr import const
    from tusk.ir.values import SymAddr
    j = fn.insts.get("ops", 1)
    fn.operands.set("kind", j, Kind.SYMBOLIC)
    fn.operands.set("aux", j, fn.intern(SymAddr(const(0), const(1))))
    b.copy(u.ap(), t.ap(block=1))
    e = _edges(build_fdeps(fn))
    assert (0, 2) not in e and e[(1, 2)] == Edge.Flow


def test_functions_with_control_flow_get_edges_inside_straight_line_regions():
    from tests.programs import tiled_exp_module
    fn = tiled_exp_module().functions[0]  # row 0: the loop; rows 1-3: load, exp, store in its body
    e = _edges(build_fdeps(fn))
    assert set(e) == {(1, 2), (2, 3)}
    b = Builder()
    t = b.sbuf("t", (128, 4), addr=0)
    b.memset(t.ap(), 1.0)
    b.emit("UnconditionalBranch", "Unassigned", attrs={"target": "next"})
    b.new_block("next")
    b.tensor_scalar(t.ap(), t.ap(), "add", 1.0)
    b.tensor_scalar(t.ap(), t.ap(), "mult", 2.0)
    assert set(_edges(build_fdeps(b.fn))) == {(2, 3)}  # the branch orders the blocks


def test_registers_read_in_symbolic_addresses_order_their_writers():
    """A symbolic offset that reads a register waits for the register's writer and comes before its next one."""
    b = Builder()
    x = b.dram("x", (8, 16), kind="ExternalInput")
    t = b.sbuf("t", (1, 16), addr=0)
    r = b.register("r")
    b.register_move(r, 3)                                  # 0 writes r
    b.dma(t.ap(), x.tile(runtime("r"), 1, 0, 16))          # 1 reads r in its symbolic offset
    b.register_move(r, 5)                                  # 2 overwrites r
    fn = b.function()
    assert fn.operand(fn.insts.get("ops", 1)).kind == Kind.SYMBOLIC
    e = _edges(build_fdeps(fn))
    assert e[(0, 1)] == Edge.Flow and e[(1, 2)] == Edge.Anti


def _dynamic_loop_kernel():
    """n = TensorLoad(count); for k in range(0, n): t[k mod 2] += 1 -- lowered so k lives in iv_k."""
    from tusk.stages.lower_dynamic import lower_dynamic_exprs
    b = Builder()
    cnt = b.sbuf("cnt", (1, 1), "int32", addr=4096)
    t = b.sbuf("t", (128, 8), addr=0, blocks=2)
    n = b.register("n")
    b.memset(cnt.ap(), 3)
    b.tensor_load(n, cnt.ap())
    with b.dynamic_loop("k", 0, n):
        b.tensor_scalar(t.ap(block=axis("k") % 2), t.ap(block=axis("k") % 2), "add", 1.0)
    return lower_dynamic_exprs(b.function())


def test_a_kept_dynamic_loop_waits_for_its_bound_and_counter():
    fn = _dynamic_loop_kernel()
    names = fn.inst_names()
    row = {nm: k for k, nm in enumerate(names)}
    loop = next(k for k in range(fn.n_insts) if fn.inst(k).opname == "DynamicForLoop")
    init = next(k for k, nm in enumerate(names) if nm.endswith(".iv_init"))
    step = next(k for k, nm in enumerate(names) if nm.endswith(".iv_step"))
    body = next(k for k in range(fn.n_insts) if fn.inst(k).opname == "TensorScalar")
    out = build_fdeps(fn)
    e = _edges(out)
    assert e[(row["tensor_load0"], loop)] == Edge.Flow        # the upper bound register
    assert e[(init, loop)] == Edge.Flow                       # the induction register
    assert e[(body, step)] == Edge.Anti                       # the body reads iv_k before the step writes it
    c = out.carried
    carried = {(s_, d_): k for s_, d_, k in zip(c["src"].tolist(), c["dst"].tolist(), c["kind"].tolist())}
    assert carried[(step, body)] == Edge.Flow                 # iteration k + 1 reads the stepped register
    assert carried[(step, step)] == Edge.Flow
    assert all(out.value(p) == (1,) for p in c["payload"].tolist())
    # rebuilding replaces the loop-carried edges instead of piling them up
    assert len(build_fdeps(out).carried) == len(c)


def test_a_kept_dynamic_loop_is_ordered_after_what_its_body_overwrites_or_reads():
    """Top-level DMAs that write y (or x) before a kept loop whose body writes y (reads x) may still be in
    flight when the loop starts: the loop row stands for its body, so it waits for them (WAW, RAW), and it
    waits for a read of y before it (WAR)."""
    from tusk.stages.lower_dynamic import lower_dynamic_exprs
    b = Builder()
    x = b.dram("x", (128, 8), kind="ExternalInput")
    y = b.dram("y", (128, 8), kind="ExternalOutput")
    z = b.dram("z", (128, 8), kind="ExternalOutput")
    cnt = b.sbuf("cnt", (1, 1), "int32", addr=4096)
    t = b.sbuf("t", (128, 8), addr=0)
    u = b.sbuf("u", (128, 8), addr=1024)
    n = b.register("n")
    b.memset(cnt.ap(), 3)                      # 0
    b.tensor_load(n, cnt.ap())                 # 1
    b.dma(u.ap(), x.ap())                      # 2 writes u, which the body reads
    b.dma(y.ap(), u.ap())                      # 3 writes y, which the body writes too
    b.dma(z.ap(), t.ap())                      # 4 reads t, which the body writes
    with b.dynamic_loop("k", 0, n):
        b.tensor_scalar(t.ap(), u.ap(), "add", 1.0)
        b.dma(y.ap(), t.ap())
    fn = lower_dynamic_exprs(b.function())
    names = fn.inst_names()
    loop = next(k for k in range(fn.n_insts) if fn.inst(k).opname == "DynamicForLoop")
    dma = [k for k in range(loop) if fn.inst(k).opname == "DMACopy"]
    assert len(dma) == 3, names
    e = _edges(build_fdeps(fn))
    assert e[(dma[1], loop)] == Edge.Output                   # y: write after write
    assert e[(dma[0], loop)] == Edge.Flow                     # u: the body reads what the DMA writes
    assert e[(dma[2], loop)] == Edge.Anti                     # t: the body overwrites what the DMA reads
    assert all(d <= loop for s_, d in e if s_ < loop)         # nothing crosses into the body's region


def test_pass_does_not_mutate_its_input_and_counts_edges():
    fn = _pipeline()
    m = Module([fn])
    before = len(fn.deps)
    p = make_pass("build_fdeps")
    out, stats = p.run(m)
    assert len(m.functions[0].deps) == before == 0
    assert stats["edges"] == len(out.functions[0].deps) == 11
    assert stats == {"functions": 1, "edges": 11, "Ordered": 3, "Anti": 2, "Output": 2, "Flow": 4}
    assert edge_counts(out.functions[0])["Flow"] == 4


def test_keep_existing_merges_with_the_old_edges():
    fn = _pipeline(1)
    fn.add_dep(0, 2, Edge.Flow)  # stronger than the Ordered edge the pass would add
    e = _edges(build_fdeps(fn, keep_existing=True))
    assert e[(0, 2)] == Edge.Flow
    assert _edges(build_fdeps(fn))[(0, 2)] == Edge.Ordered


# --------------------------------------------------------------------------- random programs

BUFS = [  # (kind, addr, rows, cols) -- some SB buffers and the placed DRAM ones overlap on purpose
    ("sb", 0, 8, 16), ("sb", 32, 8, 16), ("sb", 64, 4, 8), ("sb", 1024, 8, 8), ("psum", 0, 8, 16),
    ("dram", -1, 8, 16), ("dram", 0, 8, 16), ("dram", 256, 4, 16),
]
# Tiles are exact boxes everywhere except in the shared (linear) DRAM space, where a tile of several
# rows is a strided range: its footprint is the bounding range (conservative).
EXACT = 6


@st.composite
def programs(draw, nbufs: int = len(BUFS)):
    """Random straight-line bodies: each instruction writes one tile from 0-2 tiles of the same shape."""
    n = draw(st.integers(1, 14))
    insts = []
    for _ in range(n):
        nr, nc = draw(st.integers(1, 4)), draw(st.integers(1, 8))

        def tile():
            k = draw(st.integers(0, nbufs - 1))
            _, _, rows, cols = BUFS[k]
            return (k, draw(st.integers(0, rows - nr)), nr, draw(st.integers(0, cols - nc)), nc)

        nin = draw(st.integers(0, 2))
        insts.append(([tile() for _ in range(nin)], tile(), draw(st.sampled_from([None, "qa", "qb"]))))
    return insts


def _build(insts, io: bool = False) -> Function:
    b = Builder()
    bufs = [b.dram(f"b{i}", (r, c), addr=a) if k == "dram" else (b.sbuf if k == "sb" else b.psum)(f"b{i}", (r, c), addr=a)
            for i, (k, a, r, c) in enumerate(BUFS)]
    if io:  # initialise every buffer from an input, store every buffer to an output at the end
        x = b.dram("x", (8, 16), kind="ExternalInput")
        y = b.dram("y", (8, 16 * len(BUFS)), kind="ExternalOutput")
        for k, (_, _, r, c) in enumerate(BUFS):
            b.dma(bufs[k].ap(), x.tile(0, r, 0, c))

    def ap(t):
        k, r0, nr, c0, nc = t
        return bufs[k].tile(r0, nr, c0, nc)

    for v, (ins, out, q) in enumerate(insts):
        if not ins:
            b.memset(ap(out), float(v))
        elif len(ins) == 2:
            b.tensor_tensor(ap(out), ap(ins[0]), ap(ins[1]), "add")
        elif q is not None:
            b.dma(ap(out), ap(ins[0]), queue=q)
        else:
            b.copy(ap(out), ap(ins[0]))
    if io:
        for k, (_, _, r, c) in enumerate(BUFS):
            b.dma(y.tile(0, r, 16 * k, c), bufs[k].ap())
    return b.function()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(EXACT))
def test_random_programs_match_the_reference(insts):
    check_against_reference(build_fdeps(_build(insts)))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_random_programs_with_shared_dram_are_covered(insts):
    check_against_reference(build_fdeps(_build(insts)), exact=False)


@st.composite
def strided_programs(draw):
    n = draw(st.integers(1, 10))
    out = []
    for _ in range(n):
        k = draw(st.integers(0, 3))
        off = draw(st.integers(0, 40))
        pattern = draw(st.sampled_from([[[16, 2], [2, 4]], [[32, 2], [1, 20]], [[3, 5]], [[16, 3], [-1, 3]]]))
        out.append((k, off, pattern, draw(st.booleans())))
    return out


@settings(max_examples=80, deadline=None)
@given(strided_programs())
def test_strided_patterns_are_covered_conservatively(insts):
    b = Builder()
    bufs = [b.sbuf(f"b{i}", (8, 16), addr=a) for i, a in enumerate((0, 24, 64, 400))]
    for k, off, pattern, write in insts:
        lo = -min(0, sum(s * (n - 1) for s, n in pattern if s < 0))
        ap = bufs[k].ap(pattern, offset=off + lo)
        if write:
            b.memset(ap, 1.0)
        else:
            b.reduce(bufs[(k + 1) % 4].tile(0, 1, 0, 1), ap, "add")
    check_against_reference(build_fdeps(b.function()), exact=False)


def _topological_shuffle(fn: Function, rng: np.random.Generator) -> np.ndarray:
    n = fn.n_insts
    preds = [set() for _ in range(n)]
    for s, t in zip(fn.deps["src"].tolist(), fn.deps["dst"].tolist()):
        preds[t].add(s)
    done: set[int] = set()
    order: list[int] = []
    while len(order) < n:
        ready = [i for i in range(n) if i not in done and preds[i] <= done]
        i = ready[int(rng.integers(len(ready)))]
        done.add(i)
        order.append(i)
    return np.array(order)


@settings(max_examples=40, deadline=None)
@given(programs(), st.integers(0, 2**31 - 1))
def test_any_order_that_respects_the_edges_computes_the_same(insts, seed):
    """The graph is sufficient: reorder the instructions along it and the interpreter agrees."""
    fn = build_fdeps(_build(insts, io=True))
    shuffled = fn.take_insts(_topological_shuffle(fn, np.random.default_rng(seed)))
    m0, m1 = Module([fn]), Module([shuffled])
    inp = random_inputs(m0, seed)
    assert same_outputs(run(m0, inp), run(m1, inp))


def test_an_order_that_breaks_an_edge_can_compute_something_else():
    """The previous test can fail: swapping a flow-dependent pair changes the result."""
    fn = build_fdeps(_build([([], (0, 0, 2, 0, 4), None), ([(0, 0, 2, 0, 4)], (3, 0, 2, 0, 4), None)], io=True))
    n = fn.n_insts
    order = np.arange(n)
    first = len(BUFS)  # after the initialising DMAs
    assert _edges(fn)[(first, first + 1)] == Edge.Flow
    order[[first, first + 1]] = order[[first + 1, first]]
    inp = random_inputs(Module([fn]), 0)
    assert not same_outputs(run(Module([fn]), inp), run(Module([fn.take_insts(order)]), inp))


# --------------------------------------------------------------------------- clear_inst_deps


def _with_edges(name: str, attrs=()) -> Function:
    fn = build_fdeps(_pipeline())
    fn.name = name
    fn.attrs = set(attrs)
    fn.carried.append((0, 3, Edge.Flow, 1, -1))
    return fn


def test_clear_inst_deps_is_gated_on_attribute_12():
    m = Module([_with_edges("main", [FnAttr.KERNEL_SCOPE]), _with_edges("other")])
    out, stats = make_pass("clear_inst_deps").run(m)
    assert len(out.functions[0].deps) == 0 and len(out.functions[0].carried) == 0
    assert len(out.functions[1].deps) == 11 and len(out.functions[1].carried) == 1
    assert len(m.functions[0].deps) == 11  # the input is untouched
    assert stats == {"functions_cleared": 1, "edges_removed": 12}
    untouched = clear_inst_deps(Module([_with_edges("main")]))
    assert len(untouched.functions[0].deps) == 11


def test_clear_inst_deps_entry_gate_follows_the_binary():
    m = Module([_with_edges("main", [FnAttr.KERNEL_SCOPE]), _with_edges("other")])
    out = clear_inst_deps(m, entry_gate=True)
    assert all(len(f.deps) == 0 and len(f.carried) == 0 for f in out.functions)
    m2 = Module([_with_edges("main"), _with_edges("other", [FnAttr.KERNEL_SCOPE])])
    assert all(len(f.deps) == 11 for f in clear_inst_deps(m2, entry_gate=True).functions)


def test_passes_are_registered_under_their_names():
    assert pass_class("build_fdeps") is BuildFDeps
    assert pass_class("clear_inst_deps") is ClearInstDeps


def test_a_tile_cut_by_the_rows_of_another_tile_keeps_one_class_per_set_of_boxes():
    """Cells are cut by every boundary of the memory: tile u, written row by row, cuts tile t (used whole and
    by halves, at other bytes) into 32 rows x 2 halves.  The rows of t are covered by the same boxes, so they
    are one class: each access of t is expanded to 2 classes, not 64 cells -- and the edges are the
    reference's."""
    from tusk.stages import footprints

    b = Builder()
    t = b.sbuf("t", (32, 64), addr=0)
    u = b.sbuf("u", (32, 64), addr=1024)
    w = b.sbuf("w", (32, 64), addr=2048)
    b.memset(u.ap(), 0.0)
    for r in range(32):
        b.memset(u.tile(r, 1, 0, 64), float(r))
    for k in range(60):
        if k % 3 == 0:
            b.memset(t.ap(), float(k))
        elif k % 3 == 1:
            b.memset(t.tile(0, 32, 0, 32), float(k))
        else:
            b.copy(w.ap(), t.ap())
    fn = b.function()
    fp = footprints.written_only(footprints.footprints(fn))
    t_accesses = 60
    cell, _, _ = footprints.cells(fp)
    assert len(cell) < 32 * 2 * t_accesses // 4  # every access of t was cut into 32 x 2 cells
    check_against_reference(build_fdeps(fn))
