"""The KLR half of the shipped corpus: kernels as the NKI front end writes them.

Every kernel is allocated (SBUF/PSUM tensors placed, DRAM arguments not),
every operand is ``TensorRef.abstract(Access.birPattern ...)``, code is
straight-line (the tracer unrolls Python loops) except the dynamic loop,
which is blocks + registers + ``cmpBranch``.

* :func:`corpus_bytes` -- kernel name -> (``.klr`` bytes, one-line description,
  number of KLIR statements); ``examples/generate.py`` writes them.
* :func:`extra_files` -- other files the corpus needs, by path relative to
  ``examples/kernels/`` (the LNC=2 kernel's shared constant
  ``shared_constants/<sha256>.npy``).
* :data:`REFERENCES` -- numpy reference of each kernel (DRAM tensor name ->
  array, inputs to outputs); :func:`inputs_for` makes inputs, including the
  fixed ones (unique gather indices, loop counts).

The builders take sizes, so benchmarks can scale a kernel up.
"""

from __future__ import annotations

import hashlib
import io
from typing import Callable

import numpy as np

from tusk.frontend.klr_writer import KernelWriter

Reference = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]
F32 = np.float32


# --------------------------------------------------------------------------- kernels


def tensor_add(rows: int = 128, cols: int = 512) -> KernelWriter:
    """c = a + b, 128x512 float32: two loads, one DVE add, one store."""
    k = KernelWriter("tensor_add")
    a, b = k.input("a", (rows, cols)), k.input("b", (rows, cols))
    c = k.output("c", (rows, cols))
    ta = k.sbuf("ta", (rows, cols), addr=0)
    tb = k.sbuf("tb", (rows, cols), addr=4 * cols)
    tc = k.sbuf("tc", (rows, cols), addr=8 * cols)
    k.dma(ta, a)
    k.dma(tb, b)
    k.tensor_tensor(tc, ta, tb, "add")
    k.dma(c, tc)
    return k


RMS_EPS = 1e-6


def rmsnorm(tiles: int = 2, width: int = 128) -> KernelWriter:
    """y = x / sqrt(mean(x^2) + eps) * gamma per row: activation-reduce, tensor-scalar (imm and column) ops."""
    k = KernelWriter("rmsnorm")
    x = k.input("x", (128 * tiles, width))
    gamma = k.input("gamma", (1, width))
    y = k.output("y", (128 * tiles, width))
    row = 4 * width
    xt = k.sbuf("xt", (128, width), addr=0)
    sq = k.sbuf("sq", (128, width), addr=row)
    g = k.sbuf("g", (128, width), addr=2 * row)
    yt = k.sbuf("yt", (128, width), addr=3 * row)
    ss = k.sbuf("ss", (128, 1), addr=4 * row)
    rstd = k.sbuf("rstd", (128, 1), addr=4 * row + 16)
    k.dma(g, gamma.ap([[0, 128], [1, width]]))  # broadcast the gamma row to every partition
    for t in range(tiles):
        k.dma(xt, x[t * 128:(t + 1) * 128, :])
        k.activation(sq, xt, "square", reduce_op="add", reduce_res=ss)
        k.tensor_scalar(rstd, ss, "mult", 1.0 / width, "add", RMS_EPS)
        k.activation(rstd, rstd, "rsqrt")
        k.tensor_scalar(yt, xt, "mult", rstd)
        k.tensor_tensor(yt, yt, g, "mult")
        k.dma(y[t * 128:(t + 1) * 128, :], yt)
    return k


def add_tiles(tiles: int = 128, width: int = 256) -> KernelWriter:
    """c = a + b over 128 row tiles, traced: every tile reuses the same three SBUF buffers."""
    k = KernelWriter("add_tiles")
    a, b = k.input("a", (128 * tiles, width)), k.input("b", (128 * tiles, width))
    c = k.output("c", (128 * tiles, width))
    ta = k.sbuf("ta", (128, width), addr=0)
    tb = k.sbuf("tb", (128, width), addr=4 * width)
    tc = k.sbuf("tc", (128, width), addr=8 * width)
    for t in range(tiles):
        rows = slice(t * 128, (t + 1) * 128)
        k.dma(ta, a[rows, :])
        k.dma(tb, b[rows, :])
        k.tensor_tensor(tc, ta, tb, "add")
        k.dma(c[rows, :], tc)
    return k


