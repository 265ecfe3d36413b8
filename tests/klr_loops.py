"""Hand-built KLR kernels with register loops (KLR's block CFG, klr-format.md §3.10), for raise_loops.

Each builder returns a :class:`~tusk.frontend.klr_writer.KernelWriter`;
:func:`translated` writes it next to a host module and runs
TranslateNKIASTToBIR, as a build does.  The loops are written out with the
writer's primitives (moves, ALU ops, jumps, compares) so that every shape
raise_loops must recognise or refuse can be made: other relations and
steps, a latch that jumps back to the head, bounds read from memory,
registers read by something other than an access.
"""

from __future__ import annotations

from pathlib import Path

from tusk.frontend.klr_writer import KernelWriter
from tusk.ir.module import Module
from tusk.stages.host import host_module_for
from tusk.stages.translate_nki_ast_to_bir import TranslateNKIASTToBIR

ROWS = 128


def translated(k: KernelWriter, where: Path) -> Module:
    """``k`` as TranslateNKIASTToBIR lowers it (the host module plus the kernel function)."""
    where.mkdir(parents=True, exist_ok=True)
    path = where / f"{k.name}.klr"
    path.write_bytes(k.to_bytes())
    return TranslateNKIASTToBIR().run(host_module_for(str(path), 0, str(where / "art")))[0]


def loop(k: KernelWriter, label: str, counter: str, start: int, bound: str, step: int, rel: str, body,
         *, latch: str = "branch", bound_value: int | None = None) -> None:
    """``for (counter = start; counter rel bound; counter += step) body()`` as blocks.

    ``bound_value`` moves a constant into ``bound`` first (None: the caller has set it).
    ``latch="jump"`` ends the body with a jump back to the head instead of a second compare.
    """
    if bound_value is not None:
        k.reg_move(bound, bound_value)
    k.reg_move(counter, start)
    k.jump(f"{label}.head")
    k.block(f"{label}.head")
    k.branch(rel, counter, bound, f"{label}.body", f"{label}.exit")
    k.block(f"{label}.body")
    body()
    k.reg_alu(counter, counter, "add", step)
    if latch == "jump":
        k.jump(f"{label}.head")
    else:
        k.branch(rel, counter, bound, f"{label}.body", f"{label}.exit")
    k.block(f"{label}.exit")


def tiles(name: str = "loop_tiles", n_tiles: int = 4, width: int = 64, *, start: int = 0, step: int = 1,
          stop: int | None = None, rel: str = "lt_reg", form: str = "add", bound: str = "const",
          latch: str = "branch", save_counter: bool = False, save_form: bool = False) -> KernelWriter:
    """y[t] = 2 x[t] + 1 for the row tiles t the counter visits.

    ``form``: "add" keeps the tile's row offset in a register set before the
    loop and advanced by ``step * 128`` per iteration (the front end's form
    registers); "mult" computes it from the counter in the body
    (``row = counter mult 128``, KLR fixture 03's way).  ``bound``: "const"
    moves ``stop`` into the bound register, "memory" loads it from the input
    ``ntiles`` (a loop that is not counted).  ``save_counter`` stores the
    counter after the loop into output ``iters``; ``save_form`` stores the
    row register inside the body into output ``rows``: both read a loop
    register in a way that is not an access.
    """
    stop = n_tiles if stop is None else stop
    k = KernelWriter(name)
    x = k.input("x", (ROWS * n_tiles, width))
    ntiles = k.input("ntiles", (1, 1), "int32") if bound == "memory" else None
    y = k.output("y", (ROWS * n_tiles, width))
    iters = k.output("iters", (1, 1), "int32") if save_counter else None
    rows = k.output("rows", (1, 1), "int32") if save_form else None
    cell = k.sbuf("cell", (1, 1), "int32", addr=0)
    xt = k.sbuf("xt", (ROWS, width), addr=256)
    if ntiles is not None:
        k.dma(cell, ntiles)
        k.tensor_load("reg.n", cell)
    if form == "add":
        k.reg_move("reg.row", start * ROWS)

    def body() -> None:
        if form == "mult":
            k.reg_alu("reg.row", "reg.i", "mult", ROWS)
        view = [[width, ROWS], [1, width]]
        k.dma(xt, x.ap(view, scalar="reg.row", indirect_dim=0))
        k.tensor_scalar(xt, xt, "mult", 2.0, "add", 1.0)
        k.dma(y.ap(view, scalar="reg.row", indirect_dim=0), xt)
        if rows is not None:
            k.tensor_store(cell, "reg.row")
            k.dma(rows, cell)
        if form == "add":
            k.reg_alu("reg.row", "reg.row", "add", step * ROWS)

    loop(k, "loop.1", "reg.i", start, "reg.n", step, rel, body, latch=latch,
         bound_value=None if bound == "memory" else stop)
    if iters is not None:
        k.tensor_store(cell, "reg.i")
        k.dma(iters, cell)
    return k


