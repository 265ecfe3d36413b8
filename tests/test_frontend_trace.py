"""The NKI tracer itself: loops, forms, masks and peeling, SPMD, outputs, import isolation, errors.

The tutorial kernels and their numpy references are in test_frontend_corpus.py;
here each test pins one mechanism on a small kernel written in the test, run
in the interpreter against numpy.
"""

from __future__ import annotations

import random
import sys
import textwrap
import types

import numpy as np
import pytest

from tusk.frontend import TraceError, trace_file
from tusk.frontend.check import run_klr
from tusk.ir import klr
from tusk.ir.errors import InternalError, TuskError

HEADER = """\
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.isa as nisa
"""


def kernel(tmp_path, body: str, name: str = "k.py"):
    path = tmp_path / name
    path.write_text(HEADER + textwrap.dedent(body))
    return path


def statements(data: bytes) -> list:
    k = klr.read_klr(data).contents.kernel
    return [s for body in k.bodies for b in body for s in b.body]


def test_three_level_nest_offsets_through_form_registers(tmp_path):
    path = kernel(tmp_path, """
        @nki.jit
        def k(x):
            B, R, C = x.shape
            out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
            for b in nl.affine_range(B):
                for r in nl.affine_range(R // 32):
                    for c in nl.affine_range(C // 16):
                        t = nl.load(x[b, r * 32:(r + 1) * 32, c * 16:(c + 1) * 16])
                        nl.store(out[b, r * 32:(r + 1) * 32, c * 16:(c + 1) * 16], value=t * (1.0 + 0))
            return out
    """)
    data = trace_file(path, "k", ["f32[3,64,48]"])
    ops = [type(s.op.op).__name__ for s in statements(data)]
    assert ops.count("CmpBranch") >= 6 and ops.count("NcDmaCopy") == 2   # three loops, each body traced once
    x = np.random.default_rng(0).standard_normal((3, 64, 48)).astype(np.float32)
    assert np.array_equal(run_klr(data, {"x": x})["out"], x)


def test_mask_on_a_partial_last_tile_peels_the_loop(tmp_path):
    path = kernel(tmp_path, """
        @nki.jit
        def k(a):
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            ix = nl.arange(128)[:, None]
            iy = nl.arange(a.shape[1])[None, :]
            for i in nl.affine_range((a.shape[0] + 127) // 128):
                t = nl.load(a[i * 128 + ix, iy], mask=(i * 128 + ix < a.shape[0]))
                nl.store(out[i * 128 + ix, iy], value=nl.exp(t), mask=(i * 128 + ix < a.shape[0]))
            return out
    """)
    data = trace_file(path, "k", ["f32[500,32]"])
    loads = [s for s in statements(data) if type(s.op.op).__name__ == "NcDmaCopy"]
    assert len(loads) == 4  # the loop body (3 whole tiles) plus the peeled last tile
    a = np.random.default_rng(1).standard_normal((500, 32)).astype(np.float32)
    assert np.array_equal(run_klr(data, {"a": a})["out"], np.exp(a))


def test_a_mask_that_always_keeps_everything_is_dropped(tmp_path):
    path = kernel(tmp_path, """
        @nki.jit
        def k(a):
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            ix = nl.arange(128)[:, None]
            iy = nl.arange(a.shape[1])[None, :]
            for i in nl.affine_range(a.shape[0] // 128):
                t = nl.load(a[i * 128 + ix, iy], mask=(i * 128 + ix < a.shape[0]))
                nl.store(out[i * 128 + ix, iy], value=t)
            return out
    """)
    data = trace_file(path, "k", ["f32[512,16]"])
    assert len([s for s in statements(data) if type(s.op.op).__name__ == "NcDmaCopy"]) == 2


