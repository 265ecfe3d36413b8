"""The verifier accepts well-formed programs and names what is wrong with broken ones."""

from __future__ import annotations

import numpy as np
import pytest

from tests.programs import every_family_module, tiled_exp_module
from tusk.ir.builder import Builder
from tusk.ir.enums import Edge
from tusk.ir.errors import VerifyError
from tusk.ir.verify import verify


def test_builder_programs_verify(family_module, tiled_module):
    verify(family_module)
    verify(tiled_module)


def _broken(change) -> str:
    m = every_family_module()
    change(m.functions[0])
    with pytest.raises(VerifyError) as err:
        verify(m)
    return str(err.value)


def test_operand_outside_its_memloc():
    def change(fn):
        fn.operands["offset"][0] = 10**6
    assert "outside memory location" in _broken(change)


def test_the_operand_check_in_chunks_names_the_same_instructions(monkeypatch):
    """The check walks the operands a chunk at a time: an operand out of bounds in a later chunk is still
    reported against the instruction that owns it, and the report is that of one whole pass."""
    import tusk.ir.verify as v

    def change(fn):
        last = len(fn.operands) - 1
        for j in (0, last // 2, last):
            fn.operands["offset"][j] = 10**6 + j

    whole = _broken(change)
    monkeypatch.setattr(v, "OPERAND_CHUNK", 3)
    assert _broken(change) == whole
    assert whole.count("outside memory location") == 3, whole
    m = every_family_module()
    fn = m.functions[0]
    owner = np.repeat(np.arange(len(fn.insts)), fn.insts["nops"].astype(np.int64))
    for j in (0, (len(fn.operands) - 1) // 2, len(fn.operands) - 1):
        assert f"instruction {fn.inst_name(int(owner[j]))}: operand touches elements [{10**6 + j}" in whole, whole


def test_symbolic_operand_outside_over_the_loop_range():
    b = Builder()
    x = b.dram("x", (256, 64))
    t = b.sbuf("t", (128, 64), addr=0)
    with b.loop("i", 0, 3) as i:  # the third tile (i == 2) runs past x
        b.dma(t.ap(), x.tile(i * 128, 128, 0, 64))
    with pytest.raises(VerifyError, match="symbolic operand reaches"):
        verify(b.module())


def test_block_index_outside_the_block_tensor():
    b = Builder()
    t = b.sbuf("t", (128, 64), addr=0, blocks=2)
    u = b.sbuf("u", (128, 64), addr=1024)
    with b.loop("i", 0, 3) as i:
        b.copy(u.ap(), t.ap(block=i))
    with pytest.raises(VerifyError, match="has 2 blocks"):
        verify(b.module())


def test_dependency_against_program_order():
    def change(fn):
        fn.add_dep(5, 2, Edge.Flow)
    assert "against program order" in _broken(change)


def test_dangling_dependency():
    def change(fn):
        fn.add_dep(0, 10**5, Edge.Flow)
    assert "do not exist" in _broken(change)


def test_repeated_instruction_names_are_labels_and_verify():
    """Real dumps repeat a name in every block that holds the instruction: not an error."""
    m = every_family_module()
    fn = m.functions[0]
    fn.insts["name"][1] = fn.insts["name"][0]
    fn.add_inst(12, 0, 0, fn.insts.get("name", 0), [], iteration=3)
    fn.add_inst(12, 0, 0, fn.inst_name(0) + "-it3", [])
    verify(m)


def test_duplicate_block_names():
    def change(fn):
        fn.blocks["name"][1] = fn.blocks["name"][0]
    assert "block names are not unique" in _broken(change)


def test_rotation_scope_must_be_0_1_2():
    b = Builder()
    t = b.dram("t", (4, 4))
    b.emit("NKIKernel", "Unassigned", [t.ap()], [], attrs={"func": "k", "address_rotation_scope_val": 5})
    with pytest.raises(VerifyError, match="AddressRotationScope 5"):
        verify(b.module())


def test_sb_memloc_past_the_partition():
    b = Builder()
    b.sbuf("t", (128, 64), addr=0x38000 - 8)
    with pytest.raises(VerifyError, match="past the"):
        verify(b.module())


def test_psum_bank_must_match_address():
    b = Builder()
    b.psum("p", (128, 64), addr=4096)
    m = b.module()
    m.functions[0].memlocs["bank"][0] = 0
    with pytest.raises(VerifyError, match="is in bank 2"):
        verify(m)


def test_program_preorder():
    m = tiled_exp_module()
    fn = m.functions[0]
    fn.insts["block"][1], fn.insts["block"][0] = 0, 0  # body instruction moved out of its loop
    with pytest.raises(VerifyError, match="preorder"):
        verify(m)


def test_loop_with_zero_stride():
    b = Builder()
    t = b.sbuf("t", (128, 4), addr=0)
    with b.loop("i", 0, 4, 0):
        b.memset(t.ap(), 0)
    with pytest.raises(VerifyError, match="stride is 0"):
        verify(b.module())


def test_a_block_index_known_only_at_run_time_is_not_an_error():
    b = Builder()
    t = b.sbuf("t", (128, 4), addr=0, blocks=3)
    n = b.register("n")
    b.register_move(n, 2)
    with b.dynamic_loop("k", 0, n) as k:
        b.memset(t.ap(block=k), 0)
    verify(b.module())


def _ring(tiles: int = 6, predicated: bool = True):
    """A ring of 3 SB slots (block i mod 3): load tile i into slot i mod 3, store tile i - 1 from slot
    (i - 1) mod 3, predicated on i - 1 >= 0 (the first iteration has nothing to store yet)."""
    from tusk.ir.expr import AffinePredicate
    b = Builder()
    x = b.dram("x", (128 * tiles, 64), kind="ExternalInput")
    y = b.dram("y", (128 * tiles, 64), kind="ExternalOutput")
    ring = b.sbuf("ring", (128, 64), addr=0, blocks=3)
    with b.loop("i", 0, tiles + 1) as i:
        b.dma(ring.ap(block=i % 3), x.tile(i * 128, 128, 0, 64), pred=[AffinePredicate(tiles - 1 - i, "ge")])
        pred = [AffinePredicate(i - 1, "ge")] if predicated else []
        b.dma(y.tile((i - 1) * 128, 128, 0, 64), ring.ap(block=(i - 1) % 3), pred=pred)
    return b.module()


def test_predicated_off_iterations_are_not_range_checked():
    verify(_ring())  # iteration 0's store (tile -1) and iteration 6's load (tile 6) never run
    with pytest.raises(VerifyError, match="symbolic operand reaches"):
        verify(_ring(predicated=False))
    from tusk.sim.interp import random_inputs, run
    from tusk.stages.full_unroll import FullUnroll
    m = _ring()
    inp = random_inputs(m, 1)
    assert (run(m, inp)["y"] == inp["x"]).all()
    verify(FullUnroll(level=2).run(m)[0])


def test_predicates_narrow_large_iteration_spaces_by_axis():
    from tusk.ir.expr import AffinePredicate
    b = Builder()
    x = b.dram("x", (400, 64))
    t = b.sbuf("t", (1, 64), addr=0)
    with b.loop("i", 0, 300) as i:
        with b.loop("j", 0, 300) as j:   # 90,000 points: too many to enumerate
            b.dma(t.ap(), x.tile(i + j - 1, 1, 0, 64),
                  pred=[AffinePredicate(i - 1, "ge"), AffinePredicate(399 - i - j, "ge")])
    # i >= 1 narrows the start to row 0; the two-axis bound (rows <= 398) cannot be used without enumerating
    with pytest.raises(VerifyError, match=r"reaches elements \[0, 38271\]"):
        verify(b.module())


def _two_buffers(second_addr: int, *, interleaved: bool):
    b = Builder()
    x = b.dram("x", (128, 64), kind="ExternalInput")
    y = b.dram("y", (128, 128), kind="ExternalOutput")
    a = b.sbuf("a", (128, 64), addr=0)
    c = b.sbuf("c", (128, 64), addr=second_addr)
    b.dma(a.ap(), x.ap())
    if interleaved:
        b.dma(c.ap(), x.ap())
        b.dma(y.tile(0, 128, 0, 64), a.ap())
    else:
        b.dma(y.tile(0, 128, 0, 64), a.ap())
        b.dma(c.ap(), x.ap())
    b.dma(y.tile(0, 128, 64, 64), c.ap())
    return b.module()


def test_overlapping_memory_locations_must_not_be_live_together():
    verify(_two_buffers(256, interleaved=True))     # disjoint
    verify(_two_buffers(128, interleaved=False))    # overlapping, but a is dead before c is written
    with pytest.raises(VerifyError, match="memory locations a and c overlap while both are live"):
        verify(_two_buffers(128, interleaved=True))


def _slices(second_addr: int, *, clobber: bool):
    """Tile ``a`` filled and read one 32-column slice at a time (an unrolled loop); ``c`` overlaps its first slice."""
    b = Builder()
    x = b.dram("x", (128, 64), kind="ExternalInput")
    y = b.dram("y", (128, 96), kind="ExternalOutput")
    a = b.sbuf("a", (128, 64), addr=0)
    c = b.sbuf("c", (128, 32), addr=second_addr)
    for k in range(2):
        b.dma(a.tile(0, 128, 32 * k, 32), x.tile(0, 128, 32 * k, 32))
        b.dma(y.tile(0, 128, 32 * k, 32), a.tile(0, 128, 32 * k, 32))
        if k == 0:  # the first slice is dead (clobber: still to be read) when c takes its bytes
            b.dma(c.ap(), x.tile(0, 128, 0, 32))
            b.dma(y.tile(0, 128, 64, 32), c.ap())
    if clobber:
        b.dma(y.tile(0, 128, 0, 32), a.tile(0, 128, 0, 32))
    return b.module()


def test_a_buffer_live_in_part_of_its_bytes_only_clashes_where_it_is_clobbered():
    # a is one instance (no write covers it whole) live across c's; c only touches a's first slice after its read
    verify(_slices(0, clobber=False))
    with pytest.raises(VerifyError, match="memory locations a and c overlap while both are live"):
        verify(_slices(0, clobber=True))      # the first slice is read again after c overwrote it
    verify(_slices(128, clobber=True))        # c sits on the second slice, written after c's last read


def test_reading_through_an_overlapping_view_is_not_a_clobber():
    b = Builder()
    x = b.dram("x", (128, 64), kind="ExternalInput")
    y = b.dram("y", (128, 96), kind="ExternalOutput")
    a = b.sbuf("a", (128, 64), addr=0)
    half = b.sbuf("half", (128, 32), addr=128)     # a view of a's second half
    c = b.sbuf("c", (128, 32), addr=1024)
    b.dma(a.ap(), x.ap())
    b.copy(c.ap(), half.ap())                      # reads a's data through the view
    b.dma(y.tile(0, 128, 0, 64), a.ap())           # a is still live
    b.dma(y.tile(0, 128, 64, 32), c.ap())
    verify(b.module())


# ----------------------------------------------------------------------------- in parts


def _verdict(check, m) -> str:
    try:
        check(m)
    except VerifyError as e:
        return str(e)
    return "ok"


def _in_parts(m) -> None:
    from tusk.ir.verify import verify_join, verify_part, verify_tasks

    tasks = verify_tasks(m, min_size=1)
    assert tasks is not None and len(tasks) == 3 * len(m.functions)
    verify_join(m, tasks, [verify_part(m, t) for t in reversed(tasks)][::-1])


@pytest.mark.parametrize("change", [
    lambda fn: None,
    lambda fn: fn.operands["offset"].__setitem__(0, 10**6),                 # operands
    lambda fn: fn.insts["block"].__setitem__(0, 999),                       # a broken reference: refs alone
    lambda fn: fn.operands["offset"].__setitem__(slice(None), 10**6),       # many problems: the "more" line
], ids=["good", "operand", "reference", "many"])
def test_verifying_in_parts_gives_the_whole_verdict(change):
    m = every_family_module()
    m.functions.append(tiled_exp_module().functions[0])
    m.functions[-1].name = m.functions[0].name  # and the module-level check
    change(m.functions[0])
    assert _verdict(_in_parts, m) == _verdict(verify, m)


def test_clobber_found_in_parts():
    m = _two_buffers(0, interleaved=True)
    assert "overlap while both are live" in _verdict(_in_parts, m) == _verdict(verify, m)


def test_small_modules_verify_whole():
    from tusk.ir.verify import verify_tasks

    assert verify_tasks(every_family_module()) is None


# ----------------------------------------------------------------------------- the clobber replay, in windows


def _replay_whole(fn, inst, a: int, b: int) -> bool:
    """The definition: every access of ``a`` and ``b`` in program order (reads first), byte by byte; does one
    of them read a byte it wrote after the other wrote it?"""
    from tusk.ir.enums import DTYPE_SIZE_ARRAY
    from tusk.ir.liveness import _rmw

    last, wrote = {}, {0: set(), 1: set()}
    sel = np.flatnonzero((inst.a_memloc == a) | (inst.a_memloc == b))
    sel = sel[np.argsort(inst.a_row[sel] * 2 + inst.a_write[sel], kind="stable")]
    ops, ml = fn.operands, fn.memlocs
    for k in sel.tolist():
        j, m = int(inst.a_op[k]), int(inst.a_memloc[k])
        who = 0 if m == a else 1
        size = int(DTYPE_SIZE_ARRAY[ops.get("dtype", j)])
        pitch = max(1, ml.get("pbytes", m) // size)
        elems = [int(ops.get("offset", j))]
        for step, num in fn.patterns[ops.get("pattern", j)]:
            elems = [e + i * int(step) for e in elems for i in range(int(num))]
        cells = {(ml.get("base", m) + e // pitch, ml.get("addr", m) + (e % pitch) * size + s)
                 for e in elems for s in range(size)}
        row = int(inst.a_row[k])
        reads = not inst.a_write[k] or fn.insts.get("pred", row) >= 0 or _rmw(fn, row)
        if reads and any(c in wrote[who] and last.get(c) == 1 - who for c in cells):
            return True
        if inst.a_write[k]:
            for c in cells:
                last[c] = who
            wrote[who] |= cells
    return False


def _random_pair(rng):
    """Two SBUF buffers on overlapping bytes, filled, killed and read in random slices, in random order."""
    b = Builder()
    x = b.dram("x", (8, 16), kind="ExternalInput")
    y = b.dram("y", (8, 16), kind="ExternalOutput")
    bufs = [b.sbuf("a", (8, 8), addr=0), b.sbuf("c", (8, 8), addr=int(rng.choice([0, 8, 16])))]
    for _ in range(int(rng.integers(2, 14))):
        t = bufs[int(rng.integers(2))]
        r0, c0 = int(rng.integers(0, 8)), int(rng.integers(0, 8))
        whole = rng.random() < 0.3
        nr, nc = (8, 8) if whole else (int(rng.integers(1, 9 - r0)), int(rng.integers(1, 9 - c0)))
        ap = t.ap() if whole else t.tile(r0, nr, c0, nc)
        if not whole and rng.random() < 0.3:  # every other column: no rectangle of bytes
            nc = int(rng.integers(1, (7 - c0) // 2 + 2))
            ap = t.ap(((t.pitch, nr), (2, nc)), r0 * t.pitch + c0)
        if rng.random() < 0.5:
            b.dma(ap, x.tile(0, nr, 0, nc))
        else:
            b.dma(y.tile(0, nr, 0, nc), ap)
    return b.module()


@pytest.mark.parametrize("replay", ["atoms", "bytes", "numbered bytes"])
def test_clobbers_found_in_windows_are_those_of_the_whole_replay(replay, monkeypatch):
    from tusk.ir import liveness
    from tusk.ir import verify as verify_module
    from tusk.ir.liveness import instances
    from tusk.ir.verify import _clobber

    atoms = replay == "atoms"
    monkeypatch.setattr(verify_module, "ATOMS_WHEN", -1 if atoms else 1 << 40)
    monkeypatch.setattr(liveness, "ATOM_WORK", 1 << 40 if atoms else 0)
    if replay == "numbered bytes":  # no access taken as a rectangle of the box: every one's bytes numbered
        monkeypatch.setattr(verify_module, "_rectangle", lambda *_: None)
    rng = np.random.default_rng(7)
    found = 0
    for _ in range(600):
        fn = _random_pair(rng).functions[0]
        inst = instances(fn)
        names = [fn.strings[s] for s in fn.memlocs["name"].tolist()]
        a, c = names.index("a"), names.index("c")
        want = _replay_whole(fn, inst, a, c)
        assert _clobber(fn, inst, a, c) == want
        found += want
    assert 50 < found < 550  # both verdicts are exercised
