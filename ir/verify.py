"""The invariants every pass must keep.

``verify(module)`` raises a :class:`~ir.errors.VerifyError` listing every
broken invariant (up to a limit), naming the function and instruction.
The checks are vectorised over the columns so that a 25M-instruction
function verifies in seconds:

* rows are in program preorder, blocks and loops are well formed, loop
  bounds are sane;
* every reference (memory location, register, pattern, pool value, block)
  points at an existing row;
* every operand stays inside its memory location (physical offsets exactly,
  symbolic ones over the iterations of the enclosing loops where the
  instruction's and its loops' predicates hold), block indices stay inside
  their block tensor;
* allocated memory locations fit the target's SBUF/PSUM geometry, and two
  that overlap are never live at the same time (instances of
  :mod:`ir.liveness`: from the write that starts a value to its last read);
* dependencies join existing instructions in program order;
* AddressRotationScope is 0, 1 or 2;
* block, memory location, set and register names are unique (instruction
  names are labels: they may repeat, as in real dumps, or be absent).
"""

from __future__ import annotations

import math
from typing import Callable, Iterable

import numpy as np

from tusk.ir import enums
from tusk.ir.arch import PARTITIONS, PSUM_BANK_BYTES, get_arch
from tusk.ir.columns import one_of
from tusk.ir.enums import DTYPE_SIZE_ARRAY, LOOP_OPCODES, OPCODE_NAMES, Kind, Mem, Op
from tusk.ir.errors import InputError, TuskError, VerifyError
from tusk.ir.expr import AffineIdx
from tusk.ir.module import Function, Module
from tusk.ir.verify_isa import check_isa_shapes

MAX_REPORTED = 20


def verify(module: Module) -> None:
    arch = get_arch(module.arch)
    _raise([f"function {fn.name}: {p}" for fn in module.functions for p in verify_function(fn, arch)],
           module)


def verify_function(fn: Function, arch=None) -> list[str]:
    return _in_order(_run_checks(fn, arch or get_arch(None), CHECKS))


# ---------------------------------------------------------------- verifying in parts
# verify is no pass: the build runs it on a step's output.  For a big module the checks of one function
# run as independent tasks (the liveness check, the rest); verify_join gives verify's exact verdict.

CHECKS = ("structure", "names", "memlocs", "operands", "live_overlap", "deps", "kernel_calls", "isa_shapes")
SPLIT_MIN = 200_000  # instructions of a function before its checks are split
Task = tuple[int, tuple[str, ...]]  # (function index, checks)


def verify_tasks(module: Module, min_size: int | None = None) -> list[Task] | None:
    """Independent pieces of ``verify(module)`` (JSON-able), or None to verify it whole (no function
    reaches ``min_size`` instructions, default :data:`SPLIT_MIN`)."""
    min_size = SPLIT_MIN if min_size is None else min_size
    if not any(len(fn.insts) >= min_size for fn in module.functions):
        return None
    # three pieces of a big function, of about the size of a write part each: the operand check (half of
    # the checks' time on large_matmul's 1.2M rows: 0.19 of 0.42 s), the live-overlap check and the rest (with
    # the operand check in it, the rest held the last write part back by ~0.5 s on two workers)
    rest = tuple(c for c in CHECKS if c not in ("live_overlap", "operands"))
    big = [k for k, fn in enumerate(module.functions) if len(fn.insts) >= min_size]
    # the biggest pieces first (the build runs them in this order)
    return [(k, c) for c in (("operands",), rest, ("live_overlap",)) for k in big] + \
        [(k, CHECKS) for k in range(len(module.functions)) if k not in big]


def verify_part(module: Module, task: Task) -> dict[str, list[str]]:
    """The problems each check of ``task`` finds (``refs`` alone when a reference is broken)."""
    k, checks = task
    return _run_checks(module.functions[int(k)], get_arch(module.arch), tuple(checks))


def verify_join(module: Module | list[str], tasks: list[Task], results: list[dict[str, list[str]]]) -> None:
    """Raise what ``verify(module)`` raises, from the results of :func:`verify_tasks`' tasks (``module`` may be
    just its functions' names: the build joins on a client that does not hold the module)."""
    names = [fn.name for fn in module.functions] if isinstance(module, Module) else list(module)
    per_fn: dict[int, dict[str, list[str]]] = {}
    for (k, _), got in zip(tasks, results):
        per_fn.setdefault(int(k), {}).update(got)
    _raise([f"function {name}: {p}" for k, name in enumerate(names) for p in _in_order(per_fn.get(k, {}))], names)


def _run_checks(fn: Function, arch, checks: tuple[str, ...]) -> dict[str, list[str]]:
    refs = _check_refs(fn)
    if refs:
        return {"refs": refs}  # later checks index with these references
    run = {"structure": _check_structure, "names": _check_names, "memlocs": lambda f: _check_memlocs(f, arch),
           "operands": _check_operands, "live_overlap": _check_live_overlap, "deps": _check_deps,
           "kernel_calls": _check_kernel_calls, "isa_shapes": lambda f: check_isa_shapes(f, MAX_REPORTED)}
    return {c: run[c](fn) for c in checks}


def _in_order(got: dict[str, list[str]]) -> list[str]:
    if got.get("refs"):
        return list(got["refs"])
    return [p for c in CHECKS for p in got.get(c, ())]


def _raise(problems: list[str], module: Module | list[str]) -> None:
    names = [f.name for f in module.functions] if isinstance(module, Module) else module
    if len(set(names)) != len(names):
        problems = ["function names are not unique", *problems]
    if problems:
        shown = problems[:MAX_REPORTED]
        more = f"\n  ... and {len(problems) - MAX_REPORTED} more" if len(problems) > MAX_REPORTED else ""
        raise VerifyError("IR verification failed:\n  " + "\n  ".join(shown) + more)