def test_spmd_grid_output_argument_and_program_ids(tmp_path):
    path = kernel(tmp_path, """
        @nki.jit
        def k(a, b, c):
            i, j = nl.program_id(0), nl.program_id(1)
            assert nl.num_programs(1) == 2
            ip, jf = nl.mgrid[0:128, 0:64]
            x = nl.load(a[i * 128 + ip, j * 64 + jf])
            y = nl.load(b[i * 128 + ip, j * 64 + jf])
            nl.store(c[i * 128 + ip, j * 64 + jf], value=nl.maximum(x, y))
    """)
    data = trace_file(path, "k", ["f32[256,128]"] * 3, grid=(2, 2))
    kern = klr.read_klr(data).contents.kernel
    assert [t.name for t in kern.inputs] == ["a", "b"] and [t.name for t in kern.outputs] == ["c"]
    r = np.random.default_rng(2)
    a, b = r.random((256, 128), np.float32), r.random((256, 128), np.float32)
    assert np.array_equal(run_klr(data, {"a": a, "b": b})["c"], np.maximum(a, b))


def test_static_loops_unroll_and_tiles_are_placed_without_overlap(tmp_path):
    path = kernel(tmp_path, """
        @nki.jit
        def k(a):
            out = nl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
            acc = nl.zeros((128, 64), dtype=nl.float32, buffer=nl.sbuf)
            tiles = []
            for i in nl.static_range(a.shape[0] // 128):
                tiles.append(nl.load(a[i * 128:(i + 1) * 128, :]))
            for t in tiles:                        # every tile is live until here
                acc[...] = nl.add(acc, t)
            nl.store(out[0:128, :], value=acc)
            return out
    """)
    data = trace_file(path, "k", ["f32[1024,64]"])
    a = np.random.default_rng(3).random((1024, 64), np.float32)
    got = run_klr(data, {"a": a}, strict=False)["out"]
    want = np.zeros((128, 64), np.float32)
    for i in range(8):
        want = want + a[i * 128:(i + 1) * 128]
    assert np.array_equal(got, want)


def test_psum_accumulation_matches_a_k_sum(tmp_path):
    path = kernel(tmp_path, """
        @nki.jit
        def k(aT, b):
            K, M = aT.shape
            out = nl.ndarray((M, b.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
            acc = nl.zeros((M, b.shape[1]), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // 128):
                acc += nisa.nc_matmul(nl.load(aT[k * 128:(k + 1) * 128, :]), nl.load(b[k * 128:(k + 1) * 128, :]))
            nl.store(out, value=nl.copy(acc))
            return out
    """)
    data = trace_file(path, "k", ["f32[512,64]", "f32[512,256]"])
    r = np.random.default_rng(4)
    aT, b = r.standard_normal((512, 64)).astype(np.float32), r.standard_normal((512, 256)).astype(np.float32)
    np.testing.assert_allclose(run_klr(data, {"aT": aT, "b": b})["out"], aT.T.astype(np.float64) @ b,
                               rtol=1e-5, atol=1e-4)


def test_tracing_leaves_sys_modules_as_it_found_them(tmp_path):
    path = kernel(tmp_path, """
        @nki.jit
        def k(a):
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            nl.store(out, value=nl.load(a))
            return out
    """)
    real = types.ModuleType("nki")  # somebody's own `nki` module
    sys.modules["nki"] = real
    try:
        before = {n: sys.modules.get(n) for n in ("nki", "nki.language", "neuronxcc", "neuronxcc.nki")}
        trace_file(path, "k", ["f32[128,8]"])
        assert {n: sys.modules.get(n) for n in before} == before
    finally:
        sys.modules.pop("nki", None)


@pytest.mark.parametrize("body,message,line", [
    ("x = nl.load(a)\n    y = nl.foo(x)", "not supported: nl.foo", 10),
    ("x = nl.load(a)\n    y = nisa.nonzero_with_count(x)", "not supported: nisa.nonzero_with_count", 10),
    ("x = nl.load(a)\n    if x:\n        pass", "no runtime if", 10),
    ("x = nl.load(a)\n    y = 1 / 0", "ZeroDivisionError", 10),
    ("x = nl.ndarray((256, 4), dtype=nl.float32, buffer=nl.sbuf)", "256 partitions", 9),
    ("x = nl.load(a[0:128, 0:9])", "outside", 9),
    (("big = [nl.ndarray((128, 60000), dtype=nl.float32, buffer=nl.sbuf) for _ in range(3)]\n"
      "    for t in big:\n        t[...] = 1.0\n    nl.store(out[0:128, 0:4], value=big[0][:, 0:4])\n"
      "    nl.store(out[0:128, 0:4], value=big[1][:, 0:4])\n    nl.store(out[0:128, 0:4], value=big[2][:, 0:4])"),
     "SBUF is full", 0),  # 234 KiB tiles: not even one fits (three that each fit are kept in HBM: alloc_spill)
])
def test_errors_name_the_kernel_line(tmp_path, body, message, line):
    src = HEADER + "\n@nki.jit\ndef k(a):\n    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)\n    " + body \
        + "\n    return out\n"
    path = tmp_path / "bad.py"
    path.write_text(src)
    with pytest.raises(TraceError) as err:
        trace_file(path, "k", ["f32[128,8]"])
    assert message in str(err.value)
    assert str(path) in str(err.value) or "bad.py" in str(err.value)
    if line:
        assert f"bad.py:{line}:" in str(err.value), str(err.value)


