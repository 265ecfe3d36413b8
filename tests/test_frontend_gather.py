"""Gathers along an inner axis: ``x[b, idx_tile, j]`` of a 3-D HBM tensor, with ``b`` a loop index, in kernels
written for these tests, traced, run in the interpreter (strict: every byte read was written) and compared with
numpy."""

from __future__ import annotations

import os
import textwrap

import numpy as np
import pytest

from tusk.frontend import TraceError, trace_file
from tusk.frontend.check import run_klr
from tusk.ir.verify import verify
from tusk.stages.host import host_module_for
from tusk.stages.translate_nki_ast_to_bir import TranslateNKIASTToBIR

HEADER = """\
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
"""
RNG = np.random.default_rng(5)
SENTINEL = -7.0

# per batch b: rows idx[m] of x[b] into out[b, m] for m < M, in tiles of 16 partitions (the last one cut by
# the mask); out's rows M.. of each batch hold a sentinel the masked stores must leave alone
INNER = """
    @nki.jit
    def k(x, idx_in):
        B, N, C = x.shape
        M = idx_in.shape[0]
        P = 16
        out = nl.ndarray((B, M + 8, C), dtype=x.dtype, buffer=nl.shared_hbm)
        pad = nisa.memset(shape=(8, C), value=SENTINEL, dtype=nl.float32)
        for b in nl.affine_range(B):
            nl.store(out[b, M:M + 8, :], value=pad)
        for b in nl.affine_range(B):
            for t in nl.affine_range((M + P - 1) // P):
                ip = nl.arange(P)[:, None]
                jf = nl.arange(C)[None, :]
                row = t * P + ip
                keep = row < M
                idx = nl.load(idx_in[row, nl.arange(1)[None, :]], mask=keep)
                got = nl.load(VIEW[b, idx, jf], mask=keep)
                nl.store(out[b, row, jf], value=got, mask=keep)
        return out
"""


def _run(tmp_path, body: str, x: np.ndarray, idx: np.ndarray) -> np.ndarray:
    path = tmp_path / "k.py"
    path.write_text(HEADER + textwrap.dedent(body).replace("SENTINEL", repr(SENTINEL)))
    specs = [f"f32[{','.join(map(str, x.shape))}]", f"i32[{idx.shape[0]},1]"]
    data = trace_file(path, "k", specs)
    klr_path = tmp_path / "k.klr"
    klr_path.write_bytes(data)
    module, _ = TranslateNKIASTToBIR().run(host_module_for(str(klr_path), None, os.path.join(tmp_path, "art")))
    verify(module)  # the IR verifier's static bounds, which the default pipeline runs
    return run_klr(data, {"x": x, "idx_in": idx})["out"]


def _want(table: np.ndarray, idx: np.ndarray) -> np.ndarray:
    b, m = table.shape[0], idx.shape[0]
    want = np.full((b, m + 8, table.shape[2]), SENTINEL, np.float32)
    want[:, :m] = table[:, idx[:, 0]]
    return want


def test_gather_along_axis_1_under_a_loop_index_with_a_partial_mask(tmp_path):
    x = RNG.uniform(-1, 1, (3, 20, 6)).astype(np.float32)
    idx = RNG.integers(0, 20, (40, 1)).astype(np.int32)  # 40 rows: tiles of 16, 16 and 8
    got = _run(tmp_path, INNER.replace("VIEW", "x"), x, idx)
    np.testing.assert_array_equal(got, _want(x, idx))


def test_gather_along_the_middle_axis_of_a_reshaped_tensor(tmp_path):
    # x is (2, 4, 5, 3) seen as (2, 20, 3): the index counts rows of the flattened middle axes
    x = RNG.uniform(-1, 1, (2, 4, 5, 3)).astype(np.float32)
    idx = RNG.integers(0, 20, (24, 1)).astype(np.int32)
    body = INNER.replace("B, N, C = x.shape", "B, H, W, C = x.shape\n        xf = x.reshape((B, H * W, C))")
    got = _run(tmp_path, body.replace("VIEW", "xf"), x, idx)
    np.testing.assert_array_equal(got, _want(x.reshape(2, 20, 3), idx))


def test_a_slice_before_the_index_tile_is_refused_naming_the_axis(tmp_path):
    x = RNG.uniform(-1, 1, (3, 20, 6)).astype(np.float32)
    idx = RNG.integers(0, 20, (40, 1)).astype(np.int32)
    with pytest.raises(TraceError, match="index tile on axis 1 after a slice or nl.arange on axis 0"):
        _run(tmp_path, INNER.replace("VIEW[b, idx, jf]", "x[0:2, idx, jf]"), x, idx)


def test_a_tile_gathers_more_rows_than_the_axis_holds(tmp_path):
    # 16 index partitions over 5 rows: the verifier must not read the gathered dim as 16 rows of 6 elements
    x = RNG.uniform(-1, 1, (2, 5, 6)).astype(np.float32)
    idx = RNG.integers(0, 5, (20, 1)).astype(np.int32)
    got = _run(tmp_path, INNER.replace("VIEW", "x"), x, idx)
    np.testing.assert_array_equal(got, _want(x, idx))


def test_an_index_column_picked_by_a_loop_index_gathers_each_iterations_rows(tmp_path):
    # the index table sits in SBUF as [P, n] and each iteration of a sequential loop gathers by its column k
    # (vLLM's paged attention: block_tables[load, i_p, large_k_tile_idx]); the column's place moves with k,
    # which the gather now reads through a copy of that column (it was refused as 'an index tile int32[128, 1]')
    path = tmp_path / "k.py"
    path.write_text(HEADER + textwrap.dedent("""
        @nki.jit
        def k(x, idx):
            n = idx.shape[1]
            out = nl.ndarray((n, 128, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
            table = nl.load(idx)
            i_p = nl.arange(128)[:, None]
            i_f = nl.arange(x.shape[1])[None, :]
            for j in nl.sequential_range(n):
                rows = nl.load(x[table[i_p, j], i_f])
                nl.store(out[j], value=nl.multiply(rows, 2.0))
            return out
    """))
    x = RNG.standard_normal((300, 64)).astype(np.float32)
    idx = RNG.integers(0, 300, size=(128, 3)).astype(np.int32)
    got = run_klr(trace_file(path, "k", ["f32[300,64]", "i32[128,3]"]), {"x": x, "idx": idx})["out"]
    assert np.array_equal(got, 2.0 * x[idx.T])
