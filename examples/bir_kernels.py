"""Tensorizer-style kernels: BIR-JSON with InstLoop nests (what the Unroll passes exist for).

Every kernel is already allocated (fixed SBUF/PSUM placements), its DRAM
arguments are ExternalInput / ExternalOutput tensors, and its function is
marked unrollable and marked-to-unroll (attributes 2 and 1) and for PSUM and
SB address rotation (attribute 9), as the tensorizer hands it over.  Each
builder returns the module and a numpy reference of what the kernel
computes.  The ``*_large`` kernels and ``tiled_add`` / ``tiled_rmsnorm``
have 64 to 128 tiles: enough for rotation and scheduling to matter.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from tusk.ir.builder import Builder
from tusk.ir.enums import FnAttr
from tusk.ir.expr import AffinePredicate
from tusk.ir.module import Module

Reference = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]
TENSORIZER_ATTRS = (FnAttr.UNROLLABLE, FnAttr.MARKED_TO_UNROLL, FnAttr.ROTATE_PSUM_AND_SB)


def _builder(name: str) -> Builder:
    return Builder(name, attrs=TENSORIZER_ATTRS)


def tiled_exp(tiles: int = 16, width: int = 512) -> tuple[Module, Reference]:
    """y = exp(x), tile by tile through one reused SBUF buffer: the double-buffering candidate."""
    b = _builder("tiled_exp")
    x = b.dram("x", (128 * tiles, width), kind="ExternalInput")
    y = b.dram("y", (128 * tiles, width), kind="ExternalOutput")
    t = b.sbuf("t", (128, width), addr=0)
    with b.loop("i", 0, tiles) as i:
        b.dma(t.ap(), x.tile(i * 128, 128, 0, width), name="load")
        b.activation(t.ap(), t.ap(), "Exp", name="exp")
        b.dma(y.tile(i * 128, 128, 0, width), t.ap(), name="store")
    return b.module(), lambda inp: {"y": np.exp(inp["x"].astype(np.float32))}


def tiled_add(tiles: int = 128, width: int = 256) -> tuple[Module, Reference]:
    """c = a + b over 128 row tiles: two loads, a DVE add and a store per tile (elementwise, DMA-bound)."""
    b = _builder("tiled_add")
    a = b.dram("a", (128 * tiles, width), kind="ExternalInput")
    bb = b.dram("b", (128 * tiles, width), kind="ExternalInput")
    c = b.dram("c", (128 * tiles, width), kind="ExternalOutput")
    ta = b.sbuf("ta", (128, width), addr=0)
    tb = b.sbuf("tb", (128, width), addr=4 * width)
    tc = b.sbuf("tc", (128, width), addr=8 * width)
    with b.loop("i", 0, tiles) as i:
        b.dma(ta.ap(), a.tile(i * 128, 128, 0, width), name="load_a")
        b.dma(tb.ap(), bb.tile(i * 128, 128, 0, width), name="load_b")
        b.tensor_tensor(tc.ap(), ta.ap(), tb.ap(), "add", name="add")
        b.dma(c.tile(i * 128, 128, 0, width), tc.ap(), name="store")
    return b.module(), lambda inp: {"c": inp["a"].astype(np.float32) + inp["b"].astype(np.float32)}


def tiled_matmul(m: int = 512, k: int = 512, n: int = 512, name: str = "tiled_matmul") -> tuple[Module, Reference]:
    """C[m, n] = A[m, k] @ B[k, n] with A given transposed (AT[k, m]), 128-wide tiles, PSUM accumulation over K."""
    mt, kt = m // 128, k // 128
    b = _builder(name)
    at = b.dram("at", (k, m), kind="ExternalInput")
    bb = b.dram("b", (k, n), kind="ExternalInput")
    c = b.dram("c", (m, n), kind="ExternalOutput")
    ta = b.sbuf("ta", (128, 128), addr=0)
    tb = b.sbuf("tb", (128, n), addr=512)
    tc = b.sbuf("tc", (128, n), addr=512 + 4 * n)
    ps = b.psum("ps", (128, n), addr=0)
    with b.loop("mi", 0, mt) as mi:
        with b.loop("ki", 0, kt) as ki:
            b.dma(ta.ap(), at.tile(ki * 128, 128, mi * 128, 128), name="load_a")
            b.dma(tb.ap(), bb.tile(ki * 128, 128, 0, n), name="load_b")
            # accumulate onto PSUM from the second K tile on (MaybeAffine flag = ki)
            b.matmul(ps.ap(), ta.ap(), tb.ap(), accumulate=ki, name="mm")
        b.copy(tc.ap(), ps.ap(), engine="Activation", name="evict")
        b.dma(c.tile(mi * 128, 128, 0, n), tc.ap(), name="store")
    return b.module(), lambda inp: {"c": inp["at"].T.astype(np.float32) @ inp["b"].astype(np.float32)}


def tiled_matmul_large() -> tuple[Module, Reference]:
    """C[2048, 512] = A[2048, 1024] @ B[1024, 512]: 128 matmul tiles accumulating over K in PSUM."""
    return tiled_matmul(2048, 1024, 512, name="tiled_matmul_large")


def tiled_softmax(tiles: int = 4, width: int = 256, name: str = "tiled_softmax") -> tuple[Module, Reference]:
    """Row softmax of x, one 128-row tile at a time."""
    b = _builder(name)
    x = b.dram("x", (128 * tiles, width), kind="ExternalInput")
    y = b.dram("y", (128 * tiles, width), kind="ExternalOutput")
    t = b.sbuf("t", (128, width), addr=0)
    mx = b.sbuf("mx", (128, 1), addr=4 * width)
    s = b.sbuf("s", (128, 1), addr=4 * width + 4)
    with b.loop("i", 0, tiles) as i:
        b.dma(t.ap(), x.tile(i * 128, 128, 0, width), name="load")
        b.reduce(mx.ap(), t.ap(), "max", name="rowmax")
        b.tensor_scalar(mx.ap(), mx.ap(), "mult", -1.0, name="negmax")
        b.activation(t.ap(), t.ap(), "Exp", bias=mx.ap(), name="exp")
        b.reduce(s.ap(), t.ap(), "add", name="rowsum")
        b.activation(s.ap(), s.ap(), "Reciprocal", name="recip")
        b.tensor_scalar_ptr(t.ap(), t.ap(), s.ap(), "mult", name="scale")
        b.dma(y.tile(i * 128, 128, 0, width), t.ap(), name="store")

    def ref(inp):
        xv = inp["x"].astype(np.float32)
        e = np.exp(xv - xv.max(axis=1, keepdims=True))
        return {"y": e / e.sum(axis=1, keepdims=True)}

    return b.module(), ref


def tiled_softmax_large() -> tuple[Module, Reference]:
    """Row softmax of x[8192, 256], 64 tiles: reductions, an Exp with a per-row bias, a per-row scale."""
    return tiled_softmax(64, 256, name="tiled_softmax_large")


RMS_EPS = 1e-6


def tiled_rmsnorm(tiles: int = 64, width: int = 512) -> tuple[Module, Reference]:
    """y = x * rsqrt(mean(x^2) + eps) * gamma, 64 row tiles: a square, a row sum, Rsqrt and two scalings."""
    b = _builder("tiled_rmsnorm")
    x = b.dram("x", (128 * tiles, width), kind="ExternalInput")
    gamma = b.dram("gamma", (1, width), kind="ExternalInput")
    y = b.dram("y", (128 * tiles, width), kind="ExternalOutput")
    row = 4 * width
    xt = b.sbuf("xt", (128, width), addr=0)
    sq = b.sbuf("sq", (128, width), addr=row)
    g = b.sbuf("g", (128, width), addr=2 * row)
    yt = b.sbuf("yt", (128, width), addr=3 * row)
    ss = b.sbuf("ss", (128, 1), addr=4 * row)
    rstd = b.sbuf("rstd", (128, 1), addr=4 * row + 16)
    b.dma(g.ap(), gamma.ap([[0, 128], [1, width]]), name="load_gamma")  # the gamma row on every partition
    with b.loop("i", 0, tiles) as i:
        b.dma(xt.ap(), x.tile(i * 128, 128, 0, width), name="load")
        b.tensor_tensor(sq.ap(), xt.ap(), xt.ap(), "mult", engine="Pool", name="square")
        b.reduce(ss.ap(), sq.ap(), "add", name="sum")
        b.tensor_scalar(rstd.ap(), ss.ap(), "mult", 1.0 / width, "add", RMS_EPS, name="mean")
        b.activation(rstd.ap(), rstd.ap(), "Rsqrt", name="rsqrt")
        b.tensor_scalar_ptr(yt.ap(), xt.ap(), rstd.ap(), "mult", name="normalise")
        b.tensor_tensor(yt.ap(), yt.ap(), g.ap(), "mult", engine="Pool", name="scale")
        b.dma(y.tile(i * 128, 128, 0, width), yt.ap(), name="store")

    def ref(inp):
        xv = inp["x"].astype(np.float32)
        ms = (xv * xv).sum(axis=1, keepdims=True, dtype=np.float32) * np.float32(1.0 / width) + np.float32(RMS_EPS)
        return {"y": xv * (np.float32(1) / np.sqrt(ms)) * inp["gamma"].astype(np.float32)}

    return b.module(), ref


def banded_exp(tiles: int = 16, width: int = 64) -> tuple[Module, Reference]:
    """y = exp(x) as four independent 32-partition streams (one per partition band): four SB rotation batches."""
    b = _builder("banded_exp")
    x = b.dram("x", (32 * tiles, 4 * width), kind="ExternalInput")
    y = b.dram("y", (32 * tiles, 4 * width), kind="ExternalOutput")
    ts = [b.sbuf(f"t{k}", (32, width), addr=0, base=32 * k) for k in range(4)]
    with b.loop("i", 0, tiles) as i:
        for k, t in enumerate(ts):
            b.dma(t.ap(), x.tile(32 * i, 32, width * k, width), name=f"load{k}")
            b.activation(t.ap(), t.ap(), "Exp", name=f"exp{k}")
            b.dma(y.tile(32 * i, 32, width * k, width), t.ap(), name=f"store{k}")
    return b.module(), lambda inp: {"y": np.exp(inp["x"].astype(np.float32))}


def block_tensor(blocks: int = 8, width: int = 128) -> tuple[Module, Reference]:
    """Stage x's tiles into a block tensor (one block per tile), then y[j] = blk[j] + blk[n-1-j]."""
    b = _builder("block_tensor")
    x = b.dram("x", (128 * blocks, width), kind="ExternalInput")
    y = b.dram("y", (128 * blocks, width), kind="ExternalOutput")
    blk = b.sbuf("blk", (128, width), addr=0, blocks=blocks)
    t = b.sbuf("t", (128, width), addr=4 * width * blocks)
    with b.loop("i", 0, blocks) as i:
        b.dma(blk.ap(block=i), x.tile(i * 128, 128, 0, width), name="stage")
    with b.loop("j", 0, blocks) as j:
        b.tensor_tensor(t.ap(), blk.ap(block=j), blk.ap(block=blocks - 1 - j), "add", name="mirror_add")
        b.dma(y.tile(j * 128, 128, 0, width), t.ap(), name="store")

    def ref(inp):
        tiles = inp["x"].reshape(blocks, 128, width)
        return {"y": (tiles + tiles[::-1]).reshape(blocks * 128, width)}

    return b.module(), ref


