"""Runtime coordinates in subscripts: a one-element integer SBUF tile as the index of an HBM axis
(``cache[tab[0, k], :, :]``, paged-KV style) and nl.arange indices plus such a tile
(``x[nl.arange(4)[:, None] + s, i_f]`` with ``s = nl.load(start)[0, 0]``), as DMAs whose start moves by the
value read at run time.  Kernels written for these tests, traced, run in the KLR interpreter with several
runtime values and compared with numpy; one also through the whole default pipeline and the BIR simulator."""

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
"""
RNG = np.random.default_rng(71)


def _trace(tmp_path, body: str, specs: list[str]) -> bytes:
    path = tmp_path / "k.py"
    path.write_text(V1 + textwrap.dedent(body))
    return trace_file(path, "k", specs)


def _refused(tmp_path, body: str, specs: list[str], words: str) -> None:
    with pytest.raises(TraceError) as e:
        _trace(tmp_path, body, specs)
    assert "k.py:" in str(e.value) and words in str(e.value), str(e.value)


ROWS_FROM = """
    @nki.jit
    def k(x, start):
        out = nl.ndarray((4, 64), dtype=x.dtype, buffer=nl.shared_hbm)
        s = nl.load(start)[0, 0]
        i_p = nl.arange(4)[:, None] + s
        i_f = nl.arange(64)[None, :]
        t = nl.ndarray((4, 64), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(src=x[i_p + 2, i_f], dst=t, dge_mode=nisa.dge_mode.swdge)
        nl.store(out, t)
        return out
"""


@pytest.mark.parametrize("start", [0, 3, 10])
def test_arange_plus_a_loaded_value_reads_the_rows_from_there(tmp_path, start):
    x = RNG.standard_normal((16, 64)).astype(np.float32)
    klr = _trace(tmp_path, ROWS_FROM, ["f32[16,64]", "i32[1,1]"])
    got = run_klr(klr, {"x": x, "start": np.array([[start]], np.int32)})["out"]
    np.testing.assert_array_equal(got, x[start + 2:start + 6])


PAGED = """
    @nki.jit
    def k(cache, table):
        nblk, bs, d = cache.shape
        (n,) = table.shape
        out = nl.ndarray((n * bs, d), dtype=cache.dtype, buffer=nl.shared_hbm)
        tab = nl.load(table.reshape((1, n)), dtype=nl.int32)
        for j in nl.affine_range(n):
            blk = nl.load(cache[tab[0, j], :, :])
            nl.store(out[nl.ds(j * bs, bs), :], blk)
        return out
"""


def test_a_table_entry_picks_the_block_each_iteration_reads(tmp_path):
    cache = RNG.standard_normal((8, 16, 32)).astype(np.float32)
    table = np.array([5, 0, 7, 5], np.int32)
    klr = _trace(tmp_path, PAGED, ["f32[8,16,32]", "i32[4]"])
    got = run_klr(klr, {"cache": cache, "table": table})["out"]
    np.testing.assert_array_equal(got, cache[table].reshape(64, 32))


def test_a_paged_gather_survives_the_default_pipeline(tmp_path):
    from tests.test_isa_ops import through_pipeline
    from tusk.sim.interp import run

    cache = RNG.standard_normal((8, 16, 32)).astype(np.float32)
    table = np.array([2, 6, 1, 3], np.int32)
    klr = _trace(tmp_path, PAGED, ["f32[8,16,32]", "i32[4]"])
    sentinel = np.full((64, 32), np.nan, np.float32)
    got = run(through_pipeline(klr, tmp_path), {"cache": cache, "table": table, "out": sentinel})["out"]
    np.testing.assert_array_equal(got, cache[table].reshape(64, 32))


SCATTER = """
    @nki.jit
    def k(x, at):
        out = nl.ndarray((12, 32), dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.zeros((12, 32), dtype=x.dtype, buffer=nl.sbuf))
        t = nl.load(x)
        s = nl.load(at)[0, 0]
        i_p, i_f = nl.arange(4)[:, None], nl.arange(32)[None, :]
        nl.store(out[s + i_p, i_f], t, mask=i_p < 3)
        return out
"""


def test_a_store_at_a_runtime_row_writes_there_and_its_mask_narrows_it(tmp_path):
    x = RNG.standard_normal((4, 32)).astype(np.float32)
    klr = _trace(tmp_path, SCATTER, ["f32[4,32]", "i32[1,1]"])
    for at in (0, 5, 9):
        got = run_klr(klr, {"x": x, "at": np.array([[at]], np.int32)})["out"]
        want = np.zeros((12, 32), np.float32)
        want[at:at + 3] = x[:3]
        np.testing.assert_array_equal(got, want)


LOOPED = """
    @nki.jit
    def k(x, start):
        out = nl.ndarray((8, 16), dtype=x.dtype, buffer=nl.shared_hbm)
        s = nl.load(start)[0, 0]
        for j in nl.affine_range(2):
            t = nl.load(x[nl.arange(4)[:, None] + 4 * j + s, nl.arange(16)[None, :]])
            nl.store(out[nl.ds(4 * j, 4), :], t)
        return out
"""


def test_a_loop_index_beside_the_runtime_coordinate_unrolls_its_loop(tmp_path):
    x = RNG.standard_normal((20, 16)).astype(np.float32)
    klr = _trace(tmp_path, LOOPED, ["f32[20,16]", "i32[1,1]"])
    for start in (0, 7, 12):
        got = run_klr(klr, {"x": x, "start": np.array([[start]], np.int32)})["out"]
        np.testing.assert_array_equal(got, x[start:start + 8])


def _with(line: str) -> str:
    return ROWS_FROM.replace("nisa.dma_copy(src=x[i_p + 2, i_f], dst=t, dge_mode=nisa.dge_mode.swdge)", line)


@pytest.mark.parametrize("line, words", [
    ("nisa.dma_copy(src=x[nl.arange(4)[:, None] - s, i_f], dst=t)", "negate the tile"),
    ("nisa.dma_copy(src=x[i_p + s, i_f], dst=t)", "two runtime coordinates"),
    ("nisa.dma_copy(src=x[i_p * 2, i_f], dst=t)", "scaling or dividing"),
    ("nisa.dma_copy(src=x[i_p, i_f], dst=t, mask=i_p < 3)", "a mask on an index with a runtime coordinate"),
    ("nisa.dma_copy(src=x[i_p, i_f][:, 0:8], dst=t[:, 0:8])", "__getitem__ of an ap(scalar_offset=<a tile>)"),
    ("nisa.dma_copy(src=t[i_p, i_f], dst=t)", "on the partition axis of on-chip tile"),
])
def test_what_a_runtime_coordinate_cannot_be_is_refused_at_its_line(tmp_path, line, words):
    _refused(tmp_path, _with(line), ["f32[16,64]", "i32[1,1]"], words)


def test_a_tile_of_several_elements_added_to_indices_is_refused(tmp_path):
    _refused(tmp_path, ROWS_FROM.replace("s = nl.load(start)[0, 0]", "s = nl.load(start.reshape((1, 1)))\n"
                                         "        s = nl.copy(s, dtype=nl.float32)"),
             ["f32[16,64]", "i32[1,1]"], "only a one-element integer SBUF tile")


V2 = """\
import nki
import nki.isa as nisa
import nki.language as nl
"""

REGISTER_OFFSETS = """
    @nki.jit
    def k(x, starts):
        out = nl.ndarray((8, 64), dtype=x.dtype, buffer=nl.shared_hbm)
        s = nl.ndarray((1, 2), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=s, src=starts)
        r = nisa.register_alloc()
        t = nl.ndarray((8, 64), dtype=x.dtype, buffer=nl.sbuf)
        nisa.register_load(r, s[0:1, 0:1])
        nisa.dma_copy(dst=t[0:4, :], src=x.ap([[64, 4], [1, 64]], scalar_offset=r, indirect_dim=0))
        nisa.register_load(r, s[0:1, 1:2])
        nisa.dma_copy(dst=t[4:8, :], src=x.ap([[64, 4], [1, 64]], scalar_offset=r, indirect_dim=0))
        nisa.dma_copy(dst=out, src=t)
        return out
"""


def test_a_register_as_scalar_offset_moves_each_access_by_what_it_held_then(tmp_path):
    # nisa.dma_copy documents scalar_offset= as a 1x1 SBUF tensor or a register of nisa.register_alloc()
    from tests.test_isa_ops import through_pipeline
    from tusk.sim.interp import run

    path = tmp_path / "k.py"
    path.write_text(V2 + textwrap.dedent(REGISTER_OFFSETS))
    klr = trace_file(path, "k", ["f32[16,64]", "i32[1,2]"])
    x = RNG.standard_normal((16, 64)).astype(np.float32)
    for starts in ([9, 2], [0, 12]):
        inputs = {"x": x, "starts": np.array([starts], np.int32)}
        want = np.concatenate([x[starts[0]:starts[0] + 4], x[starts[1]:starts[1] + 4]])
        np.testing.assert_array_equal(run_klr(klr, inputs)["out"], want)
    got = run(through_pipeline(klr, tmp_path), {**inputs, "out": np.full((8, 64), np.nan, np.float32)})["out"]
    np.testing.assert_array_equal(got, want)


SELECT_BY_TILE = """
    @nki.jit
    def k(blocks, which):
        idx = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.dma_copy(dst=idx, src=which)
        t = nl.ndarray((16, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=blocks.select(0, idx))
        out = nl.ndarray((16, 8), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out
"""


def test_select_of_an_hbm_tensor_by_a_one_element_tile_is_a_runtime_coordinate(tmp_path):
    path = tmp_path / "k.py"
    path.write_text(V2 + textwrap.dedent(SELECT_BY_TILE))
    klr = trace_file(path, "k", ["f32[4,16,8]", "i32[1,1]"])
    blocks = RNG.standard_normal((4, 16, 8)).astype(np.float32)
    for i in (3, 0, 2):
        got = run_klr(klr, {"blocks": blocks, "which": np.array([[i]], np.int32)})["out"]
        np.testing.assert_array_equal(got, blocks[i])


RESHAPED_BLOCK = """
    @nki.jit
    def k(x, rank):
        # x [8, 64] seen as [4, 2, 64]: rank r reads rows 2r and 2r + 1 (a step of 128 elements, no axis
        # stride of x), as gpt-oss's legacy rank_slice_add does
        r = nl.load(rank)
        xs = x.reshape((4, 2, 64))
        out = nl.ndarray((2, 64), dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(xs[r[0, 0], :, :]))
        return out
"""


@pytest.mark.parametrize("rank", [0, 1, 3])
def test_a_runtime_coordinate_on_a_reshaped_axis_moves_by_that_axis_step(tmp_path, rank):
    # was refused: "stride 128 is no axis stride of the [8, 64] tensor"
    x = RNG.standard_normal((8, 64)).astype(np.float32)
    klr = _trace(tmp_path, RESHAPED_BLOCK, ["f32[8,64]", "i32[1,1]"])
    got = run_klr(klr, {"x": x, "rank": np.array([[rank]], np.int32)})["out"]
    np.testing.assert_array_equal(got, x[2 * rank:2 * rank + 2])

