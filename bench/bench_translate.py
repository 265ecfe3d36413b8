"""TranslateNKIASTToBIR throughput: time per 1,000 KLIR operators, and the share spent reading the file.

The corpus kernels are a handful of statements each, so the biggest
straight-line one with the most operator variety (rmsnorm: DMA, activation-
reduce, tensor-scalar with immediate and column operands, tensor-tensor) is
scaled up -- one 128-row tile is 6 statements, as NKI's tracer unrolls the
Python loop -- to thousands of statements.  For each size the script writes
the .klr file, builds the host module and runs the pass (best of N runs):

* total: the whole pass (resolve + stage the file, read, codegen, call site);
* read: ``load_lnc_kernel`` (file -> KLIR values) inside the pass;
* per 1k ops: total time per 1,000 KLIR operators.

Run:  PYTHONPATH=. python bench/bench_translate.py [statements ...]
Prints figures; asserts nothing.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

from tusk.examples import klr_kernels
from tusk.stages.host import host_module_for
from tusk.stages.translate_nki_ast_to_bir import TranslateNKIASTToBIR


def measure(path: str, art: str, runs: int) -> dict:
    module = host_module_for(path, 0, art)
    best = None
    for _ in range(runs):
        t0 = time.perf_counter()
        out, stats = TranslateNKIASTToBIR().run(module)
        total = time.perf_counter() - t0
        if best is None or total < best["total"]:
            best = {"total": total, "read": stats["read_seconds"], "ops": stats["klir_operators"],
                    "insts": stats["kernel_instructions"]}
    return best


def main(argv: list[str]) -> None:
    sizes = [int(a) for a in argv] or [1_000, 10_000, 50_000]
    print(f"{'kernel':<22}{'ops':>8}{'insts':>8}{'file MB':>9}{'total s':>10}{'read s':>9}{'read %':>8}"
          f"{'ms / 1k ops':>13}")
    with tempfile.TemporaryDirectory() as d:
        rows = []
        for name, (data, _, _) in klr_kernels.corpus_bytes().items():
            if name == "lnc2_matmul":
                for rel, extra in klr_kernels.extra_files().items():
                    os.makedirs(os.path.dirname(os.path.join(d, rel)), exist_ok=True)
                    with open(os.path.join(d, rel), "wb") as fh:
                        fh.write(extra)
            rows.append((name, data))
        for n in sizes:
            tiles = max(1, (n - 1) // 6)
            rows.append((f"rmsnorm x{tiles} tiles", klr_kernels.rmsnorm(tiles=tiles).to_bytes()))
        for name, data in rows:
            path = os.path.join(d, name.replace(" ", "_") + ".klr")
            with open(path, "wb") as fh:
                fh.write(data)
            runs = 5 if len(data) < 1_000_000 else 3
            r = measure(path, os.path.join(d, "out", name.replace(" ", "_")), runs)
            share = 100.0 * r["read"] / r["total"] if r["total"] else 0.0
            print(f"{name:<22}{r['ops']:>8}{r['insts']:>8}{len(data) / 1e6:>9.2f}{r['total']:>10.4f}"
                  f"{r['read']:>9.4f}{share:>7.1f}%{1000.0 * r['total'] / max(r['ops'], 1) * 1000.0:>13.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
