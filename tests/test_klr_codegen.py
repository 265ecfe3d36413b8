"""KlirToBirCodegen: tensors -> memory locations, accesses -> physical APs, operators -> instructions,
blocks -> branches, and the dynamic access-pattern slice (seed 003)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from tusk.frontend.klr_writer import KernelWriter
from tusk.ir import bir_json
from tusk.ir.columns import Record
from tusk.ir.enums import DTYPE_BY_NAME, Dt, FnKind, Kind, Mem, TensorKind
from tusk.ir.errors import PassError
from tusk.ir.expr import IndirectArgExpr, IntRuntimeValue
from tusk.ir.klr import types as T
from tusk.ir.module import Function, Module
from tusk.ir.verify import verify
from tusk.sim.interp import run
from tusk.stages import klr_dynamic as D
from tusk.stages.klr_codegen import ACTIVATION_FUNCS, KLR_TO_BIR_DTYPE, SUPPORTED_OPERATORS, KlirToBirCodegen


def lower(k: KernelWriter, core: int = 0, **kw) -> tuple[Function, KlirToBirCodegen]:
    fn = Function(k.name, FnKind.NKI)
    cg = KlirToBirCodegen(fn, k.kernel(), core, **kw)
    cg.codegen_lnc_kernel()
    return fn, cg


def module_of(fn: Function) -> Module:
    return Module([fn], attributes=Record.of({"neuron_core_id": 0}))


def memloc(fn: Function, name: str):
    return fn.memloc(fn.memloc_by_name(name))


def ops_of(fn: Function, name: str):
    return fn.inst(fn.inst_by_name(name))


# --------------------------------------------------------------------------- tensors


def test_placements_become_memory_locations():
    k = KernelWriter("k")
    x = k.input("x", (256, 64))
    y = k.output("y", (256, 64))
    s = k.sbuf("s", (64, 32), "bfloat16", addr=1024, base=64)
    p = k.psum("p", (128, 64), addr=4096)
    k.dma(s, x[0:64, 0:32])
    k.tensor_copy(p[0:64, :], x[0:64, :])  # (DRAM -> PSUM copy: only the mapping matters here)
    k.dma(y, x)
    fn, cg = lower(k)
    assert cg.is_allocated
    ms = memloc(fn, "s")
    assert (ms.mtype, ms.base, ms.nparts, ms.addr, ms.pbytes, ms.bank) == (Mem.SB, 64, 64, 1024, 64, -1)
    assert fn.sets.get("dtype", ms.set) == DTYPE_BY_NAME["bfloat16"]
    mp = memloc(fn, "p")
    assert (mp.mtype, mp.addr, mp.bank, mp.pbytes) == (Mem.PSUM, 4096, 2, 256)
    mx, my = memloc(fn, "x"), memloc(fn, "y")
    assert (mx.mtype, mx.addr, mx.pbytes) == (Mem.DRAM, -1, 256 * 64 * 4)
    assert mx.tensor_kind == TensorKind.ExternalInput and my.tensor_kind == TensorKind.ExternalOutput
    verify(module_of(fn))


def test_views_of_one_dram_region_share_one_memory_location():
    k = KernelWriter("k")
    k.input("x", (128, 64))
    view = k.tensor("x_flat", (64, 128), memory="hbm", region="x")  # a reshape of the input
    t = k.sbuf("t", (64, 128), addr=0)
    k.dma(t, view)
    fn, _ = lower(k)
    assert len(fn.memlocs) == 2
    op = ops_of(fn, "inst.1").ins[0]
    assert op.memloc_name == "x" and op.pattern == ((128, 64), (1, 128))


def test_shared_constants_and_buffers():
    k = KernelWriter("k", cores=2)
    w = k.shared_constant("w", (128, 16), "float32", "shared_constants/abc.npy")
    buf = k.shared_buffer("scratch", (128, 16))
    t = k.sbuf("t", (128, 16), addr=0)
    for c in range(2):
        with k.core(c):
            k.dma(t, w)
            k.dma(buf, t)
    fn, _ = lower(k, 1, const_files={"w": "shared_constants/abc.npy"})
    mw, mb = memloc(fn, "w"), memloc(fn, "scratch")
    assert mw.tensor_kind == TensorKind.Const and mw.const_path == "shared_constants/abc.npy"
    assert mb.tensor_kind == TensorKind.Internal
    assert fn.record(fn.sets.get("extra", mb.set))["addr_space"] == "Shared"


def test_unplaced_sbuf_tensor_means_not_allocated():
    k = KernelWriter("k")
    x = k.input("x", (128, 4))
    t = k.tensor("t", (128, 4), memory="sbuf")  # no placement
    k.dma(t, x)
    _, cg = lower(k)
    assert not cg.is_allocated and cg.unallocated == ["t"]


@pytest.mark.parametrize("klr, bir", [("bfloat16", "bfloat16"), ("float32r", "float32r"), ("int64", "int64"),
                                      ("float8_e4m3", "float8e4"), ("float8_e4m3fn", "float8_e4m3fn"),
                                      ("float4_e2m1fn_x4", "float4_e2m1fn_x4")])
def test_dtype_names(klr, bir):
    assert KLR_TO_BIR_DTYPE[klr] == bir


# --------------------------------------------------------------------------- accesses


def test_padded_partition_rows_use_the_pitch_form():
    """freeSize larger than the row: logical row-major indices become pitch-form physical ones."""
    k = KernelWriter("k")
    x = k.input("x", (128, 8))
    y = k.output("y", (128, 8))
    t = k.sbuf("t", (128, 8), addr=0, free_bytes=64)  # rows of 8 floats in 16-float partitions
    k.dma(t, x)
    k.dma(t[1:3, 2:6], x[0:2, 0:4])
    k.dma(y, t)
    fn, _ = lower(k)
    first = ops_of(fn, "inst.1").outs[0]
    assert first.pattern == ((16, 128), (1, 8)) and first.offset == 0
    second = ops_of(fn, "inst.2").outs[0]
    assert second.pattern == ((16, 2), (1, 4)) and second.offset == 16 + 2
    xa = np.arange(128 * 8, dtype=np.float32).reshape(128, 8)
    want = xa.copy()
    want[1:3, 2:6] = xa[0:2, 0:4]
    assert np.array_equal(run(module_of(fn), {"x": xa})["y"], want)


def test_a_pattern_crossing_padded_rows_is_refused():
    k = KernelWriter("k")
    x = k.input("x", (128, 8))
    t = k.sbuf("t", (128, 8), addr=0, free_bytes=64)
    k.dma(t.ap([[1, 16]], offset=0), x.ap([[1, 16]]))
    with pytest.raises(PassError, match="crosses rows of 8 elements"):
        lower(k)


def test_dtype_override_sets_the_operand_dtype_and_units():
    k = KernelWriter("k")
    x = k.input("x", (128, 4), "int32")
    t = k.sbuf("t", (128, 4), "int32", addr=0)
    k.dma(t.ap([[4, 128], [1, 4]], dtype="uint32"), x)
    k.dma(t.ap([[8, 128], [1, 8]], dtype="uint16"), x.ap([[8, 128], [1, 8]], dtype="uint16"))
    fn, _ = lower(k)
    o1 = ops_of(fn, "inst.1").outs[0]
    assert o1.dtype == Dt.uint32 and o1.pattern == ((4, 128), (1, 4))
    o2 = ops_of(fn, "inst.2").outs[0]
    assert o2.dtype == Dt.uint16 and o2.pattern == ((8, 128), (1, 8))


def test_more_than_four_dimensions_is_refused():
    k = KernelWriter("k")
    x = k.input("x", (2, 2, 2, 2, 2))
    t = k.sbuf("t", (2, 16), addr=0)
    k.dma(t.ap([[16, 2], [1, 16]]), x)
    with pytest.raises(PassError, match="at most 4"):
        lower(k)


# --------------------------------------------------------------------------- operators


def test_operator_lowering_opcodes_and_attrs():
    k = KernelWriter("k")
    x = k.input("x", (128, 64))
    a = k.sbuf("a", (128, 64), addr=0)
    b = k.sbuf("b", (128, 64), addr=256)
    col = k.sbuf("col", (128, 1), addr=512)
    ps = k.psum("ps", (128, 64), addr=0)
    k.dma(a, x)
    k.tensor_tensor(b, a, a, "mult")
    k.tensor_scalar(b, b, "add", 1.5, "max", 0, reverse1=True)
    k.tensor_scalar(b, b, "subtract", col, reverse0=True)
    k.activation(b, a, "gelu_apprx_tanh", scale=0.5, bias=col, reduce_op="max", reduce_res=col)
    k.tensor_reduce(col, b, "add", negate=True)
    k.memset(a, 0.25)
    k.iota(b, 3, [[2, 64]], channel_multiplier=7)
    k.matmul(ps, a, b)
    k.reciprocal(b, b)
    fn, _ = lower(k)
    names = fn.inst_names()
    assert names == ["inst.1", "inst.2", "inst.3", "inst.4", "inst.5", "inst.5.reduce", "inst.6", "inst.7",
                     "inst.8", "inst.9", "inst.10"]
    got = [(fn.inst(i).opname, fn.inst(i).engine) for i in range(len(names))]
    assert [g[0] for g in got] == ["DMACopy", "TensorTensor", "TensorScalar", "TensorScalarPtr", "Activation",
                                   "ActivationReadAccumulator", "TensorReduce", "Memset", "Iota", "Matmult",
                                   "TensorScalar"]
    assert ops_of(fn, "inst.2").attrs["op"] == "mult"
    ts = ops_of(fn, "inst.3").attrs
    assert (ts["op0"], ts["const0"], ts["op1"], ts["const1"], ts["reverse0"], ts["reverse1"]) == \
        ("add", 1.5, "max", 0.0, False, True)
    ptr = ops_of(fn, "inst.4")
    assert ptr.attrs["reverse0"] and [o.memloc_name for o in ptr.ins] == ["b", "col"]
    act = ops_of(fn, "inst.5")
    assert (act.attrs["func"], act.attrs["scale"]) == ("Gelu_apprx_tanh", 0.5) and len(act.ins) == 2
    # the reduction is the engine's: into its reduce registers from zero, then read out (tusk.sim.accumulators)
    assert (act.attrs["acc"], act.attrs["reduce_op"]) == ("ZeroAccumulate", "max")
    red = ops_of(fn, "inst.5.reduce")
    assert not red.ins and red.outs[0].memloc_name == "col" and got[5][1] == got[4][1]  # the same engine
    assert ops_of(fn, "inst.6").attrs["negate"] is True
    assert ops_of(fn, "inst.7").attrs["constant"] == 0.25
    io = ops_of(fn, "inst.8").attrs
    assert (io["base"], io["pattern"], io["channel_multiplier"]) == (3, ((2, 64),), 7)
    mm = ops_of(fn, "inst.9")
    assert mm.attrs["accumulation_flag"] == 0 and [o.memloc_name for o in mm.ins] == ["a", "b"]
    rc = ops_of(fn, "inst.10").attrs
    assert (rc["op0"], rc["const0"], rc["reverse0"]) == ("divide", 1.0, True)
    verify(module_of(fn))


def test_unsupported_operator_names_the_operator_and_the_statement():
    k = KernelWriter("k")
    t = k.sbuf("t", (128, 4), addr=0)
    k.stmt(T.Operator.devicePrint(op=T.DevicePrint(src=t.ap().ref(), printPrefix="t",
                                                   buffer=T.PrintOutputBuffer.stdout)), name="inst.42")
    with pytest.raises(PassError, match=r"KLIR operator devicePrint is not supported .*statement inst\.42 in block "
                                        r"main\.1, k\.py:1"):
        lower(k)


def test_unsupported_forms_inside_supported_operators_are_errors_too():
    k = KernelWriter("k")
    x = k.input("x", (128, 4))
    t = k.sbuf("t", (128, 4), addr=0)
    k.activation(t, x, "silu_dx")
    with pytest.raises(PassError, match="activation function silu_dx .*inst.1"):
        lower(k)


def test_tables_cover_the_klr_enums():
    assert {"ncDmaCopy", "tensorTensor", "ncMatMul", "cmpBranch", "registerAluOp"} <= SUPPORTED_OPERATORS
    assert ACTIVATION_FUNCS["log"] == "Ln" and ACTIVATION_FUNCS["exp"] == "Exp"


# --------------------------------------------------------------------------- control flow


def loop_kernel() -> KernelWriter:
    k = KernelWriter("loop")
    y = k.output("y", (1, 4))
    acc = k.sbuf("acc", (1, 4), addr=0)
    k.memset(acc, 0.0)
    k.reg_move("reg.n", 5)
    with k.dynamic_loop("reg.i", 0, "reg.n", 1, "L"):
        k.tensor_scalar(acc, acc, "add", 2.0)
    k.branch("ne_imm", "reg.i", 5, "bad", "ok")
    k.block("bad")
    k.memset(acc, -1.0)
    k.block("ok", no_reorder=True)
    k.dma(y, acc)
    return k


def test_blocks_branches_and_registers():
    fn, _ = lower(loop_kernel())
    blocks = [fn.strings[n] for n in fn.blocks["name"].tolist()]
    assert blocks == ["main.1", "L.head", "L.body", "L.exit", "bad", "ok"]
    assert fn.record(fn.blocks.get("extra", 5)) == {"no_reorder": True}
    assert [fn.strings[n] for n in fn.regs["name"].tolist()] == ["reg.n", "reg.i"]
    jmp = ops_of(fn, "jmp.1")
    assert jmp.opname == "UnconditionalBranch" and jmp.attrs["target"] == "L.head"
    br = ops_of(fn, "br.1")
    assert br.opname == "CompareAndBranch" and br.attrs == {"comp_op": "IS_LTREG", "on_true": "L.body",
                                                            "on_false": "L.exit"}
    assert [o.reg_name for o in br.ins] == ["reg.i", "reg.n"]
    ne = ops_of(fn, "br.3")
    assert ne.attrs["comp_op"] == "IS_NEIMM" and ne.ins[1].kind == Kind.IMM and ne.ins[1].value == 5
    alu = ops_of(fn, "reg.3")
    assert alu.opname == "RegisterAlu" and alu.attrs["op"] == "add"
    verify(module_of(fn))
    assert run(module_of(fn), {})["y"].tolist() == [[10.0] * 4]


def test_branch_to_an_unknown_label_is_an_error():
    k = KernelWriter("k")
    k.jump("nowhere")
    with pytest.raises(PassError, match="'nowhere', which is not a block"):
        lower(k)


def test_edges_become_ordered_dependencies():
    k = KernelWriter("k")
    x = k.input("x", (128, 4))
    t = k.sbuf("t", (128, 4), addr=0)
    a = k.dma(t, x)
    b = k.tensor_scalar(t, t, "mult", 2.0)
    c = k.dma(t, x)
    k.edge(a, [c, "missing"])
    k.edge(c, [b])  # backwards in program order: not a dependence edge
    fn, cg = lower(k)
    assert list(zip(fn.deps["src"].tolist(), fn.deps["dst"].tolist(), fn.deps["kind"].tolist())) == [(0, 2, 1)]
    assert cg.skipped_edges == 2


def test_lnc_bodies_are_lowered_per_core():
    k = KernelWriter("k", cores=2)
    x = k.input("x", (256, 4))
    t = k.sbuf("t", (128, 4), addr=0)
    for c in range(2):
        with k.core(c):
            k.dma(t, x[c * 128:(c + 1) * 128, :])
    offsets = [ops_of(lower(k, c)[0], "inst.1").ins[0].offset for c in range(2)]
    assert offsets == [0, 512]
    with pytest.raises(PassError, match="no body for core 2"):
        lower(k, 2)


# --------------------------------------------------------------------------- dynamic access patterns


class _FakeCodegen:
    """What the dynamic-AP functions need from the codegen (static access encoder, the function)."""

    def __init__(self, kernel_writer: KernelWriter, regs=()):
        self.fn = Function("f", FnKind.NKI)
        for r in regs:
            self.fn.add_reg(r)
        self.cg = KlirToBirCodegen(self.fn, kernel_writer.kernel())
        self.static_access = self.cg.static_access


def _gather_setup(indirect_dim: int = 0, index_memory: str = "sbuf"):
    k = KernelWriter("g")
    table = k.input("table", (1024, 64))
    if index_memory == "sbuf":
        idx = k.sbuf("idx", (128, 1), "int32", addr=0)
    else:
        idx = k.input("idx", (128, 1), "int32")
    ap = table.ap([[64, 128], [1, 64]], vector=idx.ap([[1, 128], [1, 1]]), indirect_dim=indirect_dim)
    return k, ap.ref()


def _scalar_setup(scalar):
    k = KernelWriter("s")
    x = k.input("x", (512, 64))
    one = k.sbuf("one", (1, 1), "int32", addr=0)
    off = scalar if isinstance(scalar, str) else one.ap([[1, 1], [1, 1]])
    return k, x.ap([[64, 128], [1, 64]], offset=64, scalar=off).ref()


def test_is_access_dynamic_on_each_kind_of_object():
    _, gather = _gather_setup()
    _, scalar = _scalar_setup("r")
    static = dataclasses.replace(D.cast_to_bir_ap(gather), vectorOffset=None)
    for ref in (gather, scalar):
        assert D.is_access_dynamic(ref)                      # TensorRef.abstract
        assert D.is_access_dynamic(ref.access)               # Access.birPattern
        assert D.is_access_dynamic(ref.access.access)        # BirAccessPattern
    assert not D.is_access_dynamic(static)
    tn = static.tensor
    assert not D.is_access_dynamic(T.Access.simple(tensor=tn))  # only Access kind 4 can be dynamic
    sram = T.TensorRef.sbuf(view=T.TensorSram(name="t", dtype=T.Dtype.float32, parNum=1, pattern=(), parOffset=0,
                                              freeOffset=0))
    assert not D.is_access_dynamic(sram)                     # only TensorRef kind 1 (abstract)
    with pytest.raises(PassError, match="Attempt to cast a TensorRef that is not an BirAP"):
        D.cast_to_bir_ap(sram)


def test_exactly_one_of_scalar_and_vector_offsets():
    _, gather = _gather_setup()
    bap = D.cast_to_bir_ap(gather)
    both = dataclasses.replace(bap, scalarOffset=T.ScalarOffset.reg(r="r"))
    neither = dataclasses.replace(bap, vectorOffset=None)
    D.validate_only_one_of_scalar_and_vector_offset(bap)
    for bad in (both, neither):
        with pytest.raises(PassError, match="exactly one of a scalar offset and a vector offset"):
            D.validate_only_one_of_scalar_and_vector_offset(bad)
    with pytest.raises(PassError, match="exactly one"):
        D.assemble_dynamic_info(_FakeCodegen(KernelWriter("k"), ["r"]), both, None)


def test_accumulated_shape_walks_the_free_dims():
    shape = T.Shape(parDim=8, freeDims=(4, 3, 2))
    assert [D.compute_accumulated_shape(shape, d) for d in range(5)] == [24, 6, 2, 1, 1]
    with pytest.raises(PassError):
        D.compute_accumulated_shape(shape, 5)


@pytest.mark.parametrize("memory, max_index", [("sbuf", 128), ("hbm", 128)])
def test_vector_offset_branch(memory, max_index):
    k, ref = _gather_setup(index_memory=memory)
    cg = _FakeCodegen(k)
    static = cg.cg.bap_static(D.cast_to_bir_ap(ref))
    info = D.assemble_dynamic_info(cg, ref, static)
    assert info.actual_ap == ((64, 128), (1, 64)) and info.c == 0
    assert info.indirect_dim == 0 and info.indirect_dim_max_index == max_index
    (expr, coef), = info.aff_expr
    assert expr.atoms() == (IndirectArgExpr(1),) and expr.atoms()[0].kind == 3 and coef == max_index


def test_vector_offset_needs_indirect_dim_0():
    k, ref = _gather_setup(indirect_dim=1)
    cg = _FakeCodegen(k)
    with pytest.raises(PassError, match="When using vector offset, the only supported indirectDim is 0"):
        D.assemble_dynamic_info(cg, ref, cg.cg.bap_static(D.cast_to_bir_ap(ref)))


def test_scalar_register_offset_is_a_runtime_value():
    k, ref = _scalar_setup("reg.off")
    cg = _FakeCodegen(k, ["reg.off"])
    info = D.assemble_dynamic_info(cg, ref, cg.cg.bap_static(D.cast_to_bir_ap(ref)))
    (expr, coef), = info.aff_expr
    assert expr.atoms() == (IntRuntimeValue("reg.off"),) and expr.atoms()[0].kind == 7
    assert coef == 64 and info.c == 64 and info.indirect_dim == 0


def test_scalar_register_must_exist():
    k, ref = _scalar_setup("reg.ghost")
    cg = _FakeCodegen(k, ["reg.other"])
    with pytest.raises(PassError, match="Cannot find register: reg.ghost for scalar offset"):
        D.assemble_dynamic_info(cg, ref, cg.cg.bap_static(D.cast_to_bir_ap(ref)))


def test_scalar_access_offset_reuses_the_indirect_arg_expr():
    k, ref = _scalar_setup(None)
    cg = _FakeCodegen(k)
    info = D.assemble_dynamic_info(cg, ref, cg.cg.bap_static(D.cast_to_bir_ap(ref)))
    (expr, coef), = info.aff_expr
    assert expr.atoms() == (IndirectArgExpr(1),) and coef == 64


def test_extract_hoists_the_index_and_clears_the_vector_flag():
    k, ref = _gather_setup()
    cg = _FakeCodegen(k)
    index, cleared = D.extract_dynamic_ap_to_standalone(cg, ref)
    assert index.memloc == cg.fn.memloc_by_name("idx") and index.pattern == ((1, 128), (1, 1))
    assert isinstance(cleared, T.TensorRef_abstract) and not D.is_access_dynamic(cleared)
    assert D.cast_to_bir_ap(cleared).vectorOffset is None and D.is_access_dynamic(ref)  # the input is unchanged


def test_extract_error_paths(monkeypatch):
    k, gather = _gather_setup()
    cg = _FakeCodegen(k, ["r"])
    static = dataclasses.replace(D.cast_to_bir_ap(gather), vectorOffset=None)
    with pytest.raises(PassError, match="cannot extract dynamic ap from a static access!"):
        D.extract_dynamic_ap_to_standalone(cg, static)
    _, scalar = _scalar_setup("r")
    with pytest.raises(PassError, match="When unique_indices=True, it's expected that the vector_offset is set. "
                                        "Check the nisa.dma_copy call"):
        D.extract_dynamic_ap_to_standalone(cg, scalar)
    # the third guard cannot fire through is_access_dynamic; force the predicate as a corrupted flag would
    monkeypatch.setattr(D, "is_access_dynamic", lambda ref: True)
    with pytest.raises(PassError, match="Logic Fault: dynamic access should have vector offset."):
        D.extract_dynamic_ap_to_standalone(cg, static)


def test_unique_indices_copy_without_a_vector_offset_is_refused():
    k = KernelWriter("k")
    x = k.input("x", (512, 64))
    t = k.sbuf("t", (128, 64), addr=0)
    k.dma(t, x[0:128, :], unique_indices=True)
    with pytest.raises(PassError, match="cannot extract dynamic ap from a static access"):
        lower(k)
    k2 = KernelWriter("k2")
    x2 = k2.input("x", (512, 64))
    t2 = k2.sbuf("t", (128, 64), addr=0)
    k2.reg_move("r", 1)
    k2.dma(t2, x2.ap([[64, 128], [1, 64]], scalar="r"), unique_indices=True)
    with pytest.raises(PassError, match="vector_offset is set"):
        lower(k2)


def _gather_kernel(unique: bool) -> KernelWriter:
    k = KernelWriter("g")
    table = k.input("table", (64, 8))
    ids = k.input("ids", (16, 1), "int32")
    out = k.output("out", (16, 8))
    idx = k.sbuf("idx", (16, 1), "int32", addr=0)
    rows = k.sbuf("rows", (16, 8), addr=64)
    k.dma(idx, ids)
    k.dma(rows, table.ap([[8, 16], [1, 8]], vector=idx.ap([[1, 16], [1, 1]], dtype="uint32")),
          unique_indices=unique, oob="skip")
    k.dma(out, rows)
    return k


@pytest.mark.parametrize("unique", [True, False])
def test_gather_instruction_carries_dynamic_info_and_indirection_operand(unique):
    fn, _ = lower(_gather_kernel(unique))
    g = ops_of(fn, "inst.2")
    (src,), (ind,), (dst,) = g.ins, g.indirection_ins, g.outs
    assert src.memloc_name == "table" and src.dyn is not None and src.dyn.indirect_dim_max_index == 16
    assert ind.memloc_name == "idx" and ind.dtype == Dt.uint32 and ind.dyn is None
    assert dst.dyn is None and g.attrs["oob_is_err"] is False
    table = np.random.default_rng(0).standard_normal((64, 8)).astype(np.float32)
    ids = np.random.default_rng(1).permutation(64)[:16].astype(np.int32).reshape(16, 1)
    m = module_of(fn)
    verify(m)
    assert np.array_equal(run(m, {"table": table, "ids": ids})["out"], table[ids[:, 0]])


def test_scalar_offsets_by_register_and_by_access_run():
    k = KernelWriter("s")
    x = k.input("x", (64, 8))
    y = k.output("y", (8, 8))
    one = k.sbuf("one", (1, 1), "int32", addr=0)
    t = k.sbuf("t", (8, 8), addr=64)
    k.iota(one, 3, [[1, 1]])                              # one = 3
    k.reg_move("r", 5)
    k.dma(t[0:4, :], x.ap([[8, 4], [1, 8]], scalar="r"))  # rows 5..8
    k.dma(t[4:8, :], x.ap([[8, 4], [1, 8]], offset=8, scalar=one.ap([[1, 1], [1, 1]])))  # rows 1+3 ..
    k.dma(y, t)
    fn, _ = lower(k)
    second = ops_of(fn, "inst.3")
    assert len(second.indirection_ins) == 1 and second.indirection_ins[0].memloc_name == "one"
    xa = np.arange(64 * 8, dtype=np.float32).reshape(64, 8)
    got = run(module_of(fn), {"x": xa})["y"]
    assert np.array_equal(got, np.concatenate([xa[5:9], xa[4:8]]))


def test_dynamic_info_travels_through_bir_json():
    fn, _ = lower(_gather_kernel(True))
    m = module_of(fn)
    text = bir_json.dumps(m)
    inst = json.loads(text)["nki_functions"][0]["blocks"][0]["instructions"][1]
    info = inst["ins"][0]["dynamic_ap_info"]
    assert set(info) == {"actual_ap", "aff_expr", "c", "indirect_dim", "indirect_dim_max_index"}
    assert info["aff_expr"][0]["coef"] == 16 and info["indirect_dim"] == 0
    assert inst["indirection_ins"][0]["memref"] == "idx"
    assert bir_json.loads(text) == m


def test_tensor_scalar_second_stage_needs_operator_and_operand():
    k = KernelWriter("k")
    x, y = k.input("x", (128, 4)), k.output("y", (128, 4))
    t = k.sbuf("t", (128, 4), addr=0)
    k.dma(t, x)
    k.stmt(T.Operator.tensorScalar(op=T.TensorScalar(
        dst=t.ap().ref(), src=t.ap().ref(), imm0=T.Operand.imm(i=T.Immediate.float32(f=2.0)), op0=T.AluOp.mult,
        imm1=None, op1=T.AluOp.mult, reverse=T.TensorScalarReverseOps.none, engine=T.Engine.unassigned,
        dtype=None)))
    k.dma(y, t)
    fn, _ = lower(k)
    assert ops_of(fn, "inst.2").attrs["op1"] == "bypass"
    xa = np.ones((128, 4), np.float32)
    assert np.array_equal(run(module_of(fn), {"x": xa})["y"], xa * 2)


def test_assemble_default_branch_is_a_logic_fault(monkeypatch):
    _, gather = _gather_setup()
    neither = dataclasses.replace(D.cast_to_bir_ap(gather), vectorOffset=None)
    monkeypatch.setattr(D, "validate_only_one_of_scalar_and_vector_offset", lambda bap: None)
    with pytest.raises(PassError, match="Logic fault, this branch should never be taken"):
        D.assemble_dynamic_info(_FakeCodegen(KernelWriter("k")), neither, None)


def test_scalar_offset_coefficient_counts_elements_of_the_override_dtype():
    """x float32 [8, 64] read as uint16 (128 per row): reg.r = 2 selects row 2, not row 1."""
    k = KernelWriter("s")
    x = k.input("x", (8, 64))
    y = k.output("y", (1, 64))
    t = k.sbuf("t", (1, 64), addr=0)
    k.reg_move("reg.r", 2)
    k.dma(t.ap([[128, 1], [1, 128]], dtype="uint16"), x.ap([[128, 1], [1, 128]], scalar="reg.r", dtype="uint16"))
    k.dma(y, t)
    fn, _ = lower(k)
    assert ops_of(fn, "inst.1").ins[0].dyn.aff_expr[0][1] == 128  # one row = 128 uint16 elements
    xa = np.arange(8 * 64, dtype=np.float32).reshape(8, 64)
    assert np.array_equal(run(module_of(fn), {"x": xa})["y"], xa[2:3])


def _tensor_names(obj, seen=None):
    """Every KLR TensorName object reachable from ``obj`` (the decoded file)."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, T.TensorName):
        yield obj
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            yield from _tensor_names(getattr(obj, f.name), seen)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _tensor_names(v, seen)