def _first(mask: np.ndarray) -> Iterable[int]:
    return np.nonzero(mask)[0][:MAX_REPORTED].tolist()


def _check_refs(fn: Function) -> list[str]:
    out = []
    ins, ops, ml = fn.insts, fn.operands, fn.memlocs
    n_ops = len(ops)
    starts, counts = ins["ops"], ins["nops"].astype(np.int64)
    if len(ins):
        if (starts < 0).any() or (starts + counts > n_ops).any():
            out.append("an instruction's operand range lies outside the operand table")
        if (ins["opcode"] >= len(OPCODE_NAMES)).any():
            out.append("unknown opcode ordinal")
        bad = (ins["block"] < 0) | (ins["block"] >= len(fn.blocks))
        for i in _first(bad):
            out.append(f"instruction row {i} is in block {ins['block'][i]}, which does not exist")
        for col, limit in (("attrs", len(fn.values)), ("pred", len(fn.values))):
            for i in _first(ins[col] >= limit):
                out.append(f"instruction row {i}: {col} id out of range")
    kinds = ops["kind"]
    ap = np.isin(kinds, list(enums.AP_KINDS))
    for j in _first(ap & ((ops["memloc"] < 0) | (ops["memloc"] >= len(ml)))):
        out.append(f"operand row {j} refers to memory location {ops['memloc'][j]}, which does not exist")
    for j in _first(ap & ((ops["pattern"] < 0) | (ops["pattern"] >= len(fn.patterns)))):
        out.append(f"operand row {j} has no valid access pattern")
    # a register_ap may name no register (real dumps: the address register is set by the program)
    reg = (kinds == Kind.REGISTER) | ((kinds == Kind.REGISTER_AP) & (ops["aux"] >= 0))
    for j in _first(reg & ((ops["aux"] < 0) | (ops["aux"] >= len(fn.regs)))):
        out.append(f"operand row {j} refers to a register that does not exist")
    valued = one_of(kinds, (Kind.SYMBOLIC, Kind.IMM, Kind.IMM_ARRAY, Kind.SYMBOLIC_IMM, Kind.SYMBOLIC_DIMS))
    for j in _first(valued & ((ops["aux"] < 0) | (ops["aux"] >= len(fn.values)))):
        out.append(f"operand row {j} has no value")
    for j in _first(ops["dtype"] >= len(DTYPE_SIZE_ARRAY)):
        out.append(f"operand row {j} has an unknown dtype")
    for m in _first((ml["set"] < 0) | (ml["set"] >= len(fn.sets))):
        out.append(f"memory location row {m} belongs to no set")
    for d in ("deps", "carried"):
        t = getattr(fn, d)
        bad = (t["src"] < 0) | (t["src"] >= len(ins)) | (t["dst"] < 0) | (t["dst"] >= len(ins))
        for e in _first(bad):
            out.append(f"{d} edge {e} joins instructions that do not exist")
    parents = fn.blocks["parent"]
    for b in _first(parents >= len(ins)):
        out.append(f"block row {b} has a parent instruction that does not exist")
    return out


def _check_structure(fn: Function) -> list[str]:
    out = []
    ins = fn.insts
    opcodes = ins["opcode"]
    parents = fn.blocks["parent"]
    for b in np.nonzero(parents >= 0)[0].tolist():
        p = int(parents[b])
        if int(opcodes[p]) not in LOOP_OPCODES:
            out.append(f"block {fn.strings[fn.blocks.get('name', b)]} hangs under {fn.inst_name(p)}, "
                       f"which is not a loop")
    has_body = np.zeros(len(ins), dtype=bool)
    has_body[parents[parents >= 0]] = True
    for i in _first(np.isin(opcodes, list(LOOP_OPCODES)) & ~has_body):
        out.append(f"loop {fn.inst_name(i)} has no body block")
    # Program preorder: walking blocks from the top, descending into loop bodies,
    # must visit rows 0, 1, 2, ... in order.
    rows = fn.block_rows()
    children: dict[int, list[int]] = {}
    for b, p in enumerate(parents.tolist()):
        if p >= 0:
            children.setdefault(p, []).append(b)
    order: list[np.ndarray] = []

    def walk(blocks: list[int]) -> None:
        for b in blocks:
            r = rows[b]
            cut = 0
            for k, i in enumerate(r.tolist()):
                if i in children:
                    order.append(r[cut:k + 1])
                    cut = k + 1
                    walk(children[i])
            order.append(r[cut:])

    walk(fn.top_blocks())
    flat = np.concatenate(order) if order else np.zeros(0, dtype=np.int64)
    if len(flat) != len(ins) or not np.array_equal(flat, np.arange(len(ins))):
        out.append("instructions are not stored in program preorder")
    for i in np.nonzero(opcodes == Op.Loop)[0].tolist():
        try:
            ax = fn.loop_axis(i)
            if not all(isinstance(v, int) for v in (ax.lb, ax.ub, ax.stride)):
                raise ValueError("bounds must be integers")
            if ax.stride == 0:
                raise ValueError("stride is 0")
        except Exception as e:  # noqa: BLE001 - any malformed axis is reported the same way
            out.append(f"loop {fn.inst_name(i)} has an invalid LoopAxis ({e})")
    return out


