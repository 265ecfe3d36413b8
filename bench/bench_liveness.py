"""Liveness on a realistic module: the fast paths of ``ir.liveness.instances`` and of the live-overlap check
against the general ones, same function, same process, printed (never asserted).

    python bench/bench_liveness.py [--mt 32 --kt 100 --nt 32] [--reps 5]

The module: ``examples.bir_kernels.large_matmul(MT, KT, NT)`` unrolled, its edges built and scheduled, PSUM
and SB rotated (what the verifier and the post-schedule rotation meet; the defaults give 309,248 rows).
Printed, CPU seconds, medians of ``--reps``:

1. ``instances`` (SB+PSUM with group kills, and PSUM alone) on the function as the pipeline lays it out
   (operand table in instruction order, reads listed before writes: the fast paths) against the same
   function with its operand table relaid (blocks last-first, each block reversed: the general sort);
   both give the same instances (checked here, and in tests/test_liveness.py);
2. the verifier's live-overlap check with its first question (do any two accessed SB/PSUM locations share
   bytes?) against the check without it.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from tusk import stages
from tusk.examples.bir_kernels import large_matmul
from tusk.ir import verify as verifier
from tusk.ir.enums import FnAttr, Mem
from tusk.ir.liveness import instances
from tusk.workflows.malloc_setup import keep_freed_memory


def module(mt: int, kt: int, nt: int):
    m, _ = large_matmul(mt, kt, nt)
    for fn in m.functions:
        fn.attrs |= {FnAttr.ROTATE_PSUM_AND_SB}
    for name in ("unroll", "address_rotation_psum", "address_rotation_sb", "build_fdeps", "schedule"):
        m, _ = stages.make_pass(name).run(m)
    return max(m.functions, key=lambda f: len(f.insts))


def relaid(fn):
    """``fn`` with its operand blocks stored last-first and each reversed (writes before reads)."""
    starts, counts = fn.insts["ops"].astype(np.int64), fn.insts["nops"].astype(np.int64)
    perm = np.concatenate([np.arange(s, s + c)[::-1] for s, c in zip(starts[::-1], counts[::-1])])
    out = fn.copy()
    out.operands = fn.operands.take(perm)
    out.insts["ops"][:] = np.concatenate([[0], np.cumsum(counts[::-1])[:-1]])[::-1]
    return out, perm


def cpu(f, reps: int) -> float:
    times = []
    for _ in range(reps):
        t = time.process_time()
        f()
        times.append(time.process_time() - t)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mt", type=int, default=32)
    ap.add_argument("--kt", type=int, default=100)
    ap.add_argument("--nt", type=int, default=32)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    keep_freed_memory()  # as tusk compile and its workers run
    fn = module(args.mt, args.kt, args.nt)
    slow, perm = relaid(fn)
    print(f"function of {len(fn.insts):,} rows, {len(fn.operands):,} operands, {len(fn.memlocs)} memory locations")
    for spaces, label in (((Mem.SB, Mem.PSUM), "SB+PSUM, group kills"), ((Mem.PSUM,), "PSUM, group kills")):
        a, b = instances(fn, spaces, groups=True), instances(slow, spaces, groups=True)
        same = np.array_equal(a.i_memloc, b.i_memloc) and np.array_equal(a.a_op, perm[b.a_op])
        fast = cpu(lambda: instances(fn, spaces, groups=True), args.reps)
        general = cpu(lambda: instances(slow, spaces, groups=True), args.reps)
        print(f"instances ({label}): laid out {fast:.3f} s, relaid {general:.3f} s: {general / fast:.2f}x "
              f"(same instances: {same})")
    with_q = cpu(lambda: verifier._check_live_overlap(fn), args.reps)
    first, verifier._may_overlap = verifier._may_overlap, lambda f: True
    try:
        without = cpu(lambda: verifier._check_live_overlap(fn), args.reps)
    finally:
        verifier._may_overlap = first
    print(f"live-overlap check: with its first question {with_q:.3f} s, without {without:.3f} s: "
          f"{without / max(with_q, 1e-9):.1f}x (any two locations share bytes: {first(fn)})")


if __name__ == "__main__":
    main()
