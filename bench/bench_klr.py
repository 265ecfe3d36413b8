"""Throughput of the KLR reader and writer on a large, realistic LncKernel.

Builds a ~10 MB ``.klr`` payload from repeated front-end-like statements
(ncDmaCopy / tensorTensor / ncActivate / tensorScalar on birPattern accesses,
some with scalar or vector offsets), writes it with ``write_klr``, then times
``read_klr`` and ``write_klr`` (best of 5 runs) against two byte-scan
floors measured in the same run:

* a tight pure-Python ``for b in data: total += b`` loop -- the physical floor
  for any parser that touches every byte in Python;
* ``numpy`` summing the same bytes (``np.frombuffer(data, uint8).sum()``) -- a
  C-speed memory scan, for scale.

Run:  PYTHONPATH=. python bench/bench_klr.py [target_megabytes]
Prints results; asserts nothing.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from tusk.ir.klr import read_klr, write_klr
from tusk.ir.klr import types as T

_DTYPE_BYTES = {T.Dtype.bfloat16: 2, T.Dtype.float32: 4, T.Dtype.int32: 4}


def tensor(name: str, dtype, par: int, free: int, memory, offset: int | None) -> T.TensorName:
    """A 2-D TensorName as the front end writes it (sbuf tiles placed, hbm not)."""
    size = free * _DTYPE_BYTES[dtype]
    return T.TensorName(
        name=name,
        dtype=dtype,
        shape=T.Shape(parDim=par, freeDims=(free,)),
        address=T.Address(
            name=name, memory=memory, parSize=par, freeSize=size,
            parOffset=None if offset is None else 0, freeOffset=offset, isShared=False,
        ),
        freeElements=free,
        addressRotation=False,
    )


def bir(t: T.TensorName, offset: int = 0, *, scalar=None, vector=None) -> T.TensorRef:
    """TensorRef.abstract(Access.birPattern(...)) over a whole 2-D tile."""
    free = t.shape.freeDims[0]
    return T.TensorRef.abstract(access=T.Access.birPattern(access=T.BirAccessPattern(
        tensor=t, offset=offset,
        pattern=(T.APPair(step=free, num=t.shape.parDim, offset=0), T.APPair(step=1, num=free, offset=0)),
        scalarOffset=scalar, vectorOffset=vector, indirectDim=0, dtypeOverride=None,
    )))


def statements(n_groups: int):
    """n_groups x 6 statements: load, load, add, activation, scale, store."""
    hbm_in = [tensor(f"in{i}", T.Dtype.bfloat16, 4096, 512, T.Memory.hbm, None) for i in range(4)]
    hbm_out = tensor("out0", T.Dtype.float32, 4096, 512, T.Memory.hbm, None)
    tiles = [tensor(f"t{i}", T.Dtype.float32, 128, 512, T.Memory.sbuf, 2048 * (i % 48)) for i in range(96)]
    idx = tensor("idx", T.Dtype.int32, 128, 1, T.Memory.sbuf, 0)
    pos = lambda line: T.Pos(line=line, column=4, lineEnd=None, columnEnd=None, filename="kernel.py")
    dma = lambda dst, src: T.Operator.ncDmaCopy(op=T.NcDmaCopy(
        dst=dst, src=src, compute_op=T.DgeComputeOp.none, oobMode=T.DmaBounds.error(),
        dgeMode=0, uniqueIndices=False, priority=None, engine=T.Engine.unassigned))
    out = []
    for g in range(n_groups):
        a, b, c = tiles[(3 * g) % 96], tiles[(3 * g + 1) % 96], tiles[(3 * g + 2) % 96]
        row = (g % 32) * 128 * 512
        src = hbm_in[g % 4]
        scalar = T.ScalarOffset.reg(r="reg.1") if g % 7 == 0 else None
        vector = T.Access.birPattern(access=bir(idx).access.access) if g % 11 == 0 else None
        ops = [
            dma(bir(a), bir(src, row, scalar=scalar)),
            dma(bir(b), bir(hbm_in[(g + 1) % 4], row, vector=vector)),
            T.Operator.tensorTensor(op=T.TensorTensor(
                dst=bir(c), src0=bir(a), src1=bir(b), op=T.AluOp.add, dtype=None, engine=T.Engine.dve)),
            T.Operator.ncActivate(op=T.NcActivate(
                dst=bir(a), src=bir(c), accumulatorCmd=T.AccumCmd.Idle, activationFunc=T.ActivationFunc.exp,
                scale=T.Operand.imm(i=T.Immediate.float32(f=1.0)), bias=None, reduceOp=None,
                reduceRes=None, dtype=None)),
            T.Operator.tensorScalar(op=T.TensorScalar(
                dst=bir(b), src=bir(a), imm0=T.Operand.imm(i=T.Immediate.float32(f=0.5)), op0=T.AluOp.mult,
                imm1=T.Operand.imm(i=T.Immediate.int32(i=-3)), op1=T.AluOp.add,
                reverse=T.TensorScalarReverseOps.none, engine=T.Engine.unassigned, dtype=T.Dtype.float32)),
            dma(bir(hbm_out, row), bir(b)),
        ]
        for k, op in enumerate(ops):
            out.append(T.Stmt.oper(op=op, name=f"inst.{6 * g + k}", pos=pos(10 + k)))
    return hbm_in, hbm_out, out


def build_kernel(target_bytes: int) -> tuple[T.LncKernel, int]:
    """An LncKernel whose encoding is about `target_bytes`; returns (kernel, #operators)."""
    probe_in, probe_out, probe = statements(10)
    per_group = len(write_klr(_kernel(probe_in, probe_out, probe))) / 10
    groups = max(1, int(target_bytes / per_group))
    hbm_in, hbm_out, stmts = statements(groups)
    return _kernel(hbm_in, hbm_out, stmts), len(stmts)


def _kernel(inputs, output, stmts) -> T.LncKernel:
    blocks = tuple(
        T.Block(label=f"main.{i // 600 + 1}", noReorder=False, body=tuple(stmts[i:i + 600]))
        for i in range(0, len(stmts), 600)
    )
    return T.LncKernel(name="bench_kernel", inputs=tuple(inputs), outputs=(output,), bodies=(blocks,),
                       sharedConstants=(), sharedBuffers=(), edges=())


def best_of(runs: int, fn) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(runs):
        t = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t)
    return best, result