def predicated_accumulate(tiles: int = 6, width: int = 256) -> tuple[Module, Reference]:
    """acc = x[0] on the first iteration (predicate i == 0), acc += x[i] after (i - 1 >= 0)."""
    b = _builder("predicated_accumulate")
    x = b.dram("x", (128 * tiles, width), kind="ExternalInput")
    y = b.dram("y", (128, width), kind="ExternalOutput")
    t = b.sbuf("t", (128, width), addr=0)
    acc = b.sbuf("acc", (128, width), addr=4 * width)
    with b.loop("i", 0, tiles) as i:
        b.dma(t.ap(), x.tile(i * 128, 128, 0, width), name="load")
        b.copy(acc.ap(), t.ap(), name="init", pred=[AffinePredicate(i, "eq")])
        b.tensor_tensor(acc.ap(), acc.ap(), t.ap(), "add", name="accumulate", pred=[AffinePredicate(i - 1, "ge")])
    b.dma(y.ap(), acc.ap(), name="store")

    def ref(inp):
        tiles_ = inp["x"].astype(np.float32).reshape(tiles, 128, width)
        acc_ = tiles_[0].copy()
        for k in range(1, tiles):
            acc_ = acc_ + tiles_[k]
        return {"y": acc_}

    return b.module(), ref