def _translated_with(tmp_path, change):
    """examples/kernels/tensor_add.klr with ``change(tensor_name)`` applied to every tensor of it, translated."""
    from pathlib import Path

    from tusk.ir.klr import read_klr, write_klr
    from tusk.stages.host import host_module_for
    from tusk.stages.translate_nki_ast_to_bir import TranslateNKIASTToBIR

    contents = read_klr((Path(__file__).resolve().parent.parent / "examples" / "kernels" / "tensor_add.klr")
                        .read_bytes())
    for t in _tensor_names(contents):
        change(t)
    path = tmp_path / "k.klr"
    path.write_bytes(write_klr(contents))
    return TranslateNKIASTToBIR().run(host_module_for(str(path), 0, str(tmp_path)))


def test_a_klr_tensor_of_impossible_size_is_a_format_error_naming_it(tmp_path):
    """Found by mutating decoded KLR files: a DRAM tensor past 2^62 bytes ended in numpy's OverflowError, a
    tensor with no elements in a row in a ZeroDivisionError; both are the file's fault, named."""
    from tusk.ir.errors import FormatError

    def huge(t):  # its DRAM address is 128 partitions of 2^62 bytes
        object.__setattr__(t.address, "parSize", 128)
        object.__setattr__(t.address, "freeSize", 1 << 62)

    with pytest.raises(FormatError, match=r"tensor \S+: \d+ bytes of DRAM, past 2\^62"):
        _translated_with(tmp_path, huge)

    def empty(t):
        object.__setattr__(t, "shape", T.Shape(t.shape.parDim, (0,)))
        object.__setattr__(t, "freeElements", 0)

    with pytest.raises(FormatError, match=r"tensor \S+: no elements in a partition row \(free dimensions \[0\]\)"):
        _translated_with(tmp_path, empty)
