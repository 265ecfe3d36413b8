"""Throughput of the oracle: the interpreter, build_fdeps and the timing model.

* interpreter: instructions per second on a fully unrolled tiled kernel
  (load -> Exp -> scale/shift -> add -> store per tile, four rotating SB
  slots), built with the builder;
* build_fdeps: seconds for 10^5 and 10^6 instructions of the same kernel
  (replicated column-wise, as the unroller does) and the ratio between
  them (near-linear means about 10; the target is under 15);
* timing: seconds to simulate the 10^6-instruction function.

Run:  python bench/bench_sim.py [--quick]
Prints figures; asserts nothing.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from tusk.ir.builder import Builder
from tusk.ir.columns import Table
from tusk.ir.enums import Mem
from tusk.ir.module import INST_SCHEMA, OPERAND_SCHEMA, Function, Module
from tusk.sim.interp import random_inputs, run
from tusk.sim.timing import simulate
from tusk.stages.deps import build_fdeps
from tusk.stages.footprints import footprints

SLOTS = 4


def tiled_kernel(tiles: int, width: int) -> Module:
    """A straight-line kernel written tile by tile with the builder."""
    b = Builder("main")
    x = b.dram("x", (128 * tiles, width), kind="ExternalInput")
    y = b.dram("y", (128 * tiles, width), kind="ExternalOutput")
    t = [b.sbuf(f"t{k}", (128, width), addr=k * width * 4) for k in range(SLOTS)]
    u = [b.sbuf(f"u{k}", (128, width), addr=(SLOTS + k) * width * 4) for k in range(SLOTS)]
    for i in range(tiles):
        k = i % SLOTS
        b.dma(t[k].ap(), x.tile(i * 128, 128, 0, width), queue=f"q{k}")
        b.activation(u[k].ap(), t[k].ap(), "Exp")
        b.tensor_scalar(u[k].ap(), u[k].ap(), "mult", 0.5, "add", 1.0)
        b.tensor_tensor(u[k].ap(), u[k].ap(), t[k].ap(), "add")
        b.dma(y.tile(i * 128, 128, 0, width), u[k].ap(), queue=f"q{k}")
    return b.module()


def replicated_kernel(n_insts: int, width: int = 512) -> Function:
    """The tiled kernel at ``n_insts`` instructions, built column-wise from one rotation of the slots."""
    per_tile = 5
    tiles = -(-n_insts // per_tile)
    reps = -(-tiles // SLOTS)
    fn = tiled_kernel(SLOTS, width).functions[0]
    ins, ops = fn.insts, fn.operands
    n_t, o_t = len(ins), len(ops)
    # the DRAM tensors grow with the repetitions
    for m in range(len(fn.memlocs)):
        if fn.memlocs.get("mtype", m) == Mem.DRAM:
            fn.memlocs.set("pbytes", m, reps * SLOTS * 128 * width * 4)
            fn.sets.set("shape", fn.memlocs.get("set", m), fn.intern((reps * SLOTS * 128, width)))
    iarr = {c: np.tile(ins[c], reps) for c in ins.names}
    iarr["iter"] = np.repeat(np.arange(reps, dtype=np.int32), n_t)
    iarr["ops"] = np.tile(ins["ops"], reps) + np.repeat(np.arange(reps, dtype=np.int64) * o_t, n_t)
    oarr = {c: np.tile(ops[c], reps) for c in ops.names}
    dram = fn.memlocs["mtype"][ops["memloc"]] == Mem.DRAM
    step = np.where(dram, SLOTS * 128 * width, 0).astype(np.int64)
    oarr["offset"] = oarr["offset"] + np.repeat(np.arange(reps, dtype=np.int64), o_t) * np.tile(step, reps)
    keep = n_insts
    fn.insts = Table.from_arrays(INST_SCHEMA, {c: a[:keep] for c, a in iarr.items()})
    last = int(iarr["ops"][keep - 1] + iarr["nops"][keep - 1])
    fn.operands = Table.from_arrays(OPERAND_SCHEMA, {c: a[:last] for c, a in oarr.items()})
    fn.invalidate()
    return fn


def best(f, repeat: int = 3, clock=time.perf_counter) -> float:
    times = []
    for _ in range(repeat):
        t0 = clock()
        f()
        times.append(clock() - t0)
    return min(times)


def main() -> None:
    quick = "--quick" in sys.argv
    print("interpreter (fully unrolled tiled kernel, built with the builder)")
    for tiles, width in ((500, 512), (2000, 64)) if not quick else ((100, 64),):
        m = tiled_kernel(tiles, width)
        inp = random_inputs(m, 0)
        n = m.functions[0].n_insts
        dt = best(lambda: run(m, inp), 2)
        print(f"  {n:>7} instructions, tiles 128x{width:<4} {dt:7.3f} s  {n / dt:>9,.0f} inst/s")
    n = 20_000 if not quick else 5_000
    fn = replicated_kernel(n, width=64)
    m = Module([fn])
    inp = random_inputs(m, 0)
    dt = best(lambda: run(m, inp), 1)
    print(f"  {n:>7} instructions, replicated 128x64   {dt:7.3f} s  {n / dt:>9,.0f} inst/s")

    print("build_fdeps (straight-line unrolled kernel, 4 rotating SB slots, 4 DMA queues)")
    print("  (CPU seconds, best of runs: the wall clock is noisy when other jobs share the machine)")
    sizes = (10**5, 10**6) if not quick else (10**4, 10**5)
    secs, walls = {}, {}
    holder: dict = {}
    for n in sizes:
        fn = replicated_kernel(n)
        t_fp = best(lambda: footprints(fn), 2, time.process_time)
        reps = 3 if n < 10**6 else 2
        secs[n] = best(lambda: holder.__setitem__("fn", build_fdeps(fn)), reps, time.process_time)
        walls[n] = best(lambda: build_fdeps(fn), 1)
        print(f"  {n:>8} instructions: {secs[n]:6.2f} s CPU ({walls[n]:6.2f} s wall; footprints {t_fp:5.2f} s)  "
              f"{len(holder['fn'].deps):>8} edges  {n / secs[n]:>10,.0f} inst/s")
    a, b = sizes
    print(f"  ratio {b // a}x instructions -> {secs[b] / secs[a]:.2f}x CPU time, {walls[b] / walls[a]:.2f}x wall "
          f"(target < 15)")

    try:  # the corpus' big kernel, if the unroller is in this checkout
        from tusk.examples.bir_kernels import large_matmul
        from tusk.stages import make_pass

        big = make_pass("full_unroll", level=2).run(large_matmul()[0])[0].functions[0]
        t_big = best(lambda: build_fdeps(big), 1, time.process_time)
        print(f"  corpus large_matmul after full_unroll: {big.n_insts:>8} instructions {t_big:6.2f} s CPU "
              f"({big.n_insts / t_big:,.0f} inst/s)")
    except Exception as e:  # noqa: BLE001 - optional line
        print(f"  (corpus large_matmul skipped: {e})")

    print("timing model")
    t_sim = best(lambda: holder.__setitem__("tl", simulate(holder["fn"])), 1)
    tl = holder["tl"]
    print(f"  {sizes[-1]:>8} instructions: {t_sim:7.2f} s  makespan {tl.makespan:,.0f} cycles, "
          f"lower bound {tl.lower_bound:,.0f} (efficiency {tl.efficiency:.2f})")


if __name__ == "__main__":
    main()