def large_matmul(mt: int = 64, kt: int = 100, nt: int = 64) -> tuple[Module, Reference | None]:
    """A matmul whose full unroll exceeds 1,000,000 instructions (benchmarks only)."""
    b = _builder("large_matmul")
    at = b.dram("at", (kt * 128, mt * 128), kind="ExternalInput")
    bb = b.dram("b", (kt * 128, nt * 512), kind="ExternalInput")
    c = b.dram("c", (mt * 128, nt * 512), kind="ExternalOutput")
    ta = b.sbuf("ta", (128, 128), addr=0)
    tb = b.sbuf("tb", (128, 512), addr=512)
    tc = b.sbuf("tc", (128, 512), addr=512 + 2048)
    ps = b.psum("ps", (128, 512), addr=0)
    with b.loop("mi", 0, mt) as mi:
        with b.loop("ni", 0, nt) as ni:
            with b.loop("ki", 0, kt) as ki:
                b.dma(ta.ap(), at.tile(ki * 128, 128, mi * 128, 128), name="load_a")
                b.dma(tb.ap(), bb.tile(ki * 128, 128, ni * 512, 512), name="load_b")
                b.matmul(ps.ap(), ta.ap(), tb.ap(), accumulate=ki, name="mm")
            b.copy(tc.ap(), ps.ap(), engine="Activation", name="evict")
            b.dma(c.tile(mi * 128, 128, ni * 512, 512), tc.ap(), name="store")
    return b.module(), None


CORPUS: dict[str, Callable[[], tuple[Module, Reference]]] = {
    "tiled_exp": tiled_exp,
    "tiled_matmul": tiled_matmul,
    "tiled_softmax": tiled_softmax,
    "block_tensor": block_tensor,
    "predicated_accumulate": predicated_accumulate,
    "tiled_add": tiled_add,
    "tiled_matmul_large": tiled_matmul_large,
    "tiled_softmax_large": tiled_softmax_large,
    "tiled_rmsnorm": tiled_rmsnorm,
    "banded_exp": banded_exp,
}
LARGE: dict[str, Callable[[], tuple[Module, Reference | None]]] = {"large_matmul": large_matmul}
