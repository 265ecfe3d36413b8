"""The verifier checks DMA transposes among many plain DMA copies (the plain ones are skipped before any operand
is looked at; the transposes keep every check)."""

from __future__ import annotations

import pytest

from tests.test_isa_ops import Kernel
from tusk.ir import klr
from tusk.ir.columns import Record
from tusk.ir.enums import FnKind
from tusk.ir.errors import TuskError
from tusk.ir.module import Function, Module
from tusk.ir.verify import verify
from tusk.ir.verify_isa import _without_plain_dma, check_isa_shapes
from tusk.stages.klr_codegen import KlirToBirCodegen


def unverified(g: Kernel) -> Module:
    fn = Function(g.k.name, FnKind.NKI)
    KlirToBirCodegen(fn, klr.read_klr(g.k.to_bytes()).contents.kernel).codegen_lnc_kernel()
    return Module([fn], attributes=Record.of({"neuron_core_id": 0}))


@pytest.mark.parametrize("bad", [False, True])
def test_a_dma_transpose_is_checked_among_plain_copies(bad):
    g = Kernel()
    src = g.k.input("x", (4, 4, 4, 32))
    for k in range(3):
        g.k.dma(g.tile(f"c{k}", (4, 4, 4, 32)), src)
    wrong = (4, 4, 4, 32)  # XYZW reverses the axes: (32, 4, 4, 4) is right
    g.op("dmaTranspose", dst=g.tile("y", wrong if bad else (32, 4, 4, 4)), src=src, axes="XYZW")
    m = unverified(g)
    fn = m.functions[0]
    rows = [i for i in range(len(fn.insts)) if fn.inst(i).opname == "DMACopy"]
    kept = _without_plain_dma(fn, rows)
    assert len(rows) >= 4 and len(kept) == 1 and fn.inst(kept[0]).attrs.get("mode") == "Transpose"
    found = check_isa_shapes(fn, 10)
    assert bool(found) == bad and all("DMA transpose" in f for f in found)
    if bad:
        with pytest.raises(TuskError, match="DMA transpose"):
            verify(m)
    else:
        verify(m)
