"""MX (microscaling): ``nisa.quantize_mx`` and ``nisa.nc_matmul_mx`` traced to KLR, lowered to BIR and run in the
interpreter, against a numpy model written here from the NKI reference (32-value groups of 8 partitions x 4
packed values, an E8M0 scale of twice the OCP one, fp8 rounded to nearest even); refusals name the call."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

from tusk.frontend import TraceError, trace_file
from tusk.frontend.check import run_klr
from tusk.ir import mx

HEADER = """\
import numpy as np
import nki
import nki.isa as nisa
import nki.language as nl
"""

RNG = np.random.default_rng(95)
# kind -> (exponent bits, mantissa bits, largest normal exponent)
KINDS = {"e4m3fn": (4, 3, 8), "e5m2": (5, 2, 15), "e2m1": (2, 1, 2)}


def run(tmp_path, body: str, inputs: dict[str, np.ndarray], specs: list[str]) -> dict[str, np.ndarray]:
    path = tmp_path / "k.py"
    path.write_text(HEADER + textwrap.dedent(body))
    return run_klr(trace_file(path, "k", specs), inputs)


def refused(tmp_path, body: str, specs: list[str]) -> str:
    path = tmp_path / "bad.py"
    path.write_text(HEADER + textwrap.dedent(body))
    with pytest.raises(TraceError) as err:
        trace_file(path, "k", specs)
    return str(err.value)


def decode(code: np.ndarray, kind: str) -> np.ndarray:
    """A small float's code -> its value (no NaN / infinity codes are used here)."""
    eb, mb, _ = KINDS[kind]
    bias = (1 << (eb - 1)) - 1
    code = code.astype(np.int64)
    e, m = (code >> mb) & ((1 << eb) - 1), code & ((1 << mb) - 1)
    mag = np.where(e == 0, m * 2.0 ** (1 - bias - mb), (1 + m / 2 ** mb) * 2.0 ** (e - bias))
    return np.where(code >> (eb + mb), -mag, mag)


