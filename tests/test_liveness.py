"""ir.liveness: instances do not depend on how a function's operand table is laid out."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tusk.examples import bir_kernels
from tusk.ir.builder import Builder
from tusk.ir.enums import FnAttr, Mem
from tusk.ir.liveness import _groups, instances
from tusk.stages.unroll import Unroll


def _kernel():
    m, _ = bir_kernels.large_matmul(2, 3, 2)
    for fn in m.functions:
        fn.attrs |= {FnAttr.ROTATE_PSUM_AND_SB}
    out, _ = Unroll().run(m)
    return max(out.functions, key=lambda f: len(f.insts))


def _relaid(fn):
    """``fn`` with its instructions' operand blocks stored last-first and each block reversed (so an
    instruction lists its write before its reads), and the permutation (new operand row -> old)."""
    ins = fn.insts
    starts, counts = ins["ops"].astype(np.int64), ins["nops"].astype(np.int64)
    perm = np.concatenate([np.arange(s, s + c)[::-1] for s, c in zip(starts[::-1], counts[::-1])])
    out = fn.copy()
    out.operands = fn.operands.take(perm)
    new_starts = np.concatenate([[0], np.cumsum(counts[::-1])[:-1]])[::-1]
    out.insts["ops"][:] = new_starts
    return out, perm


def test_instances_are_the_same_whatever_the_operand_layout():
    fn = _kernel()
    relaid, perm = _relaid(fn)
    assert not np.array_equal(perm, np.arange(len(perm)))
    for spaces in ((Mem.SB, Mem.PSUM), (Mem.PSUM,), (Mem.SB,)):
        for groups in (False, True):
            a, b = instances(fn, spaces, groups=groups), instances(relaid, spaces, groups=groups)
            assert len(a.i_memloc) > 0
            for f in dataclasses.fields(a):
                x, y = getattr(a, f.name), getattr(b, f.name)
                if f.name == "a_op":
                    y = perm[y]  # the same operand, by its old row
                assert (x is None and y is None) or np.array_equal(x, y), (spaces, groups, f.name)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-(1 << 45), 1 << 45), min_size=1, max_size=40), st.booleans())
def test_groups_name_one_element_of_each_distinct_key(values, narrow):
    key = np.array([v % 50 - 7 if narrow else v for v in values], dtype=np.int64)
    first, back = _groups(key)
    distinct = np.unique(key)
    assert np.array_equal(key[first], distinct)  # one element a key, in ascending key order
    assert np.array_equal(distinct[back], key)  # and every element's group


def _scanned_group_starts(elems, clean, cap):
    """The definition, by a scan from every clean write (the reference for the linear passes)."""
    starts = np.zeros(len(elems), dtype=bool)
    for c in np.flatnonzero(clean).tolist():
        covered = np.zeros(cap, dtype=bool)
        for j in range(c, len(elems)):
            if not clean[j] and not covered[elems[j]].all():
                break
            covered[elems[j]] = True
            if covered.all():
                starts[c] = True
                break
    return starts


def test_group_kill_starts_match_the_scan_from_every_clean_write():
    from tusk.ir.liveness import _group_starts

    rng = np.random.default_rng(41)
    for _ in range(400):
        cap, n = int(rng.integers(1, 9)), int(rng.integers(1, 14))
        elems = [rng.choice(cap, size=int(rng.integers(0, cap + 1)), replace=bool(rng.integers(0, 2)))
                 for _ in range(n)]
        clean = rng.random(n) < 0.6
        assert np.array_equal(_group_starts(elems, clean, cap), _scanned_group_starts(elems, clean, cap))


def test_group_kill_starts_on_atoms_are_those_on_elements():
    from tusk.ir.liveness import _group_starts, atoms

    rng = np.random.default_rng(43)
    for _ in range(400):
        cap, n = int(rng.integers(1, 12)), int(rng.integers(1, 14))
        # a few distinct slices, each used by several accesses (as an unrolled loop reads a tile)
        slices = [rng.choice(cap, size=int(rng.integers(0, cap + 1)), replace=bool(rng.integers(0, 2)))
                  for _ in range(int(rng.integers(1, 5)))]
        elems = [slices[int(rng.integers(len(slices)))] for _ in range(n)]
        clean = rng.random(n) < 0.6
        units, n_units = atoms(slices, cap)
        assert n_units <= cap
        on_atoms = _group_starts([units[next(k for k, s in enumerate(slices) if s is e)] for e in elems], clean,
                                 n_units)
        assert np.array_equal(on_atoms, _scanned_group_starts(elems, clean, cap))


def test_an_access_too_large_to_list_is_an_input_error_not_a_numpy_failure():
    """The live-overlap check lists an access's elements; a mutated KLR file's pattern of 2^30 x 4 elements made
    numpy refuse the array ("array is too big") out of the verifier."""
    from tusk.ir.errors import InputError
    from tusk.ir.liveness import pattern_elements

    b = Builder()
    t = b.sbuf("t", (4, 8), "float32", addr=0)
    b.copy(t.ap([[8, 4], [0, 1 << 30]]), t.ap())
    fn = b.module().functions[0]
    patterns = [k for k in range(len(fn.patterns.items)) if any(int(n) == 1 << 30 for _, n in fn.patterns[k])]
    with pytest.raises(InputError, match=r"an access pattern \[\[8, 4\], \[0, 1073741824\]\] of 4,294,967,296 elements"):
        pattern_elements(fn, patterns[0], 0)
    assert len(pattern_elements(fn, next(k for k in range(len(fn.patterns.items)) if k != patterns[0]), 0)) == 32


def test_group_kills_of_a_tile_larger_than_any_memory_are_not_searched():
    """A changed KLR file's SBUF tile of 2^38 bytes a partition made the group-kill search allocate one cell per
    element (numpy MemoryError, 512 GiB); such a tile gets no group kill (the safe answer) at once."""
    b = Builder()
    x = b.dram("x", (128, 1 << 29), "float32", kind="ExternalInput")
    t = b.sbuf("t", (128, 1 << 29), "float32", addr=0)
    for _ in range(2):
        b.dma(t.ap([[1 << 29, 128], [1, 8]]), x.ap([[1 << 29, 128], [1, 8]]))
    inst = instances(b.module().functions[0], groups=True)
    assert inst is not None
