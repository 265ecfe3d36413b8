"""The golden cases: for each registered pass, small inputs and the pass spec to run on them.

Each case is ``(name, spec, build)``: ``build()`` makes the input module
(used only for a new case, when ``--update-golden`` finds no input file: the
test reads the committed ``tests/golden/<pass>/<name>.input.json``, text in,
and compares the listing (:mod:`tusk.ir.listing`) after ``spec`` with
``<name>.after.txt``, text out; ``--update-golden`` rewrites only those).
Translate's inputs are host modules whose placeholder names a KLR or
BIR-JSON file of ``tests/data/`` by basename; the test stages that file in
the module's artifact directory.

Regenerate after an intended change (then read the diff before committing)::

    pytest tests/test_golden.py --update-golden
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from tests.programs import every_family_module, tiled_exp_module
from tusk.ir.builder import Builder
from tusk.ir.enums import FnAttr
from tusk.ir.expr import AffinePredicate
from tusk.ir.module import Module


def _nest() -> Module:
    """Two loop nests: one innermost static loop per nest, one with a runtime (register) address."""
    b = Builder("main")
    x = b.dram("x", (512, 64), kind="ExternalInput")
    y = b.dram("y", (512, 64), kind="ExternalOutput")
    t = b.sbuf("t", (128, 64), addr=0)
    r = b.register("r")
    b.register_move(r, 1)
    with b.loop("i", 0, 2) as i:
        with b.loop("j", 0, 2, name="inner_static") as j:
            b.dma(t.ap(), x.tile((i * 2 + j) * 128, 128, 0, 64))
            b.dma(y.tile((i * 2 + j) * 128, 128, 0, 64), t.ap())
    with b.dynamic_loop("k", 0, r, name="runtime"):
        b.activation(t.ap(), t.ap(), "Exp")
    return b.module()


def _predicated() -> Module:
    """A ring of two tiles: the store of iteration i-1 predicated on i >= 1 (odd stride, negative coefficient)."""
    b = Builder("main")
    x = b.dram("x", (128 * 5, 16), kind="ExternalInput")
    y = b.dram("y", (128 * 5, 16), kind="ExternalOutput")
    ring = b.sbuf("ring", (128, 16), addr=0, blocks=2)
    with b.loop("i", 0, 10, 2) as i:
        b.dma(ring.ap(block=(i // 2) % 2), x.tile(i // 2 * 128, 128, 0, 16))
        b.activation(ring.ap(block=(i // 2) % 2), ring.ap(block=(i // 2) % 2), "Exp")
        b.dma(y.tile((8 - i) // 2 * 128, 128, 0, 16), ring.ap(block=(i // 2) % 2),
              pred=[AffinePredicate(i - 1, "ge")])
    return b.module()


def _straight_line() -> Module:
    b = Builder("main")
    x = b.dram("x", (128, 32), kind="ExternalInput")
    y = b.dram("y", (128, 32), kind="ExternalOutput")
    a = b.sbuf("a", (128, 32), addr=0)
    c = b.sbuf("c", (128, 32), addr=128)
    b.dma(a.ap(), x.ap())
    b.activation(c.ap(), a.ap(), "Exp")
    b.tensor_tensor(a.ap(), a.ap(), c.ap(), "add")  # reads c (flow), rewrites a (anti with nothing, output on a)
    b.dma(y.ap(), a.ap())
    b.memset(c.ap(), 0.0)
    return b.module()


def _kernel_scope_with_deps() -> Module:
    m = tiled_exp_module(tiles=2)
    for fn in m.functions:
        fn.attrs.add(FnAttr.KERNEL_SCOPE)
    return m


ROOT = Path(__file__).resolve().parent.parent
KERNEL_FILES = {"01_dma_copy.klr": ROOT / "tests" / "data" / "klr" / "01_dma_copy.klr",
                "02_add_activation.klr": ROOT / "tests" / "data" / "klr" / "02_add_activation.klr",
                "tiled_exp.json": ROOT / "examples" / "kernels" / "tiled_exp.json"}


def _unrolled(m: Module, *attrs: int) -> Module:
    """``m`` unrolled, its functions carrying exactly the rotation flags ``attrs`` (rotation's usual input)."""
    from tusk.stages.unroll import Unroll

    for fn in m.functions:
        fn.attrs = {a for a in fn.attrs if a not in (FnAttr.ROTATE_PSUM_AND_SB, FnAttr.ROTATE_DRAM)} | set(attrs)
    return Unroll().run(m)[0]


def _rotation_input(kind: str) -> Callable[[], Module]:
    from tusk.examples import bir_kernels
    from tusk.stages.build_fdeps import BuildFDeps

    def build() -> Module:
        if kind == "sb":
            return _unrolled(bir_kernels.tiled_exp(tiles=3, width=8)[0], FnAttr.ROTATE_PSUM_AND_SB)
        if kind == "psum":
            return _unrolled(bir_kernels.tiled_matmul(m=256, k=128, n=128)[0], FnAttr.ROTATE_PSUM_AND_SB)
        if kind == "dram":
            return _dram_scratch()
        scheduled = BuildFDeps().run(_unrolled(bir_kernels.tiled_matmul(m=256, k=128, n=128)[0],
                                               FnAttr.ROTATE_PSUM_AND_SB))[0]
        if kind == "schedule":
            return scheduled
        for fn in scheduled.functions:  # after the scheduler: attribute 12, what the post-schedule pass rotates
            fn.attrs.add(FnAttr.KERNEL_SCOPE)
        return scheduled

    return build


def _dram_scratch() -> Module:
    """Tiles staged through an internal DRAM scratch inside a dynamic loop, read back after it."""
    b = Builder("main", attrs=(FnAttr.ROTATE_DRAM,))
    x = b.dram("x", (128, 64), kind="ExternalInput")
    n_in = b.dram("n", (1, 1), "int32", kind="ExternalInput")
    y = b.dram("y", (128, 64), kind="ExternalOutput")
    scratch = b.dram("scratch", (128, 64), addr=0)
    t = b.sbuf("t", (128, 64), addr=0)
    cnt = b.sbuf("cnt", (1, 1), "int32", addr=1024)
    n = b.register("n")
    b.dma(cnt.ap(), n_in.ap())
    b.tensor_load(n, cnt.ap())
    with b.dynamic_loop("k", 0, n):
        b.dma(t.ap(), x.ap())
        b.dma(scratch.ap(), t.ap())
    b.dma(t.ap(), scratch.ap())
    b.dma(y.ap(), t.ap())
    return b.module()


def _host(kernel: str) -> Callable[[], Module]:
    """The host module whose placeholder names ``kernel`` by basename (found in the artifact directory)."""
    def build() -> Module:
        from tusk.stages.host import host_module, read_interface

        return host_module(kernel, read_interface(KERNEL_FILES[kernel]), 0, "", name=kernel.split(".")[0])

    return build


def _klr_loops(build: Callable[[], object]) -> Callable[[], Module]:
    """The module TranslateNKIASTToBIR makes of a hand-built KLR kernel with register loops (tests/klr_loops.py)."""
    def make() -> Module:
        import tempfile

        from tests import klr_loops

        with tempfile.TemporaryDirectory() as d:
            module = klr_loops.translated(build(), Path(d))
        module.artifact_dir = ""
        return module

    return make


def _loops_kernel(name: str, **options) -> Callable[[], object]:
    def build():
        from tests import klr_loops

        return getattr(klr_loops, name)(**options)

    return build


CASES: dict[str, list[tuple[str, str, Callable[[], Module]]]] = {
    "translate_nki_ast_to_bir": [
        ("klr_dma_copy", "translate_nki_ast_to_bir{stage_files=false}", _host("01_dma_copy.klr")),
        ("klr_add_activation", "translate_nki_ast_to_bir{stage_files=false}", _host("02_add_activation.klr")),
        ("bir_tiled_exp", "translate_nki_ast_to_bir{stage_files=false}", _host("tiled_exp.json")),
    ],
    "raise_loops": [
        ("nested_grid", "raise_loops", _klr_loops(_loops_kernel("grid"))),
        ("bound_from_memory", "raise_loops", _klr_loops(_loops_kernel("tiles", bound="memory"))),
        ("counter_read_after", "raise_loops", _klr_loops(_loops_kernel("tiles", save_counter=True))),
    ],
    "heuristic_unroll": [
        ("nest", "heuristic_unroll", _nest),
        ("nest_maxhu0", "heuristic_unroll{maxhu=0}", _nest),
    ],
    "unroll": [
        ("tiled_exp", "unroll", lambda: tiled_exp_module(tiles=3, width=16)),
        ("predicated_ring", "unroll", _predicated),
        ("every_family", "unroll", every_family_module),
    ],
    "full_unroll": [
        ("level0_block_tensor", "full_unroll{level=0}", every_family_module),
        ("level2_tiled_exp", "full_unroll{level=2}", lambda: tiled_exp_module(tiles=2, width=16)),
    ],
    "build_fdeps": [
        ("straight_line", "build_fdeps", _straight_line),
        ("every_family", "build_fdeps", every_family_module),
    ],
    "address_rotation_sb": [
        ("tiled_exp", "address_rotation_sb", _rotation_input("sb")),
    ],
    "address_rotation_psum": [
        ("tiled_matmul", "address_rotation_psum", _rotation_input("psum")),
    ],
    "address_rotation_dram": [
        ("scratch_in_a_dynamic_loop", "address_rotation_dram", _rotation_input("dram")),
    ],
    "address_rotation_psum_post_schedule": [
        ("tiled_matmul", "address_rotation_psum_post_schedule", _rotation_input("post")),
    ],
    "schedule": [
        ("tiled_matmul", "schedule", _rotation_input("schedule")),
    ],
    "clear_inst_deps": [
        ("kernel_scope", "clear_inst_deps", _kernel_scope_with_deps),
        ("not_kernel_scope", "clear_inst_deps", lambda: tiled_exp_module(tiles=2)),
    ],
}