def model_quantize(x: np.ndarray, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """[P, 4F] -> dequantized values [P, F, 4] and the scale bytes [P / 8, F]."""
    eb, mb, emax = KINDS[kind]
    p, f = x.shape[0], x.shape[1] // 4
    g = x.astype(np.float64).reshape(p // 8, 8, f, 4)
    amax = np.abs(g).max(axis=(1, 3))
    e = np.floor(np.log2(amax)) - emax + 1
    v = g / np.exp2(e)[:, None, :, None]
    quantum = np.exp2(np.maximum(np.floor(np.log2(np.maximum(np.abs(v), 1e-300))), 2 - (1 << (eb - 1))) - mb)
    deq = np.round(v / quantum) * quantum * np.exp2(e)[:, None, :, None]
    return deq.reshape(p, f, 4), (e + 127).astype(np.uint8)


def spread(scale: np.ndarray) -> np.ndarray:
    """Scale bytes [P / 8, F] as quantize_mx places them: group g of quadrant q on partition 32 q + g."""
    out = np.zeros((mx.scale_rows_needed(8 * scale.shape[0]), scale.shape[1]), np.uint8)
    out[[mx.scale_row(8 * g) for g in range(scale.shape[0])]] = scale
    return out


def bf16(x: np.ndarray) -> np.ndarray:
    u = x.astype(np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(np.float32)


QUANTIZE = """
    @nki.jit
    def k(x):
        P, F = x.shape
        data = nl.ndarray((P, F // 4), dtype=nl.KIND, buffer=nl.shared_hbm)
        scales = nl.ndarray((P, F // 4), dtype=nl.uint8, buffer=nl.shared_hbm)
        xs = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=xs, src=x)
        xb = nl.ndarray((P, F), dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.tensor_copy(dst=xb, src=xs)
        q = nl.ndarray((P, F // 4), dtype=nl.KIND, buffer=nl.sbuf)
        s = nl.ndarray((P, F // 4), dtype=nl.uint8, buffer=nl.sbuf)
        nisa.memset(dst=s, value=0)
        nisa.quantize_mx(dst=q, src=xb, dst_scale=s)
        nisa.dma_copy(dst=data, src=q)
        nisa.dma_copy(dst=scales, src=s)
        return data, scales
"""


@pytest.mark.parametrize("kind", ["e4m3fn", "e5m2"])
def test_quantize_mx_packs_four_values_per_word_with_a_shared_group_scale(tmp_path, kind):
    x = bf16(RNG.normal(0, 3, (64, 32)) * np.exp2(RNG.integers(-6, 6, (64, 1))))
    got = run(tmp_path, QUANTIZE.replace("KIND", f"float8_{kind}_x4"), {"x": x}, ["f32[64,32]"])
    words = got["data"]
    assert words.shape == (64, 8) and words.dtype == np.uint32
    deq, scale = model_quantize(x, kind)
    np.testing.assert_array_equal(got["scales"][:mx.scale_rows_needed(64)], spread(scale))
    codes = np.ascontiguousarray(words).view(np.uint8).reshape(64, 8, 4)  # byte t: value 4 j + t
    rows = np.arange(64) // 8
    values = decode(codes, kind) * np.exp2(scale[rows].astype(np.float64) - 127)[:, :, None]
    np.testing.assert_array_equal(values, deq)
    groups = np.abs(x).reshape(8, 8, 8, 4).max(axis=(1, 3)).repeat(8, axis=0)[:, :, None]
    assert np.all(np.abs(values - x.reshape(64, 8, 4)) <= groups * 2.0 ** -(KINDS[kind][1] + 1))  # half a step


MATMUL = """
    @nki.jit
    def k(st_words, st_scale, mv):
        K, M = st_words.shape
        N4 = mv.shape[1]
        st_hbm = st_words.ap(dtype=nl.float8_e5m2_x4, pattern=[[M, K], [1, M]], offset=0)
        st = nl.ndarray((K, M), dtype=nl.float8_e5m2_x4, buffer=nl.sbuf)
        nisa.dma_copy(dst=st, src=st_hbm)
        ss = nl.ndarray((K, M), dtype=nl.uint8, buffer=nl.sbuf)
        nisa.memset(dst=ss, value=0)
        for q in range(K // 32):
            nisa.dma_copy(dst=ss[32 * q:32 * q + 4, :], src=st_scale[4 * q:4 * q + 4, :])
        mvs = nl.ndarray((K, N4), dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.dma_copy(dst=mvs, src=mv)
        mq = nl.ndarray((K, N4 // 4), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
        ms = nl.ndarray((K, N4 // 4), dtype=nl.float8_e8m0fnu, buffer=nl.sbuf)
        nisa.quantize_mx(dst=mq, src=mvs, dst_scale=ms)
        acc = nl.ndarray((M, N4 // 4), dtype=nl.float32, buffer=nl.psum)
        for r in nl.affine_range(2):
            nisa.nc_matmul_mx(dst=acc, stationary=st, moving=mq, stationary_scale=ss, moving_scale=ms)
        out = nl.ndarray((M, N4 // 4), dtype=nl.float32, buffer=nl.shared_hbm)
        res = nl.ndarray((M, N4 // 4), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=acc)
        nisa.dma_copy(dst=out, src=res)
        return out
"""


def test_nc_matmul_mx_of_offline_words_and_an_on_device_quantized_tile_accumulates(tmp_path):
    k, m, n = 64, 32, 16
    codes = RNG.integers(0, 0x7B, (k, m, 4)).astype(np.uint8)  # finite e5m2 codes, signs below
    codes |= (RNG.integers(0, 2, (k, m, 4)) * 0x80).astype(np.uint8)
    words = codes.view("<u4").reshape(k, m).astype(np.uint32)
    st_scale = RNG.integers(120, 134, (k // 8, m)).astype(np.uint8)
    mv = bf16(RNG.normal(0, 1, (k, 4 * n)).astype(np.float32))
    got = run(tmp_path, MATMUL, {"st_words": words, "st_scale": st_scale, "mv": mv},
              [f"u32[{k},{m}]", f"u8[{k // 8},{m}]", f"bf16[{k},{4 * n}]"])["out"]
    st = decode(codes, "e5m2") * np.exp2(st_scale.repeat(8, axis=0).astype(np.float64) - 127)[:, :, None]
    mvq, _ = model_quantize(mv, "e4m3fn")
    want = 2 * np.einsum("kmt,knt->mn", st, mvq).astype(np.float32)  # two accumulated matmuls
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    assert np.abs(want).max() > 1.0


def test_fp4_containers_unpack_low_nibble_first(tmp_path):
    k, m, n = 32, 8, 8
    st_codes, mv_codes = RNG.integers(0, 16, (k, m, 4)), RNG.integers(0, 16, (k, n, 4))
    pack = (lambda c: (c << (4 * np.arange(4))).sum(axis=2).astype(np.uint16))
    got = run(tmp_path, """
        @nki.jit
        def k(a, b, sa, sb):
            K, M = a.shape
            N = b.shape[1]
            x = nl.ndarray((K, M), dtype=nl.float4_e2m1fn_x4, buffer=nl.sbuf)
            nisa.dma_copy(dst=x, src=a.ap(dtype=nl.float4_e2m1fn_x4, pattern=[[M, K], [1, M]]))
            y = nl.ndarray((K, N), dtype=nl.float4_e2m1fn_x4, buffer=nl.sbuf)
            nisa.dma_copy(dst=y, src=b.ap(dtype=nl.float4_e2m1fn_x4, pattern=[[N, K], [1, N]]))
            xs = nl.ndarray((K // 8, M), dtype=nl.uint8, buffer=nl.sbuf)
            nisa.dma_copy(dst=xs, src=sa)
            ys = nl.ndarray((K // 8, N), dtype=nl.uint8, buffer=nl.sbuf)
            nisa.dma_copy(dst=ys, src=sb)
            acc = nl.ndarray((M, N), dtype=nl.bfloat16, buffer=nl.psum)
            nisa.nc_matmul_mx(acc, x, y, xs, ys)
            r = nl.ndarray((M, N), dtype=nl.bfloat16, buffer=nl.sbuf)
            nisa.tensor_copy(dst=r, src=acc)
            out = nl.ndarray((M, N), dtype=nl.bfloat16, buffer=nl.shared_hbm)
            nisa.dma_copy(dst=out, src=r)
            return out
    """, {"a": pack(st_codes), "b": pack(mv_codes), "sa": np.full((4, m), 127, np.uint8),
          "sb": np.full((4, n), 128, np.uint8)}, [f"u16[{k},{m}]", f"u16[{k},{n}]", f"u8[4,{m}]", f"u8[4,{n}]"])["out"]
    want = 2.0 * np.einsum("kmt,knt->mn", decode(st_codes, "e2m1"), decode(mv_codes, "e2m1"))
    np.testing.assert_array_equal(got, bf16(want.astype(np.float32)))


@pytest.mark.parametrize("line, what", [
    ("nisa.quantize_mx(dst=nl.ndarray((64, 8), dtype=nl.float4_e2m1fn_x4, buffer=nl.sbuf), src=xb, "
     "dst_scale=s)", "nisa.quantize_mx dst of dtype float4_e2m1fn_x4"),
    ("nisa.quantize_mx(dst=nl.ndarray((64, 4), dtype=nl.float8_e5m2_x4, buffer=nl.sbuf), src=xb, "
     "dst_scale=s)", "[64, 8] for a [64, 32] source"),
    ("nisa.quantize_mx(dst=q, src=xb, dst_scale=s[0:32, :])", "at least 36 partitions"),
    ("nisa.quantize_mx(dst=q, src=nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.sbuf), dst_scale=s)",
     "src of dtype float32"),
    ("x[1:33, :].ap(dtype=nl.float4_e2m1fn_x4, pattern=[[32, 64], [1, 32]])", "another element width"),
])
def test_mx_refusals_name_the_call_and_line(tmp_path, line, what):
    msg = refused(tmp_path, f"""
        @nki.jit
        def k(x):
            xb = nl.ndarray((64, 32), dtype=nl.bfloat16, buffer=nl.sbuf)
            q = nl.ndarray((64, 8), dtype=nl.float8_e5m2_x4, buffer=nl.sbuf)
            s = nl.ndarray((64, 8), dtype=nl.uint8, buffer=nl.sbuf)
            {line}
    """, ["f32[64,32]"])
    assert "bad.py:11" in msg and what in msg, msg


def test_matmul_shape_rules():
    assert mx.matmul_problems((64, 32), (64, 16), (36, 32), (36, 16), (32, 16)) == []
    assert any("48 partitions" in p for p in mx.matmul_problems((48, 32), (48, 16), (36, 32), (36, 16), (32, 16)))
    assert any("contracts 64" in p for p in mx.matmul_problems((64, 32), (32, 16), (36, 32), (4, 16), (32, 16)))
    assert any("[32, 16]" in p for p in mx.matmul_problems((64, 32), (64, 16), (36, 32), (36, 16), (16, 32)))
    assert [mx.scale_row(p) for p in (0, 7, 8, 31, 32, 127)] == [0, 0, 1, 3, 32, 99]


def _operand(dtype: str, parts: int, free: int):
    from types import SimpleNamespace

    from tusk.ir.enums import DTYPE_BY_NAME, Kind
    return SimpleNamespace(kind=Kind.PHYSICAL, pattern=((free, parts), (1, free)), dtype=DTYPE_BY_NAME[dtype])


def test_the_verifier_checks_mx_dtypes_and_shapes():
    from types import SimpleNamespace

    from tusk.ir.enums import OPCODE_BY_NAME
    from tusk.ir.verify_isa import RULES
    quantize, matmul = RULES[OPCODE_BY_NAME["QuantizeMx"]], RULES[OPCODE_BY_NAME["MatmultMx"]]
    good = SimpleNamespace(ins=[_operand("bfloat16", 64, 32)],
                           outs=[_operand("float8_e4m3fn_x4", 64, 8), _operand("uint8", 36, 8)])
    assert quantize(good) == []
    bad = SimpleNamespace(ins=[_operand("float32", 64, 32)],
                          outs=[_operand("float8_e4m3fn_x4", 64, 4), _operand("uint8", 4, 8)])
    problems = quantize(bad)
    assert any("src is float32" in p for p in problems) and any("[64, 8]" in p for p in problems)
    assert any("at least 36 partitions" in p for p in problems)
    mm = SimpleNamespace(ins=[_operand("float8_e5m2_x4", 32, 16), _operand("bfloat16", 32, 8),
                              _operand("uint8", 4, 16), _operand("uint8", 4, 8)], outs=[_operand("float32", 16, 8)])
    assert matmul(mm) == ["nc_matmul_mx moving is bfloat16; one of float8_e4m3fn_x4, float8_e5m2_x4, float4_e2m1fn_x4"]


def test_view_reads_hbm_words_as_packed_values_and_refuses_part_of_a_tile(tmp_path):
    words = RNG.integers(0, 2 ** 32, (32, 8), dtype=np.uint64).astype(np.uint32)
    got = run(tmp_path, """
        @nki.jit
        def k(w):
            t = nl.ndarray((32, 8), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=w.view(nl.float8_e4m3fn_x4))
            out = nl.ndarray((32, 8), dtype=nl.float8_e4m3fn_x4, buffer=nl.shared_hbm)
            nisa.dma_copy(dst=out, src=t)
            return out
    """, {"w": words}, ["u32[32,8]"])["out"]
    np.testing.assert_array_equal(got, words)  # bytes moved as they are
    msg = refused(tmp_path, """
        @nki.jit
        def k(w):
            t = nl.ndarray((32, 8), dtype=nl.uint32, buffer=nl.sbuf)
            u = t[:, 2:4].view(nl.float8_e4m3)
    """, ["u32[32,8]"])
    assert "bad.py:9" in msg and "part of" in msg and "another element width" in msg, msg


def test_view_of_an_on_chip_tile_reads_its_bytes_as_another_dtype(tmp_path):
    # rmsnorm_quant's layout: each row's fp8 codes, then its float32 scale's four bytes as four fp8 codes
    x = RNG.uniform(-3, 3, (16, 8)).astype(np.float32)
    got = run(tmp_path, """
        @nki.jit
        def k(x):
            t = nl.load(x)
            q = nl.ndarray((16, 8), dtype=nl.float8_e4m3, buffer=nl.sbuf)
            q[...] = nl.copy(t, dtype=nl.float8_e4m3)
            s = nl.ndarray((16, 1), dtype=nl.float32, buffer=nl.sbuf)
            s[...] = nl.max(t, axis=1, keepdims=True)
            out = nl.ndarray((16, 12), dtype=nl.float8_e4m3, buffer=nl.shared_hbm)
            nisa.dma_copy(dst=out[:, 0:8], src=q)
            nisa.dma_copy(dst=out[:, 8:12], src=s.view(nl.float8_e4m3)[:, 0:4])
            w = nl.ndarray((16, 2), dtype=nl.float32, buffer=nl.shared_hbm)
            nisa.dma_copy(dst=w, src=q.view(nl.float32))
            return out, w
    """, {"x": x}, ["f32[16,8]"])
    out, w = got["out"], got["w"]
    np.testing.assert_array_equal(out[:, 8:].copy().view(np.float32)[:, 0], x.max(axis=1))
    np.testing.assert_array_equal(w.view(np.uint8).reshape(16, 8), out[:, :8])
    from tusk.sim.interp import decode as values
    np.testing.assert_allclose(values(out[:, :8], "float8e4"), x, rtol=2.0 ** -4)  # e4m3: half a step is 1/16
