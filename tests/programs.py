"""Programs the tests share, written with ir.builder."""

from __future__ import annotations

from tusk.ir.builder import Builder
from tusk.ir.expr import AffinePredicate
from tusk.ir.module import Module


def tiled_exp_module(tiles: int = 4, width: int = 64) -> Module:
    """load tile i, exp, store: the double-buffering candidate."""
    b = Builder("main")
    x = b.dram("x", (128 * tiles, width), kind="ExternalInput")
    y = b.dram("y", (128 * tiles, width), kind="ExternalOutput")
    t = b.sbuf("t", (128, width), addr=0)
    with b.loop("i", 0, tiles) as i:
        load = b.dma(t.ap(), x.tile(i * 128, 128, 0, width))
        act = b.activation(t.ap(), t.ap(), "Exp")
        store = b.dma(y.tile(i * 128, 128, 0, width), t.ap())
        b.dep(load, act)
        b.dep(act, store)
    return b.module()


def every_family_module() -> Module:
    """One instruction of every family the builder emits."""
    b = Builder("main")
    a = b.dram("a", (128, 64), kind="ExternalInput")
    w = b.dram("w", (128, 128), kind="ExternalInput")
    out = b.dram("out", (128, 64), kind="ExternalOutput")
    ta = b.sbuf("ta", (128, 64), addr=0)
    tb = b.sbuf("tb", (128, 64), addr=256)
    tw = b.sbuf("tw", (128, 128), addr=512)
    col = b.sbuf("col", (128, 1), addr=1024)
    blk = b.sbuf("blk", (128, 64), addr=2048, blocks=2)
    ps = b.psum("ps", (128, 64), addr=0)
    r = b.register("r0")
    b.dma(ta.ap(), a.ap())
    b.dma(tw.ap(), w.ap())
    b.memset(tb.ap(), 0.5)
    b.iota(col.ap(), 0, [[1, 1]], 1)
    b.tensor_tensor(tb.ap(), ta.ap(), tb.ap(), "mult")
    b.tensor_scalar(tb.ap(), tb.ap(), "add", 1.0, "mult", 2.0)
    b.tensor_scalar_ptr(tb.ap(), tb.ap(), col.ap(), "add")
    b.activation(ta.ap(), tb.ap(), "Exp", scale=0.5, bias=col.ap())
    b.reduce(col.ap(), ta.ap(), "max")
    b.copy(ta.ap(), tb.ap())
    b.matmul(ps.ap(), tw.ap(), ta.ap())
    b.copy(tb.ap(), ps.ap(), engine="Activation")
    b.register_move(r, 3)
    b.register_alu(r, r, "add", 2)
    with b.loop("i", 0, 2) as i:
        b.copy(blk.ap(block=i), tb.ap())
        b.tensor_tensor(ta.ap(), blk.ap(block=i), ta.ap(), "add", pred=[AffinePredicate(i - 1, "ge")])
    b.dma(out.ap(), ta.ap())
    return b.module()
