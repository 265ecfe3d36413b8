"""Address rotation and scheduling, measured with the timing model (docs/timing.md).

0. The 8-tile load -> exp -> store kernel with 1, 2 and 3 rotating SB slots, in program order and
   scheduled: rotation has to show on the yardstick itself.
1. Makespans per tiled kernel and per traced NKI corpus kernel (examples/nki), cycles of the timing
   model, measured as the build measures them (edges rebuilt by build_fdeps):
   * "before rotation": the module the first rotation pass gets (unrolled, program order);
   * "after pipeline": the final module of the default pipeline;
   * "bound": the true lower bound of the final program (sim/bound.py: no order of it does better);
   * "best of 20 orders": the fastest of 20 random legal orders of the final program;
   and the binding term of the bound.  KLR kernels carry no rotation flags: with the default host module
   they are rotated after scheduling only (then scheduled again); a host whose entry has attribute 9 and
   whose kernel call has AddressRotationScope Global (what a driver enabling rotation would write) gets
   them rotated before scheduling too.
   Targets: after the pipeline within 10% of the bound on the tiled kernels, and never worse than before
   rotation on any kernel.
2. Pass time of address_rotation_psum, address_rotation_sb and schedule on a tiled matmul of 10^5 and
   10^6 instructions (near-linear: 10x instructions -> under 15x time).
3. SB rotation split into per-band batches on a 10^6-instruction kernel (four independent streams, one
   per 32-partition band): the parts run in a pool of 1 and of 2 forked processes (target: 2 workers
   at least 1.5x faster than 1), and split + parts + merge against the serial run.

Run:  python bench/bench_rotation.py [--quick]
Prints figures; asserts nothing.
"""

from __future__ import annotations

import multiprocessing
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.legal_orders import random_legal_order, with_edges  # noqa: E402
from tests.programs import eight_tiles  # noqa: E402
from tusk import stages
from tusk.examples import bir_kernels
from tusk.ir.builder import Builder
from tusk.ir.enums import FnAttr, Op
from tusk.ir.module import Module
from tusk.ir.serial import content_hash, module_from_parts, module_to_parts
from tusk.sim.timing import simulate
from tusk.stages.deps import build_fdeps
from tusk.stages.host import host_module_for
from tusk.stages.schedule import COMPARE_LIMIT, schedule_function
from tusk.stages.unroll import Unroll
from tusk.workflows.pipeline import DEFAULT_ORDER, ROTATION_PASSES


def before_and_final(module: Module) -> tuple[Module, Module]:
    """(the module before the first rotation pass, the final module) of the default pipeline."""
    before = None
    for name in DEFAULT_ORDER:
        if before is None and name in ROTATION_PASSES:
            before = module
        module, _ = stages.make_pass(name).run(module)
    return (before if before is not None else module), module


def figures(module: Module, orders: int) -> tuple[float, float, float, float, str]:
    """(before rotation, after the pipeline, true lower bound of the final program, best of ``orders``
    random legal orders of it, binding term): the makespans as the build measures them (edges rebuilt)."""
    before, final = before_and_final(module)
    final = with_edges(final)
    tl = simulate(final)
    rng = np.random.default_rng(0)
    best = min(simulate(random_legal_order(final, rng)).makespan for _ in range(orders))
    binding = simulate(final.functions[-1]).binding if len(final.functions) > 1 else tl.binding
    return simulate(with_edges(before)).makespan, tl.makespan, tl.lower_bound, best, binding


def traced_corpus(work: Path) -> list[tuple[str, Module]]:
    """Every unit of examples/nki traced to KLR, as the build's host module (core 0)."""
    import tomllib

    from tusk.examples.nki import DIRECTORY
    from tusk.frontend import trace_file

    units = tomllib.loads((DIRECTORY / "tusk.toml").read_text(encoding="utf-8"))["kernels"]
    out = []
    for name, unit in sorted(units.items()):
        path = work / f"{name}.klr"
        path.write_bytes(trace_file(DIRECTORY / unit["file"], unit.get("function"), unit["inputs"],
                                    unit.get("grid", ())))
        out.append((f"nki/{name}", host_module_for(str(path), 0, str(work / name))))
    return out


def section_eight_tiles() -> None:
    print("0. 8 tiles load -> exp -> store, 1 / 2 / 3 rotating SB slots (the yardstick)")
    for slots in (1, 2, 3):
        fn = eight_tiles(slots)
        tl = simulate(schedule_function(fn)[0])
        print(f"  {slots} slot(s): program order {simulate(fn).makespan:9,.0f}, scheduled {tl.makespan:9,.0f} "
              f"(lower bound {tl.lower_bound:,.0f})")


