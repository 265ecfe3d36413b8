"""``t[...] = <elementwise op>(t[...])``: the op writes the tile it reads, in place, as NKI does -- a tile larger
than half of SBUF fits once, not twice.  Ops that read elements other than the ones they write keep a
destination of their own."""

from __future__ import annotations

import numpy as np
import pytest

from tests.test_frontend_entry import write
from tests.test_isa_ops import through_pipeline
from tests.test_nki_wild_masks import HEADER  # the 1.x imports
from tusk.frontend import trace_file
from tusk.frontend.alloc import MemoryFull
from tusk.sim.interp import run

RNG = np.random.default_rng(67)
BIG = ["f32[128,8,7168]"]  # two [128, 4, 7168] fp32 tiles (112 KiB per partition each) do not fit in SBUF


def _kernel(tmp_path, compute: str):
    return write(tmp_path, f"""
        @nki.jit
        def k(x):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            ip = nl.arange(128)[:, None, None]
            ik = nl.arange(4)[None, :, None]
            jf = nl.arange(7168)[None, None, :]
            for g in nl.affine_range(2):
                t = nl.ndarray((nl.par_dim(128), 4, 7168), dtype=np.float32, buffer=nl.sbuf)
                t[ip, ik, jf] = nl.load(x[ip, g * 4 + ik, jf])
                t[ip, ik, jf] = {compute}
                nl.store(out[ip, g * 4 + ik, jf], value=t[ip, ik, jf])
            return out
    """, header=HEADER)


@pytest.mark.parametrize("compute, want", [
    ("nisa.activation(op=nl.exp, data=t[ip, ik, jf], dtype=np.float32)", np.exp),
    ("nl.multiply(t[ip, ik, jf], t[ip, ik, jf])", np.square),
])
def test_an_elementwise_op_on_a_tile_larger_than_half_of_sbuf_writes_it_in_place(tmp_path, compute, want):
    module = through_pipeline(trace_file(_kernel(tmp_path, compute), "k", BIG), tmp_path)
    x = RNG.standard_normal((128, 8, 7168)).astype(np.float32)
    assert np.allclose(run(module, {"x": x})["out"], want(x), rtol=1e-5)


def test_an_op_that_reads_other_elements_of_its_destination_keeps_a_tile_of_its_own(tmp_path):
    # the shifted read makes element f from element f + 1: writing in place would change what it reads
    path = _kernel(tmp_path, "nl.exp(t[ip, ik, jf + 1], mask=(jf < 7167))")
    with pytest.raises(MemoryFull, match="SBUF is full"):
        trace_file(path, "k", BIG)
