"""Indirect DMAs with ``oob_mode`` and ``dst_rmw_op``, ``nl.atomic_rmw``, ``nki.compiler`` allocation hints, ``nki.isa.constants``,
configuration dataclasses and a full-mask stream shuffle: kernels written for these tests, traced, run in the
interpreter (strict: every byte read was written) and compared with numpy."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

from tusk.frontend import TraceError, trace_file
from tusk.frontend.check import run_klr

V1 = """\
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import neuronxcc.nki.compiler as ncc
"""
V2 = """\
from dataclasses import dataclass
import numpy as np
import nki
import nki.isa as nisa
import nki.language as nl
from nki.isa import constants
"""
RNG = np.random.default_rng(11)


def run(tmp_path, header: str, body: str, inputs: dict[str, np.ndarray],
        specs: list[str] | None = None) -> dict[str, np.ndarray]:
    path = tmp_path / "k.py"
    path.write_text(header + textwrap.dedent(body))
    specs = specs or [f"f32[{','.join(map(str, a.shape))}]" for a in inputs.values()]
    return run_klr(trace_file(path, "k", specs), inputs)


GATHER = """
    @nki.jit
    def k(x):
        out = nl.ndarray((16, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        idx = nisa.iota(5 * nl.arange(16)[:, None], dtype=np.int32)
        t = nisa.memset(shape=(16, 8), value=-2.0, dtype=nl.float32)
        ip, jf = nl.mgrid[0:16, 0:8]
        nisa.dma_copy(src=x[idx, jf], dst=t[ip, jf], oob_mode=nisa.oob_mode.MODE)
        nl.store(out, t)
        return out
"""


def test_oob_skip_leaves_the_rows_past_the_tensor_as_they_were(tmp_path):
    x = RNG.uniform(-1, 1, (40, 8)).astype(np.float32)
    got = run(tmp_path, V1, GATHER.replace("MODE", "skip"), {"x": x})["out"]
    want = np.full((16, 8), -2.0, np.float32)
    want[:8] = x[5 * np.arange(8)]  # 5 * 8 = 40 is the first index past the 40 rows
    np.testing.assert_array_equal(got, want)


def test_oob_error_with_a_known_index_past_the_tensor_is_refused_at_the_call(tmp_path):
    path = tmp_path / "bad.py"
    path.write_text(V1 + textwrap.dedent(GATHER.replace("MODE", "error")))
    with pytest.raises(TraceError) as e:
        trace_file(path, "k", ["f32[40,8]"])
    assert "bad.py:13:" in str(e.value) and "index 40 of the index tile is outside the 40 rows" in str(e.value)


def test_dst_rmw_op_adds_into_the_scattered_rows(tmp_path):
    x = RNG.uniform(-1, 1, (8, 16)).astype(np.float32)
    got = run(tmp_path, V1, """
        @nki.jit
        def k(x):
            out = nl.ndarray((24, 16), dtype=nl.float32, buffer=nl.shared_hbm)
            nl.store(out, nisa.memset(shape=(24, 16), value=3.0, dtype=nl.float32))
            t = nl.load(x)
            idx = nisa.iota(3 * nl.arange(8)[:, None] + 1, dtype=np.int32)
            ip, jf = nl.mgrid[0:8, 0:16]
            nisa.dma_copy(dst=out[idx, jf], src=t, dst_rmw_op=np.add)
            return out
    """, {"x": x})["out"]
    want = np.full((24, 16), 3.0, np.float32)
    want[3 * np.arange(8) + 1] += x
    np.testing.assert_array_equal(got, want)


def test_dst_rmw_op_with_runtime_indices_and_oob_skip_adds_into_the_rows_in_bounds(tmp_path):
    x = RNG.uniform(-1, 1, (8, 16)).astype(np.float32)
    rows = np.array([[4], [-1], [23], [24], [0], [9], [-7], [30]], np.int32)
    got = run(tmp_path, V1, """
        @nki.jit
        def k(x, rows):
            out = nl.ndarray((24, 16), dtype=nl.float32, buffer=nl.shared_hbm)
            nl.store(out, nisa.memset(shape=(24, 16), value=3.0, dtype=nl.float32))
            t = nl.load(x)
            idx = nl.load(rows)
            ip, jf = nl.mgrid[0:8, 0:16]
            nisa.dma_copy(dst=out[idx, jf], src=t, dst_rmw_op=np.add, oob_mode=nisa.oob_mode.skip)
            return out
    """, {"x": x, "rows": rows}, ["f32[8,16]", "i32[8,1]"])["out"]
    want = np.full((24, 16), 3.0, np.float32)
    ok = (rows[:, 0] >= 0) & (rows[:, 0] < 24)
    want[rows[ok, 0]] += x[ok]
    np.testing.assert_array_equal(got, want)


def test_dst_rmw_op_adds_every_value_of_a_row_the_index_tile_names_twice(tmp_path):
    x = RNG.uniform(-1, 1, (8, 16)).astype(np.float32)
    rows = np.array([[0], [2], [2], [5], [0], [0], [3], [2]], np.int32)
    got = run(tmp_path, V1, """
        @nki.jit
        def k(x, rows):
            out = nl.ndarray((6, 16), dtype=nl.float32, buffer=nl.shared_hbm)
            nl.store(out, nisa.memset(shape=(6, 16), value=1.0, dtype=nl.float32))
            ip, jf = nl.mgrid[0:8, 0:16]
            nisa.dma_copy(dst=out[nl.load(rows), jf], src=nl.load(x), dst_rmw_op=np.add)
            return out
    """, {"x": x, "rows": rows}, ["f32[8,16]", "i32[8,1]"])["out"]
    want = np.ones((6, 16), np.float32)
    np.add.at(want, rows[:, 0], x)  # row 0 gets three updates, row 2 three, in index order
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert not np.array_equal(got[0], 1.0 + x[5])  # not the last update alone


ATOMIC = """
    @nki.jit
    def k(x, bins):
        counts = nl.ndarray((5, 4), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(counts, nl.zeros((5, 4), dtype=nl.float32))
        b = nl.load(bins)
        jf = nl.arange(4)[None, :]
        nl.atomic_rmw(counts[b, jf], value=1, op=np.add)
        nl.atomic_rmw(counts[b, jf], value=nl.load(x, dtype=nl.bfloat16), op=OP)
        return counts
"""


def test_atomic_rmw_counts_every_hit_of_a_bin_and_adds_a_tile_cast_to_dst_dtype(tmp_path):
    x = (np.arange(12 * 4, dtype=np.float32).reshape(12, 4) % 9 - 4) / 8  # exact in bfloat16
    bins = np.array([[1], [3], [1], [1], [0], [3], [4], [1], [0], [3], [1], [4]], np.int32)
    got = run(tmp_path, V1, ATOMIC.replace("OP", "np.add"), {"x": x, "bins": bins},
              ["f32[12,4]", "i32[12,1]"])["counts"]
    want = np.zeros((5, 4), np.float32)
    np.add.at(want, bins[:, 0], 1.0 + x)
    np.testing.assert_array_equal(got, want)
    assert got[2].tolist() == [0.0] * 4 and got[1, 0] == 5 + x[[0, 2, 3, 7, 10], 0].sum()


def test_atomic_rmw_of_an_op_other_than_add_is_refused_at_its_line(tmp_path):
    path = tmp_path / "k.py"
    path.write_text(V1 + textwrap.dedent(ATOMIC.replace("OP", "np.maximum")))
    with pytest.raises(TraceError) as e:
        trace_file(path, "k", ["f32[12,4]", "i32[12,1]"])
    assert "k.py:14:" in str(e.value)  # the second call's line
    assert "nl.atomic_rmw op=<ufunc 'maximum'> (NKI supports np.add only)" in str(e.value)


def test_a_bfloat16_scatter_add_with_oob_skip_adds_values_not_their_bits(tmp_path):
    # the skipping path read raw storage when the dtypes matched; for an add, bfloat16 bits summed as
    # integers (values exact in bfloat16, so the expected sums are exact)
    x = (np.arange(8 * 16, dtype=np.float32).reshape(8, 16) % 7 - 3) / 4
    rows = np.array([[4], [-1], [23], [24], [0], [9], [-7], [30]], np.int32)
    got = run(tmp_path, V1, """
        @nki.jit
        def k(x, rows):
            out = nl.ndarray((24, 16), dtype=nl.float32, buffer=nl.shared_hbm)
            acc = nl.ndarray((24, 16), dtype=nl.bfloat16, buffer=nl.shared_hbm)
            nl.store(acc, nisa.memset(shape=(24, 16), value=1.5, dtype=nl.bfloat16))
            t = nl.load(x, dtype=nl.bfloat16)
            idx = nl.load(rows)
            ip, jf = nl.mgrid[0:8, 0:16]
            nisa.dma_copy(dst=acc[idx, jf], src=t, dst_rmw_op=np.add, oob_mode=nisa.oob_mode.skip)
            nl.store(out, nl.load(acc, dtype=nl.float32))
            return out
    """, {"x": x, "rows": rows}, ["f32[8,16]", "i32[8,1]"])["out"]
    want = np.full((24, 16), 1.5, np.float32)
    ok = (rows[:, 0] >= 0) & (rows[:, 0] < 24)
    want[rows[ok, 0]] += x[ok]
    np.testing.assert_array_equal(got, want)


def test_compiler_allocation_hints_are_the_plain_buffers(tmp_path):
    x = RNG.uniform(-1, 1, (32, 64)).astype(np.float32)
    got = run(tmp_path, V1, """
        @nki.jit
        def k(x):
            out = nl.ndarray((32, 64), dtype=nl.float32, buffer=nl.shared_hbm)
            a = nl.ndarray((nl.par_dim(32), 64), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=512))
            b = nl.ndarray((nl.par_dim(32), 64), dtype=nl.float32, buffer=ncc.sbuf.alloc(lambda *i: (0, 0)))
            a[...] = nl.load(x)
            b[...] = nl.exp(a)
            nl.store(out, b)
            return out
    """, {"x": x})["out"]
    np.testing.assert_allclose(got, np.exp(x), rtol=1e-6)


def test_isa_constants_configuration_dataclasses_and_a_full_mask_shuffle(tmp_path):
    x = RNG.uniform(-1, 1, (32, 16)).astype(np.float32)
    got = run(tmp_path, V2, """
        @dataclass
        class Config(nl.NKIObject):
            shift = None

        @nki.jit
        def k(x):
            cfg = Config(shift=3)
            out = nl.ndarray((32, 16), dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.ndarray((32, 16), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x, dge_mode=constants.dge_mode.hwdge)
            moved = nl.ndarray((32, 16), dtype=nl.float32, buffer=nl.sbuf)
            nisa.nc_stream_shuffle(dst=moved, src=t, shuffle_mask=[(i + cfg.shift) % 32 for i in range(32)])
            nisa.dma_copy(dst=out, src=moved)
            return out
    """, {"x": x})["out"]
    np.testing.assert_array_equal(got, x[(np.arange(32) + 3) % 32])


def test_a_returned_sbuf_tile_is_an_output_holding_its_contents(tmp_path):
    x = RNG.uniform(-1, 1, (16, 32)).astype(np.float32)
    got = run(tmp_path, V1, """
        @nki.jit
        def k(x):
            total = nl.ndarray((16, 1), dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.exp(nl.load(x))
            nl.store(total, nl.sum(t, axis=1, keepdims=True))
            return t, total
    """, {"x": x})
    returned = next(v for n, v in got.items() if n != "total")
    np.testing.assert_allclose(returned, np.exp(x), rtol=1e-6)
    np.testing.assert_allclose(got["total"][:, 0], np.exp(x).sum(1), rtol=1e-5)


def test_a_dma_copy_that_casts_a_1d_integer_indexed_view_stages_it_as_its_destination(tmp_path):
    """bf16 row ``b[0, 0:256]`` (1-D) into f32 ``sb[0, :256]``, and f32 column ``c[:, 1]`` into bf16
    ``cb[:, 0]``: the DMA fills a tile laid out as the destination, the copy casts (not a 256-partition
    stage shaped as the 1-D source)."""
    b = (np.arange(256, dtype=np.float32) / 8 - 16).reshape(1, 256)  # exact in bfloat16
    c = (RNG.integers(-64, 64, (128, 2)) / 4).astype(np.float32)
    got = run(tmp_path, V2, """
        @nki.jit
        def k(b, c):
            row = nl.ndarray((1, 256), dtype=nl.float32, buffer=nl.shared_hbm)
            col = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
            sb = nl.ndarray((1, 256), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=sb[0, :256], src=b[0, 0:256])
            nisa.dma_copy(dst=row, src=sb)
            cb = nl.ndarray((128, 1), dtype=nl.bfloat16, buffer=nl.sbuf)
            nisa.dma_copy(dst=cb[:, 0], src=c[:, 1])
            cf = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=cf, src=cb)
            nisa.dma_copy(dst=col, src=cf)
            return row, col
    """, {"b": b, "c": c}, ["bf16[1,256]", "f32[128,2]"])
    np.testing.assert_array_equal(got["row"], b)
    np.testing.assert_array_equal(got["col"][:, 0], c[:, 1])


SCALAR_OFFSET = """
    @nki.jit
    def k(table, which):
        out = nl.ndarray((4, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        w = nl.ndarray((4, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=w, src=which)
        rows = nl.ndarray((4, 8), dtype=nl.float32, buffer=nl.sbuf)
        for i in range(4):
            src = table.ap(pattern=[[8, 1], [1, 8]], offset=0, scalar_offset=w.ap(pattern=[[1, 1], [1, 1]], offset=i),
                           indirect_dim=0)
            nisa.dma_copy(dst=rows[i:i + 1, :], src=src)
        nisa.dma_copy(dst=out, src=rows)
        return out
"""


def test_ap_scalar_offset_of_a_tile_moves_the_access_at_run_time(tmp_path):
    table = RNG.uniform(-1, 1, (10, 8)).astype(np.float32)
    which = np.array([[7], [0], [9], [3]], np.int32)
    path = tmp_path / "k.py"
    path.write_text(V2 + textwrap.dedent(SCALAR_OFFSET))
    got = run_klr(trace_file(path, "k", ["f32[10,8]", "i32[4,1]"]), {"table": table, "which": which})["out"]
    np.testing.assert_array_equal(got, table[which[:, 0]])


@pytest.mark.parametrize("row", [0, 5, 128])
def test_ap_scalar_offset_beside_a_loop_index_unrolls_the_loop(tmp_path, row):
    """nki-library's dynamic_elementwise_add: ``.ap(offset=h * 512, scalar_offset=r, indirect_dim=0)`` in an
    nl.affine_range loop (KLR has one scalar offset per access: each iteration gets its own access)."""
    a = RNG.uniform(-1, 1, (256, 1024)).astype(np.float32)
    got = run(tmp_path, V2, """
        @nki.jit
        def k(a, row):
            out = nl.ndarray((128, 1024), dtype=a.dtype, buffer=nl.shared_hbm)
            r = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
            nisa.dma_copy(dst=r, src=row)
            for h in nl.affine_range(2):
                t = nl.ndarray((128, 512), dtype=a.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=t, src=a.ap(pattern=[[1024, 128], [1, 512]], offset=h * 512, scalar_offset=r,
                                               indirect_dim=0))
                nisa.dma_copy(dst=out[:, nl.ds(h * 512, 512)], src=t)
            return out
    """, {"a": a, "row": np.array([[row]], np.int32)}, specs=["f32[256,1024]", "i32[1,1]"])["out"]
    np.testing.assert_array_equal(got, a[row:row + 128])


def test_a_view_of_a_runtime_offset_access_is_refused(tmp_path):
    path = tmp_path / "bad.py"
    path.write_text(V2 + textwrap.dedent(SCALAR_OFFSET.replace("nisa.dma_copy(dst=rows[i:i + 1, :], src=src)",
                                                               "nisa.dma_copy(dst=rows[i:i + 1, 0:4], src=src[:, 0:4])")))
    with pytest.raises(TraceError) as e:
        trace_file(path, "k", ["f32[10,8]", "i32[4,1]"])
    assert "bad.py:17:" in str(e.value) and "__getitem__ of an ap(scalar_offset=<a tile>) access" in str(e.value)


def test_nonzero_with_count_fills_the_first_partition_of_each_gpsimd_core(tmp_path):
    x = (RNG.uniform(0, 1, (32, 24)) > 0.6).astype(np.float32) * RNG.uniform(1, 2, (32, 24)).astype(np.float32)
    got = run(tmp_path, V2, """
        @nki.jit
        def k(x):
            out = nl.ndarray((2, 25), dtype=nl.int32, buffer=nl.shared_hbm)
            t = nl.ndarray((32, 24), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x)
            r = nl.ndarray((32, 25), dtype=nl.int32, buffer=nl.sbuf)
            nisa.nonzero_with_count(dst=r, src=t, index_offset=100, padding_val=-7)
            nisa.dma_copy(dst=out[0:1, :], src=r[0:1, :])
            nisa.dma_copy(dst=out[1:2, :], src=r[16:17, :])
            return out
    """, {"x": x})["out"]
    for row, p in ((0, 0), (1, 16)):
        nz = np.flatnonzero(x[p])
        want = np.full(25, -7)
        want[:nz.size] = nz + 100
        want[24] = nz.size
        np.testing.assert_array_equal(got[row], want)


def test_nonzero_with_count_leaves_the_other_partitions_unwritten(tmp_path):
    from tusk.frontend.check import UnwrittenOutput

    path = tmp_path / "k.py"
    path.write_text(V2 + textwrap.dedent("""
        @nki.jit
        def k(x):
            out = nl.ndarray((2, 9), dtype=nl.int32, buffer=nl.shared_hbm)
            t = nl.ndarray((32, 8), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x)
            r = nl.ndarray((32, 9), dtype=nl.int32, buffer=nl.sbuf)
            nisa.nonzero_with_count(dst=r, src=t)
            nisa.dma_copy(dst=out, src=r[0:2, :])
            return out
    """))
    with pytest.raises(Exception) as e:
        run_klr(trace_file(path, "k", ["f32[32,8]"]), {"x": np.ones((32, 8), np.float32)})
    assert isinstance(e.value, UnwrittenOutput) or "uninitialised" in str(e.value)


GATHER_TRANSPOSE = """
    @nki.jit
    def k(src_tensor, idx_tensor):
        idx = nl.load(idx_tensor)
        dst = CALL(src_tensor[idx])
        out = nl.ndarray((16, 8), dtype=src_tensor.dtype, buffer=nl.shared_hbm)
        nl.store(out, dst)
        return out
"""


def test_dma_transpose_of_gathered_rows_gathers_first(tmp_path):
    src = RNG.uniform(-1, 1, (32, 16)).astype(np.float32)
    idx = np.array([[3], [1], [7], [0], [9], [2], [5], [30]], np.int32)
    path = tmp_path / "k.py"
    path.write_text(V1 + textwrap.dedent(GATHER_TRANSPOSE.replace("CALL", "nisa.dma_transpose")))
    out = run_klr(trace_file(path, "k", ["f32[32,16]", "i32[8,1]"]), {"src_tensor": src, "idx_tensor": idx})["out"]
    np.testing.assert_array_equal(out, src[idx[:, 0]].T)


def test_load_transpose2d_of_gathered_rows_is_refused_not_wrong(tmp_path):
    path = tmp_path / "bad.py"
    path.write_text(V1 + textwrap.dedent(GATHER_TRANSPOSE.replace("CALL", "nl.load_transpose2d")))
    with pytest.raises(TraceError) as e:
        trace_file(path, "k", ["f32[32,16]", "i32[8,1]"])
    assert "bad.py:10:" in str(e.value) and "nl.load_transpose2d of gathered rows" in str(e.value)


RUNTIME_LOOP = """
    @nki.jit
    def k(x, n):
        out = nl.ndarray((32, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        fill = nl.ndarray((32, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=fill, value=-1.0)
        nisa.dma_copy(dst=out, src=fill)
        n_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=n_sb, src=n)
        trips = nisa.register_alloc()
        nisa.register_load(trips, n_sb)
        row = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.memset(dst=row, value=0)
        for i in nl.dynamic_range(trips):
            t = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x.ap(pattern=[[8, 8], [1, 8]], offset=0, scalar_offset=row, indirect_dim=0))
            nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0)
            nisa.dma_copy(dst=out.ap(pattern=[[8, 8], [1, 8]], offset=0, scalar_offset=row, indirect_dim=0), src=t)
            nisa.tensor_scalar(dst=row, data=row, op0=nl.add, operand0=8)
            USE
        return out
"""


@pytest.mark.parametrize("trips", [1, 3])
def test_dynamic_range_bounded_by_a_register_runs_that_many_times(tmp_path, trips):
    x = RNG.uniform(-1, 1, (32, 8)).astype(np.float32)
    path = tmp_path / "k.py"
    path.write_text(V2 + textwrap.dedent(RUNTIME_LOOP.replace("USE", "pass")))
    got = run_klr(trace_file(path, "k", ["f32[32,8]", "i32[1,1]"]),
                  {"x": x, "n": np.array([[trips]], np.int32)})["out"]
    want = np.full((32, 8), -1.0, np.float32)
    want[:8 * trips] = 2 * x[:8 * trips]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("start, step, bound", [(2, 1, 4), (1, 2, 6), (3, 1, 2)])
def test_a_register_bounded_loop_from_an_int_start_by_an_int_step(tmp_path, start, step, bound):
    """``nl.dynamic_range(start, reg, step)`` (nki-library's moe_cte hybrid writes ``(2, reg)``): the counter runs
    from start while below the register; the body runs len(range(start, bound, step)) times."""
    x = RNG.uniform(-1, 1, (32, 8)).astype(np.float32)
    path = tmp_path / "k.py"
    body = RUNTIME_LOOP.replace("USE", "pass").replace("nl.dynamic_range(trips)",
                                                       f"nl.dynamic_range({start}, trips, {step})")
    path.write_text(V2 + textwrap.dedent(body))
    got = run_klr(trace_file(path, "k", ["f32[32,8]", "i32[1,1]"]),
                  {"x": x, "n": np.array([[bound]], np.int32)})["out"]
    runs = len(range(start, bound, step))
    want = np.full((32, 8), -1.0, np.float32)
    want[:8 * runs] = 2 * x[:8 * runs]
    np.testing.assert_array_equal(got, want)


def test_a_runtime_offset_on_a_reshaped_view_moves_by_its_stride(tmp_path):
    """``t.reshape((4, 256)).ap(..., scalar_offset=s, indirect_dim=0)`` over a ``[1024]`` tensor: KLR scales the
    value by one of the tensor's own strides, so the front end scales it by 256 first (a tile, and a register)."""
    tab = RNG.uniform(-1, 1, (1024,)).astype(np.float32)
    path = tmp_path / "k.py"
    path.write_text(V2 + textwrap.dedent("""
        @nki.jit
        def k(tab, blk):
            out = nl.ndarray((128, 2), dtype=tab.dtype, buffer=nl.shared_hbm)
            b = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
            nisa.dma_copy(dst=b, src=blk)
            t = nl.ndarray((128, 2), dtype=tab.dtype, buffer=nl.sbuf)
            view = tab.reshape((4, 256))
            nisa.dma_copy(dst=t[:, 0:1], src=view.ap(pattern=[[1, 128], [1, 1]], offset=0, scalar_offset=b,
                                                      indirect_dim=0))
            r = nisa.register_alloc()
            nisa.register_load(r, b)
            nisa.dma_copy(dst=t[:, 1:2], src=view.ap(pattern=[[1, 128], [1, 1]], offset=128, scalar_offset=r,
                                                      indirect_dim=0))
            nisa.dma_copy(dst=out, src=t)
            return out
    """))
    data = trace_file(path, "k", ["f32[1024]", "i32[1,1]"])
    for b in (0, 2, 3):
        got = run_klr(data, {"tab": tab, "blk": np.array([[b]], np.int32)})["out"]
        rows = tab.reshape(4, 256)[b]
        np.testing.assert_array_equal(got, np.stack([rows[:128], rows[128:]], axis=1))


def test_the_index_of_a_register_bounded_loop_is_refused_where_it_is_used(tmp_path):
    path = tmp_path / "bad.py"
    path.write_text(V2 + textwrap.dedent(RUNTIME_LOOP.replace("USE", "j = i * 8")))
    with pytest.raises(TraceError) as e:
        trace_file(path, "k", ["f32[32,8]", "i32[1,1]"])
    assert "bad.py:26:" in str(e.value) and "bounded by a register" in str(e.value)


def test_nl_gather_flattened_indexes_every_partitions_flattened_free_dims(tmp_path):
    data = RNG.uniform(-1, 1, (16, 4, 8)).astype(np.float32)
    idx = RNG.integers(0, 32, (16, 6)).astype(np.int32)
    path = tmp_path / "k.py"
    path.write_text(V1 + textwrap.dedent("""
        @nki.jit
        def k(data, idx):
            out = nl.ndarray((16, 6), dtype=nl.float32, buffer=nl.shared_hbm)
            nl.store(out, nl.gather_flattened(nl.load(data), nl.load(idx)))
            return out
    """))
    got = run_klr(trace_file(path, "k", ["f32[16,4,8]", "i32[16,6]"]), {"data": data, "idx": idx})["out"]
    np.testing.assert_array_equal(got, np.take_along_axis(data.reshape(16, -1), idx, axis=1))


def test_gathered_rows_subscripted_with_aranges_then_transposed(tmp_path):
    src = RNG.uniform(-1, 1, (20, 3, 16)).astype(np.float32)
    idx = np.array([[4], [19], [0], [7], [7], [2], [11], [5]], np.int32)
    path = tmp_path / "k.py"
    path.write_text(V1 + textwrap.dedent("""
        @nki.jit
        def k(src, idx_t):
            idx = nl.load(idx_t)
            i_p = nl.arange(8)[:, None]
            iy = nl.arange(3)[None, :, None]
            iz = nl.arange(16)[None, None, :]
            t = nisa.dma_transpose(src[idx[i_p, 0], iy, iz], axes=(2, 1, 0))
            out = nl.ndarray((16, 3, 8), dtype=src.dtype, buffer=nl.shared_hbm)
            nl.store(out, t)
            return out
    """))
    got = run_klr(trace_file(path, "k", ["f32[20,3,16]", "i32[8,1]"]), {"src": src, "idx_t": idx})["out"]
    np.testing.assert_array_equal(got, np.transpose(src[idx[:, 0]], (2, 1, 0)))


SBUF_GATHER = """
@nki.jit
def k(a, idx):
    out = nl.ndarray((16, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    rows = nl.load(idx)
    g = nl.ndarray((16, 64), dtype=a.dtype, buffer=nl.sbuf)
    {use}
    nl.store(out, g)
    return out
"""


def test_a_dma_gathers_partitions_of_an_sbuf_tile_by_an_index_tile(tmp_path):
    a = RNG.standard_normal((32, 64)).astype(np.float32)
    idx = RNG.permutation(32)[:16].reshape(16, 1).astype(np.int32)
    path = tmp_path / "k.py"
    path.write_text(V1 + SBUF_GATHER.format(use="nisa.dma_copy(dst=g, src=t[rows, nl.arange(64)[None, :]])"))
    got = run_klr(trace_file(path, "k", ["f32[32,64]", "i32[16,1]"]), {"a": a, "idx": idx})["out"]
    np.testing.assert_array_equal(got, a[idx[:, 0]])


def test_a_compute_instruction_on_a_gathered_sbuf_view_is_refused(tmp_path):
    path = tmp_path / "k.py"
    path.write_text(V1 + SBUF_GATHER.format(use="g[...] = nl.exp(t[rows, nl.arange(64)[None, :]])"))
    with pytest.raises(TraceError) as e:
        trace_file(path, "k", ["f32[32,64]", "i32[16,1]"])
    assert "k.py:13" in str(e.value) and "indexed by a tile" in str(e.value)


AP_GATHER = """
    @nki.jit
    def k(table, rows):
        n, c = rows.shape[0], table.shape[1]
        out = nl.ndarray((n, c - 2), dtype=table.dtype, buffer=nl.shared_hbm)
        idx = nl.ndarray((n, 1), dtype=rows.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=idx, src=rows)
        got = nl.ndarray((n, c - 2), dtype=table.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=got, src=table.ap(pattern=[[STEP, n], [1, c - 2]], offset=2, vector_offset=idx,
                                            indirect_dim=0))
        moved = nl.ndarray((64, c - 2), dtype=table.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=moved.ap(pattern=[[c - 2, n], [1, c - 2]], offset=0, vector_offset=idx, indirect_dim=0),
                      src=got)
        nisa.dma_copy(dst=out, src=got)
        return out, moved
"""


def test_an_access_pattern_with_a_vector_offset_gathers_and_scatters_rows(tmp_path):
    path = tmp_path / "k.py"
    path.write_text(V2 + textwrap.dedent(AP_GATHER.replace("STEP", "c")))
    table = RNG.standard_normal((64, 8)).astype(np.float32)
    rows = RNG.permutation(64)[:32].astype(np.int32).reshape(32, 1)  # distinct: the scatter writes each row once
    data = trace_file(path, "k", ["f32[64,8]", "i32[32,1]"])
    got = run_klr(data, {"table": table, "rows": rows}, check_written=False)
    gathered = table[rows[:, 0], 2:]
    assert np.array_equal(got["out"], gathered)
    assert np.array_equal(got["moved"][rows[:, 0]], gathered)


def test_a_vector_offset_whose_pattern_does_not_walk_the_rows_is_refused(tmp_path):
    path = tmp_path / "k.py"
    path.write_text(V2 + textwrap.dedent(AP_GATHER.replace("STEP", "1")))
    with pytest.raises(TraceError, match=r"the first pair must walk the 32 gathered rows with the row stride, \[8, 32\]"):
        trace_file(path, "k", ["f32[64,8]", "i32[32,1]"])


VECTOR_SELECT = """
    @nki.jit
    def k(table, rows):
        n, c = rows.shape[0], table.shape[2]
        out = nl.ndarray((n, 3, c - 2), dtype=table.dtype, buffer=nl.shared_hbm)
        idx = nl.ndarray((n, 1), dtype=rows.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=idx, src=rows)
        got = nl.ndarray((n, 3, c - 2), dtype=table.dtype, buffer=nl.sbuf)
        src = table[:, :, 2:].vector_select(0, idx)
        assert src.shape == (n, 3, c - 2)
        nisa.dma_copy(dst=got, src=src)
        moved = nl.ndarray(table.shape, dtype=table.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=moved.vector_select(0, idx), src=nl.zeros((n, 3, c), dtype=table.dtype, buffer=nl.sbuf))
        nisa.dma_copy(dst=moved[:, :, 2:].vector_select(dim=0, vector_offset=idx), src=got)
        nisa.dma_copy(dst=out, src=got)
        return out, moved
"""


def test_vector_select_gathers_and_scatters_rows_of_an_hbm_tensor(tmp_path):
    path = tmp_path / "k.py"
    path.write_text(V2 + textwrap.dedent(VECTOR_SELECT))
    table = RNG.standard_normal((64, 3, 8)).astype(np.float32)
    rows = RNG.permutation(64)[:32].astype(np.int32).reshape(32, 1)  # distinct: the scatter writes each row once
    got = run_klr(trace_file(path, "k", ["f32[64,3,8]", "i32[32,1]"]), {"table": table, "rows": rows},
                  check_written=False)
    gathered = table[rows[:, 0], :, 2:]
    np.testing.assert_array_equal(got["out"], gathered)
    np.testing.assert_array_equal(got["moved"][rows[:, 0], :, 2:], gathered)
    np.testing.assert_array_equal(got["moved"][rows[:, 0], :, :2], 0)


@pytest.mark.parametrize("use, words", [
    ("table.vector_select(1, idx)", "vector_select(1, ...) (NKI's vector offset indexes axis 0)"),
    ("idx.vector_select(0, idx)", "vector_select of an on-chip tile"),
    ("table.vector_select(0, 3)", "vector_select(0, int) (an integer [P, 1] SBUF column of row indices)"),
    ("table.reshape((32, 6, 8))[0:16].vector_select(0, idx)",
     "vector_select of a view whose axis 0 steps 48 elements, not the 24 of a row"),
])
def test_a_vector_select_nki_does_not_define_is_refused_at_its_line(tmp_path, use, words):
    path = tmp_path / "bad.py"
    path.write_text(V2 + textwrap.dedent(VECTOR_SELECT.replace("table[:, :, 2:].vector_select(0, idx)", use)))
    with pytest.raises(TraceError) as e:
        trace_file(path, "k", ["f32[64,3,8]", "i32[32,1]"])
    line = V2.count("\n") + 9
    assert f"bad.py:{line}: not supported: {words}" in str(e.value), str(e.value)


VECTOR_SELECT_OF_A_RESHAPE = """
    @nki.jit
    def k(cache, rows):
        # cache (b, s, 1, d) seen as (b * s, d) rows, as a KV-cache update does: NKI's reshape is a tensor of
        # that shape, so the index counts its rows (d elements), not the cache's (s * d)
        b, s, _, d = cache.shape
        n = rows.shape[0]
        idx = nl.ndarray((n, 1), dtype=rows.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=idx, src=rows)
        got = nl.ndarray((n, d), dtype=cache.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=got, src=cache.reshape((b * s, d)).vector_select(0, idx))
        out = nl.ndarray((n, d), dtype=cache.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=got)
        moved = nl.ndarray(cache.shape, dtype=cache.dtype, buffer=nl.shared_hbm)
        flat = moved.reshape((b * s, d))
        for r in nl.affine_range(b * s // 16):
            nisa.dma_copy(dst=flat[nl.ds(r * 16, 16), :], src=nl.zeros((16, d), dtype=cache.dtype, buffer=nl.sbuf))
        nisa.dma_copy(dst=flat.ap([[d, n], [1, d]], vector_offset=idx, indirect_dim=0), src=got)
        cols = nl.ndarray((n, 1), dtype=cache.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=cols, src=cache.reshape((b * s * d, 1)).vector_select(0, idx))
        col_out = nl.ndarray((n, 1), dtype=cache.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=col_out, src=cols)
        return out, moved, col_out
"""


def test_vector_select_and_a_vector_offset_count_the_rows_of_a_reshaped_hbm_tensor(tmp_path):
    # gpt-oss decode (nkipy) scatters a token's V row into cache_v.reshape((b * s, h * d)).vector_select(0, off):
    # refused before ("axis 0 steps 64 elements, not the 16384 of a row"), as the 1.x t.reshape(...)[idx] is not
    path = tmp_path / "k.py"
    path.write_text(V2 + textwrap.dedent(VECTOR_SELECT_OF_A_RESHAPE))
    cache = RNG.standard_normal((4, 8, 1, 16)).astype(np.float32)
    rows = np.array([[3], [31], [8], [17], [0], [22]], np.int32)
    got = run_klr(trace_file(path, "k", ["f32[4,8,1,16]", "i32[6,1]"]), {"cache": cache, "rows": rows},
                  check_written=False)
    flat = cache.reshape(32, 16)
    np.testing.assert_array_equal(got["out"], flat[rows[:, 0]])
    want = np.zeros((32, 16), np.float32)
    want[rows[:, 0]] = flat[rows[:, 0]]
    np.testing.assert_array_equal(got["moved"].reshape(32, 16), want)
    np.testing.assert_array_equal(got["col_out"][:, 0], cache.reshape(-1)[rows[:, 0]])


OOB_SKIP_AT_RUN_TIME = """
    @nki.jit
    def k(x, rows, w, experts):
        n, c = rows.shape[0], x.shape[1]
        idx = nl.ndarray((n, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=idx, src=rows)
        got = nl.ndarray((n, c), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=got, value=-2.0)
        nisa.dma_copy(dst=got, src=x.vector_select(0, idx), oob_mode=nisa.oob_mode.skip)
        half = nl.ndarray((n, c), dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.memset(dst=half, value=-3.0)
        nisa.dma_copy(dst=half, src=x.vector_select(0, idx), oob_mode=nisa.oob_mode.skip)
        gathered = nl.ndarray((n, c), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=gathered, src=got)
        wide = nl.ndarray((n, c), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=wide, src=half)
        halved = nl.ndarray((n, c), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=halved, src=wide)
        scattered = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=scattered, src=nl.zeros(x.shape, dtype=x.dtype, buffer=nl.sbuf))
        nisa.dma_copy(dst=scattered.vector_select(0, idx), src=got, oob_mode=nisa.oob_mode.skip)
        e = nl.ndarray((1, 2), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=e, src=experts)
        wt = nl.ndarray((8, c), dtype=w.dtype, buffer=nl.sbuf)
        kept = nl.ndarray((2, 8, c), dtype=w.dtype, buffer=nl.shared_hbm)
        for j in range(2):  # an expert index past the weights leaves the tile as the first load left it
            nisa.dma_copy(dst=wt, src=w.ap(pattern=[[c, 8], [1, c]], offset=0, scalar_offset=e[0:1, j:j + 1]),
                          oob_mode=nisa.oob_mode.skip)
            nisa.dma_copy(dst=kept[j], src=wt)
        return gathered, halved, scattered, kept
"""


@pytest.mark.parametrize("pipeline", [False, True], ids=["traced", "default pipeline"])
@pytest.mark.parametrize("second", [-1, 4])
def test_oob_skip_with_indices_read_at_run_time_skips_those_rows(tmp_path, pipeline, second):
    # gpt-oss MoE (nkipy blockwise_nki_static): token rows of -1 and an expert of -1 (reuse the loaded weights)
    # were an out-of-bounds error when the DMA ran; through the pipeline a skipped load must not end the
    # tile's earlier value (it was a kill: the reuse read another slot)
    from tests.test_isa_ops import through_pipeline
    from tusk.sim.interp import run as run_bir

    x = RNG.standard_normal((16, 32)).astype(np.float32)
    rows = np.array([[3], [-1], [15], [16], [0], [40], [7], [-5]], np.int32)
    w = RNG.standard_normal((4, 8, 32)).astype(np.float32)
    inputs = {"x": x, "rows": rows, "w": w, "experts": np.array([[2, second]], np.int32)}
    path = tmp_path / "k.py"
    path.write_text(V2 + textwrap.dedent(OOB_SKIP_AT_RUN_TIME))
    klr = trace_file(path, "k", ["f32[16,32]", "i32[8,1]", "f32[4,8,32]", "i32[1,2]"])
    if pipeline:
        sentinel = {n: np.full(s, np.nan, np.float32) for n, s in
                    (("gathered", (8, 32)), ("halved", (8, 32)), ("scattered", (16, 32)), ("kept", (2, 8, 32)))}
        got = run_bir(through_pipeline(klr, tmp_path), {**inputs, **sentinel})
    else:
        got = run_klr(klr, inputs)
    ok = (rows[:, 0] >= 0) & (rows[:, 0] < 16)
    want = np.where(ok[:, None], x[np.clip(rows[:, 0], 0, 15)], -2.0).astype(np.float32)
    np.testing.assert_array_equal(got["gathered"], want)
    bf = (x.view(np.uint32) + 0x7FFF + ((x.view(np.uint32) >> 16) & 1)) >> 16 << 16
    np.testing.assert_array_equal(got["halved"], np.where(ok[:, None], bf.view(np.float32)[np.clip(rows[:, 0], 0, 15)],
                                                         -3.0))
    scattered = np.zeros_like(x)
    scattered[rows[ok, 0]] = x[rows[ok, 0]]
    np.testing.assert_array_equal(got["scattered"], scattered)
    np.testing.assert_array_equal(got["kept"], np.stack([w[2], w[2]]))


SKIP_INTO_SCRATCH = """
    @nki.jit
    def k(x, rows):
        # two internal HBM scratch tensors: a row index past the first is skipped, not written into the second
        n, c = rows.shape[0], x.shape[1]
        idx = nl.ndarray((n, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=idx, src=rows)
        first = nl.ndarray((8, c), dtype=x.dtype, buffer=nl.hbm)
        second = nl.ndarray((8, c), dtype=x.dtype, buffer=nl.hbm)
        zeros = nl.zeros((8, c), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=first, src=zeros)
        nisa.dma_copy(dst=second, src=zeros)
        t = nl.ndarray((n, c), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        nisa.dma_copy(dst=first.vector_select(0, idx), src=t, oob_mode=nisa.oob_mode.skip)
        out = nl.ndarray((16, c), dtype=x.dtype, buffer=nl.shared_hbm)
        for h, part in enumerate((first, second)):
            s = nl.ndarray((8, c), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=s, src=part)
            nisa.dma_copy(dst=out[h * 8:(h + 1) * 8, :], src=s)
        return out
"""


def test_oob_skip_bounds_a_scatter_by_its_own_tensor_not_the_shared_dram(tmp_path):
    from tests.test_isa_ops import through_pipeline
    from tusk.sim.interp import run as run_bir

    x = RNG.standard_normal((4, 16)).astype(np.float32)
    rows = np.array([[2], [8], [9], [5]], np.int32)  # 8 and 9: past first's 8 rows (second's, if contiguous)
    path = tmp_path / "k.py"
    path.write_text(V2 + textwrap.dedent(SKIP_INTO_SCRATCH))
    klr = trace_file(path, "k", ["f32[4,16]", "i32[4,1]"])
    want = np.zeros((16, 16), np.float32)
    want[[2, 5]] = x[[0, 3]]
    np.testing.assert_array_equal(run_klr(klr, {"x": x, "rows": rows})["out"], want)
    got = run_bir(through_pipeline(klr, tmp_path), {"x": x, "rows": rows, "out": np.full((16, 16), np.nan, np.float32)})
    np.testing.assert_array_equal(got["out"], want)


def test_a_dma_that_may_skip_rows_does_not_end_the_value_its_destination_held(tmp_path):
    # liveness: a load of wt by an expert index that may be out of bounds (oob_mode=skip) may leave wt as it
    # was, so it joins wt's instance instead of starting one; as a kill it let the post-schedule SB rotation
    # move the reuse to another slot (gpt-oss blockwise MoE: the SKIP_DMA block read garbage weights)
    import os

    from tusk.ir.liveness import instances
    from tusk.stages.host import host_module_for
    from tusk.stages.translate_nki_ast_to_bir import TranslateNKIASTToBIR

    path = tmp_path / "k.py"
    path.write_text(V2 + textwrap.dedent(OOB_SKIP_AT_RUN_TIME))
    (tmp_path / "k.klr").write_bytes(trace_file(path, "k", ["f32[16,32]", "i32[8,1]", "f32[4,8,32]", "i32[1,2]"]))
    module, _ = TranslateNKIASTToBIR().run(host_module_for(str(tmp_path / "k.klr"), None,
                                                           os.path.join(tmp_path, "art")))
    fn = next(f for f in module.functions if f.name == "k")
    inst = instances(fn)
    wt = fn.memloc_by_name("wt")
    assert inst.simple[wt] and len(inst.of_memloc(wt)) == 1


FORI_BY_REGISTER = """
    @nki.jit
    def k(data, n):
        width = data.shape[1]
        out = nl.ndarray((1, width), dtype=nl.float32, buffer=nl.shared_hbm)
        n_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=n_sb, src=n)
        bound = nisa.register_alloc()
        nisa.register_load(bound, n_sb)
        nisa.dma_copy(dst=out, src=nl.zeros((1, width), dtype=nl.float32, buffer=nl.sbuf))
        cell = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)

        def body(i):
            nisa.dma_copy(dst=cell, src=data.ap([[1, 1], [1, 1]], scalar_offset=i, indirect_dim=1))
            nisa.dma_copy(dst=out.ap([[1, 1], [1, 1]], scalar_offset=i, indirect_dim=1), src=cell)
            CLOBBER

        nl.fori_loop(0, bound, body)
        return out
"""


@pytest.mark.parametrize("trips", [0, 1, 5, 16])
@pytest.mark.parametrize("clobber", ["pass", "nisa.register_move(i, 0)"], ids=["reads i", "writes i"])
def test_a_register_bounded_fori_loop_hands_its_body_the_index_as_a_register(tmp_path, trips, clobber):
    # the NKI reference's fori_loop example: the body reads i as a runtime offset; i is passed by value, so
    # writing it does not move the loop
    data = RNG.uniform(1, 2, (1, 16)).astype(np.float32)
    path = tmp_path / "k.py"
    path.write_text(V2 + textwrap.dedent(FORI_BY_REGISTER.replace("CLOBBER", clobber)))
    got = run_klr(trace_file(path, "k", ["f32[1,16]", "i32[1,1]"]),
                  {"data": data, "n": np.array([[trips]], np.int32)})["out"]
    want = np.zeros((1, 16), np.float32)
    want[0, :trips] = data[0, :trips]
    np.testing.assert_array_equal(got, want)


WHILE_COUNTDOWN = """
    @nki.jit
    def k(data, count):
        out = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        val = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=val, src=data)
        acc = nl.zeros((1, 1), dtype=nl.float32, buffer=nl.sbuf)
        left = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=left, src=count)
        one = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.memset(dst=one, value=1)
        flag = nisa.register_alloc()
        nisa.register_load(flag, left)

        def body(r):
            nisa.tensor_tensor(dst=acc, data1=acc, data2=val, op=nl.add)
            nisa.tensor_tensor(dst=left, data1=left, data2=one, op=nl.subtract)
            nisa.register_load(r, left)
            return RETURNED

        nl.while_loop(flag, body)
        nisa.dma_copy(dst=out, src=acc)
        return out
"""


@pytest.mark.parametrize("count", [0, 1, 4])
def test_a_while_loop_runs_while_the_register_its_body_returns_is_not_zero(tmp_path, count):
    from tests.test_isa_ops import through_pipeline
    from tusk.sim.interp import run

    path = tmp_path / "k.py"
    path.write_text(V2 + textwrap.dedent(WHILE_COUNTDOWN.replace("RETURNED", "r")))
    klr = trace_file(path, "k", ["f32[1,1]", "i32[1,1]"])
    inputs = {"data": np.array([[2.5]], np.float32), "count": np.array([[count]], np.int32)}
    assert run_klr(klr, inputs)["out"][0, 0] == 2.5 * count
    got = run(through_pipeline(klr, tmp_path), {**inputs, "out": np.full((1, 1), np.nan, np.float32)})["out"]
    assert got[0, 0] == 2.5 * count


@pytest.mark.parametrize("returned, words", [("None", "returning None"), ("flag + 0", "arithmetic")])
def test_a_while_loop_body_must_return_a_register(tmp_path, returned, words):
    path = tmp_path / "bad.py"
    path.write_text(V2 + textwrap.dedent(WHILE_COUNTDOWN.replace("RETURNED", returned.replace("flag", "r"))))
    with pytest.raises(TraceError) as e:
        trace_file(path, "k", ["f32[1,1]", "i32[1,1]"])
    assert "bad.py:" in str(e.value) and words in str(e.value)


@pytest.mark.parametrize("loop, params", [("nl.while_loop(flag, body)", "()"), ("nl.while_loop(flag, body)", "(r, s)"),
                                           ("nl.fori_loop(0, 4, body)", "(i, j, *, k)")])
def test_a_loop_body_taking_other_than_one_argument_is_refused_at_the_loops_line(tmp_path, loop, params):
    path = tmp_path / "bad.py"
    text = WHILE_COUNTDOWN.replace("RETURNED", "r").replace("def body(r):", f"def body{params}:")
    path.write_text(V2 + textwrap.dedent(text.replace("nl.while_loop(flag, body)", loop)))
    with pytest.raises(TraceError) as e:
        trace_file(path, "k", ["f32[1,1]", "i32[1,1]"])
    what, arg = ("nl.while_loop", "the condition register") if "while" in loop else ("nl.fori_loop", "the loop index")
    line = V2.count("\n") + textwrap.dedent(text).splitlines().index(f"    {'nl.while_loop(flag, body)'}") + 1
    assert f"bad.py:{line}: not supported: {what} body body{params} (it is called with one argument, {arg})" \
        in str(e.value), str(e.value)


RESIDUAL = """
    @nki.jit
    def k(h, a, m):
        B, S, H = h.shape
        out = nl.ndarray((B, S, H), dtype=nl.float32, buffer=nl.shared_hbm)
        views = [t.reshape((B * S, 2, H // 2)) for t in (out, h, a, m)]
        o2, h2, a2, m2 = views
        for shard in nl.affine_range(2):
            nisa.dma_compute(o2[0:B * S, shard, 0:H // 2],
                             (h2[0:B * S, shard, 0:H // 2], a2[0:B * S, shard, 0:H // 2], m2[0:B * S, shard, 0:H // 2]),
                             scales=(1.0, 1.0, 1.0), reduce_op=nl.add)
        return out
"""


def _residual_inputs():
    return {n: RNG.uniform(-4, 4, (2, 8, 64)).astype(np.float32) for n in ("h", "a", "m")}


def test_dma_compute_sums_its_sources_in_float32(tmp_path):
    x = _residual_inputs()
    got = run(tmp_path, V2, RESIDUAL, x)["out"]
    np.testing.assert_array_equal(got, (x["h"] + x["a"]) + x["m"])


def test_dma_compute_survives_the_default_pipeline(tmp_path):
    from tests.test_isa_ops import through_pipeline
    from tusk.sim.interp import run as run_bir

    x = _residual_inputs()
    path = tmp_path / "k.py"
    path.write_text(V2 + textwrap.dedent(RESIDUAL))
    klr = trace_file(path, "k", ["f32[2,8,64]"] * 3)
    got = run_bir(through_pipeline(klr, tmp_path), {**x, "out": np.full((2, 8, 64), np.nan, np.float32)})["out"]
    np.testing.assert_array_equal(got, (x["h"] + x["a"]) + x["m"])


def test_dma_compute_rounds_to_its_destination_dtype_once(tmp_path):
    """Three float32 tiles into a bfloat16 one: the float32 sum rounded once (to nearest even), not a
    bfloat16 rounding after each add."""
    body = """
        @nki.jit
        def k(x, y, z):
            out = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.shared_hbm)
            tiles = []
            for t in (x, y, z):
                s = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.sbuf)
                nisa.dma_copy(s, t)
                tiles.append(s)
            b = nl.ndarray((128, 4), dtype=nl.bfloat16, buffer=nl.sbuf)
            nisa.dma_compute(b, tiles, nl.add)
            w = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(w, b)
            nisa.dma_copy(out, w)
            return out
    """
    one = np.float32(1.0)
    # 1 + 2^-8 + 2^-8 = 1 + 2^-7 = 1.0078125 in float32, which bfloat16 holds exactly; rounding to bfloat16
    # after each add would give 1 + 2^-8 -> 1.0 (a tie, to even), twice: 1.0
    x = np.full((128, 4), one, np.float32)
    y = np.full((128, 4), 2.0 ** -8, np.float32)
    z = np.full((128, 4), 2.0 ** -8, np.float32)
    y[:, 1], z[:, 1] = 3.0, -3.0
    got = run(tmp_path, V2, body, {"x": x, "y": y, "z": z})["out"]
    np.testing.assert_array_equal(got[:, 0], np.float32(1.0078125))
    np.testing.assert_array_equal(got[:, 1], one)


@pytest.mark.parametrize("call, words", [
    ("nisa.dma_compute(o, (x, x), reduce_op=nl.multiply)", "nl.add only"),
    ("nisa.dma_compute(o, (x, x), reduce_op=nl.add, scales=(1.0, 2.0))", "scale of 1.0"),
    ("nisa.dma_compute(o, (x, x[0:64, :]), reduce_op=nl.add)", "elements"),
    ("nisa.dma_compute(o, x, reduce_op=nl.add)", "a list of tensors"),
])
def test_dma_compute_refuses_what_nki_does_not_allow(tmp_path, call, words):
    body = f"""
        @nki.jit
        def k(x):
            o = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.shared_hbm)
            {call}
            return o
    """
    with pytest.raises(TraceError, match=words):
        run(tmp_path, V2, body, {"x": RNG.uniform(-1, 1, (128, 8)).astype(np.float32)})


RMW = """
    @nki.jit
    def k(table, rows, data):
        moved = nl.ndarray((64, 8), dtype=table.dtype, buffer=nl.shared_hbm)
        out = nl.ndarray((32, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        full = nl.ndarray((64, 8), dtype=table.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=full, src=table)
        nisa.dma_copy(dst=moved, src=full)
        idx = nl.ndarray((32, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=idx, src=rows)
        d = nl.ndarray((32, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=d, src=data)
        # scatter: moved[rows] += d
        acc = moved.ap(pattern=[[8, 32], [1, 8]], offset=0, vector_offset=idx, indirect_dim=0)
        nisa.dma_compute(dst=acc, srcs=[d, acc], reduce_op=nl.add)
        # gather, twice: d += table[rows]
        for _ in range(2):
            nisa.dma_compute(d, [table.ap(pattern=[[8, 32], [1, 8]], offset=0, vector_offset=idx, indirect_dim=0),
                                 d], nl.add)
        nisa.dma_copy(dst=out, src=d)
        return moved, out
"""


def test_dma_compute_read_modify_write_scatters_and_gathers_by_a_vector_offset(tmp_path):
    # NKI 0.3.0 replaced dma_copy(dst_rmw_op=nl.add) by these two dma_compute forms
    table = RNG.standard_normal((64, 8)).astype(np.float32)
    rows = RNG.permutation(64)[:32].astype(np.int32).reshape(32, 1)  # unique, as NKI requires
    data = RNG.standard_normal((32, 8)).astype(np.float32)
    got = run(tmp_path, V2, RMW, {"table": table, "rows": rows, "data": data},
              ["f32[64,8]", "i32[32,1]", "f32[32,8]"])
    want = table.copy()
    want[rows[:, 0]] += data
    np.testing.assert_allclose(got["moved"], want, rtol=1e-6)
    np.testing.assert_allclose(got["out"], data + 2 * table[rows[:, 0]], rtol=1e-6, atol=1e-6)


def test_dma_compute_read_modify_write_of_bfloat16_rows_skips_out_of_bounds_indices(tmp_path):
    # the rows are gathered as stored: a float32 stage of a bfloat16 table was refused with oob_mode=skip
    # ("the skipped rows would be rounded"), though a skipped row is never read back
    table = (RNG.integers(-16, 16, (64, 8)) / 4).astype(np.float32)  # exact in bfloat16, and so are the sums
    data = (RNG.integers(-8, 8, (32, 8)) / 4).astype(np.float32)
    rows = np.concatenate([RNG.permutation(64)[:24], [64, 70, -1, -9, 100, 65, 99, 200]]).astype(np.int32)
    rows = rows.reshape(32, 1)
    skip = RMW.replace("reduce_op=nl.add)", "reduce_op=nl.add, oob_mode=nisa.oob_mode.skip)") \
        .replace("d], nl.add)", "d], nl.add, oob_mode=nisa.oob_mode.skip)")
    got = run(tmp_path, V2, skip, {"table": table, "rows": rows, "data": data},
              ["bf16[64,8]", "i32[32,1]", "f32[32,8]"])
    inside = (rows[:, 0] >= 0) & (rows[:, 0] < 64)
    want = table.copy()
    want[rows[inside, 0]] += data[inside]
    np.testing.assert_array_equal(np.asarray(got["moved"], np.float32), want)
    want_out = data.copy()
    want_out[inside] += 2 * table[rows[inside, 0]]
    np.testing.assert_array_equal(got["out"], want_out)


@pytest.mark.parametrize("old, new, words", [
    ("srcs=[d, acc]", "srcs=[d, acc], unique_indices=False", "unique_indices=False"),
    ("srcs=[d, acc]", "srcs=[d, acc, d]", "take exactly 2"),
    ("srcs=[d, acc]", "srcs=[d, d]", "the scatter form"),
])
def test_dma_compute_read_modify_write_refuses_what_nki_does_not_do(tmp_path, old, new, words):
    with pytest.raises(TraceError, match=words):
        run(tmp_path, V2, RMW.replace(old, new),
            {"table": np.zeros((64, 8), np.float32), "rows": np.zeros((32, 1), np.int32),
             "data": np.zeros((32, 8), np.float32)}, ["f32[64,8]", "i32[32,1]", "f32[32,8]"])


SKIP = """
    @nki.jit
    def k(table, rows, data):
        moved = nl.ndarray((16, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        summed = nl.ndarray((16, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        got = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        full = nl.ndarray((16, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=full, src=table)
        nisa.dma_copy(dst=moved, src=full)
        nisa.dma_copy(dst=summed, src=full)
        idx = nl.ndarray((8, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=idx, src=rows)
        d = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=d, src=data)
        g = nl.ndarray((8, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(g, -1.0)
        # indices read at run time: the DMA skips the rows outside the table
        nisa.dma_copy(dst=g, src=table.ap(pattern=[[8, 8], [1, 8]], offset=0, vector_offset=idx, indirect_dim=0),
                      oob_mode=nisa.oob_mode.skip)
        nisa.dma_copy(dst=got, src=g)
        nisa.dma_copy(dst=moved.ap(pattern=[[8, 8], [1, 8]], offset=0, vector_offset=idx, indirect_dim=0), src=d,
                      oob_mode=nisa.oob_mode.skip)
        acc = summed.ap(pattern=[[8, 8], [1, 8]], offset=0, vector_offset=idx, indirect_dim=0)
        nisa.dma_compute(acc, [acc, d], nl.add, oob_mode=nisa.oob_mode.skip)
        return got, moved, summed
"""


def test_oob_skip_of_indices_read_at_run_time_skips_the_rows_outside_the_tensor(tmp_path):
    # NKI's oob_mode.skip "silently skips" them; the DMA kept the error check (an interpreter error, and
    # oob_is_err on the device) when the indices were not known at the call
    table = RNG.standard_normal((16, 8)).astype(np.float32)
    rows = np.array([[3], [20], [0], [15], [-1], [7], [99], [1]], np.int32)
    data = RNG.standard_normal((8, 8)).astype(np.float32)
    got = run(tmp_path, V2, SKIP, {"table": table, "rows": rows, "data": data},
              ["f32[16,8]", "i32[8,1]", "f32[8,8]"])
    inside = (rows[:, 0] >= 0) & (rows[:, 0] < 16)
    want_g = np.full((8, 8), -1.0, np.float32)
    want_g[inside] = table[rows[inside, 0]]
    want_m, want_s = table.copy(), table.copy()
    want_m[rows[inside, 0]] = data[inside]
    want_s[rows[inside, 0]] += data[inside]
    np.testing.assert_array_equal(got["got"], want_g)
    np.testing.assert_array_equal(got["moved"], want_m)
    np.testing.assert_allclose(got["summed"], want_s, rtol=1e-6)
