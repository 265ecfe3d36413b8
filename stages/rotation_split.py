"""A rotation of one big scheduled function, with what follows it in parts.

After scheduling (attribute 12) a rotation that moved something rebuilds the
function's edges and schedules it again (``AddressRotation._settle``): on
large_matmul's 1.2M rows that is two thirds of the post-schedule SB pass, and
its rotation is one band batch, so the batch split has nothing to cut.  This
split runs the rotation itself (serial, about a third) and cuts the
rescheduling of every big straight-line function it moved into the schedule
pass's parts (``schedule_split.function_slices``: ranges of whole segments,
each scheduled alone on its own graph).  The rotated module travels to the
merge as one more part, the *carrier*, whose run leaves it as it is and
asks, beside the schedule parts, whether the rotation overlaps live memory
locations (the settling's first question: 0.5 s on 1.2M rows); the merge
joins the schedule parts as the schedule merge does and settles the rest as
``run`` does, so the result is ``run``'s (content hash and BIR-JSON bytes;
tests/test_split_passes.py).

The parts schedule the function with its edges dropped: the scheduler takes
the union of a function's own edges and the ones it builds, and the rebuilt
edges ``run`` installs first are exactly the ones it builds, so both
schedule the same graph -- and the carrier keeps the rotated function with
its own edges for the case where the new order is not kept.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from tusk.ir.columns import Table
from tusk.ir.enums import FnAttr
from tusk.ir.module import DEP_SCHEMA, Function, Module
from tusk.stages.base import Slice, Stats

if TYPE_CHECKING:
    from tusk.stages.address_rotation import AddressRotation, Job
    from tusk.stages.schedule import Schedule

CARRIER_KEY = "rotation_carrier"  # module attribute of the carrier part: the rotated module
OVERLAPPING = "overlapping"  # the carrier's stats: the functions whose rotation overlaps live memory locations


def _scheduler(p: AddressRotation) -> Schedule:
    """The schedule pass as ``_settle`` schedules: its segment size, the rotation's compare limit."""
    from tusk.stages import address_rotation
    from tusk.stages.schedule import Schedule

    return Schedule(max_segment=address_rotation.MAX_SEGMENT, compare_limit=p.compare_limit)


def worth_it(p: AddressRotation, module: Module, jobs: list[Job]) -> bool:
    """Does some job's function get rescheduled in parts if rotation moves it (a cheap test, before the
    rotation is run)?"""
    from tusk.stages.deps_split import splits
    from tusk.stages.schedule import segments

    s = _scheduler(p)
    # rotation changes no opcode: the input's segments are the rotated function's
    return any(FnAttr.KERNEL_SCOPE in fn.attrs and len(fn.insts) >= s.split_min and splits(fn)
               and len(segments(fn, s.max_segment)) >= 2 for fn in (module.functions[j.fn] for j in jobs))


def without_edges(fn: Function) -> Function:
    """``fn`` with no dependence edges, as ``build_fdeps`` leaves the carried ones (tables shared, not
    copied: only read)."""
    from tusk.stages.deps import _install_carried

    view = Function.__new__(Function)
    view.__dict__.update(fn.__dict__)
    view.deps = Table.from_arrays(DEP_SCHEMA, {"src": np.zeros(0, np.int32), "dst": np.zeros(0, np.int32),
                                               "kind": np.zeros(0, np.uint8)})
    _install_carried(view, False)
    view.invalidate()
    return view


def split(p: AddressRotation, module: Module, jobs: list[Job]) -> list[Module | Slice] | None:
    """The schedule parts of every big function the rotation moved, as slices of the carrier (:func:`take`),
    then the carrier; None when the rotation moves no such function (``run`` then does it all)."""
    from tusk.stages.schedule_split import function_slices

    known: dict = {}
    out = p._unaliased(module, jobs, known)
    moved = p._rotate(out, jobs, known)
    s = _scheduler(p)
    slices: list[Slice] = []
    for k in sorted(moved):
        if moved[k] and FnAttr.KERNEL_SCOPE in out.functions[k].attrs:
            # planned on the rotated function as it is: dropping its edges (take) changes no row or write
            slices += function_slices(s, out, k)
    if not slices:
        return None
    marker = {"moved": sorted([k, n] for k, n in moved.items()), "functions": len({j.fn for j in jobs})}
    carrier = len(slices)
    return [*(Slice(x.spec, x.size, carrier) for x in slices),
            out.with_attributes(**{CARRIER_KEY: marker})]