def _check_names(fn: Function) -> list[str]:
    out = []
    bnames = fn.blocks["name"]
    if len(np.unique(bnames, return_counts=True)[0]) != len(bnames):
        out.append("block names are not unique")
    for t, what in ((fn.memlocs, "memory location"), (fn.sets, "memory location set"), (fn.regs, "register")):
        col = t["name"]
        if len(np.unique(col, return_counts=True)[0]) != len(col):
            u, c = np.unique(col, return_counts=True)
            out.append(f"{what} name {fn.strings[int(u[c > 1][0])]!r} is not unique")
    return out


def _check_memlocs(fn: Function, arch) -> list[str]:
    out = []
    ml = fn.memlocs
    alloc = ml["addr"] >= 0
    mtype, base, nparts = ml["mtype"], ml["base"], ml["nparts"]
    end = ml["addr"] + ml["pbytes"]
    onchip = one_of(mtype, (Mem.SB, Mem.PSUM))
    for m in _first(onchip & ((base < 0) | (base + nparts > PARTITIONS) | (nparts <= 0))):
        out.append(f"memory location {fn.strings[ml.get('name', m)]} spans partitions "
                   f"[{base[m]}, {base[m] + nparts[m]}) outside 0..{PARTITIONS}")
    for m in _first(alloc & (mtype == Mem.SB) & (end > arch.sb_bytes_per_partition)):
        out.append(f"SB memory location {fn.strings[ml.get('name', m)]} ends at byte {end[m]}, past the "
                   f"{arch.sb_bytes_per_partition} bytes of a partition")
    # unplaced ones too: no address can make room for more bytes than a partition has
    for word, space, cap in (("SB", Mem.SB, arch.sb_bytes_per_partition),
                             ("PSUM", Mem.PSUM, arch.psum_bytes_per_partition)):
        for m in _first(~alloc & (mtype == space) & (ml["pbytes"] > cap)):
            out.append(f"{word} memory location {fn.strings[ml.get('name', m)]} holds {ml['pbytes'][m]} "
                       f"bytes per partition, more than the {cap} bytes of a partition")
    psum = alloc & (mtype == Mem.PSUM)
    for m in _first(psum & (end > arch.psum_bytes_per_partition)):
        out.append(f"PSUM memory location {fn.strings[ml.get('name', m)]} ends at byte {end[m]}, past the "
                   f"{arch.psum_bytes_per_partition}-byte PSUM window")
    bank = ml["bank"]
    for m in _first(psum & (bank >= 0) & (bank != ml["addr"] // PSUM_BANK_BYTES)):
        out.append(f"PSUM memory location {fn.strings[ml.get('name', m)]} says bank {bank[m]} but its address "
                   f"{ml['addr'][m]} is in bank {ml['addr'][m] // PSUM_BANK_BYTES}")
    for m in _first(ml["pbytes"] < 0):
        out.append(f"memory location {fn.strings[ml.get('name', m)]} has a negative size")
    return out


EXTENT_LIMIT = 1 << 62


def _finite(x) -> bool:
    """Not an infinite bound (np.isfinite refuses a Python int past int64, which a file's coefficients make)."""
    return not isinstance(x, float) or math.isfinite(x)


def _pattern_extents(fn: Function) -> tuple[np.ndarray, np.ndarray]:
    """Per pattern id: lowest and highest relative element index it touches."""
    lo = np.zeros(len(fn.patterns), dtype=np.int64)
    hi = np.zeros(len(fn.patterns), dtype=np.int64)
    for p, pairs in enumerate(fn.patterns.items):
        spans = [int(step) * (int(num) - 1) for step, num in pairs if num > 0]
        # summed as Python ints, then held to +-2^62: an extent past that is outside every location
        # anyway, and an offset added to it must stay inside int64 (a file's [2^40, 2^40] pairs overflowed)
        lo[p] = max(sum(x for x in spans if x < 0), -EXTENT_LIMIT)
        hi[p] = min(sum(x for x in spans if x >= 0), EXTENT_LIMIT)
    return lo, hi


def _gather_extents(fn: Function, dyn: np.ndarray, pat: np.ndarray, lo_p: np.ndarray,
                    hi_p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each operand's pattern extents; a gather's indirect dim left out: its rows are index values read at
    run time (the interpreter checks those), not ``i * step`` (a gather of more rows than the table holds)."""
    lo, hi = lo_p[pat].copy(), hi_p[pat].copy()
    for k in np.nonzero(dyn >= 0)[0].tolist():
        d = fn.values[int(dyn[k])]
        if getattr(d, "indirect_dim_max_index", 0) <= 1:
            continue  # a scalar offset: the static pattern is walked as written
        pairs = fn.patterns.items[int(pat[k])]
        if d.indirect_dim < len(pairs):
            step, num = (int(x) for x in pairs[d.indirect_dim])
            span = step * (num - 1) if num > 0 else 0
            lo[k] -= min(span, 0)
            hi[k] -= max(span, 0)
    return lo, hi


def _capacity(fn: Function, ops_memloc: np.ndarray, ops_dtype: np.ndarray) -> np.ndarray:
    """Elements of the operand's dtype that fit in its memory location."""
    ml = fn.memlocs
    size = DTYPE_SIZE_ARRAY[ops_dtype]
    pbytes, nparts, mtype = ml["pbytes"][ops_memloc], ml["nparts"][ops_memloc], ml["mtype"][ops_memloc]
    per_part = pbytes // size
    return np.where(one_of(mtype, (Mem.SB, Mem.PSUM)), per_part * nparts, per_part)


OPERAND_CHUNK = 1 << 18  # operands checked at a time: each temporary stays a few MB and is reused


def _chunks(n: int) -> Iterable[tuple[int, int]]:
    """``[lo, hi)`` ranges of ``n`` operands, :data:`OPERAND_CHUNK` at a time.  A whole-column pass over 2.5M
    operands made ~350 MB of temporaries; a worker meeting them for the first time page-faulted every one of
    them (large_matmul's verify on a second worker: 0.55 s of system time, 81k faults, for 0.18 s of work)."""
    return ((lo, min(lo + OPERAND_CHUNK, n)) for lo in range(0, n, OPERAND_CHUNK))


def _owners(fn: Function) -> Callable[[int], int]:
    """Operand index -> the row that owns it (made only when a problem is reported)."""
    ends: list[np.ndarray] = []

    def owner(j: int) -> int:
        if not ends:
            ends.append(np.cumsum(fn.insts["nops"].astype(np.int64)))
        return int(np.searchsorted(ends[0], j, side="right"))
    return owner


def _check_operands(fn: Function) -> list[str]:
    out: list[str] = []
    ops = fn.operands
    if not len(ops):
        return out
    lo_p, hi_p = _pattern_extents(fn)
    owner = _owners(fn)
    for a, b in _chunks(len(ops)):
        if len(out) >= MAX_REPORTED:
            break
        phys = a + np.flatnonzero(ops["kind"][a:b] == Kind.PHYSICAL)
        if not len(phys):
            continue
        m, dt = ops["memloc"][phys], ops["dtype"][phys]
        pat, off = ops["pattern"][phys], ops["offset"][phys]
        cap = _capacity(fn, m, dt)
        lo_k, hi_k = _gather_extents(fn, ops["dyn"][phys], pat, lo_p, hi_p)
        bad = (off + lo_k < 0) | (off + hi_k >= cap)
        for k in np.flatnonzero(bad)[:MAX_REPORTED - len(out)].tolist():
            out.append(f"instruction {fn.inst_name(owner(int(phys[k])))}: operand touches elements "
                       f"[{off[k] + lo_k[k]}, {off[k] + hi_k[k]}] outside memory location "
                       f"{fn.strings[fn.memlocs.get('name', int(m[k]))]} ({cap[k]} elements)")
    out += _check_partition_steps(fn, owner, hi_p - lo_p)
    sym = np.nonzero(ops["kind"] == Kind.SYMBOLIC)[0]
    if len(sym):
        ranges_of = _loop_ranges(fn)
        for j in sym.tolist():
            i = owner(j)
            ranges, values = ranges_of(i)
            preds = _guards(fn, i)
            sa = fn.values[int(ops["aux"][j])]
            m = int(ops["memloc"][j])
            p = int(ops["pattern"][j])
            lo, hi = _guarded_bounds(sa.offset, ranges, values, preds)
            cap = int(_capacity(fn, np.array([m]), np.array([ops["dtype"][j]]))[0])
            name = fn.strings[fn.memlocs.get("name", m)]
            if lo is not None and (lo + int(lo_p[p]) < 0 or hi + int(hi_p[p]) >= cap):  # Python ints: cannot wrap
                if _finite(lo) and _finite(hi):
                    out.append(f"instruction {fn.inst_name(i)}: symbolic operand reaches elements "
                               f"[{lo + int(lo_p[p])}, {hi + int(hi_p[p])}] outside memory location {name} ({cap} elements)")
            if sa.block is not None:
                s = fn.memlocs.get("set", m)
                nb = fn.sets.get("n_blocks", s)
                blo, bhi = _guarded_bounds(sa.block, ranges, values, preds)
                if blo is not None and _finite(blo) and _finite(bhi) and (blo < 0 or bhi >= nb):
                    out.append(f"instruction {fn.inst_name(i)}: block index {sa.block!r} ranges over "
                               f"[{blo}, {bhi}] but tensor {fn.strings[fn.sets.get('name', s)]} has {nb} blocks")
                    continue
            if len(out) >= MAX_REPORTED:
                break
    return out


def _check_partition_steps(fn: Function, owner: Callable[[int], int], span: np.ndarray) -> list[str]:
    """An SB/PSUM operand that reaches past one partition row must step whole partitions.

    Its elements map to (partition, byte) through the location's pitch (``dims``' bytes per partition), and
    the backend writes the partition pair as ``[pitch * k, nparts]``: an operand whose pattern spans a row or
    more yet has no pair stepping a multiple of the pitch was written for other ``dims``.  It smears over
    partition rows onto bytes its neighbours hold (issue 22: ``dims`` enlarged under unchanged patterns),
    which only the unrolled kernel's live-overlap check would otherwise find, after the costliest passes.
    """
    ops, ml = fn.operands, fn.memlocs
    # whether a pattern steps whole partitions depends on (pattern, pitch) alone: a 1.2M-row kernel has a
    # handful of those among its 2M operands, so each is judged once (per operand, 2.3 s of every verify)
    judged: dict[int, bool] = {}
    out: list[str] = []
    seen: set[int] = set()  # one line per location: every access of a resized location says the same
    for a, b in _chunks(len(ops)):
        m = ops["memloc"][a:b].astype(np.int64)
        pat = ops["pattern"][a:b].astype(np.int64)
        on = one_of(ops["kind"][a:b], (Kind.PHYSICAL, Kind.SYMBOLIC)) & (m >= 0) & (pat >= 0)
        on[on] = one_of(ml["mtype"][m[on]], (Mem.SB, Mem.PSUM)) & (ml["nparts"][m[on]] > 1)
        js = np.flatnonzero(on)
        pitch = ml["pbytes"][m[js]] // DTYPE_SIZE_ARRAY[ops["dtype"][a + js]]
        wide = (pitch > 0) & (span[pat[js]] >= pitch)
        js, pitch = js[wide], pitch[wide]
        if not len(js):
            continue
        key = pat[js] << 32 | pitch.astype(np.int64)
        distinct, back = np.unique(key, return_inverse=True)
        keys = distinct.tolist()
        for q in keys:
            if q not in judged:
                p = q & 0xFFFFFFFF
                judged[q] = any(int(num) > 1 and int(step) != 0 and int(step) % p == 0
                                for step, num in fn.patterns[q >> 32])
        steps = np.array([judged[q] for q in keys], dtype=bool)
        bad = ~steps[back.reshape(-1)]
        for j, p in zip(js[bad].tolist(), pitch[bad].tolist()):
            k = int(m[j])
            if k in seen:
                continue
            seen.add(k)
            pairs = fn.patterns[int(pat[j])]
            out.append(f"instruction {fn.inst_name(owner(a + j))}: operand pattern {[list(x) for x in pairs]} "
                       f"spans more than a partition of memory location {fn.strings[ml.get('name', k)]} "
                       f"({p} elements per partition, dims [{ml['nparts'][k]}, {ml['pbytes'][k]}]) but no pair "
                       "steps whole partitions")
            if len(out) >= MAX_REPORTED:
                return out
    return out


ENUMERATE_LIMIT = 1 << 16  # iteration points evaluated exactly when predicates guard an operand


def _guards(fn: Function, i: int) -> tuple:
    """The predicates that must hold for row ``i`` to run: its own and its enclosing loops'."""
    preds: list = []
    parents, blocks = fn.blocks["parent"], fn.insts["block"]
    row = i
    while row >= 0:
        pid = int(fn.insts.get("pred", row))
        if pid >= 0:
            preds.extend(fn.values[pid] or ())
        row = int(parents[int(blocks[row])])
    return tuple(preds)


def _guarded_bounds(expr, ranges: dict, values: dict, preds: tuple):
    """[lo, hi] of ``expr`` over the iterations where every predicate holds (None, None: it never runs).

    Without predicates this is interval arithmetic over the loop ranges.  With
    them, the iterations are enumerated exactly when there are few enough
    (and everything is a function of loop indices); otherwise single-axis
    affine predicates (``k * axis + c rel 0``) narrow that axis's range.
    """
    if not preds:
        return expr.bounds(ranges)
    axes = sorted(set(expr.free_axes()).union(*(p.free_axes() for p in preds)))
    if all(a in values for a in axes):
        count = 1
        for a in axes:
            count *= len(values[a])
        if count <= ENUMERATE_LIMIT:
            grids = np.meshgrid(*[np.asarray(values[a], dtype=np.int64) for a in axes], indexing="ij") if axes else []
            env = {a: g.reshape(-1) for a, g in zip(axes, grids)}
            try:
                mask = np.ones(max(count, 1), dtype=bool)
                for p in preds:
                    mask &= np.broadcast_to(np.asarray(p.eval_np(env), dtype=bool), mask.shape)
                vals = np.broadcast_to(np.asarray(expr.eval_np(env), dtype=np.int64), mask.shape)
            except TuskError:
                vals = None  # registers or gather arguments: not a function of the loop indices
            if vals is not None:
                if not mask.any():
                    return None, None
                return int(vals[mask].min()), int(vals[mask].max())
    narrowed = dict(ranges)
    for p in preds:
        axis_bound = _single_axis_bound(p)
        if axis_bound is None or axis_bound[0] not in narrowed:
            continue
        a, lo, hi = axis_bound
        alo, ahi = narrowed[a]
        alo, ahi = max(alo, lo), min(ahi, hi)
        if alo > ahi:
            return None, None
        narrowed[a] = (alo, ahi)
    return expr.bounds(narrowed)


def _single_axis_bound(p):
    """(axis, lo, hi) implied by a predicate ``k * axis + c rel 0``, or None."""
    e = p.expr
    if len(e.terms) != 1 or not isinstance(e.terms[0][0], AffineIdx):
        return None
    atom, k = e.terms[0]
    c = e.c
    inf = float("inf")
    if k == 0:
        return None
    # k * x + c rel 0  <=>  x rel' -c / k
    t = -c / k
    rel = p.rel if k > 0 else {"ge": "le", "gt": "lt", "le": "ge", "lt": "gt"}.get(p.rel, p.rel)
    if rel == "ge":
        return atom.axis, math.ceil(t), inf
    if rel == "gt":
        return atom.axis, math.floor(t) + 1, inf
    if rel == "le":
        return atom.axis, -inf, math.floor(t)
    if rel == "lt":
        return atom.axis, -inf, math.ceil(t) - 1
    if rel == "eq" and float(t).is_integer():
        return atom.axis, int(t), int(t)
    return None


def _loop_ranges(fn: Function):
    """instruction row -> ({axis: (lo, hi)}, {axis: range of values}) of the static loops around it."""
    parents = fn.blocks["parent"]
    blocks = fn.insts["block"]
    cache: dict[int, tuple[dict, dict]] = {}

    def of_block(b: int) -> tuple[dict, dict]:
        if b in cache:
            return cache[b]
        p = int(parents[b])
        if p < 0:
            r: dict = {}
            v: dict = {}
        else:
            r0, v0 = of_block(int(blocks[p]))
            r, v = dict(r0), dict(v0)
            try:
                ax = fn.loop_axis(p)
                if all(isinstance(x, int) for x in (ax.lb, ax.ub, ax.stride)) and ax.trip_count > 0:
                    vals = ax.values()
                    r[ax.name] = (min(vals[0], vals[-1]), max(vals[0], vals[-1]))
                    v[ax.name] = vals
            except Exception:  # noqa: BLE001 - reported by the structure check
                pass
        cache[b] = (r, v)
        return r, v

    return lambda i: of_block(int(blocks[i]))


def live_overlap_problems(fn: Function) -> list[str]:
    """The verifier's check that no two memory locations sharing bytes are live at once, alone (a pass that
    reorders a function asks it before keeping the new order)."""
    return _check_live_overlap(fn)


def _check_live_overlap(fn: Function) -> list[str]:
    """Two allocated SB/PSUM memory locations that overlap must not be live at the same time.

    Checked on the simple memory locations of :func:`ir.liveness.instances`
    (straight-line, physically addressed); an instance is live from its first
    write to its last read, and two instances that only meet at one
    instruction (it reads one and writes the other) are not both live.  An
    instance that reads bytes before writing them reads them through an alias
    (a view of another tensor) and is not checked: aliasing on purpose is
    allowed, clobbering a live value is not.

    An instance covers its whole memory location, but a buffer filled and
    read slice by slice (a loop that loads ``t[k]`` and reads it, unrolled)
    holds values in only part of it at a time.  So a pair found live together
    is reported only when a byte of their overlap is really clobbered: one of
    them reads a byte it wrote earlier after the other wrote it in between
    (:func:`_clobber`, exact per byte, in program order).
    """
    from tusk.ir.liveness import instances, overlapping_pairs

    if not _may_overlap(fn):
        return []
    inst = instances(fn)
    if not len(inst):
        return []
    # an instance that reads what was there before it (live-in) reads through an alias on purpose (a view
    # of another tensor's bytes): only self-contained instances, from their first write on, are checked
    start = inst.i_first_write
    live = (inst.i_last_read >= 0) & ~inst.i_live_in & (start >= 0) & (start <= inst.i_last_read)
    # the live instances of each memory location, in instance order (one stable sort, no Python loop)
    ks = np.flatnonzero(live)
    mem = inst.i_memloc[ks].astype(np.int64)
    by = np.argsort(mem, kind="stable")
    ks, mem = ks[by], mem[by]
    used, first = np.unique(mem, return_index=True)
    bounds = dict(zip(used.tolist(), zip(first.tolist(), [*first[1:].tolist(), len(mem)])))
    starts, ends = start[ks].astype(np.int64), inst.i_last_read[ks].astype(np.int64)
    by_memloc = {m: (starts[a:b], ends[a:b]) for m, (a, b) in bounds.items()}
    out = []
    name = lambda m: fn.strings[fn.memlocs.get("name", m)]  # noqa: E731
    elements: dict[tuple[int, ...], tuple] = {}  # _slice_elements and _rectangle, for every pair
    for a, b in overlapping_pairs(fn, used.astype(np.int64)):
        sa, ea = by_memloc[a]
        sb, eb = by_memloc[b]
        order = np.argsort(sb, kind="stable")
        sb, eb = sb[order], np.maximum.accumulate(eb[order])
        k = np.searchsorted(sb, ea, side="left") - 1   # instances of b that start before a's instance ends
        hit = (k >= 0) & (eb[np.maximum(k, 0)] > sa)
        if hit.any() and _clobber(fn, inst, a, b, elements):
            x = int(np.flatnonzero(hit)[0])
            out.append(f"memory locations {name(a)} and {name(b)} overlap while both are live "
                       f"({name(a)} from {fn.inst_name(int(sa[x]))} to {fn.inst_name(int(ea[x]))})")
        if len(out) >= MAX_REPORTED:
            break
    return out


def _may_overlap(fn: Function) -> bool:
    """Do two accessed SB/PSUM memory locations with addresses share bytes?  The locations the check looks
    at are among these: when none do, it has nothing to look at, and the function's instances (0.15-0.5 s on
    a 1.2M-row kernel, whose rotated rings share no bytes) are not needed."""
    from tusk.ir.liveness import overlapping_pairs

    ml, memloc = fn.memlocs, fn.operands["memloc"]
    accessed = np.zeros(len(ml), dtype=bool)
    accessed[memloc[memloc >= 0]] = True
    candidates = np.flatnonzero(accessed & one_of(ml["mtype"], (Mem.SB, Mem.PSUM)) & (ml["addr"] >= 0))
    return bool(overlapping_pairs(fn, candidates))


ATOMS_WHEN = 4  # bytes replayed per (cell x slice) of finding atoms above which the replay runs on atoms


def _clobber(fn: Function, inst, a: int, b: int, elements: dict | None = None) -> bool:
    """Does ``a`` or ``b`` read a byte of their overlap that it wrote, after the other one wrote it?

    Replayed only where that can happen (:func:`_touching_windows`): each window starts from a clean slate,
    and a clobber found in one is one of the whole function (every write of either between the two events
    is in it).  And replayed on atoms, not bytes (:func:`~tusk.ir.liveness.atoms`): bytes that the same accesses touch have
    the same history.  The whole function, replayed byte by byte for each pair found live together, was 70
    of the 118 s a 123k-instruction attention kernel took to build (two pairs, 25k accesses; 74 distinct
    slices).  On atoms only where replaying bytes would cost more than finding them: a GQA flash attention of
    7k instructions had 12.7k pairs to replay, each over a few small slices.  ``elements`` keeps each slice's
    elements between the calls of one check (a location is in many pairs)."""
    from tusk.ir.liveness import _rmw, atoms, boxes

    p0, p1, b0, b1 = boxes(fn, np.array([a, b], dtype=np.int64))
    box = (int(p0.max()), int(p1.min()), int(b0.max()), int(b1.min()))
    if box[1] <= box[0] or box[3] <= box[2]:
        return False
    span_lo, span_hi = _touching_windows(fn, inst, a, b)
    if not len(span_lo):
        return False
    sel = np.concatenate([np.arange(*_access_slice(inst, m)) for m in (a, b)])
    rows = inst.a_row[sel]
    span = np.searchsorted(span_lo, rows, side="right") - 1
    inside = (span >= 0) & (rows <= span_hi[np.maximum(span, 0)])
    sel, span = sel[inside], span[inside]
    order = np.argsort(inst.a_row[sel] * 2 + inst.a_write[sel], kind="stable")  # program order, reads first
    sel, span = sel[order], span[order]
    ops = fn.operands
    j = inst.a_op[sel]
    key = np.stack([inst.a_memloc[sel], ops["dtype"][j], ops["pattern"][j], ops["offset"][j]], axis=1).astype(np.int64)
    slices, of_access = np.unique(key, axis=0, return_inverse=True)
    of_access = of_access.reshape(-1)
    elements = {} if elements is None else elements
    cells = [_overlap_cells(fn, tuple(map(int, k)), box, elements) for k in slices]
    rows, width = box[1] - box[0], box[3] - box[2]
    n_cells = rows * width
    replayed = int(np.bincount(of_access, minlength=len(cells)) @ np.array([_cell_count(c) for c in cells],
                                                                            dtype=np.int64))
    if replayed > ATOMS_WHEN * (len(cells) + 8) * n_cells:
        units, n_units = atoms([_numbered(c, width) for c in cells], n_cells)
        shape: tuple[int, ...] = (n_units,)
    else:  # bytes: a rectangle of the box is a view of the replay's arrays (no gather), other slices numbered
        units, shape = cells, (rows, width)
    last = np.full(shape, -1, dtype=np.int8)          # 0: a wrote it last, 1: b did
    wrote = np.zeros((2, *shape), dtype=bool)         # ever written by a / by b (in this window)
    flat = (last.reshape(-1), wrote[0].reshape(-1), wrote[1].reshape(-1))  # views, for numbered cells
    whole = (last, wrote[0], wrote[1])
    window = -1
    for k, w, s in zip(sel.tolist(), span.tolist(), of_access.tolist()):
        if w != window:
            window = w
            last.fill(-1)
            wrote.fill(False)
        touched = units[s]
        if not _cell_count(touched):
            continue
        at_last, *at_wrote = whole if isinstance(touched, tuple) else flat
        who = 0 if int(inst.a_memloc[k]) == a else 1
        row = int(inst.a_row[k])
        reads = not inst.a_write[k] or fn.insts.get("pred", row) >= 0 or _rmw(fn, row)
        if reads and (at_wrote[who][touched] & (at_last[touched] == 1 - who)).any():
            return True
        if inst.a_write[k]:
            at_last[touched] = who
            at_wrote[who][touched] = True
    return False


def _cell_count(cells: np.ndarray | tuple[slice, slice]) -> int:
    """How many bytes of the box a slice touches (:func:`_overlap_cells`)."""
    if isinstance(cells, tuple):
        return (cells[0].stop - cells[0].start) * (cells[1].stop - cells[1].start)
    return len(cells)


def _numbered(cells: np.ndarray | tuple[slice, slice], width: int) -> np.ndarray:
    """The bytes of the box a slice touches, numbered row by row."""
    if not isinstance(cells, tuple):
        return cells
    rows, cols = cells
    return np.add.outer(np.arange(rows.start, rows.stop, dtype=np.int64) * width,
                        np.arange(cols.start, cols.stop, dtype=np.int64)).reshape(-1)


def _overlap_cells(fn: Function, key: tuple[int, ...], box: tuple, elements: dict) -> np.ndarray | tuple[slice, slice]:
    """The bytes of ``box`` (partitions ``[p0, p1)`` x bytes ``[b0, b1)``) an access of ``key`` = (memory
    location, data type, pattern, offset) touches: (rows, bytes) slices of the box where the access covers a
    rectangle (a whole tile or a block of it: the usual case, which the replay touches as array views), else
    their numbers row by row."""
    lo_p, hi_p, lo_b, hi_b = box
    if key not in elements:
        part, start, size = _slice_elements(fn, *key)
        elements[key] = (part, start, size, _rectangle(part, start, size))
    part, start, size, rect = elements[key]
    if rect is not None:
        p0, p1, b0, b1 = max(rect[0], lo_p), min(rect[1], hi_p), max(rect[2], lo_b), min(rect[3], hi_b)
        if p1 <= p0 or b1 <= b0:
            return np.zeros(0, dtype=np.int64)
        return slice(p0 - lo_p, p1 - lo_p), slice(b0 - lo_b, b1 - lo_b)
    keep = (part >= lo_p) & (part < hi_p) & (start < hi_b) & (start + size > lo_b)
    part, start = part[keep], start[keep]
    byte = start[:, None] + np.arange(size, dtype=np.int64)
    inside = (byte >= lo_b) & (byte < hi_b)
    return ((part[:, None] - lo_p) * (hi_b - lo_b) + (byte - lo_b))[inside]  # a byte may repeat: harmless


def _rectangle(part: np.ndarray, start: np.ndarray, size: int) -> tuple[int, int, int, int] | None:
    """(p0, p1, b0, b1) when the elements tile partitions ``[p0, p1)`` x bytes ``[b0, b1)`` exactly (each
    byte once), else None."""
    if not len(part):
        return None
    p0, p1 = int(part.min()), int(part.max()) + 1
    b0, b1 = int(start.min()), int(start.max()) + size
    width = b1 - b0
    if width % size or len(part) * size != (p1 - p0) * width:
        return None
    at = np.sort((part - p0) * width + (start - b0))
    return (p0, p1, b0, b1) if np.array_equal(at, np.arange(0, (p1 - p0) * width, size)) else None


def _slice_elements(fn: Function, m: int, dtype: int, pattern: int, offset: int) -> tuple[np.ndarray, np.ndarray, int]:
    """(partition, first byte) of each element an access of memory location ``m`` with this data type, pattern
    and offset addresses, and the element's size."""
    from tusk.ir.liveness import pattern_elements

    ml = fn.memlocs
    size = int(DTYPE_SIZE_ARRAY[dtype])
    pitch = max(1, int(ml.get("pbytes", m)) // size)
    e = pattern_elements(fn, pattern, offset)
    return int(ml.get("base", m)) + e // pitch, int(ml.get("addr", m)) + (e % pitch) * size, size


def _kills_leave_bytes(fn: Function, ops: np.ndarray, m: int) -> bool:
    """Is memory location ``m`` accessed (operand rows ``ops``) in a data type whose size does not divide its
    bytes per partition?"""
    sizes = np.unique(DTYPE_SIZE_ARRAY[fn.operands["dtype"][ops]])
    return bool(((int(fn.memlocs.get("pbytes", m)) % np.maximum(sizes, 1)) != 0).any())


def _access_slice(inst, m: int) -> tuple[int, int]:
    """The accesses of memory location ``m``: a slice of the access arrays (sorted by memory location)."""
    lo, hi = np.searchsorted(inst.a_memloc, [m, m + 1])
    return int(lo), int(hi)


def _touching_windows(fn: Function, inst, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
    """Row windows ``[lo, hi]`` (sorted, disjoint) outside which neither of ``a``, ``b`` can clobber the other.

    A clobber of X by Y: X reads a byte at t3 that X wrote at t1 and Y wrote at t2 in between.  Take t1 the
    last write of X to the byte before t3: no kill of X falls between t1 and t3 (a kill writes every byte),
    so t1 and t3 are in one instance of X, between its first write and last read, and so is Y's write t2.
    So only the instances of X that Y writes into (from first write to last read, rows inclusive) matter.
    (A kill in a data type whose size does not divide the row leaves the row's last bytes as they were: for
    such a memory location, the whole function is one window.)"""
    los, his = [], []
    for x, y in ((a, b), (b, a)):
        lo, hi = _access_slice(inst, x)
        if _kills_leave_bytes(fn, inst.a_op[lo:hi], x):
            los.append(inst.a_row[lo:hi][:1])
            his.append(inst.a_row[lo:hi][-1:])
            continue
        ids = inst.of_memloc(x)
        fw, lr = inst.i_first_write[ids], inst.i_last_read[ids]
        ok = (fw >= 0) & (lr >= fw)
        fw, lr = fw[ok], lr[ok]
        lo, hi = _access_slice(inst, y)
        writes = inst.a_row[lo:hi][inst.a_write[lo:hi]]  # rows increase within a memory location
        hit = np.searchsorted(writes, lr, side="right") > np.searchsorted(writes, fw, side="left")
        los.append(fw[hit])
        his.append(lr[hit])
    lo, hi = np.concatenate(los).astype(np.int64), np.concatenate(his).astype(np.int64)
    if not len(lo):
        return lo, hi
    order = np.argsort(lo, kind="stable")
    lo, hi = lo[order], np.maximum.accumulate(hi[order])
    new = np.ones(len(lo), dtype=bool)
    new[1:] = lo[1:] > hi[:-1]   # overlapping or touching windows merge (a window may share a row with the next)
    starts = np.flatnonzero(new)
    ends = np.append(starts[1:], len(lo)) - 1
    return lo[starts], hi[ends]


def _check_deps(fn: Function) -> list[str]:
    out = []
    d = fn.deps
    for e in _first(d["src"] >= d["dst"]):
        out.append(f"dependency {fn.inst_name(int(d['src'][e]))} -> {fn.inst_name(int(d['dst'][e]))} "
                   f"goes against program order")
    for e in _first((d["kind"] < enums.Edge.Ordered) | (d["kind"] > enums.Edge.Flow)):
        out.append(f"dependency edge {e} has invalid kind {d['kind'][e]}")
    return out


def _check_kernel_calls(fn: Function) -> list[str]:
    out = []
    for i in np.nonzero(fn.insts["opcode"] == Op.NKIKernel)[0].tolist():
        scope = fn.inst(i).attrs.get("address_rotation_scope_val", 0)
        if isinstance(scope, str):
            scope = enums.ROTATION_SCOPES.get(scope, -1)
        if scope not in (0, 1, 2):
            out.append(f"NKIKernel {fn.inst_name(i)} has AddressRotationScope {scope!r}; expected 0, 1 or 2")
    return out


# ---------------------------------------------------------------- whose fault a rejected output is


def overlap_in_input(module_in: Module) -> InputError | None:
    """A pass's output failed :func:`verify`: if the pass's *input* already holds memory locations that
    overlap while both are live, the kernel placed them so (two locations of different sets on the same
    bytes, both holding values) -- the input's fault, not the pass's.  The error to report then (a
    ``KernelOverlap``), else None.  Only checked on straight-line functions (after unroll), as the live
    check itself."""
    found = []
    for fn in module_in.functions:
        if np.isin(fn.insts["opcode"], list(LOOP_OPCODES)).any():
            continue
        found += [f"function {fn.name}: {p}" for p in _check_live_overlap(fn)]
    if not found:
        return None
    return KernelOverlap("the kernel places memory locations on bytes another location still uses (they overlap "
                         "while both are live; give each its own bytes):\n  " + "\n  ".join(found[:MAX_REPORTED]))


class KernelOverlap(InputError):
    """Overlapping live memory locations that were already in the input of the pass whose output failed."""