def matmul_tiles(mt: int = 8, kt: int = 8, n: int = 512) -> KernelWriter:
    """C = A @ B (A given transposed) over 8 x 8 tiles: each product in PSUM, accumulated in SBUF by the DVE."""
    k = KernelWriter("matmul_tiles")
    at = k.input("at", (128 * kt, 128 * mt))
    bb = k.input("b", (128 * kt, n))
    c = k.output("c", (128 * mt, n))
    ta = k.sbuf("ta", (128, 128), addr=0)
    tb = k.sbuf("tb", (128, n), addr=512)
    part = k.sbuf("part", (128, n), addr=512 + 4 * n)
    acc = k.sbuf("acc", (128, n), addr=512 + 8 * n)
    ps = k.psum("ps", (128, n), addr=0)
    for m in range(mt):
        for kk in range(kt):
            k.dma(ta, at[kk * 128:(kk + 1) * 128, m * 128:(m + 1) * 128])
            k.dma(tb, bb[kk * 128:(kk + 1) * 128, :])
            k.matmul(ps, ta, tb)
            if kk == 0:
                k.tensor_copy(acc, ps)
            else:
                k.tensor_copy(part, ps)
                k.tensor_tensor(acc, acc, part, "add")
        k.dma(c[m * 128:(m + 1) * 128, :], acc)
    return k


def rmsnorm_tiles() -> KernelWriter:
    """rmsnorm over 64 row tiles of 512 (the traced loop of rmsnorm, scaled up)."""
    k = rmsnorm(tiles=64, width=512)
    k.name = "rmsnorm_tiles"
    return k


def attention(seq: int = 128, d: int = 64) -> KernelWriter:
    """o = softmax(q k^T / sqrt(d)) v for one 128-query head: two matmuls, a softmax and a PE transpose."""
    k = KernelWriter("attention")
    q, kk, v = k.input("q", (seq, d)), k.input("k", (seq, d)), k.input("v", (seq, d))
    o = k.output("o", (seq, d))
    row = 4 * seq
    qt = k.sbuf("qT", (d, seq), addr=0)
    kt = k.sbuf("kT", (d, seq), addr=row)
    vt = k.sbuf("vt", (seq, d), addr=2 * row)
    p = k.sbuf("p", (seq, seq), addr=3 * row)
    ident = k.sbuf("ident", (seq, seq), addr=4 * row)
    iot = k.sbuf("iot", (seq, seq), "int32", addr=5 * row)
    pt = k.sbuf("pT", (seq, seq), addr=6 * row)
    ot = k.sbuf("ot", (seq, d), addr=7 * row)
    mx = k.sbuf("mx", (seq, 1), addr=8 * row)
    nmx = k.sbuf("nmx", (seq, 1), addr=8 * row + 16)
    sums = k.sbuf("sums", (seq, 1), addr=8 * row + 32)
    rs = k.sbuf("rs", (seq, 1), addr=8 * row + 48)
    s_ps = k.psum("s_ps", (seq, seq), addr=0)
    pt_ps = k.psum("pT_ps", (seq, seq), addr=2048)
    o_ps = k.psum("o_ps", (seq, d), addr=4096)
    scale = 1.0 / float(np.sqrt(d))
    k.dma(qt, q.ap([[1, d], [d, seq]]))  # transposed loads: qT[j, i] = q[i, j]
    k.dma(kt, kk.ap([[1, d], [d, seq]]))
    k.dma(vt, v)
    k.iota(iot, 0, [[-1, seq]], channel_multiplier=1)  # p - j
    k.tensor_scalar(ident, iot, "is_equal", 0)         # the identity for the PE transpose
    k.matmul(s_ps, qt, kt)                             # s = q k^T
    k.tensor_reduce(mx, s_ps, "max")
    k.tensor_scalar(nmx, mx, "mult", -scale)
    k.activation(p, s_ps, "exp", scale=scale, bias=nmx, reduce_op="add", reduce_res=sums)
    k.reciprocal(rs, sums)
    k.tensor_scalar(p, p, "mult", rs)
    k.matmul(pt_ps, p, ident, transpose=True)          # p^T through the PE array
    k.tensor_copy(pt, pt_ps)
    k.matmul(o_ps, pt, vt)                             # o = p v
    k.tensor_copy(ot, o_ps)
    k.dma(o, ot)
    return k


