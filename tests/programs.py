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


def eight_tiles(slots: int):
    """The 8-tile load -> exp -> store kernel after full unroll, its tiles rotating over ``slots`` SB slots,
    with its dependence edges (the timing model's yardstick)."""
    from tusk.stages.deps import build_fdeps

    b = Builder()
    x = b.dram("x", (128 * 8, 512), kind="ExternalInput")
    y = b.dram("y", (128 * 8, 512), kind="ExternalOutput")
    ts = [b.sbuf(f"t{k}", (128, 512), addr=2048 * k) for k in range(slots)]
    for i in range(8):
        t = ts[i % slots]
        b.dma(t.ap(), x.tile(i * 128, 128, 0, 512))
        b.activation(t.ap(), t.ap(), "Exp")
        b.dma(y.tile(i * 128, 128, 0, 512), t.ap())
    return build_fdeps(b.function())


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


def recurring_buffers_module(steps, tiles: int = 4, attrs=(9,)) -> Module:
    """A straight-line kernel from hypothesis-drawn ``steps`` over recurring SB/PSUM buffers.

    Buffers: ``a`` (128 partitions), ``b`` (partitions 32..63), ``c`` (64..127) in SB and ``p`` in PSUM;
    every step is one of
      ("load", buf, k)        buf = x tile k                    (a kill: a new instance)
      ("exp", buf)            buf = exp(buf)                    (in place)
      ("add", dst, src)       dst = dst + src                   (read-modify-write)
      ("copy", dst, src)      dst = src                         (a kill unless dst is src)
      ("half", buf, v)        the first half of buf's columns = v (a partial write)
      ("mm", acc)             p (+)= a[:, :16]^T @ a            (accumulate when acc)
      ("evict", buf)          buf[:, :16] = p[:16 partitions]
      ("store", buf, k)       y tile k = buf
    and every buffer is stored at the end, so every value is observable.
    """
    b = Builder("main", attrs=attrs)
    x = b.dram("x", (128 * tiles, 32), kind="ExternalInput")
    y = b.dram("y", (128 * (tiles + 3), 32), kind="ExternalOutput")
    bufs = {"a": b.sbuf("a", (128, 32), addr=0), "b": b.sbuf("b", (32, 32), addr=4096, base=32),
            "c": b.sbuf("c", (64, 32), addr=8192, base=64)}
    p = b.psum("p", (16, 32), addr=0)
    rows = {"a": 128, "b": 32, "c": 64}

    def full(name):
        return bufs[name].ap()

    def rows_of(name, other):
        n = min(rows[name], rows[other])
        return bufs[name].tile(0, n, 0, 32), bufs[other].tile(0, n, 0, 32)

    for step in steps:
        op = step[0]
        if op == "load":
            _, name, k = step
            b.dma(full(name), x.tile(k * 128, rows[name], 0, 32))
        elif op == "exp":
            b.activation(full(step[1]), full(step[1]), "Exp")
        elif op == "add":
            d, s = rows_of(step[1], step[2])
            b.tensor_tensor(d, d, s, "add")
        elif op == "copy":
            d, s = rows_of(step[1], step[2])
            b.copy(d, s)
        elif op == "half":
            b.memset(bufs[step[1]].tile(0, rows[step[1]], 0, 16), float(step[2]))
        elif op == "mm":
            a = bufs["a"]
            b.matmul(p.ap(), a.tile(0, 128, 0, 16), a.ap(), accumulate=int(step[1]))
        elif op == "evict":
            b.copy(bufs[step[1]].tile(0, 16, 0, 16), p.tile(0, 16, 0, 16), engine="Activation")
        elif op == "store":
            _, name, k = step
            b.dma(y.tile(k * 128, rows[name], 0, 32), full(name))
    for k, name in enumerate(("a", "b", "c")):
        b.dma(y.tile((tiles + k) * 128, rows[name], 0, 32), full(name))
    return b.module()