def flagged(host: Module) -> Module:
    """The host module as a driver that enables rotation would write it: entry attribute 9, and the kernel
    call's AddressRotationScope Global (KLR carries no rotation flags of its own)."""
    out = host.copy()
    main = out.functions[0]
    main.attrs.add(FnAttr.ROTATE_PSUM_AND_SB)
    for row in np.flatnonzero(main.insts["opcode"] == Op.NKIKLIRKernel).tolist():
        attrs = main.inst(row).attrs.with_(address_rotation_scope_val=2)
        main.insts.set("attrs", row, main.intern_record(attrs))
    return out


def section_makespans(quick: bool) -> None:
    print("1. makespans (timing-model cycles, edges rebuilt as the build measures them): before rotation, after "
          "the default pipeline, the true lower bound of the final program, the best of 20 random legal orders "
          "of it")
    tiled = [
        ("tiled_exp, 64 tiles (elementwise)", bir_kernels.tiled_exp(tiles=64)[0]),
        ("tiled_add, 128 tiles (elementwise)", bir_kernels.tiled_add()[0]),
        ("tiled_matmul_large, 128 matmul tiles", bir_kernels.tiled_matmul_large()[0]),
        ("tiled_softmax_large, 64 tiles", bir_kernels.tiled_softmax_large()[0]),
        ("tiled_rmsnorm, 64 tiles", bir_kernels.tiled_rmsnorm()[0]),
    ]
    work = Path(tempfile.mkdtemp(prefix="tusk-bench-rotation-"))
    here = Path(__file__).resolve().parent.parent / "examples" / "kernels"
    for name in ("add_tiles", "matmul_tiles", "rmsnorm_tiles"):
        host = host_module_for(str(here / f"{name}.klr"), 0, str(work / name))
        tiled.append((f"{name}.klr, default host", host))
        if not quick:
            tiled.append((f"{name}.klr, host with 9 + scope Global", flagged(host)))
    traced = traced_corpus(work)
    orders = 5 if quick else 20
    print(f"  {'kernel':44} {'before':>10} {'after':>10} {'bound':>10} {'best of':>10} {'after/':>7} "
          f"{'after/':>7}  binding")
    print(f"  {'':44} {'rotation':>10} {'pipeline':>10} {'':>10} {f'{orders} orders':>10} {'bound':>7} "
          f"{'before':>7}")
    for group, cases, target in (("tiled", tiled, "within 10% of the bound"), ("traced NKI corpus", traced, "")):
        ratios, worse = [], 0
        for name, module in cases:
            t0, t1, lb, best, binding = figures(module, orders)
            ratios.append(t1 / lb)
            worse += t1 > t0 * (1 + 1e-9)
            print(f"  {name:44} {t0:10,.0f} {t1:10,.0f} {lb:10,.0f} {best:10,.0f} {t1 / lb:7.3f} {t1 / t0:7.3f}  "
                  f"{binding}")
        print(f"  {group}: worst after/bound {max(ratios):.3f}" + (f" (target: {target})" if target else "")
              + f"; {worse} of {len(cases)} worse than before rotation (target: 0)")


def matmul(mt: int, nt: int, kt: int) -> Module:
    m, _ = bir_kernels.large_matmul(mt=mt, kt=kt, nt=nt)
    m.functions[0].attrs.add(FnAttr.ROTATE_PSUM_AND_SB)
    return m


def section_scaling(quick: bool) -> None:
    print("2. pass time against size (tiled matmul, edges built), without the timing-model comparisons "
          f"(compare_limit=0: what every function above {COMPARE_LIMIT:,} rows gets), then with them at the smaller "
          "size")
    sizes = [(16, 16, 130), (32, 32, 325)] if not quick else [(4, 4, 130), (8, 8, 163)]
    times = []
    for k, (mt, nt, kt) in enumerate(sizes):
        u = build_fdeps(Unroll().run(matmul(mt, nt, kt))[0].functions[0])
        for limit in ((0, 1 << 30) if k == 0 else (0,)):
            row = pass_times(Module([u]), limit)
            if limit == 0:
                times.append((u.n_insts, row))
            print(f"  {u.n_insts:>9,} instructions, compare_limit {limit:>10,}: "
                  + ", ".join(f"{k} {v:6.2f} s" for k, v in row.items()))
    (n0, a), (n1, b) = times
    print(f"  {n1 / n0:.1f}x instructions -> " + ", ".join(f"{k} {b[k] / a[k]:.1f}x" for k in a) +
          " (target < 15x)")


