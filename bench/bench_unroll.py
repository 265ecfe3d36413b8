"""Unroll throughput and memory, measured in one run and printed as ratios.

    python bench/bench_unroll.py [--sizes 1e4,1e5,1e6,1e7] [--big]

For each size it fully unrolls an affine matmul nest (3 instructions per
innermost iteration) and reports unrolled instructions per second and bytes
per instruction of the result (column tables + pools).  Two references run
on the same nest in the same process:

* the floor: a bare numpy generation of the same offsets (what any
  vectorised unroller must at least do);
* mlir-opt --affine-loop-unroll="unroll-full unroll-num-reps=3" on the same
  affine nest, where the `mlir-opt-19` binary exists (Debian mlir-19-tools).

``--big`` also runs the 25,000,000-instruction end-to-end case (load
BIR-JSON, unroll, verify the count, save to the store format) in a child
process and reports its seconds and peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from tusk.ir.builder import Builder
from tusk.ir.module import Module


def matmul_nest(mt: int, nt: int, kt: int) -> Module:
    b = Builder("nest")
    at = b.dram("at", (kt * 128, mt * 128), kind="ExternalInput")
    bb = b.dram("b", (kt * 128, nt * 128), kind="ExternalInput")
    ta = b.sbuf("ta", (128, 128), addr=0)
    tb = b.sbuf("tb", (128, 128), addr=512)
    ps = b.psum("ps", (128, 128), addr=0)
    with b.loop("mi", 0, mt) as mi:
        with b.loop("ni", 0, nt) as ni:
            with b.loop("ki", 0, kt) as ki:
                b.dma(ta.ap(), at.tile(ki * 128, 128, mi * 128, 128), name="load_a")
                b.dma(tb.ap(), bb.tile(ki * 128, 128, ni * 128, 128), name="load_b")
                b.matmul(ps.ap(), ta.ap(), tb.ap(), accumulate=ki, name="mm")
    return b.module()


def shape_for(n: int) -> tuple[int, int, int]:
    iters = max(n // 3, 1)
    side = max(int(round(iters ** (1 / 3))), 1)
    return side, side, max(iters // (side * side), 1)


def function_bytes(m: Module) -> int:
    total = 0
    for fn in m.functions:
        for t in ("insts", "operands", "memlocs", "sets", "regs", "blocks", "deps", "carried"):
            total += getattr(fn, t).nbytes()
        total += sum(len(s) + 49 for s in fn.strings.items) + 64 * (len(fn.patterns) + len(fn.values))
    return total


def floor_seconds(mt: int, nt: int, kt: int) -> float:
    """Offsets of the three operands per iteration, generated with numpy only."""
    t0 = time.perf_counter()
    mi, ni, ki = np.meshgrid(np.arange(mt), np.arange(nt), np.arange(kt), indexing="ij")
    a = (ki * 128 * (mt * 128) + mi * 128).ravel()
    b = (ki * 128 * (nt * 128) + ni * 128).ravel()
    flag = ki.ravel()
    out = np.empty(3 * a.size, np.int64)
    out[0::3], out[1::3], out[2::3] = a, b, flag
    return time.perf_counter() - t0


MLIR_TEMPLATE = """func.func @nest(%A: memref<{K}x{M}xf32>, %B: memref<{K}x{N}xf32>, %C: memref<{M}x{N}xf32>) {{
  affine.for %mi = 0 to {mt} {{
    affine.for %ni = 0 to {nt} {{
      affine.for %ki = 0 to {kt} {{
        %a = affine.load %A[%ki * 128, %mi * 128] : memref<{K}x{M}xf32>
        %b = affine.load %B[%ki * 128, %ni * 128] : memref<{K}x{N}xf32>
        %c = arith.mulf %a, %b : f32
        affine.store %c, %C[%mi * 128, %ni * 128] : memref<{M}x{N}xf32>
      }}
    }}
  }}
  return
}}
"""


def mlir_seconds(mt: int, nt: int, kt: int) -> tuple[float, int] | None:
    exe = shutil.which("mlir-opt-19") or shutil.which("mlir-opt") or (
        "/usr/lib/llvm-19/bin/mlir-opt" if os.path.exists("/usr/lib/llvm-19/bin/mlir-opt") else None)
    if exe is None:
        return None
    src = MLIR_TEMPLATE.format(mt=mt, nt=nt, kt=kt, M=mt * 128, N=nt * 128, K=kt * 128)
    with tempfile.NamedTemporaryFile("w", suffix=".mlir", delete=False) as fh:
        fh.write(src)
    t0 = time.perf_counter()
    proc = subprocess.run(["/usr/bin/time", "-f", "%M", exe, fh.name,
                           "--affine-loop-unroll=unroll-full unroll-num-reps=3", "-o", os.devnull],
                          capture_output=True, text=True)
    dt = time.perf_counter() - t0
    os.unlink(fh.name)
    if proc.returncode != 0:
        return None
    try:
        kib = int(proc.stderr.strip().splitlines()[-1])
    except (ValueError, IndexError):
        kib = 0
    return dt, kib * 1024


def unroll_seconds(m: Module) -> tuple[float, Module]:
    from tusk.stages.unroll import unroll_function

    t0 = time.perf_counter()
    fn, _ = unroll_function(m.functions[0])
    dt = time.perf_counter() - t0
    return dt, Module([fn], m.arch, m.version, m.attributes)


def one_size(n: int) -> dict:
    mt, nt, kt = shape_for(n)
    m = matmul_nest(mt, nt, kt)
    dt, out = unroll_seconds(m)
    count = out.n_insts()
    row = {"target": n, "insts": count, "unroll_s": dt, "insts_per_s": count / dt,
           "bytes_per_inst": function_bytes(out) / count, "floor_s": floor_seconds(mt, nt, kt)}
    row["vs_floor"] = dt / row["floor_s"]
    if count <= 2_000_000:
        mlir = mlir_seconds(mt, nt, kt)
        if mlir:
            row["mlir_s"], row["mlir_rss"] = mlir
            row["speedup_vs_mlir"] = mlir[0] / dt
    return row


def big_end_to_end(n: int = 25_000_000) -> dict:
    """Load BIR-JSON, unroll, verify the count, save in the store format; in this (child) process."""
    from tusk.ir import bir_json

    mt, nt, kt = 100, 100, n // (3 * 100 * 100)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "nest.json"
        bir_json.save(matmul_nest(mt, nt, kt), src)
        t0 = time.perf_counter()
        m = bir_json.load(src)
        t_load = time.perf_counter()
        dt, out = unroll_seconds(m)
        count = out.n_insts()
        assert count == 3 * mt * nt * kt, count
        t_unroll = time.perf_counter()
        saved = _save_store(out, Path(tmp) / "store")
        t_save = time.perf_counter()
    return {"insts": count, "load_s": t_load - t0, "unroll_s": dt, "save_s": t_save - t_unroll,
            "total_s": t_save - t0, "store_bytes": saved,
            "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}


def ceiling_case(total: int, predicated: bool) -> dict:
    """FullUnroll level 2 of a loop producing exactly ``total`` instructions, for real.

    With ``predicated`` every clone carries an always-true predicate, so the
    count is only known after the clones' predicates are evaluated (no
    shortcut from trip counts).
    """
    from tusk.ir.errors import PassError
    from tusk.ir.expr import AffinePredicate
    from tusk.stages.full_unroll import FullUnroll

    b = Builder("ceiling")
    t = b.sbuf("t", (128, 4), addr=0)
    y = b.dram("y", (128, 4), kind="ExternalOutput")  # every clone writes an output: DCE keeps them all
    with b.loop("i", 0, total) as i:
        b.dma(y.ap(), t.ap(), pred=[AffinePredicate(i, "ge")] if predicated else ())
    t0 = time.perf_counter()
    try:
        out, _ = FullUnroll(level=2).run(b.module())
        result = f"passed with {out.n_insts()} instructions"
    except PassError as e:
        result = f"failed: {e}"
    return {"total": total, "predicated": predicated, "result": result, "seconds": time.perf_counter() - t0,
            "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}


def _save_store(m: Module, root: Path) -> int:
    """Put the module in the project's content-addressed store; the bytes it takes."""
    from tusk.cache.store import Store

    Store(str(root)).put(m)
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def prefault(gib: float) -> None:
    """Touch ``gib`` GiB once.  On this VM the first touch of never-used guest memory costs
    ~1 ms per MB (the hypervisor maps pages lazily); without this, whichever size runs first
    pays it.  Later allocations in the process reuse the mapped pages."""
    block = np.ones(int(gib * 2**30) // 8)
    del block


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-prefault", action="store_true", help="do not pre-touch memory before timing")
    ap.add_argument("--sizes", default="1e4,1e5,1e6,1e7")
    ap.add_argument("--big", action="store_true", help="also run the 25M end-to-end case in a child process")
    ap.add_argument("--ceiling", action="store_true",
                    help="run FullUnroll for real at 24,999,999 (passes) and 25,000,000 (fails) instructions")
    ap.add_argument("--child-big", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--child-ceiling", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child_big:
        prefault(6)
        print(json.dumps(big_end_to_end()))
        return
    if args.child_ceiling:
        total, predicated = args.child_ceiling.split(",")
        prefault(4)
        print(json.dumps(ceiling_case(int(total), predicated == "1")))
        return
    if not args.no_prefault:
        prefault(4)
    print(f"{'target':>10} {'insts':>10} {'unroll s':>9} {'insts/s':>11} {'B/inst':>7} {'floor s':>8} "
          f"{'x floor':>8} {'mlir s':>8} {'x faster than mlir':>19}")
    for text in args.sizes.split(","):
        r = one_size(int(float(text)))
        mlir = f"{r['mlir_s']:8.2f} {r['speedup_vs_mlir']:19.1f}" if "mlir_s" in r else f"{'-':>8} {'-':>19}"
        print(f"{r['target']:>10} {r['insts']:>10} {r['unroll_s']:9.3f} {r['insts_per_s']:11.0f} "
              f"{r['bytes_per_inst']:7.1f} {r['floor_s']:8.4f} {r['vs_floor']:8.1f} {mlir}")
    if args.big:
        proc = subprocess.run([sys.executable, __file__, "--child-big"], capture_output=True, text=True)
        if proc.returncode != 0:
            print("25M end-to-end failed:\n" + proc.stderr[-3000:])
            return
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        print(f"25M end to end: {r['insts']} instructions, load {r['load_s']:.2f} s, unroll {r['unroll_s']:.2f} s, "
              f"save {r['save_s']:.2f} s, total {r['total_s']:.2f} s (target < 20 s), peak RSS "
              f"{r['peak_rss_gib']:.2f} GiB (target < 8), store {r['store_bytes'] / 2**20:.1f} MiB")
    if args.ceiling:
        for case in ("24999999,0", "25000000,1"):
            proc = subprocess.run([sys.executable, __file__, "--child-ceiling", case], capture_output=True, text=True)
            if proc.returncode != 0:
                print(f"ceiling case {case} crashed:\n" + proc.stderr[-2000:])
                continue
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            print(f"FullUnroll level 2 at {r['total']:,} instructions ({'predicated' if r['predicated'] else 'plain'}): "
                  f"{r['result'][:90]} in {r['seconds']:.1f} s, peak RSS {r['peak_rss_gib']:.2f} GiB")


if __name__ == "__main__":
    main()
