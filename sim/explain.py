"""Makespan as a user reads it: what limits a kernel and how busy each engine is.

:func:`explain_makespan` turns a :class:`~tusk.sim.timing.Timeline` into plain JSON-able data, the way
neuron-profile's summary shows MFU/MBU: the makespan and the lower bound in cycles and in microseconds
at the model's clock, the binding resource (the largest term of the lower bound: an engine, DMA queues,
DRAM, DMA engines, the dependence chain), and the utilisation of every engine, DMA queue and shared
DMA resource (busy time / makespan).  docs/timing.md describes the fields.
"""

from __future__ import annotations

from typing import Any

from tusk.ir.errors import TuskError
from tusk.ir.module import Function, Module
from tusk.sim.bound import CALLS, term_kind
from tusk.sim.timing import COMPUTE_ENGINES, DEFAULT_COSTS, GHZ, CostTable, Timeline, entry, simulate

UNIT = "cycles"


def explain_makespan(x: Module | Function, costs: CostTable = DEFAULT_COSTS, *,
                     timeline: Timeline | None = None) -> dict[str, Any]:
    """Per kernel: makespan, lower bound, binding resource and utilisation (see the module docstring).

    ``x`` is a module (its entry function, kernel calls included) or one function; pass ``timeline`` when
    it has been simulated already.  A function the model cannot time (loops kept) gives
    ``{"ok": False, "function": ..., "why": ...}``.
    """
    fn = entry(x)
    if timeline is None:
        try:
            timeline = simulate(x, costs)
        except TuskError as e:
            return {"ok": False, "function": fn.name, "why": str(e)}
    out = _explain(fn.name, timeline, x if isinstance(x, Module) else None)
    out["ok"] = True
    return out


def _explain(name: str, tl: Timeline, module: Module | None) -> dict[str, Any]:
    span = float(tl.makespan)
    kernels = _kernels(tl, module)
    binding = _binding(tl)
    if kernels and tl.bounds.get(CALLS, 0.0) >= tl.lower_bound * (1 - 1e-9):
        # the entry's bound is its kernels' (the chain through a lone call is the same number): say what
        # limits the slowest kernel
        slowest = max(kernels, key=lambda k: k["makespan"]["cycles"])
        binding = {**slowest["binding"], "kernel": slowest["function"]}
    busy = _with_calls(tl, "busy")
    util = {lane: _ratio(v, span) for lane, v in busy.items() if lane in COMPUTE_ENGINES or v > 0}
    for resource, v in _with_calls(tl, "demand").items():
        util[resource] = _ratio(v, span)
    out: dict[str, Any] = {
        "function": name, "unit": UNIT, "ghz": GHZ,
        "makespan": _time(span), "lower_bound": _time(tl.lower_bound),
        "efficiency": _ratio(tl.lower_bound, span) if span else 1.0,
        "binding": binding,
        "bounds": {term: float(v) for term, v in sorted(tl.bounds.items(), key=lambda kv: -kv[1])},
        "utilisation": util,
    }
    if kernels:
        out["kernels"] = kernels
    return out


def _binding(tl: Timeline) -> dict[str, Any]:
    term = tl.binding
    kind = term_kind(term)
    resource = term[len("engine "):] if kind == "engine" else term
    return {"term": term, "kind": kind, "resource": resource, "cycles": float(tl.bounds.get(term, 0.0))}


def _kernels(tl: Timeline, module: Module | None) -> list[dict[str, Any]]:
    """One entry per called function (calls of the same function merged: their times add up)."""
    if not tl.calls or module is None:
        return []
    by_name: dict[str, list[Timeline]] = {}
    for row, inner in sorted(tl.calls.items()):
        callee = entry(module).inst(row).attrs.get("func")
        by_name.setdefault(str(callee), []).append(inner)
    out = []
    for callee, tls in by_name.items():
        one = _explain(callee, tls[0], module)
        one["calls"] = len(tls)
        out.append(one)
    return out


def _with_calls(tl: Timeline, field: str) -> dict[str, float]:
    """``tl.busy`` or ``tl.demand`` (cycles per lane / resource) over the whole run: the function's own
    and those of every kernel it calls."""
    total = dict(getattr(tl, field))
    for inner in tl.calls.values():
        for key, v in _with_calls(inner, field).items():
            total[key] = total.get(key, 0.0) + v
    return total


def _time(cycles: float) -> dict[str, float]:
    return {"cycles": float(cycles), "us": float(cycles) / (GHZ * 1000.0)}


def _ratio(a: float, b: float) -> float:
    return float(a) / float(b) if b else 0.0
