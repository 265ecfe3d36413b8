"""Instructions that write every element of their output without reading it -- shuffles, gathers, selects --
start a new value, as a copy does (``ir.liveness.KILLING``).  NKI kernels make a fresh tile with them in every
iteration of a loop; the front end gives such a tile's bytes to another tile once it is dead, and the verifier
and the rotation passes must agree it is dead there.  A stream shuffle whose mask keeps a partition (255)
reads what that partition held: no new value."""

from __future__ import annotations

import numpy as np

from tests.test_frontend_entry import write
from tests.test_isa_ops import through_pipeline
from tusk.frontend import trace_file
from tusk.ir.enums import OPCODE_BY_NAME, Engine
from tusk.ir.liveness import _rmw
from tusk.ir.module import Function
from tusk.sim.interp import run

HEADER = """\
import numpy as np
import nki
import nki.isa as nisa
import nki.language as nl
"""

RNG = np.random.default_rng(23)


def test_a_shuffled_tile_made_in_every_iteration_compiles_and_computes_the_recurrence(tmp_path):
    # bc is a fresh tile per iteration, written whole by the shuffle; tmp2 may take its bytes after its
    # last read -- which is only right if the shuffle starts bc's value anew in the next iteration
    path = write(tmp_path, """
        @nki.jit
        def doubling(x):
            steps, width = x.shape
            out = nl.ndarray((steps, width), dtype=nl.float32, buffer=nl.shared_hbm)
            acc = nl.ndarray((32, width), dtype=nl.float32, buffer=nl.sbuf)
            nisa.memset(dst=acc, value=0.0)
            for t in nl.sequential_range(steps):
                row = nl.ndarray((1, width), dtype=nl.float32, buffer=nl.sbuf)
                nisa.dma_copy(dst=row, src=x[t:t + 1, :])
                bc = nl.ndarray((32, width), dtype=nl.float32, buffer=nl.sbuf)
                nisa.nc_stream_shuffle(src=row[0:1, 0:width], dst=bc, shuffle_mask=[0] * 32)
                tmp = nl.ndarray((32, width), dtype=nl.float32, buffer=nl.sbuf)
                nisa.tensor_tensor(dst=tmp, data1=acc, data2=bc, op=nl.add)
                tmp2 = nl.ndarray((32, width), dtype=nl.float32, buffer=nl.sbuf)
                nisa.tensor_tensor(dst=tmp2, data1=tmp, data2=acc, op=nl.add)
                nisa.tensor_copy(dst=acc, src=tmp2)
                last = nl.ndarray((1, width), dtype=nl.float32, buffer=nl.sbuf)
                nisa.tensor_copy(dst=last, src=acc[31:32, :])
                nisa.dma_copy(dst=out[t:t + 1, :], src=last)
            return out
    """, header=HEADER)
    x = RNG.standard_normal((6, 128)).astype(np.float32)
    module = through_pipeline(trace_file(path, "doubling", ["f32[6,128]"]), tmp_path)
    got = run(module, {"x": x})["out"]
    want, acc = [], np.zeros(128)
    for t in range(6):
        acc = 2 * acc + x[t]
        want.append(acc)
    assert np.allclose(got, np.array(want), rtol=1e-5, atol=1e-5)


def test_a_gathered_tile_made_in_every_iteration_compiles_and_gathers(tmp_path):
    path = write(tmp_path, """
        @nki.jit
        def gathers(x, idx):
            n = idx.shape[0]
            out = nl.ndarray((n, 128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
            data = nl.load(x)
            for t in nl.sequential_range(n):
                g = nl.gather_flattened(data, nl.load(idx[t]))
                twice = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
                nisa.tensor_scalar(dst=twice, data=g, op0=nl.multiply, operand0=2.0)
                ones = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
                nisa.memset(dst=ones, value=1.0)
                res = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
                nisa.tensor_tensor(dst=res, data1=twice, data2=ones[:, 0:64], op=nl.add)
                nisa.dma_copy(dst=out[t], src=res)
            return out
    """, header=HEADER)
    x = RNG.standard_normal((128, 64)).astype(np.float32)
    idx = RNG.integers(0, 64, size=(3, 128, 64)).astype(np.int32)
    module = through_pipeline(trace_file(path, "gathers", ["f32[128,64]", "i32[3,128,64]"]), tmp_path)
    got = run(module, {"x": x, "idx": idx})["out"]
    want = np.stack([2 * np.take_along_axis(x, idx[t], axis=1) + 1 for t in range(3)])
    assert np.array_equal(got, want.astype(np.float32))


def test_a_shuffle_that_keeps_a_partition_reads_its_destination():
    fn = Function("f")
    block = fn.add_block("b")

    def shuffle(mask: list[int]) -> int:
        return fn.add_inst(OPCODE_BY_NAME["StreamShuffle"], Engine.DVE, block, "s", [], attrs={"mask": mask})

    whole, keeping, short = shuffle([0] * 32), shuffle([0] * 31 + [255]), shuffle([0] * 16)
    assert not _rmw(fn, whole)
    assert _rmw(fn, keeping) and _rmw(fn, short)