def pass_times(m: Module, compare_limit: int) -> dict[str, float]:
    """CPU seconds of the PSUM and SB rotations and the scheduler, each on what the one before produced."""
    row = {}
    for name in ("address_rotation_psum", "address_rotation_sb", "schedule"):
        p = stages.make_pass(name, compare_limit=compare_limit)
        t = time.process_time()
        out, _ = p.run(m)
        row[name] = time.process_time() - t
        if name == "address_rotation_sb":
            m = Module([build_fdeps(out.functions[0])])  # schedule what rotation produced
    return row


def banded(tiles: int) -> Module:
    """Four independent load -> exp -> store streams, one per 32-partition band."""
    b = Builder("main", attrs=(FnAttr.ROTATE_PSUM_AND_SB,))
    x = b.dram("x", (32 * tiles, 4 * 64), kind="ExternalInput")
    y = b.dram("y", (32 * tiles, 4 * 64), kind="ExternalOutput")
    ts = [b.sbuf(f"t{k}", (32, 64), addr=0, base=32 * k) for k in range(4)]
    with b.loop("i", 0, tiles) as i:
        for k, t in enumerate(ts):
            b.dma(t.ap(), x.tile(32 * i, 32, 64 * k, 64))
            b.activation(t.ap(), t.ap(), "Exp")
            b.dma(y.tile(32 * i, 32, 64 * k, 64), t.ap())
    return Unroll().run(b.module())[0]


PARTS: list = []  # the parts as the store holds them (module_to_parts), inherited by the forked workers


def _run_part(k: int) -> tuple[int, str]:
    """What a build worker does with a part: load it, rotate it, hash what it would store."""
    part = module_from_parts(*PARTS[k])
    out, stats = stages.make_pass("address_rotation_sb").run(part)
    return stats["rotations"], content_hash(out)


def _pool_time(workers: int) -> float:
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(workers) as pool:
        pool.map(_warm, range(workers))  # start the processes before timing
        t = time.perf_counter()
        pool.map(_run_part, range(len(PARTS)), chunksize=1)
        return time.perf_counter() - t


def _warm(_: int) -> None:
    return None


def _spin(_: int) -> int:
    total = 0
    for i in range(2_000_000):
        total += i
    return total


def calibration() -> float:
    """How much faster 2 processes run 4 pure-CPU tasks than 1 here and now (the machine may be shared)."""
    ctx = multiprocessing.get_context("fork")
    times = []
    for w in (1, 2):
        with ctx.Pool(w) as pool:
            pool.map(_warm, range(w))
            t = time.perf_counter()
            pool.map(_spin, range(4), chunksize=1)
            times.append(time.perf_counter() - t)
    return times[0] / times[1]


def section_parallel(quick: bool) -> None:
    global PARTS
    tiles = 83_334 if not quick else 8_000
    m = banded(tiles)
    p = stages.make_pass("address_rotation_sb")
    print(f"3. SB rotation by band batch: {m.n_insts():,} instructions, 4 streams")
    t = time.perf_counter()
    serial, s_stats = p.run(m)
    t_serial = time.perf_counter() - t
    t = time.perf_counter()
    parts = p.split(m)
    t_split = time.perf_counter() - t
    PARTS = [module_to_parts(part) for part in parts]
    print(f"  serial run {t_serial:.2f} s ({s_stats['rotations']:,} instances moved); split into {len(parts)} "
          f"parts {t_split:.2f} s")
    t1 = min(_pool_time(1) for _ in range(3))
    t2 = min(_pool_time(2) for _ in range(3))
    print(f"  parts (load, rotate, hash) in a pool of 1 process {t1:.2f} s, of 2 processes {t2:.2f} s: "
          f"{t1 / t2:.2f}x with 2 workers (target >= 1.5x); the same pools on pure-CPU tasks: "
          f"{calibration():.2f}x (what this machine gives two processes now)")
    results = [p.run(part) for part in parts]
    t = time.perf_counter()
    merged, _ = p.merge(m, [r[0] for r in results], [r[1] for r in results])
    t_merge = time.perf_counter() - t
    print(f"  merge {t_merge:.2f} s; merged result equals the serial run: {merged == serial}")


def main() -> None:
    quick = "--quick" in sys.argv
    section_eight_tiles()
    section_makespans(quick)
    section_scaling(quick)
    section_parallel(quick)


if __name__ == "__main__":
    main()
