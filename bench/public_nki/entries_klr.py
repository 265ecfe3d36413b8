"""leanprover/KLR's example kernels (interop/test/examples, the ones interop/test/test_examples.py traces).

They are NKI 1.x kernels that write into output arguments and import their NKI names with ``from apis
import *``, apis.py being one directory up: the bench names that directory with ``tusk trace --path``.
apis.py imports ``nki`` -- KLR's own package, whose calls are 1.x's (a result tile, no dst) -- so the bench
says ``--nki-api 1``.
Output arguments are listed in ``inputs`` (in argument order, as the tensors are passed); the references get
every listed array and return only the outputs."""

from __future__ import annotations

import numpy as np

from .entries_reference import softmax_rows
from .entries_tutorials import add, avgpool, mamba, matmul_t, transpose2d
from .entry import Entry

X = "leanprover+KLR/interop/test/examples"
PATH = {"options": {"path": ["leanprover+KLR/interop/test"], "nki_api": 1}}


def exp(x, a):
    return [np.exp(x[0])]


def split_even_odd(x, a):
    return [x[0][:, 0::2], x[0][:, 1::2]]


def maxpool(x, a):
    p = int(a["pool_size"])
    c, h, w = x[0].shape
    return [x[0].reshape(c, h // p, p, w // p, p).max(axis=(2, 4))]


def matmul_nt(x, a):
    """A [M, K], B [K, N]: A @ B."""
    return [x[0].astype(np.float64) @ x[1]]


def layernorm(x, a):
    v, g, b = (np.asarray(t, np.float64) for t in x[:3])
    mean = v.mean(axis=1, keepdims=True)
    var = (v * v).mean(axis=1, keepdims=True) - mean * mean
    return [(v - mean) / np.sqrt(var + float(a["epsilon"])) * g + b]


def rmsnorm(x, a):
    v, g = (np.asarray(t, np.float64) for t in x[:2])
    return [v / np.sqrt((v * v).mean(axis=1, keepdims=True)) * g]


def sd_attention_rows(x, a):
    """q, k, v [s, d]: softmax(0.125 q k.T) v."""
    q, k, v = (np.asarray(t, np.float64) for t in x[:3])
    return [softmax_rows(0.125 * q @ k.T) @ v]


V1_UNDER_V2 = ("1.x calls (a result tile, no dst) under `import nki.isa`: without --nki-api 1 refused naming "
               "the call (NKI 2.x signatures need dst)")


def _k(name: str, file: str, function: str, inputs, reference, **kw) -> Entry:
    return Entry(f"klr_{name}", "klr", f"{X}/{file}", function, tuple(inputs), reference, **{**PATH, **kw})


MAMBA_IO = ("f32[1,128,512]", "f32[1,128,512]", "f32[128,4]", "f32[1,4,512]", "f32[1,4,512]", "f32[1,128,512]")
MAMBA_RANGES = ((0.0, 0.1), (-1, 1), (-1.0, 0.0), (-1, 1), (-1, 1))

ENTRIES = [
    _k("getting_started_add", "getting_started.py", "nki_tensor_add_kernel", ("f32[128,512]",) * 3, add),
    _k("layout_exp_1", "layout.py", "tensor_exp_kernel_1", ("f32[256,512]",) * 2, exp),
    _k("layout_exp_2", "layout.py", "tensor_exp_kernel_2", ("f32[128,512]",) * 2, exp),
    _k("index_split", "index.py", "tensor_split_kernel_", ("f32[128,31]", "f32[128,16]", "f32[128,15]"),
       split_even_odd),
    _k("index_maxpool", "index.py", "tensor_maxpool_kernel_", ("f32[64,12,12]", "f32[64,4,4]"), maxpool,
       args=("pool_size=3",)),
    _k("mm_spmd_nisa", "mm.py", "matmul_128x128x512_spmd_nisa", ("f32[128,512]", "f32[128,1024]", "f32[512,1024]"),
       matmul_t, grid="4,2", note=V1_UNDER_V2),
    _k("mm_nl", "mm.py", "matmul_128x128x512_nl", ("f32[512,128]", "f32[128,1024]", "f32[512,1024]"), matmul_nt,
       grid="4,2"),
    _k("prof_exp", "prof.py", "tensor_exp_kernel_", ("f32[250,64]",) * 2, exp),
    _k("average_pool", "average_pool.py", "tensor_avgpool_kernel_", ("f32[2,6,6]", "f32[2,3,3]"), avgpool,
       args=("pool_size=2",)),
    *(_k(f"mamba_{v}", "fused_mamba.py", f"mamba_{v}", MAMBA_IO, mamba, ranges=MAMBA_RANGES, rtol=1e-3, atol=1e-3,
         note=V1_UNDER_V2)
      for v in ("v1", "v2", "v3")),
    *(_k(f"layernorm_{v}", "layernorm.py", f"nki_layernorm_kernel_{v}",
         ("f32[250,64]", "f32[64]", "f32[64]", "f32[250,64]"), layernorm, args=("epsilon=1e-5",),
         rtol=1e-3, atol=1e-3, note=V1_UNDER_V2 if v == "v2" else "")
      for v in ("v1", "v2")),
    _k("matmul_basic", "matmul.py", "nki_matmul_basic_", ("f32[128,64]", "f32[128,512]", "f32[64,512]"), matmul_t),
    _k("matmul_tiled", "matmul.py", "nki_matmul_tiled_", ("f32[256,128]", "f32[256,1024]", "f32[128,1024]"),
       matmul_t),
    _k("matmul_hoist_load", "matmul.py", "nki_matmul_hoist_load_",
       ("f32[256,256]", "f32[256,512]", "f32[256,512]"), matmul_t),
    _k("matmul_block_free", "matmul.py", "nki_matmul_block_free_dimension_",
       ("f32[128,256]", "f32[128,1024]", "f32[256,1024]"), matmul_t),
    _k("matmul_fully_optimized", "matmul.py", "nki_matmul_fully_optimized_",
       ("f32[256,256]", "f32[256,512]", "f32[256,512]"), matmul_t,
       args=("TILES_IN_BLOCK_M=2", "TILES_IN_BLOCK_N=1", "TILES_IN_BLOCK_K=2"), note=V1_UNDER_V2),
    _k("rmsnorm", "rmsnorm.py", "nki_rmsnorm_kernel", ("f32[250,64]", "f32[64]", "f32[250,64]"), rmsnorm,
       rtol=1e-3, atol=1e-3),
    _k("sd_attention", "sd_attention.py", "fused_self_attn_for_SD_small_head_size", ("f32[512,64]",) * 4,
       sd_attention_rows, rtol=2e-2, atol=2e-2,
       note="the file uses par_dim, which neither it nor apis.py imports: a NameError in Python"),
    _k("tensor_add_kernel", "tensor_addition.py", "nki_tensor_add_kernel_", ("f32[256,1024]",) * 3, add,
       grid="2,2"),
    _k("tensor_add_launcher", "tensor_addition.py", "nki_tensor_add", ("f32[256,1024]",) * 3, add,
       note="it launches a plain function as kernel[grid_x, grid_y](...): a TypeError in Python"),
    _k("transpose2d", "transpose2d.py", "tensor_transpose2D_kernel_", ("f32[128,12]", "f32[128,12]"), transpose2d,
       args=("shape2D=3,4",)),
]