def grid(name: str = "loop_grid", m: int = 3, n: int = 2, width: int = 64, *, triangular: bool = False) -> KernelWriter:
    """y[i, j] = exp(x[i, j]) over an m x n grid of [128, width] tiles: two nested loops, the front end's way.

    One form register per access holds ``i * n_stride + j * width`` (set before the outer loop, advanced
    by each body, moved back when the inner loop exits).  ``triangular``: the inner loop runs j < i + 1
    (its bound is the outer counter plus one: not counted).
    """
    k = KernelWriter(name)
    x = k.input("x", (ROWS * m, width * n))
    y = k.output("y", (ROWS * m, width * n))
    t = k.sbuf("t", (ROWS, width), addr=0)
    row = width * n * ROWS   # elements per row tile
    k.reg_move("reg.f", 0)

    def inner() -> None:
        view = [[width * n, ROWS], [1, width]]
        k.dma(t, x.ap(view, scalar="reg.f", indirect_dim=1))
        k.activation(t, t, "exp")
        k.dma(y.ap(view, scalar="reg.f", indirect_dim=1), t)
        k.reg_alu("reg.f", "reg.f", "add", width)

    def outer() -> None:
        if triangular:
            k.reg_alu("reg.nj", "reg.i", "add", 1)
            loop(k, "loop.2", "reg.j", 0, "reg.nj", 1, "lt_reg", inner)
            # back to the row's start: j ran i + 1 times, which a constant cannot undo; recompute from i
            k.reg_alu("reg.f", "reg.i", "mult", row)
            k.reg_alu("reg.f", "reg.f", "add", row)
        else:
            loop(k, "loop.2", "reg.j", 0, "reg.nj", 1, "lt_reg", inner, bound_value=n)
            k.reg_alu("reg.f", "reg.f", "add", row - n * width)

    loop(k, "loop.1", "reg.i", 0, "reg.ni", 1, "lt_reg", outer, bound_value=m)
    return k


def runtime_if(name: str = "loop_if") -> KernelWriter:
    """A counted loop, then a branch on a register loaded from memory (a runtime if): not a loop shape."""
    k = tiles(name)
    flag = k.input("flag", (1, 1), "int32")
    cell = k.sbuf("flag_cell", (1, 1), "int32", addr=64)
    t = k.sbuf("t2", (ROWS, 64), addr=1024)
    k.dma(cell, flag)
    k.tensor_load("reg.flag", cell)
    k.branch("ne_imm", "reg.flag", 0, "then.1", "end.1")
    k.block("then.1")
    k.memset(t, 0.0)
    k.block("end.1")
    return k


def random_nest(seed: int, n_tiles: int = 12, width: int = 8) -> KernelWriter:
    """A random nest of 1-3 counted loops (start, step, trip and relation random, zero trips included) whose
    innermost body adds x[t] into y[t] for a tile t affine in the counters (a front-end style form register).

    y counts every visit, so a wrong trip count, step or offset changes the output.  Some seeds also read
    a counter after its loop (that loop must stay).
    """
    import random

    rnd = random.Random(seed)
    depth = rnd.randint(1, 3)
    loops = []
    for _ in range(depth):
        start, step, trip = rnd.randint(-2, 2), rnd.choice((1, 2, -1, -2)), rnd.randint(0, 3)
        if step > 0:
            rel, stop = rnd.choice((("lt_reg", start + step * trip), ("ne_reg", start + step * trip),
                                    ("le_reg", start + step * (trip - 1) if trip else start - 1)))
        else:
            rel, stop = rnd.choice((("gt_reg", start + step * trip), ("ne_reg", start + step * trip),
                                    ("ge_reg", start + step * (trip - 1) if trip else start + 1)))
        if rel == "ne_reg" and trip == 0:
            rel = "lt_reg" if step > 0 else "gt_reg"
        loops.append((start, step, trip, rel, stop, rnd.choice((0, 1, 2, -1))))
    # tile = base + sum(a * counter) must stay inside [0, n_tiles) at every visited point
    def span(loops: list) -> tuple[int, int]:
        lo = sum(min(a * s, a * (s + t * max(n - 1, 0))) for s, t, n, _, _, a in loops)
        hi = sum(max(a * s, a * (s + t * max(n - 1, 0))) for s, t, n, _, _, a in loops)
        return lo, hi

    lo, hi = span(loops)
    while hi - lo > n_tiles - 1:  # too wide: drop the largest coefficient
        d = max(range(depth), key=lambda i: abs(loops[i][5]))
        loops[d] = loops[d][:5] + (0,)
        lo, hi = span(loops)
    base = rnd.randint(-lo, n_tiles - 1 - hi)
    save = rnd.random() < 0.2
    k = KernelWriter(f"nest{seed}")
    x = k.input("x", (ROWS * n_tiles, width))
    y = k.output("y", (ROWS * n_tiles, width))
    iters = k.output("iters", (1, 1), "int32") if save else None
    cell = k.sbuf("cell", (1, 1), "int32", addr=0)
    a_t = k.sbuf("a_t", (ROWS, width), addr=64)
    b_t = k.sbuf("b_t", (ROWS, width), addr=128)
    k.memset(b_t, 0.0)
    for t in range(n_tiles):  # y starts as zeros
        k.dma(y.ap([[width, ROWS], [1, width]], t * ROWS * width), b_t)
    k.reg_move("reg.f", (base + sum(a * s for s, _, _, _, _, a in loops)) * ROWS)

    def level(d: int) -> None:
        if d == depth:
            view = [[width, ROWS], [1, width]]
            k.dma(a_t, x.ap(view, scalar="reg.f", indirect_dim=0))
            k.dma(b_t, y.ap(view, scalar="reg.f", indirect_dim=0))
            k.tensor_tensor(b_t, b_t, a_t, "add")
            k.dma(y.ap(view, scalar="reg.f", indirect_dim=0), b_t)
            return
        start, step, trip, rel, stop, a = loops[d]

        def body() -> None:
            level(d + 1)
            k.reg_alu("reg.f", "reg.f", "add", a * step * ROWS)

        loop(k, f"loop.{d + 1}", f"reg.c{d}", start, f"reg.n{d}", step, rel, body, bound_value=stop)
        if d > 0:  # an inner loop moved the form by a * step per iteration: back to the outer iteration's value
            k.reg_alu("reg.f", "reg.f", "add", -a * step * trip * ROWS)

    level(0)
    if iters is not None:
        k.tensor_store(cell, "reg.c0")
        k.dma(iters, cell)
    return k