def take(carrier: Module, spec) -> Module:
    """A schedule part of :func:`split`: the rows of its range of the rotated module (the carrier without
    its marker), the function's edges dropped."""
    from tusk.stages.deps_split import take_range

    k = int(spec["marker"]["function"])
    bare = Module([without_edges(f) if i == k else f for i, f in enumerate(carrier.functions)], carrier.arch,
                  carrier.version, carrier.attributes.without(CARRIER_KEY), carrier.artifact_dir, carrier.queues,
                  carrier.extras)
    return take_range(bare, spec)


def merge(p: AddressRotation, module: Module, parts: list[Module], part_stats: list[Stats]) -> tuple[Module, Stats]:
    """``run``'s output from the carrier and the schedule parts (see the module docstring)."""
    from tusk.stages.schedule import fastest_timed, priorities
    from tusk.stages.schedule_split import PART_KEY, _merge_function

    carrier = next(m for m in parts if CARRIER_KEY in m.attributes)
    marker = carrier.attributes[CARRIER_KEY]
    by_fn: dict[int, list] = {}
    for part in parts:
        if PART_KEY in part.attributes:
            m = part.attributes[PART_KEY]
            by_fn.setdefault(int(m["function"]), []).append((m, part.functions[0]))

    def rescheduled(k: int, fn: Function) -> tuple[Function, float | None] | None:
        got = sorted(by_fn.get(k, ()), key=lambda mp: int(mp[0]["lo"]))
        if not got:
            return None
        bare = without_edges(fn)
        tries = [_merge_function(bare, got, q) for q in priorities(len(fn.insts), p.compare_limit)]
        again, _, t = fastest_timed(bare, tries, compare_limit=p.compare_limit)
        return again, t

    out = Module(list(carrier.functions), module.arch, module.version, module.attributes, module.artifact_dir,
                 module.queues, module.extras)
    moved = {int(k): int(n) for k, n in marker["moved"]}
    found = next(st for m, st in zip(parts, part_stats) if CARRIER_KEY in m.attributes)
    overlapping = set(found[OVERLAPPING]) if OVERLAPPING in found else None
    stats: Stats = {"rotations": 0, **p._settle(out, module, moved, rescheduled, overlapping),
                    "functions": int(marker["functions"]), "parts": len(parts)}
    return out, stats


def is_part(module: Module) -> bool:
    """Is ``module`` a part of :func:`split` (the carrier or a schedule part)?"""
    from tusk.stages.schedule_split import PART_KEY

    return CARRIER_KEY in module.attributes or PART_KEY in module.attributes


def run_part(p: AddressRotation, module: Module) -> tuple[Module, Stats] | None:
    """A part of :func:`split` (the carrier as it is, a schedule part scheduled), or None for a module
    that is not one."""
    from tusk.stages.schedule_split import PART_KEY
    from tusk.stages.schedule_split import run_part as schedule_part

    if CARRIER_KEY in module.attributes:
        # the settling's first question -- does the rotated function overlap live memory? -- asked here, beside
        # the schedule parts, instead of in the merge (0.5 s of it on a 1.2M-row function)
        from tusk.ir.verify import live_overlap_problems

        moved = [int(k) for k, n in module.attributes[CARRIER_KEY]["moved"] if int(n)]
        return module, {OVERLAPPING: [k for k in moved if live_overlap_problems(module.functions[k])]}
    if PART_KEY in module.attributes:
        return schedule_part(_scheduler(p), module)
    return None