def moe_gather(tokens: int = 128, experts: int = 256, width: int = 64) -> KernelWriter:
    """MoE routing: out[t] = table[ids[t]] * gate[t], a unique-indices vector-offset gather (indirect dim 0)."""
    k = KernelWriter("moe_gather")
    table = k.input("table", (experts, width))
    ids = k.input("ids", (tokens, 1), "int32")
    gate = k.input("gate", (tokens, 1))
    out = k.output("out", (tokens, width))
    tidx = k.sbuf("tidx", (tokens, 1), "int32", addr=0)
    tg = k.sbuf("tg", (tokens, 1), addr=16)
    rows = k.sbuf("rows", (tokens, width), addr=512)
    res = k.sbuf("res", (tokens, width), addr=512 + 4 * width)
    k.dma(tidx, ids)
    k.dma(tg, gate)
    index = tidx.ap([[1, tokens], [1, 1]], dtype="uint32")
    k.dma(rows, table.ap([[width, tokens], [1, width]], vector=index, indirect_dim=0), oob="skip",
          unique_indices=True, engine="pool", priority=2)
    k.tensor_scalar(res, rows, "mult", tg)
    k.dma(out, res)
    return k


def dynamic_loop(tiles: int = 4, width: int = 64) -> KernelWriter:
    """y[i] = 2 x[i] + 1 for the first ntiles row tiles: a dynamic loop whose DMA offset is a register."""
    k = KernelWriter("dynamic_loop")
    x = k.input("x", (128 * tiles, width))
    ntiles = k.input("ntiles", (1, 1), "int32")
    y = k.output("y", (128 * tiles, width))
    iters = k.output("iters", (1, 1), "int32")
    tn = k.sbuf("tn", (1, 1), "int32", addr=0)
    ti = k.sbuf("ti", (1, 1), "int32", addr=16)
    xt = k.sbuf("xt", (128, width), addr=256)
    k.dma(tn, ntiles)
    k.tensor_load("reg.n", tn)
    with k.dynamic_loop("reg.i", 0, "reg.n", 1, "loop.1"):
        k.reg_alu("reg.row", "reg.i", "mult", 128)  # scalar offsets count rows (indirect dim 0)
        k.dma(xt, x.ap([[width, 128], [1, width]], scalar="reg.row"))
        k.tensor_scalar(xt, xt, "mult", 2.0, "add", 1.0)
        k.dma(y.ap([[width, 128], [1, width]], scalar="reg.row"), xt)
    k.tensor_store(ti, "reg.i")
    k.dma(iters, ti)
    return k


def _shared_weight(n: int = 128) -> np.ndarray:
    rng = np.random.default_rng(20240611)
    return (rng.standard_normal((n, n)) * 0.125).astype(F32)


def _npy_bytes(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.ascontiguousarray(a), allow_pickle=False)
    return buf.getvalue()


def _shared_weight_file() -> tuple[str, bytes]:
    data = _npy_bytes(_shared_weight())
    return f"shared_constants/{hashlib.sha256(data).hexdigest()}.npy", data


def lnc2_matmul(n: int = 128) -> KernelWriter:
    """LNC=2: core c computes rows c of y = x @ W (W a shared constant) through a shared buffer and a barrier."""
    k = KernelWriter("lnc2_matmul", cores=2)
    x = k.input("x", (2 * n, n))
    y = k.output("y", (2 * n, n))
    file_name, _ = _shared_weight_file()
    w = k.shared_constant("w_const", (n, n), "float32", file_name)
    scratch = k.shared_buffer("scratch", (2 * n, n))
    wt = k.sbuf("wt", (n, n), addr=0)
    xt = k.sbuf("xt", (n, n), addr=4 * n)
    ys = k.sbuf("ys", (n, n), addr=8 * n)
    ps = k.psum("ps", (n, n), addr=0)
    names = []
    for c in range(2):
        with k.core(c):
            k.block("init.1")
            k.dma(wt, w)
            k.jump("main.1")
            k.block("main.1")
            load = k.dma(xt, x.ap([[1, n], [n, n]], offset=c * n * n))  # xt[j, i] = x[c n + i, j]
            mm = k.matmul(ps, xt, wt)
            k.tensor_copy(ys, ps)
            put = k.dma_plain(scratch[c * n:(c + 1) * n, :], ys)
            k.core_barrier(ys, [0, 1])
            get = k.dma(y[c * n:(c + 1) * n, :], scratch[c * n:(c + 1) * n, :])
            names.append((load, mm, put, get))
    assert names[0] == names[1], "both bodies name their statements alike"
    load, mm, put, get = names[0]
    k.edge(load, [mm])
    k.edge(put, [get])
    return k


# --------------------------------------------------------------------------- references


def _ref_tensor_add(inp):
    return {"c": inp["a"].astype(F32) + inp["b"].astype(F32)}


