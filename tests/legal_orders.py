"""Random legal orders of a program: topological orders of its dependence graph, rows reordered with them.

The timing model and the interpreter both execute in program order, so another order of the same
program is the function with its rows permuted (``Function.take_insts`` remaps operands and edges).
"""

from __future__ import annotations

import dataclasses
import heapq

import numpy as np

from tusk.ir.enums import LOOP_OPCODES, Op
from tusk.ir.module import Function, Module
from tusk.stages.deps import build_fdeps

BRANCHES = frozenset({Op.CompareAndBranch, Op.UnconditionalBranch})


def straight_line(fn: Function) -> bool:
    return not np.isin(fn.insts["opcode"], list(LOOP_OPCODES | BRANCHES)).any()


def random_topological_order(n: int, src: np.ndarray, dst: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A uniformly keyed random topological order of the DAG (Kahn's algorithm, ready rows drawn by a
    random priority): every order it returns keeps every edge forward."""
    indeg = np.bincount(dst, minlength=n).tolist()
    by_src = np.argsort(src, kind="stable")
    succ, ptr = dst[by_src].tolist(), np.searchsorted(src[by_src], np.arange(n + 1)).tolist()
    key = rng.random(n).tolist()
    ready = [(key[i], i) for i in range(n) if indeg[i] == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        _, i = heapq.heappop(ready)
        order.append(i)
        for k in range(ptr[i], ptr[i + 1]):
            j = succ[k]
            indeg[j] -= 1
            if indeg[j] == 0:
                heapq.heappush(ready, (key[j], j))
    assert len(order) == n, "the dependence graph has a cycle"
    return np.array(order, dtype=np.int64)


def with_edges(module: Module) -> Module:
    """The module with the edges build_fdeps derives for every straight-line function (the graph whose
    topological orders are the legal orders)."""
    fns = [build_fdeps(fn) if straight_line(fn) else fn for fn in module.functions]
    return dataclasses.replace(module, functions=fns)  # keeps the artifact directory (const files)


def random_legal_order(module: Module, rng: np.random.Generator) -> Module:
    """Every straight-line function of ``module`` (edges built) reordered along a random topological order
    of its edges; functions with control flow stay as they are."""
    fns = []
    for fn in module.functions:
        if straight_line(fn) and fn.n_insts:
            order = random_topological_order(fn.n_insts, fn.deps["src"].astype(np.int64),
                                             fn.deps["dst"].astype(np.int64), rng)
            fn = fn.take_insts(order)
        fns.append(fn)
    return dataclasses.replace(module, functions=fns)  # keeps the artifact directory (const files)
