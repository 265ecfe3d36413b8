"""clear_inst_deps: the seed's clearInstDeps.

In every function with attribute 12 (``FnAttr.KERNEL_SCOPE``) every edge of
every kind (deps and loop-carried / predicated edges) is dropped; other
functions are untouched.  ``build_fdeps`` then rebuilds them against the
addresses rotation chose.
"""

from __future__ import annotations

from dataclasses import dataclass

from tusk.ir.columns import Table
from tusk.ir.enums import FnAttr
from tusk.ir.module import Module
from tusk.stages.base import Pass, Stats, option


def _clear_targets(module: Module, entry_gate: bool) -> list[int]:
    fns = module.functions
    if entry_gate:
        entry = next((f for f in fns if f.name == "main"), fns[0] if fns else None)
        return list(range(len(fns))) if entry is not None and FnAttr.KERNEL_SCOPE in entry.attrs else []
    return [k for k, f in enumerate(fns) if FnAttr.KERNEL_SCOPE in f.attrs]


def clear_inst_deps(module: Module, *, entry_gate: bool = False) -> Module:
    """The seed's clearInstDeps: a new module (the functions it leaves alone are shared with ``module``).

    Default: every function with attribute 12 loses all its edges (deps and
    carried, every kind); other functions are untouched.  ``entry_gate=True``
    follows the binary literally: when the entry function ("main", else the
    first) has attribute 12, every function is cleared.
    """
    functions = list(module.functions)  # a function without edges is shared: nothing to copy, nor to hash again
    for k in _clear_targets(module, entry_gate):
        fn = functions[k]
        if len(fn.deps) or len(fn.carried):
            functions[k] = fn.with_tables(deps=Table(fn.deps.schema), carried=Table(fn.carried.schema))
    return module.replaced(functions)


@dataclass(frozen=True)
class ClearInstDeps(Pass):
    """Drop every dependence edge of attribute-12 (kernel-scope / post-schedule) functions."""

    name = "clear_inst_deps"
    version = "1"

    entry_gate: bool = option(False, "gate on the entry function's attribute 12 and then clear every function "
                                     "(the binary's literal behaviour)")

    def run(self, module: Module) -> tuple[Module, Stats]:
        targets = _clear_targets(module, self.entry_gate)
        removed = sum(len(module.functions[k].deps) + len(module.functions[k].carried) for k in targets)
        return clear_inst_deps(module, entry_gate=self.entry_gate), {"functions_cleared": len(targets),
                                                                        "edges_removed": removed}