# ---------------------------------------------------------------------------- hostile kernels

CALLS = ["nl.load({a})", "nl.store(out, value={t})", "nl.copy({t})", "nl.add({t}, {u})", "nl.multiply({t}, {v})",
         "nl.exp({t})", "nl.sum({t}, axis={ax})", "nl.max({t}, axis={ax}, keepdims=True)", "nl.mean({t}, axis={ax})",
         "nl.matmul({t}, {u})", "nl.matmul({t}, {u}, transpose_x=True)", "nl.transpose({t})",
         "nisa.nc_matmul({t}, {u})", "nisa.nc_transpose({t})", "nisa.activation(op={op}, data={t}, bias={v})",
         "nisa.tensor_scalar({t}, {op}, {v})", "nisa.tensor_tensor({t}, {u}, op={op})",
         "nisa.tensor_reduce(op={op}, data={t}, axis={ax})", "nisa.iota({v}, dtype={dt})",
         "nisa.memset({sh}, {v}, {dt})", "nl.ndarray({sh}, dtype={dt}, buffer={buf})",
         "nl.zeros({sh}, dtype={dt}, buffer={buf})", "{t}[{ix}]", "{t}.broadcast_to({sh})", "a.reshape({sh})",
         "nl.load(a[{ix}])", "nl.store(out[{ix}], value={t})", "{t} + {v}", "{t} / {u}", "-{t}"]
VALUES = {
    "a": ["a", "a[0:128, :]", "a[0:64, 0:10]", "out", "t0", "3", "None", "'x'", "a[i*128:(i+1)*128, :]"],
    "t": ["t0", "t1", "t2", "a", "3.5", "None", "t0[0:64]", "t1[:, 0:1]", "[1,2]", "t0[i]", "t0[:, i]"],
    "u": ["t0", "t1", "t2", "2", "t1[:, 0:1]", "a", "'s'"],
    "v": ["1.0", "0", "t1[:, 0:1]", "t0", "nl.arange(128)[:, None]", "None", "-5", "1e40", "float('nan')", "True"],
    "ax": ["1", "0", "[1]", "(0, 1)", "2", "-1", "'x'", "None"],
    "op": ["nl.add", "nl.exp", "np.add", "nl.max", "'add'", "None", "np.sin", "5"],
    "dt": ["nl.float32", "nl.int32", "nl.bfloat16", "'f32'", "np.float64", "None", "5"],
    "sh": ["(128, 64)", "(129, 64)", "(0,)", "(128,)", "(1, 64)", "(-1, 3)", "[128, 512]",
           "(nl.par_dim(128), 4, 8)", "(2**40, 2)", "'x'"],
    "buf": ["nl.sbuf", "nl.psum", "nl.shared_hbm", "'x'", "None"],
    "ix": ["0", "i", "nl.arange(128)[:, None], nl.arange(64)[None, :]", "0:256", "..., 0", "i:i+1", "i*2", "i//2",
           "-1", "1000", "None", "'k'", "0:0", "::-1", "slice(None)", "nl.mgrid[0:128, 0:64].p", "i, i"],
}


