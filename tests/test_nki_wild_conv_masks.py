"""Masks that public convolution kernels write: a window padded at both ends, whose loop a lower-bound mask and
an upper-bound mask each ask to split; and a tile subscripted with a predicate that tracing has decided
(``tile[w < W]`` with ``w`` a static index), which keeps every element or none."""

from __future__ import annotations

import numpy as np

from tests.test_frontend_entry import write
from tests.test_nki_wild_masks import HEADER  # the 1.x imports
from tusk.frontend import trace_file
from tusk.frontend.check import run_klr

RNG = np.random.default_rng(61)


def test_a_loop_masked_at_both_ends_loads_the_padded_window(tmp_path):
    # rows shifted down by 64: the first tile's mask cuts its top (row >= 0), the last tile's its bottom
    # (row < 384); the same loop is split for one mask, then again, earlier, for the other
    path = write(tmp_path, """
        @nki.jit
        def shifted_rows(x):
            out = nl.ndarray((512, 64), dtype=x.dtype, buffer=nl.shared_hbm)
            ip = nl.arange(128)[:, None]
            jf = nl.arange(64)[None, :]
            for i in nl.affine_range(4):
                row = i * 128 - 64 + ip
                t = nl.zeros((128, 64), dtype=x.dtype, buffer=nl.sbuf)
                t[ip, jf] = nl.load(x[row, jf], mask=(row < 384) & (row >= 0))
                nl.store(out[i * 128 + ip, jf], value=t)
            return out
    """, header=HEADER)
    x = RNG.standard_normal((384, 64)).astype(np.float32)
    got = run_klr(trace_file(path, "shifted_rows", ["f32[384,64]"]), {"x": x})["out"]
    want = np.zeros((512, 64), np.float32)
    want[64:448] = x
    assert np.array_equal(got, want)


def test_a_decided_predicate_subscript_keeps_the_tile_or_drops_the_instruction(tmp_path):
    # the K-tiles of an unrolled loop past `used` are subscripted with a predicate found false: their
    # matmul is not run, so only the first three are accumulated
    path = write(tmp_path, """
        @nki.jit
        def first_k_tiles(a, b, used):
            out = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.shared_hbm)
            ik = nl.arange(128)[:, None]
            im = nl.arange(128)[None, :]
            jn = nl.arange(256)[None, :]
            acc = nl.zeros((128, 256), dtype=nl.float32, buffer=nl.psum)
            for j in nl.static_range(4):
                at = nl.load(a[j * 128 + ik, im])
                bt = nl.load(b[j * 128 + ik, jn])
                acc += nisa.nc_matmul(at[j < used], bt[j < used])
            nl.store(out, value=nl.copy(acc))
            return out
    """, header=HEADER)
    a = RNG.standard_normal((512, 128)).astype(np.float32)
    b = RNG.standard_normal((512, 256)).astype(np.float32)
    got = run_klr(trace_file(path, "first_k_tiles", ["f32[512,128]", "f32[512,256]"], args={"used": 3}),
                  {"a": a, "b": b})["out"]
    assert np.allclose(got, a[:384].T @ b[:384], rtol=1e-4, atol=1e-4)
