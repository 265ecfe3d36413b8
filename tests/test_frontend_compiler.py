"""`nki.compiler` (direct allocation as placement hints, the compiler's decorators), NKI dtypes as numpy
dtype names, masks that are static predicates, and `psum += nc_matmul` into an unwritten PSUM tensor.

Every kernel here is written for these tests and checked against numpy in Tusk's interpreter."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.test_frontend_entry import write
from tusk.frontend import TraceError, trace_file
from tusk.frontend.check import run_klr
from tusk.ir import klr

HEADER = """\
import logging
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.compiler as ncc
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
from neuronxcc.nki.language import par_dim
"""

A = np.random.default_rng(3).standard_normal((256, 128)).astype(np.float32)
B = np.random.default_rng(4).standard_normal((256, 512)).astype(np.float32)


def test_direct_allocation_is_a_placement_hint_and_the_decorators_keep_the_kernel(tmp_path):
    path = write(tmp_path, """
        @ncc.enable_stack_allocator(log_level=logging.INFO)
        @ncc.skip_middle_end_transformations
        @nki.jit
        def mm(lhsT, rhs):
            out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
            a = nl.ndarray((2, par_dim(128), 128), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0,
                           num_free_tiles=(2,)))
            b = nl.ndarray((2, par_dim(128), 512), dtype=nl.float32, buffer=ncc.sbuf.alloc(lambda i, p, f: 1024))
            acc = nl.ndarray((par_dim(128), 512), dtype=nl.float32,
                             buffer=ncc.psum.mod_alloc(base_bank=2, num_bank_tiles=(1,)))
            res = nl.ndarray((par_dim(128), 512), dtype=nl.float32, buffer=ncc.sbuf.auto_alloc())
            for k in nl.sequential_range(2, directives=ncc.no_reorder()):
                a[k] = nl.load(lhsT[k * 128:(k + 1) * 128, :])
                b[k] = nl.load(rhs[k * 128:(k + 1) * 128, :])
                acc[...] += nisa.nc_matmul(a[k], b[k])
            res[...] = nl.copy(acc)
            nl.store(out, value=res)
            return out
    """, header=HEADER)
    got = run_klr(trace_file(path, "mm", ["f32[256,128]", "f32[256,512]"]), {"lhsT": A, "rhs": B})["out"]
    assert np.allclose(got, A.T @ B, rtol=1e-4, atol=1e-3)


def test_a_direct_allocation_with_wrong_arguments_is_refused_at_its_line(tmp_path):
    path = write(tmp_path, """
        @nki.jit
        def k(a):
            t = nl.ndarray((par_dim(128), 64), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=-4))
            return t
    """, header=HEADER)
    with pytest.raises(TraceError, match=r"k\.py:11: .*ncc\.sbuf\.mod_alloc\(base_addr=-4\)"):
        trace_file(path, "k", ["f32[128,64]"])


def test_nki_dtypes_are_numpy_dtype_names_while_tracing_only(tmp_path):
    path = write(tmp_path, """
        @nki.jit
        def k(a):
            assert np.dtype(nl.bfloat16).itemsize == 2 and np.dtype(nl.float8_e4m3).itemsize == 1
            assert np.dtype(a.dtype).itemsize == 4
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            nl.store(out, value=nl.load(a))
            return out
    """, header=HEADER)
    got = run_klr(trace_file(path, "k", ["f32[128,64]"]), {"a": A[:128, :64]})["out"]
    assert (got == A[:128, :64]).all()
    with pytest.raises(TypeError):
        np.dtype("bfloat16")


def test_masks_that_are_static_predicates(tmp_path):
    path = write(tmp_path, """
        @nki.jit
        def k(a):
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            ip, jf = nl.mgrid[0:128, 0:128]
            for i in nl.static_range(3):
                t = nl.load(a[i * 128 + ip, jf], mask=(i * 128 < a.shape[0]))
                nl.store(out[i * 128 + ip, jf], value=t, mask=(jf < 100) & (i * 128 < a.shape[0]))
            return out
    """, header=HEADER)
    # a mask found false in the last iteration: the load and the store write nothing there, as in NKI
    got = run_klr(trace_file(path, "k", ["f32[256,128]"]), {"a": A}, check_written=False)["out"]
    assert (got[:, :100] == A[:, :100]).all()
    data = trace_file(path, "k", ["f32[384,128]"])
    src = np.concatenate([A, A[:128]])
    got = run_klr(data, {"a": src}, check_written=False)["out"]  # columns 100.. are masked off
    assert (got[:, :100] == src[:, :100]).all()


def test_psum_accumulation_into_an_unwritten_ndarray_starts_from_zero(tmp_path):
    path = write(tmp_path, """
        @nki.jit
        def k(lhsT, rhs):
            out = nl.ndarray((2, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
            acc = nl.ndarray((2, par_dim(128), 512), dtype=nl.float32, buffer=nl.psum)
            for r in nl.affine_range(2):
                for k in nl.affine_range(2):
                    acc[r] += nisa.nc_matmul(nl.load(lhsT[k * 128:(k + 1) * 128, :]),
                                             nl.load(rhs[(2 * r + k) * 128:(2 * r + k + 1) * 128, :]))
                nl.store(out[r], value=nl.copy(acc[r]))
            return out
    """, header=HEADER)
    rhs = np.concatenate([B, 2 * B])
    got = run_klr(trace_file(path, "k", ["f32[256,128]", "f32[512,512]"]), {"lhsT": A, "rhs": rhs})["out"]
    assert np.allclose(got[0], A.T @ B, rtol=1e-4, atol=1e-3)
    assert np.allclose(got[1], 2 * (A.T @ B), rtol=1e-4, atol=1e-3)


# ====================================================================== logical blocks (alloc_blocks)

BLOCKS = """
    @nki.jit
    def k(lhsT, rhs):
        out = nl.ndarray((6, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.ndarray((6, 2, par_dim(128), 512), dtype=nl.float32, buffer=nl.psum)
        res = nl.ndarray((par_dim(128), 512), dtype=nl.float32, buffer=nl.sbuf)
        for r in LOOP(6):
            for j in nl.affine_range(2):
                acc[r, j] = nisa.nc_matmul(nl.load(lhsT[j * 128:(j + 1) * 128, :]),
                                           nl.load(rhs[r * 128:(r + 1) * 128, :]))
            res[...] = nl.add(acc[r, 0], acc[r, 1])
            nl.store(out[r], value=res)
        return out
"""
RHS = np.random.default_rng(5).standard_normal((768, 512)).astype(np.float32)


@pytest.mark.parametrize("loop", ["nl.static_range", "nl.affine_range", "nl.sequential_range"])
def test_blocks_used_one_per_iteration_need_one_tile_of_psum(tmp_path, loop):
    """acc's 12 logical tiles need 24 KiB of PSUM's 16: iteration r uses only block r (a loop that stays a loop
    shares one block; an unrolled one splits the blocks into tiles of their own)."""
    path = write(tmp_path, BLOCKS.replace("LOOP", loop), header=HEADER)
    got = run_klr(trace_file(path, "k", ["f32[256,128]", "f32[768,512]"]), {"lhsT": A, "rhs": RHS})["out"]
    for r in range(6):
        assert np.allclose(got[r], (A[:128] + A[128:]).T @ RHS[r * 128:(r + 1) * 128], rtol=1e-4, atol=1e-3)


def test_blocks_that_iterations_share_keep_their_memory_and_psum_is_full(tmp_path):
    """Iteration r reads block 5 - r too: no block can be shared, the PSUM-full refusal stays."""
    body = BLOCKS.replace("LOOP", "nl.affine_range").replace("nl.add(acc[r, 0], acc[r, 1])",
                                                             "nl.add(acc[r, 0], acc[5 - r, 1])")
    path = write(tmp_path, body, header=HEADER)
    with pytest.raises(TraceError, match="PSUM is full") as e:
        trace_file(path, "k", ["f32[256,128]", "f32[768,512]"])
    # named at a line of the kernel (the loop after the tile), not at the line of contextlib's that enters it
    line = int(str(e.value).split(":")[1])
    assert Path(path).read_text().splitlines()[line - 1].strip() == "for r in nl.affine_range(6):"


ZEROED_BLOCKS = """
    @nki.jit
    def k(lhsT, rhs):
        out = nl.ndarray((3, 4, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.zeros((3, 4, par_dim(128), 512), dtype=nl.float32, buffer=nl.psum)
        for r in nl.affine_range(3):
            for c in nl.affine_range(4):
                for j in nl.affine_range(2):
                    acc[r, c] += nisa.nc_matmul(nl.load(lhsT[j * 128:(j + 1) * 128, :]),
                                                nl.load(rhs[(r + c) * 128:(r + c + 1) * 128, :]))
                nl.store(out[r, c], value=nl.copy(acc[r, c]))
        return out
"""


def test_a_zero_filled_tile_of_two_block_axes_gets_one_block_per_iteration(tmp_path):
    """acc (12 blocks, 24 KiB of PSUM's 16) is zero-filled before the loops and summed into block by block:
    the fill moves into each loop, so one physical block serves every iteration, and each sum starts from 0."""
    path = write(tmp_path, ZEROED_BLOCKS, header=HEADER)
    got = run_klr(trace_file(path, "k", ["f32[256,128]", "f32[768,512]"]), {"lhsT": A, "rhs": RHS})["out"]
    for r in range(3):
        for c in range(4):
            want = (A[:128] + A[128:]).T @ RHS[(r + c) * 128:(r + c + 1) * 128]
            assert np.allclose(got[r, c], want, rtol=1e-4, atol=1e-3)


TWO_ZEROED = """
    @nki.jit
    def k(a, b):
        up = nl.ndarray((8, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        down = nl.ndarray((8, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        s = nl.zeros((8, par_dim(128), 512), dtype=nl.float32, buffer=nl.psum)
        d = nl.zeros((8, par_dim(128), 512), dtype=nl.float32, buffer=nl.psum)
        BETWEEN
        for i in nl.affine_range(8):
            s[i] += nl.multiply(x, 3.0)
            nl.store(up[i], value=s[i])
        for i in nl.affine_range(8):
            d[i] += nl.subtract(x, y)
            nl.store(down[i], value=d[i])
        return up, down
"""


@pytest.mark.parametrize("between", ["x = nl.load(a)\n        y = nl.load(b)", ""])
def test_two_zero_filled_tiles_each_get_one_block_per_iteration(tmp_path, between):
    """Two tiles of 16 KiB of PSUM (all of it) each, zero-filled before their loops: both fills move into their loops.
    Moving the first shifted the second's positions: the stale one deleted the load between (a wrong
    result) or, with nothing between, the start of a loop (an internal error)."""
    body = TWO_ZEROED.replace("BETWEEN", between)
    if not between:
        body = body.replace("    def k(a, b):\n", "    def k(a, b):\n        x = nl.load(a)\n        y = nl.load(b)\n")
    path = write(tmp_path, body, header=HEADER)
    x, y = RHS[:128], RHS[128:256]
    got = run_klr(trace_file(path, "k", ["f32[128,512]", "f32[128,512]"]), {"a": x, "b": y})
    for i in range(8):
        assert np.array_equal(got["up"][i], x * np.float32(3.0))
        assert np.array_equal(got["down"][i], x - y)


THREE_AXES = """
    @nki.jit
    def k(a):
        out = nl.ndarray((2, 16, 8, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.zeros((2, 16, 8, par_dim(128), 512), dtype=nl.float32, buffer=nl.psum, lazy_initialization=True)
        x = nl.load(a)
        for i in nl.affine_range(2):
            for j in nl.affine_range(16):
                for m in nl.affine_range(8):
                    acc[i, j, m] += nl.multiply(x, 3.0)
                    nl.store(out[i, j, m], value=acc[i, j, m])
        return out
"""


def test_a_zero_filled_tile_of_three_block_axes_is_filled_block_by_block_in_the_innermost_loop(tmp_path):
    """256 blocks (512 KiB of PSUM's 16), one per iteration of three loops: the fill moves into the innermost
    loop, one block at a time (moved into the outer loop alone, it covered 128 blocks: more elements than the
    sharing check enumerates, and PSUM was full)."""
    path = write(tmp_path, THREE_AXES, header=HEADER)
    x = RHS[:128]
    got = run_klr(trace_file(path, "k", ["f32[128,512]"]), {"a": x})["out"]
    assert np.array_equal(got, np.broadcast_to(x * np.float32(3.0), got.shape))


def test_a_zero_filled_tile_read_after_its_loop_keeps_its_blocks(tmp_path):
    """The fill cannot move when a block is read outside the loop (the last one, here): PSUM stays full."""
    body = ZEROED_BLOCKS.replace("        return out", "        nl.store(out[0, 0], value=nl.copy(acc[2, 3]))\n"
                                                          "        return out")
    path = write(tmp_path, body, header=HEADER)
    with pytest.raises(TraceError, match="PSUM is full") as e:
        trace_file(path, "k", ["f32[256,128]", "f32[768,512]"])
    # named at the kernel's line that makes the tile, not at the line of contextlib's that enters a loop
    line = int(str(e.value).split(":")[1])
    assert Path(path).read_text().splitlines()[line - 1].strip().startswith("acc = nl.zeros((3, 4, par_dim(128)")


PEELED = """
    @nki.jit
    def k(x):
        rows, cols = x.shape
        n = (rows + 127) // 128
        out = nl.ndarray((rows, cols), dtype=nl.float32, buffer=nl.shared_hbm)
        a = nl.ndarray((n, par_dim(128), cols), dtype=nl.float32, buffer=nl.sbuf)
        b = nl.ndarray((n, par_dim(128), cols), dtype=nl.float32, buffer=nl.sbuf)
        i_p = nl.arange(128)[:, None]
        i_f = nl.arange(cols)[None, :]
        for i in nl.affine_range(n):
            r = i * 128 + i_p
            a[i, i_p, i_f] = nl.load(x[r, i_f], mask=(r < rows))
            b[i, i_p, i_f] = nl.multiply(a[i, i_p, i_f], 3.0, mask=(r < rows))
            nl.store(out[r, i_f], value=nl.add(b[i, i_p, i_f], a[i, i_p, i_f], mask=(r < rows)), mask=(r < rows))
        return out
"""


def test_a_loop_whose_last_iteration_is_peeled_shares_its_blocks_and_keeps_the_last_apart(tmp_path):
    """The mask on the rows makes the trace peel the loop's last iteration, which names block 5 by a constant;
    a and b (6 blocks of 32 KiB each, 384 KiB of SBUF) fit once block 5 is a tile of its own and the loop's
    blocks share one."""
    path = write(tmp_path, PEELED, header=HEADER)
    x = np.random.default_rng(6).standard_normal((704, 8192)).astype(np.float32)
    got = run_klr(trace_file(path, "k", ["f32[704,8192]"]), {"x": x})["out"]
    assert np.allclose(got, 4 * x, rtol=1e-6, atol=1e-6)


MANY_BLOCKS = """
    @nki.jit
    def k(x):
        n, m, rows, cols = x.shape
        out = nl.ndarray((n, rows, cols), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((n, m, par_dim(rows), cols), dtype=nl.float32, buffer=nl.sbuf)
        for i in nl.affine_range(n):
            for j in nl.affine_range(m):
                t[i, j] = nl.load(x[i, j])
            acc = nl.zeros((par_dim(rows), cols), dtype=nl.float32, buffer=nl.sbuf)
            for j in nl.sequential_range(m):
                acc[...] = nl.add(acc, t[i, j])
            nl.store(out[i], value=acc)
        return out
"""


def test_blocks_whose_iteration_checks_more_elements_than_the_bound_over_all_partitions(tmp_path):
    """Iteration i writes and reads t's 9 blocks [i, j] (4.7M elements over the 128 partitions, more than the
    sharing check lists; 37K in one partition, as every access covers all of them): t's 288 KiB of SBUF
    become one block of 144 KiB."""
    path = write(tmp_path, MANY_BLOCKS, header=HEADER)
    x = np.random.default_rng(9).standard_normal((2, 9, 128, 4096)).astype(np.float32)
    got = run_klr(trace_file(path, "k", ["f32[2,9,128,4096]"]), {"x": x})["out"]
    assert np.allclose(got, x.sum(axis=1), rtol=1e-5, atol=1e-4)


SPILLED = """
    @nki.jit
    def k(x):
        n, rows, cols = x.shape
        out = nl.ndarray((n, rows, cols), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.ndarray((n, par_dim(rows), cols), dtype=nl.float32, buffer=nl.sbuf)
        for i in nl.affine_range(n):
            t[i] = nl.load(x[i])
        u = nl.ndarray((par_dim(rows), cols), dtype=nl.float32, buffer=nl.sbuf)
        for i in nl.affine_range(n):
            u[...] = nl.multiply(t[i], 2.0)
            nl.store(out[i], value=nl.add(u, t[i]))
        return out
"""


def test_a_tile_live_between_two_loops_that_overflows_sbuf_is_kept_in_hbm(tmp_path):
    """t (4 blocks of 64 KiB) is written by one loop and read by the next: no block can be shared, so t is
    kept in HBM and each access works on a staging tile of its own (alloc_spill)."""
    path = write(tmp_path, SPILLED, header=HEADER)
    x = np.random.default_rng(10).standard_normal((4, 128, 16384)).astype(np.float32)
    data = trace_file(path, "k", ["f32[4,128,16384]"])
    assert np.allclose(run_klr(data, {"x": x})["out"], 3 * x, rtol=1e-6, atol=1e-6)


def test_a_tile_the_kernel_placed_itself_is_not_kept_in_hbm(tmp_path):
    """A direct allocation is the kernel's placement: NKI's compiler spills only what it places."""
    body = SPILLED.replace("buffer=nl.sbuf)\n        for i", "buffer=ncc.sbuf.mod_alloc(base_addr=0))\n        for i")
    assert "mod_alloc" in body
    path = write(tmp_path, body, header=HEADER)
    with pytest.raises(TraceError, match="SBUF is full: tile t "):
        trace_file(path, "k", ["f32[4,128,16384]"])


SUMS = """
    @nki.jit
    def k(a, w1, w2):
        out = nl.ndarray((4, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        s1 = nl.zeros((4, par_dim(128), 512), dtype=nl.float32, buffer=nl.psum)
        s2 = nl.zeros((4, par_dim(128), 512), dtype=nl.float32, buffer=nl.psum)
        for j in nl.affine_range(2):
            m1 = nl.load(w1[j])
            m2 = nl.load(w2[j])
            for b in nl.affine_range(4):
                st = nl.load(a[b, j])
                s1[b] += nisa.nc_matmul(st, m1)
                s2[b] += nisa.nc_matmul(st, m2)
        for b in nl.affine_range(4):
            nl.store(out[b], value=nl.subtract(s1[b], s2[b]))
        return out
"""


def test_sums_that_fill_psum_move_to_sbuf(tmp_path):
    """s1 and s2 take all 8 PSUM banks, as NKI accumulates in them; Tusk's += needs a bank for each matmul too,
    so the sums (no matmul writes them) move to SBUF."""
    path = write(tmp_path, SUMS, header=HEADER)
    rng = np.random.default_rng(8)
    a = rng.standard_normal((4, 2, 128, 128)).astype(np.float32)
    w1, w2 = (rng.standard_normal((2, 128, 512)).astype(np.float32) for _ in range(2))
    got = run_klr(trace_file(path, "k", ["f32[4,2,128,128]", "f32[2,128,512]", "f32[2,128,512]"]),
                  {"a": a, "w1": w1, "w2": w2})["out"]
    assert np.allclose(got, np.einsum("bjkm,jkn->bmn", a, w1 - w2), rtol=1e-4, atol=1e-3)


def test_sums_that_overflow_psum_in_nki_too_stay_refused(tmp_path):
    """s1 and s2 of five banks each need 10 of PSUM's 8 banks without Tusk's own: refused, as NKI refuses it."""
    body = SUMS.replace("(4, par_dim(128), 512)", "(5, par_dim(128), 512)").replace("range(4)", "range(5)")
    body = body.replace("(4, 128, 512)", "(5, 128, 512)")
    path = write(tmp_path, body, header=HEADER)
    with pytest.raises(TraceError, match="PSUM is full"):
        trace_file(path, "k", ["f32[5,2,128,128]", "f32[2,128,512]", "f32[2,128,512]"])


@pytest.mark.parametrize("form", ["acc[r] += nisa.nc_matmul(a, b)", "nisa_v2.nc_matmul(acc[r], a, b)"])
def test_accumulation_into_each_block_of_an_unrolled_loop_starts_from_zero(tmp_path, form):
    path = write(tmp_path, f"""
        import nki.isa as nisa_v2

        @nki.jit
        def k(lhsT, rhs):
            out = nl.ndarray((3, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
            acc = nl.ndarray((3, par_dim(128), 512), dtype=nl.float32, buffer=nl.psum)
            for r in nl.static_range(3):
                for kk in nl.affine_range(2):
                    a = nl.load(lhsT[kk * 128:(kk + 1) * 128, :])
                    b = nl.load(rhs[(2 * r + kk) * 128:(2 * r + kk + 1) * 128, :])
                    {form}
                nl.store(out[r], value=nl.copy(acc[r]))
            return out
    """, header=HEADER)
    got = run_klr(trace_file(path, "k", ["f32[256,128]", "f32[768,512]"]), {"lhsT": A, "rhs": RHS})["out"]
    for r in range(3):
        want = A[:128].T @ RHS[2 * r * 128:(2 * r + 1) * 128] + A[128:].T @ RHS[(2 * r + 1) * 128:(2 * r + 2) * 128]
        assert np.allclose(got[r], want, rtol=1e-4, atol=1e-3)


# ====================================================================== views of block tiles, fills, unit indices

def test_a_block_view_passed_on_and_indexed_further_is_a_partition_first_view(tmp_path):
    path = write(tmp_path, """
        def rowsum(dst, src):
            for j in nl.affine_range(2):
                dst[j] = nl.sum(nl.load(src[j * 128:(j + 1) * 128, :]), axis=1, keepdims=True)

        @nki.jit
        def k(a):
            out = nl.ndarray((2, 2, 128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
            sums = nl.zeros((2, 2, par_dim(128), 1), dtype=nl.float32, lazy_initialization=True)
            for h in nl.affine_range(2):
                rowsum(sums[h], a[h])
                for j in nl.affine_range(2):
                    nl.store(out[h, j], value=sums[h, j])
            return out
    """, header=HEADER)
    src = np.random.default_rng(6).standard_normal((2, 256, 64)).astype(np.float32)
    got = run_klr(trace_file(path, "k", ["f32[2,256,64]"]), {"a": src})["out"]
    assert np.allclose(got[..., 0], src.reshape(2, 2, 128, 64).sum(axis=-1), rtol=1e-5, atol=1e-4)


def test_an_instruction_on_a_view_whose_first_axis_is_a_block_axis_is_refused(tmp_path):
    path = write(tmp_path, """
        @nki.jit
        def k(a):
            out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
            buf = nl.zeros((2, par_dim(128), 64), dtype=nl.float32)
            nl.store(out, value=nl.exp(buf[0:2, 0:128, 0]))
            return out
    """, header=HEADER)
    with pytest.raises(TraceError, match=r"k\.py:13: .*first axis is not the partition axis"):
        trace_file(path, "k", ["f32[128,64]"])


def test_lazy_initialization_must_be_a_bool_and_a_trailing_unit_index_is_its_axis(tmp_path):
    path = write(tmp_path, """
        @nki.jit
        def k(a):
            out = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.shared_hbm)
            acc = nl.full((par_dim(128), 4), fill_value=1.0, dtype=nl.float32, lazy_initialization=False)
            col = acc[:, 2]
            col[:, 0] = nl.sum(nl.load(a), axis=1)
            nl.store(out, value=acc)
            return out
    """, header=HEADER)
    src = A[:128, :64]
    got = run_klr(trace_file(path, "k", ["f32[128,64]"]), {"a": src})["out"]
    assert np.allclose(got[:, 2], src.sum(axis=1), rtol=1e-5, atol=1e-4) and (got[:, [0, 1, 3]] == 1).all()
    path.write_text(path.read_text().replace("lazy_initialization=False", "lazy_initialization='soon'"))
    with pytest.raises(TraceError, match=r"k\.py:12: .*lazy_initialization='soon'"):
        trace_file(path, "k", ["f32[128,64]"])


# ====================================================================== arguments made by the kernel's module, packages

def test_an_arg_that_calls_a_name_of_the_kernel_module(tmp_path):
    path = write(tmp_path, """
        from dataclasses import dataclass
        from enum import Enum
        from neuronxcc.nki.language.constants import sizeinbytes

        class Mode(Enum):
            SCALE = 1
            SHIFT = 2

        @dataclass(frozen=True)
        class Args:
            factor: float
            mode: Mode = Mode.SCALE

        @nki.jit
        def k(a, kargs: Args):
            assert sizeinbytes(nl.bfloat16) == 2 and sizeinbytes(a.dtype) == 4
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            t = nl.load(a)
            fn = nl.multiply if kargs.mode == Mode.SCALE else nl.add
            nl.store(out, value=fn(t, kargs.factor))
            return out
    """, header=HEADER)
    from tusk.frontend.args import arg_text, parse_value

    src = A[:128, :64]
    for text, want in (("Args(factor=3.0)", 3 * src), ("Args(2.0, mode=Mode.SHIFT)", src + 2)):
        value = parse_value(text)
        assert arg_text(value) == text
        got = run_klr(trace_file(path, "k", ["f32[128,64]"], args={"kargs": value}), {"a": src})["out"]
        assert np.allclose(got, want)
    with pytest.raises(TraceError, match=r"argument kargs=Args\(factor='x', mode=Mode.NONE\): AttributeError"):
        trace_file(path, "k", ["f32[128,64]"], args={"kargs": parse_value("Args(factor='x', mode=Mode.NONE)")})
    assert parse_value("print(open('f').read())") == "print(open('f').read())"  # not a call of literals: a string


def test_relative_imports_through_a_namespace_package(tmp_path):
    (tmp_path / "lib" / "util").mkdir(parents=True)
    (tmp_path / "lib" / "__init__.py").write_text("")
    (tmp_path / "lib" / "util" / "helpers.py").write_text(
        "import neuronxcc.nki.language as nl\n\n\ndef tripled(t):\n    return nl.multiply(t, 3.0)\n")
    path = write(tmp_path / "lib" / "norm", """
        from ..util.helpers import tripled

        @nki.jit
        def k(a):
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            t = nl.ndarray((par_dim(128), 64), dtype=nl.float32)
            t[...] = nl.load(a)
            nl.store(out, value=tripled(t[nl.arange(128)[:, None], nl.arange(64)[None, :]][
                (nl.arange(128)[:, None] < 128)]))
            return out
    """, header=HEADER)  # lib/norm has no __init__.py: a namespace package inside the package lib
    src = A[:128, :64]
    assert np.allclose(run_klr(trace_file(path, "k", ["f32[128,64]"]), {"a": src})["out"], 3 * src)


# ====================================================================== a masked statement leaves the rest of its destination

@pytest.mark.parametrize("dtype", ["nl.float32", "nl.bfloat16"])  # the load writes buf itself / a copy does
def test_a_masked_load_assigned_into_a_tile_keeps_the_rows_it_masks(tmp_path, dtype):
    path = write(tmp_path, f"""
        @nki.jit
        def k(a):
            out = nl.ndarray((128, 64), dtype={dtype}, buffer=nl.shared_hbm)
            ip = nl.arange(128)[:, None]
            jf = nl.arange(64)[None, :]
            buf = nl.zeros((128, 64), dtype={dtype})
            buf[ip, jf] = nl.load(a[ip, jf], mask=(ip < 100))
            nl.store(out, value=buf)
            return out
    """, header=HEADER)
    src = A[:128, :64] + 5
    got = run_klr(trace_file(path, "k", ["f32[128,64]"]), {"a": src})["out"]  # strict, and every element written
    assert np.allclose(got[:100], src[:100], rtol=1e-2) and (got[100:] == 0).all()


# ====================================================================== arguments written in place

IN_PLACE = """
    import neuronxcc.nki.typing as nt

    @nki.jit
    def k(x: nt.tensor, acc: nt.tensor[nt.mutable]):
        FIRST
        nl.store(acc, value=nl.multiply(t, 2.0))
        return acc
"""


def test_an_argument_written_but_not_read_first_is_an_output_and_nt_mutable_is_an_annotation(tmp_path):
    path = write(tmp_path, IN_PLACE.replace("FIRST", "t = nl.load(x)"), header=HEADER)
    got = run_klr(trace_file(path, "k", ["f32[128,64]", "f32[128,64]"]), {"x": A[:128, :64]})["acc"]
    assert np.array_equal(got, A[:128, :64] * np.float32(2.0))


def test_an_argument_read_then_written_in_place_is_an_input_and_an_output(tmp_path):
    """acc += x, in place: acc's incoming values are read (before, a written argument was an output only: the
    read saw no data, and the result was wrong without a word), before and after the default pipeline."""
    from tests.test_isa_ops import through_pipeline
    from tusk.sim.interp import run

    path = write(tmp_path, IN_PLACE.replace("acc: nt.tensor[nt.mutable]", "acc").replace(
        "FIRST", "t = nl.add(nl.load(acc), nl.load(x))"), header=HEADER)
    data = trace_file(path, "k", ["f32[128,64]", "f32[128,64]"])
    kernel = klr.read_klr(data).contents.kernel
    assert [t.name for t in kernel.inputs] == ["x", "acc"] and [t.name for t in kernel.outputs] == ["acc"]
    x, acc = A[:128, :64], B[:128, :64]
    want = (acc + x) * np.float32(2.0)
    assert np.array_equal(run_klr(data, {"x": x, "acc": acc})["acc"], want)
    assert np.array_equal(run(through_pipeline(data, tmp_path), {"x": x, "acc": acc})["acc"], want)


@pytest.mark.parametrize("future", [False, True])
def test_an_nt_mutable_argument_written_in_part_keeps_the_rest(tmp_path, future):
    """A KV-cache update: rows 16..47 of the cache replaced, the others as the caller gave them (also with the
    annotations left as strings by ``from __future__ import annotations``)."""
    from tests.test_isa_ops import through_pipeline
    from tusk.sim.interp import run

    body = """
    import neuronxcc.nki.typing as nt

    @nki.jit
    def k(new: nt.tensor, cache: nt.tensor[nt.mutable]):
        nl.store(cache[16:48, :], value=nl.load(new))
        return cache
    """
    header = "from __future__ import annotations\n" + HEADER if future else HEADER
    data = trace_file(write(tmp_path, body, header=header), "k", ["f32[32,64]", "f32[128,64]"])
    assert [t.name for t in klr.read_klr(data).contents.kernel.inputs] == ["new", "cache"]
    new, cache = A[:32, :64], B[:128, :64]
    want = cache.copy()
    want[16:48] = new
    assert np.array_equal(run_klr(data, {"new": new, "cache": cache})["cache"], want)
    assert np.array_equal(run(through_pipeline(data, tmp_path), {"new": new, "cache": cache})["cache"], want)


def test_an_argument_copied_within_itself_keeps_its_incoming_values(tmp_path):
    """One DMA reads and writes the argument: it reads the incoming values, so the argument is in/out."""
    body = """
    @nki.jit
    def k(buf):
        nisa.dma_copy(dst=buf[0:64, :], src=buf[64:128, :])
        return buf
    """
    data = trace_file(write(tmp_path, body, header=HEADER), "k", ["f32[128,64]"])
    buf = B[:128, :64]
    want = buf.copy()
    want[0:64] = buf[64:128]
    assert np.array_equal(run_klr(data, {"buf": buf})["buf"], want)


def test_an_argument_read_after_the_kernel_wrote_other_rows_of_it_is_in_out(tmp_path):
    """Rows 0..63 written first, then rows 64..127 read and doubled in place: the read needs the incoming
    values though a write came before it (which elements a read reaches is not tracked)."""
    body = """
    @nki.jit
    def k(a):
        nl.store(a[0:64, :], value=nl.zeros((64, 64), dtype=nl.float32))
        t = nl.load(a[64:128, :])
        nl.store(a[64:128, :], value=nl.multiply(t, 2.0))
        return a
    """
    data = trace_file(write(tmp_path, body, header=HEADER), "k", ["f32[128,64]"])
    assert [t.name for t in klr.read_klr(data).contents.kernel.inputs] == ["a"]
    a = B[:128, :64]
    want = np.concatenate([np.zeros((64, 64), np.float32), a[64:] * np.float32(2.0)])
    assert np.array_equal(run_klr(data, {"a": a})["a"], want)