def test_hostile_kernels_get_clean_errors_or_run(tmp_path):
    """Random misuse of the API: every kernel either traces to KLR the backend runs, or fails with a
    TraceError at its line; never an InternalError or an exception escaping the front end."""
    rng = random.Random(1234)
    outcomes = {"ok": 0, "clean": 0}
    for n in range(150):
        lines = [f"        r{j} = " + rng.choice(CALLS).format(**{k: rng.choice(v) for k, v in VALUES.items()})
                 for j in range(rng.randint(1, 4))]
        src = HEADER + textwrap.dedent("""
            @nki.jit
            def k(a):
                out = nl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
                t0 = nl.load(a[0:128, :])
                t1 = nl.exp(t0)
                t2 = nl.ndarray((64, 128), dtype=nl.float32, buffer=nl.sbuf)
                for i in nl.affine_range(2):
            """) + "\n".join(lines) + "\n    nl.store(out[0:128, :], value=t1)\n    return out\n"
        path = tmp_path / f"h{n}.py"
        path.write_text(src)
        try:
            with _no_warnings():
                data = trace_file(path, "k", ["f32[256,64]"])
        except InternalError as e:
            pytest.fail(f"kernel {n}: {e}\n{src}")
        except TuskError as e:
            assert f"h{n}.py" in str(e)
            outcomes["clean"] += 1
            continue
        run_klr(data, {"a": np.ones((256, 64), np.float32)}, strict=False)
        outcomes["ok"] += 1
    assert outcomes["ok"] >= 5 and outcomes["clean"] >= 100, outcomes


class _no_warnings:
    """User code may trip SyntaxWarnings at compile time; they are the kernel's, not ours."""

    def __enter__(self):
        import warnings
        self._ctx = warnings.catch_warnings()
        self._ctx.__enter__()
        warnings.simplefilter("ignore")

    def __exit__(self, *exc):
        return self._ctx.__exit__(*exc)


def test_float8_tiles_trace_to_klr_dtypes_and_translate(tmp_path):
    """nl.float8_e4m3 / nl.float8_e5m2 are KLR's float8_e4m3 / float8e5 (the writer once had no size for them)."""
    for dtype, klr_name in (("nl.float8_e4m3", "float8_e4m3"), ("nl.float8_e5m2", "float8e5")):
        path = kernel(tmp_path, f"""
            @nki.jit
            def k(a):
                out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
                u = nl.copy(nl.load(a), dtype={dtype})
                nl.store(out, value=nl.copy(u, dtype=nl.float32))
                return out
        """, name=f"{klr_name}.py")
        data = trace_file(path, "k", ["f32[128,8]"])
        dtypes = {s.op.op.dst.access.access.tensor.dtype.name for s in statements(data)
                  if type(s.op.op).__name__ == "NcCopy"}
        assert klr_name in dtypes
        # both compute in the interpreter: 1.3 rounds to e5m2's 1.25 and to e4m3's 1.25 (steps of 1/8)
        a = np.full((128, 8), 1.3, np.float32)
        assert (run_klr(data, {"a": a})["out"] == 1.25).all()
        a = np.full((128, 8), 300.0, np.float32)  # e4m3: past 240 + 8, infinity; e5m2: 320 (steps of 64)
        assert (run_klr(data, {"a": a})["out"] == (np.inf if klr_name == "float8_e4m3" else 320.0)).all()


def test_assigning_a_tile_of_another_size_is_refused(tmp_path):
    path = kernel(tmp_path, """
        @nki.jit
        def k(a):
            out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
            t = nl.load(a)
            col = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.sbuf)
            col[:, 0] = t[:, 0:8]
            nl.store(out, value=t)
            return out
    """)
    with pytest.raises(TraceError, match="assigning a"):
        trace_file(path, "k", ["f32[128,8]"])


def test_full_collections_wait_for_the_end_of_a_trace(tmp_path):
    # the trace's heap grows with the kernel: full collections rescanning it made time per statement grow
    import gc

    from tusk.frontend import trace_function

    seen = []

    def k(a):
        import neuronxcc.nki.language as nl
        seen.append(gc.get_threshold())
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(a))
        if len(seen) == 2:
            raise ValueError("the kernel's own error")
        return out

    before = gc.get_threshold()
    assert before[2] < 1 << 20
    trace_function(k, ["f32[128,8]"])
    young, middle, full = seen[0]
    assert (young, middle) == before[:2] and full >= 1 << 30   # young collections run as before
    assert gc.get_threshold() == before
    with pytest.raises(TraceError, match="the kernel's own error"):
        trace_function(k, ["f32[128,8]"])
    assert gc.get_threshold() == before
