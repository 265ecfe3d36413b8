"""The affine nest both benchmarks unroll, for Tusk (BIR) and for MLIR (affine dialect), like for like.

Per innermost iteration (mi, ni, ki), four operations with nine operands and results on each side:

=========================================  ==========================================
Tusk (BIR instruction: ins -> outs)        MLIR (op: operands -> results)
=========================================  ==========================================
DMACopy   A[ki, mi] tile   -> ta (SB)      affine.load  %A[ki*128, mi*128] -> %a
DMACopy   B[ki, ni] tile   -> tb (SB)      affine.load  %B[ki*128, ni*128] -> %b
Matmult   ta, tb           -> ps (PSUM)    arith.mulf   %a, %b            -> %c
DMACopy   ps               -> C[mi, ni]    affine.store %c -> %C[mi*128, ni*128]
=========================================  ==========================================

(MLIR's index operands are its addresses; a BIR operand carries its address in
the access pattern.)  The store to the external output keeps every
instruction alive through FullUnroll's DCE.  MLIR's unroller adds one
``affine.apply`` per unrolled iteration of its own.
"""

from __future__ import annotations

from tusk.ir.builder import Builder
from tusk.ir.enums import FnAttr
from tusk.ir.module import Module

OPS_PER_ITERATION = 4


def shape_for(n: int) -> tuple[int, int, int]:
    """(mt, nt, kt) with about ``n`` instructions once unrolled (``n`` may be written 1e6: loop trip counts
    must be ints, or the unroller refuses the nest)."""
    iters = max(int(n) // OPS_PER_ITERATION, 1)
    side = max(int(round(iters ** (1 / 3))), 1)
    return side, side, max(iters // (side * side), 1)


def tusk_nest(mt: int, nt: int, kt: int) -> Module:
    b = Builder("nest")
    at = b.dram("at", (kt * 128, mt * 128), kind="ExternalInput")
    bb = b.dram("b", (kt * 128, nt * 128), kind="ExternalInput")
    c = b.dram("c", (mt * 128, nt * 128), kind="ExternalOutput")
    ta = b.sbuf("ta", (128, 128), addr=0)
    tb = b.sbuf("tb", (128, 128), addr=512)
    ps = b.psum("ps", (128, 128), addr=0)
    with b.loop("mi", 0, mt) as mi:
        with b.loop("ni", 0, nt) as ni:
            with b.loop("ki", 0, kt) as ki:
                b.dma(ta.ap(), at.tile(ki * 128, 128, mi * 128, 128), name="load_a")
                b.dma(tb.ap(), bb.tile(ki * 128, 128, ni * 128, 128), name="load_b")
                b.matmul(ps.ap(), ta.ap(), tb.ap(), accumulate=ki, name="mm")
                b.dma(c.tile(mi * 128, 128, ni * 128, 128), ps.ap(), name="store")
    m = b.module()
    m.functions[0].attrs |= {FnAttr.UNROLLABLE, FnAttr.MARKED_TO_UNROLL}
    return m


MLIR_NEST = """func.func @nest(%A: memref<{K}x{M}xf32>, %B: memref<{K}x{N}xf32>, %C: memref<{M}x{N}xf32>) {{
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


def mlir_nest(mt: int, nt: int, kt: int) -> str:
    return MLIR_NEST.format(mt=mt, nt=nt, kt=kt, M=mt * 128, N=nt * 128, K=kt * 128)
