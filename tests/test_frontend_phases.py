"""``nisa.core_barrier`` and ``nisa.sendrecv`` in a launch of several programs (``frontend/phases.py``): the
programs are traced phase by phase into Tusk's one stream, so a program reads what the others wrote before the
barrier, and receives what the other sent.  Kernels written
for these tests, traced, run in the interpreter (before and after the pass pipeline) and compared with numpy."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

from tusk.examples.nki.reference import round_bf16
from tusk.frontend import TraceError, trace_file
from tusk.frontend.check import run_klr

HEADER = """\
import numpy as np
import nki
import nki.isa as nisa
import nki.language as nl
"""
RNG = np.random.default_rng(45)


def trace(tmp_path, body: str, specs: list[str], grid: tuple[int, ...] = (2,), name: str = "k.py") -> bytes:
    path = tmp_path / name
    path.write_text(HEADER + textwrap.dedent(body))
    return trace_file(path, "k", specs, grid)


def run(tmp_path, body: str, inputs: dict[str, np.ndarray], grid: tuple[int, ...] = (2,)) -> dict[str, np.ndarray]:
    """Outputs as traced; the same, exactly, after every default pass (verified after each)."""
    from tests.test_isa_ops import through_pipeline
    from tusk.sim.interp import run as interpret

    data = trace(tmp_path, body, [f"f32[{','.join(map(str, a.shape))}]" for a in inputs.values()], grid)
    got = run_klr(data, inputs)
    after = interpret(through_pipeline(data, tmp_path), dict(inputs))
    for name in got:
        np.testing.assert_array_equal(after[name], got[name])  # the passes keep what the barrier ordered
    return got


def refused(tmp_path, body: str, specs: list[str], grid: tuple[int, ...] = (2,)) -> str:
    with pytest.raises(TraceError) as err:
        trace(tmp_path, body, specs, grid, "bad.py")
    return str(err.value)


EXCHANGE = """
    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        scratch = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        pid = nl.program_id(0)
        n = x.shape[0] // nl.num_programs(0)
        mine = nl.ndarray((n, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=mine, src=x[pid * n:(pid + 1) * n, :])
        sent = nl.ndarray((n, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=sent, data=mine, op0=nl.multiply, operand0=3.0)
        nisa.dma_copy(dst=scratch[pid * n:(pid + 1) * n, :], src=sent)
        nisa.core_barrier(scratch, (0, 1))
        other = (pid + 1) % nl.num_programs(0)
        theirs = nl.ndarray((n, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=theirs, src=scratch[other * n:(other + 1) * n, :])
        nisa.tensor_scalar(dst=mine, data=mine, op0=nl.multiply, operand0=2.0)  # kept across the barrier
        nisa.tensor_tensor(dst=mine, data1=mine, data2=theirs, op=nl.add)
        nisa.dma_copy(dst=out[pid * n:(pid + 1) * n, :], src=mine)
        return out
"""


@pytest.mark.parametrize("programs", [2, 4])
def test_programs_read_what_the_others_wrote_before_the_barrier(tmp_path, programs):
    x = RNG.uniform(-1, 1, (64 * programs, 32)).astype(np.float32)
    got = run(tmp_path, EXCHANGE, {"x": x}, (programs,))["out"]
    parts = np.split(x, programs)
    want = np.concatenate([2 * parts[p] + 3 * parts[(p + 1) % programs] for p in range(programs)])
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_a_barrier_in_a_sequential_loop_unrolls_the_loop(tmp_path):
    """Each block: read the other program's running sum, add this block, meet, publish, meet again."""
    x = RNG.uniform(-1, 1, (3, 128, 16)).astype(np.float32)
    got = run(tmp_path, """
        @nki.jit
        def k(x):
            out = nl.ndarray((128, 16), dtype=x.dtype, buffer=nl.shared_hbm)
            acc = nl.ndarray((128, 16), dtype=x.dtype, buffer=nl.shared_hbm)
            pid = nl.program_id(0)
            z = nl.ndarray((64, 16), dtype=x.dtype, buffer=nl.sbuf)
            nisa.memset(dst=z, value=0.0)
            nisa.dma_copy(dst=acc[pid * 64:(pid + 1) * 64, :], src=z)
            nisa.core_barrier(acc, (0, 1))
            for b in nl.sequential_range(x.shape[0]):
                mine = nl.ndarray((64, 16), dtype=x.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=mine, src=x[b, pid * 64:(pid + 1) * 64, :])
                other = nl.ndarray((64, 16), dtype=x.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=other, src=acc[(1 - pid) * 64:(2 - pid) * 64, :])
                nisa.tensor_tensor(dst=mine, data1=mine, data2=other, op=nl.add)
                nisa.core_barrier(acc, (0, 1))
                nisa.dma_copy(dst=acc[pid * 64:(pid + 1) * 64, :], src=mine)
                nisa.core_barrier(acc, (0, 1))
            nisa.dma_copy(dst=out, src=acc)
            return out
    """, {"x": x})["out"]
    a, c = np.zeros((64, 16), np.float32), np.zeros((64, 16), np.float32)
    for b in range(3):
        a, c = x[b, :64] + c, x[b, 64:] + a
    np.testing.assert_allclose(got, np.concatenate([a, c]), rtol=1e-6)


def test_a_program_that_skips_a_barrier_the_other_waits_at_is_refused(tmp_path):
    msg = refused(tmp_path, """
        @nki.jit
        def k(a):
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            nisa.dma_copy(dst=out, src=a)
            if nl.program_id(0) == 0:
                nisa.core_barrier(out, (0, 1))
            return out
    """, ["f32[128,16]"])
    assert "bad.py:11: not supported: nisa.core_barrier: program [0] waits here, but program [1] ended" in msg


def test_an_error_after_the_barrier_names_its_line(tmp_path):
    msg = refused(tmp_path, """
        @nki.jit
        def k(a):
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            nisa.dma_copy(dst=out, src=a)
            nisa.core_barrier(out, (0, 1))
            t = nl.ndarray((128, 16), dtype=a.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=out[nl.program_id(0) * 200:, :])
            return out
    """, ["f32[256,16]"])
    assert "bad.py:12:" in msg


def test_barrier_of_other_cores_is_still_refused(tmp_path):
    msg = refused(tmp_path, """
        @nki.jit
        def k(a):
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            nisa.dma_copy(dst=out, src=a)
            nisa.core_barrier(out, (0, 2))
            return out
    """, ["f32[128,16]"])
    assert "cores=(0, 2)" in msg


EXCHANGE_TILES = """
    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        pid = nl.program_id(0)
        # each program's own scratch: nl.private_hbm is not shared between programs
        scratch = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.private_hbm)
        mine = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=mine, src=x[pid * 128:(pid + 1) * 128, :])
        nisa.dma_copy(dst=scratch, src=mine)
        remote = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.sendrecv(src=mine, dst=remote, send_to_rank=1 - pid, recv_from_rank=1 - pid, pipe_id=0)
        nisa.tensor_tensor(dst=remote, data1=mine, data2=remote, op=nl.maximum)
        both = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=both, src=scratch)
        nisa.sendrecv(src=both, dst=both, send_to_rank=1 - pid, recv_from_rank=1 - pid, pipe_id=1)  # in place
        nisa.tensor_tensor(dst=mine, data1=remote, data2=both, op=nl.add)
        nisa.dma_copy(dst=out[pid * 128:(pid + 1) * 128, :], src=mine)
        return out
"""


def test_sendrecv_exchanges_tiles_between_the_two_programs(tmp_path):
    x = RNG.uniform(-1, 1, (256, 24)).astype(np.float32)
    got = run(tmp_path, EXCHANGE_TILES, {"x": x})["out"]
    a, b = x[:128], x[128:]
    m = np.maximum(a, b)
    np.testing.assert_array_equal(got, np.concatenate([m + b, m + a]))


def test_sendrecv_to_itself_in_a_launch_of_one_program_is_a_copy(tmp_path):
    x = RNG.uniform(-1, 1, (128, 8)).astype(np.float32)
    got = run(tmp_path, """
        @nki.jit
        def k(x):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
            u = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x)
            nisa.sendrecv(t, u, 0, 0, 0)
            nisa.dma_copy(dst=out, src=u)
            return out
    """, {"x": x}, ())["out"]
    np.testing.assert_array_equal(got, x)


@pytest.mark.parametrize("call, words", [
    ("nisa.sendrecv(src=t, dst=u, send_to_rank=1 - pid, recv_from_rank=pid, pipe_id=0)",
     "program 0 sends to 1 and receives from 0 on pipe 0"),
    ("nisa.sendrecv(src=t, dst=u, send_to_rank=1 - pid, recv_from_rank=1 - pid, pipe_id=pid)",
     "every send must meet the receive of the same pipe"),
    ("nisa.sendrecv(src=t, dst=out, send_to_rank=1 - pid, recv_from_rank=1 - pid, pipe_id=0)",
     "nisa.sendrecv dst of HBM tensor out"),
])
def test_sendrecv_that_does_not_pair_up_is_refused(tmp_path, call, words):
    msg = refused(tmp_path, f"""
        @nki.jit
        def k(a):
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            pid = nl.program_id(0)
            t = nl.ndarray((128, 16), dtype=a.dtype, buffer=nl.sbuf)
            u = nl.ndarray((128, 16), dtype=a.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=a[0:128, :])
            {call}
            nisa.dma_copy(dst=out[pid * 128:(pid + 1) * 128, :], src=u)
            return out
    """, ["f32[256,16]"])
    assert "bad.py:13:" in msg and words in msg


def test_a_barrier_in_a_loop_bounded_by_a_register_is_refused(tmp_path):
    msg = refused(tmp_path, """
        @nki.jit
        def k(a, n):
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            n_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
            nisa.dma_copy(dst=n_sb, src=n)
            trips = nisa.register_alloc()
            nisa.register_load(trips, n_sb)
            for i in nl.dynamic_range(trips):
                nisa.dma_copy(dst=out, src=a)
                nisa.core_barrier(out, (0, 1))
            return out
    """, ["f32[128,16]", "i32[1,1]"])
    assert "bad.py:15:" in msg and "nisa.core_barrier inside a loop bounded by a register" in msg


def test_programs_sending_tiles_of_other_shapes_are_refused_at_the_call(tmp_path):
    msg = refused(tmp_path, """
        @nki.jit
        def k(a):
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            pid = nl.program_id(0)
            n = 16 + 16 * pid
            t = nl.ndarray((128, n), dtype=a.dtype, buffer=nl.sbuf)
            u = nl.ndarray((128, n), dtype=a.dtype, buffer=nl.sbuf)
            nisa.memset(dst=t, value=1.0)
            nisa.sendrecv(src=t, dst=u, send_to_rank=1 - pid, recv_from_rank=1 - pid, pipe_id=0)
            nisa.dma_copy(dst=out[0:128, 0:16], src=u[:, 0:16])
            return out
    """, ["f32[128,32]"])
    assert "bad.py:14: not supported: nisa.sendrecv: program 0 sends a float32[128, 16] tile into program 1" in msg


def test_barriers_in_nested_loops_unroll_every_loop_once(tmp_path):
    """A barrier two loops deep: the launch is traced again with every loop run as Python's range (a re-trace
    per loop instance would run out of re-traces at 40 outer iterations)."""
    x = RNG.uniform(-1, 1, (256, 8)).astype(np.float32)
    got = run(tmp_path, """
        @nki.jit
        def k(x):
            p = nl.program_id(0)
            out = nl.ndarray((256, 8), dtype=nl.float32, buffer=nl.shared_hbm)
            acc = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=acc, src=x[p * 128:(p + 1) * 128, :])
            o = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
            for i in nl.affine_range(40):
                for j in nl.affine_range(2):
                    nisa.sendrecv(src=acc, dst=o, send_to_rank=1 - p, recv_from_rank=1 - p, pipe_id=0)
                    nisa.tensor_scalar(dst=o, data=o, op0=nl.multiply, operand0=0.5)
                    nisa.tensor_tensor(dst=acc, data1=acc, data2=o, op=nl.add)
            nisa.dma_copy(dst=out[p * 128:(p + 1) * 128, :], src=acc)
            return out
    """, {"x": x})["out"]
    a, b = x[:128].astype(np.float32), x[128:].astype(np.float32)
    for _ in range(80):
        a, b = a + b * np.float32(0.5), b + a * np.float32(0.5)
    np.testing.assert_allclose(got, np.concatenate([a, b]), rtol=1e-5)


def test_a_loop_index_as_a_memset_value_unrolls_its_loop(tmp_path):
    got = run(tmp_path, """
        @nki.jit
        def k(x):
            out = nl.ndarray((4, 4), dtype=nl.float32, buffer=nl.shared_hbm)
            t = nl.ndarray((4, 4), dtype=nl.float32, buffer=nl.sbuf)
            for i in nl.sequential_range(4):
                nisa.memset(dst=t[i:i + 1, :], value=i)
            nisa.dma_copy(dst=out, src=t)
            return out
    """, {"x": np.zeros((4, 4), np.float32)}, ())["out"]
    np.testing.assert_array_equal(got, np.repeat(np.arange(4, dtype=np.float32)[:, None], 4, axis=1))


BIG_ACROSS_A_BARRIER = """
    @nki.jit
    def k(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        big = nl.ndarray((128, COLS), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=big, value=1.0)
        nisa.core_barrier(out, (0, 1))
        nisa.dma_copy(dst=out[nl.program_id(0) * 128:(nl.program_id(0) + 1) * 128, :], src=big[:, 0:16])
        return out
"""


def test_a_full_sbuf_across_a_barrier_keeps_a_tile_in_hbm(tmp_path):
    """Each program keeps a 141 KiB tile across the barrier: the two take turns in Tusk's one stream, so one
    is kept in HBM (alloc_spill), as on the device each core has its own SBUF."""
    got = run(tmp_path, BIG_ACROSS_A_BARRIER.replace("COLS", "36000"), {"a": np.zeros((256, 16), np.float32)})
    assert np.array_equal(got["out"], np.ones((256, 16), np.float32))


def test_a_full_sbuf_across_a_barrier_says_the_programs_share_it(tmp_path):
    """A tile no SBUF holds (219 KiB): refused at the kernel's tile, not at a staging tile of a spill."""
    msg = refused(tmp_path, BIG_ACROSS_A_BARRIER.replace("COLS", "56000"), ["f32[256,16]"])
    assert "SBUF is full: tile big " in msg and "share one SBUF; on the device each core has its own" in msg


@pytest.mark.parametrize("data, cores, grid", [("t", "(0, 1)", (2,)), ("out", "(0)", ())])
def test_a_barrier_on_an_sbuf_tile_or_of_core_0_alone(tmp_path, data, cores, grid):
    """nki-library's moe_cte meets on an SBUF tile, and names core 0 alone at one shard: the ordering is the
    same (the barrier is no instruction)."""
    x = RNG.uniform(-1, 1, (256, 8)).astype(np.float32)
    got = run(tmp_path, f"""
        @nki.jit
        def k(x):
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            t = nl.ndarray((128, 8), dtype=x.dtype, buffer=nl.sbuf)
            for p in nl.static_range(2):
                nisa.dma_copy(dst=t, src=x[p * 128:(p + 1) * 128, :])
                nisa.core_barrier({data}, {cores})
                nisa.dma_copy(dst=out[p * 128:(p + 1) * 128, :], src=t)
            return out
    """, {"x": x}, grid)["out"]
    np.testing.assert_array_equal(got, x)


LNC_EXCHANGE = """
    import nki.lnc

    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        pid = nl.program_id(0)
        mine = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=mine, src=x[pid * 128:(pid + 1) * 128, :])
        remote = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nki.lnc.sendrecv(src=mine, dst=remote, send_to_rank=1 - pid, recv_from_rank=1 - pid)  # the 1st: pipe 1
        peak = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        COMPUTE(remote, peak, 1 - pid, 1 - pid, nl.maximum)  # the 2nd: max(remote, mine)
        nisa.tensor_tensor(dst=mine, data1=peak, data2=remote, op=nl.subtract)
        nisa.dma_copy(dst=out[pid * 128:(pid + 1) * 128, :], src=mine)
        nki.lnc.core_barrier(out, (0, 1))
        return out
"""


@pytest.mark.parametrize("compute", ["nki.lnc.sendrecv_compute", "nisa.sendrecv_compute"])
def test_nki_lnc_sendrecv_pairs_calls_by_their_order_and_sendrecv_compute_reduces(tmp_path, compute):
    # NKI 0.8.0's nki.lnc: sendrecv has no pipe_id (the Nth call of one rank meets the Nth of its peer); the
    # nisa.sendrecv_compute( entry point is its deprecated wrapper
    x = RNG.uniform(-1, 1, (256, 24)).astype(np.float32)
    got = run(tmp_path, LNC_EXCHANGE.replace("COMPUTE", compute), {"x": x})["out"]
    a, b = x[:128], x[128:]
    m = np.maximum(a, b)
    np.testing.assert_array_equal(got, np.concatenate([m - b, m - a]))


# NKI 1.x's nl.all_reduce: the programs of a group (equal off program_axes) meet, each gets the reduction
ALL_REDUCE = """
    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
        i, j = nl.program_id(0), nl.program_id(1)
        mine = nl.load(x[i, j])
        nl.store(out[i, j], nl.all_reduce(mine, op=OP, program_axes=AXES, dtype=nl.bfloat16))
        return out
"""


@pytest.mark.parametrize("op, axes, reduced", [
    ("np.add", "0", (0,)), ("nl.add", "(1,)", (1,)), ("np.maximum", "[0, 1]", (0, 1)),
])
def test_all_reduce_gives_each_program_its_groups_reduction(tmp_path, op, axes, reduced):
    x = (RNG.integers(-64, 64, (2, 3, 32, 8)) / 8).astype(np.float32)  # sums exact in float32 and bfloat16
    got = run(tmp_path, ALL_REDUCE.replace("OP", op).replace("AXES", axes), {"x": x}, (2, 3))["out"]
    combine = np.maximum.reduce if op == "np.maximum" else np.add.reduce
    want = np.broadcast_to(combine(x, axis=reduced, keepdims=True), x.shape)
    np.testing.assert_array_equal(got.astype(np.float32), want)


def test_all_reduce_in_a_launch_of_one_program_is_its_tile_cast(tmp_path):
    x = RNG.uniform(-1, 1, (1, 1, 32, 8)).astype(np.float32)
    got = run(tmp_path, ALL_REDUCE.replace("OP", "np.add").replace("AXES", "0").replace(
        "i, j = nl.program_id(0), nl.program_id(1)", "i, j = 0, 0"), {"x": x}, ())["out"]
    np.testing.assert_array_equal(got.astype(np.float32), round_bf16(x))


@pytest.mark.parametrize("axes, words", [
    ("i", "programs [0, 2] reduce together, but program 2 reduces over [2, 3]"),  # program i: axis i
    ("0, asynchronous=True", "nl.all_reduce asynchronous=True (Tusk has no nki.sync_thread"),
])
def test_an_all_reduce_the_programs_cannot_agree_on_is_refused(tmp_path, axes, words):
    msg = refused(tmp_path, ALL_REDUCE.replace("OP", "np.add").replace("AXES", axes), ["f32[2,2,32,8]"], (2, 2))
    assert "bad.py:11:" in msg and words in msg