def python_byte_loop(data: bytes) -> int:
    total = 0
    for b in data:
        total += b
    return total


def main() -> None:
    target_mb = float(sys.argv[1]) if len(sys.argv) > 1 else 10.0
    t = time.perf_counter()
    kernel, n_ops = build_kernel(int(target_mb * 1e6))
    build_s = time.perf_counter() - t
    data = write_klr(kernel)
    mb = len(data) / 1e6

    # Best of several runs: the minimum is the least disturbed by other load.
    t_read, file = best_of(5, lambda: read_klr(data))
    t_write, again = best_of(5, lambda: write_klr(file))
    t_loop, total_loop = best_of(5, lambda: python_byte_loop(data))
    t_np, total_np = best_of(9, lambda: int(np.frombuffer(data, dtype=np.uint8).sum(dtype=np.uint64)))
    same = again == data and file.contents.kernel == kernel and total_loop == total_np

    print(f"payload: {mb:.2f} MB, {n_ops} operators (built in {build_s:.2f} s); round trip identical: {same}")
    rows = [
        ("read_klr", t_read),
        ("write_klr", t_write),
        ("pure-Python byte loop (for b in data: total += b)", t_loop),
        ("numpy uint8 sum", t_np),
    ]
    for label, secs in rows:
        print(f"  {label:52s} {secs * 1e3:9.1f} ms  {mb / secs:9.1f} MB/s  {n_ops / secs:12,.0f} ops/s")
    print(f"  read  / Python byte loop: {t_read / t_loop:6.2f}x the time   "
          f"read  / numpy sum: {t_read / t_np:8.0f}x")
    print(f"  write / Python byte loop: {t_write / t_loop:6.2f}x the time   "
          f"write / numpy sum: {t_write / t_np:8.0f}x")


if __name__ == "__main__":
    main()
