"""IR construction, memory and BIR-JSON throughput, printed (never asserted).

    python bench/bench_ir.py [--n 1000000]

* build a function of N straight-line instructions with 3 operands each, three
  ways: the Builder (one call per instruction, what tests and examples use),
  Function.add_inst (row tuples), and Table.extend (whole columns at once);
* bytes per instruction of the result (targets: < 150 B and < 2 s for 1M);
* BIR-JSON save and load throughput in instructions per second, and the ratio
  against json.dumps / json.loads of the same records as plain dicts.
"""

from __future__ import annotations

import argparse
import io
import json
import time

import numpy as np

from tusk.ir import bir_json
from tusk.ir.builder import Builder
from tusk.ir.enums import Dt, Engine, Kind, Op, Role
from tusk.ir.module import Function, Module


def tensors(b: Builder):
    a = b.sbuf("a", (128, 512), addr=0)
    c = b.sbuf("c", (128, 512), addr=2048)
    d = b.sbuf("d", (128, 512), addr=4096)
    return a, c, d


def with_builder(n: int) -> Function:
    b = Builder("bench")
    a, c, d = tensors(b)
    for k in range(n):
        b.tensor_tensor(d.tile(0, 128, k % 256, 256), a.ap(), c.ap(), "add")
    return b.function()


def interned() -> tuple:
    """A function with the three tensors, and the pool ids every instruction of the bench shares."""
    b = Builder("bench")
    a, c, d = tensors(b)
    fn = b.fn
    ids = (fn.pattern_id(((512, 128), (1, 512))), fn.pattern_id(((512, 128), (1, 256))),
           fn.intern_record({"op": "add"}), fn.s("tt"))
    return fn, (a.memlocs[0], c.memlocs[0], d.memlocs[0]), ids


def with_add_inst(n: int) -> Function:
    fn, (ma, mc, md), (pat, half, attrs, name) = interned()
    for k in range(n):
        fn.add_inst(Op.TensorTensor, Engine.DVE, 0, name, [
            (Role.IN, Kind.PHYSICAL, Dt.float32, ma, 0, pat, -1, -1, -1),
            (Role.IN, Kind.PHYSICAL, Dt.float32, mc, 0, pat, -1, -1, -1),
            (Role.OUT, Kind.PHYSICAL, Dt.float32, md, k % 256, half, -1, -1, -1)], attrs=attrs, iteration=k)
    fn.insts.flush()
    fn.operands.flush()
    return fn


def with_extend(n: int) -> Function:
    fn, (ma, mc, md), (pat, half, attrs, name) = interned()
    k = np.arange(n)
    fn.insts.extend(n, opcode=Op.TensorTensor, engine=Engine.DVE, block=0, name=name, iter=k, attrs=attrs,
                    ops=3 * k, nops=3, pred=-1)
    m = np.empty(3 * n, np.int32)
    m[0::3], m[1::3], m[2::3] = ma, mc, md
    off = np.zeros(3 * n, np.int64)
    off[2::3] = k % 256
    p = np.full(3 * n, pat, np.int32)
    p[2::3] = half
    role = np.tile(np.array([Role.IN, Role.IN, Role.OUT], np.uint8), n)
    fn.operands.extend(3 * n, role=role, kind=Kind.PHYSICAL, dtype=Dt.float32, memloc=m, offset=off, pattern=p,
                       aux=-1, dyn=-1, extra=-1)
    return fn


def nbytes(fn: Function) -> int:
    return sum(getattr(fn, t).nbytes() for t in ("insts", "operands", "memlocs", "sets", "regs", "blocks", "deps",
                                                   "carried"))


def timed(f, *a):
    t0 = time.perf_counter()
    out = f(*a)
    return time.perf_counter() - t0, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1_000_000)
    args = ap.parse_args()
    n = args.n
    small = max(n // 10, 1)
    t_b, fb = timed(with_builder, small)
    t_a, fa = timed(with_add_inst, n)
    t_e, fe = timed(with_extend, n)
    print(f"build {small:>9} insts with Builder        : {t_b:6.2f} s  ({small / t_b:10.0f} insts/s)")
    print(f"build {n:>9} insts with Function.add_inst: {t_a:6.2f} s  ({n / t_a:10.0f} insts/s)  target < 2 s")
    print(f"build {n:>9} insts with Table.extend     : {t_e:6.2f} s  ({n / t_e:10.0f} insts/s)")
    print(f"bytes per instruction (3 operands)        : {nbytes(fe) / n:6.1f}  target < 150")
    m = Module([fe])
    buf = io.StringIO()
    t_save, _ = timed(bir_json.write, m, buf)
    text = buf.getvalue()
    t_load, _ = timed(bir_json.loads, text)
    doc = json.loads(text)
    t_dumps, _ = timed(json.dumps, doc)
    t_loads, _ = timed(json.loads, text)
    print(f"BIR-JSON save: {n / t_save:10.0f} insts/s ({len(text) / 2**20 / t_save:6.1f} MB/s); json.dumps of the "
          f"same records: {n / t_dumps:10.0f} insts/s; ratio {t_save / t_dumps:5.2f}x")
    print(f"BIR-JSON load: {n / t_load:10.0f} insts/s ({len(text) / 2**20 / t_load:6.1f} MB/s); json.loads of the "
          f"same text   : {n / t_loads:10.0f} insts/s; ratio {t_load / t_loads:5.2f}x")


if __name__ == "__main__":
    main()