def _ref_add_tiles(inp):
    return {"c": inp["a"].astype(F32) + inp["b"].astype(F32)}


def _ref_matmul_tiles(inp):
    at, b = inp["at"].astype(F32), inp["b"].astype(F32)
    kt = at.shape[0] // 128
    acc = None
    for kk in range(kt):  # float32 partial products summed tile by tile, as the kernel does
        part = (at[kk * 128:(kk + 1) * 128].astype(np.float64).T @ b[kk * 128:(kk + 1) * 128].astype(np.float64))
        acc = part.astype(F32) if acc is None else acc + part.astype(F32)
    return {"c": acc}


def _ref_rmsnorm(inp):
    x = inp["x"].astype(F32)
    ms = (x * x).sum(axis=1, keepdims=True, dtype=F32) * F32(1.0 / x.shape[1]) + F32(RMS_EPS)
    return {"y": x * (F32(1) / np.sqrt(ms)) * inp["gamma"].astype(F32)}


def _ref_attention(inp):
    q, kk, v = (inp[n].astype(np.float64) for n in ("q", "k", "v"))
    s = q @ kk.T / np.sqrt(q.shape[1])
    e = np.exp(s - s.max(axis=1, keepdims=True))
    return {"o": ((e / e.sum(axis=1, keepdims=True)) @ v).astype(F32)}


def _ref_moe_gather(inp):
    ids = inp["ids"].reshape(-1).astype(np.int64)
    return {"out": inp["table"].astype(F32)[ids] * inp["gate"].astype(F32)}


def _ref_dynamic_loop(inp):
    x = inp["x"].astype(F32)
    n = int(np.asarray(inp["ntiles"]).reshape(-1)[0])
    y = np.zeros_like(x)
    y[:128 * n] = x[:128 * n] * F32(2) + F32(1)
    return {"y": y, "iters": np.array([[n]], dtype=np.int32)}


def _ref_lnc2_matmul(inp):
    return {"y": (inp["x"].astype(np.float64) @ _shared_weight().astype(np.float64)).astype(F32)}


KERNELS: dict[str, Callable[[], KernelWriter]] = {
    "tensor_add": tensor_add,
    "rmsnorm": rmsnorm,
    "attention": attention,
    "moe_gather": moe_gather,
    "dynamic_loop": dynamic_loop,
    "lnc2_matmul": lnc2_matmul,
    "add_tiles": add_tiles,
    "matmul_tiles": matmul_tiles,
    "rmsnorm_tiles": rmsnorm_tiles,
}

REFERENCES: dict[str, Reference] = {
    "tensor_add": _ref_tensor_add,
    "rmsnorm": _ref_rmsnorm,
    "attention": _ref_attention,
    "moe_gather": _ref_moe_gather,
    "dynamic_loop": _ref_dynamic_loop,
    "lnc2_matmul": _ref_lnc2_matmul,
    "add_tiles": _ref_add_tiles,
    "matmul_tiles": _ref_matmul_tiles,
    "rmsnorm_tiles": _ref_rmsnorm,
}


def inputs_for(name: str, seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs of kernel ``name`` by DRAM tensor name: floats uniform in [-2, 2), fixed ones by construction.

    moe_gather's ``ids`` are unique expert rows (the unique-indices gather);
    dynamic_loop's ``ntiles`` is the full tile count.
    """
    k = KERNELS[name]().kernel()
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for t in k.inputs:
        shape = (t.shape.parDim, *t.shape.freeDims)
        if name == "moe_gather" and t.name == "ids":
            experts = KERNELS[name]().kernel().inputs[0].shape.parDim
            out[t.name] = rng.permutation(experts)[:shape[0]].astype(np.int32).reshape(shape)
        elif name == "dynamic_loop" and t.name == "ntiles":
            out[t.name] = np.array([[k.inputs[0].shape.parDim // 128]], dtype=np.int32)
        else:
            out[t.name] = rng.uniform(-2.0, 2.0, size=shape).astype(F32)
    return out


def extra_files() -> dict[str, bytes]:
    """Files besides the .klr kernels, by path relative to examples/kernels/."""
    name, data = _shared_weight_file()
    return {name: data}


def corpus_bytes() -> dict[str, tuple[bytes, str, int]]:
    """kernel name -> (KLR file bytes, one-line description, number of KLIR statements)."""
    out = {}
    for name, make in KERNELS.items():
        k = make()
        out[name] = (k.to_bytes(), (make.__doc__ or "").strip().splitlines()[0], k.n_statements)
    return out
